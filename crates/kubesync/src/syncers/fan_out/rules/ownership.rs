//! Handing fields a POST created to kubesync's apply entry, so applies can remove them.

use kube::api::DynamicObject;
use serde_json::Value;

use crate::object::{expand_managed_fields, fields_v1};

/// The JSON patch that hands to `manager`'s `Apply` entry the fields it owns through an
/// `Update` entry, when that entry owns a field `desired` no longer sets; `None` otherwise.
///
/// New copies are created with a POST, which the apiserver refuses when an object of that name
/// appeared after the store was read (an apply would take it over). A POST records its fields
/// under an `Update` entry, and fields owned there survive later applies that leave them out:
/// a key removed from the source would stay on the copy. So before the first apply that
/// removes something, the `Update` entry is merged into the `Apply` entry (as
/// `kubectl apply --server-side` upgrades client-side ownership). The patch is guarded by the
/// copy's uid and resourceVersion; updates that only change values need no patch.
pub fn ownership_upgrade(
    existing: &DynamicObject,
    desired: &DynamicObject,
    manager: &str,
) -> Option<Value> {
    let entries = existing
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default();
    let is_update = |e: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some("Update")
            && e.subresource.is_none()
    };
    // Most copies have no such entry (applied, or already upgraded): nothing to serialize.
    if !entries.iter().any(|e| is_update(&e)) {
        return None;
    }
    let desired_value = serde_json::to_value(desired).ok()?;
    // The store may hold the entries compacted (`object::compact_managed_fields`).
    let leaves_something_out = entries
        .iter()
        .filter(is_update)
        .any(|e| fields_v1(e).is_some_and(|f| owns_absent(&f, Some(&desired_value))));
    if !leaves_something_out {
        return None;
    }
    let mut owned = Value::Object(Default::default());
    let mut rest = Vec::new();
    let mut apply_entry = None;
    for e in entries {
        if is_update(&e) {
            if let Some(f) = fields_v1(e) {
                merge_fields(&mut owned, &f);
            }
        } else if e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some("Apply")
            && apply_entry.is_none()
        {
            apply_entry = Some(expand_managed_fields(e));
        } else {
            rest.push(expand_managed_fields(e));
        }
    }
    let template = entries.iter().find(is_update)?;
    let mut entry = apply_entry.unwrap_or_else(|| expand_managed_fields(template));
    if let Some(f) = &entry.fields_v1 {
        merge_fields(&mut owned, &f.0);
    }
    entry.operation = Some("Apply".into());
    entry.fields_type = Some("FieldsV1".into());
    entry.fields_v1 = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
        owned,
    ));
    rest.push(entry);
    Some(serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": existing.metadata.uid},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": existing.metadata.resource_version},
        {"op": "replace", "path": "/metadata/managedFields", "value": rest},
    ]))
}

/// Whether a `fieldsV1` tree owns something `value` does not have. Keyed list items (`k:`),
/// set values (`v:`) and list indexes (`i:`) are not resolved: they count as absent, so an
/// upgrade is done rather than a removal missed.
/// Whether the fields `owned` (a `fieldsV1` tree) include one `desired` (an object as JSON)
/// does not set: an apply of `desired` would leave it to the entry that owns it.
pub fn leaves_out(owned: &Value, desired: &Value) -> bool {
    owns_absent(owned, Some(desired))
}

fn owns_absent(fields: &Value, value: Option<&Value>) -> bool {
    let Some(fields) = fields.as_object() else {
        return false;
    };
    fields.iter().any(|(key, sub)| {
        if key == "." {
            return false;
        }
        match key.strip_prefix("f:") {
            Some(name) => match value.and_then(|v| v.get(name)) {
                None => true,
                Some(child) => owns_absent(sub, Some(child)),
            },
            None => true,
        }
    })
}

/// Adds the fields of `other` to `into` (both `fieldsV1` trees).
fn merge_fields(into: &mut Value, other: &Value) {
    let (Some(into), Some(other)) = (into.as_object_mut(), other.as_object()) else {
        return;
    };
    for (k, v) in other {
        match into.get_mut(k) {
            Some(existing) => merge_fields(existing, v),
            None => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::syncers::fan_out::rules::MANAGED_BY;
    use serde_json::json;

    fn copy_with_fields(entries: Value) -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "team-a", "uid": "u1", "resourceVersion": "9",
                "labels": {MANAGED_BY: "uid-1"}, "managedFields": entries},
            "type": "Opaque", "data": {"ca.crt": "Y2E=", "old": "b2xk"}}))
    }

    fn desired_without_old() -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "team-a", "labels": {MANAGED_BY: "uid-1"}},
            "type": "Opaque", "data": {"ca.crt": "bmV3"}}))
    }

    fn entry(manager: &str, operation: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": fields, "time": "2026-11-22T10:00:00Z"})
    }

    #[test]
    fn ownership_upgrade_only_when_a_post_owns_what_the_apply_leaves_out() {
        let post = entry(
            "kubesync",
            "Update",
            json!({"f:data": {".": {}, "f:ca.crt": {}, "f:old": {}}, "f:type": {},
                "f:metadata": {"f:labels": {".": {}, "f:kubesync.io/managed-by": {}}}}),
        );
        // Already applied: nothing to hand over.
        let applied = copy_with_fields(json!([entry(
            "kubesync",
            "Apply",
            json!({"f:data": {"f:old": {}}})
        )]));
        assert_eq!(
            ownership_upgrade(&applied, &desired_without_old(), "kubesync"),
            None
        );
        // Created by a POST, and the update sets everything it owns (values may change).
        let created = copy_with_fields(json!([post.clone()]));
        let mut same_keys = desired_without_old();
        same_keys.data["data"]["old"] = json!("bmV3");
        assert_eq!(ownership_upgrade(&created, &same_keys, "kubesync"), None);
        // Another manager's Update entry is not kubesync's business.
        let edited = copy_with_fields(json!([entry(
            "kubectl-edit",
            "Update",
            json!({"f:data": {"f:old": {}}})
        )]));
        assert_eq!(
            ownership_upgrade(&edited, &desired_without_old(), "kubesync"),
            None
        );
    }

    #[test]
    fn compacted_entries_give_the_same_answers_and_the_same_patch() {
        let copy = copy_with_fields(json!([
            entry(
                "kubesync",
                "Update",
                json!({"f:data": {"f:ca.crt": {}, "f:old": {}}, "f:type": {}})
            ),
            entry("kubectl-edit", "Update", json!({"f:data": {"f:extra": {}}})),
            entry("kubesync", "Apply", json!({"f:metadata": {"f:labels": {}}})),
        ]));
        let mut compact = copy.clone();
        crate::object::compact_managed_fields(&mut compact);
        let stored = compact.metadata.managed_fields.as_ref().expect("entries");
        assert!(
            stored
                .iter()
                .all(|e| e.fields_v1.as_ref().is_some_and(|f| f.0.is_string())),
            "each tree is kept as its text"
        );
        let desired = desired_without_old();
        let patch = ownership_upgrade(&copy, &desired, "kubesync").expect("upgrade");
        assert_eq!(
            ownership_upgrade(&compact, &desired, "kubesync"),
            Some(patch),
            "the patch writes trees back, not text"
        );
        let mut same_keys = desired_without_old();
        same_keys.data["data"]["old"] = json!("bmV3");
        let only_post = copy_with_fields(json!([entry(
            "kubesync",
            "Update",
            json!({"f:data": {"f:ca.crt": {}, "f:old": {}}})
        )]));
        let mut compact_post = only_post.clone();
        crate::object::compact_managed_fields(&mut compact_post);
        assert_eq!(
            ownership_upgrade(&compact_post, &same_keys, "kubesync"),
            None
        );
        assert!(ownership_upgrade(&compact_post, &desired, "kubesync").is_some());
    }

    #[test]
    fn ownership_upgrade_merges_the_post_entry_into_the_apply_entry() {
        let copy = copy_with_fields(json!([
            entry(
                "kubesync",
                "Update",
                json!({"f:data": {"f:ca.crt": {}, "f:old": {}}, "f:type": {}})
            ),
            entry("kubectl-edit", "Update", json!({"f:data": {"f:extra": {}}})),
            entry(
                "kubesync",
                "Apply",
                json!({"f:metadata": {"f:labels": {"f:kubesync.io/managed-by": {}}}})
            ),
        ]));
        let patch = ownership_upgrade(&copy, &desired_without_old(), "kubesync").expect("upgrade");
        // Guarded by the copy's uid and resourceVersion.
        assert_eq!(
            patch[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "u1"})
        );
        assert_eq!(
            patch[1],
            json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "9"})
        );
        assert_eq!(patch[2]["path"], "/metadata/managedFields");
        let entries = patch[2]["value"].as_array().expect("entries");
        assert_eq!(entries.len(), 2, "{entries:?}");
        // Others' entries are kept as they were.
        assert_eq!(entries[0]["manager"], "kubectl-edit");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {"f:extra": {}}}));
        // kubesync has one Apply entry, owning what both of its entries owned.
        assert_eq!(entries[1]["manager"], "kubesync");
        assert_eq!(entries[1]["operation"], "Apply");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:data": {"f:ca.crt": {}, "f:old": {}}, "f:type": {},
                "f:metadata": {"f:labels": {"f:kubesync.io/managed-by": {}}}})
        );
    }

    #[test]
    fn owned_list_items_count_as_left_out() {
        // A keyed list item cannot be matched without the schema: upgrade rather than miss.
        let fields = json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}}}}});
        let value = json!({"spec": {"containers": [{"name": "app"}]}});
        assert!(owns_absent(&fields, Some(&value)));
        assert!(!owns_absent(
            &json!({"f:spec": {"f:replicas": {}}}),
            Some(&json!({"spec": {"replicas": 2}}))
        ));
        assert!(owns_absent(
            &json!({"f:spec": {"f:paused": {}}}),
            Some(&json!({"spec": {"replicas": 2}}))
        ));
    }
}
