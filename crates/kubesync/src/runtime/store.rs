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
        self.find(key, false)
    }

    /// The object behind `key` as last seen by any watch: a full object if a full watch holds
    /// it, else one with only metadata (its `data` is `null`). Rely on its metadata only.
    pub fn get_metadata(&self, key: &ObjectKey) -> Option<Arc<DynamicObject>> {
        self.find(key, false).or_else(|| self.find(key, true))
    }

    fn find(&self, key: &ObjectKey, metadata_only: bool) -> Option<Arc<DynamicObject>> {
        let stores = self.shared.stores.read();
        stores
            .iter()
            .filter(|s| {
                s.metadata_only == metadata_only
                    && s.cluster == key.cluster
                    && key.is_of(&s.resource)
            })
            .find_map(|s| s.reader.get(key.namespace.as_deref(), &key.name))
    }

    /// Like [`Context::get`], converted to a typed resource.
    pub fn get_as<K>(&self, key: &ObjectKey) -> Result<Option<K>>
    where
        K: Resource + serde::de::DeserializeOwned,
    {
        let Some(obj) = self.get(key) else {
            return Ok(None);
        };
        (*obj)
            .clone()
            .try_parse::<K>()
            .map(Some)
            .map_err(|e| Error::Convert {
                key: key.to_string(),
                target: std::any::type_name::<K>(),
                message: e.to_string(),
            })
    }

    /// Every object of this type that full watches of this cluster hold (see
    /// [`Context::get`]).
    pub fn list(&self, cluster: &str, resource: &ApiResource) -> Vec<Arc<DynamicObject>> {
        self.collect(cluster, resource, |s| !s.metadata_only)
    }

    /// The objects of this type in `namespace` that full watches of this cluster hold (see
    /// [`Context::list`]); only that namespace's objects are read.
    pub fn list_in(
        &self,
        cluster: &str,
        resource: &ApiResource,
        namespace: &str,
    ) -> Vec<Arc<DynamicObject>> {
        self.collect_from(
            cluster,
            resource,
            |s| !s.metadata_only,
            |o| o.in_namespace(namespace),
        )
    }

    /// Every object of this type that any watch of this cluster holds: full objects where a
    /// full watch holds them, else metadata only (see [`Context::get_metadata`]).
    pub fn list_metadata(&self, cluster: &str, resource: &ApiResource) -> Vec<Arc<DynamicObject>> {
        // Full stores first: an object both kinds hold is returned in full.
        let mut out = self.collect(cluster, resource, |s| !s.metadata_only);
        let mut seen: HashSet<ObjectId> = out.iter().map(|o| id_of(o)).collect();
        for obj in self.collect(cluster, resource, |s| s.metadata_only) {
            if seen.insert(id_of(&obj)) {
                out.push(obj);
            }
        }
        out
    }

    /// The objects that the watch `id` holds (in full, or metadata only if it was made so).
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
        let stores = self.shared.stores.read();
        stores
            .iter()
            .find(|s| s.id == id.0)
            .map(|s| read(&s.reader))
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
        self.collect_from(
            cluster,
            resource,
            |s| !s.metadata_only,
            |o| o.labelled(key, value),
        )
    }

    fn collect(
        &self,
        cluster: &str,
        resource: &ApiResource,
        which: impl Fn(&StoreEntry) -> bool,
    ) -> Vec<Arc<DynamicObject>> {
        self.collect_from(cluster, resource, which, Objects::state)
    }

    fn collect_from(
        &self,
        cluster: &str,
        resource: &ApiResource,
        which: impl Fn(&StoreEntry) -> bool,
        objects: impl Fn(&Objects) -> Vec<Arc<DynamicObject>>,
    ) -> Vec<Arc<DynamicObject>> {
        let stores = self.shared.stores.read();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for s in stores.iter().filter(|s| {
            which(s)
                && s.cluster == cluster
                && s.resource.group == resource.group
                && s.resource.kind == resource.kind
        }) {
            for obj in objects(&s.reader) {
                if seen.insert(id_of(&obj)) {
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
