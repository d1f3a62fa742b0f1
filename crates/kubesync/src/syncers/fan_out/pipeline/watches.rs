//! Step 1 of a reconcile: the watch set. It owns what the fan-out watches — the index of
//! which declaration uses which watch, the first sightings of the versions copies depend on
//! ([`Seen`]), and the shards whose copies this process holds — and answers, for a
//! declaration, which watches it needs in each cluster (started through the index, shared
//! with other declarations), whether they have listed and are healthy, and its source held
//! in full. A declaration forgotten, or copying another kind, releases what it no longer
//! uses; the old kind's copies are removed by the plan and the executor first
//! ([`WatchSet::retiring`]).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;

use super::needs::Needs;
use super::shards::{self, Shards};
use crate::error::{Error, Result};
use crate::key::ObjectKey;
use crate::runtime::{ClusterStatus, Context, Watch, WatchId};
use crate::syncers::fan_out::index::{EventOf, Retire, Scope, SharedIndex, WatchKey};
use crate::syncers::fan_out::rules;
use crate::syncers::fan_out::seen::Seen;
use crate::syncers::fan_out::spec::{
    Declaration, DestinationRef, DestinationState, Outcome, SourceUnreachable, WatchError,
};

mod source;

/// How long the first sight of a version is kept after its object is gone (a deleted copy's
/// recreation counts its lag from the deletion).
const SEEN_FOR: Duration = Duration::from_secs(600);

/// What the fan-out watches, and for whom.
pub(super) struct WatchSet {
    /// The fan-out's own cluster.
    local: String,
    index: SharedIndex,
    namespace_type: ApiResource,
    /// First sightings of the versions copies depend on.
    seen: Arc<Seen>,
    /// Set when the copies are sharded ([`WatchSet::shard_copies`]).
    sharding: std::sync::OnceLock<Shards>,
    /// Per source watch, the turn of the reads of its objects in full (one at a time).
    reading: parking_lot::Mutex<std::collections::HashMap<WatchId, Arc<tokio::sync::Mutex<()>>>>,
}

/// The watches one declaration uses in one cluster.
struct Watches {
    /// Those a plan waits for.
    ids: Vec<WatchId>,
    /// The metadata-only watch of the other objects of the copied type, once it runs (not
    /// sharded, the first plan carried out starts it: [`WatchSet::follow_up`]).
    others: Option<WatchId>,
}

/// What a declaration's watches say ([`WatchSet::watch`]).
pub(super) struct Watched {
    /// The clusters it touches (this one, and its destinations').
    pub clusters: Vec<String>,
    /// Those of them no RemoteCluster is registered for.
    pub unknown: Vec<String>,
    /// Every watch it needs has listed.
    pub ready: bool,
    /// Failing watches.
    pub errors: Vec<WatchError>,
    /// The source watch (in the source's cluster), if the source is read.
    pub source: Option<WatchId>,
    /// The single source's key, in its cluster (a selection: its namespace, no name).
    pub source_key: ObjectKey,
    /// A single source, as its watch holds it (once every watch has listed).
    pub held: Option<SourceRead>,
    /// A selection's members, as its watch holds them (once every watch has listed).
    pub selected: Option<SelectionRead>,
    /// The source lives in another cluster that cannot be read now.
    pub source_unreachable: Option<SourceUnreachable>,
}

/// A selection's members as their watch holds them.
pub(super) enum SelectionRead {
    /// Each in full.
    Held(Vec<Arc<DynamicObject>>),
    /// A newer version of one of them is on its way in an event (which wakes the
    /// declaration).
    Coming,
}

/// A single source as its watch holds it.
pub(super) enum SourceRead {
    /// In full.
    Held(Arc<DynamicObject>),
    /// Not there: the object does not exist (once the watch has listed).
    Absent,
    /// A version of it is on its way in an event (which wakes the declarations copying it).
    Coming,
}

impl WatchSet {
    /// The watch set of a fan-out whose sources live in the cluster named `local`.
    pub(super) fn new(local: &str) -> Self {
        Self {
            local: local.to_string(),
            index: SharedIndex::default(),
            seen: Arc::default(),
            sharding: std::sync::OnceLock::new(),
            reading: parking_lot::Mutex::default(),
            namespace_type: ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "",
                "v1",
                "Namespace",
            )),
        }
    }

    /// The fan-out's own cluster.
    pub(super) fn local(&self) -> &str {
        &self.local
    }

    /// The type of Namespaces.
    pub(super) fn namespace_type(&self) -> &ApiResource {
        &self.namespace_type
    }

    /// First sightings of the versions copies depend on.
    pub(super) fn first_sightings(&self) -> &Seen {
        &self.seen
    }

    /// When the latest version of `key` was first seen, and which version that is.
    pub(super) fn source_seen(&self, key: &ObjectKey) -> Option<(String, Instant)> {
        self.seen.latest(key)
    }

    /// Watches in use (type and namespace watches, all clusters).
    pub(super) fn watch_count(&self) -> usize {
        self.index.with(|idx| idx.watch_count())
    }

    /// Shards the copies, for an operator whose replicas share the declarations: every copy a
    /// declaration writes carries the label [`rules::SHARD`] with `shard_of(declaration)`,
    /// one of `all`, and this process holds only the copies of the shards
    /// [`WatchSet::hold_shards`] gave it (none until then), selected on the server. The copies
    /// of the other shards (other replicas') are held as metadata only, as the other objects
    /// of the type are: a destination one takes is seen as taken. Copies written before,
    /// without the label, are held in full by one more watch per type and cluster until each
    /// is labelled (its next write); once none is left there, that watch stops, and starts
    /// again if the other objects' watch shows such a copy (written by an engine that does
    /// not shard). The selector of the copies names at most half of `all` (`in` the shards
    /// held, or `notin` the others); that of the other objects names the
    /// shards held (none when all are held). A request's URI may have 64 KiB: with shards of
    /// four characters, about 9 000 shards named, e.g. 16 384 shards over two holders or
    /// more. A declaration whose shard is not held is not decided on (its outcome is not
    /// ready): its copies are not in view. Set once, before the first reconcile; later calls
    /// change nothing (whether it was set is returned).
    pub(super) fn shard_copies(
        &self,
        shard_of: impl Fn(&ObjectKey) -> String + Send + Sync + 'static,
        all: BTreeSet<String>,
    ) -> bool {
        self.sharding
            .set(Shards::new(Arc::new(shard_of), all))
            .is_ok()
    }

    /// Sharded ([`WatchSet::shard_copies`]): hold the copies of `shards` from now on (shards
    /// that are not among all the shards are ignored). Each watch of copies, and of the other
    /// objects, of every type and cluster is restarted with the new selector; the one
    /// it replaces runs until the new one has listed, so no store ever lacks a copy it held
    /// (stores of a type are read together), and the declarations using it are woken once it
    /// has. A declaration of a shard just gained waits for that list, as for any new watch.
    /// Unsharded, or with the same shards: nothing.
    pub(super) fn hold_shards(&self, ctx: &Context, shards: BTreeSet<String>) {
        if !self.sharding.get().is_some_and(|s| s.hold(&shards)) {
            return;
        }
        let restarted = self.index.with(|idx| {
            let mut restarted = Vec::new();
            for (key, _, users) in
                idx.watches_where(|k| matches!(k.scope, Scope::Copies | Scope::Others))
            {
                let Some(ar) = idx.resource_of(&key) else {
                    continue;
                };
                let (event, watch) = match key.scope {
                    Scope::Copies => (EventOf::Copy, self.copies_watch(&ar)),
                    _ => (EventOf::Other, self.others_watch(&ar)),
                };
                match self.start(ctx, key.clone(), event, watch) {
                    Ok(new) => {
                        if let Some(old) = idx.replace_watch(&key, new) {
                            restarted.push((old, new, users));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(cluster = %key.cluster, kind = %key.kind, error = %e, "cannot restart a watch of copies with the new shards")
                    }
                }
            }
            restarted
        });
        for (old, new, users) in restarted {
            for user in users {
                ctx.when_listed(new, user);
            }
            let (weak, index) = (ctx.downgrade(), self.index.clone());
            tokio::spawn(async move {
                // The old watch until the new one lists (or is itself replaced or stopped).
                loop {
                    let Some(ctx) = weak.upgrade() else { return };
                    if ctx.watch_listed(new) || !index.with(|idx| idx.is_running(new)) {
                        ctx.stop_watch(old);
                        return;
                    }
                    drop(ctx);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
    }

    /// How many copies this process holds in memory (every watch of copies, all types and
    /// clusters).
    pub(super) fn copies_held(&self, ctx: &Context) -> usize {
        self.index
            .with(|idx| idx.watches_where(|k| matches!(k.scope, Scope::Copies | Scope::Unlabelled)))
            .into_iter()
            .map(|(_, id, _)| ctx.watch_size(id))
            .sum()
    }

    /// `decl` as this process decides on it — sharded, marked with its shard (its copies carry
    /// it); unsharded, as it is —, or `None` when nothing is decided on it here: its shard's
    /// copies are held elsewhere (nothing here would see them), or its spec is refused and
    /// names a kind other than the one it copies (the old kind's copies are not removed on a
    /// spec that may be a typo; they go once it is valid).
    pub(super) fn admit<'d>(&self, decl: &'d Declaration) -> Option<Cow<'d, Declaration>> {
        let decl = match self.sharding.get() {
            Some(shards) => Cow::Owned(shards.marked(decl)?),
            None => Cow::Borrowed(decl),
        };
        let (key, ar) = (&decl.key, &decl.spec.source.resource);
        let another = decl.refused && self.index.with(|idx| idx.copies_another_type(key, ar));
        (!another).then_some(decl)
    }

    /// `decl` copies another kind now: the old kind and the watches it used, whose copies
    /// (this declaration's, by their marks) must go before [`WatchSet::retired`]. The first
    /// kind a declaration copies is recorded here.
    pub(super) fn retiring(&self, decl: &Declaration) -> Option<Retire> {
        let ar = &decl.spec.source.resource;
        self.index.with(|idx| idx.begin_type(&decl.key, ar))
    }

    /// This declaration's copies of the kind it retires, by destination, found by their marks
    /// (and vouched for by `vouch`) where copies were watched (a cluster sources were only read from holds none, and its
    /// outage holds nothing up). A cluster that cannot be read is an error: its copies cannot
    /// be known to be gone.
    pub(super) fn retired_copies(
        &self,
        ctx: &Context,
        (decl, vouch): (&Declaration, &crate::syncers::fan_out::record::Vouch),
        retire: &Retire,
    ) -> Result<Vec<(DestinationRef, Arc<DynamicObject>)>> {
        let mut copies = Vec::new();
        for wk in retire.watches.iter().filter(|w| !w.scope.of_sources()) {
            if let ClusterStatus::Unreachable(m) = ctx.cluster_status(&wk.cluster) {
                return Err(Error::ClusterUnreachable {
                    cluster: wk.cluster.clone(),
                    message: format!("{m}; cannot remove the old copies yet"),
                });
            }
            for copy in ctx
                .list_labelled(&wk.cluster, &retire.old, rules::MANAGED_BY, &decl.owner.uid)
                .into_iter()
                .filter(|c| rules::owned_by(c, &decl.owner) && vouch.vouches_for(&c.metadata))
            {
                let at = DestinationRef::new(
                    wk.cluster.clone(),
                    copy.namespace().unwrap_or_default(),
                    copy.name_any(),
                );
                copies.push((at, copy));
            }
        }
        Ok(copies)
    }

    /// The old kind's copies are gone: `decl` copies the kind it names now, and the old kind's
    /// watches no other declaration uses stop.
    pub(super) fn retired(&self, ctx: &Context, decl: &Declaration, retire: &Retire) {
        let ar = &decl.spec.source.resource;
        for id in self
            .index
            .with(|idx| idx.finish_retire(&decl.key, retire, ar))
        {
            ctx.stop_watch(id);
        }
        self.drop_unnamed_sources(ctx);
    }

    /// What later events need of a reconcile's `outcome`, once its plan has been carried
    /// out: first sightings pruned now and then; the objects in the way (a `Conflict`)
    /// indexed, so that their change (deleted, unprotected) wakes this declaration instead of
    /// the next periodic pass; and the watch of the other objects of its kind started in each
    /// cluster it `watched` (where none runs yet), after its first writes rather than beside
    /// them ([`WatchSet::ensure_watches`]). A declaration with an object in its way in a
    /// cluster whose watch of the others has not listed yet is woken when it has: an object
    /// deleted before that list is in no event.
    pub(super) fn follow_up(
        &self,
        ctx: &Context,
        decl: &Declaration,
        watched: &Watched,
        outcome: &Outcome,
    ) {
        if self.seen.needs_prune() {
            self.seen.prune(Instant::now(), SEEN_FOR, |k| ctx.holds(k));
        }
        let ar = &decl.spec.source.resource;
        let conflicts = || {
            outcome
                .destinations
                .iter()
                .filter(|d| d.state == DestinationState::Conflict)
        };
        let blocked: Vec<ObjectKey> = conflicts()
            .map(|d| {
                DestinationRef::new(d.cluster.clone(), d.namespace.clone(), d.name.clone()).key(ar)
            })
            .collect();
        self.index.with(|idx| idx.set_blocked(&decl.key, blocked));
        // A declaration that goes needs no view of the others.
        if decl.reads_no_source() {
            return;
        }
        for c in &watched.clusters {
            if watched.unknown.contains(c) || ctx.cluster(c).is_none() {
                continue;
            }
            let key = WatchKey::scoped(c, ar, Scope::Others);
            // Most reconciles find it running and this declaration among its users already
            // (registered by `ensure_watches`): one lookup, nothing registered twice.
            let used = self.index.with(|idx| idx.used_by(&key, &decl.key));
            match used.map_or_else(|| self.ensure_others(ctx, key, &decl.key, ar), Ok) {
                Ok(id) => {
                    if !ctx.watch_listed(id) && conflicts().any(|d| d.cluster == *c) {
                        ctx.when_listed(id, decl.key.clone());
                    }
                }
                // Tried again after the next plan carried out; meanwhile a create finds what
                // is in the way (409).
                Err(e) => {
                    tracing::warn!(declaration = %decl.key, cluster = %c, error = %e, "cannot start the watch of the other objects")
                }
            }
        }
    }

    /// The watch `key` for `decl` (events mapped as `event`), started with `watch()` if no
    /// declaration uses it yet.
    pub(super) fn ensure_watch(
        &self,
        ctx: &Context,
        key: WatchKey,
        event: EventOf,
        decl: &ObjectKey,
        watch: impl FnOnce() -> Watch,
    ) -> Result<WatchId> {
        let this_watch = key.clone();
        self.index
            .with(|idx| idx.watch_for(key, decl, || self.start(ctx, this_watch, event, watch())))
    }

    /// Starts `watch` as the watch `key`, its events mapped as `event`.
    pub(super) fn start(
        &self,
        ctx: &Context,
        key: WatchKey,
        event: EventOf,
        watch: Watch,
    ) -> Result<WatchId> {
        let index = self.index.clone();
        let seen = self.seen.clone();
        let cluster = key.cluster.clone();
        let mapper: crate::runtime::Mapper = Arc::new(move |k: &ObjectKey, obj: &DynamicObject| {
            let declarations = index.with(|idx| {
                let mut declarations = idx.declarations_for(event, &key, k, obj);
                if event == EventOf::Other {
                    declarations.extend(idx.note_unlabelled(&key, obj));
                }
                declarations
            });
            // Not unrelated objects (nor a source namespace's objects no declaration copies):
            // memory must not grow with them.
            let followed = match event {
                EventOf::Other => false,
                EventOf::Source => !declarations.is_empty(),
                _ => true,
            };
            if followed && let Some(rv) = &obj.metadata.resource_version {
                seen.saw(k, rv);
            }
            declarations
        });
        ctx.start_watch(&cluster, watch, Some(mapper))
    }

    /// The watch of kubesync's copies of `ar` (sharded: of the shards held, selected on the
    /// server), in full.
    pub(super) fn copies_watch(&self, ar: &ApiResource) -> Watch {
        Self::copies(ar, &shards::copies_selector(self.sharding.get()))
    }

    /// The watch of the other objects of `ar`, metadata only: those without the `managed-by`
    /// label, or, sharded, those not of a shard held (other replicas' copies, and copies not
    /// labelled yet, are others too).
    pub(super) fn others_watch(&self, ar: &ApiResource) -> Watch {
        Self::metadata(ar, &shards::others_selector(self.sharding.get()))
    }

    /// A metadata-only watch of the objects of `ar` that `selector` selects.
    fn metadata(ar: &ApiResource, selector: &str) -> Watch {
        Watch::dynamic(ar.clone())
            .labels(selector)
            .metadata_only()
            .packed()
    }

    /// Copies as the stores hold them: each as its [print](rules::print) (what judging it
    /// needs: a few hundred bytes), indexed by owner.
    fn copies(ar: &ApiResource, selector: &str) -> Watch {
        let printer = Arc::new(rules::Printer::default());
        Watch::dynamic(ar.clone())
            .labels(selector)
            .index_label(rules::MANAGED_BY)
            .transform(rules::allocated::strip_held)
            .summarized(move |copy| {
                let print: Arc<dyn crate::runtime::Summary> = Arc::new(printer.print(copy));
                Some(print)
            })
            .packed()
    }

    /// The watches a declaration `needs` in `cluster`, started where no declaration uses them
    /// yet:
    ///
    /// | watch | holds | events wake |
    /// |---|---|---|
    /// | copies of the source type (`managed-by` label, server-side; sharded: of the shards held) | full objects (managedFields compacted) | the copy's owner |
    /// | sharded only: copies of the source type without a shard label | full objects | the copy's owner |
    /// | other objects of the source type (no `managed-by` label; sharded: not of the shards held); unsharded, started after the first plan is carried out | metadata only | the declarations they block (a `Conflict` there) |
    /// | Namespaces | metadata only | declarations with destinations in the cluster |
    /// | consent objects, if the declaration asks for consent | full objects | the same |
    ///
    /// Unrelated objects of the copied type (Helm release Secrets, say) are thus held as
    /// metadata only: enough to see that a destination name is taken, by whom (marks, labels,
    /// `kubesync.io/protect`), and its uid and resourceVersion. An adoption reads the object
    /// live before it writes.
    ///
    /// The sources are watched apart, where they live ([`Self::ensure_source_watch`]): the
    /// source namespace's objects as metadata, each version of a source (one object, or a
    /// selection's member) read live once (one watch for every declaration copying from
    /// there); their events wake the declarations copying them.
    ///
    /// Returns the watches a plan waits for, and apart the watch of the others: a plan does
    /// not wait for it. It only spares requests: an object it does not show yet is found by
    /// the create, which the apiserver refuses (409), and decided on after a live read.
    /// Nothing is deleted on what it shows or does not show. Where it does not run yet (and
    /// the copies are not sharded), it is started once the first plan has been carried out
    /// ([`WatchSet::follow_up`]): its first list (thousands of unrelated objects, page by
    /// page) is then not sent while the first copies are written.
    fn ensure_watches(&self, ctx: &Context, cluster: &str, needs: &Needs) -> Result<Watches> {
        let ar = &needs.resource;
        let ns_type = &self.namespace_type;
        let key = &needs.key;
        let sharded = self.sharding.get().is_some();
        let others_key = WatchKey::scoped(cluster, ar, Scope::Others);
        let others = if sharded || self.index.with(|idx| idx.running(&others_key).is_some()) {
            Some(self.ensure_others(ctx, others_key, key, ar)?)
        } else {
            None
        };
        let mut ids = vec![
            self.ensure_watch(
                ctx,
                WatchKey::scoped(cluster, ar, Scope::Copies),
                EventOf::Copy,
                key,
                || self.copies_watch(ar),
            )?,
            self.ensure_watch(
                ctx,
                WatchKey::of(cluster, ns_type),
                EventOf::Cluster,
                key,
                || Watch::dynamic(ns_type.clone()).metadata_only(),
            )?,
        ];
        if let (true, Some(others)) = (sharded, others) {
            ids.extend(self.ensure_unlabelled_watch(ctx, cluster, ar, key, others)?);
        }
        if let Some(ct) = &needs.consent {
            ids.push(self.ensure_watch(
                ctx,
                WatchKey::of(cluster, ct),
                EventOf::Cluster,
                key,
                || Watch::dynamic(ct.clone()).transform(rules::hold_consent),
            )?);
        }
        Ok(Watches { ids, others })
    }

    /// The watch `key` of the other objects of `ar`, for the declaration `decl`.
    fn ensure_others(
        &self,
        ctx: &Context,
        key: WatchKey,
        decl: &ObjectKey,
        ar: &ApiResource,
    ) -> Result<WatchId> {
        self.ensure_watch(ctx, key, EventOf::Other, decl, || self.others_watch(ar))
    }

    /// Sharded: the watch of the copies of `ar` in `cluster` that carry no shard label (written
    /// before the engine was sharded, or by an engine that does not shard), in full, for the
    /// declaration `decl`, until none is left. Once it has listed none, and the watch of the
    /// other objects (`others`, which sees such copies as metadata) shows none either, it is
    /// stopped; a copy without a shard label that the other objects' watch shows later starts
    /// it again (and wakes its owner). Returns it while it runs.
    fn ensure_unlabelled_watch(
        &self,
        ctx: &Context,
        cluster: &str,
        ar: &ApiResource,
        decl: &ObjectKey,
        others: WatchId,
    ) -> Result<Option<WatchId>> {
        let key = WatchKey::scoped(cluster, ar, Scope::Unlabelled);
        if self.index.with(|idx| idx.unlabelled_settled(&key)) {
            return Ok(None);
        }
        let id = self.ensure_watch(ctx, key.clone(), EventOf::Copy, decl, || {
            Self::copies(ar, &format!("{},!{}", rules::MANAGED_BY, rules::SHARD))
        })?;
        let unlabelled = |o: &Arc<DynamicObject>| {
            let labels = o.labels();
            labels.contains_key(rules::MANAGED_BY) && !labels.contains_key(rules::SHARD)
        };
        // Cheap checks first: while copies are being labelled, the store is not empty.
        let none_left = || {
            [id, others]
                .iter()
                .all(|w| ctx.watch_listed(*w) && ctx.watch_error(*w).is_none())
                && ctx.watch_size(id) == 0
                && !ctx.list_watch(others).iter().any(unlabelled)
        };
        // Checked under the index's lock: a copy the other objects' watch stores after the
        // check is noted (by its mapper, which takes the lock) after the settling, and starts
        // the watch again; one stored before is seen by the check.
        let settled = self.index.with(|idx| {
            if none_left() {
                Ok(idx.settle_unlabelled(&key))
            } else {
                Err(())
            }
        });
        match settled {
            Err(()) => Ok(Some(id)),
            Ok(stopped) => {
                if let Some(id) = stopped {
                    ctx.stop_watch(id);
                }
                Ok(None)
            }
        }
    }

    /// The declarations that use the cluster `cluster` (destinations or copies there, or
    /// sources read there): those to decide on again when what is known of that cluster
    /// changes.
    pub(super) fn declarations_in(&self, cluster: &str) -> Vec<ObjectKey> {
        self.index.with(|idx| idx.declarations_in(cluster))
    }

    /// Every declaration it knows (reconciled, and not forgotten since).
    pub(super) fn declarations(&self) -> Vec<ObjectKey> {
        self.index.with(|idx| idx.declarations())
    }

    /// Drops a declaration that is gone: its index entries, and the watches no other
    /// declaration uses.
    pub(super) fn forget(&self, ctx: &Context, key: &ObjectKey) {
        for id in self.index.with(|idx| idx.forget(key)) {
            ctx.stop_watch(id);
        }
        self.drop_unnamed_sources(ctx);
    }

    /// Drops the content of source objects no declaration copies any more from the watches
    /// still running that hold them (their metadata is kept, as for any object there).
    fn drop_unnamed_sources(&self, ctx: &Context) {
        for (id, key) in self.index.with(|idx| idx.unnamed_sources()) {
            ctx.hold_as_metadata(id, &key);
        }
    }

    /// The watches `decl` needs in every cluster it touches, started if need be (shared with
    /// other declarations through the index), and whether they have listed and are healthy.
    /// A watch that has not listed, or fails, wakes the declaration when it lists. A single
    /// source is held in full once every watch has listed ([`WatchSet::source_in_full`]).
    pub(super) async fn watch(&self, ctx: &Context, decl: &Declaration) -> Result<Watched> {
        let needs = Needs::of(&self.local, decl);
        let clusters = self.index.with(|idx| {
            idx.register(
                &needs.key,
                &needs.uid,
                needs.copying(),
                needs.wanted.clone(),
            )
        });
        // Going (or refused): the source watch is released (it may be the one that fails).
        let keep_source = if needs.reads_no_source {
            Scope::Copies
        } else {
            needs.source_scope.clone()
        };
        let (key, cluster) = (&needs.key, needs.source_cluster.as_str());
        for id in self
            .index
            .with(|idx| idx.retain_source(key, cluster, &keep_source, |s| needs.may_copy(s)))
        {
            ctx.stop_watch(id);
        }
        self.drop_unnamed_sources(ctx);
        let mut watched = Watched {
            clusters,
            unknown: Vec::new(),
            ready: true,
            errors: Vec::new(),
            source: None,
            source_key: needs.source.clone(),
            held: None,
            selected: None,
            source_unreachable: None,
        };
        for c in watched.clusters.clone() {
            self.watch_cluster(ctx, &c, &needs, &mut watched)?;
        }
        // A declaration that goes needs no source: its copies are found by their marks, so a
        // source watch that cannot start (a kind no longer served, a source cluster gone)
        // never holds its deletion up.
        if !needs.reads_no_source {
            self.watch_source(ctx, &needs, &mut watched)?;
        }
        if let (true, None, Some(id)) = (watched.ready, &watched.source_unreachable, watched.source)
        {
            match &needs.selection {
                None => {
                    let held = self.source_in_full(ctx, id, &needs.source, &needs.resource);
                    watched.held = Some(held.await?);
                }
                Some(selection) => {
                    let selected = self.selected_in_full(ctx, id, &needs, selection);
                    watched.selected = Some(selected.await?);
                }
            }
        }
        Ok(watched)
    }

    /// The watches a declaration `needs` in `cluster` (unknown: none), and their health,
    /// noted in `watched`.
    fn watch_cluster(
        &self,
        ctx: &Context,
        c: &str,
        needs: &Needs,
        watched: &mut Watched,
    ) -> Result<()> {
        if ctx.cluster(c).is_none() {
            watched.unknown.push(c.to_string());
            return Ok(());
        }
        let Watches { ids, others } = self.ensure_watches(ctx, c, needs)?;
        for id in &ids {
            if !ctx.watch_listed(*id) {
                // Look again when it has listed: its objects may map to no declaration
                // (no copies yet), and then no event would.
                watched.ready = false;
                ctx.when_listed(*id, needs.key.clone());
            }
        }
        // Health is judged from this declaration's own watches, not the whole cluster's. A
        // failing watch wakes the declaration when it lists again: what was put off while
        // the cluster could not be checked (deletes there) is then decided, even if no
        // object of it changes.
        let first_error = ids.iter().chain(&others).find_map(|id| {
            let e = ctx.watch_error(*id)?;
            ctx.when_listed(*id, needs.key.clone());
            Some(e)
        });
        if let Some(e) = first_error {
            watched.errors.push(WatchError {
                cluster: c.to_string(),
                message: e,
            });
        }
        Ok(())
    }
}
