#!/usr/bin/env bash
# The Python package (efa-py/, `import efa`): lints the crate, builds the abi3 wheel with
# maturin, installs it into a fresh virtual environment and runs its pytest suite there
# on efa-sim (and, for efa.cuda, the software GPU), on the caller's EFA_SIM_PROFILE. Tools (maturin, pytest, numpy) come from PyPI at
# pinned versions into a venv under the target directory, never system-wide.
#
# Usage: scripts/test-python.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

maturin_version=${MATURIN_VERSION:-1.16.0}
pytest_version=8.3.5
numpy_version=2.4.6
target_dir=${CARGO_TARGET_DIR:-$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}
export CARGO_TARGET_DIR="$target_dir"
fail() { echo "test-python: $*" >&2; exit 1; }

tools="$target_dir/tools/efa-py-$maturin_version-$pytest_version-$numpy_version"
if ! [ -x "$tools/bin/maturin" ] || ! [ -x "$tools/bin/pytest" ]; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check \
    "maturin==$maturin_version" "pytest==$pytest_version" "numpy==$numpy_version"
fi

# The crate is outside the cargo workspace (see efa-py/Cargo.toml): format and lints here.
cargo fmt --manifest-path efa-py/Cargo.toml --check
cargo clippy --manifest-path efa-py/Cargo.toml --locked --all-targets -- -D warnings

# The software device and GPU the suite runs on.
cargo build --locked -q -p efa-sim -p efa-sim-gpu
sim="$target_dir/debug/efa-sim"

out="$target_dir/wheels/efa-py"
rm -rf "$out"
log=$("$tools/bin/maturin" build --release --locked --auditwheel skip \
  -m efa-py/Cargo.toml -o "$out" 2>&1) || { printf '%s\n' "$log" >&2; fail "maturin build failed"; }
wheels=("$out"/efa_rs-*-cp39-abi3-linux_*.whl)
[ -f "${wheels[0]}" ] || fail "no abi3 wheel in $out: $log"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/efa-py-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# A fresh venv with the wheel alone (no dependencies), then the test tools.
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index "${wheels[0]}"
"$tmp/venv/bin/python" -c 'import efa, efa.cuda, sys; assert "torch" not in sys.modules' ||
  fail "the installed wheel does not import"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check \
  "pytest==$pytest_version" "numpy==$numpy_version"

# Tests run from a copy, so `import efa` can only find the installed package.
cp -r efa-py/tests "$tmp/tests"
cp efa-py/README.md "$tmp/README.md"  # tests/test_arrays.py runs its example
run_suite() {
  (cd "$tmp" && timeout 600 "$sim" run --gpus 1 -- "$tmp/venv/bin/python" -m pytest -q \
    -p no:cacheprovider "$@" tests)
}
run_suite "$@"
# The benchmark's loop (efa-py/bench/per_wr.py) runs a few untimed rounds, so that
# scripts/bench-python.sh and scripts/callgrind-python.sh keep working.
bench="$PWD/efa-py/bench/per_wr.py"
(cd "$tmp" && timeout 120 "$sim" run -- "$tmp/venv/bin/python" "$bench" --batches 1,32 --rounds 5) ||
  fail "efa-py/bench/per_wr.py failed"
# The PyPI package's own test suite against this package (programs nobody here wrote),
# when the whole suite was asked for.
[ $# -gt 0 ] || bash scripts/test-pypi-suite.sh "$tmp/venv/bin/python" "$sim"
