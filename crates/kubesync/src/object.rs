//! Pure helpers on objects: conversion, the fields that never cross clusters, merge-patch
//! diffs, finalizer patches. No IO; used by the plans and the writer alike.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use kube::api::DynamicObject;
use serde_json::{Map, Value};

use crate::error::Result;

/// A typed object (`Secret`, a custom resource type, …) as a [`DynamicObject`] for the
/// [`Writer`](crate::writer::Writer).
pub fn to_dynamic<K: serde::Serialize>(obj: &K) -> Result<DynamicObject> {
    Ok(serde_json::from_value(serde_json::to_value(obj)?)?)
}

/// The merge patch that adds or removes `finalizer`, carrying the resourceVersion as an
/// optimistic lock; `None` if nothing needs to change.
pub fn finalizer_patch(obj: &DynamicObject, finalizer: &str, present: bool) -> Option<Value> {
    let current = obj.metadata.finalizers.clone().unwrap_or_default();
    let has = current.iter().any(|f| f == finalizer);
    if has == present {
        return None;
    }
    let next: Vec<String> = if present {
        current.into_iter().chain([finalizer.to_string()]).collect()
    } else {
        current.into_iter().filter(|f| f != finalizer).collect()
    };
    Some(serde_json::json!({
        "metadata": {
            "finalizers": next,
            "resourceVersion": obj.metadata.resource_version,
        }
    }))
}

/// Removes what must never cross clusters: uid, resourceVersion, managedFields,
/// ownerReferences, creationTimestamp, generation, deletion fields, selfLink and finalizers,
/// plus every label and annotation for which `is_bookkeeping` returns true.
pub fn sanitize(obj: &mut DynamicObject, is_bookkeeping: impl Fn(&str) -> bool) {
    let m = &mut obj.metadata;
    m.uid = None;
    m.resource_version = None;
    m.managed_fields = None;
    m.owner_references = None;
    m.creation_timestamp = None;
    m.generation = None;
    m.deletion_timestamp = None;
    m.deletion_grace_period_seconds = None;
    m.self_link = None;
    m.finalizers = None;
    m.generate_name = None;
    if let Some(labels) = &mut m.labels {
        labels.retain(|k, _| !is_bookkeeping(k));
    }
    if let Some(annotations) = &mut m.annotations {
        annotations.retain(|k, _| !is_bookkeeping(k));
    }
}

/// A JSON merge patch (RFC 7386) that turns `old` into `new`: changed and added keys with their
/// new values, removed keys as `null`. Returns `None` when they are equal.
pub fn merge_patch_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut out = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_patch_diff(ov, nv) {
                            out.insert(k.clone(), d);
                        }
                    }
                    None => {
                        out.insert(k.clone(), nv.clone());
                    }
                }
            }
            for k in o.keys() {
                if !n.contains_key(k) {
                    out.insert(k.clone(), Value::Null);
                }
            }
            Some(Value::Object(out))
        }
        // A null inside a merge patch means "delete"; a new value that is itself an object
        // containing nulls cannot be expressed, but Kubernetes objects never hold nulls.
        _ => Some(new.clone()),
    }
}

/// Replaces the `fieldsV1` tree of each of `obj`'s managedFields entries with the tree's JSON
/// text (a string). The information is the same, at a fraction of the memory: a tree of nested
/// maps costs kilobytes per object, its text a few hundred bytes. For stores that hold many
/// objects whose field ownership is rarely read (pass it to [`Watch::transform`]); read such
/// entries with [`fields_v1`], and write them back with [`expand_managed_fields`].
///
/// [`Watch::transform`]: crate::Watch::transform
pub fn compact_managed_fields(obj: &mut DynamicObject) {
    for entry in obj.metadata.managed_fields.iter_mut().flatten() {
        if let Some(f) = &mut entry.fields_v1
            && !f.0.is_string()
        {
            f.0 = Value::String(f.0.to_string());
        }
    }
}

/// The `fieldsV1` tree of a managedFields entry, also of one [`compact_managed_fields`]
/// compacted (`None` if absent or unreadable).
pub fn fields_v1(entry: &ManagedFieldsEntry) -> Option<std::borrow::Cow<'_, Value>> {
    let f = &entry.fields_v1.as_ref()?.0;
    match f {
        Value::String(text) => serde_json::from_str(text).ok().map(std::borrow::Cow::Owned),
        tree => Some(std::borrow::Cow::Borrowed(tree)),
    }
}

/// `entry` as the apiserver expects it: with its `fieldsV1` tree, also if it was compacted.
pub fn expand_managed_fields(entry: &ManagedFieldsEntry) -> ManagedFieldsEntry {
    let mut out = entry.clone();
    if let Some(tree) = fields_v1(entry) {
        out.fields_v1 = Some(FieldsV1(tree.into_owned()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    #[test]
    fn merge_patch_diff_sets_changes_and_nulls_removals() {
        let old = json!({"a": 1, "b": {"c": 2, "d": 3}, "gone": true});
        let new = json!({"a": 1, "b": {"c": 5}, "added": [1]});
        let patch = merge_patch_diff(&old, &new).expect("differs");
        assert_eq!(
            patch,
            json!({"b": {"c": 5, "d": null}, "gone": null, "added": [1]})
        );
        assert_eq!(merge_patch_diff(&new, &new), None);
        // Applying the patch to old gives new.
        let mut applied = old.clone();
        json_patch_merge(&mut applied, &patch);
        assert_eq!(applied, new);
    }

    fn json_patch_merge(target: &mut Value, patch: &Value) {
        if let Value::Object(p) = patch {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_patch_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        } else {
            *target = patch.clone();
        }
    }

    #[test]
    fn finalizer_patch_adds_removes_and_locks() {
        let o = obj(
            json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a", "resourceVersion": "7", "finalizers": ["other"]}}),
        );
        let add = finalizer_patch(&o, "mine", true).expect("add");
        assert_eq!(
            add,
            json!({"metadata": {"finalizers": ["other", "mine"], "resourceVersion": "7"}})
        );
        assert_eq!(finalizer_patch(&o, "mine", false), None, "absent already");
        assert_eq!(finalizer_patch(&o, "other", true), None, "present already");
        let rm = finalizer_patch(&o, "other", false).expect("remove");
        assert_eq!(
            rm,
            json!({"metadata": {"finalizers": [], "resourceVersion": "7"}})
        );
    }

    #[test]
    fn sanitize_strips_identity_and_bookkeeping() {
        let mut o = obj(json!({
            "apiVersion": "v1", "kind": "X",
            "metadata": {
                "name": "a", "namespace": "n", "uid": "u", "resourceVersion": "1", "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Y", "name": "y", "uid": "z"}],
                "managedFields": [{"manager": "m"}],
                "labels": {"keep": "1", "kubesync.io/x": "2"},
                "annotations": {"keep": "1", "kubesync.io/y": "2"}
            },
            "spec": {"v": 1}
        }));
        sanitize(&mut o, |k| k.starts_with("kubesync.io/"));
        let v = serde_json::to_value(&o).expect("json");
        assert_eq!(
            v["metadata"],
            json!({"name": "a", "namespace": "n", "labels": {"keep": "1"}, "annotations": {"keep": "1"}})
        );
        assert_eq!(v["spec"], json!({"v": 1}));
    }
}
