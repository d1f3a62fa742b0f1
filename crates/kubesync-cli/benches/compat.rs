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
//! 3. a tenant's patterns, on a control plane of their own: kubesync trusting `apps` (where an
//!    ObjectSync copies the Secret `apps/s` to `dst`), with `--default-service-account
//!    copier`, and 20 namespaces named `aaa…a-NN` (55 `a`s); the tenant's two Secrets in `t1`
//!    are annotated for reflector with 100 patterns each that backtrack exponentially on those
//!    names (a lookahead inside a repetition), and touched once a second. The latency of the
//!    unrelated copy — `apps/s` changed, until `dst/s` shows it (through a watch) — is measured
//!    20 times before and 20 times during the attack (goal: below 1 s during it), with the
//!    operator's CPU seconds in the attack's window and whether it started afresh.
//!
//! `KUBESYNC_BENCH_QUICK=1`: 200 namespaces and 20 sources (400 copies), 5 latencies each side.
//! `KUBESYNC_BENCH_PATTERNS=0` leaves out 3; `KUBESYNC_BENCH_PATTERNS=only` runs only 3.

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
    let patterns = std::env::var("KUBESYNC_BENCH_PATTERNS").unwrap_or_default();
    if patterns == "only" {
        return tenant_patterns(if quick { 5 } else { 20 }).await;
    }
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
    // As in a Pod, the operator's namespace is known: the records of the copies annotations
    // made are kept there. `KUBESYNC_BENCH_BINARY` runs another build.
    let binary = std::env::var_os("KUBESYNC_BENCH_BINARY")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_kubesync").into());
    let mut child = Running(
        Command::new(binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().map_err(|e| anyhow::anyhow!("{e}"))?)
            .args(["--telemetry-address", "none", "--metrics-address", "none"])
            .args(["--compat", "reflector", "--compat", "replicator"])
            .args(["--trusted-namespace", SOURCE_NS])
            .env("POD_NAMESPACE", SOURCE_NS)
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
    drop(child);
    if patterns != "0" {
        tenant_patterns(if quick { 5 } else { 20 }).await?;
    }
    Ok(())
}

/// Scenario 3: the latency of an unrelated copy while a tenant's backtracking patterns are
/// touched once a second (`rounds` latencies before and during).
async fn tenant_patterns(rounds: usize) -> anyhow::Result<()> {
    let err = |e: kubesync_testenv::Error| anyhow::anyhow!("{e}");
    let env = TestEnv::builder()
        .name("bench-patterns")
        .start()
        .await
        .map_err(err)?;
    let client = env.client().map_err(err)?;
    env.install_crds(&kubesync_cli::crd::crds_yaml()?)
        .await
        .map_err(err)?;
    let long: Vec<String> = (0..20)
        .map(|i| format!("{}-{i:02}", "a".repeat(55)))
        .collect();
    let mut names: Vec<String> = ["kubesync-system", "apps", "dst", "t1"]
        .map(String::from)
        .to_vec();
    names.extend(long);
    create_namespaces(&client, &names, None).await?;
    // Every long-named namespace consents to t1's copies: its pushes are decided there.
    for ns in &names[4..] {
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {{name: from-t1, namespace: {ns}}}\nspec:\n  from: [{{namespace: t1}}]\n")).await.map_err(err)?;
    }
    env.apply_yaml("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: copier, namespace: t1}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: copier, namespace: t1}\nrules: [{apiGroups: [\"\"], resources: [secrets], verbs: [get, list, watch]}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: copier, namespace: t1}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: copier}\nsubjects: [{kind: ServiceAccount, name: copier, namespace: t1}]\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: apps}\nstringData: {v: \"0\"}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: s, namespace: apps}\nspec:\n  source: {kind: Secret, name: s}\n  destinations: [{namespace: dst}]\n").await.map_err(err)?;
    let logs = std::env::temp_dir().join(format!("kubesync-patterns-bench-{}", std::process::id()));
    std::fs::create_dir_all(&logs)?;
    let log_path = logs.join("kubesync.log");
    let child = Running(
        Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().map_err(err)?)
            .args(["--telemetry-address", "none", "--metrics-address", "none"])
            .args(["--compat", "reflector", "--trusted-namespace", "apps"])
            .args(["--default-service-account", "copier"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path)?)
            .spawn()?,
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "apps");
    let copies: Api<Secret> = Api::namespaced(client.clone(), "dst");
    // Versions `from + 1 ..= from + rounds` of `apps/s`, each until its copy shows it.
    let latencies = |label: &'static str, from: usize| {
        let (secrets, copies) = (secrets.clone(), copies.clone());
        async move {
            let mut all = Vec::new();
            for version in from + 1..=from + rounds {
                all.push(copy_latency(&secrets, &copies, version).await?);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            all.sort();
            println!(
                "  the unrelated copy {label}: median {:.0} ms, max {:.0} ms over {rounds} changes",
                all[all.len() / 2].as_secs_f64() * 1000.0,
                all[all.len() - 1].as_secs_f64() * 1000.0
            );
            anyhow::Ok(())
        }
    };
    println!(
        "\nscenario 3, a tenant's patterns (goal during the attack: < 1000 ms, no fresh start)"
    );
    copy_latency(&secrets, &copies, 0).await?;
    latencies("before the attack", 0).await?;
    let evil: Vec<String> = (0..100).map(|i| format!("((?=a)a|a)+\\1b{i}")).collect();
    let attack = |i: usize, touch: usize| {
        format!(
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: evil-{i}\n  namespace: t1\n  annotations:\n    reflector.v1.k8s.emberstack.com/reflection-allowed: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-enabled: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-namespaces: '{}'\nstringData: {{touch: \"{touch}\"}}\n",
            evil.join(",")
        )
    };
    let cpu_before = cpu_seconds(&child)?;
    let began = Instant::now();
    let toucher = {
        let env = &env;
        async move {
            for touch in 0.. {
                for i in 0..2 {
                    env.apply_yaml(&attack(i, touch)).await.map_err(err)?;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            anyhow::Ok(())
        }
    };
    tokio::select! {
        r = toucher => r?,
        r = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            latencies("during the attack", rounds).await
        } => r?,
    }
    let cpu = cpu_seconds(&child)? - cpu_before;
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    println!(
        "  the operator's CPU during the attack: {cpu:.1} s in {:.0} s; started afresh: {}",
        began.elapsed().as_secs_f64(),
        if log.contains("starting afresh") {
            "YES"
        } else {
            "no"
        }
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "t1");
    let about: Vec<String> = (events.list(&ListParams::default()).await?.items.into_iter())
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("evil-0"))
        .filter_map(|e| e.note)
        .collect();
    println!("  what kubesync said of the attack: {about:?}");
    println!("  (logs in {})", logs.display());
    Ok(())
}

/// Sets `apps/s` to `version` and waits (at most 60 s) until its copy `dst/s` shows it;
/// returns how long that took.
async fn copy_latency(
    secrets: &Api<Secret>,
    copies: &Api<Secret>,
    version: usize,
) -> anyhow::Result<Duration> {
    use kube::runtime::{WatchStreamExt, watcher};
    let want = version.to_string();
    let shows = move |s: &Secret| {
        s.data
            .as_ref()
            .and_then(|d| d.get("v"))
            .map(|v| v.0.as_slice())
            == Some(want.as_bytes())
    };
    let config = watcher::Config::default().fields("metadata.name=s");
    let mut events = Box::pin(watcher(copies.clone(), config).applied_objects());
    // The watch is open (its first list answered) before the change.
    let first = events.try_next().await?;
    let started = Instant::now();
    let patch = serde_json::json!({"stringData": {"v": version.to_string()}});
    secrets
        .patch(
            "s",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await?;
    if first.as_ref().is_some_and(&shows) && version == 0 {
        return Ok(started.elapsed());
    }
    let deadline = tokio::time::sleep(Duration::from_secs(60));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            e = events.try_next() => match e? {
                Some(copy) if shows(&copy) => return Ok(started.elapsed()),
                Some(_) => {}
                None => anyhow::bail!("the copies' watch ended"),
            },
            () = &mut deadline => anyhow::bail!("the copy did not show version {version} within 60 s"),
        }
    }
}

/// The process's user and system CPU seconds so far (`/proc/<pid>/stat`).
fn cpu_seconds(child: &Running) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.0.id()))?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("short stat"))?
            .parse::<f64>()?)
    };
    // After the command: state is field 3, utime 14, stime 15 (here 0-based from state).
    Ok((ticks(11)? + ticks(12)?) / 100.0)
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
