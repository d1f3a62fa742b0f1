//! The operator on real control planes: RemoteCluster and ResourceSync drive spec/status
//! syncs that start, reconfigure and stop at run time; invalid specs get conditions.

mod common;

use common::*;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync::Cluster;
use kubesync_cli::crd::{RemoteCluster, ResourceSync, SecretRepairMode};
use kubesync_cli::operator::OperatorOptions;
use kubesync_testenv::{TestEnv, eventually, fixtures::WIDGET_CRD};

fn widgets(env: &TestEnv, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
        "widgets",
    );
    Api::namespaced_with(env.client().expect("client"), ns, &ar)
}

async fn apply(env: &TestEnv, yaml: &str) {
    env.apply_yaml(yaml).await.expect("apply");
}

async fn apply_widget(env: &TestEnv, ns: &str, name: &str) {
    env.create_namespace(ns).await.expect("ns");
    apply(env, &format!("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{size: 1}}\n")).await;
}

/// Merge-patches the Widget `ns/name` of `env`.
async fn patch_widget(env: &TestEnv, ns: &str, name: &str, patch: serde_json::Value) {
    widgets(env, ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .expect("patch the Widget");
}

fn ready(conditions: &[kubesync_cli::crd::Condition]) -> Option<(String, String)> {
    ready_condition(conditions)
}

async fn rs_reason(api: &Api<ResourceSync>, name: &str, want: (&str, &str)) -> ResourceSync {
    eventually(
        &format!("ResourceSync {name} Ready={}/{}", want.0, want.1),
        T,
        || async {
            let rs = api.get_opt(name).await.expect("get")?;
            let st = rs.status.clone()?;
            (ready(&st.conditions) == Some((want.0.to_string(), want.1.to_string()))).then_some(rs)
        },
    )
    .await
}

#[tokio::test]
async fn operator_runs_reconfigures_and_stops_syncs_and_reports_bad_specs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let (local, remote) = tokio::join!(
        TestEnv::builder()
            .name("op-local")
            .with_controller_manager(true)
            .start(),
        TestEnv::builder().name("op-remote").start()
    );
    let (local, mut remote) = (local.expect("local"), remote.expect("remote"));
    local
        .install_crds(&kubesync_cli::crd::crds_yaml().expect("crds"))
        .await
        .expect("kubesync crds");
    local.install_crds(WIDGET_CRD).await.expect("widget crd");
    remote.install_crds(WIDGET_CRD).await.expect("widget crd");
    local.create_namespace("kubesync").await.expect("ns");
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mgmt-kubeconfig", "namespace": "kubesync"},
        "stringData": {"kubeconfig": remote.kubeconfig_yaml()}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(local.client().expect("client"), "kubesync")
        .create(&PostParams::default(), &secret)
        .await
        .expect("kubeconfig secret");

    let running = start_operator(
        Cluster::new("local", local.client().expect("client")),
        OperatorOptions::default(),
    );
    let operator = running.operator.clone();

    // RemoteCluster: connected, with the server version.
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: mgmt}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync, name: mgmt-kubeconfig}\n").await;
    let rcs: Api<RemoteCluster> = Api::all(local.client().expect("client"));
    let rc = eventually("RemoteCluster ready", T, || async {
        rcs.get("mgmt").await.ok().filter(|rc| {
            rc.status
                .as_ref()
                .is_some_and(|s| ready(&s.conditions).is_some_and(|r| r.0 == "True"))
        })
    })
    .await;
    assert_eq!(
        rc.status.expect("status").server_version,
        Some(remote.server_version().await.expect("version"))
    );

    // A valid ResourceSync: objects flow down, status counts them.
    apply_widget(&remote, "ops-a", "w1").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: widgets}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: mgmt\n  namespacePrefix: ops-\n  secretNames: [creds]\n").await;
    let rss: Api<ResourceSync> = Api::all(local.client().expect("client"));
    eventually("w1 synced down", T, || async {
        widgets(&local, "ops-a").get_opt("w1").await.expect("get")
    })
    .await;
    let rs = eventually("status counts", T, || async {
        rss.get("widgets").await.ok().filter(|rs| {
            rs.status
                .as_ref()
                .is_some_and(|s| s.objects == 1 && s.in_sync == 1)
        })
    })
    .await;
    let st = rs.status.expect("status");
    assert_eq!(
        ready(&st.conditions),
        Some(("True".into(), "Syncing".into()))
    );
    assert_eq!(st.observed_generation, rs.metadata.generation);
    // The remote identity (an admin) may watch Secrets: remote Secret edits are seen at once.
    assert_eq!(st.secret_repair, Some(SecretRepairMode::Watch));

    // Invalid specs: each gets a condition saying why; the operator keeps running.
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: bad-kind}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Gizmo}\n  remoteCluster: mgmt\n").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: bad-remote}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: nowhere\n").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: no-status}\nspec:\n  resource: {version: v1, kind: ConfigMap}\n  remoteCluster: mgmt\n").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: broken}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync, name: missing}\n").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: bad-secret}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: broken\n").await;
    let bad = rs_reason(&rss, "bad-kind", ("False", "ResourceNotFound")).await;
    assert!(
        ready_message(&bad).contains("Gizmo"),
        "{}",
        ready_message(&bad)
    );
    rs_reason(&rss, "bad-remote", ("False", "RemoteClusterNotFound")).await;
    rs_reason(&rss, "no-status", ("False", "NoStatusSubresource")).await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: zero}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: mgmt\n  concurrency: 0\n").await;
    let zero = rs_reason(&rss, "zero", ("False", "InvalidSpec")).await;
    assert!(
        ready_message(&zero).contains("concurrency"),
        "{}",
        ready_message(&zero)
    );
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: hasty}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: mgmt\n  secretNames: [creds]\n  secretRepairInterval: 10ms\n").await;
    let hasty = rs_reason(&rss, "hasty", ("False", "InvalidSpec")).await;
    assert!(
        ready_message(&hasty).contains("secretRepairInterval"),
        "{}",
        ready_message(&hasty)
    );
    rs_reason(&rss, "bad-secret", ("False", "KubeconfigSecretInvalid")).await;
    eventually("RemoteCluster broken reported", T, || async {
        rcs.get("broken").await.ok().filter(|rc| {
            rc.status.as_ref().is_some_and(|s| {
                ready(&s.conditions) == Some(("False".into(), "KubeconfigSecretInvalid".into()))
            })
        })
    })
    .await;
    assert_eq!(operator.running().await, ["widgets"]);

    // Fixing a bad spec starts it: the RemoteCluster gets its Secret.
    let fixed: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "missing", "namespace": "kubesync"},
        "stringData": {"kubeconfig": remote.kubeconfig_yaml()}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(local.client().expect("client"), "kubesync")
        .create(&PostParams::default(), &fixed)
        .await
        .expect("secret");
    rs_reason(&rss, "bad-secret", ("True", "Syncing")).await;
    rss.delete("bad-secret", &DeleteParams::default())
        .await
        .expect("delete");

    // Reconfigure at run time: another namespace prefix.
    rss.patch(
        "widgets",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"namespacePrefix": "ops2-"}})),
    )
    .await
    .expect("reconfigure");
    apply_widget(&remote, "ops2-b", "w2").await;
    eventually("w2 synced after reconfiguration", T, || async {
        widgets(&local, "ops2-b").get_opt("w2").await.expect("get")
    })
    .await;
    apply_widget(&remote, "ops-a", "w3").await;
    // Witness that w3's event has passed: a later Widget under the new prefix arrives on the
    // same remote watch after it.
    apply_widget(&remote, "ops2-b", "w4").await;
    eventually("w4 synced after w3 was seen", T, || async {
        widgets(&local, "ops2-b").get_opt("w4").await.expect("get")
    })
    .await;
    assert!(
        widgets(&local, "ops-a")
            .get_opt("w3")
            .await
            .expect("get")
            .is_none(),
        "the old prefix no longer syncs"
    );

    // The remote cluster goes down: both resources say so; nothing local is deleted.
    remote.stop_apiserver();
    rs_reason(&rss, "widgets", ("False", "RemoteUnreachable")).await;
    eventually("RemoteCluster unreachable", T, || async {
        rcs.get("mgmt").await.ok().filter(|rc| {
            rc.status.as_ref().is_some_and(|s| {
                ready(&s.conditions) == Some(("False".into(), "Unreachable".into()))
            })
        })
    })
    .await;
    assert!(
        widgets(&local, "ops2-b")
            .get_opt("w2")
            .await
            .expect("get")
            .is_some()
    );
    remote.restart_apiserver().await.expect("restart");
    rs_reason(&rss, "widgets", ("True", "Syncing")).await;

    // Delete: the sync stops and the remote objects' finalizers are released.
    let remote_w2 = widgets(&remote, "ops2-b").get("w2").await.expect("w2");
    assert!(
        remote_w2
            .finalizers()
            .iter()
            .any(|f| f == "kubesync.io/sync-local")
    );
    rss.delete("widgets", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("ResourceSync gone", T, || async {
        rss.get_opt("widgets")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let remote_w2 = widgets(&remote, "ops2-b").get("w2").await.expect("w2");
    assert!(
        remote_w2.finalizers().is_empty(),
        "finalizer released: {:?}",
        remote_w2.finalizers()
    );
    eventually("engine stopped", T, || async {
        (!operator.running().await.contains(&"widgets".to_string())).then_some(())
    })
    .await;
    assert!(
        widgets(&local, "ops2-b")
            .get_opt("w2")
            .await
            .expect("get")
            .is_some(),
        "local objects stay"
    );

    running.stop().await;
}

fn ready_message(rs: &ResourceSync) -> String {
    rs.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn kubesync_crds_output_installs_on_the_apiserver() {
    let env = TestEnv::builder()
        .name("crds")
        .start()
        .await
        .expect("start");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
        .arg("crds")
        .output()
        .expect("run");
    assert!(out.status.success());
    let yaml = String::from_utf8(out.stdout).expect("utf8");
    env.install_crds(&yaml)
        .await
        .expect("the printed CRDs install and become Established");
}

/// Per-ResourceSync staleness, the ResourceSync propagation lag and drift attribution: a
/// Widget created on the remote is applied locally with a lag observed; a new generation held
/// back by a paused local copy is counted stale, its age since its first sight growing. Two
/// field managers edit the paused copy meanwhile (alice by update, bob by server-side apply).
/// Once unpaused, the generation is applied, nothing is stale, and the histogram observes one
/// more lag, at least as long as the generation was held back; both edits are reverted, and
/// the status's `lastDrift`, a Warning Event and the drift counter name both managers and
/// their fields — never a value.
#[tokio::test]
async fn resource_sync_staleness_lag_and_drift_are_reported() {
    let (local, remote) = tokio::join!(
        operator_cluster("fresh-local", false, &["kubesync"]),
        TestEnv::builder().name("fresh-remote").start()
    );
    let remote = remote.expect("remote");
    local.install_crds(WIDGET_CRD).await.expect("widget crd");
    remote.install_crds(WIDGET_CRD).await.expect("widget crd");
    add_remote_cluster(&local, &remote, "mgmt", "kubesync").await;
    let running = start_operator(
        Cluster::new("local", local.client().expect("client")),
        OperatorOptions::default(),
    );
    let operator = running.operator.clone();
    let metrics = || async {
        kubesync_cli::telemetry::metrics(&operator)
            .await
            .expect("metrics")
    };
    const COUNT: &str =
        r#"kubesync_propagation_lag_seconds_count{sync="ResourceSync",cluster="local"}"#;
    const SUM: &str =
        r#"kubesync_propagation_lag_seconds_sum{sync="ResourceSync",cluster="local"}"#;
    const STALE: &str = r#"kubesync_resourcesync_stale_objects{resourcesync="widgets"}"#;
    const OLDEST: &str = r#"kubesync_resourcesync_oldest_stale_seconds{resourcesync="widgets"}"#;
    const DRIFTS: &str = r#"kubesync_resourcesync_drifts_total{resourcesync="widgets"}"#;

    apply_widget(&remote, "ops-a", "w1").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: widgets}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: mgmt\n  namespacePrefix: ops-\n").await;
    let (count0, sum0) = eventually("w1 applied, its lag observed, nothing stale", T, || async {
        let m = metrics().await;
        let count = sample(&m, COUNT)?;
        (count >= 1.0 && sample(&m, STALE)? == 0.0 && sample(&m, OLDEST)? == 0.0)
            .then_some((count, sample(&m, SUM)?))
    })
    .await;
    assert!(
        widgets(&local, "ops-a")
            .get_opt("w1")
            .await
            .expect("get")
            .is_some(),
        "w1 is applied locally"
    );

    // Pause the local copy, and wait until the sync counts it paused (its store shows it).
    patch_widget(
        &local,
        "ops-a",
        "w1",
        serde_json::json!({"metadata": {"annotations": {"kubesync.io/paused": "true"}}}),
    )
    .await;
    let rss: Api<ResourceSync> = Api::all(local.client().expect("client"));
    eventually("w1 counted paused", T, || async {
        let st = rss.get("widgets").await.ok()?.status?;
        (st.paused == 1).then_some(())
    })
    .await;

    // A new generation on the remote: held back, stale, and growing older.
    patch_widget(
        &remote,
        "ops-a",
        "w1",
        serde_json::json!({"spec": {"size": 2}}),
    )
    .await;
    let first = eventually("w1 counted stale", T, || async {
        let m = metrics().await;
        let oldest = sample(&m, OLDEST)?;
        (sample(&m, STALE)? == 1.0 && oldest > 0.0).then_some(oldest)
    })
    .await;
    let held = eventually("w1 stale for a second", T, || async {
        let oldest = sample(&metrics().await, OLDEST)?;
        (oldest >= first.max(1.0)).then_some(oldest)
    })
    .await;
    let size = |w: Option<DynamicObject>| w.and_then(|w| w.data["spec"]["size"].as_i64());
    assert_eq!(
        size(widgets(&local, "ops-a").get_opt("w1").await.expect("get")),
        Some(1),
        "paused: not written"
    );
    assert_eq!(
        sample(&metrics().await, COUNT),
        Some(count0),
        "nothing propagated while paused"
    );
    assert_eq!(sample(&metrics().await, DRIFTS), Some(0.0));

    // Two field managers edit the paused copy.
    const SECRET: &str = "crimson-do-not-show";
    widgets(&local, "ops-a")
        .patch(
            "w1",
            &PatchParams {
                field_manager: Some("alice".into()),
                ..Default::default()
            },
            &Patch::Merge(serde_json::json!({"spec": {"color": SECRET}})),
        )
        .await
        .expect("alice's edit");
    widgets(&local, "ops-a")
        .patch(
            "w1",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(serde_json::json!({
                "apiVersion": "demo.kubesync.io/v1", "kind": "Widget",
                "metadata": {"name": "w1", "namespace": "ops-a", "labels": {"owner": SECRET}},
            })),
        )
        .await
        .expect("bob's edit");

    // Unpaused: applied; nothing stale; one more lag, at least as long as it was held back.
    patch_widget(
        &local,
        "ops-a",
        "w1",
        serde_json::json!({"metadata": {"annotations": {"kubesync.io/paused": null}}}),
    )
    .await;
    eventually("w1 applied after the pause", T, || async {
        (size(widgets(&local, "ops-a").get_opt("w1").await.ok()?) == Some(2)).then_some(())
    })
    .await;
    let (count, sum) = eventually("the held-back generation's lag observed", T, || async {
        let m = metrics().await;
        (sample(&m, STALE)? == 0.0 && sample(&m, OLDEST)? == 0.0)
            .then_some((sample(&m, COUNT)?, sample(&m, SUM)?))
    })
    .await;
    assert_eq!(count, count0 + 1.0, "one propagation observed");
    assert!(
        sum - sum0 >= held,
        "the lag ({} s) spans the time it was held back ({held} s)",
        sum - sum0
    );

    // Both edits reverted, and attributed.
    let w1 = widgets(&local, "ops-a").get("w1").await.expect("w1");
    assert_eq!(w1.data["spec"].get("color"), None, "alice's edit reverted");
    assert_eq!(w1.labels().get("owner"), None, "bob's edit reverted");
    let drift = eventually("the ResourceSync's lastDrift", T, || async {
        rss.get("widgets").await.ok()?.status?.last_drift
    })
    .await;
    assert_eq!(drift.object, "ops-a/w1");
    assert_eq!(drift.fields, ["metadata.labels.owner", "spec.color"]);
    // Newest first (unit-tested); managedFields times are whole seconds, so both edits may
    // share one, and the order is then by name.
    let mut managers: Vec<(&str, &str, &[String])> = drift
        .managers
        .iter()
        .map(|m| {
            (
                m.manager.as_str(),
                m.operation.as_str(),
                m.fields.as_slice(),
            )
        })
        .collect();
    managers.sort();
    assert_eq!(
        managers,
        [
            ("alice", "Update", &["spec.color".to_string()][..]),
            ("bob", "Apply", &["metadata.labels.owner".to_string()][..]),
        ]
    );
    assert!(drift.managers.iter().all(|m| !m.time.is_empty()));
    let event = event_where(&local, "kube-system", "a CopyChanged Event", |e| {
        e.reason.as_deref() == Some("CopyChanged")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("widgets")
    })
    .await;
    let note = event.note.clone().unwrap_or_default();
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert!(
        note.starts_with("the local copy ops-a/w1 was changed by someone else and reverted: ")
            && note.contains("metadata.labels.owner by bob (Apply, ")
            && note.contains("spec.color by alice (Update, "),
        "{note}"
    );
    assert_eq!(
        event.related.as_ref().and_then(|r| r.name.as_deref()),
        Some("w1")
    );
    let status =
        serde_json::to_string(&rss.get("widgets").await.expect("rs").status).expect("json");
    assert!(
        !note.contains(SECRET) && !status.contains(SECRET),
        "never a value: {note} {status}"
    );
    assert_eq!(sample(&metrics().await, DRIFTS), Some(1.0));
    running.stop().await;
}
