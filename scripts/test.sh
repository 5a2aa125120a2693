#!/usr/bin/env bash
# The whole test suite: unit, integration and doc tests of every crate, on the
# software EFA device unless a real one is present (EFA_SIM=1/0 forces the choice).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
cargo test --workspace --locked "$@"
# The facade's `cuda` feature: the GPUDirect example's tests (examples/gpu_rdma.rs), and
# the example itself, between two processes on efa-sim and the software GPU.
cargo test -p efa --features cuda --locked --test gpu_rdma
cargo run -p efa --features cuda --locked --example gpu_rdma -- --bytes 1000001
