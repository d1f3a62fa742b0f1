//! The controller's counters, read by health endpoints and metrics exporters.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Counters of a running controller.
#[derive(Debug, Default)]
pub struct Metrics {
    reconciles: AtomicU64,
    /// Failures by category (bounded: categories are `&'static str`).
    failures_by_category: Mutex<BTreeMap<&'static str, u64>>,
    queued: AtomicU64,
    in_flight: AtomicU64,
    failing: AtomicU64,
    /// When the controller's loop last turned, in milliseconds since [`epoch`] plus one
    /// (0: never).
    last_turn: AtomicU64,
    /// Per cluster: watch restarts and last contact (bounded: one entry per cluster).
    clusters: Mutex<BTreeMap<String, Arc<ClusterContact>>>,
    /// The last finished reconcile of each key whose object exists (bounded by the primary
    /// objects: a key reconciled while its object is gone is dropped).
    last: Mutex<HashMap<crate::ObjectKey, LastReconcile>>,
}

/// The last finished reconcile of one key ([`Metrics::last_reconcile`]): a witness that a
/// reconcile of *this* object decided on *this* version of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastReconcile {
    /// When it began.
    pub started: Instant,
    /// When it ended.
    pub finished: Instant,
    /// The resourceVersion of the key's object in the store as it began.
    pub resource_version: String,
    /// It returned an error or panicked.
    pub failed: bool,
}

/// How one cluster answers the runtime's watches: restarts and the last successful contact.
/// Updated by the watch tasks without locks.
#[derive(Debug, Default)]
pub struct ClusterContact {
    restarts: AtomicU64,
    /// Milliseconds since the Unix epoch of the last successful contact, plus one (0: never).
    last_contact: AtomicU64,
}

impl ClusterContact {
    /// A watch of the cluster failed or expired, and starts again.
    pub fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// The cluster answered now (a list, a watch event, a probe).
    pub fn contacted(&self) {
        let ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX - 1));
        self.last_contact.store(ms + 1, Ordering::Relaxed);
    }

    /// Watches of the cluster that failed or expired and started again.
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// When the cluster last answered; `None` if never.
    pub fn last_contact(&self) -> Option<SystemTime> {
        let ms = self.last_contact.load(Ordering::Relaxed).checked_sub(1)?;
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }
}

/// A process-wide reference instant for [`Metrics::idle_for`].
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// How often an idle controller's loop turns anyway, so that [`Metrics::idle_for`] stays small
/// while the controller is alive.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

impl Metrics {
    /// Reconciles completed (successful or not).
    pub fn reconciles(&self) -> u64 {
        self.reconciles.load(Ordering::Relaxed)
    }
    /// Reconciles that returned an error or panicked.
    pub fn failures(&self) -> u64 {
        self.failures_by_category().values().sum()
    }
    /// Failed reconciles by the error's category (see
    /// [`ErrorCategory`](super::ErrorCategory); `Panic` for a reconcile that panicked): a
    /// bounded metric label, as kube-rs/controller-rs labels its failures.
    pub fn failures_by_category(&self) -> BTreeMap<&'static str, u64> {
        self.failures_by_category.lock().clone()
    }
    /// Keys waiting in the queue (including keys of clusters that are not ready).
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }
    /// Reconciles running now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
    /// Keys whose last reconcile failed (waiting for a retry).
    pub fn failing(&self) -> u64 {
        self.failing.load(Ordering::Relaxed)
    }
    /// The contact record of `cluster` (created on first use).
    pub fn cluster(&self, cluster: &str) -> Arc<ClusterContact> {
        let mut clusters = self.clusters.lock();
        clusters.entry(cluster.to_string()).or_default().clone()
    }

    /// Every cluster's contact record, by name.
    pub fn clusters(&self) -> BTreeMap<String, Arc<ClusterContact>> {
        self.clusters.lock().clone()
    }

    /// How long ago the controller's loop last turned; `None` before it started. The loop
    /// turns on every event, and at least every [`HEARTBEAT`] while idle, so a value well
    /// above that means the loop is stuck (a liveness probe's question).
    pub fn idle_for(&self) -> Option<Duration> {
        let at = self.last_turn.load(Ordering::Relaxed);
        let at = epoch() + Duration::from_millis(at.checked_sub(1)?);
        Some(Instant::now().saturating_duration_since(at))
    }
}

impl Metrics {
    /// The last finished reconcile of `key` (while its object exists): when it began and
    /// ended, and which version of the object the store showed as it began.
    pub fn last_reconcile(&self, key: &crate::ObjectKey) -> Option<LastReconcile> {
        self.last.lock().get(key).cloned()
    }

    /// A reconcile of `key` that began at `started` on a store showing its object at
    /// `version` (`None`: gone) ended now.
    pub(super) fn reconciled(
        &self,
        key: &crate::ObjectKey,
        (started, version): (Instant, Option<String>),
        failed: bool,
    ) {
        let mut last = self.last.lock();
        match version {
            Some(resource_version) => {
                let finished = Instant::now();
                let mark = LastReconcile {
                    started,
                    finished,
                    resource_version,
                    failed,
                };
                last.insert(key.clone(), mark);
            }
            None => {
                last.remove(key);
            }
        }
    }

    /// Counts a finished reconcile and, for a failure, its category.
    pub(super) fn count_reconcile(&self, failure: Option<&'static str>) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if let Some(category) = failure {
            *self
                .failures_by_category
                .lock()
                .entry(category)
                .or_insert(0) += 1;
        }
    }

    /// The loop turned: the queue's and the reconciles' current numbers.
    pub(super) fn turned(&self, queued: usize, in_flight: usize, failing: usize) {
        self.queued.store(queued as u64, Ordering::Relaxed);
        self.in_flight.store(in_flight as u64, Ordering::Relaxed);
        self.failing.store(failing as u64, Ordering::Relaxed);
        let since = u64::try_from(
            Instant::now()
                .saturating_duration_since(epoch())
                .as_millis(),
        )
        .unwrap_or(u64::MAX - 1);
        self.last_turn.store(since + 1, Ordering::Relaxed);
    }
}
