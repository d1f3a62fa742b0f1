//! `SyncGrant`: a namespace's owners' consent to receive copies.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pattern;

/// Consent of a namespace's owners to receive copies: ObjectSyncs outside the operator's
/// trusted namespaces write into another namespace only where a SyncGrant in that namespace
/// admits them. Creating one needs rights in the namespace it lives in, so consent comes from
/// someone who already has them.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "kubesync.io",
    version = "v1alpha1",
    kind = "SyncGrant",
    namespaced,
    printcolumn = r#"{"name":"From","type":"string","jsonPath":".spec.from[*].namespace"}"#,
    printcolumn = r#"{"name":"Kinds","type":"string","jsonPath":".spec.kinds[*].kind"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct SyncGrantSpec {
    /// Whose ObjectSyncs may write here: any entry admits. At most 100.
    #[schemars(length(max = 100))]
    pub from: Vec<GrantSource>,
    /// The kinds admitted; empty: the default-grantable ones only (ConfigMaps, Secrets that
    /// are not service-account tokens, and those the operator's `--grantable-resource` flags
    /// add, less its `--privileged-resource` ones). Every other kind is admitted only when
    /// named here. At most 100.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub kinds: Vec<GrantKind>,
    /// Whether the ObjectSyncs admitted may also adopt an object here that kubesync did not
    /// create (`onConflict: adopt`): they then own, rewrite and may later delete it. Default
    /// false: such an object is a `Conflict`, never written.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
}

/// ObjectSyncs a [`SyncGrant`] admits.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GrantSource {
    /// The namespace of the ObjectSync (a name or a glob, e.g. `team-*`).
    #[schemars(length(max = 63), pattern(pattern::NAMESPACE_GLOB))]
    pub namespace: String,
    /// For copies written from another cluster: the name of the RemoteCluster through which
    /// that cluster's kubesync reaches this one. Absent: writes from this cluster only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), pattern(pattern::SUBDOMAIN))]
    pub cluster: Option<String>,
}

/// A kind a [`SyncGrant`] admits.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GrantKind {
    /// API group (empty for the core group).
    #[serde(default)]
    #[schemars(length(max = 253), pattern(pattern::GROUP))]
    pub group: String,
    /// Kind, e.g. `ConfigMap`.
    #[schemars(length(max = 63), pattern(pattern::KIND))]
    pub kind: String,
}
