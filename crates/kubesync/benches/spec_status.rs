//! Spec/status sync benchmarks on local control planes (`make bench`).
//!
//! - convergence: 1000 remote Widgets until each is claimed, created locally and its
//!   generation marks recorded, next to a plain client sending the same writes (finalizer
//!   patch, local create, generation-mark patch per object) with the same concurrency — once
//!   alone and once with the engine's watches open. Each of the three runs [`rounds`] times, in
//!   a rotating order (the clusters grow with every run, which slows later runs), and the
//!   medians are compared. The apiservers' own metrics show how long they took per write;
//! - restart: a second engine over a converged namespace, counting its write requests;
//! - status latency: a local status change until the remote shows it (at idle).
//!
//! `ENGINE_CONCURRENCY=<n>` sets the engine's concurrency (default 16, as the plain client).

use std::time::{Duration, Instant};

// Not every helper is used by every benchmark.
#[allow(dead_code)]
mod common;
use common::Connect;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync::syncer::SyncEngine;
use kubesync::syncers::spec_status::SpecStatusSync;
use kubesync::{Cluster, ClusterStatus};
use kubesync_testenv::{TestEnv, fixtures::WIDGET_CRD};
use tokio::sync::oneshot;

/// Objects per run (`KUBESYNC_BENCH_QUICK`: [`QUICK_N`]).
const FULL_N: usize = 1000;
/// Objects per run of a quick run (CI's `make bench-check`: the invariants, not the speed).
const QUICK_N: usize = 100;
const CONCURRENCY: usize = 16;
/// Runs of each mode (`KUBESYNC_BENCH_QUICK`: one).
const FULL_ROUNDS: usize = 3;

/// Objects per run.
fn objects() -> usize {
    if common::quick() { QUICK_N } else { FULL_N }
}

/// Runs of each mode.
fn rounds() -> usize {
    if common::quick() { 1 } else { FULL_ROUNDS }
}

fn widget_type() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
        "widgets",
    )
}

fn widget(ns: &str, name: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "demo.kubesync.io/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns}, "spec": {"size": 1}})
}

async fn create_widgets(api: &Api<DynamicObject>, ns: &str) {
    futures::stream::iter(0..objects())
        .map(|i| {
            let api = api.clone();
            async move {
                let obj: DynamicObject =
                    serde_json::from_value(widget(ns, &format!("w{i}"))).expect("widget");
                api.create(&PostParams::default(), &obj).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("create widgets");
}

/// CPU time (user + system) used by this process so far.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(") ").next().unwrap_or("").split(' ').collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // Fields after the command: state is index 0, utime 11, stime 12 (clock ticks, 100 Hz).
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// What kubesync writes for N new remote objects, sent by a plain client: finalizer patch,
/// local create, generation-mark patch per object, with the same concurrency.
async fn plain_writes(
    remote: &Api<DynamicObject>,
    local: &Api<DynamicObject>,
) -> anyhow::Result<()> {
    let ns = local.namespace().unwrap_or_default().to_string();
    futures::stream::iter(0..objects())
        .map(|i| {
            let (r, l, ns) = (remote.clone(), local.clone(), ns.clone());
            async move {
                let name = format!("w{i}");
                r.patch(&name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["kubesync.io/sync-local"]}}))).await?;
                let obj: DynamicObject = serde_json::from_value(widget(&ns, &name)).expect("widget");
                let created = l.create(&PostParams::default(), &obj).await?;
                r.patch(&name, &PatchParams::default(), &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                    "kubesync.io/sync-remote-generation": "1",
                    "kubesync.io/sync-local-generation": created.metadata.generation.unwrap_or(1).to_string()}}}))).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    percentile(&sorted, 0.5)
}

/// One measured run: elapsed time and the apiservers' view of its writes.
struct Run {
    elapsed: Duration,
    writes: u64,
    server_mean: Duration,
    /// The Widget requests the apiservers served, by verb and subresource (what a failed
    /// invariant prints).
    kinds: String,
    /// kubesync's runs: the engine's own count of its writes (Namespaces included) and of
    /// its failed reconciles.
    engine: Option<(u64, u64)>,
}

#[derive(Clone, Copy, Debug)]
enum Mode {
    Plain,
    PlainWatched,
    Kubesync,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Plain => "plain client",
            Mode::PlainWatched => "plain client, watches open",
            Mode::Kubesync => "kubesync",
        }
    }
}

struct Bench {
    remote: TestEnv,
    local: TestEnv,
    ar: ApiResource,
    engine_writes: u64,
    engine_reconciles: u64,
    engine_failures: u64,
    engine_cpu: Duration,
    /// Per kubesync run: time until the engine's watches had listed both clusters.
    listed: Vec<Duration>,
}

impl Bench {
    fn engine(&self, prefix: &str) -> SyncEngine<SpecStatusSync> {
        SpecStatusSync::builder(self.ar.clone())
            .namespace_prefix(prefix)
            .concurrency(
                std::env::var("ENGINE_CONCURRENCY")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(CONCURRENCY),
            )
            .build(
                Cluster::new("remote", self.remote.kubesync_client().expect("client")),
                Cluster::new("local", self.local.kubesync_client().expect("client")),
            )
    }

    async fn run(&mut self, mode: Mode, round: usize) -> anyhow::Result<Run> {
        let ns = match mode {
            Mode::Plain => format!("plain-{round}"),
            Mode::PlainWatched => format!("watched-{round}"),
            Mode::Kubesync => format!("bench-{round}"),
        };
        self.remote.create_namespace(&ns).await?;
        let r_api: Api<DynamicObject> =
            Api::namespaced_with(self.remote.kubesync_client()?, &ns, &self.ar);
        create_widgets(&r_api, &ns).await;
        let counting = common::ServerWrites::start(
            vec![
                self.remote.kubesync_client()?,
                self.local.kubesync_client()?,
            ],
            "widgets",
        )
        .await?;
        let mut engine_counts = None;
        let elapsed = match mode {
            Mode::Plain | Mode::PlainWatched => {
                self.local.create_namespace(&ns).await?;
                let l_api: Api<DynamicObject> =
                    Api::namespaced_with(self.local.kubesync_client()?, &ns, &self.ar);
                // The engine's three watches and the benchmark's own observer, drained.
                let watchers = if matches!(mode, Mode::PlainWatched) {
                    let (rc, lc) = (
                        self.remote.kubesync_client()?,
                        self.local.kubesync_client()?,
                    );
                    let cached = common::cached_lists;
                    vec![
                        common::drain(
                            Api::<DynamicObject>::all_with(rc.clone(), &self.ar),
                            cached(),
                        ),
                        common::drain(
                            Api::<DynamicObject>::all_with(lc.clone(), &self.ar),
                            cached(),
                        ),
                        common::drain(
                            Api::<DynamicObject>::all_with(
                                lc,
                                &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                            ),
                            cached(),
                        ),
                        common::drain(
                            Api::<DynamicObject>::namespaced_with(rc, &ns, &self.ar),
                            cached(),
                        ),
                    ]
                } else {
                    Vec::new()
                };
                tokio::time::sleep(Duration::from_millis(300)).await;
                let t = Instant::now();
                plain_writes(&r_api, &l_api).await?;
                let elapsed = t.elapsed();
                for w in watchers {
                    w.abort();
                }
                elapsed
            }
            Mode::Kubesync => {
                let engine = self.engine(&ns);
                let writes = engine.write_counter();
                let (controller, reconciler) = engine.into_parts().await?;
                let ctx = controller.context();
                // Convergence is observed through a watch, started before the engine.
                let converged = tokio::spawn(common::wait_for(
                    r_api.clone(),
                    common::cached_lists(),
                    objects(),
                    |o: &DynamicObject| {
                        o.metadata
                            .annotations
                            .as_ref()
                            .is_some_and(|a| a.contains_key("kubesync.io/sync-local-generation"))
                    },
                ));
                let (stop, stopped) = oneshot::channel::<()>();
                let t = Instant::now();
                let cpu0 = cpu();
                let engine = tokio::spawn(controller.run(reconciler, async {
                    let _ = stopped.await;
                }));
                let listed = {
                    let ctx = ctx.clone();
                    tokio::spawn(async move {
                        let ready = |c: &str| ctx.cluster_status(c) == ClusterStatus::Ready;
                        while !(ready("remote") && ready("local")) {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                        }
                        t.elapsed()
                    })
                };
                converged.await??;
                self.listed.push(listed.await?);
                let elapsed = t.elapsed();
                self.engine_cpu += cpu() - cpu0;
                let _ = stop.send(());
                engine.await??;
                self.engine_writes += writes.writes();
                self.engine_reconciles += ctx.metrics().reconciles();
                self.engine_failures += ctx.metrics().failures();
                engine_counts = Some((writes.writes(), ctx.metrics().failures()));
                elapsed
            }
        };
        if std::env::var_os("BENCH_TRACE").is_some() {
            eprintln!(
                "  {} (round {round}), requests the apiservers served:",
                mode.label()
            );
        }
        let kinds = counting
            .all_since_start()
            .await?
            .into_iter()
            .filter(|((_, resource, _), _)| resource == "widgets")
            .map(|((verb, _, sub), (count, _))| format!("{verb} {sub} {count}"))
            .collect::<Vec<_>>()
            .join(", ");
        let (writes, server_mean) = counting.since_start().await?;
        Ok(Run {
            elapsed,
            writes,
            server_mean,
            kinds,
            engine: engine_counts,
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::trace_if_asked();
    println!(
        "kubesync spec/status benchmarks (N = {}, concurrency = {CONCURRENCY}, {} rounds)\n",
        objects(),
        rounds()
    );
    let (remote, local) = tokio::join!(
        TestEnv::builder().name("bench-remote").start(),
        TestEnv::builder().name("bench-local").start()
    );
    let (remote, local) = (remote?, local?);
    remote.install_crds(WIDGET_CRD).await?;
    local.install_crds(WIDGET_CRD).await?;
    let mut bench = Bench {
        remote,
        local,
        ar: widget_type(),
        engine_writes: 0,
        engine_reconciles: 0,
        engine_failures: 0,
        engine_cpu: Duration::ZERO,
        listed: Vec::new(),
    };

    let modes = [Mode::Plain, Mode::PlainWatched, Mode::Kubesync];
    let mut runs: Vec<Vec<Run>> = modes.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds() {
        // Rotate the order: each mode runs early once and late once.
        for i in 0..modes.len() {
            let m = (i + round) % modes.len();
            let run = bench.run(modes[m], round).await?;
            runs[m].push(run);
        }
    }
    println!(
        "convergence of {} new remote objects (median of {} runs each):",
        objects(),
        rounds()
    );
    let medians: Vec<Duration> = runs
        .iter()
        .map(|r| median(&r.iter().map(|r| r.elapsed).collect::<Vec<_>>()))
        .collect();
    for (m, mode) in modes.iter().enumerate() {
        let all: Vec<String> = runs[m]
            .iter()
            .map(|r| format!("{:.2}", r.elapsed.as_secs_f64()))
            .collect();
        let server: Vec<Duration> = runs[m].iter().map(|r| r.server_mean).collect();
        let writes: u64 = runs[m].iter().map(|r| r.writes).sum::<u64>() / rounds() as u64;
        println!(
            "  {:<28} {:.2} s (runs: {} s); {writes} writes per run, apiserver {:.1} ms per write",
            mode.label(),
            medians[m].as_secs_f64(),
            all.join(", "),
            median(&server).as_secs_f64() * 1e3
        );
    }
    // The benchmark's invariant: kubesync sends exactly the writes the plain client sends for
    // the same objects (finalizer, local object, status), no more.
    let per_run = |m: usize| runs[m].iter().map(|r| r.writes).collect::<Vec<u64>>();
    let described = |m: usize| {
        runs[m]
            .iter()
            .map(|r| match r.engine {
                Some((writes, failed)) => format!(
                    "[{}; the engine counted {writes} writes, {failed} failed reconciles]",
                    r.kinds
                ),
                None => format!("[{}]", r.kinds),
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    anyhow::ensure!(
        per_run(2).iter().all(|w| per_run(0).iter().all(|p| p == w)),
        "kubesync's writes per run {:?} differ from the plain client's {:?}; Widget requests per run: kubesync {}, plain client {}",
        per_run(2),
        per_run(0),
        described(2),
        described(0)
    );
    println!(
        "  ratio kubesync / plain client {:.2}; kubesync / plain client with the same watches open {:.2}",
        medians[2].as_secs_f64() / medians[0].as_secs_f64(),
        medians[2].as_secs_f64() / medians[1].as_secs_f64()
    );
    println!(
        "  kubesync's time includes its start: listing every Widget in both clusters and the local Namespaces took {:.2} s (median)",
        median(&bench.listed).as_secs_f64()
    );
    println!(
        "  kubesync: {} writes, {} reconciles, {} failed in {} runs; CPU of this process {:.2} s per run (2 cores, shared with both control planes)",
        bench.engine_writes,
        bench.engine_reconciles,
        bench.engine_failures,
        rounds(),
        bench.engine_cpu.as_secs_f64() / rounds() as f64
    );

    // Restart over converged state: a new engine over the first kubesync namespace.
    let second = bench.engine("bench-0");
    let writes = second.write_counter();
    let (controller, reconciler) = second.into_parts().await?;
    let ctx = controller.context();
    let (stop, stopped) = oneshot::channel::<()>();
    let t = Instant::now();
    let engine = tokio::spawn(controller.run(reconciler, async {
        let _ = stopped.await;
    }));
    while ctx.metrics().reconciles() < objects() as u64 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "restart with {} objects in sync: all reconciled in {:.2} s with {} write requests",
        objects(),
        t.elapsed().as_secs_f64(),
        writes.writes()
    );
    // The benchmark's invariant, checked in every run (and CI's quick `make bench-check`): a
    // restart over objects in sync writes nothing.
    anyhow::ensure!(
        writes.writes() == 0,
        "a restart over {} objects in sync wrote {} requests; it must write none",
        objects(),
        writes.writes()
    );

    // Status latency at idle, with that engine running.
    let r_api: Api<DynamicObject> =
        Api::namespaced_with(bench.remote.kubesync_client()?, "bench-0", &bench.ar);
    let l_api: Api<DynamicObject> =
        Api::namespaced_with(bench.local.kubesync_client()?, "bench-0", &bench.ar);
    let mut lat = Vec::new();
    for i in 0..20 {
        let name = format!("w{i}");
        let t = Instant::now();
        l_api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": {"round": i}})),
            )
            .await?;
        loop {
            if r_api.get(&name).await?.data["status"]["round"] == i {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        lat.push(t.elapsed());
    }
    lat.sort();
    println!(
        "local status → remote: p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.9).as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3
    );
    let _ = stop.send(());
    engine.await??;
    Ok(())
}
