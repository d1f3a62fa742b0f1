//! Pull against push: one Secret on a hub copied to every spoke of a fleet (`make bench-pull`).
//!
//! Eleven local control planes, started at once: a hub and [`SPOKES`] spokes, each spoke with
//! [`NAMESPACES`] namespaces labelled `bench=pull`; on the hub, the source `src/ca` (a Secret
//! of about 4 KiB). The same [`SPOKES`] × [`NAMESPACES`] copies are made two ways:
//!
//! - **push**: one fan-out whose own cluster is the hub (`FanOut::new("hub")`), in one
//!   controller that has the hub and every spoke registered; one declaration, anchored on a
//!   ConfigMap in the hub's control namespace, with one destination per spoke;
//! - **pull**: one fan-out per spoke (`FanOut::new("spoke-<i>")`), each in its own controller
//!   with its spoke and the hub registered; one declaration each, anchored in that spoke's
//!   control namespace, whose source is read from the hub (`SourceRef::in_cluster("hub")`) and
//!   whose destination is its own cluster.
//!
//! For each: the time until every copy carries the source's resourceVersion, cold (the
//! controllers just started: the declarations' first reconciles start and list the engines'
//! watches); the time for an update of the source on the hub to reach every copy; the
//! cleanup (every declaration deleted → every copy removed). Each is timed as in `fan_out.rs`:
//! until the reconcile whose report shows every destination `Synced` at the expected source
//! version (for pull, the last of the spokes' reconciles); the copies are then checked through
//! one watch per spoke, outside the timed window. Before each timed window, [`SETTLE`].
//!
//! And the load on the hub: the watches open on it while the copies are in sync (the
//! hub's `apiserver_longrunning_requests` over its value before the controllers started;
//! where the apiserver serves streaming lists, as v1.37's does, these watches also carry the
//! initial state), the LIST and GET requests it served of the engines' kinds (Secrets,
//! Namespaces, ConfigMaps; from its request metrics, controllers started to update reached:
//! none with streaming lists) — and the engines' own figures: `FanOut::watch_count` (every
//! cluster, summed over the fan-outs) and their writes (`FanOut::write_counter`), none of
//! which may go to the hub.
//!
//! [`ROUNDS`] rounds, push and pull alternating which goes first; medians, with the range.
//! `KUBESYNC_BENCH_QUICK=1` runs it with [`QUICK_SPOKES`] spokes × [`QUICK_NAMESPACES`]
//! namespaces and one round.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[allow(dead_code)]
mod common;
use common::Connect;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kubesync::syncers::fan_out::rules::{CopyRules, NamespaceRule, OnConflict};
use kubesync::syncers::fan_out::{Destination, FanOut, FanOutSpec, SourceRef};
use kubesync::syncers::fan_out::{DestinationState, Outcome};
use kubesync::{Cluster, Controller};
use kubesync_testenv::TestEnv;
use tokio::sync::{mpsc, oneshot};

/// Spokes, and destination namespaces in each.
const SPOKES: usize = 10;
const NAMESPACES: usize = 100;
/// The same with `KUBESYNC_BENCH_QUICK` set.
const QUICK_SPOKES: usize = 2;
const QUICK_NAMESPACES: usize = 10;
/// Rounds (push and pull each once per round): one round writes and deletes every copy
/// twice over eleven control planes on a small machine.
const ROUNDS: usize = 3;

/// Copy writes in flight per reconcile (the fan-out's default), and concurrent setup writes.
const CONCURRENCY: usize = 16;
/// Quiet time before each timed window: the apiservers finish what the previous step left
/// (its deletes, a watch's first list) before the clock starts.
const SETTLE: Duration = Duration::from_millis(300);

/// Where the source lives on the hub, and its name.
const SOURCE_NS: &str = "src";
const SOURCE: &str = "ca";
/// The namespace of the declarations' anchors, in every cluster that runs a controller.
const CONTROL: &str = "bench-control";
/// The label value (`bench=<LABEL>`) of the destination namespaces.
const LABEL: &str = "pull";
/// The hub's cluster name, in every controller.
const HUB: &str = "hub";
/// The kinds the engines read: the hub's LIST and GET requests of these are counted.
const ENGINE_KINDS: [&str; 3] = ["secrets", "namespaces", "configmaps"];

fn spoke_name(i: usize) -> String {
    format!("spoke-{}", i + 1)
}

/// The hub and the spokes (`spokes[i]` is the cluster [`spoke_name`]`(i)`).
struct Fleet {
    hub: TestEnv,
    spokes: Vec<TestEnv>,
    /// Destination namespaces per spoke.
    n: usize,
}

impl Fleet {
    /// Starts the hub and `spokes` spokes at once; creates the control namespaces, the source
    /// namespace on the hub, and `n` namespaces labelled `bench=<LABEL>` in every spoke.
    async fn start(spokes: usize, n: usize) -> anyhow::Result<Self> {
        let names: Vec<String> = std::iter::once(HUB.to_string())
            .chain((0..spokes).map(spoke_name))
            .collect();
        let t = Instant::now();
        let started = futures::future::join_all(names.iter().map(|name| {
            TestEnv::builder()
                .name(format!("bench-{name}"))
                // Eleven control planes starting at once on a small machine.
                .startup_timeout(Duration::from_secs(300))
                .start()
        }))
        .await;
        let mut envs = started.into_iter().collect::<Result<Vec<_>, _>>()?;
        println!(
            "started {} control planes (1 hub, {spokes} spokes) in {:.1} s",
            envs.len(),
            t.elapsed().as_secs_f64()
        );
        let hub = envs.remove(0);
        let fleet = Fleet {
            hub,
            spokes: envs,
            n,
        };
        create_namespaces(
            &fleet.hub.kubesync_client()?,
            &[CONTROL.to_string(), SOURCE_NS.to_string()],
            None,
        )
        .await?;
        let destinations: Vec<String> = (0..n).map(|i| format!("b-{i}")).collect();
        futures::future::try_join_all(fleet.spokes.iter().map(|spoke| {
            let destinations = &destinations;
            async move {
                let client = spoke.kubesync_client()?;
                create_namespaces(&client, &[CONTROL.to_string()], None).await?;
                create_namespaces(&client, destinations, Some(LABEL)).await
            }
        }))
        .await?;
        Ok(fleet)
    }

    fn spokes(&self) -> impl Iterator<Item = (String, &TestEnv)> {
        self.spokes
            .iter()
            .enumerate()
            .map(|(i, env)| (spoke_name(i), env))
    }
}

/// Creates the namespaces `names` (labelled `bench=<label>` if given), [`CONCURRENCY`] at once.
async fn create_namespaces(
    client: &kube::Client,
    names: &[String],
    label: Option<&str>,
) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(names)
        .map(|name| {
            let api = api.clone();
            async move {
                let labels = match label {
                    Some(l) => serde_json::json!({"bench": l}),
                    None => serde_json::json!({}),
                };
                let ns: Namespace = serde_json::from_value(
                    serde_json::json!({"metadata": {"name": name, "labels": labels}}),
                )?;
                api.create(&PostParams::default(), &ns).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Writes the source `src/ca` on the hub with content `version` (about 4 KiB, as a CA bundle
/// would be); returns its resourceVersion.
async fn write_source(hub: &TestEnv, version: &str) -> anyhow::Result<String> {
    let api: Api<Secret> = Api::namespaced(hub.kubesync_client()?, SOURCE_NS);
    let bundle = format!(
        "-----BEGIN CERTIFICATE-----\n{version}\n{}\n-----END CERTIFICATE-----\n",
        "MIIBkTCB+wIJAKHHIG...".repeat(200)
    );
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SOURCE}, "type": "Opaque",
        "stringData": {"ca.crt": bundle}
    });
    let written = api
        .patch(
            SOURCE,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(object),
        )
        .await?;
    Ok(written.metadata.resource_version.unwrap_or_default())
}

/// Waits, through one watch of `env`, until `want` copies made for declaration `uid` exist,
/// carrying the source's resourceVersion `version`.
async fn copies(env: &TestEnv, uid: &str, version: &str, want: usize) -> anyhow::Result<()> {
    let all: Api<Secret> = Api::all(env.kubesync_client()?);
    common::wait_for(
        all,
        common::cached_lists().labels(&format!("kubesync.io/managed-by={uid}")),
        want,
        |s: &Secret| {
            s.annotations()
                .get("kubesync.io/source-resource-version")
                .is_some_and(|v| v == version)
        },
    )
    .await
}

/// Copies of declaration `uid` left in `env`.
async fn left(env: &TestEnv, uid: &str) -> anyhow::Result<usize> {
    Ok(Api::<Secret>::all(env.kubesync_client()?)
        .list_metadata(&ListParams::default().labels(&format!("kubesync.io/managed-by={uid}")))
        .await?
        .items
        .len())
}

/// A declaration in one controller: (its controller's own cluster, its name).
type Key = (String, String);

/// A reconcile's report: (declaration, when the reconcile completed, report).
type Reported = (Key, Instant, Outcome);

/// Reports of every engine's reconciles (one channel for all controllers of a side), as they
/// complete.
struct Reports(mpsc::UnboundedReceiver<Reported>);

impl Reports {
    /// When the reconcile completed that made the last of `want` — each declaration with its
    /// number of destinations — show all of them `Synced` at source version `version`.
    async fn synced(&mut self, want: &[(Key, usize)], version: &str) -> anyhow::Result<Instant> {
        let mut waiting: HashMap<&Key, usize> = want.iter().map(|(k, n)| (k, *n)).collect();
        while let Some((key, at, report)) = self.0.recv().await {
            let synced = report
                .destinations
                .iter()
                .filter(|d| {
                    d.state == DestinationState::Synced && d.source_resource_version == version
                })
                .count();
            if report.ready && waiting.get(&key).is_some_and(|n| synced >= *n) {
                waiting.remove(&key);
                if waiting.is_empty() {
                    return Ok(at);
                }
            }
        }
        anyhow::bail!("the engines stopped before {waiting:?} were synced")
    }

    /// Waits for a report of each of `keys`.
    async fn seen(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        let mut waiting: HashSet<&Key> = keys.iter().collect();
        while let Some((key, ..)) = self.0.recv().await {
            waiting.remove(&key);
            if waiting.is_empty() {
                return Ok(());
            }
        }
        anyhow::bail!("the controllers stopped before they reconciled {waiting:?}")
    }

    /// Waits until each of `keys` has had a report with no copies left.
    async fn cleaned(&mut self, keys: &[Key]) -> anyhow::Result<()> {
        let mut waiting: HashSet<&Key> = keys.iter().collect();
        while let Some((key, _, report)) = self.0.recv().await {
            if report.ready && !report.source_found && report.remaining_copies == 0 {
                waiting.remove(&key);
            }
            if waiting.is_empty() {
                return Ok(());
            }
        }
        anyhow::bail!("the engines stopped before the copies of {waiting:?} were deleted")
    }
}

/// A controller running one fan-out with one declaration, anchored on ConfigMaps in the
/// control namespace of its own cluster, as in `fan_out.rs` ([`common::run_declarations`]: the
/// uid of `<name>-uid` owns the copies; the ConfigMap `<name>` itself declares it). Every
/// reconcile's report goes to the side's [`Reports`].
struct Engine {
    /// Its own cluster's name.
    local: String,
    /// The declaration's name.
    name: String,
    /// The uid owning its copies.
    uid: String,
    fan_out: Arc<FanOut>,
    anchor: Api<ConfigMap>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), kubesync::Error>>,
}

impl Engine {
    /// Creates the uid anchor of declaration `name` (not declared yet) in `local`'s control
    /// namespace and starts a controller with the clusters `clusters` (`local` among them).
    /// The caller waits for the report of `<name>-uid` to know that it runs.
    async fn start(
        local: &str,
        clusters: Vec<Cluster>,
        name: &str,
        spec: FanOutSpec,
        reports: mpsc::UnboundedSender<Reported>,
    ) -> anyhow::Result<Self> {
        let local_client = clusters
            .iter()
            .find(|c| c.name() == local)
            .map(|c| c.client().clone())
            .ok_or_else(|| anyhow::anyhow!("{local} is not among the clusters"))?;
        let anchor: Api<ConfigMap> = Api::namespaced(local_client, CONTROL);
        let uid = common::create_anchor(&anchor, &common::uid_anchor(name)).await?;
        let fan_out = Arc::new(FanOut::new(local).concurrency(CONCURRENCY));
        let mut controller = Controller::new();
        for cluster in clusters {
            controller = controller.cluster(cluster);
        }
        let (stop, stopped) = oneshot::channel::<()>();
        let here = local.to_string();
        let task = common::run_declarations(
            controller,
            fan_out.clone(),
            local,
            CONTROL,
            HashMap::from([(name.to_string(), (spec, uid.clone()))]),
            move |key, _started, outcome| {
                let _ = reports.send(((here.clone(), key.name.clone()), Instant::now(), outcome));
            },
            async {
                let _ = stopped.await;
            },
        )?;
        Ok(Self {
            local: local.to_string(),
            name: name.to_string(),
            uid,
            fan_out,
            anchor,
            stop,
            task,
        })
    }

    fn key(&self) -> Key {
        (self.local.clone(), self.name.clone())
    }

    /// Declares it (creates its ConfigMap).
    async fn declare(&self) -> anyhow::Result<()> {
        common::create_anchor(&self.anchor, &self.name).await?;
        Ok(())
    }

    /// Deletes the declaration (its ConfigMap).
    async fn retract(&self) -> anyhow::Result<()> {
        self.anchor
            .delete(&self.name, &DeleteParams::default())
            .await?;
        Ok(())
    }

    /// Stops the controller; returns the fan-out's copy writes: (all, to the hub).
    async fn stop(self) -> anyhow::Result<(u64, u64)> {
        let _ = self.stop.send(());
        self.task.await??;
        let writes = self.fan_out.write_counter();
        Ok((writes.writes(), writes.writes_to(HUB)))
    }
}

/// A declaration copying the hub's `src/ca` (read from `source_cluster`, `None`: the
/// fan-out's own) into every namespace labelled `bench=<LABEL>` of each of `clusters`
/// (`None`: the fan-out's own).
fn spec(source_cluster: Option<&str>, clusters: Vec<Option<String>>) -> FanOutSpec {
    let source = SourceRef::one(ApiResource::erase::<Secret>(&()), SOURCE_NS, SOURCE);
    let source = match source_cluster {
        Some(c) => source.in_cluster(c),
        None => source,
    };
    FanOutSpec {
        source,
        destinations: clusters
            .into_iter()
            .map(|cluster| Destination {
                cluster,
                namespaces: NamespaceRule {
                    namespace: Some("*".into()),
                    namespace_selector: Some(kube::core::Selector::from_iter([(
                        "bench".to_string(),
                        LABEL.to_string(),
                    )])),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect(),
        on_conflict: OnConflict::Skip,
        rules: CopyRules::default(),
        consent: None,
        deletion_policy: Default::default(),
        mode: Default::default(),
        update_policy: Default::default(),
        adoptable: None,
        acting_as: None,
        acting_as_in: Default::default(),
        take_over: Vec::new(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// One fan-out on the hub, writing to every spoke.
    Push,
    /// One fan-out per spoke, reading the source from the hub.
    Pull,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Push => "push",
            Side::Pull => "pull",
        }
    }
}

/// Starts the controllers of `side` for declaration `name` (not declared yet); returns once
/// every one runs.
async fn start_side(
    fleet: &Fleet,
    side: Side,
    name: &str,
    tx: &mpsc::UnboundedSender<Reported>,
) -> anyhow::Result<Vec<Engine>> {
    let hub = || -> anyhow::Result<Cluster> { Ok(Cluster::new(HUB, fleet.hub.kubesync_client()?)) };
    let engines = match side {
        Side::Push => {
            let mut clusters = vec![hub()?];
            for (spoke, env) in fleet.spokes() {
                clusters.push(Cluster::new(spoke, env.kubesync_client()?));
            }
            let destinations = fleet.spokes().map(|(spoke, _)| Some(spoke)).collect();
            vec![Engine::start(HUB, clusters, name, spec(None, destinations), tx.clone()).await?]
        }
        Side::Pull => {
            futures::future::try_join_all(fleet.spokes().map(|(spoke, env)| async move {
                let clusters = vec![Cluster::new(spoke.clone(), env.kubesync_client()?), hub()?];
                Engine::start(
                    &spoke,
                    clusters,
                    name,
                    spec(Some(HUB), vec![None]),
                    tx.clone(),
                )
                .await
            }))
            .await?
        }
    };
    Ok(engines)
}

/// Open watches on an apiserver, by resource (its `apiserver_longrunning_requests` gauge).
async fn open_watches(client: &kube::Client) -> anyhow::Result<BTreeMap<String, i64>> {
    let mut open = BTreeMap::new();
    for (name, labels, value) in
        common::apiserver_samples(client, "apiserver_longrunning_requests").await?
    {
        if !name.is_empty() || labels.get("verb").map(String::as_str) != Some("WATCH") {
            continue;
        }
        let resource = labels.get("resource").cloned().unwrap_or_default();
        *open.entry(resource).or_default() += value as i64;
    }
    Ok(open)
}

/// One side's round.
struct Run {
    /// Cold: declared → every copy at the source's version.
    cold: Duration,
    /// Source updated on the hub → every copy at its new version.
    update: Duration,
    /// Declarations deleted → every copy removed.
    cleanup: Duration,
    /// Watches the engines opened on the hub, by resource, while in sync.
    hub_watches: BTreeMap<String, i64>,
    /// LIST and GET requests of the engines' kinds the hub served, controllers started to
    /// update reached (none where the watches fetch their initial state by streaming lists).
    hub_reads: u64,
    /// `FanOut::watch_count`, summed over the side's fan-outs, while in sync.
    engine_watches: usize,
    /// The fan-outs' copy writes in the round (creates, updates, deletes), and those to the
    /// hub.
    writes: u64,
    hub_writes: u64,
}

async fn side_round(fleet: &Fleet, side: Side, round: usize) -> anyhow::Result<Run> {
    let name = format!("{}-{round}", side.name());
    let version = write_source(&fleet.hub, &format!("{name}-a")).await?;
    let hub_client = fleet.hub.kubesync_client()?;
    let baseline = open_watches(&hub_client).await?;
    let requests = common::ServerWrites::start(vec![hub_client.clone()], "secrets").await?;

    let (tx, rx) = mpsc::unbounded_channel();
    let mut reports = Reports(rx);
    let engines = start_side(fleet, side, &name, &tx).await?;
    drop(tx);
    let anchors: Vec<Key> = engines
        .iter()
        .map(|e| (e.local.clone(), common::uid_anchor(&name)))
        .collect();
    reports.seen(&anchors).await?;
    let keys: Vec<Key> = engines.iter().map(Engine::key).collect();
    let want: Vec<(Key, usize)> = match side {
        Side::Push => vec![(keys[0].clone(), fleet.spokes.len() * fleet.n)],
        Side::Pull => keys.iter().map(|k| (k.clone(), fleet.n)).collect(),
    };
    // The copies of each spoke, and the uid owning them.
    let owners: Vec<(&TestEnv, &str)> = match side {
        Side::Push => fleet
            .spokes
            .iter()
            .map(|s| (s, engines[0].uid.as_str()))
            .collect(),
        Side::Pull => fleet
            .spokes
            .iter()
            .zip(&engines)
            .map(|(s, e)| (s, e.uid.as_str()))
            .collect(),
    };
    let check = |version: String| {
        let owners = &owners;
        async move {
            futures::future::try_join_all(
                owners
                    .iter()
                    .map(|(env, uid)| copies(env, uid, &version, fleet.n)),
            )
            .await
        }
    };

    // Cold: the controllers run; the declarations' first reconciles start their watches.
    tokio::time::sleep(SETTLE).await;
    let t = Instant::now();
    futures::future::try_join_all(engines.iter().map(Engine::declare)).await?;
    let cold = reports.synced(&want, &version).await? - t;
    check(version).await?;
    // Every watch is open by now (the watch of unrelated Secrets is not waited for).
    let engine_watches = engines.iter().map(|e| e.fan_out.watch_count()).sum();
    let now_open = open_watches(&hub_client).await?;
    let hub_watches: BTreeMap<String, i64> = now_open
        .iter()
        .map(|(r, n)| (r.clone(), n - baseline.get(r).copied().unwrap_or(0)))
        .filter(|(_, n)| *n != 0)
        .collect();

    // An update of the source on the hub.
    tokio::time::sleep(SETTLE).await;
    let t = Instant::now();
    let version = write_source(&fleet.hub, &format!("{name}-b")).await?;
    let update = reports.synced(&want, &version).await? - t;
    let served = requests.all_since_start().await?;
    let count = |verb: &str| {
        served
            .iter()
            .filter(|((v, resource, _), _)| v == verb && ENGINE_KINDS.contains(&resource.as_str()))
            .map(|(_, (n, _))| *n as u64)
            .sum::<u64>()
    };
    let hub_reads = count("LIST") + count("GET");
    if std::env::var_os("BENCH_TRACE").is_some() {
        eprintln!("  {name}: requests the hub served (controllers started → update reached):");
        for ((verb, resource, sub), (n, _)) in &served {
            eprintln!("    {verb:<7} {resource}{sub}: {n}");
        }
    }
    check(version).await?;

    // Cleanup: every declaration deleted; the engines remove every copy.
    tokio::time::sleep(SETTLE).await;
    let t = Instant::now();
    futures::future::try_join_all(engines.iter().map(Engine::retract)).await?;
    reports.cleaned(&keys).await?;
    let cleanup = t.elapsed();
    for (env, uid) in &owners {
        let n = left(env, uid).await?;
        anyhow::ensure!(n == 0, "{n} copies of {name} left in {}", env.name());
    }

    let (mut writes, mut hub_writes) = (0, 0);
    for engine in engines {
        let (w, h) = engine.stop().await?;
        writes += w;
        hub_writes += h;
    }
    Ok(Run {
        cold,
        update,
        cleanup,
        hub_watches,
        hub_reads,
        engine_watches,
        writes,
        hub_writes,
    })
}

fn median<T: Copy + Ord>(values: &[T]) -> T {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// Median seconds, with the range when there are several runs.
fn secs(runs: &[Run], f: fn(&Run) -> Duration) -> String {
    let v: Vec<Duration> = runs.iter().map(f).collect();
    let (lo, hi) = (
        v.iter().min().copied().unwrap_or_default(),
        v.iter().max().copied().unwrap_or_default(),
    );
    if v.len() > 1 {
        format!(
            "{:.2} s ({:.2}–{:.2})",
            median(&v).as_secs_f64(),
            lo.as_secs_f64(),
            hi.as_secs_f64()
        )
    } else {
        format!("{:.2} s", median(&v).as_secs_f64())
    }
}

/// Median count, with the range when the runs differ.
fn count(runs: &[Run], f: fn(&Run) -> u64) -> String {
    let v: Vec<u64> = runs.iter().map(f).collect();
    let (lo, hi) = (
        v.iter().min().copied().unwrap_or_default(),
        v.iter().max().copied().unwrap_or_default(),
    );
    if lo == hi {
        format!("{}", median(&v))
    } else {
        format!("{} ({lo}–{hi})", median(&v))
    }
}

/// The hub's open watches of the median round (by their total), by resource.
fn watches(runs: &[Run]) -> String {
    let mut sorted: Vec<&Run> = runs.iter().collect();
    sorted.sort_by_key(|r| r.hub_watches.values().sum::<i64>());
    let r = sorted[sorted.len() / 2];
    format!(
        "{} ({})",
        r.hub_watches.values().sum::<i64>(),
        r.hub_watches
            .iter()
            .map(|(resource, n)| format!("{resource} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn ratio(pull: &[Run], push: &[Run], f: fn(&Run) -> Duration) -> String {
    let m = |runs: &[Run]| median(&runs.iter().map(f).collect::<Vec<_>>()).as_secs_f64();
    format!("{:.2}", m(pull) / m(push))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::trace_if_asked();
    let (spokes, n, rounds) = if common::quick() {
        (QUICK_SPOKES, QUICK_NAMESPACES, 1)
    } else {
        (SPOKES, NAMESPACES, ROUNDS)
    };
    println!(
        "kubesync pull against push: hub → {spokes} spokes × {n} namespaces (concurrency {CONCURRENCY})\n"
    );
    let fleet = Fleet::start(spokes, n).await?;
    let mut push = Vec::new();
    let mut pull = Vec::new();
    for round in 0..rounds {
        // Alternate which side goes first; every run deletes its copies again.
        let order = if round % 2 == 0 {
            [Side::Push, Side::Pull]
        } else {
            [Side::Pull, Side::Push]
        };
        for side in order {
            let run = side_round(&fleet, side, round).await?;
            match side {
                Side::Push => push.push(run),
                Side::Pull => pull.push(run),
            }
        }
    }

    let copies = spokes * n;
    println!(
        "\nhub → {spokes} spokes × {n} namespaces ({copies} copies of one Secret of about 4 KiB; median of {rounds} round{}{}):",
        if rounds == 1 { "" } else { "s" },
        if rounds == 1 {
            ""
        } else {
            ", range in brackets"
        },
    );
    println!(
        "  push: 1 fan-out on the hub, 1 declaration with {spokes} destinations; pull: {spokes} fan-outs, 1 per spoke, source in the hub"
    );
    let rows: Vec<(&str, String, String, String)> = vec![
        (
            "all copies, cold",
            secs(&push, |r| r.cold),
            secs(&pull, |r| r.cold),
            ratio(&pull, &push, |r| r.cold),
        ),
        (
            "update reaches all copies",
            secs(&push, |r| r.update),
            secs(&pull, |r| r.update),
            ratio(&pull, &push, |r| r.update),
        ),
        (
            "cleanup",
            secs(&push, |r| r.cleanup),
            secs(&pull, |r| r.cleanup),
            ratio(&pull, &push, |r| r.cleanup),
        ),
        (
            "watches open on the hub",
            watches(&push),
            watches(&pull),
            String::new(),
        ),
        (
            "hub LIST + GET requests",
            count(&push, |r| r.hub_reads),
            count(&pull, |r| r.hub_reads),
            String::new(),
        ),
        (
            "engine watches, all clusters",
            count(&push, |r| r.engine_watches as u64),
            count(&pull, |r| r.engine_watches as u64),
            String::new(),
        ),
        (
            "engine writes per round",
            count(&push, |r| r.writes),
            count(&pull, |r| r.writes),
            String::new(),
        ),
        (
            "  of which to the hub",
            count(&push, |r| r.hub_writes),
            count(&pull, |r| r.hub_writes),
            String::new(),
        ),
    ];
    let width =
        |col: fn(&(&str, String, String, String)) -> usize| rows.iter().map(col).max().unwrap_or(0);
    let (w0, w1, w2) = (
        width(|r| r.0.chars().count()),
        width(|r| r.1.chars().count()).max(4),
        width(|r| r.2.chars().count()).max(4),
    );
    println!("  {:<w0$}  {:<w1$}  {:<w2$}  pull/push", "", "push", "pull");
    for (label, a, b, r) in &rows {
        println!("  {label:<w0$}  {a:<w1$}  {b:<w2$}  {r}");
    }
    println!(
        "  (watches: the hub's open WATCH requests while in sync, over those before the controllers started; they also carry\n   the initial state where the apiserver serves streaming lists. Hub requests: of Secrets, Namespaces and ConfigMaps,\n   from the controllers' start until the update reached every copy.)"
    );
    Ok(())
}
