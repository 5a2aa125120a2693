#!/usr/bin/env bash
# Per-work-request cost of post + poll (64-byte RDMA writes, batches of 1 and 32) through
# the `efa` Python API: this repository's package (efa-py, built release) against the
# `efa` package from PyPI (2026.10.22, installed into a scratch venv), the same script
# (efa-py/bench/per_wr.py) on the same software device (release efa-sim), alternating
# A B A B in one run. Prints each run's JSON and the median ratio per batch size.
# The array form (efa.post_array + efa.poll_into, efa/bench/arrays.py: the same writes,
# 1024 per call) runs with this package only (numpy in its venv), in the same rounds.
# The data path is the default one, as a user gets it (EFA_SIM_PROFILE and EFA_RS_DIRECT
# unset). Measures the simulator as well as the bindings: run it on an otherwise idle machine.
#
# Usage: scripts/bench-python.sh [SECONDS_PER_MEASUREMENT]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
seconds=${1:-2}
pypi_version=2026.10.22
maturin_version=${MATURIN_VERSION:-1.16.0}
target_dir=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}
export CARGO_TARGET_DIR="$target_dir"

tools="$target_dir/tools/efa-py-bench"
[ -x "$tools/bin/maturin" ] || { python3 -m venv "$tools" &&
  "$tools/bin/python" -m pip install -q --disable-pip-version-check "maturin==$maturin_version"; }
cargo build --release --locked -q -p efa-sim
out="$target_dir/wheels/efa-py-bench"
rm -rf "$out"
"$tools/bin/maturin" build --release --locked --auditwheel skip -m efa-py/Cargo.toml -o "$out" >/dev/null 2>&1
ours="$target_dir/bench-venvs/efa-rs" pypi="$target_dir/bench-venvs/efa-pypi"
rm -rf "$ours" && python3 -m venv "$ours"
"$ours/bin/python" -m pip install -q --disable-pip-version-check --no-index "$out"/efa_rs-*.whl
"$ours/bin/python" -m pip install -q --disable-pip-version-check "numpy==${NUMPY_VERSION:-2.4.6}"
if ! "$pypi/bin/python" -c "import efa, sys; sys.exit(efa.__version__ != '$pypi_version')" 2>/dev/null; then
  rm -rf "$pypi" && python3 -m venv "$pypi"
  "$pypi/bin/python" -m pip install -q --disable-pip-version-check "efa==$pypi_version"
fi

sim="$target_dir/release/efa-sim"
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for round in 1 2 3; do
  for venv in "$ours" "$pypi"; do
    env -u EFA_RS_DIRECT EFA_SIM_PROFILE= "$sim" run -- "$venv/bin/python" efa-py/bench/per_wr.py --seconds "$seconds" |
      tee -a "$results"
  done
  env -u EFA_RS_DIRECT EFA_SIM_PROFILE= "$sim" run -- "$ours/bin/python" efa-py/bench/arrays.py --seconds "$seconds" |
    tee -a "$results"
done
python3 - "$results" "$ours" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ours = [r for r in rows if r["package"].startswith(sys.argv[2])]
pypi = [r for r in rows if not r["package"].startswith(sys.argv[2])]
med = lambda rs, k: statistics.median(r[k] for r in rs if k in r)
for b in (1, 32):
    k = "ns_per_wr_batch_%d" % b
    a, p = med(ours, k), med(pypi, k)
    print("batch %2d: efa-rs %.0f ns/WR, efa (PyPI) %.0f ns/WR: PyPI/efa-rs = %.2f" % (b, a, p, p / a))
arr = med(ours, "ns_per_wr_array_1024")
print("array form (1024 per call): efa-rs %.1f ns/WR: PyPI batch 1 / array = %.1f, PyPI batch 32 / array = %.1f"
      % (arr, med(pypi, "ns_per_wr_batch_1") / arr, med(pypi, "ns_per_wr_batch_32") / arr))
PY
