#!/usr/bin/env bash
# The whole test suite: unit, integration and doc tests of every crate, on the
# software EFA device unless a real one is present (EFA_SIM=1/0 forces the choice).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
# On efa-sim the suite runs on the adversarial device (efa-sim/README.md, "Strict mode"):
# every order SRD does not promise is given up and delays vary, so a test that relies on
# such an order fails here, not first on a cluster. No test of this suite measures speed.
# A caller's EFA_SIM_PROFILE wins (`EFA_SIM_PROFILE= ./scripts/test.sh`: the default
# device); CI's release runs (.ci/run) use the default device.
export EFA_SIM_PROFILE="${EFA_SIM_PROFILE-strict}"
cargo test --workspace --locked "$@"
# The facade's `cuda` feature: the GPUDirect example's tests (examples/gpu_rdma.rs), and
# the example itself, between two processes on efa-sim and the software GPU.
cargo test -p efa --features cuda --locked --test gpu_rdma
cargo run -p efa --features cuda --locked --example gpu_rdma -- --bytes 1000001
# Multi-rail: 1 GiB GPU->GPU between two processes over the 4 rails nearest GPU 1 of a p5
# shape (efa-sim run places the software GPUs in the shape's topology), every byte verified.
cargo test -p efa --features cuda --locked --test multi_rail
# A 5 GiB GPU registration on the software GPU, written across and past the 4 GiB line.
cargo test -p efa --features cuda --locked --test large_gpu_registration
cargo build -p efa --features cuda --locked --example multi_rail
# efa-perf's `--mem gpu` (its `cuda` feature): write_bw and read_bw over rails in the
# software GPU's memory, every transfer verified.
cargo test -p efa-perf --features cuda --locked --test gpu
target_dir="${CARGO_TARGET_DIR:-target}"
EFA_SIM_SHAPE=p5.48xlarge "$target_dir/debug/efa-sim" run --gpus 8 -- \
  "$target_dir/debug/examples/multi_rail" --bytes 1073741824 --device 1
# ... and over all 32 rails of the p5, 4 chunks in flight per rail, on the default device.
# 32 software devices in each of two processes on a 2-core machine can leave a peer
# without CPU for longer than efa-sim's default 1 s peer timeout (CI saw a rail fail with
# status 13 that way under load), which no NIC does: this run waits 30 s for a silent
# peer (`peer_timeout_ms`). A request that is really lost still fails, 30 s later, and
# the example's own 60 s timeout still bounds the run. The 4-rail run above is the
# strict one.
EFA_SIM_PROFILE=peer_timeout_ms=30000 EFA_SIM_SHAPE=p5.48xlarge "$target_dir/debug/efa-sim" run --gpus 8 -- \
  "$target_dir/debug/examples/multi_rail" --bytes 1073741824 --rails 32 --in-flight 4
# The Python package (efa-py/, `import efa`): its wheel built with maturin, installed into
# a fresh venv, its pytest suite run there on efa-sim and the software GPU.
bash scripts/test-python.sh
