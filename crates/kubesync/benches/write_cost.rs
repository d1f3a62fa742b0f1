//! What each kind of write costs the apiserver, on a local control plane (part of
//! `make bench`).
//!
//! A copy can be written by a create (POST), a server-side apply (forced, as kubesync
//! updates a copy), a JSON merge patch or a replace (PUT). This benchmark sends each kind to
//! [`COPIES`] Secrets in as many namespaces, [`CONCURRENCY`] at once, in [`ROUNDS`] rounds, with
//! a watch on every Secret open (as the engine's are), and prints, per kind, the wall time, the
//! apiserver's mean time per write (its `/metrics`) and the CPU seconds of the control plane
//! per write (from `/proc`): the floor under an update wave, whoever sends it. Every write
//! changes the data of a Secret shaped like a copy (kubesync's marks, two keys).
//!
//! `KUBESYNC_BENCH_QUICK=1` runs one round of 100.

#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::Connect;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kubesync::syncers::fan_out::FIELD_MANAGER;
use kubesync_testenv::TestEnv;

const COPIES: usize = 1000;
const QUICK_COPIES: usize = 100;
const CONCURRENCY: usize = 16;
const ROUNDS: usize = 5;
const NAME: &str = "copy";

/// The kinds of write, in the order each round sends them.
const KINDS: [Kind; 5] = [
    Kind::Create,
    Kind::Apply,
    Kind::MergePatch,
    Kind::Replace,
    Kind::Delete,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Create,
    Apply,
    MergePatch,
    /// A read, then a PUT of the object read with the new data.
    Replace,
    Delete,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Create => "create (POST)",
            Kind::Apply => "server-side apply",
            Kind::MergePatch => "JSON merge patch",
            Kind::Replace => "replace (GET + PUT)",
            Kind::Delete => "delete",
        }
    }
}

/// A Secret shaped like a copy in `namespace`, whose data is `value`.
fn copy(namespace: &str, value: &str) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": NAME,
            "namespace": namespace,
            "labels": {"kubesync.io/managed-by": "bench"},
            "annotations": {"kubesync.io/source": "core/Secret/src/copy", "kubesync.io/source-resource-version": value},
        },
        "type": "Opaque",
        "data": data(value),
    }))?)
}

fn data(value: &str) -> serde_json::Value {
    serde_json::json!({
        "token": ByteString(value.as_bytes().to_vec()),
        "ca": ByteString(b"0123456789abcdef0123456789abcdef".to_vec()),
    })
}

/// One write of `kind` to the copy in `namespace`, its data `value`.
async fn write(
    api: Api<DynamicObject>,
    namespace: &str,
    kind: Kind,
    value: &str,
) -> anyhow::Result<()> {
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match kind {
        Kind::Create => {
            api.create(&post, &copy(namespace, value)?).await?;
        }
        Kind::Apply => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(NAME, &params, &Patch::Apply(copy(namespace, value)?))
                .await?;
        }
        Kind::MergePatch => {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            let patch = serde_json::json!({"data": data(value)});
            api.patch(NAME, &params, &Patch::Merge(patch)).await?;
        }
        Kind::Replace => {
            let mut current = api.get(NAME).await?;
            current.data["data"] = data(value);
            api.replace(NAME, &post, &current).await?;
        }
        Kind::Delete => {
            api.delete(NAME, &DeleteParams::background()).await?;
        }
    }
    Ok(())
}

/// Per kind, over the rounds: wall seconds, apiserver ms per write, control-plane CPU ms per write.
type Samples = Vec<(Kind, Vec<(f64, f64, f64)>)>;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    common::trace_if_asked();
    let (copies, rounds) = if common::quick() {
        (QUICK_COPIES, 1)
    } else {
        (COPIES, ROUNDS)
    };
    let env = TestEnv::builder().name("bench-write-cost").start().await?;
    let client = env.kubesync_client()?;
    let namespaces: Vec<String> = (0..copies).map(|i| format!("w-{i}")).collect();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(&namespaces)
        .map(|name| {
            let ns_api = ns_api.clone();
            async move {
                let ns: Namespace =
                    serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
                ns_api.create(&PostParams::default(), &ns).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let ar = ApiResource::erase::<Secret>(&());
    let watch = common::drain(Api::<Secret>::all(client.clone()), common::cached_lists());
    let mut samples: Samples = KINDS.iter().map(|k| (*k, Vec::new())).collect();
    for round in 0..rounds {
        for (kind, runs) in samples.iter_mut() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let counting = common::ServerWrites::start(vec![client.clone()], "secrets").await?;
            let cpu = common::CpuMeter::start(env.pids());
            let value = format!("r{round}-{kind:?}");
            let t = Instant::now();
            futures::stream::iter(&namespaces)
                .map(|ns| {
                    let api = Api::namespaced_with(client.clone(), ns, &ar);
                    write(api, ns, *kind, &value)
                })
                .buffer_unordered(CONCURRENCY)
                .try_collect::<Vec<_>>()
                .await?;
            let wall = t.elapsed().as_secs_f64();
            let (_, server_cpu) = cpu.since_start();
            let (count, mean) = counting.since_start().await?;
            anyhow::ensure!(
                count as usize == copies,
                "{kind:?}: {count} writes, expected {copies}"
            );
            runs.push((
                wall,
                mean.as_secs_f64() * 1e3,
                server_cpu * 1e3 / copies as f64,
            ));
        }
    }
    watch.abort();
    println!(
        "what a write costs the apiserver: {copies} Secrets, {CONCURRENCY} at once, a watch on every Secret open (median of {rounds} rounds; range)"
    );
    let create_cpu = median(&samples[0].1, |s| s.2);
    for (kind, runs) in &samples {
        let range = |f: fn(&(f64, f64, f64)) -> f64| {
            let v: Vec<f64> = runs.iter().map(f).collect();
            let (lo, hi) = v
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
            format!("{:.2} ({lo:.2}–{hi:.2})", median(runs, f))
        };
        println!(
            "  {:<22} wall {} s; apiserver {} ms per write; control-plane CPU {} ms per write ({:.2}× a create's)",
            kind.name(),
            range(|s| s.0),
            range(|s| s.1),
            range(|s| s.2),
            median(runs, |s| s.2) / create_cpu
        );
    }
    Ok(())
}

fn median(runs: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
