//! Fan-out benchmarks on a local control plane (`make bench`).
//!
//! For 300 and 1000 destination namespaces: time until every copy exists — cold (the first
//! declaration of its kind in a running controller, so the engine first starts and lists its
//! Secret and Namespace watches) and warm (a second declaration of the same kind, its watches
//! already running) — time for a source update to reach every copy, time for a new namespace to
//! get its copy, time to delete every copy, and the same writes (one create, a POST, per
//! namespace) sent by a plain client with the same concurrency, and the plain client's update
//! wave: the source's update, then the applies kubesync sends for it (server-side apply under
//! its field manager, conditioned on each copy's uid and resourceVersion), timed from the
//! source's update as the engine's is. Each destination namespace also
//! holds [`OTHER_SECRETS`] Secrets of other owners, and every run deletes its copies again, so
//! each run starts from the same cluster.
//!
//! Each measurement runs [`ROUNDS`] times, the engine and the plain client alternating in a
//! rotating order. The ratio reported first is the engine's median over the plain client's
//! median (single runs on a small machine vary by ±50%, and medians of several runs vary far
//! less); next to it, the median and range of the per-round ratios (each engine run against the
//! plain run of its own round).
//!
//! Both sides are timed the same way: until their last write is acknowledged. For the plain
//! client that is its last response; for the engine it is the reconcile whose report shows
//! every destination `Synced` (carrying the expected source version). The copies are then
//! checked through a watch, outside the timed window, so that the observer's own watch does
//! not load the apiserver during the engine's runs only.
//!
//! Then many sources ("50 sources × 200 namespaces converges"): one declaration selects
//! [`MANY_SOURCES`] Secrets by label and copies each into every one of [`MANY_NAMESPACES`]
//! namespaces (10 000 copies), timed the same way, cold and warm, against a plain client
//! creating the same 10 000 objects (alone, and with the engine's watches open); an update
//! of every source reaching every copy, and the cleanup. [`MANY_ROUNDS`] rounds.
//! `KUBESYNC_BENCH_QUICK=1` runs it smaller ([`QUICK_MANY_SOURCES`] ×
//! [`QUICK_MANY_NAMESPACES`], [`QUICK_ROUNDS`] rounds per size); `BENCH_SIZES` picks the
//! sizes of the one-source measurements.
//!
//! Every run checks the benchmark's invariant, not its speed: each round's engine writes are
//! exactly those its copies need (five per copy, see [`exact_writes`]); CI runs it quick
//! (`make bench-check`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::Connect;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kubesync::syncers::fan_out::FIELD_MANAGER;
use kubesync::syncers::fan_out::rules::{self, CopyRules, NamespaceRule, OnConflict, Owner};
use kubesync::syncers::fan_out::{Destination, FanOut, FanOutSpec, SourceRef};
use kubesync::syncers::fan_out::{DestinationState, Outcome, Selection};
use kubesync::{Cluster, Controller};
use kubesync_testenv::TestEnv;
use tokio::sync::{mpsc, oneshot};

const CONCURRENCY: usize = 16;
/// Quiet time before each timed window, engine and plain client alike, after the apiserver
/// collected its garbage ([`common::settle`]): it finishes what the previous step left (its
/// deletes, a watch's first list) before the clock starts.
const SETTLE: Duration = Duration::from_millis(300);

/// Rounds per size: single runs on a small machine vary by ±50%; the median of 11 varies far
/// less. `KUBESYNC_BENCH_QUICK` runs [`QUICK_ROUNDS`].
const ROUNDS: usize = 11;
/// Rounds per size in a quick run (CI's `make bench-check`: the invariants, not the speed).
const QUICK_ROUNDS: usize = 3;

/// The rounds per size of this run.
fn rounds() -> usize {
    if common::quick() {
        QUICK_ROUNDS
    } else {
        ROUNDS
    }
}

/// The benchmark's invariant, checked in every run (`make bench`, and CI's quick
/// `make bench-check`), not its speed: every round's engine writes exactly `expected` (`parts`
/// says which), so a re-send, a duplicate or a missing write fails the benchmark.
fn exact_writes(label: &str, writes: &[u64], expected: u64, parts: &str) -> anyhow::Result<()> {
    println!(
        "  {label}: engine writes per round {writes:?} (exactly {expected} expected: {parts})"
    );
    anyhow::ensure!(
        writes.iter().all(|w| *w == expected),
        "{label}: engine writes per round {writes:?}, expected exactly {expected} ({parts})"
    );
    Ok(())
}
/// Secrets of other owners in each destination namespace (as a service-account token and an
/// application's credentials would be): the engine's first list reads them too.
const OTHER_SECRETS: usize = 2;

/// Many sources: Secrets one declaration selects by label, and the namespaces each is copied
/// to (50 × 200 = 10 000 copies).
const MANY_SOURCES: usize = 50;
const MANY_NAMESPACES: usize = 200;
/// The same with `KUBESYNC_BENCH_QUICK` set.
const QUICK_MANY_SOURCES: usize = 10;
const QUICK_MANY_NAMESPACES: usize = 40;
/// Rounds of the many-sources measurement: one round writes and deletes 10 000 copies per
/// side (the engine twice: cold and warm), so fewer than [`ROUNDS`].
const MANY_ROUNDS: usize = 3;

/// Creates `n` namespaces, each holding [`OTHER_SECRETS`] Secrets of about 1 KiB.
async fn create_namespaces(client: &kube::Client, prefix: &str, n: usize) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(0..n)
        .map(|i| {
            let (api, client) = (api.clone(), client.clone());
            let name = format!("{prefix}-{i}");
            async move {
                let ns: Namespace = serde_json::from_value(
                    serde_json::json!({"metadata": {"name": name, "labels": {"bench": prefix}}}),
                )?;
                api.create(&PostParams::default(), &ns).await?;
                let secrets: Api<Secret> = Api::namespaced(client, &name);
                for k in 0..OTHER_SECRETS {
                    let other: Secret = serde_json::from_value(serde_json::json!({
                        "metadata": {"name": format!("other-{k}"), "labels": {"app": "other"}},
                        "stringData": {"credentials": "x".repeat(1024)}
                    }))?;
                    secrets.create(&PostParams::default(), &other).await?;
                }
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Writes the source Secret `name` with content `value` (server-side apply as `bench`).
async fn write_source<K>(api: &Api<K>, name: &str, value: &str) -> anyhow::Result<K>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PatchParams::apply("bench").force();
    Ok(api
        .patch(name, &params, &Patch::Apply(secret(name, value)))
        .await?)
}

fn secret(name: &str, value: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "stringData": {"token": value}})
}

/// Waits, through one watch, until `want` copies made for declaration `uid` exist (carrying
/// one of the sources' resourceVersions `versions`, when not empty: a resourceVersion is
/// unique in the cluster, so it names one source's one version).
async fn copies(env: &TestEnv, uid: &str, versions: &[String], want: usize) -> anyhow::Result<()> {
    let all: Api<Secret> = Api::all(env.kubesync_client()?);
    common::wait_for(
        all,
        common::cached_lists().labels(&format!("kubesync.io/managed-by={uid}")),
        want,
        |s: &Secret| {
            versions.is_empty()
                || s.annotations()
                    .get("kubesync.io/source-resource-version")
                    .is_some_and(|v| versions.contains(v))
        },
    )
    .await
}

/// A reconcile's report: (declaration, when the reconcile started, when it completed, report).
type Reported = (String, Instant, Instant, Outcome);

/// Reports of the engine's reconciles, as they complete; when the first reconcile that
/// found its watches listed started; and when the reconcile whose completion
/// [`Reports::synced`] last returned started.
struct Reports(
    mpsc::UnboundedReceiver<Reported>,
    Option<Instant>,
    Option<Instant>,
);

impl Reports {
    /// When the first reconcile of `name` whose report has `want` destinations `Synced` (at
    /// one of the source versions `versions`, when not empty) completed.
    async fn synced(
        &mut self,
        name: &str,
        want: usize,
        versions: &[String],
    ) -> anyhow::Result<Instant> {
        while let Some((decl, started, at, report)) = self.0.recv().await {
            if report.ready && self.1.is_none() {
                self.1 = Some(started);
            }
            let synced = report
                .destinations
                .iter()
                .filter(|d| {
                    d.state == DestinationState::Synced
                        && (versions.is_empty() || versions.contains(&d.source_resource_version))
                })
                .count();
            if decl == name && report.ready && synced >= want {
                self.2 = Some(started);
                return Ok(at);
            }
        }
        anyhow::bail!("the engine stopped before {name} had {want} copies")
    }

    /// Waits for any report of `name`.
    async fn seen(&mut self, name: &str) -> anyhow::Result<()> {
        while let Some((decl, ..)) = self.0.recv().await {
            if decl == name {
                return Ok(());
            }
        }
        anyhow::bail!("the controller stopped before it reconciled {name}")
    }

    /// Waits until each of `names` has had a report with no copies left.
    async fn cleaned(&mut self, names: &[&String]) -> anyhow::Result<()> {
        let mut waiting: HashSet<&str> = names.iter().map(|n| n.as_str()).collect();
        while let Some((decl, _, _, report)) = self.0.recv().await {
            if report.ready && !report.source_found && report.remaining_copies == 0 {
                waiting.remove(decl.as_str());
            }
            if waiting.is_empty() {
                return Ok(());
            }
        }
        anyhow::bail!("the engine stopped before the copies of {waiting:?} were deleted")
    }

    /// Like [`synced`](Self::synced), for the destination in `namespace` only.
    async fn synced_in(&mut self, name: &str, namespace: &str) -> anyhow::Result<Instant> {
        while let Some((decl, _, at, report)) = self.0.recv().await {
            let done = report
                .destinations
                .iter()
                .any(|d| d.namespace == namespace && d.state == DestinationState::Synced);
            if decl == name && done {
                return Ok(at);
            }
        }
        anyhow::bail!("the engine stopped before {name} had a copy in {namespace}")
    }
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// Seconds of each run, in order.
fn list(v: Vec<Duration>) -> String {
    v.iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The engine's median over the plain client's median, then the median and range of the
/// per-round ratios (each engine run against the plain run of its own round).
fn ratio_summary(engine: &[Duration], plain: &[PlainRun]) -> String {
    let of_medians = median(engine).as_secs_f64()
        / median(&plain.iter().map(|p| p.write).collect::<Vec<_>>()).as_secs_f64();
    let mut r: Vec<f64> = engine
        .iter()
        .zip(plain)
        .map(|(e, p)| e.as_secs_f64() / p.write.as_secs_f64())
        .collect();
    r.sort_by(f64::total_cmp);
    format!(
        "{of_medians:.2} (per round: median {:.2}, {:.2}–{:.2})",
        r[r.len() / 2],
        r[0],
        r[r.len() - 1]
    )
}

/// One round of the engine: cold and warm fan-out, update, new namespace.
struct EngineRun {
    cold: Duration,
    warm: Duration,
    update: Duration,
    /// Mean server-side latency of the Secret writes of the update wave.
    update_server: Duration,
    /// When the reconcile that wrote the update, and the warm declaration's, began (after
    /// the source's update, after the declaration).
    update_began: Duration,
    warm_began: Duration,
    /// CPU seconds (benchmark process with the engine, control plane) of the update wave.
    update_cpu: (f64, f64),
    new_namespace: Duration,
    writes: u64,
    /// Mean server-side latency of the Secret writes of the cold fan-out.
    server: Duration,
    /// Cold: time until the engine's watches had listed.
    listed: Duration,
    /// Time to delete all 2n + 1 copies once both declarations are deleted.
    cleanup: Duration,
    /// CPU seconds (benchmark process with the engine, control plane) of the cold fan-out.
    cold_cpu: (f64, f64),
    /// The same for the warm fan-out.
    warm_cpu: (f64, f64),
}

struct Setup {
    prefix: String,
    control: String,
    source_ns: String,
}

impl Setup {
    /// The control and source namespaces of `prefix`, and `n` destination namespaces labelled
    /// `bench=<prefix>` (see [`create_namespaces`]).
    async fn create(env: &TestEnv, prefix: &str, n: usize) -> anyhow::Result<Self> {
        let namespaces: Api<Namespace> = Api::all(env.kubesync_client()?);
        let setup = Setup {
            control: format!("{prefix}-control"),
            source_ns: format!("{prefix}-src"),
            prefix: prefix.to_string(),
        };
        for ns in [&setup.control, &setup.source_ns] {
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
                )
                .await?;
        }
        create_namespaces(&env.kubesync_client()?, prefix, n).await?;
        Ok(setup)
    }
}

/// A declaration copying `source` to every namespace labelled `bench=<prefix>`; with a
/// selection, each copy is named `name_prefix` + its source's name.
fn fan_out_spec(source: SourceRef, prefix: &str, name_prefix: &str) -> FanOutSpec {
    FanOutSpec {
        source,
        destinations: vec![Destination {
            namespaces: NamespaceRule {
                namespace: Some("*".into()),
                namespace_selector: Some(kube::core::Selector::from_iter([(
                    "bench".to_string(),
                    prefix.to_string(),
                )])),
                ..Default::default()
            },
            name_prefix: name_prefix.into(),
            ..Default::default()
        }],
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

/// A controller running the fan-out engine. Declarations are anchored on ConfigMaps in the
/// control namespace (the uid of `<name>-uid` owns the copies of declaration `name`; the
/// ConfigMap `name` itself declares it: [`common::run_declarations`]); the reconciler finds each
/// one's spec by the ConfigMap's name, and sends every reconcile's report to
/// [`reports`](Self::reports).
struct Engine {
    fan_out: Arc<FanOut>,
    reports: Reports,
    /// The uid owning each declaration's copies, by the declaration's name.
    uids: HashMap<String, String>,
    anchor: Api<ConfigMap>,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), kubesync::Error>>,
}

impl Engine {
    /// Creates the uid anchors of the declarations `specs` (none is declared yet) and starts
    /// the controller; returns once it runs (it has reconciled the first anchor).
    async fn start(
        env: &TestEnv,
        control: &str,
        specs: Vec<(String, FanOutSpec)>,
    ) -> anyhow::Result<Self> {
        let anchor: Api<ConfigMap> = Api::namespaced(env.kubesync_client()?, control);
        let mut uids = HashMap::new();
        for (name, _) in &specs {
            let uid = common::create_anchor(&anchor, &common::uid_anchor(name)).await?;
            uids.insert(name.clone(), uid);
        }
        let first = common::uid_anchor(specs.first().map(|s| s.0.as_str()).unwrap_or_default());
        let specs: HashMap<String, (FanOutSpec, String)> = specs
            .into_iter()
            .map(|(name, spec)| {
                let uid = uids[&name].clone();
                (name, (spec, uid))
            })
            .collect();
        let fan_out = Arc::new(FanOut::new("local").concurrency(CONCURRENCY));
        let controller = Controller::new().cluster(Cluster::new("local", env.kubesync_client()?));
        let (stop, stopped) = oneshot::channel::<()>();
        let (report_tx, report_rx) = mpsc::unbounded_channel();
        let mut reports = Reports(report_rx, None, None);
        let task = common::run_declarations(
            controller,
            fan_out.clone(),
            "local",
            control,
            specs,
            move |key, started, outcome| {
                let _ = report_tx.send((key.name.clone(), started, Instant::now(), outcome));
            },
            async {
                let _ = stopped.await;
            },
        )?;
        reports.seen(&first).await?;
        Ok(Self {
            fan_out,
            reports,
            uids,
            anchor,
            stop,
            task,
        })
    }

    /// Declares `name` (creates its ConfigMap).
    async fn declare(&self, name: &str) -> anyhow::Result<()> {
        common::create_anchor(&self.anchor, name).await?;
        Ok(())
    }

    /// Deletes the declarations `names` and returns the time until the engine reported their
    /// copies deleted; checks that none is left.
    async fn retract(&mut self, names: &[&String]) -> anyhow::Result<Duration> {
        let t = Instant::now();
        for name in names {
            self.anchor.delete(name, &DeleteParams::default()).await?;
        }
        self.reports.cleaned(names).await?;
        let cleanup = t.elapsed();
        for name in names {
            let left = Api::<Secret>::all(kube::Client::from(self.anchor.clone()))
                .list_metadata(
                    &ListParams::default()
                        .labels(&format!("kubesync.io/managed-by={}", self.uids[*name])),
                )
                .await?;
            anyhow::ensure!(left.items.is_empty(), "{} copies left", left.items.len());
        }
        Ok(cleanup)
    }

    /// Stops the controller; returns the engine's writes.
    async fn stop(self) -> anyhow::Result<u64> {
        let _ = self.stop.send(());
        self.task.await??;
        Ok(self.fan_out.write_counter().writes())
    }
}

async fn engine_round(
    env: &TestEnv,
    setup: &Setup,
    n: usize,
    round: usize,
) -> anyhow::Result<EngineRun> {
    let Setup {
        prefix,
        control,
        source_ns,
    } = setup;
    let namespaces: Api<Namespace> = Api::all(env.kubesync_client()?);
    let src: Api<Secret> = Api::namespaced(env.kubesync_client()?, source_ns);
    let (cold_name, warm_name) = (format!("cold-{round}"), format!("warm-{round}"));
    for name in [&cold_name, &warm_name] {
        write_source(&src, name, "v1").await?;
    }
    let spec_for = |source: &str| {
        let one = SourceRef::one(ApiResource::erase::<Secret>(&()), source_ns.clone(), source);
        (source.to_string(), fan_out_spec(one, prefix, ""))
    };
    let mut engine = Engine::start(
        env,
        control,
        vec![spec_for(&cold_name), spec_for(&warm_name)],
    )
    .await?;
    // Cold: the first declaration of its kind, in a running controller; the engine starts
    // its Secret and Namespace watches and lists them first.
    common::settle(env, SETTLE).await?;
    let counting = common::ServerWrites::start(vec![env.kubesync_client()?], "secrets").await?;
    let cpu = common::CpuMeter::start(env.pids());
    let t = Instant::now();
    engine.declare(&cold_name).await?;
    let cold = engine.reports.synced(&cold_name, n, &[]).await? - t;
    let cold_cpu = cpu.since_start();
    let listed = engine.reports.1.map(|at| at - t).unwrap_or_default();
    let (_, server) = counting.since_start().await?;
    copies(env, &engine.uids[&cold_name], &[], n).await?;

    common::settle(env, SETTLE).await?;
    let counting = common::ServerWrites::start(vec![env.kubesync_client()?], "secrets").await?;
    let cpu = common::CpuMeter::start(env.pids());
    let t = Instant::now();
    let updated = write_source(&src, &cold_name, "v2").await?;
    let rv = [updated.metadata.resource_version.unwrap_or_default()];
    let update = engine.reports.synced(&cold_name, n, &rv).await? - t;
    let update_cpu = cpu.since_start();
    let update_began = engine.reports.2.map(|at| at - t).unwrap_or_default();
    let (_, update_server) = counting.since_start().await?;
    copies(env, &engine.uids[&cold_name], &rv, n).await?;

    let t = Instant::now();
    let late = format!("{prefix}-late-{round}");
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                serde_json::json!({"metadata": {"name": late, "labels": {"bench": prefix}}}),
            )?,
        )
        .await?;
    let new_namespace = engine.reports.synced_in(&cold_name, &late).await? - t;
    let late_api: Api<Secret> = Api::namespaced(env.kubesync_client()?, &late);
    anyhow::ensure!(
        late_api.get_opt(&cold_name).await?.is_some(),
        "no copy in {late}"
    );

    // Warm: a second declaration of the same kind, whose watches already run.
    common::settle(env, SETTLE).await?;
    let cpu = common::CpuMeter::start(env.pids());
    let t = Instant::now();
    engine.declare(&warm_name).await?;
    let warm = engine.reports.synced(&warm_name, n + 1, &[]).await? - t;
    let warm_began = engine.reports.2.map(|at| at - t).unwrap_or_default();
    let warm_cpu = cpu.since_start();
    copies(env, &engine.uids[&warm_name], &[], n + 1).await?;

    // Cleanup: both declarations deleted; the engine removes their 2n + 1 copies, so every
    // round starts from the same cluster.
    let cleanup = engine.retract(&[&cold_name, &warm_name]).await?;
    let writes = engine.stop().await?;
    // Later rounds fan out to the same n namespaces.
    namespaces
        .patch(
            &late,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"bench": null}}})),
        )
        .await?;
    Ok(EngineRun {
        cold,
        warm,
        update,
        update_server,
        update_began,
        warm_began,
        update_cpu,
        new_namespace,
        writes,
        server,
        listed,
        cleanup,
        cold_cpu,
        warm_cpu,
    })
}

/// The same writes by a plain client: one create per namespace of the very object kubesync
/// would write (the source's copy with kubesync's marks), same concurrency.
async fn plain_round(
    env: &TestEnv,
    setup: &Setup,
    n: usize,
    round: usize,
    mode: Plain,
) -> anyhow::Result<PlainRun> {
    let watched = mode == Plain::Watched;
    let client = env.kubesync_client()?;
    let name = format!(
        "{}-{round}",
        match mode {
            Plain::Alone => "plain",
            Plain::Watched => "watched",
            Plain::ReadFirst => "read",
        }
    );
    let prefix = &setup.prefix;
    let ar = ApiResource::erase::<Secret>(&());
    let src: Api<DynamicObject> = Api::namespaced_with(client.clone(), &setup.source_ns, &ar);
    let source = write_source(&src, &name, "v1").await?;
    let owner = Owner {
        reference: format!("local/{}/{name}", setup.control),
        uid: format!("plain-{round}"),
        shard: None,
    };
    let source_ref = format!("core/Secret/{}/{name}", setup.source_ns);
    let copies: Vec<DynamicObject> = (0..n)
        .map(|i| {
            rules::desired_copy(
                &ar,
                &source,
                &format!("{prefix}-{i}"),
                &name,
                &CopyRules::default(),
                &owner,
                &source_ref,
            )
        })
        .collect();
    let watchers = engine_watches(&client, watched);
    common::settle(env, SETTLE).await?;
    let counting = common::ServerWrites::start(vec![env.kubesync_client()?], "secrets").await?;
    let cpu = common::CpuMeter::start(env.pids());
    let t = Instant::now();
    // With `ReadFirst`, the plain client does the engine's whole job: it lists the matching
    // namespaces and every Secret (both from the watch cache, at once), and writes only where
    // no object of someone else's is in the way.
    let copies: Vec<DynamicObject> = if mode == Plain::ReadFirst {
        let cached = ListParams::default().match_any();
        let selected = cached.clone().labels(&format!("bench={prefix}"));
        let (all_secrets, all_namespaces) = (
            Api::<Secret>::all(client.clone()),
            Api::<Namespace>::all(client.clone()),
        );
        let (secrets, matching) = futures::try_join!(
            all_secrets.list_metadata(&cached),
            all_namespaces.list_metadata(&selected),
        )?;
        let taken: std::collections::HashSet<(String, String)> = secrets
            .items
            .iter()
            .filter(|s| !s.labels().contains_key("kubesync.io/managed-by"))
            .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
            .collect();
        let matching: HashSet<String> = matching.items.iter().map(|n| n.name_any()).collect();
        copies
            .into_iter()
            .filter(|c| {
                let ns = c.metadata.namespace.clone().unwrap_or_default();
                matching.contains(&ns) && !taken.contains(&(ns, name.clone()))
            })
            .collect()
    } else {
        copies
    };
    let answers = send_copies(&client, &ar, copies, false).await?;
    let elapsed = t.elapsed();
    let cpu = cpu.since_start();
    let (_, server) = counting.since_start().await?;
    // The update wave, as the engine's round times it: from the source's update until every
    // copy holds it. The same applies kubesync sends (conditioned on each copy's uid and
    // resourceVersion), same concurrency.
    let update = if mode == Plain::ReadFirst {
        None
    } else {
        common::settle(env, SETTLE).await?;
        let counting = common::ServerWrites::start(vec![env.kubesync_client()?], "secrets").await?;
        let cpu = common::CpuMeter::start(env.pids());
        let t = Instant::now();
        let source = write_source(&src, &name, "v2").await?;
        let updates = answers.iter().map(|answer| {
            let mut copy = rules::desired_copy(
                &ar,
                &source,
                answer.metadata.namespace.as_deref().unwrap_or_default(),
                &name,
                &CopyRules::default(),
                &owner,
                &source_ref,
            );
            copy.metadata.uid = answer.metadata.uid.clone();
            copy.metadata.resource_version = answer.metadata.resource_version.clone();
            copy
        });
        send_copies(&client, &ar, updates.collect(), true).await?;
        let write = t.elapsed();
        let cpu = cpu.since_start();
        let (_, server) = counting.since_start().await?;
        Some(Box::new(PlainRun {
            write,
            server,
            update: None,
            delete: Duration::ZERO,
            cpu,
        }))
    };
    // Cleanup, as the engine's round does: the same deletes, same concurrency.
    let t = Instant::now();
    delete_copies(&client, &ar, placed(&answers)).await?;
    let delete = t.elapsed();
    for w in watchers {
        w.abort();
    }
    Ok(PlainRun {
        write: elapsed,
        server,
        update,
        delete,
        cpu,
    })
}

/// The (namespace, name) of each object.
fn placed(objects: &[DynamicObject]) -> Vec<(String, String)> {
    objects
        .iter()
        .map(|c| (c.namespace().unwrap_or_default(), c.name_any()))
        .collect()
}

/// With `watched`, the watches the engine holds (every Secret, every Namespace) opened and
/// drained, so that the apiserver does the same event work for a plain client as for the
/// engine; none without.
fn engine_watches(client: &kube::Client, watched: bool) -> Vec<tokio::task::JoinHandle<()>> {
    if !watched {
        return Vec::new();
    }
    vec![
        common::drain(Api::<Secret>::all(client.clone()), common::cached_lists()),
        common::drain(
            Api::<Namespace>::all(client.clone()),
            common::cached_lists(),
        ),
    ]
}

/// Writes `copies` as kubesync does, [`CONCURRENCY`] at once: creates them (a POST under its
/// field manager) or, with `apply`, updates them (a forced server-side apply under it);
/// returns the apiserver's answers.
async fn send_copies(
    client: &kube::Client,
    ar: &ApiResource,
    copies: Vec<DynamicObject>,
    apply: bool,
) -> anyhow::Result<Vec<DynamicObject>> {
    futures::stream::iter(copies)
        .map(|copy| {
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                copy.metadata.namespace.as_deref().unwrap_or_default(),
                ar,
            );
            async move {
                if apply {
                    // The parameters of kubesync's own applies.
                    let params = kubesync::writer::apply_params(FIELD_MANAGER);
                    api.patch(&copy.name_any(), &params, &Patch::Apply(&copy))
                        .await
                } else {
                    let params = PostParams {
                        field_manager: Some(FIELD_MANAGER.into()),
                        ..Default::default()
                    };
                    api.create(&params, &copy).await
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .map_err(Into::into)
}

/// Deletes the objects `targets` (namespace, name), [`CONCURRENCY`] at once.
async fn delete_copies(
    client: &kube::Client,
    ar: &ApiResource,
    targets: Vec<(String, String)>,
) -> anyhow::Result<()> {
    futures::stream::iter(targets)
        .map(|(ns, name)| {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
            async move { api.delete(&name, &DeleteParams::background()).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// How the plain client runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plain {
    /// The writes alone.
    Alone,
    /// The writes, with the engine's watches open.
    Watched,
    /// The same job as the engine's: read the namespaces and what is in the way, then write.
    ReadFirst,
}

/// One round of the plain client.
#[derive(Clone)]
struct PlainRun {
    /// Time for the n applies.
    write: Duration,
    /// Mean server-side latency of those writes.
    server: Duration,
    /// The update wave (the source's update, then an apply to every copy) measured the same
    /// way (its time in `write`); none where the round ran no update.
    update: Option<Box<PlainRun>>,
    /// Time to delete the n copies again.
    delete: Duration,
    /// CPU seconds (benchmark process, control plane) of the writes.
    cpu: (f64, f64),
}

async fn run(env: &TestEnv, n: usize) -> anyhow::Result<()> {
    let setup = Setup::create(env, &format!("b{n}"), n).await?;
    let population = Api::<Secret>::all(env.kubesync_client()?)
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let mut engine_runs = Vec::new();
    let mut plain_runs = Vec::new();
    let mut watched_runs = Vec::new();
    let mut read_runs = Vec::new();
    for round in 0..rounds() {
        // Rotate the order; every run deletes its copies again.
        for step in 0..4 {
            match (step + round) % 4 {
                0 => engine_runs.push(engine_round(env, &setup, n, round).await?),
                1 => plain_runs.push(plain_round(env, &setup, n, round, Plain::Alone).await?),
                2 => watched_runs.push(plain_round(env, &setup, n, round, Plain::Watched).await?),
                _ => read_runs.push(plain_round(env, &setup, n, round, Plain::ReadFirst).await?),
            }
        }
    }
    let pick =
        |f: fn(&EngineRun) -> Duration| median(&engine_runs.iter().map(f).collect::<Vec<_>>());
    let (cold, warm, update, new_ns) = (
        pick(|r| r.cold),
        pick(|r| r.warm),
        pick(|r| r.update),
        pick(|r| r.new_namespace),
    );
    let plain = median(&plain_runs.iter().map(|r| r.write).collect::<Vec<_>>());
    let watched = median(&watched_runs.iter().map(|r| r.write).collect::<Vec<_>>());
    println!(
        "1 → {n} namespaces (median of {} rounds; {population} Secrets in the cluster before each run; writes per round {}):",
        rounds(),
        engine_runs[0].writes
    );
    let n64 = n as u64;
    exact_writes(
        &format!("1 → {n}"),
        &engine_runs.iter().map(|r| r.writes).collect::<Vec<_>>(),
        5 * n64 + 4,
        "n + 1 creates (the late namespace's too), their n + 1 updates, n + 1 creates of the warm declaration, 2n + 1 deletes",
    )?;
    println!(
        "  all copies: cold {:.2} s (runs {}), warm {:.2} s (runs {})",
        cold.as_secs_f64(),
        list(engine_runs.iter().map(|r| r.cold).collect()),
        warm.as_secs_f64(),
        list(engine_runs.iter().map(|r| r.warm).collect()),
    );
    println!(
        "  cold: the engine's watches had listed after {:.2} s (runs {})",
        pick(|r| r.listed).as_secs_f64(),
        list(engine_runs.iter().map(|r| r.listed).collect()),
    );
    println!(
        "  plain client, same creates: {:.2} s (runs {}); with the same watches open: {:.2} s (runs {})",
        plain.as_secs_f64(),
        list(plain_runs.iter().map(|r| r.write).collect()),
        watched.as_secs_f64(),
        list(watched_runs.iter().map(|r| r.write).collect()),
    );
    println!(
        "  apiserver time per Secret write: kubesync (cold) {:.1} ms, plain client {:.1} ms, with watches {:.1} ms",
        pick(|r| r.server).as_secs_f64() * 1e3,
        median(&plain_runs.iter().map(|r| r.server).collect::<Vec<_>>()).as_secs_f64() * 1e3,
        median(&watched_runs.iter().map(|r| r.server).collect::<Vec<_>>()).as_secs_f64() * 1e3
    );
    // Each engine run against the plain runs of its own round (next to it in time).
    let ratios = |f: fn(&EngineRun) -> Duration, base: &[PlainRun]| {
        ratio_summary(&engine_runs.iter().map(f).collect::<Vec<_>>(), base)
    };
    println!(
        "  ratio to the plain client (medians): warm {}, cold {} (includes listing every Secret and Namespace)",
        ratios(|r| r.warm, &plain_runs),
        ratios(|r| r.cold, &plain_runs),
    );
    println!(
        "  ratio to the plain client with the same watches: warm {}, cold {}",
        ratios(|r| r.warm, &watched_runs),
        ratios(|r| r.cold, &watched_runs),
    );
    println!(
        "  the plain client doing the same job (list namespaces and Secrets, then write where nothing is in the way): {:.2} s (runs {}); ratio cold {}, warm {}",
        median(&read_runs.iter().map(|r| r.write).collect::<Vec<_>>()).as_secs_f64(),
        list(read_runs.iter().map(|r| r.write).collect()),
        ratios(|r| r.cold, &read_runs),
        ratios(|r| r.warm, &read_runs),
    );
    let per_copy = |v: Vec<(f64, f64)>, copies: usize| {
        let mut client: Vec<f64> = v.iter().map(|c| c.0 * 1e3 / copies as f64).collect();
        let mut server: Vec<f64> = v.iter().map(|c| c.1 * 1e3 / copies as f64).collect();
        client.sort_by(f64::total_cmp);
        server.sort_by(f64::total_cmp);
        format!(
            "control plane {:.2} ms, client {:.2} ms",
            server[server.len() / 2],
            client[client.len() / 2]
        )
    };
    println!(
        "  CPU per copy (median): kubesync warm: {}; cold: {}; plain client: {}; with watches: {}",
        per_copy(engine_runs.iter().map(|r| r.warm_cpu).collect(), n + 1),
        per_copy(engine_runs.iter().map(|r| r.cold_cpu).collect(), n),
        per_copy(plain_runs.iter().map(|r| r.cpu).collect(), n),
        per_copy(watched_runs.iter().map(|r| r.cpu).collect(), n),
    );
    let updates = |runs: &[PlainRun]| -> Vec<PlainRun> {
        runs.iter()
            .filter_map(|r| r.update.as_deref().cloned())
            .collect()
    };
    let (plain_updates, watched_updates) = (updates(&plain_runs), updates(&watched_runs));
    println!(
        "  update reaches all copies in {:.2} s (runs {}; {:.2}× the cold fan-out); the plain client's same applies {:.2} s (runs {}), with the same watches {:.2} s",
        update.as_secs_f64(),
        list(engine_runs.iter().map(|r| r.update).collect()),
        update.as_secs_f64() / cold.as_secs_f64(),
        median(&plain_updates.iter().map(|r| r.write).collect::<Vec<_>>()).as_secs_f64(),
        list(plain_updates.iter().map(|r| r.write).collect()),
        median(&watched_updates.iter().map(|r| r.write).collect::<Vec<_>>()).as_secs_f64(),
    );
    println!(
        "  update ratio to the plain client (medians): {}; with the same watches {}; apiserver time per Secret write: kubesync {:.1} ms, plain client {:.1} ms",
        ratio_summary(
            &engine_runs.iter().map(|r| r.update).collect::<Vec<_>>(),
            &plain_updates
        ),
        ratio_summary(
            &engine_runs.iter().map(|r| r.update).collect::<Vec<_>>(),
            &watched_updates
        ),
        pick(|r| r.update_server).as_secs_f64() * 1e3,
        median(&plain_updates.iter().map(|r| r.server).collect::<Vec<_>>()).as_secs_f64() * 1e3,
    );
    println!(
        "  CPU per copy in the update (median): kubesync: {}; plain client: {}; with watches: {}",
        per_copy(engine_runs.iter().map(|r| r.update_cpu).collect(), n),
        per_copy(plain_updates.iter().map(|r| r.cpu).collect(), n),
        per_copy(watched_updates.iter().map(|r| r.cpu).collect(), n),
    );
    println!(
        "  the reconcile that wrote them began {:.1} ms after the declaration (warm), {:.1} ms after the source's update (medians); a new namespace gets its copy in {:.0} ms",
        pick(|r| r.warm_began).as_secs_f64() * 1e3,
        pick(|r| r.update_began).as_secs_f64() * 1e3,
        new_ns.as_secs_f64() * 1e3
    );
    println!(
        "  cleanup: deleting both declarations removes their {} copies in {:.2} s; the plain client deletes {n} in {:.2} s",
        2 * n + 1,
        pick(|r| r.cleanup).as_secs_f64(),
        median(&plain_runs.iter().map(|r| r.delete).collect::<Vec<_>>()).as_secs_f64(),
    );
    Ok(())
}

/// Many sources: the source namespace's Secrets `src-0` … `src-<sources - 1>`, labelled
/// `bench-src=<prefix>` (the declaration's selector), about 1 KiB each, written with content
/// `version`; returns their resourceVersions.
async fn write_sources(
    env: &TestEnv,
    setup: &Setup,
    sources: usize,
    version: &str,
) -> anyhow::Result<Vec<String>> {
    let src: Api<Secret> = Api::namespaced(env.kubesync_client()?, &setup.source_ns);
    let value = format!("{version}-{}", "x".repeat(1024));
    futures::stream::iter(0..sources)
        .map(|i| {
            let (src, name) = (src.clone(), format!("src-{i}"));
            let mut object = secret(&name, &value);
            object["metadata"]["labels"] = serde_json::json!({"bench-src": setup.prefix});
            async move {
                let written = src
                    .patch(
                        &name,
                        &PatchParams::apply("bench").force(),
                        &Patch::Apply(object),
                    )
                    .await?;
                anyhow::Ok(written.metadata.resource_version.unwrap_or_default())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
}

/// One round of the engine with many sources.
struct ManyRun {
    /// Cold: the first declaration in a new engine, its watches' first lists included.
    cold: Duration,
    /// Warm: a second declaration with the same selection, every watch it needs running.
    warm: Duration,
    /// Every source changed: time until every copy carries its source's new version.
    update: Duration,
    /// Mean server-side latency of the Secret writes of the update (server-side applies).
    update_server: Duration,
    /// Time to delete the cold declaration's copies once it is deleted.
    cleanup: Duration,
    /// Cold: time until the engine's watches had listed.
    listed: Duration,
    /// Mean server-side latency of the Secret writes of the cold fan-out.
    server: Duration,
    writes: u64,
}

/// One declaration selecting every source by label (see [`write_sources`]): cold, an update
/// of every source, cleanup, then warm (the cold declaration's copies deleted first, so both
/// run on the same cluster as the plain client) and its cleanup.
async fn many_engine_round(
    env: &TestEnv,
    setup: &Setup,
    sources: usize,
    n: usize,
    round: usize,
) -> anyhow::Result<ManyRun> {
    let want = sources * n;
    let selected = SourceRef::selected(
        ApiResource::erase::<Secret>(&()),
        setup.source_ns.clone(),
        Selection {
            selector: Some(kube::core::Selector::from_iter([(
                "bench-src".to_string(),
                setup.prefix.clone(),
            )])),
            names: Vec::new(),
        },
    );
    let (cold_name, warm_name) = (format!("many-cold-{round}"), format!("many-warm-{round}"));
    let mut engine = Engine::start(
        env,
        &setup.control,
        vec![
            (
                cold_name.clone(),
                fan_out_spec(selected.clone(), &setup.prefix, "cold-"),
            ),
            (
                warm_name.clone(),
                fan_out_spec(selected, &setup.prefix, "warm-"),
            ),
        ],
    )
    .await?;
    // Cold: the engine starts its watches (Secrets, Namespaces, the selected sources) and
    // lists them first.
    common::settle(env, SETTLE).await?;
    let counting = common::ServerWrites::start(vec![env.kubesync_client()?], "secrets").await?;
    let t = Instant::now();
    engine.declare(&cold_name).await?;
    let cold = engine.reports.synced(&cold_name, want, &[]).await? - t;
    let listed = engine.reports.1.map(|at| at - t).unwrap_or_default();
    let (_, server) = counting.since_start().await?;
    copies(env, &engine.uids[&cold_name], &[], want).await?;

    let counting = common::ServerWrites::start(vec![env.kubesync_client()?], "secrets").await?;
    let t = Instant::now();
    let versions = write_sources(env, setup, sources, &format!("v{}", round + 1)).await?;
    let update = engine.reports.synced(&cold_name, want, &versions).await? - t;
    let (_, update_server) = counting.since_start().await?;
    copies(env, &engine.uids[&cold_name], &versions, want).await?;
    let cleanup = engine.retract(&[&cold_name]).await?;

    // Warm: a second declaration of the same selection; its watches already run.
    common::settle(env, SETTLE).await?;
    let t = Instant::now();
    engine.declare(&warm_name).await?;
    let warm = engine.reports.synced(&warm_name, want, &[]).await? - t;
    copies(env, &engine.uids[&warm_name], &[], want).await?;
    engine.retract(&[&warm_name]).await?;
    let writes = engine.stop().await?;
    Ok(ManyRun {
        cold,
        warm,
        update,
        update_server,
        cleanup,
        listed,
        server,
        writes,
    })
}

/// The same creates by a plain client: the copy kubesync would write of every source in every
/// namespace, same concurrency; then the same deletes.
async fn many_plain_round(
    env: &TestEnv,
    setup: &Setup,
    (sources, n): (usize, usize),
    round: usize,
    watched: bool,
) -> anyhow::Result<PlainRun> {
    let client = env.kubesync_client()?;
    let ar = ApiResource::erase::<Secret>(&());
    let listed = Api::<DynamicObject>::namespaced_with(client.clone(), &setup.source_ns, &ar)
        .list(&ListParams::default().labels(&format!("bench-src={}", setup.prefix)))
        .await?
        .items;
    anyhow::ensure!(listed.len() == sources, "{} sources", listed.len());
    let owner = Owner {
        reference: format!("local/{}/many-plain-{round}", setup.control),
        uid: format!("many-plain-{round}"),
        shard: None,
    };
    let copies: Vec<DynamicObject> = (0..n)
        .flat_map(|i| {
            let (ar, owner, namespace) = (&ar, &owner, format!("{}-{i}", setup.prefix));
            listed.iter().map(move |source| {
                let name = source.name_any();
                rules::desired_copy(
                    ar,
                    source,
                    &namespace,
                    &format!("plain-{name}"),
                    &CopyRules::default(),
                    owner,
                    &rules::source_mark(ar, &setup.source_ns, &name),
                )
            })
        })
        .collect();
    let watchers = engine_watches(&client, watched);
    common::settle(env, SETTLE).await?;
    let counting = common::ServerWrites::start(vec![env.kubesync_client()?], "secrets").await?;
    let cpu = common::CpuMeter::start(env.pids());
    let t = Instant::now();
    let written = send_copies(&client, &ar, copies, false).await?;
    let write = t.elapsed();
    let cpu = cpu.since_start();
    let (_, server) = counting.since_start().await?;
    let t = Instant::now();
    delete_copies(&client, &ar, placed(&written)).await?;
    for w in watchers {
        w.abort();
    }
    Ok(PlainRun {
        write,
        server,
        update: None,
        delete: t.elapsed(),
        cpu,
    })
}

/// Many sources: `sources` Secrets selected by one declaration, each copied into `n`
/// namespaces, against a plain client creating the same `sources × n` objects.
async fn run_many(env: &TestEnv, sources: usize, n: usize) -> anyhow::Result<()> {
    let want = sources * n;
    let setup = Setup::create(env, &format!("m{sources}x{n}"), n).await?;
    write_sources(env, &setup, sources, "v0").await?;
    let population = Api::<Secret>::all(env.kubesync_client()?)
        .list_metadata(&ListParams::default())
        .await?
        .items
        .len();
    let mut engine_runs = Vec::new();
    let mut plain_runs = Vec::new();
    let mut watched_runs = Vec::new();
    for round in 0..MANY_ROUNDS {
        // Rotate the order; every run deletes its copies again.
        for step in 0..3 {
            match (step + round) % 3 {
                0 => engine_runs.push(many_engine_round(env, &setup, sources, n, round).await?),
                1 => plain_runs
                    .push(many_plain_round(env, &setup, (sources, n), round, false).await?),
                _ => watched_runs
                    .push(many_plain_round(env, &setup, (sources, n), round, true).await?),
            }
        }
    }
    let of = |f: fn(&ManyRun) -> Duration| engine_runs.iter().map(f).collect::<Vec<_>>();
    let plain: Vec<Duration> = plain_runs.iter().map(|r| r.write).collect();
    println!(
        "many sources: {sources} sources × {n} namespaces ({want} copies): engine cold {:.2} s, warm {:.2} s, plain client {:.2} s, ratio cold {:.2}, warm {:.2}",
        median(&of(|r| r.cold)).as_secs_f64(),
        median(&of(|r| r.warm)).as_secs_f64(),
        median(&plain).as_secs_f64(),
        median(&of(|r| r.cold)).as_secs_f64() / median(&plain).as_secs_f64(),
        median(&of(|r| r.warm)).as_secs_f64() / median(&plain).as_secs_f64(),
    );
    println!(
        "  (median of {MANY_ROUNDS} rounds; one declaration, label selector; {population} Secrets in the cluster before each run; engine writes per round {})",
        engine_runs[0].writes
    );
    exact_writes(
        &format!("{sources} × {n}"),
        &engine_runs.iter().map(|r| r.writes).collect::<Vec<_>>(),
        5 * want as u64,
        "per copy: its create, its update, its delete, and the warm declaration's create and delete",
    )?;
    println!(
        "  all copies: cold {:.2} s (runs {}), warm {:.2} s (runs {}); plain client, same creates: {:.2} s (runs {})",
        median(&of(|r| r.cold)).as_secs_f64(),
        list(of(|r| r.cold)),
        median(&of(|r| r.warm)).as_secs_f64(),
        list(of(|r| r.warm)),
        median(&plain).as_secs_f64(),
        list(plain.clone()),
    );
    println!(
        "  ratio to the plain client (medians): warm {}, cold {} (includes listing every Secret and Namespace; listed after {:.2} s)",
        ratio_summary(&of(|r| r.warm), &plain_runs),
        ratio_summary(&of(|r| r.cold), &plain_runs),
        median(&of(|r| r.listed)).as_secs_f64(),
    );
    println!(
        "  the plain client with the same watches open: {:.2} s (runs {}); ratio warm {}, cold {}",
        median(&watched_runs.iter().map(|r| r.write).collect::<Vec<_>>()).as_secs_f64(),
        list(watched_runs.iter().map(|r| r.write).collect()),
        ratio_summary(&of(|r| r.warm), &watched_runs),
        ratio_summary(&of(|r| r.cold), &watched_runs),
    );
    println!(
        "  apiserver time per Secret write: kubesync (cold) {:.1} ms, plain client {:.1} ms, with watches {:.1} ms",
        median(&of(|r| r.server)).as_secs_f64() * 1e3,
        median(&plain_runs.iter().map(|r| r.server).collect::<Vec<_>>()).as_secs_f64() * 1e3,
        median(&watched_runs.iter().map(|r| r.server).collect::<Vec<_>>()).as_secs_f64() * 1e3
    );
    println!(
        "  an update of all {sources} sources reaches all copies in {:.2} s (runs {}; apiserver time per Secret write {:.1} ms)",
        median(&of(|r| r.update)).as_secs_f64(),
        list(of(|r| r.update)),
        median(&of(|r| r.update_server)).as_secs_f64() * 1e3,
    );
    println!(
        "  cleanup: deleting the declaration removes its {want} copies in {:.2} s; the plain client deletes {want} in {:.2} s",
        median(&of(|r| r.cleanup)).as_secs_f64(),
        median(&plain_runs.iter().map(|r| r.delete).collect::<Vec<_>>()).as_secs_f64(),
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::trace_if_asked();
    println!("kubesync fan-out benchmarks (concurrency {CONCURRENCY})\n");
    let env = TestEnv::builder()
        .name("bench-fanout")
        .apiserver_arg(common::PROFILING)
        .start()
        .await?;
    // `BENCH_SIZES=300` runs one size only; `BENCH_SIZES=` only the many-sources case.
    let sizes: Vec<usize> = match std::env::var("BENCH_SIZES") {
        Ok(v) => v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse())
            .collect::<Result<_, _>>()?,
        Err(_) => vec![300, 1000],
    };
    for n in sizes {
        run(&env, n).await?;
    }
    let (sources, n) = if common::quick() {
        (QUICK_MANY_SOURCES, QUICK_MANY_NAMESPACES)
    } else {
        (MANY_SOURCES, MANY_NAMESPACES)
    };
    run_many(&env, sources, n).await?;
    Ok(())
}
