#!/usr/bin/env bash
# The safe API against hand-written C, as one table: criterion's vs_c bench (both sides
# of every case in one run, on the same QPs, CQs and memory), then case, ours ns, C ns,
# ours/C from its estimates. Arguments go to criterion, e.g.
# `./scripts/bench-vs-c.sh --measurement-time 10` or a case name to run only it.
# criterion's HTML report with plots: target/criterion/report/index.html.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
cargo bench --locked -p efa-bench --bench vs_c -- "$@"
cargo run --release --locked -q -p efa-bench --bin vs-c-report
