//! Fan-out benchmarks on a local control plane (`make bench`).
//!
//! For 300 and 1000 destination namespaces: time until every copy exists — cold (the first
//! declaration of its kind, so the engine first lists every Secret and Namespace) and warm (a
//! second declaration of the same kind, its watches already running) — time for a source update
//! to reach every copy, time for a new namespace to get its copy, and the same writes (one
//! server-side apply per namespace) sent by a plain client with the same concurrency.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kubesync::syncers::fan_out::plan::{CopyRules, NamespaceRule, OnConflict, Owner};
use kubesync::syncers::fan_out::{Declaration, Destination, FanOut, FanOutSpec, SourceRef};
use kubesync::{Action, Cluster, Controller, Watch, reconciler_fn};
use kubesync_testenv::TestEnv;
use tokio::sync::oneshot;

const CONCURRENCY: usize = 16;

async fn create_namespaces(api: &Api<Namespace>, prefix: &str, n: usize) {
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": format!("{prefix}-{i}"), "labels": {"bench": prefix}}})).expect("ns");
            async move { api.create(&PostParams::default(), &ns).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("namespaces");
}

fn secret(value: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull"}, "type": "Opaque", "stringData": {"token": value}})
}

async fn count_copies(env: &TestEnv, uid: &str, version: Option<&str>) -> usize {
    let all: Api<Secret> = Api::all(env.client().expect("client"));
    let list = all
        .list(&ListParams::default().labels(&format!("kubesync.io/managed-by={uid}")))
        .await
        .expect("list");
    list.items
        .iter()
        .filter(|s| {
            version.is_none_or(|v| {
                s.annotations()
                    .get("kubesync.io/source-resource-version")
                    .map(String::as_str)
                    == Some(v)
            })
        })
        .count()
}

async fn run(env: &TestEnv, n: usize) -> anyhow::Result<()> {
    let prefix = format!("b{n}");
    let namespaces: Api<Namespace> = Api::all(env.client()?);
    let control = format!("{prefix}-control");
    let source_ns = format!("{prefix}-src");
    for ns in [&control, &source_ns] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    create_namespaces(&namespaces, &prefix, n).await;
    let src: Api<Secret> = Api::namespaced(env.client()?, &source_ns);
    src.patch(
        "pull",
        &PatchParams::apply("bench").force(),
        &Patch::Apply(secret("v1")),
    )
    .await?;
    let anchor: Api<ConfigMap> = Api::namespaced(env.client()?, &control);
    let decl_cm = anchor
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "decl"}}))?,
        )
        .await?;
    let uid = decl_cm.uid().unwrap_or_default();

    let spec_for = |source: &str| FanOutSpec {
        source: SourceRef {
            resource: ApiResource::erase::<Secret>(&()),
            namespace: source_ns.clone(),
            name: source.into(),
        },
        destinations: vec![Destination {
            namespaces: NamespaceRule {
                namespace: Some("*".into()),
                namespace_selector: Some(kubesync::syncers::fan_out::plan::LabelSelector {
                    match_labels: [("bench".to_string(), prefix.clone())].into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        }],
        on_conflict: OnConflict::Skip,
        rules: CopyRules::default(),
    };
    let specs: std::collections::HashMap<String, (FanOutSpec, String)> =
        std::collections::HashMap::new();
    let specs = Arc::new(std::sync::Mutex::new(specs));
    specs
        .lock()
        .expect("lock")
        .insert("decl".into(), (spec_for("pull"), uid.clone()));
    let fan_out = Arc::new(FanOut::new("local").concurrency(CONCURRENCY));
    let controller = Controller::new()
        .cluster(Cluster::new("local", env.client()?))
        .watch("local", Watch::of::<ConfigMap>().namespace(&control))?;
    let (stop, stopped) = oneshot::channel::<()>();
    let (f, specs2, control2) = (fan_out.clone(), specs.clone(), control.clone());
    let t = Instant::now();
    let task = tokio::spawn(controller.run(
        reconciler_fn(move |key, ctx| {
            let (f, entry, control) = (
                f.clone(),
                specs2.lock().expect("lock").get(&key.name).cloned(),
                control2.clone(),
            );
            async move {
                let Some((spec, uid)) = entry else {
                    return Ok(Action::done());
                };
                let decl = Declaration {
                    key: key.clone(),
                    owner: Owner {
                        reference: format!("local/{control}/{}", key.name),
                        uid,
                    },
                    spec,
                    deleting: false,
                };
                let report = f.reconcile(&ctx, &decl).await?;
                Ok::<_, kubesync::Error>(if report.ready {
                    Action::done()
                } else {
                    Action::requeue(Duration::from_millis(100))
                })
            }
        }),
        async {
            let _ = stopped.await;
        },
    ));
    while count_copies(env, &uid, None).await < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let initial = t.elapsed();

    let t = Instant::now();
    let updated = src
        .patch(
            "pull",
            &PatchParams::apply("bench").force(),
            &Patch::Apply(secret("v2")),
        )
        .await?;
    let rv = updated.metadata.resource_version.unwrap_or_default();
    while count_copies(env, &uid, Some(&rv)).await < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let update = t.elapsed();

    let t = Instant::now();
    let late = format!("{prefix}-late");
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                serde_json::json!({"metadata": {"name": late, "labels": {"bench": prefix}}}),
            )?,
        )
        .await?;
    let late_api: Api<Secret> = Api::namespaced(env.client()?, &late);
    while late_api.get_opt("pull").await?.is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let new_ns = t.elapsed();

    // Warm: a second ObjectSync of the same kind, whose watches already run.
    src.patch("pull2", &PatchParams::apply("bench").force(), &Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull2"}, "type": "Opaque", "stringData": {"token": "w"}}))).await?;
    let decl2 = anchor
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "decl2-pending"}}))?,
        )
        .await?;
    let uid2 = decl2.uid().unwrap_or_default();
    specs
        .lock()
        .expect("lock")
        .insert("decl2".into(), (spec_for("pull2"), uid2.clone()));
    let t = Instant::now();
    anchor
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "decl2"}}))?,
        )
        .await?;
    while count_copies(env, &uid2, None).await < n + 1 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let warm = t.elapsed();
    let _ = stop.send(());
    task.await??;

    // The same writes by a plain client: one apply per namespace, same concurrency.
    let plain_prefix = format!("p{n}");
    create_namespaces(&namespaces, &plain_prefix, n).await;
    let client = env.client()?;
    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &format!("{plain_prefix}-{i}"));
            async move {
                api.patch(
                    "pull",
                    &PatchParams::apply("plain").force(),
                    &Patch::Apply(secret("v1")),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let plain = t.elapsed();
    println!(
        "1 → {n} namespaces: all copies, cold {:.2} s / warm {:.2} s (plain client, same applies: {:.2} s; ratio cold {:.2}, warm {:.2}); update reaches all {:.2} s; new namespace gets its copy in {:.0} ms; writes {}",
        initial.as_secs_f64(),
        warm.as_secs_f64(),
        plain.as_secs_f64(),
        initial.as_secs_f64() / plain.as_secs_f64(),
        warm.as_secs_f64() / plain.as_secs_f64(),
        update.as_secs_f64(),
        new_ns.as_secs_f64() * 1e3,
        fan_out.write_counter().writes()
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    println!("kubesync fan-out benchmarks (concurrency {CONCURRENCY})\n");
    let env = TestEnv::builder().name("bench-fanout").start().await?;
    run(&env, 300).await?;
    run(&env, 1000).await?;
    Ok(())
}
