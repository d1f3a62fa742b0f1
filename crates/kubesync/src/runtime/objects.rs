//! The objects one watch holds: by namespace, then name.
//!
//! kube-runtime's reflector store keys each object by an `ObjectRef`, which carries its own
//! copy of the resource type (five strings) plus the object's uid and resourceVersion; with
//! tens of thousands of copies that is megabytes of keys. Here the namespace is stored once per
//! namespace and the name once per object, and an event's object is stored as it arrived,
//! without the deep copy kube's store makes of it — or, for a packed watch
//! ([`Watch::packed`](super::Watch::packed)), as its JSON text. A watch may also keep an index
//! of one label's values ([`Watch::index_label`](super::Watch::index_label)), so that the
//! objects carrying one value are found without reading every object.

use parking_lot::RwLock;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use super::delivered::Delivered;
use super::watch::{Holding, SummarizeFn, Summary};

/// How a store keeps one object.
#[derive(Debug)]
enum Held {
    /// Parsed, shared with every reader.
    Object(Arc<DynamicObject>),
    /// Its JSON text: one allocation instead of a tree of maps and strings (a small object
    /// costs about a fifth); parsed again on every read. `no_data`: the object's `data` was
    /// `null` (metadata only), which its text cannot tell from `{}`.
    Text { json: Box<str>, no_data: bool },
    /// What the watch's [`Summarize`] made of it ([`Watch::summarized`](super::Watch::summarized)).
    Summary(Arc<dyn Summary>),
}

impl Held {
    /// How a store keeps `obj`; `text`: the object's whole text as it arrived, where the
    /// watch kept it (then `obj` has only its type and metadata).
    fn new(
        obj: Arc<DynamicObject>,
        text: Option<Box<str>>,
        packed: bool,
        summarize: Option<&SummarizeFn>,
    ) -> Self {
        if let Some(json) = text {
            // Only a packed watch that neither summarizes nor transforms keeps the text
            // (`Watch::keeps_text`).
            debug_assert!(packed && summarize.is_none());
            return Self::Text {
                json,
                no_data: false,
            };
        }
        if let Some(summary) = summarize.and_then(|s| (s.0)(&obj)) {
            return Self::Summary(summary);
        }
        if !packed {
            return Self::Object(obj);
        }
        match serde_json::to_string(&*obj) {
            Ok(text) => Self::Text {
                json: text.into_boxed_str(),
                no_data: obj.data.is_null(),
            },
            // Not expected (the object was just parsed from JSON); keep it parsed.
            Err(_) => Self::Object(obj),
        }
    }

    /// Whether only the object's metadata is held (its `data` is `null`).
    fn is_metadata(&self) -> bool {
        match self {
            Self::Object(obj) => obj.data.is_null(),
            Self::Text { no_data, .. } => *no_data,
            // Not the metadata of a mixed watch's object (which a summary never is).
            Self::Summary(_) => false,
        }
    }

    /// The object as a store holds it, its summary as that.
    fn holding(&self) -> Option<Holding> {
        match self {
            Self::Summary(s) => Some(Holding::Summary(Arc::clone(s))),
            _ => self.object().map(Holding::Object),
        }
    }

    /// The object's resourceVersion, read without building the object: from the object, the
    /// summary, or the text (scanned for that one field).
    fn resource_version(&self) -> Option<Cow<'_, str>> {
        match self {
            Self::Object(obj) => obj.metadata.resource_version.as_deref().map(Cow::Borrowed),
            Self::Summary(s) => s.resource_version(),
            Self::Text { json, .. } => serde_json::from_str::<Versioned<'_>>(json)
                .ok()
                .and_then(|v| v.metadata.resource_version),
        }
    }

    fn object(&self) -> Option<Arc<DynamicObject>> {
        match self {
            Self::Object(obj) => Some(Arc::clone(obj)),
            Self::Summary(s) => Some(Arc::new(s.object())),
            Self::Text { json, no_data } => match serde_json::from_str::<DynamicObject>(json) {
                Ok(mut obj) => {
                    if *no_data {
                        obj.data = serde_json::Value::Null;
                    }
                    Some(Arc::new(obj))
                }
                Err(e) => {
                    // Not expected (the text was written from a parsed object); an object a
                    // store cannot show is absent to its readers, and deletions based on an
                    // absence are confirmed by a live read.
                    tracing::error!(error = %e, "a packed object could not be read back");
                    None
                }
            },
        }
    }
}

/// An object's text read for its resourceVersion alone (every other field is skipped).
#[derive(serde::Deserialize)]
struct Versioned<'a> {
    #[serde(borrow)]
    metadata: VersionOnly<'a>,
}

#[derive(serde::Deserialize)]
struct VersionOnly<'a> {
    #[serde(rename = "resourceVersion", borrow, default)]
    resource_version: Option<Cow<'a, str>>,
}

/// One object as held, with the value of the indexed label (if the store keeps an index;
/// shared with the index's key).
#[derive(Debug)]
struct Entry {
    held: Held,
    label: Option<Arc<str>>,
}

/// Namespace (empty for cluster-scoped objects) → name → object. Each namespace and each
/// name is one allocation, which the label index shares.
type Map = HashMap<Arc<str>, HashMap<Arc<str>, Entry>>;

/// What one store holds.
#[derive(Debug, Default)]
struct Inner {
    objects: Map,
    /// Indexed label value → (namespace, name) of the objects carrying it.
    by_label: HashMap<Arc<str>, BTreeSet<Place>>,
}

impl Inner {
    /// The entry of the object `name` in `namespace` (`""` for cluster-scoped ones).
    fn at(&self, namespace: &str, name: &str) -> Option<&Entry> {
        self.objects
            .get(namespace)
            .and_then(|names| names.get(name))
    }

    fn insert(&mut self, namespace: String, name: String, mut entry: Entry) {
        self.remove(&namespace, &name);
        let namespace: Arc<str> = match self.objects.get_key_value(namespace.as_str()) {
            Some((held, _)) => Arc::clone(held),
            None => Arc::from(namespace),
        };
        let name: Arc<str> = Arc::from(name);
        if let Some(value) = entry.label.take() {
            let (value, set) = match self.by_label.get_key_value(&*value) {
                Some((held, _)) => (Arc::clone(held), None),
                None => (value, Some(BTreeSet::new())),
            };
            self.by_label
                .entry(Arc::clone(&value))
                .or_insert_with(|| set.unwrap_or_default())
                .insert((Arc::clone(&namespace), Arc::clone(&name)));
            entry.label = Some(value);
        }
        self.objects
            .entry(namespace)
            .or_default()
            .insert(name, entry);
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        let Some(namespace) = self
            .objects
            .get_key_value(namespace)
            .map(|(held, _)| Arc::clone(held))
        else {
            return;
        };
        let Some(names) = self.objects.get_mut(&*namespace) else {
            return;
        };
        let Some((name, old)) = names.remove_entry(name) else {
            return;
        };
        if names.is_empty() {
            self.objects.remove(&*namespace);
        }
        if let Some(value) = old.label
            && let Some(set) = self.by_label.get_mut(&*value)
        {
            set.remove(&(namespace, name));
            if set.is_empty() {
                self.by_label.remove(&*value);
            }
        }
    }
}

/// Drops an object's content, keeping its metadata (without `managedFields`), as a
/// metadata-only watch would have received it.
pub(super) fn strip(obj: &mut DynamicObject) {
    obj.data = serde_json::Value::Null;
    obj.metadata.managed_fields = None;
}

fn place(obj: &DynamicObject) -> (String, String) {
    (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

/// One watch's objects, readable from any thread. Cheap to clone (clones share them).
#[derive(Clone, Debug, Default)]
pub(super) struct Objects {
    inner: Arc<RwLock<Inner>>,
    /// The label whose values are indexed, if any.
    index_label: Option<Arc<str>>,
    /// Objects are held as their JSON text ([`Watch::packed`](super::Watch::packed)).
    packed: bool,
    /// What objects are held as instead, where it makes something of them
    /// ([`Watch::summarized`](super::Watch::summarized)).
    summarize: Option<SummarizeFn>,
}

impl Objects {
    /// The entry that holds `obj`, and where.
    fn entry(&self, obj: Arc<DynamicObject>) -> (String, String, Entry) {
        self.entry_of(obj, None)
    }

    /// The entry that holds `obj` (or, where given, its `text`: see [`Delivered`]), and where.
    fn entry_of(&self, obj: Arc<DynamicObject>, text: Option<Box<str>>) -> (String, String, Entry) {
        let (namespace, name) = place(&obj);
        let label = self.index_label.as_deref().and_then(|key| {
            obj.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(|v| Arc::from(v.as_str()))
        });
        let held = Held::new(obj, text, self.packed, self.summarize.as_ref());
        (namespace, name, Entry { held, label })
    }

    /// Holds `obj` in place of the metadata held of the very same version of it (same
    /// resourceVersion); returns whether it did. Another version held means its event has
    /// come or is on the way.
    pub(super) fn hold_in_full(&self, obj: Arc<DynamicObject>) -> bool {
        let (namespace, name, entry) = self.entry(Arc::clone(&obj));
        let mut inner = self.inner.write();
        let same_version = inner
            .at(&namespace, &name)
            .filter(|e| e.held.is_metadata())
            .is_some_and(|e| {
                e.held.resource_version().as_deref() == obj.metadata.resource_version.as_deref()
            });
        if same_version {
            inner.insert(namespace, name, entry);
        }
        same_version
    }

    /// Keeps only the metadata of the object `name` in `namespace`, if it is held in full.
    pub(super) fn hold_as_metadata(&self, namespace: Option<&str>, name: &str) {
        let mut inner = self.inner.write();
        let Some(full) = inner
            .at(namespace.unwrap_or_default(), name)
            .filter(|e| !e.held.is_metadata())
            .and_then(|e| e.held.object())
        else {
            return;
        };
        let mut meta = (*full).clone();
        strip(&mut meta);
        let (namespace, name, entry) = self.entry(Arc::new(meta));
        inner.insert(namespace, name, entry);
    }

    /// Whether the object `name` in `namespace` is held as metadata only.
    pub(super) fn holds_metadata_of(&self, namespace: Option<&str>, name: &str) -> bool {
        self.inner
            .read()
            .at(namespace.unwrap_or_default(), name)
            .is_some_and(|e| e.held.is_metadata())
    }

    /// The object `name` in `namespace` (`None` for a cluster-scoped one).
    pub(super) fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        self.inner
            .read()
            .at(namespace.unwrap_or_default(), name)
            .and_then(|e| e.held.object())
    }

    /// The object `name` in `namespace` as `K`: read straight from its text where the store
    /// packs it (no tree of maps is built, then converted), else converted from the object
    /// held. `None` when it is not held, or held as metadata only and `full_only` (a mixed
    /// store's reader of full objects does not see those).
    pub(super) fn get_as<K: serde::de::DeserializeOwned>(
        &self,
        (namespace, name): (Option<&str>, &str),
        full_only: bool,
    ) -> Option<std::result::Result<K, String>> {
        let inner = self.inner.read();
        let held = &inner.at(namespace.unwrap_or_default(), name)?.held;
        if full_only && held.is_metadata() {
            return None;
        }
        Some(match held {
            Held::Text {
                json,
                no_data: false,
            } => serde_json::from_str(json).map_err(|e| e.to_string()),
            other => {
                let obj = other.object()?;
                drop(inner);
                serde_json::to_value(&*obj)
                    .and_then(serde_json::from_value)
                    .map_err(|e| e.to_string())
            }
        })
    }

    /// The resourceVersion of the object `name` in `namespace` (`None` inside: it has none),
    /// read without building the object back (a packed declaration's status is not parsed
    /// for it); `None` when it is not held, or held as metadata only and `full_only`.
    pub(super) fn resource_version_of(
        &self,
        (namespace, name): (Option<&str>, &str),
        full_only: bool,
    ) -> Option<Option<String>> {
        let inner = self.inner.read();
        let held = &inner.at(namespace.unwrap_or_default(), name)?.held;
        if full_only && held.is_metadata() {
            return None;
        }
        Some(held.resource_version().map(Cow::into_owned))
    }

    /// Every object held.
    pub(super) fn state(&self) -> Vec<Arc<DynamicObject>> {
        self.inner
            .read()
            .objects
            .values()
            .flat_map(|names| names.values().filter_map(|e| e.held.object()))
            .collect()
    }

    /// The namespace (`None` for cluster-scoped objects) and name of every object held; none
    /// is read back. What queues every object (a resync) needs only these: reading each
    /// object back would parse every declaration, its status of a thousand destinations
    /// included, at once.
    pub(super) fn places(&self) -> Vec<(Option<String>, String)> {
        self.inner
            .read()
            .objects
            .iter()
            .flat_map(|(namespace, names)| {
                let namespace = (!namespace.is_empty()).then(|| namespace.to_string());
                names
                    .keys()
                    .map(move |name| (namespace.clone(), name.to_string()))
            })
            .collect()
    }

    /// How many objects are held (none is read).
    pub(super) fn len(&self) -> usize {
        self.inner
            .read()
            .objects
            .values()
            .map(|names| names.len())
            .sum()
    }

    /// The objects held in `namespace` (`""` for cluster-scoped ones).
    pub(super) fn in_namespace(&self, namespace: &str) -> Vec<Arc<DynamicObject>> {
        self.inner
            .read()
            .objects
            .get(namespace)
            .into_iter()
            .flat_map(|names| names.values().filter_map(|e| e.held.object()))
            .collect()
    }

    /// The objects whose label `key` has `value`: from the index if this store keeps one for
    /// `key` (only those objects are read), else by reading every object.
    pub(super) fn labelled(&self, key: &str, value: &str) -> Vec<Arc<DynamicObject>> {
        self.labelled_held(key, value)
            .into_iter()
            .map(|(_, held)| match held {
                Holding::Object(obj) => obj,
                Holding::Summary(s) => Arc::new(s.object()),
            })
            .collect()
    }

    /// The objects whose label `key` has `value`, as held (summaries as such), with where
    /// they are held: from the index if this store keeps one for `key` (only those objects are
    /// read), else by reading every object once.
    pub(super) fn labelled_held(&self, key: &str, value: &str) -> Vec<(Place, Holding)> {
        let inner = self.inner.read();
        let held = |namespace: &Arc<str>, name: &Arc<str>, e: &Entry| {
            let place = (Arc::clone(namespace), Arc::clone(name));
            e.held.holding().map(|h| (place, h))
        };
        if self.index_label.as_deref() == Some(key) {
            return inner
                .by_label
                .get(value)
                .into_iter()
                .flatten()
                .filter_map(|(namespace, name)| held(namespace, name, inner.at(namespace, name)?))
                .collect();
        }
        let carries = |h: &Holding| {
            let labels = match h {
                Holding::Object(o) => o.metadata.labels.as_ref().and_then(|l| l.get(key).cloned()),
                Holding::Summary(s) => s.object().metadata.labels.and_then(|l| l.get(key).cloned()),
            };
            labels.is_some_and(|v| v == value)
        };
        inner
            .objects
            .iter()
            .flat_map(|(namespace, names)| names.iter().map(move |(name, e)| (namespace, name, e)))
            .filter_map(|(namespace, name, e)| held(namespace, name, e))
            .filter(|(_, h)| carries(h))
            .collect()
    }
}

/// Where an object is held: its namespace (empty for a cluster-scoped one) and name.
pub(super) type Place = (Arc<str>, Arc<str>);

/// What a completed (re)list changed in a store, told without reading any object back but
/// those that vanished: a store of thousands of copies held as prints, listed again, would
/// otherwise be built into thousands of objects at once, twice (before and after).
#[derive(Debug, Default)]
pub(super) struct Relisted {
    /// Where the listed objects are that are new, or have another resourceVersion than the
    /// object held there before.
    pub(super) changed: Vec<Place>,
    /// The objects held before that the list no longer has (no Delete event comes for them),
    /// as they were held.
    pub(super) vanished: Vec<Arc<DynamicObject>>,
    /// How many objects the store holds now.
    pub(super) present: usize,
}

/// The only writer of one [`Objects`]: applies a watch's events to it.
#[derive(Debug, Default)]
pub(super) struct ObjectsWriter {
    objects: Objects,
    /// A (re)list in progress: the store keeps serving the previous state until it is done.
    listing: Option<Inner>,
}

impl ObjectsWriter {
    /// A writer of an empty store; `packed` holds each object as its JSON text, `index_label`
    /// keeps an index of that label's values.
    pub(super) fn new(packed: bool, index_label: Option<&str>) -> Self {
        Self {
            objects: Objects {
                inner: Arc::default(),
                index_label: index_label.map(Arc::from),
                packed,
                summarize: None,
            },
            listing: None,
        }
    }

    /// Holds what `summarize` makes of an object instead of it, where it makes something.
    pub(super) fn summarizing(mut self, summarize: Option<SummarizeFn>) -> Self {
        self.objects.summarize = summarize;
        self
    }

    /// The objects this writer keeps.
    pub(super) fn objects(&self) -> Objects {
        self.objects.clone()
    }

    /// Applies one event; returns the object of a change (`Apply`, `Delete`), as it arrived
    /// (only its type and metadata where the watch kept its text).
    pub(super) fn apply(
        &mut self,
        event: Event<impl Into<Delivered>>,
    ) -> Option<Arc<DynamicObject>> {
        match event {
            Event::Apply(obj) => {
                let Delivered { object, text } = obj.into();
                let obj = Arc::new(object);
                let (namespace, name, entry) = self.objects.entry_of(Arc::clone(&obj), text);
                self.objects.inner.write().insert(namespace, name, entry);
                Some(obj)
            }
            Event::Delete(obj) => {
                let obj = obj.into().object;
                let (namespace, name) = place(&obj);
                self.objects.inner.write().remove(&namespace, &name);
                Some(Arc::new(obj))
            }
            Event::Init => {
                self.listing = Some(Inner::default());
                None
            }
            Event::InitApply(obj) => {
                let Delivered { object, text } = obj.into();
                let (namespace, name, entry) = self.objects.entry_of(Arc::new(object), text);
                self.listing
                    .get_or_insert_default()
                    .insert(namespace, name, entry);
                None
            }
            Event::InitDone => {
                self.finish_listing();
                None
            }
        }
    }

    /// Ends a (re)list: the listed objects replace those held, at once (an empty list if
    /// none was started). Returns what changed.
    pub(super) fn finish_listing(&mut self) -> Relisted {
        let listed = self.listing.take().unwrap_or_default();
        let before = std::mem::replace(&mut *self.objects.inner.write(), listed);
        let now = self.objects.inner.read();
        let mut changed = Vec::new();
        let mut present = 0;
        for (namespace, names) in &now.objects {
            let held_before = before.objects.get(namespace);
            for (name, entry) in names {
                present += 1;
                let same = held_before
                    .and_then(|names| names.get(name))
                    .is_some_and(|old| {
                        old.held.resource_version() == entry.held.resource_version()
                    });
                if !same {
                    changed.push((Arc::clone(namespace), Arc::clone(name)));
                }
            }
        }
        let vanished = before
            .objects
            .iter()
            .flat_map(|(namespace, names)| names.iter().map(move |(name, e)| (namespace, name, e)))
            .filter(|(namespace, name, _)| now.at(namespace, name).is_none())
            .filter_map(|(_, _, e)| e.held.object())
            .collect();
        Relisted {
            changed,
            vanished,
            present,
        }
    }
}

#[cfg(test)]
mod tests;
