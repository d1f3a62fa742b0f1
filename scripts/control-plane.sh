#!/usr/bin/env bash
# Prepares the Kubernetes binaries used by kubesync's tests, demo and benchmarks: etcd,
# kube-apiserver, kube-controller-manager and kubectl of one Kubernetes release.
#
#   K8S_VERSION=v1.33.13 bash scripts/control-plane.sh
#
# The release is $K8S_VERSION, by default the newest one the project pins (see VERSIONS below).
# Order of preference:
#   1. $KUBEBUILDER_ASSETS, when it names a directory holding etcd and kube-apiserver (for
#      example `setup-envtest use -p path 1.37.x`); whatever it lacks (envtest ships no
#      kube-controller-manager) is taken from the cache, and built there if missing;
#   2. the cache, ${KUBESYNC_CACHE_DIR:-~/.cache/kubesync}/control-plane/<version>/;
#   3. a build from Go modules: hack/control-plane/<version>/go.mod requires
#      k8s.io/kubernetes <version> with every staging module replaced by its published
#      v0.<minor>.<patch>, and names the four programs as its tools (etcd is the etcd server that
#      release requires). go.sum is checked in, so the build is pinned to the byte. A version
#      the project does not pin is pinned on the fly into the cache (hack/control-plane/pin.sh).
#      Module downloads and Go's build cache live under the same cache directory, so a warm
#      machine rebuilds nothing. Needs the `go` command (1.24 or newer; the release's go.mod
#      says which), the Go module proxy, ~4 GiB of disk and 10-20 minutes on 2 cores.
#
# On success the last line printed on stdout is the directory holding the binaries.
set -euo pipefail

# The releases the project pins and tests: the newest (the default, `make test`) and the oldest
# supported (`make test-oldest`). They are k8s-openapi's `latest` and `earliest`.
NEWEST="v1.37.2"
OLDEST="v1.33.13"
if [[ "${1:-}" == "--versions" ]]; then
  echo "${NEWEST} ${OLDEST}"
  exit 0
fi

K8S_VERSION="${K8S_VERSION:-${NEWEST}}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE_ROOT="${KUBESYNC_CACHE_DIR:-${HOME}/.cache/kubesync}"
BIN_DIR="${CACHE_ROOT}/control-plane/${K8S_VERSION}"
PROGRAMS=(etcd kube-apiserver kube-controller-manager kubectl)

say() { echo "control-plane: $*" >&2; }
die() {
  say "ERROR: $*"
  say "Either set KUBEBUILDER_ASSETS to a directory holding etcd, kube-apiserver and kubectl"
  say "(for example from 'setup-envtest use -p path'), or let this script build Kubernetes"
  say "${K8S_VERSION} from Go modules: it needs the go command (1.24 or newer), the Go module"
  say "proxy, about 4 GiB of disk and 10-20 minutes on 2 cores."
  exit 1
}

has() { [[ -x "$1/$2" ]]; }
complete() {
  local p
  for p in "${PROGRAMS[@]}"; do has "$1" "$p" || return 1; done
}

[[ "${K8S_VERSION}" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] \
  || die "K8S_VERSION='${K8S_VERSION}' is not a Kubernetes release such as ${NEWEST}"
MINOR="${BASH_REMATCH[1]}"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  if has "${KUBEBUILDER_ASSETS}" etcd && has "${KUBEBUILDER_ASSETS}" kube-apiserver; then
    if has "${KUBEBUILDER_ASSETS}" kube-controller-manager && has "${KUBEBUILDER_ASSETS}" kubectl; then
      say "using KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS}"
      echo "${KUBEBUILDER_ASSETS}"
      exit 0
    fi
    say "KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} lacks kube-controller-manager or kubectl;" \
      "those come from the cache of ${K8S_VERSION}"
  else
    say "KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} has no etcd/kube-apiserver; using the cache"
  fi
fi

if complete "${BIN_DIR}"; then
  say "using cached binaries in ${BIN_DIR}"
  echo "${BIN_DIR}"
  exit 0
fi

# shellcheck source=scripts/go-module-build.sh
source "${ROOT}/scripts/go-module-build.sh"
serialise control-plane.lock "${BIN_DIR}" complete "${BIN_DIR}"

MODULE="${ROOT}/hack/control-plane/${K8S_VERSION}"
if [[ ! -f "${MODULE}/go.mod" ]]; then
  MODULE="${CACHE_ROOT}/control-plane-modules/${K8S_VERSION}"
  step "${K8S_VERSION} is not pinned in hack/control-plane (pinned: ${NEWEST}, ${OLDEST});" \
    "pinning it into ${MODULE}"
  mkdir -p "${MODULE}"
  HACK_DIR="$(dirname "${MODULE}")" bash "${ROOT}/hack/control-plane/pin.sh" "${K8S_VERSION}" \
    || die "could not pin k8s.io/kubernetes ${K8S_VERSION} (see above)"
fi
enter_module "${MODULE}" "Kubernetes ${K8S_VERSION}"

# The version the programs report: Kubernetes' own build stamps these variables.
released="$(go list -m -json k8s.io/kubernetes | sed -n 's/^\s*"Time": "\(.*\)",\?$/\1/p')"
pkg="k8s.io/component-base/version"
LDFLAGS="-s -w -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${MINOR}"
LDFLAGS+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${released:-1970-01-01T00:00:00Z}"

OUT="${BIN_DIR}.tmp"
rm -rf "${OUT}" && mkdir -p "${OUT}"
step "building kube-apiserver, kube-controller-manager and kubectl ${K8S_VERSION} (10-20 min on 2 cores)"
go build -trimpath -ldflags "${LDFLAGS}" -o "${OUT}/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kubectl || die "go build of Kubernetes ${K8S_VERSION} failed (see above)"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
step "building etcd ${etcd_version}"
go build -trimpath -ldflags "-s -w" -o "${OUT}/etcd" go.etcd.io/etcd/server/v3 \
  || die "go build of etcd ${etcd_version} failed (see above)"

for p in "${PROGRAMS[@]}"; do has "${OUT}" "$p" || die "the build left no ${p} in ${OUT}"; done
rm -rf "${BIN_DIR}" && mv "${OUT}" "${BIN_DIR}"
step "binaries ready in ${BIN_DIR}: $("${BIN_DIR}/kube-apiserver" --version), etcd ${etcd_version}"
echo "${BIN_DIR}"
