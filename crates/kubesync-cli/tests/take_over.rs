//! A declared hand-over (`spec.takeOver`): a new ObjectSync takes over the copies an old one
//! made — one write per copy that moves its marks, no data written, no moment in which a copy
//! has no owner (a watch witness) — and the old one, deleted, leaves them; a tenant's
//! hand-over needs the consent an adoption needs, and stays in her namespace.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kubesync::Cluster;
use kubesync::syncers::fan_out::rules::MANAGED_BY;
use kubesync_cli::crd::ObjectSync;
use kubesync_cli::operator::OperatorOptions;
use kubesync_testenv::{TestEnv, eventually};

const OPERATOR: &str = "kubesync-operator";
const SOURCES: usize = 50;
const DESTINATIONS: usize = 20;

/// One version of a copy as the witness saw it: its uid, who its marks say owns it, its data.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    uid: String,
    owner: Option<String>,
    data: BTreeMap<String, String>,
}

/// Every version of every ConfigMap in the `to-*` namespaces, by (namespace, name), and the
/// copies seen deleted.
#[derive(Default)]
struct Witnessed {
    versions: BTreeMap<(String, String), Vec<Seen>>,
    deleted: Vec<(String, String)>,
}

/// Watches the ConfigMaps of every namespace and records each version of those in `to-*`.
fn witness(
    env: &TestEnv,
) -> (
    Arc<parking_lot::Mutex<Witnessed>>,
    tokio::task::JoinHandle<()>,
) {
    let api: Api<ConfigMap> = Api::all(env.client().expect("client"));
    let seen: Arc<parking_lot::Mutex<Witnessed>> = Arc::default();
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            let mut events = Box::pin(kube::runtime::WatchStreamExt::default_backoff(
                kube::runtime::watcher(api, kube::runtime::watcher::Config::default()),
            ));
            while let Some(event) = events.next().await {
                let (cm, deleted) = match event {
                    Ok(kube::runtime::watcher::Event::Apply(cm))
                    | Ok(kube::runtime::watcher::Event::InitApply(cm)) => (cm, false),
                    Ok(kube::runtime::watcher::Event::Delete(cm)) => (cm, true),
                    _ => continue,
                };
                let ns = cm.namespace().unwrap_or_default();
                if !ns.starts_with("to-") {
                    continue;
                }
                let key = (ns, cm.name_any());
                let mut seen = seen.lock();
                if deleted {
                    seen.deleted.push(key);
                    continue;
                }
                seen.versions.entry(key).or_default().push(Seen {
                    uid: cm.uid().unwrap_or_default(),
                    owner: cm.labels().get(MANAGED_BY).cloned(),
                    data: cm.data.clone().unwrap_or_default(),
                });
            }
        }
    });
    (seen, task)
}

async fn cluster(name: &str, namespaces: &[&str]) -> TestEnv {
    operator_cluster_from(
        TestEnv::builder()
            .name(name)
            .user(OPERATOR, &["system:masters"])
            .audit(true),
        namespaces,
    )
    .await
}

/// The operator's writes (verb, namespace, name) to ConfigMaps in the `to-*` namespaces.
fn copy_writes(env: &TestEnv) -> Vec<(String, String, String)> {
    env.audit()
        .expect("audit")
        .iter()
        .filter(|e| {
            e.is_write()
                && e.user.username == OPERATOR
                && e.resource() == "configmaps"
                && e.namespace().starts_with("to-")
        })
        .map(|e| {
            (
                e.verb.clone(),
                e.namespace().to_string(),
                e.name().to_string(),
            )
        })
        .collect()
}

/// `ObjectSync` `namespace/name` once its record holds `copies` copies and its status is of its
/// current spec.
async fn recorded(env: &TestEnv, namespace: &str, name: &str, copies: u32) -> ObjectSync {
    let api: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), namespace);
    eventually(
        &format!("{name}'s record of {copies} copies"),
        T,
        || async {
            let os = api.get_opt(name).await.ok()??;
            let status = os.status.as_ref()?;
            let current = status.observed_generation == os.metadata.generation;
            (current && status.record.as_ref()?.copies == copies && status.in_sync == status.total)
                .then_some(os)
        },
    )
    .await
}

#[tokio::test]
async fn a_declared_hand_over_moves_a_thousand_copies_with_no_data_written_and_no_moment_unowned() {
    let destinations: Vec<String> = (0..DESTINATIONS).map(|i| format!("to-{i:02}")).collect();
    let mut namespaces: Vec<&str> = destinations.iter().map(String::as_str).collect();
    namespaces.push("ops");
    let env = cluster("take-over", &namespaces).await;
    let sources: Vec<String> = (0..SOURCES)
        .map(|i| format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: app-{i:02}, namespace: ops, labels: {{fleet: \"yes\"}}}}\ndata: {{value: \"v{i}\"}}\n"))
        .collect();
    env.apply_yaml(&sources.join("---\n"))
        .await
        .expect("sources");
    let operator = start_operator(
        Cluster::new("local", env.client_as(OPERATOR).expect("client")),
        OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: vec!["ops".into()],
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let targets: String = destinations
        .iter()
        .map(|ns| format!("  - namespace: {ns}\n"))
        .collect();
    let spec = |name: &str, take_over: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: ops}}\nspec:\n  source: {{kind: ConfigMap, selector: {{matchLabels: {{fleet: \"yes\"}}}}}}\n{take_over}  destinations:\n{targets}"
        )
    };
    let copies = u32::try_from(SOURCES * DESTINATIONS).expect("fits");
    env.apply_yaml(&spec("old", "")).await.expect("old");
    let old = recorded(&env, "ops", "old", copies).await;
    let old_uid = old.uid().expect("uid");

    let (seen, watching) = witness(&env);
    eventually("the witness listed every copy", T, || async {
        (seen.lock().versions.len() == SOURCES * DESTINATIONS).then_some(())
    })
    .await;
    let before: BTreeMap<(String, String), Seen> = seen
        .lock()
        .versions
        .iter()
        .map(|(k, v)| (k.clone(), v.last().expect("a version").clone()))
        .collect();

    env.apply_yaml(&spec("new", "  takeOver: [{name: old}]\n"))
        .await
        .expect("new");
    let new = recorded(&env, "ops", "new", copies).await;
    let new_uid = new.uid().expect("uid");
    eventually(
        "every copy carries the new declaration's marks",
        T,
        || async {
            let seen = seen.lock();
            seen.versions
                .values()
                .all(|v| v.last().and_then(|s| s.owner.as_deref()) == Some(new_uid.as_str()))
                .then_some(())
        },
    )
    .await;

    // One write per copy, a patch that moved its marks; nothing created twice, deleted or
    // replaced (the old declaration's creates are the only others).
    let writes = eventually("the hand-over's writes in the audit log", T, || async {
        let writes = copy_writes(&env);
        let patches = writes.iter().filter(|w| w.0 == "patch").count();
        (patches >= SOURCES * DESTINATIONS).then_some(writes)
    })
    .await;
    let mut by_verb: BTreeMap<&str, usize> = BTreeMap::new();
    let mut per_copy: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (verb, ns, name) in &writes {
        *by_verb.entry(verb.as_str()).or_default() += 1;
        if verb == "patch" {
            *per_copy.entry((ns.as_str(), name.as_str())).or_default() += 1;
        }
    }
    assert_eq!(
        by_verb,
        BTreeMap::from([
            ("create", SOURCES * DESTINATIONS),
            ("patch", SOURCES * DESTINATIONS)
        ]),
        "the old declaration's creates and one patch per copy"
    );
    assert!(per_copy.values().all(|n| *n == 1), "one patch per copy");

    // Every version the witness saw was owned (by the old declaration, then the new one), of
    // the same object, with the source's data.
    {
        let seen = seen.lock();
        assert!(seen.deleted.is_empty(), "deleted: {:?}", seen.deleted);
        for (key, versions) in &seen.versions {
            let first = &before[key];
            for v in versions {
                assert!(
                    v.owner.as_deref() == Some(old_uid.as_str())
                        || v.owner.as_deref() == Some(new_uid.as_str()),
                    "{key:?} had a version owned by {:?}",
                    v.owner
                );
                assert_eq!((&v.uid, &v.data), (&first.uid, &first.data), "{key:?}");
            }
        }
    }

    // The old declaration, woken, sees its former copies as another's and writes none of
    // them (its record forgets them once they are no longer fresh: two minutes).
    let api: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "ops");
    let failure = eventually(
        "the old declaration's view of the taken copies",
        T,
        || async {
            let os = api.get_opt("old").await.ok()??;
            let status = os.status?;
            (status.in_sync == 0).then_some(status.failures.into_iter().next()?)
        },
    )
    .await;
    assert_eq!(failure.state, kubesync_cli::crd::CopyState::Conflict);
    assert!(
        failure.message.contains("managed by local/ops/new"),
        "{}",
        failure.message
    );

    // The old declaration, deleted, leaves what was taken: it goes, every copy stays the new
    // one's, and a source change reaches them through the new one.
    api.delete("old", &DeleteParams::default())
        .await
        .expect("delete old");
    eventually("the old declaration gone", T, || async {
        api.get_opt("old")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app-07, namespace: ops, labels: {fleet: \"yes\"}}\ndata: {value: changed}\n")
        .await
        .expect("change a source");
    eventually("the change in every copy of app-07", T, || async {
        let seen = seen.lock();
        destinations
            .iter()
            .all(|ns| {
                seen.versions[&(ns.clone(), "app-07".into())]
                    .last()
                    .is_some_and(|s| s.data.get("value").map(String::as_str) == Some("changed"))
            })
            .then_some(())
    })
    .await;
    {
        let seen = seen.lock();
        assert!(seen.deleted.is_empty(), "deleted: {:?}", seen.deleted);
        assert!(
            seen.versions.values().all(|v| v
                .last()
                .is_some_and(|s| s.owner.as_deref() == Some(new_uid.as_str()))),
            "every copy the new declaration's"
        );
    }
    watching.abort();
    operator.assert_no_panic();
    operator.stop().await;
}

#[tokio::test]
async fn a_tenants_hand_over_needs_adoption_consent_and_stays_in_her_namespace() {
    let env = cluster("take-over-tenant", &["t1", "to-t2", "ops"]).await;
    let_copier_read(&env, "t1", "", &["configmaps"]).await;
    let_copier_write(&env, "t1", &["to-t2"]).await;
    env.apply_yaml("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: copier, namespace: t1}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: t1}\ndata: {value: \"1\"}\n---\napiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-t1, namespace: to-t2}\nspec:\n  from: [{namespace: t1}]\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: elsewhere, namespace: ops}\nspec:\n  source: {kind: ConfigMap, name: app, namespace: ops}\n  destinations: []\n")
        .await
        .expect("ground");
    let operator = start_operator(
        Cluster::new("local", env.client_as(OPERATOR).expect("client")),
        OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: vec!["ops".into()],
                default_service_account: Some(COPIER.into()),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    let objectsync = |name: &str, take_over: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: t1}}\nspec:\n  source: {{kind: ConfigMap, name: app}}\n{take_over}  destinations: [{{namespace: to-t2}}]\n"
        )
    };
    env.apply_yaml(&objectsync("old", "")).await.expect("old");
    let old = recorded(&env, "t1", "old", 1).await;
    let maps: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "to-t2");
    let owner = || async {
        let cm = maps.get("app").await.expect("the copy");
        (cm.uid().expect("uid"), cm.labels().get(MANAGED_BY).cloned())
    };
    let (copy_uid, by) = owner().await;
    assert_eq!(by, old.uid());

    // Another namespace's ObjectSync: refused, in words, before anything is looked at.
    env.apply_yaml(&objectsync(
        "thief",
        "  takeOver: [{name: elsewhere, namespace: ops}]\n",
    ))
    .await
    .expect("thief");
    let api: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let message = eventually("thief refused", T, || async {
        let os = api.get_opt("thief").await.ok()??;
        let ready = os
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status == "False" && ready.reason == "TakeOverNotAllowed").then_some(ready.message)
    })
    .await;
    assert!(for_people(&message), "{message}");
    assert!(
        message.contains("not from ObjectSync ops/elsewhere"),
        "{message}"
    );

    // Two that would take over from each other (each taking the copies back): the second is
    // refused.
    env.apply_yaml(&objectsync("loop-a", "  takeOver: [{name: loop-b}]\n"))
        .await
        .expect("loop-a");
    eventually("loop-a accepted (loop-b does not exist yet)", T, || async {
        let os = api.get_opt("loop-a").await.ok()??;
        let ready = os
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.status == "True").then_some(())
    })
    .await;
    env.apply_yaml(&objectsync("loop-b", "  takeOver: [{name: loop-a}]\n"))
        .await
        .expect("loop-b");
    let message = eventually("loop-b refused", T, || async {
        let os = api.get_opt("loop-b").await.ok()??;
        let ready = os
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.reason == "TakeOverNotAllowed").then_some(ready.message)
    })
    .await;
    assert!(
        message.contains(
            "ObjectSync t1/loop-a takes over, through its own takeOver, from this declaration"
        ),
        "{message}"
    );
    for name in ["loop-a", "loop-b"] {
        api.delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }

    // Her own namespace's, without a grant that lets her adopt in to-t2: the copy stays the
    // old declaration's, and the new one says what it needs.
    env.apply_yaml(&objectsync("new", "  takeOver: [{name: old}]\n"))
        .await
        .expect("new");
    let message = eventually("new's conflict at to-t2", T, || async {
        let os = api.get_opt("new").await.ok()??;
        let d = os
            .status?
            .destinations
            .into_iter()
            .find(|d| d.namespace == "to-t2")?;
        (d.state == kubesync_cli::crd::CopyState::Conflict).then_some(d.message)
    })
    .await;
    assert!(
        message.contains("taking it over (takeOver) needs a SyncGrant in to-t2 with adopt: true"),
        "{message}"
    );
    assert_eq!(owner().await, (copy_uid.clone(), old.uid()));

    // With adopt: true there, the copy becomes the new declaration's (the same object).
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-t1, namespace: to-t2}\nspec:\n  from: [{namespace: t1}]\n  adopt: true\n")
        .await
        .expect("grant adoption");
    let new = recorded(&env, "t1", "new", 1).await;
    eventually("the copy is the new declaration's", T, || async {
        (owner().await == (copy_uid.clone(), new.uid())).then_some(())
    })
    .await;
    operator.assert_no_panic();
    operator.stop().await;
}
