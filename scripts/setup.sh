#!/usr/bin/env bash
# Installs what a fresh Debian/Ubuntu machine lacks to build and test this workspace,
# then pins libclang for rdma-sys's bindgen. Safe to run again: it only installs what
# is missing. Source it (`. scripts/setup.sh`) to keep LIBCLANG_PATH in your shell.
set -euo pipefail

packages=(
  pkg-config gcc make binutils         # cc for C tests, readelf for link checks
  libibverbs-dev librdmacm-dev         # rdma-core headers and link-time libraries
  ibverbs-utils                        # ibv_devices / ibv_devinfo, checked against efa-sim
  libfabric-bin                        # fi_info / fi_pingpong (libfabric EFA provider)
  iproute2                             # network namespaces for transport tests
  strace                               # fabric tests prove RDMA reads happen (syscall trace)
  python3                              # ctypes dlopen check of efa-sim
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# rdma-sys 0.3 uses bindgen 0.59, which breaks on libclang >= 16: make sure 14 (or 15) is there.
if ! ls /usr/lib/llvm-14/lib/libclang*.so* >/dev/null 2>&1 && ! ls /usr/lib/llvm-15/lib/libclang*.so* >/dev/null 2>&1; then
  missing+=("libclang-14-dev|libclang-15-dev")
fi

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  for p in "${missing[@]}"; do
    installed=0
    IFS='|' read -ra alts <<<"$p"
    for alt in "${alts[@]}"; do
      if "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$alt" >/dev/null; then installed=1; break; fi
    done
    [ "$installed" = 1 ] || { echo "setup: could not install $p" >&2; exit 1; }
  done
fi

for v in 14 15; do
  if ls "/usr/lib/llvm-$v/lib/"libclang*.so* >/dev/null 2>&1; then
    export LIBCLANG_PATH="/usr/lib/llvm-$v/lib"
    break
  fi
done

command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
