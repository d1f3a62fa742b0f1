//! Copies that live with the apiserver and its controllers, on a real control plane with
//! kube-controller-manager running: what the apiserver allocated for a source (a Service's
//! cluster IP and node ports, a Job's selector and labels) or controllers wrote there (a
//! Deployment's revision, a ServiceAccount's token Secrets) is never copied; each copy gets
//! its own, and then settles — no write over reconciles forced afterwards, counted from the
//! apiserver's audit log.

mod common;

use common::*;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync_cli::crd::ObjectSync;
use kubesync_testenv::{TestEnv, eventually};

const SOURCES: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, namespace: apps}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: edge, namespace: apps}
spec: {type: NodePort, selector: {app: edge}, ports: [{port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: peers, namespace: apps}
spec: {clusterIP: None, selector: {app: peers}, ports: [{port: 80}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: apps}
spec:
  suspend: true
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: example.invalid/migrate}]
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: builder, namespace: apps}
secrets: [{name: builder-token}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: apps}
spec:
  replicas: 1
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: a, image: example.invalid/api}]}
"#;

/// (ObjectSync name and source name, group, version, kind, resource).
const SYNCED: [(&str, &str, &str, &str, &str); 6] = [
    ("web", "", "v1", "Service", "services"),
    ("edge", "", "v1", "Service", "services"),
    ("peers", "", "v1", "Service", "services"),
    ("migrate", "batch", "v1", "Job", "jobs"),
    ("builder", "", "v1", "ServiceAccount", "serviceaccounts"),
    ("api", "apps", "v1", "Deployment", "deployments"),
];

fn api(env: &TestEnv, group: &str, version: &str, kind: &str, ns: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(env.client().expect("client"), ns, &ar)
}

fn declaration(name: &str, group: &str, kind: &str, exclude: &str) -> String {
    format!(
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  source: {{group: \"{group}\", kind: {kind}, name: {name}}}\n  destinations: [{{namespace: team-a}}]\n  labels: {{exclude: [{exclude}]}}\n"
    )
}

/// Write requests by `writer` to the synced kinds in team-a (not their status), from the audit
/// log.
fn copy_writes(env: &TestEnv, writer: &str) -> Vec<String> {
    env.audit()
        .expect("audit")
        .iter()
        .filter(|e| {
            e.is_write()
                && e.user.username == writer
                && e.namespace() == "team-a"
                && e.subresource().is_empty()
                && SYNCED.iter().any(|s| s.4 == e.resource())
        })
        .map(|e| format!("{} {}/{}", e.verb, e.resource(), e.name()))
        .collect()
}

/// Whether the condition `type_` is True.
fn is_true(conditions: &[kubesync_cli::crd::Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Waits until the declaration `name` (an ObjectSync or a ClusterObjectSync, through `api`)
/// has reconciled its current generation, is Ready and its copies Synced.
async fn settled<K>(api: &Api<K>, name: &str)
where
    K: kubesync_cli::object_sync::SyncObject + std::fmt::Debug,
{
    eventually(
        &format!("{name} Ready and Synced at its generation"),
        T,
        || async {
            let os = api.get(name).await.ok()?;
            let st = os.sync_status()?;
            (st.observed_generation == os.meta().generation
                && is_true(&st.conditions, "Ready")
                && is_true(&st.conditions, "Synced"))
            .then_some(())
        },
    )
    .await;
}

/// Every ObjectSync of [`SYNCED`] settled.
async fn all_ready(syncs: &Api<ObjectSync>) {
    for (name, ..) in SYNCED {
        settled(syncs, name).await;
    }
}

#[tokio::test]
async fn allocated_and_controller_owned_fields_are_not_copied_and_copies_settle() {
    let env = operator_cluster_from(
        TestEnv::builder()
            .name("kinds")
            .with_all_controllers()
            .audit(true),
        &["apps", "team-a"],
    )
    .await;
    env.apply_yaml(SOURCES).await.expect("sources");
    // The source Deployment at revision 2: its template changed once.
    let deployments = api(&env, "apps", "v1", "Deployment", "apps");
    eventually("the source Deployment at revision 1", T, || async {
        let d = deployments.get("api").await.ok()?;
        (d.metadata
            .annotations?
            .get("deployment.kubernetes.io/revision")?
            == "1")
            .then_some(())
    })
    .await;
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}
            })),
        )
        .await
        .expect("change the template");
    eventually("the source Deployment at revision 2", T, || async {
        let d = deployments.get("api").await.ok()?;
        (d.metadata
            .annotations?
            .get("deployment.kubernetes.io/revision")?
            == "2")
            .then_some(())
    })
    .await;

    for (name, group, _, kind, _) in SYNCED {
        env.apply_yaml(&declaration(name, group, kind, ""))
            .await
            .expect("objectsync");
    }
    let running = start_trusting(&env, &["apps"]);
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    all_ready(&syncs).await;

    let get = |group: &'static str, kind: &'static str, ns: &'static str, name: &'static str| {
        let api = api(&env, group, "v1", kind, ns);
        async move { api.get(name).await.expect(name) }
    };
    // Each Service copy has its own cluster IP (a headless one stays headless), the NodePort
    // one its own node port.
    let ip = |s: &DynamicObject| {
        s.data["spec"]["clusterIP"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    let (web, web_copy) = (
        get("", "Service", "apps", "web").await,
        get("", "Service", "team-a", "web").await,
    );
    assert!(!ip(&web_copy).is_empty() && ip(&web_copy) != ip(&web));
    let port = |s: &DynamicObject| s.data["spec"]["ports"][0]["nodePort"].as_i64();
    let (edge, edge_copy) = (
        get("", "Service", "apps", "edge").await,
        get("", "Service", "team-a", "edge").await,
    );
    assert!(port(&edge_copy).is_some() && port(&edge_copy) != port(&edge));
    assert_eq!(ip(&get("", "Service", "team-a", "peers").await), "None");
    // The Job copy has the selector and template labels the apiserver generated for it (not
    // the source's).
    let job = get("batch", "Job", "team-a", "migrate").await;
    let uid = job.metadata.uid.clone().expect("uid");
    assert_eq!(
        job.data["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
        uid.as_str()
    );
    assert_eq!(
        job.data["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid.as_str()
    );
    // The ServiceAccount copy does not list the source namespace's token Secret.
    let sa = get("", "ServiceAccount", "team-a", "builder").await;
    assert!(
        !sa.data
            .get("secrets")
            .is_some_and(|s| s.to_string().contains("builder-token")),
        "{:?}",
        sa.data
    );
    // The Deployment copy is at its own revision.
    let d = get("apps", "Deployment", "team-a", "api").await;
    eventually("the copy's own rollout revision", T, || async {
        let d = api(&env, "apps", "v1", "Deployment", "team-a")
            .get("api")
            .await
            .ok()?;
        (d.metadata
            .annotations?
            .get("deployment.kubernetes.io/revision")?
            == "1")
            .then_some(())
    })
    .await;
    assert_eq!(
        d.data["spec"]["template"]["metadata"]["annotations"]["rollout"],
        "2"
    );

    // Settled: two forced reconciles of every ObjectSync (a spec change that changes no
    // copy), each witnessed by its status at the new generation, write nothing.
    // (A write's line may be written after its copy is read: wait for one of each copy.)
    let writer = eventually("kubesync's create of a Service copy", T, || async {
        env.audit()
            .expect("audit")
            .iter()
            .filter(|e| e.verb == "create" && e.resource() == "services")
            .find(|e| e.namespace() == "team-a")
            .map(|e| e.user.username.clone())
    })
    .await;
    let before = eventually("a write of every copy in the audit log", T, || async {
        let before = copy_writes(&env, &writer);
        SYNCED
            .iter()
            .all(|s| {
                before
                    .iter()
                    .any(|w| w.ends_with(&format!(" {}/{}", s.4, s.0)))
            })
            .then_some(before)
    })
    .await;
    for round in ["unused-1", "unused-2"] {
        for (name, group, _, kind, _) in SYNCED {
            env.apply_yaml(&declaration(name, group, kind, round))
                .await
                .expect("objectsync");
        }
        all_ready(&syncs).await;
    }
    let after = copy_writes(&env, &writer);
    assert_eq!(
        after[before.len()..],
        [] as [String; 0],
        "copies were written again after they settled"
    );

    // A node port a destination pins with a patch is written as given: where it is taken
    // (the source's own), that destination says so, in the apiserver's words.
    let taken = port(&edge).expect("the source's node port");
    env.create_namespace("team-b").await.expect("ns");
    env.apply_yaml(&format!(
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: pinned, namespace: apps}}\nspec:\n  source: {{kind: Service, name: edge}}\n  destinations: [{{namespace: team-b, patches: [{{json: [{{op: add, path: /spec/ports/0/nodePort, value: {taken}}}]}}]}}]\n"
    ))
    .await
    .expect("objectsync");
    let message = eventually(
        "the pinned port's conflict on its destination",
        T,
        || async {
            let st = syncs.get("pinned").await.ok()?.status?;
            let d = st.destinations.first()?;
            (d.state == kubesync_cli::crd::CopyState::Error).then(|| d.message.clone())
        },
    )
    .await;
    assert!(message.contains("already allocated"), "{message}");
    running.stop().await;
}

/// The copy's `spec.replicas` in `ns`.
async fn replicas(env: &TestEnv, ns: &str) -> Option<i64> {
    api(env, "apps", "v1", "Deployment", ns)
        .get("api")
        .await
        .ok()?
        .data["spec"]["replicas"]
        .as_i64()
}

#[tokio::test]
async fn fields_left_to_others_are_theirs_and_reverted_without() {
    let env = operator_cluster_from(
        TestEnv::builder().name("ignore").audit(true),
        &["apps", "team-a", "team-b", "team-c", "team-d"],
    )
    .await;
    env.apply_yaml(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api, namespace: apps}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: api}}\n  template:\n    metadata: {labels: {app: api}}\n    spec: {containers: [{name: a, image: example.invalid/api}]}\n",
    )
    .await
    .expect("source");
    // team-a leaves what the autoscaler-like manager owns to it; team-b leaves nothing;
    // team-c leaves /spec/replicas by pointer; team-d the same as team-a, in Report mode.
    let sync = |name: &str, ns: &str, extra: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  source: {{group: apps, kind: Deployment, name: api}}\n  destinations: [{{namespace: {ns}{extra}}}]\n"
        )
    };
    env.apply_yaml(&sync(
        "by-manager",
        "team-a",
        ", ignoreManagers: [hpa-like]",
    ))
    .await
    .expect("objectsync");
    env.apply_yaml(&sync("enforced", "team-b", ""))
        .await
        .expect("objectsync");
    env.apply_yaml(&sync(
        "by-pointer",
        "team-c",
        ", ignoreFields: [/spec/replicas]",
    ))
    .await
    .expect("objectsync");
    let running = start_trusting(&env, &["apps"]);
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    for ns in ["team-a", "team-b", "team-c"] {
        eventually(&format!("the copy in {ns}"), T, || async {
            (replicas(&env, ns).await? == 2).then_some(())
        })
        .await;
    }
    // An autoscaler-like second field manager scales every copy to 5.
    let scaled = PatchParams {
        field_manager: Some("hpa-like".into()),
        ..Default::default()
    };
    for ns in ["team-a", "team-b", "team-c"] {
        api(&env, "apps", "v1", "Deployment", ns)
            .patch(
                "api",
                &scaled,
                &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
            )
            .await
            .expect("scale");
    }
    // Without a rule, kubesync reverts it.
    eventually("team-b's copy reverted", T, || async {
        (replicas(&env, "team-b").await? == 2).then_some(())
    })
    .await;
    // With one, a reconcile afterwards (forced by a spec change that changes no copy, and
    // witnessed by the status at the new generation) leaves it at 5, and the status says
    // Synced: the field is not a difference.
    env.apply_yaml(&sync(
        "by-manager",
        "team-a",
        ", ignoreManagers: [hpa-like], excludeNamespaces: [nowhere]",
    ))
    .await
    .expect("objectsync");
    env.apply_yaml(&sync(
        "by-pointer",
        "team-c",
        ", ignoreFields: [/spec/replicas], excludeNamespaces: [nowhere]",
    ))
    .await
    .expect("objectsync");
    for name in ["by-manager", "by-pointer"] {
        eventually(
            &format!("{name} reconciled at its generation"),
            T,
            || async {
                let os = syncs.get(name).await.ok()?;
                let st = os.status?;
                (st.observed_generation == os.metadata.generation
                    && st.destinations.first()?.state == kubesync_cli::crd::CopyState::Synced)
                    .then_some(())
            },
        )
        .await;
    }
    assert_eq!(replicas(&env, "team-a").await, Some(5));
    assert_eq!(replicas(&env, "team-c").await, Some(5));

    // Report mode agrees: the same rule in Report mode finds nothing to do at a copy whose
    // replicas the other manager owns (team-d, made by Enforce first, then switched).
    env.apply_yaml(&sync("reported", "team-d", ", ignoreManagers: [hpa-like]"))
        .await
        .expect("objectsync");
    eventually("the copy in team-d", T, || async {
        (replicas(&env, "team-d").await? == 2).then_some(())
    })
    .await;
    api(&env, "apps", "v1", "Deployment", "team-d")
        .patch(
            "api",
            &scaled,
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("scale");
    env.apply_yaml(&format!(
        "{}  mode: Report\n",
        sync("reported", "team-d", ", ignoreManagers: [hpa-like]")
    ))
    .await
    .expect("report mode");
    eventually(
        "Report mode reconciled: Synced, nothing planned",
        T,
        || async {
            let os = syncs.get("reported").await.ok()?;
            let st = os.status?;
            let d = st.destinations.first()?;
            (st.observed_generation == os.metadata.generation
                && d.state == kubesync_cli::crd::CopyState::Synced)
                .then_some(())
        },
    )
    .await;

    // A change of the source reaches the copies, but not the fields left to others.
    api(&env, "apps", "v1", "Deployment", "apps")
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "spec": {"replicas": 3, "template": {"metadata": {"annotations": {"v": "2"}}}}
            })),
        )
        .await
        .expect("change the source");
    let template_v = |ns: &'static str| {
        let env = &env;
        async move {
            api(env, "apps", "v1", "Deployment", ns)
                .get("api")
                .await
                .ok()?
                .data["spec"]["template"]["metadata"]["annotations"]["v"]
                .as_str()
                .map(String::from)
        }
    };
    for ns in ["team-a", "team-b", "team-c"] {
        eventually(&format!("the source's change in {ns}"), T, || async {
            (template_v(ns).await? == "2").then_some(())
        })
        .await;
    }
    assert_eq!(replicas(&env, "team-b").await, Some(3));
    assert_eq!(replicas(&env, "team-a").await, Some(5));
    assert_eq!(replicas(&env, "team-c").await, Some(5));
    running.stop().await;
}

#[tokio::test]
async fn create_only_creates_once_recreates_when_deleted_and_cleans_up_by_the_deletion_policy() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let env = operator_cluster_from(
        TestEnv::builder().name("create-only").audit(true),
        &["apps", "team-a", "team-b"],
    )
    .await;
    let client = env.client().expect("client");
    let maps = |ns: &str| Api::<ConfigMap>::namespaced(client.clone(), ns);
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: defaults, namespace: apps}\ndata: {level: info}\n")
        .await
        .expect("source");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: defaults, namespace: apps}\nspec:\n  updatePolicy: CreateOnly\n  source: {kind: ConfigMap, name: defaults}\n  destinations: [{namespace: team-a}, {namespace: team-b}]\n")
        .await
        .expect("objectsync");
    let running = start_trusting(&env, &["apps"]);
    let level = |ns: &'static str| {
        let maps = maps(ns);
        async move {
            maps.get_opt("defaults")
                .await
                .ok()??
                .data?
                .get("level")
                .cloned()
        }
    };
    for ns in ["team-a", "team-b"] {
        eventually(&format!("created in {ns}"), T, || async {
            (level(ns).await? == "info").then_some(())
        })
        .await;
    }
    // Each destination's own edit stays; so does the copy when the source changes: the
    // status says it is held back, and nothing was written to the copies after they were
    // created.
    maps("team-a")
        .patch(
            "defaults",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"level": "debug"}})),
        )
        .await
        .expect("a local edit");
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: defaults, namespace: apps}\ndata: {level: warn}\n")
        .await
        .expect("source change");
    let syncs: Api<ObjectSync> = Api::namespaced(client.clone(), "apps");
    eventually("both copies held back", T, || async {
        let st = syncs.get("defaults").await.ok()?.status?;
        (st.destinations.len() == 2
            && st.destinations.iter().all(|d| {
                d.state == kubesync_cli::crd::CopyState::Synced && d.message.contains("CreateOnly")
            }))
        .then_some(())
    })
    .await;
    assert_eq!(level("team-a").await.as_deref(), Some("debug"));
    assert_eq!(level("team-b").await.as_deref(), Some("info"));
    let creates = |ns: &str| {
        env.audit()
            .expect("audit")
            .iter()
            .filter(|e| {
                e.is_write()
                    && e.resource() == "configmaps"
                    && e.namespace() == ns
                    && e.name() == "defaults"
                    && e.user.username != "system:apiserver"
            })
            .map(|e| e.verb.clone())
            .collect::<Vec<_>>()
    };
    // (The create's line may be written after the copy is read.)
    let created = eventually("the copy's create in the audit log", T, || async {
        let created = creates("team-b");
        (!created.is_empty()).then_some(created)
    })
    .await;
    assert_eq!(created, ["create"], "the copy was only created");

    // Deleted, it is created again, from the source as it is now.
    maps("team-b")
        .delete("defaults", &Default::default())
        .await
        .expect("delete the copy");
    eventually("created again in team-b", T, || async {
        (level("team-b").await? == "warn").then_some(())
    })
    .await;

    // The ObjectSync goes: its copies go with it (deletionPolicy: Delete, the default).
    syncs
        .delete("defaults", &Default::default())
        .await
        .expect("delete the ObjectSync");
    for ns in ["team-a", "team-b"] {
        eventually(&format!("the copy in {ns} removed"), T, || async {
            maps(ns)
                .get_opt("defaults")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    }
    running.stop().await;
}

/// Every everyday kind a user would copy: (name, group, kind, plural, the source's manifest
/// without its metadata line). Each is copied from `apps` to `team-a` (PriorityClass, which
/// is cluster-scoped, by a ClusterObjectSync under another name).
const MATRIX: &[(&str, &str, &str, &str, &str)] = &[
    ("m-config", "", "ConfigMap", "configmaps", "data: {a: '1'}"),
    (
        "m-opaque",
        "",
        "Secret",
        "secrets",
        "type: Opaque\nstringData: {password: s3cret}",
    ),
    (
        "m-tls",
        "",
        "Secret",
        "secrets",
        "type: kubernetes.io/tls\ndata: {tls.crt: Y2VydA==, tls.key: a2V5}",
    ),
    (
        "m-docker",
        "",
        "Secret",
        "secrets",
        "type: kubernetes.io/dockerconfigjson\nstringData: {.dockerconfigjson: '{\"auths\": {}}'}",
    ),
    (
        "m-basic",
        "",
        "Secret",
        "secrets",
        "type: kubernetes.io/basic-auth\nstringData: {username: u, password: p}",
    ),
    (
        "m-ssh",
        "",
        "Secret",
        "secrets",
        "type: kubernetes.io/ssh-auth\nstringData: {ssh-privatekey: k}",
    ),
    (
        "m-sa",
        "",
        "ServiceAccount",
        "serviceaccounts",
        "automountServiceAccountToken: false",
    ),
    (
        "m-token",
        "",
        "Secret",
        "secrets",
        "type: kubernetes.io/service-account-token",
    ),
    (
        "m-role",
        "rbac.authorization.k8s.io",
        "Role",
        "roles",
        "rules: [{apiGroups: [''], resources: [configmaps], verbs: [get]}]",
    ),
    (
        "m-binding",
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "rolebindings",
        "roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: m-role}\nsubjects: [{kind: ServiceAccount, name: m-sa}]",
    ),
    (
        "m-ip",
        "",
        "Service",
        "services",
        "spec: {selector: {app: m}, ports: [{port: 80}]}",
    ),
    (
        "m-headless",
        "",
        "Service",
        "services",
        "spec: {clusterIP: None, selector: {app: m}, ports: [{port: 80}]}",
    ),
    (
        "m-nodeport",
        "",
        "Service",
        "services",
        "spec: {type: NodePort, selector: {app: m}, ports: [{port: 80}]}",
    ),
    (
        "m-external",
        "",
        "Service",
        "services",
        "spec: {ports: [{port: 5432}]}",
    ),
    (
        "m-external",
        "",
        "Endpoints",
        "endpoints",
        "subsets: [{addresses: [{ip: 192.0.2.10}], ports: [{port: 5432}]}]",
    ),
    (
        "m-deploy",
        "apps",
        "Deployment",
        "deployments",
        "spec: {replicas: 1, selector: {matchLabels: {app: d}}, template: {metadata: {labels: {app: d}}, spec: {containers: [{name: c, image: example.invalid/d}]}}}",
    ),
    (
        "m-sts",
        "apps",
        "StatefulSet",
        "statefulsets",
        "spec: {serviceName: m-headless, replicas: 1, selector: {matchLabels: {app: s}}, template: {metadata: {labels: {app: s}}, spec: {containers: [{name: c, image: example.invalid/s}]}}}",
    ),
    (
        "m-ds",
        "apps",
        "DaemonSet",
        "daemonsets",
        "spec: {selector: {matchLabels: {app: ds}}, template: {metadata: {labels: {app: ds}}, spec: {containers: [{name: c, image: example.invalid/ds}]}}}",
    ),
    (
        "m-job",
        "batch",
        "Job",
        "jobs",
        "spec: {suspend: true, template: {spec: {restartPolicy: Never, containers: [{name: c, image: example.invalid/j}]}}}",
    ),
    (
        "m-cron",
        "batch",
        "CronJob",
        "cronjobs",
        "spec: {schedule: '0 3 * * *', suspend: true, jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: example.invalid/c}]}}}}}",
    ),
    (
        "m-netpol",
        "networking.k8s.io",
        "NetworkPolicy",
        "networkpolicies",
        "spec: {podSelector: {}, policyTypes: [Ingress]}",
    ),
    (
        "m-ingress",
        "networking.k8s.io",
        "Ingress",
        "ingresses",
        "spec: {defaultBackend: {service: {name: m-ip, port: {number: 80}}}}",
    ),
    (
        "m-pdb",
        "policy",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "spec: {minAvailable: 1, selector: {matchLabels: {app: d}}}",
    ),
    (
        "m-quota",
        "",
        "ResourceQuota",
        "resourcequotas",
        "spec: {hard: {configmaps: '50'}}",
    ),
    (
        "m-limits",
        "",
        "LimitRange",
        "limitranges",
        "spec: {limits: [{type: Container, default: {cpu: 100m}}]}",
    ),
    (
        "m-claim",
        "",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        "spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}",
    ),
    (
        "m-hpa",
        "autoscaling",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        "spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: m-deploy}, minReplicas: 1, maxReplicas: 3, metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]}",
    ),
    (
        "m-widget",
        "demo.kubesync.io",
        "Widget",
        "widgets",
        "spec: {size: 3}",
    ),
];

/// The API version of a matrix kind.
fn version_of(group: &str, kind: &str) -> &'static str {
    match (group, kind) {
        ("autoscaling", _) => "v2",
        _ => "v1",
    }
}

/// The matrix on a real control plane (kube-controller-manager running): every kind copies,
/// follows a change of its source, and then settles — two reconciles forced afterwards write
/// nothing, counted from the apiserver's audit log.
#[tokio::test]
async fn every_everyday_kind_copies_follows_its_source_and_settles() {
    let env = operator_cluster_from(
        TestEnv::builder()
            .name("matrix")
            .with_all_controllers()
            .audit(true),
        &["apps", "team-a"],
    )
    .await;
    env.install_crds(kubesync_testenv::fixtures::WIDGET_CRD)
        .await
        .expect("widget crd");
    let manifest = |(name, group, kind, _, body): &(&str, &str, &str, &str, &str)| {
        let api_version = match *group {
            "" => version_of(group, kind).to_string(),
            g => format!("{g}/{}", version_of(g, kind)),
        };
        let annotations = match *name {
            "m-token" => ", annotations: {kubernetes.io/service-account.name: m-sa}",
            _ => "",
        };
        format!(
            "apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: {name}, namespace: apps, labels: {{rev: '1'}}{annotations}}}\n{body}\n"
        )
    };
    env.apply_yaml(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: m-priority, labels: {rev: '1'}}\nvalue: 1000\n",
    )
    .await
    .expect("priority class");
    for entry in MATRIX {
        env.apply_yaml(&manifest(entry)).await.expect(entry.0);
    }
    let declare = |name: &str, group: &str, kind: &str, exclude: &str| {
        let sync = format!("{name}-{}", kind.to_lowercase());
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {sync}, namespace: apps}}\nspec:\n  source: {{group: \"{group}\", kind: {kind}, name: {name}}}\n  destinations: [{{namespace: team-a}}]\n  labels: {{exclude: [{exclude}]}}\n"
        )
    };

    let declare_priority = |exclude: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {{name: m-priority}}\nspec:\n  source: {{group: scheduling.k8s.io, kind: PriorityClass, name: m-priority}}\n  destinations: [{{name: m-priority-copy}}]\n  labels: {{exclude: [{exclude}]}}\n"
        )
    };
    let declare_all = |exclude: &'static str| {
        let env = &env;
        async move {
            for (name, group, kind, ..) in MATRIX {
                env.apply_yaml(&declare(name, group, kind, exclude))
                    .await
                    .expect("objectsync");
            }
            env.apply_yaml(&declare_priority(exclude))
                .await
                .expect("clusterobjectsync");
        }
    };
    declare_all("").await;
    let running = start_trusting(&env, &["apps"]);
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    let cluster_syncs: Api<kubesync_cli::crd::ClusterObjectSync> =
        Api::all(env.client().expect("client"));
    let all_ready = || async {
        for (name, _, kind, ..) in MATRIX {
            settled(&syncs, &format!("{name}-{}", kind.to_lowercase())).await;
        }
        settled(&cluster_syncs, "m-priority").await;
    };

    let copy_label = |group: &'static str, kind: &'static str, name: &'static str| {
        let env = &env;
        async move {
            let ar =
                ApiResource::from_gvk(&GroupVersionKind::gvk(group, version_of(group, kind), kind));
            let api: Api<DynamicObject> = match kind {
                "PriorityClass" => Api::all_with(env.client().expect("client"), &ar),
                _ => Api::namespaced_with(env.client().expect("client"), "team-a", &ar),
            };
            let name = match kind {
                "PriorityClass" => "m-priority-copy",
                _ => name,
            };
            api.get(name)
                .await
                .ok()?
                .metadata
                .labels?
                .get("rev")
                .cloned()
        }
    };
    all_ready().await;
    for (name, group, kind, ..) in MATRIX {
        assert_eq!(
            copy_label(group, kind, name).await.as_deref(),
            Some("1"),
            "{kind} {name}"
        );
    }
    assert_eq!(
        copy_label("scheduling.k8s.io", "PriorityClass", "m-priority")
            .await
            .as_deref(),
        Some("1")
    );

    // Each follows a change of its source.
    let relabel = PatchParams::default();
    for (name, group, kind, ..) in MATRIX {
        api(&env, group, version_of(group, kind), kind, "apps")
            .patch(
                name,
                &relabel,
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"rev": "2"}}})),
            )
            .await
            .expect(name);
    }
    let priorities: Api<DynamicObject> = Api::all_with(
        env.client().expect("client"),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "scheduling.k8s.io",
            "v1",
            "PriorityClass",
        )),
    );
    priorities
        .patch(
            "m-priority",
            &relabel,
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"rev": "2"}}})),
        )
        .await
        .expect("priority class");
    for (name, group, kind, ..) in MATRIX {
        eventually(&format!("{kind} {name} follows its source"), T, || async {
            (copy_label(group, kind, name).await? == "2").then_some(())
        })
        .await;
    }
    eventually("PriorityClass follows its source", T, || async {
        (copy_label("scheduling.k8s.io", "PriorityClass", "m-priority").await? == "2").then_some(())
    })
    .await;
    all_ready().await;

    // Then settles: two reconciles of every declaration forced afterwards (a spec change that
    // changes no copy, each witnessed by its status at the new generation) write nothing.
    let writer = eventually("kubesync's create of the ConfigMap copy", T, || async {
        env.audit()
            .expect("audit")
            .iter()
            .find(|e| {
                e.verb == "create"
                    && e.namespace() == "team-a"
                    && e.resource() == "configmaps"
                    && e.name() == "m-config"
            })
            .map(|e| e.user.username.clone())
    })
    .await;
    let writes = || -> Vec<String> {
        env.audit()
            .expect("audit")
            .iter()
            .filter(|e| {
                e.is_write()
                    && e.user.username == writer
                    && e.subresource().is_empty()
                    && (e.namespace() == "team-a" || e.name() == "m-priority-copy")
            })
            .map(|e| format!("{} {}/{}", e.verb, e.resource(), e.name()))
            .collect()
    };
    // Every copy's create and follow in the log before the count starts (a write's line may
    // be written after its effect is read).
    let mut copies: Vec<&str> = MATRIX.iter().map(|m| m.0).collect();
    copies.push("m-priority-copy");
    let before = eventually("every copy's two writes in the audit log", T, || async {
        let before = writes();
        let twice = |name: &&str| {
            let of = format!("/{name}");
            before.iter().filter(|w| w.ends_with(&of)).count() >= 2
        };
        copies.iter().all(twice).then_some(before)
    })
    .await;
    for round in ["unused-1", "unused-2"] {
        declare_all(round).await;
        all_ready().await;
    }
    let after = writes();
    assert_eq!(
        after[before.len()..],
        [] as [String; 0],
        "copies were written again after they settled"
    );
    running.stop().await;
}
