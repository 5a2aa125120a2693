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
if ! out=$(cargo publish --dry-run --locked --allow-dirty "${args[@]}" 2>&1); then
  printf '%s\n' "$out" >&2
  fail "cargo publish --dry-run failed"
fi
echo "check-publish: ok (${crates[*]})"
