//! kubesync beside the peer it replaces, rustrial's k8s-object-syncer, on local control
//! planes (`make bench-peer`, part of `make bench`).
//!
//! Both do the same job: keep the Secret `apps/registry` copied into every namespace
//! (`destinations: [{namespace: "*"}]` in each one's ObjectSync), [`NAMESPACES`] of them. Each
//! side runs on a control plane of its own (neither inherits the other's caches or
//! finalizers), [`ROUNDS`] rounds, the sides alternating; each run measures, through a watch on
//! the side's copies opened by the benchmark process before the clock starts:
//!
//! - **create**: from the process's spawn (its declaration exists) until every copy exists
//!   with the source's data;
//! - **RSS** ([`SETTLE`] later, `VmRSS` from `/proc/<pid>/status`);
//! - **update**: from an update of the source's data until every copy holds it;
//! - **new namespace**: from the creation of one more namespace until its copy holds the data;
//! - **RSS and peak** (`VmHWM`) [`SETTLE`] after that.
//!
//! kubesync is the operator binary (`kubesync run`) with the image's malloc settings; the
//! peer is its binary built from its source by `scripts/peer.sh` (which pins the commit and
//! caches the build under `~/.cache/kubesync/peer/`), or the one `KUBESYNC_PEER_BIN` names
//! with the CRD file `KUBESYNC_PEER_CRD`. Without it the benchmark says so and measures
//! nothing. `KUBESYNC_BENCH_QUICK=1` runs one round per side.

#[path = "common/namespaces.rs"]
mod namespaces;
#[path = "common/observer.rs"]
mod observer;
#[path = "common/running.rs"]
mod running;

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kubesync_testenv::TestEnv;
use namespaces::create_namespaces;
use observer::Observer;
use running::{Running, kubesync_run};

/// Destination namespaces (besides the source's and the control plane's own).
const NAMESPACES: usize = 1000;
/// Rounds per side.
const ROUNDS: usize = 3;
/// Time between convergence and the reading of RSS.
const SETTLE: Duration = Duration::from_secs(3);
const SOURCE_NS: &str = "apps";
const SOURCE: &str = "registry";
/// The namespace created once the copies are in place.
const LATE_NS: &str = "t-late";
/// The peer's commit `scripts/peer.sh` builds (its cache directory's name).
const PEER_COMMIT: &str = "a525b1fc02be900e66b7e7fa0444d6f228af7e25";
const MIB: f64 = 1024.0 * 1024.0;

/// The processes compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Kubesync,
    Peer,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Kubesync => "kubesync",
            Side::Peer => "k8s-object-syncer",
        }
    }

    /// The label selector of this side's copies.
    fn copies(self) -> &'static str {
        match self {
            Side::Kubesync => "kubesync.io/managed-by",
            Side::Peer => "app.kubernetes.io/managed-by=rustrial-object-syncer",
        }
    }
}

/// The peer's binary and CRD file.
struct Peer {
    binary: PathBuf,
    crd: PathBuf,
}

impl Peer {
    /// The peer `KUBESYNC_PEER_BIN` and `KUBESYNC_PEER_CRD` name, else the one
    /// `scripts/peer.sh` cached; `None` when there is none.
    fn find() -> Option<Self> {
        let named =
            std::env::var_os("KUBESYNC_PEER_BIN").zip(std::env::var_os("KUBESYNC_PEER_CRD"));
        let peer = match named {
            Some((binary, crd)) => Self {
                binary: binary.into(),
                crd: crd.into(),
            },
            None => {
                let home = std::env::var_os("HOME")?;
                let dir = Path::new(&home)
                    .join(".cache/kubesync/peer")
                    .join(PEER_COMMIT);
                Self {
                    binary: dir.join("rustrial-k8s-object-syncer"),
                    crd: dir.join("crds.yaml"),
                }
            }
        };
        (peer.binary.is_file() && peer.crd.is_file()).then_some(peer)
    }
}

/// One measured run of a side.
#[derive(Clone, Copy, Debug)]
struct Run {
    create: Duration,
    /// `VmRSS` [`SETTLE`] after the create, in bytes.
    rss: f64,
    update: Duration,
    new_namespace: Duration,
    /// `VmRSS` and `VmHWM` [`SETTLE`] after the new namespace's copy, in bytes.
    rss_end: f64,
    peak: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Some(peer) = Peer::find() else {
        println!(
            "kubesync beside rustrial's k8s-object-syncer: not measured — no peer binary (run \
             `PEER_SRC=<a checkout of github.com/rustrial/k8s-object-syncer> scripts/peer.sh`, \
             or set KUBESYNC_PEER_BIN and KUBESYNC_PEER_CRD)"
        );
        return Ok(());
    };
    let quick = std::env::var("KUBESYNC_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let rounds = if quick { 1 } else { ROUNDS };
    let logs = std::env::temp_dir().join(format!("kubesync-peer-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    println!(
        "kubesync beside rustrial's k8s-object-syncer ({}), 1 Secret → {NAMESPACES} namespaces, {rounds} round(s) per side, each on its own control plane (process logs in {})\n",
        peer.binary.display(),
        logs.display()
    );
    let mut runs: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [Side::Peer, Side::Kubesync]
        } else {
            [Side::Kubesync, Side::Peer]
        };
        for side in order {
            let run = measure(side, &peer, &logs, round).await?;
            eprintln!("  round {round} {}: {run:?}", side.name());
            runs.entry(side.name()).or_default().push(run);
        }
    }
    let (k, p) = (
        median(&runs[Side::Kubesync.name()]),
        median(&runs[Side::Peer.name()]),
    );
    let secs = |d: Duration| d.as_secs_f64();
    for (side, m) in [(Side::Kubesync, &k), (Side::Peer, &p)] {
        println!(
            "  {:<18} create {:.2} s, update {:.2} s, new namespace {:.2} s | RSS {:.1} MiB after the create, {:.1} MiB at the end, peak {:.1} MiB",
            side.name(),
            secs(m.create),
            secs(m.update),
            secs(m.new_namespace),
            m.rss / MIB,
            m.rss_end / MIB,
            m.peak / MIB
        );
    }
    let below = k.rss_end < p.rss_end && k.peak < p.peak;
    println!(
        "  kubesync / peer: create {:.2}×, update {:.2}×, new namespace {:.2}×, RSS {:.2}×, peak {:.2}× (goal: RSS and peak below the peer's: {})",
        secs(k.create) / secs(p.create),
        secs(k.update) / secs(p.update),
        secs(k.new_namespace) / secs(p.new_namespace),
        k.rss_end / p.rss_end,
        k.peak / p.peak,
        if below { "met" } else { "MISSED" }
    );
    Ok(())
}

/// One run of `side` on a control plane of its own.
async fn measure(side: Side, peer: &Peer, logs: &Path, round: usize) -> anyhow::Result<Run> {
    let env = TestEnv::builder()
        .name(format!("bench-peer-{}-{round}", side.name()))
        .start()
        .await?;
    let crds = match side {
        Side::Kubesync => kubesync_cli::crd::crds_yaml()?,
        Side::Peer => std::fs::read_to_string(&peer.crd)
            .with_context(|| format!("reading {}", peer.crd.display()))?,
    };
    env.install_crds(&crds).await?;
    let client = env.client()?;
    let mut destinations: Vec<String> = (0..NAMESPACES).map(|i| format!("t-{i}")).collect();
    create_namespaces(&client, &[SOURCE_NS.to_string()], None).await?;
    create_namespaces(&client, &destinations, None).await?;
    let data = |v: &str| BTreeMap::from([("token".to_string(), ByteString(v.as_bytes().to_vec()))]);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), SOURCE_NS);
    let source = Secret {
        metadata: ObjectMeta {
            name: Some(SOURCE.into()),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data("v1")),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &source).await?;
    env.apply_yaml(&declaration(side)).await?;
    destinations.push(LATE_NS.to_string());
    let namespaces: HashSet<String> = destinations.into_iter().collect();
    let observe = |value: &str| {
        Observer::start(
            client.clone(),
            side.copies(),
            BTreeMap::from([(SOURCE.to_string(), data(value))]),
            namespaces.clone(),
        )
    };
    let timeout = Duration::from_secs(600);

    let mut observer = observe("v1");
    observer.wait(timeout, None, |s| s.listed).await?;
    let t = Instant::now();
    let mut process = spawn(side, peer, &env.kubeconfig_path()?, logs)?;
    observer
        .wait(timeout, Some(&mut process), |s| s.done >= NAMESPACES)
        .await
        .with_context(|| format!("{}: the create (logs in {})", side.name(), logs.display()))?;
    let create = t.elapsed();
    tokio::time::sleep(SETTLE).await;
    let (rss, _) = process.memory()?;

    let mut observer = observe("v2");
    observer.wait(timeout, None, |s| s.listed).await?;
    let t = Instant::now();
    let update = serde_json::json!({"data": {"token": ByteString(b"v2".to_vec())}});
    secrets
        .patch(SOURCE, &PatchParams::default(), &Patch::Merge(update))
        .await?;
    observer
        .wait(timeout, Some(&mut process), |s| s.done >= NAMESPACES)
        .await
        .with_context(|| format!("{}: the update", side.name()))?;
    let update = t.elapsed();

    let t = Instant::now();
    create_namespaces(&client, &[LATE_NS.to_string()], None).await?;
    observer
        .wait(timeout, Some(&mut process), |s| s.done > NAMESPACES)
        .await
        .with_context(|| format!("{}: the new namespace", side.name()))?;
    let new_namespace = t.elapsed();
    tokio::time::sleep(SETTLE).await;
    let (rss_end, peak) = process.memory()?;
    process.stop().await;
    Ok(Run {
        create,
        rss,
        update,
        new_namespace,
        rss_end,
        peak,
    })
}

/// The side's declaration: its ObjectSync copying the source into every namespace.
fn declaration(side: Side) -> String {
    let (api_version, source) = match side {
        Side::Kubesync => ("kubesync.io/v1alpha1", "{kind: Secret, name: registry}"),
        Side::Peer => (
            "sync.rustrial.org/v1alpha1",
            "{group: \"\", kind: Secret, name: registry}",
        ),
    };
    format!(
        "apiVersion: {api_version}\nkind: ObjectSync\nmetadata: {{name: {SOURCE}, namespace: {SOURCE_NS}}}\nspec:\n  source: {source}\n  destinations:\n  - namespace: \"*\"\n"
    )
}

/// Spawns `side` against the control plane of `kubeconfig`, its output in `logs`.
fn spawn(side: Side, peer: &Peer, kubeconfig: &Path, logs: &Path) -> anyhow::Result<Running> {
    let log = File::options()
        .create(true)
        .append(true)
        .open(logs.join(format!("{}.log", side.name())))?;
    let mut command = match side {
        Side::Kubesync => {
            let mut c = kubesync_run(kubeconfig, true);
            c.args(["--telemetry-address", "none", "--metrics-address", "none"])
                .args(["--trusted-namespace", SOURCE_NS]);
            c
        }
        Side::Peer => {
            let mut c = Command::new(&peer.binary);
            c.env("KUBECONFIG", kubeconfig)
                .env("RUST_LOG", "warn")
                .env("METRICS_LISTEN_ADDR", "127.0.0.1")
                .env("METRICS_LISTEN_PORT", free_port()?.to_string())
                .env_remove("GLIBC_TUNABLES");
            c
        }
    };
    let child = command
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("spawning {}", side.name()))?;
    Ok(Running(child))
}

/// A loopback port nobody listens on now.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The medians of runs' numbers, each taken separately.
fn median(runs: &[Run]) -> Run {
    let mid = |f: &dyn Fn(&Run) -> f64| {
        let mut v: Vec<f64> = runs.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let secs = |f: &dyn Fn(&Run) -> Duration| Duration::from_secs_f64(mid(&|r| f(r).as_secs_f64()));
    Run {
        create: secs(&|r| r.create),
        rss: mid(&|r| r.rss),
        update: secs(&|r| r.update),
        new_namespace: secs(&|r| r.new_namespace),
        rss_end: mid(&|r| r.rss_end),
        peak: mid(&|r| r.peak),
    }
}
