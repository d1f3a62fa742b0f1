//! The fan-out: reconciles declarations ("copy this source to these destinations")
//! on the multi-cluster runtime. It gathers what the stores show, asks the pure [`plan`] what
//! to do, and carries that out through the [`Writer`].
//!
//! Four steps, each the owner of its state, joined by typed messages: the watch set
//! ([`watches`]: what is watched, for whom; → `Watched`), `observe` ([`observe`]: the sources
//! and copies it shows, absences confirmed live; → `Facts`), the pure [`plan`] (→ `Plan`),
//! and the executor ([`execute`]: the writer; → `Executed`). [`FanOut::reconcile`] calls them
//! in that order and assembles the [`Outcome`] in one place; no step calls another.
//!
//! - **Watches are shared**: per resource type and cluster, one watch of kubesync's copies (in
//!   full, selected on the server by the `managed-by` label) and one of every other object
//!   (metadata only), one Namespace watch per cluster (metadata only), and one watch per
//!   source namespace and type, shared by the declarations copying one object from there, that
//!   holds only their sources in full (the namespace's other objects as metadata). Memory thus
//!   grows with what kubesync copies, not with unrelated objects of the same kind (see
//!   `WatchSet::ensure_watches`), and watches with source namespaces, not with declarations.
//!   Sharded ([`FanOut::shard_copies`]), a process holds in full only the copies of its
//!   shards. A watch starts when the first
//!   declaration needs it and stops when the last one is forgotten; which declaration uses
//!   which watch is kept in the [`index`](super::index), whose every operation is atomic.
//! - **Events map straight to declarations**: a source event to the declarations copying it,
//!   a copy event (by its `managed-by` uid) to its owner, a namespace event to the declarations
//!   with destinations in that cluster. No periodic sweep is needed to notice a new namespace.
//! - **Copies are found by their marks and vouched for by the declaration's record** (see
//!   [`record`](super::record)): nothing without its marks is modified (unless adopted), and
//!   nothing its record does not vouch for is updated, released or deleted.
//! - A cluster that is unreachable is never read as "no copies there".

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::plan::{self, Delete, Job, Snapshot};
use super::record::{Ledger, Opening, Record, Vouch};
use super::spec::{Declaration, DestinationStatus, Outcome, SourceVersion};
use crate::error::Result;
use crate::key::ObjectKey;
use crate::runtime::Context;
use crate::writer::Writer;

pub use super::rules::FIELD_MANAGER;
pub use execute::is_uid_precondition_failure;

mod execute;
mod needs;
mod observe;
mod shards;
mod watches;

use execute::{Executed, Executor};
use observe::{ContextStores, Facts, Observed};
use watches::{WatchSet, Watched};

/// The fan-out. Cheap to share (`Arc`); one per process serves every declaration.
pub struct FanOut {
    /// Step 1: what is watched, for whom; first sightings; the shards held.
    watches: WatchSet,
    /// Step 4: the writer, and the budget of writes in flight.
    executor: Executor,
    /// Each declaration's record of the copies it made, as this process holds it (see
    /// [`record`](super::record)).
    records: parking_lot::Mutex<HashMap<(ObjectKey, String), Held>>,
    /// Where the records are kept ([`FanOut::keep_records`]).
    ledger: Option<Arc<dyn Ledger>>,
}

/// A declaration's record as a fan-out holds it, and the copies it recorded in the last
/// [`FRESH`]: kept though the stores do not show them yet.
#[derive(Default)]
struct Held {
    record: Arc<Record>,
    fresh: HashMap<String, Instant>,
}

/// Where a declaration's record is held: its key and its copies' owner uid (the compat tools'
/// declarations of one object differ by the uid alone).
fn slot(decl: &Declaration) -> (ObjectKey, String) {
    (decl.key.clone(), decl.owner.uid.clone())
}

/// How long a copy just recorded stays recorded though the stores do not show it.
const FRESH: Duration = Duration::from_secs(120);

impl FanOut {
    /// A fan-out whose sources live in the cluster named `local`; copies are written with at
    /// most 16 requests in flight per reconcile.
    pub fn new(local: &str) -> Self {
        Self {
            watches: WatchSet::new(local),
            executor: Executor::new(),
            records: parking_lot::Mutex::default(),
            ledger: None,
        }
    }

    /// Says who removes (deletes or releases) a copy kubesync has no record of making — one
    /// taken on its marks alone (see [`record`](super::record)): `remove` answers for each
    /// destination, given the identity the declaration acts as there. Without it such copies
    /// are removed with the destination cluster's own credentials, which suits an embedder
    /// whose every writer is trusted; one that serves tenants who may write marks answers
    /// with the declaration's identity ([`Unrecorded::As`](super::record::Unrecorded::As)),
    /// or leaves the copy where no tenant could have forged it only.
    #[must_use]
    pub fn remove_unrecorded_as(mut self, remove: super::record::RemoveUnrecorded) -> Self {
        self.executor.unrecorded(remove);
        self
    }

    /// Keeps each declaration's record of the copies it made in `ledger` (see
    /// [`record`](super::record)): the fan-out opens it there before it creates copies, and
    /// hands it over in each [`Outcome::record`] to be kept; the declaration brings it back in
    /// [`Declaration::record`]. Without a ledger the records are held in memory only, each
    /// seeded from the marks the first time a declaration is seen.
    #[must_use]
    pub fn keep_records(mut self, ledger: Arc<dyn Ledger>) -> Self {
        self.ledger = Some(ledger);
        self
    }

    /// At most `n` copy writes in flight per reconcile.
    #[must_use]
    pub fn concurrency(mut self, n: usize) -> Self {
        self.executor.concurrency(n);
        self
    }

    /// At most `n` copy writes and deletes in flight at once across every reconcile (default
    /// 32; each per reconcile is bounded by [`concurrency`](Self::concurrency) too): each
    /// holds a connection and its buffers while it lasts, so ten declarations writing their
    /// copies together open about as many connections as two.
    #[must_use]
    pub fn writes_in_flight(mut self, n: usize) -> Self {
        self.executor.slots(n);
        self
    }

    /// At most about `bytes` of copies in flight at once, across every reconcile (default 16
    /// MiB): a write holds its body, what is sent and the answer, about four times the copy's
    /// size, until it is done. Small copies go [`concurrency`](Self::concurrency) at a time;
    /// large ones fewer, so a hundred copies of a 900 KiB object never hold a hundred bodies
    /// at once. A copy larger than the whole budget is written alone.
    #[must_use]
    pub fn write_budget(mut self, bytes: usize) -> Self {
        self.executor.budget(bytes);
        self
    }

    /// The writer whose counts this fan-out updates.
    pub fn write_counter(&self) -> Writer {
        self.executor.writer()
    }

    /// When the latest version of `key` (a source) was first seen by this fan-out's watches,
    /// and which version that is.
    pub fn source_seen(&self, key: &ObjectKey) -> Option<(String, Instant)> {
        self.watches.source_seen(key)
    }

    /// For `window`, every write and delete of the declaration `decl` is confirmed by a live
    /// read of its destination first: its copies were written until now by someone whose writes
    /// this process's stores may not show yet (another replica that worked on it). Only the
    /// destinations a plan would write are read.
    pub fn confirm_writes(&self, decl: &ObjectKey, window: std::time::Duration) {
        self.executor.confirm_writes(decl, window);
    }

    /// Watches in use (type and namespace watches, all clusters).
    pub fn watch_count(&self) -> usize {
        self.watches.watch_count()
    }

    /// Shards the copies, for an operator whose replicas share the declarations: every copy a
    /// declaration writes carries the label [`rules::SHARD`] with `shard_of(declaration)`,
    /// one of `all`, and this process holds only the copies of the shards
    /// [`FanOut::hold_shards`] gave it (none until then), selected on the server. The copies
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
    pub fn shard_copies(
        &self,
        shard_of: impl Fn(&ObjectKey) -> String + Send + Sync + 'static,
        all: BTreeSet<String>,
    ) -> bool {
        self.watches.shard_copies(shard_of, all)
    }

    /// Sharded ([`FanOut::shard_copies`]): hold the copies of `shards` from now on (shards
    /// that are not among all the shards are ignored). Each watch of copies, and of the other
    /// objects, of every type and cluster is restarted with the new selector; the one
    /// it replaces runs until the new one has listed, so no store ever lacks a copy it held
    /// (stores of a type are read together), and the declarations using it are woken once it
    /// has. A declaration of a shard just gained waits for that list, as for any new watch.
    /// Unsharded, or with the same shards: nothing.
    pub fn hold_shards(&self, ctx: &Context, shards: BTreeSet<String>) {
        self.watches.hold_shards(ctx, shards);
    }

    /// How many copies this process holds in memory (every watch of copies, all types and
    /// clusters).
    pub fn copies_held(&self, ctx: &Context) -> usize {
        self.watches.copies_held(ctx)
    }

    /// The declarations that use the cluster `cluster` (destinations or copies there, or
    /// sources read there): those to decide on again when what is known of that cluster
    /// changes.
    pub fn declarations_in(&self, cluster: &str) -> Vec<ObjectKey> {
        self.watches.declarations_in(cluster)
    }

    /// Every declaration it knows (reconciled, and not forgotten since).
    pub fn declarations(&self) -> Vec<ObjectKey> {
        self.watches.declarations()
    }

    /// Drops a declaration that is gone: its index entries, and the watches no other
    /// declaration uses.
    pub fn forget(&self, ctx: &Context, key: &ObjectKey) {
        self.records.lock().retain(|(k, _), _| k != key);
        self.watches.forget(ctx, key);
    }

    /// What vouches for `decl`'s marked objects now: the record this process holds, else the
    /// one the declaration brings, else (kept before records existed) its marks.
    fn vouch(&self, decl: &Declaration) -> Vouch {
        let mut records = self.records.lock();
        if let Some(held) = records.get(&slot(decl)) {
            return Vouch::shared(Arc::clone(&held.record));
        }
        match &decl.record {
            Some(record) => {
                let record = Arc::new(record.clone());
                records.insert(
                    slot(decl),
                    Held {
                        record: Arc::clone(&record),
                        fresh: HashMap::new(),
                    },
                );
                Vouch::shared(record)
            }
            None => Vouch::marks(),
        }
    }

    /// The record of `decl` once its copies are observed: every copy vouched for is held
    /// (the marks of a declaration seen first, copies created while the record was open);
    /// with every cluster seen, those no longer there are forgotten (but the fresh ones).
    /// With it, the opening of the record for the creates to come, where it is kept and not
    /// open already.
    fn observed(
        &self,
        decl: &Declaration,
        facts: &Facts,
        complete: bool,
    ) -> (Vouch, Option<Arc<Opening>>) {
        let mut records = self.records.lock();
        // A declaration kept before records existed is recorded from a full view only: a
        // refused or going one sees only what it may still remove.
        if decl.record.is_none() && decl.reads_no_source() && !records.contains_key(&slot(decl)) {
            return (Vouch::marks(), None);
        }
        // Seen first with no record: what its marks vouch for is taken as seeded, never as
        // made by kubesync (see `record::Unrecorded`).
        let seeding = !records.contains_key(&slot(decl));
        let held = records.entry(slot(decl)).or_default();
        let now = Instant::now();
        held.fresh.retain(|_, at| now.duration_since(*at) < FRESH);
        let present: Vec<std::borrow::Cow<'_, str>> =
            facts.owned.values().filter_map(|c| c.uid()).collect();
        let record = Arc::make_mut(&mut held.record);
        if complete {
            let fresh = held.fresh.keys().map(String::as_str);
            record.retain(present.iter().map(|u| &**u).chain(fresh));
        }
        for uid in &present {
            match seeding {
                true => record.seed(uid),
                false => record.insert(uid),
            };
        }
        let opening = match (&self.ledger, record.open_since()) {
            (Some(ledger), None) => Some(Arc::new(Opening::new(
                Arc::clone(ledger),
                decl.key.clone(),
                k8s_openapi::jiff::Timestamp::now(),
            ))),
            _ => None,
        };
        (Vouch::shared(Arc::clone(&held.record)), opening)
    }

    /// The record of `decl` after its plan was carried out: the copies written held, those
    /// removed forgotten, and closed (every copy created is held). `None` while its marks
    /// vouch (a declaration kept before records existed, refused or going).
    fn carried_out(&self, decl: &Declaration, executed: &Executed) -> Option<Arc<Record>> {
        let mut records = self.records.lock();
        let held = records.get_mut(&slot(decl))?;
        let now = Instant::now();
        let record = Arc::make_mut(&mut held.record);
        for uid in &executed.unmade {
            record.remove(uid);
            held.fresh.remove(uid);
        }
        for uid in &executed.made {
            record.insert(uid);
            held.fresh.insert(uid.clone(), now);
        }
        record.close();
        let record = Arc::clone(&held.record);
        // What it took over is no longer its predecessors' (as this process holds their
        // records): they forget it now, not once it is no longer fresh.
        for p in &decl.spec.take_over {
            let Some(theirs) = records.get_mut(&(p.key.clone(), p.owner.uid.clone())) else {
                continue;
            };
            for uid in &executed.made {
                if theirs.record.contains(uid) {
                    Arc::make_mut(&mut theirs.record).remove(uid);
                    theirs.fresh.remove(uid);
                }
            }
        }
        Some(record)
    }

    /// Reconciles one declaration: copies where they must be, nothing where they must not.
    ///
    /// Four steps, each called here and none calling another: the watch set's `watch` (the
    /// watches it needs, their health, its source held in full) → `observe` (its sources and
    /// copies, absences confirmed live) → the pure [`plan`] → the executor's `carry_out`
    /// (writes and deletes). A declaration that copies another kind now first retires the old
    /// kind's copies the same way ([`FanOut::retire`]). The [`Outcome`] is assembled once,
    /// from what the steps returned ([`assemble`]).
    pub async fn reconcile(&self, ctx: &Context, decl: &Declaration) -> Result<Outcome> {
        let Some(decl) = self.watches.admit(decl) else {
            return Ok(Outcome::default());
        };
        let vouch = self.vouch(&decl);
        self.retire(ctx, &decl, &vouch).await?;
        let watched = self.watches.watch(ctx, &decl).await?;
        // A plan larger than one reconcile sends at once is carried out among a few others
        // (the executor's waves); without a place, it is dropped — its writes are not held
        // while others are sent — and made again once one is free.
        let mut wave = None;
        let (mut facts, plan) = loop {
            let Some((facts, plan)) = self.decide(ctx, (&decl, &vouch), &watched).await? else {
                return Ok(assemble(&decl, &watched, None));
            };
            if wave.is_some() || !self.executor.is_wave(&plan) {
                break (facts, plan);
            }
            if let Some(place) = self.executor.try_wave() {
                wave = Some(place);
                break (facts, plan);
            }
            drop((facts, plan));
            tracing::debug!(declaration = %decl.key, "other waves are being written; planning again when one is done");
            wave = self.executor.wave().await;
        };
        tracing::debug!(
            declaration = %decl.key,
            sources = facts.sources.len(),
            owned = facts.owned.len(),
            writes = plan.writes.len(),
            deletes = plan.deletes.len(),
            "fan-out planned"
        );
        // Every copy is in view (every cluster known, watched and reachable): the record
        // forgets those no longer there. Not for a refused or going declaration, whose view is
        // narrowed to what it may still remove.
        let complete = facts.unreachable.is_empty()
            && watched.errors.is_empty()
            && watched.unknown.is_empty()
            && !decl.reads_no_source();
        let (vouch, opening) = self.observed(&decl, &facts, complete);
        let mut plan = plan;
        plan::within_record(&mut plan, vouch.room());
        let statuses = plan.statuses.clone();
        // The copies as read for the plan go before its writes are carried out (a write keeps
        // the copy it was decided on): a declaration's copies are not held, parsed, for as
        // long as its writes take.
        let copies = std::mem::take(&mut facts.owned).len();
        let job = Job {
            opening: opening.clone(),
            ..Job::of(&decl, vouch)
        };
        let executed = self.executor.carry_out(ctx, &job, plan).await;
        drop(wave);
        let record = self.carried_out(&decl, &executed);
        let mut outcome = assemble(&decl, &watched, Some((&facts, copies, statuses, executed)));
        outcome.record = record;
        outcome.record_opened = opening.is_some_and(|o| o.opened().is_some());
        self.watches.follow_up(ctx, &decl, &watched, &outcome);
        Ok(outcome)
    }

    /// Observes `decl`'s sources and copies and plans on them; copies held as prints that the
    /// plan must see in full are read live first, and the plan made again. `None`: not ready
    /// (its watches have not listed), or the copies read are asked for again (their events
    /// are awaited).
    async fn decide(
        &self,
        ctx: &Context,
        (decl, vouch): (&Declaration, &Vouch),
        watched: &Watched,
    ) -> Result<Option<(Facts, plan::Plan)>> {
        let local = self.watches.local();
        let mut facts = match observe::observe(ctx, local, (decl, vouch), watched).await? {
            Observed::NotReady => return Ok(None),
            Observed::Ready(facts) => facts,
        };
        let mut read_in_full = false;
        loop {
            let stores = ContextStores::new(ctx, decl, &self.watches, &watched.clusters);
            let plan = plan::plan(&Snapshot {
                local,
                declaration: decl,
                sources: &facts.sources,
                source_unreachable: facts
                    .source_unreachable
                    .as_ref()
                    .map(|u| u.message.as_str()),
                unknown_clusters: &watched.unknown,
                unreachable: &facts.unreachable,
                owned: &facts.owned,
                vouch,
                stores: &stores,
            });
            if plan.unread.is_empty() {
                return Ok(Some((facts, plan)));
            }
            // A plan on copies read in full asks for none.
            if read_in_full {
                tracing::warn!(declaration = %decl.key, unread = plan.unread.len(), "copies read in full are asked for again; waiting for their events");
                return Ok(None);
            }
            tracing::debug!(declaration = %decl.key, copies = plan.unread.len(), "reading copies in full");
            observe::read_in_full(ctx, (decl, vouch), &mut facts.owned, &plan.unread).await?;
            read_in_full = true;
        }
    }

    /// A declaration that copies another kind now: the watch set names the old kind, its
    /// copies are found by their marks, the plan turns them into deletes, and the executor
    /// carries them out; then the old kind's watches are released. Until that is done, the
    /// index keeps the old kind, so a failure is retried.
    async fn retire(&self, ctx: &Context, decl: &Declaration, vouch: &Vouch) -> Result<()> {
        let Some(retire) = self.watches.retiring(decl) else {
            return Ok(());
        };
        let copies = self.watches.retired_copies(ctx, (decl, vouch), &retire)?;
        let deletes: Vec<Delete> = plan::retire(copies);
        let uids: Vec<String> = deletes.iter().filter_map(|d| d.uid.clone()).collect();
        let job = Job::of(decl, vouch.clone());
        self.executor
            .retire(ctx, (&retire.old, &job), deletes)
            .await?;
        if let Some(held) = self.records.lock().get_mut(&slot(decl)) {
            let record = Arc::make_mut(&mut held.record);
            for uid in &uids {
                record.remove(uid);
            }
        }
        self.watches.retired(ctx, decl, &retire);
        Ok(())
    }
}

/// The outcome of a reconcile of `decl`, assembled in one place from what its steps returned:
/// the watches' health, and, once the facts were observed, the plan's statuses and what the
/// executor did (destinations in order).
fn assemble(
    decl: &Declaration,
    watched: &Watched,
    decided: Option<(&Facts, usize, Vec<DestinationStatus>, Executed)>,
) -> Outcome {
    let mut outcome = Outcome {
        ready: watched.ready,
        watch_errors: watched.errors.clone(),
        source_cluster: decl.spec.source.cluster.clone(),
        ..Default::default()
    };
    let Some((facts, copies, mut destinations, executed)) = decided else {
        outcome.ready = false;
        return outcome;
    };
    destinations.extend(executed.statuses);
    destinations.sort_by(|a, b| {
        (&a.cluster, &a.namespace, &a.name).cmp(&(&b.cluster, &b.namespace, &b.name))
    });
    Outcome {
        unreachable: facts.unreachable.iter().cloned().collect(),
        source_unreachable: facts.source_unreachable.clone(),
        source_found: !facts.sources.is_empty(),
        sources: facts.sources.len(),
        remaining_copies: copies.saturating_sub(executed.deleted),
        source_versions: facts
            .sources
            .iter()
            .map(|s| SourceVersion {
                name: kube::ResourceExt::name_any(&**s),
                resource_version: s.metadata.resource_version.clone().unwrap_or_default(),
            })
            .collect(),
        destinations,
        propagated: executed.propagated,
        ..outcome
    }
}
