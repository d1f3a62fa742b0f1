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
use std::collections::HashMap;
use std::sync::LazyLock;

use kube::api::DynamicObject;
use serde_json::Value;

use super::path::{self, Step};

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

/// [`RULES`] by kind, in the table's order: looked up for every copy planned and every copy
/// event held, where most kinds have no rule at all.
static BY_KIND: LazyLock<HashMap<&'static str, Vec<&'static Rule>>> = LazyLock::new(|| {
    let mut by_kind: HashMap<&'static str, Vec<&'static Rule>> = HashMap::new();
    for rule in RULES {
        by_kind.entry(rule.kind).or_default().push(rule);
    }
    by_kind
});

/// The rules of `group`/`kind`.
pub fn rules_of<'a>(group: &'a str, kind: &str) -> impl Iterator<Item = &'static Rule> + 'a {
    BY_KIND
        .get(kind)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .copied()
        .filter(move |r| crate::text::same(r.group, group))
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
    let mut gone = Vec::new();
    for rule in rules_of(group, kind).filter(|r| which(r)) {
        for at in concrete(copy, rule.path) {
            let kept = match (rule.keep, path::get(copy, &at)) {
                (Some(keep), Some(value)) => keep(copy, &value),
                _ => false,
            };
            if !kept {
                gone.push(at);
            }
        }
    }
    for at in &gone {
        path::remove(copy, at);
    }
}

/// `obj` without the fields [`strip`] removes (borrowed when it has none): what a copy made
/// from it as a source would carry of them.
pub fn stripped(obj: &DynamicObject) -> Cow<'_, DynamicObject> {
    match group_kind(obj) {
        Some((group, kind)) if rules_of(group, kind).next().is_some() => {
            let mut out = obj.clone();
            strip(&mut out);
            Cow::Owned(out)
        }
        _ => Cow::Borrowed(obj),
    }
}

/// Whether a copy to write sets a field of [`RULES`] that [`strip`] would have removed from
/// its source: one a destination's patch pins (a node port, a volume).
pub fn pins_any(desired: &DynamicObject) -> bool {
    matches!(stripped(desired), Cow::Owned(ref s) if s != desired)
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
    let absent: Vec<Vec<Step>> = rules_of(group, kind)
        .flat_map(|r| concrete(existing, r.path))
        .filter(|at| !path::has(desired, at))
        .collect();
    if absent.is_empty() {
        return Cow::Borrowed(existing);
    }
    let mut out = existing.clone();
    for at in &absent {
        path::remove(&mut out, at);
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
    let rules: Vec<&Rule> = rules_of(group, kind).collect();
    for rule in rules {
        for at in concrete(existing, rule.path) {
            if !path::has(body, &at)
                && let Some(value) = path::get(existing, &at)
            {
                path::set(body, &at, value);
            }
        }
    }
}

/// The fields of `obj` that `pattern` names (`*` expanded to each index of a list).
fn concrete(obj: &DynamicObject, pattern: &[&str]) -> Vec<Vec<Step>> {
    let key = |k: &str| Step::Key(k.to_string());
    match pattern {
        ["metadata", map, name] => path::meta_map(obj, map)
            .filter(|m| m.contains_key(*name))
            .map(|_| vec![vec![key("metadata"), key(map), key(name)]])
            .unwrap_or_default(),
        // Most objects have none of their kind's fields: found without building a path.
        pattern if !reaches(&obj.data, pattern) => Vec::new(),
        pattern => concrete_in(&obj.data, pattern),
    }
}

/// Whether `value` has a field that `pattern` names.
fn reaches(value: &Value, pattern: &[&str]) -> bool {
    let Some((first, rest)) = pattern.split_first() else {
        return true;
    };
    match (*first, value) {
        ("*", Value::Array(items)) => items.iter().any(|item| reaches(item, rest)),
        (key, Value::Object(map)) => map.get(key).is_some_and(|child| reaches(child, rest)),
        _ => false,
    }
}

fn concrete_in(value: &Value, pattern: &[&str]) -> Vec<Vec<Step>> {
    let Some((first, rest)) = pattern.split_first() else {
        return vec![Vec::new()];
    };
    let children: Vec<(Step, &Value)> = match (*first, value) {
        ("*", Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (Step::Index(i), v))
            .collect(),
        (key, Value::Object(map)) => map
            .get(key)
            .map(|v| (Step::Key(key.to_string()), v))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    children
        .into_iter()
        .flat_map(|(step, child)| {
            concrete_in(child, rest).into_iter().map(move |mut tail| {
                tail.insert(0, step.clone());
                tail
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
