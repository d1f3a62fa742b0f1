//! The handle a reconciler gets: clusters, stores, watches, the queue and the counters.
//!
//! [`Context`]'s methods are grouped by what they touch: the clusters and the queue here, the
//! watch stores in [`store`](super::store), the watches in [`watches`](super::watches).

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::mpsc;

use super::metrics::Metrics;
use super::shared::{Msg, Shared};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::key::ObjectKey;

/// What a reconciler sees: the clusters, the watch stores and the runtime's state. Cheap to
/// clone; also available before and after [`Controller::run`](crate::runtime::Controller::run) via
/// [`Controller::context`](crate::runtime::Controller::context).
#[derive(Clone)]
pub struct Context {
    pub(super) shared: Arc<Shared>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

/// A [`Context`] that does not keep the runtime alive: for closures the runtime itself holds
/// (a watch's mapper that reads the stores), which would otherwise never be freed.
#[derive(Clone)]
pub struct WeakContext(Weak<Shared>);

impl fmt::Debug for WeakContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeakContext").finish_non_exhaustive()
    }
}

impl WeakContext {
    /// The context, while its controller (or another handle) still holds it.
    pub fn upgrade(&self) -> Option<Context> {
        self.0.upgrade().map(|shared| Context { shared })
    }
}

impl Context {
    /// A handle that does not keep this context alive (see [`WeakContext`]).
    pub fn downgrade(&self) -> WeakContext {
        WeakContext(Arc::downgrade(&self.shared))
    }

    /// A context with no clusters and no watches; `trigger` receives what it asks of the
    /// controller's loop.
    pub(super) fn new(trigger: mpsc::UnboundedSender<Msg>) -> Self {
        Self {
            shared: Arc::new(Shared {
                clusters: RwLock::new(BTreeMap::new()),
                stores: RwLock::new(Vec::new()),
                watches: RwLock::new(BTreeMap::new()),
                next_watch: AtomicU64::new(0),
                metrics: Metrics::default(),
                trigger,
            }),
        }
    }

    /// The cluster with this name.
    pub fn cluster(&self, name: &str) -> Option<Cluster> {
        self.shared.clusters.read().get(name).cloned()
    }

    /// The cluster with this name, or [`Error::UnknownCluster`].
    pub fn require_cluster(&self, name: &str) -> Result<Cluster> {
        self.cluster(name)
            .ok_or_else(|| Error::UnknownCluster(name.to_string()))
    }

    /// All registered clusters, by name.
    pub fn clusters(&self) -> Vec<Cluster> {
        self.shared.clusters.read().values().cloned().collect()
    }

    /// Registers (or replaces) a cluster while the controller runs, e.g. one named by a
    /// custom resource.
    pub fn add_cluster(&self, cluster: Cluster) {
        self.shared
            .clusters
            .write()
            .insert(cluster.name().to_string(), cluster);
    }

    /// Queues a key for reconciliation now (deduplicated with keys already queued).
    pub fn enqueue(&self, key: ObjectKey) {
        let _ = self.shared.trigger.send(Msg::Trigger(vec![key], None));
    }

    /// Queues a key for reconciliation after `delay`.
    pub fn enqueue_after(&self, key: ObjectKey, delay: Duration) {
        let _ = self
            .shared
            .trigger
            .send(Msg::Trigger(vec![key], Some(delay)));
    }

    /// The controller's counters.
    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }
}
