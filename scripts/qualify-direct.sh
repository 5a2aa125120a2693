#!/usr/bin/env bash
# Qualifies efa-typestate's direct data path (Backend::Direct, EFA_RS_DIRECT=1) on this
# machine's EFA devices, in one command, and prints a report to paste into an issue.
#
#   scripts/qualify-direct.sh            on an EFA instance (a GPU instance too)
#
# What it does, each step logged under $OUT (default target/qualify-direct):
#   1. efa-info: the library that answers (rdma-core or efa-sim), each device's PCI id,
#      firmware and ring batch, and whether the direct path can be had at all. A device
#      that splits its CQs into sub-CQs (first-generation EFA, 0xefa0) or that does not
#      hand out its rings rules the direct path out: said in the report, tests skipped.
#   2. The differential test: random work through the direct path and through the
#      system's own libefa, everything the user sees compared (QUALIFY_SEEDS seeds in one
#      process, default 200; a tenth of them, at least 8, across two processes).
#   3. efa-typestate's tests with EFA_RS_DIRECT=1, so every QP and CQ that names no
#      backend runs on the direct path, on the NIC.
#   4. efa-perf local, direct and provider, every transfer verified.
#   5. With a GPU (NVIDIA's libcuda.so.1 found): the GPUDirect example's tests on the
#      direct path.
# Exit status: 0 when every step that ran passed, 1 otherwise.
#
# Without an EFA device (or with EFA_SIM=1) the same steps run on efa-sim, with fewer
# seeds, and the report says so: such a run keeps this script working (CI runs it) and
# qualifies nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
# setup.sh sets -e; a failing step must be reported, not end the run.
set +e

out=${OUT:-target/qualify-direct}
rm -rf "$out"
mkdir -p "$out"
target_dir=${CARGO_TARGET_DIR:-target}

say() { printf '%s\n' "$*" | tee -a "$out/report.md"; }
results=()
failed=0
step() { # step NAME LOG COMMAND...: runs COMMAND, logs it, records PASS/FAIL
  local name=$1 log=$2
  shift 2
  local start rc
  start=$(date +%s)
  "$@" >"$out/$log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - start))
  if [ $rc -eq 0 ]; then
    results+=("| $name | PASS | ${secs}s | \`$log\` |")
  else
    results+=("| $name | **FAIL** (exit $rc) | ${secs}s | \`$log\` |")
    failed=1
  fi
}

echo "qualify-direct: building (release)" >&2
cargo build --release --locked -q -p efa-info -p efa-perf -p efa-sim || exit 1
info="$target_dir/release/efa-info"
sim="$target_dir/release/efa-sim"

# 1. Which device: the NIC when one answers (unless EFA_SIM=1), else efa-sim.
on_sim=0
if [ "${EFA_SIM:-}" = 1 ] || ! "$info" --json >"$out/efa-info.json" 2>"$out/efa-info.err" ||
  ! python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if any(x["efa"] for x in d["devices"]) else 1)' "$out/efa-info.json"; then
  on_sim=1
  "$sim" run -- "$info" --json >"$out/efa-info.json" 2>"$out/efa-info.err" || {
    echo "qualify-direct: efa-info failed on efa-sim too" >&2
    cat "$out/efa-info.err" >&2
    exit 1
  }
fi
if [ $on_sim = 1 ]; then
  export EFA_SIM=1
  run_on() { "$sim" run -- "$@"; }
  seeds=${QUALIFY_SEEDS:-48}
else
  export EFA_SIM=0
  run_on() { "$@"; }
  seeds=${QUALIFY_SEEDS:-200}
fi
process_seeds=$((seeds / 10 < 8 ? 8 : seeds / 10))

# What rules the direct path out, device by device (the first device is the one the
# tests use).
python3 - "$out/efa-info.json" >"$out/devices.md" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
libs = ", ".join(sorted({"%s %s (%s)" % (l["soname"], l.get("version") or "?", l["kind"]) for l in d["libraries"]}))
print("libraries: " + libs)
print()
print("| device | PCI id | firmware | max_tx_batch | direct path | default path |")
print("|---|---|---|---|---|---|")
blocked = []
for dev in d["devices"]:
    if not dev["efa"]:
        continue
    v = dev["verbs"]
    f = {x["name"]: x for x in dev["features"]}
    direct = f.get("direct data path", {})
    default = f.get("default data path", {})
    ok = direct.get("supported")
    why = "yes" if ok else "no: " + (direct.get("detail") or "?")
    if not ok:
        blocked.append("%s: %s" % (dev["name"], direct.get("detail")))
    print("| %s | %#x | %s | %s | %s | %s |" % (dev["name"], v["vendor_part_id"], v["fw_ver"],
          dev.get("max_tx_batch"), why, default.get("detail", "?")))
print()
if blocked:
    print("RULED OUT: " + "; ".join(blocked))
PY
blocked=$(grep '^RULED OUT' "$out/devices.md" | head -1)
first_blocked=$(python3 -c 'import json,sys
d=json.load(open(sys.argv[1]))
e=[x for x in d["devices"] if x["efa"]]
f={x["name"]: x for x in e[0]["features"]} if e else {}
print("" if e and f.get("direct data path",{}).get("supported") else "yes")' "$out/efa-info.json")

# 2-5. The tests, unless the first device rules the direct path out.
if [ -z "$first_blocked" ]; then
  step "differential test, $seeds seeds in one process, $process_seeds across two" differential.log \
    env EFA_DIFF_SEEDS=$seeds cargo test --release --locked -p efa-typestate --test direct_differential \
    -- random_work_completes_alike_through_both_backends_in_one_process
  step "differential test across two processes" differential-processes.log \
    env EFA_DIFF_SEEDS=$process_seeds cargo test --release --locked -p efa-typestate \
    --test direct_differential -- random_work_completes_alike_through_both_backends_between_two_processes
  step "efa-typestate's tests with EFA_RS_DIRECT=1" typestate-direct.log \
    env EFA_RS_DIRECT=1 cargo test --release --locked -p efa-typestate
  for b in direct provider; do
    step "efa-perf local --backend $b (every transfer verified)" "efa-perf-$b.log" \
      run_on "$target_dir/release/efa-perf" local send_lat write_lat send_bw write_bw read_bw \
      --backend $b -n 2000 --max-size 64K --no-progress
  done
  gpu=none
  if [ $on_sim = 1 ]; then
    gpu="efa-sim's software GPU"
  elif ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    gpu="NVIDIA's libcuda.so.1"
  fi
  if [ "$gpu" != none ]; then
    step "GPUDirect example's tests with EFA_RS_DIRECT=1 ($gpu)" gpu.log \
      env EFA_RS_DIRECT=1 cargo test --release --locked -p efa --features cuda --test gpu_rdma
  fi
fi

# The report.
: >"$out/report.md"
say "## efa-rs direct data path qualification"
say ""
say "- when: $(date -u '+%Y-%m-%d %H:%M UTC'); commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
say "- host: $(uname -srm); instance type: $(cat /sys/devices/virtual/dmi/id/product_name 2>/dev/null || echo '?')"
if [ $on_sim = 1 ]; then
  say "- device: **efa-sim, the software device** (no EFA device here, or EFA_SIM=1):"
  say "  this run checks that the script works; it qualifies nothing"
else
  say "- device: the system's rdma-core and EFA NIC"
fi
say ""
cat "$out/devices.md" | tee -a "$out/report.md"
if [ -n "$first_blocked" ]; then
  say ""
  say "The direct path is ruled out on the device the tests use: no test ran. Keep the"
  say "default (Backend::Auto is the provider)."
  failed=1
else
  say ""
  say "| step | result | time | log |"
  say "|---|---|---|---|"
  for r in "${results[@]}"; do say "$r"; done
  say ""
  if [ $failed = 1 ]; then
    say "verdict: **NOT QUALIFIED** (a step failed; its log is in $out)"
  elif [ $on_sim = 1 ]; then
    say "verdict: every step passed on efa-sim (not a qualification)"
  elif [ -n "$blocked" ]; then
    say "verdict: qualified on the first device; $blocked"
  else
    say "verdict: **QUALIFIED** on this instance: EFA_RS_DIRECT=1 may be used here"
  fi
fi
echo "qualify-direct: report in $out/report.md" >&2
exit $failed
