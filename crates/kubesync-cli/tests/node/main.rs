//! kubesync as its users run it: the chart's Pods on real nodes (kubelet + containerd built
//! from Go modules, `kubesync_testenv::Node`), from the image `make image` builds. These
//! tests need the node programs and the image: `make node-test` builds both and runs them
//! (one at a time: a machine runs one test's nodes at once).
//!
//! - [`install`]: `helm install` with defaults on two nodes — Pods, probes, the
//!   ServiceAccount's copies, `/metrics` over HTTPS, the securityContext as the runtime
//!   applies it, loopback only.
//! - [`kustomize`]: `kubectl apply -k` of `config/default` (with the hostNetwork patch).
//! - [`failover`]: the PodDisruptionBudget's evictions, the leader's Pod deleted, a rolling
//!   restart, a frozen leader.
//! - [`outage`]: an apiserver outage, three sharded Pods, the memory of 10 000 copies.
//! - [`upgrade`]: a rolling `helm upgrade` from the previous release's chart and image.

#[path = "../common/mod.rs"]
mod common;

mod failover;
mod ground;
mod install;
mod kustomize;
mod outage;
mod upgrade;
