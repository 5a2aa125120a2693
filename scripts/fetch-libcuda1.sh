#!/usr/bin/env bash
# Fetches NVIDIA's real user-space CUDA driver (Debian bookworm non-free `libcuda1`) and
# unpacks it into OUTDIR without installing anything: a private apt sources list and lists
# directory (the system's package state is untouched), `apt-get download`, `dpkg-deb -x`.
#   usage: fetch-libcuda1.sh OUTDIR
# Prints the path of the unpacked libcuda.so.1. Used by efa-cuda's real-driver test; the
# library is proprietary (non-free): it is fetched for the test, never committed.
set -euo pipefail
out=${1:?usage: fetch-libcuda1.sh OUTDIR}
find_lib() { find "$out/x" -name 'libcuda.so.1' \( -type f -o -type l \) 2>/dev/null | head -n1; }
lib=$(find_lib || true)
if [ -n "$lib" ]; then echo "$lib"; exit 0; fi
uri=$(grep -hoE '^(URIs:|deb) *https?://[^ ]+/debian( |$)' /etc/apt/sources.list \
        /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
      | grep -oE 'https?://[^ ]+/debian' | head -n1 || true)
uri=${uri:-http://deb.debian.org/debian}
command -v apt-get >/dev/null || { echo "fetch-libcuda1: no apt-get on this machine" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/etc"
echo "deb [trusted=yes] $uri bookworm main non-free" > "$work/etc/sources.list"
opts=(-o Dir::Etc::SourceList="$work/etc/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o APT::Get::List-Cleanup=0
      -o Debug::NoLocking=1 -o APT::Architecture=amd64)
apt-get "${opts[@]}" -qq update >"$work/update.log" 2>&1 ||
  { echo "fetch-libcuda1: apt-get update failed: $(tail -n2 "$work/update.log" | tr '\n' ' ')" >&2; exit 3; }
(cd "$work" && apt-get "${opts[@]}" -qq download libcuda1 >"$work/download.log" 2>&1) ||
  { echo "fetch-libcuda1: apt-get download libcuda1 failed: $(tail -n2 "$work/download.log" | tr '\n' ' ')" >&2; exit 4; }
deb=$(ls "$work"/libcuda1_*.deb)
mkdir -p "$out"
rm -rf "$out/x"
dpkg-deb -x "$deb" "$out/x"
basename "$deb" >"$out/package"
lib=$(find_lib)
[ -n "$lib" ] || { echo "fetch-libcuda1: $(basename "$deb") holds no libcuda.so.1" >&2; exit 5; }
echo "$lib"
