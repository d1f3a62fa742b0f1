//! The one place that writes synced objects.
//!
//! Every write the library's syncers send — copies, finalizers, status, namespaces, deletions —
//! goes through a [`Writer`], which counts them per cluster and resource (so tests and
//! benchmarks can prove that a reconcile of an object in sync writes nothing). The `kubesync`
//! binary sends its own resources' status and finalizers through it too; only its leader
//! election Lease and its Events are written elsewhere (by their own clients). The writer
//! makes no decisions: what to write comes from the pure plans, and the object helpers it
//! needs are in [`crate::object`].
//!
//! It remembers its recent writes, though, for one question a plan cannot answer from the
//! stores alone: [`Writer::already_written`]. A plan reads stores that show a write of this
//! writer only when its watch event arrives; a reconcile that runs before that (another
//! event, a re-list after a watch expired) decides the same write again. The fault suite's
//! watch-expiry scenario found 300 such writes after a thaw, and the flapping-remote one 14
//! status patches.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube::core::ApiResource;
use serde_json::Value;

mod status;

use crate::cluster::Cluster;
use crate::error::Result;

/// What a delete request found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The object is gone or its deletion has started.
    Requested,
    /// It was already gone.
    AlreadyGone,
}

/// Logs a write's duration (debug) when dropped.
struct WriteTimer(std::time::Instant);

impl Drop for WriteTimer {
    fn drop(&mut self) {
        tracing::debug!(elapsed_us = self.0.elapsed().as_micros() as u64, "write");
    }
}

/// Sends every write and counts them per cluster and resource. Cheap to clone (clones share
/// the counts and the memory of recent writes).
#[derive(Clone, Debug, Default)]
pub struct Writer {
    /// By (cluster, resource plural).
    counts: Arc<Mutex<BTreeMap<(String, String), u64>>>,
    recent: Arc<Mutex<Recent>>,
}

/// How long the writer remembers a write: far longer than a watch takes to show it, unless
/// the watch is broken (then the write is decided again once, at worst).
const REMEMBER: Duration = Duration::from_secs(30);

/// What a write left, as far as a later decision needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Written {
    /// The resourceVersion the apiserver answered with.
    resource_version: u64,
    /// A hash of the body sent.
    fingerprint: u64,
    at: Instant,
}

/// The writer's recent writes, by a hash of (cluster, resource, namespace, name, kind of write,
/// field manager); forgotten after [`REMEMBER`] or once a decision was made on an object that
/// shows them. A few dozen bytes per write of the last 30 s.
#[derive(Debug, Default)]
struct Recent {
    written: HashMap<u64, Written>,
    order: VecDeque<(Instant, u64)>,
}

impl Recent {
    fn remember(&mut self, key: u64, written: Written) {
        while let Some(&(at, old)) = self.order.front() {
            if written.at.duration_since(at) < REMEMBER {
                break;
            }
            self.order.pop_front();
            if self.written.get(&old).is_some_and(|w| w.at == at) {
                self.written.remove(&old);
            }
        }
        self.order.push_back((written.at, key));
        self.written.insert(key, written);
    }
}

/// Whether a write whose body hashes to `fingerprint` is done already: the last such write
/// this writer sent (`recorded`) had the same body, and the apiserver answered it with a newer
/// resourceVersion than the object the decision was made on (`observed`): that object is
/// older than the write, which therefore left what is asked for now. Someone else's change
/// after the write comes with a still newer resourceVersion, and its event leads to a new
/// decision on it. ResourceVersions are compared as numbers (etcd revisions, as client-go's
/// mutation cache compares them); one that is not a number never counts as older.
fn superseded(recorded: Option<&Written>, observed: Option<&str>, fingerprint: u64) -> bool {
    let (Some(recorded), Some(observed)) =
        (recorded, observed.and_then(|rv| rv.parse::<u64>().ok()))
    else {
        return false;
    };
    recorded.fingerprint == fingerprint && observed < recorded.resource_version
}

/// A [`Hasher`] fed by a serializer, so that a body is hashed without being buffered.
struct HashWriter(std::hash::DefaultHasher);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn fingerprint(body: &(impl serde::Serialize + ?Sized)) -> u64 {
    let mut h = HashWriter(std::hash::DefaultHasher::new());
    // Serializing a value that was just sent cannot fail; if it did, the hash of what was
    // written so far only makes a match less likely.
    let _ = serde_json::to_writer(&mut h, body);
    h.0.finish()
}

/// A kind of write, as the writer remembers it: each kind has its own place per object and
/// field manager, so that one kind of write never hides another from
/// [`Writer::already_written`] (a syncer's marks, a merge patch sent right after a claim, once
/// hid the claim's finalizer patch, which was then sent again on a store behind both).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteKind {
    /// A create (POST).
    Create,
    /// A server-side apply.
    Apply,
    /// A replace (PUT).
    Replace,
    /// A JSON merge patch of the object (not its finalizers: [`WriteKind::Finalizer`]).
    Merge,
    /// A JSON merge patch of the object's finalizers ([`Writer::set_finalizer`]).
    Finalizer,
    /// A JSON merge patch of the object's status subresource.
    Status,
    /// A JSON patch (RFC 6902).
    Json,
    /// A delete.
    Delete,
}

impl WriteKind {
    /// Its name, as logged.
    pub fn name(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Apply => "apply",
            Self::Replace => "replace",
            Self::Merge => "merge",
            Self::Finalizer => "finalizer",
            Self::Status => "status",
            Self::Json => "json",
            Self::Delete => "delete",
        }
    }
}

/// The memory key of a kind of write by `field_manager` to one object.
fn write_key(
    (cluster, ar, namespace, name): (&Cluster, &ApiResource, Option<&str>, &str),
    kind: WriteKind,
    field_manager: &str,
) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    (
        cluster.name(),
        &ar.group,
        &ar.plural,
        namespace,
        name,
        kind,
        field_manager,
    )
        .hash(&mut h);
    h.finish()
}

fn api(cluster: &Cluster, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    crate::cluster::api(cluster.client().clone(), namespace, ar)
}

impl Writer {
    /// A writer with zero counts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Write requests sent to all clusters so far.
    pub fn writes(&self) -> u64 {
        self.lock().values().sum()
    }

    /// Write requests sent to one cluster so far.
    pub fn writes_to(&self, cluster: &str) -> u64 {
        self.lock()
            .iter()
            .filter(|((c, _), _)| c == cluster)
            .map(|(_, n)| n)
            .sum()
    }

    /// Write requests for one resource (its plural, e.g. `namespaces`) sent to one cluster.
    pub fn writes_of(&self, cluster: &str, plural: &str) -> u64 {
        self.lock()
            .get(&(cluster.to_string(), plural.to_string()))
            .copied()
            .unwrap_or(0)
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeMap<(String, String), u64>> {
        self.counts.lock()
    }

    /// Whether the write of `body` (a `kind` of write) by `field_manager` to the object
    /// `observed` is done already, decided on a store that does not show it yet (see
    /// `superseded`). Then the caller sends nothing.
    pub fn already_written(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        observed: &DynamicObject,
        (kind, field_manager): (WriteKind, &str),
        body: &impl serde::Serialize,
    ) -> bool {
        self.sent_already(
            cluster,
            ar,
            observed,
            (kind, field_manager),
            fingerprint(body),
        )
    }

    /// [`Writer::already_written`], for a body whose fingerprint is known.
    fn sent_already(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        observed: &DynamicObject,
        (kind, field_manager): (WriteKind, &str),
        body_fingerprint: u64,
    ) -> bool {
        let name = observed.metadata.name.as_deref().unwrap_or_default();
        let key = write_key(
            (cluster, ar, observed.metadata.namespace.as_deref(), name),
            kind,
            field_manager,
        );
        let mut recent = self.recent.lock();
        let done = superseded(
            recent.written.get(&key),
            observed.metadata.resource_version.as_deref(),
            body_fingerprint,
        );
        if done {
            tracing::debug!(
                object = name,
                kind = kind.name(),
                "already written; the store is behind"
            );
        } else {
            // Decided on an object that shows the write (or after another one): forget it.
            recent.written.remove(&key);
        }
        done
    }

    /// Whether this writer created or wrote (applied, replaced) the object (namespace, name)
    /// in the last 30 s: a store that shows no such object may just not show it yet — a create not seen yet, or an object whose write moved
    /// it from one watch's selector to another's (a copy labelled with its shard) — so the
    /// caller reads it live before creating it again (a second create would be a write the
    /// apiserver refuses, or a copy made twice). The body is not compared (hashing every
    /// create's body costs more than the rare live read).
    pub fn written_recently(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        (namespace, name): (Option<&str>, &str),
        field_manager: &str,
    ) -> bool {
        let recent = self.recent.lock();
        [WriteKind::Create, WriteKind::Apply, WriteKind::Replace]
            .into_iter()
            .any(|kind| {
                let key = write_key((cluster, ar, namespace, name), kind, field_manager);
                recent
                    .written
                    .get(&key)
                    .is_some_and(|w| w.at.elapsed() < REMEMBER)
            })
    }

    /// Whether this writer asked in the last 30 s to delete the object (namespace, name) of
    /// `uid`: a store that still shows it may not show the delete yet (or the object waits for
    /// its finalizers); it is not deleted again.
    pub fn deleted_recently(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        (namespace, name): (Option<&str>, &str),
        uid: &str,
    ) -> bool {
        let key = write_key((cluster, ar, namespace, name), WriteKind::Delete, "");
        self.recent
            .lock()
            .written
            .get(&key)
            .is_some_and(|w| w.at.elapsed() < REMEMBER && w.fingerprint == fingerprint(&uid))
    }

    /// Remembers a successful write for [`Writer::already_written`].
    fn remember(
        &self,
        target: (&Cluster, &ApiResource, Option<&str>, &str),
        (kind, field_manager): (WriteKind, &str),
        body_fingerprint: u64,
        answer: Option<&str>,
    ) {
        let Some(resource_version) = answer.and_then(|rv| rv.parse().ok()) else {
            return;
        };
        let written = Written {
            resource_version,
            fingerprint: body_fingerprint,
            at: Instant::now(),
        };
        self.recent
            .lock()
            .remember(write_key(target, kind, field_manager), written);
    }

    fn count(&self, cluster: &Cluster, ar: &ApiResource) -> WriteTimer {
        *self
            .lock()
            .entry((cluster.name().to_string(), ar.plural.clone()))
            .or_insert(0) += 1;
        WriteTimer(std::time::Instant::now())
    }
}

/// The parameters of every server-side apply kubesync sends: under `field_manager`, forced,
/// and with `fieldValidation=Ignore`.
///
/// With the apiserver's default directive (`Warn`) or `Strict`, it decodes an apply's body a
/// second time, strictly, only to report unknown and duplicate fields. kubesync's bodies are
/// built from objects an apiserver served and serialized without duplicate keys, and a
/// field the destination's schema lacks fails an apply under every directive (`field not
/// declared in schema`, built-in kinds and custom resources alike). The second decode finds
/// nothing, and costs the apiserver about a fifth of an apply of a 64 KiB value
/// (`cargo bench --bench write_cost`).
pub fn apply_params(field_manager: &str) -> PatchParams {
    PatchParams::apply(field_manager)
        .force()
        .validation_ignore()
}

fn post_params(field_manager: &str) -> PostParams {
    PostParams {
        field_manager: Some(field_manager.into()),
        ..Default::default()
    }
}

impl Writer {
    /// Creates `obj` (its namespace and name are taken from its metadata).
    pub async fn create(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        cluster.may_write()?;
        let _timer = self.count(cluster, ar);
        let namespace = obj.metadata.namespace.as_deref();
        let answer = api(cluster, ar, namespace)
            .create(&post_params(field_manager), obj)
            .await?;
        let name = answer.metadata.name.clone().unwrap_or_default();
        self.remember(
            (cluster, ar, namespace, &name),
            (WriteKind::Create, field_manager),
            0,
            answer.metadata.resource_version.as_deref(),
        );
        Ok(answer)
    }

    /// Replaces `obj` (an update guarded by `metadata.resourceVersion`, when set).
    pub async fn replace(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        cluster.may_write()?;
        let _timer = self.count(cluster, ar);
        let name = obj.metadata.name.clone().unwrap_or_default();
        let namespace = obj.metadata.namespace.as_deref();
        let answer = api(cluster, ar, namespace)
            .replace(&name, &post_params(field_manager), obj)
            .await?;
        self.remember(
            (cluster, ar, namespace, &name),
            (WriteKind::Replace, field_manager),
            fingerprint(obj),
            answer.metadata.resource_version.as_deref(),
        );
        Ok(answer)
    }

    /// Applies `obj` with server-side apply under `field_manager` (forced).
    pub async fn apply(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        cluster.may_write()?;
        let _timer = self.count(cluster, ar);
        let name = obj.metadata.name.clone().unwrap_or_default();
        let namespace = obj.metadata.namespace.as_deref();
        let answer = api(cluster, ar, namespace)
            .patch(&name, &apply_params(field_manager), &Patch::Apply(obj))
            .await?;
        self.remember(
            (cluster, ar, namespace, &name),
            (WriteKind::Apply, field_manager),
            fingerprint(obj),
            answer.metadata.resource_version.as_deref(),
        );
        Ok(answer)
    }

    /// Sends a JSON merge patch to an object.
    pub async fn merge_patch(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        self.send(
            (cluster, ar, namespace, name),
            (&Patch::Merge(patch), fingerprint(patch)),
            (WriteKind::Merge, field_manager),
        )
        .await
    }

    /// Sends a JSON merge patch to an object's status subresource.
    pub async fn merge_patch_status(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        self.send(
            (cluster, ar, namespace, name),
            (&Patch::Merge(patch), fingerprint(patch)),
            (WriteKind::Status, field_manager),
        )
        .await
    }

    /// The newest resourceVersion this writer's remembered status, merge and finalizer writes
    /// by `field_manager` left on `target`.
    fn last_written(
        &self,
        target: (&Cluster, &ApiResource, Option<&str>, &str),
        field_manager: &str,
    ) -> Option<u64> {
        let recent = self.recent.lock();
        [WriteKind::Status, WriteKind::Merge, WriteKind::Finalizer]
            .into_iter()
            .filter_map(|kind| recent.written.get(&write_key(target, kind, field_manager)))
            .map(|w| w.resource_version)
            .max()
    }

    /// Sends a JSON patch (RFC 6902: `test`, `replace`, … operations) to an object; a failed
    /// `test` changes nothing.
    pub async fn json_patch(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        let ops = serde_json::from_value(patch.clone())
            .map_err(|e| crate::Error::Serialization(format!("not a JSON patch: {e}")))?;
        self.send(
            (cluster, ar, namespace, name),
            (&Patch::<()>::Json(ops), fingerprint(patch)),
            (WriteKind::Json, field_manager),
        )
        .await
    }

    async fn send<P: serde::Serialize + std::fmt::Debug>(
        &self,
        (cluster, ar, namespace, name): (&Cluster, &ApiResource, Option<&str>, &str),
        (patch, body_fingerprint): (&Patch<P>, u64),
        (kind, field_manager): (WriteKind, &str),
    ) -> Result<DynamicObject> {
        cluster.may_write()?;
        let _timer = self.count(cluster, ar);
        let pp = PatchParams {
            field_manager: Some(field_manager.into()),
            ..Default::default()
        };
        let api = api(cluster, ar, namespace);
        let answer = if kind == WriteKind::Status {
            api.patch_status(name, &pp, patch).await?
        } else {
            api.patch(name, &pp, patch).await?
        };
        self.remember(
            (cluster, ar, namespace, name),
            (kind, field_manager),
            body_fingerprint,
            answer.metadata.resource_version.as_deref(),
        );
        Ok(answer)
    }

    /// Adds (`present = true`) or removes a finalizer, guarded by the object's
    /// resourceVersion so that concurrent changes to the list are never lost. Sends nothing
    /// if the list already is as asked, or if this writer sent the same patch already and
    /// `obj` is older than its answer (a store behind the write: sending it again would only
    /// be refused as a conflict).
    pub async fn set_finalizer(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        finalizer: &str,
        present: bool,
        field_manager: &str,
    ) -> Result<Option<DynamicObject>> {
        let Some(patch) = crate::object::finalizer_patch(obj, finalizer, present) else {
            return Ok(None);
        };
        // Remembered apart from other merge patches by the same manager: a patch that follows
        // it (a syncer's marks) must not make a store that is still behind both look as if the
        // finalizer were not sent yet (it would be sent on that store's old resourceVersion
        // and refused as a conflict).
        let fingerprint = fingerprint(&patch);
        if self.sent_already(
            cluster,
            ar,
            obj,
            (WriteKind::Finalizer, field_manager),
            fingerprint,
        ) {
            return Ok(None);
        }
        let name = obj.metadata.name.as_deref().unwrap_or_default();
        self.send(
            (cluster, ar, obj.metadata.namespace.as_deref(), name),
            (&Patch::Merge(&patch), fingerprint),
            (WriteKind::Finalizer, field_manager),
        )
        .await
        .map(Some)
    }

    /// Deletes an object, optionally only if its uid still matches.
    pub async fn delete(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        propagation: Option<PropagationPolicy>,
        uid: Option<&str>,
    ) -> Result<Deleted> {
        cluster.may_write()?;
        let _timer = self.count(cluster, ar);
        let dp = DeleteParams {
            propagation_policy: propagation,
            preconditions: uid.map(|u| Preconditions {
                uid: Some(u.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api(cluster, ar, namespace).delete(name, &dp).await {
            Ok(_) => {
                if let Some(uid) = uid {
                    let written = Written {
                        resource_version: 0,
                        fingerprint: fingerprint(&uid),
                        at: Instant::now(),
                    };
                    self.recent.lock().remember(
                        write_key((cluster, ar, namespace, name), WriteKind::Delete, ""),
                        written,
                    );
                }
                Ok(Deleted::Requested)
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Deleted::AlreadyGone),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests;
