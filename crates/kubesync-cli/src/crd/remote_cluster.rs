//! `RemoteCluster`: a cluster kubesync connects to, by a kubeconfig stored in a Secret.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pattern;
use super::{Condition, LabelSelector};

/// Where a kubeconfig is stored: a key of a Secret.
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Namespace of the Secret.
    #[schemars(length(max = 63), pattern(pattern::NAMESPACE_OR_EMPTY))]
    pub namespace: String,
    /// Name of the Secret.
    #[schemars(length(max = 253), pattern(pattern::SUBDOMAIN))]
    pub name: String,
    /// Key in the Secret's data (default `kubeconfig`).
    #[serde(default = "default_kubeconfig_key")]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    "kubeconfig".into()
}

/// A cluster kubesync connects to, by a kubeconfig stored in a Secret.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "kubesync.io",
    version = "v1alpha1",
    kind = "RemoteCluster",
    status = "RemoteClusterStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.serverVersion"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason"}"#,
    printcolumn = r#"{"name":"Source For","type":"integer","jsonPath":".status.sourceFor"}"#,
    printcolumn = r#"{"name":"Destination For","type":"integer","jsonPath":".status.destinationFor"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct RemoteClusterSpec {
    /// The Secret key holding the kubeconfig.
    pub kubeconfig_secret_ref: SecretKeyRef,
    /// The kubeconfig context to use (default: its current context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Namespaces whose ObjectSyncs may write into this cluster, or read their source from
    /// it (`spec.source.cluster`: only from the namespace of their own name there), by their
    /// labels. Absent: only the operator's trusted namespaces. An empty selector (`{}`)
    /// admits every namespace; the remote namespaces' SyncGrants still decide where copies
    /// go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_namespaces: Option<LabelSelector>,
    /// Who declarations of this cluster that act as a ServiceAccount (an ObjectSync's
    /// `spec.serviceAccountName`, or the operator's default) are in the remote cluster: a
    /// ServiceAccount of this namespace there, named `<namespace>.<name>` after theirs
    /// (`t1/copier` writes as `<identityNamespace>/t1.copier`). A ServiceAccount's name means
    /// someone else in another cluster — whoever owns that namespace there — so without this
    /// field such declarations may not write through this RemoteCluster. The remote cluster's
    /// admin owns the namespace, grants those ServiceAccounts what they may copy, and lets
    /// this RemoteCluster's credentials `impersonate` `serviceaccounts` in it (only there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::NAMESPACE_OR_EMPTY))]
    pub identity_namespace: Option<String>,
}

/// Observed state of a [`RemoteCluster`].
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RemoteClusterStatus {
    /// `Ready`: whether the cluster answered, and why not.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The apiserver's version, e.g. `v1.37.2` (condition `VersionSupported` says whether it
    /// is within the range kubesync supports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,
    /// The apiserver URL its kubeconfig names (normalized), once connected. A declaration
    /// whose destinations name two RemoteClusters of the same server is refused
    /// (`DuplicateCluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How many ObjectSyncs and ClusterObjectSyncs read their source from this cluster
    /// (`spec.source.cluster`): it serves as their source (a hub).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_for: Option<u32>,
    /// How many ObjectSyncs and ClusterObjectSyncs write copies into this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination_for: Option<u32>,
}
