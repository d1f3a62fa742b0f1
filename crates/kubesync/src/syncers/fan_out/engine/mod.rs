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

mod execute;
mod observe;
mod watches;

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

    /// Reconciles one declaration: copies where they must be, nothing where they must not.
    ///
    /// A pipeline: `watch` (the watches it needs, and their health) → `observe` (its sources
    /// and copies, absences confirmed live) → the pure [`plan`] → `carry_out` (writes and
    /// deletes, or in Report mode only what withdrawn consent ends) → `note` (what later
    /// events need).
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
mod tests;
