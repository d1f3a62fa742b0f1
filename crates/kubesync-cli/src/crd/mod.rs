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
    .into_iter()
    .map(known_formats_only)
    .collect()
}

/// The schema formats the apiserver knows (`k8s.io/kube-openapi`'s format registry, as
/// structural schemas accept them). Any other (`uint32`, which schemars writes for a `u32`)
/// makes every `kubectl apply` and `helm install` of the CRDs print a warning.
const KNOWN_FORMATS: [&str; 24] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// Whether the apiserver knows `format` (also the integer and number formats, `date-time`).
fn is_known_format(format: &str) -> bool {
    KNOWN_FORMATS.contains(&format)
        || matches!(format, "int32" | "int64" | "float" | "double" | "date-time")
}

/// `crd` with every schema format the apiserver does not know removed (the bounds schemars
/// writes with it, such as `minimum: 0` for an unsigned integer, stay).
fn known_formats_only(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                if map
                    .get("format")
                    .and_then(|f| f.as_str())
                    .is_some_and(|f| !is_known_format(f))
                {
                    map.remove("format");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(&crd) else {
        return crd;
    };
    for version in value["spec"]["versions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        strip(&mut version["schema"]["openAPIV3Schema"]);
    }
    serde_json::from_value(value).unwrap_or(crd)
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
    fn every_schema_format_is_one_the_apiserver_knows() {
        let yaml = crds_yaml().expect("yaml");
        let formats: std::collections::BTreeSet<&str> = yaml
            .lines()
            .filter_map(|l| l.trim().strip_prefix("format: "))
            .collect();
        assert!(
            !formats.is_empty(),
            "some formats remain (int64, date-time)"
        );
        for f in &formats {
            assert!(
                is_known_format(f),
                "format {f} would make the apiserver warn"
            );
        }
        assert!(!yaml.contains("uint32"));
        // The bound that came with it stays.
        assert!(yaml.contains("minimum: 0"));
    }

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
