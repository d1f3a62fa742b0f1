#!/usr/bin/env bash
# Builds the `kubesync` binary of the previous release (releases/previous: its version and
# commit) from this repository's own history, caches it under
# ~/.cache/kubesync/releases/<version>-<commit>/kubesync, and prints that path.
#
# The build shares the workspace's target directory, so the dependencies are not built twice:
# only the old release's own crates compile. Cargo puts that binary where the workspace's own
# goes (target/debug/kubesync): it is copied out at once, and the workspace's binary is linked
# back by building it again (nothing to compile then).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
read -r version commit < <(grep -v '^#' "$root/releases/previous" | grep -v '^$' | head -n 1)
cache="${KUBESYNC_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubesync}/releases/$version-${commit:0:12}"
if [ -x "$cache/kubesync" ]; then
    echo "$cache/kubesync"
    exit 0
fi
if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null \
    && [ "$(git -C "$root" rev-parse --is-shallow-repository)" = true ]; then
    echo "previous-release: a shallow clone; fetching its history" >&2
    git -C "$root" fetch --quiet --unshallow || true
fi
if ! git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "previous-release: commit $commit (release $version) is not in this clone; fetch the history (git fetch --unshallow)" >&2
    exit 1
fi
work="$(mktemp -d)"
cleanup() {
    git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add --detach "$work/src" "$commit" >/dev/null 2>&1
echo "previous-release: building kubesync $version ($commit)" >&2
(cd "$work/src" && CARGO_TARGET_DIR="$root/target" cargo build --locked --quiet -p kubesync-cli --bin kubesync >&2)
mkdir -p "$cache"
cp "$root/target/debug/kubesync" "$cache/kubesync.partial"
mv "$cache/kubesync.partial" "$cache/kubesync"
(cd "$root" && cargo build --quiet -p kubesync-cli --bin kubesync >&2)
echo "$cache/kubesync"
