//! A field of an object as steps from its root — map keys, list elements by index, by their
//! keys' values or by value — read and written on a [`DynamicObject`], whose labels and
//! annotations live in its typed metadata (pure). Shared by [`allocated`](super::allocated)
//! and [`ignore`](super::ignore).

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::{Map, Value};

/// One step into an object: a map's key, a list's index, or the element of a keyed list
/// whose fields have these values (as `managedFields` names it, e.g. a container by name).
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A map's key.
    Key(String),
    /// A list's element by index.
    Index(usize),
    /// A list's element whose fields have these values.
    Element(Map<String, Value>),
    /// A set's element: this value.
    Value(Value),
}

/// The label or annotation map a `metadata` path names, and the key.
fn meta(path: &[Step]) -> Option<(&str, &str)> {
    match path {
        [Step::Key(m), Step::Key(map), Step::Key(key)] if m == "metadata" => {
            Some((map.as_str(), key.as_str()))
        }
        _ => None,
    }
}

pub(super) fn meta_map<'a>(
    obj: &'a DynamicObject,
    map: &str,
) -> Option<&'a BTreeMap<String, String>> {
    match map {
        "labels" => obj.metadata.labels.as_ref(),
        "annotations" => obj.metadata.annotations.as_ref(),
        _ => None,
    }
}

/// The index of the element of `items` that `step` names.
fn index(items: &[Value], step: &Step) -> Option<usize> {
    match step {
        Step::Index(i) => (*i < items.len()).then_some(*i),
        Step::Element(fields) => items.iter().position(|item| {
            fields
                .iter()
                .all(|(k, v)| item.get(k).is_some_and(|have| have == v))
        }),
        Step::Value(v) => items.iter().position(|item| item == v),
        Step::Key(_) => None,
    }
}

/// The value at `path` in `obj`.
pub fn get(obj: &DynamicObject, path: &[Step]) -> Option<Value> {
    if let Some((map, key)) = meta(path) {
        return meta_map(obj, map)?
            .get(key)
            .map(|v| Value::String(v.clone()));
    }
    let mut node = &obj.data;
    for step in path {
        node = match (step, node) {
            (Step::Key(k), Value::Object(map)) => map.get(k)?,
            (step, Value::Array(items)) => &items[index(items, step)?],
            _ => return None,
        };
    }
    Some(node.clone())
}

/// Removes the field at `path` from `obj`.
pub fn remove(obj: &mut DynamicObject, path: &[Step]) {
    if let Some((map, key)) = meta(path) {
        if let Some(m) = meta_map_mut(obj, map) {
            m.remove(key);
        }
        return;
    }
    let Some((last, node)) = parent_mut(obj, path) else {
        return;
    };
    match (last, node) {
        (Step::Key(k), Value::Object(map)) => {
            map.remove(k);
        }
        (step, Value::Array(items)) => {
            if let Some(i) = index(items, step) {
                items.remove(i);
            }
        }
        _ => {}
    }
}

/// Sets the field at `path` of `obj` to `value` (its parent must exist; a list element that
/// is missing is appended).
pub fn set(obj: &mut DynamicObject, path: &[Step], value: Value) {
    if let Some((map, key)) = meta(path) {
        if let Value::String(v) = value {
            meta_map_mut(obj, map)
                .get_or_insert_with(BTreeMap::new)
                .insert(key.to_string(), v);
        }
        return;
    }
    let Some((last, node)) = parent_mut(obj, path) else {
        return;
    };
    match (last, node) {
        (Step::Key(k), Value::Object(map)) => {
            map.insert(k.clone(), value);
        }
        (step, Value::Array(items)) => match index(items, step) {
            Some(i) => items[i] = value,
            None => items.push(value),
        },
        _ => {}
    }
}

/// The labels or the annotations of `obj`, to change.
fn meta_map_mut<'a>(
    obj: &'a mut DynamicObject,
    map: &str,
) -> &'a mut Option<BTreeMap<String, String>> {
    match map {
        "labels" => &mut obj.metadata.labels,
        _ => &mut obj.metadata.annotations,
    }
}

/// The last step of `path` and the node it is taken from, if that node exists.
fn parent_mut<'a, 'p>(
    obj: &'a mut DynamicObject,
    path: &'p [Step],
) -> Option<(&'p Step, &'a mut Value)> {
    let (last, parent) = path.split_last()?;
    Some((last, walk_mut(&mut obj.data, parent)?))
}

fn walk_mut<'a>(mut node: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    for step in path {
        node = match (step, node) {
            (Step::Key(k), Value::Object(map)) => map.get_mut(k)?,
            (step, Value::Array(items)) => {
                let i = index(items, step)?;
                &mut items[i]
            }
            _ => return None,
        };
    }
    Some(node)
}

/// Whether `obj` has a field at `path`.
pub fn has(obj: &DynamicObject, path: &[Step]) -> bool {
    if let Some((map, key)) = meta(path) {
        return meta_map(obj, map).is_some_and(|m| m.contains_key(key));
    }
    let mut node = &obj.data;
    for step in path {
        node = match (step, node) {
            (Step::Key(k), Value::Object(map)) => match map.get(k) {
                Some(next) => next,
                None => return false,
            },
            (step, Value::Array(items)) => match index(items, step) {
                Some(i) => &items[i],
                None => return false,
            },
            _ => return false,
        };
    }
    true
}
