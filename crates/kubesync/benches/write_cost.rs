//! What each kind of write costs the apiserver, on a local control plane (part of
//! `make bench`).
//!
//! A copy can be written by a create (POST), a server-side apply (forced, as kubesync
//! updates a copy), a JSON merge patch or a replace (PUT). This benchmark sends each kind to
//! [`COPIES`] Secrets in as many namespaces, [`CONCURRENCY`] at once, in [`ROUNDS`] rounds, with
//! a watch on every Secret open (as the engine's are), and prints, per kind, the wall time, the
//! apiserver's mean time per write (its `/metrics`) and the CPU seconds of the control plane
//! per write (from `/proc`): the floor under an update wave, whoever sends it. Every write
//! changes the data of a Secret shaped like a copy (kubesync's marks, two keys), once with
//! short values and once with a 64 KiB one ([`SIZES`]). The apply is sent twice: with
//! kubesync's parameters ([`kubesync::writer::apply_params`]: `fieldValidation=Ignore`) and
//! with the apiserver's default directive, which has it decode the body a second time.
//!
//! `KUBESYNC_BENCH_QUICK=1` runs one round of 100, short values only.

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

/// The size in bytes of the longer of the copy's two values: a short token, and a value of
/// 64 KiB (a CA bundle's or a small configuration file's size).
const SIZES: [usize; 2] = [32, 64 * 1024];

/// The kinds of write, in the order they are printed.
const KINDS: [Kind; 6] = [
    Kind::Create,
    Kind::Apply,
    Kind::ApplyValidated,
    Kind::MergePatch,
    Kind::Replace,
    Kind::Delete,
];

/// The updates, in the order of the first round; each later round starts one further on,
/// so that no kind always follows the same one (the second of two merge patches in a row was
/// measured a third dearer than the first).
const UPDATES: [Kind; 4] = [
    Kind::Apply,
    Kind::ApplyValidated,
    Kind::MergePatch,
    Kind::Replace,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Create,
    /// Forced, with kubesync's parameters.
    Apply,
    /// Forced, with the apiserver's default `fieldValidation` (`Warn`).
    ApplyValidated,
    MergePatch,
    /// A read, then a PUT of the object read with the new data.
    Replace,
    Delete,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Create => "create (POST)",
            Kind::Apply => "apply (kubesync's)",
            Kind::ApplyValidated => "apply, validated",
            Kind::MergePatch => "JSON merge patch",
            Kind::Replace => "replace (GET + PUT)",
            Kind::Delete => "delete",
        }
    }
}

/// The kinds of round `round`: a create, the updates rotated, a delete.
fn round_kinds(round: usize) -> Vec<Kind> {
    let mut updates = UPDATES.to_vec();
    updates.rotate_left(round % UPDATES.len());
    std::iter::once(Kind::Create)
        .chain(updates)
        .chain([Kind::Delete])
        .collect()
}

/// A Secret shaped like a copy in `namespace`, whose data is `value` and `size` bytes.
fn copy(namespace: &str, value: &str, size: usize) -> anyhow::Result<DynamicObject> {
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
        "data": data(value, size),
    }))?)
}

fn data(value: &str, size: usize) -> serde_json::Value {
    let long: Vec<u8> = b"0123456789abcdef"
        .iter()
        .copied()
        .cycle()
        .take(size)
        .collect();
    serde_json::json!({
        "token": ByteString(value.as_bytes().to_vec()),
        "ca": ByteString(long),
    })
}

/// One write of `kind` to the copy in `namespace`, its data `value` and `size` bytes.
async fn write(
    api: Api<DynamicObject>,
    namespace: &str,
    kind: Kind,
    (value, size): (&str, usize),
) -> anyhow::Result<()> {
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match kind {
        Kind::Create => {
            api.create(&post, &copy(namespace, value, size)?).await?;
        }
        Kind::Apply | Kind::ApplyValidated => {
            let params = if kind == Kind::Apply {
                kubesync::writer::apply_params(FIELD_MANAGER)
            } else {
                PatchParams::apply(FIELD_MANAGER).force()
            };
            api.patch(NAME, &params, &Patch::Apply(copy(namespace, value, size)?))
                .await?;
        }
        Kind::MergePatch => {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            let patch = serde_json::json!({"data": data(value, size)});
            api.patch(NAME, &params, &Patch::Merge(patch)).await?;
        }
        Kind::Replace => {
            let mut current = api.get(NAME).await?;
            current.data["data"] = data(value, size);
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
    let sizes: &[usize] = if common::quick() { &SIZES[..1] } else { &SIZES };
    for &size in sizes {
        let mut samples: Samples = KINDS.iter().map(|k| (*k, Vec::new())).collect();
        for round in 0..rounds {
            for kind in round_kinds(round) {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let counting = common::ServerWrites::start(vec![client.clone()], "secrets").await?;
                let cpu = common::CpuMeter::start(env.pids());
                let value = format!("r{round}-{kind:?}");
                let t = Instant::now();
                futures::stream::iter(&namespaces)
                    .map(|ns| {
                        let api = Api::namespaced_with(client.clone(), ns, &ar);
                        write(api, ns, kind, (&value, size))
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
                let runs = &mut samples
                    .iter_mut()
                    .find(|(k, _)| *k == kind)
                    .expect("kind")
                    .1;
                runs.push((
                    wall,
                    mean.as_secs_f64() * 1e3,
                    server_cpu * 1e3 / copies as f64,
                ));
            }
        }
        print_samples(&samples, (copies, size, rounds));
    }
    watch.abort();
    Ok(())
}

/// Prints one size's samples: per kind, medians and ranges, and its CPU against a create's.
fn print_samples(samples: &Samples, (copies, size, rounds): (usize, usize, usize)) {
    println!(
        "what a write costs the apiserver: {copies} Secrets with a value of {size} bytes, {CONCURRENCY} at once, a watch on every Secret open (median of {rounds} rounds; range)"
    );
    let create_cpu = median(&samples[0].1, |s| s.2);
    for (kind, runs) in samples {
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
    let (apply, validated) = (
        median(&samples[1].1, |s| s.2),
        median(&samples[2].1, |s| s.2),
    );
    println!(
        "  kubesync's applies (fieldValidation=Ignore) cost the control plane {:.2}× those with the default validation",
        apply / validated
    );
}

fn median(runs: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(f).collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
