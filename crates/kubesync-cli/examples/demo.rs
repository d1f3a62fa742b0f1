//! `make demo`: two local control planes and kubesync between them, narrated.
//!
//! Starts clusters `east` and `west` (real etcd + kube-apiserver processes; west also runs
//! kube-controller-manager). Part 1 runs the runtime's copy example from east to west. Part 2
//! runs the kubesync operator (the code of `kubesync run`) in west with a `RemoteCluster` for
//! east and a `ResourceSync` for a demo `Widget` CRD: objects created on east come down, status
//! written in west goes up, deletion on east cleans up west. Part 3 has the same operator keep a
//! Secret in sync in every team namespace with an `ObjectSync`, and copies ClusterRoles from
//! west to east with a `ClusterObjectSync`, takes over objects annotated for reflector and
//! kubernetes-replicator with no manifest change (`--compat`), and pulls a ConfigMap from east
//! as from a hub (`spec.source.cluster`). Everything is stopped and removed at the end.
//!
//! With `KUBESYNC_DEMO_METRICS=<file>` (as `make dashboard` runs it), the operator's `/metrics`
//! are sampled every 50 ms while it runs and written to that file, one JSON object a line
//! (`t`: seconds since the operator started, `step` and `title`: the step being narrated,
//! `metrics`: the Prometheus text); `scripts/dashboard.py` charts them.

#[allow(dead_code)]
#[path = "../../kubesync/examples/copy.rs"]
mod copy;

use std::future::Future;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync::Cluster;
use kubesync_cli::crd::{ObjectSync, RemoteCluster, ResourceSync};
use kubesync_cli::operator::Operator;
use kubesync_testenv::fixtures::WIDGET_CRD;
use kubesync_testenv::{TestEnv, merged_kubeconfig};

const NS: &str = "demo";

/// The step being narrated, for the metrics samples.
static NARRATED: Mutex<(u32, String)> = Mutex::new((0, String::new()));

fn step(n: u32, text: &str) {
    *NARRATED.lock().unwrap_or_else(|e| e.into_inner()) = (n, text.to_string());
    println!("\n\x1b[1m{n}. {text}\x1b[0m");
}

/// Samples the operator's `/metrics` every 50 ms into `KUBESYNC_DEMO_METRICS` (when set)
/// until `stop` fires; returns the number of samples written.
fn sample_metrics(
    operator: Arc<Operator>,
) -> Option<(
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<usize>>,
)> {
    let path = std::env::var_os("KUBESYNC_DEMO_METRICS")?;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let file = std::fs::File::create(&path)
            .with_context(|| format!("create {}", path.to_string_lossy()))?;
        let mut out = std::io::BufWriter::new(file);
        let start = Instant::now();
        let mut every = tokio::time::interval(Duration::from_millis(50));
        let mut written = 0;
        loop {
            tokio::select! {
                _ = every.tick() => {}
                _ = &mut stopped => break,
            }
            let metrics = kubesync_cli::telemetry::metrics(&operator).await?;
            let (step, title) = NARRATED.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let line = serde_json::json!({
                "t": start.elapsed().as_secs_f64(),
                "step": step,
                "title": title,
                "metrics": metrics,
            });
            writeln!(out, "{line}")?;
            written += 1;
        }
        out.flush()?;
        Ok(written)
    });
    Some((stop, task))
}

fn cm(name: &str, copy: bool, data: &[(&str, &str)]) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    if copy {
        labels.insert(copy::COPY_LABEL.into(), "true".into());
    }
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "data": data.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect::<serde_json::Map<_, _>>(),
    })
}

async fn show(label: &str, api: &Api<ConfigMap>, name: &str) -> anyhow::Result<()> {
    match api.get_opt(name).await? {
        Some(c) => println!(
            "   {label:<5} {NS}/{name}: data={:?}",
            c.data.unwrap_or_default()
        ),
        None => println!("   {label:<5} {NS}/{name}: (absent)"),
    }
    Ok(())
}

async fn color(api: &Api<ConfigMap>, name: &str) -> anyhow::Result<Option<String>> {
    Ok(api
        .get_opt(name)
        .await?
        .and_then(|c| c.data)
        .and_then(|d| d.get("color").cloned()))
}

async fn wait<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    while !check().await? {
        if start.elapsed() > Duration::from_secs(30) {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("   ✓ {what} ({} ms)", start.elapsed().as_millis());
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .without_time()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(
                    "warn,copy=info,kubesync::syncers::spec_status=info,kubesync_cli=info",
                )
            }),
        )
        .init();
    println!("kubesync demo");
    println!(
        "Part 1 — the multi-cluster runtime: copying ConfigMaps labelled {}=true from east to west",
        copy::COPY_LABEL
    );

    step(
        1,
        "Starting two local control planes (etcd + kube-apiserver each)",
    );
    let started = Instant::now();
    let (east, west) = tokio::join!(
        TestEnv::builder().name("east").start(),
        TestEnv::builder()
            .name("west")
            .with_controller_manager(true)
            .start()
    );
    let (east, west) = (east.context("start east")?, west.context("start west")?);
    println!(
        "   east at {}, west at {} — ready in {:.1} s",
        east.server(),
        west.server(),
        started.elapsed().as_secs_f64()
    );
    let kubeconfig = east.dir().join("demo.kubeconfig");
    std::fs::write(&kubeconfig, merged_kubeconfig(&[&east, &west]))?;
    println!(
        "   kubeconfig with contexts east and west: {}",
        kubeconfig.display()
    );

    let source = Cluster::from_kubeconfig_file(&kubeconfig, Some("east")).await?;
    let target = Cluster::from_kubeconfig_file(&kubeconfig, Some("west")).await?;
    east.create_namespace(NS).await?;
    let east_cms: Api<ConfigMap> = Api::namespaced(source.client().clone(), NS);
    let west_cms: Api<ConfigMap> = Api::namespaced(target.client().clone(), NS);

    step(
        2,
        "Starting the copy controller (kubesync runtime: one queue, watches in both clusters)",
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(copy::run_copy(source, target, async {
        let _ = stopped.await;
    }));
    let apply = PatchParams::apply("kubesync-demo").force();

    step(
        3,
        "Creating ConfigMap app-settings (labelled) and local-only (not labelled) in east",
    );
    east_cms
        .patch(
            "app-settings",
            &apply,
            &Patch::Apply(cm("app-settings", true, &[("color", "blue")])),
        )
        .await?;
    east_cms
        .patch(
            "local-only",
            &apply,
            &Patch::Apply(cm("local-only", false, &[("x", "1")])),
        )
        .await?;
    wait(
        "app-settings appears in west (namespace created there too)",
        || async { Ok(west_cms.get_opt("app-settings").await?.is_some()) },
    )
    .await?;
    show("east", &east_cms, "app-settings").await?;
    show("west", &west_cms, "app-settings").await?;
    show("west", &west_cms, "local-only").await?;

    step(4, "Updating app-settings in east: color=green");
    east_cms
        .patch(
            "app-settings",
            &apply,
            &Patch::Apply(cm("app-settings", true, &[("color", "green")])),
        )
        .await?;
    wait("the copy in west follows", || async {
        Ok(color(&west_cms, "app-settings").await?.as_deref() == Some("green"))
    })
    .await?;
    show("west", &west_cms, "app-settings").await?;

    step(
        5,
        "Someone edits the copy in west by hand (color=red): drift",
    );
    west_cms
        .patch(
            "app-settings",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"color": "red"}})),
        )
        .await?;
    wait("kubesync reverts the drift", || async {
        Ok(color(&west_cms, "app-settings").await?.as_deref() == Some("green"))
    })
    .await?;
    show("west", &west_cms, "app-settings").await?;

    step(6, "Someone deletes the copy in west");
    west_cms
        .delete("app-settings", &DeleteParams::default())
        .await?;
    wait("kubesync recreates it", || async {
        Ok(west_cms.get_opt("app-settings").await?.is_some())
    })
    .await?;

    step(7, "Deleting the source in east");
    east_cms
        .delete("app-settings", &DeleteParams::default())
        .await?;
    wait("the copy in west is deleted", || async {
        Ok(west_cms.get_opt("app-settings").await?.is_none())
    })
    .await?;
    show("east", &east_cms, "app-settings").await?;
    show("west", &west_cms, "app-settings").await?;

    step(
        8,
        "Stopping the copy controller (it finishes its work in flight)",
    );
    let _ = stop.send(());
    controller.await??;

    part2(&east, &west).await?;

    step(31, "Stopping the control planes");
    drop((east, west));
    println!("   done: processes stopped, temporary directories removed.");
    Ok(())
}

async fn count_copies(env: &TestEnv, name: &str) -> anyhow::Result<usize> {
    let all: Api<Secret> = Api::all(env.client()?);
    Ok(all
        .list(&kube::api::ListParams::default().labels("kubesync.io/managed-by"))
        .await?
        .items
        .iter()
        .filter(|s| s.metadata.name.as_deref() == Some(name))
        .count())
}

/// Waits (at most 10 s) for an Event with this reason on the ObjectSync `registry`.
async fn wait_for_event(
    events: &Api<k8s_openapi::api::events::v1::Event>,
    reason: &str,
) -> anyhow::Result<k8s_openapi::api::events::v1::Event> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("registry")
            });
        if let Some(e) = found {
            return Ok(e);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no {reason} event on the ObjectSync"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn part3(east: &TestEnv, west: &TestEnv) -> anyhow::Result<()> {
    println!(
        "\nPart 3 — ObjectSync: one Secret kept in sync in every team namespace (same operator)"
    );
    step(
        17,
        "Creating namespaces team-a … team-e (labelled team=true) and a source Secret in platform",
    );
    for ns in ["platform", "team-a", "team-b", "team-c", "team-d", "team-e"] {
        let labels = if ns.starts_with("team-") {
            "{team: \"true\"}"
        } else {
            "{}"
        };
        west.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {labels}}}\n"
        ))
        .await?;
    }
    west.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: platform, labels: {app: registry}}\ntype: Opaque\nstringData: {token: first}\n").await?;
    west.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: team-e}\ntype: Opaque\nstringData: {token: team-e-owns-this}\n").await?;
    println!("   team-e already has its own Secret named registry (kubesync must not touch it)");

    step(
        18,
        "An ObjectSync in platform: registry → every namespace labelled team=true",
    );
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: platform}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations:\n  - namespaceSelector: {matchLabels: {team: \"true\"}}\n").await?;
    let syncs: Api<ObjectSync> = Api::namespaced(west.client()?, "platform");
    wait("4 copies written, 1 conflict reported", || async {
        Ok(syncs
            .get("registry")
            .await?
            .status
            .is_some_and(|s| s.total == 5 && s.in_sync == 4))
    })
    .await?;
    for d in syncs
        .get("registry")
        .await?
        .status
        .unwrap_or_default()
        .destinations
    {
        println!(
            "   {:<7} {:<7} {:<9} {}",
            d.cluster, d.namespace, d.state, d.message
        );
    }
    // The same news as a Kubernetes Event on the ObjectSync (kubectl describe objectsync).
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(west.client()?, "platform");
    let found = wait_for_event(&events, "NotAllSynced").await?;
    println!(
        "   event: {} {}: {}",
        found.type_.unwrap_or_default(),
        found.reason.unwrap_or_default(),
        found.note.unwrap_or_default()
    );

    step(19, "A new namespace team-f appears");
    west.apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-f, labels: {team: \"true\"}}\n",
    )
    .await?;
    let team_f: Api<Secret> = Api::namespaced(west.client()?, "team-f");
    wait("team-f gets its copy", || async {
        Ok(team_f.get_opt("registry").await?.is_some())
    })
    .await?;

    step(20, "The source changes: token=second");
    west.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: platform, labels: {app: registry}}\ntype: Opaque\nstringData: {token: second}\n").await?;
    wait("every copy follows", || async {
        let all: Api<Secret> = Api::all(west.client()?);
        let copies = all
            .list(&kube::api::ListParams::default().labels("kubesync.io/managed-by"))
            .await?
            .items;
        Ok(copies.len() == 5
            && copies.iter().all(|c| {
                c.data
                    .as_ref()
                    .and_then(|d| d.get("token"))
                    .map(|b| b.0.as_slice())
                    == Some(b"second".as_slice())
            }))
    })
    .await?;

    step(21, "Someone deletes the copy in team-b");
    Api::<Secret>::namespaced(west.client()?, "team-b")
        .delete("registry", &DeleteParams::default())
        .await?;
    wait("it is back", || async {
        Ok(Api::<Secret>::namespaced(west.client()?, "team-b")
            .get_opt("registry")
            .await?
            .is_some())
    })
    .await?;

    step(
        22,
        "Report mode: registry only reports; alice edits team-a's copy, and the source changes",
    );
    let merge = |v: serde_json::Value| Patch::Merge(v);
    let set_mode = |mode: &'static str| {
        let syncs = syncs.clone();
        async move {
            syncs
                .patch(
                    "registry",
                    &PatchParams::default(),
                    &merge(serde_json::json!({"spec": {"mode": mode}})),
                )
                .await
        }
    };
    set_mode("Report").await?;
    let reporting = |s: &kubesync_cli::crd::ObjectSyncStatus| {
        s.conditions.iter().any(|c| c.reason == "Reporting")
    };
    wait("registry is Reporting", || async {
        Ok(syncs
            .get("registry")
            .await?
            .status
            .is_some_and(|s| reporting(&s)))
    })
    .await?;
    let as_alice = PatchParams {
        field_manager: Some("alice".into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(west.client()?, "team-a")
        .patch(
            "registry",
            &as_alice,
            &merge(serde_json::json!({"data": {"token": "YWxpY2U="}})),
        )
        .await?;
    west.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: platform, labels: {app: registry}}\ntype: Opaque\nstringData: {token: third}\n").await?;
    wait(
        "the status lists what Enforce would do, and who changed team-a's copy",
        || async {
            let st = syncs.get("registry").await?.status.unwrap_or_default();
            let team_a = st.destinations.iter().find(|d| d.namespace == "team-a");
            Ok(team_a
                .and_then(|d| d.last_drift.as_ref())
                .is_some_and(|d| d.managers.iter().any(|m| m.manager == "alice"))
                && st
                    .destinations
                    .iter()
                    .filter(|d| d.namespace != "team-e")
                    .all(|d| d.state.as_str() == "OutOfSync" && d.changed_fields == ["data.token"]))
        },
    )
    .await?;
    for d in syncs
        .get("registry")
        .await?
        .status
        .unwrap_or_default()
        .destinations
    {
        let drift = d.last_drift.map(|r| {
            let who: Vec<String> = r
                .managers
                .iter()
                .map(|m| format!("{} ({})", m.manager, m.fields.join(", ")))
                .collect();
            format!("; changed by {}", who.join(", "))
        });
        println!(
            "   {:<7} {:<9} {:<9} {:?} {:?}{}",
            d.namespace,
            d.state,
            d.planned_action
                .map(|a| format!("{a:?}"))
                .unwrap_or_default(),
            d.changed_fields,
            d.message,
            drift.unwrap_or_default()
        );
    }
    let token = |ns: &'static str| async move {
        Ok::<_, anyhow::Error>(
            Api::<Secret>::namespaced(west.client()?, ns)
                .get_opt("registry")
                .await?
                .and_then(|s| s.data)
                .and_then(|d| {
                    d.get("token")
                        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                }),
        )
    };
    println!(
        "   nothing was written: team-a's token is {:?}, team-b's {:?}",
        token("team-a").await?,
        token("team-b").await?
    );
    println!("   back to mode Enforce");
    set_mode("Enforce").await?;
    wait(
        "every copy has token=third, alice's edit reverted",
        || async {
            for ns in ["team-a", "team-b", "team-c", "team-d", "team-f"] {
                if token(ns).await?.as_deref() != Some("third") {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await?;
    let found = wait_for_event(&events, "CopyChanged").await?;
    println!(
        "   event: {} {}: {}",
        found.type_.unwrap_or_default(),
        found.reason.unwrap_or_default(),
        found.note.unwrap_or_default()
    );

    step(
        23,
        "Defaults for team-c and team-d, team-c with its own override; kept when the ObjectSync goes",
    );
    west.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: defaults, namespace: platform}\ndata: {cpu: \"1\", memory: 1Gi}\n").await?;
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: defaults, namespace: platform}\nspec:\n  source: {kind: ConfigMap, name: defaults}\n  destinations:\n  - {namespace: team-c, patches: [{merge: {data: {cpu: \"4\"}}}]}\n  - {namespace: team-d}\n  deletionPolicy: Orphan\n").await?;
    let cpu = |ns: &'static str| async move {
        Ok::<_, anyhow::Error>(
            Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(west.client()?, ns)
                .get_opt("defaults")
                .await?
                .and_then(|c| c.data)
                .and_then(|d| d.get("cpu").cloned()),
        )
    };
    wait("team-c gets cpu=4 (its patch), team-d cpu=1", || async {
        Ok(cpu("team-c").await?.as_deref() == Some("4")
            && cpu("team-d").await?.as_deref() == Some("1"))
    })
    .await?;
    syncs.delete("defaults", &DeleteParams::default()).await?;
    wait(
        "the ObjectSync is gone; both copies stay, without kubesync's marks",
        || async {
            let all = Api::<k8s_openapi::api::core::v1::ConfigMap>::all(west.client()?);
            let marked = all
                .list(&kube::api::ListParams::default().labels("kubesync.io/managed-by"))
                .await?
                .items
                .iter()
                .filter(|c| c.metadata.name.as_deref() == Some("defaults"))
                .count();
            Ok(syncs.get_opt("defaults").await?.is_none()
                && marked == 0
                && cpu("team-c").await?.as_deref() == Some("4")
                && cpu("team-d").await?.as_deref() == Some("1"))
        },
    )
    .await?;

    step(
        24,
        "Every Secret of platform labelled share=tls, into team-c and team-d as platform-<name>",
    );
    for (name, labels) in [
        ("wildcard-tls", "{share: tls}"),
        ("internal-ca", "{share: tls}"),
        ("db-password", "{}"),
    ] {
        west.apply_yaml(&format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: platform, labels: {labels}}}\nstringData: {{v: {name}}}\n")).await?;
    }
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: tls, namespace: platform}\nspec:\n  source: {kind: Secret, selector: {matchLabels: {share: tls}}}\n  destinations:\n  - {namespace: team-c, namePrefix: platform-}\n  - {namespace: team-d, namePrefix: platform-}\n").await?;
    let prefixed = || async {
        let mut names = Vec::new();
        for ns in ["team-c", "team-d"] {
            for s in Api::<Secret>::namespaced(west.client()?, ns)
                .list(&Default::default())
                .await?
                .items
            {
                let name = s.metadata.name.unwrap_or_default();
                if name.starts_with("platform-") {
                    names.push(format!("{ns}/{name}"));
                }
            }
        }
        names.sort();
        Ok::<_, anyhow::Error>(names)
    };
    wait(
        "2 sources × 2 namespaces: 4 copies, db-password not among them",
        || async {
            Ok(prefixed().await?
                == [
                    "team-c/platform-internal-ca",
                    "team-c/platform-wildcard-tls",
                    "team-d/platform-internal-ca",
                    "team-d/platform-wildcard-tls",
                ])
        },
    )
    .await?;
    println!("   a third Secret gets the label");
    west.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: metrics-tls, namespace: platform, labels: {share: tls}}\nstringData: {v: metrics}\n").await?;
    wait("its copies follow: 6 copies", || async {
        Ok(prefixed().await?.len() == 6)
    })
    .await?;
    wait("the status counts per namespace", || async {
        Ok(syncs.get("tls").await?.status.is_some_and(|s| {
            s.sources == Some(3) && s.destinations.iter().all(|d| d.sources_in_sync == Some(3))
        }))
    })
    .await?;
    for d in syncs
        .get("tls")
        .await?
        .status
        .unwrap_or_default()
        .destinations
    {
        println!(
            "   {}/{}: {} ({} of {} sources in sync)",
            d.cluster,
            d.namespace,
            d.state,
            d.sources_in_sync.unwrap_or_default(),
            d.sources_total.unwrap_or_default()
        );
    }
    syncs.delete("tls", &DeleteParams::default()).await?;
    wait("deleting the ObjectSync removes its 6 copies", || async {
        Ok(prefixed().await?.is_empty())
    })
    .await?;

    step(25, "Deleting the ObjectSync registry");
    syncs.delete("registry", &DeleteParams::default()).await?;
    wait(
        "every copy it made is gone; team-e's own Secret stays",
        || async {
            Ok(count_copies(west, "registry").await? == 0
                && Api::<Secret>::namespaced(west.client()?, "team-e")
                    .get_opt("registry")
                    .await?
                    .is_some())
        },
    )
    .await?;

    step(
        26,
        "A tenant in team-a copies its ConfigMap to team-b: refused until team-b consents",
    );
    west.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: limits, namespace: team-a}\ndata: {cpu: \"2\"}\n").await?;
    // A tenant's ObjectSync acts as a ServiceAccount of her namespace: what RBAC lets it read
    // and write is all it may copy. team-a's admin lets `copier` read team-a's ConfigMaps.
    west.apply_yaml(&copier_rbac("team-a", "team-a")).await?;
    west.apply_yaml(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: copier, namespace: team-a}\n",
    )
    .await?;
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: limits, namespace: team-a}\nspec:\n  serviceAccountName: copier\n  source: {kind: ConfigMap, name: limits}\n  destinations: [{namespace: team-b}]\n").await?;
    let tenant: Api<ObjectSync> = Api::namespaced(west.client()?, "team-a");
    wait(
        "team-b refuses: team-a is not a trusted namespace",
        || async {
            Ok(first_destination(&tenant, "limits")
                .await?
                .is_some_and(|d| d.state == "Refused"))
        },
    )
    .await?;
    if let Some(d) = first_destination(&tenant, "limits").await? {
        println!(
            "   {}/{}: {} — {}",
            d.cluster, d.namespace, d.state, d.message
        );
    }
    println!(
        "   team-b's owners consent with a SyncGrant in team-b, and RBAC for team-a's copier there"
    );
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-team-a, namespace: team-b}\nspec:\n  from: [{namespace: team-a}]\n  kinds: [{kind: ConfigMap}]\n").await?;
    west.apply_yaml(&copier_rbac("team-a", "team-b")).await?;
    let team_b: Api<ConfigMap> = Api::namespaced(west.client()?, "team-b");
    wait("the copy arrives in team-b", || async {
        Ok(team_b.get_opt("limits").await?.is_some())
    })
    .await?;

    step(
        27,
        "A cluster admin's ClusterObjectSync: every ClusterRole labelled share=fleet, from west to east",
    );
    for (name, labels) in [
        ("fleet-viewer", "{share: fleet}"),
        ("fleet-operator", "{share: fleet}"),
        ("west-only", "{}"),
    ] {
        west.apply_yaml(&format!("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {name}, labels: {labels}}}\nrules: [{{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list]}}]\n")).await?;
    }
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: fleet-roles}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: ClusterRole, selector: {matchLabels: {share: fleet}}}\n  destinations: [{cluster: east}]\n").await?;
    let east_roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(east.client()?);
    let fleet = || async {
        let mut names: Vec<String> = east_roles
            .list(&kube::api::ListParams::default().labels("kubesync.io/managed-by"))
            .await?
            .items
            .into_iter()
            .filter_map(|r| r.metadata.name)
            .collect();
        names.sort();
        Ok::<_, anyhow::Error>(names)
    };
    wait(
        "east has fleet-operator and fleet-viewer, not west-only",
        || async { Ok(fleet().await? == ["fleet-operator", "fleet-viewer"]) },
    )
    .await?;
    let cluster_syncs: Api<kubesync_cli::crd::ClusterObjectSync> = Api::all(west.client()?);
    if let Some(status) = cluster_syncs.get("fleet-roles").await?.status {
        println!(
            "   {}; {} of {} destination clusters in sync",
            ready_of(&status.conditions),
            status.in_sync,
            status.total
        );
    }
    cluster_syncs
        .delete("fleet-roles", &DeleteParams::default())
        .await?;
    wait("deleting it removes both copies from east", || async {
        Ok(fleet().await?.is_empty())
    })
    .await?;
    migrate(west).await?;
    pull(east, west).await
}

/// Step 29: west pulls a ConfigMap from east as from a hub (`spec.source.cluster`).
async fn pull(east: &TestEnv, west: &TestEnv) -> anyhow::Result<()> {
    step(
        29,
        "Pulling from a hub: west reads platform/fleet-settings from east (spec.source.cluster: east)",
    );
    east.apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: platform}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: fleet-settings, namespace: platform}\ndata: {region: eu-1}\n").await?;
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: fleet-settings, namespace: platform}\nspec:\n  source: {kind: ConfigMap, name: fleet-settings, cluster: east}\n  destinations:\n  - namespaceSelector: {matchLabels: {team: \"true\"}}\n").await?;
    let teams: Vec<String> = Api::<Namespace>::all(west.client()?)
        .list(&kube::api::ListParams::default().labels("team=true"))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let regions = || async {
        let mut found = Vec::new();
        for ns in &teams {
            let cm = Api::<ConfigMap>::namespaced(west.client()?, ns)
                .get_opt("fleet-settings")
                .await?;
            found.push(cm.and_then(|c| c.data?.get("region").cloned()));
        }
        Ok::<_, anyhow::Error>(found)
    };
    wait(
        &format!(
            "east's fleet-settings in the {} team namespaces of west",
            teams.len()
        ),
        || async {
            Ok(regions()
                .await?
                .iter()
                .all(|r| r.as_deref() == Some("eu-1")))
        },
    )
    .await?;
    Api::<ConfigMap>::namespaced(east.client()?, "platform")
        .patch(
            "fleet-settings",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"region": "eu-2"}})),
        )
        .await?;
    wait("a change on east follows (region=eu-2)", || async {
        Ok(regions()
            .await?
            .iter()
            .all(|r| r.as_deref() == Some("eu-2")))
    })
    .await?;
    let syncs: Api<ObjectSync> = Api::namespaced(west.client()?, "platform");
    if let Some(status) = syncs.get("fleet-settings").await?.status
        && let Some(c) = status
            .conditions
            .iter()
            .find(|c| c.type_ == "SourceReachable")
    {
        println!(
            "   SourceReachable={} ({}: {})",
            c.status, c.reason, c.message
        );
    }
    let rcs: Api<RemoteCluster> = Api::all(west.client()?);
    wait("RemoteCluster east says it serves as a source", || async {
        Ok(rcs
            .get("east")
            .await?
            .status
            .and_then(|s| s.source_for)
            .is_some_and(|n| n > 0))
    })
    .await?;
    println!(
        "   west needs only read rights on east for this (config/hub); while east cannot be read, the copies stay as they are (Ready=False, SourceUnreachable) until a read succeeds"
    );
    Ok(())
}

/// Step 28: objects annotated for reflector and kubernetes-replicator, and a mirror reflector
/// left behind, taken over by the same operator with no manifest change.
async fn migrate(west: &TestEnv) -> anyhow::Result<()> {
    step(
        28,
        "Migrating from reflector and kubernetes-replicator: their annotations, unchanged",
    );
    west.create_namespace("legacy").await?;
    println!(
        "   a Secret annotated for reflector, a ConfigMap for replicator, and reflector's old mirror in team-a"
    );
    west.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata:\n  name: pull-secret\n  namespace: team-a\n  annotations:\n    reflector.v1.k8s.emberstack.com/reflects: legacy/pull-secret\n    reflector.v1.k8s.emberstack.com/auto-reflects: \"True\"\nstringData: {token: stale}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: pull-secret\n  namespace: legacy\n  annotations:\n    reflector.v1.k8s.emberstack.com/reflection-allowed: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces: \"team-a,team-b\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-enabled: \"true\"\nstringData: {token: current}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: feature-flags\n  namespace: legacy\n  annotations: {replicator.v1.mittwald.de/replicate-to: \"team-(c|d)\"}\ndata: {beta: \"on\"}\n").await?;
    let token = |ns: &'static str| async move {
        let s = Api::<Secret>::namespaced(west.client()?, ns)
            .get_opt("pull-secret")
            .await?;
        Ok::<_, anyhow::Error>(s.and_then(|s| s.data?.get("token").map(|v| v.0.clone())))
    };
    wait(
        "reflector's mirror in team-a taken over and current; a new one in team-b",
        || async {
            Ok(token("team-a").await?.as_deref() == Some(&b"current"[..])
                && token("team-b").await?.as_deref() == Some(&b"current"[..]))
        },
    )
    .await?;
    wait("the ConfigMap in team-c and team-d", || async {
        let mut n = 0;
        for ns in ["team-c", "team-d"] {
            if Api::<ConfigMap>::namespaced(west.client()?, ns)
                .get_opt("feature-flags")
                .await?
                .is_some()
            {
                n += 1;
            }
        }
        Ok(n == 2)
    })
    .await?;
    println!("   kubesync compat list:");
    let tools = [
        kubesync_cli::compat::Tool::Reflector,
        kubesync_cli::compat::Tool::Replicator,
    ];
    let facts = kubesync_cli::compat::list::gather(&west.client()?, &tools).await?;
    for line in
        kubesync_cli::compat::list::table(&kubesync_cli::compat::list::rows(&facts, &tools)).lines()
    {
        println!("     {line}");
    }
    Ok(())
}

/// The first destination in an ObjectSync's status.
async fn first_destination(
    syncs: &Api<ObjectSync>,
    name: &str,
) -> anyhow::Result<Option<kubesync_cli::crd::DestinationStatusEntry>> {
    Ok(syncs
        .get_opt(name)
        .await?
        .and_then(|o| o.status)
        .and_then(|s| s.destinations.into_iter().next()))
}

fn widgets(env: &TestEnv, ns: &str) -> anyhow::Result<Api<DynamicObject>> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
        "widgets",
    );
    Ok(Api::namespaced_with(env.client()?, ns, &ar))
}

fn ready_of(conditions: &[kubesync_cli::crd::Condition]) -> String {
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| format!("Ready={} ({}: {})", c.status, c.reason, c.message))
        .unwrap_or_else(|| "no Ready condition yet".into())
}

async fn part2(east: &TestEnv, west: &TestEnv) -> anyhow::Result<()> {
    println!(
        "\nPart 2 — spec/status sync run by the kubesync operator: east is the management cluster, west a regional one"
    );
    step(
        9,
        "Installing CRDs: kubesync's (RemoteCluster, ResourceSync) in west, the demo Widget in both",
    );
    west.install_crds(&kubesync_cli::crd::crds_yaml()?).await?;
    // As every install has it: only those who may use a ServiceAccount make an ObjectSync
    // act as it (config/admission).
    west.apply_yaml(include_str!(
        "../../../config/admission/service_account_use.yaml"
    ))
    .await?;
    east.install_crds(WIDGET_CRD).await?;
    west.install_crds(WIDGET_CRD).await?;

    step(
        10,
        "Starting the kubesync operator in west (the code of `kubesync run`)",
    );
    // `platform` is the platform team's namespace: trusted, like the operator's own
    // (`kubesync run --trusted-namespace platform`); everyone else needs SyncGrants.
    let operator = Operator::with_options(
        Cluster::new("local", west.client()?),
        kubesync_cli::operator::OperatorOptions {
            status_refresh: Duration::from_secs(1),
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: vec!["platform".into(), "legacy".into()],
                ..Default::default()
            },
            // `kubesync run --compat reflector --compat replicator` (step 28).
            compat: vec![
                kubesync_cli::compat::Tool::Reflector,
                kubesync_cli::compat::Tool::Replicator,
            ],
            ..Default::default()
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(operator.clone().run(async {
        let _ = stopped.await;
    }));
    let sampler = sample_metrics(operator.clone());

    step(
        11,
        "Registering east: a Secret with its kubeconfig and a RemoteCluster",
    );
    west.create_namespace("kubesync").await?;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "east-kubeconfig", "namespace": "kubesync"},
        "stringData": {"kubeconfig": east.kubeconfig_yaml()}
    }))?;
    Api::<Secret>::namespaced(west.client()?, "kubesync")
        .create(&PostParams::default(), &secret)
        .await?;
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: east}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync, name: east-kubeconfig}\n").await?;
    let rcs: Api<RemoteCluster> = Api::all(west.client()?);
    wait("RemoteCluster east is Ready", || async {
        Ok(rcs
            .get("east")
            .await?
            .status
            .is_some_and(|s| s.conditions.iter().any(|c| c.status == "True")))
    })
    .await?;
    let rc = rcs.get("east").await?;
    let st = rc.status.unwrap_or_default();
    println!(
        "   RemoteCluster east: {}, version {}",
        ready_of(&st.conditions),
        st.server_version.unwrap_or_default()
    );

    step(
        12,
        "A ResourceSync: Widgets on east whose names end in -west are this region's shard",
    );
    west.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: widgets}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: east\n  remoteNameSuffix: -west\n").await?;

    step(
        13,
        "The control plane creates Widgets on east: shop/frontend-west and shop/backend-east",
    );
    east.create_namespace("shop").await?;
    east.apply_yaml("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: frontend-west, namespace: shop, labels: {app: frontend}}\nspec: {replicas: 2, image: shop/frontend:1.0}\n---\napiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: backend-east, namespace: shop}\nspec: {replicas: 1}\n").await?;
    let (east_w, west_w) = (widgets(east, "shop")?, widgets(west, "shop")?);
    wait(
        "shop/frontend appears in west (namespace shop created for it)",
        || async { Ok(west_w.get_opt("frontend").await?.is_some()) },
    )
    .await?;
    let local = west_w.get("frontend").await?;
    println!(
        "   west  shop/frontend: spec={} labels={:?}",
        local.data["spec"],
        local.metadata.labels.unwrap_or_default()
    );
    wait(
        "east records what was applied (generation marks)",
        || async {
            Ok(east_w
                .get("frontend-west")
                .await?
                .metadata
                .annotations
                .unwrap_or_default()
                .contains_key("kubesync.io/sync-local-generation"))
        },
    )
    .await?;
    let remote = east_w.get("frontend-west").await?;
    println!(
        "   east  shop/frontend-west: finalizers={:?}",
        remote.metadata.finalizers.unwrap_or_default()
    );
    for (k, v) in remote.metadata.annotations.unwrap_or_default() {
        println!("         {k}: {v}");
    }
    println!(
        "   west  shop/backend: {} (another region's shard)",
        if west_w.get_opt("backend").await?.is_some() {
            "present?!"
        } else {
            "absent"
        }
    );

    step(
        14,
        "A controller in west reports status on its Widget: phase=Running",
    );
    west_w
        .patch_status(
            "frontend",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": "Running", "readyReplicas": 2}})),
        )
        .await?;
    wait("the status appears on east", || async {
        Ok(east_w.get("frontend-west").await?.data["status"]["phase"] == "Running")
    })
    .await?;
    println!(
        "   east  shop/frontend-west: status={}",
        east_w.get("frontend-west").await?.data["status"]
    );

    step(15, "The control plane changes the spec on east: replicas=3");
    east.apply_yaml("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: frontend-west, namespace: shop, labels: {app: frontend}}\nspec: {replicas: 3, image: shop/frontend:1.0}\n").await?;
    wait("west follows", || async {
        Ok(west_w.get("frontend").await?.data["spec"]["replicas"] == 3)
    })
    .await?;
    let rss: Api<ResourceSync> = Api::all(west.client()?);
    wait("the ResourceSync counts it in sync", || async {
        Ok(rss
            .get("widgets")
            .await?
            .status
            .is_some_and(|s| s.objects == 1 && s.in_sync == 1))
    })
    .await?;
    let st = rss.get("widgets").await?.status.unwrap_or_default();
    println!(
        "   ResourceSync widgets: {}; objects={} inSync={} paused={} failing={}",
        ready_of(&st.conditions),
        st.objects,
        st.in_sync,
        st.paused,
        st.failing
    );

    step(16, "The control plane deletes shop/frontend-west on east");
    east_w
        .delete("frontend-west", &DeleteParams::default())
        .await?;
    let namespaces: Api<Namespace> = Api::all(west.client()?);
    wait(
        "west deletes the namespace it created (and the Widget in it)",
        || async { Ok(namespaces.get_opt("shop").await?.is_none()) },
    )
    .await?;
    wait(
        "then east's finalizer is released and the Widget is gone",
        || async { Ok(east_w.get_opt("frontend-west").await?.is_none()) },
    )
    .await?;

    part3(east, west).await?;

    step(30, "Stopping the operator");
    if let Some((stop, sampler)) = sampler {
        let _ = stop.send(());
        let written = sampler.await??;
        println!("   {written} samples of /metrics written to $KUBESYNC_DEMO_METRICS");
    }
    let _ = stop.send(());
    task.await??;
    Ok(())
}

/// A Role and RoleBinding in `namespace` letting the ServiceAccount `copier` of `from` read and
/// write ConfigMaps there: what a namespace's admin grants a tenant's ObjectSync.
fn copier_rbac(from: &str, namespace: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: copier-from-{from}, namespace: {namespace}}}\nrules: [{{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list, watch, create, update, patch, delete]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: copier-from-{from}, namespace: {namespace}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: copier-from-{from}}}\nsubjects: [{{kind: ServiceAccount, name: copier, namespace: {from}}}]\n"
    )
}
