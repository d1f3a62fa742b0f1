//! The only place that writes to a cluster.
//!
//! Every write request kubesync sends goes through a [`Writer`], which counts them per cluster
//! (so tests and benchmarks can prove that a reconcile of an object in sync writes nothing),
//! and every copy that crosses clusters is cleaned with [`sanitize`] first.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube::core::ApiResource;
use serde_json::{Map, Value};

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
/// the counts).
#[derive(Clone, Debug, Default)]
pub struct Writer {
    /// By (cluster, resource plural).
    counts: Arc<Mutex<BTreeMap<(String, String), u64>>>,
}

fn api(cluster: &Cluster, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(cluster.client().clone(), ns, ar),
        None => Api::all_with(cluster.client().clone(), ar),
    }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), u64>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn count(&self, cluster: &Cluster, ar: &ApiResource) -> WriteTimer {
        *self
            .lock()
            .entry((cluster.name().to_string(), ar.plural.clone()))
            .or_insert(0) += 1;
        WriteTimer(std::time::Instant::now())
    }
}

fn post_params(field_manager: &str) -> PostParams {
    PostParams {
        field_manager: Some(field_manager.into()),
        ..Default::default()
    }
}

/// A typed object (`Secret`, a custom resource type, …) as a [`DynamicObject`] for the
/// [`Writer`].
pub fn to_dynamic<K: serde::Serialize>(obj: &K) -> Result<DynamicObject> {
    Ok(serde_json::from_value(serde_json::to_value(obj)?)?)
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
        let _timer = self.count(cluster, ar);
        Ok(api(cluster, ar, obj.metadata.namespace.as_deref())
            .create(&post_params(field_manager), obj)
            .await?)
    }

    /// Replaces `obj` (an update guarded by `metadata.resourceVersion`, when set).
    pub async fn replace(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        let _timer = self.count(cluster, ar);
        let name = obj.metadata.name.clone().unwrap_or_default();
        Ok(api(cluster, ar, obj.metadata.namespace.as_deref())
            .replace(&name, &post_params(field_manager), obj)
            .await?)
    }

    /// Applies `obj` with server-side apply under `field_manager` (forced).
    pub async fn apply(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        field_manager: &str,
    ) -> Result<DynamicObject> {
        let _timer = self.count(cluster, ar);
        let name = obj.metadata.name.clone().unwrap_or_default();
        Ok(api(cluster, ar, obj.metadata.namespace.as_deref())
            .patch(
                &name,
                &PatchParams::apply(field_manager).force(),
                &Patch::Apply(obj),
            )
            .await?)
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
            &Patch::Merge(patch),
            field_manager,
            false,
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
            &Patch::Merge(patch),
            field_manager,
            true,
        )
        .await
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
            &Patch::<()>::Json(ops),
            field_manager,
            false,
        )
        .await
    }

    async fn send<P: serde::Serialize + std::fmt::Debug>(
        &self,
        (cluster, ar, namespace, name): (&Cluster, &ApiResource, Option<&str>, &str),
        patch: &Patch<P>,
        field_manager: &str,
        status: bool,
    ) -> Result<DynamicObject> {
        let _timer = self.count(cluster, ar);
        let pp = PatchParams {
            field_manager: Some(field_manager.into()),
            ..Default::default()
        };
        let api = api(cluster, ar, namespace);
        Ok(if status {
            api.patch_status(name, &pp, patch).await?
        } else {
            api.patch(name, &pp, patch).await?
        })
    }

    /// Adds (`present = true`) or removes a finalizer, guarded by the object's
    /// resourceVersion so that concurrent changes to the list are never lost. Sends nothing
    /// if the list already is as asked.
    pub async fn set_finalizer(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        finalizer: &str,
        present: bool,
        field_manager: &str,
    ) -> Result<Option<DynamicObject>> {
        let Some(patch) = finalizer_patch(obj, finalizer, present) else {
            return Ok(None);
        };
        let name = obj.metadata.name.clone().unwrap_or_default();
        self.merge_patch(
            cluster,
            ar,
            obj.metadata.namespace.as_deref(),
            &name,
            &patch,
            field_manager,
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
            Ok(_) => Ok(Deleted::Requested),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Deleted::AlreadyGone),
            Err(e) => Err(e.into()),
        }
    }
}

/// The merge patch that adds or removes `finalizer`, carrying the resourceVersion as an
/// optimistic lock; `None` if nothing needs to change.
pub fn finalizer_patch(obj: &DynamicObject, finalizer: &str, present: bool) -> Option<Value> {
    let current = obj.metadata.finalizers.clone().unwrap_or_default();
    let has = current.iter().any(|f| f == finalizer);
    if has == present {
        return None;
    }
    let next: Vec<String> = if present {
        current.into_iter().chain([finalizer.to_string()]).collect()
    } else {
        current.into_iter().filter(|f| f != finalizer).collect()
    };
    Some(serde_json::json!({
        "metadata": {
            "finalizers": next,
            "resourceVersion": obj.metadata.resource_version,
        }
    }))
}

/// Removes what must never cross clusters: uid, resourceVersion, managedFields,
/// ownerReferences, creationTimestamp, generation, deletion fields, selfLink and finalizers,
/// plus every label and annotation for which `is_bookkeeping` returns true.
pub fn sanitize(obj: &mut DynamicObject, is_bookkeeping: impl Fn(&str) -> bool) {
    let m = &mut obj.metadata;
    m.uid = None;
    m.resource_version = None;
    m.managed_fields = None;
    m.owner_references = None;
    m.creation_timestamp = None;
    m.generation = None;
    m.deletion_timestamp = None;
    m.deletion_grace_period_seconds = None;
    m.self_link = None;
    m.finalizers = None;
    m.generate_name = None;
    if let Some(labels) = &mut m.labels {
        labels.retain(|k, _| !is_bookkeeping(k));
    }
    if let Some(annotations) = &mut m.annotations {
        annotations.retain(|k, _| !is_bookkeeping(k));
    }
}

/// A JSON merge patch (RFC 7386) that turns `old` into `new`: changed and added keys with their
/// new values, removed keys as `null`. Returns `None` when they are equal.
pub fn merge_patch_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_patch_diff(ov, nv) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        out.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            Some(Value::Object(out))
        }
        // A null inside a merge patch means "delete"; a new value that is itself an object
        // containing nulls cannot be expressed, but Kubernetes objects never hold nulls.
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn merge_patch_diff_sets_changes_and_nulls_removals() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "gone": true});
        let new = json!({"a": 1, "b": {"c": 5}, "added": [1]});
        let patch = merge_patch_diff(&old, &new).expect("differs");
        assert_eq!(
            patch,
            json!({"b": {"c": 5, "d": null}, "gone": null, "added": [1]})
        );
        assert_eq!(merge_patch_diff(&new, &new), None);
        // Applying the patch to old gives new.
        let mut applied = old.clone();
        json_patch_merge(&mut applied, &patch);
        assert_eq!(applied, new);
    }

    fn json_patch_merge(target: &mut Value, patch: &Value) {
        if let Value::Object(p) = patch {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_patch_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        } else {
            *target = patch.clone();
        }
    }

    #[test]
    fn finalizer_patch_adds_removes_and_locks() {
        let o = obj(
            json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "resourceVersion": "7", "finalizers": ["other"]}}),
        );
        let add = finalizer_patch(&o, "mine", true).expect("add");
        assert_eq!(
            add,
            json!({"metadata": {"finalizers": ["other", "mine"], "resourceVersion": "7"}})
        );
        assert_eq!(finalizer_patch(&o, "mine", false), None, "absent already");
        assert_eq!(finalizer_patch(&o, "other", true), None, "present already");
        let rm = finalizer_patch(&o, "other", false).expect("remove");
        assert_eq!(
            rm,
            json!({"metadata": {"finalizers": [], "resourceVersion": "7"}})
        );
    }

    #[test]
    fn sanitize_strips_identity_and_bookkeeping() {
        let mut o = obj(json!({
            "apiVersion": "v1", "kind": "X",
            "metadata": {
                "name": "a", "namespace": "n", "uid": "u", "resourceVersion": "1", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Y", "name": "y", "uid": "z"}],
                "managedFields": [{"manager": "m"}],
                "labels": {"keep": "1", "kubesync.io/x": "2"},
                "annotations": {"keep": "1", "kubesync.io/y": "2"}
            },
            "spec": {"v": 1}
        }));
        sanitize(&mut o, |k| k.starts_with("kubesync.io/"));
        let v = serde_json::to_value(&o).expect("json");
        assert_eq!(
            v["metadata"],
            json!({"name": "a", "namespace": "n", "labels": {"keep": "1"}, "annotations": {"keep": "1"}})
        );
        assert_eq!(v["spec"], json!({"v": 1}));
    }
}
