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
//! - Watches use list+watch (no streaming lists), so any apiserver from v1.20 on works.
//! - [`Controller::run`] returns after its shutdown future resolves and the reconciles in flight
//!   have finished; see [`shutdown_signal`].

mod queue;
mod watch;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::Instrument;

pub use queue::Backoff;
use queue::{Outcome, WorkQueue};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::key::ObjectKey;

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Done: reconcile again only when something changes (or at the periodic resync).
    pub fn done() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// Reconcile again after `delay`, even if nothing changes.
    pub fn requeue(delay: Duration) -> Self {
        Self {
            requeue_after: Some(delay),
        }
    }

    /// The requested delay, if any.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// Reconciles one key at a time. Implement it on a struct holding your own state, or wrap a
/// closure with [`reconciler_fn`].
///
/// Returning `Err` retries the key with exponential [`Backoff`]; the error is logged with its
/// key. A reconcile that panics counts as failed.
pub trait Reconciler: Send + Sync + 'static {
    /// The error type of a failed reconcile.
    type Error: fmt::Display + Send + 'static;

    /// Brings the world in line with the object behind `key` (which may no longer exist:
    /// check with [`Context::get`]).
    fn reconcile(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> impl Future<Output = std::result::Result<Action, Self::Error>> + Send;
}

/// A [`Reconciler`] made from a closure; see [`reconciler_fn`].
pub struct FnReconciler<F>(F);

/// Wraps `|key, ctx| async move { … }` as a [`Reconciler`].
pub fn reconciler_fn<F, Fut, E>(f: F) -> FnReconciler<F>
where
    F: Fn(ObjectKey, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Action, E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    FnReconciler(f)
}

impl<F, Fut, E> Reconciler for FnReconciler<F>
where
    F: Fn(ObjectKey, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Action, E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    type Error = E;

    fn reconcile(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> impl Future<Output = std::result::Result<Action, E>> + Send {
        (self.0)(key.clone(), ctx.clone())
    }
}

/// Maps an event on a secondary watch to keys of the primary objects it affects. Receives the
/// key and the object of the event (for a deletion, the last known state).
pub type Mapper = Arc<dyn Fn(&ObjectKey, &DynamicObject) -> Vec<ObjectKey> + Send + Sync>;

/// One watch: a resource type, optionally narrowed on the server by namespace and selectors.
#[derive(Clone, Debug)]
#[must_use]
pub struct Watch {
    resource: ApiResource,
    namespace: Option<String>,
    config: watcher::Config,
}

impl Watch {
    /// A watch of a typed resource (`ConfigMap`, a `#[derive(CustomResource)]` type, …).
    pub fn of<K: Resource<DynamicType = ()>>() -> Self {
        Self::dynamic(ApiResource::erase::<K>(&()))
    }

    /// A watch of any resource type described by an [`ApiResource`] (e.g. from discovery).
    ///
    /// Lists are served from the apiserver's watch cache (`resourceVersion=0`, one page), as
    /// client-go's informers do: no quorum read from etcd, no paging through it. The list may
    /// be a moment old; the watch that follows starts at its resourceVersion, so every later
    /// change still arrives. Decisions to delete are never taken from a store's absence
    /// alone (see [`Context::confirm_absent`]).
    pub fn dynamic(resource: ApiResource) -> Self {
        let mut config = watcher::Config::default().any_semantic();
        config.page_size = None;
        Self {
            resource,
            namespace: None,
            config,
        }
    }

    /// Watches only this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Watches only objects matching this label selector (server-side).
    pub fn labels(mut self, selector: &str) -> Self {
        self.config = self.config.labels(selector);
        self
    }

    /// Watches only objects matching this field selector (server-side).
    pub fn fields(mut self, selector: &str) -> Self {
        self.config = self.config.fields(selector);
        self
    }

    /// The watched resource type.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The watcher configuration (list semantics, selectors) this watch runs with.
    pub fn config(&self) -> &watcher::Config {
        &self.config
    }
}

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

#[derive(Clone, Debug)]
struct WatchState {
    cluster: String,
    listed: bool,
    error: Option<String>,
}

struct StoreEntry {
    id: usize,
    cluster: String,
    resource: ApiResource,
    reader: Store<DynamicObject>,
    primary: bool,
}

/// Identifies a watch started with [`Context::start_watch`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatchId(usize);

impl WatchId {
    /// A watch id for tests of code that only stores and compares ids.
    #[cfg(test)]
    pub(crate) fn from_raw(id: usize) -> Self {
        Self(id)
    }
}

/// Counters of a running controller.
#[derive(Debug, Default)]
pub struct Metrics {
    reconciles: AtomicU64,
    failures: AtomicU64,
    queued: AtomicU64,
    in_flight: AtomicU64,
    failing: AtomicU64,
    /// When the controller's loop last turned, in milliseconds since [`epoch`] plus one
    /// (0: never).
    last_turn: AtomicU64,
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
        self.failures.load(Ordering::Relaxed)
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
    /// How long ago the controller's loop last turned; `None` before it started. The loop
    /// turns on every event, and at least every [`HEARTBEAT`] while idle, so a value well
    /// above that means the loop is stuck (a liveness probe's question).
    pub fn idle_for(&self) -> Option<Duration> {
        let at = self.last_turn.load(Ordering::Relaxed);
        let at = epoch() + Duration::from_millis(at.checked_sub(1)?);
        Some(Instant::now().saturating_duration_since(at))
    }
}

struct Shared {
    clusters: RwLock<BTreeMap<String, Cluster>>,
    stores: RwLock<Vec<StoreEntry>>,
    watches: RwLock<BTreeMap<usize, WatchState>>,
    next_watch: AtomicU64,
    metrics: Metrics,
    trigger: mpsc::UnboundedSender<Msg>,
}

/// What a reconciler sees: the clusters, the watch stores and the runtime's state. Cheap to
/// clone; also available before and after [`Controller::run`] via [`Controller::context`].
#[derive(Clone)]
pub struct Context {
    shared: Arc<Shared>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}

impl Context {
    /// The cluster with this name.
    pub fn cluster(&self, name: &str) -> Option<Cluster> {
        read(&self.shared.clusters).get(name).cloned()
    }

    /// The cluster with this name, or [`Error::UnknownCluster`].
    pub fn require_cluster(&self, name: &str) -> Result<Cluster> {
        self.cluster(name)
            .ok_or_else(|| Error::UnknownCluster(name.to_string()))
    }

    /// All registered clusters, by name.
    pub fn clusters(&self) -> Vec<Cluster> {
        read(&self.shared.clusters).values().cloned().collect()
    }

    /// The object behind `key` as last seen by a watch, or `None` if no watch holds it.
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<DynamicObject>> {
        let stores = read(&self.shared.stores);
        stores
            .iter()
            .filter(|s| s.cluster == key.cluster && key.is_of(&s.resource))
            .find_map(|s| {
                let r = kube::runtime::reflector::ObjectRef::<DynamicObject>::new_with(
                    &key.name,
                    s.resource.clone(),
                );
                let r = match &key.namespace {
                    Some(ns) => r.within(ns),
                    None => r,
                };
                s.reader.get(&r)
            })
    }

    /// Like [`Context::get`], converted to a typed resource.
    pub fn get_as<K>(&self, key: &ObjectKey) -> Result<Option<K>>
    where
        K: Resource + serde::de::DeserializeOwned,
    {
        let Some(obj) = self.get(key) else {
            return Ok(None);
        };
        (*obj)
            .clone()
            .try_parse::<K>()
            .map(Some)
            .map_err(|e| Error::Convert {
                key: key.to_string(),
                target: std::any::type_name::<K>(),
                message: e.to_string(),
            })
    }

    /// Every object of this type that watches of this cluster hold.
    pub fn list(&self, cluster: &str, resource: &ApiResource) -> Vec<Arc<DynamicObject>> {
        let stores = read(&self.shared.stores);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for s in stores.iter().filter(|s| {
            s.cluster == cluster
                && s.resource.group == resource.group
                && s.resource.kind == resource.kind
        }) {
            for obj in s.reader.state() {
                if seen.insert((obj.metadata.namespace.clone(), obj.metadata.name.clone())) {
                    out.push(obj);
                }
            }
        }
        out
    }

    /// A dynamic API handle for objects of `resource` in `cluster` (namespaced if `namespace`).
    pub fn api(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>> {
        let client = self.require_cluster(cluster)?.client().clone();
        Ok(crate::cluster::api(client, namespace, resource))
    }

    /// Whether the object behind `key` is really absent from its cluster, by a live read.
    ///
    /// Stores are filled by separate watches and may be a moment behind the cluster (or behind
    /// each other); a decision to delete *because something is missing* is confirmed with
    /// this first. A failed read is an error, never "absent".
    pub async fn confirm_absent(&self, key: &ObjectKey, resource: &ApiResource) -> Result<bool> {
        let api = self.api(&key.cluster, resource, key.namespace.as_deref())?;
        Ok(api.get_metadata_opt(&key.name).await?.is_none())
    }

    /// The health of a cluster's watches.
    pub fn cluster_status(&self, cluster: &str) -> ClusterStatus {
        let watches = read(&self.shared.watches);
        let mine: Vec<&WatchState> = watches.values().filter(|w| w.cluster == cluster).collect();
        if mine.is_empty() {
            return ClusterStatus::Unknown;
        }
        if let Some(err) = mine.iter().find_map(|w| w.error.clone()) {
            return ClusterStatus::Unreachable(err);
        }
        if mine.iter().all(|w| w.listed) {
            ClusterStatus::Ready
        } else {
            ClusterStatus::Syncing
        }
    }

    fn register_watch(
        &self,
        cluster: &str,
        watch: Watch,
        mapper: Option<Mapper>,
    ) -> Result<WatchSpec> {
        let cluster = self.require_cluster(cluster)?;
        let id = usize::try_from(self.shared.next_watch.fetch_add(1, Ordering::Relaxed))
            .unwrap_or(usize::MAX);
        let writer = kube::runtime::reflector::store::Writer::new(watch.resource.clone());
        write(&self.shared.stores).push(StoreEntry {
            id,
            cluster: cluster.name().to_string(),
            resource: watch.resource.clone(),
            reader: writer.as_reader(),
            primary: mapper.is_none(),
        });
        write(&self.shared.watches).insert(
            id,
            WatchState {
                cluster: cluster.name().to_string(),
                listed: false,
                error: None,
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

    /// Registers (or replaces) a cluster while the controller runs, e.g. one named by a
    /// custom resource.
    pub fn add_cluster(&self, cluster: Cluster) {
        write(&self.shared.clusters).insert(cluster.name().to_string(), cluster);
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
        let spec = self.register_watch(cluster, watch, mapper)?;
        let id = spec.id;
        self.shared
            .trigger
            .send(Msg::Start(Box::new(spec)))
            .map_err(|_| Error::NotRunning)?;
        Ok(WatchId(id))
    }

    /// Stops a watch started with [`Context::start_watch`] and drops its store.
    pub fn stop_watch(&self, id: WatchId) {
        write(&self.shared.stores).retain(|s| s.id != id.0);
        write(&self.shared.watches).remove(&id.0);
        let _ = self.shared.trigger.send(Msg::Stop(id.0));
    }

    /// Whether a watch has completed its first list (its store can be trusted for absence).
    pub fn watch_listed(&self, id: WatchId) -> bool {
        read(&self.shared.watches)
            .get(&id.0)
            .is_some_and(|w| w.listed)
    }

    /// The error of a watch's last request, if it failed (e.g. forbidden, connection refused).
    pub fn watch_error(&self, id: WatchId) -> Option<String> {
        read(&self.shared.watches)
            .get(&id.0)
            .and_then(|w| w.error.clone())
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

pub(crate) enum Msg {
    Trigger(Vec<ObjectKey>, Option<Duration>),
    Listed(usize),
    Start(Box<WatchSpec>),
    Stop(usize),
}

pub(crate) struct WatchSpec {
    id: usize,
    cluster: Cluster,
    watch: Watch,
    mapper: Option<Mapper>,
    writer: kube::runtime::reflector::store::Writer<DynamicObject>,
}

/// Builds and runs a multi-cluster controller.
///
/// ```no_run
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubesync::{Action, Cluster, Controller, Watch, reconciler_fn, runtime::shutdown_signal};
///
/// # async fn demo() -> Result<(), kubesync::Error> {
/// let east = Cluster::from_context("east").await?;
/// let west = Cluster::from_context("west").await?;
/// Controller::new()
///     .cluster(east.clone())
///     .cluster(west.clone())
///     .watch("east", Watch::of::<ConfigMap>())?
///     .watch("west", Watch::of::<ConfigMap>().labels("app=web"))?
///     .run(
///         reconciler_fn(|key, ctx| async move {
///             let exists = ctx.get(&key).is_some();
///             println!("{key} exists={exists}");
///             Ok::<_, kubesync::Error>(Action::done())
///         }),
///         shutdown_signal(),
///     )
///     .await
/// # }
/// ```
#[must_use]
pub struct Controller {
    ctx: Context,
    rx: mpsc::UnboundedReceiver<Msg>,
    watches: Vec<WatchSpec>,
    concurrency: usize,
    backoff: Backoff,
    resync: Option<Duration>,
    dependencies: Vec<(String, String)>,
}

impl Default for Controller {
    fn default() -> Self {
        Self::new()
    }
}

impl Controller {
    /// A controller with no clusters, concurrency 16, default [`Backoff`] and a resync every
    /// 10 minutes.
    pub fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Self {
            ctx: Context {
                shared: Arc::new(Shared {
                    clusters: RwLock::new(BTreeMap::new()),
                    stores: RwLock::new(Vec::new()),
                    watches: RwLock::new(BTreeMap::new()),
                    next_watch: AtomicU64::new(0),
                    metrics: Metrics::default(),
                    trigger: tx,
                }),
            },
            rx,
            watches: Vec::new(),
            concurrency: 16,
            backoff: Backoff::default(),
            resync: Some(Duration::from_secs(600)),
            dependencies: Vec::new(),
        }
    }

    /// Keys of `cluster` are reconciled only once the watches of `on` have listed too (by
    /// default a key waits only for its own cluster). A syncer's source keys depend on the
    /// target cluster, whose stores they read.
    pub fn depends_on(mut self, cluster: &str, on: &str) -> Self {
        self.dependencies
            .push((cluster.to_string(), on.to_string()));
        self
    }

    /// Registers a cluster (replacing one of the same name).
    pub fn cluster(self, cluster: Cluster) -> Self {
        write(&self.ctx.shared.clusters).insert(cluster.name().to_string(), cluster);
        self
    }

    /// Adds a primary watch in `cluster`: each event queues the key of the object itself.
    pub fn watch(self, cluster: &str, watch: Watch) -> Result<Self> {
        self.add_watch(cluster, watch, None)
    }

    /// Adds a secondary watch in `cluster`: each event queues the keys `mapper` returns (keys
    /// of primary objects, in any cluster).
    pub fn watch_mapped<F>(self, cluster: &str, watch: Watch, mapper: F) -> Result<Self>
    where
        F: Fn(&ObjectKey, &DynamicObject) -> Vec<ObjectKey> + Send + Sync + 'static,
    {
        self.add_watch(cluster, watch, Some(Arc::new(mapper)))
    }

    fn add_watch(mut self, cluster: &str, watch: Watch, mapper: Option<Mapper>) -> Result<Self> {
        let spec = self.ctx.register_watch(cluster, watch, mapper)?;
        self.watches.push(spec);
        Ok(self)
    }

    /// At most `n` reconciles run at once (at least 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The retry delays after errors.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How often every primary object is reconciled even without events (`None`: never).
    pub fn resync(mut self, every: Option<Duration>) -> Self {
        self.resync = every;
        self
    }

    /// The context the reconciler will see (for health endpoints, tests, external triggers).
    pub fn context(&self) -> Context {
        self.ctx.clone()
    }

    /// Runs until `shutdown` resolves; then stops starting reconciles, waits for the ones in
    /// flight, stops the watches and returns.
    pub async fn run<R, S>(self, reconciler: R, shutdown: S) -> Result<()>
    where
        R: Reconciler,
        S: Future<Output = ()> + Send,
    {
        let Controller {
            ctx,
            mut rx,
            watches,
            concurrency,
            backoff,
            resync,
            dependencies,
        } = self;
        if watches.is_empty() {
            return Err(Error::Config("the controller has no watches".into()));
        }
        let reconciler = Arc::new(reconciler);
        let mut queue = WorkQueue::new(backoff);
        for (cluster, on) in &dependencies {
            queue.depends_on(cluster, on);
        }
        let mut watch_tasks = JoinSet::new();
        let mut watch_aborts: HashMap<usize, tokio::task::AbortHandle> = HashMap::new();
        let mut unlisted: HashMap<String, HashSet<usize>> = HashMap::new();
        for spec in &watches {
            unlisted
                .entry(spec.cluster.name().to_string())
                .or_default()
                .insert(spec.id);
        }
        for spec in watches {
            let ctx = ctx.clone();
            let span = tracing::info_span!(
                "watch",
                cluster = spec.cluster.name(),
                kind = %spec.watch.resource.kind,
                group = %spec.watch.resource.group
            );
            let id = spec.id;
            watch_aborts.insert(
                id,
                watch_tasks.spawn(watch::run(spec, ctx).instrument(span)),
            );
        }

        let mut inflight: JoinSet<(ObjectKey, Outcome)> = JoinSet::new();
        let mut resync_timer = resync.map(|every| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let shutdown = shutdown.fuse();
        tokio::pin!(shutdown);
        loop {
            // Hand out due keys while there is capacity.
            while inflight.len() < concurrency {
                let Some(key) = queue.pop(Instant::now()) else {
                    break;
                };
                let r = reconciler.clone();
                let c = ctx.clone();
                let span = tracing::info_span!("reconcile", key = %key);
                inflight.spawn(
                    async move {
                        let started = Instant::now();
                        let result = AssertUnwindSafe(r.reconcile(&key, &c)).catch_unwind().await;
                        let outcome = match result {
                            Ok(Ok(action)) => {
                                tracing::debug!(
                                    elapsed_ms = started.elapsed().as_millis() as u64,
                                    "reconciled"
                                );
                                match action.requeue_after {
                                    Some(d) => Outcome::RequeueAfter(d),
                                    None => Outcome::Done,
                                }
                            }
                            Ok(Err(e)) => {
                                tracing::warn!(error = %e, "reconcile failed");
                                Outcome::Failed
                            }
                            Err(_) => {
                                tracing::error!("reconcile panicked");
                                Outcome::Failed
                            }
                        };
                        (key, outcome)
                    }
                    .instrument(span),
                );
            }
            update_metrics(&ctx, &queue, inflight.len());
            let next_due = if inflight.len() < concurrency {
                queue.next_due()
            } else {
                None
            };
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(done) = inflight.join_next() => complete(&ctx, &mut queue, done),
                Some(msg) = rx.recv() => {
                    let now = Instant::now();
                    match msg {
                        Msg::Trigger(keys, delay) => {
                            for key in keys {
                                queue.schedule(key, now + delay.unwrap_or_default());
                            }
                        }
                        Msg::Start(spec) => {
                            let span = tracing::info_span!(
                                "watch",
                                cluster = spec.cluster.name(),
                                kind = %spec.watch.resource.kind,
                                group = %spec.watch.resource.group
                            );
                            let id = spec.id;
                            if read(&ctx.shared.watches).contains_key(&id) {
                                watch_aborts.insert(id, watch_tasks.spawn(watch::run(*spec, ctx.clone()).instrument(span)));
                            }
                        }
                        Msg::Stop(id) => {
                            if let Some(handle) = watch_aborts.remove(&id) {
                                handle.abort();
                            }
                        }
                        Msg::Listed(id) => {
                            let cluster = read(&ctx.shared.watches).get(&id).map(|w| w.cluster.clone());
                            if let Some(cluster) = cluster {
                                // Builder-time watches hold back their cluster until all have
                                // listed; a cluster with only run-time watches is ready once
                                // one of them has.
                                let pending = unlisted.entry(cluster.clone()).or_default();
                                pending.remove(&id);
                                if pending.is_empty() {
                                    tracing::info!(cluster = %cluster, "all watches listed; reconciling");
                                    queue.cluster_ready(&cluster, now);
                                }
                            }
                        }
                    }
                }
                () = sleep_until(next_due) => {}
                _ = heartbeat.tick() => {}
                _ = tick(&mut resync_timer) => {
                    let now = Instant::now();
                    let stores = read(&ctx.shared.stores);
                    for s in stores.iter().filter(|s| s.primary) {
                        for obj in s.reader.state() {
                            queue.schedule(ObjectKey::for_object(&s.cluster, &s.resource, &obj), now);
                        }
                    }
                }
            }
        }
        tracing::info!(
            in_flight = inflight.len(),
            "shutting down: waiting for reconciles in flight"
        );
        while let Some(done) = inflight.join_next().await {
            complete(&ctx, &mut queue, done);
        }
        watch_tasks.shutdown().await;
        update_metrics(&ctx, &queue, 0);
        tracing::info!("controller stopped");
        Ok(())
    }
}

fn complete(
    ctx: &Context,
    queue: &mut WorkQueue,
    done: std::result::Result<(ObjectKey, Outcome), tokio::task::JoinError>,
) {
    let Ok((key, outcome)) = done else {
        // Reconcile panics are caught inside the task; a JoinError means it was aborted.
        return;
    };
    ctx.shared
        .metrics
        .reconciles
        .fetch_add(1, Ordering::Relaxed);
    if outcome == Outcome::Failed {
        ctx.shared.metrics.failures.fetch_add(1, Ordering::Relaxed);
    }
    if let Some(delay) = queue.finish(&key, outcome, Instant::now()) {
        tracing::debug!(key = %key, delay_ms = delay.as_millis() as u64, "retrying after backoff");
    }
}

fn update_metrics(ctx: &Context, queue: &WorkQueue, in_flight: usize) {
    let m = &ctx.shared.metrics;
    m.queued.store(queue.len() as u64, Ordering::Relaxed);
    m.in_flight.store(in_flight as u64, Ordering::Relaxed);
    m.failing.store(queue.failing() as u64, Ordering::Relaxed);
    let since = u64::try_from(
        Instant::now()
            .saturating_duration_since(epoch())
            .as_millis(),
    )
    .unwrap_or(u64::MAX - 1);
    m.last_turn.store(since + 1, Ordering::Relaxed);
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn tick(timer: &mut Option<tokio::time::Interval>) {
    match timer {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// A future that resolves on SIGTERM or Ctrl-C (SIGINT), for [`Controller::run`].
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
    tracing::info!("shutdown signal received");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_list_from_the_watch_cache_in_one_page() {
        let w = Watch::dynamic(ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
            "widgets",
        ))
        .labels("a=b");
        // resourceVersion=0 (kube-rs sends it only without a limit): served from the
        // apiserver's watch cache, not read from etcd page by page.
        assert_eq!(w.config.list_semantic, watcher::ListSemantic::Any);
        assert_eq!(w.config.page_size, None);
        assert_eq!(w.config.label_selector.as_deref(), Some("a=b"));
    }
}
