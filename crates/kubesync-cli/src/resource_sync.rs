//! The ResourceSync and RemoteCluster controller: runs one spec/status sync engine per valid
//! `ResourceSync` and reports the reachability of each `RemoteCluster`.
//!
//! Creating, changing or deleting a `ResourceSync` starts, reconfigures or stops its engine at
//! run time. An invalid spec gets a `Ready=False` condition with a reason and a message; the
//! other syncs are unaffected. Statuses are assembled by pure functions
//! ([`resource_sync_status`], [`remote_cluster_status`]) and written through [`OwnWrites`].
//!
//! Never touches ObjectSyncs, and never writes but through [`OwnWrites`] (its engines write
//! through their own library writers).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use kubesync::Writer;
use kubesync::runtime::{Action, ClusterStatus, Context};
use kubesync::syncers::spec_status::freshness::Freshness;
use kubesync::syncers::spec_status::plan::{Marks, is_paused, local_current};
use kubesync::syncers::spec_status::{
    LocalDrift, Observer, SECRET_REPAIR_INTERVAL, SecretRepair, SpecStatusSync,
};
use kubesync::translate::{ObjectName, SuffixTranslator, Translator};
use kubesync::{Cluster, ObjectKey};
use tokio::sync::oneshot;

use crate::crd::{
    Condition, LocalDriftRecord, PropagationPolicy, RemoteCluster, RemoteClusterStatus,
    ResourceSync, ResourceSyncSpec, ResourceSyncStatus, SecretRepairMode,
};
use crate::events;
use crate::freshness::Lags;
use crate::remote::{LOCAL, RemoteClusters};
use crate::status::{self, OwnWrites, Reason, Refusal, with_transition};

/// Finalizer on a `ResourceSync`: on deletion, the remote objects' sync finalizers are
/// released first, so they can be deleted later without kubesync.
pub const RESOURCE_SYNC_FINALIZER: &str = "kubesync.io/resourcesync-cleanup";

/// Counts of a running sync, as its status (and `/metrics`) shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Remote objects in this shard.
    pub objects: u32,
    /// Remote objects whose local copy is current (see `plan::local_current`).
    pub in_sync: u32,
    /// How long the remote object that has been behind longest has been behind (zero when
    /// none is): since its unapplied generation was first seen, or else (a local copy missing,
    /// a deletion not yet carried out locally) since a count first found it behind.
    pub oldest_stale: Duration,
    /// Local copies found changed by someone else and reverted, since the sync started.
    pub drifts: u64,
    /// Objects paused on either side.
    pub paused: u32,
    /// Objects whose last reconcile failed.
    pub failing: u32,
    /// How its remote Secrets are repaired (with secret names).
    pub secret_repair: Option<SecretRepair>,
}

/// The status of a ResourceSync (pure): its `Ready` condition (transition time kept while
/// its status does not change), the counts of its sync, and the last local copy found changed
/// by someone else (the old record while the running sync found none).
pub fn resource_sync_status(
    old: &ResourceSyncStatus,
    generation: Option<i64>,
    ready: Condition,
    counts: Counts,
    last_drift: Option<LocalDriftRecord>,
    now: jiff::Timestamp,
) -> ResourceSyncStatus {
    ResourceSyncStatus {
        last_drift: last_drift.or_else(|| old.last_drift.clone()),
        observed_generation: generation,
        conditions: vec![with_transition(ready, &old.conditions, generation, now)],
        objects: counts.objects,
        in_sync: counts.in_sync,
        paused: counts.paused,
        failing: counts.failing,
        secret_repair: counts.secret_repair.map(|r| match r {
            SecretRepair::Watch => SecretRepairMode::Watch,
            SecretRepair::Poll(_) => SecretRepairMode::Poll,
        }),
    }
}

/// `spec.secretRepairInterval` (pure): a duration such as `30s`, `2m` or `1m30s`, at least
/// one second; absent, the default 30 s.
pub fn secret_repair_interval(spec: &ResourceSyncSpec) -> Result<Duration, Refusal> {
    let Some(text) = &spec.secret_repair_interval else {
        return Ok(SECRET_REPAIR_INTERVAL);
    };
    let invalid = |why: &str| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("spec.secretRepairInterval {text:?} {why}"),
        )
    };
    let parsed: jiff::SignedDuration = text
        .parse()
        .map_err(|_| invalid("is not a duration (e.g. 30s, 2m, 1m30s)"))?;
    match Duration::try_from(parsed) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(d),
        _ => Err(invalid("must be at least 1s")),
    }
}

/// The names in a ResourceSync's spec, judged as the apiserver judges names (pure): the
/// RemoteCluster's, the group and version, the affixes that form namespace and object names,
/// the Secrets' names and the annotation domain. The refusal names the field and the value.
fn check_names(spec: &ResourceSyncSpec) -> Result<(), Refusal> {
    use kubesync::validate::{is_dns_label, is_dns_subdomain, quoted};
    let invalid = |field: &str, value: &str, what: &str| {
        Err(Refusal::new(
            Reason::InvalidSpec,
            format!("spec.{field}: {} is not {what}", quoted(value)),
        ))
    };
    // Lowercase letters, digits and '-': what may be added to a namespace's or object's name.
    let affix = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let r = &spec.resource;
    if !r.group.is_empty() && !is_dns_subdomain(&r.group) {
        return invalid("resource.group", &r.group, "an API group (a DNS subdomain)");
    }
    if !is_dns_label(&r.version) {
        return invalid("resource.version", &r.version, "an API version such as v1");
    }
    if !is_dns_subdomain(&spec.remote_cluster) {
        return invalid(
            "remoteCluster",
            &spec.remote_cluster,
            "a RemoteCluster's name",
        );
    }
    for (field, value) in [
        ("remoteNameSuffix", &spec.remote_name_suffix),
        ("localNamespaceSuffix", &spec.local_namespace_suffix),
        ("namespacePrefix", &spec.namespace_prefix),
    ] {
        if !affix(value) {
            return invalid(
                field,
                value,
                "a name part: lowercase letters, digits and '-' only",
            );
        }
    }
    for (i, name) in spec.secret_names.iter().enumerate() {
        if !is_dns_subdomain(name) {
            return invalid(&format!("secretNames[{i}]"), name, "a Secret's name");
        }
    }
    if let Some(domain) = spec.annotation_domain.as_deref()
        && !is_dns_subdomain(domain)
    {
        return invalid(
            "annotationDomain",
            domain,
            "a DNS subdomain such as example.com",
        );
    }
    Ok(())
}

/// A RemoteCluster's spec, judged before any request (pure): the Secret it names, and its
/// `allowedNamespaces` selector (the refusal names the field's path).
pub fn check_remote_cluster(spec: &crate::crd::RemoteClusterSpec) -> Result<(), Refusal> {
    use kubesync::validate::{data_key, is_dns_label, is_dns_subdomain, quoted};
    let r = &spec.kubeconfig_secret_ref;
    let invalid = |m: String| Err(Refusal::new(Reason::InvalidSpec, m));
    if !is_dns_label(&r.namespace) {
        return invalid(format!(
            "spec.kubeconfigSecretRef.namespace: {} is not a namespace name",
            quoted(&r.namespace)
        ));
    }
    if !is_dns_subdomain(&r.name) {
        return invalid(format!(
            "spec.kubeconfigSecretRef.name: {} is not a Secret's name",
            quoted(&r.name)
        ));
    }
    if let Err(m) = data_key(&r.key) {
        return invalid(format!("spec.kubeconfigSecretRef.key: {m}"));
    }
    if let Some(allowed) = &spec.allowed_namespaces {
        kubesync::syncers::fan_out::rules::selector(allowed).map_err(|e| {
            Refusal::new(
                Reason::InvalidSpec,
                e.under("spec.allowedNamespaces").to_string(),
            )
        })?;
    }
    Ok(())
}

/// The status of a RemoteCluster (pure): its `Ready` condition, the server version it
/// answered with, and whether that version is within the supported range (condition
/// `VersionSupported`, with a warning for a person when it is not). A cluster that does not
/// answer keeps the version it last reported while it was not ready, and drops it (and the
/// version condition) when it goes from ready to not ready.
pub fn remote_cluster_status(
    old: &RemoteClusterStatus,
    generation: Option<i64>,
    ready: Condition,
    version: Option<String>,
    now: jiff::Timestamp,
) -> RemoteClusterStatus {
    let was_ready = old
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let server_version = version.or(if was_ready {
        None
    } else {
        old.server_version.clone()
    });
    let mut conditions = vec![with_transition(ready, &old.conditions, generation, now)];
    if let Some(v) = &server_version {
        let support = kubesync::version::support(v);
        let c = status::condition(
            "VersionSupported",
            support.is_supported(),
            support.reason(),
            format!("Kubernetes {v}: {}", support.message()),
        );
        conditions.push(with_transition(c, &old.conditions, generation, now));
    }
    RemoteClusterStatus {
        conditions,
        server_version,
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
    /// How its remote Secrets are repaired (with secret names).
    secret_repair: Option<SecretRepair>,
    /// Remote generations seen and not yet applied locally.
    freshness: Arc<Freshness>,
    /// Remote objects a count found behind without a first sight of their generation (a
    /// local copy missing, a deletion not carried out locally), since then.
    noticed: parking_lot::Mutex<HashMap<ObjectKey, Instant>>,
    /// Local copies found changed by someone else.
    drifts: Arc<Drifts>,
}

/// At most this many `CopyChanged` Events per ResourceSync and minute: a controller fighting
/// kubesync over a copy must not flood the Events (the count and `lastDrift` still see all).
pub const MAX_DRIFT_EVENTS_PER_MINUTE: u32 = 10;

/// The local copies of one running sync found changed by someone else (shared with its
/// engine's drift observer).
#[derive(Debug, Default)]
struct Drifts(parking_lot::Mutex<DriftLog>);

/// What [`Drifts`] holds.
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
    pub fn record(&mut self, drift: LocalDriftRecord, now: Instant) -> bool {
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

impl Engine {
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
    engines: tokio::sync::Mutex<HashMap<String, Engine>>,
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
            engines: tokio::sync::Mutex::new(HashMap::new()),
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

    /// Names of the `ResourceSync`s whose engines run now.
    pub async fn running(&self) -> Vec<String> {
        let mut v: Vec<String> = self.engines.lock().await.keys().cloned().collect();
        v.sort();
        v
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

    /// The counts of every running sync, by ResourceSync name.
    pub async fn all_counts(&self) -> Vec<(String, Counts)> {
        let names: Vec<String> = self.engines.lock().await.keys().cloned().collect();
        let mut all = Vec::with_capacity(names.len());
        for name in names {
            let counts = self.counts(&name).await;
            all.push((name, counts));
        }
        all
    }

    /// The runtime contexts of the running engines (their watches of remote clusters).
    pub async fn engine_contexts(&self) -> Vec<Context> {
        self.engines
            .lock()
            .await
            .values()
            .map(|e| e.ctx.clone())
            .collect()
    }

    /// Stops every engine.
    pub async fn shutdown(&self) {
        let engines: Vec<Engine> = self.engines.lock().await.drain().map(|(_, e)| e).collect();
        for engine in engines {
            engine.shutdown().await;
        }
    }

    /// Reconciles one RemoteCluster: connects and reports whether it answers.
    pub async fn reconcile_remote_cluster(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let Some(rc) = ctx.get_as::<RemoteCluster>(key)? else {
            return Ok(Action::done());
        };
        let checked = check_remote_cluster(&rc.spec);
        let connected = match checked {
            Err(refusal) => Err(refusal),
            Ok(()) => self.remotes.connect(&rc).await,
        };
        let (condition, version) = match connected {
            Err(refusal) => (status::refused(&refusal), None),
            Ok(conn) => {
                match tokio::time::timeout(Duration::from_secs(10), conn.cluster.server_version())
                    .await
                {
                    Ok(Ok(v)) => {
                        ctx.metrics().cluster(conn.cluster.name()).contacted();
                        (
                            status::ready(true, "Connected", format!("apiserver {v} answered")),
                            Some(v),
                        )
                    }
                    Ok(Err(e)) => (
                        status::ready(false, "Unreachable", kubesync::error::chain(&e)),
                        None,
                    ),
                    Err(_) => (
                        status::ready(false, "Unreachable", "no answer within 10s"),
                        None,
                    ),
                }
            }
        };
        let old = rc.status.clone().unwrap_or_default();
        let status = remote_cluster_status(
            &old,
            rc.metadata.generation,
            condition,
            version,
            status::now(),
        );
        if status != old {
            self.writes.patch_status(&rc, &status).await?;
        }
        // Reachability is re-checked every three status-refresh periods (30 s by default).
        Ok(Action::requeue(self.status_refresh * 3))
    }

    async fn resolve(
        &self,
        rs: &ResourceSync,
        ctx: &Context,
    ) -> Result<(ApiResource, Cluster, String, Duration), Refusal> {
        let spec = &rs.spec;
        if spec.resource.kind.is_empty() || spec.resource.version.is_empty() {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.resource needs a version and a kind",
            ));
        }
        if spec.remote_cluster.is_empty() {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.remoteCluster is empty",
            ));
        }
        check_names(spec)?;
        if spec.concurrency == Some(0) {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.concurrency must be at least 1",
            ));
        }
        let repair_interval = secret_repair_interval(spec)?;
        let gvk = GroupVersionKind::gvk(
            &spec.resource.group,
            &spec.resource.version,
            &spec.resource.kind,
        );
        let (ar, caps) = kube::discovery::pinned_kind(self.local.client(), &gvk)
            .await
            .map_err(|e| {
                Refusal::new(
                    Reason::ResourceNotFound,
                    format!(
                        "{}/{} {} is not served by this cluster: {}",
                        gvk.group,
                        gvk.version,
                        gvk.kind,
                        kubesync::error::describe_kube(&e)
                    ),
                )
            })?;
        if caps.scope != kube::discovery::Scope::Namespaced {
            return Err(Refusal::new(
                Reason::InvalidSpec,
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
                Reason::NoStatusSubresource,
                format!("{} has no status subresource", gvk.kind),
            ));
        }
        let conn = self
            .remotes
            .connect_named(ctx, &spec.remote_cluster)
            .await?;
        Ok((ar, conn.cluster, conn.fingerprint, repair_interval))
    }

    /// Reconciles one ResourceSync: starts, reconfigures or stops its engine, and reports.
    pub async fn reconcile_resource_sync(
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
                if let Some(engine) = self.engines.lock().await.remove(&name) {
                    tracing::info!(resourcesync = %name, reason = %refusal.reason, "invalid ResourceSync; stopping its sync");
                    engine.shutdown().await;
                }
                tracing::warn!(resourcesync = %name, reason = %refusal.reason, message = %refusal.message, "ResourceSync refused");
                status::refused(&refusal)
            }
            Ok((ar, remote, kubeconfig_hash, repair_interval)) => {
                self.ensure_engine(&rs, ar, remote, &kubeconfig_hash, repair_interval)
                    .await?;
                self.engine_condition(&name).await
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

    async fn ensure_engine(
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
        let mut engines = self.engines.lock().await;
        if engines
            .get(&name)
            .is_some_and(|e| e.fingerprint == fingerprint && !e.task.is_finished())
        {
            return Ok(());
        }
        let drifts = Arc::new(Drifts::default());
        if let Some(old) = engines.remove(&name) {
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
        let engine = builder.build(remote, self.local.clone());
        let writer = engine.write_counter();
        let (controller, reconciler) = engine.into_parts().await?;
        let secret_repair = reconciler.syncer().secret_repair();
        let freshness = reconciler.syncer().freshness();
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
                names: names(spec),
                marks: Marks::new(domain),
                stop: Some(stop),
                task,
                ctx,
                writer,
                secret_repair,
                freshness,
                noticed: Default::default(),
                drifts,
            },
        );
        Ok(())
    }

    async fn engine_condition(&self, name: &str) -> Condition {
        let engines = self.engines.lock().await;
        let Some(e) = engines.get(name) else {
            return status::ready(false, "NotRunning", "the sync is not running");
        };
        match (e.ctx.cluster_status(&e.remote), e.ctx.cluster_status(LOCAL)) {
            (ClusterStatus::Unreachable(m), _) => status::ready(false, "RemoteUnreachable", m),
            (_, ClusterStatus::Unreachable(m)) => status::ready(false, "LocalUnreachable", m),
            (ClusterStatus::Ready, ClusterStatus::Ready) => status::ready(
                true,
                "Syncing",
                format!("syncing {} from {}", e.resource.kind, e.remote),
            ),
            _ => status::ready(
                false,
                "Starting",
                "waiting for the first list of both clusters",
            ),
        }
    }

    /// The counts of a running sync and how it repairs remote Secrets (zero and `None` when
    /// it does not run).
    async fn counts(&self, name: &str) -> Counts {
        let engines = self.engines.lock().await;
        let Some(e) = engines.get(name) else {
            return Counts::default();
        };
        let mut counts = Counts {
            secret_repair: e.secret_repair,
            ..Counts::default()
        };
        let now = Instant::now();
        let mut oldest = now;
        let mut noticed = e.noticed.lock();
        let mut still_noticed = HashMap::new();
        for remote in e.ctx.list(&e.remote, &e.resource) {
            let source = ObjectName {
                namespace: remote.metadata.namespace.clone(),
                name: remote.name_any(),
            };
            let Some(target) = e.names.to_target(&source) else {
                continue;
            };
            counts.objects += 1;
            let local = e.ctx.get(&ObjectKey::new(
                LOCAL,
                &e.resource,
                target.namespace,
                target.name,
            ));
            if is_paused(&remote, &e.marks)
                || local.as_deref().is_some_and(|l| is_paused(l, &e.marks))
            {
                counts.paused += 1;
            }
            if local_current(&remote, local.is_some(), &e.marks) {
                counts.in_sync += 1;
            } else {
                // Keys are built for the objects behind only: this runs at every scrape.
                let key = ObjectKey::for_object(&e.remote, &e.resource, &remote);
                let generation = remote.metadata.generation.unwrap_or(0);
                let since = match e.freshness.since(&key, generation) {
                    Some(seen) => seen,
                    None => {
                        let since = noticed.get(&key).copied().unwrap_or(now);
                        still_noticed.insert(key, since);
                        since
                    }
                };
                oldest = oldest.min(since);
            }
        }
        *noticed = still_noticed;
        drop(noticed);
        // Deleted remote objects' entries go (their last event does not say they are gone).
        if !e.freshness.is_empty() {
            e.freshness.retain(|k| e.ctx.get(k).is_some());
        }
        counts.oldest_stale = now.saturating_duration_since(oldest);
        counts.failing = u32::try_from(e.ctx.metrics().failing()).unwrap_or(u32::MAX);
        counts.drifts = e.drifts.lock().count;
        counts
    }

    /// The last local copy the running sync found changed by someone else.
    async fn last_drift(&self, name: &str) -> Option<LocalDriftRecord> {
        let engines = self.engines.lock().await;
        engines.get(name)?.drifts.lock().last.clone()
    }

    /// Told by the engine of `rs` of each local copy it found changed by someone else and
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
            if !drifts.lock().record(record, Instant::now())
                || !budget.allow(&budget_key, Instant::now())
            {
                return;
            }
            let event = kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Warning,
                reason: "CopyChanged".into(),
                note: Some(crate::object_sync::status::truncate_note(format!(
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

    /// A ResourceSync is being deleted: stop its engine, release the remote objects' sync
    /// finalizers (local objects stay), then remove the ResourceSync's finalizer.
    ///
    /// A release that fails keeps the ResourceSync (and its finalizer): the failure is logged,
    /// shown as its `Ready=False` condition (reason `FinalizersNotReleased`), and retried.
    /// Only a spec under which no sync can have run (see [`nothing_to_release`]) lets it go
    /// without a release, with a warning.
    async fn finalize(&self, rs: &ResourceSync, ctx: &Context) -> kubesync::Result<Action> {
        let name = rs.name_any();
        if let Some(engine) = self.engines.lock().await.remove(&name) {
            engine.shutdown().await;
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
                status::ready(false, failure.reason.as_str(), message),
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

/// Whether a refusal means no sync can have run under this spec, so no remote object can
/// carry its finalizer (pure): an invalid spec, or a kind this cluster does not serve or that
/// has no status subresource. A RemoteCluster that is missing or cannot be connected is not
/// such a case: its objects may carry finalizers that only a release removes.
pub fn nothing_to_release(refusal: &Refusal) -> bool {
    matches!(
        refusal.reason,
        Reason::InvalidSpec | Reason::ResourceNotFound | Reason::NoStatusSubresource
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().expect("time")
    }

    #[test]
    fn resource_sync_status_carries_counts_and_keeps_the_transition_time() {
        let counts = Counts {
            objects: 3,
            in_sync: 2,
            paused: 1,
            failing: 0,
            secret_repair: Some(SecretRepair::Poll(SECRET_REPAIR_INTERVAL)),
            oldest_stale: Duration::from_secs(7),
            drifts: 1,
        };
        let drift = LocalDriftRecord {
            object: "ops-a/w1".into(),
            detected_time: "2024-01-01T00:00:00Z".into(),
            fields: vec!["spec.size".into()],
            managers: Vec::new(),
        };
        let first = resource_sync_status(
            &ResourceSyncStatus::default(),
            Some(4),
            status::ready(true, "Syncing", "syncing Widget from remote:mgmt"),
            counts,
            Some(drift.clone()),
            t("2024-01-01T00:00:00Z"),
        );
        assert_eq!(first.observed_generation, Some(4));
        assert_eq!(first.last_drift.as_ref(), Some(&drift));
        assert_eq!(
            (first.objects, first.in_sync, first.paused, first.failing),
            (3, 2, 1, 0)
        );
        let again = resource_sync_status(
            &first,
            Some(4),
            status::ready(true, "Syncing", "syncing Widget from remote:mgmt"),
            counts,
            None,
            t("2024-01-01T00:05:00Z"),
        );
        assert_eq!(
            again, first,
            "nothing changed (the last drift kept while a restarted sync found none): nothing to write"
        );
        assert_eq!(first.secret_repair, Some(SecretRepairMode::Poll));
        let refused = resource_sync_status(
            &first,
            Some(5),
            status::refused(&Refusal::new(
                Reason::InvalidSpec,
                "spec.remoteCluster is empty",
            )),
            Counts::default(),
            None,
            t("2024-01-01T00:05:00Z"),
        );
        assert_eq!(refused.conditions[0].reason, "InvalidSpec");
        assert_ne!(
            refused.conditions[0].last_transition_time,
            first.conditions[0].last_transition_time
        );
    }

    #[test]
    fn drift_events_are_limited_per_minute_but_every_drift_is_counted() {
        let mut log = DriftLog::default();
        let t0 = Instant::now();
        let record = |n: u64| LocalDriftRecord {
            object: format!("ns/w{n}"),
            ..Default::default()
        };
        let allowed = (0..15)
            .filter(|n| log.record(record(*n), t0 + Duration::from_secs(*n)))
            .count();
        assert_eq!(allowed, MAX_DRIFT_EVENTS_PER_MINUTE as usize);
        assert_eq!(log.count, 15);
        assert_eq!(log.last.as_ref().map(|r| r.object.as_str()), Some("ns/w14"));
        assert!(
            log.record(record(99), t0 + Duration::from_secs(60)),
            "a new minute"
        );
    }

    #[test]
    fn secret_repair_intervals_are_durations_of_at_least_a_second() {
        let with = |v: Option<&str>| {
            let mut spec: ResourceSyncSpec = serde_json::from_value(serde_json::json!({
                "resource": {"version": "v1", "kind": "Widget"}, "remoteCluster": "mgmt"
            }))
            .expect("spec");
            spec.secret_repair_interval = v.map(String::from);
            secret_repair_interval(&spec)
        };
        assert_eq!(with(None).expect("default"), Duration::from_secs(30));
        for (text, secs) in [("30s", 30), ("2m", 120), ("1m30s", 90), ("1s", 1)] {
            assert_eq!(with(Some(text)).expect(text), Duration::from_secs(secs));
        }
        for (bad, says) in [
            ("soon", "is not a duration"),
            ("500ms", "at least 1s"),
            ("-5s", "at least 1s"),
        ] {
            let refusal = with(Some(bad)).expect_err(bad);
            assert_eq!(refusal.reason, "InvalidSpec");
            assert!(refusal.message.contains(says), "{}", refusal.message);
        }
    }

    #[test]
    fn only_specs_that_cannot_have_run_skip_the_release() {
        assert!(nothing_to_release(&Refusal::new(Reason::InvalidSpec, "")));
        assert!(nothing_to_release(&Refusal::new(
            Reason::NoStatusSubresource,
            ""
        )));
        for reason in [
            Reason::RemoteClusterNotFound,
            Reason::KubeconfigSecretInvalid,
            Reason::KubeconfigInvalid,
        ] {
            assert!(!nothing_to_release(&Refusal::new(reason, "")), "{reason}");
        }
    }

    #[test]
    fn remote_cluster_version_is_dropped_when_it_stops_answering() {
        let now = t("2024-01-01T00:00:00Z");
        let up = remote_cluster_status(
            &RemoteClusterStatus::default(),
            None,
            status::ready(true, "Connected", "apiserver v1.37.2 answered"),
            Some("v1.37.2".into()),
            now,
        );
        assert_eq!(up.server_version.as_deref(), Some("v1.37.2"));
        let supported = &up.conditions[1];
        assert_eq!(
            (supported.type_.as_str(), supported.status.as_str()),
            ("VersionSupported", "True")
        );
        let down = remote_cluster_status(
            &up,
            None,
            status::ready(false, "Unreachable", "connect"),
            None,
            now,
        );
        assert_eq!(down.server_version, None);
        assert_eq!(down.conditions.len(), 1, "{:?}", down.conditions);
    }

    #[test]
    fn remote_cluster_outside_the_supported_range_is_warned_about() {
        let (t0, t1) = (t("2024-01-01T00:00:00Z"), t("2024-01-01T00:10:00Z"));
        let ready = || status::ready(true, "Connected", "answered");
        let old = remote_cluster_status(
            &RemoteClusterStatus::default(),
            Some(1),
            ready(),
            Some("v1.29.4-gke.100".into()),
            t0,
        );
        let c = &old.conditions[1];
        assert_eq!(c.type_, "VersionSupported");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "OlderThanSupported")
        );
        assert!(
            c.message.contains("v1.29.4-gke.100") && c.message.contains("v1.33"),
            "{}",
            c.message
        );
        // Ready stays True: an old cluster is still served.
        assert_eq!(old.conditions[0].status, "True");
        // Upgraded: the condition turns True at the new time.
        let upgraded = remote_cluster_status(&old, Some(1), ready(), Some("v1.35.0".into()), t1);
        assert_eq!(upgraded.conditions[1].status, "True");
        assert_eq!(upgraded.conditions[1].last_transition_time.0, t1);
        let newer = remote_cluster_status(&old, Some(1), ready(), Some("v1.40.1".into()), t1);
        assert_eq!(newer.conditions[1].reason, "NewerThanTested");
        assert_eq!(
            newer.conditions[1].last_transition_time.0, t0,
            "still False"
        );
    }

    #[test]
    fn names_in_a_resource_sync_and_a_remote_cluster_are_checked_before_any_request() {
        let rs = |v: serde_json::Value| -> ResourceSyncSpec {
            let mut base = serde_json::json!({
                "resource": {"group": "demo.kubesync.io", "version": "v1", "kind": "Widget"},
                "remoteCluster": "eu"});
            base.as_object_mut()
                .expect("object")
                .extend(v.as_object().cloned().expect("object"));
            serde_json::from_value(base).expect("spec")
        };
        assert_eq!(
            check_names(&rs(
                serde_json::json!({"namespacePrefix": "t-", "remoteNameSuffix": "-west", "secretNames": ["creds"]})
            )),
            Ok(())
        );
        for (v, says) in [
            (
                serde_json::json!({"remoteCluster": "EU West"}),
                "spec.remoteCluster: \"EU West\" is not a RemoteCluster's name",
            ),
            (
                serde_json::json!({"namespacePrefix": "T_"}),
                "spec.namespacePrefix: \"T_\" is not a name part",
            ),
            (
                serde_json::json!({"secretNames": ["ok", "not/ok"]}),
                "spec.secretNames[1]: \"not/ok\" is not a Secret's name",
            ),
            (
                serde_json::json!({"annotationDomain": "Example.com"}),
                "spec.annotationDomain:",
            ),
            (
                serde_json::json!({"resource": {"version": "v 1", "kind": "Widget"}}),
                "spec.resource.version:",
            ),
        ] {
            let refusal = check_names(&rs(v)).expect_err(says);
            assert_eq!(refusal.reason, "InvalidSpec");
            assert!(refusal.message.starts_with(says), "{}", refusal.message);
        }
        let rc = |v: serde_json::Value| -> crate::crd::RemoteClusterSpec {
            serde_json::from_value(v).expect("spec")
        };
        let ok = rc(
            serde_json::json!({"kubeconfigSecretRef": {"namespace": "kubesync", "name": "eu"},
            "allowedNamespaces": {"matchLabels": {"tenant": "yes"}}}),
        );
        assert_eq!(check_remote_cluster(&ok), Ok(()));
        for (v, says) in [
            (
                serde_json::json!({"kubeconfigSecretRef": {"namespace": "kubesync", "name": "eu"},
                "allowedNamespaces": {"matchLabels": {"tenant": "a(b"}}}),
                "spec.allowedNamespaces.matchLabels[\"tenant\"]: \"a(b\" is not a label value",
            ),
            (
                serde_json::json!({"kubeconfigSecretRef": {"namespace": "Kube Sync", "name": "eu"}}),
                "spec.kubeconfigSecretRef.namespace:",
            ),
            (
                serde_json::json!({"kubeconfigSecretRef": {"namespace": "kubesync", "name": "eu", "key": "a/b"}}),
                "spec.kubeconfigSecretRef.key:",
            ),
        ] {
            let refusal = check_remote_cluster(&rc(v)).expect_err(says);
            assert!(refusal.message.starts_with(says), "{}", refusal.message);
        }
    }
}
