#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build and test this workspace,
# then points LIBCLANG_PATH at the libclang that rdma-sys's bindgen loads.
#
# What is missing is decided by asking the package manager (dpkg-query) for each package
# by name, and, for libclang, by looking for exactly the file bindgen loads. Prints one
# line per package it installs and nothing when nothing is missing. Safe to run again.
# Source it (`. scripts/setup.sh`) to keep LIBCLANG_PATH in your shell.
#
# Options (environment):
#   SETUP_ROOT=DIR   file-system root for the libclang lookup (default /; the tests of
#                    this script point it at a temporary tree)
#   SETUP_CROSS=1    also install what the aarch64 cross build needs (scripts/check-aarch64.sh):
#                    the arm64 dpkg architecture, cross gcc, arm64 rdma-core, qemu-user and
#                    the rustup target
#   SETUP_PROFILE=1  also install valgrind, which the instruction counts need
#                    (`cargo run --release -p efa-bench --example callgrind`, efa-sim's
#                    post_poll_count / xproc_count drivers)
set -euo pipefail

# Package -> why the project needs it. Each is checked by name and installed when absent.
setup_packages=(
  pkg-config        # rdma-sys finds libibverbs through pkg-config
  gcc               # cc for the C conformance tests and the C benchmark baselines
  libc6-dev         # C headers and crt files for those programs
  make              # builds of C consumers in tests
  binutils          # readelf / objdump: link-hygiene and exported-symbol tests
  libibverbs-dev    # rdma-core headers, link-time libibverbs / libefa (and, via ibverbs-providers, libmlx5)
  librdmacm-dev     # rdma-sys links -lrdmacm; librdmacm consumer test
  ibverbs-utils     # ibv_devices / ibv_devinfo / ibv_ud_pingpong, checked against efa-sim
  libfabric-bin     # fi_info / fi_pingpong (libfabric's EFA provider) on efa-sim
  iproute2          # `ip netns` hosts for the two-host transport tests
  strace            # fabric tests prove that RDMA reads happen (syscall trace)
  python3           # ctypes consumers of efa-sim
  python3-venv      # the efa-sim wheel is installed into a fresh virtual environment
)

# What the aarch64 cross build and its qemu-user test run need (SETUP_CROSS=1).
setup_cross_packages=(
  gcc-aarch64-linux-gnu     # linker driver and C compiler for aarch64
  libc6-dev-arm64-cross     # aarch64 C headers and crt files
  libibverbs-dev:arm64      # aarch64 libibverbs / libefa to link against (multiarch)
  librdmacm-dev:arm64       # aarch64 librdmacm (rdma-sys links it)
  qemu-user                 # qemu-aarch64 runs the aarch64 test binaries
)
setup_cross_target=aarch64-unknown-linux-gnu

# What the instruction counts need (SETUP_PROFILE=1).
setup_profile_packages=(
  valgrind                  # callgrind: instructions per operation, load-independent
)

# rdma-sys 0.3 uses bindgen 0.59, which breaks on libclang >= 16: it needs 14 or 15.
# libclang-<v>-dev brings the library bindgen loads (libclang1-<v>) and clang's builtin
# headers (libclang-common-<v>-dev).
setup_libclang_versions=(14 15)
setup_libclang_package=libclang-14-dev

# Prints the directory holding the libclang that bindgen (clang-sys) loads: a file named
# libclang.so* or libclang-<v>.so* (libclang-cpp*.so* is a different library). Fails when
# there is none.
setup_libclang_dir() {
  local root=${SETUP_ROOT:-} v dir f
  for v in "${setup_libclang_versions[@]}"; do
    dir="$root/usr/lib/llvm-$v/lib"
    for f in "$dir"/libclang.so* "$dir"/libclang-"$v".so*; do
      if [ -e "$f" ]; then
        echo "$dir"
        return 0
      fi
    done
  done
  return 1
}

# Clang's builtin headers (stddef.h, ...) bindgen needs besides the library.
setup_clang_headers_present() {
  local root=${SETUP_ROOT:-} v h
  for v in "${setup_libclang_versions[@]}"; do
    for h in "$root/usr/lib/llvm-$v/lib/clang/"*/include/stddef.h; do
      [ -e "$h" ] && return 0
    done
  done
  return 1
}

setup_installed() {
  dpkg-query -W -f='${Status}\n' "$1" 2>/dev/null | grep -q "install ok installed"
}

# Prints those of the packages named as arguments that are not installed.
setup_absent() {
  local p
  for p in "$@"; do
    setup_installed "$p" || echo "$p"
  done
}

# Prints the packages to install, one per line.
setup_missing() {
  setup_absent "${setup_packages[@]}"
  if ! setup_libclang_dir >/dev/null || ! setup_clang_headers_present; then
    echo "$setup_libclang_package"
  fi
  if [ "${SETUP_CROSS:-0}" = 1 ]; then
    setup_absent "${setup_cross_packages[@]}"
  fi
  if [ "${SETUP_PROFILE:-0}" = 1 ]; then
    setup_absent "${setup_profile_packages[@]}"
  fi
}

setup_main() {
  local sudo_cmd=() missing=() p log
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  mapfile -t missing < <(setup_missing)
  if [ "${#missing[@]}" -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    if [ "${SETUP_CROSS:-0}" = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
      echo "setup: adding the arm64 package architecture" >&2
      "${sudo_cmd[@]}" dpkg --add-architecture arm64
    fi
    if ! log=$("${sudo_cmd[@]}" apt-get update -qq 2>&1); then
      printf '%s\n' "$log" >&2
      echo "setup: apt-get update failed" >&2
      return 1
    fi
    for p in "${missing[@]}"; do
      echo "setup: installing $p" >&2
      if ! log=$("${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$p" 2>&1); then
        printf '%s\n' "$log" >&2
        echo "setup: could not install $p" >&2
        return 1
      fi
    done
  fi
  local dir
  dir=$(setup_libclang_dir) || { echo "setup: no libclang.so for bindgen after installing $setup_libclang_package" >&2; return 1; }
  export LIBCLANG_PATH="$dir"
  command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; return 1; }
  if [ "${SETUP_CROSS:-0}" = 1 ] && ! rustup target list --installed | grep -qx "$setup_cross_target"; then
    echo "setup: installing rust target $setup_cross_target" >&2
    rustup target add "$setup_cross_target" >/dev/null 2>&1 ||
      { echo "setup: rustup target add $setup_cross_target failed" >&2; return 1; }
  fi
}

setup_main
