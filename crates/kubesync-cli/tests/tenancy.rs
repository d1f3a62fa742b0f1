//! Tenancy on real control planes, with real users and RBAC: no one gains, through kubesync,
//! rights they do not have. ObjectSyncs outside the trusted namespaces write only into their
//! own namespace or where a SyncGrant consents; kinds beyond ConfigMaps and Secrets need a grant naming
//! them; RemoteClusters admit only the namespaces they select.

mod common;

use common::*;
use kubesync_testenv::eventually;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleBinding};
use kube::api::{Api, DeleteParams, PostParams};
use kubesync::Cluster;
use kubesync_cli::crd::{CopyState, ObjectSync, SyncGrant};
use kubesync_cli::operator::OperatorOptions;
use kubesync_cli::policy::ObjectSyncPolicy;
use kubesync_testenv::TestEnv;

/// The operator as installed: only its own namespace is trusted; ObjectSyncs elsewhere act
/// as their namespace's ServiceAccount `copier` unless they name another.
fn start(env: &TestEnv) -> RunningOperator {
    start_operator(
        Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            policy: tenant_policy(),
            ..Default::default()
        },
    )
}

/// The policy of an install that trusts only its own namespace, with `copier` as the
/// ServiceAccount untrusted ObjectSyncs act as by default.
fn tenant_policy() -> ObjectSyncPolicy {
    ObjectSyncPolicy {
        trusted_namespaces: vec!["kubesync-system".into()],
        default_service_account: Some(COPIER.into()),
        ..Default::default()
    }
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    common::rule(groups, resources, verbs, &[])
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

/// The `Synced` condition of the ObjectSync `name` as it stands now.
async fn synced_now(syncs: &Api<ObjectSync>, name: &str) -> kubesync_cli::crd::Condition {
    let os = syncs.get(name).await.expect("objectsync");
    os.status
        .expect("status")
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Synced")
        .expect("Synced")
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
    // Her copier may read her RoleBinding: what refuses its copies is kubesync's consent.
    let_copier_read(&env, "t1", "rbac.authorization.k8s.io", &["rolebindings"]).await;
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
            message.contains("only when it names them") && message.contains("SyncGrant"),
            "the message names the rule and what would admit it: {message}"
        );
    }
    let synced = synced_now(&syncs, "escalate").await;
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
    // RBAC lets t1's copier write ConfigMaps and Secrets in victim; kubesync's consent (a
    // SyncGrant) is still needed on top.
    let_copier_write(&env, "t1", &["t1", "victim"]).await;
    let_copier_read(&env, "t1", "rbac.authorization.k8s.io", &["rolebindings"]).await;
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

/// Two control planes: the operator's (namespaces `kubesync-system` and `t1`, and the
/// kubeconfig of the other in the Secret `kubesync-system/hub-kubeconfig`) and the hub's
/// (namespace `team`).
async fn local_and_hub(name: &str) -> (TestEnv, TestEnv) {
    hub_pair(name, TestEnv::builder(), &["team"]).await
}

/// [`local_and_hub`] with the hub made by `hub` (its audit log, say) and its `namespaces`.
async fn hub_pair(
    name: &str,
    hub: kubesync_testenv::TestEnvBuilder,
    namespaces: &[&str],
) -> (TestEnv, TestEnv) {
    let (local_name, remote_name) = (format!("{name}-local"), format!("{name}-remote"));
    let (local, remote) = tokio::join!(
        operator_cluster(&local_name, false, &["kubesync-system", "t1"]),
        operator_cluster_from(
            hub.name(remote_name).with_controller_manager(false),
            namespaces
        )
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
    (local, remote)
}

/// What the hub's admin grants `from`'s copier as this cluster's RemoteCluster maps it there
/// (`identityNamespace: from-local`): ConfigMaps and Secrets of each of `namespaces` for the
/// ServiceAccount `from-local/<from>.copier` (the namespace `from-local` made first).
async fn let_mapped_copier_write(remote: &TestEnv, from: &str, namespaces: &[&str]) {
    remote.create_namespace("from-local").await.expect("ns");
    for ns in namespaces {
        remote
            .grant(
                &format!("system:serviceaccount:from-local:{from}.{COPIER}"),
                Some(ns),
                "copier",
                vec![rule(
                    &[""],
                    &["configmaps", "secrets"],
                    &[
                        "get", "list", "watch", "create", "update", "patch", "delete",
                    ],
                )],
            )
            .await
            .expect("grant the mapped copier");
    }
}

/// An untrusted namespace cannot use a RemoteCluster that does not select it; with
/// `allowedNamespaces` and a grant in the remote namespace, it can.
#[tokio::test]
async fn remote_clusters_admit_only_the_namespaces_they_select() {
    let (local, remote) = local_and_hub("tenancy").await;
    let_copier_write(&local, "t1", &["t1"]).await;
    let_mapped_copier_write(&remote, "t1", &["team"]).await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: hub}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync-system, name: hub-kubeconfig}\n  identityNamespace: from-local\n").await;
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
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: hub}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync-system, name: hub-kubeconfig}\n  allowedNamespaces: {matchLabels: {tenant: \"yes\"}}\n  identityNamespace: from-local\n").await;
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

/// Attack 2 of the third round: written through a RemoteCluster as
/// `system:serviceaccount:t1:copier`, a tenant's ObjectSync would act there as whoever owns
/// namespace t1 in that cluster — here its own copier, which may write Secrets into `team`.
/// kubesync writes through a RemoteCluster only as the identity its admin maps declarations
/// to (`identityNamespace`): without one the ObjectSync is refused; with one, what the
/// remote's own t1/copier may do lends her nothing (RBAC refuses the mapped identity, and the
/// remote's audit log shows every write of hers acting as `from-local/t1.copier`); once the
/// hub's admin grants that identity, it copies.
#[tokio::test]
async fn a_service_account_here_is_never_the_same_name_in_another_cluster() {
    let (local, remote) = hub_pair(
        "same-name",
        TestEnv::builder().audit(true),
        &["team", "t1", "from-local"],
    )
    .await;
    apply(
        &local,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: t1, labels: {tenant: \"yes\"}}\n",
    )
    .await;
    let_copier_write(&local, "t1", &["t1"]).await;
    // The remote cluster's own t1/copier: someone else, who may write Secrets into team.
    let_copier_write(&remote, "t1", &["team"]).await;
    apply(
        &remote,
        &grant_yaml("from-hub", "team", "{namespace: t1, cluster: hub}", ""),
    )
    .await;
    apply(&local, "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: t1}\nstringData: {password: hunter2}\n").await;
    let hub = |identities: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {{name: hub}}\nspec:\n  kubeconfigSecretRef: {{namespace: kubesync-system, name: hub-kubeconfig}}\n  allowedNamespaces: {{matchLabels: {{tenant: \"yes\"}}}}\n{identities}"
        )
    };
    apply(&local, &hub("")).await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: db, namespace: t1}\nspec:\n  source: {kind: Secret, name: db}\n  destinations: [{cluster: hub, namespace: team}]\n").await;
    let running = start(&local);
    let syncs: Api<ObjectSync> = Api::namespaced(local.client().expect("client"), "t1");
    let (status, reason, message) = verdict(&syncs, "db").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RemoteIdentityRequired"),
        "{message}"
    );
    assert!(
        message.contains("ServiceAccount t1/copier") && message.contains("spec.identityNamespace"),
        "{message}"
    );
    assert!(for_people(&message), "{message}");
    let team: Api<Secret> = Api::namespaced(remote.client().expect("client"), "team");
    assert!(team.get_opt("db").await.expect("get").is_none());

    // Mapped, but not granted there: the remote's own t1/copier lends her nothing.
    apply(&local, &hub("  identityNamespace: from-local\n")).await;
    let mapped = "system:serviceaccount:from-local:t1.copier";
    let (state, message) = eventually(
        "refused by the hub's RBAC as the mapped identity",
        T,
        || async {
            destination(&syncs, "db", "team")
                .await
                .filter(|(s, _)| *s == CopyState::Error)
        },
    )
    .await;
    assert_eq!(state, CopyState::Error);
    assert!(
        message.contains(mapped) || message.contains("from-local/t1.copier"),
        "{message}"
    );
    assert!(team.get_opt("db").await.expect("get").is_none());
    let writes_as = |events: &[kubesync_testenv::AuditEvent]| -> Vec<String> {
        events
            .iter()
            .filter(|e| e.is_write() && e.resource() == "secrets" && e.namespace() == "team")
            .map(|e| e.acting_user().to_string())
            .collect()
    };
    let tried = writes_as(&remote.audit().expect("remote audit"));
    assert!(!tried.is_empty(), "a write was tried there");
    assert!(tried.iter().all(|u| u == mapped), "{tried:?}");

    // Granted by the hub's admin: copied, as the mapped identity.
    let_mapped_copier_write(&remote, "t1", &["team"]).await;
    eventually("copied into team", T, || async {
        team.get_opt("db").await.ok()?
    })
    .await;
    let written = writes_as(&remote.audit().expect("remote audit"));
    assert!(written.iter().all(|u| u == mapped), "{written:?}");
    running.assert_no_panic();
    running.stop().await;
}

/// A RemoteCluster that stops admitting a namespace refuses its ObjectSyncs at once: its spec
/// change re-runs the ObjectSyncs using it, no resync is needed (this operator resyncs once an
/// hour).
#[tokio::test]
async fn a_remote_cluster_that_stops_admitting_a_namespace_refuses_its_objectsyncs_at_once() {
    let (local, remote) = local_and_hub("withdraw").await;
    let_copier_write(&local, "t1", &["t1"]).await;
    let_mapped_copier_write(&remote, "t1", &["team"]).await;
    let hub = |admits: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {{name: hub}}\nspec:\n  kubeconfigSecretRef: {{namespace: kubesync-system, name: hub-kubeconfig}}\n  allowedNamespaces: {{matchLabels: {{tenant: \"{admits}\"}}}}\n  identityNamespace: from-local\n"
        )
    };
    apply(&local, &hub("yes")).await;
    apply(
        &local,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: t1, labels: {tenant: \"yes\"}}\n",
    )
    .await;
    apply(&local, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {mode: fast}\n").await;
    apply(
        &remote,
        &grant_yaml("from-hub", "team", "{namespace: t1, cluster: hub}", ""),
    )
    .await;
    apply(&local, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{cluster: hub, namespace: team}]\n").await;
    let running = start_operator(
        Cluster::new("local", local.client().expect("client")),
        OperatorOptions {
            policy: tenant_policy(),
            resync: std::time::Duration::from_secs(3600),
            ..Default::default()
        },
    );
    let remote_cms: Api<ConfigMap> = Api::namespaced(remote.client().expect("client"), "team");
    eventually("copied into the remote namespace", T, || async {
        remote_cms.get_opt("settings").await.ok()?
    })
    .await;
    // The RemoteCluster now admits only namespaces labelled tenant=other; nothing else changes.
    apply(&local, &hub("other")).await;
    let syncs: Api<ObjectSync> = Api::namespaced(local.client().expect("client"), "t1");
    // Refused within T, long before the hourly resync. The status may say `Starting` first (a
    // status written before the copy was seen, or the RemoteCluster's watches starting again):
    // that is not the refusal awaited.
    let refused = eventually("refused at once", T, || async {
        let os = syncs.get_opt("settings").await.ok()??;
        ready_condition(&os.status?.conditions).filter(|r| r.0 == "False" && r.1 != "Starting")
    })
    .await;
    assert_eq!(refused.1, "RemoteClusterNotAllowed");
    // Refused, the ObjectSync uses the RemoteCluster no more: its copy there stays as it is
    // (removed when the ObjectSync goes or is admitted again and stops copying there).
    assert!(remote_cms.get_opt("settings").await.expect("get").is_some());
    running.stop().await;
}

/// A control plane with the tenant `tina`, who may manage ConfigMaps, Secrets, Roles,
/// RoleBindings and ObjectSyncs in `t1` only (as `edit` plus Roles; SyncGrants are for a
/// namespace's admins), her client, and the namespaces `kubesync-system` (trusted), `t1`,
/// `victim` and `quiet`.
async fn tenant_cluster(name: &str) -> (TestEnv, kube::Client) {
    // Her client is returned for the reviews of her own rights.
    let env = operator_cluster_from(
        TestEnv::builder().name(name).user("tina", &[]),
        &["kubesync-system", "t1", "victim", "quiet"],
    )
    .await;
    env.grant(
        "tina",
        Some("t1"),
        "tenant",
        vec![
            rule(&[""], &["configmaps", "secrets"], &["*"]),
            rule(
                &["rbac.authorization.k8s.io"],
                &["roles", "rolebindings"],
                &["*"],
            ),
            rule(&["kubesync.io"], &["objectsyncs"], &["*"]),
        ],
    )
    .await
    .expect("grant");
    // Her copier may write ConfigMaps and Secrets where she may and in victim and quiet:
    // what kubesync refuses there is refused by its own rules (consent, kinds), the second
    // wall, tested here on its own.
    let_copier_write(&env, "t1", &["t1", "victim", "quiet"]).await;
    let tina = env.client_as("tina").expect("tina");
    (env, tina)
}

/// Applies `yaml` as tina (her rights, not the admin's).
async fn as_tina(env: &TestEnv, yaml: &str) {
    env.apply_yaml_as("tina", yaml)
        .await
        .expect("she may declare ObjectSyncs in her namespace");
}

/// Attack 1: kubesync's own kinds as payload. A tenant cannot copy an ObjectSync; an
/// ObjectSync or SyncGrant that is a copy (made here by a trusted declaration, as a careless
/// admin might) is never a declaration and never consent: the planted ObjectSync in `victim`
/// does not read victim's Secret into `t1`, and the planted SyncGrant admits nothing.
#[tokio::test]
async fn kubesyncs_own_kinds_are_no_payload_and_copies_are_never_declarations_or_consent() {
    let (env, _) = tenant_cluster("own-kinds").await;
    apply(&env, "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: victim}\nstringData: {password: hunter2}\n").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await;
    // t1 accepts anything from victim (its admin made this grant).
    apply(
        &env,
        &grant_yaml(
            "from-victim",
            "t1",
            "{namespace: victim}",
            "  kinds: [{kind: Secret}]\n",
        ),
    )
    .await;
    // Templates in the trusted namespace, copied into victim by a trusted ObjectSync.
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: exfiltrate, namespace: kubesync-system}\nspec:\n  source: {kind: Secret, name: db}\n  destinations: [{namespace: t1}]\n").await;
    apply(
        &env,
        &grant_yaml(
            "welcome-t1",
            "kubesync-system",
            "{namespace: t1}",
            "  kinds: [{kind: ConfigMap}, {kind: Secret}]\n  adopt: true\n",
        ),
    )
    .await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: plant, namespace: kubesync-system}\nspec:\n  source: {group: kubesync.io, kind: ObjectSync, names: [exfiltrate]}\n  destinations: [{namespace: victim}]\n").await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: plant-grant, namespace: kubesync-system}\nspec:\n  source: {group: kubesync.io, kind: SyncGrant, name: welcome-t1}\n  destinations: [{namespace: victim}]\n").await;
    // tina tries the same herself, and copies her ConfigMap into victim.
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: copy-a-declaration, namespace: t1}\nspec:\n  source: {group: kubesync.io, kind: ObjectSync, name: into-victim}\n  destinations: [{namespace: t1, name: again}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: into-victim, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: victim}]\n").await;
    let running = start(&env);

    let t1: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let (status, reason, message) = verdict(&t1, "copy-a-declaration").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ResourceNotAllowed"),
        "{message}"
    );
    assert!(message.contains("kubesync's own kinds"), "{message}");

    // The planted copies exist, and act as nothing.
    let victim: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "victim");
    let (status, reason, message) = verdict(&victim, "exfiltrate").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "CopyNotADeclaration"),
        "{message}"
    );
    let grants: Api<SyncGrant> = Api::namespaced(env.client().expect("client"), "victim");
    eventually("the planted grant", T, || async {
        grants.get_opt("welcome-t1").await.ok()?
    })
    .await;
    let (state, message) = eventually("tina's copy refused in victim", T, || async {
        destination(&t1, "into-victim", "victim").await
    })
    .await;
    assert_eq!(
        state,
        CopyState::Refused,
        "a copied grant is no consent: {message}"
    );
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), "t1");
    assert!(
        secrets.get_opt("db").await.expect("get").is_none(),
        "victim's Secret never reached t1"
    );
    let victim_os = victim.get("exfiltrate").await.expect("copy");
    assert!(
        victim_os.metadata.finalizers.unwrap_or_default().is_empty(),
        "a copy holds no finalizer"
    );
    running.stop().await;
}

/// Attacks 2, 3 and 7 (an alias group): only ConfigMaps and non-token Secrets go without a
/// grant that names the kind. A kinds-less grant does not admit a Deployment; her own Role and
/// RoleBinding copied with patches into her own namespace are refused, and she still may not
/// create Pods (RBAC's escalation check is not bypassed through kubesync's rights); a kind an
/// admin flags privileged under one group is refused under its alias.
#[tokio::test]
async fn only_an_allow_list_of_kinds_goes_without_a_grant_that_names_it() {
    let (env, tina) = tenant_cluster("allow-list").await;
    // Her copier reads what she copies; kubesync's allow-list refuses, the second wall.
    let_copier_read(&env, "t1", "apps", &["deployments"]).await;
    let_copier_read(
        &env,
        "t1",
        "rbac.authorization.k8s.io",
        &["roles", "rolebindings"],
    )
    .await;
    let_copier_read(&env, "t1", "events.k8s.io", &["events"]).await;
    let_copier_read(&env, "t1", "", &["events"]).await;
    apply(
        &env,
        &grant_yaml("anything-from-t1", "victim", "{namespace: t1}", ""),
    )
    .await;
    apply(&env, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: miner, namespace: t1}\nspec:\n  selector: {matchLabels: {app: miner}}\n  template:\n    metadata: {labels: {app: miner}}\n    spec: {containers: [{name: m, image: miner}]}\n").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await;
    apply(&env, "apiVersion: v1\nkind: Event\nmetadata: {name: note, namespace: t1}\ninvolvedObject: {kind: ConfigMap, name: settings, namespace: t1}\nreason: Test\nmessage: hello\n").await;
    let tina_cluster = Cluster::new("tina", tina.clone());
    let may_create_pods = || async {
        tina_cluster
            .may("create", "", "pods", Some("t1"))
            .await
            .expect("review")
    };
    assert!(!may_create_pods().await, "tina may not create Pods");
    // Her Role and RoleBinding, as RBAC lets her make them (no Pod rights in either).
    apply(&env, "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: reader, namespace: t1}\nrules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}]\n").await;
    apply(&env, "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: reader, namespace: t1}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}\nsubjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: tina}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: workload, namespace: t1}\nspec:\n  source: {group: apps, kind: Deployment, name: miner}\n  destinations: [{namespace: victim}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: role, namespace: t1}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: Role, name: reader}\n  destinations: [{namespace: t1, name: pod-maker, patches: [{merge: {rules: [{apiGroups: [\"\"], resources: [pods], verbs: [create]}]}}]}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: binding, namespace: t1}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: RoleBinding, name: reader}\n  destinations: [{namespace: t1, name: pod-maker, patches: [{merge: {roleRef: {name: pod-maker}}}]}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: t1, name: settings-copy}, {namespace: victim}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: event, namespace: t1}\nspec:\n  source: {kind: Event, name: note}\n  destinations: [{namespace: t1, name: note-copy}]\n").await;
    let running = start_operator(
        Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            policy: ObjectSyncPolicy {
                grantable_resources: vec!["Event".into()],
                privileged_resources: vec!["Event.events.k8s.io".into()],
                max_copies: 3,
                ..tenant_policy()
            },
            ..Default::default()
        },
    );
    // Bounded work: an ObjectSync that would make more copies than allowed makes none.
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: amplify, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: t1, name: c1}, {namespace: t1, name: c2}, {namespace: t1, name: c3}, {namespace: t1, name: c4}]\n").await;
    let t1: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let synced = eventually("amplify capped", T, || async {
        let os = t1.get_opt("amplify").await.ok()??;
        os.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Synced")
    })
    .await;
    assert_eq!(synced.status, "False");
    assert!(
        synced.message.contains("would make 4 copies; at most 3"),
        "{}",
        synced.message
    );
    // The allow-list still lets ConfigMaps through, into her namespace and under the grant.
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "t1");
    let victim_cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "victim");
    eventually("ConfigMap copies", T, || async {
        cms.get_opt("settings-copy").await.ok()??;
        victim_cms.get_opt("settings").await.ok()?
    })
    .await;
    for (name, namespace, says) in [
        ("workload", "victim", "names them"),
        ("role", "t1", "also into its own namespace"),
        ("binding", "t1", "also into its own namespace"),
        ("event", "t1", "also into its own namespace"),
    ] {
        let (state, message) = eventually(&format!("{name} refused"), T, || async {
            destination(&t1, name, namespace).await
        })
        .await;
        assert_eq!(state, CopyState::Refused, "{name}: {message}");
        assert!(
            message.contains(says) && message.contains("kinds: [{group:"),
            "{name}: {message}"
        );
    }
    for name in ["c1", "c2", "c3", "c4"] {
        assert!(
            cms.get_opt(name).await.expect("get").is_none(),
            "no copy {name}"
        );
    }
    let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
        env.client().expect("client"),
        "victim",
    );
    assert!(deployments.get_opt("miner").await.expect("get").is_none());
    let roles =
        Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(env.client().expect("client"), "t1");
    assert!(roles.get_opt("pod-maker").await.expect("get").is_none());
    assert!(!may_create_pods().await, "still no Pods for tina");
    running.stop().await;
}

/// Attacks 4, 5 and 7 (the oracle): adoption needs a grant that says `adopt: true`, in her
/// own namespace too — the admins' ConfigMap and the grantor's are never written, and stay
/// when her ObjectSync goes; a patch may not set `kubesync.io/orphan-on-delete`; her
/// ObjectSync deleted in Report mode removes the copies it made; a named namespace that does
/// not exist reads exactly as one that refuses.
#[tokio::test]
async fn adoption_needs_consent_consent_ends_with_the_declaration_and_no_oracle() {
    let (env, _) = tenant_cluster("adoption").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"tina\"}\n").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: admin-config, namespace: t1}\ndata: {limit: \"0\"}\n").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: victim}\ndata: {a: \"victim's own\"}\n").await;
    apply(
        &env,
        &grant_yaml(
            "configmaps-from-t1",
            "victim",
            "{namespace: t1}",
            "  kinds: [{kind: ConfigMap}]\n",
        ),
    )
    .await;
    let get = |ns: &str, name: &str| {
        let api: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), ns);
        let name = name.to_string();
        async move { api.get_opt(&name).await.expect("get") }
    };
    let before = [
        get("t1", "admin-config").await.expect("admin's"),
        get("victim", "settings").await.expect("victim's"),
    ];
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: take-over, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  onConflict: adopt\n  destinations: [{namespace: t1, name: admin-config}, {namespace: victim}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: keep-forever, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: victim, name: kept, patches: [{merge: {metadata: {annotations: {kubesync.io/orphan-on-delete: \"true\"}}}}]}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: reported, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: victim, name: reported}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: withdrawn, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: victim, name: withdrawn}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: probe, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: quiet}, {namespace: no-such-namespace}]\n").await;
    let running = start(&env);
    let t1: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");

    for namespace in ["t1", "victim"] {
        let (state, message) = eventually(&format!("no adoption in {namespace}"), T, || async {
            destination(&t1, "take-over", namespace)
                .await
                .filter(|(s, _)| *s != CopyState::Pending)
        })
        .await;
        assert_eq!(state, CopyState::Conflict, "{message}");
        assert!(message.contains("adopt: true"), "{message}");
    }
    let (state, message) = eventually("the patch refused", T, || async {
        destination(&t1, "keep-forever", "victim").await
    })
    .await;
    assert_eq!(state, CopyState::Error, "{message}");
    assert!(message.contains("kubesync.io/"), "{message}");
    assert!(get("victim", "kept").await.is_none());

    // The oracle: an existing namespace without a grant, and one that does not exist.
    let (other, missing) = eventually("both refused", T, || async {
        Some((
            destination(&t1, "probe", "quiet").await?,
            destination(&t1, "probe", "no-such-namespace").await?,
        ))
    })
    .await;
    assert_eq!(
        (other.0, missing.0),
        (CopyState::Refused, CopyState::Refused)
    );
    assert_eq!(
        other.1.replace("quiet", "X"),
        missing.1.replace("no-such-namespace", "X")
    );

    // Report mode, then deleted: the copy made before goes with it. And in Report mode, a
    // grant withdrawn removes the copies it admitted.
    let victim_cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "victim");
    for name in ["reported", "withdrawn"] {
        eventually(&format!("the copy {name}"), T, || async {
            victim_cms.get_opt(name).await.ok()?
        })
        .await;
        apply(&env, &format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: t1}}\nspec:\n  source: {{kind: ConfigMap, name: settings}}\n  mode: Report\n  destinations: [{{namespace: victim, name: {name}}}]\n")).await;
        eventually(&format!("{name} reporting"), T, || async {
            verdict_now(&t1, name).await.filter(|r| r == "Reporting")
        })
        .await;
    }
    for name in ["reported", "take-over"] {
        t1.delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    eventually("the copy removed with the declaration", T, || async {
        victim_cms
            .get_opt("reported")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    eventually("the declarations gone", T, || async {
        (t1.get_opt("take-over").await.ok()?.is_none()
            && t1.get_opt("reported").await.ok()?.is_none())
        .then_some(())
    })
    .await;
    assert!(
        victim_cms
            .get_opt("withdrawn")
            .await
            .expect("get")
            .is_some(),
        "consent still holds"
    );
    Api::<SyncGrant>::namespaced(env.client().expect("client"), "victim")
        .delete("configmaps-from-t1", &DeleteParams::default())
        .await
        .expect("withdraw");
    eventually(
        "the copy removed with its consent, in Report mode",
        T,
        || async {
            victim_cms
                .get_opt("withdrawn")
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    // The objects she tried to take over: untouched, still there.
    let after = [
        get("t1", "admin-config").await.expect("admin's"),
        get("victim", "settings").await.expect("victim's"),
    ];
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(
            (&a.metadata.uid, &a.metadata.resource_version),
            (&b.metadata.uid, &b.metadata.resource_version)
        );
    }
    running.stop().await;
}

/// The reason of an ObjectSync's `Ready` condition now.
async fn verdict_now(syncs: &Api<ObjectSync>, name: &str) -> Option<String> {
    let os = syncs.get_opt(name).await.ok()??;
    os.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason)
}

/// Consent withdrawn ends copies also while the declaration's spec is refused: a tenant's
/// ObjectSync made copies under two grants and in her own namespace, then its spec was made
/// invalid (a source in another namespace); one grant is withdrawn, and its copy goes while the
/// ObjectSync stays refused. The copies whose consent holds stay untouched (a typo loses
/// nothing), and fixing the spec takes over from there.
#[tokio::test]
async fn a_grant_withdrawn_while_the_spec_is_refused_removes_its_copies() {
    let (env, _) = tenant_cluster("refused-sweep").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await;
    for ns in ["victim", "quiet"] {
        apply(
            &env,
            &grant_yaml(
                "configmaps-from-t1",
                ns,
                "{namespace: t1}",
                "  kinds: [{kind: ConfigMap}]\n",
            ),
        )
        .await;
    }
    let spec = |source: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: spread, namespace: t1}}\nspec:\n  source: {source}\n  destinations: [{{namespace: victim}}, {{namespace: quiet}}, {{namespace: t1, name: own-copy}}]\n"
        )
    };
    as_tina(&env, &spec("{kind: ConfigMap, name: settings}")).await;
    let running = start(&env);
    let t1: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let cm = |ns: &str| Api::<ConfigMap>::namespaced(env.client().expect("client"), ns);
    let copies = [
        ("victim", "settings"),
        ("quiet", "settings"),
        ("t1", "own-copy"),
    ];
    for (ns, name) in copies {
        eventually(&format!("the copy in {ns}"), T, || async {
            cm(ns).get_opt(name).await.ok()?
        })
        .await;
    }
    let before: Vec<ConfigMap> = futures::future::join_all(
        copies[1..]
            .iter()
            .map(|(ns, name)| async move { cm(ns).get(name).await.expect("copy") }),
    )
    .await;

    // A spec that is refused: the source in a namespace she may not read from.
    as_tina(
        &env,
        &spec("{kind: ConfigMap, name: settings, namespace: victim}"),
    )
    .await;
    eventually("the spec refused", T, || async {
        verdict_now(&t1, "spread")
            .await
            .filter(|r| r == "SourceNamespaceNotAllowed")
    })
    .await;
    Api::<SyncGrant>::namespaced(env.client().expect("client"), "victim")
        .delete("configmaps-from-t1", &DeleteParams::default())
        .await
        .expect("withdraw");
    eventually("the withdrawn grant's copy removed", T, || async {
        cm("victim")
            .get_opt("settings")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    for (b, (ns, name)) in before.iter().zip(&copies[1..]) {
        let a = cm(ns).get(name).await.expect("a consented copy stays");
        assert_eq!(
            (&a.metadata.uid, &a.metadata.resource_version),
            (&b.metadata.uid, &b.metadata.resource_version),
            "{ns}/{name} untouched"
        );
    }
    assert_eq!(
        verdict_now(&t1, "spread").await.as_deref(),
        Some("SourceNamespaceNotAllowed")
    );

    // Fixed: the grant that holds admits its copy again; the withdrawn one is refused.
    as_tina(&env, &spec("{kind: ConfigMap, name: settings}")).await;
    let (state, _) = eventually("victim refused", T, || async {
        destination(&t1, "spread", "victim")
            .await
            .filter(|(s, _)| *s == CopyState::Refused)
    })
    .await;
    assert_eq!(state, CopyState::Refused);
    assert!(
        cm("victim")
            .get_opt("settings")
            .await
            .expect("get")
            .is_none()
    );
    running.stop().await;
}

/// `--allow-destination-namespace` and `--deny-destination-namespace`, end to end through the
/// binary's flags: a declaration for every namespace copies only into those allowed and not
/// denied, and one naming a namespace outside them is refused, saying which flag.
#[tokio::test]
async fn destination_namespace_flags_bound_every_declaration() {
    let env = operator_cluster(
        "dest-flags",
        false,
        &["apps", "team-a", "team-b", "team-secret", "prod"],
    )
    .await;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {a: '1'}\n")
        .await
        .expect("source");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: everywhere, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: '*'}]\n")
        .await
        .expect("objectsync");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: to-prod, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: prod}]\n")
        .await
        .expect("objectsync");
    let port = free_port();
    let _operator = run_binary(
        &env,
        port,
        &[
            "--trusted-namespace",
            "apps",
            "--allow-destination-namespace",
            "team-*",
            "--deny-destination-namespace",
            "team-secret",
        ],
    );
    let client = env.client().expect("client");
    let syncs: Api<ObjectSync> = Api::namespaced(client.clone(), "apps");
    let (refused, message) = eventually("to-prod refused", T, || async {
        let st = syncs.get("to-prod").await.ok()?.status?;
        let (status, reason) = ready_condition(&st.conditions)?;
        let message = st
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.message.clone())?;
        (status == "False").then_some((reason, message))
    })
    .await;
    assert_eq!(refused, "DestinationNotAllowed");
    // Saying which flag refuses it.
    assert!(
        message.contains("--allow-destination-namespace team-*"),
        "{message}"
    );
    // Every namespace but those: copies in team-a and team-b only, and the declaration in sync.
    eventually("everywhere in sync", T, || async {
        let os = syncs.get("everywhere").await.ok()?;
        let st = os.status?;
        (st.observed_generation == os.metadata.generation
            && st
                .conditions
                .iter()
                .any(|c| c.type_ == "Synced" && c.status == "True"))
        .then_some(())
    })
    .await;
    let mut copied = Vec::new();
    for ns in ["team-a", "team-b", "team-secret", "prod", "apps"] {
        let copy = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get_opt("settings")
            .await
            .expect("get");
        if copy.is_some_and(|c| {
            c.metadata
                .labels
                .unwrap_or_default()
                .contains_key("kubesync.io/managed-by")
        }) {
            copied.push(ns);
        }
    }
    assert_eq!(copied, ["team-a", "team-b"]);
}

/// Tenancy by construction: a tenant's ObjectSync acts as a ServiceAccount of her namespace,
/// so the apiserver's RBAC — its escalation check included — decides what it writes, not
/// kubesync's own rights. With her own SyncGrant naming Roles and ResourceQuotas (and
/// `adopt: true`), her Role copied with every verb on every resource is refused by the
/// apiserver's escalation check and said so on the status; the admins' ResourceQuota is
/// neither loosened nor taken over; her ConfigMap is copied, as the ServiceAccount (the audit
/// log says who acted). Without impersonation each of the first two is written with
/// kubesync's rights.
#[tokio::test]
async fn a_tenants_objectsync_acts_as_her_service_account_and_rbac_decides() {
    let env = operator_cluster_from(
        TestEnv::builder()
            .name("impersonation")
            .user("tina", &[])
            .audit(true),
        &["kubesync-system", "t1"],
    )
    .await;
    // Roles as a namespace's `admin` may manage them: without `escalate` or `bind`, which
    // would let anyone holding them grant herself anything, kubesync or not.
    let manage = [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ];
    let own = vec![
        rule(&[""], &["configmaps", "secrets"], &["*"]),
        rule(
            &["rbac.authorization.k8s.io"],
            &["roles", "rolebindings"],
            &manage,
        ),
    ];
    let tenant = [
        own.clone(),
        vec![rule(
            &["kubesync.io"],
            &["objectsyncs", "syncgrants"],
            &["*"],
        )],
    ]
    .concat();
    env.grant("tina", Some("t1"), "tenant", tenant)
        .await
        .expect("grant");
    // What t1's admin lets her copier do: what she may, and read the quotas.
    let copier_rules = [
        own,
        vec![rule(&[""], &["resourcequotas"], &["get", "list", "watch"])],
    ]
    .concat();
    env.grant(&copier("t1"), Some("t1"), "copier", copier_rules)
        .await
        .expect("grant");
    apply(&env, "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: limits, namespace: t1}\nspec: {hard: {pods: \"0\"}}\n").await;
    apply(&env, "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: other, namespace: t1}\nspec: {hard: {pods: \"1\"}}\n").await;
    as_tina(&env, "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: reader, namespace: t1}\nrules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}]\n").await;
    as_tina(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await;
    as_tina(&env, &grant_yaml("mine", "t1", "{namespace: t1}", "  kinds: [{kind: ConfigMap}, {group: rbac.authorization.k8s.io, kind: Role}, {kind: ResourceQuota}]\n  adopt: true\n")).await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: escalate, namespace: t1}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: Role, name: reader}\n  destinations: [{namespace: t1, name: everything, patches: [{merge: {rules: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]}}]}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: quota, namespace: t1}\nspec:\n  source: {kind: ResourceQuota, name: limits}\n  onConflict: adopt\n  destinations: [{namespace: t1, name: other, patches: [{merge: {spec: {hard: {pods: \"100\"}}}}]}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: t1, name: settings-copy}]\n").await;
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(env.client().expect("client"), "t1");
    let before = quotas.get("other").await.expect("the admins' quota");
    let running = start(&env);
    let t1: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");

    // The positive control: what her ServiceAccount may write is written, as it.
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "t1");
    eventually("her ConfigMap copied", T, || async {
        cms.get_opt("settings-copy").await.ok()?
    })
    .await;
    // (Its line may be written after the copy is read.)
    let created = eventually("the copy's create in the audit log", T, || async {
        env.audit().expect("audit log").into_iter().find(|e| {
            e.verb == "create" && e.resource() == "configmaps" && e.name() == "settings-copy"
        })
    })
    .await;
    assert_eq!(
        created.acting_user(),
        copier("t1"),
        "written as her ServiceAccount"
    );

    // Her Role with every right: the apiserver's own escalation check refuses her copier.
    let (state, message) = eventually("the Role copy refused by RBAC", T, || async {
        destination(&t1, "escalate", "t1")
            .await
            .filter(|(s, _)| *s == CopyState::Error)
    })
    .await;
    assert!(
        message.contains("attempting to grant RBAC permissions not currently held")
            && message.contains(&copier("t1"))
            && message.contains("grant it the rights it lacks"),
        "the apiserver's escalation check, in words she can act on: {message}"
    );
    let synced = synced_now(&t1, "escalate").await;
    assert_eq!(synced.status, "False");
    assert!(
        synced.message.contains("RBAC refuses"),
        "{}",
        synced.message
    );
    let roles: Api<k8s_openapi::api::rbac::v1::Role> =
        Api::namespaced(env.client().expect("client"), "t1");
    assert!(roles.get_opt("everything").await.expect("get").is_none());

    // The admins' quota: her copier may not update it, so it is neither adopted nor loosened.
    let (state_q, message_q) = eventually("the quota adoption refused by RBAC", T, || async {
        destination(&t1, "quota", "t1")
            .await
            .filter(|(s, _)| *s == CopyState::Error)
    })
    .await;
    assert_eq!(state_q, CopyState::Error);
    assert!(message_q.contains("forbidden"), "{message_q}");
    let after = quotas.get("other").await.expect("the admins' quota");
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "untouched"
    );
    assert_eq!(state, CopyState::Error);
    let tina = Cluster::new("tina", env.client_as("tina").expect("tina"));
    assert!(
        !tina
            .may("create", "", "pods", Some("t1"))
            .await
            .expect("review"),
        "she still may not create Pods"
    );
    // Every write the fan-out sent (its field manager) acted as her ServiceAccount: the
    // copy, the refused Role, the refused adoption.
    let sent: Vec<_> = env
        .audit()
        .expect("audit log")
        .into_iter()
        .filter(|e| {
            e.is_write()
                && (e.request_uri.contains("fieldManager=kubesync&")
                    || e.request_uri.ends_with("fieldManager=kubesync"))
        })
        .collect();
    for resource in ["configmaps", "roles", "resourcequotas"] {
        assert!(
            sent.iter().any(|e| e.resource() == resource),
            "a write of {resource} in the audit log"
        );
    }
    for e in &sent {
        assert_eq!(
            e.acting_user(),
            copier("t1"),
            "{} {} {}",
            e.verb,
            e.resource(),
            e.name()
        );
    }
    running.stop().await;
}

/// An untrusted ObjectSync that names no ServiceAccount, in an install that sets no default,
/// is refused with what to do; one whose ServiceAccount may not read the source is refused
/// before anything is copied; a ClusterObjectSync may not name one.
#[tokio::test]
async fn an_objectsync_without_a_service_account_or_one_that_may_not_read_is_refused() {
    let (env, _) = tenant_cluster("no-identity").await;
    apply(&env, "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: t1}\nstringData: {password: hunter2}\n").await;
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await;
    // `reader` may read ConfigMaps in t1, not Secrets, and write nothing.
    env.grant(
        "system:serviceaccount:t1:reader",
        Some("t1"),
        "reader",
        vec![rule(&[""], &["configmaps"], &["get", "list", "watch"])],
    )
    .await
    .expect("grant");
    // She may use `reader` (the admission policy asks): what it may read is the question here.
    env.grant(
        "tina",
        Some("t1"),
        "use-reader",
        vec![PolicyRule {
            resource_names: Some(vec!["reader".into()]),
            ..rule(&[""], &["serviceaccounts"], &["impersonate"])
        }],
    )
    .await
    .expect("grant");
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: nobody, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: t1, name: nobody}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: secret, namespace: t1}\nspec:\n  serviceAccountName: reader\n  source: {kind: Secret, name: db}\n  destinations: [{namespace: t1, name: secret-copy}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: readable, namespace: t1}\nspec:\n  serviceAccountName: reader\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: t1, name: readable}]\n").await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: named}\nspec:\n  serviceAccountName: reader\n  source: {kind: ConfigMap, namespace: t1, name: settings}\n  destinations: [{namespace: t1, name: named}]\n").await;
    // The install's policy without a default ServiceAccount.
    let running = start_operator(
        Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            policy: ObjectSyncPolicy {
                default_service_account: None,
                ..tenant_policy()
            },
            ..Default::default()
        },
    );
    let t1: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let (status, reason, message) = verdict(&t1, "nobody").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ServiceAccountRequired")
    );
    assert!(
        message.contains("spec.serviceAccountName")
            && message.contains("--default-service-account"),
        "{message}"
    );
    let (status, reason, message) = verdict(&t1, "secret").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "SourceForbidden"),
        "{message}"
    );
    assert!(
        message.contains("ServiceAccount t1/reader") && message.contains("get on secrets"),
        "{message}"
    );
    // Positive control: the source it may read passes the review (its copy is then refused
    // by RBAC, `reader` may write nothing).
    let (state, message) = eventually("readable: its write refused by RBAC", T, || async {
        destination(&t1, "readable", "t1")
            .await
            .filter(|(s, _)| *s == CopyState::Error)
    })
    .await;
    assert_eq!(state, CopyState::Error);
    assert!(
        message.contains("system:serviceaccount:t1:reader"),
        "{message}"
    );
    let cluster_syncs: Api<kubesync_cli::crd::ClusterObjectSync> =
        Api::all(env.client().expect("client"));
    let named = eventually("the ClusterObjectSync's verdict", T, || async {
        let os = cluster_syncs.get_opt("named").await.ok()??;
        ready_condition(&os.status?.conditions).filter(|r| r.0 == "False")
    })
    .await;
    assert_eq!(named.1, "InvalidSpec");
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), "t1");
    assert!(secrets.get_opt("secret-copy").await.expect("get").is_none());
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "t1");
    for name in ["nobody", "readable", "named"] {
        assert!(cms.get_opt(name).await.expect("get").is_none(), "{name}");
    }
    running.stop().await;
}

/// A copy never carries authority: what an untrusted ObjectSync writes into a copy can never
/// later act, under `--compat`, as a declaration or consent of the namespace it lands in.
/// Her source's replicator annotations do not reach the copy, a patch adding one is refused,
/// and the copy released when she deletes her ObjectSync (`deletionPolicy: Orphan`) keeps
/// none. Without it, the released copy pushed into a namespace that consented to nothing.
#[tokio::test]
async fn a_copy_never_carries_another_copiers_declaration_even_once_released() {
    let (env, _) = tenant_cluster("laundering").await;
    apply(
        &env,
        &grant_yaml(
            "secrets-from-t1",
            "victim",
            "{namespace: t1}",
            "  kinds: [{kind: Secret}]\n",
        ),
    )
    .await;
    as_tina(&env, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: payload\n  namespace: t1\n  annotations: {replicator.v1.mittwald.de/replicate-to: quiet, note: kept}\nstringData: {v: pwned}\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: launder, namespace: t1}\nspec:\n  source: {kind: Secret, name: payload}\n  deletionPolicy: Orphan\n  destinations: [{namespace: victim}]\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: patched, namespace: t1}\nspec:\n  source: {kind: Secret, name: payload}\n  destinations: [{namespace: victim, name: patched, patches: [{merge: {metadata: {annotations: {reflector.v1.k8s.emberstack.com/reflection-auto-enabled: \"true\"}}}}]}]\n").await;
    let running = start_operator(
        Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            policy: tenant_policy(),
            compat: vec![
                kubesync_cli::compat::Tool::Reflector,
                kubesync_cli::compat::Tool::Replicator,
            ],
            ..Default::default()
        },
    );
    let t1: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let (state, message) = eventually("the patch refused", T, || async {
        destination(&t1, "patched", "victim")
            .await
            .filter(|(s, _)| *s == CopyState::Error)
    })
    .await;
    assert_eq!(state, CopyState::Error);
    assert!(message.contains("declaration or consent"), "{message}");
    let victim: Api<Secret> = Api::namespaced(env.client().expect("client"), "victim");
    let copy = eventually("the copy in victim", T, || async {
        victim.get_opt("payload").await.ok()?
    })
    .await;
    let tool_keys = |s: &Secret| -> Vec<String> {
        s.metadata
            .annotations
            .iter()
            .chain(s.metadata.labels.iter())
            .flatten()
            .map(|(k, _)| k.clone())
            .filter(|k| k.contains("mittwald") || k.contains("emberstack"))
            .collect()
    };
    assert_eq!(tool_keys(&copy), Vec::<String>::new(), "none copied");
    assert_eq!(
        copy.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("note"))
            .map(String::as_str),
        Some("kept"),
        "her other annotations are copied (the positive control)"
    );
    assert!(victim.get_opt("patched").await.expect("get").is_none());
    // Released: kept without kubesync's marks, and without any tool's annotation.
    t1.delete("launder", &DeleteParams::default())
        .await
        .expect("delete");
    let released = eventually("the copy released", T, || async {
        let s = victim.get_opt("payload").await.ok()??;
        let marked = s
            .metadata
            .labels
            .iter()
            .flatten()
            .any(|(k, _)| k.starts_with("kubesync.io/"));
        (!marked).then_some(s)
    })
    .await;
    assert_eq!(tool_keys(&released), Vec::<String>::new());
    running.stop().await;
}

/// Marks bound to their writer: a copy mark forged by a tenant, naming the uid of a declaration
/// this operator cannot see (one in another cluster, a fleet manager that writes into this
/// one), starts a clean-up of that uid here — which never removes the copies that declaration
/// made (they carry its reference too), nor, kubesync having no record of making it, the
/// forged object itself: outside the trusted namespaces it is left in place, and the operator
/// says so. The operator runs as a binary whose log is the witness, with no namespace of its
/// own to keep records in (the clean-up then reads the marks, and must still delete nothing).
/// Without the first rule, the local operator deleted the fleet's copies in every namespace.
#[tokio::test]
async fn a_forged_mark_naming_another_clusters_declaration_deletes_none_of_its_copies() {
    let (env, _) = tenant_cluster("forged-mark").await;
    let fleet_uid = "5d1f0b2e-6c3a-4f7e-9a41-0c2b8e7d9f10";
    // The copies a fleet manager's ObjectSync apps/fleet-sync wrote into this cluster.
    for ns in ["victim", "quiet"] {
        apply(&env, &format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: fleet-copy\n  namespace: {ns}\n  labels: {{kubesync.io/managed-by: {fleet_uid}}}\n  annotations: {{kubesync.io/owner: local/apps/fleet-sync, kubesync.io/source: core/Secret/apps/fleet, kubesync.io/source-version: \"7\"}}\nstringData: {{v: fleet}}\n")).await;
    }
    let secrets = |ns: &str| -> Api<Secret> { Api::namespaced(env.client().expect("client"), ns) };
    let before = [
        secrets("victim").get("fleet-copy").await.expect("copy"),
        secrets("quiet").get("fleet-copy").await.expect("copy"),
    ];
    // Her forgery: an annotation-declared copy of a source that is gone, with the fleet's uid
    // (and, as both marks are needed to be any declaration's copy, the gone source's reference).
    as_tina(&env, &format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: forged\n  namespace: t1\n  labels: {{kubesync.io/managed-by: {fleet_uid}, kubesync.io/declared-by: annotations}}\n  annotations: {{kubesync.io/source: core/Secret/t1/gone, kubesync.io/owner: \"local/t1/gone (Secret annotations)\"}}\nstringData: {{v: x}}\n")).await;
    let forged = secrets("t1").get("forged").await.expect("hers");
    let log = std::env::temp_dir().join(format!("kubesync-forged-mark-{}.log", std::process::id()));
    let _operator = RunningBinary(
        std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().expect("kubeconfig"))
            .args(["--telemetry-address", "none", "--metrics-address", "none"])
            .args(["--trusted-namespace", "kubesync-system"])
            .args([
                "--default-service-account",
                COPIER,
                "--compat",
                "replicator",
            ])
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .env_remove("POD_NAMESPACE")
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("run kubesync"),
    );
    // The witness that the clean-up of that uid ran: it says it left the forged object.
    eventually("the clean-up of the forged uid ran", T, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains("left local/t1/forged in place: kubesync has no record of making it")
            .then_some(())
    })
    .await;
    for (old, ns) in before.iter().zip(["victim", "quiet"]) {
        let now = secrets(ns).get_opt("fleet-copy").await.expect("get");
        let now = now.unwrap_or_else(|| panic!("the fleet's copy in {ns} was deleted"));
        assert_eq!(
            (&now.metadata.uid, &now.metadata.resource_version),
            (&old.metadata.uid, &old.metadata.resource_version),
            "the fleet's copy in {ns} untouched"
        );
    }
    let still = secrets("t1")
        .get("forged")
        .await
        .expect("hers, left in place");
    assert_eq!(still.metadata.uid, forged.metadata.uid);
}

/// The ground of the forged-mark attacks: Tina may patch (not delete) the Deployments of t1,
/// among them the admins' `web`; her copier may write them; t1 admits Deployments; her
/// ObjectSync `mine` (not started yet) copies `src` to `src-copy`.
async fn her_deployments(name: &str) -> TestEnv {
    let (env, _) = tenant_cluster(name).await;
    let deployments = &["apps"];
    env.grant(
        "tina",
        Some("t1"),
        "deployments",
        vec![rule(
            deployments,
            &["deployments"],
            &["get", "list", "watch", "patch"],
        )],
    )
    .await
    .expect("grant");
    env.grant(
        &copier("t1"),
        Some("t1"),
        "deployments",
        vec![rule(
            deployments,
            &["deployments"],
            &[
                "get", "list", "watch", "create", "update", "patch", "delete",
            ],
        )],
    )
    .await
    .expect("grant");
    apply(
        &env,
        &grant_yaml(
            "deployments",
            "t1",
            "{namespace: t1}",
            "  kinds: [{group: apps, kind: Deployment}]\n",
        ),
    )
    .await;
    let deployment = |name: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: t1}}\nspec:\n  replicas: 0\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: app, image: example.invalid/app}}]}}\n"
        )
    };
    apply(&env, &deployment("web")).await;
    apply(&env, &deployment("src")).await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: mine, namespace: t1}\nspec:\n  source: {group: apps, kind: Deployment, name: src}\n  destinations: [{namespace: t1, name: src-copy}]\n").await;
    env
}

/// Attack 4 of the third round: a tenant who may patch (not delete) her namespace's
/// Deployments labels the admins' Deployment `web` with the uid of her own ObjectSync — one
/// mark, a label anyone who may patch it can add. kubesync's copies carry both marks (that
/// uid and the declaration's reference); an object with one is someone else's, so kubesync
/// never deletes it with its own rights. The witness that the plan saw the forgery: two repairs
/// of her real copy, each a reconcile after the forged label reached the same watch (the copies'
/// of the kind), the second one begun after the first was carried out. Without the second
/// mark being required, `web` was deleted by the first.
#[tokio::test]
async fn one_forged_mark_never_makes_kubesync_delete_what_she_may_only_patch() {
    let env = her_deployments("one-mark").await;
    let running = start(&env);
    let apps: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client().expect("client"), "t1");
    let tinas: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client_as("tina").expect("tina"), "t1");
    eventually("her copy", T, || async {
        apps.get_opt("src-copy").await.ok()?
    })
    .await;
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let uid = syncs
        .get("mine")
        .await
        .expect("mine")
        .metadata
        .uid
        .expect("uid");
    let before = apps.get("web").await.expect("the admins' Deployment");
    let label = serde_json::json!({"metadata": {"labels": {"kubesync.io/managed-by": uid}}});
    tinas
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&label),
        )
        .await
        .expect("she may patch it");
    for replicas in [3, 2] {
        let drift = serde_json::json!({"spec": {"replicas": replicas}});
        tinas
            .patch(
                "src-copy",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&drift),
            )
            .await
            .expect("she may patch her copy");
        eventually(
            &format!("her copy repaired from {replicas} replicas"),
            T,
            || async {
                let copy = apps.get("src-copy").await.ok()?;
                (copy.spec.replicas == Some(0)).then_some(())
            },
        )
        .await;
    }
    let web = apps.get_opt("web").await.expect("get");
    let web = web.expect("the admins' Deployment was deleted");
    assert_eq!(web.metadata.uid, before.metadata.uid, "never deleted");
    assert!(
        web.metadata.deletion_timestamp.is_none(),
        "never being deleted"
    );
    running.assert_no_panic();
    running.stop().await;
}

/// Attack 4 of the third round, with both marks: she writes her declaration's uid and
/// reference onto the admins' Deployment, which she may patch but not delete, then deletes her
/// declaration. kubesync removes what its record of the copies it made holds — her real copy —
/// and leaves the admins' Deployment as it is; the record, kept in the declaration's status
/// (which she may not write), is read back after a restart. Before, every object with both
/// marks was the declaration's copy, deleted with kubesync's rights.
#[tokio::test]
async fn both_forged_marks_never_make_kubesync_delete_what_she_may_only_patch() {
    let env = her_deployments("both-marks").await;
    let running = start(&env);
    let apps: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client().expect("client"), "t1");
    let tinas: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(env.client_as("tina").expect("tina"), "t1");
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let copy = eventually("her copy, recorded", T, || async {
        let copy = apps.get_opt("src-copy").await.ok()??;
        let os = syncs.get("mine").await.ok()?;
        let record = os.status?.record?;
        (record.copies == 1 && record.open_since.is_none()).then_some(copy)
    })
    .await;
    running.assert_no_panic();
    running.stop().await;
    // Her roles grant no objectsyncs/status: the record is not hers to write.
    let her_syncs: Api<ObjectSync> = Api::namespaced(env.client_as("tina").expect("tina"), "t1");
    let forged_record = serde_json::json!({"status": {"record": {"copies": 0, "made": ""}}});
    let refused = her_syncs
        .patch_status(
            "mine",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&forged_record),
        )
        .await
        .expect_err("she may not write the status");
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403),
        "{refused}"
    );
    let os = syncs.get("mine").await.expect("mine");
    let uid = os.metadata.uid.clone().expect("uid");
    let before = apps.get("web").await.expect("the admins' Deployment");
    let marks = serde_json::json!({"metadata": {
        "labels": {"kubesync.io/managed-by": uid},
        "annotations": {"kubesync.io/owner": "local/t1/mine", "kubesync.io/source": "apps/Deployment/t1/src"},
    }});
    tinas
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&marks),
        )
        .await
        .expect("she may patch it");
    let running = start(&env);
    her_syncs
        .delete("mine", &Default::default())
        .await
        .expect("she may delete her ObjectSync");
    eventually(
        "her ObjectSync gone (its finalizer not held)",
        T,
        || async { syncs.get_opt("mine").await.ok()?.is_none().then_some(()) },
    )
    .await;
    let copy_now = apps.get_opt("src-copy").await.expect("get");
    assert!(
        copy_now.is_none_or(
            |c| c.metadata.uid != copy.metadata.uid || c.metadata.deletion_timestamp.is_some()
        ),
        "her copy, which the record holds, is removed"
    );
    let web = apps.get_opt("web").await.expect("get");
    let web = web.expect("the admins' Deployment was deleted");
    assert_eq!(web.metadata.uid, before.metadata.uid, "never deleted");
    assert!(
        web.metadata.deletion_timestamp.is_none(),
        "never being deleted"
    );
    running.assert_no_panic();
    running.stop().await;
}

/// The record of the copies kubesync made is written by the operator alone: under the
/// admission policy of `config/admission` (`kubesync-record-writers`, here naming the user the
/// operator runs as), a tenant whose role grants `objectsyncs/status` — and a cluster admin —
/// is refused any change of `status.record`, while the operator records its copies as before
/// and other status fields stay as RBAC says. Without it, RBAC alone decides: a role that
/// grants the status subresource would let her write a record that makes kubesync delete
/// what she may not.
#[tokio::test]
async fn only_the_operator_changes_the_record_of_the_copies_it_made() {
    const OPERATOR: &str = "kubesync-operator";
    let ns = "kubesync-system";
    let env = operator_cluster_from(
        TestEnv::builder()
            .name("record-writers")
            .user("tina", &[])
            .user(OPERATOR, &["system:masters"]),
        &[ns],
    )
    .await;
    env.grant(
        "tina",
        Some(ns),
        "status-writer",
        vec![
            rule(&["kubesync.io"], &["objectsyncs"], &["get", "list"]),
            rule(
                &["kubesync.io"],
                &["objectsyncs/status"],
                &["get", "patch", "update"],
            ),
        ],
    )
    .await
    .expect("grant");
    install_record_policy(&env, OPERATOR).await;
    // A policy is in force a moment after it is made (seconds, on older releases): until an
    // admin's change of a probe's record is refused.
    apply(&env, &format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: probe, namespace: {ns}}}\nspec:\n  source: {{kind: ConfigMap, name: none}}\n  destinations: [{{namespace: {ns}, name: none}}]\n")).await;
    let admins: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), ns);
    eventually("the record policy in force", T, || async {
        let probe = serde_json::json!({"status": {"record": {"copies": 0, "made": "", "seeded": format!("{:?}", std::time::Instant::now())}}});
        let answer = admins
            .patch_status("probe", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&probe))
            .await;
        matches!(answer, Err(kube::Error::Api(s)) if s.code == 403).then_some(())
    })
    .await;
    apply(&env, &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: src, namespace: {ns}}}\ndata: {{a: \"1\"}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: mine, namespace: {ns}}}\nspec:\n  source: {{kind: ConfigMap, name: src}}\n  destinations: [{{namespace: {ns}, name: copy}}]\n")).await;
    let running = start_operator(
        Cluster::new("local", env.client_as(OPERATOR).expect("operator")),
        OperatorOptions {
            policy: tenant_policy(),
            ..Default::default()
        },
    );
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), ns);
    eventually("the operator's record of its copy", T, || async {
        let record = syncs.get("mine").await.ok()?.status?.record?;
        (record.copies == 1 && record.open_since.is_none()).then_some(())
    })
    .await;
    let forged = serde_json::json!({"status": {"record": {"copies": 2, "made": "AAAAAAAAAAA="}}});
    let patch = |api: Api<ObjectSync>| {
        let forged = forged.clone();
        async move {
            api.patch_status(
                "mine",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&forged),
            )
            .await
        }
    };
    let hers: Api<ObjectSync> = Api::namespaced(env.client_as("tina").expect("tina"), ns);
    for (who, api) in [("tina", hers.clone()), ("a cluster admin", syncs.clone())] {
        match patch(api).await {
            Err(kube::Error::Api(s)) if s.code == 403 => assert!(
                s.message.contains("may not change status.record of mine")
                    && s.message.contains(OPERATOR),
                "{who}: {}",
                s.message
            ),
            other => panic!("{who} changed the record: {other:?}"),
        }
    }
    let record = syncs
        .get("mine")
        .await
        .expect("mine")
        .status
        .expect("status")
        .record;
    assert_eq!(
        record.expect("record").copies,
        1,
        "the operator's record stands"
    );
    // What is not the record stays RBAC's to decide.
    hers.patch_status(
        "mine",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&serde_json::json!({"status": {"total": 7}})),
    )
    .await
    .expect("her role grants the status, and the policy leaves other fields alone");
    running.assert_no_panic();
    running.stop().await;
}

/// The record's three ways of taking a marked object as a declaration's own, on objects that
/// carry both marks but that no reconcile of this process wrote: `open` (its record was
/// opened before the copy was created, as by an operator stopped before it could record it)
/// and `legacy` (reconciled by a kubesync that kept no records) take theirs as their copies
/// and record them; `closed` (a record that does not hold it) leaves it as someone else's.
#[tokio::test]
async fn a_record_takes_as_its_own_only_what_it_holds_or_saw_created_while_open() {
    let (env, _) = tenant_cluster("record-open").await;
    let ns = "kubesync-system";
    apply(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: src, namespace: kubesync-system}\ndata: {a: \"1\"}\n").await;
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), ns);
    let maps: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), ns);
    let opened = k8s_openapi::jiff::Timestamp::now();
    for name in ["open", "legacy", "closed"] {
        apply(&env, &format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  source: {{kind: ConfigMap, name: src}}\n  destinations: [{{namespace: {ns}, name: copy-{name}}}]\n")).await;
        let uid = syncs
            .get(name)
            .await
            .expect("it")
            .metadata
            .uid
            .expect("uid");
        // Both marks, and the content it copies.
        let marked = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("copy-{name}"), "namespace": ns,
                "labels": {"kubesync.io/managed-by": uid},
                "annotations": {"kubesync.io/owner": format!("local/{ns}/{name}"),
                    "kubesync.io/source": format!("core/ConfigMap/{ns}/src")}},
            "data": {"a": "1"}});
        maps.create(
            &PostParams::default(),
            &serde_json::from_value(marked).expect("map"),
        )
        .await
        .expect("the marked object");
        let status = match name {
            "open" => serde_json::json!({"observedGeneration": 1,
                "record": {"copies": 0, "made": "", "openSince": opened.to_string()}}),
            "legacy" => serde_json::json!({"observedGeneration": 1}),
            _ => serde_json::json!({"observedGeneration": 1, "record": {"copies": 0, "made": ""}}),
        };
        syncs
            .patch_status(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&serde_json::json!({"status": status})),
            )
            .await
            .expect("the status an earlier operator left");
    }
    let running = start(&env);
    for name in ["open", "legacy"] {
        eventually(
            &format!("{name}: its copy taken as its own, and recorded"),
            T,
            || async {
                let (state, _) = destination(&syncs, name, ns).await?;
                let record = syncs.get(name).await.ok()?.status?.record?;
                (state == CopyState::Synced && record.copies == 1 && record.open_since.is_none())
                    .then_some(())
            },
        )
        .await;
    }
    let (state, message) = eventually("closed: the object someone else's", T, || async {
        destination(&syncs, "closed", ns)
            .await
            .filter(|(s, _)| *s != CopyState::Pending)
    })
    .await;
    assert_eq!(state, CopyState::Conflict, "{message}");
    assert!(message.contains("kubesync did not create it"), "{message}");
    running.assert_no_panic();
    running.stop().await;
}

/// Attack 5 of the third round: a declaration that calls itself a copy. Her ObjectSync, once
/// it made its copy, is labelled `kubesync.io/managed-by` by her; a copy is never acted on as
/// a declaration, but the label does not keep what it made: its copy is removed before its
/// finalizer goes, and it says why it is no declaration. Before, the finalizer went at once
/// and the copy stayed for good (also once the ObjectSync was deleted).
#[tokio::test]
async fn a_declaration_that_calls_itself_a_copy_keeps_none_of_its_copies() {
    let (env, _) = tenant_cluster("calls-itself-a-copy").await;
    as_tina(&env, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: mine, namespace: t1}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: t1, name: kept}]\n").await;
    let running = start(&env);
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "t1");
    eventually("her copy", T, || async { cms.get_opt("kept").await.ok()? }).await;
    as_tina(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: mine, namespace: t1, labels: {kubesync.io/managed-by: \"not-a-copy\"}}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: t1, name: kept}]\n").await;
    eventually("her copy removed", T, || async {
        cms.get_opt("kept").await.ok()?.is_none().then_some(())
    })
    .await;
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let reason = eventually("it says why it is no declaration", T, || async {
        let os = syncs.get_opt("mine").await.ok()??;
        let finalizers = os.metadata.finalizers.clone().unwrap_or_default();
        let c = os
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (finalizers.is_empty() && c.reason == "CopyNotADeclaration").then_some(c.reason)
    })
    .await;
    assert_eq!(reason, "CopyNotADeclaration");
    running.assert_no_panic();
    running.stop().await;
}

/// Attack 3 of the third round: a pull skipped the source review. `reader` may not read
/// Secrets here (refused `SourceForbidden` locally), but through a RemoteCluster that is this
/// very cluster under another name (a fleet's list applied everywhere) the same Secret was
/// read "from the hub". A pull is now reviewed on the hub, as the identity the hub's
/// RemoteCluster maps the declaration to: refused until that identity may read it there.
#[tokio::test]
async fn a_pull_is_reviewed_on_the_hub_as_the_identity_it_maps_to() {
    let env = operator_cluster_from(
        TestEnv::builder().name("self-hub"),
        &["kubesync-system", "t1"],
    )
    .await;
    apply(
        &env,
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: t1, labels: {tenant: \"yes\"}}\n",
    )
    .await;
    apply(
        &env,
        &serde_json::to_string(&serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "self-kubeconfig", "namespace": "kubesync-system"},
            "stringData": {"kubeconfig": env.kubeconfig_yaml()}
        }))
        .expect("json"),
    )
    .await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: self}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync-system, name: self-kubeconfig}\n  allowedNamespaces: {matchLabels: {tenant: \"yes\"}}\n  identityNamespace: from-self\n").await;
    // `reader` may write Secrets in t1, never read them.
    env.grant(
        "system:serviceaccount:t1:reader",
        Some("t1"),
        "reader",
        vec![
            rule(&[""], &["configmaps"], &["get", "list", "watch"]),
            rule(&[""], &["secrets"], &["create", "update", "patch"]),
        ],
    )
    .await
    .expect("grant");
    apply(&env, "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: t1}\nstringData: {password: hunter2}\n").await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: here, namespace: t1}\nspec:\n  serviceAccountName: reader\n  source: {kind: Secret, name: db}\n  destinations: [{namespace: t1, name: db-here}]\n").await;
    apply(&env, "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: from-hub, namespace: t1}\nspec:\n  serviceAccountName: reader\n  source: {kind: Secret, name: db, cluster: self}\n  destinations: [{namespace: t1, name: db-from-hub}]\n").await;
    let running = start(&env);
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    for name in ["here", "from-hub"] {
        let (status, reason, message) = verdict(&syncs, name).await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "SourceForbidden"),
            "{name}: {message}"
        );
    }
    let (_, _, message) = verdict(&syncs, "from-hub").await;
    assert!(
        message.contains("ServiceAccount from-self/t1.reader"),
        "{message}"
    );
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), "t1");
    for copy in ["db-here", "db-from-hub"] {
        assert!(
            secrets.get_opt(copy).await.expect("get").is_none(),
            "{copy}"
        );
    }
    // The hub's admin lets the mapped identity read it there: the pull goes ahead.
    env.grant(
        "system:serviceaccount:from-self:t1.reader",
        Some("t1"),
        "read-secrets",
        vec![rule(&[""], &["secrets"], &["get", "list", "watch"])],
    )
    .await
    .expect("grant");
    eventually(
        "pulled once the mapped identity may read it",
        T * 2,
        || async { secrets.get_opt("db-from-hub").await.ok()? },
    )
    .await;
    assert!(secrets.get_opt("db-here").await.expect("get").is_none());
    running.assert_no_panic();
    running.stop().await;
}
