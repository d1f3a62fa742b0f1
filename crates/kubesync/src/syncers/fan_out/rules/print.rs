//! Copies held as prints: what judging a copy needs, not the copy.
//!
//! A copy is in sync when each top-level field kubesync writes equals the desired one, and
//! the desired labels and annotations are on it ([`in_sync`](super::in_sync)). Its print keeps
//! exactly that, made once as its watch event arrives ([`Printer::print`], a watch's
//! [`summarize`](crate::runtime::Watch::summarized)): the digest of each top-level field's value
//! (16 bytes of the SHA-256 of its canonical form, as [`digest`](super::digest) makes them), the
//! labels and annotations themselves, and the identity a write is conditioned on (uid,
//! resourceVersion). Labels, annotations, the kind and the names of the top-level fields are
//! the same on every copy of one source, so they are held once for all of them ([`Printer`]).
//! A print costs a few hundred bytes whatever the copy's size, and is judged without parsing
//! anything ([`CopyPrint::in_sync`]).
//!
//! What a print cannot answer — which fields differ and who changed them, an ownership
//! upgrade, fields left to others, consent judged on the copy — is answered by the copy read
//! live: a plan that needs a copy in full asks for it ([`Plan::unread`](super::super::plan::Plan::unread)),
//! and is made again with it.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::DynamicObject;
use kube::core::TypeMeta;
use parking_lot::Mutex;
use serde_json::Value;

use super::decide::Strategy;
use super::{FIELD_MANAGER, MANAGED_BY, OWNER, Owner, SOURCE_VERSION, allocated, digest};
use crate::runtime::Summary;

/// The digest of one value: the first 16 bytes of [`digest::digest`].
pub type ValueDigest = [u8; 16];

/// What the copies of one source share: their kind, labels, annotations, and the names of
/// their top-level fields (sorted; `status` and the fields the apiserver allocates are not
/// among them).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Shared {
    /// The copies' name (one source's copies share it in every namespace).
    name: Box<str>,
    api_version: String,
    kind: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    fields: Box<[String]>,
    /// Who wrote the copy, as far as an update written on the print alone needs it.
    managers: Managers,
}

/// What a copy's managedFields say that an update written without reading the copy needs:
/// whether anyone but kubesync wrote a field of it (then who changed what is read from the
/// copy: drift attribution), and which fields kubesync's own `Update` entry owns (its POST:
/// an apply that leaves one of them out needs an ownership upgrade first, see
/// [`ownership_upgrade`](super::ownership_upgrade)).
#[derive(Debug, Default, PartialEq, Eq, Hash)]
struct Managers {
    /// An entry of another field manager (not on a subresource).
    others: bool,
    /// The `fieldsV1` text of kubesync's `Update` entry (not on a subresource), if any.
    posted: Option<Box<str>>,
}

impl Managers {
    fn of(copy: &DynamicObject) -> Self {
        let mut managers = Self::default();
        for entry in copy.metadata.managed_fields.iter().flatten() {
            if entry.subresource.is_some() {
                continue;
            }
            if entry.manager.as_deref() != Some(FIELD_MANAGER) {
                managers.others = true;
            } else if entry.operation.as_deref() == Some("Update") {
                managers.posted = Some(match entry.fields_v1.as_ref().map(|f| &f.0) {
                    Some(Value::String(text)) => text.as_str().into(),
                    Some(tree) => tree.to_string().into(),
                    None => "{}".into(),
                });
            }
        }
        managers
    }
}

/// One of kubesync's copies as its watch holds it (see the [module](self)).
#[derive(Debug)]
pub struct CopyPrint {
    /// Held once for the copies in one namespace.
    namespace: Option<Arc<str>>,
    uid: Option<Compact>,
    resource_version: Option<Compact>,
    deletion: Option<Time>,
    shared: Arc<Shared>,
    /// The digest of each of `shared.fields`' values, in that order.
    values: Box<[ValueDigest]>,
    /// About how many bytes the copy's content takes as JSON (what reading it live costs).
    size: u32,
    /// When the copy was created, in seconds since 1970 (0: unknown): whether a record open
    /// since then vouches for it ([`record`](crate::syncers::fan_out::record)).
    created: u32,
}

/// A uid or resourceVersion as a print holds it: in the form the apiserver gives them (a
/// UUID, a number), without an allocation; any other text as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Compact {
    Uuid(u128),
    Number(u64),
    Text(Box<str>),
}

impl Compact {
    fn new(text: &str) -> Self {
        // Made as each copy's event arrives: read without allocating.
        let bytes = text.as_bytes();
        if bytes.len() == 36 {
            let mut n: u128 = 0;
            let lowercase_uuid = bytes.iter().enumerate().all(|(i, &b)| match i {
                8 | 13 | 18 | 23 => b == b'-',
                _ => match b {
                    b'0'..=b'9' | b'a'..=b'f' => {
                        n = (n << 4) | u128::from((b as char).to_digit(16).unwrap_or(0));
                        true
                    }
                    _ => false,
                },
            });
            if lowercase_uuid {
                return Self::Uuid(n);
            }
        }
        let canonical = !bytes.is_empty()
            && bytes.iter().all(u8::is_ascii_digit)
            && (bytes[0] != b'0' || bytes.len() == 1);
        match text.parse::<u64>() {
            Ok(n) if canonical => Self::Number(n),
            _ => Self::Text(text.into()),
        }
    }

    /// The text it was made of.
    fn text(&self) -> Cow<'_, str> {
        match self {
            Self::Uuid(n) => {
                let hex = format!("{n:032x}");
                Cow::Owned(format!(
                    "{}-{}-{}-{}-{}",
                    &hex[..8],
                    &hex[8..12],
                    &hex[12..16],
                    &hex[16..20],
                    &hex[20..]
                ))
            }
            Self::Number(n) => Cow::Owned(n.to_string()),
            Self::Text(t) => Cow::Borrowed(t),
        }
    }
}

/// The digest of `value` as a print holds it. `wanted`: a value of a desired copy, whose
/// large values a plan's [`Memo`](digest::Memo) hashes once for all destinations (small ones
/// are hashed each time: cheaper than looking them up).
pub fn value_digest(value: &Value, wanted: bool) -> ValueDigest {
    let mut out = [0u8; 16];
    if wanted && digest::json_len(value) > digest::SHRINK_OVER {
        let hex = digest::digest_wanted(value);
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("00"), 16).unwrap_or(0);
        }
    } else {
        out.copy_from_slice(&digest::digest_bytes(value)[..16]);
    }
    out
}

/// Makes prints ([`Printer::print`]), and holds what copies share once: one for each watch
/// of copies. Shared parts no print uses any more are dropped as new ones come.
#[derive(Debug, Default)]
pub struct Printer {
    interned: Mutex<Interned>,
}

#[derive(Debug, Default)]
struct Interned {
    shared: Pool<Shared>,
    namespaces: Pool<str>,
}

/// Values held once, each as long as a print uses it: swept once they are twice as many as
/// after the last sweep, and at least [`SWEEP_FROM`].
#[derive(Debug)]
struct Pool<T: ?Sized> {
    set: HashSet<Arc<T>>,
    /// How many were held after the last sweep.
    kept: usize,
}

impl<T: ?Sized> Default for Pool<T> {
    fn default() -> Self {
        Self {
            set: HashSet::new(),
            kept: 0,
        }
    }
}

impl<T: ?Sized + std::hash::Hash + Eq> Pool<T> {
    /// The value held that equals `value`.
    fn get<Q>(&self, value: &Q) -> Option<Arc<T>>
    where
        Arc<T>: std::borrow::Borrow<Q>,
        Q: ?Sized + std::hash::Hash + Eq,
    {
        self.set.get(value).map(Arc::clone)
    }

    /// Holds `value` from now (sweeping first when the pool has doubled).
    fn hold(&mut self, value: Arc<T>) -> Arc<T> {
        if self.set.len() >= (2 * self.kept).max(SWEEP_FROM) {
            self.set.retain(|s| Arc::strong_count(s) > 1);
            self.kept = self.set.len();
        }
        self.set.insert(Arc::clone(&value));
        value
    }
}

/// Shared parts are swept once they are twice as many as after the last sweep, and at least
/// this many.
const SWEEP_FROM: usize = 256;

impl Printer {
    fn intern(&self, shared: Shared) -> Arc<Shared> {
        let mut interned = self.interned.lock();
        match interned.shared.get(&shared) {
            Some(held) => held,
            None => interned.shared.hold(Arc::new(shared)),
        }
    }

    fn namespace(&self, namespace: &str) -> Arc<str> {
        let mut interned = self.interned.lock();
        match interned.namespaces.get(namespace) {
            Some(held) => held,
            None => interned.namespaces.hold(Arc::from(namespace)),
        }
    }

    /// How many shared parts are held (for tests and the book's numbers).
    pub fn shared_parts(&self) -> usize {
        self.interned.lock().shared.set.len()
    }

    /// The print of `copy` (as its watch delivers it). The fields the apiserver allocates or
    /// controllers own ([`allocated`]) are left out as a copy made of it would leave them out
    /// ([`allocated::stripped`]): a print is compared with copies to write, which never carry
    /// them unless a destination's patch pins one (then the copy is judged in full).
    pub fn print(&self, copy: &DynamicObject) -> CopyPrint {
        let judged = allocated::stripped(copy);
        let mut fields: Vec<(&String, &Value)> = judged
            .data
            .as_object()
            .map(|m| m.iter().filter(|(k, _)| *k != "status").collect())
            .unwrap_or_default();
        fields.sort_by(|a, b| a.0.cmp(b.0));
        let types = copy.types.clone().unwrap_or_default();
        let meta = &judged.metadata;
        let shared = self.intern(Shared {
            name: copy.metadata.name.as_deref().unwrap_or_default().into(),
            api_version: types.api_version,
            kind: types.kind,
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            fields: fields.iter().map(|(k, _)| (*k).clone()).collect(),
            managers: Managers::of(copy),
        });
        CopyPrint {
            namespace: copy
                .metadata
                .namespace
                .as_deref()
                .map(|n| self.namespace(n)),
            uid: copy.metadata.uid.as_deref().map(Compact::new),
            resource_version: copy.metadata.resource_version.as_deref().map(Compact::new),
            deletion: copy.metadata.deletion_timestamp.clone(),
            shared,
            values: fields.iter().map(|(_, v)| value_digest(v, false)).collect(),
            size: u32::try_from(digest::json_len(&copy.data)).unwrap_or(u32::MAX),
            created: copy
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|t| u32::try_from(t.0.as_second()).ok())
                .unwrap_or(0),
        }
    }
}

impl CopyPrint {
    /// The copy's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The copy's namespace (`None` for a cluster-scoped kind).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The copy's uid.
    pub fn uid(&self) -> Option<Cow<'_, str>> {
        self.uid.as_ref().map(Compact::text)
    }

    /// The copy's resourceVersion.
    pub fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.resource_version.as_ref().map(Compact::text)
    }

    /// The copy's annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.shared.annotations.get(key).map(String::as_str)
    }

    /// About how many bytes the copy's content takes as JSON: what reading it live holds.
    pub fn size(&self) -> usize {
        self.size as usize
    }

    /// When the copy was created (to the second), if known.
    pub fn created(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        (self.created > 0)
            .then(|| k8s_openapi::jiff::Timestamp::from_second(i64::from(self.created)).ok())
            .flatten()
    }

    /// Whether the copy carries `owner`'s marks (see [`owned_by`](super::owned_by)).
    pub fn owned_by(&self, owner: &Owner) -> bool {
        self.shared
            .labels
            .get(MANAGED_BY)
            .is_some_and(|uid| *uid == owner.uid)
            && self
                .annotation(OWNER)
                .is_some_and(|reference| reference == owner.reference)
    }

    /// Whether the copy carries everything `desired` says, exactly as
    /// [`in_sync`](super::in_sync) judges the copy itself: every top-level field of `desired`
    /// (but `status`) equal to the copy's, and its labels and annotations on the copy with
    /// their values; with [`Strategy::Replace`] also nothing else. Within a plan's
    /// [`Memo`](digest::Memo), each distinct large value of `desired` is hashed once.
    pub fn in_sync(&self, desired: &DynamicObject, strategy: Strategy) -> bool {
        let names = &self.shared.fields;
        let mut wanted = 0;
        if let Some(fields) = desired.data.as_object() {
            for (key, value) in fields.iter().filter(|(k, _)| *k != "status") {
                wanted += 1;
                let Ok(i) = names.binary_search_by(|n| n.as_str().cmp(key)) else {
                    return false;
                };
                if self.values.get(i) != Some(&value_digest(value, true)) {
                    return false;
                }
            }
        }
        let replace = strategy == Strategy::Replace;
        let subset = |want: &Option<BTreeMap<String, String>>, have: &BTreeMap<String, String>| {
            let want = want.as_ref();
            want.is_none_or(|w| w.iter().all(|(k, v)| have.get(k) == Some(v)))
                && (!replace || want.map_or(0, BTreeMap::len) == have.len())
        };
        (!replace || wanted == names.len())
            && subset(&desired.metadata.labels, &self.shared.labels)
            && subset(&desired.metadata.annotations, &self.shared.annotations)
    }
}

impl CopyPrint {
    /// Whether an update of the copy to `desired` (a copy that is not [`in_sync`](Self::in_sync)
    /// with it) can be written on the print alone, as an apply conditioned on the copy's uid and
    /// resourceVersion, and be exactly the update the copy read in full would be: nobody but
    /// kubesync wrote a field of it (so nobody else changed one: no drift to attribute), the
    /// source changed since it was written (`desired` carries another source version: no field
    /// can have been removed by someone), and the apply leaves out no field kubesync's POST owns
    /// (no ownership upgrade). Anything else is decided on the copy read live.
    pub fn updatable_to(&self, desired: &DynamicObject) -> bool {
        let managers = &self.shared.managers;
        let wanted = desired
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SOURCE_VERSION));
        if managers.others
            || wanted.is_none()
            || wanted.map(String::as_str) == self.annotation(SOURCE_VERSION)
        {
            return false;
        }
        match &managers.posted {
            None => true,
            Some(text) => {
                let Ok(owned) = serde_json::from_str::<Value>(text) else {
                    return false;
                };
                serde_json::to_value(desired)
                    .is_ok_and(|desired| !super::ownership::leaves_out(&owned, &desired))
            }
        }
    }
}

impl Summary for CopyPrint {
    /// The copy's metadata as far as the print keeps it: name, namespace, uid,
    /// resourceVersion, creation (to the second), deletion, labels and annotations (without those the apiserver
    /// allocates); `data` null.
    fn object(&self) -> DynamicObject {
        let non_empty = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
        DynamicObject {
            types: Some(TypeMeta {
                api_version: self.shared.api_version.clone(),
                kind: self.shared.kind.clone(),
            }),
            metadata: ObjectMeta {
                name: Some(self.shared.name.to_string()),
                namespace: self.namespace.as_deref().map(String::from),
                uid: self.uid().map(Cow::into_owned),
                resource_version: self.resource_version().map(Cow::into_owned),
                deletion_timestamp: self.deletion.clone(),
                creation_timestamp: self.created().map(Time),
                labels: non_empty(&self.shared.labels),
                annotations: non_empty(&self.shared.annotations),
                ..ObjectMeta::default()
            },
            data: Value::Null,
        }
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        CopyPrint::resource_version(self)
    }
}

#[cfg(test)]
mod tests;
