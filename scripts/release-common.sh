# Shared by scripts/dist.sh and scripts/wheel.sh (source it): builds efa-sim in release
# mode for one architecture and says where the results are.
#
#   release_setup ARCH      ARCH is x86_64 or aarch64; sets release_triple, release_dir
#                           (cargo's output directory for that triple) and, for a cross
#                           build, the linker / pkg-config environment that
#                           scripts/check-aarch64.sh uses; runs scripts/setup.sh
#   release_build           cargo build --release -p efa-sim for release_triple
#   release_version         prints efa-sim's version (from cargo metadata)

release_host_arch() { uname -m; }

release_setup() {
  local arch=$1
  case "$arch" in
    x86_64 | aarch64) ;;
    *) echo "release: unknown architecture '$arch' (x86_64 or aarch64)" >&2; return 1 ;;
  esac
  release_arch=$arch
  release_triple="$arch-unknown-linux-gnu"
  if [ "$arch" != "$(release_host_arch)" ]; then
    SETUP_CROSS=1 . scripts/setup.sh
    export PKG_CONFIG_ALLOW_CROSS=1
    export PKG_CONFIG_LIBDIR="/usr/lib/$arch-linux-gnu/pkgconfig:/usr/share/pkgconfig"
    local var
    var="CARGO_TARGET_$(echo "$release_triple" | tr 'a-z-' 'A-Z_')_LINKER"
    export "$var=$arch-linux-gnu-gcc"
  else
    . scripts/setup.sh
  fi
  local target_dir
  target_dir=$(cargo metadata --format-version 1 --no-deps --locked |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  # A host build without --target lands in <target>/release, a cross build in
  # <target>/<triple>/release (the same units cargo install and maturin reuse).
  if [ "$arch" = "$(release_host_arch)" ]; then
    release_target_args=()
    release_dir="$target_dir/release"
  else
    release_target_args=(--target "$release_triple")
    release_dir="$target_dir/$release_triple/release"
  fi
  release_target_dir=$target_dir
}

release_build() {
  cargo build --release -p efa-sim --locked "${release_target_args[@]}"
}

release_version() {
  cargo metadata --format-version 1 --no-deps --locked | python3 -c '
import json, sys
print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "efa-sim"))'
}
