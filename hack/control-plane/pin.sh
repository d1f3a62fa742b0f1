#!/usr/bin/env bash
# Writes the Go module that builds one Kubernetes release's control plane from Go modules:
#   hack/control-plane/<version>/go.mod and go.sum
# It requires k8s.io/kubernetes <version>, replaces every staging module that release's go.mod
# points at ./staging (the k8s.io/* requirements at v0.0.0) with its published v0.<minor>.<patch>,
# and names kube-apiserver, kube-controller-manager, kubectl and etcd (the etcd server that
# release requires) as the module's tools. Run it once per pinned version and commit the result;
# scripts/control-plane.sh builds from it.
#
#   bash hack/control-plane/pin.sh v1.37.2
set -euo pipefail
V="${1:?usage: pin.sh vX.Y.Z}"
[[ "$V" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "pin.sh: '$V' is not a Kubernetes release (vX.Y.Z)" >&2; exit 2; }
STAGING="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR="${HACK_DIR:-${HERE}}/${V}"
CACHE_ROOT="${KUBESYNC_CACHE_DIR:-${HOME}/.cache/kubesync}"
export GOMODCACHE="${GOMODCACHE:-${CACHE_ROOT}/go/mod}" GOCACHE="${GOCACHE:-${CACHE_ROOT}/go/build}"
export GOFLAGS=-modcacherw GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOWORK=off

upstream_mod="$(go mod download -json "k8s.io/kubernetes@${V}" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')"
[[ -f "$upstream_mod" ]] || { echo "pin.sh: the module proxy did not serve k8s.io/kubernetes@${V}" >&2; exit 1; }
go_line="$(grep -E '^go [0-9.]+$' "$upstream_mod")"

mkdir -p "$DIR"
cd "$DIR"
rm -f go.mod go.sum
printf 'module kubesync.io/hack/control-plane\n\n%s\n' "$go_line" > go.mod
go mod edit -require="k8s.io/kubernetes@${V}"
for m in $(awk '$1 ~ /^k8s\.io\/[a-z0-9-]+$/ && $2 == "v0.0.0" { print $1 }' "$upstream_mod"); do
  go mod edit -replace="${m}=${m}@${STAGING}"
done
go mod edit \
  -tool=k8s.io/kubernetes/cmd/kube-apiserver \
  -tool=k8s.io/kubernetes/cmd/kube-controller-manager \
  -tool=k8s.io/kubernetes/cmd/kubectl \
  -tool=go.etcd.io/etcd/server/v3
go mod tidy
echo "pin.sh: wrote ${DIR}/go.mod ($(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3) etcd)" >&2
