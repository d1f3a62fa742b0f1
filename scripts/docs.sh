#!/usr/bin/env bash
# make docs: builds the book (docs/book.toml, sources in docs/src/) into target/book and checks
# its links.
#
#   bash scripts/docs.sh             # installs mdBook if needed, checks links, builds the book
#   bash scripts/docs.sh --version   # prints the pinned mdBook version and exits
#
# mdBook is installed from crates.io with `cargo install --locked` (the versions in its own
# Cargo.lock), into ${KUBESYNC_CACHE_DIR:-~/.cache/kubesync}/mdbook-<version>, on first use
# (about 5-10 minutes on 2 cores) and reused after. scripts/check-links.py checks every relative
# link and #anchor of docs/src/**/*.md and README.md, and that SUMMARY.md reaches every chapter,
# before the build; after it, it checks the links and images of the rendered pages.
set -euo pipefail

MDBOOK_VERSION=0.5.4

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE_ROOT="${KUBESYNC_CACHE_DIR:-${HOME}/.cache/kubesync}"
INSTALL_ROOT="${CACHE_ROOT}/mdbook-${MDBOOK_VERSION}"
MDBOOK="${INSTALL_ROOT}/bin/mdbook"
BOOK_OUT="${ROOT}/target/book"

say() { echo "docs: $*" >&2; }
die() {
  say "ERROR: $*"
  exit 1
}

if [[ "${1:-}" == "--version" ]]; then
  echo "${MDBOOK_VERSION}"
  exit 0
fi
[[ $# -eq 0 ]] || { say "unknown arguments: $* (usage: scripts/docs.sh [--version])"; exit 2; }
command -v python3 >/dev/null 2>&1 || die "python3 is not installed (the link check needs it)"

# Links first: no install is needed to find a broken one.
say "checking the links of README.md and docs/src"
python3 "${ROOT}/scripts/check-links.py" --root "${ROOT}"

if [[ ! -x "${MDBOOK}" ]]; then
  command -v cargo >/dev/null 2>&1 || die "cargo is not installed (mdBook is installed with it)"
  mkdir -p "${CACHE_ROOT}"
  # Several runs at once install once: the others wait, then find the binary.
  exec 9>"${CACHE_ROOT}/mdbook.lock"
  flock 9
  if [[ ! -x "${MDBOOK}" ]]; then
    say "installing mdBook ${MDBOOK_VERSION} from crates.io into ${INSTALL_ROOT} (once; a few minutes)"
    start=$(date +%s)
    cargo install mdbook --version "${MDBOOK_VERSION}" --locked --root "${INSTALL_ROOT}" \
      || die "cargo install mdbook ${MDBOOK_VERSION} failed (see above)"
    say "mdBook ${MDBOOK_VERSION} installed in $(($(date +%s) - start)) s"
  fi
  exec 9>&-
fi
reported="$("${MDBOOK}" --version)" || die "${MDBOOK} does not run"
[[ "${reported}" == "mdbook v${MDBOOK_VERSION}" ]] \
  || die "${MDBOOK} reports '${reported}', not mdbook v${MDBOOK_VERSION}"

say "building the book with ${reported} into target/book"
rm -rf "${BOOK_OUT}"
"${MDBOOK}" build "${ROOT}/docs" || die "mdbook build failed (see above)"
[[ -f "${BOOK_OUT}/index.html" ]] || die "the build wrote no ${BOOK_OUT}/index.html"

say "checking the links and images of the rendered book"
python3 "${ROOT}/scripts/check-links.py" --root "${ROOT}" --html "${BOOK_OUT}"
say "book ready: ${BOOK_OUT}/index.html"
