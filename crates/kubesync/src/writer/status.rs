//! Status writes: conditioned on the resourceVersion they were decided on, the status
//! serialized once into the request's body, only the resourceVersion of the answer read.

use kube::Resource;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;

use super::{WriteKind, Writer, fingerprint};
use crate::cluster::Cluster;
use crate::error::Result;

impl Writer {
    /// Writes `status` (a merge patch of the status subresource) to the object `observed`, on
    /// the condition that it is still at the resourceVersion the status was decided on: a
    /// status decided on an object someone changed since (another replica that took the work
    /// over while this one was paused, a user's edit) is refused by the apiserver as a
    /// conflict instead of overwriting what was decided on the newer object — the change
    /// brings its own decision.
    ///
    /// A store behind this writer's own writes is not someone else's change: if this writer
    /// wrote the object (its status, a finalizer or another merge patch, by the same
    /// `field_manager`) more recently than `observed` shows, the condition is the version its
    /// own last write left; and the same status sent already is not sent again.
    pub async fn write_status<S: serde::Serialize + ?Sized>(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        observed: &DynamicObject,
        status: &S,
        field_manager: &str,
    ) -> Result<Option<String>> {
        let namespace = observed.metadata.namespace.as_deref();
        let name = observed.metadata.name.as_deref().unwrap_or_default();
        let target = (cluster, ar, namespace, name);
        let own = self.last_written(target, field_manager);
        let seen = observed
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok());
        // Remembered by the status alone: the same status decided again on a store behind
        // this write is the same write, whatever version it would be conditioned on.
        let sent = fingerprint(status);
        if self.sent_already(
            cluster,
            ar,
            observed,
            (WriteKind::Status, field_manager),
            sent,
        ) {
            return Ok(None);
        }
        let basis = match (own, seen) {
            (Some(own), Some(seen)) if own > seen => Some(own.to_string()),
            _ => observed.metadata.resource_version.clone(),
        };
        // The status is serialized once, into the request's body; of the answer (the whole
        // object, its status included) only the resourceVersion is read. A status listing a
        // thousand destinations is a few hundred kilobytes as text and megabytes as a tree.
        let patch = StatusPatch {
            metadata: Basis {
                resource_version: basis.as_deref(),
            },
            status,
        };
        cluster.may_write()?;
        let _timer = self.count(cluster, ar);
        let pp = PatchParams {
            field_manager: Some(field_manager.into()),
            ..Default::default()
        };
        let request = kube::core::Request::new(DynamicObject::url_path(ar, namespace))
            .patch_subresource("status", name, &pp, &Patch::Merge(&patch))
            .map_err(kube::Error::BuildRequest)?;
        let answer: Answer = cluster.client().request(request).await?;
        let resource_version = answer.metadata.resource_version;
        self.remember(
            target,
            (WriteKind::Status, field_manager),
            sent,
            resource_version.as_deref(),
        );
        Ok(Some(resource_version.unwrap_or_default()))
    }
}

/// A status write's body: the resourceVersion it is conditioned on, and the status.
#[derive(serde::Serialize)]
struct StatusPatch<'a, S: ?Sized> {
    metadata: Basis<'a>,
    status: &'a S,
}

/// The resourceVersion a write is conditioned on (left out: none; a `null` would remove it,
/// which the apiserver refuses for a custom resource).
#[derive(serde::Serialize)]
struct Basis<'a> {
    #[serde(rename = "resourceVersion", skip_serializing_if = "Option::is_none")]
    resource_version: Option<&'a str>,
}

/// What is read of a status write's answer: its resourceVersion (serde skips the rest
/// without building it).
#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    metadata: AnswerMeta,
}

#[derive(Default, serde::Deserialize)]
struct AnswerMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}
