//! Tenancy on real control planes, with real users and RBAC: no one gains, through kubesync,
//! rights they do not have. ObjectSyncs outside the trusted namespaces write only into their
//! own namespace or where a SyncGrant consents; privilege-bearing kinds need a grant naming
//! them; RemoteClusters admit only the namespaces they select.

mod common;

use common::*;
use kubesync_testenv::eventually;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kubesync::Cluster;
use kubesync_cli::crd::{CopyState, ObjectSync, SyncGrant};
use kubesync_cli::object_sync::ObjectSyncPolicy;
use kubesync_cli::operator::OperatorOptions;
use kubesync_testenv::TestEnv;

/// The operator as installed: only its own namespace is trusted.
fn start(env: &TestEnv) -> RunningOperator {
    start_operator(
        Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            policy: ObjectSyncPolicy {
                trusted_namespaces: vec!["kubesync-system".into()],
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let strings = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
    PolicyRule {
        api_groups: strings(groups),
        resources: strings(resources),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// A destination's state and message in an ObjectSync's status.
async fn destination(
    syncs: &Api<ObjectSync>,
    name: &str,
    namespace: &str,
) -> Option<(CopyState, String)> {
    let os = syncs.get_opt(name).await.ok()??;
    os.status?
        .destinations
        .into_iter()
        .find(|d| d.namespace == namespace)
        .map(|d| (d.state, d.message))
}

async fn apply(env: &TestEnv, yaml: &str) {
    env.apply_yaml(yaml).await.expect("apply");
}

fn grant_yaml(name: &str, namespace: &str, from: &str, kinds: &str) -> String {
    format!(
        "apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n  from: [{from}]\n{kinds}"
    )
}

/// The escalation a tenant could do with a copier that trusts every declarer: a RoleBinding
/// she may create in her namespace, copied into `victim` and `kube-system`, would let her read
/// their Secrets. kubesync writes nothing, says why, and she still cannot read them.
#[tokio::test]
async fn a_tenant_cannot_plant_rolebindings_in_other_namespaces() {
    let env = operator_cluster_from(
        TestEnv::builder().name("tenancy").user("tina", &[]),
        &["kubesync-system", "t1", "victim"],
    )
    .await;
    apply(&env, "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: victim}\nstringData: {password: hunter2}\n").await;
    apply(&env, "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: secret-reader}\nrules: [{apiGroups: [\"\"], resources: [secrets], verbs: [get, list]}]\n").await;
    // tina: ObjectSyncs and RoleBindings in t1, and `bind` on the secret-reader ClusterRole.
    env.grant(
        "tina",
        Some("t1"),
        "tenant",
        vec![
            rule(
                &["kubesync.io"],
                &["objectsyncs"],
                &["get", "list", "create"],
            ),
            rule(
                &["rbac.authorization.k8s.io"],
                &["rolebindings"],
                &["get", "create"],
            ),
        ],
    )
    .await
    .expect("grant");
    env.grant(
        "tina",
        None,
        "bind-secret-reader",
        vec![PolicyRule {
            resource_names: Some(vec!["secret-reader".into()]),
            ..rule(&["rbac.authorization.k8s.io"], &["clusterroles"], &["bind"])
        }],
    )
    .await
    .expect("grant");
    let tina = env.client_as("tina").expect("tina");
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "tina-reads", "namespace": "t1"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "secret-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "tina"}]
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(tina.clone(), "t1")
        .create(&PostParams::default(), &binding)
        .await
        .expect("tina may bind secret-reader in t1");
    let os: ObjectSync = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "escalate", "namespace": "t1"},
        "spec": {
            "source": {"group": "rbac.authorization.k8s.io", "kind": "RoleBinding", "name": "tina-reads"},
            "destinations": [{"namespace": "victim"}, {"namespace": "kube-system"}]
        }
    }))
    .expect("objectsync");
    Api::<ObjectSync>::namespaced(tina.clone(), "t1")
        .create(&PostParams::default(), &os)
        .await
        .expect("tina may create ObjectSyncs in t1");

    let running = start(&env);
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    for ns in ["victim", "kube-system"] {
        let (state, message) = eventually(&format!("{ns} refused"), T, || async {
            destination(&syncs, "escalate", ns).await
        })
        .await;
        assert_eq!(state, CopyState::Refused, "{message}");
        assert!(
            message.contains("privilege-bearing") && message.contains("SyncGrant"),
            "the message names the rule and what would admit it: {message}"
        );
    }
    let os = syncs.get("escalate").await.expect("objectsync");
    let synced = os
        .status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Synced")
        .expect("Synced");
    assert_eq!(
        (synced.status.as_str(), synced.reason.as_str()),
        ("False", "DestinationRefused")
    );
    event_where(&env, "t1", "a Warning Event", |e| {
        e.reason.as_deref() == Some("DestinationRefused") && e.type_.as_deref() == Some("Warning")
    })
    .await;
    for ns in ["victim", "kube-system"] {
        let planted = Api::<RoleBinding>::namespaced(env.client().expect("client"), ns)
            .get_opt("tina-reads")
            .await
            .expect("get");
        assert!(planted.is_none(), "no RoleBinding in {ns}");
    }
    let err = Api::<Secret>::namespaced(tina, "victim")
        .list(&Default::default())
        .await
        .expect_err("tina still cannot read victim's Secrets");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "refused by the apiserver: {err}"
    );
    running.stop().await;
}

/// A ConfigMap into another namespace: refused without a grant, copied with one, removed when
/// the grant goes; a grant does not admit a RoleBinding unless it names the kind; a trusted
/// namespace needs no grant.
#[tokio::test]
async fn grants_admit_copies_and_withdrawing_them_removes_the_copies() {
    let env = operator_cluster(
        "grants",
        false,
        &["kubesync-system", "t1", "victim", "other"],
    )
    .await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {mode: fast}\n").await;
    apply(&env, "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: view, namespace: t1}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: someone}]\n").await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: victim}]\n").await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: view, namespace: t1}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: RoleBinding, name: view}\n  destinations: [{namespace: victim}]\n").await;
    let running = start(&env);
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let victim_cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "victim");

    let (state, message) = eventually("the ConfigMap refused", T, || async {
        destination(&syncs, "settings", "victim").await
    })
    .await;
    assert_eq!(state, CopyState::Refused, "{message}");
    assert!(message.contains("from: [{namespace: t1}]"), "{message}");
    assert!(victim_cms.get_opt("settings").await.expect("get").is_none());

    // victim's owners consent to ConfigMaps from t1.
    apply(
        &env,
        &grant_yaml(
            "from-t1",
            "victim",
            "{namespace: t1}",
            "  kinds: [{kind: ConfigMap}]\n",
        ),
    )
    .await;
    eventually("the ConfigMap copied", T, || async {
        victim_cms.get_opt("settings").await.ok()?
    })
    .await;
    // That grant does not admit a RoleBinding, and neither does one naming no kinds.
    apply(
        &env,
        &grant_yaml("anything", "victim", "{namespace: t1}", ""),
    )
    .await;
    let (state, message) = eventually("the RoleBinding refused", T, || async {
        destination(&syncs, "view", "victim").await
    })
    .await;
    assert_eq!(state, CopyState::Refused, "{message}");
    let bindings: Api<RoleBinding> = Api::namespaced(env.client().expect("client"), "victim");
    assert!(bindings.get_opt("view").await.expect("get").is_none());

    // Withdrawing the grants removes kubesync's copy.
    let grants: Api<SyncGrant> = Api::namespaced(env.client().expect("client"), "victim");
    for g in ["from-t1", "anything"] {
        grants
            .delete(g, &DeleteParams::default())
            .await
            .expect("delete grant");
    }
    eventually("the copy removed with the grant", T, || async {
        victim_cms
            .get_opt("settings")
            .await
            .ok()
            .filter(|c| c.is_none())
    })
    .await;
    eventually("refused again", T, || async {
        destination(&syncs, "settings", "victim")
            .await
            .filter(|(s, _)| *s == CopyState::Refused)
    })
    .await;

    // A trusted namespace writes wherever the other rules allow, without grants.
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: platform, namespace: kubesync-system}\ndata: {mode: shared}\n").await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: platform, namespace: kubesync-system}\nspec:\n  source: {kind: ConfigMap, name: platform}\n  destinations: [{namespace: \"*\"}]\n").await;
    for ns in ["victim", "other", "t1"] {
        let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), ns);
        eventually(&format!("the trusted copy in {ns}"), T, || async {
            cms.get_opt("platform").await.ok()?
        })
        .await;
    }
    running.stop().await;
}

/// An untrusted namespace cannot use a RemoteCluster that does not select it; with
/// `allowedNamespaces` and a grant in the remote namespace, it can.
#[tokio::test]
async fn remote_clusters_admit_only_the_namespaces_they_select() {
    let (local, remote) = tokio::join!(
        operator_cluster("tenancy-local", false, &["kubesync-system", "t1"]),
        operator_cluster("tenancy-remote", false, &["team"])
    );
    apply(
        &local,
        &serde_json::to_string(&serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "hub-kubeconfig", "namespace": "kubesync-system"},
            "stringData": {"kubeconfig": remote.kubeconfig_yaml()}
        }))
        .expect("json"),
    )
    .await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: hub}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync-system, name: hub-kubeconfig}\n").await;
    apply(&local, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {mode: fast}\n").await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{cluster: hub, namespace: team}]\n").await;
    let running = start(&local);
    let syncs: Api<ObjectSync> = Api::namespaced(local.client().expect("client"), "t1");
    let refused = eventually(
        "refused: the RemoteCluster does not admit t1",
        T,
        || async {
            let os = syncs.get_opt("settings").await.ok()??;
            ready_condition(&os.status?.conditions).filter(|r| r.0 == "False")
        },
    )
    .await;
    assert_eq!(refused.1, "RemoteClusterNotAllowed");

    // The RemoteCluster admits namespaces labelled tenant=yes; t1 is one.
    apply(
        &local,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: t1, labels: {tenant: \"yes\"}}\n",
    )
    .await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: hub}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync-system, name: hub-kubeconfig}\n  allowedNamespaces: {matchLabels: {tenant: \"yes\"}}\n").await;
    let (state, message) = eventually(
        "refused in the remote namespace: no grant there",
        T,
        || async { destination(&syncs, "settings", "team").await },
    )
    .await;
    assert_eq!(state, CopyState::Refused, "{message}");
    assert!(message.contains("cluster: hub"), "{message}");
    let remote_cms: Api<ConfigMap> = Api::namespaced(remote.client().expect("client"), "team");
    assert!(remote_cms.get_opt("settings").await.expect("get").is_none());

    // The remote namespace's owners consent to writes from t1 through the RemoteCluster hub.
    apply(
        &remote,
        &grant_yaml("from-hub", "team", "{namespace: t1, cluster: hub}", ""),
    )
    .await;
    eventually("copied into the remote namespace", T, || async {
        remote_cms.get_opt("settings").await.ok()?
    })
    .await;
    running.stop().await;
}
