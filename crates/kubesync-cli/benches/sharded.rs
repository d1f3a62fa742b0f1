//! One replica against three sharded ones (`make bench-sharded`, part of `make bench`): the
//! real operator binary, once as `kubesync run` and once as three `kubesync run --sharded`
//! replicas, doing the same work on local control planes and measured the same way.
//!
//! Sharding spreads units (ObjectSyncs, ClusterObjectSyncs, and RemoteClusters with their
//! ResourceSyncs) over the live replicas, so that each holds only its share and the work goes
//! on in parallel. This measures what each replica then holds, what all of them hold together,
//! and whether the work is done sooner, in two scenarios:
//!
//! 1. **Many ObjectSyncs and a few RemoteClusters**, set up as `tests/sharded.rs` does: 60
//!    ObjectSyncs in the trusted namespace `team`, each copying its own ConfigMap into the 100
//!    namespaces labelled `fan-out=yes` (6000 copies), and 6 RemoteClusters pointing at a second
//!    control plane, each with a ResourceSync of Widgets (namespace prefix `r<i>-`: the Widgets
//!    of namespace `r<i>-a` there are synced down into this cluster).
//! 2. **A fleet of 20 RemoteClusters**: 20 remote control planes, one RemoteCluster each,
//!    each with its own 5 namespaces there (`fleet-<i>-<j>`, selected by the label
//!    `kubesync-bench/fleet=fleet-<i>`), and 20 ObjectSyncs in `team`, each with one
//!    destination per RemoteCluster (2000 copies in the remote clusters). Every ObjectSync
//!    reaches every RemoteCluster, so each replica connects to all of them.
//!
//! In each scenario, run A is one `kubesync run`; run B is three `kubesync run --sharded
//! --identity kubesync-<n>` replicas, each acting as the token user of its name, their member
//! Leases in `$POD_NAMESPACE` (`kubesync-system`). Before each run no copy exists (the previous
//! run's are deleted while no process runs; kubesync repairs missing copies when it starts) and,
//! in scenario 1, a new Widget is made in each region namespace. The clock starts at the first
//! spawn. Reported:
//!
//! - the time until every copy existed (in scenario 1, also every new Widget synced down),
//!   counted by metadata watches on the copies from the benchmark process; for B, also the time
//!   until every replica's view was settled (`kubesync_shard_view_settled` 1) and their
//!   `kubesync_shard_units` summed to the number of units, each owned once;
//! - for each process, [`SETTLE`] after that: `VmRSS` and its peak `VmHWM` from
//!   `/proc/<pid>/status`, and from its `/metrics` (plain HTTP, `--metrics-insecure`)
//!   `kubesync_objectsync_watches`, `kubesync_objectsync_copies_held`,
//!   `kubesync_resourcesync_engines` and (B) `kubesync_shard_units`;
//! - the watches the processes hold open on each apiserver: the apiserver's
//!   `apiserver_longrunning_requests{verb="WATCH"}` summed, less its value before the first run.
//!   That gauge has no user label, so B's figure is its three replicas' together.
//!
//! kubesync runs with the container image's `GLIBC_TUNABLES` (read from `scripts/image.sh`), as
//! in `make bench-memory`, so that the RSS figures compare with that benchmark's.
//!
//! `KUBESYNC_BENCH_QUICK=1` runs a smaller version: 12 ObjectSyncs × 10 namespaces and 2
//! RemoteClusters; a fleet of 3 control planes (2 namespaces each) and 4 ObjectSyncs. The processes' logs (and kubeconfigs) are kept in a temporary directory whose
//! path is printed.

#[path = "common/running.rs"]
mod running;
// The integration tests' helpers, for `request`, `sample` and `free_port`.
#[path = "../tests/common/mod.rs"]
mod test_common;

use std::collections::BTreeSet;
use std::fs::File;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, GetParams, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kubesync_testenv::fixtures::WIDGET_CRD;
use kubesync_testenv::{POLL_INTERVAL, TestEnv, TestEnvBuilder};
use running::{Running, kubesync_run};
use test_common::{free_port, request, sample};
use tokio::sync::watch;

/// The sharded replicas' identities (and token users); run A runs as the first.
const REPLICAS: [&str; 3] = ["kubesync-0", "kubesync-1", "kubesync-2"];
/// `$POD_NAMESPACE`: the member Leases and the kubeconfig Secrets.
const SYSTEM: &str = "kubesync-system";
/// The trusted namespace of the sources and ObjectSyncs (no SyncGrants needed).
const TEAM: &str = "team";
/// kubesync's copies carry this label.
const MANAGED_BY: &str = "kubesync.io/managed-by";
/// The label of a fleet RemoteCluster's namespaces, `fleet-<i>`.
const FLEET_LABEL: &str = "kubesync-bench/fleet";
/// Time between convergence and the reading of RSS and metrics.
const SETTLE: Duration = Duration::from_secs(3);
/// The longest any wait of a run may take.
const TIMEOUT: Duration = Duration::from_secs(600);
const MIB: f64 = 1024.0 * 1024.0;

/// What a run measures.
struct Size {
    /// Scenario 1: ObjectSyncs, destination namespaces, RemoteClusters with a ResourceSync.
    syncs: usize,
    namespaces: usize,
    regions: usize,
    /// Scenario 2: control planes, RemoteClusters on each, namespaces of each, ObjectSyncs.
    /// One RemoteCluster per control plane: two RemoteClusters naming one cluster each see
    /// the other's copies as theirs, out of place, and remove them (a first run with 5 per
    /// plane made kubesync create and delete the same copies without end).
    planes: usize,
    per_plane: usize,
    fleet_namespaces: usize,
    fleet_syncs: usize,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::var("KUBESYNC_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let size = if quick {
        Size {
            syncs: 12,
            namespaces: 10,
            regions: 2,
            planes: 3,
            per_plane: 1,
            fleet_namespaces: 2,
            fleet_syncs: 4,
        }
    } else {
        Size {
            syncs: 60,
            namespaces: 100,
            regions: 6,
            planes: 20,
            per_plane: 1,
            fleet_namespaces: 5,
            fleet_syncs: 20,
        }
    };
    let logs = std::env::temp_dir().join(format!("kubesync-sharded-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    println!(
        "kubesync sharded benchmark{}: one replica (A) against three `run --sharded` replicas (B) (process logs in {})\n",
        if quick { ", quick mode" } else { "" },
        logs.display()
    );
    let started = Instant::now();
    many_units(&size, &logs).await?;
    fleet(&size, &logs).await?;
    println!(
        "\nsharded benchmark done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Scenario 1: `syncs` ObjectSyncs × `namespaces` namespaces, `regions` RemoteClusters each
/// with a ResourceSync.
async fn many_units(size: &Size, logs: &Path) -> anyhow::Result<()> {
    let t = Instant::now();
    let (local, regions) = tokio::try_join!(
        with_replica_users(TestEnv::builder().name("bench-sharded")).start(),
        TestEnv::builder().name("bench-sharded-regions").start()
    )?;
    local.install_crds(&kubesync_cli::crd::crds_yaml()?).await?;
    local.install_crds(WIDGET_CRD).await?;
    regions.install_crds(WIDGET_CRD).await?;
    let client = local.client()?;
    let destinations: Vec<String> = (0..size.namespaces)
        .map(|i| format!("dest-{i:03}"))
        .collect();
    for ns in [TEAM, SYSTEM] {
        local.create_namespace(ns).await?;
    }
    local
        .apply_yaml(&labelled_namespaces(&destinations, "fan-out", "yes"))
        .await?;
    create_syncs(
        &local,
        "cm",
        size.syncs,
        "  - namespaceSelector: {matchLabels: {fan-out: \"yes\"}}\n",
    )
    .await?;
    kubeconfig_secret(&client, "regions-kubeconfig", &regions).await?;
    let mut yaml = String::new();
    for i in 0..size.regions {
        regions.create_namespace(&format!("r{i}-a")).await?;
        yaml.push_str(&format!("apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {{name: region-{i}}}\nspec:\n  kubeconfigSecretRef: {{namespace: {SYSTEM}, name: regions-kubeconfig}}\n---\n"));
        yaml.push_str(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {{name: widgets-{i}}}\nspec:\n  resource: {{group: demo.kubesync.io, version: v1, kind: Widget}}\n  remoteCluster: region-{i}\n  namespacePrefix: r{i}-\n---\n"));
    }
    local.apply_yaml(&yaml).await?;
    let bench = Bench::new(
        &local,
        vec![
            ("local".into(), vec![client.clone()]),
            ("regions".into(), vec![regions.client()?]),
        ],
        vec![Copies::watch(client.clone())],
        Work {
            copies: size.syncs * size.namespaces,
            units: size.syncs + size.regions,
            engines: size.regions,
        },
        logs,
    )
    .await?;
    println!(
        "scenario 1: {} ObjectSyncs × {} namespaces ({} copies) and {} RemoteClusters with a ResourceSync each (set up in {:.1} s)",
        size.syncs,
        size.namespaces,
        bench.work.copies,
        size.regions,
        t.elapsed().as_secs_f64()
    );
    let mut outcomes = Vec::new();
    for (run, sharded) in [("a", false), ("b", true)] {
        // A Widget of its own per run in each region namespace, which the run must sync down.
        let widget = format!("w-{run}");
        let yaml: String = (0..size.regions)
            .map(|i| format!("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {{name: {widget}, namespace: r{i}-a}}\nspec: {{size: {i}}}\n---\n"))
            .collect();
        regions.apply_yaml(&yaml).await?;
        let outcome = bench
            .run(&format!("units-{run}"), sharded, || {
                widgets_synced_down(&client, size.regions, &widget)
            })
            .await?;
        outcomes.push(outcome);
        delete_copies(&client, &destinations).await?;
    }
    print_outcomes(&outcomes, true);
    Ok(())
}

/// Scenario 2: `planes × per_plane` RemoteClusters, each with `fleet_namespaces` namespaces of
/// its own, and `fleet_syncs` ObjectSyncs copying into every one of them.
async fn fleet(size: &Size, logs: &Path) -> anyhow::Result<()> {
    let t = Instant::now();
    let local = with_replica_users(TestEnv::builder().name("bench-fleet"))
        .start()
        .await?;
    // Started five at a time: twenty at once do not all answer within a minute on 2 cores.
    let mut planes = Vec::new();
    for batch in (0..size.planes).collect::<Vec<_>>().chunks(5) {
        planes.extend(
            futures::future::try_join_all(batch.iter().map(|c| {
                TestEnv::builder()
                    .name(format!("bench-fleet-{c}"))
                    .startup_timeout(Duration::from_secs(180))
                    .start()
            }))
            .await?,
        );
    }
    local.install_crds(&kubesync_cli::crd::crds_yaml()?).await?;
    let client = local.client()?;
    for ns in [TEAM, SYSTEM] {
        local.create_namespace(ns).await?;
    }
    let clusters = size.planes * size.per_plane;
    // Each plane's fleet namespaces, to delete the copies in between runs.
    let mut namespaces: Vec<Vec<String>> = Vec::new();
    let mut yaml = String::new();
    for (c, plane) in planes.iter().enumerate() {
        let secret = format!("fleet-{c}-kubeconfig");
        kubeconfig_secret(&client, &secret, plane).await?;
        let mut on_plane = Vec::new();
        for i in c * size.per_plane..(c + 1) * size.per_plane {
            let names: Vec<String> = (0..size.fleet_namespaces)
                .map(|j| format!("fleet-{i}-{j}"))
                .collect();
            plane
                .apply_yaml(&labelled_namespaces(
                    &names,
                    FLEET_LABEL,
                    &format!("fleet-{i}"),
                ))
                .await?;
            on_plane.extend(names);
            yaml.push_str(&format!("apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {{name: fleet-{i}}}\nspec:\n  kubeconfigSecretRef: {{namespace: {SYSTEM}, name: {secret}}}\n---\n"));
        }
        namespaces.push(on_plane);
    }
    local.apply_yaml(&yaml).await?;
    let destinations: String = (0..clusters)
        .map(|i| {
            format!(
                "  - {{cluster: fleet-{i}, namespaceSelector: {{matchLabels: {{{FLEET_LABEL}: fleet-{i}}}}}}}\n"
            )
        })
        .collect();
    create_syncs(&local, "fleet-cm", size.fleet_syncs, &destinations).await?;
    let plane_clients: Vec<kube::Client> = planes
        .iter()
        .map(TestEnv::client)
        .collect::<Result<_, _>>()?;
    let bench = Bench::new(
        &local,
        vec![
            ("local".into(), vec![client.clone()]),
            ("fleet".into(), plane_clients.clone()),
        ],
        plane_clients
            .iter()
            .map(|c| Copies::watch(c.clone()))
            .collect(),
        Work {
            copies: size.fleet_syncs * clusters * size.fleet_namespaces,
            units: size.fleet_syncs + clusters,
            engines: 0,
        },
        logs,
    )
    .await?;
    println!(
        "\nscenario 2, a fleet: {clusters} RemoteClusters ({} control planes × {}, {} namespaces each), {} ObjectSyncs each into every RemoteCluster ({} copies; set up in {:.1} s)",
        size.planes,
        size.per_plane,
        size.fleet_namespaces,
        size.fleet_syncs,
        bench.work.copies,
        t.elapsed().as_secs_f64()
    );
    let mut outcomes = Vec::new();
    for (run, sharded) in [("a", false), ("b", true)] {
        let outcome = bench
            .run(&format!("fleet-{run}"), sharded, || async { Ok(true) })
            .await?;
        outcomes.push(outcome);
        for (plane, names) in plane_clients.iter().zip(&namespaces) {
            delete_copies(plane, names).await?;
        }
    }
    print_outcomes(&outcomes, false);
    Ok(())
}

/// The builder with the replicas' token users, members of `system:masters`.
fn with_replica_users(builder: TestEnvBuilder) -> TestEnvBuilder {
    REPLICAS
        .iter()
        .fold(builder, |b, name| b.user(*name, &["system:masters"]))
}

/// What every run of a scenario must reach: copies that exist, units (ObjectSyncs and
/// RemoteClusters) owned, ResourceSyncs running.
struct Work {
    copies: usize,
    units: usize,
    engines: usize,
}

/// A scenario's clusters, its observers and its work.
struct Bench<'a> {
    /// The operator's cluster.
    local: &'a TestEnv,
    /// Apiservers whose open watches are reported, in named groups, with the group's open
    /// watches before the first run.
    apiservers: Vec<(String, Vec<kube::Client>, i64)>,
    /// The copies, one watch per cluster that holds them.
    copies: Vec<Copies>,
    work: Work,
    logs: PathBuf,
}

/// One run's figures.
struct Outcome {
    /// From the first spawn until every copy existed.
    copied: Duration,
    /// From the first spawn until the ResourceSyncs ran and (sharded) the views were settled
    /// with every unit owned once.
    settled: Duration,
    rows: Vec<Row>,
    /// Watches the run's processes held open, by apiserver group.
    watches: Vec<(String, i64)>,
}

/// One process's figures, [`SETTLE`] after convergence.
struct Row {
    name: String,
    /// `VmRSS` and `VmHWM`, in bytes (no peak for the replicas together).
    rss: f64,
    peak: Option<f64>,
    gauges: Gauges,
}

/// The gauges of a process's `/metrics` that the benchmark reads.
struct Gauges {
    objectsync_watches: f64,
    copies_held: f64,
    engines: f64,
    /// Sum of `kubesync_shard_units` over the kinds (absent without `--sharded`).
    units: Option<f64>,
    settled: bool,
}

/// A running `kubesync` and the port of its probes and plain-HTTP `/metrics`.
struct Process {
    name: String,
    port: u16,
    running: Running,
}

impl<'a> Bench<'a> {
    /// Waits until the copy watches have listed, then reads the apiservers' open watches.
    async fn new(
        local: &'a TestEnv,
        apiservers: Vec<(String, Vec<kube::Client>)>,
        copies: Vec<Copies>,
        work: Work,
        logs: &Path,
    ) -> anyhow::Result<Self> {
        until("the copy watches' first lists", &mut [], || async {
            Ok(total(&copies))
        })
        .await?;
        let mut groups = Vec::new();
        for (name, clients) in apiservers {
            let before = open_watches(&clients).await?;
            groups.push((name, clients, before));
        }
        Ok(Self {
            local,
            apiservers: groups,
            copies,
            work,
            logs: logs.to_path_buf(),
        })
    }

    /// One run: spawns one process (or three sharded replicas), waits until every copy exists
    /// and `synced_down` holds, then until the ResourceSyncs run and (sharded) every unit is
    /// owned once under settled views; waits [`SETTLE`], reads the figures and stops the
    /// processes.
    async fn run<F, Fut>(&self, run: &str, sharded: bool, synced_down: F) -> anyhow::Result<Outcome>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = anyhow::Result<bool>>,
    {
        until("the previous run's copies deleted", &mut [], || async {
            Ok((total(&self.copies) == Some(0)).then_some(()))
        })
        .await?;
        let identities = &REPLICAS[..if sharded { REPLICAS.len() } else { 1 }];
        let started = Instant::now();
        let mut processes = identities
            .iter()
            .map(|identity| self.spawn(run, identity, sharded))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let ports: Vec<u16> = processes.iter().map(|p| p.port).collect();
        let want = self.work.copies;
        until(&format!("{want} copies"), &mut processes, || async {
            if total(&self.copies).is_none_or(|n| n < want) {
                return Ok(None);
            }
            Ok(synced_down().await?.then_some(()))
        })
        .await
        .with_context(|| format!("run {run} (logs in {})", self.logs.display()))?;
        let copied = started.elapsed();
        until("the units owned and running", &mut processes, || async {
            let mut all = Vec::new();
            for port in &ports {
                let Some(read) = gauges(*port).await else {
                    return Ok(None);
                };
                all.push(read);
            }
            let engines: f64 = all.iter().map(|g| g.engines).sum();
            let units: f64 = all.iter().filter_map(|g| g.units).sum();
            let shared = all.iter().all(|g| g.settled) && units as usize == self.work.units;
            Ok((engines as usize == self.work.engines && (!sharded || shared)).then_some(()))
        })
        .await
        .with_context(|| format!("run {run} (logs in {})", self.logs.display()))?;
        let settled = started.elapsed();
        tokio::time::sleep(SETTLE).await;
        let mut rows = Vec::new();
        for p in &processes {
            let (rss, peak) = p.running.memory()?;
            let read = gauges(p.port)
                .await
                .ok_or_else(|| anyhow::anyhow!("{}: no answer on /metrics", p.name))?;
            rows.push(Row {
                name: p.name.clone(),
                rss,
                peak: Some(peak),
                gauges: read,
            });
        }
        if sharded {
            let sum = |f: fn(&Row) -> f64| rows.iter().map(f).sum::<f64>();
            rows.push(Row {
                name: "(together)".into(),
                rss: sum(|r| r.rss),
                peak: None,
                gauges: Gauges {
                    objectsync_watches: sum(|r| r.gauges.objectsync_watches),
                    copies_held: sum(|r| r.gauges.copies_held),
                    engines: sum(|r| r.gauges.engines),
                    units: Some(sum(|r| r.gauges.units.unwrap_or(0.0))),
                    settled: true,
                },
            });
        }
        let mut watches = Vec::new();
        for (name, clients, before) in &self.apiservers {
            watches.push((name.clone(), open_watches(clients).await? - before));
        }
        futures::future::join_all(processes.into_iter().map(|p| p.running.stop())).await;
        Ok(Outcome {
            copied,
            settled,
            rows,
            watches,
        })
    }

    /// `kubesync run` as the user `identity` (with `--sharded --identity <identity>` when
    /// `sharded`), its probes and plain-HTTP `/metrics` on a free loopback port.
    fn spawn(&self, run: &str, identity: &str, sharded: bool) -> anyhow::Result<Process> {
        let kubeconfig = self.logs.join(format!("{run}-{identity}.kubeconfig"));
        std::fs::write(&kubeconfig, self.local.kubeconfig_yaml_as(identity)?)?;
        let log = File::create(self.logs.join(format!("{run}-{identity}.log")))?;
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let mut command = kubesync_run(&kubeconfig, true);
        command
            .args(["--telemetry-address", &address])
            .args(["--metrics-address", &address, "--metrics-insecure"])
            .args(["--trusted-namespace", TEAM])
            .env("POD_NAMESPACE", SYSTEM);
        if sharded {
            command.args(["--sharded", "--identity", identity]);
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Process {
            name: if sharded { identity } else { "kubesync" }.to_string(),
            port,
            running: Running(child),
        })
    }
}

/// Checks `check` every [`POLL_INTERVAL`] until it returns `Some`, failing when one of
/// `processes` exits or after [`TIMEOUT`] (`kubesync_testenv::eventually`, with errors
/// instead of panics).
async fn until<T, F, Fut>(what: &str, processes: &mut [Process], mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(found) = check().await? {
            return Ok(found);
        }
        for p in processes.iter_mut() {
            anyhow::ensure!(
                p.running.alive(),
                "{} exited while waiting for {what}",
                p.name
            );
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out after {TIMEOUT:?} waiting for {what}"
        );
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The copies in one cluster, counted by a metadata watch on the ConfigMaps labelled as
/// copies from the benchmark process (one watch rather than repeated lists, which would load
/// the apiserver being measured). Each cluster's only such ConfigMaps are the copies.
struct Copies {
    /// The copies; `None` until the watch's first list is complete.
    seen: watch::Receiver<Option<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Copies {
    fn watch(client: kube::Client) -> Self {
        let (tx, seen) = watch::channel(None);
        let api: Api<PartialObjectMeta<ConfigMap>> = Api::all(client);
        let config = watcher::Config::default().labels(MANAGED_BY).any_semantic();
        let task = tokio::spawn(async move {
            let mut copies = BTreeSet::new();
            let mut listed = false;
            let mut events = std::pin::pin!(watcher::watcher(api, config).default_backoff());
            let key = |m: PartialObjectMeta<ConfigMap>| (m.metadata.namespace, m.metadata.name);
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                match event {
                    Event::Init => {
                        copies.clear();
                        listed = false;
                    }
                    Event::InitDone => listed = true,
                    Event::Apply(m) | Event::InitApply(m) => {
                        copies.insert(key(m));
                    }
                    Event::Delete(m) => {
                        copies.remove(&key(m));
                    }
                }
                tx.send_replace(listed.then_some(copies.len()));
            }
        });
        Self { seen, task }
    }
}

impl Drop for Copies {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The copies counted by all `copies`, once each has listed.
fn total(copies: &[Copies]) -> Option<usize> {
    copies.iter().map(|c| *c.seen.borrow()).sum()
}

/// A process's gauges, `None` while it does not answer.
async fn gauges(port: u16) -> Option<Gauges> {
    let (code, metrics) = request(port, "GET", "/metrics").await?;
    if code != 200 {
        return None;
    }
    let units: Vec<f64> = metrics
        .lines()
        .filter_map(|l| {
            l.strip_prefix("kubesync_shard_units{")?
                .rsplit_once(' ')?
                .1
                .parse()
                .ok()
        })
        .collect();
    Some(Gauges {
        objectsync_watches: sample(&metrics, "kubesync_objectsync_watches")?,
        copies_held: sample(&metrics, "kubesync_objectsync_copies_held")?,
        engines: sample(&metrics, "kubesync_resourcesync_engines")?,
        units: (!units.is_empty()).then(|| units.iter().sum()),
        settled: sample(&metrics, "kubesync_shard_view_settled") == Some(1.0),
    })
}

/// Open watches on these apiservers together: their `apiserver_longrunning_requests` gauges
/// with `verb="WATCH"`, summed over resources.
async fn open_watches(clients: &[kube::Client]) -> anyhow::Result<i64> {
    let mut open = 0.0;
    for client in clients {
        let request = kube::core::Request::new("").get("metrics", &GetParams::default())?;
        let text = client.request_text(request).await?;
        open += text
            .lines()
            .filter_map(|line| {
                let (labels, value) = line
                    .strip_prefix("apiserver_longrunning_requests{")?
                    .rsplit_once("} ")?;
                labels
                    .split(',')
                    .any(|kv| kv == "verb=\"WATCH\"")
                    .then_some(value)?
                    .trim()
                    .parse::<f64>()
                    .ok()
            })
            .sum::<f64>();
    }
    Ok(open as i64)
}

/// Prints a scenario's runs (A, then B) as a table, and how B compares with A.
fn print_outcomes(outcomes: &[Outcome], resource_syncs: bool) {
    println!(
        "  {:<22} {:<11} {:>8} {:>9} {:>18} {:>12} {:>14} {:>6}",
        "run",
        "process",
        "RSS MiB",
        "peak MiB",
        "ObjectSync watches",
        "copies held",
        "ResourceSyncs",
        "units"
    );
    for (outcome, run) in outcomes.iter().zip(["A: one replica", "B: three sharded"]) {
        for (i, r) in outcome.rows.iter().enumerate() {
            let g = &r.gauges;
            println!(
                "  {:<22} {:<11} {:>8.1} {:>9} {:>18} {:>12} {:>14} {:>6}",
                if i == 0 { run } else { "" },
                r.name,
                r.rss / MIB,
                r.peak.map_or("-".into(), |p| format!("{:.1}", p / MIB)),
                g.objectsync_watches,
                g.copies_held,
                g.engines,
                g.units.map_or("-".into(), |u| u.to_string()),
            );
        }
    }
    for (outcome, run) in outcomes.iter().zip(["A", "B"]) {
        let ready = match (run, resource_syncs) {
            ("B", _) => Some("views settled, every unit owned once"),
            (_, true) => Some("every ResourceSync running"),
            _ => None,
        };
        let ready = ready.map_or(String::new(), |r| {
            format!(", {r} after {:.2} s", outcome.settled.as_secs_f64())
        });
        let watches: Vec<String> = outcome
            .watches
            .iter()
            .map(|(name, n)| format!("{name} {n:+}"))
            .collect();
        println!(
            "  {run}: every copy{} after {:.2} s{ready}; open watches: {}",
            if resource_syncs { " and Widget" } else { "" },
            outcome.copied.as_secs_f64(),
            watches.join(", ")
        );
    }
    if let [a, b] = outcomes {
        // B's rows: the replicas, then the together row.
        let (replicas, together) = b.rows.split_at(b.rows.len() - 1);
        let largest = replicas.iter().map(|r| r.rss).fold(0.0, f64::max);
        println!(
            "  B/A: time to every copy {:.2}×, RSS of the largest replica {:.2}×, RSS together {:.2}×",
            b.copied.as_secs_f64() / a.copied.as_secs_f64(),
            largest / a.rows[0].rss,
            together[0].rss / a.rows[0].rss,
        );
    }
}

/// The manifests of the namespaces `names`, labelled `key=value`.
fn labelled_namespaces(names: &[String], key: &str, value: &str) -> String {
    names
        .iter()
        .map(|n| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {n}, labels: {{{key}: \"{value}\"}}}}\n---\n"))
        .collect()
}

/// `count` source ConfigMaps `<prefix>-NN` in [`TEAM`], and an ObjectSync of the same name
/// for each, copying it to `destinations` (the YAML list entries under `destinations:`).
async fn create_syncs(
    env: &TestEnv,
    prefix: &str,
    count: usize,
    destinations: &str,
) -> anyhow::Result<()> {
    let mut yaml = String::new();
    for i in 0..count {
        let name = format!("{prefix}-{i:02}");
        yaml.push_str(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {TEAM}}}\ndata: {{index: \"{i}\"}}\n---\n"));
        yaml.push_str(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: {TEAM}}}\nspec:\n  source: {{kind: ConfigMap, name: {name}}}\n  destinations:\n{destinations}---\n"));
    }
    env.apply_yaml(&yaml).await?;
    Ok(())
}

/// The Secret `name` in [`SYSTEM`] holding `of`'s admin kubeconfig.
async fn kubeconfig_secret(client: &kube::Client, name: &str, of: &TestEnv) -> anyhow::Result<()> {
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": SYSTEM},
        "stringData": {"kubeconfig": of.kubeconfig_yaml()},
    }))?;
    Api::<Secret>::namespaced(client.clone(), SYSTEM)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// Deletes kubesync's copies in `namespaces`.
async fn delete_copies(client: &kube::Client, namespaces: &[String]) -> anyhow::Result<()> {
    let copies = ListParams::default().labels(MANAGED_BY);
    let copies = &copies;
    futures::future::try_join_all(namespaces.iter().map(|ns| {
        let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
        async move {
            api.delete_collection(&DeleteParams::default(), copies)
                .await
        }
    }))
    .await?;
    Ok(())
}

/// Whether the Widget `name` of every region namespace `r<i>-a` exists in the local cluster.
async fn widgets_synced_down(
    client: &kube::Client,
    regions: usize,
    name: &str,
) -> anyhow::Result<bool> {
    let gvk = GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget");
    for i in 0..regions {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &format!("r{i}-a"),
            &ApiResource::from_gvk(&gvk),
        );
        if api.get_opt(name).await?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}
