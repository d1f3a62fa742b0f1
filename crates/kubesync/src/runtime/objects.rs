//! The objects one watch holds: by namespace, then name.
//!
//! kube-runtime's reflector store keys each object by an `ObjectRef`, which carries its own
//! copy of the resource type (five strings) plus the object's uid and resourceVersion; with
//! tens of thousands of copies that is megabytes of keys. Here the namespace is stored once per
//! namespace and the name once per object, and an event's object is stored as it arrived,
//! without the deep copy kube's store makes of it.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use super::shared::{read, write};

/// Namespace (empty for cluster-scoped objects) → name → object.
type Map = HashMap<String, HashMap<String, Arc<DynamicObject>>>;

fn place(obj: &DynamicObject) -> (String, String) {
    (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

fn insert(map: &mut Map, obj: Arc<DynamicObject>) {
    let (namespace, name) = place(&obj);
    map.entry(namespace).or_default().insert(name, obj);
}

/// One watch's objects, readable from any thread. Cheap to clone (clones share them).
#[derive(Clone, Debug, Default)]
pub(super) struct Objects(Arc<RwLock<Map>>);

impl Objects {
    /// The object `name` in `namespace` (`None` for a cluster-scoped one).
    pub(super) fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        read(&self.0)
            .get(namespace.unwrap_or_default())
            .and_then(|names| names.get(name))
            .cloned()
    }

    /// Every object held.
    pub(super) fn state(&self) -> Vec<Arc<DynamicObject>> {
        read(&self.0)
            .values()
            .flat_map(|names| names.values().cloned())
            .collect()
    }
}

/// The only writer of one [`Objects`]: applies a watch's events to it.
#[derive(Debug, Default)]
pub(super) struct ObjectsWriter {
    objects: Objects,
    /// A (re)list in progress: the store keeps serving the previous state until it is done.
    listing: Option<Map>,
}

impl ObjectsWriter {
    /// The objects this writer keeps.
    pub(super) fn objects(&self) -> Objects {
        self.objects.clone()
    }

    /// Applies one event; returns the object of a change (`Apply`, `Delete`), as stored.
    pub(super) fn apply(&mut self, event: Event<DynamicObject>) -> Option<Arc<DynamicObject>> {
        match event {
            Event::Apply(obj) => {
                let obj = Arc::new(obj);
                insert(&mut write(&self.objects.0), Arc::clone(&obj));
                Some(obj)
            }
            Event::Delete(obj) => {
                let (namespace, name) = place(&obj);
                let mut map = write(&self.objects.0);
                if let Some(names) = map.get_mut(&namespace) {
                    names.remove(&name);
                    if names.is_empty() {
                        map.remove(&namespace);
                    }
                }
                Some(Arc::new(obj))
            }
            Event::Init => {
                self.listing = Some(Map::new());
                None
            }
            Event::InitApply(obj) => {
                insert(self.listing.get_or_insert_default(), Arc::new(obj));
                None
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                *write(&self.objects.0) = listed;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(ns: Option<&str>, name: &str, rv: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv}
        }))
        .expect("object")
    }

    fn rv(o: Option<Arc<DynamicObject>>) -> Option<String> {
        o.and_then(|o| o.metadata.resource_version.clone())
    }

    #[test]
    fn changes_and_relists() {
        let mut w = ObjectsWriter::default();
        let objects = w.objects();
        let stored = w.apply(Event::Apply(obj(Some("a"), "x", "1")));
        assert_eq!(
            rv(stored),
            Some("1".into()),
            "the change is returned as stored"
        );
        w.apply(Event::Apply(obj(None, "x", "2")));
        assert_eq!(rv(objects.get(Some("a"), "x")), Some("1".into()));
        assert_eq!(
            rv(objects.get(None, "x")),
            Some("2".into()),
            "cluster-scoped apart"
        );
        // A relist replaces everything at once, when it is done.
        w.apply(Event::Init);
        w.apply(Event::InitApply(obj(Some("b"), "y", "3")));
        assert_eq!(
            objects.state().len(),
            2,
            "the old state is served during the list"
        );
        w.apply(Event::InitDone);
        assert_eq!(objects.state().len(), 1);
        assert_eq!(objects.get(Some("a"), "x"), None);
        assert_eq!(rv(objects.get(Some("b"), "y")), Some("3".into()));
        let gone = w.apply(Event::Delete(obj(Some("b"), "y", "4")));
        assert_eq!(rv(gone), Some("4".into()));
        assert!(objects.state().is_empty());
        assert!(read(&objects.0).is_empty(), "empty namespaces are dropped");
    }
}
