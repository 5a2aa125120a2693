#!/usr/bin/env bash
# The aarch64 (Graviton) build, checked from an x86_64 Debian/Ubuntu machine:
#   1. `cargo check` of the whole workspace, every target, for aarch64-unknown-linux-gnu;
#   2. a real cross build of efa-sim (the stand-in libibverbs.so.1, its versioned-symbol
#      trampolines and the CLI), with its exported symbol versions read back;
#   3. the in-process test binaries run under qemu-user (qemu-aarch64).
# Multi-process tests are not run under qemu: they start children (the test binary itself,
# `efa-sim run`, C programs built by the host gcc) that qemu-user cannot exec without a
# binfmt_misc registration, which containers and CI runners usually lack.
# On an aarch64 host, `./scripts/test.sh` runs the whole suite natively instead.
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_CROSS=1 . scripts/setup.sh

target=aarch64-unknown-linux-gnu
export PKG_CONFIG_ALLOW_CROSS=1
export PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64

cargo check --workspace --all-targets --locked --target "$target"

cargo build -p efa-sim --locked --target "$target"
so="target/$target/debug/libefa_sim.so"
for sym in "IBVERBS_1.1 ibv_open_device" "IBVERBS_1.0 ibv_create_comp_channel" "EFA_1.1 efadv_query_device"; do
  grep -qE "${sym% *} +${sym#* }\$" <<<"$(aarch64-linux-gnu-objdump -T "$so")" ||
    { echo "check-aarch64: $so lacks ${sym#* }@${sym% *}" >&2; exit 1; }
done
info=$(qemu-aarch64 "target/$target/debug/efa-sim" info)
grep -q "fw_ver:.*efa-sim" <<<"$info" ||
  { echo "check-aarch64: efa-sim info under qemu shows no efa-sim device" >&2; exit 1; }

# In-process tests on the software device (each test binary under qemu-aarch64), and the
# layout test with its C side compiled for aarch64 as well.
export EFA_TEST_TARGET_CC=aarch64-linux-gnu-gcc EFA_TEST_TARGET_RUNNER=qemu-aarch64
cargo test --locked --target "$target" -p efa-sys --lib --test layout --test on_device
cargo test --locked --target "$target" -p efa-sim --lib --test model_api --test model_rings
cargo test --locked --target "$target" -p efa-typestate --lib --test control --test data --test rdma \
  --test limits --test soundness --test leases --test ownership --test device_memory --test zero_alloc
echo "check-aarch64: ok"
