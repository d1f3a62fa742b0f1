//! The state the context, the watch tasks and the controller's loop share (data only).

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use tokio::sync::mpsc;

use super::metrics::Metrics;
use super::objects::{Objects, ObjectsWriter};
use super::watch::{Mapper, Watch};
use crate::cluster::Cluster;
use crate::key::ObjectKey;

/// What every handle of one controller shares.
pub(super) struct Shared {
    pub(super) clusters: RwLock<BTreeMap<String, Cluster>>,
    pub(super) stores: RwLock<Vec<StoreEntry>>,
    pub(super) watches: RwLock<BTreeMap<usize, WatchState>>,
    pub(super) next_watch: AtomicU64,
    pub(super) metrics: Metrics,
    pub(super) trigger: mpsc::UnboundedSender<Msg>,
}

/// One watch's store.
pub(super) struct StoreEntry {
    pub(super) id: usize,
    pub(super) cluster: String,
    pub(super) resource: ApiResource,
    pub(super) reader: Objects,
    pub(super) primary: bool,
    /// The store holds only metadata ([`Watch::metadata_only`]).
    pub(super) metadata_only: bool,
    /// The store holds some objects in full and the others as metadata only
    /// ([`Watch::full_only_for`]).
    pub(super) mixed: bool,
    /// What the watch does to each object it keeps in full ([`Watch::transform`]).
    pub(super) transform: Option<super::watch::Transform>,
}

impl StoreEntry {
    /// Whether this store may hold objects in full (`full`) or as metadata only.
    pub(super) fn serves(&self, full: bool) -> bool {
        self.mixed || self.metadata_only != full
    }

    /// Whether this store holds objects of `resource`'s group and kind in `cluster`, for a
    /// reader of full objects (`full`) or of metadata.
    pub(super) fn serves_kind(&self, full: bool, cluster: &str, resource: &ApiResource) -> bool {
        self.serves(full)
            && self.cluster == cluster
            && crate::key::is_kind_of(&self.resource.group, &self.resource.kind, resource)
    }

    /// Whether `obj`, held here, is shown to a reader of full objects (`full`) or of
    /// metadata: in a mixed store, an object held as metadata is not shown as full.
    pub(super) fn shows(&self, obj: &DynamicObject, full: bool) -> bool {
        !(full && self.mixed && obj.data.is_null())
    }
}

/// What is known of one watch.
#[derive(Clone, Debug)]
pub(super) struct WatchState {
    pub(super) cluster: String,
    /// Given to the controller's builder (not started later by a reconcile).
    pub(super) own: bool,
    pub(super) listed: bool,
    pub(super) error: Option<String>,
    /// Since when its requests have failed (the first failure after a success).
    pub(super) failing_since: Option<std::time::SystemTime>,
    /// Keys to queue when a list completes: the first, or the next after a failure
    /// ([`Context::when_listed`]).
    ///
    /// [`Context::when_listed`]: super::Context::when_listed
    pub(super) waiters: Vec<ObjectKey>,
    /// Keys to queue when it fails next ([`Context::when_failing`]).
    ///
    /// [`Context::when_failing`]: super::Context::when_failing
    pub(super) fail_waiters: std::collections::HashSet<ObjectKey>,
}

/// A registered watch, ready to be run by the controller's loop.
pub(super) struct WatchSpec {
    pub(super) id: usize,
    pub(super) cluster: Cluster,
    pub(super) watch: Watch,
    pub(super) mapper: Option<Mapper>,
    pub(super) writer: ObjectsWriter,
}

/// What the context and the watch tasks ask of the controller's loop.
pub(super) enum Msg {
    Trigger(Vec<ObjectKey>, Option<Duration>),
    Listed(usize),
    Start(Box<WatchSpec>),
    Stop(usize),
}

/// An object's identity within a store of one type: namespace and name.
pub(super) type ObjectId = (Option<String>, Option<String>);

/// The identity of `obj` in its store.
pub(super) fn id_of(obj: &DynamicObject) -> ObjectId {
    (obj.metadata.namespace.clone(), obj.metadata.name.clone())
}
