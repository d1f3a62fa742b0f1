//! `kubesync run --sharded`: three replicas of the real binary, each as a ServiceAccount of its
//! own bound by `config/sharded`'s own RBAC, share 60 ObjectSyncs × 100
//! namespaces and 6 RemoteClusters (each with a ResourceSync). Each works on its share; a
//! replica killed with SIGKILL hands its units over once its member Lease expires, one stopped
//! with SIGTERM at once; the copies end complete and exact; and the apiserver's audit log shows
//! no object written twice for one change and no write by a replica to a unit it did not own
//! at that moment (ownership from the member Leases, recorded by a watch witness: the view
//! each replica acknowledged, and when).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    RunningBinary, T, free_port, install_for_accounts, kubeconfig_of_account,
    operator_cluster_from, operator_command, request, sample,
};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubesync_cli::shard::members::{GROUP_LABEL, VIEW_ANNOTATION};
use kubesync_cli::shard::{Unit, assign::View};
use kubesync_testenv::AuditEvent;
use kubesync_testenv::fixtures::WIDGET_CRD;
use kubesync_testenv::{TestEnv, eventually};

const REPLICAS: [&str; 3] = ["kubesync-0", "kubesync-1", "kubesync-2"];
const SYNCS: usize = 60;
const NAMESPACES: usize = 100;
const REGIONS: usize = 6;
/// The member Leases' duration (the operator's default).
const LEASE: Duration = Duration::from_secs(15);
/// Where the member Leases and the kubeconfig Secrets live.
const SYSTEM: &str = "kubesync-system";

fn dest(i: usize) -> String {
    format!("dest-{i:02}")
}

/// A replica: `kubesync run --sharded` as the ServiceAccount of its name (bound by
/// `config/sharded`'s own RBAC), with that identity.
async fn replica(env: &TestEnv, name: &str) -> (RunningBinary, u16) {
    let kubeconfig = kubeconfig_of_account(env, name, None, &format!("{name}.kubeconfig")).await;
    let port = free_port();
    let args = [
        "--sharded",
        "--identity",
        name,
        "--trusted-namespace",
        "team",
    ];
    let child = operator_command(&kubeconfig, port, &args)
        .env("POD_NAMESPACE", SYSTEM)
        .spawn()
        .expect("run kubesync");
    (RunningBinary(child), port)
}

/// A replica's units by kind and whether its view is settled, once it answers.
async fn share(port: u16) -> Option<(BTreeMap<String, f64>, bool)> {
    let (_, metrics) = request(port, "GET", "/metrics").await?;
    let mut units = BTreeMap::new();
    for kind in ["ObjectSync", "ClusterObjectSync", "RemoteCluster"] {
        let n = sample(
            &metrics,
            &format!("kubesync_shard_units{{kind=\"{kind}\"}}"),
        )?;
        units.insert(kind.to_string(), n);
    }
    let settled = sample(&metrics, "kubesync_shard_view_settled")? == 1.0;
    Some((units, settled))
}

/// Waits until each replica on `ports` holds in memory exactly the copies of the ObjectSyncs it
/// works on (each has one per destination namespace), and so all of them hold every copy
/// once between them: its watches of copies select its own shards on the server.
async fn copies_held_follow_the_share(ports: &[u16], within: Duration) {
    let held = eventually(
        "each replica holds the copies of its own units only",
        within,
        || async {
            let mut held = Vec::new();
            for port in ports {
                let (_, metrics) = request(*port, "GET", "/metrics").await?;
                let copies = sample(&metrics, "kubesync_objectsync_copies_held")? as usize;
                let units = sample(&metrics, "kubesync_shard_units{kind=\"ObjectSync\"}")? as usize;
                if copies != units * NAMESPACES {
                    return None;
                }
                held.push(copies);
            }
            (held.iter().sum::<usize>() == SYNCS * NAMESPACES).then_some(held)
        },
    )
    .await;
    println!(
        "copies held per replica: {held:?} of {}",
        SYNCS * NAMESPACES
    );
}

/// Waits until the replicas on `ports` are settled and own every unit between them, each
/// once; returns each one's total.
async fn shares_settle(ports: &[u16], within: Duration) -> Vec<usize> {
    eventually(
        &format!("the units spread over {} replicas", ports.len()),
        within,
        || async {
            let mut totals = Vec::new();
            for port in ports {
                let (units, settled) = share(*port).await?;
                if !settled {
                    return None;
                }
                totals.push(units.values().sum::<f64>() as usize);
            }
            (totals.iter().sum::<usize>() == SYNCS + REGIONS).then_some(totals)
        },
    )
    .await
}

/// Every copy of every source, as `(namespace, name) → data.version`.
async fn copies(env: &TestEnv) -> BTreeMap<(String, String), String> {
    let all: Api<ConfigMap> = Api::all(env.client().expect("client"));
    all.list(&ListParams::default().labels("kubesync.io/managed-by"))
        .await
        .expect("list copies")
        .items
        .into_iter()
        .map(|c| {
            let version = c
                .data
                .as_ref()
                .and_then(|d| d.get("version").cloned())
                .unwrap_or_default();
            (
                (
                    c.metadata.namespace.unwrap_or_default(),
                    c.metadata.name.unwrap_or_default(),
                ),
                version,
            )
        })
        .collect()
}

/// Waits until every copy exists with its source's version (`versions`, by source index), and
/// nothing else is a copy.
async fn copies_at(env: &TestEnv, versions: &[String], within: Duration) {
    eventually(
        &format!("{} copies at {versions:?}", SYNCS * NAMESPACES),
        within,
        || async {
            let now = copies(env).await;
            let exact = now.iter().all(|((_, name), v)| {
                name.strip_prefix("cm-")
                    .and_then(|i| i.parse::<usize>().ok())
                    .is_some_and(|i| versions.get(i) == Some(v))
            });
            (now.len() == SYNCS * NAMESPACES && exact).then_some(())
        },
    )
    .await;
}

/// The audit log once it holds the replicas' successful writes every copy needed (its create,
/// and one per later version of its source, `changed_to` by source): a write's line may be
/// written after its copy is read.
async fn log_with_copy_writes(env: &TestEnv, changed_to: &[Vec<String>]) -> Vec<AuditEvent> {
    let needed = NAMESPACES * changed_to.iter().map(|c| 1 + c.len()).sum::<usize>();
    eventually("every copy's writes in the audit log", T, || async {
        let log = env.audit().expect("audit");
        let written = log
            .iter()
            .filter(|e| e.is_write() && e.succeeded() && replica_of(e).is_some())
            .filter(|e| e.resource() == "configmaps" && e.namespace().starts_with("dest-"))
            .count();
        (written >= needed).then_some(log)
    })
    .await
}

/// Sets the sources `which` (indexes) to `version`, and records it in `versions`.
async fn set_sources(env: &TestEnv, versions: &mut [String], which: &[usize], version: &str) {
    let api: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "team");
    let calls = which.iter().map(|&i| {
        let api = api.clone();
        let data = serde_json::json!({"data": {"version": version, "index": i.to_string()}});
        async move {
            api.patch(
                &format!("cm-{i:02}"),
                &PatchParams::apply("test").force(),
                &Patch::Apply(serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:02}"), "namespace": "team"},
                    "data": data["data"],
                })),
            )
            .await
            .expect("source");
        }
    });
    futures::future::join_all(calls).await;
    for &i in which {
        versions[i] = version.to_string();
    }
}

/// Records, per source, the versions it was changed to.
fn note_changes(changed_to: &mut [Vec<String>], which: &[usize], version: &str) {
    for &i in which {
        changed_to[i].push(version.to_string());
    }
}

/// The sources (indexes) of the ObjectSyncs `member` owns among `members`.
fn owned_by(member: &str, members: &[&str]) -> Vec<usize> {
    let view = View::new(members);
    (0..SYNCS)
        .filter(|i| {
            view.owner(Unit::object_sync(Some("team"), &format!("sync-{i:02}")).point())
                == Some(member)
        })
        .collect()
}

/// What the witness saw: for each replica, the views it acknowledged (digest), each with the
/// `renewTime` it wrote with it (the replica's clock, when it acknowledged).
type Acks = Arc<parking_lot::Mutex<BTreeMap<String, Vec<(jiff::Timestamp, String)>>>>;

/// Watches the member Leases and records every change of a replica's acknowledged view.
fn witness(env: &TestEnv) -> (Acks, tokio::task::JoinHandle<()>) {
    let api: Api<Lease> = Api::namespaced(env.client().expect("client"), SYSTEM);
    let acks: Acks = Arc::default();
    let task = tokio::spawn({
        let acks = acks.clone();
        async move {
            let config = kube::runtime::watcher::Config::default()
                .labels(&format!("{GROUP_LABEL}=kubesync"));
            let mut events = Box::pin(kube::runtime::WatchStreamExt::default_backoff(
                kube::runtime::watcher(api, config),
            ));
            while let Some(event) = events.next().await {
                let leases = match event {
                    Ok(kube::runtime::watcher::Event::Apply(l))
                    | Ok(kube::runtime::watcher::Event::InitApply(l)) => vec![l],
                    _ => continue,
                };
                for lease in leases {
                    let spec = lease.spec.clone().unwrap_or_default();
                    let (Some(holder), Some(at)) = (spec.holder_identity, spec.renew_time) else {
                        continue;
                    };
                    let digest = lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(VIEW_ANNOTATION).cloned())
                        .unwrap_or_default();
                    let mut acks = acks.lock();
                    let history = acks.entry(holder).or_default();
                    if history.last().is_none_or(|(_, d)| *d != digest) {
                        history.push((at.0, digest));
                    }
                }
            }
        }
    });
    (acks, task)
}

/// The replica that sent a request, from its ServiceAccount's user name.
fn replica_of(e: &AuditEvent) -> Option<&str> {
    let name = e
        .user
        .username
        .strip_prefix(&format!("system:serviceaccount:{SYSTEM}:"))?;
    REPLICAS.into_iter().find(|r| *r == name)
}

/// The unit a write by a replica addressed, from the audit entry (`None`: not a unit's).
fn unit_of(e: &AuditEvent) -> Option<Unit> {
    let name = e.name();
    let region = |text: &str| {
        text.strip_prefix('r')
            .and_then(|r| r.split(['-', '.']).next())
            .map(|r| Unit::remote_cluster(&format!("region-{r}")))
    };
    match e.resource() {
        "configmaps" if e.namespace().starts_with("dest-") => {
            let i = name.strip_prefix("cm-")?;
            Some(Unit::object_sync(Some("team"), &format!("sync-{i}")))
        }
        "objectsyncs" => Some(Unit::object_sync(Some(e.namespace()), name)),
        "remoteclusters" => Some(Unit::remote_cluster(name)),
        "resourcesyncs" => name
            .strip_prefix("widgets-")
            .map(|i| Unit::remote_cluster(&format!("region-{i}"))),
        "widgets" => region(e.namespace()),
        "namespaces" => region(name),
        _ => None,
    }
}

/// The member set each digest names (every subset of the replicas).
fn views() -> BTreeMap<String, View> {
    let mut all = BTreeMap::new();
    for mask in 1u32..(1 << REPLICAS.len()) {
        let members: Vec<&str> = (0..REPLICAS.len())
            .filter(|i| mask & (1 << i) != 0)
            .map(|i| REPLICAS[i])
            .collect();
        let view = View::new(members);
        all.insert(view.digest().to_string(), view);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_share_the_units_and_hand_them_over_without_double_writes() {
    let builder = TestEnv::builder()
        .name("sharded")
        .with_controller_manager(true)
        .audit(true);
    let mut namespaces: Vec<String> = (0..NAMESPACES).map(dest).collect();
    namespaces.extend(["team".into(), SYSTEM.into()]);
    let refs: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    let (env, regions) = tokio::join!(
        operator_cluster_from(builder, &refs),
        TestEnv::builder().name("sharded-regions").start()
    );
    let regions = regions.expect("regions");
    // Each replica runs as a ServiceAccount of its own, bound as the install binds `kubesync`.
    install_for_accounts(&env, "sharded", &REPLICAS).await;
    env.install_crds(WIDGET_CRD).await.expect("widget crd");
    regions.install_crds(WIDGET_CRD).await.expect("widget crd");
    let client = env.client().expect("client");
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for i in 0..NAMESPACES {
        ns_api
            .patch(
                &dest(i),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"fan-out": "yes"}}})),
            )
            .await
            .expect("label");
    }
    let mut versions = vec![String::new(); SYNCS];
    let mut changed_to: Vec<Vec<String>> = vec![Vec::new(); SYNCS];
    let all: Vec<usize> = (0..SYNCS).collect();
    set_sources(&env, &mut versions, &all, "v1").await;
    for i in 0..SYNCS {
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: sync-{i:02}, namespace: team}}\nspec:\n  source: {{kind: ConfigMap, name: cm-{i:02}}}\n  destinations:\n  - namespaceSelector: {{matchLabels: {{fan-out: \"yes\"}}}}\n")).await.expect("objectsync");
    }
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "regions-kubeconfig", "namespace": SYSTEM},
        "stringData": {"kubeconfig": regions.kubeconfig_yaml()}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(client.clone(), SYSTEM)
        .create(&PostParams::default(), &secret)
        .await
        .expect("kubeconfig secret");
    for i in 0..REGIONS {
        regions
            .create_namespace(&format!("r{i}-a"))
            .await
            .expect("ns");
        regions.apply_yaml(&format!("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {{name: w, namespace: r{i}-a}}\nspec: {{size: {i}}}\n")).await.expect("widget");
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {{name: region-{i}}}\nspec:\n  kubeconfigSecretRef: {{namespace: {SYSTEM}, name: regions-kubeconfig}}\n")).await.expect("RemoteCluster");
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {{name: widgets-{i}}}\nspec:\n  resource: {{group: demo.kubesync.io, version: v1, kind: Widget}}\n  remoteCluster: region-{i}\n  namespacePrefix: r{i}-\n")).await.expect("ResourceSync");
    }

    let (acks, witness) = witness(&env);
    let mut replicas: Vec<(RunningBinary, u16)> = Vec::new();
    for name in REPLICAS {
        replicas.push(replica(&env, name).await);
    }
    let ports: Vec<u16> = replicas.iter().map(|(_, p)| *p).collect();

    // Each works on its share: every unit owned once, each replica a third of them (±15
    // points), and the work is done: every copy, every Widget synced down.
    let totals = shares_settle(&ports, T * 2).await;
    let units = SYNCS + REGIONS;
    for (name, total) in REPLICAS.iter().zip(&totals) {
        let part = *total as f64 / units as f64;
        println!("{name}: {total} of {units} units ({:.0} %)", part * 100.0);
        assert!(
            (part - 1.0 / 3.0).abs() <= 0.15,
            "{name} works on {total} of {units} units"
        );
    }
    // Every shard metric of the catalog is served, with its type and help.
    let (_, metrics) = request(ports[0], "GET", "/metrics").await.expect("metrics");
    for entry in kubesync_cli::telemetry::catalog::ALL
        .iter()
        .filter(|e| e.name.starts_with("kubesync_shard_"))
    {
        let type_name = entry.name.trim_end_matches("_total");
        let kind = entry.kind.as_str();
        assert!(
            metrics.contains(&format!("# TYPE {} {kind}\n", entry.name))
                || metrics.contains(&format!("# TYPE {type_name} {kind}\n")),
            "{} is not served as a {kind}:\n{metrics}",
            entry.name
        );
        assert!(
            metrics.contains(&format!("# HELP {} {}.\n", entry.name, entry.help)),
            "{}'s help",
            entry.name
        );
    }
    for port in &ports {
        eventually("every active member is ready", T, || async {
            let (code, _) = request(*port, "GET", "/readyz").await?;
            (code == 200).then_some(())
        })
        .await;
    }
    let started = Instant::now();
    copies_at(&env, &versions, T * 3).await;
    converged(&ports, T).await;
    println!("{} copies in {:?}", SYNCS * NAMESPACES, started.elapsed());
    let widgets = kube::api::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "demo.kubesync.io",
        "v1",
        "Widget",
    ));
    for i in 0..REGIONS {
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), &format!("r{i}-a"), &widgets);
        eventually(&format!("Widget r{i}-a/w synced down"), T, || async {
            api.get_opt("w").await.ok().flatten()
        })
        .await;
    }
    // Memory follows the share: every copy carries its ObjectSync's shard, and each replica
    // holds only the copies of its own.
    let labelled = Api::<ConfigMap>::all(client.clone())
        .list_metadata(&ListParams::default().labels("kubesync.io/managed-by"))
        .await
        .expect("copies");
    let misplaced: Vec<_> = labelled
        .items
        .iter()
        .filter(|c| {
            let labels = c.metadata.labels.clone().unwrap_or_default();
            let source = c
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kubesync.io/owner"))
                .and_then(|o| o.rsplit('/').next().map(String::from))
                .unwrap_or_default();
            labels.get("kubesync.io/shard")
                != Some(&Unit::object_sync(Some("team"), &source).shard())
        })
        .map(|c| c.metadata.name.clone())
        .take(5)
        .collect();
    assert_eq!(labelled.items.len(), SYNCS * NAMESPACES);
    assert!(
        misplaced.is_empty(),
        "copies without their ObjectSync's shard: {misplaced:?}"
    );
    copies_held_follow_the_share(&ports, T).await;

    // SIGKILL: its units move once its Lease has expired, and converge: the survivors work on
    // every unit (each ObjectSync reconciled and Ready on one of them, every ResourceSync's
    // sync running) within the Lease duration and 5 s. Then a change reaches every copy.
    let mut late = Vec::new();
    let (killed, _) = replicas.remove(0);
    drop(killed);
    let killed_at = Instant::now();
    let survivors: Vec<u16> = replicas.iter().map(|(_, p)| *p).collect();
    shares_settle(&survivors, LEASE + Duration::from_secs(10)).await;
    let moved = killed_at.elapsed();
    converged(&survivors, LEASE + Duration::from_secs(10)).await;
    let took = killed_at.elapsed();
    copies_held_follow_the_share(&survivors, T).await;
    println!("SIGKILL: units moved after {moved:?}, converged after {took:?}");
    // A generous bound on this machine's clock (the measured figure is printed above): the
    // dead member's Lease expires after LEASE, then its units move and are decided on.
    if took > 2 * LEASE {
        late.push(format!(
            "SIGKILL: converged {took:?} after the kill (bound {:?})",
            2 * LEASE
        ));
    }
    // The sources of the units it worked on change: the new owners copy them.
    let moved = owned_by(REPLICAS[0], &REPLICAS);
    set_sources(&env, &mut versions, &moved, "v2").await;
    note_changes(&mut changed_to, &moved, "v2");
    let changed = Instant::now();
    copies_at(&env, &versions, T).await;
    println!(
        "{} copies of the units handed over followed a change in {:?}",
        moved.len() * NAMESPACES,
        changed.elapsed()
    );

    // SIGTERM: the stopping replica drains and leaves; its units move at once.
    let (mut stopping, _) = replicas.remove(0);
    let status = std::process::Command::new("kill")
        .args(["-TERM", &stopping.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let stopped_at = Instant::now();
    let last = vec![replicas[0].1];
    shares_settle(&last, Duration::from_secs(10)).await;
    let handed = stopped_at.elapsed();
    converged(&last, T).await;
    println!(
        "SIGTERM: units moved after {handed:?}, converged after {:?}",
        stopped_at.elapsed()
    );
    // A stop hands over at once (its member Lease released, not left to expire): a generous
    // bound, far below the Lease's expiry, on this machine's clock (measured figure above).
    if handed > LEASE / 2 {
        late.push(format!(
            "SIGTERM: handed over {handed:?} after the stop (bound {:?})",
            LEASE / 2
        ));
    }
    let code = tokio::task::spawn_blocking(move || stopping.0.wait().expect("wait"))
        .await
        .expect("join");
    assert!(code.success(), "a normal stop exits 0: {code:?}");
    let leases = Api::<Lease>::namespaced(client.clone(), SYSTEM)
        .list(&ListParams::default().labels(&format!("{GROUP_LABEL}=kubesync")))
        .await
        .expect("leases");
    assert!(
        leases.items.iter().all(
            |l| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) != Some(REPLICAS[1])
        ),
        "the stopped replica left: its member Lease is deleted"
    );
    let moved = owned_by(REPLICAS[1], &REPLICAS[1..]);
    set_sources(&env, &mut versions, &moved, "v3").await;
    note_changes(&mut changed_to, &moved, "v3");
    copies_at(&env, &versions, T).await;
    witness.abort();

    // The audit log: each copy written once per version of its source (a create, and an
    // update per change), never twice; and every write of a replica addressed a unit it owned under the
    // view it had acknowledged last.
    let log = log_with_copy_writes(&env, &changed_to).await;
    let views = views();
    let acks = acks.lock().clone();
    let mut per_copy: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut detail: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut strays = Vec::new();
    let mut unknown = BTreeSet::new();
    // A write the apiserver refused as a conflict was decided on a store behind it: sent twice.
    let mut refused = Vec::new();
    let mut throttled = 0;
    for e in log
        .iter()
        .filter(|e| e.is_write() && replica_of(e).is_some())
    {
        let who = replica_of(e).unwrap_or_default();
        // Throttled by API Priority and Fairness before anything was done (a ServiceAccount's
        // requests share a priority level; the client retries them): not a write.
        if e.code() == 429 {
            throttled += 1;
            continue;
        }
        if e.resource() == "configmaps" && e.namespace().starts_with("dest-") {
            per_copy
                .entry((e.namespace().to_string(), e.name().to_string()))
                .or_default()
                .push(format!("{} {}", e.verb, e.code()));
            detail
                .entry((e.namespace().to_string(), e.name().to_string()))
                .or_default()
                .push(format!(
                    "{who} {} {} {} {}",
                    e.stage_timestamp,
                    e.verb,
                    e.code(),
                    e.request_uri
                ));
        }
        if e.code() == 409 {
            refused.push(format!(
                "{who}: {} {} {}/{}",
                e.verb,
                e.resource(),
                e.namespace(),
                e.name()
            ));
        }
        let Some(unit) = unit_of(e) else {
            unknown.insert(e.describe());
            continue;
        };
        let at: jiff::Timestamp = e.stage_timestamp.parse().expect("stageTimestamp");
        let view = acks
            .get(who)
            .and_then(|h| h.iter().rev().find(|(t, _)| *t <= at))
            .and_then(|(_, digest)| views.get(digest));
        if view.and_then(|v| v.owner(unit.point())) != Some(who) {
            strays.push(format!(
                "{who} at {at}: {} {} {}/{} (acknowledged {:?})",
                e.verb,
                e.resource(),
                e.namespace(),
                e.name(),
                view.map(|v| v.members().collect::<Vec<_>>())
            ));
        }
    }
    println!("writes throttled (429) and retried: {throttled}");
    assert!(unknown.is_empty(), "writes to no known unit: {unknown:?}");
    assert!(
        refused.is_empty(),
        "writes sent twice (refused as conflicts): {refused:?}"
    );
    assert!(
        strays.is_empty(),
        "writes outside the writer's share: {strays:#?}"
    );
    assert_eq!(per_copy.len(), SYNCS * NAMESPACES);
    // Writes each copy needed: its create, and one per later version of its source.
    let needed = |name: &str| {
        let i: usize = name.trim_start_matches("cm-").parse().expect("index");
        1 + ["v2", "v3"]
            .iter()
            .filter(|v| changed_to[i].contains(&v.to_string()))
            .count()
    };
    let twice: Vec<_> = per_copy
        .iter()
        .filter(|((_, name), writes)| {
            writes.len() != needed(name)
                || !writes[0].starts_with("create 2")
                || writes
                    .iter()
                    .any(|w| !w.ends_with(" 200") && !w.ends_with(" 201"))
        })
        .take(10)
        .collect();
    assert!(
        twice.is_empty(),
        "copies not written exactly once per change: {twice:?}"
    );
    assert!(late.is_empty(), "{late:?}");
}

/// Waits until the replicas on `ports` have reconciled every unit: each ObjectSync Ready on one
/// of them, every ResourceSync's sync running.
async fn converged(ports: &[u16], within: Duration) {
    eventually("every unit reconciled", within, || async {
        let (mut ready, mut engines) = (0.0, 0.0);
        for port in ports {
            let (_, metrics) = request(*port, "GET", "/metrics").await?;
            ready += metrics
                .lines()
                .filter(|l| l.starts_with("kubesync_objectsync_ready{") && l.ends_with(" 1"))
                .count() as f64;
            engines += sample(&metrics, "kubesync_resourcesync_engines")?;
        }
        (ready == SYNCS as f64 && engines == REGIONS as f64).then_some(())
    })
    .await;
}
