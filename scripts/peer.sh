#!/usr/bin/env bash
# Builds the peer `make bench-peer` compares kubesync with: rustrial's k8s-object-syncer, from
# a checkout of its source (PEER_SRC, or the first argument) at the pinned commit, into
# ~/.cache/kubesync/peer/<commit>/ (its binary, and its CRD as its own generator writes it).
# Nothing is fetched here: its source lives on GitHub, which these machines may not reach.
# Without a checkout and without a cached build it says so and succeeds (the benchmark then
# measures nothing).
set -euo pipefail
commit=a525b1fc02be900e66b7e7fa0444d6f228af7e25
cache="${KUBESYNC_CACHE:-$HOME/.cache/kubesync}/peer"
out="$cache/$commit"
if [ -x "$out/rustrial-k8s-object-syncer" ] && [ -s "$out/crds.yaml" ]; then
  echo "peer: $out (cached)"
  exit 0
fi
src="${1:-${PEER_SRC:-}}"
if [ -z "$src" ]; then
  echo "peer: no build cached in $out and no PEER_SRC: make bench-peer will measure nothing"
  exit 0
fi
have=$(git -C "$src" rev-parse HEAD)
if [ "$have" != "$commit" ]; then
  echo "peer: $src is at $have; check out $commit (the commit the benchmark's numbers are for)" >&2
  exit 1
fi
mkdir -p "$out"
# Its workspace's examples (gen-crds) build only with the features the whole workspace enables.
CARGO_TARGET_DIR="$cache/target" cargo build --release --locked --workspace --bins --examples \
  --manifest-path "$src/Cargo.toml"
cp "$cache/target/release/rustrial-k8s-object-syncer" "$out/"
"$cache/target/release/examples/gen-crds" > "$out/crds.yaml"
echo "peer: built $out"
