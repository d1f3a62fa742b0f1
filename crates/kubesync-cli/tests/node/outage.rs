//! The chart's Pods through an apiserver outage, sharded across three nodes, and under the
//! memory limit while 10 000 copies are made.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubesync_testenv::eventually;

use crate::failover::{both_ready, change_source, copies, copies_say};
use crate::ground::{Ground, NS, T, kubesync_process, name, ready, restarts};

/// The apiserver stopped for 30 s: the liveness probe restarts no Pod (the same processes
/// run before and after), and a copy deleted behind the apiserver's back meanwhile is made
/// again once it is back; a change after it reaches both copies.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn an_apiserver_outage_restarts_no_pod() {
    let mut ground = Ground::start("node-outage", 2).await;
    ground.install("");
    ground.running(2).await;
    copies(&ground, "one").await;
    let (leader, standby) = both_ready(&ground).await;
    let processes = [
        kubesync_process(&ground, &leader),
        kubesync_process(&ground, &standby),
    ];
    ground.env.stop_apiserver();
    let removed = ground
        .env
        .delete_from_etcd("/registry/configmaps/team-a/settings")
        .await
        .expect("etcd");
    assert_eq!(removed, 1);
    tokio::time::sleep(Duration::from_secs(30)).await;
    ground
        .env
        .restart_apiserver()
        .await
        .expect("apiserver back");
    let back = Instant::now();
    copies_say(&ground, "one").await;
    let repaired = back.elapsed();
    change_source(&ground, "two").await;
    copies_say(&ground, "two").await;
    assert_eq!(
        [
            kubesync_process(&ground, &leader),
            kubesync_process(&ground, &standby),
        ],
        processes,
        "a container was restarted"
    );
    for pod in ground.pods().await {
        assert_eq!(restarts(&pod), 0, "{} restarted", name(&pod));
    }
    eprintln!(
        "node outage: the deleted copy made again {repaired:?} after the apiserver came back"
    );
}

/// `sharded.enabled` with three replicas on three nodes: all three are ready and each one
/// writes copies of its share of thirty ObjectSyncs.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn sharded_pods_each_work_on_their_share() {
    let ground = Ground::start("node-sharded", 3).await;
    ground.install("replicas: 3\nsharded: {enabled: true}\n");
    ground.running(3).await;
    eventually("three ready members", T, || async {
        (ground.pods().await.iter().filter(|p| ready(p)).count() == 3).then_some(())
    })
    .await;
    ground.env.create_namespace("team-a").await.expect("ns");
    let mut yaml = String::new();
    // 30 units: the chance that rendezvous hashing gives one of three members none is 1e-5.
    for i in 0..30 {
        yaml.push_str(&format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: s{i}, namespace: {NS}}}\ndata: {{k: v}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: s{i}, namespace: {NS}}}\nspec:\n  source: {{kind: ConfigMap, name: s{i}}}\n  destinations: [{{namespace: team-a}}]\n"));
    }
    ground.env.apply_yaml(&yaml).await.expect("ObjectSyncs");
    let maps: Api<ConfigMap> = Api::namespaced(ground.env.client().expect("client"), "team-a");
    eventually("thirty copies", T, || async {
        let n = maps.list(&Default::default()).await.ok()?.items.len();
        (n >= 30).then_some(())
    })
    .await;
    let writers = eventually(
        "the copies' creates in the audit log, by Pod",
        T,
        || async {
            let by = ground.writes_by_pod();
            let mut writers = std::collections::BTreeMap::new();
            for (pod, events) in by {
                let n = events
                    .iter()
                    .filter(|e| {
                        e.verb == "create"
                            && e.resource() == "configmaps"
                            && e.namespace() == "team-a"
                    })
                    .count();
                writers.insert(pod, n);
            }
            (writers.values().sum::<usize>() >= 30).then_some(writers)
        },
    )
    .await;
    assert_eq!(writers.len(), 3, "every Pod wrote its share: {writers:?}");
    assert!(writers.values().all(|n| *n > 0), "{writers:?}");
    let pods = ground.pods().await;
    assert!(pods.iter().all(ready), "all three ready");
    eprintln!("node sharded: copies by Pod {writers:?}");
}

/// One Pod makes 10 000 copies (10 Secrets of 1 KiB into 1000 namespaces); its cgroup's
/// memory peak stays under the chart's limit (512 MiB) — and the figure is printed, as the
/// chart's requests and limits come from it.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn ten_thousand_copies_stay_under_the_memory_limit() {
    const NAMESPACES: usize = 1000;
    const SOURCES: usize = 10;
    let ground = Ground::start("node-memory", 1).await;
    ground.install("replicas: 1\n");
    let pod = ground.running(1).await.remove(0);
    let node = ground.node_of(&pod);
    let client = ground.env.client().expect("client");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for i in 0..NAMESPACES {
        let ns = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("t{i}"), "labels": {"copies": "yes"}}
        }))
        .expect("ns");
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("ns");
    }
    let idle = node
        .pod_memory_peak(&crate::ground::uid(&pod))
        .expect("peak");
    let mut yaml = String::new();
    for i in 0..SOURCES {
        yaml.push_str(&format!("---\napiVersion: v1\nkind: Secret\nmetadata: {{name: s{i}, namespace: {NS}}}\nstringData: {{k: \"{}\"}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: s{i}, namespace: {NS}}}\nspec:\n  source: {{kind: Secret, name: s{i}}}\n  destinations: [{{namespaceSelector: {{matchLabels: {{copies: \"yes\"}}}}}}]\n", "x".repeat(1024)));
    }
    let started = Instant::now();
    ground.env.apply_yaml(&yaml).await.expect("ObjectSyncs");
    let syncs: Api<kubesync_cli::crd::ObjectSync> = Api::namespaced(client.clone(), NS);
    eventually(
        "10 000 copies in sync",
        Duration::from_secs(600),
        || async {
            let list = syncs.list(&Default::default()).await.ok()?;
            let in_sync: i64 = list
                .items
                .iter()
                .filter_map(|o| o.status.as_ref())
                .map(|s| i64::from(s.in_sync))
                .sum();
            (in_sync == (NAMESPACES * SOURCES) as i64).then_some(())
        },
    )
    .await;
    let took = started.elapsed();
    let peak = node
        .pod_memory_peak(&crate::ground::uid(&pod))
        .expect("peak");
    let mib = |b: u64| b as f64 / 1024.0 / 1024.0;
    eprintln!(
        "node memory: 10 000 copies in {took:?}; the Pod's cgroup peak {:.1} MiB (before the copies {:.1} MiB)",
        mib(peak),
        mib(idle)
    );
    assert!(
        peak < 512 * 1024 * 1024,
        "over the chart's limit: {:.1} MiB",
        mib(peak)
    );
    let pod = ground.pods_api().get(&name(&pod)).await.expect("pod");
    assert_eq!(restarts(&pod), 0);
}
