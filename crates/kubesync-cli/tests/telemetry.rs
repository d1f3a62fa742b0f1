//! `kubesync run`'s HTTP endpoints (metrics, liveness, readiness) and the Kubernetes Events
//! it publishes, with the real binary on a real control plane.

mod common;

use common::{
    RunningBinary, T, free_port, metrics_tokens, operator_cluster, operator_cluster_from,
    reconciled_in_log, request, request_tls, sample,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kubesync_cli::crd::ObjectSync;
use kubesync_testenv::{AuditAlso, AuditEvent, TestEnv, eventually};
use std::time::Duration;

#[tokio::test]
async fn metrics_health_readiness_and_events_of_the_running_binary() {
    // The audit log records Events too: the Event writes are counted, not inferred.
    let env = operator_cluster_from(
        TestEnv::builder().name("telemetry").audit_also(AuditAlso {
            events: true,
            leases: false,
        }),
        &["apps", "team-a", "team-b", "team-c"],
    )
    .await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\ntype: Opaque\nstringData: {token: t0k3n}\n").await.expect("source");
    // Someone else's object at one destination: a Conflict.
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: team-c}\ntype: Opaque\nstringData: {token: theirs}\n").await.expect("theirs");
    let secrets = |ns: &str| Api::<Secret>::namespaced(env.client().expect("client"), ns);
    let theirs = secrets("team-c").get("registry").await.expect("theirs");

    let port = free_port();
    // The runtime's controller logs each finished reconcile (key, the version it decided on)
    // at debug: the witness of this ObjectSync's reconciles below.
    let log_path = std::env::temp_dir().join(format!("kubesync-telemetry-{port}.log"));
    let log = std::fs::File::create(&log_path).expect("log file");
    let _operator = RunningBinary(
        std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().expect("kubeconfig"))
            .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
            .arg("--metrics-insecure")
            .args(["--trusted-namespace", "apps"])
            .env("RUST_LOG", "warn,kubesync::runtime::controller=debug")
            .env("NO_COLOR", "1")
            .stderr(log.try_clone().expect("log"))
            .stdout(log)
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
    // Further reconciles with the same conditions publish nothing new: one is caused (a
    // metadata change) and awaited on this ObjectSync's own reconcile at the version the change
    // made (the binary's log says so) before the Events are counted.
    let object_syncs = Api::<ObjectSync>::namespaced(env.client().expect("client"), "apps");
    let event_writes = |audit: &[AuditEvent]| {
        audit
            .iter()
            .filter(|e| e.resource() == "events" && e.is_write() && e.namespace() == "apps")
            .count()
    };
    // Positive control: the NotAllSynced Event's write reaches the audit log (its line may be
    // written after the Event is seen).
    let mark = eventually("the Event's write in the audit log", T, || async {
        let audit = env.audit().expect("audit");
        (event_writes(&audit) >= 1).then_some(audit)
    })
    .await;
    let touched = object_syncs
        .patch(
            "registry",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .expect("annotate");
    let rv = touched
        .metadata
        .resource_version
        .clone()
        .expect("resourceVersion");
    let key = "local/ObjectSync.kubesync.io/apps/registry";
    reconciled_in_log(&log_path, key, &rv).await;
    let since: Vec<AuditEvent> = env.audit().expect("audit").split_off(mark.len());
    assert_eq!(
        event_writes(&since),
        0,
        "no Event written by the reconcile of an unchanged ObjectSync: {:?}",
        since.iter().map(AuditEvent::describe).collect::<Vec<_>>()
    );
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

    // A deleted ObjectSync leaves /metrics; its copies go, someone else's object at one of
    // its destinations stays untouched.
    object_syncs
        .delete("registry", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("gauges removed", T, || async {
        let (_, m) = request(port, "GET", "/metrics").await?;
        (!m.contains("objectsync=\"registry\"")).then_some(())
    })
    .await;
    eventually("copies removed", T, || async {
        let a = secrets("team-a").get_opt("registry").await.ok()?;
        let b = secrets("team-b").get_opt("registry").await.ok()?;
        (a.is_none() && b.is_none()).then_some(())
    })
    .await;
    let after = secrets("team-c")
        .get("registry")
        .await
        .expect("theirs kept");
    assert_eq!(after.metadata.uid, theirs.metadata.uid);
    assert_eq!(
        after.metadata.resource_version,
        theirs.metadata.resource_version
    );
}

/// `/healthz` turns 503 when the operator's loop stands still (here: it was stopped while its
/// telemetry goes on), and says for how long.
/// `/readyz` answers 503, saying why, while the operator's watches fail (its cluster's
/// apiserver is down), and 200 again once they have listed anew; `/healthz` stays 200
/// throughout (the loop turns: restarting would not help).
#[tokio::test]
async fn readiness_fails_while_the_watches_fail_and_returns_after() {
    let mut env = operator_cluster("readiness", false, &["apps"]).await;
    let port = free_port();
    let _operator = common::run_binary(&env, port, &[]);
    let probe = |path: &'static str, want: u16| async move {
        eventually(&format!("{path} answers {want}"), T, || async {
            request(port, "GET", path)
                .await
                .filter(|(code, _)| *code == want)
        })
        .await
    };
    probe("/readyz", 200).await;
    env.stop_apiserver();
    let (_, why) = probe("/readyz", 503).await;
    assert!(why.contains("watches fail"), "{why}");
    let (code, _) = request(port, "GET", "/healthz").await.expect("healthz");
    assert_eq!(code, 200, "alive while its cluster is away");
    env.restart_apiserver().await.expect("restart");
    probe("/readyz", 200).await;
}

#[tokio::test]
async fn liveness_fails_when_the_loop_stalls() {
    use common::start_operator;
    use kubesync_cli::operator::OperatorOptions;
    let env = operator_cluster("liveness", false, &["apps"]).await;
    // Longer than the idle loop's heartbeat, so a healthy loop always passes.
    let stuck_after = kubesync::runtime::HEARTBEAT + Duration::from_secs(3);
    let running = start_operator(
        kubesync::Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            stuck_after,
            ..Default::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (stop_serving, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(kubesync_cli::telemetry::serve(
        listener,
        running.operator.clone(),
        async {
            let _ = stopped.await;
        },
    ));
    eventually("alive", T, || async {
        request(port, "GET", "/healthz")
            .await
            .filter(|(code, body)| *code == 200 && body.trim() == "ok")
    })
    .await;
    running.stop().await;
    let (_, body) = eventually("stalled", T, || async {
        request(port, "GET", "/healthz")
            .await
            .filter(|(code, _)| *code == 503)
    })
    .await;
    assert!(body.contains("has not turned"), "{body}");
    let _ = stop_serving.send(());
    server.await.expect("join");
}

/// A CA, and a serving certificate for the metrics Service's name signed by it; PEMs
/// (CA, certificate, key).
fn metrics_certificate(ca_name: &str) -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, ca_name.to_string());
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("key")).expect("CA");
    let key = KeyPair::generate().expect("key");
    let cert = CertificateParams::new(vec!["kubesync-metrics.kubesync-system.svc".to_string()])
        .expect("params")
        .signed_by(&key, &ca)
        .expect("certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// `/metrics` over HTTPS: no token is 401, a token whose holder may not `get /metrics` is 403
/// (a tenant's, or any ServiceAccount's), a holder of `kubesync-metrics-reader` reads; the
/// probes stay plain and open and do not serve the metrics; a certificate from a directory is
/// served, and its renewal is served without a restart.
#[tokio::test]
async fn metrics_are_served_over_https_to_allowed_tokens_only() {
    let env = operator_cluster("metrics-auth", false, &["apps", "team-a"]).await;
    let roles = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../config/rbac/metrics_roles.yaml"),
    )
    .expect("config/rbac/metrics_roles.yaml");
    env.apply_yaml(&roles).await.expect("metrics roles");
    let (reader, nosy) = metrics_tokens(&env).await;

    // The certificate from a directory, as a mounted kubernetes.io/tls Secret.
    let dir = env.dir().join("metrics-tls");
    std::fs::create_dir_all(&dir).expect("dir");
    let (ca, cert, key) = metrics_certificate("first-ca");
    std::fs::write(dir.join("tls.crt"), &cert).expect("write");
    std::fs::write(dir.join("tls.key"), &key).expect("write");

    let (probes, metrics) = (free_port(), free_port());
    let _operator = RunningBinary(
        std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().expect("kubeconfig"))
            .args(["--telemetry-address", &format!("127.0.0.1:{probes}")])
            .args(["--metrics-address", &format!("127.0.0.1:{metrics}")])
            .arg("--metrics-cert-dir")
            .arg(&dir)
            .args(["--trusted-namespace", "apps"])
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("run kubesync"),
    );
    eventually("ready", T, || async {
        request(probes, "GET", "/readyz")
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {a: b}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: secret-project-name, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: team-a}]\n").await.expect("objectsync");

    // The probes do not serve the metrics.
    let (code, _) = request(probes, "GET", "/metrics").await.expect("probes");
    assert_eq!(code, 404);

    let trusted = Some((ca.as_str(), "kubesync-metrics.kubesync-system.svc"));
    let (code, body) = request_tls(metrics, "/metrics", None, trusted)
        .await
        .expect("HTTPS with the directory's certificate");
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("bearer token"), "{body}");
    let (code, body) = request_tls(metrics, "/metrics", Some("not-a-token"), trusted)
        .await
        .expect("answer");
    assert_eq!(code, 401, "{body}");
    let (code, body) = request_tls(metrics, "/metrics", Some(&nosy), trusted)
        .await
        .expect("answer");
    assert_eq!(code, 403, "{body}");
    assert!(
        body.contains("system:serviceaccount:monitoring:nosy")
            && !body.contains("secret-project-name"),
        "{body}"
    );
    let m = eventually("the reader reads the ObjectSync's gauges", T, || async {
        let (code, m) = request_tls(metrics, "/metrics", Some(&reader), trusted).await?;
        assert_eq!(code, 200, "{m}");
        m.contains("objectsync=\"secret-project-name\"")
            .then_some(m)
    })
    .await;
    assert!(sample(&m, "kubesync_objectsync_watches").is_some(), "{m}");
    // Plain HTTP on the metrics address gets no metrics.
    assert!(
        request(metrics, "GET", "/metrics")
            .await
            .is_none_or(|(code, body)| code != 200 && !body.contains("kubesync_")),
        "plain HTTP was answered with metrics"
    );

    // A renewed certificate (another CA) is served without a restart.
    let (new_ca, new_cert, new_key) = metrics_certificate("second-ca");
    std::fs::write(dir.join("tls.key"), &new_key).expect("write");
    std::fs::write(dir.join("tls.crt"), &new_cert).expect("write");
    let renewed = Some((new_ca.as_str(), "kubesync-metrics.kubesync-system.svc"));
    eventually("the renewed certificate is served", T, || async {
        request_tls(metrics, "/metrics", Some(&reader), renewed)
            .await
            .filter(|(code, _)| *code == 200)
    })
    .await;
    assert!(
        request_tls(metrics, "/metrics", Some(&reader), trusted)
            .await
            .is_none(),
        "the old CA still verifies the served certificate"
    );
}
