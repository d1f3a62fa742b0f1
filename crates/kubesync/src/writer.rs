//! The one place that writes synced objects.
//!
//! Every write the library's syncers send — copies, finalizers, status, namespaces, deletions —
//! goes through a [`Writer`], which counts them per cluster and resource (so tests and
//! benchmarks can prove that a reconcile of an object in sync writes nothing). The `kubesync`
//! binary sends its own resources' status and finalizers through it too; only its leader
//! election Lease and its Events are written elsewhere (by their own clients). The writer
//! makes no decisions: what to write comes from the pure plans, and the object helpers it
//! needs are in [`crate::object`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube::core::ApiResource;
use serde_json::Value;

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
        let Some(patch) = crate::object::finalizer_patch(obj, finalizer, present) else {
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
