#!/usr/bin/env bash
# Sanitizers: efa-typestate's and efa-sim's tests under AddressSanitizer (with
# LeakSanitizer), on the software device built with the same instrumentation.
#
# What runs (nightly, `-Zsanitizer=address`, `--target x86_64-unknown-linux-gnu` so that
# build scripts and proc-macros stay uninstrumented; own target directory
# `$CARGO_TARGET_DIR/asan`, so it never invalidates the ordinary builds):
#   * efa-typestate: the unit tests and every integration test but `ui`. Through
#     efa-sim-select they load efa-sim's cdylib as libibverbs.so.1/libefa.so.1, and that
#     cdylib is built with the same flags, so the device's code (the ABI layer, the
#     provider's rings, the model behind them) is checked as well as the safe API. Before
#     the run the script proves it: the test executable, run with LD_DEBUG=libs, must
#     initialise efa-sim-select's libibverbs.so.1, and that file must resolve to the
#     instrumented library (one importing __asan_init).
#   * efa-sim: the unit tests and model_api, model_data (with model_error_statuses and
#     model_forged_packets), model_gpu (efa-sim-gpu's cdylib,
#     instrumented too, dlopen()ed as libcuda.so.1), model_process, model_rings, model_shm
#     (children are the same instrumented test executable, re-executed), rust_efa_sys (the
#     instrumented cdylib selected by LD_LIBRARY_PATH in a child), install and cli.
# Left out, because the program that would load the instrumented library is not built
# with ASan and the library cannot be loaded into it (its __asan_* references resolve
# only in an ASan executable: "undefined symbol: __asan_option_detect_stack_use_after_return"):
#   * efa-sim's test targets conformance (C programs built by gcc), fabric (libfabric's
#     fi_info/fi_pingpong, ibverbs-utils, a librdmacm C client), tools (ibv_devices,
#     ibv_devinfo, python3 ctypes, a gcc-built consumer) and python (ctypes consumers);
#   * in cli and install, the tests whose `efa-sim run` child is ibv_devices, fi_info or
#     python3: listed in `asan_skip` below;
#   * efa-typestate's `ui`: trybuild compile-fail checks, no code runs; it would also
#     build the dependencies a second time under the sanitizer flags;
#   * doctests (rustdoc links each one separately; the same paths run in the tests).
# LeakSanitizer stays on (detect_leaks=1): at exit the device's process-lifetime objects
# are reachable from statics, so LSan does not report them and gives no noise. A few tests
# leak on purpose; scripts/sanitize-lsan.supp names exactly those test functions.
#
# rustc links the ASan runtime into executables without exporting its interface, and
# efa-sim's build.rs links its test executables with --exclude-libs,ALL, which hides it
# for good; an instrumented cdylib needs those symbols from the executable. The linker
# driver scripts/sanitize-linker.sh links the runtime as a plain object and exports the
# __asan_*/__sanitizer_* interface (what clang does for C). Nothing else changes.
#
# ThreadSanitizer (`-Zsanitizer=thread`, with -Zbuild-std so that std is instrumented
# too, which needs the nightly rust-src component; target directory `$CARGO_TARGET_DIR/tsan`)
# then runs the multi-threaded tests on the TSan-built device: efa-sim's unit tests (the
# RCU tables), efa-typestate's unit tests (the slot pool's concurrent claims), and the
# integration tests that post and poll from several threads: data (threads posting to one
# QP, a completion channel woken from another thread), waiting, leases (pool slots handed
# between threads), ownership (an engine moved to another thread).
# All of them run, none skipped: the completion ring hands entries between threads with
# atomic release/acquire accesses (efa-sim's ring module), which TSan sees as synchronizing.
# What TSan cannot see and is not run: efa-sim's shared-memory transport between processes
# (model_shm, model_process): each process has its own TSan state, so accesses by the peer
# process to the mapped rings are invisible.
#
# Every step runs under `timeout`. Measured on a shared 2-core machine: about 3 minutes
# from nothing built (ASan build and run 1m45s, TSan with std 1m25s), 30 s when built.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

target=x86_64-unknown-linux-gnu
base_target_dir=${CARGO_TARGET_DIR:-$PWD/target}
case "$base_target_dir" in /*) ;; *) base_target_dir=$PWD/$base_target_dir ;; esac

# The nightly toolchain (sanitizers are unstable); rust-src for -Zbuild-std.
sanitize_toolchain() {
  if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal --component rust-src
  elif ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    rustup component add --toolchain nightly rust-src
  fi
}

# Makes $SANITIZE_RT_DIR/<san>-rt.o from the toolchain's runtime archive (see the header).
sanitize_runtime() {
  local san=$1 lib
  lib="$(rustup run nightly rustc --print sysroot)/lib/rustlib/$target/lib"
  mkdir -p "$SANITIZE_RT_DIR"
  ld -r --whole-archive "$lib"/librustc-*_rt."$san".a -o "$SANITIZE_RT_DIR/$san-rt.o"
}

# Tests in the selected targets that start a non-ASan program on the instrumented library.
asan_skip=(
  # cli.rs
  run_with_gpus_selects_the_software_gpu        # python3 ctypes loads libcuda.so.1
  run_puts_programs_on_the_software_device      # ibv_devices
  env_prints_a_working_shell_line               # ibv_devices
  libfabric_fi_info_sees_the_software_devices   # fi_info
  a_program_on_a_rejected_configuration_sees_no_devices_and_one_line  # ibv_devices
  # install.rs
  a_cli_outside_the_target_directory_writes_its_library_to_the_cache_once  # ibv_devices
  an_install_layout_next_to_the_cli_is_used_without_a_cache                # ibv_devices
)

asan() {
  export CARGO_TARGET_DIR=$base_target_dir/asan
  export SANITIZE_RT_DIR=$CARGO_TARGET_DIR/rt
  export RUSTFLAGS="-Zsanitizer=address -Clinker=$PWD/scripts/sanitize-linker.sh"
  export ASAN_OPTIONS=detect_leaks=1
  export LSAN_OPTIONS=suppressions=$PWD/scripts/sanitize-lsan.supp:print_suppressions=1
  sanitize_runtime asan
  local cargo=(cargo +nightly test --locked --target "$target")
  # (`--lib` once: cargo applies it to every package named)
  local ts=(-p efa-typestate
    --test control --test data --test device_memory --test leases --test limits
    --test ownership --test processes --test profile_caps --test profile_small_rdma
    --test rdma --test session --test soundness --test transfer --test waiting
    --test zero_alloc)
  local sim=(-p efa-sim
    --test model_api --test model_data --test model_error_statuses --test model_forged_packets
    --test model_gpu --test model_process
    --test model_rings --test model_shm --test rust_efa_sys --test install --test cli)
  local skips=() t
  for t in "${asan_skip[@]}"; do skips+=(--skip "$t"); done

  echo "sanitize: building the ASan tests (efa-typestate, efa-sim and its cdylibs)" >&2
  timeout 1200 "${cargo[@]}" --lib "${ts[@]}" "${sim[@]}" --no-run

  # The test executables must load the instrumented efa-sim, not rdma-core.
  local exe libdir lib dbg
  exe=$(timeout 300 "${cargo[@]}" -p efa-typestate --test control --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
  libdir=$(find "$CARGO_TARGET_DIR/$target/debug/build" -path '*efa-sim-select-*/out/efa-sim-lib' -type d | head -1)
  dbg=$(LD_DEBUG=libs LD_LIBRARY_PATH="$libdir" timeout 60 "$exe" --list 2>&1 >/dev/null |
    grep -F "calling init: $libdir/libibverbs.so.1" || true)
  lib=$(readlink -f "$libdir/libibverbs.so.1")
  # (nm's output is read whole: `grep -q` would stop early and fail the pipeline)
  if [ -z "$dbg" ] || ! grep -qw __asan_init <<<"$(nm -D --undefined-only "$lib")"; then
    echo "sanitize: $exe does not load the ASan-built efa-sim ($libdir/libibverbs.so.1 -> $lib)" >&2
    exit 1
  fi
  echo "sanitize: tests load $lib (ASan-instrumented)" >&2

  echo "sanitize: running efa-typestate's tests under ASan" >&2
  timeout 600 "${cargo[@]}" --lib "${ts[@]}"
  echo "sanitize: running efa-sim's tests under ASan" >&2
  timeout 600 "${cargo[@]}" --lib "${sim[@]}" -- "${skips[@]}"
}

tsan() {
  export CARGO_TARGET_DIR=$base_target_dir/tsan
  export SANITIZE_RT_DIR=$CARGO_TARGET_DIR/rt
  export RUSTFLAGS="-Zsanitizer=thread -Clinker=$PWD/scripts/sanitize-linker.sh"
  unset ASAN_OPTIONS LSAN_OPTIONS
  export TSAN_OPTIONS=halt_on_error=0:exitcode=66
  sanitize_runtime tsan
  local cargo=(cargo +nightly test -Zbuild-std --locked --target "$target")
  local tests=(-p efa-sim -p efa-typestate --lib
    --test data --test waiting --test leases --test ownership)
  echo "sanitize: building the TSan tests (std, efa-typestate, efa-sim and its cdylib)" >&2
  timeout 1200 "${cargo[@]}" "${tests[@]}" --no-run
  local lib
  lib="$CARGO_TARGET_DIR/$target/debug/deps/libefa_sim.so"
  grep -qw __tsan_init <<<"$(nm -D --undefined-only "$lib")" ||
    { echo "sanitize: $lib is not TSan-instrumented" >&2; exit 1; }
  echo "sanitize: running the multi-threaded tests under TSan" >&2
  timeout 600 "${cargo[@]}" "${tests[@]}"
}

sanitize_toolchain
start=$(date +%s)
asan
echo "sanitize: ASan done after $(( $(date +%s) - start ))s" >&2
tsan
echo "sanitize: finished in $(( $(date +%s) - start ))s" >&2
