# Sourced by scripts/control-plane.sh and scripts/helm.sh: what every build of a pinned Go
# module under hack/ shares. The caller defines `die` and `say` and sets CACHE_ROOT.

# Serialises concurrent runs on lock file $1 (several test binaries may ask at once). When it
# had to wait, it runs the check $2 … again and, when that succeeds, prints $3 and exits 0:
# the other run built it.
serialise() {
  local lock="$1" out="$2"
  shift 2
  mkdir -p "${CACHE_ROOT}"
  exec 9>"${CACHE_ROOT}/${lock}"
  if ! flock -n 9; then
    say "another build is running; waiting for it"
    flock 9
    if "$@"; then
      echo "${out}"
      exit 0
    fi
  fi
}

# The go command, with module downloads and the build cache under the project's cache (a warm
# machine rebuilds nothing), static binaries, no workspace; then into module directory $1,
# whose go.mod's `go` line this Go must meet. $2 names what is built, for messages.
enter_module() {
  local module="$1" what="$2"
  command -v go >/dev/null 2>&1 || die "the go command is not installed (or not on PATH)"
  export GOMODCACHE="${CACHE_ROOT}/go/mod" GOCACHE="${CACHE_ROOT}/go/build"
  export GOFLAGS=-modcacherw GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOWORK=off
  step "$(go version)"
  cd "${module}" || die "no module directory ${module}"
  local need have
  need="$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)"
  have="$(go env GOVERSION | sed 's/^go//')"
  if [[ "$(printf '%s\n%s\n' "${need}" "${have}" | sort -V | head -n1)" != "${need}" ]]; then
    die "${what} needs Go ${need}; this machine has ${have}" \
      "(GOTOOLCHAIN=go${need} lets the go command fetch that toolchain)"
  fi
  step "downloading the modules of ${what} (cached)"
  go mod download >/dev/null || die "go mod download failed in ${module}"
}

START=$(date +%s)
step() { say "[$(($(date +%s) - START))s] $*"; }
