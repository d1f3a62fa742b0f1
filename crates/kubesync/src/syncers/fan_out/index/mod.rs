//! Which declarations an event concerns, and which watches they use. Pure: no IO, no locks.
//!
//! The fan-out keeps one [`Index`] behind a [`SharedIndex`], whose every method takes the lock
//! once, so each operation is atomic: a watch mapper never sees a declaration half registered
//! or half forgotten, and two reconciles never start the same watch twice.

use parking_lot::{Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;

use super::rules::{MANAGED_BY, SHARD};
use super::spec::Selection;
use crate::error::Result;
use crate::key::ObjectKey;
use crate::runtime::WatchId;

/// Which objects of its type a watch holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Every object (Namespaces, consent objects).
    All,
    /// kubesync's copies: the objects with the `managed-by` label, in full (sharded: those
    /// of the shards this process holds).
    Copies,
    /// Sharded only: copies without a shard label (written before the operator was sharded),
    /// in full, until none is left ([`Index::settle_unlabelled`]).
    Unlabelled,
    /// Every object without the `managed-by` label (sharded: every object not of the shards
    /// held, other replicas' copies and copies not labelled yet among them), metadata only:
    /// what a destination name is taken by, for conflict, adopt and protect decisions.
    Others,
    /// The objects of one namespace (`None`: of a cluster-scoped kind), metadata only; those
    /// some declaration copies (single sources, by name, and the members of selections) are
    /// read live and held in full. One watch serves every declaration copying from that
    /// namespace, however many selectors they use: memory follows what is copied.
    Sources {
        /// The namespace.
        namespace: Option<String>,
    },
}

impl Scope {
    /// Whether the watch holds sources.
    pub(crate) fn of_sources(&self) -> bool {
        matches!(self, Self::Sources { .. })
    }
}

/// Which sources a declaration copies, as it registers ([`Index::register`]).
#[derive(Clone, Debug)]
pub enum Copying {
    /// One object.
    One(ObjectKey),
    /// The objects of its source namespace that a selection selects: its members, once the
    /// watch set knows them ([`Index::select_members`]).
    Selection(Selection),
}

/// One shared watch: a resource type in a cluster, and which of its objects it holds.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WatchKey {
    /// The cluster.
    pub cluster: String,
    /// The API group (empty for the core group).
    pub group: String,
    /// The kind.
    pub kind: String,
    /// Which objects it holds.
    pub scope: Scope,
}

impl WatchKey {
    /// The watch of every object of `resource` in `cluster`.
    pub fn of(cluster: &str, resource: &ApiResource) -> Self {
        Self::scoped(cluster, resource, Scope::All)
    }

    /// The watch of the `scope` objects of `resource` in `cluster`.
    pub fn scoped(cluster: &str, resource: &ApiResource, scope: Scope) -> Self {
        Self {
            cluster: cluster.to_string(),
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            scope,
        }
    }

    fn is_of(&self, resource: &ApiResource) -> bool {
        crate::key::is_kind_of(&self.group, &self.kind, resource)
    }
}

/// What a watch event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOf {
    /// An object whose change concerns every declaration with destinations in its cluster (a
    /// Namespace, a consent object).
    Cluster,
    /// A source: the declarations copying it, and those whose selection selects it now.
    Source,
    /// A copy: its owner, by the `managed-by` label.
    Copy,
    /// Another object of a copied type: kept for decisions at destinations; it concerns only
    /// the declarations it blocks (unrelated objects change often; they must not wake the
    /// others).
    Other,
}

/// Declarations, their sources, and the watches they use.
#[derive(Debug, Default)]
pub struct Index {
    /// Source object → the declarations copying it (single sources, and selections'
    /// members).
    by_source: HashMap<ObjectKey, HashSet<ObjectKey>>,
    /// Declaration → the selection it copies by (a declaration copying one object has none).
    selections: HashMap<ObjectKey, Selection>,
    /// Declaration uid (the copies' `managed-by` label) → declaration.
    by_uid: HashMap<String, ObjectKey>,
    /// Cluster → the declarations with destinations (or copies) there.
    by_cluster: HashMap<String, HashSet<ObjectKey>>,
    /// Running watches and the declarations using each.
    watches: HashMap<WatchKey, (WatchId, HashSet<ObjectKey>)>,
    /// Declaration → the watches it uses.
    used: HashMap<ObjectKey, HashSet<WatchKey>>,
    /// Declaration → the source type it copies.
    types: HashMap<ObjectKey, ApiResource>,
    /// Destination object → the declarations it blocks (their last report: `Conflict`).
    blocked: HashMap<ObjectKey, HashSet<ObjectKey>>,
    /// Source objects no declaration copies any more, whose content a watch may still hold
    /// ([`Index::unnamed_sources`]).
    dropped: Vec<ObjectKey>,
    /// (cluster, group, kind) where no copy without a shard label is left: a sharded engine
    /// needs no watch of them there ([`Index::settle_unlabelled`]) until the watch of the
    /// other objects shows one again ([`Index::note_unlabelled`]).
    settled: HashSet<(String, String, String)>,
}

/// A change of a declaration's source type that must be finished: the old type's copies are
/// deleted first, then [`Index::finish_retire`] releases the old type's watches.
#[derive(Clone, Debug, PartialEq)]
pub struct Retire {
    /// The type copied before.
    pub old: ApiResource,
    /// The old type's watches this declaration used.
    pub watches: Vec<WatchKey>,
}

impl Index {
    /// Records that `decl` (with `uid`) copies `source` (one object, or by a selection) to
    /// `clusters`, and returns every cluster it must look at: those, plus clusters it had
    /// copies in before (their copies stay until they are gone; a cluster it only read
    /// sources from is not one), sorted and without repeats.
    pub fn register(
        &mut self,
        decl: &ObjectKey,
        uid: &str,
        source: Copying,
        clusters: impl IntoIterator<Item = String>,
    ) -> Vec<String> {
        match source {
            Copying::One(source) => {
                self.selections.remove(decl);
                self.by_source
                    .entry(source)
                    .or_default()
                    .insert(decl.clone());
            }
            Copying::Selection(selection) => {
                self.selections.insert(decl.clone(), selection);
            }
        }
        self.by_uid.insert(uid.to_string(), decl.clone());
        let mut all: Vec<String> = clusters.into_iter().collect();
        all.extend(
            self.used
                .get(decl)
                .into_iter()
                .flatten()
                .filter(|w| !w.scope.of_sources())
                .map(|w| w.cluster.clone()),
        );
        all.sort();
        all.dedup();
        for c in &all {
            self.by_cluster
                .entry(c.clone())
                .or_default()
                .insert(decl.clone());
        }
        all
    }

    /// The watch `key` for `decl`: the running one, or one started by `start` (called at most
    /// once, only when no declaration uses that watch yet).
    pub fn watch_for(
        &mut self,
        key: WatchKey,
        decl: &ObjectKey,
        start: impl FnOnce() -> Result<WatchId>,
    ) -> Result<WatchId> {
        if let Some((id, users)) = self.watches.get_mut(&key) {
            users.insert(decl.clone());
            let id = *id;
            self.used.entry(decl.clone()).or_default().insert(key);
            return Ok(id);
        }
        let id = start()?;
        self.watches
            .insert(key.clone(), (id, HashSet::from([decl.clone()])));
        self.used.entry(decl.clone()).or_default().insert(key);
        Ok(id)
    }

    /// The declarations an event of `watch` concerns.
    pub fn declarations_for(
        &self,
        event: EventOf,
        watch: &WatchKey,
        key: &ObjectKey,
        obj: &DynamicObject,
    ) -> Vec<ObjectKey> {
        let watch_cluster = watch.cluster.as_str();
        let mut out: Vec<ObjectKey> = Vec::new();
        match event {
            EventOf::Cluster => {
                out.extend(
                    self.by_cluster
                        .get(watch_cluster)
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
            }
            // The source's key names its cluster: an object of the same name elsewhere is
            // not it. A selection's members are among the sources (an object leaving it, or
            // deleted, wakes it so); an object it selects now that it did not wakes it too.
            EventOf::Source => {
                let copying = self.by_source.get(key);
                out.extend(copying.into_iter().flatten().cloned());
                out.extend(
                    self.selecting(watch, obj)
                        .filter(|d| copying.is_none_or(|c| !c.contains(*d)))
                        .cloned(),
                );
            }
            EventOf::Copy => {
                if let Some(uid) = obj.labels().get(MANAGED_BY)
                    && let Some(decl) = self.by_uid.get(uid)
                {
                    out.push(decl.clone());
                }
                // Another declaration's copy may block this name.
                out.extend(self.blocked.get(key).into_iter().flatten().cloned());
            }
            EventOf::Other => {
                out.extend(self.blocked.get(key).into_iter().flatten().cloned());
            }
        }
        out
    }

    /// Records the destinations where `decl` found someone else's object (a `Conflict`), in
    /// place of those it recorded before: a change of such an object (deleted, protection
    /// removed) wakes `decl`.
    pub fn set_blocked(&mut self, decl: &ObjectKey, at: impl IntoIterator<Item = ObjectKey>) {
        self.blocked.retain(|_, users| {
            users.remove(decl);
            !users.is_empty()
        });
        for k in at {
            self.blocked.entry(k).or_default().insert(decl.clone());
        }
    }

    /// The users of the source watch `watch` whose selection selects `obj`. Every event of a
    /// source namespace asks, under the lock: the smaller of the watch's users and the
    /// selections is walked (a namespace of many single sources and few selections, or the
    /// reverse, costs the few).
    fn selecting<'a>(
        &'a self,
        watch: &WatchKey,
        obj: &'a DynamicObject,
    ) -> Box<dyn Iterator<Item = &'a ObjectKey> + 'a> {
        let Some((_, users)) = self.watches.get(watch) else {
            return Box::new(std::iter::empty());
        };
        let selects = move |s: &Selection| s.selects_meta(&obj.metadata);
        if self.selections.len() < users.len() {
            let all = self.selections.iter();
            Box::new(
                all.filter(move |(d, s)| users.contains(*d) && selects(s))
                    .map(|(d, _)| d),
            )
        } else {
            let users = users.iter();
            Box::new(users.filter(move |d| self.selections.get(*d).is_some_and(selects)))
        }
    }

    /// Whether some declaration copies the object `key` (a single source, or a member of a
    /// selection).
    pub fn is_source(&self, key: &ObjectKey) -> bool {
        self.by_source.contains_key(key)
    }

    /// The members of `decl`'s selection are `members` now (objects of its source namespace
    /// it selects): it copies them, and no longer those it selected before (kept for
    /// [`Index::unnamed_sources`] if no declaration copies them).
    pub fn select_members(&mut self, decl: &ObjectKey, members: &HashSet<ObjectKey>) {
        self.drop_sources(decl, |s| !members.contains(s));
        for m in members {
            self.by_source
                .entry(m.clone())
                .or_default()
                .insert(decl.clone());
        }
    }

    /// `decl` no longer copies the sources `drop` picks: removed from their users; those no
    /// declaration copies any more are kept for [`Index::unnamed_sources`].
    fn drop_sources(&mut self, decl: &ObjectKey, drop: impl Fn(&ObjectKey) -> bool) {
        let dropped = &mut self.dropped;
        self.by_source.retain(|s, users| {
            if drop(s) {
                users.remove(decl);
            }
            if users.is_empty() {
                dropped.push(s.clone());
            }
            !users.is_empty()
        });
    }

    /// The source objects no declaration copies any more (since the last call), each with
    /// the running watch that may hold it in full: their content can be dropped.
    pub fn unnamed_sources(&mut self) -> Vec<(WatchId, ObjectKey)> {
        let dropped = std::mem::take(&mut self.dropped);
        dropped
            .into_iter()
            .filter(|k| !self.by_source.contains_key(k))
            .filter_map(|k| {
                let scope = Scope::Sources {
                    namespace: k.namespace.clone(),
                };
                let watch = WatchKey {
                    cluster: k.cluster.clone(),
                    group: k.group.clone(),
                    kind: k.kind.clone(),
                    scope,
                };
                let (id, _) = self.watches.get(&watch)?;
                Some((*id, k))
            })
            .collect()
    }

    /// `decl` reads its sources from the watches of scope `sources` in `cluster` only, and
    /// copies only those of the sources it copied before that `keep` keeps (its one object,
    /// or a selection's members where they still can be): forgets the others (a changed
    /// source name, namespace or cluster, or no source read) and returns their watches that
    /// no declaration uses any more (to be stopped).
    pub fn retain_source(
        &mut self,
        decl: &ObjectKey,
        cluster: &str,
        sources: &Scope,
        keep: impl Fn(&ObjectKey) -> bool,
    ) -> Vec<WatchId> {
        self.drop_sources(decl, |s| !keep(s));
        let stale: HashSet<WatchKey> = self
            .used
            .get(decl)
            .into_iter()
            .flatten()
            .filter(|w| w.scope.of_sources() && (w.scope != *sources || w.cluster != cluster))
            .cloned()
            .collect();
        if let Some(used) = self.used.get_mut(decl) {
            used.retain(|w| !stale.contains(w));
        }
        self.release(decl, stale)
    }

    /// The declarations that use the cluster `cluster`: with destinations (or copies) there,
    /// or reading their sources there.
    pub fn declarations_in(&self, cluster: &str) -> Vec<ObjectKey> {
        let mut all: HashSet<&ObjectKey> =
            self.by_cluster.get(cluster).into_iter().flatten().collect();
        all.extend(
            self.watches
                .iter()
                .filter(|(key, _)| key.cluster == cluster)
                .flat_map(|(_, (_, users))| users),
        );
        all.into_iter().cloned().collect()
    }

    /// Every declaration the index knows (registered, and not forgotten since).
    pub fn declarations(&self) -> Vec<ObjectKey> {
        let mut all: HashSet<&ObjectKey> = self.used.keys().collect();
        all.extend(self.types.keys());
        all.extend(self.by_uid.values());
        all.into_iter().cloned().collect()
    }

    /// Forgets a declaration that is gone; returns the watches no declaration uses any more
    /// (to be stopped).
    pub fn forget(&mut self, decl: &ObjectKey) -> Vec<WatchId> {
        self.drop_sources(decl, |_| true);
        self.by_cluster.retain(|_, users| {
            users.remove(decl);
            !users.is_empty()
        });
        self.by_uid.retain(|_, k| k != decl);
        self.selections.remove(decl);
        self.set_blocked(decl, []);
        self.types.remove(decl);
        let used = self.used.remove(decl).unwrap_or_default();
        self.release(decl, used)
    }

    /// Whether `decl` copied another kind before `resource`; then its old copies must go
    /// before [`Index::finish_retire`]. The first type a declaration copies is recorded here.
    pub fn begin_type(&mut self, decl: &ObjectKey, resource: &ApiResource) -> Option<Retire> {
        if !self.copies_another_type(decl, resource) {
            self.types
                .entry(decl.clone())
                .or_insert_with(|| resource.clone());
            return None;
        }
        let old = self.types.get(decl)?;
        Some(Retire {
            old: old.clone(),
            watches: self
                .used
                .get(decl)
                .into_iter()
                .flatten()
                .filter(|w| w.is_of(old))
                .cloned()
                .collect(),
        })
    }

    /// Whether `decl` is known to copy a type other than `resource` (its copies of that type
    /// not yet removed).
    pub fn copies_another_type(&self, decl: &ObjectKey, resource: &ApiResource) -> bool {
        self.types
            .get(decl)
            .is_some_and(|old| old.group != resource.group || old.kind != resource.kind)
    }

    /// The old type's copies are gone: `decl` now copies `resource`. Returns the watches no
    /// declaration uses any more (to be stopped).
    pub fn finish_retire(
        &mut self,
        decl: &ObjectKey,
        retire: &Retire,
        resource: &ApiResource,
    ) -> Vec<WatchId> {
        self.types.insert(decl.clone(), resource.clone());
        let old = &retire.old;
        self.drop_sources(decl, |source| source.is_of(old));
        let released: HashSet<WatchKey> = retire.watches.iter().cloned().collect();
        if let Some(used) = self.used.get_mut(decl) {
            used.retain(|w| !released.contains(w));
        }
        self.release(decl, released)
    }

    /// Removes `decl` from the users of `watches`; returns the ids of those left unused.
    fn release(
        &mut self,
        decl: &ObjectKey,
        watches: impl IntoIterator<Item = WatchKey>,
    ) -> Vec<WatchId> {
        let mut stopped = Vec::new();
        for wk in watches {
            let unused = self.watches.get_mut(&wk).is_some_and(|(_, users)| {
                users.remove(decl);
                users.is_empty()
            });
            if unused && let Some((id, _)) = self.watches.remove(&wk) {
                stopped.push(id);
            }
        }
        stopped
    }

    /// Whether no copy without a shard label is left of the type and cluster of `watch`.
    pub fn unlabelled_settled(&self, watch: &WatchKey) -> bool {
        self.settled.contains(&settled_key(watch))
    }

    /// No copy without a shard label is left of the type and cluster of `watch` (the watch of
    /// them, which it is): it is stopped for every user; returns its id if it ran.
    pub fn settle_unlabelled(&mut self, watch: &WatchKey) -> Option<WatchId> {
        self.settled.insert(settled_key(watch));
        for used in self.used.values_mut() {
            used.remove(watch);
        }
        self.watches.remove(watch).map(|(id, _)| id)
    }

    /// An object the watch of other objects `watch` shows: if it is a copy without a shard
    /// label (written by an engine that does not shard), its type and cluster need the watch
    /// of such copies again; returns its owner, if known, to wake it.
    pub fn note_unlabelled(&mut self, watch: &WatchKey, obj: &DynamicObject) -> Option<ObjectKey> {
        let labels = obj.labels();
        let uid = labels.get(MANAGED_BY)?;
        if labels.contains_key(SHARD) {
            return None;
        }
        self.settled.remove(&settled_key(watch));
        self.by_uid.get(uid).cloned()
    }

    /// The running watches whose key `pick` selects, each with its id and users.
    pub fn watches_where(
        &self,
        pick: impl Fn(&WatchKey) -> bool,
    ) -> Vec<(WatchKey, WatchId, Vec<ObjectKey>)> {
        self.watches
            .iter()
            .filter(|(key, _)| pick(key))
            .map(|(key, (id, users))| (key.clone(), *id, users.iter().cloned().collect()))
            .collect()
    }

    /// The watch `key` runs as `id` from now on (restarted with another selector); returns
    /// the id it ran as, if it was running (then it keeps its users).
    pub fn replace_watch(&mut self, key: &WatchKey, id: WatchId) -> Option<WatchId> {
        self.watches
            .get_mut(key)
            .map(|(old, _)| std::mem::replace(old, id))
    }

    /// The resource type the watch `key` is of, as its users copy it (the first type a
    /// declaration copies is recorded when it registers; a watch's users copy its type).
    pub fn resource_of(&self, key: &WatchKey) -> Option<ApiResource> {
        let (_, users) = self.watches.get(key)?;
        users
            .iter()
            .filter_map(|user| self.types.get(user))
            .find(|ar| key.is_of(ar))
            .cloned()
    }

    /// The watch `key` runs as, if some declaration uses it.
    pub fn running(&self, key: &WatchKey) -> Option<WatchId> {
        self.watches.get(key).map(|(id, _)| *id)
    }

    /// The watch `key` runs as, if `decl` is among its users already.
    pub fn used_by(&self, key: &WatchKey, decl: &ObjectKey) -> Option<WatchId> {
        let (id, users) = self.watches.get(key)?;
        users.contains(decl).then_some(*id)
    }

    /// Whether `id` is the watch some key runs as now.
    pub fn is_running(&self, id: WatchId) -> bool {
        self.watches.values().any(|(running, _)| *running == id)
    }

    /// Watches running.
    pub fn watch_count(&self) -> usize {
        self.watches.len()
    }
}

/// What [`Index::settled`] is keyed by: the cluster and type of a watch.
fn settled_key(watch: &WatchKey) -> (String, String, String) {
    (
        watch.cluster.clone(),
        watch.group.clone(),
        watch.kind.clone(),
    )
}

/// The fan-out's [`Index`], shared with its watch mappers. Every method locks once.
#[derive(Clone, Debug, Default)]
pub struct SharedIndex(Arc<Mutex<Index>>);

impl SharedIndex {
    /// Runs one operation on the index under its lock.
    pub fn with<T>(&self, op: impl FnOnce(&mut Index) -> T) -> T {
        op(&mut self.lock())
    }

    fn lock(&self) -> MutexGuard<'_, Index> {
        self.0.lock()
    }
}

#[cfg(test)]
mod tests;
