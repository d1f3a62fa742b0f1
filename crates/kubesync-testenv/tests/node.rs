//! The test environment's node: a real kubelet and containerd beside a control plane.
//! Needs the node programs (`make node`; `make node-test` runs these).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kubesync_testenv::{TestEnv, eventually};

const T: Duration = Duration::from_secs(60);

/// Every cgroup directory of every hierarchy, and every mount point: what a node must leave
/// as it found it.
fn host_state() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut cgroups = BTreeSet::new();
    for h in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        for e in std::fs::read_dir(h.path()).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                cgroups.insert(e.path().display().to_string());
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mounts = mounts
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_string))
        .collect();
    (cgroups, mounts)
}

fn pause_pod(name: &str, node: &str, image: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "terminationGracePeriodSeconds": 5,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            ],
            "containers": [{
                "name": "pause",
                "image": image,
                "imagePullPolicy": "Never",
                "securityContext": {
                    "runAsUser": 65532, "runAsNonRoot": true, "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "resources": {"requests": {"memory": "8Mi"}, "limits": {"memory": "32Mi"}},
            }],
        },
    }))
    .expect("pod")
}

async fn running_uid(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("Pod {name} running"), T, || async {
        let pod = pods.get_opt(name).await.ok()??;
        let phase = pod.status.as_ref()?.phase.clone()?;
        (phase == "Running").then(|| pod.metadata.uid.clone())?
    })
    .await
}

/// Two nodes start beside one control plane, run a Pod each (the pause image, as the chart
/// runs kubesync: a user, no capabilities, seccomp), freeze and thaw one, and leave no cgroup,
/// mount or kernel setting behind when they stop.
#[tokio::test]
#[ignore = "needs the node programs: make node-test"]
async fn nodes_run_pods_and_leave_the_machine_as_they_found_it() {
    let before = host_state();
    let overcommit = std::fs::read_to_string("/proc/sys/vm/overcommit_memory").expect("sysctl");
    let env = TestEnv::builder()
        .name("nodes")
        .node("node-a")
        .node("node-b")
        .start()
        .await
        .expect("control plane");
    let a = env.start_node("node-a").await.expect("node-a");
    let b = env.start_node("node-b").await.expect("node-b");
    let image = std::fs::read_to_string(
        kubesync_testenv::NodeBinaries::locate()
            .expect("node programs")
            .dir
            .join("pause.image"),
    )
    .expect("pause.image");
    let pods: Api<Pod> = Api::namespaced(env.client().expect("client"), "default");
    let witness = a.connection_witness();
    for (name, node) in [("on-a", "node-a"), ("on-b", "node-b")] {
        pods.create(&PostParams::default(), &pause_pod(name, node, image.trim()))
            .await
            .expect("pod");
    }
    let uid = running_uid(&pods, "on-a").await;
    running_uid(&pods, "on-b").await;
    let node = pods.get("on-a").await.expect("pod").status.expect("status");
    assert_eq!(node.pod_ip, Some(a.address().to_string()), "{node:?}");
    let on_b = pods.get("on-b").await.expect("pod").status.expect("status");
    assert_eq!(on_b.pod_ip, Some(b.address().to_string()), "{on_b:?}");
    assert_ne!(a.address(), b.address());

    // Frozen, the Pod's processes stop; thawed, they go on; the cgroup counts its memory.
    a.freeze_pod(&uid, true).expect("freeze");
    let state = a
        .pod_cgroup(&uid, "freezer")
        .expect("cgroup")
        .join("freezer.state");
    if state.exists() {
        eventually("frozen", T, || async {
            (std::fs::read_to_string(&state).ok()?.trim() == "FROZEN").then_some(())
        })
        .await;
    }
    a.freeze_pod(&uid, false).expect("thaw");
    assert!(a.pod_memory_peak(&uid).expect("peak") > 0);
    assert!(witness.not_loopback().is_empty(), "{:?}", witness.seen());
    drop(witness);

    pods.delete("on-b", &DeleteParams::default())
        .await
        .expect("delete");
    drop((a, b));
    drop(env);
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/overcommit_memory").expect("sysctl"),
        overcommit,
        "vm.overcommit_memory restored"
    );
    let after = host_state();
    assert_eq!(
        before.0.symmetric_difference(&after.0).count(),
        0,
        "cgroups: {:?}",
        before.0.symmetric_difference(&after.0).collect::<Vec<_>>()
    );
    assert_eq!(
        before.1.symmetric_difference(&after.1).count(),
        0,
        "mounts: {:?}",
        before.1.symmetric_difference(&after.1).collect::<Vec<_>>()
    );
}
