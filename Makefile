# kubesync — developer entry points.
#   make test           fmt check, clippy -D warnings, every test (integration tests start real
#                       control planes; the first run builds them, ~6 minutes)
#   make demo           two local control planes and the copy controller between them, narrated
#   make bench          benchmarks on local control planes
#   make control-plane  prepare the control-plane binaries (cached under ~/.cache/kubesync)
#   make clean          remove build outputs (keeps the cached control-plane binaries)

CARGO ?= cargo
export CARGO_TERM_COLOR ?= auto

.PHONY: all test fmt-check clippy unit demo bench control-plane clean clean-cache

all: test

control-plane:
	@bash scripts/control-plane.sh >/dev/null

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: fmt-check clippy control-plane
	$(CARGO) test --workspace

demo: control-plane
	$(CARGO) run --quiet -p kubesync-cli --example demo

bench: control-plane
	$(CARGO) bench -p kubesync

clean:
	$(CARGO) clean
	rm -rf "$${KUBESYNC_CACHE_DIR:-$$HOME/.cache/kubesync}/build"

clean-cache: clean
	rm -rf "$${KUBESYNC_CACHE_DIR:-$$HOME/.cache/kubesync}"
