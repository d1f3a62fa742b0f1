//! How fresh the local copies of a spec/status sync are: which remote objects carry a
//! generation not yet applied locally, and since when this process knows it. Recorded as the
//! remote watch's events arrive (before any reconcile runs, so time in the work queue counts);
//! the write that applies a generation reads its propagation lag from here.
//!
//! Only objects that are behind are held (an entry is dropped once its generation is applied),
//! so memory grows with the backlog, not with the objects synced. Times are parameters: the
//! bookkeeping is pure and unit-tested.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::key::ObjectKey;

/// Remote generations seen and not yet applied locally, by remote object.
#[derive(Debug, Default)]
pub struct Freshness {
    behind: Mutex<HashMap<ObjectKey, (i64, Instant)>>,
}

impl Freshness {
    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<ObjectKey, (i64, Instant)>> {
        self.behind.lock()
    }

    /// The remote object `key` was seen at `generation` at `now`; `applied` says whether the
    /// local copy already has that generation. A generation not applied is dated by its first
    /// sight; an applied one clears the entry.
    pub fn saw(&self, key: &ObjectKey, generation: i64, applied: bool, now: Instant) {
        let mut behind = self.lock();
        if applied {
            behind.remove(key);
            return;
        }
        match behind.get_mut(key) {
            Some((g, _)) if *g == generation => {}
            Some(entry) => *entry = (generation, now),
            None => {
                behind.insert(key.clone(), (generation, now));
            }
        }
    }

    /// The local copy of `key` was written with `generation` at `now`: its propagation lag,
    /// from that generation's first sight (`None` if it was not seen behind, e.g. a revert of
    /// someone else's edit of the copy). An older generation's entry is cleared too.
    pub fn applied(&self, key: &ObjectKey, generation: i64, now: Instant) -> Option<Duration> {
        let mut behind = self.lock();
        match behind.get(key) {
            Some((g, since)) if *g <= generation => {
                let lag = now.saturating_duration_since(*since);
                let exact = *g == generation;
                behind.remove(key);
                exact.then_some(lag)
            }
            _ => None,
        }
    }

    /// Since when `key` has been behind at `generation` (`None`: not seen behind at it).
    pub fn since(&self, key: &ObjectKey, generation: i64) -> Option<Instant> {
        self.lock()
            .get(key)
            .and_then(|(g, since)| (*g == generation).then_some(*since))
    }

    /// Keeps the entries of the objects `exists` says are still there (a deleted remote
    /// object's last event does not say it is gone).
    pub fn retain(&self, exists: impl Fn(&ObjectKey) -> bool) {
        self.lock().retain(|key, _| exists(key));
    }

    /// Objects seen behind.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no object is seen behind.
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
        ObjectKey::new("remote", &ar, Some("ns".into()), name)
    }

    #[test]
    fn a_generation_is_behind_from_its_first_sight_to_its_write() {
        let f = Freshness::default();
        let t0 = Instant::now();
        let s = |n| t0 + Duration::from_secs(n);
        f.saw(&key("a"), 2, false, s(0));
        f.saw(&key("a"), 2, false, s(1)); // the same generation again (a status patch)
        assert_eq!(f.since(&key("a"), 2), Some(s(0)));
        f.saw(&key("a"), 3, false, s(2)); // a newer one before the write: dated anew
        assert_eq!(f.since(&key("a"), 2), None);
        assert_eq!(f.applied(&key("a"), 3, s(5)), Some(Duration::from_secs(3)));
        assert!(f.is_empty(), "applied: no longer held");
        assert_eq!(
            f.applied(&key("a"), 3, s(6)),
            None,
            "a second write (a revert) is no propagation"
        );
    }

    #[test]
    fn applied_generations_are_not_held_and_older_entries_clear() {
        let f = Freshness::default();
        let t0 = Instant::now();
        f.saw(&key("a"), 1, true, t0);
        assert!(f.is_empty());
        f.saw(&key("b"), 1, false, t0);
        f.saw(&key("b"), 1, true, t0 + Duration::from_secs(1));
        assert!(f.is_empty(), "the event after the write clears it");
        f.saw(&key("c"), 4, false, t0);
        assert_eq!(
            f.applied(&key("c"), 5, t0),
            None,
            "a newer generation was written (its first sight is unknown)"
        );
        assert!(f.is_empty());
        f.saw(&key("d"), 7, false, t0);
        assert_eq!(f.applied(&key("d"), 6, t0), None, "an older write");
        assert_eq!(f.len(), 1, "still behind at 7");
    }

    #[test]
    fn retain_drops_deleted_objects() {
        let f = Freshness::default();
        let t0 = Instant::now();
        f.saw(&key("a"), 1, false, t0);
        f.saw(&key("b"), 1, false, t0);
        f.retain(|k| k.name == "a");
        assert_eq!(f.since(&key("a"), 1), Some(t0));
        assert_eq!(f.since(&key("b"), 1), None);
    }
}
