//! Annotation-declared syncs at scale (`make bench-compat`, part of `make bench`): the real
//! operator binary (`kubesync run --compat reflector --compat replicator`) on a local control
//! plane with 1000 namespaces and 100 annotated sources — 50 Secrets annotated for reflector,
//! 50 ConfigMaps for kubernetes-replicator — each pushing to the tenth of the namespaces its
//! pattern selects (`ns-\d{3}<k>`): 10 000 copies. The peers crash at a few hundred
//! namespaces with churn (replicator: concurrent map writes; reflector: a stalled event loop);
//! this measures:
//!
//! 1. the time from the spawn until every copy exists (counted by listing the copies'
//!    `kubesync.io/declared-by` label every 250 ms from the benchmark process), and the RSS
//!    and its peak after 3 s of quiet;
//! 2. namespace churn: 100 namespaces deleted and 100 new ones made at once (each gains the
//!    copies of the ten sources that select it): the time until the new ones hold their
//!    copies, and until the copies are exactly those of the namespaces that exist (which
//!    includes kube-controller-manager deleting the namespaces); the RSS after it, and
//!    whether the process is still running.
//!
//! `KUBESYNC_BENCH_QUICK=1`: 200 namespaces and 20 sources (400 copies).

#[path = "common/namespaces.rs"]
mod namespaces;
#[path = "common/running.rs"]
mod running;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kubesync_testenv::TestEnv;
use namespaces::create_namespaces;
use running::Running;

const MIB: f64 = 1024.0 * 1024.0;
const CONCURRENCY: usize = 16;
const SOURCE_NS: &str = "legacy";
const COPY_LABEL: &str = "kubesync.io/declared-by=annotations";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let quick = std::env::var("KUBESYNC_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let (namespaces, sources) = if quick { (200, 20) } else { (1000, 100) };
    println!(
        "compat benchmark{}: {namespaces} namespaces, {sources} annotated sources (half reflector Secrets, half replicator ConfigMaps), each into a tenth of the namespaces",
        if quick { ", quick mode" } else { "" }
    );
    let env = TestEnv::builder()
        .name("bench-compat")
        .with_controller_manager(true)
        .start()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let client = env.client().map_err(|e| anyhow::anyhow!("{e}"))?;
    env.install_crds(&kubesync_cli::crd::crds_yaml()?)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let names: Vec<String> = (0..namespaces).map(|i| format!("ns-{i:04}")).collect();
    create_namespaces(&client, &names, None).await?;
    create_namespaces(&client, &[SOURCE_NS.to_string()], None).await?;
    create_sources(&client, sources).await?;
    let expected = |existing: &[String]| -> usize {
        // Each source k selects the namespaces whose number ends in k % 10.
        (0..sources)
            .map(|k| {
                existing
                    .iter()
                    .filter(|n| n.ends_with(&(k % 10).to_string()))
                    .count()
            })
            .sum()
    };

    let logs = std::env::temp_dir().join(format!("kubesync-compat-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    let log = std::fs::File::create(logs.join("kubesync.log"))?;
    let started = Instant::now();
    let mut child = Running(
        Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().map_err(|e| anyhow::anyhow!("{e}"))?)
            .args(["--telemetry-address", "none", "--metrics-address", "none"])
            .args(["--compat", "reflector", "--compat", "replicator"])
            .args(["--trusted-namespace", SOURCE_NS])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?,
    );
    let want = expected(&names);
    wait_for(&client, want, &mut child, None).await?;
    let converged = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss, peak) = child.memory()?;
    println!(
        "  {want} copies after {:.2} s; RSS {:.1} MiB, peak {:.1} MiB",
        converged.as_secs_f64(),
        rss / MIB,
        peak / MIB
    );

    // Churn: 100 namespaces more, 100 fewer, at once.
    let churn = (namespaces / 10).max(1);
    let added: Vec<String> = (namespaces..namespaces + churn)
        .map(|i| format!("ns-{i:04}"))
        .collect();
    let removed: Vec<String> = names[..churn].to_vec();
    let started = Instant::now();
    let api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(&removed)
        .map(|n| {
            let api = api.clone();
            async move { api.delete(n, &DeleteParams::default()).await.map(drop) }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    create_namespaces(&client, &added, None).await?;
    let want_added = expected(&added);
    wait_for(&client, want_added, &mut child, Some(&added)).await?;
    let added_after = started.elapsed();
    let existing: Vec<String> = names[churn..].iter().chain(&added).cloned().collect();
    let want = expected(&existing);
    wait_for(&client, want, &mut child, None).await?;
    let churned = started.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (rss, peak) = child.memory()?;
    println!(
        "  churn ({churn} namespaces added, {churn} deleted): the new namespaces' {want_added} copies after {:.2} s; {want} copies exactly (the deleted namespaces gone: kube-controller-manager's namespace deletion included) after {:.2} s; RSS {:.1} MiB, peak {:.1} MiB; still running: {}",
        added_after.as_secs_f64(),
        churned.as_secs_f64(),
        rss / MIB,
        peak / MIB,
        if child.alive() { "yes" } else { "NO" }
    );
    println!("  (logs in {})", logs.display());
    Ok(())
}

/// Waits until exactly `want` copies exist (Secrets and ConfigMaps with the annotation
/// label) in the namespaces `within` (all when `None`, and then no namespace may still be
/// terminating; copies in terminating ones never count), failing if the operator exits or
/// 10 minutes pass.
async fn wait_for(
    client: &kube::Client,
    want: usize,
    child: &mut Running,
    within: Option<&[String]>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let params = ListParams::default().labels(COPY_LABEL);
    loop {
        let terminating: Vec<String> = Api::<Namespace>::all(client.clone())
            .list_metadata(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| n.metadata.deletion_timestamp.is_some())
            .filter_map(|n| n.metadata.name)
            .collect();
        let mut namespaces: Vec<Option<String>> = Api::<Secret>::all(client.clone())
            .list_metadata(&params)
            .await?
            .items
            .into_iter()
            .map(|o| o.metadata.namespace)
            .collect();
        namespaces.extend(
            Api::<ConfigMap>::all(client.clone())
                .list_metadata(&params)
                .await?
                .items
                .into_iter()
                .map(|o| o.metadata.namespace),
        );
        let found = namespaces
            .into_iter()
            .flatten()
            .filter(|ns| !terminating.contains(ns))
            .filter(|ns| within.is_none_or(|w| w.contains(ns)))
            .count();
        if found == want && (within.is_some() || terminating.is_empty()) {
            return Ok(());
        }
        anyhow::ensure!(child.alive(), "the operator exited");
        anyhow::ensure!(
            Instant::now() < deadline,
            "{found} of {want} copies after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Source k: a Secret for reflector (k even) or a ConfigMap for replicator (k odd), pushing to
/// the namespaces `ns-NNN<k % 10>`.
async fn create_sources(client: &kube::Client, sources: usize) -> anyhow::Result<()> {
    for k in 0..sources {
        let pattern = format!("ns-\\d{{3}}{}", k % 10);
        let name = format!("src-{k}");
        let data = BTreeMap::from([("value".to_string(), format!("{k}"))]);
        if k % 2 == 0 {
            let annotations = BTreeMap::from([
                (
                    "reflector.v1.k8s.emberstack.com/reflection-allowed".to_string(),
                    "true".to_string(),
                ),
                (
                    "reflector.v1.k8s.emberstack.com/reflection-auto-enabled".to_string(),
                    "true".to_string(),
                ),
                (
                    "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces".to_string(),
                    pattern,
                ),
            ]);
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name),
                    annotations: Some(annotations),
                    ..Default::default()
                },
                string_data: Some(data),
                ..Default::default()
            };
            Api::<Secret>::namespaced(client.clone(), SOURCE_NS)
                .create(&PostParams::default(), &secret)
                .await?;
        } else {
            let annotations = BTreeMap::from([(
                "replicator.v1.mittwald.de/replicate-to".to_string(),
                pattern,
            )]);
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name),
                    annotations: Some(annotations),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            };
            Api::<ConfigMap>::namespaced(client.clone(), SOURCE_NS)
                .create(&PostParams::default(), &map)
                .await?;
        }
    }
    Ok(())
}
