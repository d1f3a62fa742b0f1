//! The custom resources of the `kubesync.io` API group, version `v1alpha1`, one module per
//! resource; everything is re-exported here.

use kube::core::CustomResourceExt;

/// API group of kubesync's custom resources.
pub const GROUP: &str = "kubesync.io";

/// A status condition: `metav1.Condition` (`lastTransitionTime` is required; the operator
/// keeps it unchanged while a condition's status does not change).
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
/// A label selector (`matchLabels`, `matchExpressions`): `metav1.LabelSelector`.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Patterns the apiserver checks at admission (the operator checks the same and more, with
/// the field's path in its refusal; see `kubesync::validate`).
pub(crate) mod pattern {
    /// An API group: empty (the core group) or a DNS subdomain.
    pub const GROUP: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";
    /// An API version, e.g. `v1beta1`.
    pub const VERSION: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
    /// A kind, e.g. `ConfigMap`.
    pub const KIND: &str = r"^[A-Za-z][A-Za-z0-9]*$";
    /// A namespace's name, or empty.
    pub const NAMESPACE_OR_EMPTY: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$";
    /// A namespace's name, `*` (all), or empty (all).
    pub const NAMESPACE_OR_ALL: &str = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)?$";
    /// A namespace glob: what a namespace's name holds, and `*` and `?`.
    pub const NAMESPACE_GLOB: &str = r"^[a-z0-9*?-]+$";
    /// A DNS subdomain (RemoteClusters', Secrets' names).
    pub const SUBDOMAIN: &str =
        r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
    /// Any kind's object name, or part of one: no `/` or `%`.
    pub const NAME_PART: &str = r"^[^/%]*$";
    /// Lowercase letters, digits and `-`: a part of a namespace's name.
    pub const NAMESPACE_PART: &str = r"^[a-z0-9-]*$";
}

mod object_sync;
mod reference;
mod remote_cluster;
mod resource_sync;
mod sync_grant;

pub use object_sync::*;
pub use reference::fields_reference;
pub use remote_cluster::*;
pub use resource_sync::*;
pub use sync_grant::*;

/// The CRDs of every kubesync resource.
pub fn crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    vec![
        RemoteCluster::crd(),
        ResourceSync::crd(),
        ObjectSync::crd(),
        ClusterObjectSync::crd(),
        SyncGrant::crd(),
    ]
}

/// The CRDs as a multi-document YAML manifest (what `kubesync crds` prints).
pub fn crds_yaml() -> Result<String, serde_saphyr::ser_error::Error> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_have_the_right_names_scope_and_columns() {
        let crds = crds();
        let names: Vec<_> = crds
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "remoteclusters.kubesync.io",
                "resourcesyncs.kubesync.io",
                "objectsyncs.kubesync.io",
                "clusterobjectsyncs.kubesync.io",
                "syncgrants.kubesync.io"
            ]
        );
        for crd in &crds {
            let scope = if matches!(crd.spec.names.kind.as_str(), "ObjectSync" | "SyncGrant") {
                "Namespaced"
            } else {
                "Cluster"
            };
            assert_eq!(crd.spec.scope, scope);
            let v = &crd.spec.versions[0];
            assert_eq!(v.name, "v1alpha1");
            // A SyncGrant is consent, written by people: it has no status.
            assert_eq!(
                v.subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                crd.spec.names.kind != "SyncGrant"
            );
            assert!(
                v.additional_printer_columns
                    .as_ref()
                    .is_some_and(|c| c.len() >= 3)
            );
        }
        let yaml = crds_yaml().expect("yaml");
        assert_eq!(yaml.matches("kind: CustomResourceDefinition").count(), 5);
    }

    #[test]
    fn spec_defaults() {
        let rs: ResourceSyncSpec = serde_json::from_value(serde_json::json!({
            "resource": {"version": "v1", "kind": "Widget"}, "remoteCluster": "mgmt"
        }))
        .expect("parse");
        assert_eq!(rs.resource.group, "");
        assert_eq!(rs.propagation_policy, PropagationPolicy::Foreground);
        assert!(rs.secret_names.is_empty());
        let rc: RemoteClusterSpec = serde_json::from_value(serde_json::json!({
            "kubeconfigSecretRef": {"namespace": "kubesync", "name": "mgmt"}
        }))
        .expect("parse");
        assert_eq!(rc.kubeconfig_secret_ref.key, "kubeconfig");
    }
}
