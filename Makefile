# kubesync — developer entry points.
#   make test           fmt check, clippy -D warnings, every test (integration tests start real
#                       control planes; the first run builds them, ~6 minutes)
#   make demo           two local control planes and the copy controller between them, narrated
#   make dashboard      the demo, with the operator's /metrics sampled, charted as docs/demo-dashboard.png
#                       (matplotlib from PyPI, in a virtualenv under ~/.cache/kubesync)
#   make chaos          the fault suite (tests/faults/) at full size, printing each scenario's figures
#   make bench          benchmarks on local control planes (the engine's, then bench-memory)
#   make bench-memory   RSS and start-up of the kubesync binary and of a plain kube-runtime
#                       reflector, with unrelated Secrets and with 10 000 synced objects
#                       (KUBESYNC_BENCH_QUICK=1: a smaller, faster version)
#   make control-plane  prepare the control-plane binaries (cached under ~/.cache/kubesync)
#   make crds           regenerate config/crd/bases/kubesync.io.yaml from the Rust types
#   make image          build the container image as an OCI archive (buildah; no daemon, no registry)
#   make image-test     unpack that image and run kubesync inside it with chroot
#   make clean          remove build outputs (keeps the cached control-plane binaries)

CARGO ?= cargo
export CARGO_TERM_COLOR ?= auto

.PHONY: all test fmt-check clippy unit demo dashboard chaos bench bench-memory control-plane crds image image-test clean clean-cache

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

DASHBOARD_PNG ?= docs/demo-dashboard.png
dashboard: control-plane
	mkdir -p target
	KUBESYNC_DEMO_METRICS=$(CURDIR)/target/demo-metrics.jsonl $(CARGO) run --quiet -p kubesync-cli --example demo
	bash scripts/dashboard.sh target/demo-metrics.jsonl $(DASHBOARD_PNG)

chaos: control-plane
	KUBESYNC_CHAOS_FULL=1 $(CARGO) test -p kubesync-cli --test faults -- --nocapture --test-threads=1

bench: control-plane
	$(CARGO) bench -p kubesync
	$(CARGO) bench -p kubesync-cli --bench memory

bench-memory: control-plane
	$(CARGO) bench -p kubesync-cli --bench memory

crds:
	$(CARGO) run --quiet -p kubesync-cli -- crds > config/crd/bases/kubesync.io.yaml

image:
	bash scripts/image.sh target/kubesync-image.tar

image-test: image
	bash scripts/image-test.sh target/kubesync-image.tar

clean:
	$(CARGO) clean
	rm -rf "$${KUBESYNC_CACHE_DIR:-$$HOME/.cache/kubesync}/build"

clean-cache: clean
	rm -rf "$${KUBESYNC_CACHE_DIR:-$$HOME/.cache/kubesync}"
