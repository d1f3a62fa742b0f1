//! Fan-out benchmarks on a local control plane (`make bench`).
//!
//! For 300 and 1000 destination namespaces: time until every copy exists — cold (the first
//! declaration of its kind, so the engine first lists every Secret and Namespace) and warm (a
//! second declaration of the same kind, its watches already running) — time for a source update
//! to reach every copy, time for a new namespace to get its copy, and the same writes (one
//! server-side apply per namespace) sent by a plain client with the same concurrency.
//!
//! Each measurement runs [`ROUNDS`] times, the engine and the plain client alternating in a
//! rotating order (the cluster grows with every run), and medians are compared. Convergence is
//! observed through a watch, as the engine observes its writes.

use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kubesync::syncers::fan_out::engine::FIELD_MANAGER;
use kubesync::syncers::fan_out::plan::{self, CopyRules, NamespaceRule, OnConflict, Owner};
use kubesync::syncers::fan_out::{Declaration, Destination, FanOut, FanOutSpec, SourceRef};
use kubesync::{Action, Cluster, Controller, Watch, reconciler_fn};
use kubesync_testenv::TestEnv;
use tokio::sync::oneshot;

const CONCURRENCY: usize = 16;
const ROUNDS: usize = 3;

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

fn secret(name: &str, value: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "stringData": {"token": value}})
}

/// Waits, through one watch, until `want` copies made for declaration `uid` exist (carrying the
/// source's resourceVersion `version`, when given).
async fn copies(
    env: &TestEnv,
    uid: &str,
    version: Option<String>,
    want: usize,
) -> anyhow::Result<()> {
    let all: Api<Secret> = Api::all(env.client()?);
    common::wait_for(
        all,
        common::cached_lists().labels(&format!("kubesync.io/managed-by={uid}")),
        want,
        move |s: &Secret| {
            version.as_deref().is_none_or(|v| {
                s.annotations()
                    .get("kubesync.io/source-resource-version")
                    .map(String::as_str)
                    == Some(v)
            })
        },
    )
    .await
}

fn median(values: &[Duration]) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// One round of the engine: cold and warm fan-out, update, new namespace.
struct EngineRun {
    cold: Duration,
    warm: Duration,
    update: Duration,
    new_namespace: Duration,
    writes: u64,
    /// Mean server-side latency of the Secret writes of the cold fan-out.
    server: Duration,
}

struct Setup {
    prefix: String,
    control: String,
    source_ns: String,
}

async fn engine_round(
    env: &TestEnv,
    setup: &Setup,
    n: usize,
    round: usize,
) -> anyhow::Result<EngineRun> {
    let Setup {
        prefix,
        control,
        source_ns,
    } = setup;
    let namespaces: Api<Namespace> = Api::all(env.client()?);
    let src: Api<Secret> = Api::namespaced(env.client()?, source_ns);
    let (cold_name, warm_name) = (format!("cold-{round}"), format!("warm-{round}"));
    for name in [&cold_name, &warm_name] {
        src.patch(
            name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(secret(name, "v1")),
        )
        .await?;
    }
    let anchor: Api<ConfigMap> = Api::namespaced(env.client()?, control);
    // Declarations are anchored on ConfigMaps in the control namespace (their uid owns the
    // copies); the reconciler finds each one's spec by the ConfigMap's name.
    let mut uids = std::collections::HashMap::new();
    for name in [&cold_name, &warm_name] {
        let cm = anchor
            .create(
                &PostParams::default(),
                &serde_json::from_value(
                    serde_json::json!({"metadata": {"name": format!("{name}-uid")}}),
                )?,
            )
            .await?;
        uids.insert(name.clone(), cm.uid().unwrap_or_default());
    }
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
    let specs: std::collections::HashMap<String, (FanOutSpec, String)> = [&cold_name, &warm_name]
        .into_iter()
        .map(|name| (name.clone(), (spec_for(name), uids[name].clone())))
        .collect();
    let fan_out = Arc::new(FanOut::new("local").concurrency(CONCURRENCY));
    let controller = Controller::new()
        .cluster(Cluster::new("local", env.client()?))
        .watch("local", Watch::of::<ConfigMap>().namespace(control))?;
    let (stop, stopped) = oneshot::channel::<()>();
    let (f, control2) = (fan_out.clone(), control.clone());
    let t = Instant::now();
    let task = tokio::spawn(controller.run(
        reconciler_fn(move |key, ctx| {
            let (f, entry, control) = (f.clone(), specs.get(&key.name).cloned(), control2.clone());
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
    // Cold: the first declaration; the engine lists Secrets and Namespaces first.
    let counting = common::ServerWrites::start(vec![env.client()?], "secrets").await?;
    anchor
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": cold_name}}))?,
        )
        .await?;
    copies(env, &uids[&cold_name], None, n).await?;
    let cold = t.elapsed();
    let (_, server) = counting.since_start().await?;

    let t = Instant::now();
    let updated = src
        .patch(
            &cold_name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(secret(&cold_name, "v2")),
        )
        .await?;
    let rv = updated.metadata.resource_version.unwrap_or_default();
    copies(env, &uids[&cold_name], Some(rv), n).await?;
    let update = t.elapsed();

    let t = Instant::now();
    let late = format!("{prefix}-late-{round}");
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                serde_json::json!({"metadata": {"name": late, "labels": {"bench": prefix}}}),
            )?,
        )
        .await?;
    let late_api: Api<Secret> = Api::namespaced(env.client()?, &late);
    while late_api.get_opt(&cold_name).await?.is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let new_namespace = t.elapsed();

    // Warm: a second declaration of the same kind, whose watches already run.
    let t = Instant::now();
    anchor
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": warm_name}}))?,
        )
        .await?;
    copies(env, &uids[&warm_name], None, n + 1).await?;
    let warm = t.elapsed();
    let _ = stop.send(());
    task.await??;
    // Later rounds fan out to the same n namespaces.
    namespaces
        .patch(
            &late,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"bench": null}}})),
        )
        .await?;
    Ok(EngineRun {
        cold,
        warm,
        update,
        new_namespace,
        writes: fan_out.write_counter().writes(),
        server,
    })
}

/// The same writes by a plain client: one apply per namespace of the very object kubesync
/// would write (the source's copy with kubesync's marks), same concurrency.
async fn plain_round(
    env: &TestEnv,
    setup: &Setup,
    n: usize,
    round: usize,
    watched: bool,
) -> anyhow::Result<(Duration, Duration)> {
    let client = env.client()?;
    let name = format!("{}-{round}", if watched { "watched" } else { "plain" });
    let prefix = &setup.prefix;
    let ar = ApiResource::erase::<Secret>(&());
    let src: Api<DynamicObject> = Api::namespaced_with(client.clone(), &setup.source_ns, &ar);
    let source = src
        .patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(secret(&name, "v1")),
        )
        .await?;
    let owner = Owner {
        reference: format!("local/{}/{name}", setup.control),
        uid: format!("plain-{round}"),
    };
    let source_ref = format!("core/Secret/{}/{name}", setup.source_ns);
    let copies: Vec<DynamicObject> = (0..n)
        .map(|i| {
            plan::desired_copy(
                &ar,
                &source,
                &format!("{prefix}-{i}"),
                &name,
                &CopyRules::default(),
                &owner,
                &source_ref,
            )
        })
        .collect();
    // With `watched`, the watches the engine holds (every Secret, every Namespace) and the
    // benchmark's observer are open and drained, so the apiserver does the same event work.
    let watchers = if watched {
        vec![
            common::drain(Api::<Secret>::all(client.clone()), common::cached_lists()),
            common::drain(
                Api::<Namespace>::all(client.clone()),
                common::cached_lists(),
            ),
            common::drain(
                Api::<Secret>::all(client.clone()),
                common::cached_lists().labels(&format!("kubesync.io/managed-by={}", owner.uid)),
            ),
        ]
    } else {
        Vec::new()
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counting = common::ServerWrites::start(vec![env.client()?], "secrets").await?;
    let t = Instant::now();
    futures::stream::iter(copies)
        .map(|copy| {
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                copy.metadata.namespace.as_deref().unwrap_or_default(),
                &ar,
            );
            let name = name.clone();
            async move {
                api.patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(&copy),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let elapsed = t.elapsed();
    let (_, server) = counting.since_start().await?;
    for w in watchers {
        w.abort();
    }
    Ok((elapsed, server))
}

async fn run(env: &TestEnv, n: usize) -> anyhow::Result<()> {
    let prefix = format!("b{n}");
    let namespaces: Api<Namespace> = Api::all(env.client()?);
    let setup = Setup {
        control: format!("{prefix}-control"),
        source_ns: format!("{prefix}-src"),
        prefix: prefix.clone(),
    };
    for ns in [&setup.control, &setup.source_ns] {
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?,
            )
            .await?;
    }
    create_namespaces(&namespaces, &prefix, n).await;
    let mut engine_runs = Vec::new();
    let mut plain_runs = Vec::new();
    let mut watched_runs = Vec::new();
    for round in 0..ROUNDS {
        // Rotate the order: the cluster grows with every run.
        for step in 0..3 {
            match (step + round) % 3 {
                0 => engine_runs.push(engine_round(env, &setup, n, round).await?),
                1 => plain_runs.push(plain_round(env, &setup, n, round, false).await?),
                _ => watched_runs.push(plain_round(env, &setup, n, round, true).await?),
            }
        }
    }
    let pick =
        |f: fn(&EngineRun) -> Duration| median(&engine_runs.iter().map(f).collect::<Vec<_>>());
    let (cold, warm, update, new_ns) = (
        pick(|r| r.cold),
        pick(|r| r.warm),
        pick(|r| r.update),
        pick(|r| r.new_namespace),
    );
    let plain = median(&plain_runs.iter().map(|r| r.0).collect::<Vec<_>>());
    let watched = median(&watched_runs.iter().map(|r| r.0).collect::<Vec<_>>());
    let list = |v: Vec<Duration>| {
        v.iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "1 → {n} namespaces (median of {ROUNDS} rounds; writes per round {}):",
        engine_runs[0].writes
    );
    println!(
        "  all copies: cold {:.2} s (runs {}), warm {:.2} s (runs {})",
        cold.as_secs_f64(),
        list(engine_runs.iter().map(|r| r.cold).collect()),
        warm.as_secs_f64(),
        list(engine_runs.iter().map(|r| r.warm).collect()),
    );
    println!(
        "  plain client, same applies: {:.2} s (runs {}); with the same watches open: {:.2} s (runs {})",
        plain.as_secs_f64(),
        list(plain_runs.iter().map(|r| r.0).collect()),
        watched.as_secs_f64(),
        list(watched_runs.iter().map(|r| r.0).collect()),
    );
    println!(
        "  apiserver time per Secret write: kubesync (cold) {:.1} ms, plain client {:.1} ms, with watches {:.1} ms",
        pick(|r| r.server).as_secs_f64() * 1e3,
        median(&plain_runs.iter().map(|r| r.1).collect::<Vec<_>>()).as_secs_f64() * 1e3,
        median(&watched_runs.iter().map(|r| r.1).collect::<Vec<_>>()).as_secs_f64() * 1e3
    );
    println!(
        "  ratio to the plain client: cold {:.2} (includes listing every Secret and Namespace), warm {:.2}; to the plain client with watches: cold {:.2}, warm {:.2}",
        cold.as_secs_f64() / plain.as_secs_f64(),
        warm.as_secs_f64() / plain.as_secs_f64(),
        cold.as_secs_f64() / watched.as_secs_f64(),
        warm.as_secs_f64() / watched.as_secs_f64()
    );
    println!(
        "  update reaches all copies in {:.2} s; a new namespace gets its copy in {:.0} ms",
        update.as_secs_f64(),
        new_ns.as_secs_f64() * 1e3
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
