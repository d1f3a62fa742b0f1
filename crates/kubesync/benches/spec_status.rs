//! Spec/status sync benchmarks on local control planes (`make bench`).
//!
//! - convergence: 1000 remote Widgets until each is claimed, created locally and its
//!   generation marks recorded, next to a plain client sending the same writes (finalizer
//!   patch, local create, generation-mark patch per object) with the same concurrency;
//! - status latency: a local status change until the remote shows it (at idle);
//! - restart: a second engine over the converged state, counting its write requests.
//!
//! `ENGINE_CONCURRENCY=<n>` sets the engine's concurrency (default 16, as the plain client).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync::Cluster;
use kubesync::syncers::spec_status::SpecStatusSync;
use kubesync_testenv::{TestEnv, fixtures::WIDGET_CRD};
use tokio::sync::oneshot;

const N: usize = 1000;
const CONCURRENCY: usize = 16;

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
    futures::stream::iter(0..N)
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
    futures::stream::iter(0..N)
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var_os("BENCH_TRACE").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    println!("kubesync spec/status benchmarks (N = {N}, concurrency = {CONCURRENCY})\n");
    let (remote, local) = tokio::join!(
        TestEnv::builder().name("bench-remote").start(),
        TestEnv::builder().name("bench-local").start()
    );
    let (remote, local) = (remote?, local?);
    remote.install_crds(WIDGET_CRD).await?;
    local.install_crds(WIDGET_CRD).await?;
    let ar = widget_type();

    // Plain client: the same writes kubesync sends for N new objects.
    remote.create_namespace("plain").await?;
    local.create_namespace("plain").await?;
    let r_plain: Api<DynamicObject> = Api::namespaced_with(remote.client()?, "plain", &ar);
    let l_plain: Api<DynamicObject> = Api::namespaced_with(local.client()?, "plain", &ar);
    create_widgets(&r_plain, "plain").await;
    let t = Instant::now();
    let cpu0 = cpu();
    plain_writes(&r_plain, &l_plain).await?;
    let plain = t.elapsed();
    let plain_cpu = cpu() - cpu0;

    // The plain client again, with the engine's watches open (drained by a consumer): the
    // share of the gap that is the cost of watching, not of the engine.
    remote.create_namespace("plainw").await?;
    local.create_namespace("plainw").await?;
    // One client per cluster for the watches and the writes, as the engine has.
    let (remote_client, local_client) = (remote.client()?, local.client()?);
    let r_plainw: Api<DynamicObject> = Api::namespaced_with(remote_client.clone(), "plainw", &ar);
    let l_plainw: Api<DynamicObject> = Api::namespaced_with(local_client.clone(), "plainw", &ar);
    create_widgets(&r_plainw, "plainw").await;
    let drain = |api: Api<DynamicObject>| {
        tokio::spawn(async move {
            let stream = kube::runtime::watcher::watcher(api, Default::default());
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {}
        })
    };
    let watchers = [
        drain(Api::all_with(remote_client.clone(), &ar)),
        drain(Api::all_with(local_client.clone(), &ar)),
        drain(Api::all_with(
            local_client.clone(),
            &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
        )),
    ];
    tokio::time::sleep(Duration::from_millis(500)).await;
    let t = Instant::now();
    plain_writes(&r_plainw, &l_plainw).await?;
    let plain_watched = t.elapsed();
    for w in watchers {
        w.abort();
    }

    // kubesync: from engine start until every object converged.
    remote.create_namespace("bench").await?;
    let r_api: Api<DynamicObject> = Api::namespaced_with(remote.client()?, "bench", &ar);
    create_widgets(&r_api, "bench").await;
    let build = || {
        SpecStatusSync::builder(ar.clone())
            .namespace_prefix("bench")
            .concurrency(
                std::env::var("ENGINE_CONCURRENCY")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(CONCURRENCY),
            )
            .build(
                Cluster::new("remote", remote.client().expect("client")),
                Cluster::new("local", local.client().expect("client")),
            )
    };
    let first = build();
    let first_writes = first.write_counter();
    let (controller, reconciler) = first.into_parts().await?;
    let first_ctx = controller.context();
    let (stop, stopped) = oneshot::channel::<()>();
    let t = Instant::now();
    let cpu0 = cpu();
    let engine = tokio::spawn(controller.run(reconciler, async {
        let _ = stopped.await;
    }));
    loop {
        let done = r_api
            .list_metadata(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|o| {
                o.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("kubesync.io/sync-local-generation"))
            })
            .count();
        if done >= N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let synced = t.elapsed();
    let synced_cpu = cpu() - cpu0;
    println!(
        "  CPU of this process: kubesync {:.2} s, plain client {:.2} s (the machine has 2 cores, shared with both control planes)",
        synced_cpu.as_secs_f64(),
        plain_cpu.as_secs_f64()
    );
    println!(
        "convergence of {N} remote objects: kubesync {:.2} s, plain client (same writes) {:.2} s, ratio {:.2} ({} writes, {} reconciles, {} failed)",
        synced.as_secs_f64(),
        plain.as_secs_f64(),
        synced.as_secs_f64() / plain.as_secs_f64(),
        first_writes.writes(),
        first_ctx.metrics().reconciles(),
        first_ctx.metrics().failures()
    );
    println!(
        "  the plain client with the engine's watches open on its own client: {:.2} s (ratio kubesync / that {:.2})",
        plain_watched.as_secs_f64(),
        synced.as_secs_f64() / plain_watched.as_secs_f64()
    );

    // The plain client once more, after the engine: same cluster state (object count, etcd
    // revision), to separate order effects from engine cost.
    remote.create_namespace("plain-after").await?;
    local.create_namespace("plain-after").await?;
    let r_after: Api<DynamicObject> = Api::namespaced_with(remote.client()?, "plain-after", &ar);
    let l_after: Api<DynamicObject> = Api::namespaced_with(local.client()?, "plain-after", &ar);
    create_widgets(&r_after, "plain-after").await;
    let t = Instant::now();
    plain_writes(&r_after, &l_after).await?;
    println!(
        "  the plain client again after the engine ran: {:.2} s (ratio kubesync / that {:.2})",
        t.elapsed().as_secs_f64(),
        synced.as_secs_f64() / t.elapsed().as_secs_f64()
    );

    // Status latency at idle.
    let l_api: Api<DynamicObject> = Api::namespaced_with(local.client()?, "bench", &ar);
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

    // Restart over converged state.
    let second = build();
    let writes = second.write_counter();
    let (controller, reconciler) = second.into_parts().await?;
    let ctx = controller.context();
    let (stop, stopped) = oneshot::channel::<()>();
    let t = Instant::now();
    let engine = tokio::spawn(controller.run(reconciler, async {
        let _ = stopped.await;
    }));
    while ctx.metrics().reconciles() < N as u64 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "restart with {N} objects in sync: all reconciled in {:.2} s with {} write requests",
        t.elapsed().as_secs_f64(),
        writes.writes()
    );
    let _ = stop.send(());
    engine.await??;
    Ok(())
}
