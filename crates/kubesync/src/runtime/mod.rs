//! The multi-cluster runtime: watches of one or more resource types in any number of named
//! clusters, feeding **one** work queue whose keys carry the cluster.
//!
//! ```text
//!  cluster "east" ──watch ConfigMap──┐                       ┌──► Reconciler::reconcile(key, ctx)
//!  cluster "west" ──watch ConfigMap──┼──► keys ──► WorkQueue ─┤       (bounded concurrency,
//!  cluster "west" ──watch Secret ─map┘  (cluster, group,      └──►     one run per key at a time)
//!                                        kind, ns, name)
//! ```
//!
//! - One reflector store per watch; the reconciler reads them through [`Context`].
//! - Keys of a cluster are reconciled only after every watch in that cluster has listed once;
//!   a cluster whose apiserver cannot be reached holds back only its own keys, and its state is
//!   visible through [`Context::cluster_status`].
//! - Per key: deduplication, at most one reconcile at a time, exponential [`Backoff`] after
//!   errors, [`Action::requeue`], and a periodic resync of every primary object.
//! - Watches fetch their initial state with a streaming list where the cluster's apiserver
//!   serves one, else with a list from the watch cache ([`ListStrategy`](crate::cluster::ListStrategy)).
//! - [`Controller::run`] returns after its shutdown future resolves and the reconciles in flight
//!   have finished; see [`shutdown_signal`].

mod context;
mod controller;
mod delivered;
mod metadata;
mod metrics;
mod objects;
mod queue;
mod reconciler;
mod reflect;
mod shared;
mod shutdown;
mod store;
mod watch;
mod watches;

pub use context::{Context, WeakContext};
pub use controller::Controller;
pub use metrics::{ClusterContact, HEARTBEAT, LastReconcile, Metrics};
pub use queue::Backoff;
pub use reconciler::{Action, ErrorCategory, FnReconciler, Reconciler, reconciler_fn};
pub use shutdown::shutdown_signal;
pub use watch::{Holding, KeepFull, Mapper, Summarize, Summary, Transform, Watch};
pub use watches::{ClusterStatus, WatchId};
