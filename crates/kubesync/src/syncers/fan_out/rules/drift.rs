//! Which fields of a copy differ from what kubesync would write, and who changed them: the
//! field managers that own those fields in the copy's `managedFields`, with their times.
//! Paths only, never values (a Secret's data must not reach a status or an Event).

use std::collections::BTreeMap;
use std::fmt;

use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decide::Strategy;
use super::digest;
use super::{LAST_APPLIED, SOURCE_VERSION};
use crate::object::fields_v1;

/// A field of an object, as the keys leading to it: `["data", "tls.crt"]`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldPath(pub Vec<String>);

impl fmt::Display for FieldPath {
    /// `data["tls.crt"]`, `metadata.labels["app.kubernetes.io/name"]`, `spec.replicas`: keys
    /// that are plain words are joined with dots, others quoted in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, key) in self.0.iter().enumerate() {
            let plain = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            match (plain, i) {
                (true, 0) => f.write_str(key)?,
                (true, _) => write!(f, ".{key}")?,
                (false, _) => write!(f, "[{key:?}]")?,
            }
        }
        Ok(())
    }
}

/// The fields at which `existing` differs from `desired`, as [`in_sync`](super::in_sync)
/// judges them: every field `desired` sets (nested maps key by key; lists as a whole), the
/// labels and annotations it sets (but not the source-version mark, which moves with every
/// source change), and with [`Strategy::Replace`] also top-level fields,
/// labels and annotations `existing` has and `desired` does not (except `status`).
pub fn changed_fields(
    existing: &DynamicObject,
    desired: &DynamicObject,
    strategy: Strategy,
) -> Vec<FieldPath> {
    let existing = &*super::allocated::comparable(existing, desired);
    let mut out = Vec::new();
    let empty = serde_json::Map::new();
    let want = desired.data.as_object().unwrap_or(&empty);
    let have = existing.data.as_object().unwrap_or(&empty);
    for (key, value) in want {
        diff(&mut vec![key.clone()], have.get(key), Some(value), &mut out);
    }
    if strategy == Strategy::Replace {
        for key in have.keys() {
            if key != "status" && !want.contains_key(key) {
                out.push(FieldPath(vec![key.clone()]));
            }
        }
    }
    let none = BTreeMap::new();
    let meta = [
        (
            "labels",
            &desired.metadata.labels,
            &existing.metadata.labels,
        ),
        (
            "annotations",
            &desired.metadata.annotations,
            &existing.metadata.annotations,
        ),
    ];
    for (field, want, have) in meta {
        let (want, have) = (
            want.as_ref().unwrap_or(&none),
            have.as_ref().unwrap_or(&none),
        );
        let path = |k: &str| FieldPath(vec!["metadata".into(), field.into(), k.into()]);
        for (k, v) in want {
            // The version mark moves with every source change: bookkeeping, not content.
            if have.get(k) != Some(v) && k != SOURCE_VERSION {
                out.push(path(k));
            }
        }
        if strategy == Strategy::Replace {
            for k in have.keys() {
                if !want.contains_key(k) && k != LAST_APPLIED {
                    out.push(path(k));
                }
            }
        }
    }
    out.sort();
    out
}

/// Adds to `out` the paths below `path` where `have` and `want` differ: maps key by key,
/// anything else (and a value held as a [`digest`]) as a whole.
fn diff(
    path: &mut Vec<String>,
    have: Option<&Value>,
    want: Option<&Value>,
    out: &mut Vec<FieldPath>,
) {
    if have == want {
        return;
    }
    // A value held as a digest differs as a whole, or not at all.
    if let (Some(h), Some(w)) = (have, want)
        && digest::is_digest(h).is_some()
    {
        if !digest::same(h, w) {
            out.push(FieldPath(path.clone()));
        }
        return;
    }
    if let (Some(Value::Object(h)), Some(Value::Object(w))) = (have, want) {
        let mut keys: Vec<&String> = h.keys().chain(w.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            path.push(key.clone());
            diff(path, h.get(key), w.get(key), out);
            path.pop();
        }
    } else {
        out.push(FieldPath(path.clone()));
    }
}

/// Whether a `fieldsV1` tree owns the field at `path`, or something inside it, or the map
/// or list holding it as a whole.
fn owns(tree: &Value, path: &[String]) -> bool {
    let mut node = tree;
    for key in path {
        match node.get(format!("f:{key}")) {
            Some(next) => node = next,
            // An owned leaf above the path (an atomic field) owns what is in it.
            None => {
                return !std::ptr::eq(node, tree) && node.as_object().is_some_and(|m| m.is_empty());
            }
        }
    }
    true
}

/// One field manager that changed a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagerChange {
    /// The field manager's name (e.g. `kubectl-edit`, `helm`).
    pub manager: String,
    /// `Update` or `Apply`.
    pub operation: String,
    /// When it last wrote (RFC 3339, from its managedFields entry).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// The changed fields it owns.
    pub fields: Vec<String>,
}

/// A copy found changed by someone other than kubesync.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    /// Every field that differs from what kubesync wrote.
    pub fields: Vec<String>,
    /// The managers owning those fields, newest first. A field that was removed is owned by
    /// no one and listed in [`fields`](Drift::fields) only.
    pub managers: Vec<ManagerChange>,
}

impl fmt::Display for Drift {
    /// `data.token by kubectl-edit (Update, 2026-11-25T10:00:00Z); data.old removed`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self
            .managers
            .iter()
            .map(|m| {
                let when = if m.time.is_empty() {
                    m.operation.clone()
                } else {
                    format!("{}, {}", m.operation, m.time)
                };
                format!("{} by {} ({when})", m.fields.join(", "), m.manager)
            })
            .collect();
        let removed: Vec<&str> = self
            .fields
            .iter()
            .filter(|p| !self.managers.iter().any(|m| m.fields.contains(p)))
            .map(String::as_str)
            .collect();
        if !removed.is_empty() {
            parts.push(format!(
                "{} removed (no field manager recorded it)",
                removed.join(", ")
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

/// How `existing`, one of kubesync's copies written by field manager `own`, was changed by
/// someone else; `None` when it was not (its differences from `desired` are the source's or
/// the declaration's changes). `changed` is [`changed_fields`] of the two.
///
/// A differing field owned by another manager was changed by that manager. A field `desired`
/// sets that is missing from `existing` was removed by someone, when the copy carries the
/// source version `desired` carries (else the source may have gained it). Differences owned
/// by `own` alone are kubesync's older writes.
pub fn drift(
    existing: &DynamicObject,
    desired: &DynamicObject,
    changed: &[FieldPath],
    own: &str,
) -> Option<Drift> {
    let version = |o: &DynamicObject| {
        o.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SOURCE_VERSION).cloned())
    };
    let same_source = version(existing) == version(desired);
    attribute(existing, changed, own, |p| {
        same_source && absent(existing, p)
    })
}

/// The changes among `changed` (fields at which `existing`, written by field manager `own`,
/// differs from what it should be) that other field managers made: the fields they own in
/// `existing`'s managedFields. No removal is inferred — for a copy without a source-version
/// mark, a field missing from it may be new at the source.
pub fn changes_by_others(
    existing: &DynamicObject,
    changed: &[FieldPath],
    own: &str,
) -> Option<Drift> {
    attribute(existing, changed, own, |_| false)
}

/// The [`Drift`] of `existing`: the fields of `changed` owned by managers other than `own`
/// (by manager, newest first), and those `removed` says someone removed.
fn attribute(
    existing: &DynamicObject,
    changed: &[FieldPath],
    own: &str,
    removed: impl Fn(&FieldPath) -> bool,
) -> Option<Drift> {
    if changed.is_empty() {
        return None;
    }
    let mut managers: Vec<ManagerChange> = Vec::new();
    for entry in existing.metadata.managed_fields.iter().flatten() {
        let manager = entry.manager.clone().unwrap_or_default();
        if manager == own || entry.subresource.is_some() {
            continue;
        }
        let Some(tree) = fields_v1(entry) else {
            continue;
        };
        let fields: Vec<String> = changed
            .iter()
            .filter(|p| owns(&tree, &p.0))
            .map(ToString::to_string)
            .collect();
        if !fields.is_empty() {
            managers.push(ManagerChange {
                manager,
                operation: entry.operation.clone().unwrap_or_default(),
                time: entry
                    .time
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
                fields,
            });
        }
    }
    let mut fields: Vec<String> = changed
        .iter()
        .filter(|p| {
            let name = p.to_string();
            managers.iter().any(|m| m.fields.contains(&name)) || removed(p)
        })
        .map(ToString::to_string)
        .collect();
    if fields.is_empty() {
        return None;
    }
    fields.dedup();
    managers.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| a.manager.cmp(&b.manager)));
    Some(Drift { fields, managers })
}

/// Whether `obj` has nothing at `path`.
fn absent(obj: &DynamicObject, path: &FieldPath) -> bool {
    match path.0.as_slice() {
        [m, field, key] if m == "metadata" => {
            let map = match field.as_str() {
                "labels" => &obj.metadata.labels,
                "annotations" => &obj.metadata.annotations,
                _ => return false,
            };
            map.as_ref().is_none_or(|m| !m.contains_key(key))
        }
        keys => {
            let mut node = &obj.data;
            for key in keys {
                match node.get(key) {
                    Some(next) => node = next,
                    None => return true,
                }
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn copy(data: Value, managed: Value, version: &str) -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n",
                "labels": {"team": "a"},
                "annotations": {SOURCE_VERSION: version},
                "managedFields": managed},
            "data": data}))
    }

    fn entry(manager: &str, operation: &str, time: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1",
            "time": time, "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    /// The drift of `existing` from [`desired`], applied by `kubesync`.
    fn drift_of(existing: &DynamicObject) -> Option<Drift> {
        let changed = changed_fields(existing, &desired(), Strategy::Apply);
        drift(existing, &desired(), &changed, "kubesync")
    }

    fn desired() -> DynamicObject {
        copy(json!({"a": "1", "b": "2", "tls.crt": "x"}), json!([]), "7")
    }

    fn own_fields() -> Value {
        json!({"f:data": {".": {}, "f:a": {}, "f:b": {}, "f:tls.crt": {}},
            "f:metadata": {"f:labels": {"f:team": {}}, "f:annotations": {"f:x": {}}}})
    }

    #[test]
    fn paths_are_readable_and_quote_keys_with_dots_or_slashes() {
        let p = |keys: &[&str]| FieldPath(keys.iter().map(|k| k.to_string()).collect()).to_string();
        assert_eq!(p(&["spec", "replicas"]), "spec.replicas");
        assert_eq!(p(&["data", "tls.crt"]), "data[\"tls.crt\"]");
        assert_eq!(
            p(&["metadata", "labels", "app.kubernetes.io/name"]),
            "metadata.labels[\"app.kubernetes.io/name\"]"
        );
    }

    #[test]
    fn changed_fields_are_the_keys_that_differ_never_values() {
        let mut existing = desired();
        existing.data["data"] = json!({"a": "1", "b": "secret-value", "extra": "y"});
        existing.metadata.labels = Some([("team".to_string(), "b".to_string())].into());
        let changed: Vec<String> = changed_fields(&existing, &desired(), Strategy::Apply)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            changed,
            [
                "data.b",
                "data.extra",
                "data[\"tls.crt\"]",
                "metadata.labels.team"
            ]
        );
        assert!(!changed.concat().contains("secret-value"));
        // With Replace, labels and top-level fields kubesync does not set differ too.
        existing.data["immutable"] = json!(true);
        let replace = changed_fields(&existing, &desired(), Strategy::Replace);
        assert!(replace.iter().any(|p| p.to_string() == "immutable"));
        assert!(changed_fields(&desired(), &desired(), Strategy::Replace).is_empty());
    }

    #[test]
    fn drift_names_the_managers_owning_the_changed_fields_newest_first() {
        let managed = json!([
            entry("kubesync", "Apply", "2026-11-25T10:00:00Z", own_fields()),
            entry(
                "kubectl-edit",
                "Update",
                "2026-11-25T10:05:00Z",
                json!({"f:data": {"f:a": {}}})
            ),
            entry(
                "ops-bot",
                "Apply",
                "2026-11-25T10:07:00Z",
                json!({"f:metadata": {"f:labels": {"f:team": {}}}})
            ),
        ]);
        let mut existing = copy(
            json!({"a": "edited", "b": "2", "tls.crt": "x"}),
            managed,
            "7",
        );
        existing.metadata.labels = Some([("team".to_string(), "b".to_string())].into());
        let d = drift_of(&existing).expect("drift");
        assert_eq!(d.fields, ["data.a", "metadata.labels.team"]);
        let who: Vec<(&str, &str, &[String])> = d
            .managers
            .iter()
            .map(|m| (m.manager.as_str(), m.time.as_str(), m.fields.as_slice()))
            .collect();
        assert_eq!(
            who,
            [
                (
                    "ops-bot",
                    "2026-11-25T10:07:00Z",
                    &["metadata.labels.team".to_string()][..]
                ),
                (
                    "kubectl-edit",
                    "2026-11-25T10:05:00Z",
                    &["data.a".to_string()][..]
                ),
            ]
        );
        assert_eq!(
            d.to_string(),
            "metadata.labels.team by ops-bot (Apply, 2026-11-25T10:07:00Z); data.a by kubectl-edit (Update, 2026-11-25T10:05:00Z)"
        );
    }

    #[test]
    fn a_removed_field_is_drift_only_while_the_source_is_unchanged() {
        let managed = json!([entry(
            "kubesync",
            "Apply",
            "2026-11-25T10:00:00Z",
            json!({"f:data": {"f:a": {}, "f:tls.crt": {}}})
        )]);
        let existing = copy(json!({"a": "1", "tls.crt": "x"}), managed.clone(), "7");
        let d = drift_of(&existing).expect("drift");
        assert_eq!(d.fields, ["data.b"]);
        assert!(d.managers.is_empty());
        assert_eq!(
            d.to_string(),
            "data.b removed (no field manager recorded it)"
        );
        // The copy carries an older source version: the source gained the key.
        let behind = copy(json!({"a": "1", "tls.crt": "x"}), managed, "6");
        assert_eq!(drift_of(&behind), None);
    }

    #[test]
    fn changes_by_others_infers_no_removal() {
        // b is missing (maybe new at the source), a was changed by alice.
        let managed = json!([
            entry(
                "kubesync",
                "Update",
                "2026-11-25T10:00:00Z",
                json!({"f:data": {"f:tls.crt": {}}})
            ),
            entry(
                "alice",
                "Update",
                "2026-11-25T10:05:00Z",
                json!({"f:data": {"f:a": {}}})
            ),
        ]);
        let existing = copy(json!({"a": "9", "tls.crt": "x"}), managed, "7");
        let changed = changed_fields(&existing, &desired(), Strategy::Apply);
        assert_eq!(
            drift_of(&existing).expect("drift").fields,
            ["data.a", "data.b"]
        );
        let d = changes_by_others(&existing, &changed, "kubesync").expect("alice's change");
        assert_eq!(d.fields, ["data.a"], "no removal inferred");
        assert_eq!(
            d.to_string(),
            "data.a by alice (Update, 2026-11-25T10:05:00Z)"
        );
        let only_missing = copy(
            json!({"a": "1", "tls.crt": "x"}),
            json!([entry(
                "kubesync",
                "Update",
                "2026-11-25T10:00:00Z",
                own_fields()
            )]),
            "7",
        );
        let changed = changed_fields(&only_missing, &desired(), Strategy::Apply);
        assert_eq!(changes_by_others(&only_missing, &changed, "kubesync"), None);
    }

    #[test]
    fn kubesyncs_own_older_writes_are_not_drift() {
        let managed = json!([entry(
            "kubesync",
            "Apply",
            "2026-11-25T10:00:00Z",
            own_fields()
        )]);
        let existing = copy(json!({"a": "old", "b": "2", "tls.crt": "x"}), managed, "6");
        assert_eq!(drift_of(&existing), None);
        // Compacted entries (as the copies' store holds them) are read the same way.
        let mut compact = copy(
            json!({"a": "edited", "b": "2", "tls.crt": "x"}),
            json!([entry(
                "kubectl-edit",
                "Update",
                "2026-11-25T10:05:00Z",
                json!({"f:data": {"f:a": {}}})
            )]),
            "7",
        );
        crate::object::compact_managed_fields(&mut compact);
        let d = drift_of(&compact).expect("drift");
        assert_eq!(d.managers[0].manager, "kubectl-edit");
    }

    #[test]
    fn an_atomic_field_owned_as_a_whole_owns_what_is_inside() {
        let tree = json!({"f:spec": {"f:ports": {}}});
        let path = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
        assert!(owns(&tree, &path(&["spec", "ports"])));
        assert!(owns(&tree, &path(&["spec", "ports", "x"])));
        assert!(!owns(&tree, &path(&["spec", "selector"])));
        assert!(!owns(&tree, &path(&["data"])));
    }
}
