//! The multi-cluster runtime on real control planes.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kube::core::ApiResource;
use kubesync::{Action, Backoff, ClusterStatus, Controller, ObjectKey, Watch, reconciler_fn};
use kubesync_testenv::eventually;
use tokio::sync::mpsc;

/// Events from both clusters reach the reconciler with the right cluster name, and the
/// reconciler reads the object from that cluster's store.
#[tokio::test]
async fn events_from_two_clusters_carry_their_cluster() {
    init_tracing();
    let (east, west) = (shared("east"), shared("west"));
    let ns = unique_ns("events");
    east.create_namespace(&ns).await.expect("ns");
    west.create_namespace(&ns).await.expect("ns");

    let (tx, mut rx) = mpsc::unbounded_channel::<(ObjectKey, Option<String>)>();
    let controller = Controller::new()
        .cluster(cluster(east))
        .cluster(cluster(west))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch")
        .watch("west", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let running = start(
        controller,
        reconciler_fn(move |key, ctx| {
            let tx = tx.clone();
            async move {
                let who = ctx
                    .get_as::<ConfigMap>(&key)?
                    .and_then(|cm| cm.data)
                    .and_then(|d| d.get("who").cloned());
                let _ = tx.send((key, who));
                Ok::<_, kubesync::Error>(Action::done())
            }
        }),
    );

    apply_cm(east, &configmap(&ns, "hello", &[], &[("who", "east")])).await;
    apply_cm(west, &configmap(&ns, "hello", &[], &[("who", "west")])).await;
    let mut seen: HashMap<String, Option<String>> = HashMap::new();
    while seen.len() < 2 {
        let (key, who) = next(&mut rx, "events in time", Duration::from_secs(20)).await;
        assert_eq!(key.kind, "ConfigMap");
        assert_eq!(key.namespace.as_deref(), Some(ns.as_str()));
        if key.name == "hello" && who.is_some() {
            seen.insert(key.cluster.clone(), who);
        }
    }
    assert_eq!(seen["east"].as_deref(), Some("east"));
    assert_eq!(seen["west"].as_deref(), Some("west"));

    // A deletion in one cluster is a key of that cluster whose object is gone.
    Api::<ConfigMap>::namespaced(west.client().expect("client"), &ns)
        .delete("hello", &DeleteParams::default())
        .await
        .expect("delete");
    loop {
        let (key, who) = next(&mut rx, "delete event in time", Duration::from_secs(20)).await;
        if key.cluster == "west" && key.name == "hello" && who.is_none() {
            break;
        }
        assert_ne!(key.cluster, "east", "no event expected from east: {key}");
    }
    running.stop().await;
}

/// A failing reconcile is retried with growing delays, and the failure count resets after a
/// success.
#[tokio::test]
async fn failing_reconciles_are_retried_with_growing_delays() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("backoff");
    east.create_namespace(&ns).await.expect("ns");
    apply_cm(east, &configmap(&ns, "flaky", &[], &[])).await;

    let attempts: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let a = attempts.clone();
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch")
        .backoff(Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
            factor: 2.0,
        });
    let ctx = controller.context();
    let running = start(
        controller,
        reconciler_fn(move |_key, _ctx| {
            let a = a.clone();
            async move {
                let n = {
                    let mut v = a.lock().expect("lock");
                    v.push(Instant::now());
                    v.len()
                };
                if n <= 5 {
                    Err(format!("attempt {n} fails"))
                } else {
                    Ok(Action::done())
                }
            }
        }),
    );
    eventually("six attempts", Duration::from_secs(30), || {
        let n = attempts.lock().expect("lock").len();
        async move { (n >= 6).then_some(()) }
    })
    .await;
    // After the success nothing more is scheduled: a turn of the loop after it shows no key
    // queued (retries waiting included), none in flight and none failing, and without events
    // (none come: nothing changes in the namespace, resync is far away) nothing can run.
    eventually("nothing left to do", Duration::from_secs(30), || {
        let m = ctx.metrics();
        let done = attempts.lock().expect("lock").len() >= 6
            && m.queued() == 0
            && m.in_flight() == 0
            && m.failing() == 0;
        async move { done.then_some(()) }
    })
    .await;
    let times = attempts.lock().expect("lock").clone();
    assert_eq!(times.len(), 6, "retries stop after the success");
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    let expected = [100u64, 200, 400, 800, 1600];
    for (gap, want) in gaps.iter().zip(expected) {
        assert!(
            *gap >= Duration::from_millis(want),
            "gap {gap:?} shorter than the backoff {want} ms (gaps {gaps:?})"
        );
    }
    // Only lower bounds here: on a loaded machine a short gap may be stretched past the next
    // one. The exact curve is proved without a clock in the queue's unit tests.
    running.stop().await;
}

/// One key is never reconciled twice at the same time, even under a burst of events, while
/// different keys do run in parallel.
#[tokio::test]
async fn one_key_is_never_reconciled_concurrently() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("serial");
    east.create_namespace(&ns).await.expect("ns");
    for name in ["a", "b", "c"] {
        apply_cm(east, &configmap(&ns, name, &[], &[("n", "0")])).await;
    }
    let per_key: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let max_same_key = Arc::new(AtomicUsize::new(0));
    let max_total = Arc::new(AtomicUsize::new(0));
    let runs = Arc::new(AtomicUsize::new(0));
    let (r, m1, m2, n) = (
        per_key.clone(),
        max_same_key.clone(),
        max_total.clone(),
        runs.clone(),
    );
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch")
        .concurrency(8);
    let ctx = controller.context();
    let running = start(
        controller,
        reconciler_fn(move |key, _ctx| {
            let (r, m1, m2, n) = (r.clone(), m1.clone(), m2.clone(), n.clone());
            async move {
                {
                    let mut map = r.lock().expect("lock");
                    let c = map.entry(key.name.clone()).or_default();
                    *c += 1;
                    m1.fetch_max(*c, Ordering::SeqCst);
                    let total: usize = map.values().sum();
                    m2.fetch_max(total, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                *r.lock().expect("lock").get_mut(&key.name).expect("entry") -= 1;
                n.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(Action::done())
            }
        }),
    );
    // A burst of updates to every key while their reconciles are running.
    for i in 1..=15 {
        for name in ["a", "b", "c"] {
            apply_cm(east, &configmap(&ns, name, &[], &[("n", &i.to_string())])).await;
        }
    }
    // Witnessed, in order, on each key: its last reconcile began on its last version (so the
    // burst's every event was decided on); then the controller stops (no reconcile starts
    // after), and the counts are final.
    let api: Api<ConfigMap> = Api::namespaced(east.client().expect("client"), &ns);
    for name in ["a", "b", "c"] {
        let last = api
            .get(name)
            .await
            .expect("get")
            .resource_version()
            .expect("rv");
        let key = ObjectKey::new(
            "east",
            &ApiResource::erase::<ConfigMap>(&()),
            Some(ns.clone()),
            name,
        );
        eventually(
            &format!("{name} reconciled at {last}"),
            Duration::from_secs(30),
            || {
                let mark = ctx.metrics().last_reconcile(&key);
                let last = last.clone();
                async move { mark.filter(|m| m.resource_version == last) }
            },
        )
        .await;
    }
    running.stop().await;
    assert!(
        per_key.lock().expect("lock").values().all(|c| *c == 0),
        "every reconcile ended"
    );
    assert_eq!(
        max_same_key.load(Ordering::SeqCst),
        1,
        "a key ran twice at once"
    );
    assert!(
        max_total.load(Ordering::SeqCst) >= 2,
        "different keys should run in parallel"
    );
    let total_runs = runs.load(Ordering::SeqCst);
    assert!(
        total_runs >= 6,
        "the burst must cause re-runs, got {total_runs}"
    );
    assert!(
        total_runs < 3 * 16,
        "events must be deduplicated, got {total_runs} runs"
    );
}

/// A third cluster whose apiserver is down does not stop the other two; its state says why,
/// and it catches up when it comes back.
#[tokio::test]
async fn a_cluster_that_is_down_does_not_stop_the_others() {
    init_tracing();
    let (east, west) = (shared("east"), shared("west"));
    let mut down = own_cluster("down").await;
    let ns = unique_ns("outage");
    for env in [east, west, &down] {
        env.create_namespace(&ns).await.expect("ns");
    }
    apply_cm(&down, &configmap(&ns, "waiting", &[], &[])).await;
    let down_cluster = cluster(&down);
    down.stop_apiserver();

    let (tx, mut rx) = mpsc::unbounded_channel::<ObjectKey>();
    let mut controller = Controller::new()
        .cluster(cluster(east))
        .cluster(cluster(west))
        .cluster(down_cluster);
    for c in ["east", "west", "down"] {
        controller = controller
            .watch(c, Watch::of::<ConfigMap>().namespace(&ns))
            .expect("watch");
    }
    let ctx = controller.context();
    let running = start(controller, forward_keys(tx));
    apply_cm(east, &configmap(&ns, "e", &[], &[])).await;
    apply_cm(west, &configmap(&ns, "w", &[], &[])).await;
    let mut got = std::collections::BTreeSet::new();
    while got.len() < 2 {
        let key = next(
            &mut rx,
            "the healthy clusters keep working",
            Duration::from_secs(20),
        )
        .await;
        assert_ne!(key.cluster, "down");
        got.insert(key.cluster);
    }
    let message = eventually("down reported", Duration::from_secs(20), || {
        let s = ctx.cluster_status("down");
        async move {
            match s {
                ClusterStatus::Unreachable(message) => Some(message),
                _ => None,
            }
        }
    })
    .await;
    assert!(
        message.to_lowercase().contains("connect"),
        "the reason it is unreachable: {message:?}"
    );
    assert_eq!(ctx.cluster_status("east"), ClusterStatus::Ready);

    down.restart_apiserver().await.expect("restart");
    let key = loop {
        let key = next(
            &mut rx,
            "catch-up after the outage",
            Duration::from_secs(60),
        )
        .await;
        if key.cluster == "down" {
            break key;
        }
    };
    assert_eq!(key.name, "waiting");
    eventually("down ready", Duration::from_secs(20), || {
        let s = ctx.cluster_status("down");
        async move { (s == ClusterStatus::Ready).then_some(()) }
    })
    .await;
    running.stop().await;
}

/// Shutdown lets the reconcile in flight finish, starts no new one, and returns.
#[tokio::test]
async fn shutdown_waits_for_reconciles_in_flight() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("shutdown");
    east.create_namespace(&ns).await.expect("ns");
    apply_cm(east, &configmap(&ns, "slow", &[], &[])).await;
    let started = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicBool::new(false));
    let (s, f) = (started.clone(), finished.clone());
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    let running = start(
        controller,
        reconciler_fn(move |_key, _ctx| {
            let (s, f) = (s.clone(), f.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                f.store(true, Ordering::SeqCst);
                Ok::<_, String>(Action::requeue(Duration::from_millis(1)))
            }
        }),
    );
    eventually("reconcile started", Duration::from_secs(20), || {
        let n = started.load(Ordering::SeqCst);
        async move { (n == 1).then_some(()) }
    })
    .await;
    running.stop().await;
    assert!(
        finished.load(Ordering::SeqCst),
        "the reconcile in flight finished"
    );
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "no reconcile started after shutdown"
    );
    assert_eq!(ctx.metrics().in_flight(), 0);
    assert_eq!(ctx.metrics().reconciles(), 1);
}

/// The loop turns while idle, so a liveness probe can tell a quiet controller from a stuck one.
#[tokio::test]
async fn an_idle_controller_keeps_its_loop_turning() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("idle");
    east.create_namespace(&ns).await.expect("ns");
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    assert_eq!(ctx.metrics().idle_for(), None, "not started");
    let running = start(
        controller,
        reconciler_fn(|_key, _ctx| async { Ok::<_, String>(Action::done()) }),
    );
    // Nothing happens in the namespace, yet the loop turns again and again: each turn resets
    // the time it has been idle. Three turns seen (not a bound on the clock: a busy machine
    // may delay a turn, never skip them).
    let mut turns = 0;
    let mut last = ctx.metrics().idle_for();
    let deadline = std::time::Instant::now() + kubesync::runtime::HEARTBEAT * 12;
    while turns < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "{turns} turns of an idle loop in {:?}",
            kubesync::runtime::HEARTBEAT * 12
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let idle = ctx.metrics().idle_for();
        if let (Some(now), Some(before)) = (idle, last)
            && now < before
        {
            turns += 1;
        }
        last = idle.or(last);
    }
    assert_eq!(
        ctx.metrics().reconciles(),
        0,
        "no event: the turns were the heartbeat's"
    );
    running.stop().await;
}

/// A secondary watch in another cluster maps its events to primary keys (the building block
/// for "status comes back from the other cluster"); label selectors narrow watches on the
/// server.
#[tokio::test]
async fn secondary_watches_map_events_across_clusters() {
    init_tracing();
    let (east, west) = (shared("east"), shared("west"));
    let ns = unique_ns("mapped");
    east.create_namespace(&ns).await.expect("ns");
    west.create_namespace(&ns).await.expect("ns");
    apply_cm(east, &configmap(&ns, "primary", &[("pick", "yes")], &[])).await;
    apply_cm(east, &configmap(&ns, "ignored", &[], &[])).await;

    let (tx, mut rx) = mpsc::unbounded_channel::<ObjectKey>();
    let east_name = "east".to_string();
    let controller = Controller::new()
        .cluster(cluster(east))
        .cluster(cluster(west))
        .watch(
            "east",
            Watch::of::<ConfigMap>().namespace(&ns).labels("pick=yes"),
        )
        .expect("watch")
        .watch_mapped(
            "west",
            Watch::of::<Secret>().namespace(&ns),
            move |key, obj| {
                // A Secret in west named after a ConfigMap in east points at it.
                let target = obj
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("for").cloned())
                    .unwrap_or_default();
                vec![ObjectKey {
                    cluster: east_name.clone(),
                    group: String::new(),
                    kind: "ConfigMap".into(),
                    namespace: key.namespace.clone(),
                    name: target,
                }]
            },
        )
        .expect("watch");
    let running = start(controller, forward_keys(tx));
    let first = next(&mut rx, "initial", Duration::from_secs(20)).await;
    assert_eq!(
        (first.cluster.as_str(), first.name.as_str()),
        ("east", "primary")
    );

    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "status-of-primary", "namespace": ns, "annotations": {"for": "primary"}},
        "stringData": {"phase": "Ready"}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(west.client().expect("client"), &ns)
        .create(&Default::default(), &secret)
        .await
        .expect("create secret");
    let mapped = next(&mut rx, "mapped event", Duration::from_secs(20)).await;
    assert_eq!(
        (mapped.cluster.as_str(), mapped.name.as_str()),
        ("east", "primary")
    );
    // The unlabelled ConfigMap never produces a key, also when it changes: it changes, then a
    // labelled one is created; the labelled one's event comes after on the same watch, so
    // every key up to its own is all the watch delivered.
    apply_cm(east, &configmap(&ns, "ignored", &[], &[("changed", "1")])).await;
    apply_cm(east, &configmap(&ns, "witness", &[("pick", "yes")], &[])).await;
    loop {
        let k = next(&mut rx, "the witness's key", Duration::from_secs(20)).await;
        assert_ne!(
            k.name, "ignored",
            "the label selector let an object through"
        );
        if k.name == "witness" {
            break;
        }
    }
    running.stop().await;
}

/// The periodic resync reconciles every primary object without any event.
#[tokio::test]
async fn resync_reconciles_without_events() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("resync");
    east.create_namespace(&ns).await.expect("ns");
    apply_cm(east, &configmap(&ns, "still", &[], &[])).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch")
        .resync(Some(Duration::from_millis(300)));
    let running = start(
        controller,
        reconciler_fn(move |_key, _ctx| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(Action::done())
            }
        }),
    );
    eventually("three resyncs", Duration::from_secs(20), || {
        let n = runs.load(Ordering::SeqCst);
        async move { (n >= 3).then_some(()) }
    })
    .await;
    running.stop().await;
}

/// Configuration mistakes are reported, not panics.
#[tokio::test]
async fn unknown_clusters_and_empty_controllers_are_errors() {
    let err = Controller::new()
        .watch("nowhere", Watch::of::<ConfigMap>())
        .err()
        .expect("unknown cluster");
    assert_eq!(err.category(), "UnknownCluster");
    let err = Controller::new()
        .run(
            reconciler_fn(|_k, _c| async { Ok::<_, String>(Action::done()) }),
            async {},
        )
        .await
        .expect_err("no watches");
    assert_eq!(err.category(), "InvalidConfig");
}

/// Reconciling starts only after every store of the key's cluster has listed: the first
/// reconcile already sees all objects of a second watched type.
#[tokio::test]
async fn reconciles_start_only_after_every_store_of_the_cluster_listed() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("gating");
    east.create_namespace(&ns).await.expect("ns");
    const SECRETS: usize = 300;
    let secrets: Api<Secret> = Api::namespaced(east.client().expect("client"), &ns);
    futures::future::try_join_all((0..SECRETS).map(|i| {
        let secrets = secrets.clone();
        let s: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("s{i}"), "namespace": ns},
            "stringData": {"i": i.to_string()}
        }))
        .expect("secret");
        async move { secrets.create(&Default::default(), &s).await }
    }))
    .await
    .expect("create secrets");
    apply_cm(east, &configmap(&ns, "reader", &[], &[])).await;

    let seen = Arc::new(Mutex::new(Vec::<usize>::new()));
    let s = seen.clone();
    let secret_type = kube::core::ApiResource::erase::<Secret>(&());
    let controller = Controller::new()
        .cluster(cluster(east))
        // The primary (one small object) lists long before the 300 Secrets have.
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch")
        .watch_mapped("east", Watch::of::<Secret>().namespace(&ns), |_, _| {
            Vec::new()
        })
        .expect("watch");
    let running = start(
        controller,
        reconciler_fn(move |key, ctx| {
            let (s, ar) = (s.clone(), secret_type.clone());
            async move {
                s.lock()
                    .expect("lock")
                    .push(ctx.list(&key.cluster, &ar).len());
                Ok::<_, String>(Action::done())
            }
        }),
    );
    eventually("first reconcile", Duration::from_secs(20), || {
        let n = seen.lock().expect("lock").len();
        async move { (n > 0).then_some(()) }
    })
    .await;
    assert_eq!(
        seen.lock().expect("lock")[0],
        SECRETS,
        "the Secret store was complete"
    );
    running.stop().await;
}

/// Watches can start and stop while the controller runs, on clusters registered at run time;
/// a new watch's store is only trusted once it has listed.
/// A watch a reconcile starts does not make its cluster unready for a probe while it lists
/// (`own_watches_status`), though `cluster_status` says Syncing until it has; a failing one
/// does.
#[tokio::test]
async fn a_watch_started_at_run_time_holds_back_only_its_own_readiness() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("own");
    east.create_namespace(&ns).await.expect("ns");
    let (tx, _rx) = mpsc::unbounded_channel::<ObjectKey>();
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    assert_ne!(
        ctx.own_watches_status("east"),
        ClusterStatus::Ready,
        "not listed yet"
    );
    let running = start(controller, forward_keys(tx));
    eventually("ready", Duration::from_secs(20), || {
        let s = ctx.own_watches_status("east");
        async move { (s == ClusterStatus::Ready).then_some(()) }
    })
    .await;
    // Caught before its first list (it takes a request; retried if it was faster).
    let mut caught = 0;
    for _ in 0..20 {
        let id = ctx
            .start_watch("east", Watch::of::<Secret>().namespace(&ns), None)
            .expect("start watch");
        let all = ctx.cluster_status("east");
        let own = ctx.own_watches_status("east");
        if all == ClusterStatus::Syncing {
            assert_eq!(
                own,
                ClusterStatus::Ready,
                "a new watch made the cluster unready"
            );
            caught += 1;
        }
        ctx.stop_watch(id);
        if caught >= 3 {
            break;
        }
    }
    assert!(caught > 0, "never caught a watch before its first list");
    // A watch that fails does make it unready.
    let missing = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "nothing.kubesync.io",
        "v1",
        "Missing",
    ));
    ctx.start_watch("east", Watch::dynamic(missing), None)
        .expect("start watch");
    eventually(
        "unready on a failing watch",
        Duration::from_secs(20),
        || {
            let s = ctx.own_watches_status("east");
            async move { matches!(s, ClusterStatus::Unreachable(_)).then_some(()) }
        },
    )
    .await;
    running.stop().await;
}

#[tokio::test]
async fn watches_and_clusters_can_be_added_and_removed_at_run_time() {
    init_tracing();
    // West's audit log shows when the apiserver ended the watch.
    let west = &kubesync_testenv::TestEnv::builder()
        .name("west-audited")
        .audit(true)
        .start()
        .await
        .expect("start west");
    let east = shared("east");
    let ns = unique_ns("dynamic");
    east.create_namespace(&ns).await.expect("ns");
    west.create_namespace(&ns).await.expect("ns");
    apply_cm(west, &configmap(&ns, "before", &[], &[])).await;
    let (tx, mut rx) = mpsc::unbounded_channel::<ObjectKey>();
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    let running = start(controller, forward_keys(tx));

    // A second cluster and a watch there, at run time.
    ctx.add_cluster(cluster(west));
    let id = ctx
        .start_watch(west.name(), Watch::of::<ConfigMap>().namespace(&ns), None)
        .expect("start watch");
    eventually("listed", Duration::from_secs(20), || {
        let listed = ctx.watch_listed(id);
        async move { listed.then_some(()) }
    })
    .await;
    let cm_type = kube::core::ApiResource::erase::<ConfigMap>(&());
    assert_eq!(
        ctx.list(west.name(), &cm_type).len(),
        1,
        "the store holds what existed"
    );
    // List items of built-in kinds come without apiVersion/kind; stored objects have them.
    let stored = ctx.list(west.name(), &cm_type)[0]
        .types
        .clone()
        .expect("typed");
    assert_eq!(
        (stored.api_version.as_str(), stored.kind.as_str()),
        ("v1", "ConfigMap")
    );
    loop {
        let k = next(
            &mut rx,
            "key of the existing object",
            Duration::from_secs(20),
        )
        .await;
        if k.cluster == west.name() && k.name == "before" {
            break;
        }
    }
    apply_cm(west, &configmap(&ns, "after", &[], &[])).await;
    loop {
        let k = next(&mut rx, "event of the new watch", Duration::from_secs(20)).await;
        if k.cluster == west.name() && k.name == "after" {
            break;
        }
    }

    // Stopped: its store is gone and its request ends at the apiserver (the audit log has
    // a request's line once it ended), so no event can come through it any more.
    let watch_uri = format!("/api/v1/namespaces/{ns}/configmaps?");
    let watches_ended = || {
        west.audit()
            .expect("audit")
            .iter()
            .filter(|e| e.verb == "watch" && e.request_uri.starts_with(&watch_uri))
            .count()
    };
    let ended_before = watches_ended();
    ctx.stop_watch(id);
    assert!(!ctx.watch_listed(id));
    assert!(ctx.list(west.name(), &cm_type).is_empty());
    eventually(
        "the watch ended at the apiserver",
        Duration::from_secs(20),
        || {
            let ended = watches_ended() > ended_before;
            async move { ended.then_some(()) }
        },
    )
    .await;
    apply_cm(west, &configmap(&ns, "ignored", &[], &[])).await;
    apply_cm(east, &configmap(&ns, "still-watched", &[], &[])).await;
    loop {
        let k = next(&mut rx, "east keeps working", Duration::from_secs(20)).await;
        assert!(
            k.cluster != west.name() || k.name != "ignored",
            "an event after stop_watch: {k}"
        );
        if k.name == "still-watched" {
            break;
        }
    }
    running.stop().await;
}

/// Failed reconciles are counted by their error's category, and a panicking reconcile counts
/// as a failure of category `Panic` and is retried.
#[tokio::test]
async fn failures_are_counted_by_category() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("categories");
    east.create_namespace(&ns).await.expect("ns");
    apply_cm(east, &configmap(&ns, "terminating", &[], &[])).await;
    apply_cm(east, &configmap(&ns, "panics", &[], &[])).await;
    let controller = Controller::new()
        .cluster(cluster(east))
        .backoff(Backoff {
            initial: Duration::from_millis(50),
            factor: 2.0,
            max: Duration::from_millis(200),
        })
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    // When each attempt of the panicking key started: a panic is retried with the backoff,
    // like an error (50 ms, then 100 ms, …), not at once.
    let panics: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = panics.clone();
    let running = start(
        controller,
        reconciler_fn(move |key, _ctx| {
            let seen = seen.clone();
            async move {
                match key.name.as_str() {
                    "terminating" => Err(kubesync::Error::NamespaceTerminating(
                        key.namespace.clone().unwrap_or_default(),
                    )),
                    "panics" => {
                        seen.lock().expect("lock").push(Instant::now());
                        panic!("a reconcile that panics")
                    }
                    _ => Ok(Action::done()),
                }
            }
        }),
    );
    eventually(
        "both keys failed three times",
        Duration::from_secs(20),
        || {
            let by = ctx.metrics().failures_by_category();
            async move {
                (by.get("NamespaceTerminating").copied().unwrap_or(0) >= 3
                    && by.get("Panic").copied().unwrap_or(0) >= 3)
                    .then_some(by)
            }
        },
    )
    .await;
    running.stop().await;
    let by = ctx.metrics().failures_by_category();
    assert_eq!(
        by.keys().copied().collect::<Vec<_>>(),
        ["NamespaceTerminating", "Panic"]
    );
    let times = panics.lock().expect("lock").clone();
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps.len() >= 2, "{gaps:?}");
    // Lower bounds only (a loaded machine may stretch a gap, never shorten it).
    for (gap, want) in gaps.iter().zip([50u64, 100]) {
        assert!(
            *gap >= Duration::from_millis(want),
            "a panic was retried after {gap:?}, before its backoff of {want} ms ({gaps:?})"
        );
    }
    assert_eq!(ctx.metrics().failures(), by.values().sum::<u64>());
}

/// Each key's last finished reconcile names the version of its object the reconcile began
/// on, and only its own: a change to one key moves its mark, never another's; a failure is
/// marked failed; a deleted key's mark goes.
#[tokio::test]
async fn the_last_reconcile_of_each_key_names_the_version_it_began_on() {
    init_tracing();
    let east = shared("east");
    let ns = unique_ns("last");
    east.create_namespace(&ns).await.expect("ns");
    apply_cm(east, &configmap(&ns, "changed", &[], &[])).await;
    apply_cm(east, &configmap(&ns, "quiet", &[], &[])).await;
    apply_cm(east, &configmap(&ns, "failing", &[], &[])).await;
    let controller = Controller::new()
        .cluster(cluster(east))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    let running = start(
        controller,
        reconciler_fn(move |key, _ctx| async move {
            match key.name.as_str() {
                "failing" => Err(kubesync::Error::NamespaceTerminating(String::new())),
                _ => Ok(Action::done()),
            }
        }),
    );
    let key = |name: &str| {
        ObjectKey::new(
            "east",
            &ApiResource::erase::<ConfigMap>(&()),
            Some(ns.clone()),
            name,
        )
    };
    let api: Api<ConfigMap> = Api::namespaced(east.client().expect("client"), &ns);
    let version = |name: &'static str| {
        let api = api.clone();
        async move {
            api.get(name)
                .await
                .expect("get")
                .resource_version()
                .expect("rv")
        }
    };
    let marked = |name: &'static str, rv: String| {
        let (ctx, key) = (ctx.clone(), key(name));
        async move {
            eventually(
                &format!("{name} reconciled at {rv}"),
                Duration::from_secs(20),
                || {
                    let mark = ctx.metrics().last_reconcile(&key);
                    let rv = rv.clone();
                    async move { mark.filter(|m| m.resource_version == rv) }
                },
            )
            .await
        }
    };
    let quiet = marked("quiet", version("quiet").await).await;
    assert!(!quiet.failed && quiet.finished >= quiet.started);
    let failing = marked("failing", version("failing").await).await;
    assert!(
        failing.failed,
        "a reconcile that returned an error is marked failed"
    );
    // A change to one key: its mark moves to the new version; the other's does not.
    let first = marked("changed", version("changed").await).await;
    apply_cm(east, &configmap(&ns, "changed", &[("v", "2")], &[])).await;
    let changed = marked("changed", version("changed").await).await;
    assert_ne!(changed.resource_version, first.resource_version);
    assert!(changed.started > first.finished);
    assert_eq!(
        ctx.metrics().last_reconcile(&key("quiet")),
        Some(quiet),
        "another key's change leaves this key's mark as it was"
    );
    // Deleted: reconciled once more on a store without it, and its mark goes.
    api.delete("quiet", &DeleteParams::default())
        .await
        .expect("delete");
    eventually(
        "the deleted key's mark gone",
        Duration::from_secs(20),
        || {
            let gone = ctx.metrics().last_reconcile(&key("quiet")).is_none();
            async move { gone.then_some(()) }
        },
    )
    .await;
    running.stop().await;
}

/// A metadata-only watch queues keys like a full one, but its store holds only metadata: no
/// data, no managedFields. `get` and `list` (full objects) do not return its objects;
/// `get_metadata` and `list_metadata` do, preferring a full watch's copy where both hold one;
/// `holds` and `resource_version` tell what `get_metadata` would show.
#[tokio::test]
async fn metadata_only_watches_hold_metadata_and_queue_keys() {
    init_tracing();
    let env = shared("east");
    let ns = unique_ns("meta");
    env.create_namespace(&ns).await.expect("ns");
    let (tx, mut rx) = mpsc::unbounded_channel::<ObjectKey>();
    // Metadata of every ConfigMap in the namespace; the full object of `full` only.
    let controller = Controller::new()
        .cluster(cluster(env))
        .watch(
            "east",
            Watch::of::<ConfigMap>().namespace(&ns).metadata_only(),
        )
        .expect("watch")
        .watch_mapped(
            "east",
            Watch::of::<ConfigMap>()
                .namespace(&ns)
                .fields("metadata.name=full"),
            |_, _| Vec::new(),
        )
        .expect("watch");
    let ctx = controller.context();
    let running = start(controller, forward_keys(tx));
    let big = "x".repeat(64 * 1024);
    apply_cm(
        env,
        &configmap(&ns, "big", &[("app", "blob")], &[("blob", big.as_str())]),
    )
    .await;
    apply_cm(env, &configmap(&ns, "full", &[], &[("k", "v")])).await;
    let key = |name: &str| {
        ObjectKey::new(
            "east",
            &kube::core::ApiResource::erase::<ConfigMap>(&()),
            Some(ns.clone()),
            name,
        )
    };
    // The metadata watch's events queue the objects' keys.
    let mut queued = std::collections::HashSet::new();
    while !(queued.contains("big") && queued.contains("full")) {
        queued.insert(
            next(&mut rx, "keys queued", Duration::from_secs(20))
                .await
                .name,
        );
    }
    let meta = eventually("metadata stored", Duration::from_secs(20), || async {
        ctx.get_metadata(&key("big"))
    })
    .await;
    assert_eq!(meta.labels().get("app").map(String::as_str), Some("blob"));
    assert!(meta.metadata.uid.is_some() && meta.metadata.resource_version.is_some());
    assert!(meta.data.is_null(), "the store holds the content");
    assert!(meta.metadata.managed_fields.is_none(), "no managedFields");
    assert!(
        ctx.get(&key("big")).is_none(),
        "get returns full objects only"
    );
    // What is held is told without reading it back, as `get_metadata` shows it.
    assert!(ctx.holds(&key("big")) && !ctx.holds(&key("absent")));
    assert_eq!(
        ctx.resource_version(&key("big")),
        meta.metadata.resource_version
    );
    assert_eq!(ctx.resource_version(&key("absent")), None);
    let listed = ctx.list("east", &kube::core::ApiResource::erase::<ConfigMap>(&()));
    assert!(
        listed.iter().all(|o| o.name_any() != "big"),
        "list returns full objects only"
    );
    // Where a full watch holds the object too, it is returned in full.
    let full = eventually("full object stored", Duration::from_secs(20), || async {
        ctx.get(&key("full"))
    })
    .await;
    assert_eq!(full.data["data"]["k"], "v");
    assert_eq!(
        ctx.get_metadata(&key("full")).expect("full").data["data"]["k"],
        "v"
    );
    assert_eq!(
        ctx.resource_version(&key("full")),
        full.metadata.resource_version
    );
    let all = ctx.list_metadata("east", &kube::core::ApiResource::erase::<ConfigMap>(&()));
    let mut names: Vec<String> = all
        .iter()
        .filter(|o| o.namespace().as_deref() == Some(ns.as_str()))
        .map(|o| o.name_any())
        // Created by the controller-manager at its own pace.
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    names.sort();
    assert_eq!(names, ["big", "full"], "each once");
    running.stop().await;
}

/// A controller on `env` that watches the Secrets of `ns` and forwards every key it queues:
/// one to start watches in `ns` at run time and to read what they hold.
fn running_in(
    env: &kubesync_testenv::TestEnv,
    ns: &str,
) -> (
    kubesync::Context,
    Running,
    mpsc::UnboundedReceiver<ObjectKey>,
) {
    let (tx, rx) = mpsc::unbounded_channel::<ObjectKey>();
    let controller = Controller::new()
        .cluster(cluster(env))
        .watch("east", Watch::of::<Secret>().namespace(ns))
        .expect("watch");
    let ctx = controller.context();
    (ctx, start(controller, forward_keys(tx)), rx)
}

/// A watch made with `full_only_for` holds in full only the objects its rule names, the others
/// as metadata only (their content dropped as they arrive); an object named later is held in
/// full from its next event on, or at once when handed over live at the very version held
/// (`hold_in_full`, refused for another version); `hold_as_metadata` drops it again.
#[tokio::test]
async fn a_mixed_watch_holds_in_full_only_the_objects_it_keeps() {
    init_tracing();
    let env = shared("east");
    let ns = unique_ns("mixed");
    env.create_namespace(&ns).await.expect("ns");
    let cms = kube::core::ApiResource::erase::<ConfigMap>(&());
    let key = |name: &str| ObjectKey::new("east", &cms, Some(ns.clone()), name);
    let kept: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    kept.lock().expect("lock").insert("wanted".into());
    let rule = kept.clone();
    let (ctx, running, mut rx) = running_in(env, &ns);
    let mixed = Watch::of::<ConfigMap>()
        .namespace(&ns)
        .full_only_for(move |k| rule.lock().expect("lock").contains(&k.name));
    let id = ctx.start_watch("east", mixed, None).expect("start");
    let big = "x".repeat(64 * 1024);
    apply_cm(env, &configmap(&ns, "wanted", &[], &[("k", "v")])).await;
    apply_cm(env, &configmap(&ns, "big", &[], &[("blob", big.as_str())])).await;
    let mut queued = std::collections::HashSet::new();
    while !(queued.contains("big") && queued.contains("wanted")) {
        let k = next(&mut rx, "keys queued", Duration::from_secs(20)).await;
        queued.insert(k.name);
    }
    let wanted = ctx.get(&key("wanted")).expect("held in full");
    assert_eq!(wanted.data["data"]["k"], "v");
    assert!(
        ctx.get(&key("big")).is_none(),
        "not kept: not a full object"
    );
    let meta = ctx.get_metadata(&key("big")).expect("its metadata");
    assert!(meta.data.is_null() && meta.metadata.managed_fields.is_none());
    assert!(ctx.held_as_metadata(id, &key("big")));
    assert!(!ctx.held_as_metadata(id, &key("wanted")));
    let listed = ctx.list("east", &cms);
    assert!(
        listed.iter().all(|o| o.name_any() != "big"),
        "list: full objects only"
    );
    assert!(
        ctx.list_metadata("east", &cms)
            .iter()
            .any(|o| o.name_any() == "big"),
        "list_metadata shows it"
    );
    // Named now: the store keeps its metadata until it is handed over at that very version.
    kept.lock().expect("lock").insert("big".into());
    assert!(ctx.get(&key("big")).is_none(), "no event since");
    let api: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), &ns);
    let live = api.get("big").await.expect("live");
    let mut stale = serde_json::from_value::<kube::api::DynamicObject>(
        serde_json::to_value(&live).expect("json"),
    )
    .expect("dynamic");
    stale.metadata.resource_version = Some("1".into());
    assert!(!ctx.hold_in_full(id, stale), "another version is refused");
    assert!(ctx.get(&key("big")).is_none());
    let live = serde_json::from_value(serde_json::to_value(&live).expect("json")).expect("dyn");
    assert!(ctx.hold_in_full(id, live), "the version held");
    assert_eq!(
        ctx.get(&key("big")).expect("in full").data["data"]["blob"]
            .as_str()
            .map(str::len),
        Some(big.len())
    );
    // Dropped again; then its next event (kept) holds it in full.
    ctx.hold_as_metadata(id, &key("big"));
    assert!(ctx.get(&key("big")).is_none() && ctx.held_as_metadata(id, &key("big")));
    apply_cm(
        env,
        &configmap(&ns, "big", &[("edited", "yes")], &[("blob", "small")]),
    )
    .await;
    let edited = eventually(
        "the next event, in full",
        Duration::from_secs(20),
        || async {
            ctx.get(&key("big"))
                .filter(|o| o.data["data"]["blob"] == "small")
        },
    )
    .await;
    assert_eq!(
        edited.labels().get("edited").map(String::as_str),
        Some("yes")
    );
    // No longer kept: its next event drops the content.
    kept.lock().expect("lock").remove("wanted");
    apply_cm(
        env,
        &configmap(&ns, "wanted", &[("edited", "yes")], &[("k", "v2")]),
    )
    .await;
    eventually(
        "the next event, metadata only",
        Duration::from_secs(20),
        || async {
            ctx.get_metadata(&key("wanted"))
                .filter(|o| o.labels().contains_key("edited") && o.data.is_null())
        },
    )
    .await;
    assert!(ctx.get(&key("wanted")).is_none());
    running.stop().await;
}

/// A mixed watch that is also metadata-only receives every object as metadata: one its rule
/// names is held in full only once read live and handed over at the version held, and its
/// next event (metadata of a newer version) holds it as metadata again.
#[tokio::test]
async fn a_mixed_metadata_watch_holds_in_full_only_what_is_handed_over() {
    init_tracing();
    let env = shared("east");
    let ns = unique_ns("mixedmeta");
    env.create_namespace(&ns).await.expect("ns");
    let cms = kube::core::ApiResource::erase::<ConfigMap>(&());
    let key = |name: &str| ObjectKey::new("east", &cms, Some(ns.clone()), name);
    let (ctx, running, mut rx) = running_in(env, &ns);
    let mixed = Watch::of::<ConfigMap>()
        .namespace(&ns)
        .metadata_only()
        .full_only_for(|k| k.name == "wanted");
    let id = ctx.start_watch("east", mixed, None).expect("start");
    apply_cm(env, &configmap(&ns, "wanted", &[], &[("k", "v")])).await;
    while next(&mut rx, "wanted queued", Duration::from_secs(20))
        .await
        .name
        != "wanted"
    {}
    assert!(ctx.get(&key("wanted")).is_none(), "arrived as metadata");
    assert!(ctx.held_as_metadata(id, &key("wanted")));
    let api: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), &ns);
    let live = |cm: ConfigMap| -> kube::api::DynamicObject {
        serde_json::from_value(serde_json::to_value(&cm).expect("json")).expect("dynamic")
    };
    assert!(ctx.hold_in_full(id, live(api.get("wanted").await.expect("live"))));
    assert_eq!(
        ctx.get(&key("wanted")).expect("in full").data["data"]["k"],
        "v"
    );
    apply_cm(env, &configmap(&ns, "wanted", &[], &[("k", "v2")])).await;
    let newer = live(api.get("wanted").await.expect("live"));
    eventually(
        "the next event, metadata",
        Duration::from_secs(20),
        || async {
            ctx.get_metadata(&key("wanted")).filter(|o| {
                o.metadata.resource_version == newer.metadata.resource_version && o.data.is_null()
            })
        },
    )
    .await;
    assert!(
        ctx.get(&key("wanted")).is_none(),
        "not held in full any more"
    );
    assert!(ctx.hold_in_full(id, newer), "the new version handed over");
    assert_eq!(
        ctx.get(&key("wanted")).expect("in full").data["data"]["k"],
        "v2"
    );
    running.stop().await;
}

/// `when_listed` queues a key once a watch started at run time has listed, also when none of
/// its objects maps to that key; after the list it queues the key at once.
#[tokio::test]
async fn when_listed_wakes_a_key_after_the_first_list() {
    init_tracing();
    let env = shared("east");
    let ns = unique_ns("listed");
    env.create_namespace(&ns).await.expect("ns");
    apply_cm(env, &configmap(&ns, "anchor", &[], &[])).await;
    let (tx, mut rx) = mpsc::unbounded_channel::<ObjectKey>();
    let controller = Controller::new()
        .cluster(cluster(env))
        .watch("east", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    let running = start(controller, forward_keys(tx));
    let anchor = next(
        &mut rx,
        "the anchor's first reconcile",
        Duration::from_secs(20),
    )
    .await;
    // A watch whose events map to nothing: only `when_listed` can wake the anchor.
    let id = ctx
        .start_watch(
            "east",
            Watch::of::<Secret>().namespace(&ns).metadata_only(),
            Some(Arc::new(|_: &ObjectKey, _: &kube::api::DynamicObject| {
                Vec::new()
            })),
        )
        .expect("start");
    ctx.when_listed(id, anchor.clone());
    let woken = next(&mut rx, "woken by the list", Duration::from_secs(20)).await;
    assert_eq!(woken, anchor);
    assert!(ctx.watch_listed(id), "woken only once the watch listed");
    ctx.when_listed(id, anchor.clone());
    let again = next(&mut rx, "woken at once", Duration::from_secs(20)).await;
    assert_eq!(again, anchor);
    running.stop().await;
}

/// A packed watch with a label index, on a real apiserver: what it reads back is what the
/// apiserver sent (compared with a live read), and `list_labelled` follows label changes and
/// deletions (the fan-out finds each declaration's copies this way).
#[tokio::test]
async fn packed_watches_read_back_what_arrived_and_index_a_label() {
    init_tracing();
    let env = shared("east");
    let ns = unique_ns("packed");
    env.create_namespace(&ns).await.expect("ns");
    let cm_type = kube::core::ApiResource::erase::<ConfigMap>(&());
    let controller = Controller::new()
        .cluster(cluster(env))
        .watch(
            "east",
            Watch::of::<ConfigMap>()
                .namespace(&ns)
                .index_label("owner")
                .packed(),
        )
        .expect("watch");
    let ctx = controller.context();
    let running = start(
        controller,
        reconciler_fn(|_, _| async { Ok::<_, String>(Action::done()) }),
    );
    for (name, owner) in [
        ("a", Some("p")),
        ("b", Some("p")),
        ("c", Some("q")),
        ("d", None),
    ] {
        let labels: Vec<(&str, &str)> = owner.iter().map(|o| ("owner", *o)).collect();
        apply_cm(env, &configmap(&ns, name, &labels, &[("k", name)])).await;
    }
    let names = |value: &str| {
        let mut n: Vec<String> = ctx
            .list_labelled("east", &cm_type, "owner", value)
            .iter()
            .map(|o| o.name_any())
            .collect();
        n.sort();
        n
    };
    eventually("indexed", Duration::from_secs(20), || async {
        (names("p") == ["a", "b"] && names("q") == ["c"]).then_some(())
    })
    .await;
    // A relabelled object moves to its new value; a deleted one leaves the index.
    apply_cm(env, &configmap(&ns, "b", &[("owner", "q")], &[("k", "b")])).await;
    let api = Api::<ConfigMap>::namespaced(env.client().expect("client"), &ns);
    api.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("index follows", Duration::from_secs(20), || async {
        (names("p").is_empty() && names("q") == ["b", "c"]).then_some(())
    })
    .await;
    // Read back as the apiserver sent it: managedFields and all.
    let live = api.get("b").await.expect("get");
    let key = ObjectKey::new("east", &cm_type, Some(ns.clone()), "b");
    let held = ctx.get(&key).expect("held");
    let held: ConfigMap = (*held).clone().try_parse().expect("typed");
    assert_eq!(
        held.metadata.resource_version,
        live.metadata.resource_version
    );
    assert_eq!(held.metadata, live.metadata);
    assert_eq!(held.data, live.data);
    assert!(held.metadata.managed_fields.is_some());
    running.stop().await;
}

/// An object deleted while the watch was down — behind the apiserver's back, straight from
/// etcd, so no Delete event can ever arrive — is noticed at the re-list: its key is queued
/// and the store no longer holds it; an unchanged object is not queued again.
#[tokio::test]
async fn objects_that_vanished_while_the_watch_was_down_are_queued_after_the_relist() {
    init_tracing();
    let mut env = own_cluster("vanish").await;
    let ns = unique_ns("vanish");
    env.create_namespace(&ns).await.expect("ns");
    apply_cm(&env, &configmap(&ns, "gone", &[], &[])).await;
    apply_cm(&env, &configmap(&ns, "stays", &[], &[])).await;
    let (tx, mut rx) = mpsc::unbounded_channel::<ObjectKey>();
    let controller = Controller::new()
        .cluster(cluster(&env))
        .watch("vanish", Watch::of::<ConfigMap>().namespace(&ns))
        .expect("watch");
    let ctx = controller.context();
    let running = start(controller, forward_keys(tx));
    let mut seen = std::collections::HashSet::new();
    while !(seen.contains("gone") && seen.contains("stays")) {
        seen.insert(
            next(&mut rx, "both listed", Duration::from_secs(20))
                .await
                .name,
        );
    }
    let key = |name: &str| {
        ObjectKey::new(
            "vanish",
            &kube::core::ApiResource::erase::<ConfigMap>(&()),
            Some(ns.clone()),
            name,
        )
    };
    assert!(ctx.get(&key("gone")).is_some());

    env.stop_apiserver();
    let deleted = env
        .delete_from_etcd(&format!("/registry/configmaps/{ns}/gone"))
        .await
        .expect("delete in etcd");
    assert_eq!(deleted, 1, "the object existed in etcd");
    env.restart_apiserver().await.expect("restart");

    let queued = next(&mut rx, "the vanished key", Duration::from_secs(60)).await;
    assert_eq!(queued.name, "gone", "only the vanished object is queued");
    assert!(ctx.get(&key("gone")).is_none(), "the store dropped it");
    assert!(ctx.get(&key("stays")).is_some());
    running.stop().await;
}
