#!/usr/bin/env bash
# Builds the runtime as a user's crate resolves it: the newest compatible version of every
# dependency (`cargo update` on a copy of the tree, not on our Cargo.lock), warnings as errors.
# CI runs it once, so a deprecation in a new patch release of a dependency shows before a user
# meets it. Usage: scripts/newest-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$copy"
cd "$copy"
cargo update --quiet
cargo tree -p hatchet-runtime -e normal --depth 1 | sed -n '1,40p'
RUSTFLAGS="-D warnings" CARGO_TARGET_DIR="$root/target/newest-deps" \
  cargo build --quiet -p hatchet-runtime --lib
echo "newest-deps: hatchet-runtime builds without warnings on the newest compatible dependencies"
