//! The operator: reconciles `RemoteCluster` and `ResourceSync` objects in the cluster it runs
//! in, and runs one spec/status sync engine per valid `ResourceSync`.
//!
//! Creating, changing or deleting a `ResourceSync` starts, reconfigures or stops its engine at
//! run time. An invalid spec gets a `Ready=False` condition with a reason and a message; the
//! operator keeps running and the other syncs are unaffected.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use kubesync::Writer;
use kubesync::runtime::{Action, ClusterStatus, Context, Controller, Reconciler, Watch};
use kubesync::syncers::spec_status::SpecStatusSync;
use kubesync::syncers::spec_status::plan::{Marks, is_paused};
use kubesync::translate::{ObjectName, SuffixTranslator, Translator};
use kubesync::{Cluster, ObjectKey};
use sha2::Digest;
use tokio::sync::oneshot;

use crate::crd::{
    Condition, PropagationPolicy, RemoteCluster, RemoteClusterStatus, ResourceSync,
    ResourceSyncStatus,
};

/// Finalizer on a `ResourceSync`: on deletion, the remote objects' sync finalizers are
/// released first, so they can be deleted later without kubesync.
pub const RESOURCE_SYNC_FINALIZER: &str = "kubesync.io/resourcesync-cleanup";
/// Field manager of the operator's own writes.
pub const FIELD_MANAGER: &str = "kubesync-operator";
/// Name of the cluster the operator runs in, in keys and logs.
pub const LOCAL: &str = "local";

/// How often statuses are refreshed (counts, reachability).
const STATUS_REFRESH: Duration = Duration::from_secs(10);

/// A reason and message for a `Ready=False` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// PascalCase reason.
    pub reason: &'static str,
    /// What is wrong, for a person.
    pub message: String,
}

impl Refusal {
    pub(crate) fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

struct Engine {
    fingerprint: String,
    remote: String,
    resource: ApiResource,
    names: SuffixTranslator,
    marks: Marks,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<kubesync::Result<()>>,
    ctx: Context,
    writer: Writer,
}

impl Engine {
    async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

/// The operator's shared state.
pub struct Operator {
    pub(crate) local: Cluster,
    engines: tokio::sync::Mutex<HashMap<String, Engine>>,
    pub(crate) writer: Writer,
    pub(crate) status_refresh: Duration,
    pub(crate) policy: crate::object_sync::ObjectSyncPolicy,
    pub(crate) fan_out: kubesync::syncers::fan_out::FanOut,
    pub(crate) remotes: std::sync::Mutex<HashMap<String, (String, Cluster)>>,
    /// The running controller's context (set when [`run`](Self::run) starts).
    ctx: std::sync::OnceLock<Context>,
    /// What the operator remembers of each ObjectSync, by (namespace, name); forgotten with it.
    pub(crate) object_syncs: std::sync::Mutex<BTreeMap<(String, String), ObjectSyncRecord>>,
    /// Publishes Kubernetes Events about kubesync's resources.
    pub(crate) recorder: kube::runtime::events::Recorder,
    /// With leader election: whether this replica leads.
    leader: std::sync::Mutex<Option<bool>>,
}

/// What the operator remembers of one ObjectSync.
#[derive(Debug, Default)]
pub(crate) struct ObjectSyncRecord {
    /// Its last reported state, for `/metrics`.
    pub(crate) gauge: ObjectSyncGauge,
    /// Per condition type, the (status, reason) last published as an Event: a reconcile that
    /// reads a status older than its own last patch does not publish that transition again.
    pub(crate) published: BTreeMap<String, (String, String)>,
}

/// An ObjectSync's state as `/metrics` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectSyncGauge {
    /// Its Ready condition is True.
    pub ready: bool,
    /// Destinations by state (`Synced`, `Pending`, `Conflict`, `Error`; all four present).
    pub destinations: BTreeMap<String, u32>,
}

/// Options of an [`Operator`].
#[derive(Clone, Debug)]
pub struct OperatorOptions {
    /// How often statuses are refreshed (default 10 s).
    pub status_refresh: Duration,
    /// Which ObjectSyncs are allowed (sources, destinations, kinds).
    pub policy: crate::object_sync::ObjectSyncPolicy,
    /// Copy writes in flight per ObjectSync (default 16).
    pub fan_out_concurrency: usize,
}

impl Default for OperatorOptions {
    fn default() -> Self {
        Self {
            status_refresh: STATUS_REFRESH,
            policy: Default::default(),
            fan_out_concurrency: 16,
        }
    }
}

impl Operator {
    /// An operator managing syncs into `local` (the cluster it runs in).
    pub fn new(local: Cluster) -> Arc<Self> {
        Self::with_options(local, OperatorOptions::default())
    }

    /// An operator with options.
    pub fn with_options(local: Cluster, options: OperatorOptions) -> Arc<Self> {
        Arc::new(Self {
            local: Cluster::new(LOCAL, local.client().clone()),
            engines: tokio::sync::Mutex::new(HashMap::new()),
            writer: Writer::new(),
            status_refresh: options.status_refresh,
            policy: options.policy,
            fan_out: kubesync::syncers::fan_out::FanOut::new(LOCAL)
                .concurrency(options.fan_out_concurrency),
            remotes: std::sync::Mutex::new(HashMap::new()),
            ctx: std::sync::OnceLock::new(),
            object_syncs: std::sync::Mutex::new(BTreeMap::new()),
            leader: std::sync::Mutex::new(None),
            recorder: kube::runtime::events::Recorder::new(
                local.client().clone(),
                kube::runtime::events::Reporter {
                    controller: "kubesync".into(),
                    instance: std::env::var("POD_NAME").ok(),
                },
            ),
        })
    }

    /// Records whether this replica leads (`None`: no leader election).
    pub fn set_leader(&self, leading: Option<bool>) {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = leading;
    }

    /// Whether this replica leads; `None` without leader election.
    pub fn leader(&self) -> Option<bool> {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The running controller's context; `None` before [`run`](Self::run).
    pub fn context(&self) -> Option<Context> {
        self.ctx.get().cloned()
    }

    /// Each ObjectSync's last reported state, by (namespace, name).
    /// Only ObjectSyncs that still exist in the operator's store are shown (a reconcile that
    /// was in flight when one was deleted may have recorded it after it was forgotten).
    pub fn object_sync_gauges(&self) -> Vec<((String, String), ObjectSyncGauge)> {
        let ctx = self.context();
        let ar = ApiResource::erase::<crate::crd::ObjectSync>(&());
        let mut records = self.object_syncs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ctx) = &ctx {
            records.retain(|(ns, name), _| {
                ctx.get(&ObjectKey::new(LOCAL, &ar, Some(ns.clone()), name))
                    .is_some()
            });
        }
        records
            .iter()
            .map(|(k, r)| (k.clone(), r.gauge.clone()))
            .collect()
    }

    /// Write requests sent so far, by component: the operator's own (statuses, finalizers),
    /// ObjectSync copies, ResourceSync engines.
    pub async fn writes_by_component(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("operator", self.writer.writes()),
            ("objectsync", self.fan_out.write_counter().writes()),
            ("resourcesync", self.engine_writes().await),
        ]
    }

    /// How often ResourceSync statuses are refreshed (default 10 s).
    pub fn with_status_refresh(local: Cluster, every: Duration) -> Arc<Self> {
        Self::with_options(
            local,
            OperatorOptions {
                status_refresh: every,
                ..Default::default()
            },
        )
    }

    /// Names of the `ResourceSync`s whose engines run now.
    pub async fn running(&self) -> Vec<String> {
        let mut v: Vec<String> = self.engines.lock().await.keys().cloned().collect();
        v.sort();
        v
    }

    /// Watches the ObjectSync fan-out holds (one per type and cluster, plus one Namespace
    /// watch per cluster), whatever the number of ObjectSyncs.
    pub fn fan_out_watches(&self) -> usize {
        self.fan_out.watch_count()
    }

    /// Write requests sent by all running engines.
    pub async fn engine_writes(&self) -> u64 {
        self.engines
            .lock()
            .await
            .values()
            .map(|e| e.writer.writes())
            .sum()
    }

    /// Runs until `shutdown` resolves, then stops every engine.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> kubesync::Result<()> {
        let controller = Controller::new()
            .cluster(self.local.clone())
            .resync(Some(Duration::from_secs(60)));
        let ctx = controller.context();
        let _ = self.ctx.set(ctx.clone());
        let rs_type = ApiResource::erase::<ResourceSync>(&());
        let controller = controller
            .watch(LOCAL, Watch::of::<ResourceSync>())?
            .watch(LOCAL, Watch::of::<RemoteCluster>())?
            .watch(LOCAL, Watch::of::<crate::crd::ObjectSync>())?
            // A RemoteCluster change re-runs every ResourceSync that uses it.
            .watch_mapped(LOCAL, Watch::of::<RemoteCluster>(), move |key, _| {
                ctx.list(LOCAL, &rs_type)
                    .iter()
                    .filter(|rs| {
                        rs.data["spec"]["remoteCluster"].as_str() == Some(key.name.as_str())
                    })
                    .map(|rs| ObjectKey::new(LOCAL, &rs_type, None, rs.name_any()))
                    .collect()
            })?;
        controller
            .run(OperatorReconciler(self.clone()), shutdown)
            .await?;
        let engines: Vec<Engine> = self.engines.lock().await.drain().map(|(_, e)| e).collect();
        for engine in engines {
            engine.shutdown().await;
        }
        Ok(())
    }

    async fn reconcile_remote_cluster(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let Some(rc) = ctx.get_as::<RemoteCluster>(key)? else {
            return Ok(Action::done());
        };
        let (condition, version) = match self.connect(&rc).await {
            Err(refusal) => (
                Condition::ready(false, refusal.reason, refusal.message),
                None,
            ),
            Ok(cluster) => {
                match tokio::time::timeout(Duration::from_secs(10), cluster.server_version()).await
                {
                    Ok(Ok(v)) => (
                        Condition::ready(true, "Connected", format!("apiserver {v} answered")),
                        Some(v),
                    ),
                    Ok(Err(e)) => (Condition::ready(false, "Unreachable", e.to_string()), None),
                    Err(_) => (
                        Condition::ready(false, "Unreachable", "no answer within 10s"),
                        None,
                    ),
                }
            }
        };
        let old = rc.status.clone().unwrap_or_default();
        let status = RemoteClusterStatus {
            conditions: vec![with_transition(
                condition,
                &old.conditions,
                rc.metadata.generation,
            )],
            server_version: version.or(if old.conditions.iter().any(|c| c.status == "True") {
                None
            } else {
                old.server_version.clone()
            }),
        };
        if status != old {
            self.patch_own_status(&rc, &status).await?;
        }
        // Reachability is re-checked every three status-refresh periods (30 s by default).
        Ok(Action::requeue(self.status_refresh * 3))
    }

    /// Builds a cluster handle from a RemoteCluster's kubeconfig Secret.
    async fn connect(&self, rc: &RemoteCluster) -> Result<Cluster, Refusal> {
        let (cluster, _) = self.connect_with_hash(rc).await?;
        Ok(cluster)
    }

    /// The cluster handle of a RemoteCluster, with the hash of its kubeconfig. The Secret is
    /// read each time (to notice a changed kubeconfig); the client is built only when the
    /// kubeconfig changed, and shared by every sync that uses the cluster.
    pub(crate) async fn connect_with_hash(
        &self,
        rc: &RemoteCluster,
    ) -> Result<(Cluster, String), Refusal> {
        let r = &rc.spec.kubeconfig_secret_ref;
        let secrets: Api<Secret> = Api::namespaced(self.local.client().clone(), &r.namespace);
        let secret = match secrets.get_opt(&r.name).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(Refusal::new(
                    "KubeconfigSecretInvalid",
                    format!("Secret {}/{} not found", r.namespace, r.name),
                ));
            }
            Err(e) => {
                return Err(Refusal::new(
                    "KubeconfigSecretInvalid",
                    format!("reading Secret {}/{}: {e}", r.namespace, r.name),
                ));
            }
        };
        let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&r.key)) else {
            return Err(Refusal::new(
                "KubeconfigSecretInvalid",
                format!("Secret {}/{} has no key {:?}", r.namespace, r.name, r.key),
            ));
        };
        let hash: String = sha2::Sha256::digest(&bytes.0)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        // The context is part of what the client is built from.
        let hash = format!("{hash}/{}", rc.spec.context.as_deref().unwrap_or(""));
        let rc_name = rc.name_any();
        if let Some((h, cluster)) = self
            .remotes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&rc_name)
            && *h == hash
        {
            return Ok((cluster.clone(), hash));
        }
        let name = format!("remote:{rc_name}");
        let cluster =
            Cluster::from_kubeconfig_bytes(&bytes.0, rc.spec.context.as_deref(), Some(&name))
                .await
                .map_err(|e| Refusal::new("KubeconfigInvalid", e.to_string()))?;
        self.remotes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(rc_name, (hash.clone(), cluster.clone()));
        Ok((cluster, hash))
    }

    async fn resolve(
        &self,
        rs: &ResourceSync,
        ctx: &Context,
    ) -> Result<(ApiResource, Cluster, String), Refusal> {
        let spec = &rs.spec;
        if spec.resource.kind.is_empty() || spec.resource.version.is_empty() {
            return Err(Refusal::new(
                "InvalidSpec",
                "spec.resource needs a version and a kind",
            ));
        }
        if spec.remote_cluster.is_empty() {
            return Err(Refusal::new("InvalidSpec", "spec.remoteCluster is empty"));
        }
        if spec.concurrency == Some(0) {
            return Err(Refusal::new(
                "InvalidSpec",
                "spec.concurrency must be at least 1",
            ));
        }
        let gvk = GroupVersionKind::gvk(
            &spec.resource.group,
            &spec.resource.version,
            &spec.resource.kind,
        );
        let (ar, caps) = kube::discovery::pinned_kind(self.local.client(), &gvk)
            .await
            .map_err(|e| {
                Refusal::new(
                    "ResourceNotFound",
                    format!(
                        "{}/{} {} is not served by this cluster: {e}",
                        gvk.group, gvk.version, gvk.kind
                    ),
                )
            })?;
        if caps.scope != kube::discovery::Scope::Namespaced {
            return Err(Refusal::new(
                "InvalidSpec",
                format!(
                    "{} is cluster-scoped; only namespaced kinds can be synced",
                    gvk.kind
                ),
            ));
        }
        if !caps
            .subresources
            .iter()
            .any(|(sub, _)| sub.plural == "status")
        {
            return Err(Refusal::new(
                "NoStatusSubresource",
                format!("{} has no status subresource", gvk.kind),
            ));
        }
        let rc_key = ObjectKey::new(
            LOCAL,
            &ApiResource::erase::<RemoteCluster>(&()),
            None,
            &spec.remote_cluster,
        );
        let rc = ctx
            .get_as::<RemoteCluster>(&rc_key)
            .map_err(|e| Refusal::new("RemoteClusterNotFound", e.to_string()))?
            .ok_or_else(|| {
                Refusal::new(
                    "RemoteClusterNotFound",
                    format!("RemoteCluster {:?} does not exist", spec.remote_cluster),
                )
            })?;
        let (cluster, kubeconfig_hash) = self.connect_with_hash(&rc).await?;
        Ok((ar, cluster, kubeconfig_hash))
    }

    async fn reconcile_resource_sync(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let name = key.name.clone();
        let Some(rs) = ctx.get_as::<ResourceSync>(key)? else {
            if let Some(engine) = self.engines.lock().await.remove(&name) {
                tracing::info!(resourcesync = %name, "ResourceSync gone; stopping its sync");
                engine.shutdown().await;
            }
            return Ok(Action::done());
        };
        let api: Api<ResourceSync> = Api::all(self.local.client().clone());
        if rs.meta().deletion_timestamp.is_some() {
            return self.finalize(&rs, ctx, &api).await;
        }
        if !rs.finalizers().iter().any(|f| f == RESOURCE_SYNC_FINALIZER) {
            self.set_own_finalizer(&rs, RESOURCE_SYNC_FINALIZER, true)
                .await?;
            return Ok(Action::done());
        }

        let resolved = self.resolve(&rs, ctx).await;
        let condition = match resolved {
            Err(refusal) => {
                if let Some(engine) = self.engines.lock().await.remove(&name) {
                    tracing::info!(resourcesync = %name, reason = refusal.reason, "invalid ResourceSync; stopping its sync");
                    engine.shutdown().await;
                }
                tracing::warn!(resourcesync = %name, reason = refusal.reason, message = %refusal.message, "ResourceSync refused");
                Condition::ready(false, refusal.reason, refusal.message)
            }
            Ok((ar, remote, kubeconfig_hash)) => {
                self.ensure_engine(&rs, ar, remote, &kubeconfig_hash)
                    .await?;
                self.engine_condition(&name).await
            }
        };
        let counts = self.counts(&name).await;
        let old = rs.status.clone().unwrap_or_default();
        let status = ResourceSyncStatus {
            observed_generation: rs.metadata.generation,
            conditions: vec![with_transition(
                condition,
                &old.conditions,
                rs.metadata.generation,
            )],
            objects: counts.0,
            in_sync: counts.1,
            paused: counts.2,
            failing: counts.3,
        };
        if status != old {
            self.patch_own_status(&rs, &status).await?;
        }
        Ok(Action::requeue(self.status_refresh))
    }

    async fn ensure_engine(
        &self,
        rs: &ResourceSync,
        ar: ApiResource,
        remote: Cluster,
        kubeconfig_hash: &str,
    ) -> kubesync::Result<()> {
        let name = rs.name_any();
        let spec = &rs.spec;
        let fingerprint = format!(
            "{}|{}|{}",
            serde_json::to_string(spec).unwrap_or_default(),
            serde_json::to_string(&ar).unwrap_or_default(),
            kubeconfig_hash
        );
        let mut engines = self.engines.lock().await;
        if engines
            .get(&name)
            .is_some_and(|e| e.fingerprint == fingerprint && !e.task.is_finished())
        {
            return Ok(());
        }
        if let Some(old) = engines.remove(&name) {
            tracing::info!(resourcesync = %name, "ResourceSync changed; restarting its sync");
            old.shutdown().await;
        }
        let domain = spec
            .annotation_domain
            .clone()
            .unwrap_or_else(|| "kubesync.io".into());
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
            .propagation_policy(policy)
            .domain(&domain)
            .concurrency(spec.concurrency.unwrap_or(16) as usize);
        let remote_name = remote.name().to_string();
        let engine = builder.build(remote, self.local.clone());
        let writer = engine.write_counter();
        let (controller, reconciler) = engine.into_parts().await?;
        let ctx = controller.context();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(controller.run(reconciler, async {
            let _ = stopped.await;
        }));
        tracing::info!(resourcesync = %name, remote = %remote_name, kind = %ar.kind, "sync started");
        engines.insert(
            name,
            Engine {
                fingerprint,
                remote: remote_name,
                resource: ar,
                names: SuffixTranslator {
                    remote_name_suffix: spec.remote_name_suffix.clone(),
                    local_namespace_suffix: spec.local_namespace_suffix.clone(),
                    namespace_prefix: spec.namespace_prefix.clone(),
                },
                marks: Marks::new(domain),
                stop: Some(stop),
                task,
                ctx,
                writer,
            },
        );
        Ok(())
    }

    async fn engine_condition(&self, name: &str) -> Condition {
        let engines = self.engines.lock().await;
        let Some(e) = engines.get(name) else {
            return Condition::ready(false, "NotRunning", "the sync is not running");
        };
        match (e.ctx.cluster_status(&e.remote), e.ctx.cluster_status(LOCAL)) {
            (ClusterStatus::Unreachable(m), _) => Condition::ready(false, "RemoteUnreachable", m),
            (_, ClusterStatus::Unreachable(m)) => Condition::ready(false, "LocalUnreachable", m),
            (ClusterStatus::Ready, ClusterStatus::Ready) => Condition::ready(
                true,
                "Syncing",
                format!("syncing {} from {}", e.resource.kind, e.remote),
            ),
            _ => Condition::ready(
                false,
                "Starting",
                "waiting for the first list of both clusters",
            ),
        }
    }

    /// (objects, in sync, paused, failing) of a running sync.
    async fn counts(&self, name: &str) -> (u32, u32, u32, u32) {
        let engines = self.engines.lock().await;
        let Some(e) = engines.get(name) else {
            return (0, 0, 0, 0);
        };
        let (mut objects, mut in_sync, mut paused) = (0u32, 0u32, 0u32);
        for remote in e.ctx.list(&e.remote, &e.resource) {
            let source = ObjectName {
                namespace: remote.metadata.namespace.clone(),
                name: remote.name_any(),
            };
            let Some(target) = e.names.to_target(&source) else {
                continue;
            };
            objects += 1;
            let local = e.ctx.get(&ObjectKey::new(
                LOCAL,
                &e.resource,
                target.namespace,
                target.name,
            ));
            if is_paused(&remote, &e.marks)
                || local.as_deref().is_some_and(|l| is_paused(l, &e.marks))
            {
                paused += 1;
            }
            let applied = remote.annotations().get(&e.marks.remote_generation())
                == remote.metadata.generation.map(|g| g.to_string()).as_ref();
            if applied && local.is_some() {
                in_sync += 1;
            }
        }
        let failing = u32::try_from(e.ctx.metrics().failing()).unwrap_or(u32::MAX);
        (objects, in_sync, paused, failing)
    }

    /// A ResourceSync is being deleted: stop its engine, release the remote objects' sync
    /// finalizers (local objects stay), then remove the ResourceSync's finalizer.
    async fn finalize(
        &self,
        rs: &ResourceSync,
        ctx: &Context,
        api: &Api<ResourceSync>,
    ) -> kubesync::Result<Action> {
        let name = rs.name_any();
        if let Some(engine) = self.engines.lock().await.remove(&name) {
            engine.shutdown().await;
        }
        if let Ok((ar, remote, _)) = self.resolve(rs, ctx).await {
            let marks = Marks::new(
                rs.spec
                    .annotation_domain
                    .clone()
                    .unwrap_or_else(|| "kubesync.io".into()),
            );
            let names = SuffixTranslator {
                remote_name_suffix: rs.spec.remote_name_suffix.clone(),
                local_namespace_suffix: rs.spec.local_namespace_suffix.clone(),
                namespace_prefix: rs.spec.namespace_prefix.clone(),
            };
            let all: Api<DynamicObject> = Api::all_with(remote.client().clone(), &ar);
            for obj in all.list(&Default::default()).await? {
                let n = ObjectName {
                    namespace: obj.metadata.namespace.clone(),
                    name: obj.name_any(),
                };
                if names.to_target(&n).is_some() {
                    self.writer
                        .set_finalizer(&remote, &ar, &obj, &marks.finalizer(), false, FIELD_MANAGER)
                        .await?;
                }
            }
            tracing::info!(resourcesync = %name, "released the remote objects' finalizers");
        }
        self.set_own_finalizer(rs, RESOURCE_SYNC_FINALIZER, false)
            .await?;
        let _ = api;
        Ok(Action::done())
    }
}

impl Operator {
    /// Writes the status of one of the operator's own resources (a merge patch through the
    /// single writer).
    pub(crate) async fn patch_own_status<K, S>(&self, obj: &K, status: &S) -> kubesync::Result<()>
    where
        K: Resource<DynamicType = ()> + ResourceExt,
        S: serde::Serialize,
    {
        let patch = serde_json::json!({ "status": status });
        self.writer
            .merge_patch_status(
                &self.local,
                &ApiResource::erase::<K>(&()),
                obj.namespace().as_deref(),
                &obj.name_any(),
                &patch,
                FIELD_MANAGER,
            )
            .await?;
        Ok(())
    }

    /// Adds or removes one of the operator's finalizers on one of its own resources.
    pub(crate) async fn set_own_finalizer<K>(
        &self,
        obj: &K,
        finalizer: &str,
        present: bool,
    ) -> kubesync::Result<()>
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
    {
        let dynamic: DynamicObject = serde_json::from_value(serde_json::to_value(obj)?)?;
        self.writer
            .set_finalizer(
                &self.local,
                &ApiResource::erase::<K>(&()),
                &dynamic,
                finalizer,
                present,
                FIELD_MANAGER,
            )
            .await?;
        Ok(())
    }
}

/// Keeps the previous transition time when the condition's status did not change.
pub(crate) fn with_transition(
    mut c: Condition,
    old: &[Condition],
    generation: Option<i64>,
) -> Condition {
    c.observed_generation = generation;
    c.last_transition_time = match old.iter().find(|o| o.type_ == c.type_) {
        Some(o) if o.status == c.status => o.last_transition_time.clone(),
        _ => Some(
            jiff::Timestamp::now()
                .round(jiff::Unit::Second)
                .unwrap_or_else(|_| jiff::Timestamp::now())
                .to_string(),
        ),
    };
    c
}

struct OperatorReconciler(Arc<Operator>);

impl Reconciler for OperatorReconciler {
    type Error = kubesync::Error;

    async fn reconcile(&self, key: &ObjectKey, ctx: &Context) -> kubesync::Result<Action> {
        match key.kind.as_str() {
            "ResourceSync" => self.0.reconcile_resource_sync(key, ctx).await,
            "RemoteCluster" => self.0.reconcile_remote_cluster(key, ctx).await,
            "ObjectSync" => self.0.reconcile_object_sync(key, ctx).await,
            _ => Ok(Action::done()),
        }
    }
}
