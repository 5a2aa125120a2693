#!/usr/bin/env bash
# Linker driver for scripts/sanitize.sh (rustc `-Clinker=`): links exactly as rustc asked,
# except that an executable's sanitizer runtime is linked as one relocatable object
# (made by sanitize.sh from the toolchain's librustc-*_rt.<san>.a) and its interface
# (__asan_*, __tsan_*, __sanitizer_*, ...) is exported from the executable.
#
# Why: rustc links the runtime (an archive) into executables only; an instrumented cdylib
# such as efa-sim's libibverbs.so.1 or efa-sim-gpu's libcuda.so.1 leaves those symbols
# undefined and finds them in the executable that loads it, as clang-built libraries do
# (clang exports them with --dynamic-list). rustc exports none of them, and efa-sim's
# build.rs links its test executables with `--exclude-libs,ALL`, which hides every symbol
# that comes from an archive, whatever else asks to export it; symbols of a plain object
# are not affected. Without this, the loader stops every test executable with
# "undefined symbol: __asan_option_detect_stack_use_after_return".
set -euo pipefail
: "${SANITIZE_RT_DIR:?set by scripts/sanitize.sh}"
args=()
exports=()
for a in "$@"; do
  case "$a" in
    -Wl,*/librustc-*_rt.*.a)
      name=${a##*/}          # librustc-nightly_rt.asan.a
      san=${name%.a}
      san=${san##*.}         # asan / tsan / lsan / msan
      obj="$SANITIZE_RT_DIR/$san-rt.o"
      [ -f "$obj" ] || { echo "sanitize-linker: $obj missing (made by scripts/sanitize.sh)" >&2; exit 1; }
      args+=("$obj")
      exports=("-Wl,--export-dynamic-symbol=__${san}_*" "-Wl,--export-dynamic-symbol=__sanitizer_*")
      ;;
    *) args+=("$a") ;;
  esac
done
exec "${SANITIZE_CC:-cc}" "${args[@]}" "${exports[@]}"
