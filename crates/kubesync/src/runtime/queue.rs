//! The work queue: pure bookkeeping, no IO and no clock of its own (callers pass `now`).
//!
//! Guarantees:
//! - **deduplication**: a key is queued at most once; scheduling it again keeps the earlier time;
//! - **per-key serialisation**: a key handed out by [`WorkQueue::pop`] is not handed out again
//!   until [`WorkQueue::finish`]; triggers that arrive meanwhile are remembered and the key runs
//!   once more afterwards;
//! - **backoff**: consecutive failures of a key delay its retry exponentially;
//! - **gating**: keys of a cluster whose stores have not listed yet are parked until
//!   [`WorkQueue::cluster_ready`].

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::key::ObjectKey;

/// Exponential backoff for failing keys: `initial * factor^(failures-1)`, capped at `max`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Upper bound of the delay.
    pub max: Duration,
    /// Growth factor per consecutive failure (at least 1).
    pub factor: f64,
}

impl Default for Backoff {
    /// 500 ms, doubling, capped at 5 minutes.
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(500),
            max: Duration::from_secs(300),
            factor: 2.0,
        }
    }
}

impl Backoff {
    /// The delay before retry number `failures` (1 = after the first failure).
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = failures.saturating_sub(1).min(64) as i32;
        let secs = self.initial.as_secs_f64() * self.factor.max(1.0).powi(exp);
        if !secs.is_finite() || secs >= self.max.as_secs_f64() {
            self.max
        } else {
            Duration::from_secs_f64(secs)
        }
    }
}

/// What a finished reconcile asks of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Succeeded; nothing more unless something changes.
    Done,
    /// Succeeded; run again after this delay.
    RequeueAfter(Duration),
    /// Failed; retry with backoff.
    Failed,
}

#[derive(Debug, Default)]
pub(crate) struct WorkQueue {
    /// When each queued key is due.
    due: HashMap<ObjectKey, Instant>,
    /// Timeline of due times; entries whose time no longer matches `due` are stale.
    timeline: BinaryHeap<Reverse<(Instant, u64, ObjectKey)>>,
    seq: u64,
    /// Keys being reconciled now.
    active: HashSet<ObjectKey>,
    /// Keys triggered while active: run again when they finish (at the earliest time asked).
    deferred: HashMap<ObjectKey, Instant>,
    /// Keys waiting for their cluster's stores.
    parked: HashMap<String, HashSet<ObjectKey>>,
    ready_clusters: HashSet<String>,
    /// Clusters whose stores a cluster's keys also need.
    dependencies: HashMap<String, HashSet<String>>,
    failures: HashMap<ObjectKey, u32>,
    backoff: Backoff,
}

impl WorkQueue {
    pub(crate) fn new(backoff: Backoff) -> Self {
        Self {
            backoff,
            ..Default::default()
        }
    }

    /// Queues `key` to run at `at` (or earlier, if it is already queued earlier).
    pub(crate) fn schedule(&mut self, key: ObjectKey, at: Instant) {
        if self.active.contains(&key) {
            let slot = self.deferred.entry(key).or_insert(at);
            *slot = (*slot).min(at);
            return;
        }
        if let Some(parked) = self.parked.get(&key.cluster)
            && parked.contains(&key)
        {
            return;
        }
        match self.due.get(&key) {
            Some(existing) if *existing <= at => {}
            _ => {
                self.due.insert(key.clone(), at);
                self.seq += 1;
                self.timeline.push(Reverse((at, self.seq, key)));
            }
        }
    }

    /// Keys of `cluster` also wait for the stores of `on`.
    pub(crate) fn depends_on(&mut self, cluster: &str, on: &str) {
        if cluster != on {
            self.dependencies
                .entry(cluster.to_string())
                .or_default()
                .insert(on.to_string());
        }
    }

    fn is_ready(&self, cluster: &str) -> bool {
        self.ready_clusters.contains(cluster)
            && self
                .dependencies
                .get(cluster)
                .is_none_or(|deps| deps.iter().all(|d| self.ready_clusters.contains(d)))
    }

    /// Marks a cluster's stores as listed and releases the parked keys that were waiting
    /// for it (its own, and those of clusters depending on it).
    pub(crate) fn cluster_ready(&mut self, cluster: &str, now: Instant) {
        self.ready_clusters.insert(cluster.to_string());
        let waiting: Vec<String> = self
            .parked
            .keys()
            .filter(|c| self.is_ready(c))
            .cloned()
            .collect();
        for c in waiting {
            if let Some(keys) = self.parked.remove(&c) {
                for key in keys {
                    self.schedule(key, now);
                }
            }
        }
    }

    /// The earliest time a queued key is due, if any.
    pub(crate) fn next_due(&mut self) -> Option<Instant> {
        self.drop_stale();
        self.timeline.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Hands out the next key due at `now` whose cluster is ready, marking it active.
    pub(crate) fn pop(&mut self, now: Instant) -> Option<ObjectKey> {
        loop {
            self.drop_stale();
            let Reverse((at, _, _)) = self.timeline.peek()?;
            if *at > now {
                return None;
            }
            let Reverse((_, _, key)) = self.timeline.pop()?;
            self.due.remove(&key);
            if !self.is_ready(&key.cluster) {
                self.parked
                    .entry(key.cluster.clone())
                    .or_default()
                    .insert(key);
                continue;
            }
            self.active.insert(key.clone());
            return Some(key);
        }
    }

    /// Records the end of a reconcile of `key` and schedules what follows; returns the delay
    /// applied when the key is retried after a failure.
    pub(crate) fn finish(
        &mut self,
        key: &ObjectKey,
        outcome: Outcome,
        now: Instant,
    ) -> Option<Duration> {
        self.active.remove(key);
        let mut backoff = None;
        match outcome {
            Outcome::Done => {
                self.failures.remove(key);
            }
            Outcome::RequeueAfter(d) => {
                self.failures.remove(key);
                self.schedule(key.clone(), now + d);
            }
            Outcome::Failed => {
                let n = self.failures.entry(key.clone()).or_insert(0);
                *n = n.saturating_add(1);
                let delay = self.backoff.delay(*n);
                backoff = Some(delay);
                self.schedule(key.clone(), now + delay);
            }
        }
        if let Some(at) = self.deferred.remove(key) {
            // A trigger that came in during the reconcile wins over a backoff: the object
            // changed, so the next attempt should see the change promptly.
            self.schedule(key.clone(), at);
        }
        backoff
    }

    /// Number of keys queued or parked (not counting active ones).
    pub(crate) fn len(&self) -> usize {
        self.due.len() + self.parked.values().map(HashSet::len).sum::<usize>()
    }

    /// Number of keys whose last reconcile failed.
    pub(crate) fn failing(&self) -> usize {
        self.failures.len()
    }

    /// Number of keys being reconciled.
    #[cfg(test)]
    pub(crate) fn active(&self) -> usize {
        self.active.len()
    }

    /// Consecutive failures of a key.
    #[cfg(test)]
    pub(crate) fn failures(&self, key: &ObjectKey) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }

    fn drop_stale(&mut self) {
        while let Some(Reverse((at, _, key))) = self.timeline.peek() {
            if self.due.get(key) == Some(at) {
                break;
            }
            self.timeline.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cluster: &str, name: &str) -> ObjectKey {
        ObjectKey {
            cluster: cluster.into(),
            group: String::new(),
            kind: "ConfigMap".into(),
            namespace: Some("default".into()),
            name: name.into(),
        }
    }

    fn ready_queue(now: Instant) -> WorkQueue {
        let mut q = WorkQueue::new(Backoff::default());
        q.cluster_ready("a", now);
        q.cluster_ready("b", now);
        q
    }

    #[test]
    fn deduplicates_and_keeps_the_earliest_time() {
        let t0 = Instant::now();
        let mut q = ready_queue(t0);
        q.schedule(key("a", "x"), t0 + Duration::from_secs(10));
        q.schedule(key("a", "x"), t0);
        q.schedule(key("a", "x"), t0 + Duration::from_secs(5));
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(t0), Some(key("a", "x")));
        assert_eq!(q.pop(t0 + Duration::from_secs(60)), None);
    }

    #[test]
    fn orders_by_due_time_and_waits_for_it() {
        let t0 = Instant::now();
        let mut q = ready_queue(t0);
        q.schedule(key("a", "late"), t0 + Duration::from_secs(2));
        q.schedule(key("b", "early"), t0 + Duration::from_secs(1));
        assert_eq!(q.pop(t0), None);
        assert_eq!(q.next_due(), Some(t0 + Duration::from_secs(1)));
        assert_eq!(q.pop(t0 + Duration::from_secs(3)), Some(key("b", "early")));
        assert_eq!(q.pop(t0 + Duration::from_secs(3)), Some(key("a", "late")));
    }

    #[test]
    fn an_active_key_is_never_handed_out_twice_and_reruns_after_finishing() {
        let t0 = Instant::now();
        let mut q = ready_queue(t0);
        q.schedule(key("a", "x"), t0);
        assert_eq!(q.pop(t0), Some(key("a", "x")));
        q.schedule(key("a", "x"), t0);
        q.schedule(key("a", "x"), t0);
        assert_eq!(q.pop(t0), None, "still active");
        assert_eq!(q.active(), 1);
        q.finish(&key("a", "x"), Outcome::Done, t0);
        assert_eq!(
            q.pop(t0),
            Some(key("a", "x")),
            "the trigger during the run is kept once"
        );
        q.finish(&key("a", "x"), Outcome::Done, t0);
        assert_eq!(q.pop(t0 + Duration::from_secs(999)), None);
    }

    #[test]
    fn failures_back_off_exponentially_and_reset_on_success() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            factor: 2.0,
        });
        q.cluster_ready("a", t0);
        let k = key("a", "x");
        q.schedule(k.clone(), t0);
        let mut now = t0;
        let mut delays = Vec::new();
        for _ in 0..6 {
            assert_eq!(q.pop(now), Some(k.clone()));
            let d = q.finish(&k, Outcome::Failed, now).expect("delay");
            delays.push(d.as_millis());
            assert_eq!(
                q.pop(now + d - Duration::from_millis(1)),
                None,
                "not before the delay"
            );
            now += d;
        }
        assert_eq!(delays, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(q.failures(&k), 6);
        assert_eq!(q.pop(now), Some(k.clone()));
        q.finish(&k, Outcome::Done, now);
        assert_eq!(q.failures(&k), 0);
    }

    #[test]
    fn requeue_after_runs_later() {
        let t0 = Instant::now();
        let mut q = ready_queue(t0);
        q.schedule(key("a", "x"), t0);
        let k = q.pop(t0).expect("key");
        q.finish(&k, Outcome::RequeueAfter(Duration::from_secs(30)), t0);
        assert_eq!(q.pop(t0 + Duration::from_secs(29)), None);
        assert_eq!(q.pop(t0 + Duration::from_secs(30)), Some(k));
    }

    #[test]
    fn keys_of_an_unready_cluster_are_parked_without_blocking_others() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(Backoff::default());
        q.cluster_ready("a", t0);
        q.schedule(key("down", "x"), t0);
        q.schedule(key("a", "y"), t0);
        assert_eq!(q.pop(t0), Some(key("a", "y")));
        assert_eq!(q.pop(t0), None);
        assert_eq!(q.len(), 1, "parked, not lost");
        q.schedule(key("down", "x"), t0);
        assert_eq!(q.len(), 1, "still one");
        q.cluster_ready("down", t0);
        assert_eq!(q.pop(t0), Some(key("down", "x")));
    }

    #[test]
    fn keys_wait_for_the_clusters_they_depend_on() {
        let t0 = Instant::now();
        let mut q = WorkQueue::new(Backoff::default());
        q.depends_on("source", "target");
        q.cluster_ready("source", t0);
        q.schedule(key("source", "x"), t0);
        assert_eq!(q.pop(t0), None, "target not listed yet");
        q.cluster_ready("target", t0);
        assert_eq!(q.pop(t0), Some(key("source", "x")));
    }

    #[test]
    fn backoff_delay_is_capped() {
        let b = Backoff::default();
        assert_eq!(b.delay(1), Duration::from_millis(500));
        assert_eq!(b.delay(2), Duration::from_secs(1));
        assert_eq!(b.delay(1000), Duration::from_secs(300));
    }
}
