//! Copies held without their bulk: a copy's large values are replaced, in the store, by a
//! digest of their content, so copying a 900 KiB object a hundred times costs kilobytes per
//! copy instead of its size each time.
//!
//! A copy is compared with what kubesync would write by exact equality of each field the copy
//! should carry ([`in_sync`](super::in_sync)), and its source is a live object with every
//! default and allocation already filled in, so a digest of the same canonical content is an
//! exact stand-in. [`shrink`] is applied to every copy as it enters the store (a watch
//! transform); [`same`] compares a held value with the wanted one; [`is_digest`] tells the
//! digests apart for the field-by-field diff of Report mode and drift attribution, which then
//! name the digested field as a whole.
//!
//! The metadata (labels, annotations, managedFields, uid, resourceVersion) is never shrunk:
//! ownership, consent and drift attribution read it.

use kube::api::DynamicObject;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The key of a digest's one-key object: `{"kubesync.io/sha256": "<hex>"}`.
pub const DIGEST_KEY: &str = "kubesync.io/sha256";

/// Values larger than this (as JSON) are held as digests.
pub const SHRINK_OVER: usize = 1024;

/// A map with at most this many keys is shrunk key by key (so Report mode and drift name the
/// changed key); a larger one is held as one digest.
pub const SHRINK_KEYS: usize = 64;

/// The SHA-256 of `value`'s canonical form (object keys sorted, every value tagged with its
/// type and length), in hex. Equal values have equal digests whatever their key order.
pub fn digest(value: &Value) -> String {
    digest_bytes(value)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The SHA-256 of `value`'s canonical form (see [`digest`]), as bytes.
pub fn digest_bytes(value: &Value) -> [u8; 32] {
    #[cfg(test)]
    HASHED.with(|n| n.set(n.get() + 1));
    let mut hasher = Sha256::new();
    feed(&mut hasher, value);
    hasher.finalize().into()
}

fn feed(h: &mut Sha256, value: &Value) {
    let tagged = |h: &mut Sha256, tag: u8, bytes: &[u8]| {
        h.update([tag]);
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    };
    match value {
        Value::Null => h.update(b"n"),
        Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
        Value::Number(n) => tagged(h, b'd', n.to_string().as_bytes()),
        Value::String(s) => tagged(h, b's', s.as_bytes()),
        Value::Array(items) => {
            h.update(b"a");
            h.update((items.len() as u64).to_be_bytes());
            for item in items {
                feed(h, item);
            }
        }
        Value::Object(map) => {
            h.update(b"o");
            h.update((map.len() as u64).to_be_bytes());
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for k in keys {
                tagged(h, b'k', k.as_bytes());
                feed(h, &map[k]);
            }
        }
    }
}

/// The digest a held value stands for, if it is one.
pub fn is_digest(value: &Value) -> Option<&str> {
    let map = value.as_object()?;
    if map.len() != 1 {
        return None;
    }
    map.get(DIGEST_KEY)?.as_str()
}

fn digest_of(value: &Value) -> Value {
    let mut map = Map::new();
    map.insert(DIGEST_KEY.into(), Value::String(digest(value)));
    Value::Object(map)
}

/// The length of `value` as compact JSON, without writing it anywhere.
pub fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a counter cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// `value` with its bulk held as digests: left as it is when at most [`SHRINK_OVER`] bytes;
/// a map of at most [`SHRINK_KEYS`] keys shrunk key by key; anything else one digest.
pub fn shrink_value(value: Value) -> Value {
    if json_len(&value) <= SHRINK_OVER {
        return value;
    }
    match value {
        Value::Object(map) if map.len() <= SHRINK_KEYS && is_digest_map(&map).is_none() => {
            Value::Object(map.into_iter().map(|(k, v)| (k, shrink_value(v))).collect())
        }
        other => digest_of(&other),
    }
}

fn is_digest_map(map: &Map<String, Value>) -> Option<&str> {
    (map.len() == 1).then(|| map.get(DIGEST_KEY)?.as_str())?
}

/// A copy as the store holds it: every top-level field but `apiVersion`, `kind` and `metadata`
/// shrunk ([`shrink_value`]). A watch transform.
pub fn shrink(copy: &mut DynamicObject) {
    let Some(fields) = copy.data.as_object_mut() else {
        return;
    };
    for (key, value) in fields.iter_mut() {
        if key == "apiVersion" || key == "kind" {
            continue;
        }
        let taken = std::mem::take(value);
        *value = shrink_value(taken);
    }
}

#[cfg(test)]
thread_local! {
    /// How many values [`digest`] hashed on this thread.
    static HASHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

thread_local! {
    /// The wanted values [`same`] hashed on this thread within the current [`Memo`], with
    /// their digests; `None` outside one.
    static MEMO: std::cell::RefCell<Option<Vec<(Value, String)>>> =
        const { std::cell::RefCell::new(None) };
}

/// While it lives, each distinct wanted value [`same`] compares with a digest is hashed once on
/// this thread, and found again by equality (a comparison of its bytes, not a hash of them): a
/// plan holds one for its decisions, so a large value copied into a hundred destinations is
/// hashed once per reconcile instead of once per destination. It keeps each such value until
/// it is dropped (one per distinct large value of the plan's sources). Nested, the outer one
/// is kept.
#[must_use = "the memo lasts as long as this guard"]
pub struct Memo {
    owns: bool,
}

impl Memo {
    /// Starts a memo on this thread (or joins the one already started).
    pub fn start() -> Self {
        let owns = MEMO.with(|m| {
            let mut m = m.borrow_mut();
            let fresh = m.is_none();
            if fresh {
                *m = Some(Vec::new());
            }
            fresh
        });
        Self { owns }
    }
}

impl Drop for Memo {
    fn drop(&mut self) {
        if self.owns {
            MEMO.with(|m| *m.borrow_mut() = None);
        }
    }
}

/// The digest of `wanted`, from the [`Memo`] if one is started and has seen an equal value.
fn digest_of_wanted(wanted: &Value) -> String {
    MEMO.with(|m| {
        let mut m = m.borrow_mut();
        let Some(seen) = m.as_mut() else {
            return digest(wanted);
        };
        if let Some((_, d)) = seen.iter().find(|(v, _)| v == wanted) {
            return d.clone();
        }
        let d = digest(wanted);
        seen.push((wanted.clone(), d.clone()));
        d
    })
}

/// The digest of a large value a desired copy wants (over [`SHRINK_OVER`] bytes as JSON):
/// within a [`Memo`], hashed once and found again by equality.
pub fn digest_wanted(value: &Value) -> String {
    digest_of_wanted(value)
}

/// Whether a held value (perhaps shrunk) is the wanted one: equal, or a digest of it, or a map
/// with the same keys whose values are each [`same`]. Within a [`Memo`], each distinct wanted
/// value is hashed once.
pub fn same(held: &Value, wanted: &Value) -> bool {
    if held == wanted {
        return true;
    }
    if let Some(d) = is_digest(held) {
        return digest_of_wanted(wanted) == d;
    }
    match (held, wanted) {
        (Value::Object(h), Value::Object(w)) => {
            h.len() == w.len()
                && w.iter()
                    .all(|(k, wv)| h.get(k).is_some_and(|hv| same(hv, wv)))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn within_a_memo_each_distinct_value_is_hashed_once() {
        let big = |c: char| json!({"blob": c.to_string().repeat(5000)});
        let held = shrink_value(big('a'));
        let other = shrink_value(big('b'));
        let hashed = || HASHED.with(|n| n.get());
        // Without a memo: once per comparison.
        let before = hashed();
        for _ in 0..3 {
            assert!(same(&held, &big('a')));
        }
        assert_eq!(hashed() - before, 3);
        // Within one: once per distinct value (each destination's desired copy is a value of
        // its own, equal to the others).
        let before = hashed();
        {
            let _memo = Memo::start();
            let _nested = Memo::start();
            for _ in 0..100 {
                assert!(same(&held, &big('a')));
                assert!(!same(&held, &big('b')));
                assert!(same(&other, &big('b')));
            }
        }
        assert_eq!(hashed() - before, 2, "the two values, each once");
        // The memo ends with its guard.
        let before = hashed();
        assert!(same(&held, &big('a')));
        assert!(hashed() > before);
    }

    use super::*;
    use serde_json::json;

    fn big(n: usize) -> String {
        "x".repeat(n)
    }

    #[test]
    fn the_digest_is_canonical_and_tells_types_and_lengths_apart() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": [true, null, "s"]}"#).expect("json");
        let b: Value = serde_json::from_str(r#"{"a": [true, null, "s"], "b": 1}"#).expect("json");
        assert_eq!(digest(&a), digest(&b));
        assert_ne!(digest(&json!("1")), digest(&json!(1)));
        assert_ne!(digest(&json!(["ab", "c"])), digest(&json!(["a", "bc"])));
        assert_ne!(digest(&json!({"a": "b"})), digest(&json!({"ab": ""})));
        assert_eq!(digest(&json!(null)).len(), 64);
    }

    #[test]
    fn small_values_stay_and_large_ones_become_digests_key_by_key() {
        let data = json!({"small": "v", "large": big(5000)});
        let shrunk = shrink_value(data.clone());
        assert_eq!(shrunk["small"], "v");
        assert_eq!(
            is_digest(&shrunk["large"]),
            Some(digest(&json!(big(5000))).as_str())
        );
        assert!(same(&shrunk, &data));
        assert!(!same(&shrunk, &json!({"small": "v", "large": big(5001)})));
        assert!(!same(&shrunk, &json!({"small": "w", "large": big(5000)})));
        assert!(!same(&shrunk, &json!({"small": "v"})), "a key missing");
        assert!(
            !same(
                &shrunk,
                &json!({"small": "v", "large": big(5000), "new": 1})
            ),
            "a key more"
        );
        // Many keys: one digest for the whole map.
        let many: Map<String, Value> = (0..100)
            .map(|i| (format!("k{i}"), json!(big(20))))
            .collect();
        let many = Value::Object(many);
        let shrunk = shrink_value(many.clone());
        assert!(is_digest(&shrunk).is_some());
        assert!(same(&shrunk, &many));
        // A list as a whole.
        let list = json!([big(600), big(600)]);
        assert!(is_digest(&shrink_value(list.clone())).is_some());
        assert!(same(&shrink_value(list.clone()), &list));
    }

    #[test]
    fn a_copy_keeps_its_identity_and_metadata_and_loses_its_bulk() {
        let mut copy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "big", "namespace": "t1", "uid": "u",
                "labels": {"kubesync.io/managed-by": "d"},
                "annotations": {"note": big(3000)},
            },
            "data": {"blob": big(900 * 1024)},
        }))
        .expect("copy");
        let before = serde_json::to_vec(&copy).expect("json").len();
        shrink(&mut copy);
        let after = serde_json::to_vec(&copy).expect("json").len();
        assert!(after < 5 * 1024, "{before} -> {after}");
        assert_eq!(copy.metadata.annotations.expect("kept")["note"].len(), 3000);
        assert!(same(&copy.data["data"], &json!({"blob": big(900 * 1024)})));
        assert_eq!(
            copy.data.get("apiVersion"),
            None,
            "apiVersion is held as types"
        );
    }

    #[test]
    fn a_shrunk_copy_is_judged_as_the_full_one() {
        use super::super::{Strategy, changed_fields, in_sync};
        let object = |blob: &str, small: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "big", "namespace": "t1"},
                "data": {"blob": blob, "small": small},
                "binaryData": {"b": big(2000)},
            }))
            .expect("object")
        };
        let desired = object(&big(5000), "a");
        let mut held = object(&big(5000), "a");
        shrink(&mut held);
        assert!(is_digest(&held.data["data"]["blob"]).is_some());
        for strategy in [Strategy::Apply, Strategy::Replace] {
            assert!(in_sync(&held, &desired, strategy));
            assert!(changed_fields(&held, &desired, strategy).is_empty());
        }
        // The source changed: the large key differs, and is named as the changed field.
        let newer = object(&(big(4999) + "y"), "a");
        assert!(!in_sync(&held, &newer, Strategy::Apply));
        let changed: Vec<String> = changed_fields(&held, &newer, Strategy::Apply)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(changed, ["data.blob"]);
        // A small key still diffs as before.
        let edited = object(&big(5000), "b");
        let changed: Vec<String> = changed_fields(&held, &edited, Strategy::Apply)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(changed, ["data.small"]);
    }

    #[test]
    fn a_literal_digest_shaped_value_is_compared_as_itself() {
        // A source that carries a digest-shaped value: its copy is in sync when it carries
        // the same value (no endless rewrite), whatever the digest inside says.
        let literal = json!({DIGEST_KEY: "0000"});
        assert!(same(&literal, &literal));
        assert!(!same(&literal, &json!({DIGEST_KEY: "0001"})));
        // A large map of that shape is held as a digest of it, never taken for one.
        let shaped = json!({DIGEST_KEY: big(5000)});
        assert!(same(&shrink_value(shaped.clone()), &shaped));
    }
}
