//! The install manifests on a real control plane, with the real `kubesync` binary running as
//! the ServiceAccount they create (its own token): every feature works with exactly that
//! RBAC, a rule taken away shows up as Forbidden in a condition, and the restricted overlay
//! refuses other kinds before writing anything.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{
    COPIER, RunningBinary, T, apply_overlay, free_port, let_copier_write, metrics_tokens,
    request_tls, sample, service_account_kubeconfig,
};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync_testenv::TestEnv;
use kubesync_testenv::eventually;
use serde_json::json;

/// The consent of `namespace`'s owners to copies from ObjectSyncs in `apps` (which is not a
/// trusted namespace: the install trusts only kubesync-system).
async fn grant_from_apps(env: &TestEnv, namespace: &str) {
    apply(env, &format!("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {{name: from-apps, namespace: {namespace}}}\nspec:\n  from: [{{namespace: apps}}]\n")).await;
    // And RBAC: apps' ObjectSyncs act as its ServiceAccount `copier`, which reads apps and
    // writes here.
    let_copier_write(env, "apps", &["apps", namespace]).await;
}

const WIDGET_CRD: &str = include_str!("../../kubesync-testenv/fixtures/widget-crd.yaml");
const NS: &str = "kubesync-system";

/// Installs an overlay as a user would, with the test ground's kubectl (`kubectl apply
/// --server-side -k config/<overlay>`), waits for its CRDs, and returns a kubeconfig file
/// authenticating as its ServiceAccount with a token from the TokenRequest API (current
/// Kubernetes creates no token Secrets).
async fn install(env: &TestEnv, overlay: &str) -> PathBuf {
    let applied = apply_overlay(env, overlay);
    // A warning-free install: the apiserver warns of nothing in the manifests (e.g. a schema
    // format it does not know).
    assert!(!applied.contains("Warning"), "{applied}");
    service_account_kubeconfig(env, &format!("{overlay}-serviceaccount.kubeconfig")).await
}

/// A replica of the real binary as the ServiceAccount, logging to `log`; returns it and the
/// port of its `/metrics` (HTTPS, as deployed: the ServiceAccount's own rights review the
/// scrapers' tokens).
fn replica(kubeconfig: &Path, log: &Path, args: &[&str]) -> (RunningBinary, u16) {
    let (port, metrics) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_kubesync"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
        .args(["--metrics-address", &format!("127.0.0.1:{metrics}")])
        .args(args)
        .env("POD_NAMESPACE", NS)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("log file"))
        .spawn()
        .expect("run kubesync");
    (RunningBinary(child), metrics)
}

fn api(
    env: &TestEnv,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    let client = env.client().expect("client");
    match ns {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    }
}

/// The `Ready` condition of an object: (status, reason, message).
fn ready(obj: &DynamicObject) -> Option<(String, String, String)> {
    let conditions = obj.data.get("status")?.get("conditions")?.as_array()?;
    let c = conditions.iter().find(|c| c["type"] == "Ready")?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

async fn ready_of(api: &Api<DynamicObject>, name: &str) -> Option<(String, String, String)> {
    ready(&api.get_opt(name).await.ok()??)
}

async fn secret_value(env: &TestEnv, ns: &str, name: &str, key: &str) -> Option<String> {
    let s = Api::<Secret>::namespaced(env.client().expect("client"), ns)
        .get_opt(name)
        .await
        .ok()??;
    Some(String::from_utf8_lossy(&s.data?.get(key)?.0).to_string())
}

/// Every line of the logs that reports a Forbidden answer. Each log must hold the operator's
/// start line (logged at `info`): an empty list from a log that was never written, or not
/// read, would prove nothing.
fn forbidden_lines(logs: &[PathBuf]) -> Vec<String> {
    let lines: Vec<Vec<String>> = logs
        .iter()
        .map(|l| {
            std::fs::read_to_string(l)
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect()
        })
        .collect();
    for (log, lines) in logs.iter().zip(&lines) {
        assert!(
            lines
                .iter()
                .any(|l| l.contains("kubesync operator starting")),
            "{} holds no start line: the log is not read",
            log.display()
        );
    }
    lines
        .into_iter()
        .flatten()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect()
}

/// The ObjectSyncs in namespace apps.
fn objectsyncs(env: &TestEnv) -> Api<DynamicObject> {
    api(
        env,
        "kubesync.io",
        "v1alpha1",
        "ObjectSync",
        "objectsyncs",
        Some("apps"),
    )
}

/// An ObjectSync in apps copying its namesake of `kind` (in `group`) to `destinations`.
async fn object_sync(
    env: &TestEnv,
    name: &str,
    (group, kind): (&str, &str),
    destinations: &[&str],
) {
    let destinations: Vec<String> = destinations
        .iter()
        .map(|d| format!("{{namespace: {d}}}"))
        .collect();
    apply(env, &format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  serviceAccountName: {COPIER}\n  source: {{group: \"{group}\", kind: {kind}, name: {name}}}\n  destinations: [{}]\n", destinations.join(", "))).await;
}

async fn apply(env: &TestEnv, yaml: &str) {
    env.apply_yaml(yaml).await.expect("apply");
}

#[tokio::test]
async fn the_default_install_works_with_exactly_its_rbac() {
    let (local, remote) = tokio::join!(
        TestEnv::builder()
            .name("install")
            .with_controller_manager(true)
            .start(),
        TestEnv::builder().name("install-remote").start()
    );
    let (local, remote) = (local.expect("local"), remote.expect("remote"));
    let kubeconfig = install(&local, "default").await;
    local.install_crds(WIDGET_CRD).await.expect("widget crd");
    remote.install_crds(WIDGET_CRD).await.expect("widget crd");
    for ns in ["apps", "team-a", "team-b"] {
        local.create_namespace(ns).await.expect("ns");
    }
    grant_from_apps(&local, "team-a").await;
    grant_from_apps(&local, "team-b").await;
    remote.create_namespace("ops-a").await.expect("ns");

    // Two replicas with leader election: one leads, the other stands by.
    let logs: Vec<PathBuf> = (0..2)
        .map(|i| local.dir().join(format!("kubesync-{i}.log")))
        .collect();
    let (reader, nosy) = metrics_tokens(&local).await;
    let (a, port_a) = replica(&kubeconfig, &logs[0], &["--leader-elect"]);
    let reader = reader.as_str();
    let leading = |port: u16| async move {
        let (code, m) = request_tls(port, "/metrics", Some(reader), None).await?;
        assert_eq!(code, 200, "{m}");
        sample(&m, "kubesync_leader")
    };
    eventually("the first replica leads", T, || async {
        (leading(port_a).await == Some(1.0)).then_some(())
    })
    .await;
    // Only holders of kubesync-metrics-reader read the metrics.
    let (code, body) = request_tls(port_a, "/metrics", Some(&nosy), None)
        .await
        .expect("answer");
    assert_eq!(code, 403, "{body}");
    let (_b, port_b) = replica(&kubeconfig, &logs[1], &["--leader-elect"]);
    eventually("the second replica stands by", T, || async {
        (leading(port_b).await == Some(0.0)).then_some(())
    })
    .await;

    // ObjectSync: a Secret fanned out into two namespaces, and an edited copy repaired.
    apply(&local, "apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData: {token: one}\n").await;
    object_sync(&local, "registry", ("", "Secret"), &["team-a", "team-b"]).await;
    for ns in ["team-a", "team-b"] {
        eventually(&format!("the copy in {ns}"), T, || async {
            (secret_value(&local, ns, "registry", "token")
                .await
                .as_deref()
                == Some("one"))
            .then_some(())
        })
        .await;
    }
    Api::<Secret>::namespaced(local.client().expect("client"), "team-a")
        .patch(
            "registry",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": "edited"}})),
        )
        .await
        .expect("edit the copy");
    eventually("the edited copy repaired", T, || async {
        (secret_value(&local, "team-a", "registry", "token")
            .await
            .as_deref()
            == Some("one"))
        .then_some(())
    })
    .await;
    let objectsyncs = objectsyncs(&local);
    eventually("the ObjectSync ready", T, || async {
        ready_of(&objectsyncs, "registry")
            .await
            .filter(|r| r.0 == "True")
    })
    .await;

    // RemoteCluster + ResourceSync against a second control plane: its kubeconfig Secret in
    // kubesync-system, where the operator may read Secrets.
    apply(
        &local,
        &serde_json::to_string(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "mgmt-kubeconfig", "namespace": NS},
            "stringData": {"kubeconfig": remote.kubeconfig_yaml()}
        }))
        .expect("json"),
    )
    .await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: mgmt}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync-system, name: mgmt-kubeconfig}\n").await;
    remote.apply_yaml("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: w1, namespace: ops-a}\nspec: {size: 3}\n").await.expect("widget");
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: widgets}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: mgmt\n  namespacePrefix: ops-\n").await;
    let local_widgets = api(
        &local,
        "demo.kubesync.io",
        "v1",
        "Widget",
        "widgets",
        Some("ops-a"),
    );
    eventually("the remote Widget synced down", T, || async {
        local_widgets.get_opt("w1").await.ok()?
    })
    .await;
    let resourcesyncs = api(
        &local,
        "kubesync.io",
        "v1alpha1",
        "ResourceSync",
        "resourcesyncs",
        None,
    );
    let remoteclusters = api(
        &local,
        "kubesync.io",
        "v1alpha1",
        "RemoteCluster",
        "remoteclusters",
        None,
    );
    eventually("the ResourceSync and RemoteCluster ready", T, || async {
        let rs = ready_of(&resourcesyncs, "widgets").await?;
        let rc = ready_of(&remoteclusters, "mgmt").await?;
        (rs.0 == "True" && rc.0 == "True").then_some(())
    })
    .await;

    // ClusterObjectSync: a cluster-scoped PriorityClass copied into the RemoteCluster, its
    // status written, and the copy removed when it goes.
    apply(&local, "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: fleet-high}\nvalue: 1000\n").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: fleet-high}\nspec:\n  source: {group: scheduling.k8s.io, kind: PriorityClass, name: fleet-high}\n  destinations: [{cluster: mgmt}]\n").await;
    let remote_priorities = api(
        &remote,
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        None,
    );
    eventually(
        "the PriorityClass copied into the RemoteCluster",
        T,
        || async { remote_priorities.get_opt("fleet-high").await.ok()? },
    )
    .await;
    let clusterobjectsyncs = api(
        &local,
        "kubesync.io",
        "v1alpha1",
        "ClusterObjectSync",
        "clusterobjectsyncs",
        None,
    );
    eventually("the ClusterObjectSync ready", T, || async {
        ready_of(&clusterobjectsyncs, "fleet-high")
            .await
            .filter(|r| r.0 == "True")
    })
    .await;
    clusterobjectsyncs
        .delete("fleet-high", &Default::default())
        .await
        .expect("delete");
    eventually("the remote copy deleted", T, || async {
        remote_priorities
            .get_opt("fleet-high")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Deleting the ObjectSync removes its copies (finalizer released, deletes sent).
    objectsyncs
        .delete("registry", &Default::default())
        .await
        .expect("delete");
    eventually("the copies deleted", T, || async {
        let gone_a = secret_value(&local, "team-a", "registry", "token")
            .await
            .is_none();
        let gone_b = secret_value(&local, "team-b", "registry", "token")
            .await
            .is_none();
        (gone_a && gone_b).then_some(())
    })
    .await;

    // Leader election: the standby takes over when the leader stops.
    drop(a);
    eventually("the standby takes over", T, || async {
        (leading(port_b).await == Some(1.0)).then_some(())
    })
    .await;
    apply(&local, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {mode: fast}\n").await;
    object_sync(&local, "settings", ("", "ConfigMap"), &["team-b"]).await;
    eventually("the new leader copies", T, || async {
        Api::<ConfigMap>::namespaced(local.client().expect("client"), "team-b")
            .get_opt("settings")
            .await
            .ok()?
    })
    .await;

    let forbidden = forbidden_lines(&logs);
    assert!(
        forbidden.is_empty(),
        "Forbidden answers in the operator's log:\n{}",
        forbidden.join("\n")
    );
    for (api, name) in [(&resourcesyncs, "widgets"), (&remoteclusters, "mgmt")] {
        let r = ready_of(api, name).await.expect("ready");
        assert!(!r.2.to_lowercase().contains("forbidden"), "{name}: {r:?}");
    }
}

/// Namespaces apps and team-a (which consents to copies from apps), and the operator with the
/// restricted overlay's flags, as its Deployment passes them.
async fn start_restricted(env: &TestEnv, kubeconfig: &Path) -> (RunningBinary, PathBuf) {
    for ns in ["apps", "team-a"] {
        env.create_namespace(ns).await.expect("ns");
    }
    grant_from_apps(env, "team-a").await;
    let log = env.dir().join("kubesync.log");
    let (op, _port) = replica(
        kubeconfig,
        &log,
        &["--allowed-resource=ConfigMap", "--allowed-resource=Secret"],
    );
    (op, log)
}

#[tokio::test]
async fn the_restricted_install_syncs_configmaps_and_secrets_only() {
    let env = TestEnv::builder()
        .name("restricted")
        .with_controller_manager(true)
        .start()
        .await
        .expect("start");
    let kubeconfig = install(&env, "restricted").await;
    let (_op, log) = start_restricted(&env, &kubeconfig).await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {mode: fast}\n").await;
    apply(&env, "apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData: {token: one}\n").await;
    apply(&env, "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: reader, namespace: apps}\nrules: [{apiGroups: [\"\"], resources: [pods], verbs: [get]}]\n").await;
    for (name, kind) in [
        ("settings", "ConfigMap"),
        ("registry", "Secret"),
        ("reader", "Role"),
    ] {
        let group = if kind == "Role" {
            "rbac.authorization.k8s.io"
        } else {
            ""
        };
        object_sync(&env, name, (group, kind), &["team-a"]).await;
    }
    eventually("the ConfigMap and the Secret copied", T, || async {
        let cm = Api::<ConfigMap>::namespaced(env.client().expect("client"), "team-a")
            .get_opt("settings")
            .await
            .ok()?;
        let secret = secret_value(&env, "team-a", "registry", "token").await;
        (cm.is_some() && secret.as_deref() == Some("one")).then_some(())
    })
    .await;
    let objectsyncs = objectsyncs(&env);
    let refused = eventually("the Role's ObjectSync refused", T, || async {
        ready_of(&objectsyncs, "reader")
            .await
            .filter(|r| r.0 == "False")
    })
    .await;
    assert_eq!(refused.1, "ResourceNotAllowed", "{refused:?}");
    assert!(
        refused.2.contains("Role"),
        "the message names the kind: {refused:?}"
    );
    let roles = api(
        &env,
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        Some("team-a"),
    );
    assert!(
        roles.get_opt("reader").await.expect("get").is_none(),
        "nothing written"
    );
    // A ClusterObjectSync is refused the same way (watched, and its status written, with the
    // operator's own rules: the restricted sync role grants nothing on kubesync.io).
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: fleet-high}\nspec:\n  source: {group: scheduling.k8s.io, kind: PriorityClass, name: fleet-high}\n  destinations: [{name: fleet-high-copy}]\n").await;
    let clusterobjectsyncs = api(
        &env,
        "kubesync.io",
        "v1alpha1",
        "ClusterObjectSync",
        "clusterobjectsyncs",
        None,
    );
    let refused = eventually(
        "the PriorityClass's ClusterObjectSync refused",
        T,
        || async {
            ready_of(&clusterobjectsyncs, "fleet-high")
                .await
                .filter(|r| r.0 == "False")
        },
    )
    .await;
    assert_eq!(refused.1, "ResourceNotAllowed", "{refused:?}");
    let forbidden = forbidden_lines(&[log]);
    assert!(forbidden.is_empty(), "{}", forbidden.join("\n"));
}

/// The rule that lets kubesync read and write Secrets is needed: without it, an ObjectSync of
/// a Secret reports Forbidden in its condition, and a ConfigMap next to it still syncs.
#[tokio::test]
async fn a_missing_rule_is_reported_as_forbidden() {
    let env = TestEnv::builder()
        .name("missing-rule")
        .with_controller_manager(true)
        .start()
        .await
        .expect("start");
    let kubeconfig = install(&env, "restricted").await;
    let roles = api(
        &env,
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        None,
    );
    let without_secrets = json!([{"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]);
    roles
        .patch(
            "kubesync-sync",
            &PatchParams::default(),
            &Patch::Merge(json!({"rules": without_secrets})),
        )
        .await
        .expect("remove the Secrets rule");
    let (_op, _log) = start_restricted(&env, &kubeconfig).await;
    apply(&env, "apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData: {token: one}\n").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {mode: fast}\n").await;
    object_sync(&env, "registry", ("", "Secret"), &["team-a"]).await;
    object_sync(&env, "settings", ("", "ConfigMap"), &["team-a"]).await;
    let objectsyncs = objectsyncs(&env);
    let refused = eventually("the Secret's ObjectSync reports Forbidden", T, || async {
        ready_of(&objectsyncs, "registry")
            .await
            .filter(|r| r.0 == "False" && r.2.to_lowercase().contains("forbidden"))
    })
    .await;
    assert!(refused.2.contains("secrets"), "{refused:?}");
    eventually("the ConfigMap still syncs", T, || async {
        Api::<ConfigMap>::namespaced(env.client().expect("client"), "team-a")
            .get_opt("settings")
            .await
            .ok()?
    })
    .await;
    assert!(
        secret_value(&env, "team-a", "registry", "token")
            .await
            .is_none()
    );
}
