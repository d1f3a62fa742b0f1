//! The operator: one controller loop over kubesync's resources in the cluster it runs in,
//! dispatching each key by its resource type to the ObjectSync controller (ObjectSyncs and
//! ClusterObjectSyncs) or the
//! ResourceSync/RemoteCluster controller, over a shared remote-cluster service.
//!
//! Owns the composition (who shares what), the watches, and the read-only views `/metrics`
//! and the tests use. It reconciles nothing itself and writes nothing itself.

use parking_lot::Mutex;
use serde::Deserialize;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kube::Resource;
use kubesync::Writer;
use kubesync::runtime::{Action, Context, Controller, Reconciler, Watch};
use kubesync::{Cluster, ObjectKey};

use crate::compat::CompatController;
use crate::crd::{ClusterObjectSync, ObjectSync, RemoteCluster, RemoteClusterStatus, ResourceSync};
use crate::lag::Lags;
use crate::object_sync::ObjectSyncController;
pub use crate::object_sync::ObjectSyncGauge;
pub use crate::own_writes::FIELD_MANAGER;
use crate::own_writes::OwnWrites;
use crate::policy::ObjectSyncPolicy;
pub use crate::remote::LOCAL;
use crate::remote::RemoteClusters;
pub use crate::resource_sync::RESOURCE_SYNC_FINALIZER;
use crate::resource_sync::ResourceSyncController;
use crate::shard::{Shards, Unit, UnitKind};
use crate::status::ConditionType;
pub use crate::status::Refusal;

/// `/healthz` fails when the operator's loop has not turned for this long (the default of
/// [`OperatorOptions::stuck_after`]).
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// How often every object is reconciled without an event (the default of
/// [`OperatorOptions::resync`]).
pub const RESYNC: Duration = Duration::from_secs(60);

/// After a unit is handed over from another replica, its fan-out's writes are confirmed by a
/// live read for this long (the other replica's last writes reach this one's watches within
/// it).
const HANDOVER_CONFIRM: Duration = Duration::from_secs(10);

/// How often statuses are refreshed (counts, reachability).
const STATUS_REFRESH: Duration = Duration::from_secs(10);

/// The kinds the operator reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Managed {
    /// `ObjectSync`.
    ObjectSync,
    /// `ClusterObjectSync`.
    ClusterObjectSync,
    /// `ResourceSync`.
    ResourceSync,
    /// `RemoteCluster`.
    RemoteCluster,
}

impl Managed {
    /// The kind of a key, compared by group and kind with the CRD types (pure).
    pub fn of(key: &ObjectKey) -> Option<Self> {
        fn is<K: Resource<DynamicType = ()>>(key: &ObjectKey) -> bool {
            key.group == K::group(&()) && key.kind == K::kind(&())
        }
        if is::<ObjectSync>(key) {
            Some(Self::ObjectSync)
        } else if is::<ClusterObjectSync>(key) {
            Some(Self::ClusterObjectSync)
        } else if is::<ResourceSync>(key) {
            Some(Self::ResourceSync)
        } else if is::<RemoteCluster>(key) {
            Some(Self::RemoteCluster)
        } else {
            None
        }
    }
}

/// A RemoteCluster's health, as `/metrics` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteHealth {
    /// The RemoteCluster's name.
    pub name: String,
    /// Its last probe answered, and no watch of it fails.
    pub reachable: bool,
    /// When it last answered a probe or a watch.
    pub last_contact: Option<std::time::SystemTime>,
    /// Its watches that failed or expired and started again.
    pub watch_restarts: u64,
}

/// The operator's shared state.
pub struct Operator {
    local: Cluster,
    writes: OwnWrites,
    object_syncs: ObjectSyncController,
    resource_syncs: ResourceSyncController,
    /// The propagation lags of the copies written.
    lags: Lags,
    /// The running controller's context (set when [`run`](Self::run) starts).
    ctx: OnceLock<Context>,
    /// With leader election: whether this replica leads.
    leader: Mutex<Option<bool>>,
    /// With leader election: when this replica last read the leader Lease (a standby that
    /// reads it can take over: it is ready).
    lease_read: crate::leader::LastRead,
    /// Liveness fails when the loop has not turned for this long.
    stuck_after: Duration,
    /// With `--compat`: the annotation-declared syncs.
    compat: Option<CompatController>,
    /// With `--sharded`: this replica's share of the work.
    shards: Option<Arc<Shards>>,
    /// How often every object is reconciled without an event.
    resync: Duration,
}

/// Options of an [`Operator`].
#[derive(Clone, Debug)]
pub struct OperatorOptions {
    /// How often statuses are refreshed (default 10 s).
    pub status_refresh: Duration,
    /// Which ObjectSyncs are allowed (sources, destinations, kinds).
    pub policy: ObjectSyncPolicy,
    /// Copy writes in flight per ObjectSync (default 16).
    pub fan_out_concurrency: usize,
    /// `/healthz` fails when the operator's loop has not turned for this long (default
    /// [`STUCK_AFTER`], 60 s; the loop turns at least every
    /// few seconds when idle).
    pub stuck_after: Duration,
    /// The tools whose annotations are honoured as implicit declarations (none by default).
    pub compat: Vec<crate::compat::Tool>,
    /// Their copies and pulls are written only when the source changed (the tools' version
    /// gate; off by default: they are repaired).
    pub compat_version_gate: bool,
    /// The namespace (the operator's own, which tenants do not write) where the records of
    /// the copies the annotations made are kept, one ConfigMap per annotated object
    /// ([`crate::compat::records`]); `None`: held in memory only, so after a restart the
    /// copies found by their marks are removed only as their namespace's identity (or left).
    pub compat_records: Option<String>,
    /// With `--sharded`: this replica works only on the units its share holds (none given:
    /// on everything).
    pub shards: Option<Arc<Shards>>,
    /// How often every object is reconciled without an event (default [`RESYNC`], 60 s): a
    /// safety net, not how changes are noticed (each comes as an event).
    pub resync: Duration,
}

impl Default for OperatorOptions {
    fn default() -> Self {
        Self {
            status_refresh: STATUS_REFRESH,
            policy: Default::default(),
            fan_out_concurrency: 16,
            stuck_after: STUCK_AFTER,
            compat: Vec::new(),
            compat_version_gate: false,
            compat_records: None,
            shards: None,
            resync: RESYNC,
        }
    }
}

impl Operator {
    /// An operator managing syncs into `local` (the cluster it runs in).
    pub fn new(local: Cluster) -> Arc<Self> {
        Self::with_options(local, OperatorOptions::default())
    }

    /// An operator with options.
    pub fn with_options(local: Cluster, options: OperatorOptions) -> Arc<Self> {
        let local = local.named(LOCAL);
        let writes = OwnWrites::new(local.clone(), Writer::new());
        let remotes = Arc::new(RemoteClusters::new(local.clone()));
        let lags = Lags::default();
        let policy = Arc::new(options.policy.clone());
        let records = options
            .compat_records
            .as_deref()
            .filter(|_| !options.compat.is_empty())
            .map(|ns| crate::compat::records::CompatRecords::new(writes.clone(), ns));
        let compat = (!options.compat.is_empty()).then(|| {
            CompatController::new(local.clone(), options.compat, policy, lags.clone())
                .with_version_gate(options.compat_version_gate)
                .with_records(records.clone())
        });
        let object_syncs = ObjectSyncController::new(
            local.clone(),
            writes.clone(),
            remotes.clone(),
            options.policy,
            options.fan_out_concurrency,
            lags.clone(),
            records,
        );
        if options.shards.is_some() {
            // Each replica holds only the copies of the units it works on.
            object_syncs.fan_out().shard_copies(
                |key| Unit::of_declaration(key).shard(),
                crate::shard::all_shards(),
            );
        }
        Arc::new(Self {
            compat,
            object_syncs,
            resource_syncs: ResourceSyncController::new(
                local.clone(),
                writes.clone(),
                remotes,
                options.status_refresh,
                lags.clone(),
            ),
            local,
            writes,
            lags,
            ctx: OnceLock::new(),
            leader: Mutex::new(None),
            lease_read: crate::leader::LastRead::default(),
            stuck_after: options.stuck_after,
            shards: options.shards,
            resync: options.resync,
        })
    }

    /// How often ResourceSync statuses are refreshed (default 10 s).
    pub fn with_status_refresh(local: Cluster, every: Duration) -> Arc<Self> {
        Self::with_options(
            local,
            OperatorOptions {
                status_refresh: every,
                ..Default::default()
            },
        )
    }

    /// How long the loop may stand still before liveness fails.
    pub fn stuck_after(&self) -> Duration {
        self.stuck_after
    }

    /// The cluster the operator runs in.
    pub fn local(&self) -> &Cluster {
        &self.local
    }

    /// Records whether this replica leads (`None`: no leader election).
    pub fn set_leader(&self, leading: Option<bool>) {
        *self.leader.lock() = leading;
    }

    /// Where the elector notes each read of the leader Lease.
    pub fn lease_read(&self) -> crate::leader::LastRead {
        self.lease_read.clone()
    }

    /// How long ago this replica last read the leader Lease; `None` if it never did.
    pub fn lease_read_ago(&self) -> Option<Duration> {
        self.lease_read.lock().map(|at| at.elapsed())
    }

    /// Whether this replica leads; `None` without leader election.
    pub fn leader(&self) -> Option<bool> {
        *self.leader.lock()
    }

    /// The running controller's context; `None` before [`run`](Self::run).
    pub fn context(&self) -> Option<Context> {
        self.ctx.get().cloned()
    }

    /// Each ObjectSync's last reported state, by (namespace, name), and each
    /// ClusterObjectSync's, by ("", name).
    /// Only ObjectSyncs that still exist in the operator's store are shown (a reconcile that
    /// was in flight when one was deleted may have recorded it after it was forgotten).
    pub fn object_sync_gauges(&self) -> Vec<((String, String), ObjectSyncGauge)> {
        self.object_syncs.gauges(self.ctx.get())
    }

    /// With `--compat`: the annotation-declared syncs, counted.
    pub fn compat_counts(&self) -> Option<crate::compat::controller::CompatCounts> {
        self.compat.as_ref().map(CompatController::counts)
    }

    /// The propagation lags of the copies written, by sync kind and cluster.
    pub fn lags(&self) -> &Lags {
        &self.lags
    }

    /// The counts of every running ResourceSync, by name.
    pub async fn resource_sync_counts(&self) -> Vec<(String, crate::resource_sync::Counts)> {
        self.resource_syncs.all_counts().await
    }

    /// Each RemoteCluster's health, by name: whether it is reachable (its last probe answered
    /// and no watch of it fails), when it last answered a probe or a watch, and how many of
    /// its watches failed or expired and started again (the operator's and every sync's).
    pub async fn remote_cluster_health(&self) -> Vec<RemoteHealth> {
        let Some(ctx) = self.context() else {
            return Vec::new();
        };
        let mut contexts = vec![ctx.clone()];
        contexts.extend(self.resource_syncs.sync_contexts().await);
        let rc_type = kube::core::ApiResource::erase::<RemoteCluster>(&());
        let mut health = Vec::new();
        for rc in ctx.list(LOCAL, &rc_type) {
            let name = rc.metadata.name.clone().unwrap_or_default();
            let runtime = crate::remote::runtime_name(&name);
            let answered = rc
                .data
                .get("status")
                .and_then(|s| RemoteClusterStatus::deserialize(s).ok())
                .is_some_and(|s| crate::status::holds(&s.conditions, ConditionType::Ready));
            let failing = contexts.iter().any(|c| {
                matches!(
                    c.cluster_status(&runtime),
                    kubesync::runtime::ClusterStatus::Unreachable(_)
                )
            });
            let contacts: Vec<_> = contexts
                .iter()
                .filter_map(|c| c.metrics().clusters().remove(&runtime))
                .collect();
            health.push(RemoteHealth {
                name,
                reachable: answered && !failing,
                last_contact: contacts.iter().filter_map(|c| c.last_contact()).max(),
                watch_restarts: contacts.iter().map(|c| c.restarts()).sum(),
            });
        }
        health
    }

    /// Write requests sent so far, by component: the operator's own (statuses, finalizers),
    /// ObjectSync copies, running ResourceSyncs.
    pub async fn writes_by_component(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("operator", self.writes.writer().writes()),
            (
                "objectsync",
                self.object_syncs.fan_out().write_counter().writes(),
            ),
            ("resourcesync", self.sync_writes().await),
        ]
    }

    /// Names of the `ResourceSync`s whose syncs run now.
    pub async fn running(&self) -> Vec<String> {
        self.resource_syncs.running().await
    }

    /// Watches the ObjectSync fan-out holds (a few per type and cluster, plus one Namespace
    /// watch per cluster, plus the single sources' watches).
    pub fn fan_out_watches(&self) -> usize {
        self.object_syncs.fan_out().watch_count()
    }

    /// Copies the fan-out's watches hold in memory (with `--sharded`: those of this replica's
    /// shards, and copies not labelled yet).
    pub fn copies_held(&self) -> usize {
        self.context()
            .map_or(0, |ctx| self.object_syncs.fan_out().copies_held(&ctx))
    }

    /// Write requests sent by all running syncs.
    pub async fn sync_writes(&self) -> u64 {
        self.resource_syncs.sync_writes().await
    }

    /// With `--sharded`: this replica's share of the work.
    pub fn shards(&self) -> Option<&Arc<Shards>> {
        self.shards.as_ref()
    }

    /// The unit `key` belongs to (`None`: a ResourceSync gone from the store, whose sync
    /// this replica only stops if it runs one).
    pub fn unit_of(&self, key: &ObjectKey, ctx: &Context) -> Option<Unit> {
        match Managed::of(key) {
            Some(Managed::RemoteCluster) => Some(Unit::remote_cluster(&key.name)),
            Some(Managed::ResourceSync) => {
                let rs = ctx.get(key)?;
                let remote = rs.data["spec"]["remoteCluster"]
                    .as_str()
                    .unwrap_or_default();
                Some(Unit::remote_cluster(remote))
            }
            Some(Managed::ObjectSync | Managed::ClusterObjectSync) | None => {
                Some(Unit::of_declaration(key))
            }
        }
    }

    /// Every unit in the operator's stores, each with a key to queue when this replica starts
    /// working on it (a RemoteCluster's unit: the RemoteCluster and each ResourceSync using it).
    pub fn units(&self) -> Vec<(Unit, ObjectKey)> {
        let Some(ctx) = self.context() else {
            return Vec::new();
        };
        let mut types = vec![
            kube::core::ApiResource::erase::<ObjectSync>(&()),
            kube::core::ApiResource::erase::<ClusterObjectSync>(&()),
            kube::core::ApiResource::erase::<RemoteCluster>(&()),
            kube::core::ApiResource::erase::<ResourceSync>(&()),
        ];
        let declarations = types.len();
        if let Some(compat) = &self.compat {
            types.extend(compat.resources().iter().cloned());
        }
        let mut units = Vec::new();
        for (i, ar) in types.iter().enumerate() {
            for object in ctx.list(LOCAL, ar) {
                // Of the kinds --compat reads, only objects with the tools' annotations (the
                // only ones its store keeps) declare something; a source whose annotations
                // went and whose copies remain is found by the periodic pass.
                if i >= declarations
                    && object
                        .metadata
                        .annotations
                        .as_ref()
                        .is_none_or(|a| a.is_empty())
                {
                    continue;
                }
                let key = ObjectKey::new(
                    LOCAL,
                    ar,
                    object.metadata.namespace.clone(),
                    object.metadata.name.clone().unwrap_or_default(),
                );
                if let Some(unit) = self.unit_of(&key, &ctx) {
                    units.push((unit, key));
                }
            }
        }
        units
    }

    /// With `--sharded`: the units this replica works on now, by kind; `None` without.
    pub fn units_owned(&self) -> Option<std::collections::BTreeMap<UnitKind, usize>> {
        let shards = self.shards.as_ref()?;
        let mut owned: std::collections::BTreeMap<UnitKind, usize> = [
            UnitKind::ObjectSync,
            UnitKind::ClusterObjectSync,
            UnitKind::RemoteCluster,
        ]
        .into_iter()
        .map(|k| (k, 0))
        .collect();
        if self.compat.is_some() {
            owned.insert(UnitKind::Annotated, 0);
        }
        let mut seen = std::collections::HashSet::new();
        for (unit, _) in self.units() {
            if seen.insert(unit.hash) && shards.runs(&unit) {
                *owned.entry(unit.kind).or_default() += 1;
            }
        }
        Some(owned)
    }

    /// Forgets what is kept in memory for the units this replica no longer works on, and stops
    /// their ResourceSyncs' syncs. Writes nothing.
    pub async fn release_unowned(&self) {
        let (Some(shards), Some(ctx)) = (&self.shards, self.context()) else {
            return;
        };
        let keep = |key: &ObjectKey| self.unit_of(key, &ctx).is_none_or(|u| shards.runs(&u));
        for key in self.object_syncs.fan_out().declarations() {
            if !keep(&key) {
                self.object_syncs.fan_out().forget(&ctx, &key);
            }
        }
        self.object_syncs.release(&ctx, keep);
        if let Some(compat) = &self.compat {
            compat.release(keep);
        }
        self.resource_syncs
            .release(|_, remote| shards.runs(&Unit::remote_cluster(remote)))
            .await;
    }

    /// A reconcile of `key` that this replica does not work on: whatever it keeps of it in
    /// memory goes (a ResourceSync moved to another RemoteCluster stops its sync here).
    async fn release_key(&self, key: &ObjectKey, ctx: &Context) {
        match Managed::of(key) {
            Some(Managed::ObjectSync | Managed::ClusterObjectSync) => {
                self.object_syncs.forget(ctx, key)
            }
            Some(Managed::ResourceSync) => {
                self.resource_syncs
                    .release(|name, _| name != key.name)
                    .await
            }
            Some(Managed::RemoteCluster) => {}
            None => {
                self.object_syncs.fan_out().forget(ctx, key);
                if let Some(compat) = &self.compat {
                    compat.forget(key);
                }
            }
        }
    }

    /// Runs until `shutdown` resolves, then stops every sync.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> kubesync::Result<()> {
        let controller = Controller::new()
            .cluster(self.local.clone())
            .resync(Some(self.resync));
        let ctx = controller.context();
        let _ = self.ctx.set(ctx.clone());
        // Nothing here reads field ownership: the stores keep no managedFields (an ObjectSync's
        // status with a thousand destinations has a thousand entries there). ObjectSyncs are
        // held as text: each is read once per reconcile, and its status lists every
        // destination (a thousand entries as a tree of maps: about 1 MiB).
        // Packed, their text is kept as it arrives, with managedFields cut out of it.
        let own = |w: Watch| w.without_managed_fields();
        let controller = controller
            .watch(LOCAL, own(Watch::of::<ResourceSync>()))?
            .watch(LOCAL, own(Watch::of::<RemoteCluster>()))?
            .watch(LOCAL, own(Watch::of::<ObjectSync>()).packed())?
            .watch(LOCAL, own(Watch::of::<ClusterObjectSync>()).packed())?
            // A RemoteCluster change re-runs every ResourceSync that uses it (the key is all
            // the mapping needs: metadata only; the primary watch above holds them in full),
            // and a change of its spec every ObjectSync using it: what it admits
            // (`allowedNamespaces`) and where it leads are checked before any write, so a
            // withdrawal takes effect at once, not at the next resync. Not a change of its
            // status only (which follows the ObjectSyncs using it).
            .watch_mapped(LOCAL, Watch::of::<RemoteCluster>().metadata_only(), {
                let specs = SpecChanges::default();
                let me = Arc::downgrade(&self);
                move |key, rc| {
                    let mut users = ResourceSyncController::users_of_remote_cluster(&ctx, key);
                    if specs.changed(key, rc)
                        && let Some(me) = me.upgrade()
                    {
                        let cluster = crate::remote::runtime_name(&key.name);
                        users.extend(me.object_syncs.fan_out().declarations_in(&cluster));
                    }
                    users
                }
            })?;
        // With --compat: the annotated objects are declarations too, and a copy they declared
        // maps back to its source (also when the source is gone).
        let mut controller = controller;
        if let Some(compat) = &self.compat {
            for (ar, (annotated, copies)) in
                compat.resources().iter().cloned().zip(compat.watches())
            {
                let index = compat.copies();
                controller = controller.watch(LOCAL, annotated)?.watch_mapped(
                    LOCAL,
                    copies,
                    move |key, copy| index.file(&ar, key, copy),
                )?;
            }
        }
        controller
            .run(OperatorReconciler(self.clone()), shutdown)
            .await?;
        self.resource_syncs.shutdown().await;
        Ok(())
    }
}

/// Which objects' specs changed, by their `metadata.generation` (which a change of the status
/// alone leaves as it is), as their events arrive.
#[derive(Debug, Default)]
struct SpecChanges(Mutex<std::collections::HashMap<String, Option<i64>>>);

impl SpecChanges {
    /// Whether `obj` (`key`) shows another generation than its last event did; not at its
    /// first event (everything is reconciled then anyway).
    fn changed(&self, key: &ObjectKey, obj: &kube::api::DynamicObject) -> bool {
        let generation = obj.metadata.generation;
        let before = self.0.lock().insert(key.name.clone(), generation);
        before.is_some_and(|g| g != generation)
    }
}

/// The operator's work as the membership loop of `--sharded` sees it.
pub struct SharedWork(pub Arc<Operator>);

impl crate::shard::members::Work for SharedWork {
    fn units(&self) -> Vec<(Unit, ObjectKey)> {
        self.0.units()
    }

    fn wake(&self, key: ObjectKey, handed_over: bool) {
        if handed_over {
            // Its copies were written by another replica until now: what this one's stores
            // show of them is confirmed live before any write.
            self.0
                .object_syncs
                .fan_out()
                .confirm_writes(&key, HANDOVER_CONFIRM);
        }
        if let Some(ctx) = self.0.context() {
            ctx.enqueue(key);
        }
    }

    async fn release(&self, shards: &Shards) {
        self.0.release_unowned().await;
        if let Some(ctx) = self.0.context() {
            // The copies of the buckets owned under the new view: those of units gained are
            // listed before their first reconcile, those of units lost are dropped.
            self.0
                .object_syncs
                .fan_out()
                .hold_shards(&ctx, shards.held());
        }
    }
}

struct OperatorReconciler(Arc<Operator>);

impl Reconciler for OperatorReconciler {
    type Error = kubesync::Error;

    async fn reconcile(&self, key: &ObjectKey, ctx: &Context) -> kubesync::Result<Action> {
        let op = &self.0;
        // With --sharded: only units this replica works on now, each held while in flight.
        // Its writes are decided for its unit: each is refused once this replica no longer
        // works on it (see `crate::fence`).
        let (_permit, scope) = match (&op.shards, op.unit_of(key, ctx)) {
            (Some(shards), Some(unit)) => match shards.enter(&unit) {
                Some(permit) => (Some(permit), Some(unit.point())),
                None => {
                    op.release_key(key, ctx).await;
                    return Ok(Action::done());
                }
            },
            _ => (None, None),
        };
        match scope {
            Some(scope) => kubesync::fence::within(scope, self.dispatch(key, ctx)).await,
            None => self.dispatch(key, ctx).await,
        }
    }
}

impl OperatorReconciler {
    /// Reconciles `key` by the kind of object it names.
    async fn dispatch(&self, key: &ObjectKey, ctx: &Context) -> kubesync::Result<Action> {
        let op = &self.0;
        match Managed::of(key) {
            Some(Managed::ObjectSync) => op.object_syncs.reconcile::<ObjectSync>(key, ctx).await,
            Some(Managed::ClusterObjectSync) => {
                op.object_syncs
                    .reconcile::<ClusterObjectSync>(key, ctx)
                    .await
            }
            Some(Managed::ResourceSync) => {
                op.resource_syncs.reconcile_resource_sync(key, ctx).await
            }
            Some(Managed::RemoteCluster) => {
                op.resource_syncs.reconcile_remote_cluster(key, ctx).await
            }
            None => match &op.compat {
                Some(compat) => compat.reconcile(key, ctx, op.object_syncs.fan_out()).await,
                None => Ok(Action::done()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;

    #[test]
    fn keys_are_dispatched_by_resource_type() {
        let key = |ar: &ApiResource| ObjectKey::new(LOCAL, ar, None, "x");
        assert_eq!(
            Managed::of(&key(&ApiResource::erase::<ObjectSync>(&()))),
            Some(Managed::ObjectSync)
        );
        assert_eq!(
            Managed::of(&key(&ApiResource::erase::<ClusterObjectSync>(&()))),
            Some(Managed::ClusterObjectSync)
        );
        assert_eq!(
            Managed::of(&key(&ApiResource::erase::<ResourceSync>(&()))),
            Some(Managed::ResourceSync)
        );
        assert_eq!(
            Managed::of(&key(&ApiResource::erase::<RemoteCluster>(&()))),
            Some(Managed::RemoteCluster)
        );
        // The same kind in another group is not ours.
        let mut other = key(&ApiResource::erase::<ObjectSync>(&()));
        other.group = "example.com".into();
        assert_eq!(Managed::of(&other), None);
    }

    #[test]
    fn a_spec_change_is_a_new_generation_not_a_status_change() {
        let specs = SpecChanges::default();
        let key = ObjectKey::new(
            LOCAL,
            &ApiResource::erase::<RemoteCluster>(&()),
            None,
            "hub",
        );
        let at = |generation: i64| {
            let mut rc =
                kube::api::DynamicObject::new("hub", &ApiResource::erase::<RemoteCluster>(&()));
            rc.metadata.generation = Some(generation);
            rc
        };
        assert!(!specs.changed(&key, &at(1)), "first seen");
        assert!(!specs.changed(&key, &at(1)), "its status changed");
        assert!(specs.changed(&key, &at(2)), "its spec changed");
        assert!(!specs.changed(&key, &at(2)));
        let other = ObjectKey::new(
            LOCAL,
            &ApiResource::erase::<RemoteCluster>(&()),
            None,
            "east",
        );
        assert!(!specs.changed(&other, &at(2)), "each object apart");
    }
}
