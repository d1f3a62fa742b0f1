//! The Prometheus registry filled with the operator's state at each scrape. Every metric's
//! name, type, labels and help come from the [`catalog`](super::catalog); a test of the served
//! exposition checks that nothing is registered outside it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::{Metric, Registry};

use kubesync::runtime::Metrics;

use super::catalog::{self, Entry};
use crate::compat::controller::CompatCounts;
use crate::operator::Operator;
use crate::shard::{Shards, UnitKind};

/// A counter whose value is read from the operator at each scrape.
///
/// Registered under its full name (`…_total`) and encoded as the Prometheus text format
/// 0.0.4 writes counters: prometheus-client's own `Counter` follows OpenMetrics, whose
/// `# TYPE` line names the family without `_total` — a change of the exposition that
/// scrapers and kubesync's tests would see.
#[derive(Debug, Default)]
struct ScrapedCounter(AtomicU64);

impl ScrapedCounter {
    fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl TypedMetric for ScrapedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ScrapedCounter {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.load(Ordering::Relaxed))
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

fn counter(value: u64) -> ScrapedCounter {
    let c = ScrapedCounter::default();
    c.set(value);
    c
}

fn gauge(value: impl TryInto<i64>) -> Gauge {
    let g = Gauge::default();
    g.set(value.try_into().unwrap_or(i64::MAX));
    g
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CompatLabels {
    tool: String,
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabels {
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CategoryLabels {
    category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectSyncLabels {
    namespace: String,
    objectsync: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceSyncLabels {
    resourcesync: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RemoteLabels {
    remotecluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DestinationLabels {
    namespace: String,
    objectsync: String,
    state: String,
}

/// The operator's state as a Prometheus registry (help texts without their final period:
/// the registry adds it).
async fn registry(operator: &Operator) -> Registry {
    let mut r = Registry::default();
    if let Some(ctx) = operator.context() {
        add_reconciler(&mut r, ctx.metrics());
    }
    if let Some(leading) = operator.leader() {
        add(&mut r, &catalog::LEADER, gauge(u8::from(leading)));
    }
    if operator.leader().is_some() || operator.shards().is_some() {
        let starts = counter(crate::fence::fresh_starts());
        add(&mut r, &catalog::FRESH_STARTS, starts);
    }
    if let (Some(shards), Some(owned)) = (operator.shards(), operator.units_owned()) {
        add_shards(&mut r, shards, owned);
    }
    add_workload(&mut r, operator).await;
    add_object_syncs(&mut r, operator);
    add_resource_syncs(&mut r, operator).await;
    add_remotes(&mut r, operator).await;
    add(&mut r, &catalog::PROPAGATION_LAG, operator.lags().family());
    if let Some(counts) = operator.compat_counts() {
        add_compat(&mut r, counts);
    }
    r
}

/// Registers the controller's counters: reconciles, failures by category (every category,
/// zero when none failed), queue depth, keys in flight and keys failing.
fn add_reconciler(r: &mut Registry, m: &Metrics) {
    add(r, &catalog::RECONCILES, counter(m.reconciles()));
    let failures = Family::<CategoryLabels, ScrapedCounter>::default();
    for category in kubesync::error::CATEGORIES {
        failures
            .get_or_create(&CategoryLabels {
                category: category.into(),
            })
            .set(0);
    }
    for (category, value) in m.failures_by_category() {
        failures
            .get_or_create(&CategoryLabels {
                category: category.into(),
            })
            .set(value);
    }
    add(r, &catalog::RECONCILE_FAILURES, failures);
    add(r, &catalog::QUEUE_DEPTH, gauge(m.queued()));
    add(r, &catalog::IN_FLIGHT, gauge(m.in_flight()));
    add(r, &catalog::KEYS_FAILING, gauge(m.failing()));
}

/// Registers this replica's share of the work: the units it owns by kind, the members and
/// whether the view settled, and the units gained and lost.
fn add_shards(r: &mut Registry, shards: &Shards, owned: BTreeMap<UnitKind, usize>) {
    let units = Family::<KindLabels, Gauge>::default();
    for (kind, count) in owned {
        units
            .get_or_create(&KindLabels {
                kind: kind.label().into(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    add(r, &catalog::SHARD_UNITS, units);
    let (members, settled) = shards
        .view()
        .map_or((0, false), |(view, settled)| (view.len(), settled));
    add(r, &catalog::SHARD_MEMBERS, gauge(members));
    add(r, &catalog::SHARD_SETTLED, gauge(u8::from(settled)));
    let moves = Family::<DirectionLabels, ScrapedCounter>::default();
    let (gained, lost) = shards.moves();
    for (direction, value) in [("gained", gained), ("lost", lost)] {
        moves
            .get_or_create(&DirectionLabels {
                direction: direction.into(),
            })
            .set(value);
    }
    add(r, &catalog::SHARD_MOVES, moves);
}

/// Registers the writes by component, the ObjectSync watches and copies held, and the
/// ResourceSync engines running.
async fn add_workload(r: &mut Registry, operator: &Operator) {
    let writes = Family::<ComponentLabels, ScrapedCounter>::default();
    for (component, value) in operator.writes_by_component().await {
        writes
            .get_or_create(&ComponentLabels {
                component: component.into(),
            })
            .set(value);
    }
    add(r, &catalog::WRITES, writes);
    add(
        r,
        &catalog::OBJECT_SYNC_WATCHES,
        gauge(operator.fan_out_watches()),
    );
    add(
        r,
        &catalog::OBJECT_SYNC_COPIES_HELD,
        gauge(operator.copies_held()),
    );
    add(
        r,
        &catalog::RESOURCE_SYNC_ENGINES,
        gauge(operator.running().await.len()),
    );
}

/// Registers each ObjectSync's readiness, destinations by state, stale destinations, oldest
/// staleness and drifts.
fn add_object_syncs(r: &mut Registry, operator: &Operator) {
    let ready = Family::<ObjectSyncLabels, Gauge>::default();
    let destinations = Family::<DestinationLabels, Gauge>::default();
    let stale = Family::<ObjectSyncLabels, Gauge>::default();
    let oldest = Family::<ObjectSyncLabels, Gauge<f64, AtomicU64>>::default();
    let drifts = Family::<ObjectSyncLabels, ScrapedCounter>::default();
    for ((namespace, objectsync), g) in operator.object_sync_gauges() {
        let labels = ObjectSyncLabels {
            namespace: namespace.clone(),
            objectsync: objectsync.clone(),
        };
        ready
            .get_or_create(&labels)
            .set(i64::from(u8::from(g.ready)));
        stale.get_or_create(&labels).set(i64::from(g.stale));
        oldest
            .get_or_create(&labels)
            .set(g.oldest_stale.as_secs_f64());
        drifts.get_or_create(&labels).set(g.drifts);
        for (state, count) in &g.destinations {
            destinations
                .get_or_create(&DestinationLabels {
                    namespace: namespace.clone(),
                    objectsync: objectsync.clone(),
                    state: state.as_str().into(),
                })
                .set(i64::from(*count));
        }
    }
    add(r, &catalog::OBJECT_SYNC_READY, ready);
    add(r, &catalog::OBJECT_SYNC_DESTINATIONS, destinations);
    add(r, &catalog::OBJECT_SYNC_STALE, stale);
    add(r, &catalog::OBJECT_SYNC_OLDEST_STALE, oldest);
    add(r, &catalog::OBJECT_SYNC_DRIFTS, drifts);
}

/// Registers each ResourceSync's objects, stale objects, oldest staleness and drifts.
async fn add_resource_syncs(r: &mut Registry, operator: &Operator) {
    let objects = Family::<ResourceSyncLabels, Gauge>::default();
    let stale_objects = Family::<ResourceSyncLabels, Gauge>::default();
    let oldest_stale_object = Family::<ResourceSyncLabels, Gauge<f64, AtomicU64>>::default();
    let local_drifts = Family::<ResourceSyncLabels, ScrapedCounter>::default();
    for (name, counts) in operator.resource_sync_counts().await {
        let labels = ResourceSyncLabels { resourcesync: name };
        objects
            .get_or_create(&labels)
            .set(i64::from(counts.objects));
        stale_objects
            .get_or_create(&labels)
            .set(i64::from(counts.objects.saturating_sub(counts.in_sync)));
        oldest_stale_object
            .get_or_create(&labels)
            .set(counts.oldest_stale.as_secs_f64());
        local_drifts.get_or_create(&labels).set(counts.drifts);
    }
    add(r, &catalog::RESOURCE_SYNC_OBJECTS, objects);
    add(r, &catalog::RESOURCE_SYNC_STALE, stale_objects);
    add(r, &catalog::RESOURCE_SYNC_OLDEST_STALE, oldest_stale_object);
    add(r, &catalog::RESOURCE_SYNC_DRIFTS, local_drifts);
}

/// Registers each RemoteCluster's reachability, last contact (seconds since the epoch, 0
/// before any) and watch restarts.
async fn add_remotes(r: &mut Registry, operator: &Operator) {
    let reachable = Family::<RemoteLabels, Gauge>::default();
    let contact = Family::<RemoteLabels, Gauge<f64, AtomicU64>>::default();
    let restarts = Family::<RemoteLabels, ScrapedCounter>::default();
    for h in operator.remote_cluster_health().await {
        let labels = RemoteLabels {
            remotecluster: h.name,
        };
        reachable
            .get_or_create(&labels)
            .set(i64::from(u8::from(h.reachable)));
        let at = h
            .last_contact
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        contact.get_or_create(&labels).set(at);
        restarts.get_or_create(&labels).set(h.watch_restarts);
    }
    add(r, &catalog::REMOTE_REACHABLE, reachable);
    add(r, &catalog::REMOTE_LAST_CONTACT, contact);
    add(r, &catalog::REMOTE_WATCH_RESTARTS, restarts);
}

/// Registers the annotation-declared syncs by tool and direction, their destinations by
/// state, and the pulls not pulled.
fn add_compat(r: &mut Registry, counts: CompatCounts) {
    let syncs = Family::<CompatLabels, Gauge>::default();
    for ((tool, direction), n) in &counts.syncs {
        syncs
            .get_or_create(&CompatLabels {
                tool: tool.to_string(),
                direction: (*direction).into(),
            })
            .set(i64::from(*n));
    }
    add(r, &catalog::COMPAT_SYNCS, syncs);
    let destinations = Family::<StateLabels, Gauge>::default();
    for (state, n) in &counts.destinations {
        destinations
            .get_or_create(&StateLabels {
                state: state.clone(),
            })
            .set(i64::from(*n));
    }
    add(r, &catalog::COMPAT_DESTINATIONS, destinations);
    add(
        r,
        &catalog::COMPAT_PULLS_NOT_PULLED,
        gauge(counts.mirrors_not_filled),
    );
}

/// Registers `metric` under its catalog entry's name and help.
fn add(r: &mut Registry, entry: &Entry, metric: impl Metric) {
    r.register(entry.name, entry.help, metric);
}

/// The Prometheus text exposition of the operator's state.
pub async fn metrics(operator: &Operator) -> Result<String, std::fmt::Error> {
    let registry = registry(operator).await;
    let mut out = String::new();
    prometheus_client::encoding::text::encode_registry(&mut out, &registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_keep_the_prometheus_text_type_line() {
        let mut r = Registry::default();
        r.register("x_total", "An x", counter(3));
        let labelled = Family::<ObjectSyncLabels, Gauge>::default();
        labelled
            .get_or_create(&ObjectSyncLabels {
                namespace: "a\"b\\c\nd".into(),
                objectsync: "s".into(),
            })
            .set(1);
        r.register("y", "A y", labelled);
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &r).expect("encode");
        assert_eq!(
            out,
            "# HELP x_total An x.\n# TYPE x_total counter\nx_total 3\n\
             # HELP y A y.\n# TYPE y gauge\ny{namespace=\"a\\\"b\\\\c\\nd\",objectsync=\"s\"} 1\n"
        );
    }
}
