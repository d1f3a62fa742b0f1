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

use super::rules::MANAGED_BY;
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
    /// in full, until each is labelled.
    Unlabelled,
    /// Every object without the `managed-by` label (sharded: every object not of the shards
    /// held, other replicas' copies and copies not labelled yet among them), metadata only:
    /// what a destination name is taken by, for conflict, adopt and protect decisions.
    Others,
    /// One source object, in full.
    Source(ObjectKey),
    /// The objects of one namespace that a label selector selects (many sources), in full.
    Selected {
        /// The namespace.
        namespace: String,
        /// The label selector, as the apiserver takes it.
        labels: String,
    },
}

impl Scope {
    /// Whether the watch holds sources.
    pub(crate) fn of_sources(&self) -> bool {
        matches!(self, Self::Source(_) | Self::Selected { .. })
    }
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
        self.group == resource.group && self.kind == resource.kind
    }
}

/// What a watch event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventOf {
    /// An object whose change concerns every declaration with destinations in its cluster (a
    /// Namespace, a consent object).
    Cluster,
    /// A source: the declarations copying it.
    Source,
    /// An object of a watch of selected sources: every declaration using the watch.
    Users,
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
    /// Source object → the declarations copying it.
    by_source: HashMap<ObjectKey, HashSet<ObjectKey>>,
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
    /// Records that `decl` (with `uid`) copies `source` (one object; `None` for a selection,
    /// whose events map through [`EventOf::Users`]) to `clusters`, and returns every
    /// cluster it must look at: those, plus clusters it had copies in before (their copies
    /// stay until they are gone; a cluster it only read sources from is not one), sorted
    /// and without repeats.
    pub fn register(
        &mut self,
        decl: &ObjectKey,
        uid: &str,
        source: Option<ObjectKey>,
        clusters: impl IntoIterator<Item = String>,
    ) -> Vec<String> {
        if let Some(source) = source {
            self.by_source
                .entry(source)
                .or_default()
                .insert(decl.clone());
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
            EventOf::Users => {
                out.extend(
                    self.watches
                        .get(watch)
                        .into_iter()
                        .flat_map(|(_, users)| users)
                        .cloned(),
                );
            }
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
            // not it.
            EventOf::Source => {
                out.extend(self.by_source.get(key).into_iter().flatten().cloned());
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

    /// `decl` reads its sources from the watches of scope `sources` in `cluster` only:
    /// forgets the other sources it copied before (a changed source name, selection or
    /// cluster) and returns their watches that no declaration uses any more (to be stopped).
    pub fn retain_source(
        &mut self,
        decl: &ObjectKey,
        cluster: &str,
        sources: &Scope,
    ) -> Vec<WatchId> {
        self.by_source.retain(|s, users| {
            if !matches!(sources, Scope::Source(keep) if keep == s) {
                users.remove(decl);
            }
            !users.is_empty()
        });
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
        self.by_source.retain(|_, users| {
            users.remove(decl);
            !users.is_empty()
        });
        self.by_cluster.retain(|_, users| {
            users.remove(decl);
            !users.is_empty()
        });
        self.by_uid.retain(|_, k| k != decl);
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
        self.by_source.retain(|source, users| {
            if source.is_of(old) {
                users.remove(decl);
            }
            !users.is_empty()
        });
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

    /// Whether `id` is the watch some key runs as now.
    pub fn is_running(&self, id: WatchId) -> bool {
        self.watches.values().any(|(running, _)| *running == id)
    }

    /// Watches running.
    pub fn watch_count(&self) -> usize {
        self.watches.len()
    }
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
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};

    fn ar<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
        ApiResource::erase::<K>(&())
    }

    /// A watch in `cluster` (events of most kinds depend only on its cluster).
    fn in_cluster(cluster: &str) -> WatchKey {
        WatchKey::of(cluster, &ar::<Namespace>())
    }

    fn decl(name: &str) -> ObjectKey {
        ObjectKey::new("local", &ar::<Secret>(), Some("ctl".into()), name)
    }

    fn source(kind: &ApiResource, name: &str) -> ObjectKey {
        ObjectKey::new("local", kind, Some("src".into()), name)
    }

    fn object(labels: serde_json::Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "x", "namespace": "ns", "labels": labels}}))
        .expect("object")
    }

    /// Starts watches with ids 0, 1, 2, … and counts the starts.
    struct Starter(usize);

    impl Starter {
        fn start(&mut self) -> Result<WatchId> {
            self.0 += 1;
            Ok(WatchId::from_raw(self.0 - 1))
        }
    }

    #[test]
    fn register_returns_new_and_previous_clusters() {
        let mut idx = Index::default();
        let (d, secret) = (decl("d"), ar::<Secret>());
        let mut s = Starter(0);
        let clusters = idx.register(
            &d,
            "u",
            Some(source(&secret, "a")),
            ["b".into(), "a".into()],
        );
        assert_eq!(clusters, ["a", "b"]);
        idx.watch_for(WatchKey::of("old", &secret), &d, || s.start())
            .expect("watch");
        let clusters = idx.register(&d, "u", Some(source(&secret, "a")), ["a".into()]);
        assert_eq!(clusters, ["a", "old"], "a cluster used before stays");
    }

    #[test]
    fn one_watch_serves_many_declarations_and_stops_with_the_last() {
        let mut idx = Index::default();
        let mut s = Starter(0);
        let key = WatchKey::of("local", &ar::<Secret>());
        let a = idx
            .watch_for(key.clone(), &decl("a"), || s.start())
            .expect("a");
        let b = idx
            .watch_for(key.clone(), &decl("b"), || s.start())
            .expect("b");
        assert_eq!((a, s.0), (b, 1), "started once");
        assert!(idx.forget(&decl("a")).is_empty(), "b still uses it");
        assert_eq!(idx.forget(&decl("b")), [a]);
        assert_eq!(idx.watch_count(), 0);
    }

    #[test]
    fn a_restarted_watch_keeps_its_users_and_stops_with_the_last() {
        let mut idx = Index::default();
        let mut s = Starter(0);
        let secret = ar::<Secret>();
        let copies = WatchKey::scoped("local", &secret, Scope::Copies);
        let old = idx
            .watch_for(copies.clone(), &decl("a"), || s.start())
            .expect("a");
        idx.watch_for(copies.clone(), &decl("b"), || s.start())
            .expect("b");
        idx.watch_for(WatchKey::of("local", &secret), &decl("a"), || s.start())
            .expect("all");
        let picked = idx.watches_where(|k| k.scope == Scope::Copies);
        assert_eq!(picked.len(), 1);
        assert_eq!(
            (&picked[0].0, picked[0].1, picked[0].2.len()),
            (&copies, old, 2)
        );
        let new = s.start().expect("new");
        assert_eq!(idx.replace_watch(&copies, new), Some(old));
        assert!(idx.is_running(new) && !idx.is_running(old));
        let c = idx
            .watch_for(copies.clone(), &decl("c"), || s.start())
            .expect("c");
        assert_eq!(c, new, "later users get the new one");
        assert_eq!(
            idx.replace_watch(&WatchKey::of("other", &secret), old),
            None
        );
        idx.forget(&decl("a"));
        idx.forget(&decl("b"));
        assert_eq!(
            idx.forget(&decl("c")),
            [new],
            "the new one stops with its last user"
        );
    }

    #[test]
    fn a_failed_start_records_nothing() {
        let mut idx = Index::default();
        let key = WatchKey::of("local", &ar::<Secret>());
        let err = idx.watch_for(key, &decl("a"), || Err(crate::Error::NotRunning));
        assert!(err.is_err());
        assert_eq!(idx.watch_count(), 0);
        assert!(idx.forget(&decl("a")).is_empty());
    }

    #[test]
    fn events_map_to_sources_copies_and_namespaces() {
        let mut idx = Index::default();
        let secret = ar::<Secret>();
        idx.register(
            &decl("d"),
            "uid-d",
            Some(source(&secret, "s")),
            ["east".into()],
        );
        let none = object(serde_json::json!({}));
        // The source itself, in its cluster only.
        let src = source(&secret, "s");
        let found = idx.declarations_for(EventOf::Source, &in_cluster("local"), &src, &none);
        assert_eq!(found, [decl("d")]);
        let elsewhere = src.in_cluster("east");
        let found = idx.declarations_for(EventOf::Source, &in_cluster("east"), &elsewhere, &none);
        assert!(found.is_empty(), "an object of the same name elsewhere");
        // A copy, by its managed-by label.
        let copy = object(serde_json::json!({MANAGED_BY: "uid-d"}));
        let k = ObjectKey::new("east", &secret, Some("ns".into()), "x");
        let found = idx.declarations_for(EventOf::Copy, &in_cluster("east"), &k, &copy);
        assert_eq!(found, [decl("d")]);
        let foreign = object(serde_json::json!({MANAGED_BY: "other"}));
        assert!(
            idx.declarations_for(EventOf::Copy, &in_cluster("east"), &k, &foreign)
                .is_empty()
        );
        // A namespace of a cluster with destinations.
        let ns = ObjectKey::new("east", &ar::<Namespace>(), None, "team");
        let found = idx.declarations_for(EventOf::Cluster, &in_cluster("east"), &ns, &none);
        assert_eq!(found, [decl("d")]);
        let found = idx.declarations_for(EventOf::Cluster, &in_cluster("west"), &ns, &none);
        assert!(found.is_empty());
        // Unrelated objects wake nothing, not even at the source's or a copy's name.
        for (k, obj) in [(&src, &none), (&k, &copy)] {
            assert!(
                idx.declarations_for(EventOf::Other, &in_cluster("local"), k, obj)
                    .is_empty()
            );
        }
    }

    #[test]
    fn an_object_in_the_way_wakes_the_declarations_it_blocks() {
        let mut idx = Index::default();
        let secret = ar::<Secret>();
        idx.register(
            &decl("d"),
            "uid-d",
            Some(source(&secret, "s")),
            ["east".into()],
        );
        let at = ObjectKey::new("east", &secret, Some("ns".into()), "x");
        let elsewhere = ObjectKey::new("east", &secret, Some("ns".into()), "y");
        let theirs = object(serde_json::json!({}));
        let others_copy = object(serde_json::json!({MANAGED_BY: "uid-e"}));
        idx.set_blocked(&decl("d"), [at.clone()]);
        for (event, obj) in [(EventOf::Other, &theirs), (EventOf::Copy, &others_copy)] {
            let found = idx.declarations_for(event, &in_cluster("east"), &at, obj);
            assert_eq!(found, [decl("d")], "{event:?}");
            assert!(
                idx.declarations_for(event, &in_cluster("east"), &elsewhere, obj)
                    .is_empty()
            );
        }
        // The next report replaces the set; forgetting clears it.
        idx.set_blocked(&decl("d"), [elsewhere.clone()]);
        assert!(
            idx.declarations_for(EventOf::Other, &in_cluster("east"), &at, &theirs)
                .is_empty()
        );
        idx.forget(&decl("d"));
        assert!(
            idx.declarations_for(EventOf::Other, &in_cluster("east"), &elsewhere, &theirs)
                .is_empty()
        );
    }

    #[test]
    fn a_changed_source_releases_the_old_source_watch() {
        let mut idx = Index::default();
        let mut s = Starter(0);
        let secret = ar::<Secret>();
        let (d, e) = (decl("d"), decl("e"));
        let (old, new) = (source(&secret, "old"), source(&secret, "new"));
        let watch_of =
            |src: &ObjectKey| WatchKey::scoped("local", &secret, Scope::Source(src.clone()));
        idx.register(&d, "uid-d", Some(old.clone()), ["local".into()]);
        idx.register(&e, "uid-e", Some(old.clone()), ["local".into()]);
        let w_old = idx
            .watch_for(watch_of(&old), &d, || s.start())
            .expect("old");
        idx.watch_for(watch_of(&old), &e, || s.start())
            .expect("shared");
        let copies = WatchKey::scoped("local", &secret, Scope::Copies);
        idx.watch_for(copies, &d, || s.start()).expect("copies");
        assert!(
            idx.retain_source(&d, "local", &Scope::Source(old.clone()))
                .is_empty(),
            "nothing changed"
        );
        // d now copies `new`; e still copies `old`, so its watch stays.
        idx.register(&d, "uid-d", Some(new.clone()), ["local".into()]);
        idx.watch_for(watch_of(&new), &d, || s.start())
            .expect("new");
        assert!(
            idx.retain_source(&d, "local", &Scope::Source(new.clone()))
                .is_empty(),
            "e still uses it"
        );
        let none = object(serde_json::json!({}));
        let found = idx.declarations_for(EventOf::Source, &in_cluster("local"), &old, &none);
        assert_eq!(
            found,
            std::slice::from_ref(&e),
            "the old source no longer wakes d"
        );
        // When e moves on too, the old source's watch stops; the copies watch stays.
        idx.register(&e, "uid-e", Some(new.clone()), ["local".into()]);
        assert_eq!(
            idx.retain_source(&e, "local", &Scope::Source(new.clone())),
            [w_old]
        );
        assert_eq!(idx.watch_count(), 2);
    }

    #[test]
    fn a_selection_wakes_every_user_of_its_watch_and_a_new_selection_releases_the_old() {
        let mut idx = Index::default();
        let mut s = Starter(0);
        let secret = ar::<Secret>();
        let (d, e, f) = (decl("d"), decl("e"), decl("f"));
        let selected = |labels: &str| {
            WatchKey::scoped(
                "local",
                &secret,
                Scope::Selected {
                    namespace: "src".into(),
                    labels: labels.into(),
                },
            )
        };
        let (tls, ca) = (selected("app=tls"), selected("app=ca"));
        for (decl, uid, watch) in [(&d, "uid-d", &tls), (&e, "uid-e", &tls), (&f, "uid-f", &ca)] {
            idx.register(decl, uid, None, ["local".into()]);
            idx.watch_for(watch.clone(), decl, || s.start())
                .expect("watch");
        }
        let k = source(&secret, "cert");
        let none = object(serde_json::json!({}));
        let mut found = idx.declarations_for(EventOf::Users, &tls, &k, &none);
        found.sort();
        assert_eq!(
            found,
            [d.clone(), e.clone()],
            "the users of that watch, not f"
        );
        assert!(
            idx.declarations_for(EventOf::Source, &tls, &k, &none)
                .is_empty(),
            "a selection registers no single source"
        );
        // d selects something else now; e still uses the old watch.
        idx.watch_for(ca.clone(), &d, || s.start()).expect("shared");
        assert!(
            idx.retain_source(&d, "local", &ca.scope).is_empty(),
            "e still uses it"
        );
        let found = idx.declarations_for(EventOf::Users, &tls, &k, &none);
        assert_eq!(found, std::slice::from_ref(&e));
        // e goes back to a single source: the selection's watch stops.
        let one = WatchKey::scoped("local", &secret, Scope::Source(k.clone()));
        idx.register(&e, "uid-e", Some(k.clone()), ["local".into()]);
        idx.watch_for(one.clone(), &e, || s.start()).expect("one");
        assert_eq!(
            idx.retain_source(&e, "local", &one.scope),
            [WatchId::from_raw(0)]
        );
    }

    #[test]
    fn a_source_read_from_another_cluster_adds_no_cluster_to_look_at_and_moves_cleanly() {
        let mut idx = Index::default();
        let mut s = Starter(0);
        let secret = ar::<Secret>();
        let d = decl("d");
        let selected = Scope::Selected {
            namespace: "src".into(),
            labels: "app=tls".into(),
        };
        let on = |cluster: &str| WatchKey::scoped(cluster, &secret, selected.clone());
        idx.register(&d, "uid-d", None, ["local".into()]);
        let hub = idx.watch_for(on("hub"), &d, || s.start()).expect("hub");
        // The sources' cluster is only read: no copies are looked for there.
        assert_eq!(idx.register(&d, "uid-d", None, ["local".into()]), ["local"]);
        assert!(idx.retain_source(&d, "hub", &selected).is_empty());
        // The same selection from another cluster: the first cluster's watch stops.
        idx.watch_for(on("hub-2"), &d, || s.start()).expect("hub-2");
        assert_eq!(idx.retain_source(&d, "hub-2", &selected), [hub]);
        // Its events reach the declaration; a source key names its cluster.
        let none = object(serde_json::json!({}));
        let k = ObjectKey::new("hub-2", &secret, Some("src".into()), "cert");
        assert_eq!(
            idx.declarations_for(EventOf::Users, &on("hub-2"), &k, &none),
            std::slice::from_ref(&d)
        );
        let one = ObjectKey::new("hub", &secret, Some("src".into()), "ca");
        idx.register(&d, "uid-d", Some(one.clone()), ["local".into()]);
        let in_hub = WatchKey::scoped("hub", &secret, Scope::Source(one.clone()));
        assert_eq!(
            idx.declarations_for(EventOf::Source, &in_hub, &one, &none),
            std::slice::from_ref(&d)
        );
        let same_name_here = ObjectKey::new("local", &secret, Some("src".into()), "ca");
        assert!(
            idx.declarations_for(
                EventOf::Source,
                &in_cluster("local"),
                &same_name_here,
                &none
            )
            .is_empty()
        );
    }

    #[test]
    fn forget_removes_every_trace() {
        let mut idx = Index::default();
        let secret = ar::<Secret>();
        idx.register(
            &decl("d"),
            "uid-d",
            Some(source(&secret, "s")),
            ["east".into()],
        );
        assert_eq!(idx.declarations(), vec![decl("d")]);
        idx.forget(&decl("d"));
        assert!(idx.declarations().is_empty());
        let copy = object(serde_json::json!({MANAGED_BY: "uid-d"}));
        let k = ObjectKey::new("east", &secret, Some("ns".into()), "x");
        assert!(
            idx.declarations_for(EventOf::Copy, &in_cluster("east"), &k, &copy)
                .is_empty()
        );
        let src = source(&secret, "s");
        assert!(
            idx.declarations_for(EventOf::Source, &in_cluster("local"), &src, &copy)
                .is_empty()
        );
        assert!(
            idx.declarations_for(EventOf::Cluster, &in_cluster("east"), &k, &copy)
                .is_empty()
        );
        assert!(idx.begin_type(&decl("d"), &ar::<ConfigMap>()).is_none());
    }

    #[test]
    fn a_type_change_is_retired_only_when_finished() {
        let mut idx = Index::default();
        let mut s = Starter(0);
        let (secret, cm, ns) = (ar::<Secret>(), ar::<ConfigMap>(), ar::<Namespace>());
        let d = decl("d");
        assert_eq!(idx.begin_type(&d, &secret), None, "first type");
        idx.register(&d, "u", Some(source(&secret, "s")), ["local".into()]);
        let old = idx
            .watch_for(WatchKey::of("local", &secret), &d, || s.start())
            .expect("secrets");
        idx.watch_for(WatchKey::of("local", &ns), &d, || s.start())
            .expect("namespaces");
        assert_eq!(idx.begin_type(&d, &secret), None, "same type");
        assert!(!idx.copies_another_type(&d, &secret));
        assert!(
            idx.copies_another_type(&d, &cm),
            "a refused spec naming it changes nothing"
        );
        let retire = idx.begin_type(&d, &cm).expect("type changed");
        assert_eq!(retire.old, secret);
        assert_eq!(retire.watches, [WatchKey::of("local", &secret)]);
        // Not finished (e.g. its copies could not be deleted yet): asked again, same answer.
        assert_eq!(idx.begin_type(&d, &cm), Some(retire.clone()));
        assert_eq!(idx.finish_retire(&d, &retire, &cm), [old]);
        assert_eq!(idx.begin_type(&d, &cm), None);
        assert!(!idx.copies_another_type(&d, &cm));
        assert_eq!(idx.watch_count(), 1, "the namespace watch stays");
        let src = source(&secret, "s");
        let none = object(serde_json::json!({}));
        assert!(
            idx.declarations_for(EventOf::Source, &in_cluster("local"), &src, &none)
                .is_empty(),
            "the old source no longer maps to the declaration"
        );
    }
}
