//! The fan-out engine: reconciles declarations ("copy this source to these destinations")
//! on the multi-cluster runtime. It gathers what the stores show, asks the pure [`plan`] what
//! to do, and carries that out through the [`Writer`].
//!
//! - **Watches are shared**: per resource type and cluster, one watch of kubesync's copies (in
//!   full, selected on the server by the `managed-by` label) and one of every other object
//!   (metadata only), plus one watch per source object and one Namespace watch per cluster
//!   (metadata only). Memory thus grows with what kubesync copies, not with unrelated objects
//!   of the same kind (see `FanOut::ensure_watches`). A watch starts when the first
//!   declaration needs it and stops when the last one is forgotten; which declaration uses
//!   which watch is kept in the [`index`](super::index), whose every operation is atomic.
//! - **Events map straight to declarations**: a source event to the declarations copying it,
//!   a copy event (by its `managed-by` uid) to its owner, a namespace event to the declarations
//!   with destinations in that cluster. No periodic sweep is needed to notice a new namespace.
//! - **Ownership is read from the copies' marks**, never from memory: deletion works after a
//!   restart. Nothing without this declaration's marks is modified (unless adopted) or deleted.
//! - A cluster that is unreachable is never read as "no copies there".

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams, PropagationPolicy};
use kube::core::ApiResource;

use super::index::{EventOf, Retire, Scope, SharedIndex, WatchKey};
use super::plan::{self, Delete, Snapshot, Stores, Write};
use super::rules::settle::{Failure, Settling, Step, WriteOutcome};
use super::rules::{self, Decision, Strategy};
use super::seen::Seen;
use super::spec::{
    Declaration, DestinationRef, DestinationState, DestinationStatus, Mode, Report, Selection,
};
use crate::error::{Error, Result};
use crate::key::ObjectKey;
use crate::runtime::{ClusterStatus, Context, Watch, WatchId};
use crate::writer::{Deleted, Writer};

pub use super::rules::FIELD_MANAGER;

/// How long the first sight of a version is kept after its object is gone (a deleted copy's
/// recreation counts its lag from the deletion).
const SEEN_FOR: Duration = Duration::from_secs(600);

/// The fan-out engine. Cheap to share (`Arc`); one per process serves every declaration.
pub struct FanOut {
    local: String,
    writer: Writer,
    concurrency: usize,
    index: SharedIndex,
    namespace_type: ApiResource,
    /// First sightings of the versions copies depend on.
    seen: Arc<Seen>,
}

/// The watches one declaration uses in one cluster.
struct Watches {
    /// Those a plan waits for.
    ids: Vec<WatchId>,
    /// The source watch (local cluster), one of `ids`.
    source: Option<WatchId>,
    /// The metadata-only watch of the other objects of the copied type.
    others: WatchId,
}

/// What a declaration's watches say ([`FanOut::watch`]).
struct Watched {
    /// The clusters it touches (this one, and its destinations').
    clusters: Vec<String>,
    /// Those of them no RemoteCluster is registered for.
    unknown: Vec<String>,
    /// Every watch it needs has listed.
    ready: bool,
    /// Failing watches: (cluster, the API's message).
    errors: Vec<(String, String)>,
    /// The source watch (this cluster), if the source is read.
    source: Option<WatchId>,
}

/// What a reconcile observed ([`FanOut::observe`]).
enum Observed {
    /// A watch has not listed, or a source's absence is not confirmed yet: nothing is
    /// decided (the declaration is woken when that changes).
    NotReady,
    /// The facts the plan decides on.
    Ready(Facts),
}

/// A declaration's sources and copies, as the stores show them.
struct Facts {
    /// The source objects (none while the declaration goes or is refused).
    sources: Vec<Arc<DynamicObject>>,
    /// Its copies, by destination.
    owned: BTreeMap<DestinationRef, Arc<DynamicObject>>,
    /// Clusters that cannot be checked now.
    unreachable: BTreeSet<String>,
}

impl Facts {
    /// What the report says of them.
    fn describe(&self, report: &mut Report) {
        report.unreachable = self.unreachable.iter().cloned().collect();
        report.source_found = !self.sources.is_empty();
        report.sources = self.sources.len();
        report.remaining_copies = self.owned.len();
        report.source_versions = self
            .sources
            .iter()
            .map(|s| {
                let rv = s.metadata.resource_version.clone().unwrap_or_default();
                (s.name_any(), rv)
            })
            .collect();
    }
}

/// The key of `decl`'s single source (its name is empty for a selection).
fn source_key(local: &str, decl: &Declaration) -> ObjectKey {
    let source = &decl.spec.source;
    ObjectKey::new(
        local.to_string(),
        &source.resource,
        source.namespace().map(String::from),
        &source.name,
    )
}

/// The runtime's stores, as the plan reads them.
struct ContextStores<'a> {
    ctx: &'a Context,
    resource: &'a ApiResource,
    namespace_type: &'a ApiResource,
    /// Consent objects by (cluster, namespace), gathered once per reconcile.
    consents: HashMap<(String, String), Vec<Arc<DynamicObject>>>,
    /// This declaration's copies, read once per reconcile (their store is packed: every read
    /// parses).
    owned: &'a BTreeMap<DestinationRef, Arc<DynamicObject>>,
}

impl<'a> ContextStores<'a> {
    fn new(
        ctx: &'a Context,
        decl: &'a Declaration,
        namespace_type: &'a ApiResource,
        clusters: &[String],
        owned: &'a BTreeMap<DestinationRef, Arc<DynamicObject>>,
    ) -> Self {
        let mut consents: HashMap<(String, String), Vec<Arc<DynamicObject>>> = HashMap::new();
        if let Some(consent) = &decl.spec.consent {
            for c in clusters {
                for obj in ctx.list(c, &consent.resource) {
                    let key = (c.clone(), obj.namespace().unwrap_or_default());
                    consents.entry(key).or_default().push(obj);
                }
            }
        }
        Self {
            ctx,
            resource: &decl.spec.source.resource,
            namespace_type,
            consents,
            owned,
        }
    }
}

impl Stores for ContextStores<'_> {
    fn namespaces(&self, cluster: &str) -> Vec<Arc<DynamicObject>> {
        self.ctx.list_metadata(cluster, self.namespace_type)
    }

    fn has_namespace(&self, cluster: &str, namespace: &str) -> bool {
        let key = ObjectKey::new(cluster, self.namespace_type, None, namespace);
        self.ctx.get_metadata(&key).is_some()
    }

    /// A copy in full; anything else at that name as metadata only.
    fn object(&self, at: &DestinationRef) -> Option<Arc<DynamicObject>> {
        if let Some(copy) = self.owned.get(at) {
            return Some(Arc::clone(copy));
        }
        self.ctx.get_metadata(&at.key(self.resource))
    }

    fn consents(&self, cluster: &str, namespace: &str) -> Vec<Arc<DynamicObject>> {
        self.consents
            .get(&(cluster.to_string(), namespace.to_string()))
            .cloned()
            .unwrap_or_default()
    }
}

impl FanOut {
    /// An engine whose sources live in the cluster named `local`; copies are written with at
    /// most 16 requests in flight per reconcile.
    pub fn new(local: &str) -> Self {
        Self {
            local: local.to_string(),
            writer: Writer::new(),
            concurrency: 16,
            index: SharedIndex::default(),
            seen: Arc::default(),
            namespace_type: ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "",
                "v1",
                "Namespace",
            )),
        }
    }

    /// At most `n` copy writes in flight per reconcile.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// The writer whose counts this engine updates.
    pub fn write_counter(&self) -> Writer {
        self.writer.clone()
    }

    /// When the latest version of `key` (a source) was first seen by this engine's watches,
    /// and which version that is.
    pub fn source_seen(&self, key: &ObjectKey) -> Option<(String, std::time::Instant)> {
        self.seen.latest(key)
    }

    /// Watches in use (type and namespace watches, all clusters).
    pub fn watch_count(&self) -> usize {
        self.index.with(|idx| idx.watch_count())
    }

    /// The watch `key` for `decl` (events mapped as `event`), started with `watch()` if no
    /// declaration uses it yet.
    fn ensure_watch(
        &self,
        ctx: &Context,
        key: WatchKey,
        event: EventOf,
        decl: &ObjectKey,
        watch: impl FnOnce() -> Watch,
    ) -> Result<WatchId> {
        let cluster = key.cluster.clone();
        let this_watch = key.clone();
        self.index.with(|idx| {
            idx.watch_for(key, decl, || {
                // Built only when the watch starts: most calls find it running.
                let index = self.index.clone();
                let local = self.local.clone();
                let seen = self.seen.clone();
                let mapper: crate::runtime::Mapper =
                    Arc::new(move |k: &ObjectKey, obj: &DynamicObject| {
                        // Not unrelated objects: memory must not grow with them.
                        if event != EventOf::Other
                            && let Some(rv) = &obj.metadata.resource_version
                        {
                            seen.saw(k, rv);
                        }
                        index.with(|idx| idx.declarations_for(event, &this_watch, &local, k, obj))
                    });
                ctx.start_watch(&cluster, watch(), Some(mapper))
            })
        })
    }

    /// The watches `decl` needs in `cluster`, started where no declaration uses them yet:
    ///
    /// | watch | holds | events wake |
    /// |---|---|---|
    /// | copies of the source type (`managed-by` label, server-side) | full objects (managedFields compacted) | the copy's owner |
    /// | other objects of the source type (no `managed-by` label) | metadata only | the declarations they block (a `Conflict` there) |
    /// | the source (local cluster; one object, by field selector) | the full object | the declarations copying it |
    /// | or the selected sources (local cluster; the source namespace, by label selector) | full objects | the declarations using the watch |
    /// | Namespaces | metadata only | declarations with destinations in the cluster |
    /// | consent objects, if the declaration asks for consent | full objects | the same |
    ///
    /// Unrelated objects of the copied type (Helm release Secrets, say) are thus held as
    /// metadata only: enough to see that a destination name is taken, by whom (marks, labels,
    /// `kubesync.io/protect`), and its uid and resourceVersion. An adoption reads the object
    /// live before it writes.
    ///
    /// Returns the watches a plan waits for, the source watch among them in the local
    /// cluster, and apart the watch of the others: a plan does
    /// not wait for its first list (thousands of unrelated objects must not delay the first
    /// copies). It only spares requests: an object it does not show yet is found by the
    /// create, which the apiserver refuses (409), and decided on after a live read. Nothing
    /// is deleted on what it shows or does not show.
    fn ensure_watches(
        &self,
        ctx: &Context,
        cluster: &str,
        decl: &Declaration,
        sources: &Scope,
    ) -> Result<Watches> {
        let ar = &decl.spec.source.resource;
        let ns_type = &self.namespace_type;
        let key = &decl.key;
        let others = self.ensure_watch(
            ctx,
            WatchKey::scoped(cluster, ar, Scope::Others),
            EventOf::Other,
            key,
            || {
                Watch::dynamic(ar.clone())
                    .labels(&format!("!{}", rules::MANAGED_BY))
                    .metadata_only()
                    .packed()
            },
        )?;
        let mut ids = vec![
            self.ensure_watch(
                ctx,
                WatchKey::scoped(cluster, ar, Scope::Copies),
                EventOf::Copy,
                key,
                || {
                    Watch::dynamic(ar.clone())
                        .labels(rules::MANAGED_BY)
                        .index_label(rules::MANAGED_BY)
                        .transform(rules::digest::shrink)
                        .packed()
                },
            )?,
            self.ensure_watch(
                ctx,
                WatchKey::of(cluster, ns_type),
                EventOf::Cluster,
                key,
                || Watch::dynamic(ns_type.clone()).metadata_only(),
            )?,
        ];
        let mut source_watch = None;
        // A declaration that goes needs no source and no consent: its copies are found by
        // their marks, so a source watch that cannot start (a selector the apiserver refuses,
        // a kind no longer served) never holds its deletion up.
        if cluster == self.local && !decl.reads_no_source() {
            // The source namespace (a cluster-scoped kind has none).
            let in_source_namespace = |w: Watch| match decl.spec.source.namespace() {
                Some(ns) => w.namespace(ns),
                None => w,
            };
            let event = match sources {
                Scope::Selected { .. } => EventOf::Users,
                _ => EventOf::Source,
            };
            let id = self.ensure_watch(
                ctx,
                WatchKey::scoped(cluster, ar, sources.clone()),
                event,
                key,
                || {
                    let watch = in_source_namespace(Watch::dynamic(ar.clone()));
                    match sources {
                        Scope::Selected { labels, .. } => watch.labels(labels),
                        _ => watch.fields(&format!("metadata.name={}", decl.spec.source.name)),
                    }
                },
            )?;
            ids.push(id);
            source_watch = Some(id);
        }
        if let Some(consent) = decl.spec.consent.as_ref().filter(|_| !decl.deleting) {
            let ct = &consent.resource;
            ids.push(self.ensure_watch(
                ctx,
                WatchKey::of(cluster, ct),
                EventOf::Cluster,
                key,
                || Watch::dynamic(ct.clone()).transform(compact_consent),
            )?);
        }
        Ok(Watches {
            ids,
            source: source_watch,
            others,
        })
    }

    /// Drops a declaration that is gone: its index entries, and the watches no other
    /// declaration uses.
    pub fn forget(&self, ctx: &Context, key: &ObjectKey) {
        for id in self.index.with(|idx| idx.forget(key)) {
            ctx.stop_watch(id);
        }
    }

    /// The declaration now copies another kind: delete the copies of the old kind first (found
    /// by their marks in the old kind's stores) and release its watches. Until that is done,
    /// the index keeps the old kind, so a failure is retried.
    async fn retire_previous_type(&self, ctx: &Context, decl: &Declaration) -> Result<()> {
        let ar = &decl.spec.source.resource;
        let Some(retire) = self.index.with(|idx| idx.begin_type(&decl.key, ar)) else {
            return Ok(());
        };
        let Retire { old, watches } = &retire;
        for wk in watches {
            if let ClusterStatus::Unreachable(m) = ctx.cluster_status(&wk.cluster) {
                return Err(Error::ClusterUnreachable {
                    cluster: wk.cluster.clone(),
                    message: format!("{m}; cannot remove the old copies yet"),
                });
            }
            for copy in ctx
                .list_labelled(&wk.cluster, old, rules::MANAGED_BY, &decl.owner.uid)
                .iter()
                .filter(|c| rules::owned_by(c, &decl.owner))
            {
                let at = DestinationRef::new(
                    wk.cluster.clone(),
                    copy.namespace().unwrap_or_default(),
                    copy.name_any(),
                );
                self.delete_copy(ctx, old, &at, copy.metadata.uid.as_deref())
                    .await?;
                tracing::info!(destination = %at, kind = %old.kind, "the source kind changed; deleted the old copy");
            }
        }
        for id in self
            .index
            .with(|idx| idx.finish_retire(&decl.key, &retire, ar))
        {
            ctx.stop_watch(id);
        }
        Ok(())
    }

    /// Reconciles one declaration: copies where they must be, nothing where they must not.
    ///
    /// A pipeline: [`watch`](FanOut::watch) (the watches it needs, and their health) →
    /// [`observe`](FanOut::observe) (its sources and copies, absences confirmed live) → the
    /// pure [`plan`] → [`carry_out`](FanOut::carry_out) (writes and deletes, or in Report mode
    /// only what withdrawn consent ends) → [`note`](FanOut::note) (what later events need).
    pub async fn reconcile(&self, ctx: &Context, decl: &Declaration) -> Result<Report> {
        let ar = &decl.spec.source.resource;
        if decl.refused
            && self
                .index
                .with(|idx| idx.copies_another_type(&decl.key, ar))
        {
            // A refused spec that also names another kind: the old kind's copies are not
            // removed on a spec that may be a typo; they go once it is valid.
            return Ok(Report::default());
        }
        self.retire_previous_type(ctx, decl).await?;
        let watched = self.watch(ctx, decl)?;
        let mut report = Report {
            ready: watched.ready,
            watch_errors: watched.errors.clone(),
            ..Default::default()
        };
        let facts = match self.observe(ctx, decl, &watched).await? {
            Observed::NotReady => {
                report.ready = false;
                return Ok(report);
            }
            Observed::Ready(facts) => facts,
        };
        let stores = ContextStores::new(
            ctx,
            decl,
            &self.namespace_type,
            &watched.clusters,
            &facts.owned,
        );
        let plan = plan::plan(&Snapshot {
            local: &self.local,
            declaration: decl,
            sources: &facts.sources,
            unknown_clusters: &watched.unknown,
            unreachable: &facts.unreachable,
            owned: &facts.owned,
            stores: &stores,
        });
        tracing::debug!(
            declaration = %decl.key,
            sources = facts.sources.len(),
            owned = facts.owned.len(),
            writes = plan.writes.len(),
            deletes = plan.deletes.len(),
            "fan-out planned"
        );
        facts.describe(&mut report);
        self.carry_out(ctx, decl, plan, &stores, &facts.owned, &mut report)
            .await;
        self.note(ctx, decl, &mut report);
        Ok(report)
    }

    /// The watches `decl` needs in every cluster it touches, started if need be (shared with
    /// other declarations through the index), and whether they have listed and are healthy.
    /// A watch that has not listed, or fails, wakes the declaration when it lists.
    fn watch(&self, ctx: &Context, decl: &Declaration) -> Result<Watched> {
        let spec = &decl.spec;
        let source_key = source_key(&self.local, decl);
        let source_scope = match &spec.source.select {
            None => Scope::Source(source_key.clone()),
            Some(selection) => Scope::Selected {
                namespace: spec.source.namespace.clone(),
                labels: selection.label_selector(),
            },
        };
        let wanted = spec
            .destinations
            .iter()
            .map(|d| d.cluster.clone().unwrap_or_else(|| self.local.clone()))
            .chain([self.local.clone()]);
        let single = spec.source.select.is_none().then(|| source_key.clone());
        let clusters = self
            .index
            .with(|idx| idx.register(&decl.key, &decl.owner.uid, single, wanted));
        // Going (or refused): the source watch is released (it may be the one that fails).
        let keep_source = if decl.reads_no_source() {
            Scope::Copies
        } else {
            source_scope.clone()
        };
        for id in self
            .index
            .with(|idx| idx.retain_source(&decl.key, &keep_source))
        {
            ctx.stop_watch(id);
        }
        let mut watched = Watched {
            clusters,
            unknown: Vec::new(),
            ready: true,
            errors: Vec::new(),
            source: None,
        };
        for c in &watched.clusters {
            if ctx.cluster(c).is_none() {
                watched.unknown.push(c.clone());
                continue;
            }
            let Watches {
                ids,
                source,
                others,
            } = self.ensure_watches(ctx, c, decl, &source_scope)?;
            watched.source = watched.source.or(source);
            for id in &ids {
                if !ctx.watch_listed(*id) {
                    // Look again when it has listed: its objects may map to no declaration
                    // (no copies yet), and then no event would.
                    watched.ready = false;
                    ctx.when_listed(*id, decl.key.clone());
                }
            }
            // Health is judged from this declaration's own watches, not the whole cluster's. A
            // failing watch wakes the declaration when it lists again: what was put off while
            // the cluster could not be checked (deletes there) is then decided, even if no
            // object of it changes.
            let mut first_error = None;
            for id in ids.iter().chain([&others]) {
                if let Some(e) = ctx.watch_error(*id) {
                    ctx.when_listed(*id, decl.key.clone());
                    first_error.get_or_insert(match source {
                        Some(s) if s == *id => format!("reading the source: {e}"),
                        _ => e,
                    });
                }
            }
            if let Some(e) = first_error {
                watched.errors.push((c.clone(), e));
            }
        }
        Ok(watched)
    }

    /// What the stores show of `decl`'s sources and copies, once its watches have listed; a
    /// source (or a selection's member) the store no longer shows while copies of it exist is
    /// confirmed gone by a live read first (the store may be a moment behind), else
    /// [`Observed::NotReady`] and its event is awaited.
    async fn observe(
        &self,
        ctx: &Context,
        decl: &Declaration,
        watched: &Watched,
    ) -> Result<Observed> {
        if !watched.ready {
            return Ok(Observed::NotReady);
        }
        let spec = &decl.spec;
        let ar = &spec.source.resource;
        let source_key = source_key(&self.local, decl);
        let stored: Vec<Arc<DynamicObject>> = match (&spec.source.select, watched.source) {
            (None, _) => ctx.get(&source_key).into_iter().collect(),
            (Some(_), Some(id)) => ctx
                .list_watch(id)
                .into_iter()
                .filter(|s| spec.source.selects(s))
                .collect(),
            (Some(_), None) => Vec::new(),
        };
        let source_in_store = !stored.is_empty();
        let sources: Vec<Arc<DynamicObject>> = stored
            .into_iter()
            .filter(|s| s.metadata.deletion_timestamp.is_none() && !decl.reads_no_source())
            .collect();
        let mut owned: BTreeMap<DestinationRef, Arc<DynamicObject>> = BTreeMap::new();
        for c in &watched.clusters {
            for obj in ctx.list_labelled(c, ar, rules::MANAGED_BY, &decl.owner.uid) {
                if rules::owned_by(&obj, &decl.owner) {
                    let at = DestinationRef::new(
                        c.clone(),
                        obj.namespace().unwrap_or_default(),
                        obj.name_any(),
                    );
                    owned.insert(at, obj);
                }
            }
        }
        let confirmed = match &spec.source.select {
            None => {
                !plan::must_confirm_source_gone(
                    source_in_store,
                    decl.reads_no_source(),
                    owned.len(),
                ) || ctx.confirm_absent(&source_key, ar).await?
            }
            Some(selection) => {
                decl.reads_no_source()
                    || self
                        .confirm_unselected(ctx, decl, selection, &sources, &owned)
                        .await?
            }
        };
        if !confirmed {
            tracing::debug!(declaration = %decl.key, "source not in the store yet; waiting for its event");
            return Ok(Observed::NotReady);
        }
        Ok(Observed::Ready(Facts {
            sources,
            owned,
            unreachable: watched.errors.iter().map(|(c, _)| c.clone()).collect(),
        }))
    }

    /// Carries out `plan`: every write and delete; in Report mode (and for a refused spec)
    /// only the deletes whose consent was withdrawn, the rest reported as what would be done.
    async fn carry_out(
        &self,
        ctx: &Context,
        decl: &Declaration,
        plan: plan::Plan,
        stores: &ContextStores<'_>,
        owned: &BTreeMap<DestinationRef, Arc<DynamicObject>>,
        report: &mut Report,
    ) {
        let spec = &decl.spec;
        report.destinations = plan.statuses;
        if spec.mode == Mode::Enforce && !decl.refused {
            let (written, deleted, propagated) =
                self.execute(ctx, decl, plan.writes, plan.deletes).await;
            report.destinations.extend(written);
            report.remaining_copies = report.remaining_copies.saturating_sub(deleted);
            report.propagated = propagated;
            return;
        }
        let since: Vec<Option<Instant>> = plan
            .writes
            .iter()
            .map(|w| self.behind_since(decl, w).map(|(t, _)| t))
            .collect();
        // Consent withdrawn ends the copies it admitted, whatever the mode.
        let deletes = match &spec.consent {
            Some(consent) => {
                let (withdrawn, others) =
                    plan::withdrawn(consent, &self.local, stores, owned, plan.deletes);
                if !withdrawn.is_empty() {
                    let (done, deleted, _) = self.execute(ctx, decl, Vec::new(), withdrawn).await;
                    report.destinations.extend(done);
                    report.remaining_copies = report.remaining_copies.saturating_sub(deleted);
                }
                others
            }
            None => plan.deletes,
        };
        let mut statuses = plan::reported(plan.writes, deletes);
        for (st, since) in statuses.iter_mut().zip(since) {
            st.behind_since = since;
        }
        report.destinations.extend(statuses);
    }

    /// What later events need: first sightings pruned now and then, the report's destinations
    /// in order, and the objects in the way (a `Conflict`) indexed, so that their change
    /// (deleted, unprotected) wakes this declaration instead of the next periodic pass.
    fn note(&self, ctx: &Context, decl: &Declaration, report: &mut Report) {
        if self.seen.needs_prune() {
            self.seen
                .prune(Instant::now(), SEEN_FOR, |k| ctx.get_metadata(k).is_some());
        }
        report.destinations.sort_by(|a, b| {
            (&a.cluster, &a.namespace, &a.name).cmp(&(&b.cluster, &b.namespace, &b.name))
        });
        let ar = &decl.spec.source.resource;
        let blocked: Vec<ObjectKey> = report
            .destinations
            .iter()
            .filter(|d| d.state == DestinationState::Conflict)
            .map(|d| {
                DestinationRef::new(d.cluster.clone(), d.namespace.clone(), d.name.clone()).key(ar)
            })
            .collect();
        self.index.with(|idx| idx.set_blocked(&decl.key, blocked));
    }

    /// Since when the copy `w` writes has been behind, as first seen by the watches (see
    /// [`Seen`]), and whether the write propagates a change: a new copy (since the latest
    /// sight of its source's version, of its namespace's, or of the copy's deletion), or a
    /// newer source version (since that version's first sight). Other updates (a copy someone
    /// else changed; a changed declaration) are behind since the copy's last change, and
    /// propagate nothing.
    fn behind_since(&self, decl: &Declaration, w: &Write) -> Option<(Instant, bool)> {
        let spec = &decl.spec;
        let ar = &spec.source.resource;
        let source = ObjectKey::new(
            self.local.clone(),
            ar,
            spec.source.namespace().map(String::from),
            &w.source,
        );
        let copy = w.at.key(ar);
        match w.decision {
            Decision::Create => {
                let namespace = w.at.namespace().and_then(|ns| {
                    self.seen.changed(&ObjectKey::new(
                        &w.at.cluster,
                        &self.namespace_type,
                        None,
                        ns,
                    ))
                });
                [
                    self.seen.changed(&source),
                    namespace,
                    self.seen.changed(&copy),
                ]
                .into_iter()
                .flatten()
                .max()
                .map(|t| (t, true))
            }
            Decision::Update => {
                let carried = w
                    .existing
                    .as_ref()
                    .and_then(|e| e.annotations().get(rules::SOURCE_VERSION).cloned());
                if carried.as_deref() == Some(w.source_resource_version.as_str()) {
                    self.seen.changed(&copy).map(|t| (t, false))
                } else {
                    self.seen
                        .since(&source, &w.source_resource_version)
                        .map(|t| (t, true))
                }
            }
            _ => None,
        }
    }

    /// Carries out a plan's writes and deletes, at most `concurrency` at once; returns the
    /// written destinations' states, how many copies were deleted, and the propagation lags
    /// of the writes that carried a change (see [`FanOut::behind_since`]).
    async fn execute(
        &self,
        ctx: &Context,
        decl: &Declaration,
        writes: Vec<Write>,
        deletes: Vec<Delete>,
    ) -> (
        Vec<DestinationStatus>,
        usize,
        Vec<(String, std::time::Duration)>,
    ) {
        let ar = &decl.spec.source.resource;
        enum Op {
            Write(Box<Write>),
            Delete(Delete),
        }
        let ops = writes
            .into_iter()
            .map(|w| Op::Write(Box::new(w)))
            .chain(deletes.into_iter().map(Op::Delete));
        type Done = (Option<DestinationStatus>, bool, Option<std::time::Duration>);
        let results: Vec<Done> = futures::stream::iter(ops)
            .map(|op| async move {
                match op {
                    Op::Delete(Delete { at, uid, orphan }) => {
                        let gone = if orphan {
                            self.release_copy(ctx, ar, &at, uid.as_deref()).await
                        } else {
                            self.delete_copy(ctx, ar, &at, uid.as_deref()).await.map(|_| ())
                        };
                        if let Err(e) = &gone {
                            tracing::warn!(destination = %at, orphan, error = %e, "removing a copy failed");
                        }
                        (None, gone.is_ok(), None)
                    }
                    Op::Write(w) => {
                        let started = self.behind_since(decl, &w);
                        let (mut st, sent) = self.settle(ctx, decl, &w).await;
                        // The reconcile that reverts someone else's change reports it.
                        if sent && w.decision == Decision::Update {
                            st.drift = w.drift.clone();
                        }
                        let synced = st.state == DestinationState::Synced;
                        let lag = match started {
                            Some((t, true)) if sent && synced => Some(t.elapsed()),
                            _ => None,
                        };
                        if !synced {
                            st.behind_since = started.map(|(t, _)| t);
                        }
                        let source = &w.source;
                        (Some(st.of_source(source)), false, lag)
                    }
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let deleted = results.iter().filter(|(_, d, _)| *d).count();
        let mut statuses = Vec::with_capacity(results.len());
        let mut propagated = Vec::new();
        for (st, _, lag) in results {
            if let Some(st) = st {
                if let Some(lag) = lag {
                    propagated.push((st.cluster.clone(), lag));
                }
                statuses.push(st);
            }
        }
        (statuses, deleted, propagated)
    }

    /// Carries out `decision` at one destination and says how it ended, and whether a write
    /// was sent that the copy now shows. The rules (adopt only after a live read, decide once
    /// more after a create finds the name taken, back off on a uid precondition) are the pure
    /// [`rules::settle`]; this does the reads and writes it asks for.
    async fn settle(
        &self,
        ctx: &Context,
        decl: &Declaration,
        w: &Write,
    ) -> (DestinationStatus, bool) {
        let ar = &decl.spec.source.resource;
        let (at, desired) = (&w.at, &w.desired);
        let mut existing = w.existing.clone();
        let mut settling = Settling::new(w.decision.clone(), existing.is_some(), w.strategy);
        let mut step = settling.start();
        loop {
            step = match step {
                Step::Done(end) => {
                    let version = match end.state {
                        DestinationState::Synced => w.source_resource_version.as_str(),
                        _ => "",
                    };
                    return (
                        DestinationStatus::new(at, end.state, end.message, version),
                        end.sent,
                    );
                }
                Step::LookAgain => {
                    match self.look_again(ctx, decl, at, desired, w.strategy).await {
                        Ok((found, again)) => {
                            let exists = found.is_some();
                            existing = found;
                            settling.found(exists, again)
                        }
                        Err(status) => return (status, false),
                    }
                }
                Step::Write => {
                    let written = self
                        .write_copy(ctx, ar, at, desired, existing.as_deref(), w.strategy)
                        .await;
                    match &written {
                        Err(e) if is_uid_precondition_failure(e) => {
                            tracing::info!(destination = %at, "the object was replaced while kubesync wrote its copy; left untouched")
                        }
                        Err(e) if !is_already_exists(e) => {
                            tracing::warn!(destination = %at, error = %e, "writing a copy failed")
                        }
                        _ => {}
                    }
                    settling.written(match written {
                        Ok(sent) => WriteOutcome::Written { sent },
                        Err(e) => WriteOutcome::Failed {
                            cause: if is_already_exists(&e) {
                                Failure::AlreadyExists
                            } else if is_uid_precondition_failure(&e) {
                                Failure::UidPrecondition
                            } else {
                                Failure::Other
                            },
                            message: api_message(&e),
                        },
                    })
                }
            };
        }
    }

    /// Reads the object at `at` live and decides again on it; a failed read is the
    /// destination's error status.
    async fn look_again(
        &self,
        ctx: &Context,
        decl: &Declaration,
        at: &DestinationRef,
        desired: &DynamicObject,
        strategy: Strategy,
    ) -> std::result::Result<(Option<Arc<DynamicObject>>, Decision), DestinationStatus> {
        match self.read(ctx, &decl.spec.source.resource, at).await {
            Ok(found) => {
                let decision = rules::decide(
                    found.as_ref(),
                    desired,
                    &decl.owner,
                    strategy,
                    decl.spec.on_conflict,
                );
                Ok((found.map(Arc::new), decision))
            }
            Err(e) => Err(DestinationStatus::new(
                at,
                DestinationState::Error,
                api_message(&e),
                "",
            )),
        }
    }

    /// A selection's copies whose source the store does not show selected are removed by the
    /// plan. Whether that is so is confirmed first by a live list of the selected sources (the
    /// store may be a moment behind the cluster): `false` if some such source is still there
    /// and selected (then its event is awaited). A failed list is an error, never "gone".
    async fn confirm_unselected(
        &self,
        ctx: &Context,
        decl: &Declaration,
        selection: &Selection,
        sources: &[Arc<DynamicObject>],
        owned: &BTreeMap<DestinationRef, Arc<DynamicObject>>,
    ) -> Result<bool> {
        let (ar, ns) = (&decl.spec.source.resource, &decl.spec.source.namespace);
        let mark = |name: &str| rules::source_mark(ar, ns, name);
        let present: HashSet<String> = sources.iter().map(|s| mark(&s.name_any())).collect();
        let missing: HashSet<&str> = owned
            .values()
            .filter_map(|c| c.annotations().get(rules::SOURCE))
            .map(String::as_str)
            .filter(|m| !present.contains(*m))
            .collect();
        if missing.is_empty() {
            return Ok(true);
        }
        let live = ctx
            .api(&self.local, ar, decl.spec.source.namespace())?
            .list_metadata(&ListParams::default().labels(&selection.label_selector()))
            .await?;
        Ok(!live.items.iter().any(|o| {
            o.metadata.deletion_timestamp.is_none()
                && selection.selects_meta(&o.metadata)
                && missing.contains(mark(o.metadata.name.as_deref().unwrap_or_default()).as_str())
        }))
    }

    /// A live read of one destination object.
    async fn read(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &DestinationRef,
    ) -> Result<Option<DynamicObject>> {
        let cluster = ctx.require_cluster(&at.cluster)?;
        let api = crate::cluster::api(cluster.client().clone(), at.namespace(), ar);
        Ok(api.get_opt(&at.name).await?)
    }

    async fn write_copy(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &DestinationRef,
        desired: &DynamicObject,
        existing: Option<&DynamicObject>,
        strategy: Strategy,
    ) -> Result<bool> {
        let cluster = ctx.require_cluster(&at.cluster)?;
        match (strategy, existing) {
            (Strategy::Apply, Some(existing)) => {
                // Conditional on the object decided on: never takes over an object that
                // replaced it after the store was read.
                let mut body = desired.clone();
                body.metadata.uid = rules::apply_precondition(Some(existing));
                // Decided on a store that does not show this writer's last apply yet, which
                // sent the same: nothing to do.
                if self.writer.already_written(
                    &cluster,
                    ar,
                    existing,
                    ("apply", FIELD_MANAGER),
                    &body,
                ) {
                    return Ok(false);
                }
                // A copy created by a POST: its fields are owned by an `Update` entry, which an
                // apply cannot remove; hand them to the `Apply` entry first when this apply
                // leaves something out.
                if let Some(patch) = rules::ownership_upgrade(existing, desired, FIELD_MANAGER) {
                    self.writer
                        .json_patch(
                            &cluster,
                            ar,
                            at.namespace(),
                            &at.name,
                            &patch,
                            FIELD_MANAGER,
                        )
                        .await?;
                }
                self.writer
                    .apply(&cluster, ar, &body, FIELD_MANAGER)
                    .await?;
            }
            // A new copy is created, never applied: the apiserver refuses a create when an
            // object of that name appeared after the store was read, where an apply would
            // take it over.
            (Strategy::Apply | Strategy::Replace, None) => {
                self.writer
                    .create(&cluster, ar, desired, FIELD_MANAGER)
                    .await?;
            }
            (Strategy::Replace, Some(existing)) => {
                let mut body = desired.clone();
                body.metadata.resource_version = existing.metadata.resource_version.clone();
                match self
                    .writer
                    .replace(&cluster, ar, &body, FIELD_MANAGER)
                    .await
                {
                    Err(Error::Kube(kube::Error::Api(s))) if s.is_invalid() => {
                        // An immutable field changed: delete and recreate the copy.
                        tracing::info!(destination = %at, "immutable field changed; recreating the copy");
                        self.delete_copy(ctx, ar, at, existing.metadata.uid.as_deref())
                            .await?;
                        self.writer
                            .create(&cluster, ar, desired, FIELD_MANAGER)
                            .await?;
                    }
                    other => {
                        other?;
                    }
                }
            }
        }
        Ok(true)
    }

    /// Keeps a copy and removes kubesync's marks from it: it becomes an ordinary object. A
    /// copy already gone, or replaced by another object (its uid no longer matches), is left.
    async fn release_copy(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &DestinationRef,
        uid: Option<&str>,
    ) -> Result<()> {
        let cluster = ctx.require_cluster(&at.cluster)?;
        let released = self
            .writer
            .merge_patch(
                &cluster,
                ar,
                at.namespace(),
                &at.name,
                &rules::release_patch(uid),
                FIELD_MANAGER,
            )
            .await;
        match released {
            Ok(_) => {
                tracing::info!(destination = %at, "released the copy (kept, kubesync's marks removed)");
                Ok(())
            }
            Err(Error::Kube(kube::Error::Api(s))) if s.is_not_found() || s.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_copy(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &DestinationRef,
        uid: Option<&str>,
    ) -> Result<Deleted> {
        let cluster = ctx.require_cluster(&at.cluster)?;
        self.writer
            .delete(
                &cluster,
                ar,
                at.namespace(),
                &at.name,
                Some(PropagationPolicy::Background),
                uid,
            )
            .await
    }
}

/// Whether a create failed because an object of that name exists.
fn is_already_exists(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s)) if s.is_already_exists())
}

/// Whether a write failed on its uid precondition ([`rules::apply_precondition`]): the object
/// it was decided on is gone (409, "uid mismatch") or was replaced by another one (422,
/// `metadata.uid` is immutable).
pub fn is_uid_precondition_failure(e: &Error) -> bool {
    let Error::Kube(kube::Error::Api(s)) = e else {
        return false;
    };
    (s.code == 409 && s.message.contains("uid mismatch"))
        || (s.code == 422
            && s.details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")))
}

/// A consent object as the engine holds it: its name, namespace, labels (kubesync's mark
/// among them) and `spec`; no annotations, no managedFields, nothing else. What a consent
/// says is in its spec; the rest would only cost memory (a tenant may fill annotations up to
/// 256 KiB per object).
fn compact_consent(obj: &mut DynamicObject) {
    obj.metadata.annotations = None;
    obj.metadata.managed_fields = None;
    if let Some(fields) = obj.data.as_object_mut() {
        fields.retain(|k, _| k == "spec");
    }
}

fn api_message(e: &Error) -> String {
    match e {
        Error::Kube(kube::Error::Api(s)) => {
            crate::error::bounded(format!("{}: {}", s.reason, s.message))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;
    use std::collections::VecDeque;

    use super::*;
    use crate::syncers::fan_out::rules::{CopyRules, MANAGED_BY, OnConflict, Owner};
    use crate::syncers::fan_out::spec::{FanOutSpec, SourceRef};
    use crate::{Cluster, Controller};

    type Seen = Arc<Mutex<Vec<String>>>;

    /// A client that answers each request with the next canned `(status, body)` and records
    /// each request's method and path (the error paths below cannot be timed on a real
    /// apiserver).
    fn canned(answers: Vec<(u16, serde_json::Value)>) -> (kube::Client, Seen) {
        let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
        let seen: Seen = Arc::default();
        let log = seen.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let next = answers.lock().pop_front();
            log.lock()
                .push(format!("{} {}", req.method(), req.uri().path()));
            async move {
                let (code, body) = next.expect("an answer for every request");
                http::Response::builder()
                    .status(code)
                    .body(kube::client::Body::from(
                        serde_json::to_vec(&body).expect("json"),
                    ))
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    fn status(code: u16, reason: &str) -> serde_json::Value {
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": format!("secrets \"copy\" {reason}"), "reason": reason, "code": code})
    }

    fn secret(labels: serde_json::Value, token: &str) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "copy", "namespace": "ns", "uid": "u1", "resourceVersion": "5",
                "labels": labels},
            "type": "Opaque", "data": {"token": token}})
    }

    fn declaration(ar: ApiResource) -> Declaration {
        Declaration {
            key: ObjectKey::new("local", &ar, Some("ctl".into()), "d"),
            owner: Owner {
                reference: "local/ctl/d".into(),
                uid: "decl-uid".into(),
            },
            spec: FanOutSpec {
                source: SourceRef::one(ar, "src", "copy"),
                destinations: vec![],
                on_conflict: OnConflict::Skip,
                rules: CopyRules::default(),
                consent: None,
                deletion_policy: Default::default(),
                mode: Default::default(),
            },
            deleting: false,
            refused: false,
        }
    }

    /// Settles a `Create` at `ns/copy` in `ctx`'s cluster `local`, the store having shown
    /// nothing there.
    async fn settle_create(fan: &FanOut, ctx: &Context, ns: &str) -> DestinationStatus {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let decl = declaration(ar);
        let mut desired: DynamicObject =
            serde_json::from_value(secret(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE="))
                .expect("desired");
        desired.metadata.namespace = Some(ns.into());
        desired.metadata.uid = None;
        desired.metadata.resource_version = None;
        let at = DestinationRef::new("local", ns, "copy");
        let write = Write {
            at,
            desired,
            existing: None,
            strategy: Strategy::Apply,
            decision: Decision::Create,
            source: "source".into(),
            source_resource_version: "7".into(),
            drift: None,
            changed: Vec::new(),
        };
        fan.settle(ctx, &decl, &write).await.0
    }

    /// A create whose name turns out to be taken reads the object and decides once more.
    async fn create_finds(found: (u16, serde_json::Value)) -> (DestinationStatus, Vec<String>) {
        let (client, seen) = canned(vec![(409, status(409, "AlreadyExists")), found]);
        let ctx = Controller::new()
            .cluster(Cluster::new("local", client))
            .context();
        let st = settle_create(&FanOut::new("local"), &ctx, "ns").await;
        let seen = seen.lock().clone();
        (st, seen)
    }

    /// The same on a real apiserver: the object at the destination (carrying `labels` and
    /// `token`) exists before the create. Returns the outcome, whether the object is unchanged
    /// (uid and resourceVersion), and the writes sent.
    async fn create_finds_on_a_real_apiserver(
        labels: serde_json::Value,
        token: &str,
    ) -> (DestinationStatus, bool, u64) {
        use k8s_openapi::api::core::v1::Secret;
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let env = kubesync_testenv::TestEnv::shared("engine-unit", false).expect("env");
        let ns = format!(
            "taken-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        env.create_namespace(&ns).await.expect("ns");
        let api: kube::Api<Secret> = kube::Api::namespaced(env.client().expect("client"), &ns);
        let mut there: Secret = serde_json::from_value(secret(labels, token)).expect("secret");
        there.metadata.namespace = Some(ns.clone());
        there.metadata.uid = None;
        there.metadata.resource_version = None;
        let before = api
            .create(&Default::default(), &there)
            .await
            .expect("create");
        let local = Cluster::from_config("local", env.config().expect("config")).expect("client");
        let ctx = Controller::new().cluster(local).context();
        let fan = FanOut::new("local");
        let st = settle_create(&fan, &ctx, &ns).await;
        let after = api.get("copy").await.expect("still there");
        let unchanged = after.metadata.uid == before.metadata.uid
            && after.metadata.resource_version == before.metadata.resource_version;
        (st, unchanged, fan.write_counter().writes())
    }

    #[tokio::test]
    async fn on_a_real_apiserver_a_create_that_finds_its_own_copy_is_in_sync() {
        // Its own copy, already as it must be (the store had not shown it yet).
        let (st, unchanged, writes) =
            create_finds_on_a_real_apiserver(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE=")
                .await;
        assert_eq!(st.state, DestinationState::Synced, "{}", st.message);
        assert!(unchanged, "the copy was written again");
        assert_eq!(writes, 1, "only the refused create");
    }

    #[tokio::test]
    async fn on_a_real_apiserver_a_create_that_finds_someone_elses_object_leaves_it_alone() {
        let (st, unchanged, writes) =
            create_finds_on_a_real_apiserver(serde_json::json!({}), "dGhlaXJz").await;
        assert_eq!(st.state, DestinationState::Conflict, "{}", st.message);
        assert!(
            st.message.contains("not created by kubesync"),
            "{}",
            st.message
        );
        assert!(unchanged, "someone else's object was written");
        assert_eq!(writes, 1, "only the refused create");
    }

    const POST_THEN_GET: [&str; 2] = [
        "POST /api/v1/namespaces/ns/secrets",
        "GET /api/v1/namespaces/ns/secrets/copy",
    ];

    #[tokio::test]
    async fn a_create_that_finds_its_own_copy_is_in_sync() {
        // The store had not shown this declaration's copy yet: nothing more is written.
        let ours = secret(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE=");
        let (st, seen) = create_finds((200, ours)).await;
        assert_eq!(st.state, DestinationState::Synced, "{}", st.message);
        assert_eq!(st.source_resource_version, "7");
        assert_eq!(seen, POST_THEN_GET);
    }

    #[tokio::test]
    async fn a_create_that_finds_someone_elses_object_leaves_it_alone() {
        let theirs = secret(serde_json::json!({}), "dGhlaXJz");
        let (st, seen) = create_finds((200, theirs)).await;
        assert_eq!(st.state, DestinationState::Conflict);
        assert!(
            st.message.contains("not created by kubesync"),
            "{}",
            st.message
        );
        assert_eq!(seen, POST_THEN_GET, "no write after the read");
    }

    #[tokio::test]
    async fn a_create_whose_name_is_free_again_is_looked_at_again() {
        let (st, seen) = create_finds((404, status(404, "NotFound"))).await;
        assert_eq!(st.state, DestinationState::Error);
        assert!(st.message.contains("looked at again"), "{}", st.message);
        assert_eq!(seen, POST_THEN_GET);
    }

    #[test]
    fn consent_objects_are_held_without_what_they_do_not_say() {
        let mut grant: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "victim", "labels": {"a": "b"},
                "annotations": {"padding": "x".repeat(100_000)},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"from": [{"namespace": "t1"}]},
            "status": {"junk": "y".repeat(10_000)}
        }))
        .expect("grant");
        compact_consent(&mut grant);
        assert_eq!(grant.metadata.annotations, None);
        assert_eq!(grant.metadata.managed_fields, None);
        assert_eq!(grant.labels().get("a").map(String::as_str), Some("b"));
        assert_eq!(
            grant.data,
            serde_json::json!({"spec": {"from": [{"namespace": "t1"}]}})
        );
        assert!(serde_json::to_string(&grant).expect("json").len() < 300);
    }
}
