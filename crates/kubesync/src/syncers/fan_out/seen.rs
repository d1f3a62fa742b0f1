//! When this process first saw each version of the objects the fan-out's copies depend on
//! (sources, namespaces, the copies themselves): the start of a copy's propagation lag and of
//! its staleness. Recorded as watch events arrive, before any reconcile runs, so time spent
//! waiting in the queue counts.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::key::ObjectKey;

/// First sightings of object versions, by object: only the latest version of each is kept.
/// An entry costs about 70 bytes (a copy is one): the object's cluster, group and kind are
/// held once for all objects of that kind, its namespace and name as one string, a numeric
/// resourceVersion as a number.
#[derive(Debug, Default)]
pub struct Seen {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The (cluster, group, kind) of the objects seen, each once; a [`Place`] names one by
    /// its index.
    kinds: Vec<(String, String, String)>,
    at: HashMap<Place, (Version, Instant)>,
    /// The number of entries after the last prune.
    kept: usize,
}

/// One object: the index of its kind in [`Inner::kinds`], and `namespace/name` (`/name` for
/// a cluster-scoped object: a namespace is never empty).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Place(u32, Box<str>);

/// A resourceVersion as held: etcd's are numbers, anything else is kept as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Version {
    Number(u64),
    Text(Box<str>),
}

impl Version {
    fn of(rv: &str) -> Self {
        match rv.parse::<u64>() {
            // Only the canonical text of the number: "007" stays text, and reads back as such.
            Ok(n) if n.to_string() == rv => Self::Number(n),
            _ => Self::Text(rv.into()),
        }
    }

    fn text(&self) -> String {
        match self {
            Self::Number(n) => n.to_string(),
            Self::Text(t) => t.to_string(),
        }
    }
}

/// Entries are pruned once they are twice as many as after the last prune, and at least this
/// many.
const PRUNE_FROM: usize = 4096;

impl Inner {
    fn place_text(key: &ObjectKey) -> Box<str> {
        format!(
            "{}/{}",
            key.namespace.as_deref().unwrap_or_default(),
            key.name
        )
        .into()
    }

    /// The place of `key`, if its kind was ever seen.
    fn find(&self, key: &ObjectKey) -> Option<Place> {
        let kind = self.kinds.iter().position(|(c, g, k)| {
            *c == key.cluster && crate::text::same(g, &key.group) && *k == key.kind
        })?;
        Some(Place(kind as u32, Self::place_text(key)))
    }

    /// The place of `key`, its kind recorded if new.
    fn place(&mut self, key: &ObjectKey) -> Place {
        if let Some(place) = self.find(key) {
            return place;
        }
        self.kinds
            .push((key.cluster.clone(), key.group.clone(), key.kind.clone()));
        Place(self.kinds.len() as u32 - 1, Self::place_text(key))
    }

    /// The key of `place`.
    fn key(&self, place: &Place) -> ObjectKey {
        let (cluster, group, kind) = &self.kinds[place.0 as usize];
        let (namespace, name) = place.1.split_once('/').unwrap_or_default();
        ObjectKey {
            cluster: cluster.clone(),
            group: group.clone(),
            kind: kind.clone(),
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            name: name.to_string(),
        }
    }
}

impl Seen {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// The object `key` was seen at `resource_version` now.
    pub fn saw(&self, key: &ObjectKey, resource_version: &str) {
        self.saw_at(key, resource_version, Instant::now());
    }

    /// The object `key` was seen at `resource_version` at `now`: recorded if that version is
    /// new.
    pub fn saw_at(&self, key: &ObjectKey, resource_version: &str, now: Instant) {
        let version = Version::of(resource_version);
        let mut inner = self.lock();
        let place = inner.place(key);
        match inner.at.get_mut(&place) {
            Some((rv, _)) if *rv == version => {}
            Some(entry) => *entry = (version, now),
            None => {
                inner.at.insert(place, (version, now));
            }
        }
    }

    /// The latest version of `key` seen, and when it was first seen.
    pub fn latest(&self, key: &ObjectKey) -> Option<(String, Instant)> {
        let inner = self.lock();
        let place = inner.find(key)?;
        inner.at.get(&place).map(|(rv, at)| (rv.text(), *at))
    }

    /// When version `resource_version` of `key` was first seen; `None` if another version is
    /// the latest, or none was seen.
    pub fn since(&self, key: &ObjectKey, resource_version: &str) -> Option<Instant> {
        let version = Version::of(resource_version);
        let inner = self.lock();
        let place = inner.find(key)?;
        inner
            .at
            .get(&place)
            .and_then(|(rv, at)| (*rv == version).then_some(*at))
    }

    /// When `key` last changed (any version).
    pub fn changed(&self, key: &ObjectKey) -> Option<Instant> {
        let inner = self.lock();
        let place = inner.find(key)?;
        inner.at.get(&place).map(|(_, at)| *at)
    }

    /// Whether enough entries accumulated for a [`prune`](Self::prune).
    pub fn needs_prune(&self) -> bool {
        let inner = self.lock();
        inner.at.len() > (2 * inner.kept).max(PRUNE_FROM)
    }

    /// Drops the entries last changed before `now - age` whose object `exists` says is gone.
    pub fn prune(&self, now: Instant, age: Duration, exists: impl Fn(&ObjectKey) -> bool) {
        let mut inner = self.lock();
        let gone: Vec<Place> = inner
            .at
            .iter()
            .filter(|(place, (_, at))| {
                now.saturating_duration_since(*at) >= age && !exists(&inner.key(place))
            })
            .map(|(place, _)| place.clone())
            .collect();
        for place in gone {
            inner.at.remove(&place);
        }
        inner.kept = inner.at.len();
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.lock().at.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use kube::core::ApiResource;

    use super::*;

    fn key(name: &str) -> ObjectKey {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        ObjectKey::new("local", &ar, Some("ns".into()), name)
    }

    #[test]
    fn a_version_is_dated_by_its_first_sight() {
        let seen = Seen::default();
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        seen.saw_at(&key("a"), "1", t0);
        seen.saw_at(&key("a"), "1", t1);
        assert_eq!(seen.since(&key("a"), "1"), Some(t0));
        seen.saw_at(&key("a"), "2", t1);
        assert_eq!(seen.since(&key("a"), "2"), Some(t1));
        assert_eq!(
            seen.since(&key("a"), "1"),
            None,
            "only the latest version is kept"
        );
        assert_eq!(seen.changed(&key("a")), Some(t1));
        assert_eq!(seen.latest(&key("b")), None);
    }

    #[test]
    fn versions_and_places_read_back_as_they_were_seen() {
        let seen = Seen::default();
        let t0 = Instant::now();
        let cluster_scoped = ObjectKey {
            namespace: None,
            ..key("a")
        };
        let other_cluster = key("a").in_cluster("remote");
        seen.saw_at(&key("a"), "0042", t0);
        seen.saw_at(&cluster_scoped, "17", t0);
        seen.saw_at(&other_cluster, "x-1", t0);
        assert_eq!(seen.latest(&key("a")).map(|l| l.0), Some("0042".into()));
        assert_eq!(seen.since(&key("a"), "42"), None, "not the same text");
        assert_eq!(seen.latest(&cluster_scoped).map(|l| l.0), Some("17".into()));
        assert_eq!(seen.latest(&other_cluster).map(|l| l.0), Some("x-1".into()));
        assert_eq!(seen.len(), 3, "three objects, not one");
        let inner = seen.lock();
        assert_eq!(inner.kinds.len(), 2, "each kind of each cluster held once");
        for k in [key("a"), cluster_scoped.clone(), other_cluster.clone()] {
            let place = inner.find(&k).expect("seen");
            assert_eq!(inner.key(&place), k, "the key reads back");
        }
    }

    #[test]
    fn prune_drops_old_entries_of_objects_that_are_gone() {
        let seen = Seen::default();
        let t0 = Instant::now();
        for i in 0..PRUNE_FROM + 1 {
            seen.saw_at(&key(&i.to_string()), "1", t0);
        }
        assert!(seen.needs_prune());
        let later = t0 + Duration::from_secs(700);
        seen.saw_at(&key("recent"), "1", later);
        // Objects named with an even number still exist.
        seen.prune(later, Duration::from_secs(600), |k| {
            k.name.parse::<usize>().is_ok_and(|n| n % 2 == 0)
        });
        assert_eq!(seen.len(), PRUNE_FROM / 2 + 1 + 1);
        assert!(seen.latest(&key("recent")).is_some(), "recent entries stay");
        assert!(seen.latest(&key("1")).is_none());
        assert!(!seen.needs_prune());
    }
}
