//! The ObjectSync controller: one object copied to many namespaces and clusters, run on the
//! library's fan-out engine. It also runs ClusterObjectSyncs: the same spec and status,
//! declared by cluster admins, for cluster-scoped kinds and sources in any namespace.
//!
//! Resolves an ObjectSync's spec (checked against the operator's [`ObjectSyncPolicy`]) into a
//! fan-out declaration, lets the fan-out reconcile it, and reports: the status is assembled
//! purely ([`status::object_sync_status`]) and written through [`OwnWrites`]; condition
//! changes become Kubernetes Events; the per-ObjectSync gauges are kept for `/metrics`.
//!
//! Never touches ResourceSyncs or their engines, and never writes but through [`OwnWrites`]
//! (copies are written by the fan-out's own writer; Events by kube's recorder, or, about a
//! ClusterObjectSync, by one create in [`events::CLUSTER_EVENTS_NAMESPACE`]).

pub mod policy;
pub mod status;

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::api::Api;
use kube::core::{ApiResource, GroupVersionKind, SelectorExt};
use kube::{Resource, ResourceExt};
use kubesync::ObjectKey;
use kubesync::error::describe_kube;
use kubesync::runtime::{Action, Context};
use kubesync::syncers::fan_out::plan::MAX_NAME;
use kubesync::syncers::fan_out::rules::{
    CopyPatch, CopyRules, DataFilter, DeletionPolicy, KeyFilter, MANAGED_BY, NamespaceRule,
    OnConflict, Owner, Strategy, selector,
};
use kubesync::syncers::fan_out::spec::{Admits, Consent, Exempts};
use kubesync::syncers::fan_out::{
    Declaration, Destination, DestinationRef, DestinationState, DestinationStatus, FanOut,
    FanOutSpec, Mode, Report, Selection, SourceRef,
};
use kubesync::validate;

pub use self::policy::ObjectSyncPolicy;
use self::policy::refusal_message;
pub use self::status::condition_events;
use self::status::{Observation, object_sync_status};
use crate::crd::{
    ClusterObjectSync, ConflictPolicy, CopyState, CopyStrategy, DestinationPatch, ObjectSync,
    ObjectSyncDeletionPolicy, ObjectSyncDestination, ObjectSyncSource, ObjectSyncSpec,
    ObjectSyncStatus, SyncGrant, SyncMode,
};
use crate::events;
use crate::freshness::{DestinationKey, Lags, behind};
use crate::remote::{LOCAL, RemoteClusters, display_name};
use crate::status::{OwnWrites, Reason, Refusal};

/// Finalizer on an ObjectSync: its copies are deleted before it goes.
pub const OBJECT_SYNC_FINALIZER: &str = "kubesync.io/objectsync-cleanup";

/// An ObjectSync's state as `/metrics` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectSyncGauge {
    /// Its Ready condition is True.
    pub ready: bool,
    /// Destinations by state (every state present).
    pub destinations: BTreeMap<CopyState, u32>,
    /// Copies behind their source now (see [`CopyState::is_behind`], and copies of a source
    /// whose change the fan-out has seen and not yet copied).
    pub stale: u32,
    /// How long the oldest of them has been behind (zero when none is).
    pub oldest_stale: Duration,
    /// Copies found changed by someone else, since the operator started.
    pub drifts: u64,
}

impl ObjectSyncGauge {
    /// The gauge of a status (pure).
    pub fn of(status: &ObjectSyncStatus) -> Self {
        let mut destinations: BTreeMap<CopyState, u32> =
            CopyState::ALL.into_iter().map(|s| (s, 0)).collect();
        for d in &status.destinations {
            *destinations.entry(d.state).or_default() += 1;
        }
        Self {
            ready: status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            destinations,
            ..Default::default()
        }
    }
}

/// An ObjectSync or a ClusterObjectSync: what the controller reads of either. A
/// ClusterObjectSync has no namespace; that is how the controller tells them apart.
pub trait SyncObject:
    Resource<DynamicType = ()> + serde::Serialize + serde::de::DeserializeOwned + Clone
{
    /// The spec.
    fn sync_spec(&self) -> &ObjectSyncSpec;
    /// The status, if any.
    fn sync_status(&self) -> Option<&ObjectSyncStatus>;
}

impl SyncObject for ObjectSync {
    fn sync_spec(&self) -> &ObjectSyncSpec {
        &self.spec
    }
    fn sync_status(&self) -> Option<&ObjectSyncStatus> {
        self.status.as_ref()
    }
}

impl SyncObject for ClusterObjectSync {
    fn sync_spec(&self) -> &ObjectSyncSpec {
        &self.spec.sync
    }
    fn sync_status(&self) -> Option<&ObjectSyncStatus> {
        self.status.as_ref()
    }
}

/// What the controller remembers of one ObjectSync.
#[derive(Debug, Default)]
struct Record {
    /// Its last reported state, for `/metrics`.
    gauge: ObjectSyncGauge,
    /// Per condition type, the (status, reason) last published as an Event: a reconcile that
    /// reads a status older than its own last patch does not publish that transition again.
    published: BTreeMap<String, (String, String)>,
    /// Its destinations behind their source, each since when.
    behind: HashMap<DestinationKey, Instant>,
    /// Its sources as the last reconcile copied them: key, resourceVersion, and how many
    /// copies then carried that version.
    sources: Vec<(ObjectKey, String, u32)>,
    /// The drift last found at each copy (counted and announced once).
    drifts_seen: HashMap<DestinationKey, String>,
}

/// At most this many Events about reverted copies are published per reconcile; one more
/// says how many others there were.
pub const MAX_DRIFT_EVENTS: usize = 5;

/// The ObjectSync controller.
pub struct ObjectSyncController {
    local: kubesync::Cluster,
    writes: OwnWrites,
    remotes: Arc<RemoteClusters>,
    policy: Arc<ObjectSyncPolicy>,
    fan_out: FanOut,
    /// What is remembered of each ObjectSync, by (namespace, name), and of each
    /// ClusterObjectSync, by ("", name); forgotten with it.
    records: Mutex<BTreeMap<(String, String), Record>>,
    /// Publishes Kubernetes Events about ObjectSyncs.
    recorder: kube::runtime::events::Recorder,
    /// Who publishes them (for the Events about ClusterObjectSyncs, published without it).
    reporter: kube::runtime::events::Reporter,
    /// The propagation lags of the copies written.
    lags: Lags,
    /// The per-minute cap of Events about each ObjectSync.
    budget: events::EventBudget,
}

impl ObjectSyncController {
    /// A controller copying with at most `concurrency` writes in flight per ObjectSync.
    pub fn new(
        local: kubesync::Cluster,
        writes: OwnWrites,
        remotes: Arc<RemoteClusters>,
        policy: ObjectSyncPolicy,
        concurrency: usize,
        lags: Lags,
    ) -> Self {
        let reporter = events::reporter();
        let recorder =
            kube::runtime::events::Recorder::new(local.client().clone(), reporter.clone());
        Self {
            local,
            writes,
            remotes,
            policy: Arc::new(policy),
            fan_out: FanOut::new(LOCAL).concurrency(concurrency),
            records: Mutex::new(BTreeMap::new()),
            recorder,
            reporter,
            lags,
            budget: events::EventBudget::default(),
        }
    }

    /// The fan-out engine (its watches and write counts).
    pub fn fan_out(&self) -> &FanOut {
        &self.fan_out
    }

    /// Each ObjectSync's last reported state, by (namespace, name), and each
    /// ClusterObjectSync's, by ("", name). With `ctx`, only those that still exist in the
    /// operator's store are shown (a reconcile that was in flight when one was deleted may
    /// have recorded it after it was forgotten).
    pub fn gauges(&self, ctx: Option<&Context>) -> Vec<((String, String), ObjectSyncGauge)> {
        let namespaced = ApiResource::erase::<ObjectSync>(&());
        let cluster = ApiResource::erase::<ClusterObjectSync>(&());
        let mut records = self.lock();
        if let Some(ctx) = ctx {
            records.retain(|(ns, name), _| {
                let key = if ns.is_empty() {
                    ObjectKey::new(LOCAL, &cluster, None, name)
                } else {
                    ObjectKey::new(LOCAL, &namespaced, Some(ns.clone()), name)
                };
                ctx.get(&key).is_some()
            });
        }
        let now = Instant::now();
        records
            .iter()
            .map(|(k, r)| (k.clone(), self.fresh_gauge(r, now)))
            .collect()
    }

    /// A record's gauge with its staleness as of `now`: the copies the last reconcile found
    /// behind, and the copies of each source whose newer version the fan-out has seen since.
    fn fresh_gauge(&self, r: &Record, now: Instant) -> ObjectSyncGauge {
        let mut stale = u32::try_from(r.behind.len()).unwrap_or(u32::MAX);
        let mut oldest = r.behind.values().min().copied();
        for (key, copied, copies) in &r.sources {
            if let Some((rv, seen)) = self.fan_out.source_seen(key)
                && rv != *copied
                && *copies > 0
            {
                stale = stale.saturating_add(*copies);
                oldest = Some(oldest.map_or(seen, |o| o.min(seen)));
            }
        }
        ObjectSyncGauge {
            stale,
            oldest_stale: oldest.map_or(Duration::ZERO, |o| now.saturating_duration_since(o)),
            ..r.gauge.clone()
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeMap<(String, String), Record>> {
        self.records.lock()
    }

    /// The kind's resource, and whether it is namespaced.
    async fn resolve_kind(
        &self,
        group: &str,
        version: Option<&str>,
        kind: &str,
    ) -> Result<(ApiResource, bool), Refusal> {
        let not_found = |e: String| {
            Refusal::new(
                Reason::ResourceNotFound,
                format!("{kind} in group {group:?} is not served: {e}"),
            )
        };
        let (ar, caps) = match version {
            Some(v) => kube::discovery::pinned_kind(
                self.local.client(),
                &GroupVersionKind::gvk(group, v, kind),
            )
            .await
            .map_err(|e| not_found(describe_kube(&e)))?,
            None if group.is_empty() => kube::discovery::pinned_kind(
                self.local.client(),
                &GroupVersionKind::gvk("", "v1", kind),
            )
            .await
            .map_err(|e| not_found(describe_kube(&e)))?,
            None => {
                // The preferred version first, then the group's other versions in order (a
                // kind may be served only in a version the group does not prefer, e.g. a
                // beta kind beside a GA group version).
                let g = kube::discovery::group(self.local.client(), group)
                    .await
                    .map_err(|e| not_found(describe_kube(&e)))?;
                g.recommended_kind(kind)
                    .or_else(|| {
                        g.versions()
                            .flat_map(|v| g.versioned_resources(v))
                            .find(|(ar, _)| ar.kind == kind)
                    })
                    .ok_or_else(|| not_found("no version of the group serves it".into()))?
            }
        };
        Ok((ar, caps.scope == kube::discovery::Scope::Namespaced))
    }

    /// Registers the RemoteCluster named by a destination and returns its runtime name.
    async fn destination_cluster(&self, ctx: &Context, name: &str) -> Result<String, Refusal> {
        let conn = self.remotes.connect_named(ctx, name).await?;
        // Re-registering replaces the handle when the kubeconfig changed; the client itself
        // is cached by the remote-cluster service.
        ctx.add_cluster(conn.cluster.clone());
        Ok(conn.cluster.name().to_string())
    }

    /// The consent an ObjectSync in the untrusted `namespace` needs: its own namespace takes
    /// the default-grantable kinds without a grant; everything else needs a SyncGrant that
    /// admits it, and an adoption one that says `adopt: true` (see [`policy`]).
    fn consent(&self, namespace: &str, resource: &ApiResource) -> Consent {
        let policy = self.policy.clone();
        let (ns, ar) = (namespace.to_string(), resource.clone());
        let admits: Admits = {
            let (policy, ns, ar) = (policy.clone(), ns.clone(), ar.clone());
            Arc::new(move |grant, source, at| policy.admits(grant, &ns, via(at), &ar, source))
        };
        let adopts: Admits = {
            let (policy, ns, ar) = (policy.clone(), ns.clone(), ar.clone());
            Arc::new(move |grant, source, at| policy.adopts(grant, &ns, via(at), &ar, source))
        };
        let exempts: Exempts = {
            let (policy, ar) = (policy.clone(), ar.clone());
            Arc::new(move |source| !policy.must_be_named(&ar, source))
        };
        Consent {
            resource: ApiResource::erase::<SyncGrant>(&()),
            exempt: vec![namespace.to_string()],
            max_copies: match self.policy.max_copies {
                0 => policy::DEFAULT_MAX_COPIES,
                n => n,
            },
            exempts,
            admits,
            adopts,
            refusal: Arc::new(move |source, at| {
                let named = policy.must_be_named(&ar, source);
                refusal_message(&ns, via(at), &ar, named, &at.namespace)
            }),
        }
    }

    /// An untrusted ObjectSync may write into a RemoteCluster only when the RemoteCluster's
    /// `allowedNamespaces` selects its namespace.
    async fn check_remote_allowed(
        &self,
        ctx: &Context,
        namespace: &str,
        remote: &str,
    ) -> Result<(), Refusal> {
        let rc = RemoteClusters::lookup(ctx, remote)?;
        let not_allowed = |why: String| {
            Refusal::new(
                Reason::RemoteClusterNotAllowed,
                format!(
                    "RemoteCluster {remote} does not admit ObjectSyncs from namespace {namespace}: {why}"
                ),
            )
        };
        let Some(allowed) = &rc.spec.allowed_namespaces else {
            return Err(not_allowed(
                "without spec.allowedNamespaces only the operator's trusted namespaces may use it; a selector there matching this namespace's labels would admit it".into(),
            ));
        };
        let allowed = selector(allowed)
            .map_err(|m| not_allowed(format!("its spec.allowedNamespaces is invalid: {m}")))?;
        let labels = Api::<Namespace>::all(self.local.client().clone())
            .get(namespace)
            .await
            .map_err(|e| {
                not_allowed(format!(
                    "namespace {namespace} could not be read: {}",
                    describe_kube(&e)
                ))
            })?
            .metadata
            .labels
            .unwrap_or_default();
        if allowed.matches(&labels) {
            Ok(())
        } else {
            Err(not_allowed(format!(
                "its spec.allowedNamespaces ({allowed}) does not match the namespace's labels"
            )))
        }
    }

    /// The fan-out declaration of an ObjectSync in namespace `own` (`Some`), or of a
    /// ClusterObjectSync (`None`: an admin's, trusted, with sources anywhere).
    ///
    /// Every field is checked before any request ([`check_spec`]); then the kind is resolved
    /// (discovery), the kind-dependent rules and the operator's policy are applied, and only
    /// then are RemoteClusters registered.
    async fn fan_out_spec(
        &self,
        own: Option<&str>,
        spec: &ObjectSyncSpec,
        ctx: &Context,
    ) -> Result<FanOutSpec, Refusal> {
        let Checked {
            selection,
            destinations: checked,
        } = check_spec(spec)?;
        let (resource, namespaced) = self
            .resolve_kind(
                &spec.source.group,
                spec.source.version.as_deref(),
                &spec.source.kind,
            )
            .await?;
        let source_ns = source_namespace(&spec.source, own, namespaced)?;
        for (i, d) in spec.destinations.iter().enumerate() {
            check_destination(d, namespaced, &spec.source.kind).map_err(|m| {
                Refusal::new(Reason::InvalidSpec, format!("spec.destinations[{i}]: {m}"))
            })?;
        }
        let named: Vec<Option<String>> = spec
            .destinations
            .iter()
            .map(|d| d.namespace.clone())
            .collect();
        self.policy.check(
            own,
            &source_ns,
            &spec.source.group,
            &spec.source.kind,
            &named,
        )?;
        let trusted = own.is_none_or(|ns| self.policy.is_trusted(ns));
        let consent = match own {
            Some(ns) if !trusted => Some(self.consent(ns, &resource)),
            _ => None,
        };
        if let Some(ns) = own.filter(|_| !trusted) {
            for c in spec
                .destinations
                .iter()
                .filter_map(|d| d.cluster.as_deref())
            {
                self.check_remote_allowed(ctx, ns, c).await?;
            }
        }
        let mut destinations = Vec::new();
        for (d, (selector, patches)) in spec.destinations.iter().zip(checked) {
            let cluster = match &d.cluster {
                None => None,
                Some(c) => Some(self.destination_cluster(ctx, c).await?),
            };
            let mut exclude = d.exclude_namespaces.clone();
            exclude.extend(self.policy.deny_destination_namespaces.iter().cloned());
            destinations.push(Destination {
                cluster,
                namespaces: NamespaceRule {
                    namespace: d.namespace.clone(),
                    namespace_selector: selector,
                    exclude_namespaces: exclude,
                    only_namespaces: self.policy.allow_destination_namespaces.clone(),
                },
                name: d.name.clone(),
                name_prefix: d.name_prefix.clone(),
                name_suffix: d.name_suffix.clone(),
                strategy: match d.strategy {
                    CopyStrategy::Apply => Strategy::Apply,
                    CopyStrategy::Replace => Strategy::Replace,
                },
                patches,
            });
        }
        Ok(FanOutSpec {
            source: match selection {
                None => SourceRef::one(resource, source_ns, spec.source.name.clone()),
                Some(selection) => SourceRef::selected(resource, source_ns, selection),
            },
            destinations,
            consent,
            on_conflict: match spec.on_conflict {
                ConflictPolicy::Skip => OnConflict::Skip,
                ConflictPolicy::Adopt => OnConflict::Adopt,
            },
            rules: CopyRules {
                labels: KeyFilter {
                    include: spec.labels.include.clone(),
                    exclude: spec.labels.exclude.clone(),
                },
                annotations: KeyFilter {
                    include: spec.annotations.include.clone(),
                    exclude: spec.annotations.exclude.clone(),
                },
                data: spec.data.as_ref().map(|d| DataFilter {
                    include: d.include.clone(),
                    rename: d.rename.clone(),
                }),
            },
            deletion_policy: deletion_policy(spec),
            mode: mode(spec),
        })
    }

    /// What a going declaration whose spec is refused needs to remove its copies: the kind
    /// it names (resolved), and the clusters its destinations name that can be connected.
    /// Nothing else matters when it goes: copies are found by their marks, and every one is
    /// removed (or released, under `deletionPolicy: Orphan`). `None` when the kind is not
    /// served: no object of it, hence no copy, can exist.
    async fn clean_up_spec(
        &self,
        own: Option<&str>,
        spec: &ObjectSyncSpec,
        ctx: &Context,
    ) -> Option<FanOutSpec> {
        let (resource, namespaced) = self
            .resolve_kind(
                &spec.source.group,
                spec.source.version.as_deref(),
                &spec.source.kind,
            )
            .await
            .ok()?;
        let namespace = match (namespaced, own, spec.source.namespace.as_deref()) {
            (false, ..) => String::new(),
            (true, _, Some(ns)) if !ns.is_empty() => ns.to_string(),
            (true, own, _) => own.unwrap_or_default().to_string(),
        };
        let mut destinations = vec![Destination::default()];
        for c in spec
            .destinations
            .iter()
            .filter_map(|d| d.cluster.as_deref())
        {
            match self.destination_cluster(ctx, c).await {
                Ok(cluster) => destinations.push(Destination {
                    cluster: Some(cluster),
                    ..Destination::default()
                }),
                Err(r) => {
                    tracing::warn!(remote = c, reason = %r.reason, message = %r.message, "copies through this RemoteCluster cannot be removed")
                }
            }
        }
        Some(FanOutSpec {
            source: SourceRef::one(resource, namespace, spec.source.name.clone()),
            destinations,
            consent: None,
            on_conflict: OnConflict::Skip,
            rules: CopyRules::default(),
            deletion_policy: deletion_policy(spec),
            mode: mode(spec),
        })
    }

    /// An untrusted ObjectSync whose spec is refused writes nothing, but consent withdrawn
    /// still ends the copies it admitted: those whose namespace's grant no longer admits them
    /// are removed (found by their marks, for the kind the spec names); the others stay until
    /// the spec is valid again or the ObjectSync goes. Failures are logged and retried with
    /// the refusal's requeue; the status already says why the spec is refused.
    async fn sweep_withdrawn<K: SyncObject>(
        &self,
        ctx: &Context,
        key: &ObjectKey,
        os: &K,
        owner: Owner,
    ) {
        let Some(own) = os.namespace().filter(|ns| !self.policy.is_trusted(ns)) else {
            return;
        };
        // Only clusters this namespace may reach now: a refused spec connects nowhere new.
        let mut reachable = os.sync_spec().clone();
        let mut allowed = Vec::new();
        for d in std::mem::take(&mut reachable.destinations) {
            let ok = match d.cluster.as_deref() {
                None => true,
                Some(c) => self.check_remote_allowed(ctx, &own, c).await.is_ok(),
            };
            if ok {
                allowed.push(d);
            }
        }
        reachable.destinations = allowed;
        let Some(mut spec) = self.clean_up_spec(Some(&own), &reachable, ctx).await else {
            return;
        };
        spec.consent = Some(self.consent(&own, &spec.source.resource));
        let decl = Declaration {
            key: key.clone(),
            owner,
            spec,
            deleting: false,
            refused: true,
        };
        match self.fan_out.reconcile(ctx, &decl).await {
            Ok(report) => {
                tracing::debug!(objectsync = %key, remaining = report.remaining_copies, "refused spec: copies whose consent was withdrawn removed");
            }
            Err(e) => {
                tracing::warn!(objectsync = %key, error = %e, "cannot remove the copies whose consent was withdrawn yet")
            }
        }
    }

    /// Reconciles one ObjectSync or ClusterObjectSync (`K`).
    pub async fn reconcile<K: SyncObject>(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let Some(os) = ctx.get_as::<K>(key)? else {
            self.forget(ctx, key);
            return Ok(Action::done());
        };
        let own = os.namespace();
        let deleting = os.meta().deletion_timestamp.is_some();
        let has_finalizer = os.finalizers().iter().any(|f| f == OBJECT_SYNC_FINALIZER);
        if os.labels().contains_key(MANAGED_BY) {
            // A copy kubesync made (its mark says so): never a declaration, whoever made its
            // source and wherever it landed. It writes nothing and holds no finalizer.
            self.forget(ctx, key);
            if has_finalizer {
                self.writes
                    .set_finalizer(&os, OBJECT_SYNC_FINALIZER, false)
                    .await?;
            } else if !deleting {
                let refusal = Refusal::new(
                    Reason::CopyNotADeclaration,
                    format!(
                        "this object is a copy kubesync made (label {MANAGED_BY}); a copy is never acted on as a declaration"
                    ),
                );
                self.report(&os, Observation::Refused(&refusal), Vec::new())
                    .await?;
            }
            return Ok(Action::done());
        }
        if !deleting && !has_finalizer {
            self.writes
                .set_finalizer(&os, OBJECT_SYNC_FINALIZER, true)
                .await?;
            return Ok(Action::done());
        }
        if deleting && !has_finalizer {
            return Ok(Action::done());
        }
        let owner = Owner {
            reference: match &own {
                Some(ns) => format!("{LOCAL}/{ns}/{}", os.name_any()),
                None => format!("{LOCAL}/{}", os.name_any()),
            },
            uid: os.uid().unwrap_or_default(),
        };
        let spec = match self.fan_out_spec(own.as_deref(), os.sync_spec(), ctx).await {
            Ok(spec) => spec,
            Err(refusal) if deleting => {
                // Going with a spec that is refused now: its copies (made under an earlier,
                // valid spec) are still found by their marks, for the kind it names.
                match self
                    .clean_up_spec(own.as_deref(), os.sync_spec(), ctx)
                    .await
                {
                    Some(spec) => spec,
                    None => {
                        tracing::info!(objectsync = %key, reason = %refusal.reason, "released: its kind is not served, so no copy of it can exist");
                        self.forget(ctx, key);
                        self.writes
                            .set_finalizer(&os, OBJECT_SYNC_FINALIZER, false)
                            .await?;
                        return Ok(Action::done());
                    }
                }
            }
            Err(refusal) => {
                tracing::warn!(objectsync = %key, reason = %refusal.reason, message = %refusal.message, "ObjectSync refused");
                self.report(&os, Observation::Refused(&refusal), Vec::new())
                    .await?;
                self.sweep_withdrawn(ctx, key, &os, owner).await;
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
        };
        let decl = Declaration {
            key: key.clone(),
            owner,
            spec,
            deleting,
            refused: false,
        };
        let trusted = own.as_deref().is_none_or(|ns| self.policy.is_trusted(ns));
        let mut decl = decl;
        if deleting && decl.spec.mode == Mode::Report && !trusted {
            // Outside the trusted namespaces, consent ends with the declaration: copies it
            // made (in Enforce mode, before) go with it, whatever its mode now.
            decl.spec.mode = Mode::Enforce;
        }
        if deleting && decl.spec.mode == Mode::Report {
            // Report mode writes nothing to destinations, also not when it goes: any copies
            // stay as they are (trusted declarations only; see above).
            self.forget(ctx, key);
            self.writes
                .set_finalizer(&os, OBJECT_SYNC_FINALIZER, false)
                .await?;
            return Ok(Action::done());
        }
        let report = self.fan_out.reconcile(ctx, &decl).await?;
        for (cluster, lag) in &report.propagated {
            self.lags.observe("ObjectSync", cluster, *lag);
        }
        if deleting {
            if report.ready && report.remaining_copies == 0 && report.unreachable.is_empty() {
                self.forget(ctx, key);
                self.writes
                    .set_finalizer(&os, OBJECT_SYNC_FINALIZER, false)
                    .await?;
                return Ok(Action::done());
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let selection_text = selection_text(&os.sync_spec().source);
        let events = self.track(&os, &decl, &report);
        self.report(
            &os,
            Observation::Reported {
                report: &report,
                source_namespace: &decl.spec.source.namespace,
                source_name: &decl.spec.source.name,
                selection: selection_text.as_deref(),
                report_only: decl.spec.mode == Mode::Report,
            },
            events,
        )
        .await?;
        Ok(requeue_after(&report))
    }

    /// Assembles the status, remembers the gauge, publishes the Events of condition changes
    /// and writes the status when it changed.
    async fn report<K: SyncObject>(
        &self,
        os: &K,
        observed: Observation<'_>,
        drifts: Vec<(String, ObjectReference)>,
    ) -> kubesync::Result<()> {
        let old = os.sync_status().cloned().unwrap_or_default();
        let status = object_sync_status(&old, os.meta().generation, observed, crate::status::now());
        for (type_, reason, note) in self.record(os, &old, &status) {
            let event = kube::runtime::events::Event {
                type_,
                reason,
                note: Some(note),
                action: "Sync".into(),
                secondary: None,
            };
            let reference = os.object_ref(&());
            if !self.budget.allow(&event_key(os), Instant::now()) {
                continue;
            }
            let published = if reference.namespace.is_some() {
                self.recorder.publish(&event, &reference).await
            } else {
                self.create_event(&event, &reference).await
            };
            if let Err(e) = published {
                tracing::warn!(objectsync = %os.name_any(), error = %e, "could not publish an event");
            }
        }
        // Each reverted change is an Event of its own, related to the copy (kube's recorder
        // would fold a second change of the same copy into the first one's series, and keep
        // the first note).
        for (note, copy) in drifts {
            if !self.budget.allow(&event_key(os), Instant::now()) {
                break;
            }
            let event = kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Warning,
                reason: "CopyChanged".into(),
                note: Some(note),
                action: "Revert".into(),
                secondary: Some(copy),
            };
            if let Err(e) = self.create_event(&event, &os.object_ref(&())).await {
                tracing::warn!(objectsync = %os.name_any(), error = %e, "could not publish an event");
            }
        }
        if status != old {
            self.writes.patch_status(os, &status).await?;
        }
        Ok(())
    }

    /// Creates `event` about `regarding` as a new Event (see [`events::create`]).
    async fn create_event(
        &self,
        event: &kube::runtime::events::Event,
        regarding: &ObjectReference,
    ) -> kube::Result<()> {
        events::create(self.local.client(), &self.reporter, event, regarding).await
    }

    /// Remembers an ObjectSync's state for `/metrics`, and returns the Events its condition
    /// changes call for: those of [`condition_events`] not published already.
    fn record<K: SyncObject>(
        &self,
        os: &K,
        old: &ObjectSyncStatus,
        new: &ObjectSyncStatus,
    ) -> Vec<(kube::runtime::events::EventType, String, String)> {
        let mut records = self.lock();
        let record = records
            .entry((os.namespace().unwrap_or_default(), os.name_any()))
            .or_default();
        record.gauge = ObjectSyncGauge {
            drifts: record.gauge.drifts,
            ..ObjectSyncGauge::of(new)
        };
        let mut events = Vec::new();
        for (event_type, condition, reason, note) in
            condition_events(&old.conditions, &new.conditions)
        {
            let status = new
                .conditions
                .iter()
                .find(|c| c.type_ == condition)
                .map(|c| c.status.clone())
                .unwrap_or_default();
            let now = (status, reason.clone());
            if record.published.get(&condition) != Some(&now) {
                record.published.insert(condition, now);
                events.push((event_type, reason, note));
            }
        }
        events
    }

    /// Remembers which of an ObjectSync's copies are behind their source and since when, the
    /// versions of its sources, and the copies found changed by someone else: each change is
    /// counted once and, in Enforce mode (which reverted it), announced by a Warning Event
    /// (returned; at most [`MAX_DRIFT_EVENTS`], then one that counts the others).
    fn track<K: SyncObject>(
        &self,
        os: &K,
        decl: &Declaration,
        report: &Report,
    ) -> Vec<(String, ObjectReference)> {
        let mut records = self.lock();
        let record = records
            .entry((os.namespace().unwrap_or_default(), os.name_any()))
            .or_default();
        record.behind = behind(&record.behind, report, Instant::now());
        let mut current: HashMap<(&str, &str), u32> = HashMap::new();
        for d in &report.destinations {
            if d.state == DestinationState::Synced {
                *current
                    .entry((d.source.as_str(), d.source_resource_version.as_str()))
                    .or_default() += 1;
            }
        }
        let source = &decl.spec.source;
        record.sources = report
            .source_versions
            .iter()
            .map(|(name, rv)| {
                let key = ObjectKey::new(
                    LOCAL,
                    &source.resource,
                    source.namespace().map(String::from),
                    name,
                );
                let copies = current.get(&(name.as_str(), rv.as_str())).copied();
                (key, rv.clone(), copies.unwrap_or_default())
            })
            .collect();
        // Report mode finds the same change at every reconcile until it is undone; Enforce
        // reports it once, when it reverts it (also a change Report mode found before).
        let mut found = HashMap::new();
        let mut reverted = Vec::new();
        for d in &report.destinations {
            if let Some(drift) = &d.drift {
                let key = (d.cluster.clone(), d.namespace.clone(), d.name.clone());
                let text = drift.to_string();
                if record.drifts_seen.get(&key) != Some(&text) {
                    record.gauge.drifts += 1;
                }
                reverted.push((d, text.clone()));
                found.insert(key, text);
            }
        }
        record.drifts_seen = found;
        if decl.spec.mode == Mode::Report {
            return Vec::new();
        }
        let ar = &source.resource;
        let reference = |d: &DestinationStatus| ObjectReference {
            api_version: Some(ar.api_version.clone()),
            kind: Some(ar.kind.clone()),
            namespace: (!d.namespace.is_empty()).then(|| d.namespace.clone()),
            name: Some(d.name.clone()),
            ..Default::default()
        };
        let mut events: Vec<_> = reverted
            .iter()
            .take(MAX_DRIFT_EVENTS)
            .map(|(d, text)| {
                let at = DestinationRef::new(display_name(&d.cluster), &d.namespace, &d.name);
                let note =
                    format!("the copy {at} was changed by someone else and reverted: {text}");
                (status::truncate_note(note), reference(d))
            })
            .collect();
        if let Some((last, _)) = reverted.get(MAX_DRIFT_EVENTS) {
            let note = format!(
                "{} more copies were changed by someone else and reverted",
                reverted.len() - MAX_DRIFT_EVENTS
            );
            events.push((note, reference(last)));
        }
        events
    }

    /// Forgets an ObjectSync that is gone: its engine state and its metrics.
    fn forget(&self, ctx: &Context, key: &ObjectKey) {
        self.fan_out.forget(ctx, key);
        self.lock()
            .remove(&(key.namespace.clone().unwrap_or_default(), key.name.clone()));
    }
}

/// The key of an ObjectSync's (or ClusterObjectSync's) Event budget.
fn event_key<K: SyncObject>(os: &K) -> String {
    format!(
        "{}/{}/{}",
        K::kind(&()),
        os.namespace().unwrap_or_default(),
        os.name_any()
    )
}

/// Through which RemoteCluster a copy is written: `None` in this cluster.
fn via(at: &DestinationRef) -> Option<&str> {
    (at.cluster != LOCAL).then(|| display_name(&at.cluster))
}

/// The fan-out's deletion policy of a spec.
fn deletion_policy(spec: &ObjectSyncSpec) -> DeletionPolicy {
    match spec.deletion_policy {
        ObjectSyncDeletionPolicy::Delete => DeletionPolicy::Delete,
        ObjectSyncDeletionPolicy::Orphan => DeletionPolicy::Orphan,
    }
}

/// The fan-out's mode of a spec.
fn mode(spec: &ObjectSyncSpec) -> Mode {
    match spec.mode {
        SyncMode::Enforce => Mode::Enforce,
        SyncMode::Report => Mode::Report,
    }
}

/// When to look again (pure): soon while the watches have not listed, in a few seconds while a
/// destination is in error, else on the next event.
fn requeue_after(report: &Report) -> Action {
    if !report.ready {
        Action::requeue(Duration::from_millis(500))
    } else if report
        .destinations
        .iter()
        .any(|d| d.state == DestinationState::Error)
    {
        Action::requeue(Duration::from_secs(5))
    } else {
        Action::done()
    }
}

/// The selection of an ObjectSync's sources: `None` for one object by name; a refusal for a
/// source that gives both a name and a selection, or neither.
fn source_selection(source: &ObjectSyncSource) -> Result<Option<Selection>, Refusal> {
    let invalid = |m: String| Refusal::new(Reason::InvalidSpec, m);
    let many = source.selector.is_some() || !source.names.is_empty();
    match (source.name.is_empty(), many) {
        (false, false) => Ok(None),
        (false, true) => Err(invalid(
            "spec.source gives a name and a selector or names; give one object's name, or a selector and/or names".into(),
        )),
        (true, false) => Err(invalid(
            "spec.source needs a name, or a selector and/or names".into(),
        )),
        (true, true) => {
            let selector = source
                .selector
                .as_ref()
                .map(selector)
                .transpose()
                .map_err(|e| invalid(e.under("spec.source.selector").to_string()))?;
            if let Some((i, bad)) = source.names.iter().enumerate().find(|(_, n)| !is_object_name(n)) {
                return Err(invalid(format!(
                    "spec.source.names[{i}]: {} is not a valid object name",
                    validate::quoted(bad)
                )));
            }
            Ok(Some(Selection {
                selector,
                names: source.names.clone(),
            }))
        }
    }
}

/// The source namespace (pure) of an ObjectSync in namespace `own` (`Some`) or of a
/// ClusterObjectSync (`None`), for a `namespaced` kind or not. The fan-out reads an empty
/// namespace as a cluster-scoped kind, so:
/// - an ObjectSync copies namespaced kinds only, from the namespace given, else (absent or
///   empty) its own: never empty;
/// - a ClusterObjectSync has no namespace of its own: it names the source's for a namespaced
///   kind, and none for a cluster-scoped one.
fn source_namespace(
    source: &ObjectSyncSource,
    own: Option<&str>,
    namespaced: bool,
) -> Result<String, Refusal> {
    let invalid = |m: String| Err(Refusal::new(Reason::InvalidSpec, m));
    let kind = &source.kind;
    let given = source.namespace.clone().filter(|ns| !ns.is_empty());
    match (own, namespaced, given) {
        (_, true, Some(ns)) => Ok(ns),
        (Some(own), true, None) => Ok(own.to_string()),
        (Some(_), false, _) => invalid(format!(
            "{kind} is cluster-scoped: an ObjectSync copies namespaced kinds only; a ClusterObjectSync (declared by cluster admins) copies cluster-scoped ones"
        )),
        (None, true, None) => invalid(format!(
            "{kind} is namespaced: a ClusterObjectSync names the source's namespace in spec.source.namespace"
        )),
        (None, false, None) => Ok(String::new()),
        (None, false, Some(ns)) => invalid(format!(
            "{kind} is cluster-scoped: spec.source.namespace ({ns}) must be absent"
        )),
    }
}

/// How a status describes a source selection, e.g. `selector app=tls, names a, b`; `None`
/// for a single source.
fn selection_text(source: &ObjectSyncSource) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(s) = &source.selector {
        let text = selector(s).map_or_else(|e| e.to_string(), |s| s.to_string());
        parts.push(format!("selector {text}"));
    }
    if !source.names.is_empty() {
        parts.push(format!("names {}", source.names.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Whether `name` may name an object of some kind: the apiserver's rule for every kind (at
/// most [`MAX_NAME`] characters, not `.` or `..`, no `/` or `%`). Kinds narrow it further (a
/// ConfigMap's name is a DNS subdomain; a ClusterRole's may hold `:`), and the apiserver
/// refuses a copy named against its kind's rule: that destination's `Error`.
fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && name.chars().all(is_name_char)
}

/// Whether an object name of any kind may hold `c`.
fn is_name_char(c: char) -> bool {
    c != '/' && c != '%'
}

/// What [`check_spec`] found valid, parsed: the source selection (`None`: one object by
/// name), and per destination its namespace selector and patches.
struct Checked {
    selection: Option<Selection>,
    destinations: Vec<(Option<kube::core::Selector>, Vec<CopyPatch>)>,
}

/// Every field of an ObjectSync's spec that can be judged without a request, judged the way
/// the apiserver would (pure): the source (kind, group, version, name, names, namespace,
/// selector), each destination (namespace, namespaceSelector, excludeNamespaces, cluster,
/// copy names, patches) and the filters. The refusal names the field's path and the value.
/// What depends on the kind (namespaced or not) or on the cluster is judged after discovery.
fn check_spec(spec: &ObjectSyncSpec) -> Result<Checked, Refusal> {
    let invalid =
        |path: String, m: String| Refusal::new(Reason::InvalidSpec, format!("{path}: {m}"));
    let source = &spec.source;
    if source.kind.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            "spec.source needs a kind",
        ));
    }
    if !source.kind.chars().all(|c| c.is_ascii_alphanumeric())
        || !source.kind.starts_with(|c: char| c.is_ascii_alphabetic())
    {
        return Err(invalid(
            "spec.source.kind".into(),
            format!(
                "{} is not a kind: give a name such as ConfigMap (letters and digits)",
                validate::quoted(&source.kind)
            ),
        ));
    }
    if !source.group.is_empty() && !validate::is_dns_subdomain(&source.group) {
        return Err(invalid(
            "spec.source.group".into(),
            format!(
                "{} is not an API group: give a DNS subdomain such as apps or example.com, or nothing for the core group",
                validate::quoted(&source.group)
            ),
        ));
    }
    if let Some(v) = source
        .version
        .as_deref()
        .filter(|v| !validate::is_dns_label(v))
    {
        return Err(invalid(
            "spec.source.version".into(),
            format!(
                "{} is not an API version such as v1 or v1beta1",
                validate::quoted(v)
            ),
        ));
    }
    let selection = source_selection(source)?;
    if !source.name.is_empty() && !is_object_name(&source.name) {
        return Err(invalid(
            "spec.source.name".into(),
            format!(
                "{} is not a valid object name",
                validate::quoted(&source.name)
            ),
        ));
    }
    if let Some(ns) = source.namespace.as_deref().filter(|ns| !ns.is_empty())
        && !validate::is_dns_label(ns)
    {
        return Err(invalid(
            "spec.source.namespace".into(),
            format!("{} is not a namespace name", validate::quoted(ns)),
        ));
    }
    if spec.destinations.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            "spec.destinations is empty",
        ));
    }
    let mut destinations = Vec::new();
    for (i, d) in spec.destinations.iter().enumerate() {
        let at = |field: &str| format!("spec.destinations[{i}]{field}");
        check_copy_names(d, selection.is_some()).map_err(|m| invalid(at(""), m))?;
        let namespace = d.namespace.as_deref().unwrap_or_default();
        if !(namespace.is_empty() || namespace == "*" || validate::is_dns_label(namespace)) {
            return Err(invalid(
                at(".namespace"),
                format!(
                    "{} is not a namespace name: give one name, \"*\" for all, or a namespaceSelector (and excludeNamespaces, which takes globs)",
                    validate::quoted(namespace)
                ),
            ));
        }
        let selector = d
            .namespace_selector
            .as_ref()
            .map(selector)
            .transpose()
            .map_err(|e| {
                Refusal::new(
                    Reason::InvalidSpec,
                    e.under(&at(".namespaceSelector")).to_string(),
                )
            })?;
        for (j, glob) in d.exclude_namespaces.iter().enumerate() {
            validate::namespace_glob(glob)
                .map_err(|m| invalid(at(&format!(".excludeNamespaces[{j}]")), m))?;
        }
        if let Some(c) = d.cluster.as_deref()
            && !validate::is_dns_subdomain(c)
        {
            return Err(invalid(
                at(".cluster"),
                format!("{} is not a RemoteCluster's name", validate::quoted(c)),
            ));
        }
        let patches = copy_patches(&d.patches)
            .map_err(|m| Refusal::new(Reason::InvalidPatch, format!("{}: {m}", at(""))))?;
        destinations.push((selector, patches));
    }
    for (field, filter) in [("labels", &spec.labels), ("annotations", &spec.annotations)] {
        for (list, entries) in [("include", &filter.include), ("exclude", &filter.exclude)] {
            for (j, e) in entries.iter().enumerate() {
                validate::key_filter_entry(e)
                    .map_err(|m| invalid(format!("spec.{field}.{list}[{j}]"), m))?;
            }
        }
    }
    if let Some(data) = &spec.data {
        for (j, k) in data.include.iter().enumerate() {
            validate::data_key(k).map_err(|m| invalid(format!("spec.data.include[{j}]"), m))?;
        }
        for (from, to) in &data.rename {
            let at = format!("spec.data.rename[{}]", validate::quoted(from));
            validate::data_key(from).map_err(|m| invalid(at.clone(), m))?;
            validate::data_key(to).map_err(|m| invalid(at.clone(), m))?;
        }
    }
    Ok(Checked {
        selection,
        destinations,
    })
}

/// A destination's copy names: `name` only for a single source and not with a prefix or
/// suffix; a prefix or suffix of the characters an object name may hold.
fn check_copy_names(d: &ObjectSyncDestination, many: bool) -> Result<(), String> {
    let affixed = !d.name_prefix.is_empty() || !d.name_suffix.is_empty();
    match &d.name {
        Some(_) if many => {
            return Err(
                "name renames a single source; with a selector or names use namePrefix or nameSuffix".into(),
            );
        }
        Some(_) if affixed => {
            return Err("give a name, or a namePrefix and/or nameSuffix, not both".into());
        }
        Some(name) if !is_object_name(name) => {
            return Err(format!("name {name:?} is not a valid object name"));
        }
        _ => {}
    }
    for (field, value) in [
        ("namePrefix", &d.name_prefix),
        ("nameSuffix", &d.name_suffix),
    ] {
        if !value.chars().all(is_name_char) {
            return Err(format!("{field} {value:?} may not hold '/' or '%'"));
        }
    }
    Ok(())
}

/// A destination's namespaces, once the kind is known (pure): a destination of a
/// cluster-scoped kind names none (each destination cluster gets one copy). The namespace
/// fields themselves are checked by [`check_spec`].
fn check_destination(
    d: &ObjectSyncDestination,
    namespaced: bool,
    kind: &str,
) -> Result<(), String> {
    let namespace = d.namespace.as_deref().unwrap_or_default();
    if !namespaced
        && (!namespace.is_empty()
            || d.namespace_selector.is_some()
            || !d.exclude_namespaces.is_empty())
    {
        return Err(format!(
            "{kind} is cluster-scoped: give no namespace, namespaceSelector or excludeNamespaces (each cluster gets one copy)"
        ));
    }
    Ok(())
}

/// A destination's patches as the fan-out applies them; why not, for an entry that gives
/// neither or both of `merge` and `json`, or a `json` that is no list of RFC 6902 operations.
fn copy_patches(patches: &[DestinationPatch]) -> Result<Vec<CopyPatch>, String> {
    patches
        .iter()
        .enumerate()
        .map(|(j, p)| match (&p.merge, &p.json) {
            (Some(merge), None) => Ok(CopyPatch::Merge(merge.clone())),
            (None, Some(ops)) => serde_json::from_value(serde_json::Value::Array(ops.clone()))
                .map(CopyPatch::Json)
                .map_err(|e| format!("patches[{j}].json: {e}")),
            _ => Err(format!("patches[{j}]: give exactly one of merge and json")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(v: serde_json::Value) -> ObjectSyncSource {
        serde_json::from_value(v).expect("source")
    }

    fn destination(v: serde_json::Value) -> ObjectSyncDestination {
        serde_json::from_value(v).expect("destination")
    }

    #[test]
    fn a_source_is_one_name_or_a_selection_never_both_or_neither() {
        let one = source(serde_json::json!({"kind": "Secret", "name": "ca"}));
        assert_eq!(source_selection(&one).expect("one"), None);
        assert_eq!(selection_text(&one), None);
        let many = source(serde_json::json!({"kind": "Secret",
            "selector": {"matchLabels": {"app": "tls"}}, "names": ["a", "b"]}));
        let selection = source_selection(&many).expect("many").expect("a selection");
        assert_eq!(selection.names, ["a", "b"]);
        assert_eq!(
            selection_text(&many).as_deref(),
            Some("selector app=tls, names a, b")
        );
        for (bad, says) in [
            (serde_json::json!({"kind": "Secret"}), "needs a name"),
            (
                serde_json::json!({"kind": "Secret", "name": "ca", "names": ["a"]}),
                "gives a name and",
            ),
            (
                serde_json::json!({"kind": "Secret", "selector": {"matchExpressions":
                    [{"key": "app", "operator": "Near"}]}}),
                "spec.source.selector",
            ),
            (
                serde_json::json!({"kind": "Secret", "names": ["a/b"]}),
                "not a valid object name",
            ),
        ] {
            let refusal = source_selection(&source(bad)).expect_err("refused");
            assert_eq!(refusal.reason, "InvalidSpec");
            assert!(refusal.message.contains(says), "{}", refusal.message);
        }
    }

    #[test]
    fn the_source_namespace_is_never_empty() {
        let given = |ns: Option<&str>| {
            let mut s = source(serde_json::json!({"kind": "Secret", "name": "ca"}));
            s.namespace = ns.map(String::from);
            source_namespace(&s, Some("team-a"), true).expect("namespaced")
        };
        assert_eq!(given(Some("shared")), "shared");
        assert_eq!(given(None), "team-a");
        assert_eq!(given(Some("")), "team-a", "not every namespace at once");
        // An ObjectSync of a cluster-scoped kind points to ClusterObjectSync.
        let s = source(serde_json::json!({"kind": "ClusterRole", "name": "view"}));
        let refusal = source_namespace(&s, Some("team-a"), false).expect_err("cluster-scoped");
        assert_eq!(refusal.reason, "InvalidSpec");
        assert!(
            refusal.message.contains("a ClusterObjectSync"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_cluster_object_sync_names_a_namespace_exactly_for_namespaced_kinds() {
        let with = |ns: Option<&str>, namespaced| {
            let mut s = source(serde_json::json!({"kind": "Thing", "name": "x"}));
            s.namespace = ns.map(String::from);
            source_namespace(&s, None, namespaced)
        };
        assert_eq!(
            with(Some("platform"), true).expect("namespaced"),
            "platform"
        );
        assert_eq!(with(None, false).expect("cluster-scoped"), "");
        assert_eq!(with(Some(""), false).expect("empty is absent"), "");
        for (ns, namespaced, says) in [
            (None, true, "names the source's namespace"),
            (Some(""), true, "names the source's namespace"),
            (Some("platform"), false, "must be absent"),
        ] {
            let refusal = with(ns, namespaced).expect_err("refused");
            assert_eq!(refusal.reason, "InvalidSpec");
            assert!(refusal.message.contains(says), "{}", refusal.message);
        }
    }

    #[test]
    fn a_cluster_scoped_destination_names_no_namespace() {
        let ok = |v| check_destination(&destination(v), false, "ClusterRole");
        assert!(ok(serde_json::json!({"cluster": "eu"})).is_ok());
        assert!(ok(serde_json::json!({"cluster": "eu", "namespace": ""})).is_ok());
        for bad in [
            serde_json::json!({"cluster": "eu", "namespace": "*"}),
            serde_json::json!({"cluster": "eu", "namespaceSelector": {}}),
            serde_json::json!({"cluster": "eu", "excludeNamespaces": ["kube-system"]}),
        ] {
            let message = ok(bad).expect_err("refused");
            assert!(
                message.contains("ClusterRole is cluster-scoped"),
                "{message}"
            );
        }
    }

    fn spec(v: serde_json::Value) -> ObjectSyncSpec {
        serde_json::from_value(v).expect("spec")
    }

    /// The refusal of a spec whose first destination is `d` (a ConfigMap by name).
    fn refusal_of(d: serde_json::Value) -> Refusal {
        let s = spec(serde_json::json!({
            "source": {"kind": "ConfigMap", "name": "cm"},
            "destinations": [d],
        }));
        check_spec(&s).err().unwrap_or_else(|| panic!("accepted"))
    }

    #[test]
    fn a_destination_namespace_is_a_name_or_all() {
        for ok in [
            serde_json::json!({}),
            serde_json::json!({"namespace": ""}),
            serde_json::json!({"namespace": "*"}),
            serde_json::json!({"namespace": "team-a"}),
        ] {
            let s = spec(serde_json::json!({
                "source": {"kind": "ConfigMap", "name": "cm"}, "destinations": [ok]}));
            assert!(check_spec(&s).is_ok(), "{:?}", s.destinations);
        }
        for bad in ["team-*", "Team-A", "team_a", "-a", &"a".repeat(64)] {
            let message = refusal_of(serde_json::json!({"namespace": bad})).message;
            assert!(
                message.starts_with("spec.destinations[0].namespace: ")
                    && message.contains("is not a namespace name"),
                "{message}"
            );
        }
    }

    #[test]
    fn every_field_is_checked_before_any_request_and_named_by_its_path() {
        let source = |src: serde_json::Value| {
            let s = spec(serde_json::json!({"source": src, "destinations": [{"namespace": "a"}]}));
            check_spec(&s).err().map(|r| r.message)
        };
        let says = |got: Option<String>, path: &str, what: &str| {
            let got = got.unwrap_or_else(|| panic!("{path}: accepted"));
            assert!(got.starts_with(path) && got.contains(what), "{got}");
            assert!(!got.contains("Some(") && !got.contains('{'), "{got}");
        };
        says(
            source(serde_json::json!({"kind": "ConfigMap",
                "selector": {"matchLabels": {"app": "a(b"}}})),
            "spec.source.selector.matchLabels[\"app\"]: ",
            "\"a(b\" is not a label value",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap",
                "selector": {"matchExpressions": [{"key": "a b", "operator": "Exists"}]}})),
            "spec.source.selector.matchExpressions[0].key: ",
            "is not a label key",
        );
        says(
            source(
                serde_json::json!({"kind": "ConfigMap", "selector": {"matchExpressions":
                [{"key": "app", "operator": "DoesNotExist", "values": ["x"]}]}}),
            ),
            "spec.source.selector.matchExpressions[0].values: ",
            "takes no values",
        );
        says(
            source(serde_json::json!({"kind": "Config Map", "name": "x"})),
            "spec.source.kind: ",
            "is not a kind",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "group": "Apps", "name": "x"})),
            "spec.source.group: ",
            "is not an API group",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "version": "v 1", "name": "x"})),
            "spec.source.version: ",
            "is not an API version",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "name": "a/b"})),
            "spec.source.name: ",
            "not a valid object name",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "name": "x", "namespace": "A"})),
            "spec.source.namespace: ",
            "not a namespace name",
        );
        let dest = |d| Some(refusal_of(d).message);
        says(
            dest(serde_json::json!({"namespaceSelector": {"matchExpressions":
                [{"key": "team", "operator": "In", "values": ["a", "b c"]}]}})),
            "spec.destinations[0].namespaceSelector.matchExpressions[0].values[1]: ",
            "is not a label value",
        );
        says(
            dest(serde_json::json!({"excludeNamespaces": ["Kube-*"]})),
            "spec.destinations[0].excludeNamespaces[0]: ",
            "which no namespace's name holds",
        );
        says(
            dest(serde_json::json!({"cluster": "EU West"})),
            "spec.destinations[0].cluster: ",
            "is not a RemoteCluster's name",
        );
        let patch = refusal_of(serde_json::json!({"patches": [{"json": [{"op": "jump"}]}]}));
        assert_eq!(patch.reason, "InvalidPatch");
        assert!(
            patch
                .message
                .starts_with("spec.destinations[0]: patches[0].json"),
            "{}",
            patch.message
        );
        let filters = |extra: serde_json::Value| {
            let mut v = serde_json::json!({
                "source": {"kind": "ConfigMap", "name": "cm"},
                "destinations": [{"namespace": "a"}]});
            v.as_object_mut()
                .expect("object")
                .extend(extra.as_object().cloned().expect("object"));
            check_spec(&spec(v)).err().map(|r| r.message)
        };
        says(
            filters(serde_json::json!({"labels": {"exclude": ["ok", "not ok"]}})),
            "spec.labels.exclude[1]: ",
            "is not a label key",
        );
        says(
            filters(serde_json::json!({"data": {"rename": {"a": "b/c"}}})),
            "spec.data.rename[\"a\"]: ",
            "is not a data key",
        );
        assert_eq!(
            filters(serde_json::json!({"labels": {"include": ["example.com/", "app*"]}})),
            None
        );
    }

    #[test]
    fn copy_names_rename_one_source_or_affix_many() {
        let ok = |v, many| check_copy_names(&destination(v), many);
        assert!(ok(serde_json::json!({"name": "x"}), false).is_ok());
        assert!(
            ok(
                serde_json::json!({"namePrefix": "p-", "nameSuffix": ".s"}),
                true
            )
            .is_ok()
        );
        assert!(ok(serde_json::json!({"namePrefix": "p-"}), false).is_ok());
        // Names of kinds other than ConfigMaps and Secrets may hold more (a ClusterRole's `:`).
        assert!(ok(serde_json::json!({"name": "system:fleet-reader"}), false).is_ok());
        assert!(ok(serde_json::json!({"namePrefix": "fleet:"}), true).is_ok());
        for (v, many, says) in [
            (
                serde_json::json!({"name": "x"}),
                true,
                "namePrefix or nameSuffix",
            ),
            (
                serde_json::json!({"name": "x", "namePrefix": "p-"}),
                false,
                "not both",
            ),
            (
                serde_json::json!({"name": ".."}),
                false,
                "not a valid object name",
            ),
            (
                serde_json::json!({"name": "x".repeat(254)}),
                false,
                "not a valid object name",
            ),
            (serde_json::json!({"nameSuffix": "/s"}), true, "nameSuffix"),
        ] {
            let message = ok(v, many).expect_err("refused");
            assert!(message.contains(says), "{message}");
        }
    }
}
