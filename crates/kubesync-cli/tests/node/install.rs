//! `helm install` with the chart's defaults (two replicas, leader election) on two nodes.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kubesync_testenv::eventually;

use crate::common::{metrics_tokens, request_tls_to};
use crate::ground::{Ground, NS, T, is_write, kubesync_process, name, pod_ip, ready, restarts};

/// What `/proc/<pid>/status` says of a process: (uid line, CapEff, NoNewPrivs, Seccomp).
fn status_of(pid: u32) -> (String, String, String, String) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    (
        field("Uid"),
        field("CapEff"),
        field("NoNewPrivs"),
        field("Seccomp"),
    )
}

/// `helm install` as a platform team runs it (defaults, plus what a cluster without a Pod
/// network needs): both Pods run, one on each node, neither restarted; the leader's copies
/// are written as the chart's ServiceAccount from its Pod; `/metrics` answers over HTTPS to
/// a token allowed to read it and to no other; the container runs as the securityContext
/// says (user 65532, no capabilities, no new privileges, seccomp, a read-only root); once in
/// sync nothing is written again; and no Pod dialled anything but a loopback address.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn helm_install_runs_the_chart_on_nodes() {
    let ground = Ground::start("node-install", 2).await;
    let witnesses: Vec<_> = ground
        .nodes
        .iter()
        .map(|n| n.connection_witness())
        .collect();
    ground.install("");
    let pods = ground.running(2).await;
    let nodes: BTreeSet<_> = pods
        .iter()
        .map(|p| ground.node_of(p).name().to_string())
        .collect();
    assert_eq!(nodes.len(), 2, "one Pod on each node");
    let leader = eventually("a leader", T, || ground.leader()).await;
    let leader_pod = pods
        .iter()
        .find(|p| name(p) == leader)
        .expect("leader's Pod");
    eventually("the leader's Pod ready", T, || async {
        let pod = ground.pods_api().get(&leader).await.ok()?;
        ready(&pod).then_some(())
    })
    .await;

    // The securityContext as runc applied it.
    let (uids, cap_eff, no_new_privs, seccomp) = status_of(kubesync_process(&ground, leader_pod));
    assert_eq!(uids, "65532 65532 65532 65532");
    assert_eq!(cap_eff, "0000000000000000");
    assert_eq!(no_new_privs, "1");
    assert_eq!(seccomp, "2", "a seccomp filter");
    let mountinfo = std::fs::read_to_string(format!(
        "/proc/{}/mountinfo",
        kubesync_process(&ground, leader_pod)
    ))
    .expect("mountinfo");
    let root = mountinfo
        .lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .expect("the root mount");
    assert!(
        root.split_whitespace()
            .nth(5)
            .is_some_and(|o| o.split(',').any(|o| o == "ro")),
        "a read-only root: {root}"
    );

    // A copy, made from the leader's Pod as the chart's ServiceAccount.
    for ns in ["team-a", "team-b"] {
        ground.env.create_namespace(ns).await.expect("ns");
    }
    ground.env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {NS}}}\ndata: {{mode: fast}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: settings, namespace: {NS}}}\nspec:\n  source: {{kind: ConfigMap, name: settings}}\n  destinations: [{{namespace: team-a}}, {{namespace: team-b}}]\n")).await.expect("ObjectSync");
    let client = ground.env.client().expect("client");
    for ns in ["team-a", "team-b"] {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        eventually(&format!("the copy in {ns}"), T, || async {
            maps.get_opt("settings").await.ok()?.map(drop)
        })
        .await;
    }
    let creates = eventually("the copies' creates in the audit log", T, || async {
        let creates: Vec<_> = ground
            .env
            .audit()
            .ok()?
            .into_iter()
            .filter(|e| e.verb == "create" || e.verb == "patch")
            .filter(|e| {
                e.object_ref.as_ref().is_some_and(|o| {
                    o.resource == "configmaps"
                        && o.name == "settings"
                        && o.namespace.starts_with("team-")
                })
            })
            .collect();
        (creates.len() >= 2).then_some(creates)
    })
    .await;
    for e in &creates {
        assert_eq!(
            e.user.username,
            format!("system:serviceaccount:{NS}:kubesync")
        );
        assert_eq!(e.user.pod_name(), Some(leader.as_str()), "{}", e.describe());
    }

    // /metrics over HTTPS on the Pod's address, to a token allowed to read it only.
    let (reader, nosy) = metrics_tokens(&ground.env).await;
    let ip = pod_ip(leader_pod);
    let (code, body) = eventually("/metrics", T, || {
        request_tls_to(ip, 8443, "/metrics", Some(&reader), None)
    })
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("kubesync_"), "{body:.400}");
    let (code, _) = request_tls_to(ip, 8443, "/metrics", Some(&nosy), None)
        .await
        .expect("answer");
    assert_eq!(code, 403);

    // In sync, nothing is written again: a second ObjectSync is made (the operator has seen
    // events since), and every write after the first copies concerns it alone.
    let before: usize = ground.writes_by_pod().values().map(Vec::len).sum();
    ground.env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: second, namespace: {NS}}}\ndata: {{k: v}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: second, namespace: {NS}}}\nspec:\n  source: {{kind: ConfigMap, name: second}}\n  destinations: [{{namespace: team-a}}]\n")).await.expect("second");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    eventually("the second copy", T, || async {
        maps.get_opt("second").await.ok()?.map(drop)
    })
    .await;
    let later: Vec<String> = eventually("the second copy's write in the audit log", T, || async {
        let all: Vec<_> = ground.writes_by_pod().into_values().flatten().collect();
        let later: Vec<_> = all.into_iter().skip(before).collect();
        later
            .iter()
            .any(|e| e.name() == "second" && e.resource() == "configmaps")
            .then(|| {
                later
                    .iter()
                    .filter(|e| e.name() != "second")
                    .map(|e| e.describe())
                    .collect()
            })
    })
    .await;
    assert!(later.is_empty(), "written again while in sync: {later:?}");
    assert!(ground.writes_by_pod().values().flatten().all(is_write));

    for pod in ground.pods().await {
        assert_eq!(restarts(&pod), 0, "{} restarted", name(&pod));
    }
    let seen: BTreeSet<_> = witnesses.iter().flat_map(|w| w.seen()).collect();
    let foreign: Vec<_> = witnesses.iter().flat_map(|w| w.not_loopback()).collect();
    assert!(foreign.is_empty(), "dialled outside loopback: {foreign:?}");
    let api = ground
        .env
        .server()
        .trim_start_matches("https://")
        .to_string();
    assert!(
        seen.iter().any(|a| a.to_string() == api),
        "the witness saw the apiserver: {seen:?}"
    );
}

/// An image the node does not hold (a tag mistyped): the Pod says so in its status, in the
/// kubelet's words, naming the image — nothing runs, nothing is written.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn an_unknown_image_shows_in_the_pods_status() {
    let ground = Ground::start("node-bad-image", 1).await;
    ground.install("replicas: 1\nimage: {tag: \"0.0.0-nope\", pullPolicy: Never}\n");
    let (reason, message) = eventually("the Pod waiting for its image", T, || async {
        let pod = ground.pods().await.into_iter().next()?;
        let waiting = pod
            .status?
            .container_statuses?
            .into_iter()
            .next()?
            .state?
            .waiting?;
        let reason = waiting.reason.filter(|r| r != "ContainerCreating")?;
        Some((reason, waiting.message.unwrap_or_default()))
    })
    .await;
    assert_eq!(reason, "ErrImageNeverPull", "{message}");
    assert!(message.contains("kubesync:0.0.0-nope"), "{message}");
    let written: Vec<String> = ground
        .writes_by_pod()
        .into_values()
        .flatten()
        .map(|e| e.describe())
        .collect();
    assert!(written.is_empty(), "{written:?}");
}
