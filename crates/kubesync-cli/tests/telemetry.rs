//! `kubesync run`'s HTTP endpoints (metrics, liveness, readiness) and the Kubernetes Events
//! it publishes, with the real binary on a real control plane.

mod common;

use std::time::Duration;

use common::{RunningBinary, T, free_port, operator_cluster, request, sample};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use kubesync_cli::crd::ObjectSync;
use kubesync_testenv::eventually;

#[tokio::test]
async fn metrics_health_readiness_and_events_of_the_running_binary() {
    let env = operator_cluster("telemetry", false, &["apps", "team-a", "team-b", "team-c"]).await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\ntype: Opaque\nstringData: {token: t0k3n}\n").await.expect("source");
    // Someone else's object at one destination: a Conflict.
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: team-c}\ntype: Opaque\nstringData: {token: theirs}\n").await.expect("theirs");

    let port = free_port();
    let _operator = RunningBinary(
        std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().expect("kubeconfig"))
            .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
            .args(["--trusted-namespace", "apps"])
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("run kubesync"),
    );

    eventually("ready", T, || async {
        request(port, "GET", "/readyz")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    let (code, body) = request(port, "GET", "/healthz").await.expect("healthz");
    assert_eq!((code, body.trim()), (200, "ok"));
    assert_eq!(request(port, "GET", "/nope").await.map(|r| r.0), Some(404));
    assert_eq!(
        request(port, "POST", "/metrics").await.map(|r| r.0),
        Some(405)
    );

    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations:\n  - {namespace: team-a}\n  - {namespace: team-b}\n  - {namespace: team-c}\n").await.expect("objectsync");
    let series = |state: &str| {
        format!(
            "kubesync_objectsync_destinations{{namespace=\"apps\",objectsync=\"registry\",state=\"{state}\"}}"
        )
    };
    let metrics = eventually("per-state gauges", T, || async {
        let (_, m) = request(port, "GET", "/metrics").await?;
        (sample(&m, &series("Synced")) == Some(2.0)).then_some(m)
    })
    .await;
    assert_eq!(
        sample(&metrics, &series("Conflict")),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(sample(&metrics, &series("Error")), Some(0.0), "{metrics}");
    assert_eq!(
        sample(
            &metrics,
            "kubesync_objectsync_ready{namespace=\"apps\",objectsync=\"registry\"}"
        ),
        Some(1.0)
    );
    assert!(
        sample(&metrics, "kubesync_writes_total{component=\"objectsync\"}")
            .is_some_and(|w| w >= 2.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "kubesync_objectsync_watches"),
        Some(4.0),
        "Secret watches (copies, others, the source) and one Namespace watch: {metrics}"
    );
    assert!(sample(&metrics, "kubesync_reconciles_total").is_some_and(|r| r >= 1.0));
    assert!(metrics.contains("# TYPE kubesync_reconciles_total counter"));

    // The Synced condition's transition to NotAllSynced is published once, as a Warning on
    // the ObjectSync, naming the conflicting destination.
    let events: Api<Event> = Api::namespaced(env.client().expect("client"), "apps");
    let warning = eventually("a Warning event", T, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("registry")
                    && e.reason.as_deref() == Some("NotAllSynced")
            })
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert_eq!(warning.reporting_controller.as_deref(), Some("kubesync"));
    let note = warning.note.unwrap_or_default();
    assert!(
        note.contains("team-c") && note.contains("Conflict"),
        "{note}"
    );
    // Further reconciles with the same conditions publish nothing new.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let same: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("NotAllSynced"))
        .collect();
    assert_eq!(same.len(), 1, "{same:?}");
    assert_eq!(same[0].series.as_ref().map(|s| s.count), None, "{same:?}");

    // A deleted ObjectSync leaves /metrics.
    Api::<ObjectSync>::namespaced(env.client().expect("client"), "apps")
        .delete("registry", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("gauges removed", T, || async {
        let (_, m) = request(port, "GET", "/metrics").await?;
        (!m.contains("objectsync=\"registry\"")).then_some(())
    })
    .await;
}
