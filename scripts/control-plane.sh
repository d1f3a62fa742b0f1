#!/usr/bin/env bash
# Prepares the Kubernetes control-plane binaries (etcd, kube-apiserver,
# kube-controller-manager) used by kubesync's tests and demo.
#
# Order of preference:
#   1. $KUBEBUILDER_ASSETS, when it names a directory holding etcd and kube-apiserver;
#   2. the cache under ${KUBESYNC_CACHE_DIR:-~/.cache/kubesync}/control-plane/v1.20.2/;
#   3. a build from Debian packages: bookworm's `kubernetes` source package (which ships a full
#      vendor/ tree) compiled with bullseye's Go 1.15, and etcd from bookworm's `etcd-server`.
#
# The build uses a private apt configuration that reuses the mirror already configured in the
# machine's apt sources; the machine's own apt configuration is left untouched.
#
# On success the last line printed on stdout is the directory holding the binaries.
set -euo pipefail

K8S_VERSION="v1.20.2"
CACHE_ROOT="${KUBESYNC_CACHE_DIR:-${HOME}/.cache/kubesync}"
BIN_DIR="${CACHE_ROOT}/control-plane/${K8S_VERSION}"
WORK="${CACHE_ROOT}/build"

say() { echo "control-plane: $*" >&2; }
die() {
  say "ERROR: $*"
  say "Either set KUBEBUILDER_ASSETS to a directory holding etcd and kube-apiserver"
  say "(for example from 'setup-envtest use -p path'), or let this script build them: it needs"
  say "root (or passwordless sudo) for apt-get, a Debian machine with a reachable mirror in its"
  say "apt sources, about 3 GiB of disk and ~6 minutes on 2 cores."
  exit 1
}

have_all() {
  [[ -x "$1/etcd" && -x "$1/kube-apiserver" ]]
}

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  if have_all "${KUBEBUILDER_ASSETS}"; then
    say "using KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS}"
    echo "${KUBEBUILDER_ASSETS}"
    exit 0
  fi
  say "KUBEBUILDER_ASSETS=${KUBEBUILDER_ASSETS} has no etcd/kube-apiserver; falling back to the cache"
fi

if have_all "${BIN_DIR}" && [[ -x "${BIN_DIR}/kube-controller-manager" ]]; then
  say "using cached binaries in ${BIN_DIR}"
  echo "${BIN_DIR}"
  exit 0
fi

SUDO=""
if [[ "$(id -u)" != "0" ]]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  fi
fi

# Serialise concurrent runs (several test binaries may ask at once).
mkdir -p "${CACHE_ROOT}"
exec 9>"${CACHE_ROOT}/control-plane.lock"
if ! flock -n 9; then
  say "another build is running; waiting for it"
  flock 9
  if have_all "${BIN_DIR}" && [[ -x "${BIN_DIR}/kube-controller-manager" ]]; then
    echo "${BIN_DIR}"
    exit 0
  fi
fi

START=$(date +%s)
step() { say "[$(( $(date +%s) - START ))s] $*"; }

# --- the mirror, read from the machine's apt sources ---------------------------------------
find_mirror() {
  local f uri=""
  # deb822 sources: take the first URIs: of a stanza whose Suites name a plain release.
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" ]] || continue
    uri=$(awk '
      /^[[:space:]]*$/ { if (u != "" && s ~ /(bookworm|bullseye|trixie|stable)([[:space:]]|$)/ && s !~ /security/) { print u; exit } u=""; s=""; next }
      /^URIs:/ { u=$2 }
      /^Suites:/ { $1=""; s=$0 }
      END { if (u != "" && s ~ /(bookworm|bullseye|trixie|stable)([[:space:]]|$)/ && s !~ /security/) print u }
    ' "$f" | head -n1)
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
  # one-line sources.
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -f "$f" ]] || continue
    uri=$(awk '$1 == "deb" || $1 == "deb-src" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i+1) !~ /security/ && $i ~ /debian/) { print $i; exit } }' "$f")
    [[ -n "$uri" ]] && { echo "$uri"; return; }
  done
}

MIRROR="${KUBESYNC_DEBIAN_MIRROR:-$(find_mirror)}"
[[ -n "${MIRROR}" ]] || die "found no Debian mirror in /etc/apt/sources.list or /etc/apt/sources.list.d"
MIRROR="${MIRROR%/}"
step "using the Debian mirror configured in this machine's apt sources"

APT_DIR="${WORK}/apt"
mkdir -p "${APT_DIR}/lists/partial" "${APT_DIR}/archives/partial" "${APT_DIR}/sources.list.d"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
cat >"${APT_DIR}/sources.list" <<SOURCES
deb [signed-by=${KEYRING}] ${MIRROR} bookworm main
deb-src [signed-by=${KEYRING}] ${MIRROR} bookworm main
deb [signed-by=${KEYRING}] ${MIRROR} bullseye main
SOURCES
APT_OPTS=(
  -o "Dir::Etc::SourceList=${APT_DIR}/sources.list"
  -o "Dir::Etc::SourceParts=${APT_DIR}/sources.list.d"
  -o "Dir::State::Lists=${APT_DIR}/lists"
  -o "Dir::Cache::Archives=${APT_DIR}/archives"
  -o "Dir::Cache::pkgcache=${APT_DIR}/pkgcache.bin"
  -o "Dir::Cache::srcpkgcache=${APT_DIR}/srcpkgcache.bin"
  -o "APT::Sandbox::User=root"
  -o "Debug::NoLocking=1"
)

# Host tools the kubernetes Makefile needs.
missing=()
for tool in rsync make gcc dpkg-source; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]})); then
  pkgs=()
  for t in "${missing[@]}"; do
    case "$t" in dpkg-source) pkgs+=(dpkg-dev) ;; gcc) pkgs+=(gcc) ;; *) pkgs+=("$t") ;; esac
  done
  step "installing host tools: ${pkgs[*]}"
  if [[ "$(id -u)" != "0" && -z "${SUDO}" ]]; then
    die "missing ${missing[*]} and not root"
  fi
  ${SUDO} apt-get "${APT_OPTS[@]}" update -qq || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive ${SUDO} apt-get "${APT_OPTS[@]}" install -y -qq "${pkgs[@]}" >/dev/null \
    || die "could not install ${pkgs[*]}"
fi

step "refreshing the private package lists (bookworm + bullseye)"
apt-get "${APT_OPTS[@]}" update -qq || die "apt-get update with the private configuration failed"

SRC="${WORK}/src"
GOROOT_DIR="${WORK}/go"
ETCD_DIR="${WORK}/etcd"

# --- Go 1.15 from bullseye -------------------------------------------------------------------
if [[ ! -x "${GOROOT_DIR}/usr/lib/go-1.15/bin/go" ]]; then
  step "fetching Go 1.15 (golang-1.15-go, golang-1.15-src) from bullseye"
  rm -rf "${GOROOT_DIR}" && mkdir -p "${GOROOT_DIR}/debs"
  (cd "${GOROOT_DIR}/debs" && apt-get "${APT_OPTS[@]}" download golang-1.15-go golang-1.15-src) \
    || die "could not download Go 1.15"
  for deb in "${GOROOT_DIR}"/debs/*.deb; do dpkg -x "$deb" "${GOROOT_DIR}"; done
fi
export GOROOT="${GOROOT_DIR}/usr/lib/go-1.15"
export PATH="${GOROOT}/bin:${PATH}"
step "$(go version)"

# --- etcd from bookworm ----------------------------------------------------------------------
if [[ ! -x "${ETCD_DIR}/usr/bin/etcd" ]]; then
  step "fetching etcd-server from bookworm"
  rm -rf "${ETCD_DIR}" && mkdir -p "${ETCD_DIR}/debs"
  (cd "${ETCD_DIR}/debs" && apt-get "${APT_OPTS[@]}" download etcd-server) \
    || die "could not download etcd-server"
  dpkg -x "${ETCD_DIR}"/debs/etcd-server_*.deb "${ETCD_DIR}"
fi

# --- kubernetes source from bookworm ---------------------------------------------------------
TREE=""
if [[ -d "${SRC}" ]]; then
  TREE=$(find "${SRC}" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)
fi
if [[ -z "${TREE}" || ! -f "${TREE}/.kubesync-unpacked" ]]; then
  step "fetching and unpacking bookworm's kubernetes source package (large, ~1 min)"
  rm -rf "${SRC}" && mkdir -p "${SRC}"
  (cd "${SRC}" && apt-get "${APT_OPTS[@]}" source -qq --download-only kubernetes) \
    || die "could not download the kubernetes source package"
  dsc=$(ls "${SRC}"/kubernetes_*.dsc | head -n1)
  (cd "${SRC}" && dpkg-source --no-check -x "${dsc}" >/dev/null) || die "could not unpack ${dsc}"
  TREE=$(find "${SRC}" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -n1)
  [[ -d "${TREE}/vendor" ]] || die "the kubernetes source package has no vendor/ tree"
  touch "${TREE}/.kubesync-unpacked"
fi

# --- build -----------------------------------------------------------------------------------
step "building kube-apiserver and kube-controller-manager ${K8S_VERSION} with Go 1.15 (~5 min on 2 cores)"
GOPATH_DIR="${WORK}/gopath"
mkdir -p "${GOPATH_DIR}/src/k8s.io"
ln -sfn "${TREE}" "${GOPATH_DIR}/src/k8s.io/kubernetes"
(
  cd "${GOPATH_DIR}/src/k8s.io/kubernetes"
  export GOPATH="${GOPATH_DIR}" CGO_ENABLED=0 GOFLAGS=-mod=vendor GO111MODULE=on GOCACHE="${WORK}/gocache"
  # The source package is a tarball, not a git checkout: give the version explicitly.
  export KUBE_GIT_VERSION="${K8S_VERSION}" KUBE_GIT_TREE_STATE=clean KUBE_GIT_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
  export KUBE_GIT_MAJOR=1 KUBE_GIT_MINOR=20
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" 2>&1 | sed -u 's/^/  make: /' >&2
  exit "${PIPESTATUS[0]}"
) || die "the kubernetes build failed (see the output above)"

OUT="${TREE}/_output/bin"
[[ -x "${OUT}/kube-apiserver" ]] || OUT="${TREE}/_output/local/bin/linux/amd64"
[[ -x "${OUT}/kube-apiserver" && -x "${OUT}/kube-controller-manager" ]] || die "built binaries not found under ${TREE}/_output"

mkdir -p "${BIN_DIR}.tmp"
cp "${OUT}/kube-apiserver" "${OUT}/kube-controller-manager" "${ETCD_DIR}/usr/bin/etcd" "${BIN_DIR}.tmp/"
rm -rf "${BIN_DIR}" && mv "${BIN_DIR}.tmp" "${BIN_DIR}"
step "binaries ready in ${BIN_DIR}"
if [[ "${KUBESYNC_KEEP_BUILD:-0}" != "1" ]]; then
  rm -rf "${WORK}/src" "${WORK}/gocache" "${WORK}/gopath"
fi
"${BIN_DIR}/kube-apiserver" --version >&2 || true
echo "${BIN_DIR}"
