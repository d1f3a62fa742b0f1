//! Watches: starting and stopping them while the controller runs, and their health.

use std::sync::atomic::Ordering;

use super::context::Context;
use super::objects::ObjectsWriter;
use super::shared::{Msg, StoreEntry, WatchSpec, WatchState};
use super::watch::{Mapper, Watch};
use crate::error::{Error, Result};
use crate::key::ObjectKey;

/// Health of one cluster as seen by its watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterStatus {
    /// Every watch in the cluster has listed and the last request succeeded.
    Ready,
    /// Some watches have not listed yet (and none has failed).
    Syncing,
    /// The last request of a watch failed; keys of this cluster wait. The message is the
    /// error of the most recent failure.
    Unreachable(String),
    /// The cluster has no watches, or is not registered.
    Unknown,
}

/// Identifies a watch started with [`Context::start_watch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatchId(pub(super) usize);

impl WatchId {
    /// A watch id for tests of code that only stores and compares ids.
    #[cfg(test)]
    pub(crate) fn from_raw(id: usize) -> Self {
        Self(id)
    }
}

impl Context {
    /// The health of a cluster's watches.
    pub fn cluster_status(&self, cluster: &str) -> ClusterStatus {
        self.status_of(cluster, |_| true)
    }

    /// The health of a cluster's watches as a readiness probe judges it: `Syncing` until the
    /// watches the controller was built with have listed, `Unreachable` while any of its
    /// watches fails, else `Ready` — also while watches that reconciles started since (for a
    /// type a new declaration names, or restarted with another selector) have not listed
    /// yet: those hold only their own reconciles back, which wait for them.
    pub fn own_watches_status(&self, cluster: &str) -> ClusterStatus {
        self.status_of(cluster, |w| w.own)
    }

    /// The health of `cluster`'s watches; those `counted` must have listed to be `Ready`.
    fn status_of(&self, cluster: &str, counted: impl Fn(&WatchState) -> bool) -> ClusterStatus {
        let watches = self.shared.watches.read();
        let mine: Vec<&WatchState> = watches.values().filter(|w| w.cluster == cluster).collect();
        if mine.is_empty() {
            return ClusterStatus::Unknown;
        }
        if let Some(err) = mine.iter().find_map(|w| w.error.clone()) {
            return ClusterStatus::Unreachable(err);
        }
        if mine.iter().filter(|w| counted(w)).all(|w| w.listed) {
            ClusterStatus::Ready
        } else {
            ClusterStatus::Syncing
        }
    }

    pub(super) fn register_watch(
        &self,
        cluster: &str,
        watch: Watch,
        mapper: Option<Mapper>,
        own: bool,
    ) -> Result<WatchSpec> {
        let cluster = self.require_cluster(cluster)?;
        let id = usize::try_from(self.shared.next_watch.fetch_add(1, Ordering::Relaxed))
            .unwrap_or(usize::MAX);
        let writer = ObjectsWriter::new(watch.packed, watch.index_label.as_deref())
            .summarizing(watch.summarize.clone());
        self.shared.stores.write().push(StoreEntry {
            id,
            cluster: cluster.name().to_string(),
            resource: watch.resource.clone(),
            reader: writer.objects(),
            primary: mapper.is_none(),
            metadata_only: watch.metadata_only,
            mixed: watch.is_mixed(),
            transform: watch.transform.as_ref().map(|t| t.0.clone()),
        });
        self.shared.watches.write().insert(
            id,
            WatchState {
                cluster: cluster.name().to_string(),
                own,
                listed: false,
                error: None,
                failing_since: None,
                waiters: Vec::new(),
                fail_waiters: Default::default(),
            },
        );
        Ok(WatchSpec {
            id,
            cluster,
            watch,
            mapper,
            writer,
        })
    }

    /// Starts a watch while the controller runs (e.g. of a type the first declaration needing
    /// it names). With a `mapper` its events queue the keys the mapper returns; without, the
    /// keys of the objects themselves. Until [`Context::watch_listed`] says so, its store is
    /// incomplete: do not read absence from it. Unlike the watches given to the builder, it
    /// does not hold back the keys of its cluster.
    pub fn start_watch(
        &self,
        cluster: &str,
        watch: Watch,
        mapper: Option<Mapper>,
    ) -> Result<WatchId> {
        let spec = self.register_watch(cluster, watch, mapper, false)?;
        let id = spec.id;
        self.shared
            .trigger
            .send(Msg::Start(Box::new(spec)))
            .map_err(|_| Error::NotRunning)?;
        Ok(WatchId(id))
    }

    /// Stops a watch started with [`Context::start_watch`] and drops its store.
    pub fn stop_watch(&self, id: WatchId) {
        self.shared.stores.write().retain(|s| s.id != id.0);
        self.shared.watches.write().remove(&id.0);
        let _ = self.shared.trigger.send(Msg::Stop(id.0));
    }

    /// Whether a watch has completed its first list (its store can be trusted for absence).
    pub fn watch_listed(&self, id: WatchId) -> bool {
        self.shared
            .watches
            .read()
            .get(&id.0)
            .is_some_and(|w| w.listed)
    }

    /// Queues `key` once the watch has completed a list and has no error: at once if so, else
    /// when its next list completes. For a reconcile that found a watch not listed yet, or
    /// failing, and must look again when it lists (again), also when none of the listed
    /// objects maps to that key (no event would wake it).
    pub fn when_listed(&self, id: WatchId, key: ObjectKey) {
        let mut states = self.shared.watches.write();
        match states.get_mut(&id.0) {
            Some(w) if !w.listed || w.error.is_some() => w.waiters.push(key),
            // Listed, or stopped (nothing to wait for): look again now.
            _ => {
                drop(states);
                self.enqueue(key);
            }
        }
    }

    /// Queues `key` when the watch fails next (at once if it is failing now, or stopped): for a
    /// reconcile that depends on knowing promptly that a watch can no longer read (a source
    /// in another cluster, which is then unknown rather than current).
    pub fn when_failing(&self, id: WatchId, key: ObjectKey) {
        let mut states = self.shared.watches.write();
        match states.get_mut(&id.0) {
            Some(w) if w.error.is_none() => {
                w.fail_waiters.insert(key);
            }
            // Failing (or stopped): look now.
            _ => {
                drop(states);
                self.enqueue(key);
            }
        }
    }

    /// The error of a watch's last request, if it failed (e.g. forbidden, connection refused).
    pub fn watch_error(&self, id: WatchId) -> Option<String> {
        self.shared
            .watches
            .read()
            .get(&id.0)
            .and_then(|w| w.error.clone())
    }

    /// Since when a failing watch has failed: the time of its first failure after its last
    /// success (or since it started, if it never succeeded); `None` while it works.
    pub fn watch_failing_since(&self, id: WatchId) -> Option<std::time::SystemTime> {
        self.shared
            .watches
            .read()
            .get(&id.0)
            .and_then(|w| w.failing_since)
    }
}
