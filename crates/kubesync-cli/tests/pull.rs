//! Pull from a hub (`spec.source.cluster`), on three real control planes: a hub and two
//! spokes, each spoke with its own operator and, on the hub, only the credentials
//! `config/hub` grants (get, list and watch of the synced kinds). A ConfigMap, a selection of
//! Secrets and a cluster-scoped kind reach both spokes and follow their changes; a tenant
//! reads only the namespace of its own name on the hub, through a RemoteCluster that admits
//! it. A hub outage with a spoke restarted in the middle deletes and rewrites nothing (the
//! spokes' audit logs), the sources deleted meanwhile lose their copies once the hub answers
//! again, and the spokes never wrote to the hub (its audit log).

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, Patch, PatchParams};
use kubesync::Cluster;
use kubesync_cli::crd::{ClusterObjectSync, ObjectSync, RemoteCluster};
use kubesync_cli::operator::OperatorOptions;
use kubesync_testenv::{TestEnv, eventually};

/// The user each spoke's operator runs as there (its writes are told apart in the audit log).
const OPERATOR: &str = "kubesync-operator";

/// The identity spokes read the hub as: `config/hub`'s ServiceAccount.
const SPOKE: &str = "system:serviceaccount:kubesync-hub:kubesync-spoke";

/// The kinds the spokes' copies are of (their writes are counted).
const COPIED: [&str; 3] = ["configmaps", "secrets", "priorityclasses"];

/// How long the hub is down.
const OUTAGE: Duration = Duration::from_secs(30);

async fn spoke(name: &str) -> TestEnv {
    let env = operator_cluster_from(
        TestEnv::builder()
            .name(name)
            .user(OPERATOR, &["system:masters"])
            .audit(true),
        &["ops", "apps-1", "apps-2", "team-a", "team-b"],
    )
    .await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
        Api::all(env.client().expect("client"));
    for (ns, team) in [("team-a", "a"), ("team-b", "b")] {
        namespaces
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"team": team}}})),
            )
            .await
            .expect("label");
    }
    // A team's ObjectSyncs write their copies as the team's copier.
    for ns in ["team-a", "team-b"] {
        let_copier_write(&env, ns, &[ns]).await;
    }
    env
}

fn start(env: &TestEnv) -> RunningOperator {
    start_operator(
        Cluster::new("local", env.client_as(OPERATOR).expect("client")),
        OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: vec!["ops".into()],
                default_service_account: Some(COPIER.into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

/// The hub's kubeconfig for spokes, in the Secret `ops/hub-kubeconfig` of `spoke`, and the
/// RemoteCluster `hub` admitting namespaces labelled `team: a`.
async fn connect_to_hub(spoke: &TestEnv, kubeconfig: &str) {
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hub-kubeconfig", "namespace": "ops"},
        "stringData": {"kubeconfig": kubeconfig}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(spoke.client().expect("client"), "ops")
        .create(&Default::default(), &secret)
        .await
        .expect("kubeconfig secret");
    spoke
        .apply_yaml(
            "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: hub}\nspec:\n  kubeconfigSecretRef: {namespace: ops, name: hub-kubeconfig}\n  allowedNamespaces: {matchLabels: {team: a}}\n  identityNamespace: kubesync-tenants\n",
        )
        .await
        .expect("RemoteCluster");
}

/// What each spoke declares: a ConfigMap, a selection of Secrets and a PriorityClass pulled
/// from the hub; a tenant's pull from its namespace there, and two it may not make.
const DECLARATIONS: &str = r#"
apiVersion: kubesync.io/v1alpha1
kind: ObjectSync
metadata: {name: settings, namespace: ops}
spec:
  source: {kind: ConfigMap, name: settings, cluster: hub}
  destinations: [{namespace: apps-1}, {namespace: apps-2}]
---
apiVersion: kubesync.io/v1alpha1
kind: ObjectSync
metadata: {name: tls, namespace: ops}
spec:
  source: {kind: Secret, selector: {matchLabels: {app: tls}}, cluster: hub}
  destinations: [{namespace: apps-1}]
---
apiVersion: kubesync.io/v1alpha1
kind: ClusterObjectSync
metadata: {name: priority}
spec:
  source: {group: scheduling.k8s.io, kind: PriorityClass, name: fleet-high, cluster: hub}
  destinations: [{}]
---
apiVersion: kubesync.io/v1alpha1
kind: ObjectSync
metadata: {name: mine, namespace: team-a}
spec:
  source: {kind: ConfigMap, name: team-config, cluster: hub}
  destinations: [{namespace: team-a, name: from-hub}]
---
apiVersion: kubesync.io/v1alpha1
kind: ObjectSync
metadata: {name: steal, namespace: team-a}
spec:
  source: {kind: ConfigMap, name: admin-only, namespace: ops, cluster: hub}
  destinations: [{namespace: team-a}]
---
apiVersion: kubesync.io/v1alpha1
kind: ObjectSync
metadata: {name: other, namespace: team-b}
spec:
  source: {kind: ConfigMap, name: team-config, cluster: hub}
  destinations: [{namespace: team-b}]
"#;

/// The sources on the hub.
const SOURCES: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: ops}
data: {color: blue}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: admin-only, namespace: ops}
data: {root: "yes"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: team-config, namespace: team-a}
data: {team: a}
---
apiVersion: v1
kind: Secret
metadata: {name: tls-1, namespace: ops, labels: {app: tls}}
stringData: {tls.crt: one}
---
apiVersion: v1
kind: Secret
metadata: {name: tls-2, namespace: ops, labels: {app: tls}}
stringData: {tls.crt: two}
---
apiVersion: v1
kind: Secret
metadata: {name: unrelated, namespace: ops}
stringData: {password: hunter2}
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: fleet-high}
value: 100000
description: fleet-wide high priority
"#;

async fn data(env: &TestEnv, ns: &str, name: &str) -> Option<String> {
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), ns);
    cms.get_opt(name)
        .await
        .ok()?
        .and_then(|c| c.data)
        .map(|d| serde_json::to_string(&d).expect("json"))
}

async fn secret_names(env: &TestEnv, ns: &str) -> Vec<String> {
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), ns);
    let mut names: Vec<String> = secrets
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|s| s.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The `tls.crt` of the Secret `ns/name`.
async fn secret_value(env: &TestEnv, ns: &str, name: &str) -> Option<String> {
    let secret = Api::<Secret>::namespaced(env.client().expect("client"), ns)
        .get_opt(name)
        .await
        .ok()??;
    let bytes = secret.data?.remove("tls.crt")?;
    String::from_utf8(bytes.0).ok()
}

async fn priority_description(env: &TestEnv) -> Option<String> {
    Api::<PriorityClass>::all(env.client().expect("client"))
        .get_opt("fleet-high")
        .await
        .ok()?
        .and_then(|p| p.description)
}

/// `(status, reason, message)` of condition `type_` of the ObjectSync `ns/name`, or of the
/// ClusterObjectSync `name` when `ns` is empty.
async fn condition(
    env: &TestEnv,
    ns: &str,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let client = env.client().expect("client");
    let status = if ns.is_empty() {
        Api::<ClusterObjectSync>::all(client)
            .get(name)
            .await
            .ok()?
            .status
    } else {
        Api::<ObjectSync>::namespaced(client, ns)
            .get(name)
            .await
            .ok()?
            .status
    };
    status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.message))
}

/// Waits until the ObjectSync `ns/name` of `env` is refused for `reason`, its message
/// written for people.
async fn refused(env: &TestEnv, ns: &str, name: &str, reason: &str) {
    let (status, _, message) = eventually(
        &format!("{ns}/{name} refused: {reason}"),
        T,
        || async move {
            condition(env, ns, name, "Ready")
                .await
                .filter(|c| c.1 == reason)
        },
    )
    .await;
    assert_eq!(status, "False");
    assert!(for_people(&message), "{message}");
}

/// The operator's writes to the copied kinds in the audit log of `env`, from entry `from`
/// on: `verb resource namespace/name`.
fn copy_writes(env: &TestEnv, from: usize) -> Vec<String> {
    env.audit()
        .expect("audit")
        .iter()
        .skip(from)
        .filter(|e| e.is_write() && e.user.username == OPERATOR && COPIED.contains(&e.resource()))
        .map(|e| format!("{} {} {}/{}", e.verb, e.resource(), e.namespace(), e.name()))
        .collect()
}

/// The length of `env`'s audit log once it holds the operator's writes of the changes made
/// before the outage (each changed copy's create and change, tls-3's create): a mark that no
/// late line of them follows (a write's line may be written after its copy is read).
async fn mark_after_the_changes(env: &TestEnv) -> usize {
    let what = format!("{}: the changes' writes in the audit log", env.name());
    eventually(&what, T, || async {
        let writes = copy_writes(env, 0);
        let of = |object: &str| writes.iter().filter(|w| w.ends_with(object)).count();
        (of(" configmaps apps-1/settings") >= 2
            && of(" configmaps apps-2/settings") >= 2
            && of(" secrets apps-1/tls-3") >= 1
            && of(" priorityclasses /fleet-high") >= 2)
            .then(|| env.audit().expect("audit").len())
    })
    .await
}

/// `kubesync check --remote-clusters` on `env`: (success, output).
fn check_remote_clusters(env: &TestEnv) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
        .args(["check", "--remote-clusters", "--kubeconfig"])
        .arg(env.kubeconfig_path().expect("kubeconfig"))
        .output()
        .expect("run kubesync check");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spokes_pull_from_a_hub_with_read_rights_only_and_an_outage_changes_nothing() {
    let mut hub = operator_cluster_from(
        TestEnv::builder()
            .name("hub")
            .with_all_controllers()
            .audit(true),
        &["ops", "team-a"],
    )
    .await;
    let (east, west) = tokio::join!(spoke("east"), spoke("west"));

    // The hub: config/hub as shipped, and one more kind spokes may read (the documented
    // extension: a ClusterRole labelled for aggregation).
    for obj in kustomize("hub") {
        hub.apply_yaml(&serde_json::to_string(&obj).expect("json"))
            .await
            .expect("config/hub");
    }
    hub.apply_yaml(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: kubesync-hub-reader-priorityclasses\n  labels: {kubesync.io/aggregate-to-hub-reader: \"true\"}\nrules:\n- apiGroups: [scheduling.k8s.io]\n  resources: [priorityclasses]\n  verbs: [get, list, watch]\n",
    )
    .await
    .expect("extra kind");
    let roles: Api<ClusterRole> = Api::all(hub.client().expect("client"));
    eventually("the hub reader role aggregated", T, || async {
        let rules = roles.get("kubesync-hub-reader").await.ok()?.rules?;
        (rules.len() == 2).then_some(())
    })
    .await;
    hub.apply_yaml(SOURCES).await.expect("sources");
    // Tenants' pulls are asked of the hub as the identities spokes' RemoteClusters map them
    // to: ServiceAccounts of kubesync-tenants, which the spokes may impersonate (there only);
    // team-a's copier, as such, may read team-a's ConfigMaps there.
    hub.create_namespace("kubesync-tenants").await.expect("ns");
    hub.apply_yaml("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: kubesync-spoke-tenants, namespace: kubesync-tenants}\nrules: [{apiGroups: [\"\"], resources: [serviceaccounts], verbs: [impersonate]}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: kubesync-spoke-tenants, namespace: kubesync-tenants}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: kubesync-spoke-tenants}\nsubjects: [{kind: ServiceAccount, name: kubesync-spoke, namespace: kubesync-hub}]\n").await.expect("tenant identities");
    hub.grant(
        &format!("system:serviceaccount:kubesync-tenants:team-a.{COPIER}"),
        Some("team-a"),
        "reader",
        vec![k8s_openapi::api::rbac::v1::PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: ["get", "list", "watch"].map(String::from).to_vec(),
            ..Default::default()
        }],
    )
    .await
    .expect("the mapped copier reads team-a");
    let token = service_account_token(&hub, "kubesync-hub", "kubesync-spoke").await;
    let kubeconfig = kubesync_testenv::kubeconfig_yaml(&[kubesync_testenv::KubeconfigEntry {
        context: "hub",
        server: hub.server(),
        ca_pem: hub.ca_pem(),
        user: SPOKE,
        token: &token,
    }]);

    let mut operators = Vec::new();
    for spoke in [&east, &west] {
        connect_to_hub(spoke, &kubeconfig).await;
        spoke.apply_yaml(DECLARATIONS).await.expect("declarations");
        operators.push(start(spoke));
    }
    let west_operator = operators.pop().expect("west");
    let mut east_operator = operators.pop().expect("east");

    // Both spokes receive every source, and only those selected.
    for spoke in [&east, &west] {
        let name = spoke.name();
        eventually(&format!("{name}: every copy"), T, || async {
            let settings = [
                data(spoke, "apps-1", "settings").await,
                data(spoke, "apps-2", "settings").await,
            ];
            (settings
                .iter()
                .all(|d| d.as_deref() == Some(r#"{"color":"blue"}"#))
                && secret_names(spoke, "apps-1").await == ["tls-1", "tls-2"]
                && priority_description(spoke).await.as_deref() == Some("fleet-wide high priority")
                && data(spoke, "team-a", "from-hub").await.as_deref() == Some(r#"{"team":"a"}"#))
            .then_some(())
        })
        .await;
        assert_eq!(
            condition(spoke, "ops", "settings", "SourceReachable")
                .await
                .map(|c| c.0),
            Some("True".into())
        );
        // The tenant reads only its own namespace there, through a RemoteCluster that
        // admits it; nothing is written for the refused ones.
        refused(spoke, "team-a", "steal", "SourceNamespaceNotAllowed").await;
        refused(spoke, "team-b", "other", "RemoteClusterNotAllowed").await;
        assert_eq!(data(spoke, "team-a", "admin-only").await, None);
        assert_eq!(data(spoke, "team-b", "team-config").await, None);
        // The RemoteCluster says what it serves as (every declaration naming it, the refused
        // ones too).
        let rcs: Api<RemoteCluster> = Api::all(spoke.client().expect("client"));
        eventually(
            &format!("{name}: the hub serves as a source"),
            T,
            || async {
                let status = rcs.get("hub").await.ok()?.status?;
                (status.source_for == Some(6) && status.destination_for == Some(0)).then_some(())
            },
        )
        .await;
    }

    // Changes follow: data, a newly selected Secret, a cluster-scoped object's field.
    hub.apply_yaml(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: ops}\ndata: {color: green}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: tls-3, namespace: ops, labels: {app: tls}}\nstringData: {tls.crt: three}\n",
    )
    .await
    .expect("change");
    Api::<PriorityClass>::all(hub.client().expect("client"))
        .patch(
            "fleet-high",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"description": "changed on the hub"})),
        )
        .await
        .expect("priority class");
    for spoke in [&east, &west] {
        eventually(&format!("{}: the changes", spoke.name()), T, || async {
            (data(spoke, "apps-2", "settings").await.as_deref() == Some(r#"{"color":"green"}"#)
                && secret_names(spoke, "apps-1").await == ["tls-1", "tls-2", "tls-3"]
                && priority_description(spoke).await.as_deref() == Some("changed on the hub"))
            .then_some(())
        })
        .await;
    }

    // The outage: the hub's apiserver stops. Each spoke says so; a spoke's operator restarts
    // in the middle; sources are deleted on the hub meanwhile, behind the apiserver's back.
    let marks = (
        mark_after_the_changes(&east).await,
        mark_after_the_changes(&west).await,
    );
    hub.stop_apiserver();
    let down = Instant::now();
    for spoke in [&east, &west] {
        let ready = eventually(
            &format!("{}: the source is unknown", spoke.name()),
            T,
            || async {
                condition(spoke, "ops", "settings", "Ready")
                    .await
                    .filter(|c| c.1 == "SourceUnreachable")
            },
        )
        .await;
        assert!(
            ready.2.contains("hub") && ready.2.contains("kept"),
            "{}",
            ready.2
        );
        assert!(for_people(&ready.2), "{}", ready.2);
        eventually("the selection too", T, || async {
            condition(spoke, "ops", "tls", "Ready")
                .await
                .filter(|c| c.1 == "SourceUnreachable")
        })
        .await;
        eventually("the cluster-scoped one too", T, || async {
            condition(spoke, "", "priority", "Ready")
                .await
                .filter(|c| c.1 == "SourceUnreachable")
        })
        .await;
    }
    // Someone edits a copy meanwhile: with its source unknown it stays as it is (its repair
    // waits for the hub). Witnessed per spoke: a reconcile of the declaration that decided on
    // a store showing the edit.
    for (spoke, operator) in [(&east, &east_operator), (&west, &west_operator)] {
        let edited = Api::<Secret>::namespaced(spoke.client().expect("client"), "apps-1")
            .patch(
                "tls-1",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"stringData": {"tls.crt": "edited"}})),
            )
            .await
            .expect("edit a copy");
        let ctx = operator.operator.context().expect("context");
        let copy = kubesync::ObjectKey::new(
            "local",
            &kube::core::ApiResource::erase::<Secret>(&()),
            Some("apps-1".into()),
            "tls-1",
        );
        let declaration = kubesync::ObjectKey::new(
            "local",
            &kube::core::ApiResource::erase::<ObjectSync>(&()),
            Some("ops".into()),
            "tls",
        );
        let rv = edited.metadata.resource_version.expect("resourceVersion");
        reconciled_after_seeing(&ctx, &copy, &rv, &declaration).await;
    }
    for key in [
        "/registry/configmaps/ops/settings",
        "/registry/secrets/ops/tls-2",
    ] {
        assert_eq!(hub.delete_from_etcd(key).await.expect("etcd"), 1, "{key}");
    }
    east_operator.stop().await;
    east_operator = start(&east);
    // The restarted operator decides too (every copy kept, reported as such).
    eventually("the restarted operator keeps the copies", T, || async {
        let gauges = east_operator.operator.object_sync_gauges();
        let (_, gauge) = gauges
            .iter()
            .find(|(k, _)| k == &("ops".to_string(), "settings".to_string()))?;
        (gauge.destinations.get(&kubesync_cli::crd::CopyState::Error) == Some(&2)).then_some(())
    })
    .await;
    tokio::time::sleep(OUTAGE.saturating_sub(down.elapsed())).await;
    for spoke in [&east, &west] {
        assert_eq!(
            secret_value(spoke, "apps-1", "tls-1").await.as_deref(),
            Some("edited")
        );
        assert_eq!(
            data(spoke, "apps-1", "settings").await.as_deref(),
            Some(r#"{"color":"green"}"#)
        );
        assert_eq!(
            secret_names(spoke, "apps-1").await,
            ["tls-1", "tls-2", "tls-3"]
        );
    }
    assert_eq!(
        copy_writes(&east, marks.0),
        Vec::<String>::new(),
        "east wrote during the outage"
    );
    assert_eq!(
        copy_writes(&west, marks.1),
        Vec::<String>::new(),
        "west wrote during the outage"
    );

    // The hub answers again: the sources read as deleted lose their copies, the edited copy
    // is repaired, nothing else is written.
    hub.restart_apiserver().await.expect("restart");
    for spoke in [&east, &west] {
        let name = spoke.name();
        eventually(
            &format!("{name}: the deleted sources' copies go"),
            T,
            || async {
                (data(spoke, "apps-1", "settings").await.is_none()
                    && data(spoke, "apps-2", "settings").await.is_none()
                    && secret_names(spoke, "apps-1").await == ["tls-1", "tls-3"])
                .then_some(())
            },
        )
        .await;
        eventually(&format!("{name}: the source is read again"), T, || async {
            condition(spoke, "ops", "tls", "SourceReachable")
                .await
                .filter(|c| c.0 == "True")
        })
        .await;
        assert_eq!(
            priority_description(spoke).await.as_deref(),
            Some("changed on the hub")
        );
        eventually(&format!("{name}: the edited copy repaired"), T, || async {
            (secret_value(spoke, "apps-1", "tls-1").await.as_deref() == Some("one")).then_some(())
        })
        .await;
    }
    for (spoke, mark) in [(&east, marks.0), (&west, marks.1)] {
        // (A write's line may be written after its effect is read: wait for all four.)
        let what = format!("{}: the writes after the outage", spoke.name());
        let writes = eventually(&what, T, || async {
            let mut writes = copy_writes(spoke, mark);
            writes.sort();
            (writes.len() >= 4).then_some(writes)
        })
        .await;
        assert_eq!(
            writes,
            [
                "delete configmaps apps-1/settings",
                "delete configmaps apps-2/settings",
                "delete secrets apps-1/tls-2",
                "patch secrets apps-1/tls-1",
            ],
            "{}: only the deleted sources' copies go, and the edited one is repaired",
            spoke.name()
        );
    }

    // The spokes only ever read the hub, and ask it, as the tenant's mapped identity, whether
    // it may read the tenant's pull (a review writes nothing). A review the hub refused to
    // take as that identity (403: right after its restart, before its RBAC has been read
    // again) is no write either.
    let log = hub.audit().expect("audit");
    let spoke_requests: Vec<(String, String, String, u16)> = log
        .iter()
        .filter(|e| e.user.username == SPOKE)
        .map(|e| {
            let who = e.acting_user().to_string();
            (e.verb.clone(), e.resource().to_string(), who, e.code())
        })
        .collect();
    assert!(!spoke_requests.is_empty());
    let mapped = format!("system:serviceaccount:kubesync-tenants:team-a.{COPIER}");
    let review = |(verb, resource, _, _): &&(String, String, String, u16)| {
        verb == "create" && resource == "selfsubjectaccessreviews"
    };
    assert!(
        spoke_requests
            .iter()
            .any(|r| review(&r) && r.2 == mapped && (200..300).contains(&r.3)),
        "the tenant's pull reviewed on the hub as {mapped}"
    );
    let not_reads: Vec<&(String, String, String, u16)> = spoke_requests
        .iter()
        .filter(|r| !["get", "list", "watch"].contains(&r.0.as_str()))
        .filter(|r| !(review(r) && (r.2 == mapped || r.3 == 403)))
        .collect();
    assert!(not_reads.is_empty(), "{not_reads:?}");

    // `kubesync check --remote-clusters` on a spoke: the hub answers, serves as a source, and
    // its credentials read what is pulled, and only read.
    let (ok, out) = check_remote_clusters(&east);
    assert!(ok, "{out}");
    for line in [
        "hub\tready\t",
        "source for 6, destination for 0",
        "reads ConfigMap in ops: allowed (read only)",
        "reads Secret in ops: allowed (read only)",
        "reads ConfigMap in team-b: allowed (read only)",
        "reads PriorityClass.scheduling.k8s.io: allowed (read only)",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    // A kind the hub does not let spokes read: the check fails and says so.
    east.apply_yaml(
        "apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: storage}\nspec:\n  source: {group: storage.k8s.io, kind: StorageClass, name: fast, cluster: hub}\n  destinations: [{}]\n",
    )
    .await
    .expect("an ungranted pull");
    let (ok, out) = check_remote_clusters(&east);
    assert!(!ok, "{out}");
    assert!(
        out.contains("error: reads StorageClass.storage.k8s.io: get, list, watch denied"),
        "{out}"
    );

    east_operator.assert_no_panic();
    west_operator.assert_no_panic();
    east_operator.stop().await;
    west_operator.stop().await;
}
