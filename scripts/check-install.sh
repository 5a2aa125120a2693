#!/usr/bin/env bash
# efa-sim installed the three ways another project would install it, each into a fresh
# temporary place, each then running consumers through the installed command:
#   1. cargo: `cargo install --path efa-sim --root <tmp>` (the CLI alone, no target/):
#      `efa-sim info`, the Python ctypes consumer through `efa-sim run`, and the library
#      written to the (temporary) per-user cache;
#   2. tarball: scripts/dist.sh x86_64 aarch64, unpacked into a temporary directory
#      (and moved, to show it is relocatable): the consumer through bin/efa-sim run, the
#      unpacked library selected; the aarch64 tarball's `efa-sim info` / `env` under
#      qemu-aarch64;
#   3. wheel: scripts/wheel.sh, installed into a fresh virtual environment: the Python
#      tests (efa_sim.env(), library_path(), the wheel layout), a unittest suite on the
#      device through the installed `efa-sim run`, the same with pytest (pinned, from
#      PyPI), and the consumer script.
# The consumer (efa-sim/python/tests/verbs_consumer.py) is two processes exchanging SENDs
# and an RDMA write, bytes checked. Builds reuse the workspace's target directory.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

tmp=$(mktemp -d "${TMPDIR:-/tmp}/efa-sim-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
consumer="$PWD/efa-sim/python/tests/verbs_consumer.py"
target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
pytest_version=8.3.5
fail() { echo "check-install: $*" >&2; exit 1; }
step() { echo "check-install: $*" >&2; }

# A clean environment for the installed commands: nothing from this workspace, caches
# and runtime files under $tmp.
clean_env=(env -u LD_LIBRARY_PATH -u SYSFS_PATH -u EFA_SIM_LIB -u EFA_SIM_PROFILE
  -u EFA_SIM_DEVICES XDG_CACHE_HOME="$tmp/cache" XDG_RUNTIME_DIR="$tmp/run"
  PYTHONDONTWRITEBYTECODE=1)
mkdir -p "$tmp/run"

# The library `efa-sim env` selects (the target of its libibverbs.so.1 link).
selected_library() {
  local out dir
  out=$(timeout 60 "${clean_env[@]}" "$@" env) || fail "$* env failed"
  dir=$(sed -n "s/^export LD_LIBRARY_PATH='\([^']*\)'.*/\1/p" <<<"$out")
  [ -n "$dir" ] || fail "$* env printed no LD_LIBRARY_PATH: $out"
  readlink -f "$dir/libibverbs.so.1"
}

expect_info() {
  local out
  out=$(timeout 60 "${clean_env[@]}" "$@" info) || fail "$* info failed"
  grep -q $'hca_id:\tefa_0' <<<"$out" && grep -q $'fw_ver:\tefa-sim' <<<"$out" ||
    fail "$* info shows no efa-sim device: $out"
}

run_consumer() {
  local out
  out=$(timeout 120 "${clean_env[@]}" "$@" 2>&1) || fail "consumer failed ($*): $out"
  grep -q "^PASS verbs_consumer" <<<"$out" || fail "consumer printed no PASS ($*): $out"
}

# 1. cargo install into an empty prefix.
step "cargo install --path efa-sim --root <tmp>"
CARGO_TARGET_DIR="$target_dir" cargo install --quiet --locked --path efa-sim --root "$tmp/cargo"
[ "$(ls "$tmp/cargo/bin")" = efa-sim ] || fail "cargo install left $(ls "$tmp/cargo/bin")"
cargo_cli="$tmp/cargo/bin/efa-sim"
expect_info "$cargo_cli"
run_consumer "$cargo_cli" run -- python3 "$consumer"
lib=$(selected_library "$cargo_cli")
[[ "$lib" == "$tmp/cache/efa-sim/"*/libefa_sim.so ]] || fail "cargo install: library not from the cache: $lib"
cmp -s "$lib" "$target_dir/release/libefa_sim.so" || fail "cargo install: cached library differs from the build"

# 2. Release tarballs, unpacked elsewhere.
step "scripts/dist.sh x86_64 aarch64, unpacked into <tmp>"
mapfile -t tarballs < <(bash scripts/dist.sh x86_64 aarch64)
[ "${#tarballs[@]}" = 2 ] || fail "dist.sh printed ${#tarballs[@]} tarballs"
for t in "${tarballs[@]}"; do
  [[ "$(basename "$t")" =~ ^efa-sim-[0-9][^-]*-(x86_64|aarch64)-linux\.tar\.gz$ ]] || fail "tarball name: $t"
  mkdir -p "$tmp/unpack" && tar -C "$tmp/unpack" -xzf "$t"
done
x86="$tmp/unpack/$(basename "${tarballs[0]}" .tar.gz)"
arm="$tmp/unpack/$(basename "${tarballs[1]}" .tar.gz)"
for f in bin/efa-sim lib/efa-sim/libefa_sim.so README.md LICENSE-MIT LICENSE-APACHE; do
  [ -f "$x86/$f" ] && [ -f "$arm/$f" ] || fail "tarball lacks $f"
done
mv "$x86" "$tmp/moved" && x86="$tmp/moved"
expect_info "$x86/bin/efa-sim"
run_consumer "$x86/bin/efa-sim" run -- python3 "$consumer"
[ "$(selected_library "$x86/bin/efa-sim")" = "$x86/lib/efa-sim/libefa_sim.so" ] ||
  fail "tarball: bin/efa-sim does not select ../lib/efa-sim/libefa_sim.so"
for f in bin/efa-sim lib/efa-sim/libefa_sim.so; do
  readelf -h "$arm/$f" | grep -q "Machine:.*AArch64" || fail "aarch64 tarball: $f is not AArch64"
done
expect_info qemu-aarch64 "$arm/bin/efa-sim"
[ "$(selected_library qemu-aarch64 "$arm/bin/efa-sim")" = "$arm/lib/efa-sim/libefa_sim.so" ] ||
  fail "aarch64 tarball: bin/efa-sim does not select ../lib/efa-sim/libefa_sim.so under qemu"

# 3. The wheel, in a fresh virtual environment.
step "scripts/wheel.sh, installed into a fresh venv"
wheel=$(bash scripts/wheel.sh)
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check --no-index "$wheel"
venv_cli="$tmp/venv/bin/efa-sim"
[ -x "$venv_cli" ] || fail "the wheel installed no efa-sim command"
expect_info "$venv_cli"
run_consumer "$venv_cli" run -- "$tmp/venv/bin/python" "$consumer"
tests="$PWD/efa-sim/python/tests"
(cd "$tmp" && timeout 300 "${clean_env[@]}" PYTHONPATH="$tests" \
  "$tmp/venv/bin/python" -m unittest -v test_api test_wheel) ||
  fail "Python API tests failed in the venv"
(cd "$tmp" && timeout 300 "${clean_env[@]}" PYTHONPATH="$tests" \
  "$venv_cli" run -- "$tmp/venv/bin/python" -m unittest -v test_on_device) ||
  fail "unittest suite under the installed efa-sim run failed"
# What a Python project does: its pytest suite under `efa-sim run` (pytest from PyPI,
# pinned, into the same venv).
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check "pytest==$pytest_version"
out=$(cd "$tmp" && timeout 300 "${clean_env[@]}" "$venv_cli" run -- \
  "$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider "$tests/test_on_device.py" "$tests/test_api.py" 2>&1) ||
  fail "pytest under the installed efa-sim run failed: $out"
grep -q "^8 passed" <<<"$(tail -1 <<<"$out")" || fail "pytest did not run the 8 tests: $out"
step "ok"
