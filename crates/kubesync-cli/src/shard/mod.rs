//! Scale-out (`kubesync run --sharded`): every replica works, each on its share of the units.
//!
//! A *unit* is what one replica works on alone: an ObjectSync, a ClusterObjectSync, a
//! RemoteCluster with the ResourceSyncs that use it, or (with `--compat`) one annotated object.
//! [`assign`] decides, purely, who owns a unit and when a member may work on it; [`members`]
//! keeps this replica's member Lease and reads the others' (the IO); [`Shards`] is the gate
//! every reconcile passes: a reconcile of a unit this replica does not work on now does
//! nothing, and a unit it stops working on is drained (its reconciles in flight finish) before
//! the replica acknowledges the change.

pub mod assign;
pub mod members;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use self::assign::{Tenure, View, bucket_of, hash, point};

/// What one unit's id starts with, by kind (ids are part of the protocol: every replica
/// hashes the same text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnitKind {
    /// An ObjectSync.
    ObjectSync,
    /// A ClusterObjectSync.
    ClusterObjectSync,
    /// A RemoteCluster and the ResourceSyncs that use it.
    RemoteCluster,
    /// An object whose annotations declare a copy or a pull (`--compat`).
    Annotated,
}

impl UnitKind {
    /// The kind's label in metrics.
    pub fn label(self) -> &'static str {
        match self {
            Self::ObjectSync => "ObjectSync",
            Self::ClusterObjectSync => "ClusterObjectSync",
            Self::RemoteCluster => "RemoteCluster",
            Self::Annotated => "Annotated",
        }
    }
}

/// One unit of work: its kind and its id (hashed: its bucket is assigned, see [`assign`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Unit {
    /// Its kind.
    pub kind: UnitKind,
    /// Its [`hash`]ed id.
    pub hash: u64,
}

impl Unit {
    /// The unit of an ObjectSync (`namespace` given) or a ClusterObjectSync.
    pub fn object_sync(namespace: Option<&str>, name: &str) -> Self {
        match namespace {
            Some(ns) => Self::new(UnitKind::ObjectSync, &format!("objectsync/{ns}/{name}")),
            None => Self::new(
                UnitKind::ClusterObjectSync,
                &format!("clusterobjectsync/{name}"),
            ),
        }
    }

    /// The unit of the RemoteCluster `name` (and of the ResourceSyncs that use it).
    pub fn remote_cluster(name: &str) -> Self {
        Self::new(UnitKind::RemoteCluster, &format!("remotecluster/{name}"))
    }

    /// The unit of an annotated object (`--compat`): its group, kind, namespace and name.
    pub fn annotated(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self::new(
            UnitKind::Annotated,
            &format!(
                "annotated/{group}/{kind}/{}/{name}",
                namespace.unwrap_or("")
            ),
        )
    }

    /// The unit of a declaration of copies: an ObjectSync, a ClusterObjectSync, or an
    /// annotated object (`--compat`), by its key.
    pub fn of_declaration(key: &kubesync::ObjectKey) -> Self {
        use crate::crd::{ClusterObjectSync, ObjectSync};
        fn is<K: kube::Resource<DynamicType = ()>>(key: &kubesync::ObjectKey) -> bool {
            key.group == K::group(&()) && key.kind == K::kind(&())
        }
        let namespace = key.namespace.as_deref();
        if is::<ObjectSync>(key) {
            Self::object_sync(namespace, &key.name)
        } else if is::<ClusterObjectSync>(key) {
            Self::object_sync(None, &key.name)
        } else {
            Self::annotated(&key.group, &key.kind, namespace, &key.name)
        }
    }

    fn new(kind: UnitKind, id: &str) -> Self {
        Self {
            kind,
            hash: hash(id),
        }
    }

    /// Its bucket.
    pub fn bucket(&self) -> u16 {
        bucket_of(self.hash)
    }

    /// The point its bucket is assigned by ([`View::owner`], [`Tenure::runs`]).
    pub fn point(&self) -> u64 {
        point(self.bucket())
    }

    /// The shard label of the copies it writes: its bucket, four hex digits.
    pub fn shard(&self) -> String {
        shard_label(self.bucket())
    }
}

/// A bucket as the shard label of copies: four hex digits.
pub fn shard_label(bucket: u16) -> String {
    format!("{bucket:04x}")
}

/// The shard labels of every bucket.
pub fn all_shards() -> std::collections::BTreeSet<String> {
    (0..assign::BUCKETS).map(shard_label).collect()
}

struct State {
    tenure: Tenure,
    /// Reconciles in flight, by the point of their unit's bucket.
    in_flight: HashMap<u64, usize>,
}

/// This replica's share of the work: which units it works on now, and its reconciles in
/// flight (shared by the operator's reconciles and the membership loop).
pub struct Shards {
    state: Mutex<State>,
    /// Woken whenever a reconcile finishes.
    finished: tokio::sync::Notify,
    gained: AtomicU64,
    lost: AtomicU64,
}

/// A reconcile of a unit this replica works on, in flight: while it lives, the unit is not
/// handed over.
pub struct Permit {
    shards: Arc<Shards>,
    unit: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        {
            let mut state = self.shards.state.lock();
            if let Some(n) = state.in_flight.get_mut(&self.unit) {
                *n -= 1;
                if *n == 0 {
                    state.in_flight.remove(&self.unit);
                }
            }
        }
        self.shards.finished.notify_waiters();
    }
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards").field("me", &self.me()).finish()
    }
}

impl Shards {
    /// The share of the member `me`: nothing until it has seen a settled view.
    pub fn new(me: &str) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                tenure: Tenure::new(me),
                in_flight: HashMap::new(),
            }),
            finished: tokio::sync::Notify::new(),
            gained: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        })
    }

    /// This member's name.
    pub fn me(&self) -> String {
        self.state.lock().tenure.me().to_string()
    }

    /// A permit to reconcile `unit` now, if this replica works on it.
    pub fn enter(self: &Arc<Self>, unit: &Unit) -> Option<Permit> {
        let mut state = self.state.lock();
        let point = unit.point();
        if !state.tenure.runs(point) {
            return None;
        }
        *state.in_flight.entry(point).or_default() += 1;
        Some(Permit {
            shards: self.clone(),
            unit: point,
        })
    }

    /// Whether this replica works on `unit` now.
    pub fn runs(&self, unit: &Unit) -> bool {
        self.runs_point(unit.point())
    }

    /// Whether this replica works now on the units of the bucket whose point is `point`
    /// ([`Unit::point`]).
    pub fn runs_point(&self, point: u64) -> bool {
        self.state.lock().tenure.runs(point)
    }

    /// The shard labels of the buckets this member owns under the view it adopted last
    /// (those it works on, or will once the view settles): the copies it must hold.
    pub fn held(&self) -> std::collections::BTreeSet<String> {
        let Some(view) = self.state.lock().tenure.current().cloned() else {
            return Default::default();
        };
        let me = self.me();
        (0..assign::BUCKETS)
            .filter(|b| view.owner(point(*b)) == Some(me.as_str()))
            .map(shard_label)
            .collect()
    }

    /// A copy of the tenure (to compare before and after a change).
    pub fn tenure(&self) -> Tenure {
        self.state.lock().tenure.clone()
    }

    /// The view adopted last, and whether it is settled.
    pub fn view(&self) -> Option<(View, bool)> {
        let state = self.state.lock();
        let settled = state.tenure.is_settled();
        state.tenure.current().map(|v| (v.clone(), settled))
    }

    /// Applies a change to the tenure (adopt, settle, resign): what it returns.
    pub fn change<T>(&self, f: impl FnOnce(&mut Tenure) -> T) -> T {
        f(&mut self.state.lock().tenure)
    }

    /// Waits until no reconcile is in flight for a unit this replica does not work on now.
    pub async fn drain(&self) {
        loop {
            let finished = self.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            {
                let state = self.state.lock();
                if state.in_flight.keys().all(|u| state.tenure.runs(*u)) {
                    return;
                }
            }
            finished.await;
        }
    }

    /// Whether this replica has joined: it saw a settled view and works on its share (it keeps
    /// working through later changes).
    pub fn active(&self) -> bool {
        self.state.lock().tenure.is_active()
    }

    /// Counts units gained and lost by a change (for `/metrics`).
    pub fn count_moves(&self, gained: u64, lost: u64) {
        self.gained.fetch_add(gained, Ordering::Relaxed);
        self.lost.fetch_add(lost, Ordering::Relaxed);
    }

    /// Units gained and lost since start.
    pub fn moves(&self) -> (u64, u64) {
        (
            self.gained.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn settled(shards: &Shards, members: &[&str]) {
        let view = View::new(members);
        let digest = view.digest().to_string();
        shards.change(|t| {
            t.adopt(view);
            t.settle(|_| Some(digest.as_str()));
        });
    }

    #[test]
    fn unit_ids_are_fixed() {
        assert_eq!(
            Unit::object_sync(Some("a"), "b"),
            Unit {
                kind: UnitKind::ObjectSync,
                hash: hash("objectsync/a/b")
            }
        );
        assert_ne!(
            Unit::object_sync(None, "b").hash,
            Unit::object_sync(Some(""), "b").hash
        );
        assert_ne!(
            Unit::remote_cluster("x").hash,
            Unit::object_sync(None, "x").hash
        );
    }

    #[test]
    fn members_hold_the_shards_of_their_buckets_each_once() {
        let (a, b) = (Shards::new("a"), Shards::new("b"));
        assert!(a.held().is_empty(), "nothing before a view");
        for s in [&a, &b] {
            s.change(|t| t.adopt(View::new(["a", "b"])));
        }
        let (held_a, held_b) = (a.held(), b.held());
        assert!(held_a.is_disjoint(&held_b));
        assert_eq!(held_a.len() + held_b.len(), usize::from(assign::BUCKETS));
        // About half each (16 384 buckets: one standard deviation is 64).
        assert!(held_a.len().abs_diff(8192) < 400, "{}", held_a.len());
        // A unit's copies carry a shard its owner holds.
        for i in 0..50 {
            let unit = Unit::object_sync(Some("team"), &format!("sync-{i}"));
            let owner = if View::new(["a", "b"]).owner(unit.point()) == Some("a") {
                &held_a
            } else {
                &held_b
            };
            assert!(owner.contains(&unit.shard()), "{}", unit.shard());
        }
        assert_eq!(all_shards().len(), usize::from(assign::BUCKETS));
        assert_eq!(shard_label(0x3fa), "03fa");
    }

    #[test]
    fn a_declaration_s_unit_is_its_object_sync_s_or_its_annotated_object_s() {
        use kube::core::ApiResource;
        let os = ApiResource::erase::<crate::crd::ObjectSync>(&());
        let cos = ApiResource::erase::<crate::crd::ClusterObjectSync>(&());
        let secret = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let key = |ar: &ApiResource, ns: Option<&str>| {
            kubesync::ObjectKey::new("local", ar, ns.map(String::from), "x")
        };
        assert_eq!(
            Unit::of_declaration(&key(&os, Some("team"))),
            Unit::object_sync(Some("team"), "x")
        );
        assert_eq!(
            Unit::of_declaration(&key(&cos, None)),
            Unit::object_sync(None, "x")
        );
        assert_eq!(
            Unit::of_declaration(&key(&secret, Some("team"))),
            Unit::annotated("", "Secret", Some("team"), "x")
        );
    }

    #[tokio::test]
    async fn a_lost_unit_is_drained_before_the_change_completes() {
        let shards = Shards::new("a");
        assert!(shards.enter(&Unit::remote_cluster("x")).is_none());
        settled(&shards, &["a"]);
        // A unit that moves to b when b joins.
        let unit = (0..)
            .map(|i| Unit::remote_cluster(&format!("c{i}")))
            .find(|u| View::new(["a", "b"]).owner(u.point()) == Some("b"))
            .expect("a unit b would own");
        let permit = shards.enter(&unit).expect("a works on it alone");
        shards.change(|t| t.adopt(View::new(["a", "b"])));
        assert!(shards.enter(&unit).is_none(), "no new reconcile once lost");
        // Polled once, the drain finds the reconcile in flight and waits.
        let mut drained = Box::pin(shards.drain());
        assert!(futures::poll!(drained.as_mut()).is_pending());
        drop(permit);
        tokio::time::timeout(Duration::from_secs(5), drained)
            .await
            .expect("drained once it finished");
    }
}
