//! `make demo`: two local control planes, the copy example between them, narrated.
//!
//! Starts clusters `east` and `west` (real etcd + kube-apiserver processes), runs the copy
//! controller from east to west, then creates, updates, edits and deletes objects and shows
//! what happens on each side. Everything is stopped and removed at the end.

#[allow(dead_code)]
#[path = "copy.rs"]
mod copy;

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubesync::Cluster;
use kubesync_testenv::{TestEnv, merged_kubeconfig};

const NS: &str = "demo";

fn step(n: u32, text: &str) {
    println!("\n\x1b[1m{n}. {text}\x1b[0m");
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
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,copy=info")),
        )
        .init();
    println!(
        "kubesync demo: copying ConfigMaps labelled {}=true from cluster east to cluster west",
        copy::COPY_LABEL
    );

    step(
        1,
        "Starting two local control planes (etcd + kube-apiserver each)",
    );
    let started = Instant::now();
    let (east, west) = tokio::join!(
        TestEnv::builder().name("east").start(),
        TestEnv::builder().name("west").start()
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
        "Stopping: the controller finishes its work in flight, then the control planes stop",
    );
    let _ = stop.send(());
    controller.await??;
    drop((east, west));
    println!("   done: processes stopped, temporary directories removed.");
    Ok(())
}
