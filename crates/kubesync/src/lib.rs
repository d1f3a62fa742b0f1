//! kubesync keeps Kubernetes objects in sync between namespaces and between clusters.
//!
//! This crate is the engine. Its first layer is a **multi-cluster runtime**
//! ([`runtime`]): watch any number of resource types in any number of named [`Cluster`]s and
//! reconcile them from one work queue whose [`ObjectKey`]s carry the cluster.
//!
//! The crate enables no `k8s-openapi` version feature: the application that embeds it chooses
//! one (the `kubesync` binary uses `latest`). It supports and is tested on Kubernetes v1.33 to
//! v1.37 ([`version`]), and any kind can be handled as a
//! [`DynamicObject`](kube::api::DynamicObject).
#![forbid(unsafe_code)]

pub mod cluster;
pub mod error;
pub mod fence;
pub mod key;
pub mod object;
pub mod runtime;
pub mod syncer;
pub mod syncers;
mod text;
pub mod translate;
pub mod validate;
pub mod version;
pub mod writer;

pub use cluster::{ActAs, Cluster};
pub use error::{Error, Result};
pub use key::ObjectKey;
pub use runtime::{
    Action, Backoff, ClusterStatus, Context, Controller, Holding, Reconciler, Summary, Watch,
    WatchId, reconciler_fn,
};
pub use writer::{WriteKind, Writer};

/// The book's code samples (docs/src), compiled as doctests: "Embedding the library".
#[doc = include_str!("../../../docs/src/library/embedding.md")]
#[cfg(doctest)]
pub struct EmbeddingDoctests;

/// The book's code samples (docs/src), compiled as doctests: "Spec/status sync as a library".
#[doc = include_str!("../../../docs/src/library/spec-status.md")]
#[cfg(doctest)]
pub struct SpecStatusDoctests;

/// The book's code samples (docs/src), compiled as doctests: "Testing on real control planes".
#[doc = include_str!("../../../docs/src/library/testenv.md")]
#[cfg(doctest)]
pub struct TestenvDoctests;
