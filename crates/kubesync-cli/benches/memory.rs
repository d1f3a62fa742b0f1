//! Memory and start-up against unrelated objects, on a local control plane
//! (`make bench-memory`, part of `make bench`).
//!
//! Two processes do the same job — keep a small source Secret in namespace `apps` copied into
//! every namespace carrying the label `memory-bench=dest` — and are measured the same way:
//!
//! - **kubesync**: the real operator binary (`kubesync run`), with an ObjectSync declaring the
//!   copy;
//! - **plain reflector**: the ordinary way a Rust controller does it, this same benchmark
//!   executable re-run with `KUBESYNC_MEMORY_BENCH_ROLE=plain`: `kube::runtime::reflector`
//!   stores over every Secret (full objects) and every Namespace; once both have listed, it
//!   writes each copy with server-side apply (16 at a time), then keeps its watches open. Its
//!   copies are named `<source>-plain` and labelled `memory-bench/plain-copy`, so that they
//!   never meet kubesync's.
//!
//! Scenario 0, the cold start: the first fan-out (one Secret into 100 namespaces) on a
//! just-started control plane, each side on a control plane of its own, the sides alternating,
//! [`COLD_ROUNDS`] per side (a first fan-out takes 60–130 ms, and single rounds vary by ±50%);
//! medians and their ratio (goal ≤ 1.2×). Every control plane is first
//! asked once for each of kubesync's kinds (printed: the apiserver answers the first request
//! for a just-installed CRD's kind after about a second, whoever asks), as a cluster where
//! kubesync was installed before has been.
//!
//! Scenario 1, unrelated objects: 100 destination namespaces and 0, 400 and 2000 unrelated
//! Secrets of 256 KiB each, shaped like Helm release Secrets (type `helm.sh/release.v1`,
//! labels `owner=helm,name=rel-N,status=deployed`), spread over ten `helm-*` namespaces and
//! the source namespace. For each count, each side runs [`ROUNDS`] times, the sides
//! alternating: every copy is deleted (while no process runs; the ObjectSync stays, and kubesync
//! repairs missing copies when it starts), the process is spawned, and the benchmark measures
//! the time from the spawn until all 100 copies exist with the source's data — observed
//! through a watch on the copies' label from the benchmark process, opened before the spawn —
//! then waits [`SETTLE`] and reads the process's `VmRSS` (and its peak, `VmHWM`) from
//! `/proc/<pid>/status`, and stops it (SIGTERM, then SIGKILL after 10 s). Medians are
//! reported, with the goals of issue 11 next to kubesync's: with 400 or 2000 unrelated Secrets,
//! RSS at most 10 MiB above the RSS without them, and time to the first complete fan-out at most
//! 1.2× the time without them.
//!
//! Scenario 2, many synced objects: on a fresh control plane, 10 ObjectSyncs (10 small
//! source Secrets) × 500 namespaces = 5 000 copies, then on another × 1000 namespaces =
//! 10 000 copies; the same measurement (time to all copies, RSS after [`SETTLE`]), once per
//! side — the slope between the two sizes is printed as bytes per copy, both sides, with what
//! 100 000 copies would take (goal ≤ 1.5 KiB a copy) — and at 10 000, once more for kubesync with
//! `--list-strategy list-watch` (plain lists where the apiserver serves streaming ones: the
//! difference is what streaming lists save), and once for kubesync with glibc's default malloc
//! settings; and at 10 000, kubesync started again over the copies its first run made, all
//! in place (what a rolling update's new pod finds: every copy arrives in its first list),
//! measured from the spawn until it holds every copy, has reconciled every ObjectSync and has
//! nothing queued (read from its `/metrics`), then held until its first resync (every
//! ObjectSync reconciled again without an event, a minute after the start) is done, with the
//! writes it sent (none are needed); then started once more over them with
//! `--list-strategy list-watch` (what it does where the apiserver serves no streaming lists,
//! as v1.33 by default: each watch lists first), measured the same way until it is idle.
//! Goal: kubesync's RSS below 32 MiB, its peak included, started afresh and restarted alike,
//! through its first resync.
//!
//! kubesync runs as the container image runs it: with the `GLIBC_TUNABLES` that
//! `scripts/image.sh` sets (read from that script), which make glibc return freed memory to
//! the system instead of keeping it (mmap and trim thresholds of 128 KiB).
//!
//! Scenario 3, a tenant's attacks on memory: kubesync (trusting only `kubesync-system`) runs
//! with one small ObjectSync in the tenant namespace `t1`; then (a) 10 SyncGrants in 10
//! namespaces, each at the schema's limits (100 `from` and 100 `kinds` entries) and padded
//! with 250 KiB of annotations, (b) one ConfigMap of 900 KiB copied 100 times inside `t1`
//! (copies are held with their bulk as digests, so (b) costs kilobytes per copy), and (c) five
//! more such fan-outs at once, and (d) a 16 KiB ConfigMap whose one destination's JSON patch
//! copies `/data` into itself 12 times (each operation doubles the copy). RSS is read after
//! [`SETTLE`] before and after each (goal: each adds less than 16 MiB), and the peak of (b),
//! (c) and (d) from just before each (the process's `VmHWM`, reset then; goals: +32, +64 and
//! +32 MiB); then, over 20 ConfigMaps of 750 KiB in `t1` (15 MiB), (e) one ObjectSync
//! selecting one of them by name, (f) ten selecting all of them, each with a selector of its
//! own, and (g) fifty more such at once (goals: each peak +32 MiB: the sources are held once,
//! whatever the number of selectors, and a selection holds only what it selects).
//! `KUBESYNC_BENCH_TENANT=0` leaves it out.
//!
//! `KUBESYNC_BENCH_QUICK=1` runs a smaller version: 0 and 400 unrelated Secrets, one round,
//! 10 ObjectSyncs × 100 namespaces. The processes' logs are kept in a temporary directory
//! whose path is printed.
//!
//! The plain reflector's binary is this benchmark's (it carries the benchmark's code too);
//! only the pages a process touches count in its RSS, so that costs it little.

#[path = "common/namespaces.rs"]
mod namespaces;
#[path = "common/observer.rs"]
mod observer;
#[path = "common/running.rs"]
mod running;
// The integration tests' helpers, for `request`, `sample` and `free_port`.
#[path = "../tests/common/mod.rs"]
mod test_common;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use kube::runtime::{WatchStreamExt, reflector::Store};
use kubesync_testenv::TestEnv;
use namespaces::create_namespaces;
use observer::Observer;
use running::{Running, kubesync_run};
use test_common::{free_port, request, sample};

/// Environment variable that makes this executable the plain reflector controller.
const ROLE: &str = "KUBESYNC_MEMORY_BENCH_ROLE";
/// For the plain controller: its sources, `namespace/name,…`.
const SOURCES: &str = "KUBESYNC_MEMORY_BENCH_SOURCES";
/// The label (`key=value`) of the destination namespaces.
const DEST_LABEL: (&str, &str) = ("memory-bench", "dest");
/// The label of the plain controller's copies (kubesync's carry `kubesync.io/managed-by`).
const PLAIN_COPY_LABEL: &str = "memory-bench/plain-copy";
/// kubesync's copies' label.
const MANAGED_BY: &str = "kubesync.io/managed-by";
/// The plain controller's copies are named after the source, with this suffix.
const PLAIN_SUFFIX: &str = "-plain";
const SOURCE_NS: &str = "apps";
/// Writes in flight, for the plain controller and for the benchmark's own setup.
const CONCURRENCY: usize = 16;
/// Size of the data of each unrelated Secret.
const UNRELATED_BYTES: usize = 256 * 1024;
/// Namespaces the unrelated Secrets are spread over (besides the source namespace).
const HELM_NAMESPACES: usize = 10;
/// Time between convergence and the reading of RSS.
const SETTLE: Duration = Duration::from_secs(3);
/// Rounds per unrelated-Secret count and side (full size).
const ROUNDS: usize = 3;
/// Rounds per side of the cold start (full size): each costs a control plane of its own
/// (about 12 s), and the first fan-out it measures takes only 60–130 ms.
const COLD_ROUNDS: usize = 7;
/// Destination namespaces of scenario 1.
const DESTINATIONS: usize = 100;
const MIB: f64 = 1024.0 * 1024.0;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var(ROLE).as_deref() == Ok("plain") {
        return plain_controller().await;
    }
    let quick = std::env::var("KUBESYNC_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let size = if quick {
        Size {
            unrelated: vec![0, 400],
            rounds: 1,
            cold_rounds: 1,
            objectsyncs: 10,
            namespaces: 100,
        }
    } else {
        Size {
            unrelated: vec![0, 400, 2000],
            rounds: ROUNDS,
            cold_rounds: COLD_ROUNDS,
            objectsyncs: 10,
            namespaces: 1000,
        }
    };
    // For investigations: other unrelated counts (`KUBESYNC_BENCH_UNRELATED=0,2000`), other
    // cold-start rounds (`KUBESYNC_BENCH_COLD_ROUNDS`, 0: none), no scenario 2
    // (`KUBESYNC_BENCH_SYNCED=0`), kubesync's log level (`KUBESYNC_BENCH_LOG`).
    let mut size = size;
    if let Ok(counts) = std::env::var("KUBESYNC_BENCH_UNRELATED") {
        size.unrelated = counts
            .split(',')
            .filter(|c| !c.trim().is_empty())
            .map(|c| c.trim().parse())
            .collect::<Result<_, _>>()
            .context("KUBESYNC_BENCH_UNRELATED: comma-separated counts")?;
    }
    if let Ok(rounds) = std::env::var("KUBESYNC_BENCH_COLD_ROUNDS") {
        size.cold_rounds = rounds
            .trim()
            .parse()
            .context("KUBESYNC_BENCH_COLD_ROUNDS: a number of rounds (0: no cold start)")?;
    }
    let synced = std::env::var("KUBESYNC_BENCH_SYNCED").as_deref() != Ok("0");
    let logs = std::env::temp_dir().join(format!("kubesync-memory-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    println!(
        "kubesync memory benchmarks{} (process logs in {})\n",
        if quick { ", quick mode" } else { "" },
        logs.display()
    );
    let started = Instant::now();
    if size.cold_rounds > 0 {
        cold_start(&size, &logs).await?;
    }
    unrelated_objects(&size, &logs).await?;
    if synced {
        synced_objects(&size, &logs).await?;
    }
    if std::env::var("KUBESYNC_BENCH_TENANT").as_deref() != Ok("0") {
        tenant_attacks(&logs).await?;
    }
    println!(
        "\nmemory benchmarks done in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What a run measures.
struct Size {
    /// Unrelated Secret counts of scenario 1.
    unrelated: Vec<usize>,
    /// Rounds per count and side in scenario 1.
    rounds: usize,
    /// Rounds per side of the cold start (scenario 0).
    cold_rounds: usize,
    /// ObjectSyncs (and sources) of scenario 2.
    objectsyncs: usize,
    /// Destination namespaces of scenario 2.
    namespaces: usize,
}

/// The processes compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    /// The kubesync binary as the container image runs it (with its malloc settings).
    Kubesync,
    /// The kubesync binary with glibc's default malloc settings (scenario 2 only).
    KubesyncMallocDefaults,
    /// The kubesync binary as the image runs it, with `--list-strategy list-watch`: plain lists
    /// even where the apiserver serves streaming ones (scenario 2 only).
    KubesyncListWatch,
    Plain,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Kubesync => "kubesync",
            Side::KubesyncMallocDefaults => "kubesync-malloc-defaults",
            Side::KubesyncListWatch => "kubesync-list-watch",
            Side::Plain => "plain",
        }
    }

    /// The label selector of this side's copies.
    fn copies(self) -> &'static str {
        match self {
            Side::Kubesync | Side::KubesyncMallocDefaults | Side::KubesyncListWatch => MANAGED_BY,
            Side::Plain => PLAIN_COPY_LABEL,
        }
    }

    /// The name of this side's copy of source `name`.
    fn copy_name(self, name: &str) -> String {
        match self {
            Side::Kubesync | Side::KubesyncMallocDefaults | Side::KubesyncListWatch => {
                name.to_string()
            }
            Side::Plain => format!("{name}{PLAIN_SUFFIX}"),
        }
    }
}

/// The cluster a scenario runs on, and what it copies where.
struct Setup {
    /// The control plane, stopped when the scenario ends.
    _env: TestEnv,
    client: kube::Client,
    kubeconfig: PathBuf,
    logs: PathBuf,
    /// Source Secret name → its data (all in [`SOURCE_NS`]).
    sources: BTreeMap<String, BTreeMap<String, ByteString>>,
    destinations: Vec<String>,
}

/// One measured run of a process.
#[derive(Clone, Copy, Debug)]
struct Run {
    /// From the spawn until every copy existed with the source's data.
    converged: Duration,
    /// `VmRSS` after [`SETTLE`], in bytes.
    rss: f64,
    /// `VmHWM` (peak RSS) then, in bytes.
    peak: f64,
}

/// kubesync started again over its copies ([`Setup::restart`]).
struct Restarted {
    /// Until it holds every copy and has reconciled every ObjectSync.
    started: Run,
    /// Until its first resync is done (`converged`: from the spawn), where it was awaited.
    resynced: Option<Run>,
    /// Write requests it sent in all.
    writes: f64,
}

/// A process's `/metrics`, as text.
struct Metrics(String);

impl Metrics {
    /// The sample of the unlabelled series `name`; -1 if there is none.
    fn gauge(&self, name: &str) -> f64 {
        sample(&self.0, name).unwrap_or(-1.0)
    }

    /// The sum of every sample of `name`, whatever its labels.
    fn sum(&self, name: &str) -> f64 {
        self.0
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|r| r.starts_with(['{', ' ']))
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum()
    }
}

/// Scenario 1: one source, [`DESTINATIONS`] namespaces, growing numbers of unrelated Secrets.
async fn unrelated_objects(size: &Size, logs: &Path) -> anyhow::Result<()> {
    let destinations: Vec<String> = (0..DESTINATIONS).map(|i| format!("dest-{i}")).collect();
    let setup = Setup::start("bench-memory", logs, &["registry"], &destinations).await?;
    let helm: Vec<String> = (0..HELM_NAMESPACES).map(|i| format!("helm-{i}")).collect();
    create_namespaces(&setup.client, &helm, None).await?;
    println!(
        "memory: 1 source Secret → {DESTINATIONS} namespaces; unrelated Secrets of 256 KiB in {} namespaces; median of {} round(s) per side; RSS read {} s after the last copy",
        HELM_NAMESPACES + 1,
        size.rounds,
        SETTLE.as_secs()
    );
    let mut created = 0;
    // The medians without unrelated Secrets, the baseline of the goals.
    let mut baseline: Option<(Run, Run)> = None;
    for &unrelated in &size.unrelated {
        let t = Instant::now();
        create_unrelated(&setup.client, created, unrelated).await?;
        if unrelated > created {
            eprintln!(
                "  created unrelated Secrets {created}..{unrelated} in {:.1} s",
                t.elapsed().as_secs_f64()
            );
        }
        created = created.max(unrelated);
        let (mut ours, mut plain) = (Vec::new(), Vec::new());
        for round in 0..size.rounds {
            let order = if round % 2 == 0 {
                [Side::Kubesync, Side::Plain]
            } else {
                [Side::Plain, Side::Kubesync]
            };
            for side in order {
                let run = setup.run(side).await?;
                eprintln!(
                    "  unrelated={unrelated} round {round} {}: all copies after {:.0} ms, RSS {:.1} MiB (peak {:.1})",
                    side.name(),
                    run.converged.as_secs_f64() * 1e3,
                    run.rss / MIB,
                    run.peak / MIB
                );
                match side {
                    Side::Kubesync | Side::KubesyncMallocDefaults | Side::KubesyncListWatch => {
                        ours.push(run)
                    }
                    Side::Plain => plain.push(run),
                }
            }
        }
        let (k, p) = (median(&ours), median(&plain));
        println!("memory: unrelated={unrelated} × 256 KiB");
        println!(
            "  kubesync          {}",
            side_line(&k, baseline.as_ref().map(|b| &b.0), true, &ours)
        );
        println!(
            "  plain reflector   {}",
            side_line(&p, baseline.as_ref().map(|b| &b.1), false, &plain)
        );
        println!("  kubesync/plain    {}", ratios(&k, &p));
        if unrelated == 0 {
            baseline = Some((k, p));
        }
    }
    Ok(())
}

/// The first fan-out on a just-started control plane, each side on one of its own (so that
/// neither inherits the caches the other's requests warmed): one source Secret into
/// [`DESTINATIONS`] namespaces, [`COLD_ROUNDS`] control planes per side (one in quick mode),
/// the sides alternating. Goal: kubesync at most 1.2× the plain reflector (medians).
async fn cold_start(size: &Size, logs: &Path) -> anyhow::Result<()> {
    let destinations: Vec<String> = (0..DESTINATIONS).map(|i| format!("dest-{i}")).collect();
    let (mut ours, mut plain, mut listing) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..size.cold_rounds {
        let order = if round % 2 == 0 {
            [Side::Plain, Side::Kubesync, Side::KubesyncListWatch]
        } else {
            [Side::KubesyncListWatch, Side::Kubesync, Side::Plain]
        };
        for side in order {
            let setup = Setup::start(
                &format!("bench-cold-{}-{round}", side.name()),
                logs,
                &["registry"],
                &destinations,
            )
            .await?;
            let run = setup.run(side).await?;
            eprintln!(
                "  cold start round {round} {}: all copies after {:.0} ms",
                side.name(),
                run.converged.as_secs_f64() * 1000.0
            );
            match side {
                Side::Plain => plain.push(run),
                Side::KubesyncListWatch => listing.push(run),
                _ => ours.push(run),
            }
        }
    }
    let (k, p) = (median(&ours), median(&plain));
    let ratio = k.converged.as_secs_f64() / p.converged.as_secs_f64();
    // In milliseconds: a first fan-out takes 60–130 ms, so hundredths of a second are too
    // coarse to compare.
    let ms = |run: &Run| run.converged.as_secs_f64() * 1000.0;
    let each = |runs: &[Run]| {
        runs.iter()
            .map(|r| format!("{:.0}", ms(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "cold start: the first fan-out (1 Secret → {DESTINATIONS} namespaces) on a just-started control plane, each side on its own, median of {}: kubesync {:.0} ms [{}], plain reflector {:.0} ms [{}]; {ratio:.2}× (goal ≤ 1.2×: {})",
        size.cold_rounds,
        ms(&k),
        each(&ours),
        ms(&p),
        each(&plain),
        if ratio <= 1.2 { "met" } else { "MISSED" }
    );
    let l = median(&listing);
    println!(
        "  kubesync with --list-strategy list-watch {:.0} ms [{}]; {:.2}×",
        ms(&l),
        each(&listing),
        l.converged.as_secs_f64() / p.converged.as_secs_f64()
    );
    Ok(())
}

/// Scenario 2: `objectsyncs` sources × `namespaces` destinations, no unrelated Secrets.
async fn synced_objects(size: &Size, logs: &Path) -> anyhow::Result<()> {
    // Half the namespaces first (kubesync and the plain reflector only), then all: the slope
    // between the two is what one more copy costs.
    let half = synced_run(size.objectsyncs, size.namespaces / 2, logs, false).await?;
    let full = synced_run(size.objectsyncs, size.namespaces, logs, true).await?;
    let copies = |n: usize| (size.objectsyncs * n) as f64;
    let added = copies(size.namespaces) - copies(size.namespaces / 2);
    let slope = |a: f64, b: f64| (b - a) / added;
    println!(
        "memory per copy (the slope between {} and {} copies): kubesync {:.0} B (peak {:.0} B), plain reflector {:.0} B (peak {:.0} B); 100 000 copies would take about {:.0} MiB with kubesync (goal ≤ 1.5 KiB a copy: {})",
        copies(size.namespaces / 2),
        copies(size.namespaces),
        slope(half.0.rss, full.0.rss),
        slope(half.0.peak, full.0.peak),
        slope(half.1.rss, full.1.rss),
        slope(half.1.peak, full.1.peak),
        (full.0.rss + slope(half.0.rss, full.0.rss) * (100_000.0 - copies(size.namespaces))) / MIB,
        if slope(half.0.rss, full.0.rss) <= 1536.0 {
            "met"
        } else {
            "MISSED"
        }
    );
    Ok(())
}

/// Scenario 2 at one size: `objectsyncs` × `namespaces` copies on a fresh control plane;
/// with `variants`, kubesync also with plain lists and with glibc's malloc defaults. Returns
/// kubesync's run and the plain reflector's.
async fn synced_run(
    objectsyncs: usize,
    namespaces: usize,
    logs: &Path,
    variants: bool,
) -> anyhow::Result<(Run, Run)> {
    let sources: Vec<String> = (0..objectsyncs).map(|i| format!("src-{i}")).collect();
    let names: Vec<&str> = sources.iter().map(String::as_str).collect();
    let destinations: Vec<String> = (0..namespaces).map(|i| format!("t-{i}")).collect();
    let setup = Setup::start(
        &format!("bench-memory-synced-{namespaces}"),
        logs,
        &names,
        &destinations,
    )
    .await?;
    let copies = objectsyncs * namespaces;
    let k = setup.run(Side::Kubesync).await?;
    // Started again over its own copies, all in place (what a rolling update's new pod
    // finds): measured where the variants are, at the larger size.
    let restarted = if variants {
        Some((setup.restart(false).await?, setup.restart(true).await?))
    } else {
        None
    };
    let variants = if variants {
        Some((
            setup.run(Side::KubesyncListWatch).await?,
            setup.run(Side::KubesyncMallocDefaults).await?,
        ))
    } else {
        None
    };
    let p = setup.run(Side::Plain).await?;
    println!(
        "memory: {copies} synced objects ({objectsyncs} ObjectSyncs × {namespaces} namespaces; time: from the spawn to all copies)"
    );
    let goal = if copies >= 10_000 {
        format!(
            " (goal < 32 MiB, peak included: {})",
            if k.peak < 32.0 * MIB { "met" } else { "MISSED" }
        )
    } else {
        String::new()
    };
    println!(
        "  kubesync          RSS {:.1} MiB{goal}, peak {:.1} MiB | all copies after {:.2} s",
        k.rss / MIB,
        k.peak / MIB,
        k.converged.as_secs_f64()
    );
    if let Some((r, listing)) = &restarted
        && let Some(later) = &r.resynced
    {
        let s = &r.started;
        println!(
            "  kubesync, restarted over its {copies} copies  RSS {:.1} MiB, peak {:.1} MiB | every copy held, every ObjectSync reconciled after {:.2} s",
            s.rss / MIB,
            s.peak / MIB,
            s.converged.as_secs_f64()
        );
        println!(
            "    and through its first resync  RSS {:.1} MiB, peak {:.1} MiB (goal < 32 MiB, peak included: {}) | done after {:.0} s; {} writes in all",
            later.rss / MIB,
            later.peak / MIB,
            if later.peak < 32.0 * MIB {
                "met"
            } else {
                "MISSED"
            },
            later.converged.as_secs_f64(),
            r.writes
        );
        // Where the apiserver serves no streaming lists, each watch's first list arrives as
        // one response: every ObjectSync, with its status of every destination, at once.
        let l = &listing.started;
        println!(
            "  kubesync, restarted with --list-strategy list-watch  RSS {:.1} MiB, peak {:.1} MiB | every copy held, every ObjectSync reconciled after {:.2} s; {} writes",
            l.rss / MIB,
            l.peak / MIB,
            l.converged.as_secs_f64(),
            listing.writes
        );
    }
    if let Some((l, d)) = &variants {
        println!(
            "  kubesync, list+watch  RSS {:.1} MiB, peak {:.1} MiB | all copies after {:.2} s",
            l.rss / MIB,
            l.peak / MIB,
            l.converged.as_secs_f64()
        );
        println!(
            "  kubesync, glibc's malloc defaults  RSS {:.1} MiB, peak {:.1} MiB | all copies after {:.2} s",
            d.rss / MIB,
            d.peak / MIB,
            d.converged.as_secs_f64()
        );
    }
    println!(
        "  plain reflector   RSS {:.1} MiB, peak {:.1} MiB | all copies after {:.2} s",
        p.rss / MIB,
        p.peak / MIB,
        p.converged.as_secs_f64()
    );
    println!("  kubesync/plain    {}", ratios(&k, &p));
    Ok((k, p))
}

/// The medians of runs' numbers, each taken separately.
fn median(runs: &[Run]) -> Run {
    let mid = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Run {
        converged: Duration::from_secs_f64(mid(runs
            .iter()
            .map(|r| r.converged.as_secs_f64())
            .collect())),
        rss: mid(runs.iter().map(|r| r.rss).collect()),
        peak: mid(runs.iter().map(|r| r.peak).collect()),
    }
}

/// One side's line of scenario 1: medians, the change from `base` (the medians without
/// unrelated Secrets) with the goals when `goals`, and each round's numbers.
fn side_line(m: &Run, base: Option<&Run>, goals: bool, runs: &[Run]) -> String {
    let goal = |met: bool, what: &str| {
        if goals {
            format!("; goal {what}: {}", if met { "met" } else { "MISSED" })
        } else {
            String::new()
        }
    };
    let (more, slower) = match base {
        Some(base) => {
            let more = (m.rss - base.rss) / MIB;
            let ratio = m.converged.as_secs_f64() / base.converged.as_secs_f64();
            (
                format!(" ({more:+.1} vs 0{})", goal(more <= 10.0, "≤ +10 MiB")),
                format!(" ({ratio:.2}× vs 0{})", goal(ratio <= 1.2, "≤ 1.2×")),
            )
        }
        None => (String::new(), String::new()),
    };
    let rounds = if runs.len() > 1 {
        let each: Vec<String> = runs
            .iter()
            .map(|r| {
                format!(
                    "{:.1} MiB {:.0} ms",
                    r.rss / MIB,
                    r.converged.as_secs_f64() * 1e3
                )
            })
            .collect();
        format!(" [rounds: {}]", each.join(", "))
    } else {
        String::new()
    };
    // In milliseconds: a first fan-out takes 50–150 ms, and its goal is a ratio to another.
    format!(
        "RSS {:.1} MiB{more}, peak {:.1} MiB | first fan-out {:.0} ms{slower}{rounds}",
        m.rss / MIB,
        m.peak / MIB,
        m.converged.as_secs_f64() * 1e3
    )
}

/// kubesync's medians over the plain reflector's.
fn ratios(k: &Run, p: &Run) -> String {
    format!(
        "RSS {:.2}×, time {:.2}×",
        k.rss / p.rss,
        k.converged.as_secs_f64() / p.converged.as_secs_f64()
    )
}

impl Setup {
    /// A control plane with kubesync's CRDs, the source Secrets `sources` in [`SOURCE_NS`],
    /// the labelled namespaces `destinations`, and one ObjectSync per source copying it into
    /// them.
    async fn start(
        name: &str,
        logs: &Path,
        sources: &[&str],
        destinations: &[String],
    ) -> anyhow::Result<Self> {
        let t = Instant::now();
        let env = TestEnv::builder().name(name).start().await?;
        env.install_crds(&kubesync_cli::crd::crds_yaml()?).await?;
        let client = env.client()?;
        // The apiserver answers the first request for a kind whose CRD was just installed
        // after about a second (for any client; measured and printed here), which a cluster
        // with kubesync installed has long paid: each kind is asked once before either side
        // starts, so that neither's first fan-out carries it.
        let mut first = Vec::new();
        for plural in [
            "remoteclusters",
            "resourcesyncs",
            "clusterobjectsyncs",
            "objectsyncs",
        ] {
            let ar = kube::core::ApiResource {
                group: "kubesync.io".into(),
                version: "v1alpha1".into(),
                api_version: "kubesync.io/v1alpha1".into(),
                kind: String::new(),
                plural: plural.into(),
            };
            let api: Api<kube::core::DynamicObject> = Api::all_with(client.clone(), &ar);
            let t = Instant::now();
            api.list(&ListParams::default()).await?;
            first.push(format!("{plural} {:.2} s", t.elapsed().as_secs_f64()));
        }
        eprintln!(
            "  the first request for each just-installed kind: {}",
            first.join(", ")
        );
        create_namespaces(&client, &[SOURCE_NS.to_string()], None).await?;
        create_namespaces(&client, destinations, Some(DEST_LABEL)).await?;
        let api: Api<Secret> = Api::namespaced(client.clone(), SOURCE_NS);
        let mut data = BTreeMap::new();
        for source in sources {
            let value = BTreeMap::from([(
                "token".to_string(),
                ByteString(format!("{source}-t0k3n").into_bytes()),
            )]);
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(source.to_string()),
                    ..Default::default()
                },
                type_: Some("Opaque".into()),
                data: Some(value.clone()),
                ..Default::default()
            };
            api.create(&PostParams::default(), &secret).await?;
            env.apply_yaml(&format!(
                "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {source}, namespace: {SOURCE_NS}}}\nspec:\n  source: {{kind: Secret, name: {source}}}\n  destinations:\n  - namespaceSelector: {{matchLabels: {{{}: {}}}}}\n",
                DEST_LABEL.0, DEST_LABEL.1
            ))
            .await?;
            data.insert(source.to_string(), value);
        }
        eprintln!(
            "  control plane {name}: {} sources, {} destination namespaces, ready in {:.1} s",
            sources.len(),
            destinations.len(),
            t.elapsed().as_secs_f64()
        );
        Ok(Self {
            kubeconfig: env.kubeconfig_path()?,
            _env: env,
            client,
            logs: logs.to_path_buf(),
            sources: data,
            destinations: destinations.to_vec(),
        })
    }

    /// Deletes every copy, spawns `side`, waits until all copies exist, waits [`SETTLE`],
    /// reads the process's memory and stops it.
    async fn run(&self, side: Side) -> anyhow::Result<Run> {
        self.delete_copies().await?;
        let want = self.sources.len() * self.destinations.len();
        let expected: BTreeMap<String, BTreeMap<String, ByteString>> = self
            .sources
            .iter()
            .map(|(name, data)| (side.copy_name(name), data.clone()))
            .collect();
        let mut observer = Observer::start(
            self.client.clone(),
            side.copies(),
            expected,
            self.destinations.iter().cloned().collect(),
        );
        observer
            .wait(Duration::from_secs(120), None, |s| s.listed && s.done == 0)
            .await?;
        // Let the apiserver finish the deletes before the clock starts.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let t = Instant::now();
        let mut process = self.spawn(side)?;
        observer
            .wait(Duration::from_secs(1800), Some(&mut process), |s| {
                s.done >= want
            })
            .await
            .with_context(|| format!("{} (logs in {})", side.name(), self.logs.display()))?;
        let converged = t.elapsed();
        tokio::time::sleep(SETTLE).await;
        let (rss, peak) = process.memory()?;
        process.stop().await;
        Ok(Run {
            converged,
            rss,
            peak,
        })
    }

    /// Starts kubesync again over the copies of its last run, all in place and in sync (what a
    /// rolling update's new pod finds), with its `/metrics` on a loopback port; waits until it
    /// holds every copy, has reconciled every ObjectSync and has nothing queued or running,
    /// waits [`SETTLE`] and reads its memory (`converged`: from the spawn until then); then
    /// waits until it has reconciled every ObjectSync once more without an event (its first
    /// resync, a minute after the start), waits [`SETTLE`] and reads it again, with the writes
    /// it sent in all (none are needed). Stops it.
    async fn restart(&self, list_watch: bool) -> anyhow::Result<Restarted> {
        let want = (self.sources.len() * self.destinations.len()) as f64;
        let declarations = self.sources.len() as f64;
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.logs.join("kubesync-restarted.log"))?;
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let mut command = kubesync_run(&self.kubeconfig, true);
        command
            .args(["--telemetry-address", &address])
            .args(["--metrics-address", &address, "--metrics-insecure"])
            .args(["--trusted-namespace", SOURCE_NS]);
        if list_watch {
            command.args(["--list-strategy", "list-watch"]);
        }
        let t = Instant::now();
        let mut process = Running(
            command
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?,
        );
        let idle = |m: &Metrics| {
            m.gauge("kubesync_queue_depth") == 0.0
                && m.gauge("kubesync_reconciles_in_flight") == 0.0
        };
        let started = self
            .metrics_when(port, &mut process, |m| {
                m.gauge("kubesync_objectsync_copies_held") >= want
                    && m.gauge("kubesync_reconciles_total") >= declarations
                    && idle(m)
            })
            .await?;
        let converged = t.elapsed();
        tokio::time::sleep(SETTLE).await;
        let (rss, peak) = process.memory()?;
        if list_watch {
            process.stop().await;
            return Ok(Restarted {
                started: Run {
                    converged,
                    rss,
                    peak,
                },
                resynced: None,
                writes: started.sum("kubesync_writes_total"),
            });
        }
        let reconciled = started.gauge("kubesync_reconciles_total");
        let resynced = self
            .metrics_when(port, &mut process, |m| {
                m.gauge("kubesync_reconciles_total") >= reconciled + declarations && idle(m)
            })
            .await?;
        tokio::time::sleep(SETTLE).await;
        let (rss_resynced, peak_resynced) = process.memory()?;
        process.stop().await;
        Ok(Restarted {
            started: Run {
                converged,
                rss,
                peak,
            },
            resynced: Some(Run {
                converged: t.elapsed(),
                rss: rss_resynced,
                peak: peak_resynced,
            }),
            writes: resynced.sum("kubesync_writes_total"),
        })
    }

    /// The `/metrics` of `process` (plain HTTP on `port`) once `ready` holds of them, read
    /// every 100 ms for up to ten minutes.
    async fn metrics_when(
        &self,
        port: u16,
        process: &mut Running,
        ready: impl Fn(&Metrics) -> bool,
    ) -> anyhow::Result<Metrics> {
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            anyhow::ensure!(
                process.alive() && Instant::now() < deadline,
                "kubesync, restarted, did not get there (logs in {})",
                self.logs.display()
            );
            if let Some((200, text)) = request(port, "GET", "/metrics").await {
                let metrics = Metrics(text);
                if ready(&metrics) {
                    return Ok(metrics);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn spawn(&self, side: Side) -> anyhow::Result<Running> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.logs.join(format!("{}.log", side.name())))?;
        let mut command = match side {
            Side::Kubesync | Side::KubesyncMallocDefaults | Side::KubesyncListWatch => {
                let mut c = kubesync_run(&self.kubeconfig, side != Side::KubesyncMallocDefaults);
                c.args(["--telemetry-address", "none", "--metrics-address", "none"])
                    .args(["--trusted-namespace", SOURCE_NS]);
                if side == Side::KubesyncListWatch {
                    c.args(["--list-strategy", "list-watch"]);
                }
                c
            }
            Side::Plain => {
                let sources: Vec<String> = self
                    .sources
                    .keys()
                    .map(|name| format!("{SOURCE_NS}/{name}"))
                    .collect();
                let mut c = Command::new(std::env::current_exe()?);
                c.env(ROLE, "plain")
                    .env(SOURCES, sources.join(","))
                    .env("KUBECONFIG", &self.kubeconfig);
                c
            }
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Running(child))
    }

    /// Deletes both sides' copies in every destination namespace.
    async fn delete_copies(&self) -> anyhow::Result<()> {
        futures::stream::iter(self.destinations.iter())
            .map(|ns| {
                let api: Api<Secret> = Api::namespaced(self.client.clone(), ns);
                async move {
                    for side in [Side::Kubesync, Side::Plain] {
                        api.delete_collection(
                            &DeleteParams::default(),
                            &ListParams::default().labels(side.copies()),
                        )
                        .await?;
                    }
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }
}

/// Creates the unrelated Secrets `from..to`: Helm release Secrets of [`UNRELATED_BYTES`]
/// of incompressible data each, spread over the `helm-*` namespaces and the source namespace.
async fn create_unrelated(client: &kube::Client, from: usize, to: usize) -> anyhow::Result<()> {
    futures::stream::iter(from..to)
        .map(|i| {
            let ns = match i % (HELM_NAMESPACES + 1) {
                HELM_NAMESPACES => SOURCE_NS.to_string(),
                k => format!("helm-{k}"),
            };
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            let release = format!("rel-{i}");
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(format!("sh.helm.release.v1.{release}.v1")),
                    labels: Some(BTreeMap::from([
                        ("owner".to_string(), "helm".to_string()),
                        ("name".to_string(), release),
                        ("status".to_string(), "deployed".to_string()),
                        ("version".to_string(), "1".to_string()),
                    ])),
                    ..Default::default()
                },
                type_: Some("helm.sh/release.v1".into()),
                data: Some(BTreeMap::from([(
                    "release".to_string(),
                    ByteString(noise(i as u64, UNRELATED_BYTES)),
                )])),
                ..Default::default()
            };
            async move { api.create(&PostParams::default(), &secret).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// `len` pseudo-random bytes (xorshift64*, seeded by `seed`): data that neither compresses
/// nor repeats between Secrets.
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The plain reflector controller (`KUBESYNC_MEMORY_BENCH_ROLE=plain`): what a Rust
/// controller built the ordinary way with kube-runtime does for the same job.
async fn plain_controller() -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let sources: Vec<(String, String)> = std::env::var(SOURCES)?
        .split(',')
        .filter_map(|s| s.split_once('/'))
        .map(|(ns, name)| (ns.to_string(), name.to_string()))
        .collect();
    let secrets = reflect(Api::<Secret>::all(client.clone()));
    let namespaces = reflect(Api::<Namespace>::all(client.clone()));
    secrets.wait_until_ready().await?;
    namespaces.wait_until_ready().await?;
    let destinations: Vec<String> = namespaces
        .state()
        .iter()
        .filter(|ns| ns.labels().get(DEST_LABEL.0).map(String::as_str) == Some(DEST_LABEL.1))
        .map(|ns| ns.name_any())
        .collect();
    let mut copies = Vec::new();
    for (ns, name) in &sources {
        let source = secrets
            .get(&ObjectRef::new(name).within(ns))
            .ok_or_else(|| anyhow::anyhow!("no source Secret {ns}/{name}"))?;
        let copy_name = format!("{name}{PLAIN_SUFFIX}");
        for dest in &destinations {
            // An ordinary controller leaves copies that are already right alone.
            let current = secrets.get(&ObjectRef::new(&copy_name).within(dest));
            if current.is_some_and(|c| c.data == source.data) {
                continue;
            }
            let copy = Secret {
                metadata: ObjectMeta {
                    name: Some(copy_name.clone()),
                    namespace: Some(dest.clone()),
                    labels: Some(BTreeMap::from([(
                        PLAIN_COPY_LABEL.to_string(),
                        "true".to_string(),
                    )])),
                    ..Default::default()
                },
                type_: source.type_.clone(),
                data: source.data.clone(),
                ..Default::default()
            };
            copies.push(copy);
        }
    }
    let params = PatchParams::apply("memory-bench-plain").force();
    futures::stream::iter(copies)
        .map(|copy| {
            let api: Api<Secret> = Api::namespaced(
                client.clone(),
                copy.metadata.namespace.as_deref().unwrap_or_default(),
            );
            let params = params.clone();
            async move {
                api.patch(&copy.name_any(), &params, &Patch::Apply(&copy))
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    // Keep the watches (and the stores) until stopped.
    std::future::pending::<()>().await;
    Ok(())
}

/// A reflector store over every object of `api`, kept up to date by a background task.
fn reflect<K>(api: Api<K>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(stream.for_each(|_| std::future::ready(())));
    reader
}

/// Scenario 3: the RSS a tenant's grants and copy amplification add to kubesync.
async fn tenant_attacks(logs: &Path) -> anyhow::Result<()> {
    let env = TestEnv::builder().name("bench-tenant").start().await?;
    env.install_crds(&kubesync_cli::crd::crds_yaml()?).await?;
    let client = env.client()?;
    let grantors: Vec<String> = (0..10).map(|i| format!("g{i}")).collect();
    let mut namespaces = vec!["kubesync-system".to_string(), "t1".to_string()];
    namespaces.extend(grantors.iter().cloned());
    create_namespaces(&client, &namespaces, None).await?;
    // t1's ObjectSyncs act as its ServiceAccount `copier` (`--default-service-account`), which
    // may read and write ConfigMaps in t1.
    env.apply_yaml("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: copier, namespace: t1}\nrules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list, watch, create, update, patch, delete]}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: copier, namespace: t1}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: copier}\nsubjects: [{kind: ServiceAccount, name: copier, namespace: t1}]\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: copier, namespace: t1}\n").await?;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: small, namespace: t1}\ndata: {a: \"1\"}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: small, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: small}\n  destinations: [{namespace: t1, name: small-copy}]\n").await?;
    let log = File::options()
        .create(true)
        .append(true)
        .open(logs.join("tenant.log"))?;
    let mut command = kubesync_run(&env.kubeconfig_path()?, true);
    command
        .args(["--telemetry-address", "none", "--metrics-address", "none"])
        .args(["--trusted-namespace", "kubesync-system"])
        .args(["--default-service-account", "copier"]);
    let process = Running(
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?,
    );
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), "t1");
    let until = |what: &'static str, done: Box<dyn Fn(usize) -> bool>, label: Option<String>| {
        let cms = cms.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(300);
            loop {
                let lp = label
                    .as_deref()
                    .map_or_else(ListParams::default, |l| ListParams::default().labels(l));
                let n = cms.list_metadata(&lp).await?.items.len();
                if done(n) {
                    return anyhow::Ok(());
                }
                anyhow::ensure!(Instant::now() < deadline, "{what}: {n} after 300 s");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    until("the small copy", Box::new(|n| n >= 2), None).await?;
    tokio::time::sleep(SETTLE).await;
    let (base, _) = process.memory()?;
    // (a) Ten grants at the schema's limits, padded to the annotation limit.
    let padding = "x".repeat(250 * 1024);
    for g in &grantors {
        let from: Vec<String> = (0..100)
            .map(|i| format!("{{namespace: \"t{i}-{}\"}}", "n".repeat(50)))
            .collect();
        let kinds: Vec<String> = (0..100)
            .map(|i| format!("{{group: \"g{i}.{}\", kind: Kind{i}}}", "d".repeat(200)))
            .collect();
        env.apply_yaml(&format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {{name: huge, namespace: {g}, annotations: {{padding: {padding}}}}}\nspec:\n  from: [{}]\n  kinds: [{}]\n",
            from.join(", "),
            kinds.join(", ")
        ))
        .await?;
    }
    tokio::time::sleep(SETTLE * 2).await;
    let (grants, _) = process.memory()?;
    // (b) A 900 KiB ConfigMap copied 100 times inside t1: its peak from here on.
    let amplify = |name: &str, fill: char| {
        let destinations: Vec<String> = (0..100)
            .map(|i| format!("{{namespace: t1, name: {name}-{i}}}"))
            .collect();
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: t1}}\ndata: {{blob: {}}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: t1}}\nspec:\n  source: {{kind: ConfigMap, name: {name}}}\n  destinations: [{}]\n",
            fill.to_string().repeat(900 * 1024),
            destinations.join(", ")
        )
    };
    process.reset_peak()?;
    env.apply_yaml(&amplify("big", 'b')).await?;
    until(
        "100 copies of the big ConfigMap",
        Box::new(|n| n >= 101),
        Some(MANAGED_BY.to_string()),
    )
    .await?;
    tokio::time::sleep(SETTLE).await;
    let (amplified, peak) = process.memory()?;
    // (c) Five of them at once (five tenants' worth), each of its own content.
    process.reset_peak()?;
    let five: Vec<String> = ['c', 'd', 'e', 'f', 'g']
        .iter()
        .map(|fill| amplify(&format!("big{fill}"), *fill))
        .collect();
    futures::future::try_join_all(five.iter().map(|yaml| env.apply_yaml(yaml))).await?;
    until(
        "600 copies of the big ConfigMaps",
        Box::new(|n| n >= 601),
        Some(MANAGED_BY.to_string()),
    )
    .await?;
    tokio::time::sleep(SETTLE).await;
    let (five_at_once, peak_five) = process.memory()?;
    // (d) A JSON patch of 12 `copy` operations of /data into itself on a 16 KiB ConfigMap (each
    // doubles the copy: 64 MiB if made), refused at the operation that would pass 3 MiB.
    process.reset_peak()?;
    let ops: Vec<String> = (0..12)
        .map(|i| format!("{{op: copy, from: /data, path: /data/d{i}}}"))
        .collect();
    env.apply_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: doubling, namespace: t1}}\ndata: {{blob: {}}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: doubling, namespace: t1}}\nspec:\n  source: {{kind: ConfigMap, name: doubling}}\n  destinations: [{{namespace: t1, name: doubling-copy, patches: [{{json: [{}]}}]}}]\n",
        "d".repeat(16 * 1024),
        ops.join(", ")
    ))
    .await?;
    let syncs: Api<kubesync_cli::crd::ObjectSync> = Api::namespaced(client.clone(), "t1");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let refused = syncs
            .get_opt("doubling")
            .await?
            .and_then(|os| os.status)
            .is_some_and(|st| {
                st.destinations
                    .iter()
                    .any(|d| d.state == kubesync_cli::crd::CopyState::Error)
            });
        if refused {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the doubling patch: no verdict after 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its retries (a destination in error is looked at again every 5 s) within the window.
    tokio::time::sleep(SETTLE.max(Duration::from_secs(6))).await;
    let (doubled, peak_doubling) = process.memory()?;
    let selections = selection_attacks(&env, &process).await?;
    process.stop().await;
    println!("\nscenario 3, a tenant's attacks on memory (goal: each adds < 16 MiB)");
    println!(
        "  kubesync RSS with one small ObjectSync      {:>7.1} MiB",
        base / MIB
    );
    println!(
        "  + 10 SyncGrants at the limits, 250 KiB padded {:>7.1} MiB ({:+.1} MiB)",
        grants / MIB,
        (grants - base) / MIB
    );
    println!(
        "  + a 900 KiB ConfigMap copied 100 times      {:>7.1} MiB ({:+.1} MiB; peak {:.1} MiB, {:+.1} MiB, goal < +32)",
        amplified / MIB,
        (amplified - grants) / MIB,
        peak / MIB,
        (peak - grants) / MIB
    );
    println!(
        "  + five more at once                         {:>7.1} MiB ({:+.1} MiB; peak {:.1} MiB, {:+.1} MiB, goal < +64)",
        five_at_once / MIB,
        (five_at_once - amplified) / MIB,
        peak_five / MIB,
        (peak_five - amplified) / MIB
    );
    println!(
        "  + 12 copy operations doubling a 16 KiB copy  {:>7.1} MiB ({:+.1} MiB; peak {:.1} MiB, {:+.1} MiB, goal < +32)",
        doubled / MIB,
        (doubled - five_at_once) / MIB,
        peak_doubling / MIB,
        (peak_doubling - five_at_once) / MIB
    );
    selections.print(doubled);
    Ok(())
}

/// What scenario 3's attacks by selections measured: RSS after each, and its peak.
struct Selections {
    /// Sources made (20 ConfigMaps of 750 KiB), settled.
    sources: f64,
    /// (e) `names: [one]`: RSS, peak.
    one_name: (f64, f64),
    /// (f) ten selectors over every source: RSS, peak.
    ten: (f64, f64),
    /// (g) fifty more, at once: RSS, peak.
    fifty: (f64, f64),
}

impl Selections {
    fn print(&self, before: f64) {
        let line = |what: &str, (rss, peak): (f64, f64), from: f64| {
            println!(
                "  + {what:<42}{:>7.1} MiB ({:+.1} MiB; peak {:.1} MiB, {:+.1} MiB, goal < +32)",
                rss / MIB,
                (rss - from) / MIB,
                peak / MIB,
                (peak - from) / MIB
            );
        };
        println!(
            "  + 20 ConfigMaps of 750 KiB in t1 (15 MiB)   {:>7.1} MiB ({:+.1} MiB)",
            self.sources / MIB,
            (self.sources - before) / MIB
        );
        line(
            "a selection of one of them by name",
            self.one_name,
            self.sources,
        );
        line(
            "ten selections, ten selectors, all of them",
            self.ten,
            self.one_name.0,
        );
        line("fifty more such selections at once", self.fifty, self.ten.0);
    }
}

/// Scenario 3's attacks by selections (kubesync `process` running in `env`, with t1 as in
/// [`tenant_attacks`]): 15 MiB of ConfigMaps in t1, then (e) one ObjectSync selecting one of
/// them by name, (f) ten selecting all of them with ten different selectors, (g) fifty more
/// at once. Their destinations are a namespace that does not exist (nothing is written: what
/// is measured is what reading the selections holds). Each peak is the process's `VmHWM`,
/// reset just before.
async fn selection_attacks(env: &TestEnv, process: &Running) -> anyhow::Result<Selections> {
    let blob = "s".repeat(750 * 1024);
    for i in 0..20 {
        env.apply_yaml(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: sel-{i}, namespace: t1, labels: {{attack: sel, i: \"{i}\"}}}}\ndata: {{blob: {blob}}}\n"
        ))
        .await?;
    }
    tokio::time::sleep(SETTLE).await;
    let (sources, _) = process.memory()?;
    let selecting = |name: &str, select: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: t1}}\nspec:\n  source: {{kind: ConfigMap, {select}}}\n  destinations: [{{namespace: t1-none, namePrefix: {name}-}}]\n"
        )
    };
    let syncs: Api<kubesync_cli::crd::ObjectSync> = Api::namespaced(env.client()?, "t1");
    // Every declaration named reconciled (its status observes its generation).
    let reconciled = |names: Vec<String>| {
        let syncs = syncs.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(300);
            for name in names {
                loop {
                    let done = (syncs.get_opt(&name).await?)
                        .and_then(|os| Some((os.metadata.generation, os.status?)))
                        .is_some_and(|(g, st)| st.observed_generation == g);
                    if done {
                        break;
                    }
                    anyhow::ensure!(
                        Instant::now() < deadline,
                        "{name}: not reconciled after 300 s"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            anyhow::Ok(())
        }
    };
    // (e) One of them, by name.
    process.reset_peak()?;
    env.apply_yaml(&selecting("by-name", "names: [sel-0]"))
        .await?;
    reconciled(vec!["by-name".into()]).await?;
    tokio::time::sleep(SETTLE).await;
    let one_name = process.memory()?;
    // (f) Ten selectors, each selecting all 20 (`i` not in a value no source has).
    process.reset_peak()?;
    let names: Vec<String> = (0..10).map(|k| format!("ten-{k}")).collect();
    for (k, name) in names.iter().enumerate() {
        let select = format!(
            "selector: {{matchLabels: {{attack: sel}}, matchExpressions: [{{key: i, operator: NotIn, values: [\"x{k}\"]}}]}}"
        );
        env.apply_yaml(&selecting(name, &select)).await?;
    }
    reconciled(names).await?;
    tokio::time::sleep(SETTLE).await;
    let ten = process.memory()?;
    // (g) Fifty more, at once.
    process.reset_peak()?;
    let names: Vec<String> = (0..50).map(|k| format!("fifty-{k}")).collect();
    let yaml: Vec<String> = (names.iter().enumerate())
        .map(|(k, name)| {
            let select = format!(
                "selector: {{matchLabels: {{attack: sel}}, matchExpressions: [{{key: i, operator: NotIn, values: [\"y{k}\"]}}]}}"
            );
            selecting(name, &select)
        })
        .collect();
    futures::future::try_join_all(yaml.iter().map(|y| env.apply_yaml(y))).await?;
    reconciled(names).await?;
    tokio::time::sleep(SETTLE).await;
    let fifty = process.memory()?;
    Ok(Selections {
        sources,
        one_name,
        ten,
        fifty,
    })
}
