//! Reads from the watch stores: what the reconciler decides on.

use std::collections::HashSet;
use std::sync::Arc;

use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;

use super::context::Context;
use super::objects::Objects;
use super::shared::{ObjectId, StoreEntry, id_of};
use super::watches::WatchId;
use crate::error::{Error, Result};
use crate::key::ObjectKey;

impl Context {
    /// The object behind `key` as last seen by a watch that holds full objects, or `None` if
    /// no such watch holds it. Watches made with [`Watch::metadata_only`] are not asked: use
    /// [`Context::get_metadata`] for what they hold.
    ///
    /// [`Watch::metadata_only`]: super::Watch::metadata_only
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<DynamicObject>> {
        self.find(key, true)
    }

    /// The object behind `key` as last seen by any watch: a full object if a full watch holds
    /// it, else one with only metadata (its `data` is `null`). Rely on its metadata only.
    pub fn get_metadata(&self, key: &ObjectKey) -> Option<Arc<DynamicObject>> {
        self.find(key, true).or_else(|| self.find(key, false))
    }

    /// The resourceVersion of the object behind `key` as [`Context::get_metadata`] shows it,
    /// read without building the object: where a watch holds objects packed or summarized,
    /// `get_metadata` parses or builds the whole object back (a declaration's status of a
    /// thousand destinations included) only for this. `None` if no watch holds it (or it has
    /// none).
    pub fn resource_version(&self, key: &ObjectKey) -> Option<String> {
        self.version_held(key).flatten()
    }

    /// Whether a watch holds the object behind `key` (whether [`Context::get_metadata`]
    /// would return it), without reading it back.
    pub fn holds(&self, key: &ObjectKey) -> bool {
        self.version_held(key).is_some()
    }

    /// The resourceVersion of `key`'s object, from the first store that shows it as
    /// [`Context::get_metadata`] would; `None` if none holds it.
    fn version_held(&self, key: &ObjectKey) -> Option<Option<String>> {
        let place = (key.namespace.as_deref(), key.name.as_str());
        [true, false].into_iter().find_map(|full| {
            self.first_in_stores_of(key, full, |s| {
                s.reader.resource_version_of(place, full && s.mixed)
            })
        })
    }

    /// The object behind `key` in a store that holds it in full (`full`), or in any store
    /// that holds metadata.
    fn find(&self, key: &ObjectKey, full: bool) -> Option<Arc<DynamicObject>> {
        self.first_in_stores_of(key, full, |s| {
            s.reader
                .get(key.namespace.as_deref(), &key.name)
                .filter(|o| s.shows(o, full))
        })
    }

    /// The first of `read`'s answers from the stores that hold `key`'s kind in its cluster,
    /// for a reader of full objects (`full`) or of metadata.
    fn first_in_stores_of<T>(
        &self,
        key: &ObjectKey,
        full: bool,
        read: impl FnMut(&StoreEntry) -> Option<T>,
    ) -> Option<T> {
        let stores = self.shared.stores.read();
        stores
            .iter()
            .filter(|s| s.serves(full) && s.cluster == key.cluster && key.is_of(&s.resource))
            .find_map(read)
    }

    /// Like [`Context::get`], converted to a typed resource.
    pub fn get_as<K>(&self, key: &ObjectKey) -> Result<Option<K>>
    where
        K: Resource + serde::de::DeserializeOwned,
    {
        // The store that `get` reads, read without building the object first (a packed one
        // is parsed from its text straight into `K`).
        let parsed = self.first_in_stores_of(key, true, |s| {
            s.reader
                .get_as::<K>((key.namespace.as_deref(), &key.name), s.mixed)
        });
        parsed.transpose().map_err(|message| Error::Convert {
            key: key.to_string(),
            target: std::any::type_name::<K>(),
            message,
        })
    }

    /// Every object of this type that full watches of this cluster hold (see
    /// [`Context::get`]).
    pub fn list(&self, cluster: &str, resource: &ApiResource) -> Vec<Arc<DynamicObject>> {
        self.collect(cluster, resource, true)
    }

    /// The objects of this type in `namespace` that full watches of this cluster hold (see
    /// [`Context::list`]); only that namespace's objects are read.
    pub fn list_in(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: &str,
    ) -> Vec<Arc<DynamicObject>> {
        self.collect_from(cluster, resource, true, |o| o.in_namespace(namespace))
    }

    /// Every object of this type that any watch of this cluster holds: full objects where a
    /// full watch holds them, else metadata only (see [`Context::get_metadata`]).
    pub fn list_metadata(&self, cluster: &str, resource: &ApiResource) -> Vec<Arc<DynamicObject>> {
        // Full stores first: an object both kinds hold is returned in full.
        let mut out = self.collect(cluster, resource, true);
        let mut seen: HashSet<ObjectId> = out.iter().map(|o| id_of(o)).collect();
        for obj in self.collect(cluster, resource, false) {
            if seen.insert(id_of(&obj)) {
                out.push(obj);
            }
        }
        out
    }

    /// The objects that the watch `id` holds (in full, or metadata only if it was made so; a
    /// mixed watch's as it holds each, those held as metadata with `data` null).
    pub fn list_watch(&self, id: WatchId) -> Vec<Arc<DynamicObject>> {
        self.in_watch(id, Objects::state).unwrap_or_default()
    }

    /// How many objects the watch `id` holds (none is read or parsed); 0 for a watch that is
    /// not running.
    pub fn watch_size(&self, id: WatchId) -> usize {
        self.in_watch(id, Objects::len).unwrap_or_default()
    }

    /// `read` of the store of the watch `id`, if it runs.
    fn in_watch<T>(&self, id: WatchId, read: impl Fn(&Objects) -> T) -> Option<T> {
        self.in_store(id, |s| read(&s.reader))
    }

    /// `read` of the watch `id`'s store entry, if it runs.
    fn in_store<T>(&self, id: WatchId, read: impl FnOnce(&StoreEntry) -> T) -> Option<T> {
        let stores = self.shared.stores.read();
        stores.iter().find(|s| s.id == id.0).map(read)
    }

    /// Whether the watch `id` holds the object behind `key` as metadata only (a watch made
    /// with [`Watch::full_only_for`], of an object it did not keep in full when it last
    /// arrived). Such an object is read live and handed over with [`Context::hold_in_full`].
    ///
    /// [`Watch::full_only_for`]: super::Watch::full_only_for
    pub fn held_as_metadata(&self, id: WatchId, key: &ObjectKey) -> bool {
        self.in_watch(id, |o| {
            o.holds_metadata_of(key.namespace.as_deref(), &key.name)
        })
        .unwrap_or(false)
    }

    /// Holds `obj`, read live, in full in the mixed watch `id` ([`Watch::full_only_for`]),
    /// in place of the metadata it holds of the very same version (same resourceVersion),
    /// after the watch's transform. Returns whether it did: if not, the watch holds another
    /// version, whose event has come (held in full if the watch keeps it so now) or is on
    /// the way. The object's next events are held as the watch's `keep` says.
    ///
    /// [`Watch::full_only_for`]: super::Watch::full_only_for
    pub fn hold_in_full(&self, id: WatchId, mut obj: DynamicObject) -> bool {
        self.in_store(id, |s| {
            if !s.mixed {
                return false;
            }
            if obj.types.is_none() {
                obj.types = Some(kube::core::TypeMeta {
                    api_version: s.resource.api_version.clone(),
                    kind: s.resource.kind.clone(),
                });
            }
            if let Some(t) = &s.transform {
                t(&mut obj);
            }
            s.reader.hold_in_full(Arc::new(obj))
        })
        .unwrap_or(false)
    }

    /// Keeps only the metadata of the object behind `key` in the mixed watch `id`
    /// ([`Watch::full_only_for`]): one it need not hold in full any more (its content is
    /// dropped now, not at its next event).
    ///
    /// [`Watch::full_only_for`]: super::Watch::full_only_for
    pub fn hold_as_metadata(&self, id: WatchId, key: &ObjectKey) {
        self.in_store(id, |s| {
            if s.mixed {
                s.reader
                    .hold_as_metadata(key.namespace.as_deref(), &key.name);
            }
        });
    }

    /// The objects of this type that full watches of this cluster hold and whose label `key`
    /// has `value` (see [`Context::list`]). Watches that index `key`
    /// ([`Watch::index_label`]) answer from their index and read only those objects; others
    /// are read in full and filtered.
    ///
    /// [`Watch::index_label`]: super::Watch::index_label
    pub fn list_labelled(
        &self,
        cluster: &str,
        resource: &ApiResource,
        key: &str,
        value: &str,
    ) -> Vec<Arc<DynamicObject>> {
        self.collect_from(cluster, resource, true, |o| o.labelled(key, value))
    }

    /// Like [`Context::list_labelled`], the objects as the stores hold them: a watch made with
    /// [`Watch::summarized`](super::Watch::summarized) answers with its summaries (nothing is
    /// parsed or rebuilt), others with their objects.
    pub fn list_labelled_held(
        &self,
        cluster: &str,
        resource: &ApiResource,
        key: &str,
        value: &str,
    ) -> Vec<super::Holding> {
        let stores = self.shared.stores.read();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for s in stores
            .iter()
            .filter(|s| s.serves_kind(true, cluster, resource))
        {
            for (place, held) in s.reader.labelled_held(key, value) {
                let shown = match &held {
                    super::Holding::Object(obj) => s.shows(obj, true),
                    super::Holding::Summary(_) => true,
                };
                // An object two watches hold (a copy moving between shards) is read once.
                if shown && seen.insert(place) {
                    out.push(held);
                }
            }
        }
        out
    }

    /// The objects of this type that the stores of `cluster` hold in full (`full`), or that
    /// the stores holding metadata hold.
    fn collect(
        &self,
        cluster: &str,
        resource: &ApiResource,
        full: bool,
    ) -> Vec<Arc<DynamicObject>> {
        self.collect_from(cluster, resource, full, Objects::state)
    }

    fn collect_from(
        &self,
        cluster: &str,
        resource: &ApiResource,
        full: bool,
        objects: impl Fn(&Objects) -> Vec<Arc<DynamicObject>>,
    ) -> Vec<Arc<DynamicObject>> {
        let stores = self.shared.stores.read();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for s in stores
            .iter()
            .filter(|s| s.serves_kind(full, cluster, resource))
        {
            for obj in objects(&s.reader) {
                if s.shows(&obj, full) && seen.insert(id_of(&obj)) {
                    out.push(obj);
                }
            }
        }
        out
    }

    /// A dynamic API handle for objects of `resource` in `cluster` (namespaced if `namespace`).
    pub fn api(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>> {
        let client = self.require_cluster(cluster)?.client().clone();
        Ok(crate::cluster::api(client, namespace, resource))
    }

    /// Whether the object behind `key` is really absent from its cluster, by a live read.
    ///
    /// Stores are filled by separate watches and may be a moment behind the cluster (or behind
    /// each other); a decision to delete *because something is missing* is confirmed with
    /// this first. A failed read is an error, never "absent".
    pub async fn confirm_absent(&self, key: &ObjectKey, resource: &ApiResource) -> Result<bool> {
        let api = self.api(&key.cluster, resource, key.namespace.as_deref())?;
        Ok(api.get_metadata_opt(&key.name).await?.is_none())
    }
}
