//! The operator's rules for declarations, shared by the controllers that carry them out
//! (ObjectSyncs, ClusterObjectSyncs, and the annotations of `--compat`): what they may do —
//! the `kubesync run` flags, checked purely —, the consent their copies need
//! ([`consent`]), whether the identity one acts as may read its source ([`source_readable`];
//! the review itself in [`review`]), and when to look at one again ([`requeue_after`]).
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

use std::sync::Arc;
use std::time::Duration;

use kubesync::runtime::Action;
use kubesync::syncers::fan_out::record::{RemoveUnrecorded, Unrecorded};
use kubesync::syncers::fan_out::spec::{Admits, Consent, Exempts};
use kubesync::syncers::fan_out::{DestinationRef, DestinationState, Outcome};

use crate::crd::{SyncGrant, SyncGrantSpec};
use crate::remote::{LOCAL, display_name};
use crate::status::{Reason, Refusal};

pub mod admission;
pub mod review;

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

    /// Who removes a copy at `at` that kubesync has no record of making (taken on its marks
    /// alone, which anyone who may patch the object can write), for a declaration that acts
    /// as `acting` there: that identity (RBAC decides whether it may); a declaration that
    /// acts with this process's rights removes it only from a trusted namespace of this
    /// cluster, where tenants write nothing — elsewhere it is left in place, with the reason.
    pub fn unrecorded(&self, at: &DestinationRef, acting: Option<&kubesync::ActAs>) -> Unrecorded {
        if let Some(who) = acting {
            return Unrecorded::As(who.clone());
        }
        let place = if at.cluster != LOCAL {
            format!("cluster {}", at.cluster)
        } else if at.namespace.is_empty() {
            return Unrecorded::Leave(
                "it is cluster-scoped: delete it by hand if it should go".into(),
            );
        } else if self.is_trusted(&at.namespace) {
            return Unrecorded::Own;
        } else {
            format!("namespace {}, which is not trusted", at.namespace)
        };
        Unrecorded::Leave(format!(
            "it is in {place}, where tenants may write marks: delete it by hand if it should go"
        ))
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

/// The consent an ObjectSync in the untrusted `namespace` needs (pure): its own namespace
/// takes the default-grantable kinds without a grant; everything else needs a SyncGrant that
/// admits it, and an adoption one that says `adopt: true` (see [`grant_admits`]).
pub fn consent(policy: &Arc<ObjectSyncPolicy>, namespace: &str, resource: &ApiResource) -> Consent {
    let (ns, ar) = (namespace.to_string(), resource.clone());
    let admits: Admits = {
        let (policy, ns, ar) = (policy.clone(), ns.clone(), ar.clone());
        Arc::new(move |grant, source, at| policy.admits(grant, &ns, via(at), &ar, source))
    };
    let adopts: Admits = {
        let (policy, ns, ar) = (policy.clone(), ns.clone(), ar.clone());
        Arc::new(move |grant, source, at| policy.adopts(grant, &ns, via(at), &ar, source))
    };
    let exempts: Exempts = {
        let (policy, ar) = (policy.clone(), ar.clone());
        Arc::new(move |source| !policy.must_be_named(&ar, source))
    };
    let refusal = {
        let policy = policy.clone();
        Arc::new(move |source: &_, at: &_| {
            let named = policy.must_be_named(&ar, source);
            refusal_message(&ns, via(at), &ar, named, &at.namespace)
        })
    };
    Consent {
        resource: ApiResource::erase::<SyncGrant>(&()),
        exempt: vec![namespace.to_string()],
        max_copies: match policy.max_copies {
            0 => DEFAULT_MAX_COPIES,
            n => n,
        },
        exempts,
        admits,
        adopts,
        refusal,
    }
}

/// Through which RemoteCluster a copy is written: `None` in this cluster.
fn via(at: &DestinationRef) -> Option<&str> {
    (at.cluster != LOCAL).then(|| display_name(&at.cluster))
}

/// The refusal, if any, of a source `who` may or may not read (`answer`, the apiserver's to
/// a review of `verb` on it made as `who`), in words that say what to grant (pure).
pub fn source_readable(
    who: &kubesync::ActAs,
    (verb, ar, namespace, name): (&str, &ApiResource, Option<&str>, Option<&str>),
    answer: kubesync::Result<bool>,
) -> Result<(), Refusal> {
    let what = match name {
        Some(name) => format!("{} {name:?}", ar.plural),
        None => ar.plural.clone(),
    };
    let place = namespace
        .map(|ns| format!(" in namespace {ns}"))
        .unwrap_or_default();
    let group = if ar.group.is_empty() {
        String::new()
    } else {
        format!(" (API group {})", ar.group)
    };
    match answer {
        Ok(true) => Ok(()),
        Ok(false) => Err(Refusal::new(
            Reason::SourceForbidden,
            format!(
                "{who}, which this ObjectSync acts as, may not {verb} {what}{place}: kubesync reads the source only when that ServiceAccount may; grant it {verb} on {}{group}{place} (a Role and a RoleBinding naming it)",
                ar.plural
            ),
        )),
        Err(e) => {
            let forbidden =
                matches!(&e, kubesync::Error::Kube(kube::Error::Api(s)) if s.code == 403);
            let hint = if forbidden {
                " (the operator needs the right to impersonate ServiceAccounts: verb impersonate on serviceaccounts)"
            } else {
                ""
            };
            Err(Refusal::new(
                Reason::SourceForbidden,
                format!(
                    "whether {who} may {verb} {what}{place} could not be asked as it: {e}{hint}"
                ),
            ))
        }
    }
}

/// When to look again (pure): soon while the watches have not listed, in a few seconds while a
/// destination is in error, else on the next event.
pub fn requeue_after(outcome: &Outcome) -> Action {
    if !outcome.ready {
        Action::requeue(Duration::from_millis(500))
    } else if outcome
        .destinations
        .iter()
        .any(|d| d.state == DestinationState::Error)
    {
        Action::requeue(Duration::from_secs(5))
    } else {
        Action::done()
    }
}

#[cfg(test)]
mod tests;

/// [`ObjectSyncPolicy::unrecorded`] as the fan-out asks it.
pub fn unrecorded_removal(policy: Arc<ObjectSyncPolicy>) -> RemoveUnrecorded {
    Arc::new(move |at, acting| policy.unrecorded(at, acting))
}
