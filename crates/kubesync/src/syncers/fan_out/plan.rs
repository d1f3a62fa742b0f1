//! The fan-out's decision for one declaration: observed state in, actions out. Pure: the
//! stores are read through [`Stores`], nothing is written, nothing waits.
//!
//! [`plan`] chooses the destinations (never the source itself), decides per destination with
//! [`rules::decide`], and deletes this declaration's copies that are no longer wanted — except
//! in clusters that cannot be checked and in namespaces the Namespace store does not show yet.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::rules::{self, Decision, Strategy};
use super::spec::{
    Consent, Declaration, Destination, DestinationRef, DestinationState, DestinationStatus,
};

/// What the plan reads from the engine's stores.
pub trait Stores {
    /// The namespaces of `cluster`, as its Namespace store shows them.
    fn namespaces(&self, cluster: &str) -> Vec<Arc<DynamicObject>>;
    /// Whether the Namespace store of `cluster` shows `namespace`.
    fn has_namespace(&self, cluster: &str, namespace: &str) -> bool;
    /// The object at `at`, as the store of the copied type shows it.
    fn object(&self, at: &DestinationRef) -> Option<Arc<DynamicObject>>;
    /// The consent objects (see [`Consent`]) in `namespace` of `cluster`.
    fn consents(&self, cluster: &str, namespace: &str) -> Vec<Arc<DynamicObject>>;
}

/// What one reconcile observed.
pub struct Snapshot<'a, S> {
    /// The engine's own cluster, where sources live.
    pub local: &'a str,
    /// The declaration.
    pub declaration: &'a Declaration,
    /// The source, if it exists and neither it nor the declaration is being deleted.
    pub source: Option<&'a DynamicObject>,
    /// Destination clusters the runtime does not know.
    pub unknown_clusters: &'a [String],
    /// Clusters whose watches fail: nothing is created, updated or deleted there.
    pub unreachable: &'a BTreeSet<String>,
    /// The copies this declaration has (found by their marks), by destination.
    pub owned: &'a BTreeMap<DestinationRef, Arc<DynamicObject>>,
    /// The stores.
    pub stores: &'a S,
}

/// A copy to write.
#[derive(Clone, Debug)]
pub struct Write {
    /// Where.
    pub at: DestinationRef,
    /// The copy as it must be.
    pub desired: DynamicObject,
    /// What the store showed there (the decision was made on it).
    pub existing: Option<Arc<DynamicObject>>,
    /// How it is written.
    pub strategy: Strategy,
    /// [`Decision::Create`], [`Decision::Update`] or [`Decision::Adopt`].
    pub decision: Decision,
}

/// A copy of this declaration to delete, or to release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// Where.
    pub at: DestinationRef,
    /// The copy's uid: the delete's (or release's) precondition.
    pub uid: Option<String>,
    /// Keep the object and remove kubesync's marks instead ([`rules::orphans`]).
    pub orphan: bool,
}

/// What a reconcile does.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Copies to create or update.
    pub writes: Vec<Write>,
    /// Copies to delete.
    pub deletes: Vec<Delete>,
    /// Destinations whose state is known without writing (in sync, conflicts, unknown or
    /// unreachable clusters).
    pub statuses: Vec<DestinationStatus>,
    /// The source resourceVersion the copies will carry.
    pub source_resource_version: String,
}

/// Whether a source missing from its store must be confirmed gone by a live read before
/// anything is decided: the store may be a moment behind the cluster, and copies would be
/// deleted for it.
pub fn must_confirm_source_gone(in_store: bool, deleting: bool, copies: usize) -> bool {
    !in_store && !deleting && copies > 0
}

/// Decides what one reconcile of `snapshot.declaration` does.
pub fn plan<S: Stores>(snapshot: &Snapshot<'_, S>) -> Plan {
    let Snapshot {
        declaration: decl,
        source,
        unreachable,
        owned,
        stores,
        ..
    } = snapshot;
    let spec = &decl.spec;
    let ar = &spec.source.resource;
    let mut plan = Plan {
        source_resource_version: source
            .and_then(|s| s.metadata.resource_version.clone())
            .unwrap_or_default(),
        ..Plan::default()
    };
    let targets = match source {
        Some(source) => targets(snapshot, source, &mut plan.statuses),
        None => BTreeMap::new(),
    };
    if let Some(source) = source {
        let mark = rules::source_mark(ar, &spec.source.namespace, &spec.source.name);
        for (at, dest) in &targets {
            let strategy = &dest.strategy;
            if unreachable.contains(&at.cluster) {
                plan.statuses.push(DestinationStatus::new(
                    at,
                    DestinationState::Error,
                    format!("cluster {} is unreachable", at.cluster),
                    "",
                ));
                continue;
            }
            let desired = rules::desired_copy(
                ar,
                source,
                &at.namespace,
                &at.name,
                &spec.rules,
                &decl.owner,
                &mark,
            );
            let desired = match rules::patched(desired, &dest.patches) {
                Ok(desired) => desired,
                // Nothing is written there (an existing copy stays as it is).
                Err(message) => {
                    plan.statuses.push(DestinationStatus::new(
                        at,
                        DestinationState::Error,
                        message,
                        "",
                    ));
                    continue;
                }
            };
            // Consent was given for the source; a patched copy is judged again as it will be
            // written (a patch may turn a plain Secret into a privilege-bearing one).
            if let Some(consent) = &spec.consent
                && !dest.patches.is_empty()
                && !consented(consent, snapshot.local, *stores, &desired, at)
            {
                plan.statuses.push(DestinationStatus::new(
                    at,
                    DestinationState::Refused,
                    (consent.refusal)(&desired, at),
                    "",
                ));
                continue;
            }
            let existing = stores.object(at);
            let decision = rules::decide(
                existing.as_deref(),
                &desired,
                &decl.owner,
                *strategy,
                spec.on_conflict,
            );
            match decision {
                Decision::InSync => plan.statuses.push(DestinationStatus::new(
                    at,
                    DestinationState::Synced,
                    String::new(),
                    &plan.source_resource_version,
                )),
                Decision::Conflict(message) => plan.statuses.push(DestinationStatus::new(
                    at,
                    DestinationState::Conflict,
                    message,
                    "",
                )),
                Decision::Create | Decision::Update | Decision::Adopt => {
                    plan.writes.push(Write {
                        at: at.clone(),
                        desired,
                        existing,
                        strategy: *strategy,
                        decision,
                    });
                }
            }
        }
    }
    for (at, copy) in owned.iter() {
        // Unwanted copies go, but not where the cluster cannot be checked, and not while the
        // Namespace store does not show the copy's namespace: the copy exists, so its
        // namespace does, and the store is behind — not a sign the copy is unwanted.
        if targets.contains_key(at)
            || unreachable.contains(&at.cluster)
            || !stores.has_namespace(&at.cluster, &at.namespace)
        {
            continue;
        }
        plan.deletes.push(Delete {
            at: at.clone(),
            uid: copy.metadata.uid.clone(),
            orphan: rules::orphans(copy, spec.deletion_policy, source.is_none()),
        });
    }
    plan
}

/// Whether the owners of `at`'s namespace consent to the copy of `source` there.
pub fn consented<S: Stores>(
    consent: &Consent,
    local: &str,
    stores: &S,
    source: &DynamicObject,
    at: &DestinationRef,
) -> bool {
    (at.cluster == local && consent.exempt.contains(&at.namespace))
        || stores
            .consents(&at.cluster, &at.namespace)
            .iter()
            .any(|grant| (consent.admits)(grant, source, at))
}

/// The destinations the spec selects, with the destination entry that selected each (the
/// first that selects one wins: its strategy and patches apply). Destinations in unknown clusters get an error status instead; so do
/// namespaces a destination names that refuse their consent.
fn targets<'a, S: Stores>(
    snapshot: &Snapshot<'a, S>,
    source: &DynamicObject,
    statuses: &mut Vec<DestinationStatus>,
) -> BTreeMap<DestinationRef, &'a Destination> {
    let spec = &snapshot.declaration.spec;
    let mut targets = BTreeMap::new();
    let mut refused = BTreeSet::new();
    for d in &spec.destinations {
        let cluster = d.cluster.as_deref().unwrap_or(snapshot.local);
        if snapshot.unknown_clusters.iter().any(|c| c == cluster) {
            statuses.push(DestinationStatus::new(
                &DestinationRef::new(cluster, "", ""),
                DestinationState::Error,
                format!("unknown cluster {cluster:?}"),
                "",
            ));
            continue;
        }
        let name = d.name.as_deref().unwrap_or(&spec.source.name);
        for ns in snapshot.stores.namespaces(cluster) {
            let namespace = ns.name_any();
            if !d.namespaces.matches(
                &namespace,
                ns.labels(),
                ns.metadata.deletion_timestamp.is_some(),
            ) {
                continue;
            }
            // Never copy the source onto itself.
            if cluster == snapshot.local
                && namespace == spec.source.namespace
                && name == spec.source.name
            {
                continue;
            }
            let at = DestinationRef::new(cluster, namespace, name);
            if targets.contains_key(&at) {
                continue;
            }
            if let Some(consent) = &spec.consent
                && !consented(consent, snapshot.local, snapshot.stores, source, &at)
            {
                if d.namespaces.names(&at.namespace) && refused.insert(at.clone()) {
                    statuses.push(DestinationStatus::new(
                        &at,
                        DestinationState::Refused,
                        (consent.refusal)(source, &at),
                        "",
                    ));
                }
                continue;
            }
            targets.insert(at, d);
        }
    }
    targets
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use k8s_openapi::api::core::v1::Secret;
    use kube::core::ApiResource;
    use serde_json::json;

    use super::*;
    use crate::key::ObjectKey;
    use crate::syncers::fan_out::rules::{CopyRules, MANAGED_BY, NamespaceRule, OnConflict, Owner};
    use crate::syncers::fan_out::spec::{Destination, FanOutSpec, SourceRef};

    /// Stores held in maps.
    #[derive(Default)]
    struct Fake {
        namespaces: HashMap<String, Vec<Arc<DynamicObject>>>,
        objects: HashMap<DestinationRef, Arc<DynamicObject>>,
        consents: HashMap<(String, String), Vec<Arc<DynamicObject>>>,
    }

    impl Stores for Fake {
        fn namespaces(&self, cluster: &str) -> Vec<Arc<DynamicObject>> {
            self.namespaces.get(cluster).cloned().unwrap_or_default()
        }
        fn has_namespace(&self, cluster: &str, namespace: &str) -> bool {
            self.namespaces(cluster)
                .iter()
                .any(|n| n.name_any() == namespace)
        }
        fn object(&self, at: &DestinationRef) -> Option<Arc<DynamicObject>> {
            self.objects.get(at).cloned()
        }
        fn consents(&self, cluster: &str, namespace: &str) -> Vec<Arc<DynamicObject>> {
            self.consents
                .get(&(cluster.to_string(), namespace.to_string()))
                .cloned()
                .unwrap_or_default()
        }
    }

    impl Fake {
        fn with_namespaces(mut self, cluster: &str, names: &[(&str, serde_json::Value)]) -> Self {
            let list = names
                .iter()
                .map(|(n, labels)| {
                    Arc::new(obj(json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": n, "labels": labels}})))
                })
                .collect();
            self.namespaces.insert(cluster.into(), list);
            self
        }
        fn with_object(mut self, at: &DestinationRef, o: DynamicObject) -> Self {
            self.objects.insert(at.clone(), Arc::new(o));
            self
        }
    }

    fn obj(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn secret_type() -> ApiResource {
        ApiResource::erase::<Secret>(&())
    }

    fn source() -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "src", "uid": "s", "resourceVersion": "42"},
            "data": {"ca.crt": "Q0E="}}))
    }

    fn destination(cluster: Option<&str>, namespace: &str) -> Destination {
        Destination {
            cluster: cluster.map(String::from),
            namespaces: NamespaceRule {
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            name: None,
            strategy: Strategy::Apply,
            patches: Vec::new(),
        }
    }

    fn declaration(destinations: Vec<Destination>) -> Declaration {
        Declaration {
            key: ObjectKey::new("local", &secret_type(), Some("ctl".into()), "d"),
            owner: Owner {
                reference: "local/ctl/d".into(),
                uid: "uid-d".into(),
            },
            spec: FanOutSpec {
                source: SourceRef {
                    resource: secret_type(),
                    namespace: "src".into(),
                    name: "ca".into(),
                },
                destinations,
                on_conflict: OnConflict::Skip,
                rules: CopyRules::default(),
                consent: None,
                deletion_policy: Default::default(),
            },
            deleting: false,
        }
    }

    fn at(cluster: &str, namespace: &str) -> DestinationRef {
        DestinationRef::new(cluster, namespace, "ca")
    }

    fn copy(uid: &str, managed_by: &str) -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "x", "uid": uid,
                "labels": {MANAGED_BY: managed_by}},
            "data": {"old": "b2xk"}}))
    }

    struct Run {
        decl: Declaration,
        source: Option<DynamicObject>,
        unknown: Vec<String>,
        unreachable: BTreeSet<String>,
        owned: BTreeMap<DestinationRef, Arc<DynamicObject>>,
        stores: Fake,
    }

    impl Run {
        fn new(decl: Declaration, stores: Fake) -> Self {
            Self {
                decl,
                source: Some(source()),
                unknown: vec![],
                unreachable: BTreeSet::new(),
                owned: BTreeMap::new(),
                stores,
            }
        }
        /// A copy of this declaration at `at`, in the stores too.
        fn owning(mut self, at: DestinationRef, uid: &str) -> Self {
            let c = Arc::new(copy(uid, "uid-d"));
            self.stores.objects.insert(at.clone(), c.clone());
            self.owned.insert(at, c);
            self
        }
        fn plan(&self) -> Plan {
            plan(&Snapshot {
                local: "local",
                declaration: &self.decl,
                source: self.source.as_ref(),
                unknown_clusters: &self.unknown,
                unreachable: &self.unreachable,
                owned: &self.owned,
                stores: &self.stores,
            })
        }
    }

    fn written(plan: &Plan) -> Vec<(DestinationRef, Decision)> {
        plan.writes
            .iter()
            .map(|w| (w.at.clone(), w.decision.clone()))
            .collect()
    }

    fn states(plan: &Plan) -> Vec<(String, DestinationState)> {
        plan.statuses
            .iter()
            .map(|s| (format!("{}/{}", s.cluster, s.namespace), s.state))
            .collect()
    }

    #[test]
    fn copies_go_to_every_selected_namespace_but_never_onto_the_source() {
        let stores = Fake::default().with_namespaces(
            "local",
            &[("src", json!({})), ("a", json!({})), ("b", json!({}))],
        );
        let plan = Run::new(declaration(vec![destination(None, "*")]), stores).plan();
        assert_eq!(
            written(&plan),
            [
                (at("local", "a"), Decision::Create),
                (at("local", "b"), Decision::Create)
            ]
        );
        assert_eq!(plan.source_resource_version, "42");
        let labels = plan.writes[0].desired.metadata.labels.clone();
        assert_eq!(
            labels
                .unwrap_or_default()
                .get(MANAGED_BY)
                .map(String::as_str),
            Some("uid-d")
        );
        assert!(plan.deletes.is_empty() && plan.statuses.is_empty());
    }

    #[test]
    fn copies_in_sync_and_foreign_objects_are_not_written() {
        let decl = declaration(vec![destination(None, "*")]);
        let desired = rules::desired_copy(
            &secret_type(),
            &source(),
            "a",
            "ca",
            &CopyRules::default(),
            &decl.owner,
            "core/Secret/src/ca",
        );
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({})), ("b", json!({}))])
            .with_object(&at("local", "a"), desired)
            .with_object(&at("local", "b"), copy("f", "someone-else"));
        let plan = Run::new(decl, stores).plan();
        assert!(plan.writes.is_empty());
        assert_eq!(
            states(&plan),
            [
                ("local/a".into(), DestinationState::Synced),
                ("local/b".into(), DestinationState::Conflict)
            ]
        );
        assert_eq!(plan.statuses[0].source_resource_version, "42");
    }

    #[test]
    fn unknown_and_unreachable_clusters_get_errors_and_keep_their_copies() {
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({}))])
            .with_namespaces("east", &[("a", json!({})), ("gone", json!({}))]);
        let mut run = Run::new(
            declaration(vec![
                destination(Some("east"), "a"),
                destination(Some("nowhere"), "a"),
            ]),
            stores,
        )
        .owning(at("east", "gone"), "c1");
        run.unknown = vec!["nowhere".into()];
        run.unreachable = BTreeSet::from(["east".to_string()]);
        let plan = run.plan();
        assert!(plan.writes.is_empty());
        assert!(
            plan.deletes.is_empty(),
            "nothing deleted in an unreachable cluster"
        );
        assert_eq!(
            states(&plan),
            [
                ("nowhere/".into(), DestinationState::Error),
                ("east/a".into(), DestinationState::Error)
            ]
        );
    }

    #[test]
    fn unwanted_copies_are_deleted_unless_their_namespace_is_not_in_the_store_yet() {
        let stores = Fake::default().with_namespaces(
            "local",
            &[("a", json!({"env": "prod"})), ("b", json!({"env": "dev"}))],
        );
        let mut only_prod = destination(None, "*");
        only_prod.namespaces.namespace_selector = Some(kube::core::Selector::from_iter([(
            "env".to_string(),
            "prod".to_string(),
        )]));
        let run = Run::new(declaration(vec![only_prod]), stores)
            .owning(at("local", "a"), "c-a")
            .owning(at("local", "b"), "c-b")
            .owning(at("local", "unseen"), "c-u");
        let plan = run.plan();
        assert_eq!(
            written(&plan),
            [(at("local", "a"), Decision::Update)],
            "the copy in a differs from the source"
        );
        assert_eq!(
            plan.deletes,
            [Delete {
                at: at("local", "b"),
                uid: Some("c-b".into()),
                orphan: false,
            }],
            "b is no longer selected; unseen's namespace is not in the store"
        );
    }

    #[test]
    fn without_a_source_every_copy_goes() {
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        let mut run = Run::new(declaration(vec![destination(None, "*")]), stores)
            .owning(at("local", "a"), "c-a");
        run.source = None;
        let plan = run.plan();
        assert!(plan.writes.is_empty() && plan.statuses.is_empty());
        assert_eq!(plan.deletes.len(), 1);
        assert_eq!(plan.source_resource_version, "");
    }

    #[test]
    fn under_orphan_the_copies_of_a_gone_source_are_released_not_deleted() {
        let stores =
            Fake::default().with_namespaces("local", &[("a", json!({})), ("b", json!({}))]);
        let mut decl = declaration(vec![destination(None, "a")]);
        decl.spec.deletion_policy = rules::DeletionPolicy::Orphan;
        let mut run = Run::new(decl, stores)
            .owning(at("local", "a"), "c-a")
            .owning(at("local", "b"), "c-b");
        // With the source: b only left the destinations, and goes.
        let plan = run.plan();
        assert_eq!(
            plan.deletes
                .iter()
                .map(|d| (d.at.namespace.as_str(), d.orphan))
                .collect::<Vec<_>>(),
            [("b", false)]
        );
        // Without it (deleted, or the declaration is): every copy is released.
        run.source = None;
        let plan = run.plan();
        assert!(plan.deletes.iter().all(|d| d.orphan) && plan.deletes.len() == 2);
    }

    #[test]
    fn a_destination_s_patches_shape_its_copy_and_a_failing_one_is_its_error_alone() {
        use rules::CopyPatch;
        let stores =
            Fake::default().with_namespaces("local", &[("a", json!({})), ("b", json!({}))]);
        let mut patched = destination(None, "a");
        patched.patches = vec![CopyPatch::Merge(json!({"data": {"region": "ZXU="}}))];
        let mut broken = destination(None, "b");
        broken.patches = vec![CopyPatch::Merge(json!({"metadata": {"name": "other"}}))];
        let plan = Run::new(declaration(vec![patched, broken]), stores).plan();
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(plan.writes[0].at, at("local", "a"));
        assert_eq!(plan.writes[0].desired.data["data"]["region"], "ZXU=");
        assert_eq!(plan.writes[0].desired.data["data"]["ca.crt"], "Q0E=");
        assert_eq!(
            states(&plan),
            [("local/b".into(), DestinationState::Error)],
            "nothing is written at b"
        );
        assert!(plan.statuses[0].message.contains("may not"));
    }

    #[test]
    fn the_first_destination_entry_decides_the_strategy() {
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        let mut replace = destination(None, "a");
        replace.strategy = Strategy::Replace;
        let plan = Run::new(declaration(vec![replace, destination(None, "*")]), stores).plan();
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(plan.writes[0].strategy, Strategy::Replace);
    }

    #[test]
    fn a_missing_source_is_confirmed_only_when_copies_would_go() {
        assert!(must_confirm_source_gone(false, false, 1));
        assert!(!must_confirm_source_gone(true, false, 1), "in the store");
        assert!(!must_confirm_source_gone(false, true, 1), "being deleted");
        assert!(
            !must_confirm_source_gone(false, false, 0),
            "nothing to delete"
        );
    }

    /// Grants are objects whose `admits` label lists the source names they admit.
    fn grant_consent() -> Consent {
        Consent {
            resource: ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "kubesync.io",
                "v1alpha1",
                "SyncGrant",
            )),
            exempt: vec!["src".into()],
            admits: Arc::new(
                |grant: &DynamicObject, source: &DynamicObject, _at: &DestinationRef| {
                    grant.labels().get("admits").map(String::as_str) == Some(&source.name_any())
                },
            ),
            refusal: Arc::new(|_source: &DynamicObject, at: &DestinationRef| {
                format!("no grant in {}", at.namespace)
            }),
        }
    }

    #[test]
    fn a_patched_copy_needs_consent_as_it_will_be_written() {
        use rules::CopyPatch;
        // The owners of `granted` consent to anything but service-account-token Secrets.
        let consent = Consent {
            admits: Arc::new(
                |_grant: &DynamicObject, obj: &DynamicObject, _at: &DestinationRef| {
                    obj.data["type"] != "kubernetes.io/service-account-token"
                },
            ),
            refusal: Arc::new(|obj: &DynamicObject, _at: &DestinationRef| {
                format!("no grant for {}", obj.data["type"])
            }),
            ..grant_consent()
        };
        let mut stores = Fake::default().with_namespaces("local", &[("granted", json!({}))]);
        stores
            .consents
            .insert(("local".into(), "granted".into()), vec![grant("ca")]);
        let mut dest = destination(None, "granted");
        dest.patches = vec![CopyPatch::Merge(
            json!({"type": "kubernetes.io/service-account-token",
            "metadata": {"annotations": {"kubernetes.io/service-account.name": "admin"}}}),
        )];
        let mut decl = declaration(vec![dest]);
        decl.spec.consent = Some(consent);
        let plan = Run::new(decl, stores).plan();
        assert!(plan.writes.is_empty(), "the patched copy is not written");
        assert_eq!(
            states(&plan),
            [("local/granted".into(), DestinationState::Refused)]
        );
        assert!(plan.statuses[0].message.contains("service-account-token"));
    }

    fn grant(admits: &str) -> Arc<DynamicObject> {
        Arc::new(obj(
            json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "x", "labels": {"admits": admits}}}),
        ))
    }

    #[test]
    fn copies_go_only_where_the_owners_consent() {
        let mut stores = Fake::default().with_namespaces(
            "local",
            &[
                ("src", json!({})),
                ("granted", json!({})),
                ("wrong", json!({})),
                ("silent", json!({})),
            ],
        );
        stores
            .consents
            .insert(("local".into(), "granted".into()), vec![grant("ca")]);
        stores
            .consents
            .insert(("local".into(), "wrong".into()), vec![grant("other")]);
        let mut decl = declaration(vec![destination(None, "*"), destination(None, "wrong")]);
        // The own namespace is exempt: the copy there is renamed so it is not the source.
        let mut own = destination(None, "src");
        own.name = Some("ca-copy".into());
        decl.spec.destinations.push(own);
        decl.spec.consent = Some(grant_consent());
        let plan = Run::new(decl, stores)
            .owning(at("local", "silent"), "c-s")
            .plan();
        assert_eq!(
            written(&plan),
            [
                (at("local", "granted"), Decision::Create),
                (
                    DestinationRef::new("local", "src", "ca-copy"),
                    Decision::Create
                ),
            ]
        );
        assert_eq!(
            states(&plan),
            [("local/wrong".into(), DestinationState::Refused)],
            "a named namespace is reported; those \"*\" would select are left out silently"
        );
        assert_eq!(plan.statuses[0].message, "no grant in wrong");
        assert_eq!(
            plan.deletes,
            [Delete {
                at: at("local", "silent"),
                uid: Some("c-s".into()),
                orphan: false,
            }],
            "a copy where consent is withdrawn goes"
        );
    }
}
