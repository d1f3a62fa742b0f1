//! `ResourceSync`: spec/status sync of one kind between a RemoteCluster and this cluster.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pattern;
use super::{Condition, DriftRecord, FieldManagerChange};

/// A resource type, by group, version and kind.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// API group (empty for the core group).
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Widget`.
    pub kind: String,
}

/// How a local object is deleted when its remote goes.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum PropagationPolicy {
    /// Dependents first (default).
    #[default]
    Foreground,
    /// The object first; dependents by the garbage collector.
    Background,
    /// Dependents are left behind.
    Orphan,
}

/// Spec/status sync of one resource type between a remote cluster and this cluster.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "kubesync.io",
    version = "v1alpha1",
    kind = "ResourceSync",
    status = "ResourceSyncStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.resource.kind"}"#,
    printcolumn = r#"{"name":"Remote","type":"string","jsonPath":".spec.remoteCluster"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"In sync","type":"integer","jsonPath":".status.inSync"}"#,
    printcolumn = r#"{"name":"Objects","type":"integer","jsonPath":".status.objects"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSyncSpec {
    /// The synced resource type (needs spec and a status subresource).
    pub resource: ResourceRef,
    /// Name of the RemoteCluster holding the remote objects.
    #[schemars(length(max = 253), pattern(pattern::SUBDOMAIN))]
    pub remote_cluster: String,
    /// Suffix of remote names for this cluster's shard (removed locally).
    #[serde(default)]
    #[schemars(length(max = 63), pattern(pattern::NAMESPACE_PART))]
    pub remote_name_suffix: String,
    /// Suffix appended to remote namespaces to form local namespaces.
    #[serde(default)]
    #[schemars(length(max = 63), pattern(pattern::NAMESPACE_PART))]
    pub local_namespace_suffix: String,
    /// Prefix every synced namespace must have.
    #[serde(default)]
    #[schemars(length(max = 63), pattern(pattern::NAMESPACE_PART))]
    pub namespace_prefix: String,
    /// Local Secrets (controlled by the local object) uploaded onto pre-existing remote
    /// Secrets `<name><remoteNameSuffix>`. At most 100.
    #[serde(default)]
    #[schemars(length(max = 100), inner(length(max = 253)))]
    pub secret_names: Vec<String>,
    /// How often an object's remote Secrets are re-read for repair when the remote identity
    /// may not watch them (see `status.secretRepair`), e.g. `30s`, `2m`, `1m30s` (default
    /// `30s`; at least `1s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_repair_interval: Option<String>,
    /// How local objects are deleted when their remote goes.
    #[serde(default)]
    pub propagation_policy: PropagationPolicy,
    /// Objects reconciled at once (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Domain of annotations and finalizer (default `kubesync.io`; `cloud.teleport.dev` for
    /// sync-controller compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_domain: Option<String>,
}

/// Observed state of a [`ResourceSync`].
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSyncStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: whether the sync runs, and why not.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Remote objects in this shard.
    #[serde(default)]
    pub objects: u32,
    /// Remote objects whose local copy is current: their generation applied, or for a remote
    /// being deleted, its local copy gone.
    #[serde(default)]
    pub in_sync: u32,
    /// Objects paused on either side.
    #[serde(default)]
    pub paused: u32,
    /// Objects whose last reconcile failed.
    #[serde(default)]
    pub failing: u32,
    /// How remote Secrets edited by someone else are noticed (with `spec.secretNames`):
    /// `Watch` when the remote identity may list and watch Secrets, else `Poll` (re-read
    /// every `spec.secretRepairInterval`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_repair: Option<SecretRepairMode>,
    /// The last local copy found changed by someone else and reverted: which object, which
    /// fields, and who (never values). A Warning Event `CopyChanged` names each one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift: Option<LocalDriftRecord>,
}

/// A local copy of a ResourceSync found changed by someone else, and reverted.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LocalDriftRecord {
    /// The local object, `<namespace>/<name>`.
    pub object: String,
    /// When kubesync found it (RFC 3339).
    pub detected_time: String,
    /// The fields other field managers changed.
    pub fields: Vec<String>,
    /// Who changed them, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managers: Vec<FieldManagerChange>,
}

impl LocalDriftRecord {
    /// The record of `drift` of the local object `object`, found at `now`.
    pub fn of(
        object: String,
        drift: &kubesync::syncers::fan_out::rules::Drift,
        now: jiff::Timestamp,
    ) -> Self {
        let DriftRecord {
            detected_time,
            fields,
            managers,
        } = DriftRecord::of(drift, now);
        Self {
            object,
            detected_time,
            fields,
            managers,
        }
    }
}

/// How remote Secrets are repaired; see [`ResourceSyncStatus::secret_repair`].
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum SecretRepairMode {
    /// Watched: repaired at once.
    Watch,
    /// Re-read every `spec.secretRepairInterval`.
    Poll,
}
