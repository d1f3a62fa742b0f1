//! The install manifests under `config/`: the committed CRDs are the generator's, every
//! overlay builds with kubectl's kustomize, and the Deployment meets the restricted Pod
//! Security Standard. (That the RBAC is enough, and needed, is proven on a real control plane
//! in `install.rs`.)

use std::path::PathBuf;

use serde_json::Value;

mod common;

use common::kustomize;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn committed_crds_are_the_generators_output() {
    let path = repo().join("config/crd/bases/kubesync.io.yaml");
    let committed = std::fs::read_to_string(&path).expect("config/crd/bases/kubesync.io.yaml");
    let generated = kubesync_cli::crd::crds_yaml().expect("render");
    assert!(
        committed == generated,
        "{} differs from `kubesync crds`; regenerate it with `make crds`",
        path.display()
    );
}

#[test]
fn every_overlay_builds() {
    let default = kustomize("default");
    let kinds: Vec<String> = default
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    for want in [
        "Namespace/kubesync-system",
        "ServiceAccount/kubesync",
        "ClusterRole/kubesync-operator",
        "ClusterRole/kubesync-sync",
        "Role/kubesync-leader-election",
        "Deployment/kubesync",
        "CustomResourceDefinition/objectsyncs.kubesync.io",
        "CustomResourceDefinition/clusterobjectsyncs.kubesync.io",
        "CustomResourceDefinition/remoteclusters.kubesync.io",
        "CustomResourceDefinition/resourcesyncs.kubesync.io",
        "ClusterRole/kubesync-metrics-auth",
        "ClusterRole/kubesync-metrics-reader",
        "ClusterRoleBinding/kubesync-metrics-auth",
    ] {
        assert!(
            kinds.iter().any(|k| k == want),
            "{want} missing from {kinds:?}"
        );
    }
    let kinds = |overlay: &str| -> Vec<String> {
        kustomize(overlay)
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        kinds("prometheus"),
        ["Service", "PrometheusRule", "ServiceMonitor"]
    );
    assert_eq!(kinds("monitoring"), ["ConfigMap"]);
}

/// The ServiceMonitor scrapes the Deployment's HTTPS metrics port with a bearer token; the
/// reader role grants exactly `get` on `/metrics`, and the operator may only ask reviews.
#[test]
fn metrics_are_scraped_over_https_with_a_token() {
    let prometheus = kustomize("prometheus");
    let monitor = find(&prometheus, "ServiceMonitor", "kubesync");
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    let service = find(&prometheus, "Service", "kubesync-metrics");
    let port = &service["spec"]["ports"][0];
    assert_eq!(port["name"], endpoint["port"]);
    assert_eq!(port["port"], 8443);
    assert_eq!(port["targetPort"], "metrics");
    let default = kustomize("default");
    let reader = find(&default, "ClusterRole", "kubesync-metrics-reader");
    assert_eq!(
        reader["rules"],
        serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    let auth = find(&default, "ClusterRole", "kubesync-metrics-auth");
    for rule in auth["rules"].as_array().expect("rules") {
        assert_eq!(rule["verbs"], serde_json::json!(["create"]), "{rule}");
    }
}

#[test]
fn no_rule_grants_every_verb() {
    for overlay in ["default", "restricted"] {
        for role in kustomize(overlay)
            .iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        {
            for rule in role["rules"].as_array().expect("rules") {
                let verbs = rule["verbs"].as_array().expect("verbs");
                assert!(
                    !verbs.iter().any(|v| v == "*"),
                    "{overlay}: {} grants verb *",
                    role["metadata"]["name"]
                );
            }
        }
    }
}

/// `config/hub`, what spokes need on a hub: read rights on the synced kinds, nothing else —
/// no write verb, no resource beyond ConfigMaps and Secrets (more kinds are added by labelled
/// ClusterRoles, aggregated into the one the spokes' ServiceAccount is bound to), no Role
/// or binding other than that one.
#[test]
fn the_hub_grants_spokes_read_rights_only() {
    let hub = kustomize("hub");
    let kinds: Vec<String> = hub
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "Namespace/kubesync-hub",
            "ServiceAccount/kubesync-spoke",
            "ClusterRole/kubesync-hub-reader",
            "ClusterRole/kubesync-hub-reader-configmaps-secrets",
            "ClusterRoleBinding/kubesync-hub-reader",
        ]
    );
    let reader = find(&hub, "ClusterRole", "kubesync-hub-reader");
    assert_eq!(reader["rules"], serde_json::json!([]), "aggregated only");
    assert_eq!(
        reader["aggregationRule"]["clusterRoleSelectors"],
        serde_json::json!([{"matchLabels": {"kubesync.io/aggregate-to-hub-reader": "true"}}])
    );
    let granted = find(
        &hub,
        "ClusterRole",
        "kubesync-hub-reader-configmaps-secrets",
    );
    assert_eq!(
        granted["rules"],
        serde_json::json!([{"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]}])
    );
    let binding = find(&hub, "ClusterRoleBinding", "kubesync-hub-reader");
    assert_eq!(binding["roleRef"]["name"], "kubesync-hub-reader");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "kubesync-spoke", "namespace": "kubesync-hub"}])
    );
}

/// Tenants' roles (aggregated into `admin` and `edit`, which are bound in namespaces) name
/// ObjectSyncs and never ClusterObjectSyncs, which only cluster admins declare; the operator
/// watches both and writes their status.
#[test]
fn cluster_object_syncs_are_for_cluster_admins_only() {
    let objects = kustomize("default");
    let names = |role: &Value| -> Vec<String> {
        role["rules"]
            .as_array()
            .expect("rules")
            .iter()
            .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
            .filter_map(|r| r.as_str().map(String::from))
            .collect()
    };
    let tenants: Vec<&Value> = objects
        .iter()
        .filter(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["labels"].as_object().is_some_and(|l| {
                    l.keys()
                        .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
                })
        })
        .collect();
    assert!(!tenants.is_empty(), "the tenant roles are installed");
    for role in tenants {
        let resources = names(role);
        assert!(
            !resources
                .iter()
                .any(|r| r.starts_with("clusterobjectsyncs")),
            "{} lets tenants declare ClusterObjectSyncs: {resources:?}",
            role["metadata"]["name"]
        );
    }
    let operator = names(find(&objects, "ClusterRole", "kubesync-operator"));
    for want in ["clusterobjectsyncs", "clusterobjectsyncs/status"] {
        assert!(operator.iter().any(|r| r == want), "{want}: {operator:?}");
    }
}

#[test]
fn the_restricted_overlay_agrees_with_its_flags() {
    let objects = kustomize("restricted");
    let sync = find(&objects, "ClusterRole", "kubesync-sync");
    let rules = sync["rules"].as_array().expect("rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["apiGroups"], serde_json::json!([""]));
    assert_eq!(
        rules[0]["resources"],
        serde_json::json!(["configmaps", "secrets"])
    );
    let deployment = find(&objects, "Deployment", "kubesync");
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        args,
        &serde_json::json!([
            "run",
            "--leader-elect",
            "--allowed-resource=ConfigMap",
            "--allowed-resource=Secret"
        ])
    );
}

/// `config/sharded`: three replicas running `--sharded`, a PodDisruptionBudget taking one at a
/// time, and the member Leases' rights — Leases only, in the operator's namespace only.
#[test]
fn the_sharded_overlay_runs_members_with_lease_rights_only() {
    let objects = kustomize("sharded");
    let deployment = find(&objects, "Deployment", "kubesync");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args, &serde_json::json!(["run", "--sharded"]));
    let pdb = find(&objects, "PodDisruptionBudget", "kubesync");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"], deployment["spec"]["selector"],
        "the budget covers the replicas"
    );
    let role = find(&objects, "Role", "kubesync-members");
    assert_eq!(role["metadata"]["namespace"], "kubesync-system");
    assert_eq!(
        role["rules"],
        serde_json::json!([{
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"]
        }])
    );
    let binding = find(&objects, "RoleBinding", "kubesync-members");
    assert_eq!(binding["roleRef"]["name"], "kubesync-members");
    assert_eq!(
        binding["subjects"],
        serde_json::json!([{"kind": "ServiceAccount", "name": "kubesync", "namespace": "kubesync-system"}])
    );
}

#[test]
fn the_deployment_meets_the_restricted_pod_security_standard() {
    let objects = kustomize("default");
    let d = find(&objects, "Deployment", "kubesync");
    assert_eq!(d["spec"]["replicas"], 2);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "kubesync");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0];
    assert!(
        c["args"]
            .as_array()
            .expect("args")
            .iter()
            .any(|a| a == "--leader-elect")
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    // Probes over plain HTTP on their own port; /metrics over HTTPS on another.
    let port = |name: &str| {
        c["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["containerPort"].clone())
    };
    assert_eq!(port("probes"), Some(serde_json::json!(8080)));
    assert_eq!(port("metrics"), Some(serde_json::json!(8443)));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "probes");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "probes");
    let value = |name: &str| {
        c["env"]
            .as_array()
            .expect("env")
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].clone())
    };
    assert_eq!(
        value("KUBESYNC_METRICS_ADDRESS"),
        Some(serde_json::json!("0.0.0.0:8443"))
    );
    assert_eq!(value("KUBESYNC_METRICS_INSECURE"), None);
    let env: Vec<&str> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        env.contains(&"POD_NAMESPACE") && env.contains(&"POD_NAME"),
        "{env:?}"
    );
    assert!(c["resources"]["limits"]["memory"].is_string());
    assert!(c["resources"]["requests"]["cpu"].is_string());
}
