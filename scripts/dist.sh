#!/usr/bin/env bash
# Release tarballs of efa-sim, one per architecture:
#   target/dist/efa-sim-<version>-<arch>-linux.tar.gz
# holding efa-sim-<version>-<arch>-linux/{bin/efa-sim, lib/efa-sim/libefa_sim.so,
# README.md, LICENSE-MIT, LICENSE-APACHE}. Unpacked anywhere, bin/efa-sim finds
# ../lib/efa-sim/libefa_sim.so (and carries a copy of it besides), so
# `<dir>/bin/efa-sim run -- CMD` works with nothing else installed but glibc.
#
# Usage: scripts/dist.sh [ARCH...]    ARCH: x86_64, aarch64 (default: this machine's).
# aarch64 is cross-built from x86_64 as scripts/check-aarch64.sh does (SETUP_CROSS
# packages, aarch64-linux-gnu-gcc, rustc's lld). Prints the tarball paths.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/release-common.sh

archs=("$@")
[ "${#archs[@]}" -gt 0 ] || archs=("$(release_host_arch)")
for arch in "${archs[@]}"; do
  release_setup "$arch"
  release_build >&2
  version=$(release_version)
  name="efa-sim-$version-$arch-linux"
  out="$release_target_dir/dist"
  stage="$out/$name"
  rm -rf "$stage"
  mkdir -p "$stage/bin" "$stage/lib/efa-sim"
  install -m 0755 "$release_dir/efa-sim" "$stage/bin/efa-sim"
  install -m 0755 "$release_dir/libefa_sim.so" "$stage/lib/efa-sim/libefa_sim.so"
  install -m 0644 efa-sim/README.md LICENSE-MIT LICENSE-APACHE "$stage/"
  # Reproducible: fixed order, owner and times (the last commit's).
  mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
    -C "$out" -cf - "$name" | gzip -9n >"$out/$name.tar.gz"
  rm -rf "$stage"
  echo "$out/$name.tar.gz"
done
