//! The Helm chart `charts/kubesync`, with the helm that `scripts/helm.sh` builds from Go
//! modules: it lints; it renders the very objects kustomize builds from `config/` (default,
//! restricted, prometheus, monitoring), compared field by field; its copies of the CRDs, alerts
//! and dashboard are the files under `config/`; and on a real control plane it installs, runs
//! the real binary as its ServiceAccount with its Deployment's own flags, upgrades and
//! uninstalls.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use common::{
    Helm, RunningBinary, T, free_port, kubectl, kustomize, metrics_tokens, request_tls, sample,
    service_account_kubeconfig,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::Role;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kubesync_testenv::{TestEnv, eventually};
use serde_json::{Map, Value, json};

/// The release namespace, as the README installs it.
const NS: &str = "kubesync-system";
/// The release name.
const RELEASE: &str = "kubesync";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn chart() -> String {
    repo()
        .join("charts/kubesync")
        .to_str()
        .expect("utf-8 path")
        .to_string()
}

/// `helm template` of the chart (CRDs included) in namespace kubesync-system with these extra
/// arguments (`--set …`), as JSON values, one per object.
fn render(args: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut all = vec![
        "template",
        RELEASE,
        chart.as_str(),
        "--namespace",
        NS,
        "--include-crds",
    ];
    all.extend_from_slice(args);
    let text = Helm::offline().ok(&all);
    serde_saphyr::from_multiple::<Value>(&text)
        .expect("helm template prints YAML documents")
        .into_iter()
        .filter(|o| !o.is_null())
        .collect()
}

/// `kind/namespace/name` of an object.
fn key(o: &Value) -> String {
    format!(
        "{}/{}/{}",
        o["kind"].as_str().unwrap_or_default(),
        o["metadata"]["namespace"].as_str().unwrap_or_default(),
        o["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", keys(objects)))
}

fn keys(objects: &[Value]) -> BTreeSet<String> {
    objects.iter().map(key).collect()
}

/// The objects of `all` that are not in `base` (by kind, namespace and name).
fn added(all: &[Value], base: &[Value]) -> Vec<Value> {
    let base = keys(base);
    all.iter()
        .filter(|o| !base.contains(&key(o)))
        .cloned()
        .collect()
}

/// Removes the map at `pointer` (a JSON pointer) from `value` and returns it (empty if absent).
fn take_map(value: &mut Value, pointer: &str) -> Map<String, Value> {
    let (parent, last) = pointer.rsplit_once('/').expect("a pointer below the root");
    value
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .and_then(|p| p.remove(last))
        .and_then(|v| v.as_object().cloned())
        .unwrap_or_default()
}

/// The label maps of an object: its own labels and its selectors and pod labels.
fn label_maps(o: &Value) -> &'static [&'static str] {
    match o["kind"].as_str() {
        Some("Deployment") => &[
            "/metadata/labels",
            "/spec/selector/matchLabels",
            "/spec/template/metadata/labels",
        ],
        Some("Service") => &["/metadata/labels", "/spec/selector"],
        Some("ServiceMonitor" | "PodDisruptionBudget") => {
            &["/metadata/labels", "/spec/selector/matchLabels"]
        }
        _ => &["/metadata/labels"],
    }
}

/// Where two JSON values first differ, as (path, left, right); numbers are compared by value.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<(String, Value, Value)> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let names: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            names.into_iter().find_map(|k| {
                first_difference(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}/{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}/{i}"))),
        // Numbers by value: kustomize writes the CRDs' `minimum: 0.0` as 0, helm as it is.
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ => (a != b).then(|| (path.to_string(), a.clone(), b.clone())),
    }
}

/// Asserts that the chart's objects are kustomize's: the same kinds, names and namespaces, and
/// each pair equal in every field (rules, roleRefs, subjects, the Deployment's containers, the
/// CRDs, …) except labels and selectors, where every label kustomize sets must be in the
/// chart's with the same value (the chart adds Helm's own, e.g. app.kubernetes.io/instance).
fn assert_same_objects(what: &str, chart: &[Value], kustomize: &[Value]) {
    let (mine, theirs) = (keys(chart), keys(kustomize));
    assert!(
        mine == theirs,
        "{what}: the chart and kustomize make different objects; only in the chart: {:?}, only in kustomize: {:?}",
        mine.difference(&theirs).collect::<Vec<_>>(),
        theirs.difference(&mine).collect::<Vec<_>>()
    );
    let mut differences = Vec::new();
    for want in kustomize {
        let got = chart
            .iter()
            .find(|o| key(o) == key(want))
            .expect("the same keys");
        let (mut got, mut want) = (got.clone(), want.clone());
        for pointer in label_maps(&want) {
            let (mine, theirs) = (take_map(&mut got, pointer), take_map(&mut want, pointer));
            for (label, value) in &theirs {
                if mine.get(label) != Some(value) {
                    differences.push(format!(
                        "{} {pointer}: kustomize has {label}={value}, the chart {mine:?}",
                        key(&want)
                    ));
                }
            }
        }
        if let Some((path, mine, theirs)) = first_difference(&got, &want, "") {
            differences.push(format!(
                "{} differs at {path}:\n  chart:     {mine}\n  kustomize: {theirs}",
                key(&want)
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{what}: the chart and kustomize disagree:\n{}",
        differences.join("\n")
    );
}

/// The container of the Deployment kubesync among `objects`.
/// The value of a container's environment variable `name`, as rendered.
fn env_value(c: &Value, name: &str) -> Option<Value> {
    c["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
}

fn container(objects: &[Value]) -> &Value {
    &find(objects, "Deployment", "kubesync")["spec"]["template"]["spec"]["containers"][0]
}

/// Every label of `subset` is in `set` with the same value.
fn labels_within(subset: &Value, set: &Value) -> bool {
    subset
        .as_object()
        .is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| set.get(k) == Some(v)))
}

fn read(path: &str) -> Vec<u8> {
    std::fs::read(repo().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

#[test]
fn the_charts_copies_are_the_files_under_config() {
    for (copy, original) in [
        (
            "charts/kubesync/crds/kubesync.io.yaml",
            "config/crd/bases/kubesync.io.yaml",
        ),
        (
            "charts/kubesync/files/alerts.yaml",
            "config/prometheus/alerts.yaml",
        ),
        (
            "charts/kubesync/files/dashboard.json",
            "config/monitoring/dashboard.json",
        ),
    ] {
        assert!(
            read(copy) == read(original),
            "{copy} differs from {original}: cp {original} {copy}"
        );
    }
}

/// The helm the tests run is the release hack/helm/go.mod pins, stamped as helm's own
/// release build stamps it (`helm version` names it, with no "unreleased" metadata).
#[test]
fn helm_is_the_pinned_release() {
    let out = Command::new("bash")
        .arg(repo().join("scripts/helm.sh"))
        .arg("--version")
        .output()
        .expect("run scripts/helm.sh --version");
    assert!(out.status.success(), "{out:?}");
    let pinned = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let go_mod = String::from_utf8(read("hack/helm/go.mod")).expect("utf-8");
    assert!(
        go_mod.contains("tool helm.sh/helm/v3/cmd/helm")
            && go_mod.contains(&format!("helm.sh/helm/v3 {pinned}")),
        "hack/helm/go.mod does not name helm {pinned} as its tool:\n{go_mod}"
    );
    let reported = Helm::offline().ok(&["version", "--template", "{{.Version}}"]);
    assert_eq!(reported.trim(), pinned);
}

#[test]
fn the_chart_lints() {
    let helm = Helm::offline();
    let chart = chart();
    for values in [
        "",
        "restricted.enabled=true",
        "metrics.service.enabled=true,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
        "restricted.enabled=true,metrics.service.enabled=true,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
    ] {
        for strict in [false, true] {
            let mut args = vec!["lint", chart.as_str()];
            if strict {
                args.push("--strict");
            }
            if !values.is_empty() {
                args.extend(["--set", values]);
            }
            let out = helm.ok(&args);
            assert!(out.contains("0 chart(s) failed"), "{out}");
        }
    }
}

/// With its defaults the chart makes what `kubectl apply -k config/default` makes, but the
/// Namespace (the release namespace is created by `helm install --create-namespace`).
#[test]
fn the_default_values_render_config_default() {
    let chart = render(&[]);
    assert!(
        !chart.iter().any(|o| o["kind"] == "Namespace"),
        "the chart templates no Namespace"
    );
    let config: Vec<Value> = kustomize("default")
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    assert_same_objects("default values vs config/default", &chart, &config);
    let deployment = find(&chart, "Deployment", "kubesync");
    assert!(
        labels_within(
            &deployment["spec"]["selector"]["matchLabels"],
            &deployment["spec"]["template"]["metadata"]["labels"]
        ),
        "the Deployment's selector selects its pods"
    );
}

#[test]
fn compat_renders_config_compat() {
    let chart = render(&["--set-json", r#"compat=["reflector","replicator"]"#]);
    let config: Vec<Value> = kustomize("compat")
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    assert_same_objects("compat vs config/compat", &chart, &config);
}

#[test]
fn sharded_renders_config_sharded() {
    let chart = render(&["--set", "sharded.enabled=true,replicas=3"]);
    let config: Vec<Value> = kustomize("sharded")
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    assert_same_objects("sharded.enabled vs config/sharded", &chart, &config);
    // Sharded replicas need no leader election.
    let alone = render(&["--set", "sharded.enabled=true,replicas=3,leaderElect=false"]);
    let args = &container(&alone)["args"];
    assert_eq!(args, &serde_json::json!(["run", "--sharded"]));
}

#[test]
fn restricted_renders_config_restricted() {
    let chart = render(&["--set", "restricted.enabled=true"]);
    let config: Vec<Value> = kustomize("restricted")
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    assert_same_objects("restricted.enabled vs config/restricted", &chart, &config);
    // restricted.enabled is the preset of allowedResources.
    let listed = render(&[
        "--set-json",
        r#"allowedResources=[{"kind":"ConfigMap","resource":"configmaps"},{"kind":"Secret","group":"","resource":"secrets"}]"#,
    ]);
    assert_eq!(listed, chart, "allowedResources [ConfigMap, Secret]");
}

/// allowedResources: one flag per kind (`Kind.group` outside the core group) and one rule per
/// API group, naming exactly the listed resources.
#[test]
fn allowed_resources_render_flags_and_rules() {
    let chart = render(&[
        "--set-json",
        r#"allowedResources=[{"kind":"ConfigMap","resource":"configmaps"},{"kind":"CronJob","group":"batch","resource":"cronjobs"},{"kind":"Secret","resource":"secrets"},{"kind":"Job","group":"batch","resource":"jobs"}]"#,
    ]);
    let verbs = json!([
        "get", "list", "watch", "create", "update", "patch", "delete"
    ]);
    assert_eq!(
        find(&chart, "ClusterRole", "kubesync-sync")["rules"],
        json!([
            {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": verbs},
            {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": verbs},
        ])
    );
    assert_eq!(
        container(&chart)["args"],
        json!([
            "run",
            "--leader-elect",
            "--allowed-resource=ConfigMap",
            "--allowed-resource=CronJob.batch",
            "--allowed-resource=Secret",
            "--allowed-resource=Job.batch"
        ])
    );
    // The verbs are the default install's, never `*`.
    let default = kustomize("default");
    assert_eq!(
        find(&default, "ClusterRole", "kubesync-sync")["rules"][0]["verbs"],
        verbs
    );
}

/// The metrics values add what `kubectl apply -k config/prometheus` adds, and the dashboard
/// value what `config/monitoring` adds; the Service selects the operator's pods, and the
/// ServiceMonitor the Service.
#[test]
fn metrics_and_monitoring_values_render_their_overlays() {
    let base = render(&[]);
    let metrics = render(&[
        "--set",
        "metrics.service.enabled=true,metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true",
    ]);
    assert_same_objects(
        "metrics values vs config/prometheus",
        &added(&metrics, &base),
        &kustomize("prometheus"),
    );
    let pods = &find(&metrics, "Deployment", "kubesync")["spec"]["template"]["metadata"]["labels"];
    let service = find(&metrics, "Service", "kubesync-metrics");
    assert!(
        labels_within(&service["spec"]["selector"], pods),
        "{service}"
    );
    let monitor = find(&metrics, "ServiceMonitor", "kubesync");
    assert!(
        labels_within(
            &monitor["spec"]["selector"]["matchLabels"],
            &service["metadata"]["labels"]
        ),
        "{monitor}"
    );
    let labelled = render(&[
        "--set",
        "metrics.service.enabled=true,metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.labels.release=prom,metrics.prometheusRule.enabled=true,metrics.prometheusRule.labels.release=prom",
    ]);
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        assert_eq!(
            find(&labelled, kind, "kubesync")["metadata"]["labels"]["release"],
            "prom"
        );
    }

    let dashboard = render(&["--set", "monitoring.dashboard.enabled=true"]);
    assert_same_objects(
        "monitoring.dashboard vs config/monitoring",
        &added(&dashboard, &base),
        &kustomize("monitoring"),
    );
}

/// The metrics values: a certificate Secret is mounted and named, and the ServiceMonitor then
/// verifies it; `insecure` serves plain HTTP and the ServiceMonitor scrapes it so.
#[test]
fn metrics_values_render_the_certificate_and_plain_http() {
    let monitored = "metrics.service.enabled=true,metrics.serviceMonitor.enabled=true";
    let tls = render(&[
        "--set",
        &format!("{monitored},metrics.certSecret=metrics-tls,metrics.address=0.0.0.0:9443"),
    ]);
    let c = container(&tls);
    assert_eq!(
        env_value(c, "KUBESYNC_METRICS_CERT_DIR"),
        Some(json!("/etc/kubesync/metrics-tls"))
    );
    assert_eq!(
        env_value(c, "KUBESYNC_METRICS_ADDRESS"),
        Some(json!("0.0.0.0:9443"))
    );
    assert_eq!(
        c["ports"][1],
        json!({"name": "metrics", "containerPort": 9443, "protocol": "TCP"})
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "metrics-tls", "mountPath": "/etc/kubesync/metrics-tls", "readOnly": true}])
    );
    let pod = &find(&tls, "Deployment", "kubesync")["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([{"name": "metrics-tls", "secret": {"secretName": "metrics-tls"}}])
    );
    let endpoint = &find(&tls, "ServiceMonitor", "kubesync")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["tlsConfig"],
        json!({"serverName": format!("kubesync-metrics.{NS}.svc"), "ca": {"secret": {"name": "metrics-tls", "key": "ca.crt"}}})
    );

    let plain = render(&["--set", &format!("{monitored},metrics.insecure=true")]);
    let c = container(&plain);
    assert_eq!(
        env_value(c, "KUBESYNC_METRICS_INSECURE"),
        Some(json!("true"))
    );
    assert_eq!(c["volumeMounts"], Value::Null);
    let endpoint = &find(&plain, "ServiceMonitor", "kubesync")["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], Value::Null);
    assert_eq!(endpoint["bearerTokenFile"], Value::Null);
}

/// The values that are not about the overlays reach the Deployment.
#[test]
fn values_reach_the_deployment() {
    let chart = render(&[
        "--set",
        "image.repository=registry.example/kubesync,image.tag=9.9.9,image.pullPolicy=Always,replicas=1,leaderElect=false,logFormat=text,telemetryAddress=0.0.0.0:9090,nodeSelector.zone=a,podAnnotations.team=ops",
        "--set-json",
        r#"extraArgs=["--trusted-namespace=platform"]"#,
        "--set-json",
        r#"tolerations=[{"key":"dedicated","operator":"Exists"}]"#,
        "--set-json",
        r#"imagePullSecrets=[{"name":"regcred"}]"#,
    ]);
    let d = find(&chart, "Deployment", "kubesync");
    let pod = &d["spec"]["template"]["spec"];
    let c = container(&chart);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(c["image"], "registry.example/kubesync:9.9.9");
    assert_eq!(c["imagePullPolicy"], "Always");
    assert_eq!(c["args"], json!(["run", "--trusted-namespace=platform"]));
    assert_eq!(env_value(c, "KUBESYNC_LOG_FORMAT"), Some(json!("text")));
    assert_eq!(
        env_value(c, "KUBESYNC_TELEMETRY_ADDRESS"),
        Some(json!("0.0.0.0:9090"))
    );
    assert_eq!(c["ports"][0]["containerPort"], 9090);
    assert_eq!(pod["nodeSelector"], json!({"zone": "a"}));
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "regcred"}]));
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["team"],
        "ops"
    );
    // Without leader election there is no Lease to keep, and no Role for it.
    let objects = keys(&chart);
    assert!(
        !objects
            .iter()
            .any(|k| k.contains("kubesync-leader-election")),
        "{objects:?}"
    );
}

/// What a node without a Pod network needs: `hostNetwork` (with the DNS policy that goes with
/// it) and extra environment after the chart's own (the in-cluster address a Pod must dial
/// there); by default neither is rendered. An entry that would shadow the chart's own
/// variables, or has no name, is refused, naming it.
#[test]
fn host_network_and_extra_environment_reach_the_pod() {
    let defaults = render(&[]);
    let pod = &find(&defaults, "Deployment", "kubesync")["spec"]["template"]["spec"];
    assert!(pod.get("hostNetwork").is_none() && pod.get("dnsPolicy").is_none());
    let chart = render(&[
        "--set",
        "hostNetwork=true",
        "--set-json",
        r#"extraEnv=[{"name":"KUBERNETES_SERVICE_HOST","value":"127.0.0.1"},{"name":"KUBERNETES_SERVICE_PORT","value":"6443"}]"#,
    ]);
    let pod = &find(&chart, "Deployment", "kubesync")["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    // A surge Pod would find no node with its ports free: one replaced at a time instead.
    assert_eq!(
        find(&chart, "Deployment", "kubesync")["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
    );
    assert!(
        find(&defaults, "Deployment", "kubesync")["spec"]
            .get("strategy")
            .is_none()
    );
    assert_eq!(
        find(&defaults, "PodDisruptionBudget", "kubesync")["spec"]["maxUnavailable"],
        1
    );
    let c = container(&chart);
    assert_eq!(
        env_value(c, "KUBERNETES_SERVICE_HOST"),
        Some(json!("127.0.0.1"))
    );
    assert_eq!(env_value(c, "KUBERNETES_SERVICE_PORT"), Some(json!("6443")));
    assert_eq!(
        c["env"].as_array().expect("env").last().expect("one")["name"],
        "KUBERNETES_SERVICE_PORT",
        "after the chart's own"
    );
    let helm = Helm::offline();
    let chart = self::chart();
    for (env, words) in [
        (
            r#"[{"name":"KUBESYNC_LOG_FORMAT","value":"text"}]"#,
            "extraEnv: KUBESYNC_LOG_FORMAT is set by the chart",
        ),
        (
            r#"[{"name":"POD_NAME","value":"x"}]"#,
            "extraEnv: POD_NAME is set by the chart",
        ),
        (r#"[{"value":"x"}]"#, "extraEnv: every entry needs a name"),
    ] {
        let out = helm.run(&[
            "template",
            RELEASE,
            chart.as_str(),
            "--set-json",
            &format!("extraEnv={env}"),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(words),
            "{env}: {stderr}"
        );
    }
}

/// The admission policy that checks who may use a ServiceAccount follows the values that
/// render the operator's flags: the default ServiceAccount, the trusted namespaces (the
/// release's, and each of `trustedNamespaces`, globs as anchored regular expressions, which
/// also render `--trusted-namespace`); `serviceAccountPolicy.enabled=false` renders none.
#[test]
fn the_service_account_policy_follows_the_values() {
    let variable = |chart: &[Value], name: &str| -> String {
        let policy = find(
            chart,
            "ValidatingAdmissionPolicy",
            "kubesync-service-account-use",
        );
        policy["spec"]["variables"]
            .as_array()
            .expect("variables")
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))["expression"]
            .as_str()
            .expect("expression")
            .to_string()
    };
    let defaults = render(&[]);
    assert_eq!(variable(&defaults, "defaultServiceAccount"), "''");
    assert_eq!(
        variable(&defaults, "trusted"),
        format!("['^{NS}$'].exists(p, request.namespace.matches(p))")
    );
    let binding = find(
        &defaults,
        "ValidatingAdmissionPolicyBinding",
        "kubesync-service-account-use",
    );
    assert_eq!(binding["spec"]["validationActions"], json!(["Deny"]));
    let set = render(&[
        "--set",
        "defaultServiceAccount=kubesync-copier",
        "--set-json",
        r#"trustedNamespaces=["platform","infra-*"]"#,
    ]);
    assert_eq!(variable(&set, "defaultServiceAccount"), "'kubesync-copier'");
    assert_eq!(
        variable(&set, "trusted"),
        format!("['^{NS}$', '^platform$', '^infra-.*$'].exists(p, request.namespace.matches(p))")
    );
    let args = container(&set)["args"].clone();
    for flag in [
        "--trusted-namespace=platform",
        "--trusted-namespace=infra-*",
        "--default-service-account=kubesync-copier",
    ] {
        assert!(
            args.as_array().expect("args").iter().any(|a| a == flag),
            "{flag} in {args}"
        );
    }
    let off = render(&["--set", "serviceAccountPolicy.enabled=false"]);
    assert!(
        !keys(&off)
            .iter()
            .any(|k| k.contains("kubesync-service-account-use")),
        "no policy when disabled"
    );
}

/// The record policy names the ServiceAccounts of the release's namespace (the chart runs the
/// operator as one of them) as the only users that may change `status.record`; it goes with
/// its value.
#[test]
fn the_record_policy_names_the_operators_service_account() {
    let defaults = render(&[]);
    let policy = find(
        &defaults,
        "ValidatingAdmissionPolicy",
        "kubesync-record-writers",
    );
    assert_eq!(
        policy["spec"]["variables"][0],
        json!({"name": "operators", "expression": format!("'system:serviceaccount:{NS}:'")})
    );
    let deployment = find(&defaults, "Deployment", "kubesync");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "kubesync"
    );
    let off = render(&["--set", "recordPolicy.enabled=false"]);
    assert!(
        !keys(&off)
            .iter()
            .any(|k| k.contains("kubesync-record-writers")),
        "no policy when disabled"
    );
}

/// Values that would make a broken install are refused by `helm template` (and so by install
/// and upgrade), naming the value.
#[test]
fn values_that_would_break_the_install_are_refused() {
    let helm = Helm::offline();
    let chart = chart();
    for (args, names) in [
        (
            vec![
                "--set",
                "restricted.enabled=true",
                "--set-json",
                r#"allowedResources=[{"kind":"Role","group":"rbac.authorization.k8s.io","resource":"roles"}]"#,
            ],
            "restricted.enabled",
        ),
        (vec!["--set", "replicas=2,leaderElect=false"], "leaderElect"),
        (vec!["--set", "logFormat=xml"], "logFormat"),
        (vec!["--set", "telemetryAddress=none"], "telemetryAddress"),
        (vec!["--set", "metrics.address=none"], "metrics.address"),
        (
            vec!["--set", "metrics.address=0.0.0.0:8080"],
            "share a port",
        ),
        (
            vec![
                "--set",
                "metrics.insecure=true,metrics.certSecret=metrics-tls",
            ],
            "metrics.certSecret",
        ),
        (
            vec!["--set", "metrics.serviceMonitor.enabled=true"],
            "metrics.service.enabled",
        ),
        (
            vec!["--set-json", r#"allowedResources=[{"kind":"CronJob"}]"#],
            "resource",
        ),
        (
            vec!["--set-json", r#"allowedResources=["ConfigMap"]"#],
            "allowedResources",
        ),
        // Rendered into the policy's CEL: anything but a name could change what it checks.
        (
            vec!["--set", "defaultServiceAccount=a'||true||'"],
            "defaultServiceAccount",
        ),
        (
            vec!["--set-json", r#"trustedNamespaces=["x'] || true || ['"]"#],
            "trustedNamespaces",
        ),
        // A budget that refuses every eviction: no drain would ever finish.
        (
            vec!["--set", "podDisruptionBudget.maxUnavailable=0"],
            "no node drain would ever finish",
        ),
        (
            vec!["--set", "podDisruptionBudget.maxUnavailable=0%"],
            "podDisruptionBudget.maxUnavailable",
        ),
    ] {
        let mut all = vec!["template", RELEASE, chart.as_str(), "--namespace", NS];
        all.extend(&args);
        let out = helm.run(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(names), "{args:?}: {stderr}");
    }
}

/// A memory limit under what the Pod was measured to need on a real node (it would be
/// OOMKilled as its work grows) is refused, in words; any quantity form at or above is taken.
#[test]
fn memory_limits_under_the_measured_need_are_refused() {
    let helm = Helm::offline();
    let chart = chart();
    let template = |memory: &str| {
        let set = format!("resources.limits.memory={memory}");
        helm.run(&[
            "template",
            RELEASE,
            &chart,
            "--namespace",
            NS,
            "--set",
            &set,
        ])
    };
    for (memory, says) in [
        ("16Mi", "under 32Mi"),
        ("30M", "OOMKilled"),
        ("1000", "under 32Mi"),
        ("lots", "is not a quantity"),
    ] {
        let out = template(memory);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{memory} was accepted");
        assert!(stderr.contains(says), "{memory}: {stderr}");
    }
    for memory in ["32Mi", "0.5Gi", "40M", "67108864"] {
        let out = template(memory);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{memory} was refused: {stderr}");
    }
}

// ---- on a real control plane ----------------------------------------------------------

/// The real binary, run as the pod of the installed Deployment would run: its container's
/// args and env as they are in the cluster (the downward API's POD_NAMESPACE and POD_NAME
/// filled in), with the ServiceAccount's kubeconfig, and its probes and metrics on free
/// loopback ports instead of the Deployment's addresses; returns it and its metrics port
/// (HTTPS, as deployed).
async fn run_as_deployed(env: &TestEnv, kubeconfig: &Path, log: &Path) -> (RunningBinary, u16) {
    let deployment = Api::<Deployment>::namespaced(env.client().expect("client"), NS)
        .get("kubesync")
        .await
        .expect("the Deployment installed by helm");
    let container = deployment
        .spec
        .template
        .spec
        .map(|s| s.containers)
        .and_then(|c| c.into_iter().next())
        .expect("a container");
    let args = container.args.unwrap_or_default();
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    let (port, metrics_port) = (free_port(), free_port());
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubesync"));
    command
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(&args[1..])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"));
    let (mut telemetry, mut metrics) = (false, false);
    for var in container.env.unwrap_or_default() {
        let field = var
            .value_from
            .as_ref()
            .and_then(|f| f.field_ref.as_ref())
            .map(|f| f.field_path.as_str());
        let value = match (var.name.as_str(), field) {
            ("KUBESYNC_TELEMETRY_ADDRESS", None) => {
                telemetry = true;
                format!("127.0.0.1:{port}")
            }
            ("KUBESYNC_METRICS_ADDRESS", None) => {
                metrics = true;
                format!("127.0.0.1:{metrics_port}")
            }
            (_, Some("metadata.namespace")) => NS.to_string(),
            (_, Some("metadata.name")) => "kubesync-helm-0".to_string(),
            (_, Some("status.podIP")) => "127.0.0.1".to_string(),
            (name, Some(other)) => panic!("{name}: unexpected fieldRef {other}"),
            (_, None) => var.value.clone().unwrap_or_default(),
        };
        command.env(&var.name, value);
    }
    assert!(telemetry, "the Deployment sets KUBESYNC_TELEMETRY_ADDRESS");
    assert!(metrics, "the Deployment sets KUBESYNC_METRICS_ADDRESS");
    let child = command.spawn().expect("run kubesync");
    (RunningBinary(child), metrics_port)
}

/// Waits until the operator leads (it runs with the Deployment's --leader-elect), reading its
/// metrics over HTTPS with the token of a holder of kubesync-metrics-reader; fails at once,
/// with its log, if it exits.
async fn wait_leading(operator: &mut RunningBinary, port: u16, token: &str, log: &Path) {
    eventually("the operator leads", T, || {
        if let Some(status) = operator.0.try_wait().expect("try_wait") {
            panic!(
                "the operator exited ({status}):\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        async move {
            let (code, metrics) = request_tls(port, "/metrics", Some(token), None).await?;
            assert_eq!(code, 200, "{metrics}");
            (sample(&metrics, "kubesync_leader") == Some(1.0)).then_some(())
        }
    })
    .await;
}

/// Stops the operator as the kubelet does (SIGTERM), so it releases its Lease, and returns its
/// exit status.
async fn stop(mut operator: RunningBinary) -> ExitStatus {
    let pid = operator.0.id().to_string();
    let sent = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(sent.success(), "kill -TERM {pid}");
    eventually("the operator exits on SIGTERM", T, || {
        let exited = operator.0.try_wait().expect("try_wait");
        async move { exited }
    })
    .await
}

/// The object `o` (as rendered) in the cluster; `None` once it is gone.
async fn live(client: &kube::Client, o: &Value) -> Option<DynamicObject> {
    let (group, version) = match o["apiVersion"]
        .as_str()
        .expect("apiVersion")
        .split_once('/')
    {
        Some((g, v)) => (g, v),
        None => ("", o["apiVersion"].as_str().expect("apiVersion")),
    };
    let gvk = GroupVersionKind::gvk(group, version, o["kind"].as_str().expect("kind"));
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .unwrap_or_else(|e| panic!("discover {gvk:?}: {e}"));
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            o["metadata"]["namespace"].as_str().unwrap_or(NS),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    api.get_opt(o["metadata"]["name"].as_str().expect("name"))
        .await
        .unwrap_or_else(|e| panic!("get {}: {e}", key(o)))
}

/// The Ready condition of an ObjectSync in the release namespace: (status, reason, message).
async fn object_sync_ready(env: &TestEnv, name: &str) -> Option<(String, String, String)> {
    let gvk = GroupVersionKind::gvk("kubesync.io", "v1alpha1", "ObjectSync");
    let resource = kube::core::ApiResource::from_gvk_with_plural(&gvk, "objectsyncs");
    let api: Api<DynamicObject> =
        Api::namespaced_with(env.client().expect("client"), NS, &resource);
    let object = api.get_opt(name).await.ok()??;
    let conditions = object.data.get("status")?.get("conditions")?.as_array()?;
    let c = conditions.iter().find(|c| c["type"] == "Ready")?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// The data value `key` of ConfigMap `name` in `namespace`.
async fn config_value(env: &TestEnv, namespace: &str, name: &str, key: &str) -> Option<String> {
    Api::<ConfigMap>::namespaced(env.client().expect("client"), namespace)
        .get_opt(name)
        .await
        .ok()??
        .data?
        .get(key)
        .cloned()
}

/// Whether the ServiceAccount may list Roles in every namespace (the sync ClusterRole's
/// business: `*` grants it, the restricted rules do not).
async fn may_list_roles(service_account: &kube::Client) -> bool {
    match Api::<Role>::all(service_account.clone())
        .list(&Default::default())
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 403 => false,
        Err(e) => panic!("list roles as the ServiceAccount: {e}"),
    }
}

/// `helm install` on a control plane (no scheduler or kubelet: the Deployment's pods never
/// run, so the test runs the real binary with the installed Deployment's flags and env, as its
/// ServiceAccount), a sync through it, `helm upgrade` to the restricted values taking effect,
/// and `helm uninstall` removing the chart's objects but not the CRDs.
#[tokio::test]
async fn install_upgrade_and_uninstall_on_a_control_plane() {
    let env = TestEnv::builder()
        .name("helm")
        .with_controller_manager(true)
        .start()
        .await
        .expect("start");
    let client = env.client().expect("client");
    let helm = Helm::on(&env);
    let chart = chart();

    // Install, as the README says (without waiting for pods that cannot run here).
    let out = helm.run(&[
        "install",
        RELEASE,
        &chart,
        "--namespace",
        NS,
        "--create-namespace",
        "--wait=false",
    ]);
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "helm install: {said}");
    // A warning-free install (the apiserver's warnings, e.g. of a schema format it does not
    // know, are printed by helm).
    assert!(
        !said.contains("Warning") && !said.contains("unrecognized format"),
        "{said}"
    );
    let installed = render(&[]);
    for o in &installed {
        assert!(live(&client, o).await.is_some(), "{} not installed", key(o));
    }
    let crds: Vec<&Value> = installed
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(crds.len(), 5, "{:?}", keys(&installed));
    let crd_api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in &crds {
        let name = crd["metadata"]["name"].as_str().expect("name");
        eventually(&format!("CRD {name} established"), T, || async {
            let crd = crd_api.get_opt(name).await.ok()??;
            crd.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
    // The CRDs are upgraded with kubectl, as the chart's README says (helm never does).
    let crds_dir = repo().join("charts/kubesync/crds");
    let applied = kubectl(
        &env,
        &[
            "apply",
            "--server-side",
            "-f",
            crds_dir.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(
        applied.matches("serverside-applied").count(),
        5,
        "{applied}"
    );
    assert!(
        !applied.contains("Warning"),
        "no warning from the apiserver: {applied}"
    );

    // The operator, as the installed Deployment runs it, as the installed ServiceAccount.
    let kubeconfig = service_account_kubeconfig(&env, "helm-serviceaccount.kubeconfig").await;
    let service_account = kubesync::Cluster::from_kubeconfig_file(&kubeconfig, None)
        .await
        .expect("the ServiceAccount's kubeconfig")
        .client()
        .clone();
    let log = env.dir().join("kubesync.log");
    let (reader, nosy) = metrics_tokens(&env).await;
    let (mut operator, port) = run_as_deployed(&env, &kubeconfig, &log).await;
    wait_leading(&mut operator, port, &reader, &log).await;
    let (code, body) = request_tls(port, "/metrics", Some(&nosy), None)
        .await
        .expect("answer");
    assert_eq!(
        code, 403,
        "only holders of kubesync-metrics-reader read: {body}"
    );

    // An ObjectSync in the release namespace (trusted: the operator's own) copies a ConfigMap.
    env.create_namespace("team-a").await.expect("ns");
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: kubesync-system}\ndata: {mode: fast}\n").await.expect("ConfigMap");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: kubesync-system}\nspec:\n  source: {group: \"\", kind: ConfigMap, name: settings}\n  destinations: [{namespace: team-a}]\n").await.expect("ObjectSync");
    eventually("the copy in team-a", T, || async {
        (config_value(&env, "team-a", "settings", "mode")
            .await
            .as_deref()
            == Some("fast"))
        .then_some(())
    })
    .await;
    eventually("the ObjectSync ready", T, || async {
        object_sync_ready(&env, "settings")
            .await
            .filter(|r| r.0 == "True")
    })
    .await;
    assert!(
        may_list_roles(&service_account).await,
        "the default sync role grants every kind"
    );

    // Upgrade to the restricted values: the cluster's RBAC and Deployment change.
    helm.ok(&[
        "upgrade",
        RELEASE,
        &chart,
        "--namespace",
        NS,
        "--set",
        "restricted.enabled=true",
        "--wait=false",
    ]);
    let status: Value =
        serde_json::from_str(&helm.ok(&["status", RELEASE, "--namespace", NS, "-o", "json"]))
            .expect("helm status JSON");
    assert_eq!(status["version"], 2, "{status}");
    assert_eq!(status["info"]["status"], "deployed", "{status}");
    let restricted = kustomize("restricted");
    let want_rules = &find(&restricted, "ClusterRole", "kubesync-sync")["rules"];
    let roles = live(&client, find(&installed, "ClusterRole", "kubesync-sync"))
        .await
        .expect("the sync ClusterRole");
    assert_eq!(
        &roles.data["rules"], want_rules,
        "the sync role after the upgrade"
    );
    // The apiserver's authorizer follows: the ServiceAccount may no longer touch Roles.
    eventually("the ServiceAccount refused Roles", T, || async {
        (!may_list_roles(&service_account).await).then_some(())
    })
    .await;
    let deployment = live(&client, find(&installed, "Deployment", "kubesync"))
        .await
        .expect("the Deployment");
    assert_eq!(
        deployment.data["spec"]["template"]["spec"]["containers"][0]["args"],
        container(&restricted)["args"],
        "the Deployment's args after the upgrade"
    );

    // The operator restarted as the upgraded Deployment runs it (a rolling update would):
    // a Role's ObjectSync is refused, the ConfigMap's still syncs.
    assert!(stop(operator).await.success(), "clean exit on SIGTERM");
    let log = env.dir().join("kubesync-upgraded.log");
    let (mut operator, port) = run_as_deployed(&env, &kubeconfig, &log).await;
    wait_leading(&mut operator, port, &reader, &log).await;
    env.apply_yaml("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: reader, namespace: kubesync-system}\nrules: [{apiGroups: [\"\"], resources: [pods], verbs: [get]}]\n").await.expect("Role");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: reader, namespace: kubesync-system}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: Role, name: reader}\n  destinations: [{namespace: team-a}]\n").await.expect("ObjectSync");
    let refused = eventually("the Role's ObjectSync refused", T, || async {
        object_sync_ready(&env, "reader")
            .await
            .filter(|r| r.0 == "False")
    })
    .await;
    assert_eq!(refused.1, "ResourceNotAllowed", "{refused:?}");
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"mode": "slow"}})),
        )
        .await
        .expect("change the source");
    eventually("the changed copy in team-a", T, || async {
        (config_value(&env, "team-a", "settings", "mode")
            .await
            .as_deref()
            == Some("slow"))
        .then_some(())
    })
    .await;
    assert!(stop(operator).await.success(), "clean exit on SIGTERM");
    let forbidden: Vec<String> = ["kubesync.log", "kubesync-upgraded.log"]
        .iter()
        .flat_map(|l| {
            std::fs::read_to_string(env.dir().join(l))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.to_lowercase().contains("forbidden"))
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(forbidden.is_empty(), "{}", forbidden.join("\n"));

    // Uninstall: every object of the chart goes, the CRDs (and so the ObjectSyncs) stay.
    helm.ok(&["uninstall", RELEASE, "--namespace", NS]);
    let upgraded = render(&["--set", "restricted.enabled=true"]);
    for o in upgraded
        .iter()
        .filter(|o| o["kind"] != "CustomResourceDefinition")
    {
        eventually(&format!("{} deleted", key(o)), T, || async {
            live(&client, o).await.is_none().then_some(())
        })
        .await;
    }
    for crd in &crds {
        assert!(
            live(&client, crd).await.is_some(),
            "{} deleted by helm uninstall",
            key(crd)
        );
    }
    assert!(
        object_sync_ready(&env, "settings").await.is_some(),
        "the ObjectSync (a CRD's object) stays"
    );
    let releases = helm.ok(&["list", "--namespace", NS, "--all", "--short"]);
    assert!(releases.trim().is_empty(), "{releases}");
}
