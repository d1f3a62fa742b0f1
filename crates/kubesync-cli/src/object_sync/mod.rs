//! The ObjectSync controller: one object copied to many namespaces and clusters, run on the
//! library's fan-out. It also runs ClusterObjectSyncs: the same spec and status,
//! declared by cluster admins, for cluster-scoped kinds and sources in any namespace.
//!
//! Resolves an ObjectSync's spec (checked against the operator's [`ObjectSyncPolicy`]) into a
//! fan-out declaration, lets the fan-out reconcile it, and reports: the status is assembled
//! purely ([`status::object_sync_status`]) and written through [`OwnWrites`]; condition
//! changes become Kubernetes Events; the per-ObjectSync gauges are kept for `/metrics`.
//!
//! Never touches ResourceSyncs or their running syncs, and never writes but through [`OwnWrites`]
//! (copies are written by the fan-out's own writer; Events by kube's recorder, or, about a
//! ClusterObjectSync, by one create in [`events::CLUSTER_EVENTS_NAMESPACE`]).

mod check;
pub(crate) mod declare;
mod lifecycle;
pub mod status;

use check::*;

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
use kubesync::syncers::fan_out::record::Record as CopiesMade;
use kubesync::syncers::fan_out::rules::{
    CopyPatch, CopyRules, DataFilter, DeletionPolicy, FIELD_MANAGER, Ignore, KeyFilter, MANAGED_BY,
    NamespaceRule, OTHER_OWNERS, OnConflict, Owner, Pointer, Strategy, selector,
};
use kubesync::syncers::fan_out::{
    Declaration, Destination, DestinationRef, DestinationState, DestinationStatus, FanOut,
    FanOutSpec, Mode, Outcome, Predecessor, Selection, SourceRef, UpdatePolicy,
};
use kubesync::validate;

use self::lifecycle::{Known, Next};
pub use self::status::condition_events;
use self::status::{Observation, object_sync_status};
use crate::crd::{
    ClusterObjectSync, ConflictPolicy, CopyState, CopyStrategy, DestinationPatch, ObjectSync,
    ObjectSyncDeletionPolicy, ObjectSyncDestination, ObjectSyncSource, ObjectSyncSpec,
    ObjectSyncStatus, RemoteCluster, SyncMode, TakeOverKind, TakeOverRef,
};
use crate::events;
use crate::lag::{Lags, behind};
use crate::own_writes::OwnWrites;
use crate::policy::ObjectSyncPolicy;
use crate::policy::requeue_after;
use crate::remote::{LOCAL, RemoteClusters, display_name, runtime_name};
use crate::status::{ConditionExt, ConditionType, Reason, Refusal};

/// Finalizer on an ObjectSync: its copies are deleted before it goes.
pub const OBJECT_SYNC_FINALIZER: &str = "kubesync.io/objectsync-cleanup";

/// The status of `os` (read without it, see [`ObjectSyncController::reconcile`]) as the store
/// shows it: that of the version `os` is, or of a newer one, whose report is then refused for
/// the version it was decided on, as it would have been on the status `os` had.
fn status_read_again<K: SyncObject>(ctx: &Context, key: &ObjectKey, os: &K) -> ObjectSyncStatus {
    if let Some(status) = os.sync_status() {
        return status.clone();
    }
    match ctx.get_as::<K>(key) {
        Ok(Some(mut stored)) => stored.take_status().unwrap_or_default(),
        _ => ObjectSyncStatus::default(),
    }
}

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
                .any(|c| c.is(ConditionType::Ready) && c.is_true()),
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
    /// Takes the status out.
    fn take_status(&mut self) -> Option<ObjectSyncStatus>;
}

impl SyncObject for ObjectSync {
    fn sync_spec(&self) -> &ObjectSyncSpec {
        &self.spec
    }
    fn sync_status(&self) -> Option<&ObjectSyncStatus> {
        self.status.as_ref()
    }
    fn take_status(&mut self) -> Option<ObjectSyncStatus> {
        self.status.take()
    }
}

impl SyncObject for ClusterObjectSync {
    fn sync_spec(&self) -> &ObjectSyncSpec {
        &self.spec.sync
    }
    fn sync_status(&self) -> Option<&ObjectSyncStatus> {
        self.status.as_ref()
    }
    fn take_status(&mut self) -> Option<ObjectSyncStatus> {
        self.status.take()
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
    behind: HashMap<DestinationRef, Instant>,
    /// Its sources as the last reconcile copied them: key, resourceVersion, and how many
    /// copies then carried that version.
    sources: Vec<(ObjectKey, String, u32)>,
    /// The drift last found at each copy (counted and announced once).
    drifts_seen: HashMap<DestinationRef, String>,
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
    /// Whether the apiserver checks that a declarer may use the ServiceAccount she names.
    admission: crate::policy::admission::AdmissionCheck,
    /// The records of the copies the compat tools' annotations made (`--compat`).
    compat_records: Option<Arc<crate::compat::records::CompatRecords>>,
}

impl ObjectSyncController {
    /// A controller copying with at most `concurrency` writes in flight per ObjectSync; the
    /// records of the other declarations its fan-out serves (the compat tools') are kept in
    /// `others`, if any (from which `spec.takeOver` reads the annotated objects' records).
    pub fn new(
        local: kubesync::Cluster,
        writes: OwnWrites,
        remotes: Arc<RemoteClusters>,
        policy: ObjectSyncPolicy,
        concurrency: usize,
        lags: Lags,
        others: Option<Arc<crate::compat::records::CompatRecords>>,
    ) -> Self {
        let reporter = events::reporter();
        let recorder =
            kube::runtime::events::Recorder::new(local.client().clone(), reporter.clone());
        let admission = crate::policy::admission::AdmissionCheck::new(local.client().clone());
        let ledger = Arc::new(crate::own_writes::Ledgers {
            objects: writes.clone(),
            others: others
                .clone()
                .map(|r| r as Arc<dyn kubesync::syncers::fan_out::record::Ledger>),
        });
        let policy = Arc::new(policy);
        Self {
            admission,
            local,
            writes,
            remotes,
            fan_out: FanOut::new(LOCAL)
                .concurrency(concurrency)
                .keep_records(ledger)
                .remove_unrecorded_as(crate::policy::unrecorded_removal(Arc::clone(&policy))),
            policy,
            records: Mutex::new(BTreeMap::new()),
            recorder,
            reporter,
            lags,
            budget: events::EventBudget::default(),
            compat_records: others,
        }
    }

    /// The fan-out (its watches and write counts).
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
                ctx.holds(&key)
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

    /// An untrusted ObjectSync whose spec is refused writes nothing, but consent withdrawn
    /// still ends the copies it admitted: those whose namespace's grant no longer admits them
    /// are removed (found by their marks, for the kind the spec names); the others stay until
    /// the spec is valid again or the ObjectSync goes. Failures are logged and retried with
    /// the refusal's requeue; the status already says why the spec is refused.
    async fn sweep_withdrawn<K: SyncObject>(
        &self,
        ctx: &Context,
        (key, record): (&ObjectKey, Option<CopiesMade>),
        os: &K,
    ) {
        let Some(own) = os.namespace().filter(|ns| !self.policy.is_trusted(ns)) else {
            return;
        };
        // Only clusters this namespace may reach now: a refused spec connects nowhere new.
        let mut reachable = os.sync_spec().clone();
        let remotes = declare::remote_clusters(ctx, &reachable);
        let labels = match remotes.is_empty() {
            true => None,
            false => Some(self.namespace_labels(&own).await),
        };
        reachable
            .destinations
            .retain(|d| match d.cluster.as_deref() {
                None => true,
                Some(c) => remotes.get(c).is_some_and(|rc| {
                    rc.as_ref()
                        .is_ok_and(|rc| declare::admitted(rc, &own, labels.as_ref()).is_ok())
                }),
            });
        let Some(mut spec) = self.find_copies(Some(&own), &reachable, ctx).await else {
            return;
        };
        spec.consent = Some(crate::policy::consent(
            &self.policy,
            &own,
            &spec.source.resource,
        ));
        let decl = Declaration {
            refused: true,
            ..declaration((key, record), os, spec, false)
        };
        match self.fan_out.reconcile(ctx, &decl).await {
            Ok(outcome) => {
                tracing::debug!(objectsync = %key, remaining = outcome.remaining_copies, "refused spec: copies whose consent was withdrawn removed");
            }
            Err(e) => {
                tracing::warn!(objectsync = %key, error = %e, "cannot remove the copies whose consent was withdrawn yet")
            }
        }
    }

    /// Reconciles one ObjectSync or ClusterObjectSync (`K`): the pure [`lifecycle::next`] says
    /// what to do, asking first for what it needs to know (the spec judged, with requests; a
    /// going declaration's copies found); this carries it out.
    pub async fn reconcile<K: SyncObject>(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let Some(mut os) = ctx.get_as::<K>(key)? else {
            self.forget(ctx, key);
            return Ok(Action::done());
        };
        // Its status lists every destination: not held while the copies are written (a
        // declaration may wait for its turn among others'), read again when the report is made.
        // Only its record of the copies made is kept for the fan-out.
        let record = status::record_of(os.sync_status());
        os.take_status();
        let own = os.namespace();
        let (spec, mut known) = (
            os.sync_spec(),
            Known {
                is_copy: os.labels().contains_key(MANAGED_BY),
                deleting: os.meta().deletion_timestamp.is_some(),
                has_finalizer: os.finalizers().iter().any(|f| f == OBJECT_SYNC_FINALIZER),
                untrusted: own.as_deref().is_some_and(|ns| !self.policy.is_trusted(ns)),
                judged: None,
                copies: None,
            },
        );
        let next = loop {
            known = match lifecycle::next(known) {
                Next::Judge(mut k) => {
                    k.judged = Some(
                        self.fan_out_spec((own.as_deref(), &os.name_any()), spec, ctx)
                            .await,
                    );
                    k
                }
                Next::FindCopies(mut k) => {
                    k.copies = Some(self.find_copies(own.as_deref(), spec, ctx).await);
                    k
                }
                next => break next,
            };
        };
        self.carry_out((key, record), ctx, &os, next).await
    }

    /// Carries out the lifecycle's `next` step for `os`.
    async fn carry_out<K: SyncObject>(
        &self,
        (key, record): (&ObjectKey, Option<CopiesMade>),
        ctx: &Context,
        os: &K,
        next: Next,
    ) -> kubesync::Result<Action> {
        match next {
            Next::Judge(_) | Next::FindCopies(_) | Next::Nothing => {}
            Next::NotADeclaration { release, refuse } => {
                self.forget(ctx, key);
                if release {
                    self.writes
                        .set_finalizer(os, OBJECT_SYNC_FINALIZER, false)
                        .await?;
                } else if refuse {
                    let refusal = Refusal::new(
                        Reason::CopyNotADeclaration,
                        format!(
                            "this object is a copy kubesync made (label {MANAGED_BY}); a copy is never acted on as a declaration"
                        ),
                    );
                    self.publish_status((ctx, key), os, Observation::Refused(&refusal), Vec::new())
                        .await?;
                }
            }
            Next::HoldFinalizer => {
                self.writes
                    .set_finalizer(os, OBJECT_SYNC_FINALIZER, true)
                    .await?;
            }
            Next::Release { why } => {
                tracing::info!(objectsync = %key, "{why}");
                self.forget(ctx, key);
                self.writes
                    .set_finalizer(os, OBJECT_SYNC_FINALIZER, false)
                    .await?;
            }
            Next::Refuse { refusal, sweep } => {
                tracing::warn!(objectsync = %key, reason = %refusal.reason, message = %refusal.message, "ObjectSync refused");
                self.publish_status((ctx, key), os, Observation::Refused(&refusal), Vec::new())
                    .await?;
                if sweep {
                    self.sweep_withdrawn(ctx, (key, record), os).await;
                }
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
            Next::Apply(spec) => return self.apply((key, record), ctx, os, spec).await,
            Next::CleanUp(spec) => return self.clean_up((key, record), ctx, os, spec).await,
        }
        Ok(Action::done())
    }

    /// Copies as `spec` says, and reports: the status, its Events, the gauges and lags.
    async fn apply<K: SyncObject>(
        &self,
        (key, record): (&ObjectKey, Option<CopiesMade>),
        ctx: &Context,
        os: &K,
        spec: FanOutSpec,
    ) -> kubesync::Result<Action> {
        let decl = declaration((key, record), os, spec, false);
        let outcome = self.fan_out.reconcile(ctx, &decl).await?;
        wake_predecessors(ctx, &decl, &outcome);
        for p in &outcome.propagated {
            self.lags.observe("ObjectSync", &p.cluster, p.lag);
        }
        let selection_text = selection_text(&os.sync_spec().source);
        let events = self.track(os, &decl, &outcome);
        self.publish_status(
            (ctx, key),
            os,
            Observation::Reconciled {
                outcome: &outcome,
                source_namespace: &decl.spec.source.namespace,
                source_name: &decl.spec.source.name,
                selection: selection_text.as_deref(),
                report_only: decl.spec.mode == Mode::Report,
            },
            events,
        )
        .await?;
        Ok(requeue_after(&outcome))
    }

    /// Removes (or releases) the copies of a going `os` as `spec` finds them; its finalizer
    /// goes once none is left and every cluster was checked.
    async fn clean_up<K: SyncObject>(
        &self,
        (key, record): (&ObjectKey, Option<CopiesMade>),
        ctx: &Context,
        os: &K,
        spec: FanOutSpec,
    ) -> kubesync::Result<Action> {
        let decl = declaration((key, record), os, spec, true);
        let outcome = self.fan_out.reconcile(ctx, &decl).await?;
        if !(outcome.ready && outcome.remaining_copies == 0 && outcome.unreachable.is_empty()) {
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        self.forget(ctx, key);
        self.writes
            .set_finalizer(os, OBJECT_SYNC_FINALIZER, false)
            .await?;
        Ok(Action::done())
    }

    /// Assembles the status, remembers the gauge, publishes the Events of condition changes
    /// and writes the status when it changed.
    async fn publish_status<K: SyncObject>(
        &self,
        (ctx, key): (&Context, &ObjectKey),
        os: &K,
        observed: Observation<'_>,
        drifts: Vec<(String, ObjectReference)>,
    ) -> kubesync::Result<()> {
        let old = status_read_again(ctx, key, os);
        let record_opened = matches!(
            &observed,
            Observation::Reconciled { outcome, .. } if outcome.record_opened
        );
        let status = object_sync_status(&old, os.meta().generation, observed, crate::status::now());
        for (type_, reason, note) in self.remember_status(os, &old, &status) {
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
        // A record opened for creates is closed by this write, even if nothing else changed
        // (the store may not show the opening yet).
        if status != old || record_opened {
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
    fn remember_status<K: SyncObject>(
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
        outcome: &Outcome,
    ) -> Vec<(String, ObjectReference)> {
        let mut records = self.lock();
        let record = records
            .entry((os.namespace().unwrap_or_default(), os.name_any()))
            .or_default();
        record.behind = behind(&record.behind, outcome, Instant::now());
        let mut current: HashMap<(&str, &str), u32> = HashMap::new();
        for d in &outcome.destinations {
            if d.state == DestinationState::Synced {
                *current
                    .entry((d.source.as_str(), d.source_resource_version.as_str()))
                    .or_default() += 1;
            }
        }
        record.sources = copied_sources(&decl.spec.source, outcome, &current);
        // Report mode finds the same change at every reconcile until it is undone; Enforce
        // reports it once, when it reverts it (also a change Report mode found before).
        let mut found = HashMap::new();
        let mut reverted = Vec::new();
        for d in &outcome.destinations {
            if let Some(drift) = &d.drift {
                let key = d.at();
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
        drift_events(&decl.spec.source.resource, &reverted)
    }

    /// Forgets an ObjectSync that is gone: its fan-out state and its metrics.
    /// Forgets (in memory only) every ObjectSync and ClusterObjectSync for which `keep` is
    /// false: a replica of `--sharded` that no longer works on them. Writes nothing.
    pub fn release(&self, ctx: &Context, keep: impl Fn(&ObjectKey) -> bool) {
        let namespaced = ApiResource::erase::<ObjectSync>(&());
        let cluster = ApiResource::erase::<ClusterObjectSync>(&());
        let recorded: Vec<ObjectKey> = self
            .lock()
            .keys()
            .map(|(ns, name)| match ns.is_empty() {
                true => ObjectKey::new(LOCAL, &cluster, None, name),
                false => ObjectKey::new(LOCAL, &namespaced, Some(ns.clone()), name),
            })
            .collect();
        for key in recorded {
            if !keep(&key) {
                self.forget(ctx, &key);
            }
        }
    }

    /// Forgets one ObjectSync (in memory only).
    pub fn forget(&self, ctx: &Context, key: &ObjectKey) {
        self.fan_out.forget(ctx, key);
        self.lock()
            .remove(&(key.namespace.clone().unwrap_or_default(), key.name.clone()));
    }
}

/// Each source as `outcome` copied it: its key (of `source`'s kind and place), the
/// resourceVersion copied, and how many copies carry that version now (`current`, by (source
/// name, version)).
fn copied_sources(
    source: &SourceRef,
    outcome: &Outcome,
    current: &HashMap<(&str, &str), u32>,
) -> Vec<(ObjectKey, String, u32)> {
    outcome
        .source_versions
        .iter()
        .map(|v| {
            let key = ObjectKey::new(
                source.cluster_or(LOCAL),
                &source.resource,
                source.namespace().map(String::from),
                &v.name,
            );
            let copies = current.get(&(v.name.as_str(), v.resource_version.as_str()));
            let copies = copies.copied().unwrap_or_default();
            (key, v.resource_version.clone(), copies)
        })
        .collect()
}

/// The Warning Events announcing the changes reverted at `reverted`'s copies (of kind `ar`),
/// with each change's words: at most [`MAX_DRIFT_EVENTS`], then one that counts the others.
fn drift_events(
    ar: &ApiResource,
    reverted: &[(&DestinationStatus, String)],
) -> Vec<(String, ObjectReference)> {
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
            let note = format!("the copy {at} was changed by someone else and reverted: {text}");
            (events::truncate_note(note), reference(d))
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

/// The fan-out declaration of `os` (`key`) with `spec`; `deleting` when it goes.
fn declaration<K: SyncObject>(
    (key, record): (&ObjectKey, Option<CopiesMade>),
    os: &K,
    spec: FanOutSpec,
    deleting: bool,
) -> Declaration {
    let reference = match os.namespace() {
        Some(ns) => format!("{LOCAL}/{ns}/{}", os.name_any()),
        None => format!("{LOCAL}/{}", os.name_any()),
    };
    Declaration {
        key: key.clone(),
        owner: Owner {
            reference,
            uid: os.uid().unwrap_or_default(),
            shard: None,
        },
        spec,
        deleting,
        refused: false,
        record,
    }
}

/// Enqueues each declaration `decl` takes over from whose record still holds a copy `decl`
/// took (its copies' events now wake `decl`, not it): it finds them another's, forgets them,
/// and says so in its status.
fn wake_predecessors(ctx: &Context, decl: &Declaration, outcome: &Outcome) {
    let Some(record) = &outcome.record else {
        return;
    };
    for p in &decl.spec.take_over {
        if p.record.shares_any(record) {
            ctx.enqueue(p.key.clone());
        }
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
