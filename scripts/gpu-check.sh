#!/usr/bin/env bash
# efa-cuda on a real NVIDIA GPU, from prepared binaries: for a machine with one GPU, its
# driver, python3, and no Rust toolchain or RDMA NIC (registration runs on efa-sim).
#
#   scripts/gpu-check.sh pack [DIR]   here: build efa-cuda's GPU tests, bundle them with
#                                     efa-sim (as libibverbs.so.1/libefa.so.1) and the
#                                     driver probe into DIR (default target/gpu-check)
#   scripts/gpu-check.sh run [DIR]    there: run the probe and every GPU test; print what
#                                     ran, what passed and the measured registration and
#                                     flush times; exit non-zero if anything failed
#
# `run` writes its logs and probe.json under $OUT (default DIR/out). The real driver is
# found with ldconfig, or named by EFA_CUDA_REAL_LIBRARY. The probe is
# ../shared/tools/gpu-probe.py (GPU_PROBE=path to use another copy when packing).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
dir=${2:-target/gpu-check}

pack() {
  . scripts/setup.sh
  local probe=${GPU_PROBE:-../shared/tools/gpu-probe.py}
  [ -f "$probe" ] || probe=/work/shared/tools/gpu-probe.py
  [ -f "$probe" ] || { echo "gpu-check: no gpu-probe.py (set GPU_PROBE)" >&2; exit 2; }
  rm -rf "$dir"
  mkdir -p "$dir/tests" "$dir/lib"
  # The test executables cargo builds (one line of JSON per artifact).
  local bins
  bins=$(cargo test -p efa-cuda --test gpu --locked --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], m["executable"])')
  [ -n "$bins" ] || { echo "gpu-check: cargo built no test executable" >&2; exit 3; }
  while read -r name exe; do
    cp "$exe" "$dir/tests/$name"
  done <<<"$bins"
  # efa-sim under the names the tests are linked against (copies: no links to carry).
  local sim
  sim=$(ls -t target/debug/deps/libefa_sim.so | head -n1)
  cp "$sim" "$dir/lib/libibverbs.so.1"
  cp "$sim" "$dir/lib/libefa.so.1"
  strip --strip-debug "$dir"/tests/* "$dir"/lib/* 2>/dev/null || true
  cp "$probe" "$dir/gpu-probe.py"
  echo "gpu-check: packed $(du -sh "$dir" | cut -f1) into $dir:"
  (cd "$dir" && find . -type f | sort | sed 's/^/  /')
}

find_driver() {
  if [ -n "${EFA_CUDA_REAL_LIBRARY:-}" ]; then echo "$EFA_CUDA_REAL_LIBRARY"; return; fi
  local lib
  lib=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / && /x86-64|AArch64/ {print $NF; exit}')
  for c in "$lib" /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 \
    /usr/lib/aarch64-linux-gnu/libcuda.so.1; do
    if [ -n "$c" ] && [ -e "$c" ]; then echo "$c"; return; fi
  done
}

run() {
  [ -d "$dir/tests" ] || { echo "gpu-check: no bundle at $dir (run 'pack' first)" >&2; exit 2; }
  local out=${OUT:-$dir/out}
  mkdir -p "$out"
  local driver
  driver=$(find_driver || true)
  echo "gpu-check: host $(uname -srm); driver library: ${driver:-none found}"
  [ -r /proc/driver/nvidia/version ] && head -n1 /proc/driver/nvidia/version | sed 's/^/gpu-check: /'
  local failed=0 ran=0 passed=0

  echo "== driver probe (gpu-probe.py) =="
  local rc=0
  OUT="$out" LIBCUDA="${driver:-libcuda.so.1}" timeout 300 python3 "$dir/gpu-probe.py" >"$out/probe.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "probe: finished, $(wc -l <"$out/probe.log") lines in $out/probe.log (and probe.json)"
  else
    echo "probe: FAILED (exit $rc), see $out/probe.log"; failed=1
  fi
  # The facts efa-cuda depends on (the whole record is probe.log / probe.json).
  grep -E '^(env\.(nvidia_version|nvidia_peermem_loaded|page_size)|load\.error|driver\.|device\.name|export\.|vmm\.[^:]*setup|flush\.|thread_without_ctx)' \
    "$out/probe.log" | cut -c1-200 | sed 's/^/  /' || true

  export EFA_CUDA_REAL_LIBRARY=${driver:-}
  export LD_LIBRARY_PATH="$(cd "$dir/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for t in "$dir"/tests/*; do
    local bin name log
    bin=$(basename "$t")
    echo "== efa-cuda test binary '$bin' (ignored tests, one at a time) =="
    # `*_side` tests are the other process of a two-process test, which starts them.
    for name in $("$t" --list --ignored 2>/dev/null | sed -n 's/: test$//p' | grep -v '_side$'); do
      log="$out/test-$bin-$name.log"
      ran=$((ran + 1))
      local rc=0
      timeout 300 "$t" --ignored --exact --nocapture --test-threads=1 "$name" >"$log" 2>&1 || rc=$?
      if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1)); echo "  ok      $name"
      else
        failed=1; echo "  FAILED  $name (exit $rc; log: $log)"
        grep -E "panicked at" -A1 "$log" | head -n 4 | cut -c1-200 | sed 's/^/          /' || true
      fi
      grep -E '^(driver |flush support|flush to owner|export )' "$log" | cut -c1-200 | sed 's/^/          /' || true
    done
  done

  echo "== measured times (printed by the tests; not benchmarks) =="
  cat "$out"/test-*.log 2>/dev/null | grep -E '^gpu-check: ' | sed 's/^gpu-check: /  /' || true
  echo "== summary =="
  echo "tests ran: $ran, passed: $passed, failed: $((ran - passed))"
  [ "$ran" -gt 0 ] && [ "$passed" -eq "$ran" ] && [ "$failed" -eq 0 ]
}

case "$mode" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run [DIR]" >&2; exit 2 ;;
esac
