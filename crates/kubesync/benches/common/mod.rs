//! Helpers shared by the benchmarks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use kubesync::syncers::fan_out::rules::Owner;
use kubesync::syncers::fan_out::{Declaration, FanOut, FanOutSpec, Outcome};
use kubesync::{Action, Controller, ObjectKey, Watch, reconciler_fn};
use serde::de::DeserializeOwned;

/// Clients for a control plane, built like kubesync's own ([`kubesync::cluster::client`]): the
/// engine and the plain client it is compared with connect the same way.
pub trait Connect {
    /// A new client for this control plane.
    fn kubesync_client(&self) -> Result<kube::Client, kubesync::Error>;
}

impl Connect for kubesync_testenv::TestEnv {
    fn kubesync_client(&self) -> Result<kube::Client, kubesync::Error> {
        let config = self
            .config()
            .map_err(|e| kubesync::Error::Kubeconfig(e.to_string()))?;
        kubesync::cluster::client(config)
    }
}

/// The watch configuration the engine's watches run with (lists served from the apiserver's
/// watch cache in one page). Drains and observers in the benchmarks use it too, so that the
/// plain client's runs carry the same watch load as the engine's.
pub fn cached_lists() -> watcher::Config {
    kubesync::Watch::of::<k8s_openapi::api::core::v1::Namespace>()
        .config()
        .clone()
}

/// Waits until at least `want` objects seen by a watch on `api` satisfy `done`.
///
/// Convergence is observed through one watch, as the engine observes its own writes: polling
/// with full lists would load the apiserver and etcd (each list of N objects is decoded and
/// filtered on the server) and slow down the very writes being measured.
pub async fn wait_for<K>(
    api: Api<K>,
    config: watcher::Config,
    want: usize,
    done: impl Fn(&K) -> bool,
) -> anyhow::Result<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut matched: HashSet<(Option<String>, String)> = HashSet::new();
    let stream = watcher::watcher(api, config);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.try_next().await? {
        match event {
            // A (re)list starts from scratch: the objects it lists are sent again.
            Event::Init => matched.clear(),
            Event::InitDone => {}
            Event::Apply(obj) | Event::InitApply(obj) => {
                let key = (obj.namespace(), obj.name_any());
                if done(&obj) {
                    matched.insert(key);
                } else {
                    matched.remove(&key);
                }
            }
            Event::Delete(obj) => {
                matched.remove(&(obj.namespace(), obj.name_any()));
            }
        }
        if matched.len() >= want {
            return Ok(());
        }
    }
    anyhow::bail!("the watch ended before {want} objects were done")
}

/// The kube-apiserver argument the benchmarks that time against a plain client start their
/// control planes with: its profiling endpoints, which [`settle`] uses to collect garbage.
pub const PROFILING: &str = "--profiling=true";

/// Lets the control plane settle before a timed window: kube-apiserver collects its garbage
/// (its `/debug/pprof/heap?gc=1`; the control plane runs with [`PROFILING`]), then `quiet`
/// passes. On two cores a collection takes the apiserver half the CPU for 100–200 ms; whether
/// one fell inside a window depended on what earlier steps had allocated (a window of 1 000
/// creates took 0.35 s or 0.48 s, for the engine and the plain client alike). Each window
/// now starts with the apiserver's heap at its live size, so whether it collects inside one
/// depends on that window's own work, the same for both sides.
pub async fn settle(
    env: &kubesync_testenv::TestEnv,
    quiet: std::time::Duration,
) -> anyhow::Result<()> {
    let req = http::Request::get("/debug/pprof/heap?gc=1&debug=1").body(Vec::new())?;
    env.kubesync_client()?.request_text(req).await?;
    tokio::time::sleep(quiet).await;
    Ok(())
}

/// Requests and seconds spent serving them, by (verb, resource, subresource).
pub type Totals = BTreeMap<(String, String, String), (f64, f64)>;

/// One sample of an apiserver's `/metrics`: the rest of its name after the prefix asked
/// for (e.g. `count`), its labels, its value.
pub type Sample = (String, BTreeMap<String, String>, f64);

/// The samples of an apiserver's `/metrics` whose name starts with `prefix`.
pub async fn apiserver_samples(client: &kube::Client, prefix: &str) -> anyhow::Result<Vec<Sample>> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix(prefix)?.split_once('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            let labels = labels
                .split(',')
                .filter_map(|kv| {
                    let (k, v) = kv.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect();
            Some((
                name.to_string(),
                labels,
                value.trim().parse().unwrap_or(0.0),
            ))
        })
        .collect())
}

/// Request totals by (verb, resource, subresource), read from an apiserver's `/metrics`:
/// (requests, seconds spent serving them).
pub async fn server_requests(client: &kube::Client) -> anyhow::Result<Totals> {
    let mut totals = Totals::new();
    for (name, labels, value) in
        apiserver_samples(client, "apiserver_request_duration_seconds_").await?
    {
        let is_count = match name.as_str() {
            "count" => true,
            "sum" => false,
            _ => continue,
        };
        let label = |k: &str| labels.get(k).cloned().unwrap_or_default();
        let entry = totals
            .entry((label("verb"), label("resource"), label("subresource")))
            .or_default();
        if is_count {
            entry.0 += value;
        } else {
            entry.1 += value;
        }
    }
    Ok(totals)
}

const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];

/// Server-side request totals of several apiservers, to compare phases of a benchmark.
pub struct ServerWrites {
    clients: Vec<kube::Client>,
    resource: String,
    start: Vec<Totals>,
}

impl ServerWrites {
    /// Starts counting requests on these apiservers; `resource` names the one whose writes
    /// [`since_start`](Self::since_start) reports.
    pub async fn start(clients: Vec<kube::Client>, resource: &str) -> anyhow::Result<Self> {
        let mut start = Vec::new();
        for c in &clients {
            start.push(server_requests(c).await?);
        }
        Ok(Self {
            clients,
            resource: resource.to_string(),
            start,
        })
    }

    /// Requests served since `start`, by (verb, resource, subresource), summed over the
    /// apiservers: (requests, seconds).
    pub async fn all_since_start(&self) -> anyhow::Result<Totals> {
        let mut diff = Totals::new();
        for (c, before) in self.clients.iter().zip(&self.start) {
            for (k, (c1, s1)) in server_requests(c).await? {
                let (c0, s0) = before.get(&k).copied().unwrap_or_default();
                if c1 > c0 {
                    let e = diff.entry(k).or_default();
                    e.0 += c1 - c0;
                    e.1 += s1 - s0;
                }
            }
        }
        Ok(diff)
    }

    /// Write requests for the resource served since `start` and their mean server-side
    /// latency. With `BENCH_TRACE` set, every request kind is printed too.
    pub async fn since_start(&self) -> anyhow::Result<(u64, Duration)> {
        let all = self.all_since_start().await?;
        if std::env::var_os("BENCH_TRACE").is_some() {
            for ((verb, resource, sub), (count, sum)) in &all {
                eprintln!(
                    "    {verb:<7} {resource}{}{sub}: {count} requests, mean {:.1} ms",
                    if sub.is_empty() { "" } else { "/" },
                    sum * 1e3 / count
                );
            }
        }
        let (count, sum) = all
            .iter()
            .filter(|((verb, resource, _), _)| {
                *resource == self.resource && WRITE_VERBS.contains(&verb.as_str())
            })
            .fold((0.0, 0.0), |(c, s), (_, (c1, s1))| (c + c1, s + s1));
        let mean = if count > 0.0 { sum / count } else { 0.0 };
        Ok((count as u64, Duration::from_secs_f64(mean)))
    }
}

/// Keeps a watch open and discards its events (the load of a watch, without its consumer).
pub fn drain<K>(api: Api<K>, config: watcher::Config) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    tokio::spawn(async move {
        let stream = watcher::watcher(api, config);
        let mut stream = std::pin::pin!(stream);
        while futures::StreamExt::next(&mut stream).await.is_some() {}
    })
}

/// CPU time used so far by processes (from `/proc/<pid>/stat`: user + system), in seconds.
fn cpu_seconds(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may contain spaces): state is field 3, utime 14,
    // stime 15.
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .into_iter()
        .flatten()
        .filter_map(|f| f.parse::<f64>().ok())
        .sum();
    // The kernel's USER_HZ is 100 on every Linux architecture this runs on.
    ticks / 100.0
}

/// CPU time spent by the benchmark process and by a control plane's processes between
/// [`start`](Self::start) and [`since_start`](Self::since_start): a measure of work done
/// that, unlike wall time, does not depend on what else the machine is busy with.
pub struct CpuMeter {
    servers: Vec<u32>,
    start: (f64, f64),
}

impl CpuMeter {
    /// Starts measuring this process and the processes `servers` (e.g. `TestEnv::pids`).
    pub fn start(servers: Vec<u32>) -> Self {
        let mut m = Self {
            servers,
            start: (0.0, 0.0),
        };
        m.start = m.now();
        m
    }

    fn now(&self) -> (f64, f64) {
        (
            cpu_seconds("self"),
            self.servers
                .iter()
                .map(|p| cpu_seconds(&p.to_string()))
                .sum(),
        )
    }

    /// CPU seconds since start: (this process, the servers).
    pub fn since_start(&self) -> (f64, f64) {
        let (c, s) = self.now();
        (c - self.start.0, s - self.start.1)
    }
}

// Declarations anchored on ConfigMaps, for the fan-out benchmarks (`fan_out.rs`, `pull.rs`).
//
// A declaration `<name>` of a benchmark is two ConfigMaps in a control namespace: the uid
// anchor `<name>-uid` (`uid_anchor`), created first, whose uid owns the copies (it stands for
// the uid of an ObjectSync, and stays while the declaration comes and goes); and `<name>`
// itself, whose creation declares it and whose deletion retracts it (the engine then removes
// every copy).

/// The name of the uid anchor of declaration `declaration`.
pub fn uid_anchor(declaration: &str) -> String {
    format!("{declaration}-uid")
}

/// Creates the empty ConfigMap `name` in the namespace of `api` (an anchor: a uid anchor, or
/// the declaration itself); returns its uid.
pub async fn create_anchor(api: &Api<ConfigMap>, name: &str) -> anyhow::Result<String> {
    let cm = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?,
        )
        .await?;
    Ok(cm.uid().unwrap_or_default())
}

/// Runs `fan_out` in `controller` for the declarations `specs`, anchored on the ConfigMaps of
/// namespace `control` of cluster `local`, until `stop` resolves.
///
/// `controller` has its clusters registered (`local` among them; `fan_out` is the fan-out of
/// `local`); this adds its one watch, of the ConfigMaps in `control`, and spawns it. `specs`
/// maps each declaration's name to its spec and the uid owning its copies (its uid anchor's,
/// see [`create_anchor`]).
///
/// Each reconcile of a ConfigMap named like a declaration reconciles that declaration
/// (`Owner { reference: "<local>/<control>/<name>", uid }`; `deleting` once the ConfigMap is
/// gone) and requeues it after 100 ms until its report is ready. Every reconcile calls
/// `report` with the key, when the reconcile started, and the fan-out's report — for other
/// ConfigMaps (the uid anchors) an empty one, at once, so that the benchmark knows the
/// controller runs. `report` runs when the reconcile completes: `Instant::now()` in it is the
/// time of completion.
pub fn run_declarations<R>(
    controller: Controller,
    fan_out: Arc<FanOut>,
    local: &str,
    control: &str,
    specs: HashMap<String, (FanOutSpec, String)>,
    report: R,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<Result<(), kubesync::Error>>, kubesync::Error>
where
    R: Fn(&ObjectKey, Instant, Outcome) + Send + Sync + 'static,
{
    let controller = controller.watch(local, Watch::of::<ConfigMap>().namespace(control))?;
    let reference = format!("{local}/{control}");
    let report = Arc::new(report);
    Ok(tokio::spawn(controller.run(
        reconciler_fn(move |key, ctx| {
            let (f, entry, reference) = (
                fan_out.clone(),
                specs.get(&key.name).cloned(),
                reference.clone(),
            );
            let report = report.clone();
            async move {
                let started = Instant::now();
                let Some((spec, uid)) = entry else {
                    // Not a declaration (the uid anchors): reported, so the benchmark knows the
                    // controller runs.
                    report(&key, started, Outcome::default());
                    return Ok(Action::done());
                };
                let decl = Declaration {
                    key: key.clone(),
                    owner: Owner {
                        reference: format!("{reference}/{}", key.name),
                        uid,
                        shard: None,
                    },
                    spec,
                    // The anchor deleted: remove every copy.
                    deleting: ctx.get(&key).is_none(),
                    refused: false,
                    record: None,
                };
                let outcome = f.reconcile(&ctx, &decl).await?;
                let ready = outcome.ready;
                report(&key, started, outcome);
                Ok::<_, kubesync::Error>(if ready {
                    Action::done()
                } else {
                    Action::requeue(Duration::from_millis(100))
                })
            }
        }),
        stop,
    )))
}

/// Whether `KUBESYNC_BENCH_QUICK` asks for a benchmark's smaller version (set, not empty,
/// not `0`).
pub fn quick() -> bool {
    std::env::var("KUBESYNC_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// With `BENCH_TRACE` set, the engine's logs (filtered by `RUST_LOG`) go to stderr.
pub fn trace_if_asked() {
    if std::env::var_os("BENCH_TRACE").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
}
