//! The controller: its builder, and the loop that runs watches and reconciles.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use kube::api::DynamicObject;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tracing::Instrument;

use super::context::Context;
use super::metrics::HEARTBEAT;
use super::queue::{Backoff, Outcome, WorkQueue};
use super::reconciler::{ErrorCategory, Reconciler};
use super::reflect;
use super::shared::{Msg, WatchSpec};
use super::watch::{Mapper, Watch};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::key::ObjectKey;

/// Builds and runs a multi-cluster controller.
///
/// ```
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kubesync::{Action, Cluster, Controller, Watch, reconciler_fn};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let (e, w) = tokio::join!(
/// #     kubesync_testenv::TestEnv::builder().name("east").start(),
/// #     kubesync_testenv::TestEnv::builder().name("west").start()
/// # );
/// # let (e, w) = (e?, w?);
/// # e.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: default}\n").await?;
/// # let kubeconfig = e.dir().join("both.kubeconfig");
/// # std::fs::write(&kubeconfig, kubesync_testenv::merged_kubeconfig(&[&e, &w]))?;
/// // `kubeconfig`: a kubeconfig file with the contexts `east` and `west`.
/// let east = Cluster::from_kubeconfig_file(&kubeconfig, Some("east")).await?;
/// let west = Cluster::from_kubeconfig_file(&kubeconfig, Some("west")).await?;
/// let (reconciled, mut first) = tokio::sync::mpsc::unbounded_channel();
/// Controller::new()
///     .cluster(east.clone())
///     .cluster(west.clone())
///     .watch("east", Watch::of::<ConfigMap>())?
///     .watch("west", Watch::of::<ConfigMap>().labels("app=web"))?
///     .run(
///         reconciler_fn(move |key, ctx| {
///             let reconciled = reconciled.clone();
///             async move {
///                 let exists = ctx.get(&key).is_some();
///                 println!("{key} exists={exists}");
///                 let _ = reconciled.send(key);
///                 Ok::<_, kubesync::Error>(Action::done())
///             }
///         }),
///         // An operator runs until SIGTERM (`runtime::shutdown_signal()`); this example until
///         // its first reconcile.
///         async move {
///             first.recv().await;
///         },
///     )
///     .await?;
/// # Ok(()) }
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
            ctx: Context::new(tx),
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
        self.ctx
            .shared
            .clusters
            .write()
            .insert(cluster.name().to_string(), cluster);
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
        let spec = self.ctx.register_watch(cluster, watch, mapper, true)?;
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
        let mut watch_tasks = WatchTasks::default();
        for spec in watches {
            watch_tasks.start_held(spec, &ctx);
        }
        let mut inflight: JoinSet<Finished> = JoinSet::new();
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
                spawn_reconcile(&mut inflight, &reconciler, key, &ctx);
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
                Some(msg) = rx.recv() => handle(msg, &ctx, &mut queue, &mut watch_tasks),
                () = sleep_until(next_due) => {}
                _ = heartbeat.tick() => {}
                _ = tick(&mut resync_timer) => resync_all(&ctx, &mut queue),
            }
        }
        tracing::info!(
            in_flight = inflight.len(),
            "shutting down: waiting for reconciles in flight"
        );
        while let Some(done) = inflight.join_next().await {
            complete(&ctx, &mut queue, done);
        }
        watch_tasks.tasks.shutdown().await;
        update_metrics(&ctx, &queue, 0);
        tracing::info!("controller stopped");
        Ok(())
    }
}

/// The running watch tasks, and the builder-time watches that have not listed yet.
#[derive(Default)]
struct WatchTasks {
    tasks: JoinSet<()>,
    aborts: HashMap<usize, AbortHandle>,
    /// Builder-time watches hold back their cluster's keys until all of them have listed.
    unlisted: HashMap<String, HashSet<usize>>,
}

impl WatchTasks {
    /// Starts a builder-time watch: its cluster's keys wait for its first list.
    fn start_held(&mut self, spec: WatchSpec, ctx: &Context) {
        self.unlisted
            .entry(spec.cluster.name().to_string())
            .or_default()
            .insert(spec.id);
        self.start(spec, ctx);
    }

    /// Starts the task of one watch.
    fn start(&mut self, spec: WatchSpec, ctx: &Context) {
        let span = tracing::info_span!(
            "watch",
            cluster = spec.cluster.name(),
            kind = %spec.watch.resource.kind,
            group = %spec.watch.resource.group
        );
        let id = spec.id;
        let handle = self
            .tasks
            .spawn(reflect::run(spec, ctx.clone()).instrument(span));
        self.aborts.insert(id, handle);
    }

    fn stop(&mut self, id: usize) {
        if let Some(handle) = self.aborts.remove(&id) {
            handle.abort();
        }
    }

    /// Watch `id` of `cluster` has listed: whether the cluster's keys may now be reconciled
    /// (all its builder-time watches have listed; a cluster with only run-time watches is
    /// ready once one of them has).
    fn listed(&mut self, cluster: &str, id: usize) -> bool {
        let pending = self.unlisted.entry(cluster.to_string()).or_default();
        pending.remove(&id);
        pending.is_empty()
    }
}

/// One message from the context or a watch task.
fn handle(msg: Msg, ctx: &Context, queue: &mut WorkQueue, watches: &mut WatchTasks) {
    let now = Instant::now();
    match msg {
        Msg::Trigger(keys, delay) => {
            for key in keys {
                queue.schedule(key, now + delay.unwrap_or_default());
            }
        }
        Msg::Start(spec) => {
            // A watch stopped before its start message arrived is not started.
            if ctx.shared.watches.read().contains_key(&spec.id) {
                watches.start(*spec, ctx);
            }
        }
        Msg::Stop(id) => watches.stop(id),
        Msg::Listed(id) => {
            let cluster = ctx
                .shared
                .watches
                .read()
                .get(&id)
                .map(|w| w.cluster.clone());
            if let Some(cluster) = cluster
                && watches.listed(&cluster, id)
            {
                tracing::info!(cluster = %cluster, "all watches listed; reconciling");
                queue.cluster_ready(&cluster, now);
            }
        }
    }
}

/// Queues every object of the primary watches, by its place in the store (none is read back).
fn resync_all(ctx: &Context, queue: &mut WorkQueue) {
    let now = Instant::now();
    let stores = ctx.shared.stores.read();
    for s in stores.iter().filter(|s| s.primary) {
        for (namespace, name) in s.reader.places() {
            queue.schedule(
                ObjectKey::new(&s.cluster, &s.resource, namespace, name),
                now,
            );
        }
    }
}

/// How one reconcile ended.
struct Finished {
    key: ObjectKey,
    /// When it began, and the version of the key's object its store showed then.
    began: (Instant, Option<String>),
    outcome: Outcome,
    /// For a failure: its category (a panic is `Panic`).
    failure: Option<&'static str>,
}

/// Runs one reconcile as a task; a panic counts as a failure.
fn spawn_reconcile<R: Reconciler>(
    inflight: &mut JoinSet<Finished>,
    reconciler: &Arc<R>,
    key: ObjectKey,
    ctx: &Context,
) {
    let r = reconciler.clone();
    let c = ctx.clone();
    let span = tracing::info_span!("reconcile", key = %key);
    inflight.spawn(
        async move {
            let started = Instant::now();
            let shown = c.resource_version(&key);
            let result = AssertUnwindSafe(r.reconcile(&key, &c)).catch_unwind().await;
            let (outcome, failure) = match result {
                Ok(Ok(action)) => {
                    tracing::debug!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        resource_version = shown.as_deref().unwrap_or_default(),
                        "reconciled"
                    );
                    match action.requeue_after() {
                        Some(d) => (Outcome::RequeueAfter(d), None),
                        None => (Outcome::Done, None),
                    }
                }
                // Refused by the process's fence: dropped, not retried (see crate::fence).
                Ok(Err(e)) if e.category() == "Fenced" => {
                    tracing::info!(error = %e, "reconcile dropped: this process may no longer write");
                    (Outcome::Done, None)
                }
                Ok(Err(e)) => {
                    let category = e.category();
                    tracing::warn!(error = %e, category, "reconcile failed");
                    (Outcome::Failed, Some(category))
                }
                Err(_) => {
                    tracing::error!("reconcile panicked");
                    (Outcome::Failed, Some("Panic"))
                }
            };
            Finished {
                key,
                began: (started, shown),
                outcome,
                failure,
            }
        }
        .instrument(span),
    );
}

fn complete(
    ctx: &Context,
    queue: &mut WorkQueue,
    done: std::result::Result<Finished, tokio::task::JoinError>,
) {
    let Ok(Finished {
        key,
        began,
        outcome,
        failure,
    }) = done
    else {
        // Reconcile panics are caught inside the task; a JoinError means it was aborted.
        return;
    };
    ctx.shared.metrics.count_reconcile(failure);
    ctx.shared
        .metrics
        .reconciled(&key, began, failure.is_some());
    if let Some(delay) = queue.finish(&key, outcome, Instant::now()) {
        tracing::debug!(key = %key, delay_ms = delay.as_millis() as u64, "retrying after backoff");
    }
}

fn update_metrics(ctx: &Context, queue: &WorkQueue, in_flight: usize) {
    ctx.shared
        .metrics
        .turned(queue.len(), in_flight, queue.failing());
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
