//! When this process first saw each version of the objects the fan-out's copies depend on
//! (sources, namespaces, the copies themselves): the start of a copy's propagation lag and of
//! its staleness. Recorded as watch events arrive, before any reconcile runs, so time spent
//! waiting in the queue counts.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::key::ObjectKey;

/// First sightings of object versions, by object: only the latest version of each is kept.
#[derive(Debug, Default)]
pub struct Seen {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    at: HashMap<ObjectKey, (String, Instant)>,
    /// The number of entries after the last prune.
    kept: usize,
}

/// Entries are pruned once they are twice as many as after the last prune, and at least this
/// many.
const PRUNE_FROM: usize = 4096;

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
        let mut inner = self.lock();
        match inner.at.get_mut(key) {
            Some((rv, _)) if rv == resource_version => {}
            Some(entry) => *entry = (resource_version.to_string(), now),
            None => {
                inner
                    .at
                    .insert(key.clone(), (resource_version.to_string(), now));
            }
        }
    }

    /// The latest version of `key` seen, and when it was first seen.
    pub fn latest(&self, key: &ObjectKey) -> Option<(String, Instant)> {
        self.lock().at.get(key).cloned()
    }

    /// When version `resource_version` of `key` was first seen; `None` if another version is
    /// the latest, or none was seen.
    pub fn since(&self, key: &ObjectKey, resource_version: &str) -> Option<Instant> {
        self.latest(key)
            .and_then(|(rv, at)| (rv == resource_version).then_some(at))
    }

    /// When `key` last changed (any version).
    pub fn changed(&self, key: &ObjectKey) -> Option<Instant> {
        self.latest(key).map(|(_, at)| at)
    }

    /// Whether enough entries accumulated for a [`prune`](Self::prune).
    pub fn needs_prune(&self) -> bool {
        let inner = self.lock();
        inner.at.len() > (2 * inner.kept).max(PRUNE_FROM)
    }

    /// Drops the entries last changed before `now - age` whose object `exists` says is gone.
    pub fn prune(&self, now: Instant, age: Duration, exists: impl Fn(&ObjectKey) -> bool) {
        let mut inner = self.lock();
        inner
            .at
            .retain(|key, (_, at)| now.saturating_duration_since(*at) < age || exists(key));
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
