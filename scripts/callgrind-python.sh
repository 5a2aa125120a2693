#!/usr/bin/env bash
# Instructions per work request of efa/bench/per_wr.py's post + poll loop (64-byte RDMA
# writes), this repository's package against the `efa` package from PyPI, counted by
# callgrind (independent of machine load, unlike scripts/bench-python.sh's times) and
# split into the bindings, CPython, libc and efa-sim. Runs on libefa's path
# (EFA_SIM_PROFILE=ring_query=0), the path the PyPI package posts by, so that both pay
# the same software device. Uses the virtual environments scripts/bench-python.sh makes.
#
# Usage: scripts/callgrind-python.sh [BATCH] [ROUNDS]   (defaults: 32 100)
#        scripts/callgrind-python.sh array [ROUNDS]     (the array form, this package only:
#        efa-py/bench/arrays.py, 1024 writes per efa.post_array; default 20 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
batch=${1:-32}
k=${2:-100}
[ "$batch" = array ] && k=${2:-20}
target_dir=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}
command -v valgrind >/dev/null ||
  { echo "callgrind-python: needs valgrind (SETUP_PROFILE=1 . scripts/setup.sh installs it)" >&2; exit 1; }
sim="$target_dir/release/efa-sim"
ours="$target_dir/bench-venvs/efa-rs" pypi="$target_dir/bench-venvs/efa-pypi"
for v in "$ours" "$pypi"; do
  [ -x "$v/bin/python" ] && [ -x "$sim" ] ||
    { echo "callgrind-python: run scripts/bench-python.sh first (it builds $v and $sim)" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ "$batch" = array ]; then
  for rounds in "$k" "$((3 * k))"; do
    PYTHONHASHSEED=0 EFA_SIM_PROFILE=ring_query=0 "$sim" run -- valgrind --tool=callgrind -q \
      --callgrind-out-file="$out/$rounds" "$ours/bin/python" efa-py/bench/arrays.py --rounds "$rounds"
  done
  echo "$("$ours/bin/python" -c 'import efa; print(efa.__file__)') (array form, 1024 per call):"
  python3 efa-py/bench/cg_split.py "$out/$k" "$out/$((3 * k))" "$k" 1024
  exit 0
fi
for venv in "$ours" "$pypi"; do
  for rounds in "$k" "$((3 * k))"; do
    PYTHONHASHSEED=0 EFA_SIM_PROFILE=ring_query=0 "$sim" run -- valgrind --tool=callgrind -q \
      --callgrind-out-file="$out/$rounds" "$venv/bin/python" efa-py/bench/per_wr.py \
      --batches "$batch" --rounds "$rounds"
  done
  echo "$("$venv/bin/python" -c 'import efa; print(efa.__file__)') (batch $batch):"
  python3 efa-py/bench/cg_split.py "$out/$k" "$out/$((3 * k))" "$k" "$batch"
done
