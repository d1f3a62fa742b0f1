//! The two replicas of the chart on two nodes, as an SRE handles them: the leader's Pod
//! deleted, evictions against the PodDisruptionBudget, a rolling restart, a frozen leader.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, EvictParams, Patch, PatchParams};
use kubesync_testenv::eventually;

use crate::ground::{Ground, NS, T, name, pod_ip, ready, restarts, uid};

/// Two namespaces and an ObjectSync (in the trusted release namespace) copying `settings`
/// into both; returns when both copies say `mode`.
pub async fn copies(ground: &Ground, mode: &str) {
    for ns in ["team-a", "team-b"] {
        ground.env.create_namespace(ns).await.expect("ns");
    }
    ground.env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {NS}}}\ndata: {{mode: {mode}}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: settings, namespace: {NS}}}\nspec:\n  source: {{kind: ConfigMap, name: settings}}\n  destinations: [{{namespace: team-a}}, {{namespace: team-b}}]\n")).await.expect("ObjectSync");
    copies_say(ground, mode).await;
}

/// Waits until both copies say `mode`.
pub async fn copies_say(ground: &Ground, mode: &str) {
    let client = ground.env.client().expect("client");
    for ns in ["team-a", "team-b"] {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        eventually(&format!("the copy in {ns} says {mode}"), T, || async {
            let data = maps.get_opt("settings").await.ok()??.data?;
            (data.get("mode")? == mode).then_some(())
        })
        .await;
    }
}

/// Changes the source's `mode`.
pub async fn change_source(ground: &Ground, mode: &str) {
    let maps: Api<ConfigMap> = Api::namespaced(ground.env.client().expect("client"), NS);
    maps.patch(
        "settings",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"data": {"mode": mode}})),
    )
    .await
    .expect("source");
}

/// The writes of the copies (in team-a and team-b) whose request set `mode`, as (namespace,
/// Pod that sent it).
pub fn copy_writes_of(ground: &Ground, mode: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (pod, events) in ground.writes_by_pod() {
        for e in events {
            let sets = e
                .request_object
                .as_ref()
                .is_some_and(|o| o["data"]["mode"] == mode);
            if e.resource() == "configmaps"
                && e.name() == "settings"
                && e.namespace().starts_with("team-")
                && sets
            {
                out.push((e.namespace().to_string(), pod.clone()));
            }
        }
    }
    out.sort();
    out
}

/// Both Pods running and ready, one the leader: (leader, the other).
pub async fn both_ready(ground: &Ground) -> (Pod, Pod) {
    eventually("two ready Pods, one leading", T, || async {
        let pods: Vec<Pod> = ground
            .pods()
            .await
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && ready(p))
            .collect();
        let leader = ground.leader().await?;
        let (l, o): (Vec<Pod>, Vec<Pod>) = pods.into_iter().partition(|p| name(p) == leader);
        (l.len() == 1 && o.len() == 1).then(|| (l[0].clone(), o[0].clone()))
    })
    .await
}

/// The standby is ready (it can take over), so the PodDisruptionBudget lets a drain evict
/// one Pod — and refuses to evict the last ready one until the replacement is ready. The
/// leader's Pod deleted (`kubectl delete pod`: the kubelet's SIGTERM, the Lease released):
/// the other one leads within the Lease and 5 s, and a change made meanwhile reaches each
/// copy written once.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn evictions_and_a_deleted_leader() {
    let ground = Ground::start("node-failover", 2).await;
    ground.install("");
    ground.running(2).await;
    copies(&ground, "one").await;
    let (leader, standby) = both_ready(&ground).await;
    let (code, body) =
        crate::common::request_tls_to(pod_ip(&standby), 8443, "/metrics", None, None)
            .await
            .map_or((0, String::new()), |a| a);
    assert_eq!(code, 401, "{body}");

    // A drain evicts the standby; while its replacement is not ready yet, the leader's
    // eviction is refused (429, the budget).
    let pods = ground.pods_api();
    pods.evict(&name(&standby), &EvictParams::default())
        .await
        .expect("the standby's eviction is allowed");
    // (kube's client retries a 429 until it passes — as `kubectl drain` does — so the
    // eviction is posted once, raw.)
    let (refused, said) = ground.evict_once(&name(&leader));
    assert!(!refused, "the last ready Pod's eviction is refused: {said}");
    assert!(said.contains("disruption budget"), "{said}");
    let (leader, _) = both_ready(&ground).await;

    // The leader's Pod deleted (the kubelet's SIGTERM: the Lease is released at once); a
    // change meanwhile.
    let held_by = ground.holder().await.expect("lease").expect("a holder");
    let deleted = Instant::now();
    pods.delete(&name(&leader), &Default::default())
        .await
        .expect("delete");
    let released = eventually("the Lease released or taken", T, || async {
        let h = ground.holder().await.ok()?;
        (h.as_deref() != Some(held_by.as_str())).then(|| deleted.elapsed())
    })
    .await;
    assert!(
        released < Duration::from_secs(2),
        "released {released:?} after the delete"
    );
    change_source(&ground, "two").await;
    let next = eventually("another Pod leads", T, || async {
        let l = ground.leader().await?;
        (l != name(&leader)).then_some(l)
    })
    .await;
    let took = deleted.elapsed();
    assert!(
        took < Duration::from_secs(15 + 5),
        "{next} led {took:?} after the delete"
    );
    copies_say(&ground, "two").await;
    let writes = eventually("both copies' writes of two in the audit log", T, || async {
        let w = copy_writes_of(&ground, "two");
        (w.len() >= 2).then_some(w)
    })
    .await;
    assert_eq!(
        writes.iter().map(|(ns, _)| ns.as_str()).collect::<Vec<_>>(),
        ["team-a", "team-b"],
        "each copy written once: {writes:?}"
    );
    eprintln!(
        "node failover: the Lease released {released:?} and {next} led {took:?} after the leader's Pod was deleted"
    );
}

/// A rolling restart (`kubectl rollout restart`, as every `helm upgrade` that changes the
/// Pods' template does) completes: new Pods replace both old ones and the Deployment is
/// available — its new Pods become ready although one of them only stands by.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn a_rolling_restart_completes() {
    let ground = Ground::start("node-rollout", 2).await;
    ground.install("");
    let old: Vec<String> = ground.running(2).await.iter().map(uid).collect();
    eventually("a leader", T, || ground.leader()).await;
    let deployments: Api<Deployment> = Api::namespaced(ground.env.client().expect("client"), NS);
    let restart = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": "2026-12-03T00:00:00Z"
    }}}}});
    deployments
        .patch("kubesync", &PatchParams::default(), &Patch::Merge(&restart))
        .await
        .expect("restart");
    eventually("the rollout complete", T, || async {
        let d = deployments.get("kubesync").await.ok()?;
        let s = d.status?;
        let generation = d.metadata.generation?;
        let done = s.observed_generation == Some(generation)
            && s.updated_replicas == Some(2)
            && s.ready_replicas == Some(2)
            && s.replicas == Some(2);
        done.then_some(())
    })
    .await;
    let now = ground.running(2).await;
    assert!(
        now.iter().all(|p| !old.contains(&uid(p))),
        "every Pod replaced"
    );
    both_ready(&ground).await;
}

/// The leader's Pod frozen (its cgroup, as a stalled machine stops it) past its Lease: the
/// other one takes over and carries a change; thawed, the old leader writes nothing, is not
/// restarted by the kubelet (its fence starts it afresh in place) and stands by again.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn a_frozen_leader_wakes_as_a_standby() {
    let ground = Ground::start("node-freeze", 2).await;
    ground.install("");
    ground.running(2).await;
    copies(&ground, "one").await;
    let (leader, _) = both_ready(&ground).await;
    let node = ground.node_of(&leader);
    node.freeze_pod(&uid(&leader), true).expect("freeze");
    let frozen = Instant::now();
    change_source(&ground, "two").await;
    let next = eventually("another Pod leads", T, || async {
        let l = ground.leader().await?;
        (l != name(&leader)).then_some(l)
    })
    .await;
    copies_say(&ground, "two").await;
    // Past the Lease, but short of the liveness probe's three failures (30 s).
    let past = Duration::from_secs(17).saturating_sub(frozen.elapsed());
    tokio::time::sleep(past).await;
    let writes_before: usize = ground
        .writes_by_pod()
        .get(&name(&leader))
        .map_or(0, Vec::len);
    node.freeze_pod(&uid(&leader), false).expect("thaw");
    let thawed = Instant::now();
    let ip = pod_ip(&leader);
    eventually("the old leader stands by", T, || async {
        let (code, body) = crate::common::request_at(ip, 8080, "GET", "/readyz").await?;
        (code == 200 && body.contains("standby")).then_some(())
    })
    .await;
    change_source(&ground, "three").await;
    copies_say(&ground, "three").await;
    let writes = eventually(
        "the copies' writes of three in the audit log",
        T,
        || async {
            let w = copy_writes_of(&ground, "three");
            (w.len() >= 2).then_some(w)
        },
    )
    .await;
    assert!(writes.iter().all(|(_, pod)| *pod == next), "{writes:?}");
    let writes_after: usize = ground
        .writes_by_pod()
        .get(&name(&leader))
        .map_or(0, Vec::len);
    assert_eq!(writes_after, writes_before, "the thawed Pod wrote");
    let pod = ground.pods_api().get(&name(&leader)).await.expect("pod");
    assert_eq!(restarts(&pod), 0, "the kubelet restarted the thawed Pod");
    eprintln!(
        "node freeze: {next} took over while {} was frozen; it stood by again {:?} after the thaw",
        name(&leader),
        thawed.elapsed()
    );
}
