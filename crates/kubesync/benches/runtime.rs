//! Benchmarks of the multi-cluster runtime on local control planes (`make bench`).
//!
//! Prints:
//! - control-plane start time (etcd + kube-apiserver, cached binaries);
//! - initial sync: time from controller start until every one of N objects was reconciled,
//!   next to the time a plain client needs to list them;
//! - event latency: from a write returning to the reconcile that sees it (p50/p90/max);
//! - copy throughput: the copy example copying N ConfigMaps to a second cluster, next to a plain
//!   client doing the same server-side applies with the same concurrency, as a ratio;
//! - new connections: a new client lists N ConfigMaps and the namespaces at once (the second list
//!   opens a second connection), with kube's default client and with kubesync's (`TCP_NODELAY`).

#[allow(dead_code)]
mod common;
#[allow(dead_code)]
#[path = "../examples/copy.rs"]
mod copy;

use common::Connect;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kubesync::{Action, Cluster, Controller, Watch, reconciler_fn};
use kubesync_testenv::TestEnv;
use tokio::sync::{mpsc, oneshot};

const N: usize = 1000;
const CONCURRENCY: usize = 16;

fn cm(ns: &str, name: &str, labels: serde_json::Value, v: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"v": v},
    })
}

async fn create_many(
    api: &Api<ConfigMap>,
    ns: &str,
    n: usize,
    labels: serde_json::Value,
) -> Duration {
    let start = Instant::now();
    let pp = PatchParams::apply("bench").force();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let pp = pp.clone();
            let body = cm(ns, &format!("cm-{i}"), labels.clone(), "0");
            async move {
                api.patch(&format!("cm-{i}"), &pp, &Patch::Apply(body))
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("create");
    start.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    println!("kubesync runtime benchmarks (N = {N}, concurrency = {CONCURRENCY})\n");

    // 1. Control-plane start time.
    let mut starts = Vec::new();
    for i in 0..3 {
        let t = Instant::now();
        let env = TestEnv::builder()
            .name(format!("start-{i}"))
            .start()
            .await?;
        starts.push(t.elapsed());
        drop(env);
    }
    starts.sort();
    println!(
        "control-plane start (etcd + kube-apiserver): min {:.2} s, median {:.2} s",
        starts[0].as_secs_f64(),
        starts[1].as_secs_f64()
    );

    let (a, b) = tokio::join!(
        TestEnv::builder().name("bench-a").start(),
        TestEnv::builder().name("bench-b").start()
    );
    let (a, b) = (a?, b?);
    let ns = "bench";
    a.create_namespace(ns).await?;
    b.create_namespace(ns).await?;
    let a_cms: Api<ConfigMap> = Api::namespaced(a.kubesync_client()?, ns);
    let created = create_many(&a_cms, ns, N, serde_json::json!({})).await;
    println!(
        "setup: {N} ConfigMaps created by a plain client in {:.2} s",
        created.as_secs_f64()
    );

    // 2. Initial sync.
    let t = Instant::now();
    let listed = a_cms.list(&ListParams::default()).await?.items.len();
    let plain_list = t.elapsed();
    let count = Arc::new(AtomicUsize::new(0));
    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<(String, String)>();
    let c = count.clone();
    let controller = Controller::new()
        .cluster(Cluster::new("a", a.kubesync_client()?))
        .watch("a", Watch::of::<ConfigMap>().namespace(ns))?
        .concurrency(CONCURRENCY);
    let (stop, stopped) = oneshot::channel::<()>();
    let t = Instant::now();
    let task = tokio::spawn(controller.run(
        reconciler_fn(move |key, ctx| {
            let (c, tx) = (c.clone(), seen_tx.clone());
            async move {
                c.fetch_add(1, Ordering::Relaxed);
                if let Some(obj) = ctx.get(&key) {
                    let _ = tx.send((
                        key.name.clone(),
                        obj.metadata.resource_version.clone().unwrap_or_default(),
                    ));
                }
                Ok::<_, String>(Action::done())
            }
        }),
        async {
            let _ = stopped.await;
        },
    ));
    while count.load(Ordering::Relaxed) < N {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let initial = t.elapsed();
    println!(
        "initial sync: {N} objects listed and reconciled in {:.3} s ({:.0} objects/s); a plain list of {listed} takes {:.3} s",
        initial.as_secs_f64(),
        N as f64 / initial.as_secs_f64(),
        plain_list.as_secs_f64()
    );
    while seen_rx.try_recv().is_ok() {}

    // 3. Event latency.
    let mut lat = Vec::new();
    let mut write_rtt = Vec::new();
    let pp = PatchParams::apply("bench").force();
    for i in 0..50 {
        let name = format!("cm-{}", i % 10);
        let t = Instant::now();
        let updated = a_cms
            .patch(
                &name,
                &pp,
                &Patch::Apply(cm(ns, &name, serde_json::json!({}), &format!("u{i}"))),
            )
            .await?;
        let rv = updated.metadata.resource_version.unwrap_or_default();
        let written = t.elapsed();
        loop {
            let (n, seen_rv) = tokio::time::timeout(Duration::from_secs(10), seen_rx.recv())
                .await?
                .expect("channel");
            if n == name && seen_rv == rv {
                break;
            }
        }
        lat.push(t.elapsed());
        write_rtt.push(written);
    }
    lat.sort();
    write_rtt.sort();
    println!(
        "event latency (write sent → reconcile sees it): p50 {:.1} ms, p90 {:.1} ms, max {:.1} ms (the write's own round trip: p50 {:.1} ms)",
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.9).as_secs_f64() * 1e3,
        lat[lat.len() - 1].as_secs_f64() * 1e3,
        percentile(&write_rtt, 0.5).as_secs_f64() * 1e3
    );
    let _ = stop.send(());
    task.await??;

    // 4. Copy throughput against a plain client doing the same writes.
    let copy_ns = "copy";
    a.create_namespace(copy_ns).await?;
    let a_copy: Api<ConfigMap> = Api::namespaced(a.kubesync_client()?, copy_ns);
    create_many(
        &a_copy,
        copy_ns,
        N,
        serde_json::json!({ copy::COPY_LABEL: "true" }),
    )
    .await;
    let b_copy: Api<ConfigMap> = Api::namespaced(b.kubesync_client()?, copy_ns);
    let (stop, stopped) = oneshot::channel::<()>();
    let t = Instant::now();
    let task = tokio::spawn(copy::run_copy(
        Cluster::new("a", a.kubesync_client()?),
        Cluster::new("b", b.kubesync_client()?),
        async {
            let _ = stopped.await;
        },
    ));
    loop {
        let n = b_copy
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        if n >= N {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let copied = t.elapsed();
    let _ = stop.send(());
    task.await??;
    b.create_namespace("plain").await?;
    let b_plain: Api<ConfigMap> = Api::namespaced(b.kubesync_client()?, "plain");
    let plain = create_many(
        &b_plain,
        "plain",
        N,
        serde_json::json!({"kubesync.io/copied-from": "a"}),
    )
    .await;
    println!(
        "copy {N} ConfigMaps a → b: kubesync copy example {:.2} s, plain client (same applies, concurrency {CONCURRENCY}) {:.2} s, ratio {:.2}",
        copied.as_secs_f64(),
        plain.as_secs_f64(),
        copied.as_secs_f64() / plain.as_secs_f64()
    );

    // 5. New connections: kube's default client against kubesync's.
    let (mut default, mut nodelay) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        default.push(first_requests(kube::Client::try_from(a.config()?)?).await?);
        nodelay.push(first_requests(a.kubesync_client()?).await?);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64() * 1e3
    };
    println!(
        "new connections: a new client lists {N} ConfigMaps and the namespaces at once (median of {ROUNDS}): kube's default client {:.1} ms, kubesync's client (TCP_NODELAY) {:.1} ms",
        median(&mut default),
        median(&mut nodelay)
    );
    Ok(())
}

/// Rounds of the new-connection measurement.
const ROUNDS: usize = 11;

/// A controller's start on a new client: one request has opened a connection; then two lists
/// run at once (the N ConfigMaps, and the namespaces, as two watches' first lists), so the
/// second needs a new connection. Returns the time for the two.
async fn first_requests(client: kube::Client) -> anyhow::Result<Duration> {
    let (configmaps, namespaces): (Api<ConfigMap>, Api<k8s_openapi::api::core::v1::Namespace>) =
        (Api::all(client.clone()), Api::all(client));
    let cached = ListParams::default().match_any();
    namespaces.list_metadata(&cached).await?;
    let t = Instant::now();
    futures::try_join!(configmaps.list(&cached), namespaces.list(&cached))?;
    Ok(t.elapsed())
}
