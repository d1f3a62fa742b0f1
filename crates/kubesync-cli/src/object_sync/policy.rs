//! What ObjectSyncs may do: the operator's `kubesync run` flags, checked purely.
//!
//! Security: by default the source must live in the ObjectSync's own namespace (whoever may
//! create an ObjectSync in namespace A cannot copy a Secret out of namespace B). The policy
//! allows named source namespaces, restricts destination namespaces, and restricts which kinds
//! may be synced. A refused ObjectSync gets `Ready=False` with the rule that refused it.
//!
//! Tenancy: ObjectSyncs in the operator's trusted namespaces write wherever the flags allow;
//! everyone else writes only into their own namespace, or where a [`SyncGrant`] in the
//! destination namespace admits them ([`grant_admits`]); privilege-bearing kinds need a grant
//! that names them.

use kube::api::DynamicObject;
use kube::core::ApiResource;
use kubesync::syncers::fan_out::rules::glob;

use serde::Deserialize;

use crate::crd::SyncGrantSpec;
use crate::status::Refusal;

/// What ObjectSyncs may do (the operator's flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectSyncPolicy {
    /// Namespaces (names or globs) whose objects any ObjectSync may use as a source, besides
    /// its own namespace.
    pub source_namespaces: Vec<String>,
    /// If not empty, copies go only to namespaces matching one of these (names or globs).
    pub allow_destination_namespaces: Vec<String>,
    /// Copies never go to these namespaces (names or globs).
    pub deny_destination_namespaces: Vec<String>,
    /// If not empty, only these kinds may be synced: `Kind` for the core group or
    /// `Kind.group` (e.g. `Secret`, `ConfigMap`, `CronJob.batch`), or `*`.
    pub allowed_resources: Vec<String>,
    /// Namespaces (names or globs) whose ObjectSyncs write wherever the other rules allow,
    /// without the destinations' consent: the operator's own namespace and
    /// `--trusted-namespace`.
    pub trusted_namespaces: Vec<String>,
    /// Kinds, besides the built-in privilege-bearing ones, that a SyncGrant must name to
    /// admit them (`Kind` or `Kind.group`).
    pub privileged_resources: Vec<String>,
}

/// `Kind` for the core group, else `Kind.group`.
pub fn qualified(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// Kinds that carry privileges: a copy of one in another namespace could grant rights there.
const PRIVILEGED: [&str; 3] = [
    "Role.rbac.authorization.k8s.io",
    "RoleBinding.rbac.authorization.k8s.io",
    "ServiceAccount",
];

/// Whether a grant admits the copy of an object of `resource` (`privileged` or not) from an
/// ObjectSync in `namespace`, written from this cluster (`via` = `None`) or from another
/// cluster's kubesync through its RemoteCluster named `via` (pure).
pub fn grant_admits(
    grant: &SyncGrantSpec,
    namespace: &str,
    via: Option<&str>,
    resource: &ApiResource,
    privileged: bool,
) -> bool {
    let from = grant
        .from
        .iter()
        .any(|f| glob(&f.namespace, namespace) && f.cluster.as_deref() == via);
    let kind = if grant.kinds.is_empty() {
        !privileged
    } else {
        grant
            .kinds
            .iter()
            .any(|k| k.group == resource.group && k.kind == resource.kind)
    };
    from && kind
}

/// Why a destination is refused, and what would admit it.
pub fn refusal_message(
    namespace: &str,
    via: Option<&str>,
    resource: &ApiResource,
    privileged: bool,
    destination: &str,
) -> String {
    let kind = qualified(&resource.group, &resource.kind);
    let from = match via {
        None => format!("{{namespace: {namespace}}}"),
        Some(c) => format!("{{namespace: {namespace}, cluster: {c}}}"),
    };
    let kinds = format!(
        "kinds: [{{group: \"{}\", kind: {}}}]",
        resource.group, resource.kind
    );
    if privileged {
        format!(
            "no SyncGrant in namespace {destination} admits {kind} from {namespace}: ObjectSyncs outside the trusted namespaces write into other namespaces only with their owners' consent, and {kind} is privilege-bearing, so the grant must name it; a SyncGrant in {destination} with from: [{from}] and {kinds} would admit it"
        )
    } else {
        format!(
            "no SyncGrant in namespace {destination} admits {kind} from {namespace}: ObjectSyncs outside the trusted namespaces write into other namespaces only with their owners' consent; a SyncGrant in {destination} with from: [{from}] would admit it"
        )
    }
}

impl ObjectSyncPolicy {
    /// Whether ObjectSyncs in `namespace` are trusted.
    pub fn is_trusted(&self, namespace: &str) -> bool {
        self.trusted_namespaces.iter().any(|g| glob(g, namespace))
    }

    /// Whether a copy of `source` (of type `resource`) could carry privileges.
    pub fn is_privileged(&self, resource: &ApiResource, source: &DynamicObject) -> bool {
        let q = qualified(&resource.group, &resource.kind);
        PRIVILEGED.contains(&q.as_str())
            || self.privileged_resources.contains(&q)
            || (q == "Secret"
                && source.data.get("type").and_then(|t| t.as_str())
                    == Some("kubernetes.io/service-account-token"))
    }

    /// Whether a SyncGrant object (as the engine's store holds it) admits the copy.
    pub fn admits(
        &self,
        grant: &DynamicObject,
        namespace: &str,
        via: Option<&str>,
        resource: &ApiResource,
        source: &DynamicObject,
    ) -> bool {
        // Read in place (no copy of the object); a grant that does not parse admits nothing.
        let Some(Ok(spec)) = grant.data.get("spec").map(SyncGrantSpec::deserialize) else {
            return false;
        };
        grant_admits(
            &spec,
            namespace,
            via,
            resource,
            self.is_privileged(resource, source),
        )
    }

    /// Checks an ObjectSync's spec against the policy (pure). `own_namespace` is the
    /// ObjectSync's; `None` for a ClusterObjectSync, which only cluster admins can declare:
    /// its source may be in any namespace, and the kind and destination rules still apply.
    pub fn check(
        &self,
        own_namespace: Option<&str>,
        source_namespace: &str,
        group: &str,
        kind: &str,
        destinations: &[Option<String>],
    ) -> Result<(), Refusal> {
        if let Some(own_namespace) = own_namespace
            && source_namespace != own_namespace
            && !self
                .source_namespaces
                .iter()
                .any(|g| glob(g, source_namespace))
        {
            return Err(Refusal::new(
                "SourceNamespaceNotAllowed",
                format!(
                    "the source must be in the ObjectSync's namespace {own_namespace:?}; {source_namespace:?} is not among the operator's allowed source namespaces"
                ),
            ));
        }
        let qualified = qualified(group, kind);
        if !self.allowed_resources.is_empty()
            && !self
                .allowed_resources
                .iter()
                .any(|r| r == "*" || *r == qualified)
        {
            return Err(Refusal::new(
                "ResourceNotAllowed",
                format!("{qualified} is not among the operator's allowed resources"),
            ));
        }
        for ns in destinations
            .iter()
            .flatten()
            .filter(|n| !n.is_empty() && n.as_str() != "*")
        {
            if self.deny_destination_namespaces.iter().any(|g| glob(g, ns))
                || (!self.allow_destination_namespaces.is_empty()
                    && !self
                        .allow_destination_namespaces
                        .iter()
                        .any(|g| glob(g, ns)))
            {
                return Err(Refusal::new(
                    "DestinationNotAllowed",
                    format!("destination namespace {ns:?} is not allowed by the operator"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_refuses_with_the_rule_that_refused() {
        let default = ObjectSyncPolicy::default();
        assert!(
            default
                .check(Some("a"), "a", "", "Secret", &[Some("*".into())])
                .is_ok()
        );
        let r = default
            .check(Some("a"), "b", "", "Secret", &[])
            .expect_err("cross-namespace");
        assert_eq!(r.reason, "SourceNamespaceNotAllowed");
        // A ClusterObjectSync (an admin's) copies from any namespace.
        assert!(default.check(None, "b", "", "Secret", &[]).is_ok());
        let p = ObjectSyncPolicy {
            source_namespaces: vec!["shared-*".into()],
            allow_destination_namespaces: vec!["team-*".into()],
            deny_destination_namespaces: vec!["team-secret".into()],
            allowed_resources: vec!["Secret".into(), "CronJob.batch".into()],
            ..Default::default()
        };
        assert!(
            p.check(
                Some("a"),
                "shared-certs",
                "",
                "Secret",
                &[Some("team-x".into())]
            )
            .is_ok()
        );
        assert_eq!(
            p.check(Some("a"), "a", "", "ConfigMap", &[])
                .expect_err("kind")
                .reason,
            "ResourceNotAllowed"
        );
        assert!(p.check(Some("a"), "a", "batch", "CronJob", &[]).is_ok());
        // The kind and destination rules bind a ClusterObjectSync too.
        assert_eq!(
            p.check(None, "", "storage.k8s.io", "StorageClass", &[])
                .expect_err("kind")
                .reason,
            "ResourceNotAllowed"
        );
        assert_eq!(
            p.check(None, "b", "", "Secret", &[Some("prod".into())])
                .expect_err("allow")
                .reason,
            "DestinationNotAllowed"
        );
        assert_eq!(
            p.check(Some("a"), "a", "", "Secret", &[Some("team-secret".into())])
                .expect_err("deny")
                .reason,
            "DestinationNotAllowed"
        );
        assert_eq!(
            p.check(Some("a"), "a", "", "Secret", &[Some("prod".into())])
                .expect_err("allow")
                .reason,
            "DestinationNotAllowed"
        );
    }

    fn resource(group: &str, kind: &str) -> ApiResource {
        ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, "v1", kind))
    }

    fn grant(from: &[(&str, Option<&str>)], kinds: &[(&str, &str)]) -> SyncGrantSpec {
        SyncGrantSpec {
            from: from
                .iter()
                .map(|(ns, c)| crate::crd::GrantSource {
                    namespace: ns.to_string(),
                    cluster: c.map(String::from),
                })
                .collect(),
            kinds: kinds
                .iter()
                .map(|(g, k)| crate::crd::GrantKind {
                    group: g.to_string(),
                    kind: k.to_string(),
                })
                .collect(),
        }
    }

    fn object(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn grants_admit_their_namespaces_clusters_and_kinds() {
        let cm = resource("", "ConfigMap");
        let rb = resource("rbac.authorization.k8s.io", "RoleBinding");
        let any = grant(&[("team-*", None)], &[]);
        assert!(grant_admits(&any, "team-a", None, &cm, false));
        assert!(!grant_admits(&any, "other", None, &cm, false), "namespace");
        assert!(
            !grant_admits(&any, "team-a", Some("hub"), &cm, false),
            "another cluster"
        );
        assert!(
            !grant_admits(&any, "team-a", None, &rb, true),
            "privileged, not named"
        );
        let remote = grant(&[("apps", Some("hub"))], &[]);
        assert!(grant_admits(&remote, "apps", Some("hub"), &cm, false));
        assert!(!grant_admits(&remote, "apps", None, &cm, false));
        let named = grant(
            &[("t1", None)],
            &[("rbac.authorization.k8s.io", "RoleBinding")],
        );
        assert!(grant_admits(&named, "t1", None, &rb, true));
        assert!(
            !grant_admits(&named, "t1", None, &cm, false),
            "only the kinds named"
        );
    }

    #[test]
    fn privilege_bearing_kinds_include_token_secrets_and_flagged_kinds() {
        let p = ObjectSyncPolicy {
            privileged_resources: vec!["Widget.demo.kubesync.io".into()],
            trusted_namespaces: vec!["kubesync-system".into(), "platform-*".into()],
            ..Default::default()
        };
        let plain = object(serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque"}));
        let token = object(serde_json::json!({"metadata": {"name": "s"},
            "type": "kubernetes.io/service-account-token"}));
        assert!(!p.is_privileged(&resource("", "Secret"), &plain));
        assert!(p.is_privileged(&resource("", "Secret"), &token));
        assert!(p.is_privileged(&resource("", "ServiceAccount"), &plain));
        assert!(p.is_privileged(&resource("rbac.authorization.k8s.io", "Role"), &plain));
        assert!(p.is_privileged(&resource("demo.kubesync.io", "Widget"), &plain));
        assert!(!p.is_privileged(&resource("", "ConfigMap"), &plain));
        assert!(p.is_trusted("kubesync-system") && p.is_trusted("platform-eu"));
        assert!(!p.is_trusted("t1"));
    }

    #[test]
    fn a_grant_object_from_the_store_is_read_as_a_syncgrant() {
        let p = ObjectSyncPolicy::default();
        let g = object(
            serde_json::json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "victim"},
            "spec": {"from": [{"namespace": "t1"}], "kinds": [{"kind": "ConfigMap"}]}}),
        );
        let source = object(serde_json::json!({"metadata": {"name": "s"}}));
        assert!(p.admits(&g, "t1", None, &resource("", "ConfigMap"), &source));
        assert!(!p.admits(&g, "t1", None, &resource("", "Secret"), &source));
        let broken = object(
            serde_json::json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "victim"}, "spec": {"from": "everyone"}}),
        );
        assert!(!p.admits(&broken, "t1", None, &resource("", "ConfigMap"), &source));
    }

    #[test]
    fn refusals_say_what_would_admit() {
        let m = refusal_message("t1", None, &resource("", "ConfigMap"), false, "victim");
        assert!(
            m.contains("SyncGrant in victim with from: [{namespace: t1}]"),
            "{m}"
        );
        let m = refusal_message(
            "t1",
            Some("hub"),
            &resource("rbac.authorization.k8s.io", "RoleBinding"),
            true,
            "victim",
        );
        assert!(
            m.contains("privilege-bearing") && m.contains("cluster: hub"),
            "{m}"
        );
        assert!(m.contains("kind: RoleBinding"), "{m}");
    }
}
