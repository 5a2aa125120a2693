#!/usr/bin/env bash
# The main job: `efa-perf local`, the perftest of this stack, with both ends on this
# machine (two processes): SEND and RDMA-write latency, SEND, RDMA-write and RDMA-read
# bandwidth over a sweep of sizes, every transfer verified. It runs on the software EFA
# device (efa-sim) when no EFA hardware is present; EFA_SIM=1 forces the software
# device, EFA_SIM=0 the system rdma-core. Arguments go to efa-perf (`--help` lists them),
# e.g. `./scripts/demo.sh send_lat write_bw -n 10000`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

real_efa_present() {
  local d
  for d in /sys/class/infiniband/*/device/driver; do
    [ "$(basename "$(readlink "$d" 2>/dev/null)")" = efa ] && return 0
  done
  return 1
}

case "${EFA_SIM:-}" in
  1 | on | yes | true) software=1 ;;
  0 | off | no | false) software=0 ;;
  "") if real_efa_present; then software=0; else software=1; fi ;;
  *) echo "demo: EFA_SIM must be 1 (software device) or 0 (real one), got '$EFA_SIM'" >&2; exit 2 ;;
esac

cargo build --release --locked -p efa-perf -p efa-sim
if [ "$software" = 1 ]; then
  exec target/release/efa-sim run -- target/release/efa-perf local "$@"
fi
exec target/release/efa-perf local "$@"
