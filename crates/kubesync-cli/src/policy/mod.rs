//! What ObjectSyncs may do: the operator's `kubesync run` flags, checked purely.
//!
//! Security: by default the source must live in the ObjectSync's own namespace (whoever may
//! create an ObjectSync in namespace A cannot copy a Secret out of namespace B). The policy
//! allows named source namespaces, restricts destination namespaces, and restricts which kinds
//! may be synced. A refused ObjectSync gets `Ready=False` with the rule that refused it.
//!
//! Tenancy: ObjectSyncs in the operator's trusted namespaces write wherever the flags allow.
//! Everyone else writes by an allow-list: without consent (into their own namespace) and
//! under a [`SyncGrant`](crate::crd::SyncGrant) that names no kinds, only the default-grantable kinds (ConfigMaps,
//! and Secrets that are not service-account tokens; `--grantable-resource` adds kinds); every
//! other kind only where a SyncGrant names it — in their own namespace too, where whoever
//! holds RBAC rights there makes the grant ([`grant_admits`]). kubesync's own kinds are never
//! copied by them, and an object that carries kubesync's copy marks is never consent. Kinds
//! are compared as the apiserver resolves them: an alias group (`extensions`,
//! `events.k8s.io`) is the same kind ([`canonical`]). Adopting an object needs a grant with
//! `adopt: true`, in every namespace ([`grant_adopts`]).

use kube::api::DynamicObject;
use kube::core::ApiResource;
use kubesync::syncers::fan_out::rules::glob;

use serde::Deserialize;

use crate::crd::SyncGrantSpec;
use crate::status::{Reason, Refusal};

/// What ObjectSyncs may do (the operator's flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectSyncPolicy {
    /// Namespaces (names or globs) whose objects any ObjectSync may use as a source, besides
    /// its own namespace.
    pub source_namespaces: Vec<String>,
    /// Namespaces of RemoteClusters that any ObjectSync may read its source from (a pull),
    /// besides the namespace of its own name there: `<RemoteCluster>/<namespace>`, each part
    /// a name or a glob (e.g. `hub/shared-*`, `*/certificates`).
    pub remote_source_namespaces: Vec<String>,
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
    /// Kinds that a SyncGrant must name to admit them even where they would be
    /// default-grantable (`Kind` or `Kind.group`).
    pub privileged_resources: Vec<String>,
    /// Kinds, besides ConfigMaps and Secrets, that untrusted ObjectSyncs may copy into their
    /// own namespace and under grants that name no kinds (`Kind` or `Kind.group`).
    pub grantable_resources: Vec<String>,
    /// At most this many copies per untrusted ObjectSync (0: [`DEFAULT_MAX_COPIES`]).
    pub max_copies: usize,
    /// The ServiceAccount (of its own namespace) an untrusted ObjectSync acts as when its
    /// spec names none (`--default-service-account`); `None`: such an ObjectSync is refused.
    pub default_service_account: Option<String>,
}

/// The annotation (and label) prefixes that make an object a declaration or consent under
/// `--compat`: emberstack reflector's and mittwald kubernetes-replicator's. A declaration that
/// needs its destinations' consent never writes one into a copy (from its source or by a
/// patch), so no copy of it — nor what one keeps once released — ever declares or consents in
/// its destination's name, whether `--compat` is on now or later.
pub const DECLARING_PREFIXES: [&str; 2] = [
    "reflector.v1.k8s.emberstack.com/",
    "replicator.v1.mittwald.de/",
];

/// Copies per untrusted ObjectSync unless `--max-copies-per-declaration` says otherwise.
pub const DEFAULT_MAX_COPIES: usize = 1000;

/// The API group of kubesync's own kinds: never copied by an untrusted declaration.
pub const KUBESYNC_GROUP: &str = "kubesync.io";

/// Kinds an untrusted declaration may copy without a grant that names them.
const DEFAULT_GRANTABLE: [&str; 2] = ["ConfigMap", "Secret"];

/// The group and kind the apiserver serves a kind under when `group` is an alias group that
/// serves the same objects under another name: `extensions` (Ingress, NetworkPolicy under
/// `networking.k8s.io`; Deployment, DaemonSet, ReplicaSet under `apps`; PodSecurityPolicy
/// under `policy`) and `events.k8s.io` Events (the core group's). Every rule compares kinds
/// by this, so no alias slips past a rule written for the other name.
pub fn canonical<'a>(group: &'a str, kind: &'a str) -> (&'a str, &'a str) {
    match (group, kind) {
        ("extensions", "Ingress" | "IngressClass" | "NetworkPolicy") => ("networking.k8s.io", kind),
        ("extensions", "Deployment" | "DaemonSet" | "ReplicaSet") => ("apps", kind),
        ("extensions", "PodSecurityPolicy") => ("policy", kind),
        ("events.k8s.io", "Event") => ("", "Event"),
        _ => (group, kind),
    }
}

/// `Kind` or `Kind.group` of a kind, as [`canonical`] resolves it.
pub fn canonical_name(group: &str, kind: &str) -> String {
    let (group, kind) = canonical(group, kind);
    qualified(group, kind)
}

/// Whether a flag's `Kind[.group]` entry names the kind (aliases resolved on both sides).
fn names_kind(entry: &str, group: &str, kind: &str) -> bool {
    let (k, g) = entry.split_once('.').unwrap_or((entry, ""));
    canonical_name(g, k) == canonical_name(group, kind)
}

/// `Kind` for the core group, else `Kind.group`.
pub fn qualified(group: &str, kind: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

/// Whether a grant admits the copy of an object of `resource` from an ObjectSync in
/// `namespace`, written from this cluster (`via` = `None`) or from another cluster's kubesync
/// through its RemoteCluster named `via` (pure). A grant that names no kinds admits the
/// default-grantable ones only (`named` false); one that names kinds admits those (by
/// [`canonical`] kind).
pub fn grant_admits(
    grant: &SyncGrantSpec,
    namespace: &str,
    via: Option<&str>,
    resource: &ApiResource,
    named: bool,
) -> bool {
    let from = grant
        .from
        .iter()
        .any(|f| glob(&f.namespace, namespace) && f.cluster.as_deref() == via);
    let kind = if grant.kinds.is_empty() {
        !named
    } else {
        let wanted = canonical(&resource.group, &resource.kind);
        grant
            .kinds
            .iter()
            .any(|k| canonical(&k.group, &k.kind) == wanted)
    };
    from && kind
}

/// Whether a grant admits adopting an object (of `resource`) as the copy of an ObjectSync in
/// `namespace`: it admits the copy ([`grant_admits`]) and says `adopt: true` (pure).
pub fn grant_adopts(
    grant: &SyncGrantSpec,
    namespace: &str,
    via: Option<&str>,
    resource: &ApiResource,
    named: bool,
) -> bool {
    grant.adopt && grant_admits(grant, namespace, via, resource, named)
}

/// Why a destination is refused, and what would admit it.
pub fn refusal_message(
    namespace: &str,
    via: Option<&str>,
    resource: &ApiResource,
    named: bool,
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
    if named && destination == namespace && via.is_none() {
        format!(
            "no SyncGrant in namespace {destination} admits {kind} from {namespace}: outside the trusted namespaces an ObjectSync copies only ConfigMaps and Secrets (not service-account tokens) without a grant that names the kind, also into its own namespace; a SyncGrant in {destination} with from: [{from}] and {kinds}, made by someone with RBAC rights there, would admit it"
        )
    } else if named {
        format!(
            "no SyncGrant in namespace {destination} admits {kind} from {namespace}: ObjectSyncs outside the trusted namespaces write into other namespaces only with their owners' consent, and a grant admits kinds other than ConfigMaps and Secrets (not service-account tokens) only when it names them; a SyncGrant in {destination} with from: [{from}] and {kinds} would admit it"
        )
    } else {
        format!(
            "no SyncGrant in namespace {destination} admits {kind} from {namespace}: ObjectSyncs outside the trusted namespaces write into other namespaces only with their owners' consent; a SyncGrant in {destination} with from: [{from}] would admit it"
        )
    }
}

impl ObjectSyncPolicy {
    /// Who a declaration in `namespace` that names no ServiceAccount acts as: the operator's
    /// own rights in a trusted namespace (`None`), else the `--default-service-account` of
    /// `namespace`; `Err` says, for people, why it may not act at all (no default is set).
    /// What an object's reflector or replicator annotations declare acts so (they can name
    /// no ServiceAccount).
    pub fn default_identity(&self, namespace: &str) -> Result<Option<kubesync::ActAs>, String> {
        if self.is_trusted(namespace) {
            return Ok(None);
        }
        match self.default_service_account.as_deref() {
            Some(sa) => kubesync::ActAs::service_account(namespace, sa)
                .map(Some)
                .map_err(|e| e.to_string()),
            None => Err(format!(
                "declarations outside the operator's trusted namespaces act as a ServiceAccount of their own namespace, and annotations can name none: the operator's admin sets --default-service-account (then RBAC decides what namespace {namespace}'s declarations may copy)"
            )),
        }
    }

    /// Whether ObjectSyncs in `namespace` are trusted.
    pub fn is_trusted(&self, namespace: &str) -> bool {
        self.trusted_namespaces.iter().any(|g| glob(g, namespace))
    }

    /// Whether a copy of `source` (of type `resource`) needs a SyncGrant that names its kind:
    /// every kind but the default-grantable ones (ConfigMap, Secret, and those of
    /// `--grantable-resource`), and those too when `--privileged-resource` names them or the
    /// object is a service-account token Secret (as it will be written: a patch may make one).
    pub fn must_be_named(&self, resource: &ApiResource, source: &DynamicObject) -> bool {
        let (group, kind) = (resource.group.as_str(), resource.kind.as_str());
        let grantable = DEFAULT_GRANTABLE
            .iter()
            .copied()
            .chain(self.grantable_resources.iter().map(String::as_str))
            .any(|entry| names_kind(entry, group, kind));
        let token = canonical(group, kind) == ("", "Secret")
            && source.data.get("type").and_then(|t| t.as_str())
                == Some("kubernetes.io/service-account-token");
        !grantable
            || token
            || self
                .privileged_resources
                .iter()
                .any(|entry| names_kind(entry, group, kind))
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
        self.judge(grant, namespace, via, resource, source, grant_admits)
    }

    /// Whether a SyncGrant object admits adopting the object at a destination.
    pub fn adopts(
        &self,
        grant: &DynamicObject,
        namespace: &str,
        via: Option<&str>,
        resource: &ApiResource,
        source: &DynamicObject,
    ) -> bool {
        self.judge(grant, namespace, via, resource, source, grant_adopts)
    }

    /// A SyncGrant object judged by `rule` ([`grant_admits`] or [`grant_adopts`]).
    fn judge(
        &self,
        grant: &DynamicObject,
        namespace: &str,
        via: Option<&str>,
        resource: &ApiResource,
        source: &DynamicObject,
        rule: fn(&SyncGrantSpec, &str, Option<&str>, &ApiResource, bool) -> bool,
    ) -> bool {
        self.read_grant(grant).is_some_and(|spec| {
            rule(
                &spec,
                namespace,
                via,
                resource,
                self.must_be_named(resource, source),
            )
        })
    }

    /// A SyncGrant object's spec, read in place (no copy of the object). A grant that does
    /// not parse, or that is itself a copy kubesync made (it carries the `managed-by` mark),
    /// is no consent.
    fn read_grant(&self, grant: &DynamicObject) -> Option<SyncGrantSpec> {
        let marked = grant
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(kubesync::syncers::fan_out::rules::MANAGED_BY));
        if marked {
            return None;
        }
        grant.data.get("spec").map(SyncGrantSpec::deserialize)?.ok()
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
        self.check_from(
            own_namespace,
            None,
            source_namespace,
            group,
            kind,
            destinations,
        )
    }

    /// [`Self::check`] of a source read from the RemoteCluster `cluster` (`None`: this
    /// cluster). The source-namespace rule is carried across: an ObjectSync reads from the
    /// namespace of its own name there, or from one the operator allows for that cluster
    /// ([`remote_source_namespaces`](Self::remote_source_namespaces)); the local
    /// `source_namespaces` name this cluster's namespaces only.
    pub fn check_from(
        &self,
        own_namespace: Option<&str>,
        cluster: Option<&str>,
        source_namespace: &str,
        group: &str,
        kind: &str,
        destinations: &[Option<String>],
    ) -> Result<(), Refusal> {
        if let Some(own_namespace) = own_namespace
            && source_namespace != own_namespace
        {
            self.check_source_namespace(own_namespace, cluster, source_namespace)?;
        }
        self.check_kind(own_namespace, group, kind)?;
        self.check_destinations(destinations)
    }

    /// The source-namespace rule for an ObjectSync in `own_namespace` whose source is in
    /// another, `source_namespace`, of the RemoteCluster `cluster` (`None`: this cluster).
    fn check_source_namespace(
        &self,
        own_namespace: &str,
        cluster: Option<&str>,
        source_namespace: &str,
    ) -> Result<(), Refusal> {
        match cluster {
            None if !self
                .source_namespaces
                .iter()
                .any(|g| glob(g, source_namespace)) =>
            {
                Err(Refusal::new(
                    Reason::SourceNamespaceNotAllowed,
                    format!(
                        "the source must be in the ObjectSync's namespace {own_namespace:?}; {source_namespace:?} is not among the operator's allowed source namespaces"
                    ),
                ))
            }
            Some(c)
                if !self.remote_source_namespaces.iter().any(|entry| {
                    entry
                        .split_once('/')
                        .is_some_and(|(cg, ng)| glob(cg, c) && glob(ng, source_namespace))
                }) =>
            {
                Err(Refusal::new(
                    Reason::SourceNamespaceNotAllowed,
                    format!(
                        "a source read from RemoteCluster {c} must be in the namespace of the ObjectSync's own name there ({own_namespace:?}); {c}/{source_namespace} is not among the operator's allowed remote source namespaces"
                    ),
                ))
            }
            _ => Ok(()),
        }
    }

    /// The kind rules: kubesync's own kinds only from the trusted namespaces (or a
    /// ClusterObjectSync, `own_namespace` `None`), and only the allowed resources.
    fn check_kind(
        &self,
        own_namespace: Option<&str>,
        group: &str,
        kind: &str,
    ) -> Result<(), Refusal> {
        let qualified = canonical_name(group, kind);
        if let Some(own) = own_namespace.filter(|ns| !self.is_trusted(ns))
            && canonical(group, kind).0 == KUBESYNC_GROUP
        {
            return Err(Refusal::new(
                Reason::ResourceNotAllowed,
                format!(
                    "{qualified} is one of kubesync's own kinds: an ObjectSync outside the trusted namespaces never copies them (a copied declaration or grant would act with the authority of the namespace it lands in); namespace {own} is not trusted"
                ),
            ));
        }
        if !self.allowed_resources.is_empty()
            && !self
                .allowed_resources
                .iter()
                .any(|r| r == "*" || names_kind(r, group, kind))
        {
            return Err(Refusal::new(
                Reason::ResourceNotAllowed,
                format!("{qualified} is not among the operator's allowed resources"),
            ));
        }
        Ok(())
    }

    /// The destination-namespace rules, for each destination that names one namespace.
    fn check_destinations(&self, destinations: &[Option<String>]) -> Result<(), Refusal> {
        for ns in destinations
            .iter()
            .flatten()
            .filter(|n| !n.is_empty() && n.as_str() != "*")
        {
            if let Some(rule) = self.refusing_rule(ns) {
                return Err(Refusal::new(
                    Reason::DestinationNotAllowed,
                    format!("destination namespace {ns:?} is not allowed by the operator ({rule})"),
                ));
            }
        }
        Ok(())
    }

    /// The rule that refuses the destination namespace `ns`, named as the admin set it;
    /// `None` if it is allowed.
    fn refusing_rule(&self, ns: &str) -> Option<String> {
        match self
            .deny_destination_namespaces
            .iter()
            .find(|g| glob(g, ns))
        {
            Some(denied) => Some(format!("--deny-destination-namespace {denied}")),
            None if !self.allow_destination_namespaces.is_empty()
                && !self
                    .allow_destination_namespaces
                    .iter()
                    .any(|g| glob(g, ns)) =>
            {
                Some(format!(
                    "--allow-destination-namespace {}",
                    self.allow_destination_namespaces.join(", ")
                ))
            }
            None => None,
        }
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
        let denied = p
            .check(Some("a"), "a", "", "Secret", &[Some("team-secret".into())])
            .expect_err("deny");
        assert_eq!(denied.reason, "DestinationNotAllowed");
        // Each refusal names the flag that refuses it.
        assert!(
            denied
                .message
                .ends_with("(--deny-destination-namespace team-secret)"),
            "{}",
            denied.message
        );
        let outside = p
            .check(Some("a"), "a", "", "Secret", &[Some("prod".into())])
            .expect_err("allow");
        assert!(
            outside
                .message
                .ends_with("(--allow-destination-namespace team-*)"),
            "{}",
            outside.message
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
            adopt: false,
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
    fn only_default_grantable_kinds_go_without_a_grant_that_names_them() {
        let p = ObjectSyncPolicy {
            privileged_resources: vec!["Secret".into()],
            grantable_resources: vec!["Widget.demo.kubesync.io".into()],
            trusted_namespaces: vec!["kubesync-system".into(), "platform-*".into()],
            ..Default::default()
        };
        let plain = object(serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque"}));
        let token = object(serde_json::json!({"metadata": {"name": "s"},
            "type": "kubernetes.io/service-account-token"}));
        let default = ObjectSyncPolicy::default();
        // The allow-list: ConfigMaps and Secrets that are not tokens; nothing else.
        assert!(!default.must_be_named(&resource("", "ConfigMap"), &plain));
        assert!(!default.must_be_named(&resource("", "Secret"), &plain));
        assert!(default.must_be_named(&resource("", "Secret"), &token));
        for (group, kind) in [
            ("", "ServiceAccount"),
            ("rbac.authorization.k8s.io", "Role"),
            ("apps", "Deployment"),
            ("", "ResourceQuota"),
            ("argoproj.io", "Application"),
            ("demo.kubesync.io", "Widget"),
        ] {
            assert!(
                default.must_be_named(&resource(group, kind), &plain),
                "{kind}"
            );
        }
        // An admin widens the list, and narrows it.
        assert!(!p.must_be_named(&resource("demo.kubesync.io", "Widget"), &plain));
        assert!(p.must_be_named(&resource("", "Secret"), &plain));
        assert!(p.is_trusted("kubesync-system") && p.is_trusted("platform-eu"));
        assert!(!p.is_trusted("t1"));
    }

    #[test]
    fn alias_groups_are_the_same_kind_for_every_rule() {
        assert_eq!(
            canonical("extensions", "Ingress"),
            ("networking.k8s.io", "Ingress")
        );
        assert_eq!(canonical("events.k8s.io", "Event"), ("", "Event"));
        assert_eq!(canonical("apps", "Deployment"), ("apps", "Deployment"));
        let p = ObjectSyncPolicy {
            grantable_resources: vec!["Ingress.networking.k8s.io".into(), "Event".into()],
            privileged_resources: vec!["Ingress.networking.k8s.io".into()],
            allowed_resources: vec!["Event".into()],
            ..Default::default()
        };
        let o = object(serde_json::json!({"metadata": {"name": "x"}}));
        // --privileged-resource on one name holds for the alias.
        assert!(p.must_be_named(&resource("extensions", "Ingress"), &o));
        assert!(!p.must_be_named(&resource("events.k8s.io", "Event"), &o));
        assert!(
            p.check(Some("a"), "a", "events.k8s.io", "Event", &[])
                .is_ok()
        );
        // A grant naming one name admits the alias.
        let g = grant(&[("t1", None)], &[("networking.k8s.io", "Ingress")]);
        assert!(grant_admits(
            &g,
            "t1",
            None,
            &resource("extensions", "Ingress"),
            true
        ));
    }

    #[test]
    fn kubesyncs_own_kinds_are_never_copied_by_an_untrusted_declaration() {
        let p = ObjectSyncPolicy {
            trusted_namespaces: vec!["kubesync-system".into()],
            ..Default::default()
        };
        for kind in ["ObjectSync", "SyncGrant", "RemoteCluster"] {
            let r = p
                .check(Some("t1"), "t1", "kubesync.io", kind, &[])
                .expect_err(kind);
            assert_eq!(r.reason, "ResourceNotAllowed");
            assert!(r.message.contains("kubesync's own kinds"), "{}", r.message);
        }
        assert!(
            p.check(
                Some("kubesync-system"),
                "kubesync-system",
                "kubesync.io",
                "ObjectSync",
                &[]
            )
            .is_ok()
        );
        assert!(
            p.check(None, "apps", "kubesync.io", "ObjectSync", &[])
                .is_ok()
        );
    }

    #[test]
    fn adoption_needs_a_grant_that_says_so_and_a_copy_is_never_consent() {
        let cm = resource("", "ConfigMap");
        let mut g = grant(&[("t1", None)], &[]);
        assert!(grant_admits(&g, "t1", None, &cm, false));
        assert!(!grant_adopts(&g, "t1", None, &cm, false));
        g.adopt = true;
        assert!(grant_adopts(&g, "t1", None, &cm, false));
        assert!(!grant_adopts(&g, "t2", None, &cm, false));
        let p = ObjectSyncPolicy::default();
        let source = object(serde_json::json!({"metadata": {"name": "s"}}));
        let planted = object(
            serde_json::json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "victim",
                "labels": {"kubesync.io/managed-by": "0000"}},
            "spec": {"from": [{"namespace": "t1"}], "kinds": [{"kind": "ConfigMap"}], "adopt": true}}),
        );
        assert!(!p.admits(&planted, "t1", None, &cm, &source));
        assert!(!p.adopts(&planted, "t1", None, &cm, &source));
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
            m.contains("only when it names them") && m.contains("cluster: hub"),
            "{m}"
        );
        assert!(m.contains("kind: RoleBinding"), "{m}");
    }
}
