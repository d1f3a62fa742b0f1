//! Fields of a copy left to others (pure): an autoscaler's `spec.replicas`, a mesh's injected
//! sidecar, an admission webhook's label, a value a cluster needs of its own.
//!
//! A destination names them by JSON pointer (RFC 6901: `/spec/replicas`,
//! `/metadata/annotations/sidecar.istio.io~1status`) or by field manager (whatever those
//! managers own in the copy's `managedFields`). kubesync neither reverts nor reports them:
//! they are left out of every comparison ([`without`]), and an update writes the copy's own
//! values there ([`keep_theirs`]). A new copy starts from the source's values.

use std::fmt;

use kube::api::DynamicObject;
use serde_json::{Map, Value};

use super::path::{Step, get, remove, set};
use crate::object::fields_v1;

/// What a destination leaves to others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ignore {
    /// Fields by JSON pointer.
    pub pointers: Vec<Pointer>,
    /// Field managers whose fields in the copy are theirs.
    pub managers: Vec<String>,
}

impl Ignore {
    /// Whether nothing is left to others.
    pub fn is_empty(&self) -> bool {
        self.pointers.is_empty() && self.managers.is_empty()
    }
}

/// A JSON pointer, parsed: its keys, unescaped (`~1` is `/`, `~0` is `~`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer(Vec<String>);

impl Pointer {
    /// Parses `text` (RFC 6901). Refused: the whole object, `apiVersion`, `kind`, any
    /// `metadata` field but one label or annotation, and kubesync's own marks.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!("{text:?} is not a JSON pointer: it starts with /"));
        };
        let mut keys = Vec::new();
        for raw in rest.split('/') {
            if raw.is_empty() {
                return Err(format!("{text:?} has an empty key"));
            }
            let mut key = String::new();
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, true) => match chars.next() {
                        Some('0') => key.push('~'),
                        Some('1') => key.push('/'),
                        _ => {
                            return Err(format!(
                                "{text:?}: ~ is written ~0 and / is written ~1 in a key"
                            ));
                        }
                    },
                    (c, false) => key.push(c),
                }
            }
            keys.push(key);
        }
        match keys.as_slice() {
            [first, ..] if first == "apiVersion" || first == "kind" => Err(format!(
                "{text:?}: a copy's apiVersion and kind are its source's"
            )),
            [first, map, key]
                if first == "metadata" && (map == "labels" || map == "annotations") =>
            {
                if key.starts_with("kubesync.io/") {
                    Err(format!(
                        "{text:?}: kubesync's own marks are never left to others"
                    ))
                } else {
                    Ok(Self(keys))
                }
            }
            [first, ..] if first == "metadata" => Err(format!(
                "{text:?}: of a copy's metadata only a label or an annotation may be left to others (/metadata/labels/<key>, /metadata/annotations/<key>)"
            )),
            _ => Ok(Self(keys)),
        }
    }

    /// The keys.
    pub fn keys(&self) -> &[String] {
        &self.0
    }
}

impl fmt::Display for Pointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for key in &self.0 {
            write!(f, "/{}", key.replace('~', "~0").replace('/', "~1"))?;
        }
        Ok(())
    }
}

/// The fields of `copy` left to others under `ignore`: the pointers, and what the named
/// managers own in the copy's `managedFields` (an element of a list they added, as a whole).
pub fn resolve(copy: &DynamicObject, ignore: &Ignore) -> Vec<Vec<Step>> {
    let mut out: Vec<Vec<Step>> = ignore.pointers.iter().map(|p| steps_of(copy, p)).collect();
    for entry in copy.metadata.managed_fields.iter().flatten() {
        let manager = entry.manager.as_deref().unwrap_or_default();
        if entry.subresource.is_some() && entry.subresource.as_deref() != Some("scale") {
            continue;
        }
        if !ignore.managers.iter().any(|m| m == manager) {
            continue;
        }
        if let Some(tree) = fields_v1(entry) {
            owned(&tree, &mut Vec::new(), &mut out);
        }
    }
    out.retain(|p| !p.is_empty());
    out
}

/// The steps of a pointer in `copy`: a numeric key into a list is an index.
fn steps_of(copy: &DynamicObject, pointer: &Pointer) -> Vec<Step> {
    let keys = pointer.keys();
    if keys.first().is_some_and(|k| k == "metadata") {
        return keys.iter().cloned().map(Step::Key).collect();
    }
    let mut node = Some(&copy.data);
    keys.iter()
        .map(|key| {
            let step = match (node, key.parse::<usize>()) {
                (Some(Value::Array(_)), Ok(i)) => Step::Index(i),
                _ => Step::Key(key.clone()),
            };
            node = node.and_then(|n| match (&step, n) {
                (Step::Index(i), Value::Array(items)) => items.get(*i),
                (Step::Key(k), Value::Object(map)) => map.get(k),
                _ => None,
            });
            step
        })
        .collect()
}

/// The leaves of a `fieldsV1` tree, as steps: a node marked `.` (its element is owned as a
/// whole) ends the path there.
fn owned(tree: &Value, path: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    let Some(map) = tree.as_object() else {
        return;
    };
    let children: Vec<(&String, &Value)> = map.iter().filter(|(k, _)| *k != ".").collect();
    if (map.contains_key(".") && !path.is_empty()) || children.is_empty() {
        out.push(path.clone());
        return;
    }
    for (key, child) in children {
        let step = if let Some(name) = key.strip_prefix("f:") {
            Step::Key(name.to_string())
        } else if let Some(fields) = key.strip_prefix("k:") {
            match serde_json::from_str::<Map<String, Value>>(fields) {
                Ok(fields) => Step::Element(fields),
                Err(_) => continue,
            }
        } else if let Some(value) = key.strip_prefix("v:") {
            match serde_json::from_str::<Value>(value) {
                Ok(value) => Step::Value(value),
                Err(_) => continue,
            }
        } else if let Some(i) = key.strip_prefix("i:") {
            match i.parse() {
                Ok(i) => Step::Index(i),
                Err(_) => continue,
            }
        } else {
            continue;
        };
        path.push(step);
        owned(child, path, out);
        path.pop();
    }
}

/// `obj` without the fields at `paths` (borrowed when it has none of them).
pub fn without<'a>(
    obj: &'a DynamicObject,
    paths: &[Vec<Step>],
) -> std::borrow::Cow<'a, DynamicObject> {
    if paths.iter().all(|p| get(obj, p).is_none()) {
        return std::borrow::Cow::Borrowed(obj);
    }
    let mut out = obj.clone();
    for path in paths {
        remove(&mut out, path);
    }
    std::borrow::Cow::Owned(out)
}

/// What an update writes at `paths`: the copy's own values (`existing`), where it has them;
/// nothing where it has none.
pub fn keep_theirs(body: &mut DynamicObject, existing: &DynamicObject, paths: &[Vec<Step>]) {
    for path in paths {
        match get(existing, path) {
            Some(value) => set(body, path, value),
            None => remove(body, path),
        }
    }
}

/// What an update of `existing` writes: `desired`, with the copy's own values at the fields
/// left to others.
pub fn body<'a>(
    desired: &'a DynamicObject,
    existing: &DynamicObject,
    ignore: &Ignore,
) -> std::borrow::Cow<'a, DynamicObject> {
    if ignore.is_empty() {
        return std::borrow::Cow::Borrowed(desired);
    }
    let mut out = desired.clone();
    keep_theirs(&mut out, existing, &resolve(existing, ignore));
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn deployment(replicas: i64, containers: Value, managed: Value) -> DynamicObject {
        obj(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "a",
                "annotations": {"sidecar.istio.io/status": "injected", "team": "a"},
                "managedFields": managed,
            },
            "spec": {"replicas": replicas, "template": {"spec": {"containers": containers}}},
        }))
    }

    #[test]
    fn pointers_parse_as_rfc_6901_and_refuse_what_is_never_left_to_others() {
        let p = Pointer::parse("/metadata/annotations/sidecar.istio.io~1status").expect("ok");
        assert_eq!(
            p.keys(),
            ["metadata", "annotations", "sidecar.istio.io/status"]
        );
        assert_eq!(
            p.to_string(),
            "/metadata/annotations/sidecar.istio.io~1status"
        );
        assert_eq!(
            Pointer::parse("/data/a~0b").expect("ok").keys(),
            ["data", "a~b"]
        );
        for bad in [
            "spec/replicas",
            "/",
            "/spec//replicas",
            "/apiVersion",
            "/kind",
            "/metadata/name",
            "/metadata/labels",
            "/metadata/labels/kubesync.io/managed-by",
            "/metadata/annotations/kubesync.io~1owner",
            "/spec/a~2",
        ] {
            assert!(Pointer::parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn ignored_fields_are_compared_nowhere_and_updates_keep_the_copys_values() {
        let ignore = Ignore {
            pointers: vec![
                Pointer::parse("/spec/replicas").expect("ok"),
                Pointer::parse("/metadata/annotations/sidecar.istio.io~1status").expect("ok"),
            ],
            managers: Vec::new(),
        };
        let copy = deployment(5, json!([{"name": "app", "image": "v1"}]), json!([]));
        let mut desired = deployment(2, json!([{"name": "app", "image": "v2"}]), json!([]));
        desired.metadata.annotations = Some(BTreeMap::from([("team".into(), "a".into())]));
        let paths = resolve(&copy, &ignore);
        let (have, want) = (without(&copy, &paths), without(&desired, &paths));
        assert_eq!(have.data["spec"].get("replicas"), None);
        assert_eq!(want.data["spec"].get("replicas"), None);
        assert_eq!(have.metadata.annotations, want.metadata.annotations);
        // The image is not ignored: it still differs.
        assert_ne!(have.data, want.data);
        let mut body = desired.clone();
        keep_theirs(&mut body, &copy, &paths);
        assert_eq!(body.data["spec"]["replicas"], 5);
        assert_eq!(
            body.data["spec"]["template"]["spec"]["containers"][0]["image"],
            "v2"
        );
        assert_eq!(
            body.metadata.annotations.as_ref().expect("annotations")["sidecar.istio.io/status"],
            "injected"
        );
    }

    #[test]
    fn what_a_named_manager_owns_is_theirs_down_to_list_elements() {
        let managed = json!([
            {"manager": "kubesync", "operation": "Apply", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {}}}},
            {"manager": "hpa", "operation": "Update", "subresource": "scale", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "istio", "operation": "Update", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
                 "k:{\"name\":\"istio-proxy\"}": {".": {}, "f:image": {}, "f:name": {}}
             }}}}}},
        ]);
        let copy = deployment(
            7,
            json!([{"name": "istio-proxy", "image": "proxy"}, {"name": "app", "image": "v1"}]),
            managed,
        );
        let ignore = Ignore {
            pointers: Vec::new(),
            managers: vec!["hpa".into(), "istio".into()],
        };
        let paths = resolve(&copy, &ignore);
        assert!(paths.contains(&vec![
            Step::Key("spec".into()),
            Step::Key("replicas".into())
        ]));
        let desired = deployment(2, json!([{"name": "app", "image": "v1"}]), json!([]));
        let (have, want) = (without(&copy, &paths), without(&desired, &paths));
        assert_eq!(
            have.data, want.data,
            "the sidecar and the replicas are theirs"
        );
        let mut body = desired.clone();
        keep_theirs(&mut body, &copy, &paths);
        assert_eq!(body.data["spec"]["replicas"], 7);
        let names: Vec<&str> = body.data["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["app", "istio-proxy"]);
        // Managers not named are not theirs; kubesync's own fields never are.
        let none = resolve(
            &copy,
            &Ignore {
                pointers: Vec::new(),
                managers: vec!["someone-else".into()],
            },
        );
        assert!(none.is_empty());
    }

    #[test]
    fn nothing_ignored_borrows() {
        let copy = deployment(1, json!([]), json!([]));
        assert!(matches!(without(&copy, &[]), std::borrow::Cow::Borrowed(_)));
        let absent = vec![vec![Step::Key("nothing".into())]];
        assert!(matches!(
            without(&copy, &absent),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
