//! The syncer framework: one resource type synced from a **source** cluster to a **target**
//! cluster.
//!
//! Which entry point of a [`Syncer`] runs is decided by what exists, level-based, from the
//! watch stores — never from remembered delete events:
//!
//! | source | target | call |
//! | --- | --- | --- |
//! | exists | absent | [`Syncer::sync_down`] — typically create the target |
//! | exists | exists | [`Syncer::sync`] — bring them in line |
//! | absent | exists | [`Syncer::sync_up`] — default: delete the target **if and only if** [`Syncer::is_owned`] proves kubesync created it |
//! | absent | absent | [`Syncer::cleanup`] — default: nothing |
//!
//! Keys are the source objects' [`ObjectKey`]s. Target objects are mapped back to source keys
//! through the syncer's [`Translator`], whose reverse direction is verified, so a foreign
//! target object is never taken for a twin. `sync_up` only runs while the source cluster's
//! watches are healthy: an unreachable source is never read as "the source is gone".
//!
//! Writes go through the [`Writer`] in the [`SyncContext`].
//!
//! For target objects that exist because *other* objects need them (no 1:1 source), see
//! [`virtual_syncer`].

pub mod virtual_syncer;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DynamicObject, PropagationPolicy};
use kube::core::ApiResource;

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::key::ObjectKey;
use crate::runtime::{Action, ClusterStatus, Context, Controller, Reconciler, Watch};
use crate::translate::{ObjectName, Translator};
use crate::writer::Writer;

/// Which side of a syncer a watch or an object is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The source cluster (where the truth lives).
    Source,
    /// The target cluster (where copies live).
    Target,
}

/// Maps an object seen by an extra watch to the **source** names it affects. The context
/// lets it read the stores (e.g. every source object in the object's namespace).
pub type ExtraMapper = Arc<dyn Fn(&DynamicObject, &Context) -> Vec<ObjectName> + Send + Sync>;

/// An additional watch a syncer needs (e.g. Namespaces or Secrets on the target side), whose
/// events re-run the reconcile of the source objects the mapper returns. Make it
/// [`Watch::metadata_only`] when metadata is all the syncer reads of these objects (read them
/// with [`SyncContext::get_metadata`]), and narrow it on the server where it can be: every
/// object it holds stays in memory.
#[derive(Clone)]
pub struct ExtraWatch {
    /// Where to watch.
    pub side: Side,
    /// What to watch.
    pub watch: Watch,
    /// Event → affected source names.
    pub mapper: ExtraMapper,
}

/// What [`Syncer::reconcile_start`] decides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on with the entry point chosen by existence.
    Continue,
    /// Skip the rest of this reconcile and return this action.
    Skip(Action),
}

/// Everything a syncer's entry point may use.
pub struct SyncContext<'a> {
    /// The runtime context: watch stores of both clusters, cluster health.
    pub ctx: &'a Context,
    /// The source cluster.
    pub source: &'a Cluster,
    /// The target cluster.
    pub target: &'a Cluster,
    /// The single writer (counts writes).
    pub writer: &'a Writer,
    /// The source object's key.
    pub key: &'a ObjectKey,
    /// The source object's name.
    pub source_name: &'a ObjectName,
    /// The target object's name (translated).
    pub target_name: &'a ObjectName,
}

impl SyncContext<'_> {
    /// Whether `desired` (an object of `ar` in the target cluster, which the store does not
    /// show) was created by this writer moments ago and a live read finds it: the store is
    /// behind, and a second create would be refused. Read only when the writer remembers such
    /// a create.
    pub async fn created_already(
        &self,
        ar: &ApiResource,
        desired: &DynamicObject,
        field_manager: &str,
    ) -> Result<bool> {
        let target = (
            desired.metadata.namespace.as_deref(),
            desired.metadata.name.as_deref().unwrap_or_default(),
        );
        if !self
            .writer
            .written_recently(self.target, ar, target, field_manager)
        {
            return Ok(false);
        }
        let api = crate::cluster::api(self.target.client().clone(), target.0, ar);
        Ok(api.get_opt(target.1).await?.is_some())
    }

    /// Whether the source object is really gone, by a live read of the source cluster: call
    /// it before deleting anything because the source is missing from the store (stores may
    /// be a moment behind the cluster). A failed read is an error, never "gone".
    pub async fn confirm_source_absent(&self, resource: &ApiResource) -> Result<bool> {
        self.ctx.confirm_absent(self.key, resource).await
    }

    /// An object of `resource` on `side`, from the stores of full watches (see
    /// [`Context::get`]).
    pub fn get(
        &self,
        side: Side,
        resource: &ApiResource,
        name: &ObjectName,
    ) -> Option<Arc<DynamicObject>> {
        self.ctx.get(&self.key(side, resource, name))
    }

    /// An object of `resource` on `side` from any store, also one of a metadata-only watch
    /// (see [`Context::get_metadata`]): rely on its metadata only.
    pub fn get_metadata(
        &self,
        side: Side,
        resource: &ApiResource,
        name: &ObjectName,
    ) -> Option<Arc<DynamicObject>> {
        self.ctx.get_metadata(&self.key(side, resource, name))
    }

    fn key(&self, side: Side, resource: &ApiResource, name: &ObjectName) -> ObjectKey {
        let cluster = match side {
            Side::Source => self.source,
            Side::Target => self.target,
        };
        ObjectKey::new(cluster.name(), resource, name.namespace.clone(), &name.name)
    }
}

/// Syncs one resource type between a source and a target cluster. See the [module
/// docs](self) for when each entry point runs.
///
/// Hooks ([`init`](Syncer::init), [`extra_watches`](Syncer::extra_watches),
/// [`reconcile_start`](Syncer::reconcile_start), [`reconcile_end`](Syncer::reconcile_end),
/// [`source_seen`](Syncer::source_seen)) have no-op defaults. Lifecycle: `init` → watches start → stores list → reconciles.
pub trait Syncer: Send + Sync + 'static {
    /// The resource type on the source side.
    fn source_resource(&self) -> &ApiResource;

    /// The resource type on the target side (default: the same as the source's).
    fn target_resource(&self) -> &ApiResource {
        self.source_resource()
    }

    /// Maps source names to target names and back.
    fn translator(&self) -> &dyn Translator;

    /// The source watch (default: all objects of the source type; narrow it here). It must hold
    /// full objects (not [`Watch::metadata_only`]): reconciles read sources in full.
    fn source_watch(&self) -> Watch {
        Watch::dynamic(self.source_resource().clone())
    }

    /// The target watch (default: all objects of the target type). It must hold full objects,
    /// like the source watch.
    fn target_watch(&self) -> Watch {
        Watch::dynamic(self.target_resource().clone())
    }

    /// Whether a target object carries the marks that prove kubesync created it for this
    /// syncer. Only such objects are ever deleted by the default [`Syncer::sync_up`].
    fn is_owned(&self, target: &DynamicObject) -> bool;

    /// Only the source exists.
    fn sync_down(
        &self,
        cx: &SyncContext<'_>,
        source: &DynamicObject,
    ) -> impl Future<Output = Result<Action>> + Send;

    /// Both sides exist.
    fn sync(
        &self,
        cx: &SyncContext<'_>,
        source: &DynamicObject,
        target: &DynamicObject,
    ) -> impl Future<Output = Result<Action>> + Send;

    /// Only the target exists. Default: delete it (with a uid precondition) if
    /// [`Syncer::is_owned`], otherwise leave it alone.
    fn sync_up(
        &self,
        cx: &SyncContext<'_>,
        target: &DynamicObject,
    ) -> impl Future<Output = Result<Action>> + Send {
        async move {
            if self.is_owned(target) && target.metadata.deletion_timestamp.is_none() {
                if !cx.confirm_source_absent(self.source_resource()).await? {
                    // The source exists: the store is behind (its event is on the way) or
                    // the source left the watch's selector. Either way, nothing is deleted.
                    tracing::debug!(target = %cx.target_name, "source absent from the store but present in the cluster; keeping the target");
                    return Ok(Action::done());
                }
                tracing::info!(target = %cx.target_name, "source gone; deleting the target it owned");
                cx.writer
                    .delete(
                        cx.target,
                        self.target_resource(),
                        cx.target_name.namespace.as_deref(),
                        &cx.target_name.name,
                        Some(PropagationPolicy::Background),
                        target.metadata.uid.as_deref(),
                    )
                    .await?;
            }
            Ok(Action::done())
        }
    }

    /// Neither side exists. Default: nothing.
    fn cleanup(&self, _cx: &SyncContext<'_>) -> impl Future<Output = Result<Action>> + Send {
        async { Ok(Action::done()) }
    }

    /// Runs once before the watches start (e.g. to check that the types are served).
    fn init(
        &self,
        _source: &Cluster,
        _target: &Cluster,
    ) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Further watches whose events map to source objects.
    fn extra_watches(&self) -> Vec<ExtraWatch> {
        Vec::new()
    }

    /// Called before the entry point; may skip the rest of the reconcile.
    fn reconcile_start(
        &self,
        _cx: &SyncContext<'_>,
        _source: Option<&DynamicObject>,
        _target: Option<&DynamicObject>,
    ) -> impl Future<Output = Result<Flow>> + Send {
        async { Ok(Flow::Continue) }
    }

    /// Called after the entry point with its result.
    fn reconcile_end(&self, _cx: &SyncContext<'_>, _result: &Result<Action>) {}

    /// Called with every event of the source watch (of the translator's names only), as it
    /// arrives and before its reconcile is queued: the place to note when a change was first
    /// seen. A deletion passes the object's last state. It runs on the watch's task: keep it
    /// cheap, and never block. Default: nothing.
    fn source_seen(&self, _key: &ObjectKey, _source: &DynamicObject) {}
}

/// Runs a [`Syncer`] between two clusters on the multi-cluster runtime.
#[must_use]
pub struct SyncEngine<S: Syncer> {
    syncer: Arc<S>,
    source: Cluster,
    target: Cluster,
    writer: Writer,
    concurrency: usize,
    resync: Option<Duration>,
}

impl<S: Syncer> SyncEngine<S> {
    /// An engine for `syncer` from `source` to `target` (which must have different names).
    pub fn new(syncer: S, source: Cluster, target: Cluster) -> Self {
        Self {
            syncer: Arc::new(syncer),
            source,
            target,
            writer: Writer::new(),
            concurrency: 16,
            resync: Some(Duration::from_secs(600)),
        }
    }

    /// Uses this writer (e.g. to share write counts across engines).
    pub fn writer(mut self, writer: Writer) -> Self {
        self.writer = writer;
        self
    }

    /// At most `n` objects are reconciled at once (each object serially).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// How often every source object is reconciled without events (`None`: never).
    pub fn resync(mut self, every: Option<Duration>) -> Self {
        self.resync = every;
        self
    }

    /// The writer whose counts this engine updates.
    pub fn write_counter(&self) -> Writer {
        self.writer.clone()
    }

    /// Builds the runtime controller and reconciler without running them: the escape hatch
    /// for adding watches of your own (or running a custom reconciler on the same cluster
    /// handles). Runs [`Syncer::init`] first.
    pub async fn into_parts(self) -> Result<(Controller, SyncReconciler<S>)> {
        let Self {
            syncer,
            source,
            target,
            writer,
            concurrency,
            resync,
        } = self;
        if source.name() == target.name() {
            return Err(Error::Config(format!(
                "source and target clusters must have different names (both are {:?})",
                source.name()
            )));
        }
        syncer.init(&source, &target).await?;
        let (s, t) = (source.name().to_string(), target.name().to_string());
        let source_resource = syncer.source_resource().clone();
        let controller = Controller::new()
            .cluster(source.clone())
            .cluster(target.clone())
            .concurrency(concurrency)
            .resync(resync)
            .depends_on(&s, &t)
            // Source objects outside the translator's names (another shard, another prefix)
            // never reach the queue.
            .watch_mapped(
                &s,
                syncer.source_watch(),
                Self::source_mapper(syncer.clone()),
            )?
            .watch_mapped(
                &t,
                syncer.target_watch(),
                Self::target_mapper(syncer.clone(), s.clone(), source_resource.clone()),
            )?;
        let controller = Self::with_extra_watches(controller, &*syncer, &s, &t, &source_resource)?;
        Ok((
            controller,
            SyncReconciler {
                syncer,
                source,
                target,
                writer,
            },
        ))
    }

    /// The source watch's mapper: an object's own key if its name is among the translator's
    /// (the syncer is told it was seen), else none.
    fn source_mapper(
        syncer: Arc<S>,
    ) -> impl Fn(&ObjectKey, &DynamicObject) -> Vec<ObjectKey> + Send + Sync + 'static {
        move |key, obj| {
            let source = ObjectName {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            };
            match syncer.translator().to_target(&source) {
                Some(_) => {
                    syncer.source_seen(key, obj);
                    vec![key.clone()]
                }
                None => Vec::new(),
            }
        }
    }

    /// The target watch's mapper: the key of the source object (of type `ar`, in the cluster
    /// `s`) a target object's name translates back to, if any.
    fn target_mapper(
        syncer: Arc<S>,
        s: String,
        ar: ApiResource,
    ) -> impl Fn(&ObjectKey, &DynamicObject) -> Vec<ObjectKey> + Send + Sync + 'static {
        move |key, _obj| {
            let target = ObjectName {
                namespace: key.namespace.clone(),
                name: key.name.clone(),
            };
            syncer
                .translator()
                .to_source(&target)
                .map(|src| ObjectKey::new(s.clone(), &ar, src.namespace, src.name))
                .into_iter()
                .collect()
        }
    }

    /// `controller` with the syncer's extra watches, in the source cluster `s` or the target
    /// cluster `t`, each mapping to keys of source objects of type `source_resource`.
    fn with_extra_watches(
        mut controller: Controller,
        syncer: &S,
        s: &str,
        t: &str,
        source_resource: &ApiResource,
    ) -> Result<Controller> {
        // The mappers may read the stores; the runtime holds them, so they hold the context
        // weakly (else neither would ever be freed).
        let weak = controller.context().downgrade();
        for extra in syncer.extra_watches() {
            let cluster = match extra.side {
                Side::Source => s,
                Side::Target => t,
            };
            let mapper = extra.mapper.clone();
            let (s2, ar, weak) = (s.to_string(), source_resource.clone(), weak.clone());
            controller = controller.watch_mapped(cluster, extra.watch, move |_key, obj| {
                let Some(ctx) = weak.upgrade() else {
                    return Vec::new();
                };
                mapper(obj, &ctx)
                    .into_iter()
                    .map(|n| ObjectKey::new(s2.clone(), &ar, n.namespace, n.name))
                    .collect()
            })?;
        }
        Ok(controller)
    }

    /// Runs until `shutdown` resolves.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let (controller, reconciler) = self.into_parts().await?;
        controller.run(reconciler, shutdown).await
    }
}

/// The runtime reconciler of a [`SyncEngine`]: reads both sides from the stores and calls the
/// syncer's entry point that fits.
pub struct SyncReconciler<S: Syncer> {
    syncer: Arc<S>,
    source: Cluster,
    target: Cluster,
    writer: Writer,
}

impl<S: Syncer> SyncReconciler<S> {
    /// The syncer (e.g. what it learnt in [`Syncer::init`]).
    pub fn syncer(&self) -> &S {
        &self.syncer
    }
}

impl<S: Syncer> Reconciler for SyncReconciler<S> {
    type Error = Error;

    async fn reconcile(&self, key: &ObjectKey, ctx: &Context) -> Result<Action> {
        let syncer = &*self.syncer;
        if key.cluster != self.source.name() || !key.is_of(syncer.source_resource()) {
            return Ok(Action::done());
        }
        let source_name = ObjectName {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        };
        let Some(target_name) = syncer.translator().to_target(&source_name) else {
            return Ok(Action::done());
        };
        let cx = SyncContext {
            ctx,
            source: &self.source,
            target: &self.target,
            writer: &self.writer,
            key,
            source_name: &source_name,
            target_name: &target_name,
        };
        let source = ctx.get(key);
        let target = cx.get(Side::Target, syncer.target_resource(), &target_name);
        if let Flow::Skip(action) = syncer
            .reconcile_start(&cx, source.as_deref(), target.as_deref())
            .await?
        {
            return Ok(action);
        }
        let result = match (source.as_deref(), target.as_deref()) {
            (Some(s), None) => syncer.sync_down(&cx, s).await,
            (Some(s), Some(t)) => syncer.sync(&cx, s, t).await,
            (None, Some(t)) => {
                // Absence in the source store is only trusted while the source is healthy.
                match ctx.cluster_status(self.source.name()) {
                    ClusterStatus::Ready => syncer.sync_up(&cx, t).await,
                    other => {
                        tracing::info!(status = ?other, "source cluster not ready; not acting on an absent source");
                        Ok(Action::requeue(Duration::from_secs(5)))
                    }
                }
            }
            (None, None) => syncer.cleanup(&cx).await,
        };
        syncer.reconcile_end(&cx, &result);
        result
    }
}
