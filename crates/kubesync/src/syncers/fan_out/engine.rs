//! The fan-out engine: reconciles declarations ("copy this source to these destinations")
//! on the multi-cluster runtime.
//!
//! - **One watch per resource type and cluster** serves every declaration; it starts when the
//!   first declaration needs it and stops when the last one is forgotten. Each cluster with
//!   destinations also gets one Namespace watch.
//! - **Events map straight to declarations**: a source event to the declarations copying it,
//!   a copy event (by its `managed-by` uid) to its owner, a namespace event to the declarations
//!   with destinations in that cluster. No periodic sweep is needed to notice a new namespace.
//! - **Ownership is read from the copies' marks**, never from memory: deletion works after a
//!   restart. Nothing without this declaration's marks is modified (unless adopted) or deleted.
//! - A cluster that is unreachable is never read as "no copies there".

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{DynamicObject, PropagationPolicy};
use kube::core::ApiResource;
use serde::{Deserialize, Serialize};

use super::plan::{
    self, CopyRules, Decision, MANAGED_BY, NamespaceRule, OnConflict, Owner, Strategy,
};
use crate::apply::{Deleted, Writer};
use crate::error::{Error, Result};
use crate::key::ObjectKey;
use crate::runtime::{ClusterStatus, Context, Watch, WatchId};

/// Field manager of every copy write.
pub const FIELD_MANAGER: &str = "kubesync";

/// The source of a fan-out (in the engine's own cluster).
#[derive(Clone, Debug, PartialEq)]
pub struct SourceRef {
    /// Its type.
    pub resource: ApiResource,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Where copies go.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Destination {
    /// Cluster name (registered in the runtime context); `None`: the engine's own cluster.
    pub cluster: Option<String>,
    /// Which namespaces.
    pub namespaces: NamespaceRule,
    /// Name at the destination (default: the source's).
    pub name: Option<String>,
    /// How copies are written.
    pub strategy: Strategy,
}

/// A resolved fan-out declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct FanOutSpec {
    /// What to copy.
    pub source: SourceRef,
    /// Where.
    pub destinations: Vec<Destination>,
    /// What to do with pre-existing objects.
    pub on_conflict: OnConflict,
    /// Label, annotation and data filters.
    pub rules: CopyRules,
}

/// One declaration to reconcile.
#[derive(Clone, Debug)]
pub struct Declaration {
    /// The runtime key of the declaring object (events are mapped back to it).
    pub key: ObjectKey,
    /// Who owns the copies (`<cluster>/<namespace>/<name>` and uid).
    pub owner: Owner,
    /// The resolved spec.
    pub spec: FanOutSpec,
    /// The declaration is being deleted: remove every copy it made.
    pub deleting: bool,
}

/// State of one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DestinationState {
    /// The copy is current.
    Synced,
    /// Not written yet (e.g. waiting for a cluster's first list).
    Pending,
    /// Someone else's object is there.
    Conflict,
    /// Writing failed or the cluster cannot be reached.
    Error,
}

/// What a reconcile found at one destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationStatus {
    /// Cluster name.
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// State.
    pub state: DestinationState,
    /// Why (for Conflict and Error: the reason, e.g. the API's message).
    pub message: String,
    /// The source resourceVersion the copy carries.
    pub source_resource_version: String,
}

/// The outcome of one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Every watch the declaration needs has listed (otherwise nothing was decided).
    pub ready: bool,
    /// The source exists and is not being deleted.
    pub source_found: bool,
    /// Per destination.
    pub destinations: Vec<DestinationStatus>,
    /// Copies of this declaration that still exist (0 after a complete cleanup).
    pub remaining_copies: usize,
    /// Clusters that could not be checked (unreachable): cleanup is not complete there.
    pub unreachable: Vec<String>,
    /// Failing watches of this declaration: (cluster, the API's message).
    pub watch_errors: Vec<(String, String)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchKey {
    cluster: String,
    group: String,
    kind: String,
}

#[derive(Default)]
struct Index {
    by_source: HashMap<(String, String, String, String, String), HashSet<ObjectKey>>,
    by_uid: HashMap<String, ObjectKey>,
    by_cluster: HashMap<String, HashSet<ObjectKey>>,
    watches: HashMap<WatchKey, (WatchId, HashSet<ObjectKey>)>,
    used: HashMap<ObjectKey, HashSet<WatchKey>>,
    /// The source type each declaration copied last time.
    types: HashMap<ObjectKey, ApiResource>,
}

/// The fan-out engine. Cheap to share (`Arc`); one per process serves every declaration.
pub struct FanOut {
    local: String,
    writer: Writer,
    concurrency: usize,
    index: Arc<Mutex<Index>>,
    namespace_type: ApiResource,
}

fn lock(index: &Mutex<Index>) -> std::sync::MutexGuard<'_, Index> {
    index.lock().unwrap_or_else(|e| e.into_inner())
}

impl FanOut {
    /// An engine whose sources live in the cluster named `local`; copies are written with at
    /// most 16 requests in flight per reconcile.
    pub fn new(local: &str) -> Self {
        Self {
            local: local.to_string(),
            writer: Writer::new(),
            concurrency: 16,
            index: Arc::default(),
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

    /// Watches in use (type and namespace watches, all clusters).
    pub fn watch_count(&self) -> usize {
        lock(&self.index).watches.len()
    }

    fn ensure_watch(
        &self,
        ctx: &Context,
        key: WatchKey,
        resource: &ApiResource,
        user: &ObjectKey,
    ) -> Result<WatchId> {
        let mut idx = lock(&self.index);
        idx.used
            .entry(user.clone())
            .or_default()
            .insert(key.clone());
        if let Some((id, users)) = idx.watches.get_mut(&key) {
            users.insert(user.clone());
            return Ok(*id);
        }
        let index = self.index.clone();
        let is_namespace = resource.kind == "Namespace" && resource.group.is_empty();
        let local = self.local.clone();
        let cluster = key.cluster.clone();
        let mapper: crate::runtime::Mapper = Arc::new(move |k: &ObjectKey, obj: &DynamicObject| {
            let idx = lock(&index);
            let mut out: Vec<ObjectKey> = Vec::new();
            if is_namespace {
                out.extend(idx.by_cluster.get(&cluster).into_iter().flatten().cloned());
                return out;
            }
            if k.cluster == local {
                let id = (
                    k.cluster.clone(),
                    k.group.clone(),
                    k.kind.clone(),
                    k.namespace.clone().unwrap_or_default(),
                    k.name.clone(),
                );
                out.extend(idx.by_source.get(&id).into_iter().flatten().cloned());
            }
            if let Some(uid) = obj.labels().get(MANAGED_BY)
                && let Some(decl) = idx.by_uid.get(uid)
            {
                out.push(decl.clone());
            }
            out
        });
        let id = ctx.start_watch(&key.cluster, Watch::dynamic(resource.clone()), Some(mapper))?;
        idx.watches.insert(key, (id, HashSet::from([user.clone()])));
        Ok(id)
    }

    /// Drops a declaration that is gone: its index entries, and the watches no other
    /// declaration uses.
    pub fn forget(&self, ctx: &Context, key: &ObjectKey) {
        let mut idx = lock(&self.index);
        idx.by_source.values_mut().for_each(|s| {
            s.remove(key);
        });
        idx.by_cluster.values_mut().for_each(|s| {
            s.remove(key);
        });
        idx.by_uid.retain(|_, k| k != key);
        idx.types.remove(key);
        for wk in idx.used.remove(key).unwrap_or_default() {
            let unused = idx.watches.get_mut(&wk).is_some_and(|(_, users)| {
                users.remove(key);
                users.is_empty()
            });
            if unused && let Some((id, _)) = idx.watches.remove(&wk) {
                ctx.stop_watch(id);
            }
        }
    }

    /// The declaration now copies another kind: delete the copies of the old kind first (found
    /// by their marks in the old kind's stores) and release its watches.
    async fn retire_previous_type(&self, ctx: &Context, decl: &Declaration) -> Result<()> {
        let ar = &decl.spec.source.resource;
        let previous = lock(&self.index).types.insert(decl.key.clone(), ar.clone());
        let Some(old) = previous.filter(|p| p.group != ar.group || p.kind != ar.kind) else {
            return Ok(());
        };
        let old_keys: Vec<WatchKey> = lock(&self.index)
            .used
            .get(&decl.key)
            .into_iter()
            .flatten()
            .filter(|w| w.group == old.group && w.kind == old.kind)
            .cloned()
            .collect();
        for wk in &old_keys {
            if let ClusterStatus::Unreachable(m) = ctx.cluster_status(&wk.cluster) {
                // Try again later; remember the old type until its copies are gone.
                lock(&self.index)
                    .types
                    .insert(decl.key.clone(), old.clone());
                return Err(Error::ClusterUnreachable {
                    cluster: wk.cluster.clone(),
                    message: format!("{m}; cannot remove the old copies yet"),
                });
            }
            for copy in ctx
                .list(&wk.cluster, &old)
                .iter()
                .filter(|c| plan::owned_by(c, &decl.owner))
            {
                let at = (
                    wk.cluster.clone(),
                    copy.namespace().unwrap_or_default(),
                    copy.name_any(),
                );
                if let Err(e) = self
                    .delete_copy(ctx, &old, &at, copy.metadata.uid.as_deref())
                    .await
                {
                    lock(&self.index)
                        .types
                        .insert(decl.key.clone(), old.clone());
                    return Err(e);
                }
                tracing::info!(destination = %fmt_at(&at), kind = %old.kind, "the source kind changed; deleted the old copy");
            }
        }
        let mut idx = lock(&self.index);
        for wk in old_keys {
            if let Some(used) = idx.used.get_mut(&decl.key) {
                used.remove(&wk);
            }
            let unused = idx.watches.get_mut(&wk).is_some_and(|(_, users)| {
                users.remove(&decl.key);
                users.is_empty()
            });
            if unused && let Some((id, _)) = idx.watches.remove(&wk) {
                ctx.stop_watch(id);
            }
        }
        idx.by_source.retain(|(_, g, k, _, _), users| {
            if *g == old.group && *k == old.kind {
                users.remove(&decl.key);
            }
            !users.is_empty()
        });
        Ok(())
    }

    /// Reconciles one declaration: copies where they must be, nothing where they must not.
    pub async fn reconcile(&self, ctx: &Context, decl: &Declaration) -> Result<Report> {
        self.retire_previous_type(ctx, decl).await?;
        let spec = &decl.spec;
        let ar = &spec.source.resource;
        let mut clusters: Vec<String> = spec
            .destinations
            .iter()
            .map(|d| d.cluster.clone().unwrap_or_else(|| self.local.clone()))
            .collect();
        clusters.push(self.local.clone());
        {
            let mut idx = lock(&self.index);
            let source_id = (
                self.local.clone(),
                ar.group.clone(),
                ar.kind.clone(),
                spec.source.namespace.clone(),
                spec.source.name.clone(),
            );
            idx.by_source
                .entry(source_id)
                .or_default()
                .insert(decl.key.clone());
            idx.by_uid.insert(decl.owner.uid.clone(), decl.key.clone());
            // Clusters used before stay until their copies are gone.
            let previous: Vec<String> = idx
                .used
                .get(&decl.key)
                .into_iter()
                .flatten()
                .map(|w| w.cluster.clone())
                .collect();
            clusters.extend(previous);
            for c in &clusters {
                idx.by_cluster
                    .entry(c.clone())
                    .or_default()
                    .insert(decl.key.clone());
            }
        }
        clusters.sort();
        clusters.dedup();
        let mut ready = true;
        let mut unknown = Vec::new();
        let mut watch_errors: Vec<(String, String)> = Vec::new();
        for c in &clusters {
            if ctx.cluster(c).is_none() {
                unknown.push(c.clone());
                continue;
            }
            let type_watch = WatchKey {
                cluster: c.clone(),
                group: ar.group.clone(),
                kind: ar.kind.clone(),
            };
            let ns_watch = WatchKey {
                cluster: c.clone(),
                group: String::new(),
                kind: "Namespace".into(),
            };
            let a = self.ensure_watch(ctx, type_watch, ar, &decl.key)?;
            let b = self.ensure_watch(ctx, ns_watch, &self.namespace_type.clone(), &decl.key)?;
            ready &= ctx.watch_listed(a) && ctx.watch_listed(b);
            // Health is judged from this declaration's own watches, not the whole cluster's.
            if let Some(e) = ctx.watch_error(a).or_else(|| ctx.watch_error(b)) {
                watch_errors.push((c.clone(), e));
            }
        }
        let mut report = Report {
            ready,
            watch_errors: watch_errors.clone(),
            ..Default::default()
        };
        if !ready {
            return Ok(report);
        }
        let unreachable: HashSet<String> = watch_errors.iter().map(|(c, _)| c.clone()).collect();
        report.unreachable = unreachable.iter().cloned().collect();
        report.unreachable.sort();

        let source_key = ObjectKey::new(
            self.local.clone(),
            ar,
            Some(spec.source.namespace.clone()),
            &spec.source.name,
        );
        let stored_source = ctx.get(&source_key);
        let source_in_store = stored_source.is_some();
        let source =
            stored_source.filter(|s| s.metadata.deletion_timestamp.is_none() && !decl.deleting);
        report.source_found = source.is_some();

        // Existing copies of this declaration, by (cluster, namespace, name).
        let mut owned: BTreeMap<(String, String, String), Arc<DynamicObject>> = BTreeMap::new();
        for c in &clusters {
            for obj in ctx.list(c, ar) {
                if plan::owned_by(&obj, &decl.owner) {
                    owned.insert(
                        (
                            c.clone(),
                            obj.namespace().unwrap_or_default(),
                            obj.name_any(),
                        ),
                        obj,
                    );
                }
            }
        }

        // A source missing from the store while copies exist: the store may be a moment
        // behind the cluster. Confirm with a live read before any copy is deleted for it.
        if !source_in_store
            && !decl.deleting
            && !owned.is_empty()
            && !ctx.confirm_absent(&source_key, ar).await?
        {
            tracing::debug!(declaration = %decl.key, "source not in the store yet; waiting for its event");
            report.ready = false;
            return Ok(report);
        }

        // Desired destinations.
        let mut targets: BTreeMap<(String, String, String), Strategy> = BTreeMap::new();
        if let Some(_source) = &source {
            for d in &spec.destinations {
                let c = d.cluster.clone().unwrap_or_else(|| self.local.clone());
                if unknown.contains(&c) {
                    report.destinations.push(DestinationStatus {
                        cluster: c.clone(),
                        namespace: String::new(),
                        name: String::new(),
                        state: DestinationState::Error,
                        message: format!("unknown cluster {c:?}"),
                        source_resource_version: String::new(),
                    });
                    continue;
                }
                let name = d.name.clone().unwrap_or_else(|| spec.source.name.clone());
                for ns in ctx.list(&c, &self.namespace_type) {
                    let ns_name = ns.name_any();
                    if !d.namespaces.matches(
                        &ns_name,
                        ns.labels(),
                        ns.metadata.deletion_timestamp.is_some(),
                    ) {
                        continue;
                    }
                    // Never copy the source onto itself.
                    if c == self.local
                        && ns_name == spec.source.namespace
                        && name == spec.source.name
                    {
                        continue;
                    }
                    targets
                        .entry((c.clone(), ns_name, name.clone()))
                        .or_insert(d.strategy);
                }
            }
        }

        enum Op {
            Write {
                at: (String, String, String),
                desired: Box<DynamicObject>,
                existing: Option<Arc<DynamicObject>>,
                strategy: Strategy,
                decision: Decision,
            },
            Delete {
                at: (String, String, String),
                uid: Option<String>,
            },
        }
        let mut ops = Vec::new();
        let source_ref = format!(
            "{}/{}/{}/{}",
            if ar.group.is_empty() {
                "core"
            } else {
                ar.group.as_str()
            },
            ar.kind,
            spec.source.namespace,
            spec.source.name
        );
        let source_rv = source
            .as_ref()
            .and_then(|s| s.metadata.resource_version.clone())
            .unwrap_or_default();
        for (at, strategy) in &targets {
            let Some(source) = &source else { break };
            if unreachable.contains(&at.0) {
                report.destinations.push(status(
                    at,
                    DestinationState::Error,
                    format!("cluster {} is unreachable", at.0),
                    "",
                ));
                continue;
            }
            let desired = plan::desired_copy(
                ar,
                source,
                &at.1,
                &at.2,
                &spec.rules,
                &decl.owner,
                &source_ref,
            );
            let existing = ctx.get(&ObjectKey::new(at.0.clone(), ar, Some(at.1.clone()), &at.2));
            let decision = plan::decide(
                existing.as_deref(),
                &desired,
                &decl.owner,
                *strategy,
                spec.on_conflict,
            );
            ops.push(Op::Write {
                at: at.clone(),
                desired: Box::new(desired),
                existing,
                strategy: *strategy,
                decision,
            });
        }
        for (at, copy) in &owned {
            if targets.contains_key(at) {
                continue;
            }
            if unreachable.contains(&at.0) {
                continue;
            }
            // The copy exists, so its namespace does: absent from the store means the
            // namespace watch is behind, not that the copy is unwanted.
            let namespace_key = ObjectKey::new(at.0.clone(), &self.namespace_type, None, &at.1);
            if ctx.get(&namespace_key).is_none() {
                continue;
            }
            ops.push(Op::Delete {
                at: at.clone(),
                uid: copy.metadata.uid.clone(),
            });
        }
        report.remaining_copies = owned.len();
        tracing::debug!(
            declaration = %decl.key,
            source_found = report.source_found,
            targets = targets.len(),
            owned = owned.len(),
            operations = ops.len(),
            "fan-out planned"
        );

        let source_rv = &source_rv;
        let results: Vec<(Option<DestinationStatus>, bool)> = futures::stream::iter(ops)
            .map(|op| async move {
                match op {
                    Op::Delete { at, uid } => {
                        let gone = self.delete_copy(ctx, ar, &at, uid.as_deref()).await;
                        if let Err(e) = &gone {
                            tracing::warn!(destination = %fmt_at(&at), error = %e, "deleting a copy failed");
                        }
                        (None, gone.is_ok())
                    }
                    Op::Write { at, desired, existing, strategy, decision } => {
                        let st = self
                            .settle(ctx, decl, (&at, &desired), existing, strategy, decision, source_rv)
                            .await;
                        (Some(st), false)
                    }
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        for (st, deleted) in results {
            if let Some(st) = st {
                report.destinations.push(st);
            }
            if deleted {
                report.remaining_copies = report.remaining_copies.saturating_sub(1);
            }
        }
        report.destinations.sort_by(|a, b| {
            (&a.cluster, &a.namespace, &a.name).cmp(&(&b.cluster, &b.namespace, &b.name))
        });
        Ok(report)
    }

    /// Carries out `decision` at one destination and says how it ended. A create that finds
    /// the name taken (the store did not show the object yet: this engine's own copy from a
    /// moment ago, or someone else's new object) reads the object and decides once more.
    #[allow(clippy::too_many_arguments)]
    async fn settle(
        &self,
        ctx: &Context,
        decl: &Declaration,
        (at, desired): (&(String, String, String), &DynamicObject),
        mut existing: Option<Arc<DynamicObject>>,
        strategy: Strategy,
        mut decision: Decision,
        source_rv: &str,
    ) -> DestinationStatus {
        let ar = &decl.spec.source.resource;
        let mut looked_again = false;
        loop {
            match decision {
                Decision::InSync => {
                    return status(at, DestinationState::Synced, String::new(), source_rv);
                }
                Decision::Conflict(msg) => return status(at, DestinationState::Conflict, msg, ""),
                Decision::Create | Decision::Update | Decision::Adopt => {}
            }
            let written = self
                .write_copy(ctx, ar, at, desired, existing.as_deref(), strategy)
                .await;
            let e = match written {
                Ok(()) => return status(at, DestinationState::Synced, String::new(), source_rv),
                Err(e) => e,
            };
            if existing.is_none() && is_already_exists(&e) && !looked_again {
                looked_again = true;
                match self.read(ctx, ar, at).await {
                    Ok(Some(live)) => {
                        decision = plan::decide(
                            Some(&live),
                            desired,
                            &decl.owner,
                            strategy,
                            decl.spec.on_conflict,
                        );
                        existing = Some(Arc::new(live));
                        continue;
                    }
                    Ok(None) => {
                        return status(
                            at,
                            DestinationState::Error,
                            "the name was taken while kubesync created its copy, and is free again; it is looked at again".into(),
                            "",
                        );
                    }
                    Err(e) => return status(at, DestinationState::Error, api_message(&e), ""),
                }
            }
            if strategy == Strategy::Apply && is_uid_precondition_failure(&e) {
                tracing::info!(destination = %fmt_at(at), "the object was replaced while kubesync wrote its copy; left untouched");
                return status(
                    at,
                    DestinationState::Error,
                    "the object kubesync decided on was deleted or replaced while it wrote; nothing was changed, and it is looked at again".into(),
                    "",
                );
            }
            tracing::warn!(destination = %fmt_at(at), error = %e, "writing a copy failed");
            return status(at, DestinationState::Error, api_message(&e), "");
        }
    }

    /// A live read of one destination object.
    async fn read(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &(String, String, String),
    ) -> Result<Option<DynamicObject>> {
        let cluster = ctx.require_cluster(&at.0)?;
        let api: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(cluster.client().clone(), &at.1, ar);
        Ok(api.get_opt(&at.2).await?)
    }

    async fn write_copy(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &(String, String, String),
        desired: &DynamicObject,
        existing: Option<&DynamicObject>,
        strategy: Strategy,
    ) -> Result<()> {
        let cluster = ctx.require_cluster(&at.0)?;
        match (strategy, existing) {
            (Strategy::Apply, Some(existing)) => {
                // A copy created by a POST: its fields are owned by an `Update` entry, which an
                // apply cannot remove; hand them to the `Apply` entry first when this apply
                // leaves something out.
                if let Some(patch) = plan::ownership_upgrade(existing, desired, FIELD_MANAGER) {
                    self.writer
                        .json_patch(&cluster, ar, Some(&at.1), &at.2, &patch, FIELD_MANAGER)
                        .await?;
                }
                // Conditional on the object decided on: never takes over an object that
                // replaced it after the store was read.
                let mut body = desired.clone();
                body.metadata.uid = plan::apply_precondition(Some(existing));
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
                        tracing::info!(destination = %fmt_at(at), "immutable field changed; recreating the copy");
                        self.writer
                            .delete(
                                &cluster,
                                ar,
                                Some(&at.1),
                                &at.2,
                                Some(PropagationPolicy::Background),
                                existing.metadata.uid.as_deref(),
                            )
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
        Ok(())
    }

    async fn delete_copy(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &(String, String, String),
        uid: Option<&str>,
    ) -> Result<Deleted> {
        let cluster = ctx.require_cluster(&at.0)?;
        self.writer
            .delete(
                &cluster,
                ar,
                Some(&at.1),
                &at.2,
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

/// Whether a write failed on its uid precondition ([`plan::apply_precondition`]): the object
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

fn fmt_at(at: &(String, String, String)) -> String {
    format!("{}/{}/{}", at.0, at.1, at.2)
}

fn status(
    at: &(String, String, String),
    state: DestinationState,
    message: String,
    rv: &str,
) -> DestinationStatus {
    DestinationStatus {
        cluster: at.0.clone(),
        namespace: at.1.clone(),
        name: at.2.clone(),
        state,
        message,
        source_resource_version: rv.to_string(),
    }
}

fn api_message(e: &Error) -> String {
    match e {
        Error::Kube(kube::Error::Api(s)) => format!("{}: {}", s.reason, s.message),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
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
            let next = answers.lock().expect("answers").pop_front();
            log.lock()
                .expect("log")
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

    /// A create whose name turns out to be taken reads the object and decides once more.
    async fn create_finds(found: (u16, serde_json::Value)) -> (DestinationStatus, Vec<String>) {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let (client, seen) = canned(vec![(409, status(409, "AlreadyExists")), found]);
        let ctx = Controller::new()
            .cluster(Cluster::new("local", client))
            .context();
        let decl = Declaration {
            key: ObjectKey::new("local", &ar, Some("ctl".into()), "d"),
            owner: Owner {
                reference: "local/ctl/d".into(),
                uid: "decl-uid".into(),
            },
            spec: FanOutSpec {
                source: SourceRef {
                    resource: ar,
                    namespace: "src".into(),
                    name: "copy".into(),
                },
                destinations: vec![],
                on_conflict: OnConflict::Skip,
                rules: CopyRules::default(),
            },
            deleting: false,
        };
        let desired: DynamicObject =
            serde_json::from_value(secret(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE="))
                .expect("desired");
        let at = ("local".to_string(), "ns".to_string(), "copy".to_string());
        let st = FanOut::new("local")
            .settle(
                &ctx,
                &decl,
                (&at, &desired),
                None,
                Strategy::Apply,
                Decision::Create,
                "7",
            )
            .await;
        let seen = seen.lock().expect("seen").clone();
        (st, seen)
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
}
