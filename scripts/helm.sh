#!/usr/bin/env bash
# Prepares the `helm` binary that lints, renders and installs charts/kubesync in the tests.
#
#   bash scripts/helm.sh             # builds helm if needed; prints its path last on stdout
#   bash scripts/helm.sh --version   # prints the pinned helm version and exits
#
# hack/helm/go.mod names helm.sh/helm/v3/cmd/helm as its only `tool`, at the version it
# requires; go.sum is checked in, so the build is pinned to the byte. The binary is cached as
# ${KUBESYNC_CACHE_DIR:-~/.cache/kubesync}/helm/<version>/helm, and built from Go modules when
# it is not there, stamped as helm's own Makefile stamps a release (`helm version` names it,
# and its default Kubernetes version for `helm template` and `helm lint` is the one of the
# client-go it is built with). Module downloads and Go's build cache are shared with
# scripts/control-plane.sh under the same cache directory. Needs the `go` command (the version
# hack/helm/go.mod names, or newer), the Go module proxy and 2-5 minutes on 2 cores.
#
# On success the last line printed on stdout is the path of the binary.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
MODULE="${ROOT}/hack/helm"
CACHE_ROOT="${KUBESYNC_CACHE_DIR:-${HOME}/.cache/kubesync}"

say() { echo "helm: $*" >&2; }
die() {
  say "ERROR: $*"
  say "This script builds helm from the Go module in ${MODULE}: it needs the go command"
  say "(the version that go.mod names, or newer), the Go module proxy (or a warm module cache"
  say "in ${CACHE_ROOT}/go/mod) and a few minutes on 2 cores."
  exit 1
}

[[ -f "${MODULE}/go.mod" ]] || die "${MODULE}/go.mod is missing"
# The pinned version, read from go.mod so that a cached binary needs no go command.
HELM_VERSION="$(sed -n 's#^[[:space:]]*helm\.sh/helm/v3 \(v[0-9][^[:space:]]*\).*$#\1#p' "${MODULE}/go.mod")"
[[ "${HELM_VERSION}" =~ ^v3\.[0-9]+\.[0-9]+$ ]] \
  || die "${MODULE}/go.mod requires no release of helm.sh/helm/v3 (found '${HELM_VERSION}')"
if [[ "${1:-}" == "--version" ]]; then
  echo "${HELM_VERSION}"
  exit 0
fi
if [[ $# -ne 0 ]]; then
  say "unknown arguments: $* (usage: scripts/helm.sh [--version])"
  exit 2
fi

BIN_DIR="${CACHE_ROOT}/helm/${HELM_VERSION}"
BIN="${BIN_DIR}/helm"

if [[ -x "${BIN}" ]]; then
  say "using cached ${BIN}"
  echo "${BIN}"
  exit 0
fi

# shellcheck source=scripts/go-module-build.sh
source "${ROOT}/scripts/go-module-build.sh"
serialise helm.lock "${BIN}" test -x "${BIN}"
enter_module "${MODULE}" "helm ${HELM_VERSION}"

# What helm's Makefile stamps for a release: its version (no "unreleased" metadata), and the
# Kubernetes version of its client-go (major + 1, minor), which `helm template` and `helm lint`
# assume when they talk to no cluster.
client_go="$(go list -m -f '{{.Version}}' k8s.io/client-go)" \
  || die "cannot tell which k8s.io/client-go helm ${HELM_VERSION} uses"
[[ "${client_go}" =~ ^v0\.([0-9]+)\.[0-9]+ ]] || die "unexpected k8s.io/client-go version ${client_go}"
k8s_major=1
k8s_minor="${BASH_REMATCH[1]}"
LDFLAGS="-w -s"
LDFLAGS+=" -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}"
LDFLAGS+=" -X helm.sh/helm/v3/internal/version.metadata="
LDFLAGS+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  LDFLAGS+=" -X ${pkg}.k8sVersionMajor=${k8s_major} -X ${pkg}.k8sVersionMinor=${k8s_minor}"
done

OUT="${BIN_DIR}.tmp"
rm -rf "${OUT}" && mkdir -p "${OUT}"
step "building helm ${HELM_VERSION} (Kubernetes v${k8s_major}.${k8s_minor} client libraries)"
go build -trimpath -ldflags "${LDFLAGS}" -o "${OUT}/helm" helm.sh/helm/v3/cmd/helm \
  || die "go build of helm ${HELM_VERSION} failed (see above)"

reported="$("${OUT}/helm" version --template '{{.Version}}')" \
  || die "the built ${OUT}/helm does not run"
[[ "${reported}" == "${HELM_VERSION}" ]] \
  || die "the built helm reports version '${reported}', not ${HELM_VERSION}"
rm -rf "${BIN_DIR}" && mv "${OUT}" "${BIN_DIR}"
step "helm ready: ${BIN} ($("${BIN}" version --short))"
echo "${BIN}"
