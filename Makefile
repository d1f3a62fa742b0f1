# kubesync — developer entry points.
#   make test           fmt check, clippy -D warnings, every test (integration tests start real
#                       control planes of the newest supported Kubernetes; the first run builds
#                       them from Go modules, 10-20 minutes)
#   make test-oldest    the unit and real-cluster suites on the oldest supported Kubernetes
#   make test-k8s K8S_VERSION=v1.35.4
#                       the same on any release (one the project does not pin is pinned on the fly)
#   make demo           two local control planes and the copy controller between them, narrated
#   make dashboard      the demo, with the operator's /metrics sampled, charted as docs/demo-dashboard.png
#                       (matplotlib from PyPI, in a virtualenv under ~/.cache/kubesync)
#   make chaos          the fault suite (tests/faults/) at full size, printing each scenario's figures
#                       (SEED=<n> replays the campaign's seed n; SEEDS=<k> runs k seeds from it)
#   make bench          benchmarks on local control planes (the engine's, bench-memory, bench-compat,
#                       bench-sharded, bench-peer)
#   make bench-compat   --compat at scale: 100 annotated sources into 1000 namespaces, then churn
#   make bench-pull     hub → 10 spokes × 100 namespaces on 11 local control planes: pull (one
#                       fan-out per spoke) against push (one on the hub); also part of make bench
#                       (KUBESYNC_BENCH_QUICK=1: 2 spokes × 10 namespaces, one round)
#   make bench-memory   RSS and start-up of the kubesync binary and of a plain kube-runtime
#                       reflector, with unrelated Secrets and with 10 000 synced objects
#                       (KUBESYNC_BENCH_QUICK=1: a smaller, faster version)
#   make bench-peer     kubesync beside rustrial's k8s-object-syncer built from its source
#                       (PEER_SRC=<checkout>, cached under ~/.cache/kubesync/peer): 1 Secret → 1000
#                       namespaces, create / update / new namespace / RSS, 3 rounds a side
#   make bench-sharded  one `kubesync run` against three `run --sharded` replicas: 60 ObjectSyncs ×
#                       100 namespaces and 6 RemoteClusters, then a fleet of 20 RemoteClusters (20
#                       control planes); per replica RSS, watches, units, and time to every copy
#                       (KUBESYNC_BENCH_QUICK=1: a smaller, faster version)
#   make control-plane  build etcd, kube-apiserver, kube-controller-manager and kubectl of
#                       $(K8S_VERSION) (default: the newest supported) from Go modules, cached
#                       under ~/.cache/kubesync/control-plane/<version>
#   make crds           regenerate config/crd/bases/kubesync.io.yaml (and the Helm chart's copy)
#   make reference      regenerate the book's generated reference pages (flags, CRD fields, metrics)
#                       from the Rust types
#   make helm           the pinned helm (hack/helm/go.mod) built from Go modules, cached
#   make helm-lint      helm lint --strict of charts/kubesync, with its defaults and every option
#   make image          build the container image as an OCI archive (buildah; no daemon, no registry)
#   make image-test     unpack that image and run kubesync inside it with chroot
#   make node           kubelet, kube-scheduler, containerd, runc and a pause image of $(K8S_VERSION)
#                       from Go modules, cached under ~/.cache/kubesync/node (10-20 minutes cold)
#   make node-test      the chart's Pods on real nodes (make node, make image, helm), one test at a
#                       time: install, evictions and a deleted leader, a rolling restart, a frozen
#                       leader, an apiserver outage, three sharded Pods, 10 000 copies' memory,
#                       a rolling helm upgrade from the previous release (its chart and image,
#                       built from history by scripts/previous-image.sh, cached)
#   make docs           the book (docs/src, docs/book.toml) into target/book, with its link check
#                       (mdBook from crates.io, installed once under ~/.cache/kubesync)
#   make clean          remove build outputs (keeps the cached control-plane binaries)

CARGO ?= cargo
export CARGO_TERM_COLOR ?= auto

.PHONY: upgrade-test publish-check helm helm-lint node node-test all test test-k8s test-oldest fmt-check clippy unit demo dashboard chaos bench bench-check bench-memory bench-compat bench-sharded bench-peer bench-pull control-plane crds reference image image-test docs clean clean-cache

# The Kubernetes release of the test ground: unset means the newest the project pins.
ifdef K8S_VERSION
export K8S_VERSION
endif
OLDEST_K8S := $(word 2,$(shell bash scripts/control-plane.sh --versions))

all: test

control-plane:
	@bash scripts/control-plane.sh >/dev/null

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: fmt-check clippy control-plane
	$(CARGO) test --workspace

# Unit and integration tests (every real-cluster suite) on $(K8S_VERSION); no lints, no doctests.
# TEST_ARGS go to the test binaries (e.g. --skip NAME).
test-k8s: control-plane
	$(CARGO) test --workspace --tests -- $(TEST_ARGS)


# An upgrade from the previous release (releases/previous) to this tree on a real control plane:
# builds that release's binary from this repository's history (cached under
# ~/.cache/kubesync/releases), then runs tests/upgrade.rs with it. Run before each release.
upgrade-test: control-plane
	KUBESYNC_PREVIOUS_BINARY="$$(scripts/previous-release.sh)" $(CARGO) test -p kubesync-cli --test upgrade -- --ignored

# The library crates as crates.io would take them: packaged and built from the package alone
# (`cargo publish --dry-run`; they enable no k8s-openapi version feature, so the check picks one,
# as docs.rs does).
publish-check:
	$(CARGO) publish --dry-run --locked -p kubesync --features k8s-openapi/latest
	$(CARGO) publish --dry-run --locked -p kubesync-testenv --features k8s-openapi/latest

# Every suite, the replicas' coordination (leader election, sharding, fencing) included, on
# the oldest supported release too.
test-oldest:
	$(MAKE) test-k8s K8S_VERSION=$(OLDEST_K8S)

demo: control-plane
	$(CARGO) run --quiet -p kubesync-cli --example demo

DASHBOARD_PNG ?= docs/demo-dashboard.png
dashboard: control-plane
	mkdir -p target
	KUBESYNC_DEMO_METRICS=$(CURDIR)/target/demo-metrics.jsonl $(CARGO) run --quiet -p kubesync-cli --example demo
	bash scripts/dashboard.sh target/demo-metrics.jsonl $(DASHBOARD_PNG)

chaos: control-plane
	KUBESYNC_CHAOS_FULL=1 $(if $(SEED),KUBESYNC_SEED=$(SEED)) $(if $(SEEDS),KUBESYNC_CAMPAIGN_SEEDS=$(SEEDS)) $(CARGO) test -p kubesync-cli --test faults -- --nocapture --test-threads=1

# The benchmarks' invariants, not their speed, in CI: each run quick (KUBESYNC_BENCH_QUICK,
# small sizes, a few rounds) in the test profile. Each fails on a broken invariant: the fan-out's
# writes per round exactly those its copies need, a spec/status restart in sync writing nothing
# and kubesync writing what a plain client writes. `make bench` is the full measurement.
bench-check: control-plane
	KUBESYNC_BENCH_QUICK=1 BENCH_SIZES=50 $(CARGO) test -p kubesync --bench fan_out
	KUBESYNC_BENCH_QUICK=1 $(CARGO) test -p kubesync --bench spec_status

bench: control-plane
	$(CARGO) bench -p kubesync
	$(CARGO) bench -p kubesync-cli --bench memory
	$(CARGO) bench -p kubesync-cli --bench compat
	$(CARGO) bench -p kubesync-cli --bench sharded
	scripts/peer.sh
	$(CARGO) bench -p kubesync-cli --bench peer

bench-compat: control-plane
	$(CARGO) bench -p kubesync-cli --bench compat

bench-memory: control-plane
	$(CARGO) bench -p kubesync-cli --bench memory

# kubesync beside rustrial's k8s-object-syncer (1 Secret into 1000 namespaces: create, update,
# a new namespace, RSS). The peer is built by scripts/peer.sh from a checkout of its source
# (PEER_SRC); without one it measures nothing.
bench-peer: control-plane
	scripts/peer.sh
	$(CARGO) bench -p kubesync-cli --bench peer

bench-sharded: control-plane
	$(CARGO) bench -p kubesync-cli --bench sharded

bench-pull: control-plane
	$(CARGO) bench -p kubesync --bench pull

crds:
	$(CARGO) run --quiet -p kubesync-cli -- crds > config/crd/bases/kubesync.io.yaml
	cp config/crd/bases/kubesync.io.yaml charts/kubesync/crds/kubesync.io.yaml

reference:
	KUBESYNC_UPDATE_REFERENCE=1 $(CARGO) test --quiet -p kubesync-cli --test reference

helm:
	@bash scripts/helm.sh >/dev/null

# A real node's programs (kubelet, kube-scheduler, containerd, runc, a pause image) of
# $(K8S_VERSION), built from the Go modules in hack/node and cached under ~/.cache/kubesync/node.
node:
	@bash scripts/node.sh >/dev/null

# The chart's Pods on real nodes (kubelet + containerd of $(K8S_VERSION), built from Go modules
# by `make node`, cached), from the image `make image` builds: tests/node of kubesync-cli and the
# test environment's own node test, one test at a time (a machine runs one test's nodes at once).
node-test: control-plane node helm image
	$(CARGO) test -p kubesync-testenv --test node -- --ignored --test-threads=1
	KUBESYNC_PREVIOUS_RELEASE="$$(bash scripts/previous-image.sh)" $(CARGO) test -p kubesync-cli --test node -- --ignored --test-threads=1 --nocapture

helm-lint:
	HELM=$$(bash scripts/helm.sh) && $$HELM lint --strict charts/kubesync && \
	$$HELM lint --strict charts/kubesync --set restricted.enabled=true,metrics.service.enabled=true,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,monitoring.dashboard.enabled=true && \
	$$HELM lint --strict charts/kubesync --set sharded.enabled=true,leaderElect=false,replicas=3

image:
	bash scripts/image.sh target/kubesync-image.tar

image-test: image
	bash scripts/image-test.sh target/kubesync-image.tar

docs:
	bash scripts/docs.sh

clean:
	$(CARGO) clean
	rm -rf "$${KUBESYNC_CACHE_DIR:-$$HOME/.cache/kubesync}/build"

clean-cache: clean
	rm -rf "$${KUBESYNC_CACHE_DIR:-$$HOME/.cache/kubesync}"
