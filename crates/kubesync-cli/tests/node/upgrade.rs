//! A rolling `helm upgrade` from the previous release — its chart and its image, built from
//! this repository's history by `scripts/previous-image.sh` — to this tree, on two nodes, as
//! the upgrade page says to do it: the new CRDs applied, then `helm upgrade`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kubesync_testenv::{AuditEvent, eventually};

use crate::failover::{change_source, copies, copies_say, copy_writes_of};
use crate::ground::{Ground, NS, RELEASE, T, name, phase, repo, restarts};

/// The previous release's version (`releases/previous`) and the directory
/// `scripts/previous-image.sh` printed (`$KUBESYNC_PREVIOUS_RELEASE`): `image.tar`, `chart/`.
fn previous_release() -> (String, PathBuf) {
    let text = std::fs::read_to_string(repo().join("releases/previous")).expect("releases");
    let version = text
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .and_then(|l| l.split_whitespace().next())
        .expect("a version in releases/previous")
        .to_string();
    let dir = std::env::var_os("KUBESYNC_PREVIOUS_RELEASE")
        .map(PathBuf::from)
        .expect("KUBESYNC_PREVIOUS_RELEASE: the directory scripts/previous-image.sh prints");
    assert!(
        dir.join("image.tar").is_file() && dir.join("chart/Chart.yaml").is_file(),
        "{} lacks image.tar or chart/: run scripts/previous-image.sh",
        dir.display()
    );
    (version, dir)
}

/// The image of a Pod's container.
fn image(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// `helm install` of the previous release's chart and image. That chart has no values for a
/// node without a Pod network (hostNetwork, the apiserver's address, the Pod's IP), so a
/// post-renderer adds them to its Deployment, as a user of such a cluster would have.
fn install_previous(ground: &Ground, version: &str, dir: &std::path::Path) {
    let port = ground.apiserver_port();
    let script = ground.env.dir().join("previous-post-renderer.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec sed \
             -e 's/^      serviceAccountName: kubesync$/&\\n      hostNetwork: true\\n      dnsPolicy: ClusterFirstWithHostNet/' \
             -e 's/^        env:$/&\\n        - name: POD_IP\\n          valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}\\n        - {{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}}\\n        - {{name: KUBERNETES_SERVICE_PORT, value: \"{port}\"}}/'\n"
        ),
    )
    .expect("post-renderer");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let values = ground.env.dir().join("previous-values.yaml");
    std::fs::write(
        &values,
        format!(
            "image: {{tag: \"{version}\", pullPolicy: Never}}\n\
             telemetryAddress: \"$(POD_IP):8080\"\n\
             metrics: {{address: \"$(POD_IP):8443\"}}\n\
             tolerations:\n\
             - {{key: node.kubernetes.io/not-ready, operator: Exists}}\n"
        ),
    )
    .expect("values");
    let chart = dir.join("chart");
    ground.helm(&[
        "install",
        RELEASE,
        chart.to_str().expect("utf-8"),
        "--namespace",
        NS,
        "--create-namespace",
        "--values",
        values.to_str().expect("utf-8"),
        "--post-renderer",
        script.to_str().expect("utf-8"),
    ]);
}

/// What the upgrade page says comes first: this tree's CRDs, applied server-side.
fn apply_crds(ground: &Ground) {
    let out = Command::new(kubesync_testenv::kubectl().expect("kubectl"))
        .arg(format!(
            "--kubeconfig={}",
            ground.env.kubeconfig_path().expect("kubeconfig").display()
        ))
        .args(["apply", "--server-side", "--force-conflicts", "-f"])
        .arg(repo().join("charts/kubesync/crds/"))
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `helm upgrade` to this tree's chart (its image is the chart's appVersion).
fn upgrade(ground: &Ground) {
    let chart = repo().join("charts/kubesync");
    let [values, more] = ground.values("");
    ground.helm(&[
        "upgrade",
        RELEASE,
        chart.to_str().expect("utf-8"),
        "--namespace",
        NS,
        "--values",
        values.to_str().expect("utf-8"),
        "--values",
        more.to_str().expect("utf-8"),
    ]);
}

/// The copies' uids, by namespace.
async fn copy_uids(ground: &Ground) -> BTreeMap<String, String> {
    let client = ground.env.client().expect("client");
    let mut uids = BTreeMap::new();
    for ns in ["team-a", "team-b"] {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let copy = maps.get("settings").await.expect("copy");
        uids.insert(ns.to_string(), copy.metadata.uid.expect("uid"));
    }
    uids
}

/// Waits, while the Pods roll, for a Pod of the new image running beside a Pod of the old
/// one that is not being deleted; returns the old one's name.
async fn side_by_side(ground: &Ground, old: &str, new: &str) -> String {
    eventually("old and new Pods side by side", T, || async {
        let pods = ground.pods().await;
        let running_new = pods
            .iter()
            .any(|p| image(p).ends_with(new) && phase(p) == "Running");
        let old_pod = pods.iter().find(|p| {
            image(p).ends_with(old)
                && phase(p) == "Running"
                && p.metadata.deletion_timestamp.is_none()
        })?;
        running_new.then(|| name(old_pod))
    })
    .await
}

/// Waits for the Deployment's rollout to be complete: two updated Pods, both ready.
async fn rolled(ground: &Ground) {
    let deployments: Api<Deployment> = Api::namespaced(ground.env.client().expect("client"), NS);
    eventually("the rollout complete", T, || async {
        let d = deployments.get("kubesync").await.ok()?;
        let s = d.status?;
        let done = s.observed_generation == d.metadata.generation
            && s.updated_replicas == Some(2)
            && s.ready_replicas == Some(2)
            && s.replicas == Some(2);
        done.then_some(())
    })
    .await;
}

/// The creates and deletes of the copies the audit log holds.
fn copy_creates_and_deletes(ground: &Ground) -> Vec<String> {
    ground
        .env
        .audit()
        .expect("audit")
        .iter()
        .filter(|e| matches!(e.verb.as_str(), "create" | "delete"))
        .filter(|e| e.resource() == "configmaps" && e.namespace().starts_with("team-"))
        .filter(|e| e.name() == "settings")
        .map(AuditEvent::describe)
        .collect()
}

/// The writes each Pod sent beyond the counts in `before`.
fn writes_since(ground: &Ground, before: &BTreeMap<String, usize>) -> Vec<AuditEvent> {
    ground
        .writes_by_pod()
        .into_iter()
        .flat_map(|(pod, events)| {
            let seen = before.get(&pod).copied().unwrap_or(0);
            events.into_iter().skip(seen)
        })
        .collect()
}

/// The previous release installed by its chart, its copies made; the new CRDs, then `helm
/// upgrade` to this tree: the Pods roll one at a time (old and new side by side), a change
/// made meanwhile is written once per copy, no copy is deleted or recreated (same uids), and
/// once rolled, in sync, nothing is written.
#[tokio::test]
#[ignore = "needs nodes, the image and the previous release's: make node-test"]
async fn a_rolling_helm_upgrade_from_the_previous_release() {
    let (version, dir) = previous_release();
    let ground = Ground::start("node-upgrade", 2).await;
    for node in &ground.nodes {
        node.import_image(&dir.join("image.tar"))
            .expect("import the previous release's image");
    }
    install_previous(&ground, &version, &dir);
    let old: Vec<Pod> = ground.running(2).await;
    assert!(
        old.iter()
            .all(|p| image(p).ends_with(&format!(":{version}"))),
        "{:?}",
        old.iter().map(image).collect::<Vec<_>>()
    );
    copies(&ground, "one").await;
    let uids = copy_uids(&ground).await;

    apply_crds(&ground);
    upgrade(&ground);
    let new_tag = format!(":{}", env!("CARGO_PKG_VERSION"));
    let beside = side_by_side(&ground, &format!(":{version}"), &new_tag).await;
    change_source(&ground, "two").await;
    rolled(&ground).await;
    let now = ground.running(2).await;
    assert!(
        now.iter()
            .all(|p| image(p).ends_with(&new_tag) && restarts(p) == 0),
        "{:?}",
        now.iter()
            .map(|p| (image(p), restarts(p)))
            .collect::<Vec<_>>()
    );
    copies_say(&ground, "two").await;
    let writes = eventually("both copies' writes of two in the audit log", T, || async {
        let w = copy_writes_of(&ground, "two");
        (w.len() >= 2).then_some(w)
    })
    .await;
    let namespaces: Vec<&str> = writes.iter().map(|(ns, _)| ns.as_str()).collect();
    assert_eq!(
        namespaces,
        ["team-a", "team-b"],
        "once per copy: {writes:?}"
    );
    assert_eq!(copy_uids(&ground).await, uids, "a copy was recreated");
    let created = copy_creates_and_deletes(&ground);
    assert_eq!(created.len(), 2, "the first two creates only: {created:?}");
    in_sync_nothing_is_written(&ground).await;
    let by: BTreeSet<&str> = writes.iter().map(|(_, pod)| pod.as_str()).collect();
    eprintln!(
        "node upgrade: {version} → {}; the change made while {beside} (old) ran beside a new Pod was written once per copy, by {by:?}",
        env!("CARGO_PKG_VERSION")
    );
}

/// A second ObjectSync made once rolled (the new leader has seen events since): every write
/// after it concerns it alone.
pub async fn in_sync_nothing_is_written(ground: &Ground) {
    let before: BTreeMap<String, usize> = ground
        .writes_by_pod()
        .into_iter()
        .map(|(pod, events)| (pod, events.len()))
        .collect();
    ground.env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: second, namespace: {NS}}}\ndata: {{k: v}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: second, namespace: {NS}}}\nspec:\n  source: {{kind: ConfigMap, name: second}}\n  destinations: [{{namespace: team-a}}]\n")).await.expect("second");
    let later: Vec<String> = eventually("the second copy's write in the audit log", T, || async {
        let later = writes_since(ground, &before);
        later
            .iter()
            .any(|e| e.name() == "second" && e.resource() == "configmaps")
            .then(|| {
                later
                    .iter()
                    .filter(|e| e.name() != "second")
                    .map(AuditEvent::describe)
                    .collect()
            })
    })
    .await;
    assert!(later.is_empty(), "written again while in sync: {later:?}");
}
