//! The large values of the copies one plan writes, each held once however many destinations
//! carry it.
//!
//! A plan decides every destination of a declaration at once, and a copy is its source's
//! content: a 900 KiB ConfigMap copied into a hundred namespaces would be a hundred 900 KiB
//! bodies held together until the last is written. Instead, each copy a plan writes is kept
//! with its large values replaced by a placeholder naming an entry of a [`Bulk`], which holds
//! each distinct value once; the executor [hydrates](Bulk::hydrate) a copy only when it sends
//! it, within a budget of bytes in flight. Pure: no IO.

use std::collections::HashMap;
use std::sync::Arc;

use kube::api::DynamicObject;
use serde_json::{Map, Value};

/// The key of a placeholder's one-key object: `{"kubesync.io/bulk": "<index>"}`.
pub const BULK_KEY: &str = "kubesync.io/bulk";

/// Values larger than this (about, as JSON) are held once in the [`Bulk`].
pub const HOLD_OVER: usize = super::digest::SHRINK_OVER;

/// The large values of a plan's copies, each held once (compared by length, then equality:
/// nothing is hashed).
#[derive(Clone, Debug, Default)]
pub struct Bulk {
    values: Vec<(usize, Arc<Value>)>,
    by_len: HashMap<usize, Vec<usize>>,
}

impl PartialEq for Bulk {
    fn eq(&self, other: &Self) -> bool {
        self.values.len() == other.values.len()
            && self
                .values
                .iter()
                .zip(&other.values)
                .all(|((a, x), (b, y))| a == b && x == y)
    }
}

impl Bulk {
    /// `copy` with every large value of its content (not its metadata, type or kind) replaced
    /// by a placeholder naming the one entry that holds it; a map of at most
    /// [`SHRINK_KEYS`](super::digest::SHRINK_KEYS) keys is held key by key, as the stores
    /// shrink copies.
    pub fn hold(&mut self, mut copy: DynamicObject) -> DynamicObject {
        if let Some(fields) = copy.data.as_object_mut() {
            for (key, value) in fields.iter_mut() {
                if key == "apiVersion" || key == "kind" {
                    continue;
                }
                let taken = std::mem::take(value);
                *value = self.hold_value(taken);
            }
        }
        copy
    }

    fn hold_value(&mut self, value: Value) -> Value {
        let len = approximate_len(&value);
        if len <= HOLD_OVER {
            return value;
        }
        match value {
            Value::Object(map) if map.len() <= super::digest::SHRINK_KEYS => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (k, self.hold_value(v)))
                    .collect(),
            ),
            other => placeholder(self.index_of(len, other)),
        }
    }

    fn index_of(&mut self, len: usize, value: Value) -> usize {
        let same_len = self.by_len.entry(len).or_default();
        if let Some(&i) = same_len.iter().find(|&&i| *self.values[i].1 == value) {
            return i;
        }
        let i = self.values.len();
        same_len.push(i);
        self.values.push((len, Arc::new(value)));
        i
    }

    /// `held` as it must be written: every placeholder replaced by the value it names. An
    /// object without placeholders (or held by another bulk) comes back as it is.
    pub fn hydrate(&self, held: &DynamicObject) -> DynamicObject {
        let mut copy = held.clone();
        if !self.values.is_empty()
            && let Some(fields) = copy.data.as_object_mut()
        {
            for value in fields.values_mut() {
                self.hydrate_value(value);
            }
        }
        copy
    }

    fn hydrate_value(&self, value: &mut Value) {
        if let Some(i) = self.placeholder_of(value) {
            *value = (*self.values[i].1).clone();
            return;
        }
        match value {
            Value::Object(map) => map.values_mut().for_each(|v| self.hydrate_value(v)),
            Value::Array(items) => items.iter_mut().for_each(|v| self.hydrate_value(v)),
            _ => {}
        }
    }

    fn placeholder_of(&self, value: &Value) -> Option<usize> {
        let map = value.as_object()?;
        let i: usize = (map.len() == 1).then(|| map.get(BULK_KEY)?.as_str()?.parse().ok())??;
        (i < self.values.len()).then_some(i)
    }

    /// About how many bytes `held` takes once hydrated (as JSON): what its write holds in
    /// flight, body and answer aside.
    pub fn bytes(&self, held: &DynamicObject) -> usize {
        fn walk(bulk: &Bulk, value: &Value) -> usize {
            if let Some(i) = bulk.placeholder_of(value) {
                return bulk.values[i].0;
            }
            match value {
                Value::Object(map) => map.iter().map(|(k, v)| k.len() + 3 + walk(bulk, v)).sum(),
                Value::Array(items) => items.iter().map(|v| walk(bulk, v) + 1).sum(),
                other => approximate_len(other),
            }
        }
        walk(self, &held.data)
    }

    /// How many distinct values are held.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

fn placeholder(i: usize) -> Value {
    let mut map = Map::new();
    map.insert(BULK_KEY.into(), Value::String(i.to_string()));
    Value::Object(map)
}

/// About the length of `value` as JSON (escapes not counted), without serializing it.
pub(crate) fn approximate_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|v| approximate_len(v) + 1).sum::<usize>(),
        Value::Object(map) => {
            2 + map
                .iter()
                .map(|(k, v)| k.len() + 4 + approximate_len(v))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn copy(namespace: &str, data: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "big", "namespace": namespace, "annotations": {"a": "x".repeat(2000)}},
            "data": data,
        }))
        .expect("object")
    }

    #[test]
    fn large_values_are_held_once_and_hydrated_as_they_were() {
        let big = "x".repeat(100_000);
        let other = "y".repeat(100_000);
        let mut bulk = Bulk::default();
        let originals: Vec<DynamicObject> = (0..100)
            .map(|i| copy(&format!("ns-{i}"), json!({"big": big, "small": "s"})))
            .chain([copy("odd", json!({"big": other, "small": "s"}))])
            .collect();
        let held: Vec<DynamicObject> = originals.iter().cloned().map(|c| bulk.hold(c)).collect();
        // One value per distinct content, however many copies carry it.
        assert_eq!(bulk.len(), 2);
        assert_eq!(held[0].data["data"]["big"], json!({BULK_KEY: "0"}));
        assert_eq!(held[100].data["data"]["big"], json!({BULK_KEY: "1"}));
        assert_eq!(held[0].data["data"]["small"], "s", "small values stay");
        assert_eq!(
            held[0].metadata, originals[0].metadata,
            "the metadata is never held"
        );
        for (h, o) in held.iter().zip(&originals) {
            assert_eq!(&bulk.hydrate(h), o);
            assert!(bulk.bytes(h) >= 100_000);
        }
        assert!(bulk.bytes(&copy("x", json!({"small": "s"}))) < 100);
    }

    #[test]
    fn a_large_map_is_held_key_by_key_and_a_list_as_a_whole() {
        let mut bulk = Bulk::default();
        let value = json!({"a": "x".repeat(5000), "b": "c", "list": ["y".repeat(3000)]});
        let original = copy("ns", value);
        let held = bulk.hold(original.clone());
        assert_eq!(held.data["data"]["b"], "c");
        assert!(held.data["data"]["a"].get(BULK_KEY).is_some());
        assert!(held.data["data"]["list"].get(BULK_KEY).is_some());
        assert_eq!(bulk.hydrate(&held), original);
    }

    #[test]
    fn what_no_bulk_holds_is_left_as_it_is() {
        let bulk = Bulk::default();
        let literal = copy("ns", json!({"k": {BULK_KEY: "0"}}));
        assert_eq!(bulk.hydrate(&literal), literal);
        let mut other = Bulk::default();
        let held = other.hold(copy("ns", json!({"k": "x".repeat(5000)})));
        // An index this bulk does not have is no placeholder of it.
        assert_eq!(Bulk::default().hydrate(&held), held);
    }
}
