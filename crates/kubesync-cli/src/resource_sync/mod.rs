//! The ResourceSync and RemoteCluster controller: runs one spec/status sync per valid
//! `ResourceSync` and reports the reachability of each `RemoteCluster`.
//!
//! Creating, changing or deleting a `ResourceSync` starts, reconfigures or stops its sync at
//! run time. An invalid spec gets a `Ready=False` condition with a reason and a message; the
//! other syncs are unaffected. Statuses are assembled by pure functions
//! ([`resource_sync_status`], [`remote_cluster_status`]) and written through [`OwnWrites`].
//!
//! Never touches ObjectSyncs, and never writes but through [`OwnWrites`] (its syncs write
//! through their own library writers).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use kubesync::Writer;
use kubesync::runtime::{Action, ClusterStatus, Context};
use kubesync::syncers::spec_status::counts::Counter;
use kubesync::syncers::spec_status::plan::Marks;
use kubesync::syncers::spec_status::{
    LocalDrift, Observer, SECRET_REPAIR_INTERVAL, SecretRepair, SpecStatusSync,
};
use kubesync::translate::{ObjectName, SuffixTranslator, Translator};
use kubesync::{Cluster, ObjectKey};
use tokio::sync::oneshot;

use crate::crd::{
    ClusterObjectSync, Condition, LocalDriftRecord, ObjectSync, PropagationPolicy, RemoteCluster,
    RemoteClusterStatus, ResourceSync, ResourceSyncSpec, ResourceSyncStatus, SecretRepairMode,
};
use crate::events;
use crate::lag::Lags;
use crate::own_writes::OwnWrites;
use crate::remote::{LOCAL, RemoteClusters};
use crate::status::{self, ConditionType, Reason, Refusal, State, with_transition};

mod judge;
mod remote_cluster;

pub use judge::*;

/// Finalizer on a `ResourceSync`: on deletion, the remote objects' sync finalizers are
/// released first, so they can be deleted later without kubesync.
pub const RESOURCE_SYNC_FINALIZER: &str = "kubesync.io/resourcesync-cleanup";

struct RunningSync {
    fingerprint: String,
    remote: String,
    resource: ApiResource,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<kubesync::Result<()>>,
    ctx: Context,
    writer: Writer,
    /// How its remote Secrets are repaired (with secret names).
    secret_repair: Option<SecretRepair>,
    /// Counts its objects from its stores.
    counter: Counter,
    /// Local copies found changed by someone else.
    drifts: Arc<Drifts>,
}

/// At most this many `CopyChanged` Events per ResourceSync and minute: a controller fighting
/// kubesync over a copy must not flood the Events (the count and `lastDrift` still see all).
pub const MAX_DRIFT_EVENTS_PER_MINUTE: u32 = 10;

/// The local copies of one running sync found changed by someone else (shared with its
/// sync's drift observer).
#[derive(Debug, Default)]
struct Drifts(parking_lot::Mutex<DriftLog>);

/// What a running sync's drift log holds.
#[derive(Debug, Default)]
pub struct DriftLog {
    /// How many were found.
    pub count: u64,
    /// The last one.
    pub last: Option<LocalDriftRecord>,
    /// Events published in the current minute, and when it started.
    window: Option<(Instant, u32)>,
}

impl DriftLog {
    /// Records a drift found at `now` (pure); whether its Event may be published (at most
    /// [`MAX_DRIFT_EVENTS_PER_MINUTE`] in a minute).
    pub fn found(&mut self, drift: LocalDriftRecord, now: Instant) -> bool {
        self.count += 1;
        self.last = Some(drift);
        match &mut self.window {
            Some((start, _))
                if now.saturating_duration_since(*start) >= Duration::from_secs(60) =>
            {
                self.window = Some((now, 1));
                true
            }
            Some((_, published)) if *published >= MAX_DRIFT_EVENTS_PER_MINUTE => false,
            Some((_, published)) => {
                *published += 1;
                true
            }
            None => {
                self.window = Some((now, 1));
                true
            }
        }
    }
}

impl Drifts {
    fn lock(&self) -> parking_lot::MutexGuard<'_, DriftLog> {
        self.0.lock()
    }
}

impl RunningSync {
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// The controller of ResourceSyncs and RemoteClusters.
pub struct ResourceSyncController {
    local: Cluster,
    writes: OwnWrites,
    remotes: Arc<RemoteClusters>,
    syncs: tokio::sync::Mutex<HashMap<String, RunningSync>>,
    status_refresh: Duration,
    /// The propagation lags of the generations applied.
    lags: Lags,
    /// Who publishes the `CopyChanged` Events.
    reporter: kube::runtime::events::Reporter,
    /// The per-minute cap of Events about each ResourceSync.
    budget: Arc<events::EventBudget>,
}

/// The annotation domain of a spec (default `kubesync.io`).
fn domain(spec: &ResourceSyncSpec) -> String {
    spec.annotation_domain
        .clone()
        .unwrap_or_else(|| "kubesync.io".into())
}

/// How a spec maps remote names to local ones.
fn names(spec: &ResourceSyncSpec) -> SuffixTranslator {
    SuffixTranslator {
        remote_name_suffix: spec.remote_name_suffix.clone(),
        local_namespace_suffix: spec.local_namespace_suffix.clone(),
        namespace_prefix: spec.namespace_prefix.clone(),
    }
}

impl ResourceSyncController {
    /// A controller syncing into `local`, refreshing statuses every `status_refresh`, and
    /// recording each remote generation's propagation lag in `lags`.
    pub fn new(
        local: Cluster,
        writes: OwnWrites,
        remotes: Arc<RemoteClusters>,
        status_refresh: Duration,
        lags: Lags,
    ) -> Self {
        Self {
            local,
            writes,
            remotes,
            syncs: tokio::sync::Mutex::new(HashMap::new()),
            status_refresh,
            lags,
            reporter: events::reporter(),
            budget: Arc::default(),
        }
    }

    /// The ResourceSyncs that use the RemoteCluster `key` (to re-run them when it changes).
    pub fn users_of_remote_cluster(ctx: &Context, key: &ObjectKey) -> Vec<ObjectKey> {
        let rs_type = ApiResource::erase::<ResourceSync>(&());
        ctx.list(LOCAL, &rs_type)
            .iter()
            .filter(|rs| rs.data["spec"]["remoteCluster"].as_str() == Some(key.name.as_str()))
            .map(|rs| ObjectKey::new(LOCAL, &rs_type, None, rs.name_any()))
            .collect()
    }

    /// Names of the `ResourceSync`s whose syncs run now.
    pub async fn running(&self) -> Vec<String> {
        let mut v: Vec<String> = self.syncs.lock().await.keys().cloned().collect();
        v.sort();
        v
    }

    /// Write requests sent by all running syncs.
    pub async fn sync_writes(&self) -> u64 {
        self.syncs
            .lock()
            .await
            .values()
            .map(|e| e.writer.writes())
            .sum()
    }

    /// The counts of every running sync, by ResourceSync name.
    pub async fn all_counts(&self) -> Vec<(String, Counts)> {
        let names: Vec<String> = self.syncs.lock().await.keys().cloned().collect();
        let mut all = Vec::with_capacity(names.len());
        for name in names {
            let counts = self.counts(&name).await;
            all.push((name, counts));
        }
        all
    }

    /// The runtime contexts of the running syncs (their watches of remote clusters).
    pub async fn sync_contexts(&self) -> Vec<Context> {
        self.syncs
            .lock()
            .await
            .values()
            .map(|e| e.ctx.clone())
            .collect()
    }

    /// Stops the syncs of the ResourceSyncs for which `keep` (given the ResourceSync's name and
    /// its RemoteCluster's) is false: a replica of `--sharded` that no longer works on them.
    /// Writes nothing (no finalizer is released: the ResourceSyncs go on elsewhere).
    pub async fn release(&self, keep: impl Fn(&str, &str) -> bool) {
        let stopped: Vec<(String, RunningSync)> = {
            let mut syncs = self.syncs.lock().await;
            let gone: Vec<String> = syncs
                .iter()
                .filter(|(name, s)| !keep(name, crate::remote::display_name(&s.remote)))
                .map(|(name, _)| name.clone())
                .collect();
            gone.into_iter()
                .filter_map(|name| syncs.remove(&name).map(|s| (name, s)))
                .collect()
        };
        for (name, sync) in stopped {
            tracing::info!(resourcesync = %name, "handed over: its sync stops here");
            sync.shutdown().await;
        }
    }

    /// Stops every sync.
    pub async fn shutdown(&self) {
        let syncs: Vec<RunningSync> = self.syncs.lock().await.drain().map(|(_, e)| e).collect();
        for sync in syncs {
            sync.shutdown().await;
        }
    }

    /// Reconciles one ResourceSync: starts, reconfigures or stops its sync, and reports.
    pub async fn reconcile_resource_sync(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let name = key.name.clone();
        let Some(rs) = ctx.get_as::<ResourceSync>(key)? else {
            if let Some(sync) = self.syncs.lock().await.remove(&name) {
                tracing::info!(resourcesync = %name, "ResourceSync gone; stopping its sync");
                sync.shutdown().await;
            }
            return Ok(Action::done());
        };
        if rs.meta().deletion_timestamp.is_some() {
            return self.finalize(&rs, ctx).await;
        }
        if !rs.finalizers().iter().any(|f| f == RESOURCE_SYNC_FINALIZER) {
            self.writes
                .set_finalizer(&rs, RESOURCE_SYNC_FINALIZER, true)
                .await?;
            return Ok(Action::done());
        }

        let condition = match self.resolve(&rs, ctx).await {
            Err(refusal) => {
                if let Some(sync) = self.syncs.lock().await.remove(&name) {
                    tracing::info!(resourcesync = %name, reason = %refusal.reason, "invalid ResourceSync; stopping its sync");
                    sync.shutdown().await;
                }
                tracing::warn!(resourcesync = %name, reason = %refusal.reason, message = %refusal.message, "ResourceSync refused");
                status::refused(&refusal)
            }
            Ok((ar, remote, kubeconfig_hash, repair_interval)) => {
                self.ensure_running(&rs, ar, remote, &kubeconfig_hash, repair_interval)
                    .await?;
                self.running_condition(&name).await
            }
        };
        let counts = self.counts(&name).await;
        let last_drift = self.last_drift(&name).await;
        let old = rs.status.clone().unwrap_or_default();
        let status = resource_sync_status(
            &old,
            rs.metadata.generation,
            condition,
            counts,
            last_drift,
            status::now(),
        );
        if status != old {
            self.writes.patch_status(&rs, &status).await?;
        }
        Ok(Action::requeue(self.status_refresh))
    }

    async fn ensure_running(
        &self,
        rs: &ResourceSync,
        ar: ApiResource,
        remote: Cluster,
        kubeconfig_hash: &str,
        repair_interval: Duration,
    ) -> kubesync::Result<()> {
        let name = rs.name_any();
        let spec = &rs.spec;
        let fingerprint = format!(
            "{}|{}|{}",
            serde_json::to_string(spec).unwrap_or_default(),
            serde_json::to_string(&ar).unwrap_or_default(),
            kubeconfig_hash
        );
        let mut syncs = self.syncs.lock().await;
        if syncs
            .get(&name)
            .is_some_and(|e| e.fingerprint == fingerprint && !e.task.is_finished())
        {
            return Ok(());
        }
        let drifts = Arc::new(Drifts::default());
        if let Some(old) = syncs.remove(&name) {
            tracing::info!(resourcesync = %name, "ResourceSync changed; restarting its sync");
            old.shutdown().await;
        }
        let domain = domain(spec);
        let policy = match spec.propagation_policy {
            PropagationPolicy::Foreground => kube::api::PropagationPolicy::Foreground,
            PropagationPolicy::Background => kube::api::PropagationPolicy::Background,
            PropagationPolicy::Orphan => kube::api::PropagationPolicy::Orphan,
        };
        let builder = SpecStatusSync::builder(ar.clone())
            .remote_name_suffix(&spec.remote_name_suffix)
            .local_namespace_suffix(&spec.local_namespace_suffix)
            .namespace_prefix(&spec.namespace_prefix)
            .secret_names(spec.secret_names.clone())
            .secret_repair_interval(repair_interval)
            .propagation_policy(policy)
            .domain(&domain)
            .concurrency(spec.concurrency.unwrap_or(16) as usize)
            .on_propagated({
                let lags = self.lags.clone();
                Observer::new(move |lag: &Duration| lags.observe("ResourceSync", LOCAL, *lag))
            })
            .on_drift(self.drift_observer(rs, &ar, drifts.clone()));
        let remote_name = remote.name().to_string();
        let sync = builder.build(remote, self.local.clone());
        let writer = sync.write_counter();
        let (controller, reconciler) = sync.into_parts().await?;
        let secret_repair = reconciler.syncer().secret_repair();
        let counter = reconciler.syncer().counter();
        let ctx = controller.context();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(controller.run(reconciler, async {
            let _ = stopped.await;
        }));
        tracing::info!(resourcesync = %name, remote = %remote_name, kind = %ar.kind, "sync started");
        syncs.insert(
            name,
            RunningSync {
                fingerprint,
                remote: remote_name,
                resource: ar,
                stop: Some(stop),
                task,
                ctx,
                writer,
                secret_repair,
                counter,
                drifts,
            },
        );
        Ok(())
    }

    async fn running_condition(&self, name: &str) -> Condition {
        let syncs = self.syncs.lock().await;
        let Some(e) = syncs.get(name) else {
            return status::ready(false, State::NotRunning, "the sync is not running");
        };
        match (e.ctx.cluster_status(&e.remote), e.ctx.cluster_status(LOCAL)) {
            (ClusterStatus::Unreachable(m), _) => status::ready(false, State::RemoteUnreachable, m),
            (_, ClusterStatus::Unreachable(m)) => status::ready(false, State::LocalUnreachable, m),
            (ClusterStatus::Ready, ClusterStatus::Ready) => status::ready(
                true,
                State::Syncing,
                format!("syncing {} from {}", e.resource.kind, e.remote),
            ),
            _ => status::ready(
                false,
                State::Starting,
                "waiting for the first list of both clusters",
            ),
        }
    }

    /// The counts of a running sync and how it repairs remote Secrets (zero and `None` when
    /// it does not run).
    async fn counts(&self, name: &str) -> Counts {
        let syncs = self.syncs.lock().await;
        let Some(e) = syncs.get(name) else {
            return Counts::default();
        };
        let mut counts = Counts {
            secret_repair: e.secret_repair,
            ..Counts::default()
        };
        let shown = e.counter.count(&e.ctx, &e.remote, LOCAL, Instant::now());
        counts.objects = shown.objects;
        counts.in_sync = shown.in_sync;
        counts.paused = shown.paused;
        counts.oldest_stale = shown.oldest_behind;
        counts.failing = u32::try_from(e.ctx.metrics().failing()).unwrap_or(u32::MAX);
        counts.drifts = e.drifts.lock().count;
        counts
    }

    /// The last local copy the running sync found changed by someone else.
    async fn last_drift(&self, name: &str) -> Option<LocalDriftRecord> {
        let syncs = self.syncs.lock().await;
        syncs.get(name)?.drifts.lock().last.clone()
    }

    /// Told by the sync of `rs` of each local copy it found changed by someone else and
    /// reverted: recorded in `drifts`, and a Warning Event `CopyChanged` on the ResourceSync
    /// (in [`events::CLUSTER_EVENTS_NAMESPACE`]), related to the copy, names the fields and
    /// their field managers.
    fn drift_observer(
        &self,
        rs: &ResourceSync,
        ar: &ApiResource,
        drifts: Arc<Drifts>,
    ) -> Observer<LocalDrift> {
        let client = self.local.client().clone();
        let reporter = self.reporter.clone();
        let regarding = rs.object_ref(&());
        let (api_version, kind) = (ar.api_version.clone(), ar.kind.clone());
        let (budget, budget_key) = (
            self.budget.clone(),
            format!("ResourceSync/{}", rs.name_any()),
        );
        Observer::new(move |d: &LocalDrift| {
            let object = d.local.to_string();
            let record = LocalDriftRecord::of(object.clone(), &d.drift, status::now());
            if !drifts.lock().found(record, Instant::now())
                || !budget.allow(&budget_key, Instant::now())
            {
                return;
            }
            let event = kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Warning,
                reason: "CopyChanged".into(),
                note: Some(events::truncate_note(format!(
                    "the local copy {object} was changed by someone else and reverted: {}",
                    d.drift
                ))),
                action: "Revert".into(),
                secondary: Some(k8s_openapi::api::core::v1::ObjectReference {
                    api_version: Some(api_version.clone()),
                    kind: Some(kind.clone()),
                    namespace: d.local.namespace.clone(),
                    name: Some(d.local.name.clone()),
                    ..Default::default()
                }),
            };
            let (client, reporter, regarding) =
                (client.clone(), reporter.clone(), regarding.clone());
            tokio::spawn(async move {
                if let Err(e) = events::create(&client, &reporter, &event, &regarding).await {
                    tracing::warn!(resourcesync = ?regarding.name, error = %e, "could not publish an event");
                }
            });
        })
    }

    /// A ResourceSync is being deleted: stop its sync, release the remote objects' sync
    /// finalizers (local objects stay), then remove the ResourceSync's finalizer.
    ///
    /// A release that fails keeps the ResourceSync (and its finalizer): the failure is logged,
    /// shown as its `Ready=False` condition (reason `FinalizersNotReleased`), and retried.
    /// Only a spec under which no sync can have run (see [`nothing_to_release`]) lets it go
    /// without a release, with a warning.
    async fn finalize(&self, rs: &ResourceSync, ctx: &Context) -> kubesync::Result<Action> {
        let name = rs.name_any();
        if let Some(sync) = self.syncs.lock().await.remove(&name) {
            sync.shutdown().await;
        }
        let failure = match self.resolve(rs, ctx).await {
            Ok((ar, remote, _, _)) => {
                match self.release_remote_finalizers(rs, &ar, &remote).await {
                    Ok(released) => {
                        tracing::info!(resourcesync = %name, released, "released the remote objects' finalizers");
                        None
                    }
                    Err(e) => Some(Refusal::new(Reason::FinalizersNotReleased, e.to_string())),
                }
            }
            Err(refusal) if nothing_to_release(&refusal) => {
                tracing::warn!(resourcesync = %name, reason = %refusal.reason, message = %refusal.message, "deleting a ResourceSync whose sync cannot have run: no remote finalizers to release");
                None
            }
            Err(refusal) => Some(Refusal::new(
                Reason::FinalizersNotReleased,
                format!("{}: {}", refusal.reason, refusal.message),
            )),
        };
        if let Some(failure) = failure {
            tracing::warn!(resourcesync = %name, message = %failure.message, "cannot release the remote objects' finalizers; the ResourceSync stays until they are released");
            let message = format!(
                "cannot release the remote objects' finalizers ({}); retrying. Remove the finalizer {RESOURCE_SYNC_FINALIZER} to delete this ResourceSync without releasing them",
                failure.message
            );
            let old = rs.status.clone().unwrap_or_default();
            let status = resource_sync_status(
                &old,
                rs.metadata.generation,
                status::refused(&Refusal::new(failure.reason, message)),
                Counts::default(),
                None,
                status::now(),
            );
            if status != old {
                self.writes.patch_status(rs, &status).await?;
            }
            return Ok(Action::requeue(self.status_refresh));
        }
        self.writes
            .set_finalizer(rs, RESOURCE_SYNC_FINALIZER, false)
            .await?;
        Ok(Action::done())
    }

    /// Removes the sync finalizer from every remote object of the ResourceSync's shard;
    /// returns how many objects were looked at.
    async fn release_remote_finalizers(
        &self,
        rs: &ResourceSync,
        ar: &ApiResource,
        remote: &Cluster,
    ) -> kubesync::Result<usize> {
        let marks = Marks::new(domain(&rs.spec));
        let names = names(&rs.spec);
        let all: Api<DynamicObject> = Api::all_with(remote.client().clone(), ar);
        let mut count = 0;
        for obj in all.list(&Default::default()).await? {
            let n = ObjectName {
                namespace: obj.metadata.namespace.clone(),
                name: obj.name_any(),
            };
            if names.to_target(&n).is_some() {
                self.writes
                    .set_foreign_finalizer(remote, ar, &obj, &marks.finalizer(), false)
                    .await?;
                count += 1;
            }
        }
        Ok(count)
    }
}

#[cfg(test)]
mod tests;
