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
use kube::api::{Api, DeleteParams, DynamicObject};
use kubesync::Cluster;
use kubesync::syncers::fan_out::record::Record;
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
    data: serde_json::Value,
}

/// Every version of every object of a kind in the `to-*` namespaces, by (namespace, name),
/// and the copies seen deleted.
#[derive(Default)]
struct Witnessed {
    versions: BTreeMap<(String, String), Vec<Seen>>,
    deleted: Vec<(String, String)>,
}

type Witness = Arc<parking_lot::Mutex<Witnessed>>;

/// Watches the objects of kind `K` in every namespace and records each version of those in
/// `to-*`.
fn witness<K>(env: &TestEnv) -> (Witness, tokio::task::JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>,
{
    let ar = kube::core::ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::all_with(env.client().expect("client"), &ar);
    let seen: Witness = Arc::default();
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            let mut events = Box::pin(kube::runtime::WatchStreamExt::default_backoff(
                kube::runtime::watcher(api, kube::runtime::watcher::Config::default()),
            ));
            while let Some(event) = events.next().await {
                let (o, deleted) = match event {
                    Ok(kube::runtime::watcher::Event::Apply(o))
                    | Ok(kube::runtime::watcher::Event::InitApply(o)) => (o, false),
                    Ok(kube::runtime::watcher::Event::Delete(o)) => (o, true),
                    _ => continue,
                };
                let ns = o.namespace().unwrap_or_default();
                if !ns.starts_with("to-") {
                    continue;
                }
                let key = (ns, o.name_any());
                let mut seen = seen.lock();
                if deleted {
                    seen.deleted.push(key);
                    continue;
                }
                seen.versions.entry(key).or_default().push(Seen {
                    uid: o.uid().unwrap_or_default(),
                    owner: o.labels().get(MANAGED_BY).cloned(),
                    data: o.data.get("data").cloned().unwrap_or_default(),
                });
            }
        }
    });
    (seen, task)
}

/// The witness's last version of each copy it saw.
fn last_versions(seen: &Witness) -> BTreeMap<(String, String), Seen> {
    seen.lock()
        .versions
        .iter()
        .map(|(k, v)| (k.clone(), v.last().expect("a version").clone()))
        .collect()
}

/// Asserts that no copy the witness saw was deleted, and that every version of each was the
/// same object (as in `before`) with the same data, owned by `old` or `new`.
fn owned_throughout(
    seen: &Witness,
    before: &BTreeMap<(String, String), Seen>,
    (old, new): (&str, &str),
) {
    let seen = seen.lock();
    assert!(seen.deleted.is_empty(), "deleted: {:?}", seen.deleted);
    for (key, versions) in &seen.versions {
        let first = &before[key];
        for v in versions {
            assert!(
                v.owner.as_deref() == Some(old) || v.owner.as_deref() == Some(new),
                "{key:?} had a version owned by {:?}",
                v.owner
            );
            assert_eq!((&v.uid, &v.data), (&first.uid, &first.data), "{key:?}");
        }
    }
}

/// Waits until the witness shows every copy carrying `owner`'s marks.
async fn all_owned_by(seen: &Witness, owner: &str) {
    eventually(&format!("every copy owned by {owner}"), T, || async {
        seen.lock()
            .versions
            .values()
            .all(|v| v.last().and_then(|s| s.owner.as_deref()) == Some(owner))
            .then_some(())
    })
    .await;
}

/// When the apiserver received the test's first write (its apply: the create) of the
/// ObjectSync `namespace/name` (audit log).
async fn created_at(env: &TestEnv, namespace: &str, name: &str) -> String {
    eventually(
        &format!("the create of {name} in the audit log"),
        T,
        || async {
            env.audit().ok()?.into_iter().find_map(|e| {
                (e.is_write()
                    && e.user.username != OPERATOR
                    && e.resource() == "objectsyncs"
                    && e.namespace() == namespace
                    && e.name() == name)
                    .then_some(e.request_received_timestamp)
            })
        },
    )
    .await
}

/// The operator's writes to `resource` in the `to-*` namespaces received after `since`, by
/// verb, once they hold `patches` patches; each copy written `each` times.
async fn writes_per_copy(
    env: &TestEnv,
    resource: &str,
    (since, each): (&str, usize),
    patches: usize,
) -> BTreeMap<String, usize> {
    let writes = eventually("the hand-over's writes in the audit log", T, || async {
        let writes = copy_writes(env, resource, since);
        let patched = writes.iter().filter(|w| w.0 == "patch").count();
        (patched >= patches).then_some(writes)
    })
    .await;
    let mut by_verb: BTreeMap<String, usize> = BTreeMap::new();
    let mut per_copy: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (verb, ns, name) in &writes {
        *by_verb.entry(verb.clone()).or_default() += 1;
        *per_copy.entry((ns.as_str(), name.as_str())).or_default() += 1;
    }
    let other: Vec<_> = per_copy
        .iter()
        .filter(|(_, n)| **n != each)
        .take(5)
        .collect();
    assert!(other.is_empty(), "{each} writes per copy: {other:?}");
    by_verb
}

/// The operator on `env` as its own user, `ops` trusted, with `options` otherwise.
fn start(env: &TestEnv, mut options: OperatorOptions) -> RunningOperator {
    options.policy.trusted_namespaces = vec!["ops".into()];
    start_operator(
        Cluster::new("local", env.client_as(OPERATOR).expect("client")),
        options,
    )
}

/// The Ready condition of the ObjectSync `name` `api` addresses, once it has one.
async fn ready_of(api: &Api<ObjectSync>, name: &str) -> Option<kubesync_cli::crd::Condition> {
    let os = api.get_opt(name).await.ok()??;
    os.status?
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Ready")
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

/// The operator's writes (verb, namespace, name) to `resource` in the `to-*` namespaces that
/// the apiserver received after `since`.
fn copy_writes(env: &TestEnv, resource: &str, since: &str) -> Vec<(String, String, String)> {
    env.audit()
        .expect("audit")
        .iter()
        .filter(|e| {
            e.is_write()
                && e.user.username == OPERATOR
                && e.resource() == resource
                && e.namespace().starts_with("to-")
                && e.request_received_timestamp.as_str() > since
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
    let operator = start(&env, OperatorOptions::default());
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

    let (seen, watching) = witness::<ConfigMap>(&env);
    eventually("the witness listed every copy", T, || async {
        (seen.lock().versions.len() == SOURCES * DESTINATIONS).then_some(())
    })
    .await;
    let before = last_versions(&seen);

    env.apply_yaml(&spec("new", "  takeOver: [{name: old}]\n"))
        .await
        .expect("new");
    let new = recorded(&env, "ops", "new", copies).await;
    let new_uid = new.uid().expect("uid");
    all_owned_by(&seen, &new_uid).await;

    // One write per copy since the new declaration was made, a patch that moved its marks:
    // nothing created, deleted or replaced.
    let since = created_at(&env, "ops", "new").await;
    let by_verb = writes_per_copy(&env, "configmaps", (&since, 1), SOURCES * DESTINATIONS).await;
    assert_eq!(
        by_verb,
        BTreeMap::from([("patch".to_string(), SOURCES * DESTINATIONS)])
    );
    // Every version the witness saw was owned (by the old declaration, then the new one), of
    // the same object, with the source's data.
    owned_throughout(&seen, &before, (&old_uid, &new_uid));

    // The old declaration, woken, sees its former copies as another's, its record forgets
    // them, and it writes none of them.
    let api: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "ops");
    let failure = eventually(
        "the old declaration's view of the taken copies",
        T,
        || async {
            let os = api.get_opt("old").await.ok()??;
            let status = os.status?;
            let forgot = status.record.as_ref()?.copies == 0;
            (status.in_sync == 0 && forgot).then_some(status.failures.into_iter().next()?)
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
                    .is_some_and(|s| s.data["value"] == "changed")
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
    let operator = start(
        &env,
        OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
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
        let ready = ready_of(&api, "thief").await?;
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
        let ready = ready_of(&api, "loop-a").await?;
        (ready.status == "True").then_some(())
    })
    .await;
    env.apply_yaml(&objectsync("loop-b", "  takeOver: [{name: loop-a}]\n"))
        .await
        .expect("loop-b");
    let message = eventually("loop-b refused", T, || async {
        let ready = ready_of(&api, "loop-b").await?;
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

/// The operator's own namespace, where the records of the copies annotations made are kept.
const RECORDS: &str = "kubesync-system";
const ANNOTATED: usize = 10;
const NAMESPACES: usize = 100;

#[tokio::test]
async fn an_objectsync_takes_over_a_thousand_copies_replicators_annotations_made() {
    let env = cluster("take-over-compat", &["ops", RECORDS]).await;
    let namespaces: Vec<String> = (0..NAMESPACES)
        .map(|i| format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: to-{i:03}, labels: {{hand: over}}}}\n"))
        .collect();
    env.apply_yaml(&namespaces.join("---\n"))
        .await
        .expect("namespaces");
    let sources: Vec<String> = (0..ANNOTATED)
        .map(|i| format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-{i}\n  namespace: ops\n  annotations: {{replicator.v1.mittwald.de/replicate-to-matching: hand=over}}\nstringData: {{password: p{i}}}\n"))
        .collect();
    env.apply_yaml(&sources.join("---\n"))
        .await
        .expect("sources");
    let (seen, watching) = witness::<k8s_openapi::api::core::v1::Secret>(&env);
    let operator = start(
        &env,
        OperatorOptions {
            compat: vec![kubesync_cli::compat::Tool::Replicator],
            compat_records: Some(RECORDS.into()),
            ..Default::default()
        },
    );
    let copies = ANNOTATED * NAMESPACES;
    eventually("replicator's annotations copied everywhere", T, || async {
        let seen = seen.lock();
        (seen.versions.len() == copies
            && seen
                .versions
                .values()
                .all(|v| v.last().is_some_and(|s| s.owner.is_some())))
        .then_some(())
    })
    .await;
    // Their records kept (the hand-over reads them), each of its hundred copies.
    let records: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), RECORDS);
    eventually("the annotations' records", T, || async {
        let kept = records.list(&Default::default()).await.ok()?;
        let full = kept.items.iter().filter(|cm| {
            let data = cm.data.clone().unwrap_or_default();
            !data.contains_key("openSince")
                && data.iter().any(|(k, v)| {
                    k.starts_with("made.")
                        && Record::decode(v, None).is_ok_and(|r| r.len() == NAMESPACES)
                })
        });
        (full.count() == ANNOTATED).then_some(())
    })
    .await;
    let before = last_versions(&seen);
    let annotated_uids: Vec<String> = before.values().filter_map(|s| s.owner.clone()).collect();

    // One ObjectSync takes all ten over: the annotated Secrets by name, into the same namespaces.
    let names: Vec<String> = (0..ANNOTATED).map(|i| format!("db-{i}")).collect();
    let take_over: Vec<String> = names
        .iter()
        .map(|n| format!("{{kind: Annotations, name: {n}}}"))
        .collect();
    env.apply_yaml(&format!(
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: db, namespace: ops}}\nspec:\n  source: {{kind: Secret, names: [{}]}}\n  takeOver: [{}]\n  destinations: [{{namespaceSelector: {{matchLabels: {{hand: over}}}}}}]\n",
        names.join(", "),
        take_over.join(", ")
    ))
    .await
    .expect("objectsync");
    let db = recorded(&env, "ops", "db", u32::try_from(copies).expect("fits")).await;
    let db_uid = db.uid().expect("uid");
    all_owned_by(&seen, &db_uid).await;
    let since = created_at(&env, "ops", "db").await;
    // Two metadata writes per copy: the first makes the annotations' create of it an apply of
    // kubesync's (so that the ObjectSync's apply drops the annotations' bookkeeping), the
    // second moves its marks. No data written (the witness), nothing created or deleted.
    let by_verb = writes_per_copy(&env, "secrets", (&since, 2), 2 * copies).await;
    assert_eq!(by_verb, BTreeMap::from([("patch".to_string(), 2 * copies)]));
    {
        let seen = seen.lock();
        assert!(seen.deleted.is_empty(), "deleted: {:?}", seen.deleted);
        for (key, versions) in &seen.versions {
            let first = &before[key];
            for v in versions {
                let owner = v.owner.as_deref().unwrap_or_default();
                assert!(
                    owner == db_uid || annotated_uids.iter().any(|u| u == owner),
                    "{key:?} had a version owned by {owner:?}"
                );
                assert_eq!((&v.uid, &v.data), (&first.uid, &first.data), "{key:?}");
            }
        }
    }
    // The copies are the ObjectSync's alone now: the annotations' label is gone with the
    // apply, and removing the annotations removes nothing.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client().expect("client"), "to-042");
    let copy = secrets.get("db-3").await.expect("a copy");
    assert!(
        !copy
            .labels()
            .contains_key(kubesync_cli::compat::DECLARED_BY),
        "{:?}",
        copy.labels()
    );
    let ops: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client().expect("client"), "ops");
    for n in &names {
        ops.patch(
            n,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                "replicator.v1.mittwald.de/replicate-to-matching": null}}})),
        )
        .await
        .expect("annotations removed");
    }
    ops.patch(
        "db-3",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"stringData": {"password": "rotated"}})),
    )
    .await
    .expect("rotate");
    eventually("the rotated password in every copy of db-3", T, || async {
        let seen = seen.lock();
        (0..NAMESPACES)
            .all(|i| {
                seen.versions[&(format!("to-{i:03}"), "db-3".into())]
                    .last()
                    .is_some_and(|s| s.data["password"] == "cm90YXRlZA==")
            })
            .then_some(())
    })
    .await;
    {
        let seen = seen.lock();
        assert!(seen.deleted.is_empty(), "deleted: {:?}", seen.deleted);
        assert_eq!(seen.versions.len(), copies);
    }
    watching.abort();
    operator.assert_no_panic();
    operator.stop().await;
}

#[tokio::test]
async fn per_namespace_objectsyncs_take_over_from_a_cluster_objectsync() {
    let env = cluster("take-over-cluster", &["ops", "to-a", "to-b"]).await;
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: ops}\ndata: {value: \"1\"}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: fleet}\nspec:\n  source: {kind: ConfigMap, name: app, namespace: ops}\n  destinations: [{namespace: to-a}, {namespace: to-b}]\n")
        .await
        .expect("ground");
    let operator = start(&env, OperatorOptions::default());
    let copy = |ns: &str| {
        let maps: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), ns);
        async move {
            let cm = maps.get_opt("app").await.ok()??;
            Some((cm.uid()?, cm.labels().get(MANAGED_BY).cloned()?))
        }
    };
    let fleet: Api<kubesync_cli::crd::ClusterObjectSync> = Api::all(env.client().expect("client"));
    let fleet_uid = fleet.get("fleet").await.expect("fleet").uid().expect("uid");
    let before = eventually("the ClusterObjectSync's copies", T, || async {
        let (a, b) = (copy("to-a").await?, copy("to-b").await?);
        (a.1 == fleet_uid && b.1 == fleet_uid).then_some((a.0, b.0))
    })
    .await;
    eventually("the ClusterObjectSync's record", T, || async {
        let status = fleet.get("fleet").await.ok()?.status?;
        (status.record?.copies == 2).then_some(())
    })
    .await;
    // One ObjectSync of the trusted namespace takes over the copy in to-a only.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: app, namespace: ops}\nspec:\n  source: {kind: ConfigMap, name: app}\n  takeOver: [{kind: ClusterObjectSync, name: fleet}]\n  destinations: [{namespace: to-a}]\n")
        .await
        .expect("objectsync");
    let app = recorded(&env, "ops", "app", 1).await;
    let app_uid = app.uid().expect("uid");
    eventually("to-a's copy the ObjectSync's", T, || async {
        (copy("to-a").await? == (before.0.clone(), app_uid.clone())).then_some(())
    })
    .await;
    assert_eq!(copy("to-b").await, Some((before.1.clone(), fleet_uid)));
    // The ClusterObjectSync deleted: its copy in to-b goes with it, the one taken stays.
    fleet
        .delete("fleet", &DeleteParams::default())
        .await
        .expect("delete fleet");
    eventually(
        "to-b's copy deleted with the ClusterObjectSync",
        T,
        || async { copy("to-b").await.is_none().then_some(()) },
    )
    .await;
    eventually("the ClusterObjectSync gone", T, || async {
        fleet.get_opt("fleet").await.ok()?.is_none().then_some(())
    })
    .await;
    assert_eq!(copy("to-a").await, Some((before.0, app_uid)));
    operator.assert_no_panic();
    operator.stop().await;
}
