//! The pure rules of the fan-out, each in its own module: which namespaces are destinations
//! ([`select`]), what a copy looks like ([`copy`]), what to do at a destination ([`decide`](mod@decide)),
//! which fields of a copy changed and who changed them ([`drift`](mod@drift)),
//! how a POST's fields are handed to kubesync's apply entry ([`ownership`]), the
//! per-destination overrides ([`patch`]), how copies are held without their bulk
//! ([`digest`]), the large values of the copies a plan writes, held once ([`bulk`]), the fields the apiserver allocates or controllers own, never copied
//! ([`allocated`]), the fields a destination leaves to others ([`ignore`]), fields as steps into an object
//! ([`path`]), and how one destination's write is carried to an end ([`settle`]). No IO.

pub mod allocated;
pub mod bulk;
pub mod copy;
pub mod decide;
pub mod digest;
pub mod drift;
pub mod ignore;
pub mod ownership;
pub mod patch;
pub mod path;
pub mod print;
pub mod select;
pub mod settle;

pub use bulk::Bulk;
pub use copy::{
    Annotator, CopyRules, DataFilter, KeyFilter, OTHER_OWNERS, Owner, desired_copy, owned_by,
    source_mark,
};
pub use decide::{
    Decision, DeletionPolicy, OnConflict, Strategy, apply_precondition, decide, in_sync, orphans,
    release_patch,
};
pub use drift::{Drift, FieldPath, ManagerChange, changed_fields, changes_by_others, drift};
pub use ignore::{Ignore, Pointer};
pub use ownership::ownership_upgrade;
pub use patch::{CopyPatch, patched};
pub use print::{CopyPrint, Printer};
pub use select::{NamespaceMatcher, NamespaceRule, glob, selector};

/// A function a declaration carries (a namespace predicate, an annotator, an adoption rule):
/// cheap to clone, and compared by identity — two declarations are equal only when they share
/// it, as nothing else can tell two closures apart.
pub struct Shared<F: ?Sized>(pub std::sync::Arc<F>);

impl<F: ?Sized> Clone for Shared<F> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<F: ?Sized> std::fmt::Debug for Shared<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared(..)")
    }
}

impl<F: ?Sized> PartialEq for Shared<F> {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<F: ?Sized> Eq for Shared<F> {}

/// A copy as kubesync holds it in its stores (a watch transform): without the fields no
/// destination may set ([`allocated::strip_held`]), its large values as digests
/// ([`digest::shrink`]), and its field ownership as only the decisions read it
/// ([`hold_ownership`]). A packed copy is parsed on every reconcile of its declaration, and
/// its managedFields were most of what that parse allocated.
pub fn hold(copy: &mut kube::api::DynamicObject) {
    allocated::strip_held(copy);
    digest::shrink(copy);
    hold_ownership(copy);
}

/// A copy's managedFields as the decisions read them: each entry's `fieldsV1` tree as its text
/// ([`compact_managed_fields`](crate::object::compact_managed_fields)), and without kubesync's
/// own `Apply` entries unless kubesync also holds an `Update` entry there. Drift attribution
/// ([`drift()`]) and the fields left to named managers ([`ignore`]) read the other managers'
/// entries only; kubesync's own are read only to hand an `Update` entry's fields to the
/// `Apply` entry ([`ownership_upgrade`]), and then they are all kept.
pub fn hold_ownership(copy: &mut kube::api::DynamicObject) {
    crate::object::compact_managed_fields(copy);
    let Some(entries) = copy.metadata.managed_fields.as_mut() else {
        return;
    };
    let own = |e: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
        e.manager.as_deref() == Some(FIELD_MANAGER) && e.subresource.is_none()
    };
    if !entries
        .iter()
        .any(|e| own(e) && e.operation.as_deref() == Some("Update"))
    {
        entries.retain(|e| !own(e));
    }
    if entries.is_empty() {
        copy.metadata.managed_fields = None;
    }
}

/// A consent object as the fan-out holds it in its stores (a watch transform): its name, namespace, labels (kubesync's mark
/// among them) and `spec`; no annotations, no managedFields, nothing else. What a consent
/// says is in its spec; the rest would only cost memory (a tenant may fill annotations up to
/// 256 KiB per object).
pub fn hold_consent(obj: &mut kube::api::DynamicObject) {
    obj.metadata.annotations = None;
    obj.metadata.managed_fields = None;
    if let Some(fields) = obj.data.as_object_mut() {
        fields.retain(|k, _| k == "spec");
    }
}

/// Field manager of every copy write.
pub const FIELD_MANAGER: &str = "kubesync";
/// Label on every copy: the uid of the declaration (e.g. the ObjectSync) that made it.
pub const MANAGED_BY: &str = "kubesync.io/managed-by";
/// Label on every copy a sharded operator writes: the shard (bucket) of the declaration that
/// made it, so that each replica watches only the copies of its own shards (see
/// [`FanOut::shard_copies`](super::FanOut::shard_copies)).
pub const SHARD: &str = "kubesync.io/shard";
/// Annotation: `<cluster>/<namespace>/<name>` of the declaration that made the copy.
pub const OWNER: &str = "kubesync.io/owner";
/// Annotation: `<group>/<kind>/<namespace>/<name>` of the source (`core` for the core group).
pub const SOURCE: &str = "kubesync.io/source";
/// Annotation: the source resourceVersion the copy carries.
pub const SOURCE_VERSION: &str = "kubesync.io/source-resource-version";
/// Annotation on a destination object that vetoes adoption: `"true"`.
pub const PROTECT: &str = "kubesync.io/protect";
/// Annotation on a copy: `"true"` keeps that copy when kubesync would delete it; its marks are
/// removed instead (see [`DeletionPolicy`]).
pub const ORPHAN_ON_DELETE: &str = "kubesync.io/orphan-on-delete";
/// kubectl's annotation, never copied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Objects the plan's tests share.
#[cfg(test)]
mod fixtures {
    use std::collections::BTreeMap;

    use kube::api::DynamicObject;
    use kube::core::ApiResource;
    use serde_json::{Value, json};

    use super::{LAST_APPLIED, Owner};

    pub(super) fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    pub(super) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    pub(super) fn owner() -> Owner {
        Owner {
            reference: "local/apps/share-ca".into(),
            uid: "uid-1".into(),
            shard: None,
        }
    }

    pub(super) fn secret_type() -> ApiResource {
        ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "Secret"))
    }

    /// [`tls_secret`]'s copy in `team-a`, as [`owner`] wants it.
    pub(super) fn tls_copy() -> DynamicObject {
        super::desired_copy(
            &secret_type(),
            &tls_secret(),
            "team-a",
            "ca",
            &super::CopyRules::default(),
            &owner(),
            "core/Secret/certs/ca",
        )
    }

    pub(super) fn tls_secret() -> DynamicObject {
        // As a list item of a built-in kind: no apiVersion or kind.
        obj(json!({
            "metadata": {"name": "ca", "namespace": "certs", "uid": "s-uid", "resourceVersion": "42",
                         "labels": {"app": "ca", "argocd.argoproj.io/instance": "x"},
                         "annotations": {LAST_APPLIED: "{}", "note": "hi"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}]},
            "type": "kubernetes.io/tls",
            "data": {"ca.crt": "Q0E=", "tls.crt": "Q1JU", "tls.key": "S0VZ"}
        }))
    }
}

#[cfg(test)]
mod tests {
    use kube::ResourceExt;
    use kube::api::DynamicObject;

    #[test]
    fn a_copy_is_held_with_its_field_ownership_as_text_and_read_the_same() {
        let raw = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "managedFields": [
                {"manager": "kubesync", "operation": "Apply", "apiVersion": "v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}},
                {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:b": {}}}}
            ]},
            "data": {"a": "1", "b": "edited"}
        });
        let mut held: DynamicObject = serde_json::from_value(raw.clone()).expect("copy");
        super::hold(&mut held);
        let entries = held.metadata.managed_fields.as_ref().expect("entries");
        // Each entry's tree is one string: a packed copy parses into a few allocations.
        assert!(
            entries
                .iter()
                .all(|e| e.fields_v1.as_ref().is_some_and(|f| f.0.is_string()))
        );
        let tree: DynamicObject = serde_json::from_value(raw.clone()).expect("copy");
        let edit = &tree.metadata.managed_fields.as_ref().expect("entries")[1];
        assert_eq!(
            crate::object::fields_v1(&entries[0]),
            crate::object::fields_v1(edit)
        );
        // Drift is attributed the same on the held copy as on the object.
        let mut desired = tree.clone();
        desired.data["data"]["b"] = serde_json::json!("2");
        let changed = super::changed_fields(&tree, &desired, super::Strategy::Apply);
        assert_eq!(
            super::drift(&held, &desired, &changed, super::FIELD_MANAGER),
            super::drift(&tree, &desired, &changed, super::FIELD_MANAGER)
        );
        assert!(super::drift(&held, &desired, &changed, super::FIELD_MANAGER).is_some());
        // With an Update entry of kubesync's (a copy created by a POST), every entry is held:
        // the ownership upgrade rewrites them all.
        let mut posted: DynamicObject = serde_json::from_value(raw).expect("copy");
        posted.metadata.managed_fields.as_mut().expect("entries")[1].manager =
            Some("kubesync".into());
        super::hold(&mut posted);
        assert_eq!(posted.metadata.managed_fields.map(|m| m.len()), Some(2));
        // kubesync's own Apply entry is not held (nothing reads it); another manager's is.
        assert_eq!(
            entries
                .iter()
                .map(|e| e.manager.as_deref().unwrap_or_default())
                .collect::<Vec<_>>(),
            ["kubectl-edit"]
        );
        // Through the packed text and back, as the store keeps it.
        let text = serde_json::to_string(&held).expect("text");
        let back: DynamicObject = serde_json::from_str(&text).expect("parse");
        assert_eq!(back.metadata.managed_fields, held.metadata.managed_fields);
    }

    #[test]
    fn consent_objects_are_held_without_what_they_do_not_say() {
        let mut grant: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "victim", "labels": {"a": "b"},
                "annotations": {"padding": "x".repeat(100_000)},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"from": [{"namespace": "t1"}]},
            "status": {"junk": "y".repeat(10_000)}
        }))
        .expect("grant");
        super::hold_consent(&mut grant);
        assert_eq!(grant.metadata.annotations, None);
        assert_eq!(grant.metadata.managed_fields, None);
        assert_eq!(grant.labels().get("a").map(String::as_str), Some("b"));
        assert_eq!(
            grant.data,
            serde_json::json!({"spec": {"from": [{"namespace": "t1"}]}})
        );
        assert!(serde_json::to_string(&grant).expect("json").len() < 300);
    }
}
