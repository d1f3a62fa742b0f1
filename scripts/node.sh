#!/usr/bin/env bash
# Prepares the programs of a real Kubernetes node for kubesync's integration tests: kubelet and
# kube-scheduler of one Kubernetes release (the release of the control plane that
# scripts/control-plane.sh builds), containerd 2.x with its runc shim and ctr, runc built with
# seccomp, and a pause (sandbox) image as an OCI archive.
#
#   K8S_VERSION=v1.33.13 bash scripts/node.sh
#   bash scripts/node.sh --pin v1.37.2                 # (maintainers) writes hack/node/v1.37.2
#   bash scripts/node.sh --pin-runtime v2.4.2 v1.5.3   # (maintainers) writes hack/node/runtime
#
# The release is $K8S_VERSION, by default the newest one the project pins (scripts/control-plane.sh
# --versions). Everything is built from Go modules whose go.sum is checked in:
#   - hack/node/<version>/go.mod requires k8s.io/kubernetes <version> with every staging module
#     replaced by its published v0.<minor>.<patch> (as hack/control-plane/<version> does) and
#     names cmd/kubelet and cmd/kube-scheduler as its tools. A version the project does not pin
#     is pinned on the fly into the cache. kube-scheduler is static (CGO_ENABLED=0); kubelet is
#     built with cgo, as Kubernetes builds it. Both are stamped like scripts/control-plane.sh's.
#   - hack/node/runtime/go.mod requires github.com/containerd/containerd/v2 and
#     github.com/opencontainers/runc and names containerd, containerd-shim-runc-v2, ctr and runc
#     as its tools. containerd is built without cgo and with `no_btrfs` (overlayfs is the
#     snapshotter; no btrfs headers needed). runc is built as its `make static` does: cgo,
#     tags `seccomp` (needs Debian's libseccomp-dev, installed with apt-get when missing),
#     without `libpathrs` (a Rust library Debian 12 does not ship; runc then uses its pure-Go
#     filepath-securejoin code path), a static PIE.
#   - pause.tar: build/pause/linux/pause.c of the newest pinned k8s.io/kubernetes module,
#     compiled with `gcc -static`, wrapped by buildah (installed with apt-get when missing) into
#     a one-layer OCI image named as pause.image says (localhost/kubesync/pause:<upstream tag>).
#     Import it with `ctr -n k8s.io images import pause.tar`; name it as containerd's sandbox
#     image.
# Output, under ${KUBESYNC_CACHE_DIR:-~/.cache/kubesync}/node/:
#   <k8s version>/         kubelet, kube-scheduler, and symbolic links to the runtime's files
#   runtime/<containerd>/  containerd, containerd-shim-runc-v2, ctr, runc, pause.tar, pause.image
# Module downloads and Go's build cache are shared with scripts/control-plane.sh. Needs the go
# command, the Go module proxy, gcc, ~3 GiB of disk and 10-20 minutes on 2 cores (cold).
#
# On success the last line printed on stdout is the directory <k8s version>/ above.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE_ROOT="${KUBESYNC_CACHE_DIR:-${HOME}/.cache/kubesync}"
read -r NEWEST OLDEST < <(bash "${ROOT}/scripts/control-plane.sh" --versions)
RUNTIME_MODULE="${ROOT}/hack/node/runtime"
NODE_PROGRAMS=(kubelet kube-scheduler)
RUNTIME_PROGRAMS=(containerd containerd-shim-runc-v2 ctr runc)
RUNTIME_FILES=("${RUNTIME_PROGRAMS[@]}" pause.tar pause.image)

say() { echo "node: $*" >&2; }
die() {
  say "ERROR: $*"
  say "This script builds kubelet, kube-scheduler, containerd, runc and a pause image from the"
  say "Go modules in ${ROOT}/hack/node: it needs the go command (the version the go.mod files"
  say "name, or newer), the Go module proxy (or a warm module cache in ${CACHE_ROOT}/go/mod),"
  say "gcc, apt-get for libseccomp-dev and buildah when they are missing, about 3 GiB of disk"
  say "and 10-20 minutes on 2 cores."
  exit 1
}

go_env() {
  export GOMODCACHE="${GOMODCACHE:-${CACHE_ROOT}/go/mod}" GOCACHE="${GOCACHE:-${CACHE_ROOT}/go/build}"
  export GOFLAGS=-modcacherw GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOWORK=off
}

# Writes $2/go.mod and go.sum: k8s.io/kubernetes $1 with its staging modules replaced by their
# published versions, kubelet and kube-scheduler as tools (hack/control-plane/pin.sh's recipe).
pin_kubernetes() {
  local v="$1" dir="$2" staging upstream_mod go_line
  [[ "${v}" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "'${v}' is not a Kubernetes release (vX.Y.Z)"
  staging="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
  go_env
  upstream_mod="$(go mod download -json "k8s.io/kubernetes@${v}" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "${upstream_mod}" ]] || die "the module proxy did not serve k8s.io/kubernetes@${v}"
  go_line="$(grep -E '^go [0-9.]+$' "${upstream_mod}")"
  mkdir -p "${dir}"
  rm -f "${dir}/go.mod" "${dir}/go.sum"
  printf 'module kubesync.io/hack/node\n\n%s\n' "${go_line}" >"${dir}/go.mod"
  local staged=() replaces=() m
  mapfile -t staged < <(awk '$1 ~ /^k8s\.io\/[a-z0-9-]+$/ && $2 == "v0.0.0" { print $1 }' "${upstream_mod}")
  for m in "${staged[@]}"; do replaces+=("-replace=${m}=${m}@${staging}"); done
  go -C "${dir}" mod edit -require="k8s.io/kubernetes@${v}" "${replaces[@]}" \
    -tool=k8s.io/kubernetes/cmd/kubelet -tool=k8s.io/kubernetes/cmd/kube-scheduler \
    || die "go mod edit failed in ${dir}"
  go -C "${dir}" mod tidy || die "could not pin k8s.io/kubernetes ${v} into ${dir}"
  say "wrote ${dir}/go.mod"
}

# Writes hack/node/runtime/go.mod and go.sum for containerd $1 and runc $2. One module: the
# versions both require are the higher of the two (minimal version selection); go.sum pins them.
pin_runtime() {
  local cv="$1" rv="$2" mod go_line
  [[ "${cv}" =~ ^v2\.[0-9]+\.[0-9]+$ && "${rv}" =~ ^v1\.[0-9]+\.[0-9]+$ ]] \
    || die "usage: node.sh --pin-runtime <containerd v2.x.y> <runc v1.x.y>"
  go_env
  mod="$(go mod download -json "github.com/containerd/containerd/v2@${cv}" | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')"
  [[ -f "${mod}" ]] || die "the module proxy did not serve containerd ${cv}"
  go_line="$(grep -E '^go [0-9.]+$' "${mod}")"
  mkdir -p "${RUNTIME_MODULE}"
  rm -f "${RUNTIME_MODULE}/go.mod" "${RUNTIME_MODULE}/go.sum"
  printf 'module kubesync.io/hack/node/runtime\n\n%s\n' "${go_line}" >"${RUNTIME_MODULE}/go.mod"
  go -C "${RUNTIME_MODULE}" mod edit \
    -require="github.com/containerd/containerd/v2@${cv}" -require="github.com/opencontainers/runc@${rv}" \
    -tool=github.com/containerd/containerd/v2/cmd/containerd \
    -tool=github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
    -tool=github.com/containerd/containerd/v2/cmd/ctr \
    -tool=github.com/opencontainers/runc || die "go mod edit failed in ${RUNTIME_MODULE}"
  go -C "${RUNTIME_MODULE}" mod tidy || die "could not pin containerd ${cv} and runc ${rv}"
  say "wrote ${RUNTIME_MODULE}/go.mod"
}

case "${1:-}" in
  --pin)
    pin_kubernetes "${2:?usage: node.sh --pin vX.Y.Z}" "${ROOT}/hack/node/${2}"
    exit 0
    ;;
  --pin-runtime)
    pin_runtime "${2:-}" "${3:-}"
    exit 0
    ;;
  "") ;;
  *)
    say "unknown arguments: $* (usage: scripts/node.sh [--pin vX.Y.Z | --pin-runtime CONTAINERD RUNC])"
    exit 2
    ;;
esac

K8S_VERSION="${K8S_VERSION:-${NEWEST}}"
[[ "${K8S_VERSION}" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] \
  || die "K8S_VERSION='${K8S_VERSION}' is not a Kubernetes release such as ${NEWEST}"
MINOR="${BASH_REMATCH[1]}"

# The pinned runtime versions, read from go.mod so that a warm cache needs no go command.
[[ -f "${RUNTIME_MODULE}/go.mod" ]] || die "${RUNTIME_MODULE}/go.mod is missing"
required() { sed -n "s#^[[:space:]]*$1 \(v[0-9][^[:space:]]*\).*\$#\1#p" "${RUNTIME_MODULE}/go.mod"; }
CONTAINERD_VERSION="$(required 'github\.com/containerd/containerd/v2')"
RUNC_VERSION="$(required 'github\.com/opencontainers/runc')"
[[ "${CONTAINERD_VERSION}" =~ ^v2\. && "${RUNC_VERSION}" =~ ^v1\. ]] \
  || die "${RUNTIME_MODULE}/go.mod requires no containerd v2 or runc v1 release"

NODE_DIR="${CACHE_ROOT}/node/${K8S_VERSION}"
RUNTIME_DIR="${CACHE_ROOT}/node/runtime/${CONTAINERD_VERSION}"

has() { [[ -x "$1/$2" ]]; }
node_complete() {
  local p
  for p in "${NODE_PROGRAMS[@]}"; do has "${NODE_DIR}" "$p" || return 1; done
}
runtime_complete() {
  local p
  for p in "${RUNTIME_PROGRAMS[@]}"; do has "${RUNTIME_DIR}" "$p" || return 1; done
  [[ -s "${RUNTIME_DIR}/pause.tar" && -s "${RUNTIME_DIR}/pause.image" ]] || return 1
  # The directory is named after containerd; runc's pinned version must match too.
  [[ "$("${RUNTIME_DIR}/runc" --version 2>/dev/null | head -n1)" == "runc version ${RUNC_VERSION#v}" ]]
}
# kubelet, kube-scheduler and links to the runtime's files, all in the node directory.
link_runtime() {
  local f
  for f in "${RUNTIME_FILES[@]}"; do
    ln -sfn "../runtime/${CONTAINERD_VERSION}/${f}" "${NODE_DIR}/${f}"
  done
}
complete() { node_complete && runtime_complete; }

if complete; then
  link_runtime
  say "using cached binaries in ${NODE_DIR} (runtime: ${RUNTIME_DIR})"
  echo "${NODE_DIR}"
  exit 0
fi

# shellcheck source=scripts/go-module-build.sh
source "${ROOT}/scripts/go-module-build.sh"
serialise node.lock "${NODE_DIR}" complete

# Installs the Debian packages $2 … when the check (a function) $1 fails.
need_packages() {
  local check="$1"
  shift
  "${check}" && return 0
  say "installing Debian packages: $* (needed for this build)"
  [[ "$(id -u)" == 0 ]] || die "$* missing and not root: run 'sudo apt-get install $*'"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; } \
    || die "apt-get install $* failed"
  "${check}" || die "installed $*, but ${check} still fails"
}
have_gcc() { command -v gcc >/dev/null 2>&1; }
# runc's seccomp support links libseccomp statically: its header and its static library.
have_libseccomp() { [[ -f /usr/include/seccomp.h && "$(gcc -print-file-name=libseccomp.a)" == /* ]]; }
have_buildah() { command -v buildah >/dev/null 2>&1; }

build_runtime() {
  need_packages have_gcc gcc libc6-dev
  need_packages have_libseccomp libseccomp-dev
  need_packages have_buildah buildah

  enter_module "${RUNTIME_MODULE}" "containerd ${CONTAINERD_VERSION} and runc ${RUNC_VERSION}"
  local out="${RUNTIME_DIR}.tmp" pkg=github.com/containerd/containerd/v2
  rm -rf "${out}" && mkdir -p "${out}"
  # containerd's Makefile: version stamps, -s -w; the shim with no_grpc, both without cgo.
  local ldflags="-s -w -X ${pkg}/version.Version=${CONTAINERD_VERSION} -X ${pkg}/version.Package=${pkg}"
  step "building containerd and ctr ${CONTAINERD_VERSION}"
  go build -trimpath -tags "no_btrfs urfave_cli_no_docs" -ldflags "${ldflags}" -o "${out}/" \
    "${pkg}/cmd/containerd" "${pkg}/cmd/ctr" || die "go build of containerd ${CONTAINERD_VERSION} failed"
  step "building containerd-shim-runc-v2 ${CONTAINERD_VERSION}"
  go build -trimpath -tags "no_btrfs urfave_cli_no_docs no_grpc" -ldflags "${ldflags}" \
    -o "${out}/containerd-shim-runc-v2" "${pkg}/cmd/containerd-shim-runc-v2" \
    || die "go build of containerd-shim-runc-v2 ${CONTAINERD_VERSION} failed"
  # runc's `make static`, without libpathrs.
  step "building runc ${RUNC_VERSION} (cgo, seccomp, static)"
  CGO_ENABLED=1 go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs netgo osusergo" \
    -ldflags "-s -w -linkmode external -extldflags -static-pie" -o "${out}/runc" \
    github.com/opencontainers/runc || die "go build of runc ${RUNC_VERSION} failed"
  "${out}/runc" features | tr -d ' \n' | grep -q '"seccomp":{"enabled":true' \
    || die "the built runc reports no seccomp support ('runc features')"

  # The pause image, from the newest pinned Kubernetes release's sources.
  local kdir tag ctr
  kdir="$(go -C "${ROOT}/hack/node/${NEWEST}" mod download -json k8s.io/kubernetes \
    | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  [[ -f "${kdir}/build/pause/linux/pause.c" ]] || die "no build/pause/linux/pause.c in k8s.io/kubernetes ${NEWEST}"
  tag="$(sed -n 's/^TAG ?= *\([0-9.]*\)$/\1/p' "${kdir}/build/pause/Makefile")"
  [[ -n "${tag}" ]] || die "cannot read the pause image's tag from ${kdir}/build/pause/Makefile"
  step "building the pause image ${tag} (pause.c of k8s.io/kubernetes ${NEWEST})"
  gcc -Os -Wall -Werror -static -DVERSION="v${tag}-kubesync" -o "${out}/pause" \
    "${kdir}/build/pause/linux/pause.c" || die "gcc -static of pause.c failed"
  local image="localhost/kubesync/pause:${tag}"
  ctr="$(buildah --storage-driver vfs from scratch)" || die "buildah from scratch failed"
  # shellcheck disable=SC2064
  trap "buildah --storage-driver vfs rm '${ctr}' >/dev/null 2>&1 || true" EXIT
  buildah --storage-driver vfs copy --chmod 0555 "${ctr}" "${out}/pause" /pause >/dev/null
  buildah --storage-driver vfs config --user 65535:65535 --entrypoint '["/pause"]' \
    --label org.opencontainers.image.version="${tag}" "${ctr}"
  buildah --storage-driver vfs commit --quiet --format oci --timestamp 0 "${ctr}" \
    "oci-archive:${out}/pause.tar:${image}" >/dev/null || die "buildah commit of ${image} failed"
  echo "${image}" >"${out}/pause.image"
  rm -f "${out}/pause"

  for p in "${RUNTIME_PROGRAMS[@]}"; do has "${out}" "$p" || die "the build left no ${p} in ${out}"; done
  rm -rf "${RUNTIME_DIR}" && mv "${out}" "${RUNTIME_DIR}"
  step "runtime ready in ${RUNTIME_DIR}: $("${RUNTIME_DIR}/containerd" --version), $("${RUNTIME_DIR}/runc" --version | head -n1), ${image}"
}

build_node() {
  local module="${ROOT}/hack/node/${K8S_VERSION}"
  if [[ ! -f "${module}/go.mod" ]]; then
    module="${CACHE_ROOT}/node-modules/${K8S_VERSION}"
    step "${K8S_VERSION} is not pinned in hack/node (pinned: ${NEWEST}, ${OLDEST}); pinning it into ${module}"
    pin_kubernetes "${K8S_VERSION}" "${module}"
  fi
  enter_module "${module}" "kubelet and kube-scheduler ${K8S_VERSION}"
  local released pkg ldflags out="${NODE_DIR}.tmp"
  released="$(go list -m -json k8s.io/kubernetes | sed -n 's/^\s*"Time": "\(.*\)",\?$/\1/p')"
  pkg="k8s.io/component-base/version"
  ldflags="-s -w -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${MINOR}"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${released:-1970-01-01T00:00:00Z}"
  rm -rf "${out}" && mkdir -p "${out}"
  step "building kube-scheduler ${K8S_VERSION} (static)"
  go build -trimpath -ldflags "${ldflags}" -o "${out}/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler \
    || die "go build of kube-scheduler ${K8S_VERSION} failed"
  step "building kubelet ${K8S_VERSION} (cgo)"
  CGO_ENABLED=1 go build -trimpath -ldflags "${ldflags}" -o "${out}/kubelet" k8s.io/kubernetes/cmd/kubelet \
    || die "go build of kubelet ${K8S_VERSION} failed"
  for p in "${NODE_PROGRAMS[@]}"; do has "${out}" "$p" || die "the build left no ${p} in ${out}"; done
  rm -rf "${NODE_DIR}" && mv "${out}" "${NODE_DIR}"
  step "node binaries ready in ${NODE_DIR}: $("${NODE_DIR}/kubelet" --version)"
}

runtime_complete || (build_runtime)
node_complete || (build_node)
complete || die "the build left ${NODE_DIR} or ${RUNTIME_DIR} incomplete"
link_runtime
step "node ready in ${NODE_DIR} (runtime: ${RUNTIME_DIR})"
echo "${NODE_DIR}"
