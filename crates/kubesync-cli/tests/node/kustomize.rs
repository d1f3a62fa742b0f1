//! `kubectl apply -k` of an overlay of `config/default` on two nodes: the install without
//! Helm, as the install page gives it.

use std::process::Command;

use kubesync_testenv::eventually;

use crate::common::{metrics_tokens, request_tls_to};
use crate::failover::{both_ready, copies, copy_writes_of};
use crate::ground::{Ground, NS, T, name, pod_ip, repo, restarts};
use crate::upgrade::in_sync_nothing_is_written;

/// An overlay of `config/default` with what a cluster without a Pod network needs — the
/// patch the install page gives for hostNetwork clusters — written beside the environment.
fn overlay(ground: &Ground) -> std::path::PathBuf {
    let port = ground.apiserver_port();
    // Kustomize takes no absolute base: the overlay sits beside a copy of `config/`.
    copy_tree(&repo().join("config"), &ground.env.dir().join("config"));
    let dir = ground.env.dir().join("overlay");
    std::fs::create_dir_all(&dir).expect("overlay");
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n\
         kind: Kustomization\n\
         resources:\n\
         - ../config/default\n\
         patches:\n\
         - target: {{kind: Namespace, name: {NS}}}\n\
         \x20 patch: |-\n\
         \x20   apiVersion: v1\n\
         \x20   kind: Namespace\n\
         \x20   metadata:\n\
         \x20     name: {NS}\n\
         \x20     labels: {{pod-security.kubernetes.io/enforce: privileged, pod-security.kubernetes.io/warn: restricted}}\n\
         - target: {{kind: Deployment, name: kubesync}}\n\
         \x20 patch: |-\n\
         \x20   apiVersion: apps/v1\n\
         \x20   kind: Deployment\n\
         \x20   metadata: {{name: kubesync, namespace: {NS}}}\n\
         \x20   spec:\n\
         \x20     strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 0, maxUnavailable: 1}}}}\n\
         \x20     template:\n\
         \x20       spec:\n\
         \x20         hostNetwork: true\n\
         \x20         dnsPolicy: ClusterFirstWithHostNet\n\
         \x20         tolerations: [{{key: node.kubernetes.io/not-ready, operator: Exists}}]\n\
         \x20         containers:\n\
         \x20         - name: kubesync\n\
         \x20           imagePullPolicy: Never\n\
         \x20           env:\n\
         \x20           - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}\n\
         \x20           - {{name: KUBESYNC_TELEMETRY_ADDRESS, value: \"$(POD_IP):8080\"}}\n\
         \x20           - {{name: KUBESYNC_METRICS_ADDRESS, value: \"$(POD_IP):8443\"}}\n\
         \x20           - {{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}}\n\
         \x20           - {{name: KUBERNETES_SERVICE_PORT, value: \"{port}\"}}\n",
    );
    std::fs::write(dir.join("kustomization.yaml"), kustomization).expect("kustomization");
    dir
}

/// Copies the directory `from` to `to`, files and folders.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("copy of config/");
    for entry in std::fs::read_dir(from).expect("config/") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// `kubectl apply -k <dir>`, server-side (the CRDs are larger than a client-side apply's
/// annotation may be).
fn apply_k(ground: &Ground, dir: &std::path::Path) -> String {
    let out = Command::new(kubesync_testenv::kubectl().expect("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            ground.env.kubeconfig_path().expect("kubeconfig").display()
        ))
        .args(["apply", "--server-side", "-k"])
        .arg(dir)
        .output()
        .expect("kubectl");
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl apply -k: {said}");
    said
}

/// `kubectl apply -k` of config/default (with the hostNetwork patch): both Pods run and are
/// ready, one leads, neither restarts; the copies are written from the leader's Pod as the
/// ServiceAccount `kubesync`; `/metrics` answers over HTTPS to a token allowed to read it
/// and to no other; once in sync nothing is written again.
#[tokio::test]
#[ignore = "needs nodes and the image: make node-test"]
async fn kubectl_apply_k_config_default_runs_on_nodes() {
    let ground = Ground::start("node-kustomize", 2).await;
    let said = apply_k(&ground, &overlay(&ground));
    assert!(said.contains("deployment.apps/kubesync"), "{said}");
    ground.running(2).await;
    copies(&ground, "one").await;
    let (leader, standby) = both_ready(&ground).await;
    let writes = eventually("both copies' creates in the audit log", T, || async {
        let w = copy_writes_of(&ground, "one");
        (w.len() >= 2).then_some(w)
    })
    .await;
    assert!(
        writes.iter().all(|(_, pod)| *pod == name(&leader)),
        "{writes:?}"
    );
    let service_account = format!("system:serviceaccount:{NS}:kubesync");
    let by_leader = ground.writes_by_pod();
    assert!(
        by_leader[&name(&leader)]
            .iter()
            .all(|e| e.user.username == service_account),
        "every write as {service_account}"
    );

    let (reader, nosy) = metrics_tokens(&ground.env).await;
    let ip = pod_ip(&leader);
    let (code, body) = eventually("/metrics", T, || {
        request_tls_to(ip, 8443, "/metrics", Some(&reader), None)
    })
    .await;
    assert_eq!(code, 200, "{body:.400}");
    let (code, _) = request_tls_to(ip, 8443, "/metrics", Some(&nosy), None)
        .await
        .expect("answer");
    assert_eq!(code, 403);

    in_sync_nothing_is_written(&ground).await;
    for pod in [&leader, &standby] {
        let now = ground.pods_api().get(&name(pod)).await.expect("pod");
        assert_eq!(restarts(&now), 0, "{} restarted", name(pod));
    }
}
