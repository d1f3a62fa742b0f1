//! ObjectSync through the operator, on a real control plane.

mod common;

use common::*;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kubesync::Cluster;
use kubesync_cli::crd::{CopyState, ObjectSync};
use kubesync_cli::operator::OperatorOptions;
use kubesync_cli::policy::ObjectSyncPolicy;
use kubesync_testenv::{TestEnv, eventually};

/// An operator with `policy`, trusting every namespace unless the policy names trusted ones:
/// these tests are about fan-out (tenancy.rs tests the rules for untrusted namespaces).
fn start(env: &TestEnv, policy: ObjectSyncPolicy) -> RunningOperator {
    start_operator(
        Cluster::new("local", env.client().expect("client")),
        trusting(policy),
    )
}

/// Options with `policy`, whose trusted namespaces are all namespaces unless it names some.
fn trusting(mut policy: ObjectSyncPolicy) -> OperatorOptions {
    if policy.trusted_namespaces.is_empty() {
        policy.trusted_namespaces = vec!["*".into()];
    }
    OperatorOptions {
        policy,
        ..Default::default()
    }
}

async fn stop(running: RunningOperator) {
    running.stop().await;
}

fn ready(os: &ObjectSync) -> Option<(String, String)> {
    ready_condition(&os.status.as_ref()?.conditions)
}

#[tokio::test]
async fn object_syncs_fan_out_report_and_clean_up_with_security_rules() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let env = operator_cluster("objectsync", true, &["apps", "shared", "team-a", "team-b"]).await;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {color: blue}\n").await.expect("cm");
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\ntype: Opaque\nstringData: {token: t0k3n}\n").await.expect("secret");
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: ca, namespace: shared}\ntype: Opaque\nstringData: {ca.crt: CA}\n").await.expect("secret");
    let operator = start(&env, ObjectSyncPolicy::default());
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");

    // k8s-object-syncer's first example: a ConfigMap to all namespaces.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings-everywhere, namespace: apps}\nspec:\n  source: {group: \"\", kind: ConfigMap, name: settings}\n  destinations:\n  - namespace: \"*\"\n").await.expect("objectsync");
    let namespaces = Api::<Namespace>::all(env.client().expect("client"))
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .len();
    let os = eventually("all destinations in sync", T, || async {
        syncs.get("settings-everywhere").await.ok().filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.total as usize == namespaces - 1 && s.in_sync == s.total)
        })
    })
    .await;
    assert_eq!(ready(&os), Some(("True".into(), "Syncing".into())));
    let status = os.status.expect("status");
    assert!(status.destinations.iter().all(|d| d.state == "Synced"
        && d.last_sync_time.is_some()
        && !d.source_resource_version.is_empty()));
    assert!(
        !status.destinations.iter().any(|d| d.namespace == "apps"),
        "never onto itself"
    );
    let team_a: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "team-a");
    assert_eq!(
        team_a
            .get("settings")
            .await
            .expect("copy")
            .data
            .expect("data")["color"],
        "blue"
    );

    // Example 2: a Secret, renamed at the destination, to named namespaces.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations:\n  - {namespace: team-a, name: registry-credentials}\n  - {namespace: team-b, name: registry-credentials}\n").await.expect("objectsync");
    let team_b: Api<Secret> = Api::namespaced(env.client().expect("client"), "team-b");
    eventually("renamed copy", T, || async {
        team_b.get_opt("registry-credentials").await.expect("get")
    })
    .await;
    let os = eventually("registry status", T, || async {
        syncs.get("registry").await.ok().filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.total == 2 && s.in_sync == 2)
        })
    })
    .await;
    let text = serde_json::to_string(&os.status).expect("json");
    assert!(
        !text.contains("t0k3n") && !text.contains("dDBrM24="),
        "no Secret data in status"
    );

    // Example 3: a CronJob to named namespaces; the version comes from discovery (batch/v1,
    // the only one current apiservers serve).
    env.apply_yaml("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: nightly, namespace: apps}\nspec:\n  schedule: \"0 3 * * *\"\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          restartPolicy: Never\n          containers: [{name: job, image: busybox}]\n").await.expect("cronjob");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: nightly, namespace: apps}\nspec:\n  source: {group: batch, kind: CronJob, name: nightly}\n  destinations: [{namespace: team-a}, {namespace: team-b}]\n").await.expect("objectsync");
    eventually("cronjob copies", T, || async {
        syncs.get("nightly").await.ok().filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.total == 2 && s.in_sync == 2)
        })
    })
    .await;

    // A cross-namespace source is refused by default, saying which rule refused it.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: steal-ca, namespace: apps}\nspec:\n  source: {kind: Secret, name: ca, namespace: shared}\n  destinations:\n  - {namespace: team-a}\n").await.expect("objectsync");
    eventually("refused", T, || async {
        syncs
            .get("steal-ca")
            .await
            .ok()
            .filter(|o| ready(o) == Some(("False".into(), "SourceNamespaceNotAllowed".into())))
    })
    .await;
    let team_a_secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), "team-a");
    assert!(team_a_secrets.get_opt("ca").await.expect("get").is_none());
    // An unknown kind.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: gizmo, namespace: apps}\nspec:\n  source: {group: example.com, kind: Gizmo, name: g}\n  destinations:\n  - {namespace: team-a}\n").await.expect("objectsync");
    eventually("unknown kind", T, || async {
        syncs
            .get("gizmo")
            .await
            .ok()
            .filter(|o| ready(o).is_some_and(|r| r.1 == "ResourceNotFound"))
    })
    .await;

    // Invalid specs: an unknown selector operator, no destinations, a cluster-scoped kind.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: bad-selector, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations:\n  - namespaceSelector: {matchExpressions: [{key: team, operator: Near}]}\n").await.expect("objectsync");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: nowhere, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations: []\n").await.expect("objectsync");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: cluster-scoped, namespace: apps}\nspec:\n  source: {kind: Namespace, name: apps}\n  destinations: [{namespace: team-a}]\n").await.expect("objectsync");
    for (name, needle) in [
        ("bad-selector", "Near"),
        ("nowhere", "destinations"),
        ("cluster-scoped", "cluster-scoped"),
    ] {
        let os = eventually(name, T, || async {
            syncs
                .get(name)
                .await
                .ok()
                .filter(|o| ready(o).is_some_and(|r| r.1 == "InvalidSpec"))
        })
        .await;
        let message = &os.status.expect("status").conditions[0].message;
        assert!(message.contains(needle), "{name}: {message}");
    }

    // Deleting an ObjectSync deletes its copies, then the ObjectSync goes.
    syncs
        .delete("settings-everywhere", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("ObjectSync gone", T, || async {
        syncs
            .get_opt("settings-everywhere")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        team_a.get_opt("settings").await.expect("get").is_none(),
        "copies deleted"
    );
    stop(operator).await;

    // The operator allows the shared namespace as a source: the same ObjectSync now works.
    let operator = start(
        &env,
        ObjectSyncPolicy {
            source_namespaces: vec!["shared".into()],
            ..Default::default()
        },
    );
    eventually("allowed by the flag", T, || async {
        team_a_secrets.get_opt("ca").await.expect("get")
    })
    .await;
    let ca = team_a_secrets.get("ca").await.expect("ca");
    assert_eq!(
        ca.annotations()
            .get("kubesync.io/owner")
            .map(String::as_str),
        Some("local/apps/steal-ca")
    );
    stop(operator).await;
}

#[tokio::test]
async fn forbidden_writes_become_conditions_watches_are_shared_and_restarts_clean_up() {
    use k8s_openapi::api::rbac::v1::PolicyRule;
    let env = operator_cluster_from(
        TestEnv::builder()
            .name("objectsync-rbac")
            .user("kubesync", &[]),
        &["apps", "open", "locked"],
    )
    .await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: apps}\ntype: Opaque\nstringData: {k: v}\n").await.expect("secret");
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    // The operator may read everywhere but write Secrets only in "apps" and "open".
    env.grant(
        "kubesync",
        None,
        "read",
        vec![
            rule(
                &["kubesync.io"],
                &["*"],
                &["get", "list", "watch", "update", "patch"],
            ),
            rule(
                &[""],
                &["namespaces", "secrets", "configmaps"],
                &["get", "list", "watch"],
            ),
        ],
    )
    .await
    .expect("grant");
    for ns in ["apps", "open"] {
        env.grant(
            "kubesync",
            Some(ns),
            "write",
            vec![rule(
                &[""],
                &["secrets"],
                &["create", "update", "patch", "delete"],
            )],
        )
        .await
        .expect("grant");
    }
    let as_operator = Cluster::new("local", env.client_as("kubesync").expect("client"));
    let start_op = || start_operator(as_operator.clone(), trusting(ObjectSyncPolicy::default()));
    let handle = start_op();
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: one, namespace: apps}\nspec:\n  source: {kind: Secret, name: s}\n  destinations: [{namespace: open}, {namespace: locked}]\n").await.expect("objectsync");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: two, namespace: apps}\nspec:\n  source: {kind: Secret, name: s}\n  destinations: [{namespace: open, name: s2}]\n").await.expect("objectsync");
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    let os = eventually("forbidden reported", T, || async {
        syncs.get("one").await.ok().filter(|o| {
            o.status.as_ref().is_some_and(|s| {
                s.destinations
                    .iter()
                    .any(|d| d.namespace == "locked" && d.state == "Error")
            })
        })
    })
    .await;
    let status = os.status.expect("status");
    let locked = status
        .destinations
        .iter()
        .find(|d| d.namespace == "locked")
        .expect("locked");
    assert!(
        locked.message.contains("forbidden"),
        "the API's message: {}",
        locked.message
    );
    let synced = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Synced")
        .expect("Synced");
    assert_eq!(synced.status, "False");
    assert!(synced.message.contains("forbidden"), "{}", synced.message);
    eventually("second in sync", T, || async {
        syncs
            .get("two")
            .await
            .ok()
            .filter(|o| o.status.as_ref().is_some_and(|s| s.in_sync == 1))
    })
    .await;
    // Two ObjectSyncs of one type share the watches of this cluster's Secrets (kubesync's
    // copies in full, the others as metadata) and Namespaces, and of their one source.
    assert_eq!(handle.operator.fan_out_watches(), 3 + 1);

    // The operator stops; the source is deleted while it is down; a restarted operator
    // deletes the copies (ownership is read from their marks).
    stop(handle).await;
    Api::<Secret>::namespaced(env.client().expect("client"), "apps")
        .delete("s", &DeleteParams::default())
        .await
        .expect("delete source");
    let handle = start_op();
    let open: Api<Secret> = Api::namespaced(env.client().expect("client"), "open");
    eventually("copies gone after the restart", T, || async {
        (open.get_opt("s").await.expect("get").is_none()
            && open.get_opt("s2").await.expect("get").is_none())
        .then_some(())
    })
    .await;
    let os = eventually("source reported missing", T, || async {
        syncs
            .get("one")
            .await
            .ok()
            .filter(|o| ready(o).is_some_and(|r| r.1 == "SourceNotFound"))
    })
    .await;
    assert_eq!(ready(&os).map(|r| r.0), Some("False".into()));

    // The last ObjectSyncs go: their watches stop.
    syncs
        .delete("one", &DeleteParams::default())
        .await
        .expect("delete");
    syncs
        .delete("two", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("ObjectSyncs gone", T, || async {
        syncs
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    eventually("watches stopped", T, || async {
        (handle.operator.fan_out_watches() == 0).then_some(())
    })
    .await;
    stop(handle).await;
}

#[tokio::test]
async fn a_custom_resource_to_a_remote_cluster_and_an_unwatchable_source() {
    use kubesync_testenv::fixtures::WIDGET_CRD;
    let (local, remote) = tokio::join!(
        TestEnv::builder()
            .name("os-local")
            .user("limited", &[])
            .start(),
        TestEnv::builder().name("os-remote").start()
    );
    let (local, remote) = (local.expect("local"), remote.expect("remote"));
    local
        .install_crds(&kubesync_cli::crd::crds_yaml().expect("crds"))
        .await
        .expect("crds");
    for env in [&local, &remote] {
        env.install_crds(WIDGET_CRD).await.expect("widget crd");
    }
    local.create_namespace("apps").await.expect("ns");
    local.create_namespace("kubesync").await.expect("ns");
    for ns in ["edge-1", "edge-2", "core"] {
        remote.create_namespace(ns).await.expect("ns");
    }
    remote
        .apply_yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: edge-1, labels: {tier: edge}}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: edge-2, labels: {tier: edge}}\n")
        .await
        .expect("labels");
    add_remote_cluster(&local, &remote, "eu", "kubesync").await;
    local.apply_yaml("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: defaults, namespace: apps}\nspec: {size: 3}\n").await.expect("widget");
    let handle = start(&local, ObjectSyncPolicy::default());

    // Example 4 (a custom resource) into labelled namespaces of a RemoteCluster.
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: widget-defaults, namespace: apps}\nspec:\n  source: {group: demo.kubesync.io, kind: Widget, name: defaults}\n  destinations:\n  - cluster: eu\n    namespaceSelector: {matchLabels: {tier: edge}}\n").await.expect("objectsync");
    let syncs: Api<ObjectSync> = Api::namespaced(local.client().expect("client"), "apps");
    let os = eventually("copies in the remote cluster", T, || async {
        syncs.get("widget-defaults").await.ok().filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.total == 2 && s.in_sync == 2)
        })
    })
    .await;
    let st = os.status.expect("status");
    assert!(
        st.destinations
            .iter()
            .all(|d| d.cluster == "eu" && d.namespace.starts_with("edge-")),
        "{:?}",
        st.destinations
    );
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
        "widgets",
    );
    let remote_widget = Api::<kube::api::DynamicObject>::namespaced_with(
        remote.client().expect("client"),
        "edge-1",
        &ar,
    )
    .get("defaults")
    .await
    .expect("copy");
    assert_eq!(remote_widget.data["spec"]["size"], 3);

    // A second RemoteCluster of the same cluster works (e.g. another identity there), and
    // says which apiserver it reaches; a declaration writing through both names is refused:
    // its copies through one would be strays through the other, removed and made again
    // without end.
    add_remote_cluster(&local, &remote, "eu-again", "kubesync").await;
    let remote_clusters: Api<kubesync_cli::crd::RemoteCluster> =
        Api::all(local.client().expect("client"));
    let servers = eventually("both RemoteClusters connected", T, || async {
        let mut servers = Vec::new();
        for name in ["eu", "eu-again"] {
            let status = remote_clusters.get(name).await.ok()?.status?;
            (ready_condition(&status.conditions)? == ("True".into(), "Connected".into()))
                .then_some(())?;
            servers.push(status.server?);
        }
        Some(servers)
    })
    .await;
    assert_eq!(servers[0], servers[1]);
    // Through both names at once, a declaration is refused before anything is written.
    local.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: twice, namespace: apps}\ndata: {a: b}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: twice, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: twice}\n  destinations:\n  - cluster: eu\n    namespaceSelector: {matchLabels: {tier: edge}}\n  - {cluster: eu-again, namespace: core}\n").await.expect("objectsync");
    let twice = eventually(
        "the ObjectSync through the duplicate refused",
        T,
        || async {
            syncs.get("twice").await.ok().filter(|o| {
                ready(o).is_some_and(|r| r == ("False".into(), "DuplicateCluster".into()))
            })
        },
    )
    .await;
    let twice = twice.status.expect("status");
    assert!(twice.destinations.is_empty());
    let message = &twice
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready")
        .message;
    assert!(
        message.contains("eu and eu-again") && message.contains(&servers[0]),
        "{message}"
    );
    assert!(for_people(message), "{message}");
    for ns in ["edge-1", "edge-2", "core"] {
        let copies: Api<ConfigMap> = Api::namespaced(remote.client().expect("client"), ns);
        assert!(
            copies.get_opt("twice").await.expect("get").is_none(),
            "{ns}"
        );
    }
    stop(handle).await;

    // An operator that may not list Widgets says why, with the API's message.
    use k8s_openapi::api::rbac::v1::PolicyRule;
    local
        .grant(
            "limited",
            None,
            "no-widgets",
            vec![
                PolicyRule {
                    api_groups: Some(vec!["kubesync.io".into()]),
                    resources: Some(vec!["*".into()]),
                    verbs: vec!["*".into()],
                    ..Default::default()
                },
                PolicyRule {
                    api_groups: Some(vec!["".into()]),
                    resources: Some(vec!["namespaces".into(), "secrets".into()]),
                    verbs: vec!["get".into(), "list".into(), "watch".into()],
                    ..Default::default()
                },
            ],
        )
        .await
        .expect("grant");
    let limited = start_operator(
        Cluster::new("local", local.client_as("limited").expect("client")),
        trusting(ObjectSyncPolicy::default()),
    );
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: cannot-watch, namespace: apps}\nspec:\n  source: {group: demo.kubesync.io, kind: Widget, name: defaults}\n  destinations: [{namespace: kubesync}]\n").await.expect("objectsync");
    let os = eventually("watch failure reported", T, || async {
        syncs
            .get("cannot-watch")
            .await
            .ok()
            .filter(|o| ready(o).is_some_and(|r| r.1 == "WatchFailed"))
    })
    .await;
    let msg = os
        .status
        .expect("status")
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("ready")
        .message
        .clone();
    assert!(msg.contains("forbidden"), "{msg}");
    limited.stop().await;
}

/// Cleanup never deletes or modifies someone else's object: a foreign Secret at one of an
/// ObjectSync's destinations survives its source's deletion, a restart of the operator, and
/// the ObjectSync's deletion, unchanged (same uid and resourceVersion), while kubesync's own
/// copies go.
#[tokio::test]
async fn cleanup_never_touches_a_foreign_object_at_a_destination() {
    let env = operator_cluster("foreign", false, &["apps", "team-a", "team-b"]).await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\ntype: Opaque\nstringData: {token: ours}\n").await.expect("source");
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: team-b}\ntype: Opaque\nstringData: {token: theirs}\n").await.expect("foreign");
    let team_b: Api<Secret> = Api::namespaced(env.client().expect("client"), "team-b");
    let team_a: Api<Secret> = Api::namespaced(env.client().expect("client"), "team-a");
    let foreign = team_b.get("registry").await.expect("foreign");
    let unchanged = |s: &Secret| {
        s.metadata.uid == foreign.metadata.uid
            && s.metadata.resource_version == foreign.metadata.resource_version
    };
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    let operator = start(&env, ObjectSyncPolicy::default());
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations: [{namespace: team-a}, {namespace: team-b}]\n").await.expect("objectsync");
    eventually("a copy in team-a, a conflict in team-b", T, || async {
        let os = syncs.get("registry").await.ok()?;
        let st = os.status?;
        let conflict = st
            .destinations
            .iter()
            .any(|d| d.namespace == "team-b" && d.state == "Conflict");
        (conflict && team_a.get_opt("registry").await.ok()?.is_some()).then_some(())
    })
    .await;

    // The source goes: kubesync's copy goes, the foreign Secret stays as it was.
    Api::<Secret>::namespaced(env.client().expect("client"), "apps")
        .delete("registry", &DeleteParams::default())
        .await
        .expect("delete source");
    eventually("the copy in team-a deleted", T, || async {
        team_a
            .get_opt("registry")
            .await
            .ok()
            .filter(|s| s.is_none())
    })
    .await;
    assert!(unchanged(&team_b.get("registry").await.expect("foreign")));

    // A restart (ownership is read from marks, not memory), then the source returns and the
    // ObjectSync is deleted: its copy goes, the foreign Secret stays.
    stop(operator).await;
    let operator = start(&env, ObjectSyncPolicy::default());
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\ntype: Opaque\nstringData: {token: again}\n").await.expect("source");
    eventually("copied again", T, || async {
        team_a.get_opt("registry").await.ok()?
    })
    .await;
    syncs
        .delete("registry", &DeleteParams::default())
        .await
        .expect("delete objectsync");
    eventually("the ObjectSync and its copy gone", T, || async {
        let os_gone = syncs.get_opt("registry").await.ok()?.is_none();
        let copy_gone = team_a.get_opt("registry").await.ok()?.is_none();
        (os_gone && copy_gone).then_some(())
    })
    .await;
    assert!(
        unchanged(&team_b.get("registry").await.expect("foreign")),
        "the foreign Secret is untouched"
    );
    stop(operator).await;
}

/// No Secret data reaches an ObjectSync's status or its Events, also where a copy fails: a
/// copy the apiserver rejects (422: a patch adds a data key the API refuses, so the
/// message is the API's own text) and a destination taken by someone else's Secret (a
/// Conflict). Neither the value nor its base64 form may appear anywhere kubesync reports.
#[tokio::test]
async fn no_secret_data_in_status_or_events_on_error_paths() {
    use k8s_openapi::api::events::v1::Event;
    const VALUE: &str = "s3cr3t-VALUE";
    const VALUE_B64: &str = "czNjcjN0LVZBTFVF";
    let env = operator_cluster("secretsafe", false, &["apps", "team-a", "team-c"]).await;
    env.apply_yaml(&format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: apps}}\ntype: Opaque\nstringData: {{password: {VALUE}}}\n")).await.expect("source");
    env.apply_yaml(&format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: db, namespace: team-c}}\ntype: Opaque\nstringData: {{password: {VALUE}}}\n")).await.expect("theirs");
    let operator = start(&env, ObjectSyncPolicy::default());
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: db, namespace: apps}\nspec:\n  source: {kind: Secret, name: db}\n  destinations: [{namespace: team-a, patches: [{merge: {data: {\"not a valid key!\": eA==}}}]}, {namespace: team-c}]\n").await.expect("objectsync");
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    let os = eventually("an error and a conflict reported", T, || async {
        syncs.get("db").await.ok().filter(|o| {
            o.status.as_ref().is_some_and(|s| {
                let state = |ns: &str| {
                    s.destinations
                        .iter()
                        .find(|d| d.namespace == ns)
                        .map(|d| d.state.to_string())
                };
                state("team-a").as_deref() == Some("Error")
                    && state("team-c").as_deref() == Some("Conflict")
            })
        })
    })
    .await;
    let status = os.status.expect("status");
    let rejected = status
        .destinations
        .iter()
        .find(|d| d.namespace == "team-a")
        .expect("team-a");
    assert!(
        rejected.message.contains("not a valid key!"),
        "the API's own reason is reported: {}",
        rejected.message
    );
    let events: Api<Event> = Api::namespaced(env.client().expect("client"), "apps");
    let notes = eventually("a Warning event", T, || async {
        let notes: Vec<String> = events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("db"))
            .filter_map(|e| e.note)
            .collect();
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    let reported = format!(
        "{}\n{}",
        serde_json::to_string(&status).expect("json"),
        notes.join("\n")
    );
    for secret in [VALUE, VALUE_B64] {
        assert!(
            !reported.contains(secret),
            "Secret data in what kubesync reports: {reported}"
        );
    }
    stop(operator).await;
}

/// Zero writes when in sync: an operator restarted over ObjectSyncs whose copies and statuses
/// are current reconciles each of them (its gauge shows it decided) and writes nothing —
/// neither copies nor statuses nor finalizers.
#[tokio::test]
async fn a_restarted_operator_writes_nothing_when_everything_is_in_sync() {
    let env = operator_cluster("os-zero", false, &["apps", "team-a", "team-b"]).await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\ntype: Opaque\nstringData: {token: t0k3n}\n").await.expect("secret");
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {color: blue}\n").await.expect("cm");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations: [{namespace: team-a}, {namespace: team-b}]\n").await.expect("objectsync");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: apps}\nspec:\n  source: {group: \"\", kind: ConfigMap, name: settings}\n  destinations: [{namespace: \"*\"}]\n").await.expect("objectsync");
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    let settled = || async {
        for name in ["registry", "settings"] {
            let os = syncs.get(name).await.ok()?;
            let s = os.status.as_ref()?;
            let ready = ready(&os).is_some_and(|r| r.0 == "True");
            (s.total > 0 && s.in_sync == s.total && ready).then_some(())?;
        }
        Some(())
    };
    let first = start(&env, ObjectSyncPolicy::default());
    eventually("all in sync", T, settled).await;
    stop(first).await;
    let versions = |list: Vec<ObjectSync>| {
        list.into_iter()
            .map(|o| (o.name_any(), o.metadata.resource_version))
            .collect::<Vec<_>>()
    };
    let before = versions(syncs.list(&Default::default()).await.expect("list").items);

    let second = start(&env, ObjectSyncPolicy::default());
    // Witness: the new operator has reconciled both ObjectSyncs with its watches listed (each
    // has a gauge, and its fan-out watches run) and has nothing left to do (nothing queued or
    // running): every decision is made.
    eventually("both decided, the operator idle", T, || async {
        let gauges = second.operator.object_sync_gauges();
        let ctx = second.operator.context()?;
        let m = ctx.metrics();
        (gauges.len() == 2
            && gauges.iter().all(|(_, g)| g.ready)
            && second.operator.fan_out_watches() > 0
            && m.reconciles() >= 2
            && m.queued() == 0
            && m.in_flight() == 0)
            .then_some(())
    })
    .await;
    let writes = second.operator.writes_by_component().await;
    assert!(writes.iter().all(|(_, n)| *n == 0), "writes: {writes:?}");
    let after = versions(syncs.list(&Default::default()).await.expect("list").items);
    assert_eq!(before, after, "statuses unchanged");
    stop(second).await;
}

/// `deletionPolicy: Orphan` keeps the copies when the ObjectSync is deleted, and a copy
/// annotated `kubesync.io/orphan-on-delete: "true"` is kept when its source is deleted under
/// the default policy; the other copies go. Both happen while the operator that made the
/// copies is gone: a new operator finds them by their marks, not in memory. A kept copy has
/// its data and none of kubesync's marks.
#[tokio::test]
async fn orphan_policy_and_annotation_keep_copies_across_a_restart() {
    let env = operator_cluster("orphan", false, &["apps", "team-a", "team-b"]).await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: kept, namespace: apps}\ntype: Opaque\nstringData: {token: k}\n").await.expect("secret");
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: mixed, namespace: apps}\ntype: Opaque\nstringData: {token: m}\n").await.expect("secret");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: kept, namespace: apps}\nspec:\n  source: {kind: Secret, name: kept}\n  destinations: [{namespace: team-a}, {namespace: team-b}]\n  deletionPolicy: Orphan\n").await.expect("objectsync");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: mixed, namespace: apps}\nspec:\n  source: {kind: Secret, name: mixed}\n  destinations: [{namespace: team-a}, {namespace: team-b}]\n").await.expect("objectsync");
    let secrets = |ns: &str| Api::<Secret>::namespaced(env.client().expect("client"), ns);
    let first = start(&env, ObjectSyncPolicy::default());
    for name in ["kept", "mixed"] {
        for ns in ["team-a", "team-b"] {
            let api = secrets(ns);
            eventually("copies", T, || async {
                api.get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .filter(|s| s.labels().contains_key("kubesync.io/managed-by"))
            })
            .await;
        }
    }
    stop(first).await;
    // One copy of `mixed` asks to be kept.
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: mixed, namespace: team-a, annotations: {kubesync.io/orphan-on-delete: \"true\"}}\n").await.expect("annotate");
    // While no operator runs: the ObjectSync `kept` is deleted (its finalizer holds it), and
    // the source of `mixed`.
    Api::<ObjectSync>::namespaced(env.client().expect("client"), "apps")
        .delete("kept", &DeleteParams::default())
        .await
        .expect("delete objectsync");
    secrets("apps")
        .delete("mixed", &DeleteParams::default())
        .await
        .expect("delete source");

    let second = start(&env, ObjectSyncPolicy::default());
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    eventually("the orphaning ObjectSync released", T, || async {
        syncs.get_opt("kept").await.ok()?.is_none().then_some(())
    })
    .await;
    let b = secrets("team-b");
    eventually(
        "the unannotated copy of the deleted source goes",
        T,
        || async { b.get_opt("mixed").await.ok()?.is_none().then_some(()) },
    )
    .await;
    let marks = [
        "kubesync.io/owner",
        "kubesync.io/source",
        "kubesync.io/source-resource-version",
    ];
    for (ns, name, token) in [
        ("team-a", "kept", "k"),
        ("team-b", "kept", "k"),
        ("team-a", "mixed", "m"),
    ] {
        let api = secrets(ns);
        let kept = eventually("a kept copy without marks", T, || async {
            api.get_opt(name)
                .await
                .ok()
                .flatten()
                .filter(|s| !s.labels().contains_key("kubesync.io/managed-by"))
        })
        .await;
        assert!(
            marks.iter().all(|m| !kept.annotations().contains_key(*m)),
            "{ns}/{name}: {:?}",
            kept.annotations()
        );
        assert_eq!(
            kept.data
                .as_ref()
                .and_then(|d| d.get("token"))
                .map(|v| v.0.clone()),
            Some(token.as_bytes().to_vec()),
            "{ns}/{name} keeps its data"
        );
    }
    // The ObjectSync `mixed` still exists; its copies are gone or released: nothing remains
    // that it would manage.
    stop(second).await;
}

/// Per-destination patches: each destination's copy is the source after its own patches (a
/// merge patch at one, a JSON patch at another, none at a third); in sync means equal to the
/// patched copy (a later reconcile writes nothing); a patch that would rename the copy is
/// that destination's error alone; an invalid patch refuses the spec with a reason; removing
/// a patch restores the source's values.
#[tokio::test]
async fn per_destination_patches() {
    let env = operator_cluster("patches", false, &["apps", "team-a", "team-b", "team-c"]).await;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: apps}\ndata: {color: blue, size: s}\n").await.expect("cm");
    let with = |patches_a: &str, patches_c: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: cfg, namespace: apps}}\nspec:\n  source: {{group: \"\", kind: ConfigMap, name: cfg}}\n  destinations:\n  - {{namespace: team-a, patches: {patches_a}}}\n  - {{namespace: team-b}}\n  - {{namespace: team-c, patches: {patches_c}}}\n"
        )
    };
    let merge = "[{merge: {data: {color: red, size: null}}}]";
    let json = "[{json: [{op: add, path: /data/region, value: eu}]}]";
    env.apply_yaml(&with(merge, json))
        .await
        .expect("objectsync");
    let operator = start(&env, ObjectSyncPolicy::default());
    let data = |ns: &'static str| {
        let api = Api::<ConfigMap>::namespaced(env.client().expect("client"), ns);
        async move { api.get_opt("cfg").await.ok().flatten().and_then(|c| c.data) }
    };
    let want = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    for (ns, expected) in [
        ("team-a", want(&[("color", "red")])),
        ("team-b", want(&[("color", "blue"), ("size", "s")])),
        (
            "team-c",
            want(&[("color", "blue"), ("size", "s"), ("region", "eu")]),
        ),
    ] {
        eventually(&format!("{ns} patched"), T, || async {
            (data(ns).await.as_ref() == Some(&expected)).then_some(())
        })
        .await;
    }
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    eventually("all in sync", T, || async {
        syncs.get("cfg").await.ok().filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.total == 3 && s.in_sync == 3)
        })
    })
    .await;
    // No write loop: a later reconcile of the same spec writes no copy.
    let copies_written = || async {
        operator
            .operator
            .writes_by_component()
            .await
            .into_iter()
            .find(|(c, _)| *c == "objectsync")
            .map(|(_, n)| n)
            .unwrap_or(0)
    };
    let written = copies_written().await;
    let touched = syncs
        .patch(
            "cfg",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"touched": "1"}}}),
            ),
        )
        .await
        .expect("touch");
    // Witnessed on this ObjectSync's own reconcile, at the version the touch made.
    let key = kubesync::ObjectKey::new(
        "local",
        &kube::core::ApiResource::erase::<ObjectSync>(&()),
        Some("apps".into()),
        "cfg",
    );
    let ctx = operator.operator.context().expect("ctx");
    let rv = touched.resource_version().expect("resourceVersion");
    let seen = reconciled_at(&ctx, &key, &rv).await;
    assert!(!seen.failed, "the reconcile at {rv} succeeded");
    assert_eq!(
        copies_written().await,
        written,
        "a patched copy in sync is not written"
    );

    // A patch that renames the copy: team-c's error, the others unaffected.
    env.apply_yaml(&with(merge, "[{merge: {metadata: {name: other}}}]"))
        .await
        .expect("objectsync");
    let os = eventually("team-c in error", T, || async {
        syncs.get("cfg").await.ok().filter(|o| {
            o.status.as_ref().is_some_and(|s| {
                s.destinations
                    .iter()
                    .any(|d| d.namespace == "team-c" && d.state == "Error")
            })
        })
    })
    .await;
    let status = os.status.expect("status");
    let c = status
        .destinations
        .iter()
        .find(|d| d.namespace == "team-c")
        .expect("c");
    assert!(c.message.contains("may not"), "{}", c.message);
    assert!(
        status
            .destinations
            .iter()
            .filter(|d| d.namespace != "team-c")
            .all(|d| d.state == "Synced")
    );
    assert!(
        Api::<ConfigMap>::namespaced(env.client().expect("client"), "team-c")
            .get_opt("other")
            .await
            .expect("get")
            .is_none()
    );
    // An entry with neither merge nor json: the CRD schema refuses it at admission.
    let refused = env
        .apply_yaml(&with(merge, "[{}]"))
        .await
        .expect_err("refused by the schema");
    assert!(
        refused
            .to_string()
            .contains("a patch gives exactly one of merge and json"),
        "{refused}"
    );
    // A json entry that is no RFC 6902 operation passes the schema: the operator refuses the
    // spec with a reason.
    env.apply_yaml(&with(merge, "[{json: [{op: explode, path: /data/x}]}]"))
        .await
        .expect("objectsync");
    eventually("InvalidPatch", T, || async {
        syncs
            .get("cfg")
            .await
            .ok()
            .filter(|o| ready(o).is_some_and(|r| r == ("False".into(), "InvalidPatch".into())))
    })
    .await;
    // Patches removed: the source's values come back.
    env.apply_yaml(&with("[]", "[]")).await.expect("objectsync");
    for ns in ["team-a", "team-c"] {
        let expected = want(&[("color", "blue"), ("size", "s")]);
        eventually(&format!("{ns} back to the source"), T, || async {
            (data(ns).await.as_ref() == Some(&expected)).then_some(())
        })
        .await;
    }
    stop(operator).await;
}

#[tokio::test]
async fn many_sources_per_object_sync_with_bounded_status_and_conflicts() {
    let env = operator_cluster("many", false, &["certs", "team-a", "team-b"]).await;
    for (name, app) in [("tls-a", "tls"), ("tls-b", "tls"), ("plain", "web")] {
        env.apply_yaml(&format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: certs, labels: {{app: {app}}}}}\ntype: Opaque\nstringData: {{v: {name}}}\n")).await.expect("secret");
    }
    let object_sync = |destinations: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: certs, namespace: certs}}\nspec:\n  source: {{kind: Secret, selector: {{matchLabels: {{app: tls}}}}}}\n  destinations: {destinations}\n"
        )
    };
    env.apply_yaml(&object_sync(
        "[{namespace: team-a, namePrefix: certs-}, {namespace: team-b}]",
    ))
    .await
    .expect("objectsync");
    let operator = start(&env, ObjectSyncPolicy::default());
    let names = |ns: &'static str| {
        let api = Api::<Secret>::namespaced(env.client().expect("client"), ns);
        async move {
            let mut names: Vec<String> = api
                .list(&Default::default())
                .await
                .map(|l| l.items.iter().map(|s| s.name_any()).collect())
                .unwrap_or_default();
            names.sort();
            names
        }
    };
    eventually(
        "every selected Secret copied under its own name",
        T,
        || async {
            (names("team-a").await == ["certs-tls-a", "certs-tls-b"]
                && names("team-b").await == ["tls-a", "tls-b"])
            .then_some(())
        },
    )
    .await;
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "certs");
    let os = eventually("status per destination namespace", T, || async {
        syncs.get("certs").await.ok().filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.in_sync == 2 && s.total == 2)
        })
    })
    .await;
    let status = os.status.clone().expect("status");
    assert_eq!(status.sources, Some(2));
    assert!(status.failures.is_empty());
    for d in &status.destinations {
        assert_eq!(
            (d.name.as_str(), d.sources_in_sync, d.sources_total),
            ("", Some(2), Some(2)),
            "{d:?}"
        );
    }
    let (_, message) = os
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status.clone(), c.message.clone()))
        .expect("ready");
    assert!(
        message.contains("copying 2 sources (selector app=tls in certs)"),
        "{message}"
    );

    // Two sources copied to one name: a Conflict naming both, neither written; the copy there
    // stays as it was; the rest syncs.
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: certs, labels: {app: tls}}\ntype: Opaque\nstringData: {v: a}\n").await.expect("secret");
    env.apply_yaml(&object_sync(
        "[{namespace: team-a, namePrefix: certs-}, {namespace: team-b}, {namespace: team-b, namePrefix: tls-}]",
    ))
    .await
    .expect("objectsync");
    let os = eventually("the shared name in conflict", T, || async {
        syncs.get("certs").await.ok().filter(|o| {
            o.status
                .as_ref()
                .is_some_and(|s| s.failures.iter().any(|f| f.state == "Conflict"))
        })
    })
    .await;
    let status = os.status.expect("status");
    assert_eq!(status.sources, Some(3));
    assert_eq!(status.failures.len(), 1, "{:?}", status.failures);
    let f = &status.failures[0];
    assert_eq!((f.namespace.as_str(), f.name.as_str()), ("team-b", "tls-a"));
    assert!(f.message.contains("a, tls-a"), "{}", f.message);
    let b = status
        .destinations
        .iter()
        .find(|d| d.namespace == "team-b")
        .expect("team-b");
    assert_eq!(
        (b.state, b.sources_in_sync, b.sources_total),
        (CopyState::Conflict, Some(4), Some(5))
    );
    eventually("the other copies", T, || async {
        (names("team-b").await == ["a", "tls-a", "tls-b", "tls-tls-a", "tls-tls-b"]).then_some(())
    })
    .await;
    let kept = Api::<Secret>::namespaced(env.client().expect("client"), "team-b")
        .get("tls-a")
        .await
        .expect("kept");
    assert_eq!(
        kept.data.and_then(|d| d.get("v").cloned()).map(|b| b.0),
        Some(b"tls-a".to_vec()),
        "not overwritten by the other source"
    );

    // Invalid: a rename with a selector, and a source with both a name and a selector.
    env.apply_yaml(&object_sync("[{namespace: team-a, name: one}]"))
        .await
        .expect("objectsync");
    eventually("rename refused", T, || async {
        syncs.get("certs").await.ok().filter(|o| {
            ready(o).is_some_and(|r| r == ("False".into(), "InvalidSpec".into()))
                && o.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.message.contains("namePrefix or nameSuffix"))
                })
        })
    })
    .await;
    assert_eq!(
        names("team-a").await,
        ["certs-a", "certs-tls-a", "certs-tls-b"],
        "a refused spec removes nothing"
    );

    // Back to two destinations; a source deleted and one unlabelled lose their copies, and
    // the ObjectSync's deletion removes the rest; the unselected Secret was never touched.
    env.apply_yaml(&object_sync(
        "[{namespace: team-a, namePrefix: certs-}, {namespace: team-b}]",
    ))
    .await
    .expect("objectsync");
    let plain_rv = Api::<Secret>::namespaced(env.client().expect("client"), "certs")
        .get("plain")
        .await
        .expect("plain")
        .resource_version();
    Api::<Secret>::namespaced(env.client().expect("client"), "certs")
        .delete("tls-b", &DeleteParams::default())
        .await
        .expect("delete");
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: a, namespace: certs, labels: {app: other}}\ntype: Opaque\nstringData: {v: a}\n").await.expect("secret");
    eventually("copies follow the selection", T, || async {
        (names("team-a").await == ["certs-tls-a"] && names("team-b").await == ["tls-a"])
            .then_some(())
    })
    .await;
    syncs
        .delete("certs", &DeleteParams::default())
        .await
        .expect("delete objectsync");
    eventually("every copy removed", T, || async {
        (names("team-a").await.is_empty() && names("team-b").await.is_empty()).then_some(())
    })
    .await;
    let plain = Api::<Secret>::namespaced(env.client().expect("client"), "certs")
        .get("plain")
        .await
        .expect("plain");
    assert_eq!(plain.resource_version(), plain_rv);
    stop(operator).await;
}

/// A ClusterObjectSync (a cluster admin's) copies cluster-scoped kinds to a RemoteCluster with
/// ObjectSync's rules: ClusterRoles selected by label and a PriorityClass by name (patched); drift
/// repaired, source changes followed, a source that starts or stops matching gains or loses
/// its copy, a foreign object at a copy's name is a Conflict and never touched. It is trusted
/// (no RemoteCluster `allowedNamespaces`, no SyncGrant) and copies a namespaced object from a
/// namespace an ObjectSync there may not read. Invalid specs say why; deletion — also while
/// no operator runs — removes its copies (`Orphan` releases them), and nothing else.
#[tokio::test]
async fn cluster_object_syncs_copy_cluster_scoped_kinds_to_a_remote_cluster() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    use kubesync_cli::crd::ClusterObjectSync;
    let (local, remote) = tokio::join!(
        operator_cluster("cos-local", false, &["kubesync", "platform", "team-a"]),
        TestEnv::builder().name("cos-remote").start()
    );
    let remote = remote.expect("remote");
    add_remote_cluster(&local, &remote, "eu", "kubesync").await;
    let role = |name: &str, labels: &str, verbs: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nrules:\n- {{apiGroups: [\"\"], resources: [configmaps], verbs: [{verbs}]}}\n"
        )
    };
    local
        .apply_yaml(&role("fleet-reader", "share: fleet", "get, list"))
        .await
        .expect("role");
    local
        .apply_yaml(&role("fleet-auditor", "share: fleet", "get"))
        .await
        .expect("role");
    local
        .apply_yaml(&role("local-only", "scope: here", "get"))
        .await
        .expect("role");
    local.apply_yaml("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: fleet-high}\nvalue: 100000\ndescription: fleet workloads\n").await.expect("priority class");
    local.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: platform}\ndata: {region: eu}\n").await.expect("cm");
    // Someone else's ClusterRole in the remote cluster, at one copy's name.
    remote
        .apply_yaml(&role("fleet-auditor", "owner: someone", "watch"))
        .await
        .expect("foreign");
    let remote_roles: Api<ClusterRole> = Api::all(remote.client().expect("client"));
    let foreign = remote_roles.get("fleet-auditor").await.expect("foreign");
    // No trusted namespace: every ObjectSync is a tenant's.
    let operator = start_operator(
        Cluster::new("local", local.client().expect("client")),
        OperatorOptions::default(),
    );
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: fleet-roles}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: ClusterRole, selector: {matchLabels: {share: fleet}}}\n  destinations: [{cluster: eu}]\n").await.expect("fleet-roles");
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: priority}\nspec:\n  source: {group: scheduling.k8s.io, kind: PriorityClass, name: fleet-high}\n  destinations: [{cluster: eu, patches: [{merge: {description: eu fleet}}]}]\n  deletionPolicy: Orphan\n").await.expect("priority");
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: platform-settings}\nspec:\n  source: {kind: ConfigMap, name: settings, namespace: platform}\n  destinations: [{namespace: team-a}]\n").await.expect("platform-settings");
    let syncs: Api<ClusterObjectSync> = Api::all(local.client().expect("client"));
    let status_of = |name: &'static str| {
        let syncs = syncs.clone();
        async move { syncs.get(name).await.ok().and_then(|o| o.status) }
    };

    let copied = eventually("the selected ClusterRole copied", T, || async {
        remote_roles.get_opt("fleet-reader").await.ok().flatten()
    })
    .await;
    let fleet_roles = syncs.get("fleet-roles").await.expect("fleet-roles");
    assert_eq!(
        copied.labels().get("kubesync.io/managed-by"),
        fleet_roles.metadata.uid.as_ref()
    );
    assert_eq!(
        copied
            .annotations()
            .get("kubesync.io/owner")
            .map(String::as_str),
        Some("local/fleet-roles")
    );
    assert_eq!(
        copied.rules.as_ref().expect("rules")[0].verbs,
        ["get", "list"]
    );
    let status = eventually("the foreign ClusterRole a Conflict", T, || async {
        status_of("fleet-roles").await.filter(|s| {
            s.sources == Some(2)
                && s.failures
                    .iter()
                    .any(|f| f.state == CopyState::Conflict && f.source == "fleet-auditor")
        })
    })
    .await;
    assert_eq!(status.destinations.len(), 1, "{:?}", status.destinations);
    let d = &status.destinations[0];
    assert_eq!(
        (
            d.cluster.as_str(),
            d.namespace.as_str(),
            d.sources_in_sync,
            d.sources_total
        ),
        ("eu", "", Some(1), Some(2))
    );
    // Its Events (a cluster-scoped object's) are in kube-system.
    let event = event_where(
        &local,
        "kube-system",
        "a Warning Event about the Conflict",
        |e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("fleet-roles")
                && e.type_.as_deref() == Some("Warning")
        },
    )
    .await;
    assert_eq!(
        event.regarding.and_then(|r| r.kind).as_deref(),
        Some("ClusterObjectSync")
    );
    let remote_priorities: Api<PriorityClass> = Api::all(remote.client().expect("client"));
    let priority = eventually("the PriorityClass copied", T, || async {
        remote_priorities.get_opt("fleet-high").await.ok().flatten()
    })
    .await;
    assert_eq!(priority.value, Some(100000));
    assert_eq!(priority.description.as_deref(), Some("eu fleet"), "patched");
    let team_a: Api<ConfigMap> = Api::namespaced(local.client().expect("client"), "team-a");
    let settings = eventually("a namespaced source from any namespace", T, || async {
        team_a.get_opt("settings").await.ok().flatten()
    })
    .await;
    assert_eq!(
        settings
            .data
            .as_ref()
            .and_then(|d| d.get("region"))
            .map(String::as_str),
        Some("eu")
    );
    assert_eq!(
        settings
            .annotations()
            .get("kubesync.io/owner")
            .map(String::as_str),
        Some("local/platform-settings")
    );
    let status = eventually("ready", T, || async {
        status_of("priority")
            .await
            .filter(|s| s.in_sync == 1 && s.total == 1)
    })
    .await;
    assert_eq!(
        ready_condition(&status.conditions),
        Some(("True".into(), "Syncing".into()))
    );

    // Drift is repaired; a source change reaches the copy; a source that starts matching gets
    // a copy, and loses it when it stops.
    local
        .apply_yaml(&role("fleet-reader", "share: fleet", "get, list, watch"))
        .await
        .expect("update");
    remote_roles
        .patch(
            "fleet-reader",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"rules": []})),
        )
        .await
        .expect("drift");
    eventually("the copy follows its source", T, || async {
        let r = remote_roles.get("fleet-reader").await.ok()?;
        (r.rules?.first()?.verbs == ["get", "list", "watch"]).then_some(())
    })
    .await;
    local
        .apply_yaml(&role("local-only", "share: fleet", "get"))
        .await
        .expect("label");
    eventually("a newly matching ClusterRole copied", T, || async {
        remote_roles.get_opt("local-only").await.ok().flatten()
    })
    .await;
    local
        .apply_yaml(&role("local-only", "scope: here", "get"))
        .await
        .expect("unlabel");
    eventually("an unselected ClusterRole loses its copy", T, || async {
        remote_roles
            .get_opt("local-only")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Invalid specs: namespaces for a cluster-scoped kind, no source namespace for a
    // namespaced one; an ObjectSync of a cluster-scoped kind points to ClusterObjectSync; an
    // ObjectSync in team-a may not read platform's ConfigMap (the ClusterObjectSync did).
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: bad-namespace}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: ClusterRole, name: fleet-reader}\n  destinations: [{cluster: eu, namespace: team-a}]\n").await.expect("bad");
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: no-source-namespace}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: team-a}]\n").await.expect("bad");
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: roles, namespace: team-a}\nspec:\n  source: {group: rbac.authorization.k8s.io, kind: ClusterRole, name: fleet-reader}\n  destinations: [{namespace: team-a}]\n").await.expect("bad");
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: team-a}\nspec:\n  source: {kind: ConfigMap, name: settings, namespace: platform}\n  destinations: [{namespace: team-a, name: other}]\n").await.expect("tenant");
    for (name, says) in [
        ("bad-namespace", "give no namespace"),
        ("no-source-namespace", "names the source's namespace"),
    ] {
        let status = eventually("refused", T, || async {
            status_of(name).await.filter(|s| !s.conditions.is_empty())
        })
        .await;
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "InvalidSpec"),
            "{name}"
        );
        assert!(ready.message.contains(says), "{name}: {}", ready.message);
    }
    let object_syncs: Api<ObjectSync> = Api::namespaced(local.client().expect("client"), "team-a");
    for (name, reason, says) in [
        ("roles", "InvalidSpec", "a ClusterObjectSync"),
        ("settings", "SourceNamespaceNotAllowed", "\"platform\""),
    ] {
        let os = eventually("refused", T, || async {
            object_syncs
                .get(name)
                .await
                .ok()
                .filter(|o| ready(o).is_some())
        })
        .await;
        let condition = os
            .status
            .as_ref()
            .expect("status")
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("ready")
            .clone();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", reason),
            "{name}"
        );
        assert!(
            condition.message.contains(says),
            "{name}: {}",
            condition.message
        );
    }
    assert!(team_a.get_opt("other").await.expect("get").is_none());

    // Deleted while no operator runs: the next one removes the copies (found by their marks),
    // releases the Orphan one's, and leaves the foreign ClusterRole as it was.
    operator.stop().await;
    for name in ["fleet-roles", "priority", "platform-settings"] {
        syncs
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    let operator = start_operator(
        Cluster::new("local", local.client().expect("client")),
        OperatorOptions::default(),
    );
    for name in ["fleet-roles", "priority", "platform-settings"] {
        eventually("released", T, || async {
            syncs.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    assert!(
        remote_roles
            .get_opt("fleet-reader")
            .await
            .expect("get")
            .is_none()
    );
    assert!(team_a.get_opt("settings").await.expect("get").is_none());
    let kept = remote_priorities
        .get("fleet-high")
        .await
        .expect("orphaned copy kept");
    assert!(
        !kept.labels().contains_key("kubesync.io/managed-by"),
        "{:?}",
        kept.labels()
    );
    assert!(!kept.annotations().contains_key("kubesync.io/owner"));
    let after = remote_roles
        .get("fleet-auditor")
        .await
        .expect("foreign kept");
    assert_eq!(
        after.metadata.resource_version,
        foreign.metadata.resource_version
    );
    assert_eq!(after.metadata.uid, foreign.metadata.uid);
    operator.stop().await;
}

/// A typo in a source selector — a value with `(`, a key with a space, `DoesNotExist` with
/// values — is an `InvalidSpec` naming the field, decided before any request, with a message
/// for people; and the tenant's namespace that holds such ObjectSyncs is deleted within
/// seconds (their finalizer waits for no source watch). Before, the list failed with the
/// client's Debug dump as the message, and the namespace stayed `Terminating` for ever.
#[tokio::test]
async fn a_typo_in_a_selector_is_refused_up_front_and_its_namespace_goes() {
    let env = operator_cluster("typo", true, &["apps", "typo"]).await;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: typo, labels: {app: web}}\ndata: {a: \"1\"}\n").await.expect("cm");
    let_copier_write(&env, "typo", &["typo"]).await;
    let operator = start(
        &env,
        ObjectSyncPolicy {
            trusted_namespaces: vec!["apps".into()],
            default_service_account: Some(COPIER.into()),
            ..Default::default()
        },
    );
    let typos = [
        (
            "paren",
            "{matchLabels: {app: \"a(b\"}}",
            "spec.source.selector.matchLabels[\"app\"]: \"a(b\" is not a label value",
        ),
        (
            "space",
            "{matchExpressions: [{key: \"my app\", operator: Exists}]}",
            "spec.source.selector.matchExpressions[0].key: \"my app\" is not a label key",
        ),
        (
            "values",
            "{matchExpressions: [{key: app, operator: DoesNotExist, values: [web]}]}",
            "spec.source.selector.matchExpressions[0].values: operator DoesNotExist takes no values",
        ),
    ];
    for (name, selector, _) in &typos {
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: typo}}\nspec:\n  source: {{kind: ConfigMap, selector: {selector}}}\n  destinations: [{{namespace: typo, namePrefix: copy-}}]\n")).await.expect("passes the schema");
    }
    // A healthy one beside them, with a copy in the same namespace.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: fine, namespace: typo}\nspec:\n  source: {kind: ConfigMap, name: cfg}\n  destinations: [{namespace: typo, name: cfg-copy}]\n").await.expect("fine");
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "typo");
    for (name, _, says) in &typos {
        let os =
            eventually("InvalidSpec", T, || async {
                syncs.get(name).await.ok().filter(|o| {
                    ready(o).is_some_and(|r| r == ("False".into(), "InvalidSpec".into()))
                })
            })
            .await;
        let conditions = os.status.expect("status").conditions;
        let message = &conditions[0].message;
        assert!(message.starts_with(says), "{name}: {message}");
        for c in &conditions {
            assert!(for_people(&c.message), "{name}: {}", c.message);
        }
    }
    eventually("the healthy copy", T, || async {
        Api::<ConfigMap>::namespaced(env.client().ok()?, "typo")
            .get_opt("cfg-copy")
            .await
            .ok()?
    })
    .await;

    let namespaces = Api::<Namespace>::all(env.client().expect("client"));
    let deleted_in = |ns: &'static str| {
        let namespaces = namespaces.clone();
        async move {
            let started = std::time::Instant::now();
            namespaces
                .delete(ns, &DeleteParams::default())
                .await
                .expect("delete namespace");
            eventually("the namespace is gone", T, || async {
                namespaces.get_opt(ns).await.ok()?.is_none().then_some(())
            })
            .await;
            started.elapsed().as_secs_f64()
        }
    };
    let started = std::time::Instant::now();
    let (typo, released) = tokio::join!(deleted_in("typo"), async {
        // The ObjectSyncs' finalizers are released first; then the namespace controller
        // finishes in its own time.
        eventually("every ObjectSync released", T, || async {
            let left = syncs.list(&Default::default()).await.ok()?.items;
            left.is_empty().then_some(())
        })
        .await;
        started.elapsed().as_secs_f64()
    });
    // The same deletion of a namespace that holds no ObjectSync, for comparison.
    env.create_namespace("plain").await.expect("ns");
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: plain}\n")
        .await
        .expect("cm");
    let plain = deleted_in("plain").await;
    println!(
        "namespace with 3 mistyped ObjectSyncs and a healthy one deleted in {typo:.1} s, its ObjectSyncs released in {released:.1} s (a namespace without ObjectSyncs: {plain:.1} s)"
    );
    stop(operator).await;
}
