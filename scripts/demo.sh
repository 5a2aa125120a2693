#!/usr/bin/env bash
# The main job: real SRD traffic between two queue pairs, on the software EFA device
# when no EFA hardware is present.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
cargo run --release --locked -p efa --example srd_demo -- "$@"
