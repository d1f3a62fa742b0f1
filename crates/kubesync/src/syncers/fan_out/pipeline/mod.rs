//! The fan-out: reconciles declarations ("copy this source to these destinations")
//! on the multi-cluster runtime. It gathers what the stores show, asks the pure [`plan`] what
//! to do, and carries that out through the [`Writer`].
//!
//! - **Watches are shared**: per resource type and cluster, one watch of kubesync's copies (in
//!   full, selected on the server by the `managed-by` label) and one of every other object
//!   (metadata only), one Namespace watch per cluster (metadata only), and one watch per
//!   source namespace and type, shared by the declarations copying one object from there, that
//!   holds only their sources in full (the namespace's other objects as metadata). Memory thus
//!   grows with what kubesync copies, not with unrelated objects of the same kind (see
//!   `FanOut::ensure_watches`), and watches with source namespaces, not with declarations.
//!   Sharded ([`FanOut::shard_copies`]), a process holds in full only the copies of its
//!   shards. A watch starts when the first
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
    Declaration, DestinationRef, DestinationState, DestinationStatus, Mode, Outcome, Selection,
    SourceUnreachable,
};
use crate::error::{Error, Result};
use crate::key::ObjectKey;
use crate::runtime::{ClusterStatus, Context, Watch, WatchId};
use crate::writer::{Deleted, Writer};

pub use super::rules::FIELD_MANAGER;

mod execute;
mod observe;
mod watches;

use observe::ContextStores;

/// How long the first sight of a version is kept after its object is gone (a deleted copy's
/// recreation counts its lag from the deletion).
const SEEN_FOR: Duration = Duration::from_secs(600);

/// The default [`FanOut::write_budget`], in KiB.
const DEFAULT_BUDGET_KIB: u32 = 16 * 1024;

/// The fan-out. Cheap to share (`Arc`); one per process serves every declaration.
pub struct FanOut {
    local: String,
    writer: Writer,
    concurrency: usize,
    /// The bytes of copies in flight (bodies being sent, answers being read), in KiB, for
    /// every reconcile at once ([`FanOut::write_budget`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Its size, in KiB.
    budget_kib: u32,
    index: SharedIndex,
    namespace_type: ApiResource,
    /// First sightings of the versions copies depend on.
    seen: Arc<Seen>,
    /// Declarations whose writes are confirmed by a live read first, until when (see
    /// [`FanOut::confirm_writes`]).
    confirm: Arc<parking_lot::Mutex<HashMap<ObjectKey, Instant>>>,
    /// Set when the copies are sharded ([`FanOut::shard_copies`]).
    sharding: std::sync::OnceLock<Sharding>,
}

/// A declaration's shard: the [`rules::SHARD`] label of its copies.
pub type ShardOf = Arc<dyn Fn(&ObjectKey) -> String + Send + Sync>;

/// How copies are sharded: each carries its declaration's shard, and this process holds only
/// the copies of the shards it was given last ([`FanOut::hold_shards`]).
struct Sharding {
    shard_of: ShardOf,
    /// Every shard there is.
    all: BTreeSet<String>,
    /// The shards held now (the others are derived from `all` where a selector needs them).
    held: parking_lot::Mutex<Arc<BTreeSet<String>>>,
}

/// The watches one declaration uses in one cluster.
struct Watches {
    /// Those a plan waits for.
    ids: Vec<WatchId>,
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
    /// The source watch (in the source's cluster), if the source is read.
    source: Option<WatchId>,
    /// The source lives in another cluster that cannot be read now.
    source_unreachable: Option<SourceUnreachable>,
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
    /// The source's cluster cannot be read now: the sources are unknown (not gone).
    source_unreachable: Option<SourceUnreachable>,
}

/// The key of `decl`'s single source, in its cluster (its name is empty for a selection).
fn source_key(local: &str, decl: &Declaration) -> ObjectKey {
    let source = &decl.spec.source;
    ObjectKey::new(
        source.cluster_or(local).to_string(),
        &source.resource,
        source.namespace().map(String::from),
        &source.name,
    )
}

impl FanOut {
    /// A fan-out whose sources live in the cluster named `local`; copies are written with at
    /// most 16 requests in flight per reconcile.
    pub fn new(local: &str) -> Self {
        Self {
            local: local.to_string(),
            writer: Writer::new(),
            concurrency: 16,
            in_flight: Arc::new(tokio::sync::Semaphore::new(DEFAULT_BUDGET_KIB as usize)),
            budget_kib: DEFAULT_BUDGET_KIB,
            index: SharedIndex::default(),
            seen: Arc::default(),
            confirm: Arc::default(),
            sharding: std::sync::OnceLock::new(),
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

    /// At most about `bytes` of copies in flight at once, across every reconcile (default 16
    /// MiB): a write holds its body, what is sent and the answer, about four times the copy's
    /// size, until it is done. Small copies go [`concurrency`](Self::concurrency) at a time;
    /// large ones fewer, so a hundred copies of a 900 KiB object never hold a hundred bodies
    /// at once. A copy larger than the whole budget is written alone.
    #[must_use]
    pub fn write_budget(mut self, bytes: usize) -> Self {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).max(1);
        self.in_flight = Arc::new(tokio::sync::Semaphore::new(kib as usize));
        self.budget_kib = kib;
        self
    }

    /// What a write of a copy of about `bytes` holds of the budget, in KiB: four times its
    /// size (the copy, the body sent, the answer read and decoded), at least 1, at most all.
    fn write_cost(&self, bytes: usize) -> u32 {
        let kib = (bytes.saturating_mul(4) / 1024).max(1);
        u32::try_from(kib).unwrap_or(u32::MAX).min(self.budget_kib)
    }

    /// The writer whose counts this fan-out updates.
    pub fn write_counter(&self) -> Writer {
        self.writer.clone()
    }

    /// When the latest version of `key` (a source) was first seen by this fan-out's watches,
    /// and which version that is.
    pub fn source_seen(&self, key: &ObjectKey) -> Option<(String, std::time::Instant)> {
        self.seen.latest(key)
    }

    /// For `window`, every write and delete of the declaration `decl` is confirmed by a live
    /// read of its destination first: its copies were written until now by someone whose writes
    /// this process's stores may not show yet (another replica that worked on it). Only the
    /// destinations a plan would write are read.
    pub fn confirm_writes(&self, decl: &ObjectKey, window: std::time::Duration) {
        let mut confirm = self.confirm.lock();
        let now = Instant::now();
        confirm.retain(|_, until| *until > now);
        confirm.insert(decl.clone(), now + window);
    }

    /// Whether the writes of `decl` are confirmed live now.
    fn confirming(&self, decl: &ObjectKey) -> bool {
        self.confirm
            .lock()
            .get(decl)
            .is_some_and(|until| *until > Instant::now())
    }

    /// Watches in use (type and namespace watches, all clusters).
    pub fn watch_count(&self) -> usize {
        self.index.with(|idx| idx.watch_count())
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
        self.sharding
            .set(Sharding {
                shard_of: Arc::new(shard_of),
                all,
                held: parking_lot::Mutex::default(),
            })
            .is_ok()
    }

    /// Sharded ([`FanOut::shard_copies`]): hold the copies of `shards` from now on (shards
    /// that are not among all the shards are ignored). Each watch of copies, and of the other
    /// objects, of every type and cluster is restarted with the new selector; the one
    /// it replaces runs until the new one has listed, so no store ever lacks a copy it held
    /// (stores of a type are read together), and the declarations using it are woken once it
    /// has. A declaration of a shard just gained waits for that list, as for any new watch.
    /// Unsharded, or with the same shards: nothing.
    pub fn hold_shards(&self, ctx: &Context, shards: BTreeSet<String>) {
        let Some(sharding) = self.sharding.get() else {
            return;
        };
        let new: BTreeSet<String> = shards.intersection(&sharding.all).cloned().collect();
        {
            let mut held = sharding.held.lock();
            if **held == new {
                return;
            }
            *held = Arc::new(new);
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
    pub fn copies_held(&self, ctx: &Context) -> usize {
        self.index
            .with(|idx| idx.watches_where(|k| matches!(k.scope, Scope::Copies | Scope::Unlabelled)))
            .into_iter()
            .map(|(_, id, _)| ctx.watch_size(id))
            .sum()
    }

    /// The shards whose copies this process holds, and every shard there is (`None`:
    /// unsharded, all).
    fn held_shards(&self) -> Option<(Arc<BTreeSet<String>>, &BTreeSet<String>)> {
        self.sharding.get().map(|s| (s.held.lock().clone(), &s.all))
    }

    /// Reconciles one declaration: copies where they must be, nothing where they must not.
    ///
    /// A pipeline, one file per step: `watch` (`watches.rs`: the watches it needs, and their
    /// health) → `observe` (`observe.rs`: its sources and copies, absences confirmed live, and
    /// the stores the plan reads) → the pure [`plan`] → `carry_out` and `note`
    /// (`execute.rs`: writes and deletes, or in Report mode only what withdrawn consent ends;
    /// then what later events need).
    pub async fn reconcile(&self, ctx: &Context, decl: &Declaration) -> Result<Outcome> {
        let marked;
        let decl = match self.sharding.get() {
            Some(sharding) => {
                // Sharded: its copies carry its shard, and only a process that holds the
                // shard's copies decides on them (nothing else would see them).
                let shard = (sharding.shard_of)(&decl.key);
                if !sharding.held.lock().contains(&shard) {
                    tracing::debug!(declaration = %decl.key, %shard, "its shard's copies are not held here: nothing decided");
                    return Ok(Outcome::default());
                }
                let mut owner = decl.owner.clone();
                owner.shard = Some(shard);
                marked = Declaration {
                    owner,
                    ..decl.clone()
                };
                &marked
            }
            None => decl,
        };
        let ar = &decl.spec.source.resource;
        if decl.refused
            && self
                .index
                .with(|idx| idx.copies_another_type(&decl.key, ar))
        {
            // A refused spec that also names another kind: the old kind's copies are not
            // removed on a spec that may be a typo; they go once it is valid.
            return Ok(Outcome::default());
        }
        let watched = self.watch(ctx, decl).await?;
        let mut outcome = Outcome {
            ready: watched.ready,
            watch_errors: watched.errors.clone(),
            source_cluster: decl.spec.source.cluster.clone(),
            ..Default::default()
        };
        let facts = match self.observe(ctx, decl, &watched).await? {
            Observed::NotReady => {
                outcome.ready = false;
                return Ok(outcome);
            }
            Observed::Ready(facts) => facts,
        };
        facts.describe(&mut outcome);
        let stores = ContextStores::new(ctx, decl, self, &watched.clusters, &facts.owned);
        let plan = plan::plan(&Snapshot {
            local: &self.local,
            declaration: decl,
            sources: &facts.sources,
            source_unreachable: facts
                .source_unreachable
                .as_ref()
                .map(|u| u.message.as_str()),
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
        self.carry_out(ctx, decl, plan, &stores, &facts.owned, &mut outcome)
            .await;
        self.note(ctx, decl, &mut outcome);
        Ok(outcome)
    }
}

/// Whether a create failed because an object of that name exists.
/// Whether a write was refused on its resourceVersion precondition (409 `Conflict`, not a uid
/// mismatch): the object changed after it was read.
fn is_changed(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s)) if s.is_conflict() && !s.message.contains("uid mismatch"))
}

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

/// A consent object as the fan-out holds it: its name, namespace, labels (kubesync's mark
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
mod tests;
