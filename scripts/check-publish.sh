#!/usr/bin/env bash
# The crates meant for crates.io package and verify as they would be published:
# `cargo publish --dry-run` for each (with cargo's local-registry overlay for their
# unpublished inter-dependencies), after checking that each package holds only what a
# user of the crate needs: sources, build script, README, licenses; no tests, benches,
# scripts or Python sources (efa-sim-select, the workspace's dev-dependency helper, is
# `publish = false` and stripped from the published manifests).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh

crates=(efa-sys efa-typestate efa-cuda efa efa-sim efa-perf efa-info)
fail() { echo "check-publish: $*" >&2; exit 1; }
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done

list=$(cargo package --locked --allow-dirty --no-verify --list "${args[@]}" 2>/dev/null)
bad=$(grep -E '^(tests|benches|python|scripts|\.ci)/|^pyproject\.toml$|\.(so|rlib|o|a|whl|tar\.gz)$' <<<"$list" || true)
[ -z "$bad" ] || fail "files that do not belong in a published crate: $bad"
for f in LICENSE-MIT LICENSE-APACHE README.md Cargo.toml src/lib.rs; do
  n=$(grep -cx "$f" <<<"$list" || true)
  [ "$n" = "${#crates[@]}" ] || fail "$f is in $n of ${#crates[@]} packages"
done
# cargo unpacks the overlay's .crate files under $CARGO_HOME/registry/src/-<hash of the
# overlay path>/ and treats registry sources as immutable: it never unpacks the same name
# and version there again, nor rebuilds them in the same target dir. A second run from the
# same checkout would verify against the first run's sources. So the dry run gets a target
# dir of its own, our crates' artifacts and unpacked sources are removed before it, and
# crates.io's (kept elsewhere) stay.
export CARGO_TARGET_DIR="$PWD/target/publish-check"
version=$(cargo metadata --format-version 1 --no-deps --locked | python3 -c 'import json,sys; print(json.load(sys.stdin)["packages"][0]["version"])')
for c in "${crates[@]}"; do
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/"$c-$version"
  rm -rf "$CARGO_TARGET_DIR"/debug/.fingerprint/"$c"-* "$CARGO_TARGET_DIR"/debug/build/"$c"-*
  rm -f "$CARGO_TARGET_DIR"/debug/deps/lib"${c//-/_}"-* "$CARGO_TARGET_DIR"/debug/deps/"${c//-/_}"-*
done
if ! out=$(cargo publish --dry-run --locked --allow-dirty "${args[@]}" 2>&1); then
  printf '%s\n' "$out" >&2
  fail "cargo publish --dry-run failed"
fi
echo "check-publish: ok (${crates[*]})"
