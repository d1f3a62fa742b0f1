//! Real Kubernetes control planes for tests, examples and demos.
//!
//! A [`TestEnv`] is one cluster: `etcd` + `kube-apiserver` (+ optionally
//! `kube-controller-manager`, running the namespace, garbage-collector and service-account
//! controllers) started as local processes on free loopback ports, in a temporary directory,
//! with a certificate authority and an admin token of its own. Several environments can run
//! side by side in one process; each is stopped and its directory removed when it is dropped,
//! and no process outlives the test binary (the `process` module says how).
//!
//! The binaries come from `KUBEBUILDER_ASSETS` when set, otherwise from the project's cache
//! (`~/.cache/kubesync/control-plane/<release>`), which `scripts/control-plane.sh` fills on
//! first use by building that Kubernetes release from Go modules. The release is
//! `$K8S_VERSION`, by default [`NEWEST_KUBERNETES`]; [`OLDEST_KUBERNETES`] is the oldest one
//! supported and tested.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::Namespace;
//! use kube::Api;
//! use kubesync_testenv::TestEnv;
//!
//! let env = TestEnv::builder()
//!     .name("mgmt")
//!     .with_controller_manager(true)
//!     .user("alice", &[])
//!     .start()
//!     .await?;
//! let client = env.client()?;
//! env.create_namespace("team-a").await?;
//! assert!(Api::<Namespace>::all(client).get_opt("team-a").await?.is_some());
//! let alice = env.client_as("alice")?; // denied everything until granted
//! let denied = Api::<Namespace>::all(alice).list(&Default::default()).await;
//! assert!(matches!(denied, Err(kube::Error::Api(s)) if s.code == 403));
//! # Ok(()) }
//! ```
//!
//! The crate is organised by responsibility:
//!
//! - [`TestEnvBuilder`] says what to start; [`TestEnv`] is the running cluster, its accessors
//!   and its lifecycle ([`TestEnv::stop_apiserver`], [`TestEnv::restart_apiserver`], drop).
//! - Kubeconfigs and clients: [`TestEnv::kubeconfig_yaml`], [`merged_kubeconfig`],
//!   [`TestEnv::client`].
//! - Users and RBAC: [`TestEnvBuilder::user`], [`TestEnv::client_as`], [`TestEnv::grant`].
//! - Objects: [`TestEnv::create_namespace`], [`TestEnv::apply_yaml`], [`TestEnv::install_crds`].
//! - Faults and evidence: [`TestEnvBuilder::apiserver_arg`] (e.g. tiny in-flight limits),
//!   [`TestEnv::compact_etcd`], [`TestEnv::delete_from_etcd`], and the audit log of every
//!   write ([`TestEnvBuilder::audit`], [`TestEnv::audit`]); a [`Proxy`] a test blocks and
//!   unblocks between a client and an apiserver (a partition).
//! - Nodes: [`TestEnvBuilder::node`] declares one, [`TestEnv::start_node`] starts a kubelet and
//!   containerd of the same release ([`Node`]), with kube-scheduler and every controller;
//!   images come from archives ([`Node::import_image`]), Pods run with `hostNetwork`, and a
//!   [`ConnectionWitness`] tells every address their containers dialled.
//! - Waiting in tests: [`eventually`].
#![deny(unsafe_code)]

mod apply;
mod audit;
mod binaries;
mod builder;
mod certs;
mod env;
mod error;
pub mod fixtures;
mod helm;
mod host;
mod kubeconfig;
mod launch;
mod node;
mod process;
mod proxy;
mod users;
mod wait;

pub use audit::{AuditAlso, AuditEvent};
pub use binaries::{
    Binaries, NEWEST_KUBERNETES, OLDEST_KUBERNETES, cache_dir, kubectl, kubernetes_version,
};
pub use builder::TestEnvBuilder;
pub use env::TestEnv;
pub use error::Error;
pub use helm::helm;
pub use host::ConnectionWitness;
pub use kubeconfig::{KubeconfigEntry, kubeconfig_yaml, merged_kubeconfig};
pub use node::{Node, NodeBinaries};
pub use proxy::Proxy;
pub use wait::{POLL_INTERVAL, eventually};
