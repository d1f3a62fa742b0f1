//! Fields the apiserver allocates or controllers own, per kind: never copied, and never read
//! as a difference between a copy and what kubesync writes (pure).
//!
//! A copy is made from the live source, so it would carry what the apiserver allocated for
//! the source (a Service's cluster IP and node ports, a Job's generated selector and labels)
//! and what controllers wrote there (a Deployment's revision, a ServiceAccount's token
//! Secrets, a claim's bound volume). The apiserver refuses some of them in a copy
//! (`provided IP is already allocated`), and controllers rewrite the others at the copy, which
//! kubesync would then revert for ever. So [`strip`] removes them from the copy kubesync
//! writes, and [`comparable`] removes them from the copy it holds before comparing, where the
//! desired copy does not set them: the copy's own allocations never read as drift.
//!
//! A field a destination's patch sets (a pinned node port, a claim bound to a given volume)
//! is written and compared like any other: where the apiserver refuses it, that destination
//! says why (`Error`). Fields marked [`Rule::pinnable`] `false` are also dropped from the
//! copies kubesync holds in its stores ([`strip_held`]), before their large values are held
//! as digests.
//!
//! [`RULES`] is the table; the book's ObjectSync chapter lists it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::Value;

/// One field never copied.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The kind's API group (`""`: the core group).
    pub group: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// The field: a path of keys from the object's root (`metadata`, `spec`, …); `*` is any
    /// element of a list. Under `metadata`, only `labels` and `annotations` are read.
    pub path: &'static [&'static str],
    /// When the source's value is kept after all (given the object and the value).
    pub keep: Option<fn(&DynamicObject, &Value) -> bool>,
    /// Whether a destination's patch may set it (a node port, a volume); otherwise it is never
    /// written by kubesync at all.
    pub pinnable: bool,
    /// Why it is not copied.
    pub why: &'static str,
}

mod table;
pub use table::RULES;

/// The rules of `group`/`kind`.
pub fn rules_of<'a>(group: &'a str, kind: &'a str) -> impl Iterator<Item = &'static Rule> + 'a {
    RULES
        .iter()
        .filter(move |r| r.group == group && r.kind == kind)
}

/// The group and kind of `obj`, from its `apiVersion` and `kind`.
fn group_kind(obj: &DynamicObject) -> Option<(&str, &str)> {
    let types = obj.types.as_ref()?;
    let group = match types.api_version.split_once('/') {
        Some((group, _)) => group,
        None => "",
    };
    Some((group, types.kind.as_str()))
}

/// Removes from the copy kubesync will write every field of [`RULES`] for its kind (unless
/// the rule keeps the source's value).
pub fn strip(copy: &mut DynamicObject) {
    strip_where(copy, |_| true);
}

/// Removes from a copy as kubesync holds it the fields no destination may set
/// ([`Rule::pinnable`] `false`): they are never compared.
pub fn strip_held(copy: &mut DynamicObject) {
    strip_where(copy, |r| !r.pinnable);
}

fn strip_where(copy: &mut DynamicObject, which: impl Fn(&Rule) -> bool) {
    let Some((group, kind)) = group_kind(copy) else {
        return;
    };
    let (group, kind) = (group.to_string(), kind.to_string());
    let mut gone = Vec::new();
    for rule in rules_of(&group, &kind).filter(|r| which(r)) {
        for path in concrete(copy, rule.path) {
            let kept = match (rule.keep, lookup(copy, &path)) {
                (Some(keep), Some(value)) => keep(copy, &value),
                _ => false,
            };
            if !kept {
                gone.push(path);
            }
        }
    }
    for path in &gone {
        remove(copy, path);
    }
}

/// `existing` (a copy kubesync holds) as it is compared with `desired`: without the fields of
/// [`RULES`] for its kind that `desired` does not set (borrowed when there are none).
pub fn comparable<'a>(
    existing: &'a DynamicObject,
    desired: &DynamicObject,
) -> Cow<'a, DynamicObject> {
    let Some((group, kind)) = group_kind(desired).or_else(|| group_kind(existing)) else {
        return Cow::Borrowed(existing);
    };
    let absent: Vec<Vec<String>> = rules_of(group, kind)
        .flat_map(|r| concrete(existing, r.path))
        .filter(|path| lookup(desired, path).is_none())
        .collect();
    if absent.is_empty() {
        return Cow::Borrowed(existing);
    }
    let mut out = existing.clone();
    for path in &absent {
        remove(&mut out, path);
    }
    Cow::Owned(out)
}

/// What a replacement (a PUT of `body` over `existing`) keeps of the copy's own allocations:
/// every field of [`RULES`] that `existing` has and `body` does not set, carried over (a
/// claim's bound volume, which a PUT may not remove). Fields kubesync does not hold
/// ([`strip_held`]) are not carried: where the apiserver requires them (a Job's selector), the
/// replacement is refused and the copy recreated.
pub fn carry_over(existing: &DynamicObject, body: &mut DynamicObject) {
    let Some((group, kind)) = group_kind(body).or_else(|| group_kind(existing)) else {
        return;
    };
    let (group, kind) = (group.to_string(), kind.to_string());
    for rule in rules_of(&group, &kind) {
        for path in concrete(existing, rule.path) {
            if lookup(body, &path).is_none()
                && let Some(value) = lookup(existing, &path)
            {
                insert(body, &path, value.into_owned());
            }
        }
    }
}

/// The label or annotation map a `metadata` path names.
fn meta_map<'a>(obj: &'a DynamicObject, map: &str) -> Option<&'a BTreeMap<String, String>> {
    match map {
        "labels" => obj.metadata.labels.as_ref(),
        "annotations" => obj.metadata.annotations.as_ref(),
        _ => None,
    }
}

/// The paths in `obj` that `pattern` names (`*` expanded to each index of a list).
fn concrete(obj: &DynamicObject, pattern: &[&str]) -> Vec<Vec<String>> {
    match pattern {
        ["metadata", map, key] => meta_map(obj, map)
            .filter(|m| m.contains_key(*key))
            .map(|_| {
                vec![vec![
                    "metadata".to_string(),
                    map.to_string(),
                    key.to_string(),
                ]]
            })
            .unwrap_or_default(),
        pattern => concrete_in(&obj.data, pattern),
    }
}

fn concrete_in(value: &Value, pattern: &[&str]) -> Vec<Vec<String>> {
    let Some((first, rest)) = pattern.split_first() else {
        return vec![Vec::new()];
    };
    let children: Vec<(String, &Value)> = match (*first, value) {
        ("*", Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        (key, Value::Object(map)) => map
            .get(key)
            .map(|v| (key.to_string(), v))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    children
        .into_iter()
        .flat_map(|(key, child)| {
            concrete_in(child, rest).into_iter().map(move |mut tail| {
                tail.insert(0, key.clone());
                tail
            })
        })
        .collect()
}

/// The value at `path` in `obj` (a label's or annotation's as a string).
fn lookup<'a>(obj: &'a DynamicObject, path: &[String]) -> Option<Cow<'a, Value>> {
    match path {
        [meta, map, key] if meta == "metadata" => meta_map(obj, map)?
            .get(key)
            .map(|v| Cow::Owned(Value::String(v.clone()))),
        path => path
            .iter()
            .try_fold(&obj.data, |v, key| match v {
                Value::Object(map) => map.get(key),
                Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            })
            .map(Cow::Borrowed),
    }
}

/// Removes the field at `path` from `obj` (labels and annotations from its metadata).
fn remove(obj: &mut DynamicObject, path: &[String]) {
    match path {
        [meta, map, key] if meta == "metadata" => {
            let map = match map.as_str() {
                "labels" => &mut obj.metadata.labels,
                "annotations" => &mut obj.metadata.annotations,
                _ => return,
            };
            if let Some(m) = map {
                m.remove(key);
            }
        }
        [parent @ .., last] => {
            let parent = parent.iter().try_fold(&mut obj.data, |v, key| match v {
                Value::Object(map) => map.get_mut(key),
                Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
                _ => None,
            });
            if let Some(Value::Object(map)) = parent {
                map.remove(last);
            }
        }
        [] => {}
    }
}

/// Sets the field at `path` of `obj` (an existing parent only).
fn insert(obj: &mut DynamicObject, path: &[String], value: Value) {
    match path {
        [meta, map, key] if meta == "metadata" => {
            let map = match map.as_str() {
                "labels" => &mut obj.metadata.labels,
                "annotations" => &mut obj.metadata.annotations,
                _ => return,
            };
            if let Some(v) = value.as_str() {
                map.get_or_insert_with(BTreeMap::new)
                    .insert(key.clone(), v.to_string());
            }
        }
        [parent @ .., last] => {
            let parent = parent.iter().try_fold(&mut obj.data, |v, key| match v {
                Value::Object(map) => map.get_mut(key),
                Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
                _ => None,
            });
            if let Some(Value::Object(map)) = parent {
                map.insert(last.clone(), value);
            }
        }
        [] => {}
    }
}

#[cfg(test)]
mod tests;
