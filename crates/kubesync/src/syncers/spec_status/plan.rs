//! Pure decisions of the spec/status sync: observed state in, what to do out. No IO.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::object::merge_patch_diff;

/// The annotation, finalizer and label names of one annotation domain. With the domain
/// `cloud.teleport.dev` they are exactly sync-controller's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marks {
    domain: String,
}

impl Default for Marks {
    fn default() -> Self {
        Self::new("kubesync.io")
    }
}

impl Marks {
    /// Marks under `domain` (e.g. `kubesync.io`, or `cloud.teleport.dev` for compatibility).
    pub fn new(domain: impl Into<String>) -> Self {
        Self {
            domain: domain.into(),
        }
    }
    /// The domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }
    /// `<domain>/paused`: `"true"` on either side stops every write for the object.
    pub fn paused(&self) -> String {
        format!("{}/paused", self.domain)
    }
    /// `<domain>/sync-owner`: on a local Namespace kubesync created, the local object's name.
    pub fn namespace_owner(&self) -> String {
        format!("{}/sync-owner", self.domain)
    }
    /// `<domain>/last-uploaded-hash`: on a local Secret and its remote copy.
    pub fn last_uploaded_hash(&self) -> String {
        format!("{}/last-uploaded-hash", self.domain)
    }
    /// `<domain>/sync-remote-generation`: the remote generation applied locally.
    pub fn remote_generation(&self) -> String {
        format!("{}/sync-remote-generation", self.domain)
    }
    /// `<domain>/sync-local-generation`: the local generation that resulted.
    pub fn local_generation(&self) -> String {
        format!("{}/sync-local-generation", self.domain)
    }
    /// `<domain>/sync-local`: the finalizer on the remote object.
    pub fn finalizer(&self) -> String {
        format!("{}/sync-local", self.domain)
    }
    /// `<domain>/sync-origin`: on a local object kubesync wrote, `<remote ns>/<remote name>`.
    /// Its presence is what allows kubesync to delete the local object.
    pub fn origin(&self) -> String {
        format!("{}/sync-origin", self.domain)
    }
    /// Whether an annotation is kubesync bookkeeping (never copied down).
    pub fn is_bookkeeping(&self, key: &str) -> bool {
        key == self.remote_generation()
            || key == self.local_generation()
            || key == self.origin()
            || key == self.paused()
            || key == self.last_uploaded_hash()
    }
}

/// Whether an object carries `<domain>/paused: "true"` (exactly).
pub fn is_paused(obj: &DynamicObject, marks: &Marks) -> bool {
    obj.annotations().get(&marks.paused()).map(String::as_str) == Some("true")
}

fn terminating(obj: &DynamicObject) -> bool {
    obj.metadata.deletion_timestamp.is_some()
}

/// What a pass does, first of all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Paused on the remote side: no writes at all.
    PausedRemote,
    /// Paused on the local side: no writes at all.
    PausedLocal,
    /// The remote is absent or being deleted: clean up locally, then release the finalizer.
    Teardown,
    /// The remote lacks the finalizer: add it and end the pass.
    Claim,
    /// Sync status up and spec down.
    Sync,
}

/// The phase of a pass.
pub fn phase(
    remote: Option<&DynamicObject>,
    local: Option<&DynamicObject>,
    marks: &Marks,
) -> Phase {
    if local.is_some_and(|l| is_paused(l, marks)) {
        return Phase::PausedLocal;
    }
    if remote.is_some_and(|r| is_paused(r, marks)) {
        return Phase::PausedRemote;
    }
    match remote {
        None => Phase::Teardown,
        Some(r) if terminating(r) => Phase::Teardown,
        Some(r) if !r.finalizers().iter().any(|f| *f == marks.finalizer()) => Phase::Claim,
        Some(_) => Phase::Sync,
    }
}

/// The next step of a teardown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Teardown {
    /// Delete the local namespace kubesync created for this object.
    DeleteNamespace,
    /// The owned namespace is terminating: wait for it.
    WaitForNamespace,
    /// Delete the local object (kubesync created it).
    DeleteLocal {
        /// Its uid, as a delete precondition.
        uid: Option<String>,
    },
    /// The local object is terminating: wait for it.
    WaitForLocal,
    /// Everything local is gone: release the remote's finalizer.
    RemoveFinalizer,
    /// Nothing to do.
    Done,
}

/// The next teardown step. A local object is deleted only if its origin mark names this
/// remote object, a namespace only if its owner mark names this object: kubesync never deletes
/// what it did not create.
pub fn teardown(
    remote: Option<&DynamicObject>,
    local: Option<&DynamicObject>,
    local_namespace: Option<&DynamicObject>,
    local_name: &str,
    origin: &str,
    marks: &Marks,
) -> Teardown {
    if let Some(ns) = local_namespace
        && ns
            .annotations()
            .get(&marks.namespace_owner())
            .map(String::as_str)
            == Some(local_name)
    {
        return if terminating(ns) {
            Teardown::WaitForNamespace
        } else {
            Teardown::DeleteNamespace
        };
    }
    if let Some(l) = local
        && l.annotations().get(&marks.origin()).map(String::as_str) == Some(origin)
    {
        return if terminating(l) {
            Teardown::WaitForLocal
        } else {
            Teardown::DeleteLocal {
                uid: l.metadata.uid.clone(),
            }
        };
    }
    match remote {
        Some(r) if terminating(r) && r.finalizers().iter().any(|f| *f == marks.finalizer()) => {
            Teardown::RemoveFinalizer
        }
        _ => Teardown::Done,
    }
}

fn is_empty_status(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        _ => false,
    }
}

/// The merge patch for the remote status subresource that makes it equal to the local status,
/// or `None` if they are equal. A local object without a status (e.g. just created, not yet
/// seen by its controller) uploads nothing, so the remote keeps the last status it knew.
pub fn status_patch(remote: &DynamicObject, local: &DynamicObject) -> Option<Value> {
    let local_status = local.data.get("status");
    if is_empty_status(local_status) {
        return None;
    }
    let empty = Value::Object(Default::default());
    let remote_status = remote.data.get("status").unwrap_or(&empty);
    let local_status = local_status.unwrap_or(&empty);
    merge_patch_diff(remote_status, local_status).map(|d| serde_json::json!({ "status": d }))
}

fn copied_down(map: &BTreeMap<String, String>, marks: &Marks) -> BTreeMap<String, String> {
    map.iter()
        .filter(|(k, _)| !marks.is_bookkeeping(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The local object as it must be, or `None` if the existing one already is.
///
/// Spec, labels and annotations come from the remote (minus bookkeeping, plus the origin
/// mark); the local finalizers, ownerReferences and status are preserved. A spec difference is
/// ignored when the generation marks on the remote show that this remote generation was
/// already applied and the local object has not changed since — the local apiserver may
/// default fields the remote lacks, and that must not cause a write on every pass.
pub fn desired_local(
    resource: &kube::core::ApiResource,
    remote: &DynamicObject,
    local: Option<&DynamicObject>,
    namespace: &str,
    name: &str,
    origin: &str,
    marks: &Marks,
) -> Option<DynamicObject> {
    let mut labels = copied_down(remote.labels(), marks);
    let mut annotations = copied_down(remote.annotations(), marks);
    annotations.insert(marks.origin(), origin.to_string());
    let spec = remote.data.get("spec").cloned();
    let Some(local) = local else {
        // The object is of the synced resource type (the source may be untyped).
        let mut obj = DynamicObject {
            types: Some(kube::core::TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            }),
            metadata: Default::default(),
            data: serde_json::json!({}),
        };
        obj.metadata.name = Some(name.to_string());
        obj.metadata.namespace = Some(namespace.to_string());
        obj.metadata.labels = (!labels.is_empty()).then_some(labels);
        obj.metadata.annotations = Some(annotations);
        if let Some(spec) = spec {
            obj.data["spec"] = spec;
        }
        return Some(obj);
    };
    let recorded = |key: String| remote.annotations().get(&key).cloned();
    let generations_recorded = recorded(marks.remote_generation())
        == remote.metadata.generation.map(|g| g.to_string())
        && recorded(marks.local_generation()) == local.metadata.generation.map(|g| g.to_string());
    let spec_differs = local.data.get("spec") != spec.as_ref() && !generations_recorded;
    let labels_differ = *local.labels() != labels;
    let annotations_differ = *local.annotations() != annotations;
    if !spec_differs && !labels_differ && !annotations_differ {
        return None;
    }
    let mut obj = local.clone();
    obj.types = Some(kube::core::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
    obj.metadata.labels = Some(std::mem::take(&mut labels));
    obj.metadata.annotations = Some(std::mem::take(&mut annotations));
    match spec {
        Some(spec) => obj.data["spec"] = spec,
        None => {
            if let Some(m) = obj.data.as_object_mut() {
                m.remove("spec");
            }
        }
    }
    Some(obj)
}

/// Whether the remote's generation marks say its current generation is applied locally.
pub fn generation_applied(remote: &DynamicObject, marks: &Marks) -> bool {
    remote.annotations().get(&marks.remote_generation())
        == Some(&remote.metadata.generation.unwrap_or(0).to_string())
}

/// Whether the local copy of `remote` is current: for a remote being deleted, once the local
/// copy is gone (the deletion reached it); for any other, once its generation is applied and
/// the local copy exists.
pub fn local_current(remote: &DynamicObject, local_exists: bool, marks: &Marks) -> bool {
    if remote.metadata.deletion_timestamp.is_some() {
        !local_exists
    } else {
        local_exists && generation_applied(remote, marks)
    }
}

/// The merge patch of the remote's generation marks after the local object reached
/// `local_generation`, or `None` if they already say so.
pub fn generation_patch(
    remote: &DynamicObject,
    local_generation: Option<i64>,
    marks: &Marks,
) -> Option<Value> {
    let remote_gen = remote.metadata.generation.unwrap_or(0).to_string();
    let local_gen = local_generation.unwrap_or(0).to_string();
    if generation_applied(remote, marks)
        && remote.annotations().get(&marks.local_generation()) == Some(&local_gen)
    {
        return None;
    }
    Some(serde_json::json!({"metadata": {"annotations": {
        marks.remote_generation(): remote_gen,
        marks.local_generation(): local_gen,
    }}}))
}

/// The hash sync-controller stores in `last-uploaded-hash`: lowercase hex SHA-256 of the JSON
/// array `[data, type, annotations without the hash, labels]`.
pub fn secret_hash(secret: &Secret, marks: &Marks) -> String {
    use sha2::Digest;
    let mut annotations = secret.metadata.annotations.clone().unwrap_or_default();
    annotations.remove(&marks.last_uploaded_hash());
    let value = serde_json::json!([
        secret.data,
        secret.type_.clone().unwrap_or_default(),
        annotations,
        secret.metadata.labels,
    ]);
    let digest = sha2::Sha256::digest(value.to_string().as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// What to do with one local Secret.
#[derive(Clone, Debug, PartialEq)]
pub enum SecretUpload {
    /// The remote copy is current.
    Unchanged,
    /// Write this remote Secret (an update of the pre-existing one), then record `hash` on
    /// the local Secret.
    Update {
        /// The remote Secret to write.
        remote: Box<Secret>,
        /// The hash to record locally.
        hash: String,
    },
}

/// Decides the upload of `local` onto the remote Secret `remote_name` in `remote_namespace`.
/// `remote_current` is the remote Secret as read (`None` if it could not be read): when
/// readable, a remote copy that was edited or recreated is repaired even if the local Secret
/// did not change.
pub fn secret_upload(
    local: &Secret,
    remote_current: Option<&Secret>,
    remote_owner: &DynamicObject,
    remote_namespace: &str,
    remote_name: &str,
    marks: &Marks,
) -> SecretUpload {
    let hash = secret_hash(local, marks);
    let key = marks.last_uploaded_hash();
    let local_recorded = local.annotations().get(&key) == Some(&hash);
    let owner_ref = remote_owner_ref(remote_owner);
    let remote_ok = match remote_current {
        None => true,
        Some(r) => {
            r.annotations().get(&key) == Some(&hash)
                && r.data == local.data
                && r.type_ == local.type_
                && r.metadata.owner_references.as_ref().is_some_and(|refs| {
                    refs.iter().any(|o| {
                        Some(&o.uid) == owner_ref.as_ref().map(|x| &x.uid)
                            && o.controller == Some(true)
                    })
                })
        }
    };
    if local_recorded && remote_ok {
        return SecretUpload::Unchanged;
    }
    let mut annotations = local.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(key, hash.clone());
    let remote = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(remote_name.to_string()),
            namespace: Some(remote_namespace.to_string()),
            annotations: Some(annotations),
            labels: local.metadata.labels.clone(),
            owner_references: owner_ref.map(|o| vec![o]),
            ..Default::default()
        },
        data: local.data.clone(),
        type_: local.type_.clone(),
        ..Default::default()
    };
    SecretUpload::Update {
        remote: Box::new(remote),
        hash,
    }
}

fn remote_owner_ref(
    owner: &DynamicObject,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    let types = owner.types.as_ref()?;
    Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: types.api_version.clone(),
            kind: types.kind.clone(),
            name: owner.metadata.name.clone()?,
            uid: owner.metadata.uid.clone()?,
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn widget() -> kube::core::ApiResource {
        kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "example.com",
            "v1",
            "Widget",
        ))
    }

    fn marks() -> Marks {
        Marks::default()
    }

    fn remote(extra: Value) -> DynamicObject {
        let mut v = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w-east", "namespace": "team", "uid": "r-uid", "generation": 3,
                         "finalizers": ["kubesync.io/sync-local"],
                         "labels": {"app": "web"},
                         "annotations": {"note": "hi", "kubesync.io/sync-remote-generation": "2"}},
            "spec": {"size": 3},
            "status": {"phase": "Old"}
        });
        merge(&mut v, &extra);
        obj(v)
    }

    fn local(extra: Value) -> DynamicObject {
        let mut v = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "team-local", "uid": "l-uid", "generation": 1,
                         "finalizers": ["local.example.com/keep"],
                         "labels": {"app": "web"},
                         "annotations": {"note": "hi", "kubesync.io/sync-origin": "team/w-east"}},
            "spec": {"size": 3},
            "status": {"phase": "Ready"}
        });
        merge(&mut v, &extra);
        obj(v)
    }

    fn merge(target: &mut Value, patch: &Value) {
        if let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        } else {
            *target = patch.clone();
        }
    }

    #[test]
    fn teleport_domain_gives_sync_controller_names() {
        let m = Marks::new("cloud.teleport.dev");
        assert_eq!(m.paused(), "cloud.teleport.dev/paused");
        assert_eq!(m.namespace_owner(), "cloud.teleport.dev/sync-owner");
        assert_eq!(
            m.last_uploaded_hash(),
            "cloud.teleport.dev/last-uploaded-hash"
        );
        assert_eq!(
            m.remote_generation(),
            "cloud.teleport.dev/sync-remote-generation"
        );
        assert_eq!(
            m.local_generation(),
            "cloud.teleport.dev/sync-local-generation"
        );
        assert_eq!(m.finalizer(), "cloud.teleport.dev/sync-local");
    }

    #[test]
    fn phases() {
        let m = marks();
        let r = remote(json!({}));
        assert_eq!(phase(Some(&r), None, &m), Phase::Sync);
        assert_eq!(phase(None, None, &m), Phase::Teardown);
        let unclaimed = remote(json!({"metadata": {"finalizers": null}}));
        assert_eq!(phase(Some(&unclaimed), None, &m), Phase::Claim);
        let deleting = remote(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_eq!(phase(Some(&deleting), None, &m), Phase::Teardown);
        let paused = remote(json!({"metadata": {"annotations": {"kubesync.io/paused": "true"}}}));
        assert_eq!(phase(Some(&paused), None, &m), Phase::PausedRemote);
        // Pause wins over teardown, on either side; only the exact value "true" pauses.
        let lp = local(json!({"metadata": {"annotations": {"kubesync.io/paused": "true"}}}));
        assert_eq!(phase(None, Some(&lp), &m), Phase::PausedLocal);
        let not_paused =
            remote(json!({"metadata": {"annotations": {"kubesync.io/paused": "True"}}}));
        assert_eq!(phase(Some(&not_paused), None, &m), Phase::Sync);
    }

    #[test]
    fn teardown_deletes_only_what_kubesync_created() {
        let m = marks();
        let origin = "team/w-east";
        let owned_ns = obj(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-local", "annotations": {"kubesync.io/sync-owner": "w"}}}),
        );
        let other_ns = obj(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-local", "annotations": {"kubesync.io/sync-owner": "other"}}}),
        );
        let plain_ns = obj(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-local"}}),
        );
        let l = local(json!({}));
        assert_eq!(
            teardown(None, Some(&l), Some(&owned_ns), "w", origin, &m),
            Teardown::DeleteNamespace
        );
        assert_eq!(
            teardown(None, Some(&l), Some(&other_ns), "w", origin, &m),
            Teardown::DeleteLocal {
                uid: Some("l-uid".into())
            }
        );
        let foreign =
            local(json!({"metadata": {"annotations": {"kubesync.io/sync-origin": null}}}));
        assert_eq!(
            teardown(None, Some(&foreign), Some(&plain_ns), "w", origin, &m),
            Teardown::Done
        );
        let deleting = remote(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_eq!(
            teardown(Some(&deleting), Some(&foreign), None, "w", origin, &m),
            Teardown::RemoveFinalizer
        );
        assert_eq!(
            teardown(Some(&deleting), None, None, "w", origin, &m),
            Teardown::RemoveFinalizer
        );
        let terminating_ns = obj(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-local", "deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {"kubesync.io/sync-owner": "w"}}}),
        );
        assert_eq!(
            teardown(
                Some(&deleting),
                None,
                Some(&terminating_ns),
                "w",
                origin,
                &m
            ),
            Teardown::WaitForNamespace
        );
        let terminating_local =
            local(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_eq!(
            teardown(
                Some(&deleting),
                Some(&terminating_local),
                None,
                "w",
                origin,
                &m
            ),
            Teardown::WaitForLocal
        );
    }

    #[test]
    fn status_goes_up_as_a_full_replacement_and_empty_local_status_is_not_uploaded() {
        let r = remote(json!({"status": {"phase": "Old", "stale": 1}}));
        let l = local(json!({"status": {"phase": "Ready"}}));
        assert_eq!(
            status_patch(&r, &l),
            Some(json!({"status": {"phase": "Ready", "stale": null}}))
        );
        let same = remote(json!({"status": {"phase": "Ready"}}));
        assert_eq!(status_patch(&same, &l), None);
        let fresh = local(json!({"status": null}));
        assert_eq!(status_patch(&r, &fresh), None);
        let mut empty = local(json!({}));
        empty.data["status"] = json!({});
        assert_eq!(status_patch(&r, &empty), None);
    }

    #[test]
    fn desired_local_copies_spec_labels_annotations_and_keeps_local_fields() {
        let m = marks();
        let r = remote(json!({"spec": {"size": 5}, "metadata": {"labels": {"tier": "1"}}}));
        let l = local(
            json!({"metadata": {"labels": {"local-only": "x"}, "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "u"}]}}),
        );
        let d = desired_local(
            &widget(),
            &r,
            Some(&l),
            "team-local",
            "w",
            "team/w-east",
            &m,
        )
        .expect("differs");
        assert_eq!(d.data["spec"], json!({"size": 5}));
        assert_eq!(
            d.labels(),
            &BTreeMap::from([
                ("app".to_string(), "web".to_string()),
                ("tier".to_string(), "1".to_string())
            ])
        );
        assert_eq!(d.annotations().get("note").map(String::as_str), Some("hi"));
        assert_eq!(
            d.annotations()
                .get("kubesync.io/sync-origin")
                .map(String::as_str),
            Some("team/w-east")
        );
        assert!(
            !d.annotations()
                .contains_key("kubesync.io/sync-remote-generation"),
            "bookkeeping not copied"
        );
        assert_eq!(d.finalizers(), ["local.example.com/keep"]);
        assert!(d.metadata.owner_references.is_some());
        assert_eq!(d.data["status"], json!({"phase": "Ready"}));
        assert_eq!(
            d.metadata.uid.as_deref(),
            Some("l-uid"),
            "an update of the existing object"
        );
    }

    #[test]
    fn a_local_copy_is_current_when_its_generation_is_applied_or_its_deletion_reached_it() {
        let m = Marks::default();
        let mut remote: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "demo.kubesync.io/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns", "generation": 3,
                "annotations": {"kubesync.io/sync-remote-generation": "2"}},
        }))
        .expect("widget");
        assert!(
            !local_current(&remote, true, &m),
            "generation 3 not applied"
        );
        remote
            .annotations_mut()
            .insert(m.remote_generation(), "3".into());
        assert!(generation_applied(&remote, &m));
        assert!(local_current(&remote, true, &m));
        assert!(
            !local_current(&remote, false, &m),
            "the local copy is missing"
        );
        // Deletion bumps a custom resource's generation: it is not applied, and yet the copy
        // is current once it is gone.
        remote.metadata.generation = Some(4);
        remote.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-11-25T10:00:00Z".parse().expect("time"),
            ));
        assert!(
            !local_current(&remote, true, &m),
            "the deletion has not reached it"
        );
        assert!(local_current(&remote, false, &m));
    }

    #[test]
    fn desired_local_is_none_when_in_sync() {
        let m = marks();
        let r = remote(json!({}));
        let l = local(json!({}));
        assert_eq!(
            desired_local(
                &widget(),
                &r,
                Some(&l),
                "team-local",
                "w",
                "team/w-east",
                &m
            ),
            None
        );
        // A defaulted local spec field does not cause a write once generations are recorded.
        let defaulted = local(json!({"spec": {"size": 3, "defaulted": true}}));
        let recorded = remote(
            json!({"metadata": {"annotations": {"kubesync.io/sync-remote-generation": "3", "kubesync.io/sync-local-generation": "1"}}}),
        );
        assert_eq!(
            desired_local(
                &widget(),
                &recorded,
                Some(&defaulted),
                "team-local",
                "w",
                "team/w-east",
                &m
            ),
            None
        );
        // ... but a local edit (new generation) is reverted.
        let edited = local(json!({"spec": {"size": 99}, "metadata": {"generation": 2}}));
        assert!(
            desired_local(
                &widget(),
                &recorded,
                Some(&edited),
                "team-local",
                "w",
                "team/w-east",
                &m
            )
            .is_some()
        );
    }

    #[test]
    fn desired_local_for_a_new_object() {
        let m = marks();
        let r = remote(json!({}));
        let d = desired_local(&widget(), &r, None, "team-local", "w", "team/w-east", &m)
            .expect("create");
        assert_eq!(d.metadata.name.as_deref(), Some("w"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("team-local"));
        assert_eq!(d.metadata.uid, None);
        assert_eq!(d.metadata.finalizers, None);
        assert_eq!(d.data.get("status"), None);
        assert_eq!(d.data["spec"], json!({"size": 3}));
    }

    #[test]
    fn generation_marks_are_patched_only_when_they_change() {
        let m = marks();
        let r = remote(json!({}));
        assert_eq!(
            generation_patch(&r, Some(4), &m),
            Some(
                json!({"metadata": {"annotations": {"kubesync.io/sync-remote-generation": "3", "kubesync.io/sync-local-generation": "4"}}})
            )
        );
        let done = remote(
            json!({"metadata": {"annotations": {"kubesync.io/sync-remote-generation": "3", "kubesync.io/sync-local-generation": "4"}}}),
        );
        assert_eq!(generation_patch(&done, Some(4), &m), None);
    }

    fn secret(v: Value) -> Secret {
        serde_json::from_value(v).expect("secret")
    }

    #[test]
    fn secret_hash_matches_sync_controller() {
        // sync-controller's test vector: data {"data": "data1"}, type Opaque, no annotations.
        let s = secret(
            json!({"metadata": {"name": "secret1"}, "type": "Opaque", "data": {"data": "ZGF0YTE="}}),
        );
        let h = secret_hash(&s, &Marks::new("cloud.teleport.dev"));
        assert!(h.starts_with("4bc3db4c") && h.ends_with("e1c5"), "{h}");
        // The hash annotation itself does not change the hash.
        let s2 = secret(
            json!({"metadata": {"name": "secret1", "annotations": {"cloud.teleport.dev/last-uploaded-hash": "x"}}, "type": "Opaque", "data": {"data": "ZGF0YTE="}}),
        );
        assert_eq!(secret_hash(&s2, &Marks::new("cloud.teleport.dev")), h);
    }

    #[test]
    fn secret_upload_skips_unchanged_and_repairs_remote_drift() {
        let m = marks();
        let r = remote(json!({}));
        let local_secret = secret(
            json!({"metadata": {"name": "creds", "namespace": "team-local"}, "type": "Opaque", "data": {"k": "dg=="}}),
        );
        let SecretUpload::Update {
            remote: desired,
            hash,
        } = secret_upload(&local_secret, None, &r, "team", "creds-east", &m)
        else {
            panic!("first upload");
        };
        assert_eq!(desired.metadata.name.as_deref(), Some("creds-east"));
        assert_eq!(desired.metadata.namespace.as_deref(), Some("team"));
        let owner = &desired.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (owner.uid.as_str(), owner.controller),
            ("r-uid", Some(true))
        );
        // After the upload: local has the hash, remote equals desired → unchanged.
        let mut uploaded_local = local_secret.clone();
        uploaded_local.metadata.annotations = Some([(m.last_uploaded_hash(), hash.clone())].into());
        assert_eq!(
            secret_upload(
                &uploaded_local,
                Some(&desired),
                &r,
                "team",
                "creds-east",
                &m
            ),
            SecretUpload::Unchanged
        );
        // Unreadable remote: trust the local hash.
        assert_eq!(
            secret_upload(&uploaded_local, None, &r, "team", "creds-east", &m),
            SecretUpload::Unchanged
        );
        // Remote edited (data) or recreated (no hash, no owner): repaired.
        let mut edited = (*desired).clone();
        edited.data = Some([("k".to_string(), k8s_openapi::ByteString(b"other".to_vec()))].into());
        assert!(matches!(
            secret_upload(&uploaded_local, Some(&edited), &r, "team", "creds-east", &m),
            SecretUpload::Update { .. }
        ));
        let recreated = secret(
            json!({"metadata": {"name": "creds-east", "namespace": "team"}, "type": "Opaque"}),
        );
        assert!(matches!(
            secret_upload(
                &uploaded_local,
                Some(&recreated),
                &r,
                "team",
                "creds-east",
                &m
            ),
            SecretUpload::Update { .. }
        ));
    }
}
