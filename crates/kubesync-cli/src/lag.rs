//! How far copies lag behind their sources: the propagation-lag histogram, and which copies are behind their
//! source since when. The bookkeeping is pure (times are parameters); `/metrics` reads it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kubesync::syncers::fan_out::{DestinationRef, Outcome};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use crate::crd::CopyState;
use crate::remote::display_name;

/// Upper bounds of the propagation-lag buckets, in seconds: 5 ms to 10 minutes.
pub const LAG_BUCKETS: [f64; 16] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// Labels of the propagation-lag histogram: bounded by the sync kinds and the clusters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LagLabels {
    /// `ObjectSync`, `ResourceSync` or `Annotations` (a push an annotation declares).
    pub sync: String,
    /// The destination cluster: `local`, or a RemoteCluster's name.
    pub cluster: String,
}

fn lag_histogram() -> Histogram {
    Histogram::new(LAG_BUCKETS)
}

/// The propagation lag of every copy written with a change: from the change's first sight
/// by a watch to the write. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct Lags(Family<LagLabels, Histogram, fn() -> Histogram>);

impl Default for Lags {
    fn default() -> Self {
        Self(Family::new_with_constructor(lag_histogram))
    }
}

impl Lags {
    /// Records that a copy of a `sync` reached `cluster` (runtime name) `lag` after its change.
    pub fn observe(&self, sync: &str, cluster: &str, lag: Duration) {
        self.0
            .get_or_create(&LagLabels {
                sync: sync.into(),
                cluster: display_name(cluster).into(),
            })
            .observe(lag.as_secs_f64());
    }

    /// The histogram family, to register at a scrape.
    pub fn family(&self) -> Family<LagLabels, Histogram, fn() -> Histogram> {
        self.0.clone()
    }
}

/// The destinations of `outcome` that are behind their source (see [`CopyState::is_behind`]),
/// each since when: the earliest of `before` (what the previous reconcile found), the time the
/// fan-out knows (the first sight of the change), and `now`.
pub fn behind(
    before: &HashMap<DestinationRef, Instant>,
    outcome: &Outcome,
    now: Instant,
) -> HashMap<DestinationRef, Instant> {
    outcome
        .destinations
        .iter()
        .filter(|d| CopyState::from(d.state).is_behind())
        .map(|d| {
            let key = d.at();
            let since = [before.get(&key).copied(), d.behind_since, Some(now)]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now);
            (key, since)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use kubesync::syncers::fan_out::{DestinationRef, DestinationState, DestinationStatus};

    use super::*;

    fn status(ns: &str, state: DestinationState, since: Option<Instant>) -> DestinationStatus {
        let mut st = DestinationStatus::new(
            &DestinationRef::new("local", ns, "c"),
            state,
            String::new(),
            "",
        );
        st.behind_since = since;
        st
    }

    #[test]
    fn copies_stay_behind_since_their_first_sight() {
        let t0 = Instant::now();
        let (t1, t2) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        let outcome = Outcome {
            destinations: vec![
                status("a", DestinationState::Pending, Some(t1)),
                status("b", DestinationState::Error, None),
                status("c", DestinationState::Synced, None),
                status("d", DestinationState::Conflict, None),
                status("e", DestinationState::OutOfSync, Some(t1)),
            ],
            ..Default::default()
        };
        let first = behind(&HashMap::new(), &outcome, t2);
        let key = |ns: &str| DestinationRef::new("local", ns, "c");
        assert_eq!(first.len(), 3, "Synced and Conflict are not behind");
        assert_eq!(first[&key("a")], t1, "since the change was seen");
        assert_eq!(first[&key("b")], t2, "unknown: since now");
        // Later, the error persists: it stays behind since its first sight.
        let later = behind(&first, &outcome, t2 + Duration::from_secs(5));
        assert_eq!(later[&key("b")], t2);
        assert!(later.contains_key(&key("e")));
    }

    #[test]
    fn lags_are_a_histogram_per_sync_and_cluster() {
        let lags = Lags::default();
        lags.observe("ObjectSync", "local", Duration::from_millis(30));
        lags.observe("ObjectSync", "local", Duration::from_secs(3));
        let mut r = prometheus_client::registry::Registry::default();
        r.register("lag_seconds", "Lag", lags.family());
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &r).expect("encode");
        assert!(out.contains("# TYPE lag_seconds histogram"), "{out}");
        assert!(
            out.contains("lag_seconds_count{sync=\"ObjectSync\",cluster=\"local\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("lag_seconds_bucket{le=\"0.05\",sync=\"ObjectSync\",cluster=\"local\"} 1"),
            "{out}"
        );
    }
}
