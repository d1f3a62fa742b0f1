//! The Grafana dashboard (`config/monitoring`) and the alerting rules (`config/prometheus`)
//! refer only to metrics that a running operator exposes: every metric name in their
//! expressions is found in the `/metrics` output of the real binary, on real control planes,
//! once it has synced something of each kind (an ObjectSync to this cluster and to a
//! RemoteCluster, a ResourceSync), with leader election on.

mod common;

use std::collections::BTreeSet;
use std::process::Command;

use common::{
    RunningBinary, T, add_remote_cluster, free_port, kustomize, operator_cluster, request, sample,
};
use kubesync_testenv::{TestEnv, fixtures::WIDGET_CRD};
use serde_json::Value;

/// One metric family as served: its `# TYPE`, its `# HELP` text, and the label names of each
/// of its samples (a histogram's `le` aside).
#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: String,
    label_sets: Vec<BTreeSet<String>>,
}

async fn m_all(port: u16) -> String {
    request(port, "GET", "/metrics")
        .await
        .map(|r| r.1)
        .expect("/metrics answers")
}

/// The families of a Prometheus text exposition, by name.
fn scrape_families(text: &str) -> std::collections::BTreeMap<String, Family> {
    let mut families: std::collections::BTreeMap<String, Family> = Default::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("a help line");
            families.entry(name.into()).or_default().help = help.into();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a type line");
            families.entry(name.into()).or_default().kind = kind.into();
        } else if !line.is_empty() && !line.starts_with('#') {
            let series = line.rsplit_once(' ').expect("a sample").0;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| families.get(*f).is_some_and(|f| f.kind == "histogram"))
                })
                .unwrap_or(name);
            // Label values here are names of objects (no `",` inside them).
            let names: BTreeSet<String> = labels
                .split("\",")
                .filter_map(|kv| {
                    kv.split_once('=')
                        .map(|(k, _)| k.trim_start_matches(',').to_string())
                })
                .filter(|k| !k.is_empty() && k != "le")
                .collect();
            families
                .get_mut(family)
                .unwrap_or_else(|| panic!("a sample of {family} before its # TYPE line"))
                .label_sets
                .push(names);
        }
    }
    families
}

/// Every PromQL expression of the dashboard: panel targets' `expr`, and template variables'
/// `query` (a string, or an object with a `query`).
fn dashboard_expressions() -> Vec<String> {
    let objects = kustomize("monitoring");
    let map = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "kubesync-dashboard")
        .expect("the dashboard's ConfigMap");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value = serde_json::from_str(
        map["data"]["dashboard.json"]
            .as_str()
            .expect("dashboard.json"),
    )
    .expect("the dashboard is JSON");
    let mut found = Vec::new();
    collect(&dashboard, &mut found);
    found
}

fn collect(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query", Value::String(s)) => out.push(s.clone()),
                    _ => collect(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}

/// The alerting rules: (alert name, expression).
fn alert_rules() -> Vec<(String, String)> {
    let objects = kustomize("prometheus");
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .map(|r| {
            (
                r["alert"].as_str().expect("alert").to_string(),
                r["expr"].as_str().expect("expr").to_string(),
            )
        })
        .collect()
}

/// The `kubesync_…` metric names in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("kubesync_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Whether the exposition has a sample of `name` (not only its HELP and TYPE lines).
fn has_sample(metrics: &str, name: &str) -> bool {
    metrics.lines().any(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
    })
}

#[test]
fn names_are_read_from_every_expression() {
    assert_eq!(
        metric_names(
            "sum by (le) (rate(kubesync_propagation_lag_seconds_bucket{cluster=~\"$cluster\"}[5m])) / kubesync_x"
        ),
        BTreeSet::from([
            "kubesync_propagation_lag_seconds_bucket".to_string(),
            "kubesync_x".to_string()
        ])
    );
    let dashboard = dashboard_expressions();
    assert!(dashboard.len() >= 20, "{dashboard:?}");
    let alerts = alert_rules();
    let names: BTreeSet<&str> = alerts.iter().map(|(a, _)| a.as_str()).collect();
    for required in [
        "KubesyncCopiesStale",
        "KubesyncRemoteClusterUnreachable",
        "KubesyncReconcileErrorsRising",
    ] {
        assert!(names.contains(required), "{names:?}");
    }
    assert!(
        alerts.iter().all(|(_, e)| !metric_names(e).is_empty()),
        "{alerts:?}"
    );
}

#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_use_is_exposed() {
    let mut used: BTreeSet<String> = BTreeSet::new();
    for e in dashboard_expressions() {
        used.extend(metric_names(&e));
    }
    for (_, e) in alert_rules() {
        used.extend(metric_names(&e));
    }
    assert!(used.len() >= 15, "{used:?}");

    let local = operator_cluster("dash-local", false, &["apps", "team-a"]).await;
    let mut remote = TestEnv::builder()
        .name("dash-remote")
        .start()
        .await
        .expect("remote");
    local.install_crds(WIDGET_CRD).await.expect("crd");
    remote.install_crds(WIDGET_CRD).await.expect("crd");
    for ns in ["ops-a", "edge-apps"] {
        remote.create_namespace(ns).await.expect("ns");
    }
    add_remote_cluster(&local, &remote, "edge", "apps").await;
    local.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\ntype: Opaque\nstringData: {token: t0k3n}\n").await.expect("source");
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations: [{namespace: team-a}, {cluster: edge, namespace: edge-apps}]\n").await.expect("objectsync");
    local.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata:\n  name: mirrored\n  namespace: apps\n  annotations:\n    reflector.v1.k8s.emberstack.com/reflection-allowed: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-enabled: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-namespaces: team-a\nstringData: {token: t0k3n}\n").await.expect("an annotated source");
    remote.apply_yaml("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: w1, namespace: ops-a}\nspec: {size: 1}\n").await.expect("widget");
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: widgets}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: edge\n  namespacePrefix: ops-\n").await.expect("resourcesync");

    let port = free_port();
    let _operator = RunningBinary(
        Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(local.kubeconfig_path().expect("kubeconfig"))
            .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
            .args(["--metrics-address", &format!("127.0.0.1:{port}")])
            .arg("--metrics-insecure")
            .args(["--trusted-namespace", "apps", "--leader-elect"])
            .args(["--compat", "reflector", "--compat", "replicator"])
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("run kubesync"),
    );
    // The values behind the panels too: copies written to both clusters (a lag observed for
    // each), the RemoteCluster reachable, the ResourceSync's object.
    let values = [
        "kubesync_propagation_lag_seconds_count{sync=\"ObjectSync\",cluster=\"local\"}",
        "kubesync_propagation_lag_seconds_count{sync=\"ObjectSync\",cluster=\"edge\"}",
        "kubesync_remotecluster_reachable{remotecluster=\"edge\"}",
        "kubesync_resourcesync_objects{resourcesync=\"widgets\"}",
        "kubesync_compat_destinations{state=\"Synced\"}",
        "kubesync_propagation_lag_seconds_count{sync=\"Annotations\",cluster=\"local\"}",
    ];
    let deadline = std::time::Instant::now() + T;
    loop {
        let m = request(port, "GET", "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default();
        let mut missing: Vec<&str> = used
            .iter()
            .map(String::as_str)
            .filter(|n| !has_sample(&m, n))
            .collect();
        missing.extend(values.iter().filter(|v| sample(&m, v) != Some(1.0)));
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not in /metrics after {T:?}: {missing:?}\n{m}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    // Every family served is in the metrics catalog (the book's metrics page is generated
    // from it), with its type, help and label names, and every metric of the catalog is
    // served once the operator has synced something of each kind.
    let served = scrape_families(&m_all(port).await);
    let catalog = kubesync_cli::telemetry::catalog::ALL;
    for (name, family) in &served {
        let entry = kubesync_cli::telemetry::catalog::entry(name)
            .unwrap_or_else(|| panic!("{name} is served but not in the metrics catalog"));
        assert_eq!(family.kind, entry.kind.as_str(), "{name}'s type");
        assert_eq!(family.help, format!("{}.", entry.help), "{name}'s help");
        let expected: BTreeSet<String> = entry.labels.iter().map(|(l, _)| l.to_string()).collect();
        for labels in &family.label_sets {
            assert_eq!(labels, &expected, "{name}'s labels");
        }
    }
    // The shard metrics are served by `run --sharded` replicas only (tests/sharded.rs checks
    // them there); this operator runs with leader election.
    let missing: Vec<&str> = catalog
        .iter()
        .map(|e| e.name)
        .filter(|n| !n.starts_with("kubesync_shard_"))
        .filter(|n| !served.contains_key(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "in the catalog, not served: {missing:?}"
    );

    // The RemoteCluster goes down: not reachable, its watches restart; back up, it is
    // contacted again.
    let scrape = || async {
        request(port, "GET", "/metrics")
            .await
            .map(|r| r.1)
            .unwrap_or_default()
    };
    let remote_series = |m: &str, name: &str| {
        sample(
            m,
            &format!("kubesync_remotecluster_{name}{{remotecluster=\"edge\"}}"),
        )
    };
    let before = remote_series(&scrape().await, "last_contact_timestamp_seconds").expect("contact");
    assert!(before > 0.0, "contacted: {before}");
    remote.stop_apiserver();
    let down =
        kubesync_testenv::eventually("edge unreachable, its watches restarting", T, || async {
            let m = scrape().await;
            (remote_series(&m, "reachable") == Some(0.0)
                && remote_series(&m, "watch_restarts_total").is_some_and(|n| n > 0.0))
            .then_some(m)
        })
        .await;
    let silent_since = remote_series(&down, "last_contact_timestamp_seconds").expect("contact");
    remote.restart_apiserver().await.expect("restart");
    kubesync_testenv::eventually("edge contacted again", T, || async {
        let m = scrape().await;
        (remote_series(&m, "last_contact_timestamp_seconds")? > silent_since).then_some(())
    })
    .await;
}
