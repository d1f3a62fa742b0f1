#!/usr/bin/env bash
# Builds the previous release's container image and exports its chart (releases/previous:
# its version and commit), both from this repository's own history, as that release built
# them: its scripts/image.sh and its charts/kubesync. Caches both under
# ~/.cache/kubesync/releases/<version>-<commit>/ (image.tar, chart/) and prints that directory.
#
# The release build has a target directory of its own (target/previous-release): the old
# release's dependencies differ from this tree's, and sharing would make the next `make image`
# link this tree's binary again.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
read -r version commit < <(grep -v '^#' "$root/releases/previous" | grep -v '^$' | head -n 1)
cache="${KUBESYNC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubesync}/releases/$version-${commit:0:12}"
if [ -f "$cache/image.tar" ] && [ -f "$cache/chart/Chart.yaml" ]; then
    echo "$cache"
    exit 0
fi
if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null \
    && [ "$(git -C "$root" rev-parse --is-shallow-repository)" = true ]; then
    echo "previous-image: a shallow clone; fetching its history" >&2
    git -C "$root" fetch --quiet --unshallow || true
fi
if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "previous-image: commit $commit (release $version) is not in this clone; fetch the history (git fetch --unshallow)" >&2
    exit 1
fi
work="$(mktemp -d)"
cleanup() {
    git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add --detach "$work/src" "$commit" >/dev/null 2>&1
echo "previous-image: building kubesync $version's image ($commit)" >&2
mkdir -p "$cache"
(cd "$work/src" && CARGO_TARGET_DIR="$root/target/previous-release" bash scripts/image.sh "$cache/image.tar.partial" >&2)
rm -rf "$cache/chart.partial"
cp -r "$work/src/charts/kubesync" "$cache/chart.partial"
rm -rf "$cache/chart"
mv "$cache/chart.partial" "$cache/chart"
mv "$cache/image.tar.partial" "$cache/image.tar"
echo "$cache"
