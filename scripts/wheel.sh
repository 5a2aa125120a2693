#!/usr/bin/env bash
# The efa-sim Python wheel, built with maturin (bin bindings):
#   target/wheels/efa_sim-<version>-py3-none-<platform>.whl
# with the `efa-sim` command (scripts), libefa_sim.so as wheel data (installed to
# <prefix>/lib/efa-sim/, where the command's relative lookup finds it) and the efa_sim
# module (efa-sim/python/efa_sim). Prints the wheel's path.
#
# Usage: scripts/wheel.sh [ARCH]    ARCH: x86_64 (default: this machine's) or aarch64.
# maturin comes from PyPI at a pinned version, installed into a virtual environment
# under target/ (never system-wide); MATURIN_VERSION overrides the pin.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/release-common.sh

maturin_version=${MATURIN_VERSION:-1.16.0}
release_setup "${1:-$(release_host_arch)}"

tools="$release_target_dir/tools/maturin-$maturin_version"
if ! "$tools/bin/maturin" --version 2>/dev/null | grep -qx "maturin $maturin_version"; then
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check "maturin==$maturin_version"
fi

# The library goes into the wheel from the same build maturin then finds up to date, so
# the shipped file and the copy inside the command are the same bytes.
release_build >&2
data=efa-sim/python/wheel-data
rm -rf "$data"
mkdir -p "$data/data/lib/efa-sim"
install -m 0755 "$release_dir/libefa_sim.so" "$data/data/lib/efa-sim/libefa_sim.so"
out="$release_target_dir/wheels"
pattern="efa_sim-$(release_version)-py3-none-*_$release_arch.whl"
mkdir -p "$out"
find "$out" -maxdepth 1 -name "$pattern" -delete
log=$("$tools/bin/maturin" build --release --locked "${release_target_args[@]}" \
  -m efa-sim/Cargo.toml -o "$out" 2>&1) || { printf '%s\n' "$log" >&2; exit 1; }
rm -rf "$data"
wheels=("$out"/$pattern)
[ -f "${wheels[0]}" ] || { printf '%s\n' "$log" >&2; echo "wheel: no $pattern in $out" >&2; exit 1; }
echo "${wheels[0]}"
