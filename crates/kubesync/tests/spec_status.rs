//! Spec/status sync between a remote and a local cluster — real control planes, one of each
//! (a third for sharding).

mod common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy,
};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync::syncers::spec_status::{SecretRepair, SpecStatusSync};
use kubesync_testenv::{TestEnv, eventually};

const CRD: &str = kubesync_testenv::fixtures::WIDGET_CRD;
const T: Duration = Duration::from_secs(30);

fn widget_type() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
        "widgets",
    )
}

/// Shared remote and local clusters, with the Widget CRD installed on both.
async fn clusters() -> (&'static TestEnv, &'static TestEnv) {
    let remote = TestEnv::shared("remote", false).expect("remote");
    let local = TestEnv::shared("local", true).expect("local");
    for env in [remote, local] {
        env.install_crds(CRD).await.expect("crd");
    }
    (remote, local)
}

fn widgets(env: &TestEnv, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(env.client().expect("client"), ns, &widget_type())
}

async fn apply_widget(
    env: &TestEnv,
    ns: &str,
    name: &str,
    body: serde_json::Value,
) -> DynamicObject {
    let mut v = serde_json::json!({
        "apiVersion": "demo.kubesync.io/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
    });
    merge(&mut v, &body);
    widgets(env, ns)
        .patch(
            name,
            &PatchParams::apply("tests").force(),
            &Patch::Apply(&v),
        )
        .await
        .expect("apply widget")
}

async fn set_status(env: &TestEnv, ns: &str, name: &str, status: serde_json::Value) {
    widgets(env, ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await
        .expect("status");
}

fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    if let (Some(t), Some(p)) = (target.as_object_mut(), patch.as_object()) {
        for (k, v) in p {
            merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
        }
    } else {
        *target = patch.clone();
    }
}

async fn get(api: &Api<DynamicObject>, name: &str) -> Option<DynamicObject> {
    api.get_opt(name).await.expect("get")
}

/// Waits until `name` satisfies `f` (absent objects fail `f`).
/// Changes an annotation of `name` (a change that causes a reconcile and nothing else).
async fn touch(api: &Api<DynamicObject>, name: &str) -> DynamicObject {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
            "test/touched": format!("{:?}", std::time::Instant::now())
        }}})),
    )
    .await
    .expect("touch")
}

async fn until(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    f: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    eventually(what, T, || async { get(api, name).await.filter(|o| f(o)) }).await
}

async fn until_gone(api: &Api<DynamicObject>, name: &str, what: &str) {
    eventually(what, T, || async {
        get(api, name).await.is_none().then_some(())
    })
    .await
}

#[tokio::test]
async fn lifecycle_create_update_status_local_delete_remote_delete() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("life");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = SpecStatusSync::builder(widget_type())
        .remote_name_suffix("-east")
        .local_namespace_suffix("-local")
        .namespace_prefix(&ns)
        .build(cluster(remote), cluster(local));
    let running = common::start_engine(engine).await;
    let r = widgets(remote, &ns);
    let l_ns = format!("{ns}-local");
    let l = widgets(local, &l_ns);

    // Create: claimed, namespace created and owned, local object created with spec/labels/annotations.
    apply_widget(
        remote,
        &ns,
        "w-east",
        serde_json::json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"team": "a"}},
            "spec": {"size": 3}
        }),
    )
    .await;
    let lw = until(&l, "w", "local created", |_| true).await;
    assert_eq!(lw.data["spec"]["size"], 3);
    assert_eq!(lw.labels().get("app").map(String::as_str), Some("web"));
    assert_eq!(lw.annotations().get("team").map(String::as_str), Some("a"));
    assert_eq!(
        lw.annotations().get("kubesync.io/sync-origin"),
        Some(&format!("{ns}/w-east"))
    );
    let namespace = Api::<Namespace>::all(local.client().expect("client"))
        .get(&l_ns)
        .await
        .expect("local ns");
    assert_eq!(
        namespace
            .annotations()
            .get("kubesync.io/sync-owner")
            .map(String::as_str),
        Some("w")
    );
    let rw = until(&r, "w-east", "generation marks", |o| {
        o.annotations()
            .contains_key("kubesync.io/sync-local-generation")
    })
    .await;
    assert!(
        rw.finalizers()
            .contains(&"kubesync.io/sync-local".to_string())
    );
    assert_eq!(rw.annotations()["kubesync.io/sync-remote-generation"], "1");
    assert_eq!(rw.annotations()["kubesync.io/sync-local-generation"], "1");
    // A remote object outside the shard is never touched.
    apply_widget(
        remote,
        &ns,
        "w-west",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;

    // Spec change flows down and the generation marks follow.
    apply_widget(
        remote,
        &ns,
        "w-east",
        serde_json::json!({"spec": {"size": 5}}),
    )
    .await;
    until(&l, "w", "spec updated", |o| o.data["spec"]["size"] == 5).await;
    until(&r, "w-east", "generations", |o| {
        o.annotations()
            .get("kubesync.io/sync-remote-generation")
            .map(String::as_str)
            == Some("2")
            && o.annotations()
                .get("kubesync.io/sync-local-generation")
                .map(String::as_str)
                == Some("2")
    })
    .await;

    // Local status flows up.
    set_status(
        local,
        &l_ns,
        "w",
        serde_json::json!({"phase": "Ready", "replicas": 5}),
    )
    .await;
    until(&r, "w-east", "status up", |o| {
        o.data["status"]["phase"] == "Ready" && o.data["status"]["replicas"] == 5
    })
    .await;

    // Local delete: recreated from the remote.
    let uid = l.get("w").await.expect("w").metadata.uid;
    l.delete("w", &DeleteParams::default())
        .await
        .expect("delete local");
    until(&l, "w", "recreated", |o| {
        o.metadata.uid != uid && o.data["spec"]["size"] == 5
    })
    .await;

    // Remote delete: the owned namespace is deleted, then the finalizer released.
    r.delete("w-east", &DeleteParams::default())
        .await
        .expect("delete remote");
    until_gone(&r, "w-east", "remote gone after local cleanup").await;
    let namespaces = Api::<Namespace>::all(local.client().expect("client"));
    eventually("local namespace gone", T, || async {
        namespaces
            .get_opt(&l_ns)
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let west = get(&r, "w-west").await.expect("w-west untouched");
    assert!(west.finalizers().is_empty());
    running.stop().await;
}

#[tokio::test]
async fn remote_delete_with_unowned_namespace_deletes_only_what_kubesync_created() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("unowned");
    remote.create_namespace(&ns).await.expect("ns");
    // The local namespace exists beforehand: kubesync does not own it.
    local.create_namespace(&ns).await.expect("local ns");
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .propagation_policy(PropagationPolicy::Background)
        .build(cluster(remote), cluster(local));
    let (running, mut reconciled) = common::start_engine_observed(engine).await;
    let (r, l) = (widgets(remote, &ns), widgets(local, &ns));
    // A local Widget with no remote twin that kubesync did not create: never deleted.
    let hand_made = reconciled.follow(key_of(local, &widget_type(), &ns, "hand-made"));
    let hand_made = Change::written(
        hand_made,
        &apply_widget(
            local,
            &ns,
            "hand-made",
            serde_json::json!({"spec": {"size": 9}}),
        )
        .await,
    );
    apply_widget(
        remote,
        &ns,
        "synced",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    until(&l, "synced", "local created", |_| true).await;

    r.delete("synced", &DeleteParams::default())
        .await
        .expect("delete");
    until_gone(&l, "synced", "local deleted").await;
    until_gone(&r, "synced", "finalizer released").await;
    // Its own reconcile saw it (a witness, not a sleep): no twin, not kubesync's — kept.
    reconciled.saw("hand-made", &[&hand_made]).await;
    assert!(
        get(&l, "hand-made").await.is_some(),
        "an object kubesync did not create survives"
    );
    let namespaces = Api::<Namespace>::all(local.client().expect("client"));
    let n = namespaces
        .get(&ns)
        .await
        .expect("the unowned namespace survives");
    assert!(n.metadata.deletion_timestamp.is_none());
    running.stop().await;
}

#[tokio::test]
async fn pause_on_either_side_stops_every_write_and_resumes() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("pause");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(cluster(remote), cluster(local));
    let (running, mut reconciled) = common::start_engine_observed(engine).await;
    let (r, l) = (widgets(remote, &ns), widgets(local, &ns));

    // Paused remotely from the start: not even claimed.
    let (remote_p, local_p) = (
        reconciled.follow(key_of(remote, &widget_type(), &ns, "p")),
        reconciled.follow(key_of(local, &widget_type(), &ns, "p")),
    );
    let applied = apply_widget(
        remote,
        &ns,
        "p",
        serde_json::json!({
            "metadata": {"annotations": {"kubesync.io/paused": "true"}}, "spec": {"size": 1}
        }),
    )
    .await;
    reconciled
        .saw("p", &[&Change::written(remote_p.clone(), &applied)])
        .await;
    assert!(get(&r, "p").await.expect("p").finalizers().is_empty());
    assert!(get(&l, "p").await.is_none());
    // Unpause: synced.
    r.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"metadata": {"annotations": {"kubesync.io/paused": null}}}),
        ),
    )
    .await
    .expect("unpause");
    until(&l, "p", "synced after unpause", |o| {
        o.data["spec"]["size"] == 1
    })
    .await;

    // Paused locally: spec changes and remote deletion wait.
    let paused = l
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"kubesync.io/paused": "true"}}}),
            ),
        )
        .await
        .expect("pause locally");
    let paused = Change::written(local_p, &paused);
    apply_widget(remote, &ns, "p", serde_json::json!({"spec": {"size": 2}})).await;
    r.delete("p", &DeleteParams::default())
        .await
        .expect("delete remote");
    // Witness: once the remote deletion is visible, touch the remote object; a reconcile on
    // stores showing the touch (after the deletion) and the local pause decided on both.
    eventually("remote deletion pending", T, || async {
        get(&r, "p")
            .await
            .filter(|o| o.metadata.deletion_timestamp.is_some())
    })
    .await;
    let touched = r
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"touched": "1"}}})),
        )
        .await
        .expect("touch");
    reconciled
        .saw("p", &[&Change::written(remote_p, &touched), &paused])
        .await;
    assert_eq!(
        get(&l, "p").await.expect("still there").data["spec"]["size"],
        1
    );
    assert!(
        get(&r, "p").await.is_some(),
        "remote deletion held by the finalizer"
    );
    // Resume: the teardown proceeds.
    l.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"metadata": {"annotations": {"kubesync.io/paused": "false"}}}),
        ),
    )
    .await
    .expect("resume");
    until_gone(&l, "p", "local deleted after resume").await;
    until_gone(&r, "p", "remote released after resume").await;
    running.stop().await;
}

#[tokio::test]
async fn secrets_are_uploaded_repaired_and_follow_local_changes() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("secrets");
    remote.create_namespace(&ns).await.expect("ns");
    let l_ns = format!("{ns}-l");
    let engine = SpecStatusSync::builder(widget_type())
        .remote_name_suffix("-r")
        .local_namespace_suffix("-l")
        .namespace_prefix(&ns)
        .secret_names(["creds"])
        .build(cluster(remote), cluster(local));
    // A Secret of someone else, there before the engine lists.
    let unrelated: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{ns}-unrelated")},
        "stringData": {"blob": "x".repeat(4096)}
    }))
    .expect("secret");
    Api::<Secret>::namespaced(local.client().expect("client"), "default")
        .create(&PostParams::default(), &unrelated)
        .await
        .expect("unrelated secret");
    let (controller, reconciler) = engine.into_parts().await.expect("engine parts");
    // The remote identity (an admin) may list and watch Secrets.
    assert_eq!(
        reconciler.syncer().secret_repair(),
        Some(SecretRepair::Watch)
    );
    let ctx = controller.context();
    let running = start(controller, reconciler);
    let (r, l) = (widgets(remote, &ns), widgets(local, &l_ns));
    let remote_secrets: Api<Secret> = Api::namespaced(remote.client().expect("client"), &ns);
    let local_secrets: Api<Secret> = Api::namespaced(local.client().expect("client"), &l_ns);
    // The remote Secret must pre-exist (uploads are updates only).
    let pre = remote_creds(&ns);
    remote_secrets
        .create(&PostParams::default(), &pre)
        .await
        .expect("pre-create");

    apply_widget(remote, &ns, "w-r", serde_json::json!({"spec": {"size": 1}})).await;
    let lw = until(&l, "w", "local created", |_| true).await;
    let data = |v: &str| serde_json::json!({"token": base64_encode(v)});
    local_secrets
        .create(&PostParams::default(), &local_creds(&lw, "one"))
        .await
        .expect("local secret");
    let uploaded = eventually("uploaded", T, || async {
        remote_secrets
            .get_opt("creds-r")
            .await
            .expect("get")
            .filter(|s| token(s).as_deref() == Some("one"))
    })
    .await;
    let rw = get(&r, "w-r").await.expect("remote");
    let owner = &uploaded.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(Some(&owner.uid), rw.metadata.uid.as_ref());
    assert!(
        uploaded
            .annotations()
            .contains_key("kubesync.io/last-uploaded-hash")
    );

    // A change of the local Secret alone triggers the upload (with a local namespace suffix,
    // which sync-controller missed).
    local_secrets
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": data("two")})),
        )
        .await
        .expect("edit local");
    eventually("re-uploaded", T, || async {
        remote_secrets
            .get_opt("creds-r")
            .await
            .expect("get")
            .filter(|s| token(s).as_deref() == Some("two"))
    })
    .await;

    // The remote copy edited by someone: repaired at once (its watch event; the periodic
    // resync is 10 minutes away, and nothing else changes).
    remote_secrets
        .patch(
            "creds-r",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": data("tampered")})),
        )
        .await
        .expect("tamper");
    let repaired = || async {
        remote_secrets
            .get_opt("creds-r")
            .await
            .expect("get")
            .filter(|s| token(s).as_deref() == Some("two"))
    };
    eventually("an edited remote Secret repaired", T, repaired).await;
    // Deleted and recreated empty (uploads only update): repaired too.
    remote_secrets
        .delete("creds-r", &DeleteParams::default())
        .await
        .expect("delete remote secret");
    remote_secrets
        .create(&PostParams::default(), &pre)
        .await
        .expect("recreate");
    eventually("a recreated remote Secret repaired", T, repaired).await;

    // Memory: the only Secrets held are those named in `secret_names` (selected on the
    // server), and Namespaces are held as metadata only.
    let secret_type = kube::core::ApiResource::erase::<Secret>(&());
    let namespace_type =
        kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    let held_ns = kubesync::ObjectKey::new(local.name(), &namespace_type, None, &l_ns);
    let meta = eventually("the local namespace held", T, || async {
        ctx.get_metadata(&held_ns)
    })
    .await;
    assert!(meta.data.is_null(), "the namespace is held in full");
    assert!(ctx.get(&held_ns).is_none());
    let creds = kubesync::ObjectKey::new(local.name(), &secret_type, Some(l_ns.clone()), "creds");
    assert!(
        ctx.get(&creds).is_some(),
        "the named Secret is held in full"
    );
    for c in ctx.clusters() {
        // Locally the named Secrets; remotely their remote names, as metadata only.
        let (name, full) = if c.name() == local.name() {
            ("creds", true)
        } else {
            ("creds-r", false)
        };
        for held in ctx.list_metadata(c.name(), &secret_type) {
            assert_eq!(
                held.name_any(),
                name,
                "{}: only named Secrets are held",
                c.name()
            );
            assert_eq!(held.data.get("data").is_some(), full, "{}", c.name());
        }
    }
    running.stop().await;
}

/// A remote identity that may read and update its Secrets but not list or watch them: the
/// objects that upload are re-run every `secret_repair_interval`, an edited remote Secret is
/// repaired within it, and an unchanged one is never rewritten.
#[tokio::test]
async fn remote_secrets_are_re_read_on_an_interval_without_watch_rights() {
    use k8s_openapi::api::rbac::v1::PolicyRule;
    init_tracing();
    let remote = TestEnv::builder()
        .name("poll-remote")
        .user("uploader", &[])
        .audit(true)
        .start()
        .await
        .expect("remote");
    let local = TestEnv::shared("local", true).expect("local");
    for env in [&remote, local] {
        env.install_crds(CRD).await.expect("crd");
    }
    let ns = unique_ns("poll");
    remote.create_namespace(&ns).await.expect("ns");
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(groups.iter().map(|g| g.to_string()).collect()),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    remote
        .grant(
            "uploader",
            None,
            "widgets",
            vec![
                rule(
                    &["demo.kubesync.io"],
                    &["widgets"],
                    &["get", "list", "watch", "update", "patch"],
                ),
                rule(&["demo.kubesync.io"], &["widgets/status"], &["patch"]),
            ],
        )
        .await
        .expect("grant");
    remote
        .grant(
            "uploader",
            Some(&ns),
            "secrets",
            vec![rule(&[""], &["secrets"], &["get", "update"])],
        )
        .await
        .expect("grant");
    let l_ns = format!("{ns}-l");
    let engine = SpecStatusSync::builder(widget_type())
        .remote_name_suffix("-r")
        .local_namespace_suffix("-l")
        .namespace_prefix(&ns)
        .secret_names(["creds"])
        .secret_repair_interval(Duration::from_secs(1))
        .build(
            kubesync::Cluster::new("poll-remote", remote.client_as("uploader").expect("client")),
            cluster(local),
        );
    let writes = engine.write_counter();
    let (controller, reconciler) = engine.into_parts().await.expect("engine parts");
    assert_eq!(
        reconciler.syncer().secret_repair(),
        Some(SecretRepair::Poll(Duration::from_secs(1)))
    );
    let running = start(controller, reconciler);
    let remote_secrets: Api<Secret> = Api::namespaced(remote.client().expect("client"), &ns);
    remote_secrets
        .create(&PostParams::default(), &remote_creds(&ns))
        .await
        .expect("pre-create");
    apply_widget(
        &remote,
        &ns,
        "w-r",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    let lw = until(&widgets(local, &l_ns), "w", "local created", |_| true).await;
    Api::<Secret>::namespaced(local.client().expect("client"), &l_ns)
        .create(&PostParams::default(), &local_creds(&lw, "one"))
        .await
        .expect("local secret");
    let uploaded = || async {
        remote_secrets
            .get_opt("creds-r")
            .await
            .expect("get")
            .filter(|s| token(s).as_deref() == Some("one"))
    };
    eventually("uploaded", T, uploaded).await;

    // Unchanged: re-read every second (three re-reads seen in the remote's audit log, no
    // event could have caused them), never rewritten.
    let before = writes.writes_of("poll-remote", "secrets");
    // The upload's line may be written after the uploaded Secret is read: the mark follows it.
    let mark = eventually("the upload in the remote's audit log", T, || async {
        let log = remote.audit().expect("audit");
        log.iter()
            .any(|e| e.user.username == "uploader" && e.name() == "creds-r" && e.is_write())
            .then_some(log.len())
    })
    .await;
    let since_mark = |verb: fn(&kubesync_testenv::AuditEvent) -> bool| {
        remote
            .audit()
            .expect("audit")
            .iter()
            .skip(mark)
            .filter(|e| {
                e.user.username == "uploader"
                    && e.resource() == "secrets"
                    && e.name() == "creds-r"
                    && verb(e)
            })
            .count()
    };
    eventually("three re-reads of the remote Secret", T, || async {
        (since_mark(|e| e.verb == "get") >= 3).then_some(())
    })
    .await;
    assert_eq!(
        since_mark(|e| e.is_write()),
        0,
        "an unchanged remote Secret is not rewritten"
    );
    assert_eq!(writes.writes_of("poll-remote", "secrets"), before);
    // Edited by someone (no event reaches kubesync): repaired by the next re-read.
    remote_secrets
        .patch(
            "creds-r",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"token": base64_encode("tampered")}})),
        )
        .await
        .expect("tamper");
    eventually("repaired within the interval", T, uploaded).await;
    assert_eq!(writes.writes_of("poll-remote", "secrets"), before + 1);
    // What the guide promises, read in order from the remote's audit log: the edit, then at
    // most two re-reads (one may have been in flight when the edit landed) before the repair
    // — the next re-read repairs it, whatever time a loaded machine takes.
    let (trail, edit, repair) = edit_and_repair(&remote, mark).await;
    let reads_between = trail[edit + 1..repair]
        .iter()
        .filter(|e| e.user.username == "uploader" && e.verb == "get")
        .count();
    println!(
        "edit at {}, repaired at {} after {reads_between} re-read(s)",
        trail[edit].request_received_timestamp, trail[repair].request_received_timestamp
    );
    assert!(
        (1..=2).contains(&reads_between),
        "repaired by the next re-read: {reads_between} re-reads between the edit and the repair"
    );
    running.stop().await;
}

/// The remote's audit log of `creds-r` after `mark`, once it shows someone else's edit and
/// the uploader's repair after it (positive control: the repair's line may be written after
/// the repaired Secret is read): the trail, the edit's index in it, the repair's.
async fn edit_and_repair(
    remote: &TestEnv,
    mark: usize,
) -> (Vec<kubesync_testenv::AuditEvent>, usize, usize) {
    eventually("the edit and its repair in the audit log", T, || async {
        let trail: Vec<kubesync_testenv::AuditEvent> = remote
            .audit()
            .expect("audit")
            .into_iter()
            .skip(mark)
            .filter(|e| e.resource() == "secrets" && e.name() == "creds-r")
            .collect();
        let edit = trail
            .iter()
            .position(|e| e.user.username != "uploader" && e.is_write())?;
        let repair = edit
            + 1
            + trail[edit + 1..]
                .iter()
                .position(|e| e.user.username == "uploader" && e.is_write())?;
        Some((trail, edit, repair))
    })
    .await
}

/// The empty remote Secret `creds-r` of namespace `ns`, as an admin pre-creates it (uploads
/// only update).
fn remote_creds(ns: &str) -> Secret {
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": "creds-r", "namespace": ns}, "type": "Opaque"}),
    )
    .expect("secret")
}

/// The local Secret `creds` controlled by the local Widget `owner`, with `token` = `value`.
fn local_creds(owner: &DynamicObject, value: &str) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "creds", "namespace": owner.metadata.namespace, "ownerReferences": [{
            "apiVersion": "demo.kubesync.io/v1", "kind": "Widget", "name": owner.metadata.name,
            "uid": owner.metadata.uid, "controller": true}]},
        "type": "Opaque", "data": {"token": base64_encode(value)}
    }))
    .expect("secret")
}

/// A Secret's `token`, as text.
fn token(s: &Secret) -> Option<String> {
    s.data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|b| String::from_utf8_lossy(&b.0).to_string())
}

fn base64_encode(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | (u32::from(c) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[tokio::test]
async fn teleport_domain_uses_sync_controller_names() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("teleport");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .local_namespace_suffix("-local-ns")
        .remote_name_suffix("-remote-rs")
        .domain("cloud.teleport.dev")
        .build(cluster(remote), cluster(local));
    let running = common::start_engine(engine).await;
    let r = widgets(remote, &ns);
    apply_widget(
        remote,
        &ns,
        "test-remote-rs",
        serde_json::json!({"spec": {"size": 2}}),
    )
    .await;
    let rw = until(&r, "test-remote-rs", "claimed and synced", |o| {
        o.annotations()
            .contains_key("cloud.teleport.dev/sync-local-generation")
    })
    .await;
    assert_eq!(rw.finalizers(), ["cloud.teleport.dev/sync-local"]);
    assert_eq!(
        rw.annotations()["cloud.teleport.dev/sync-remote-generation"],
        "1"
    );
    assert!(
        !rw.annotations()
            .keys()
            .any(|k| k.starts_with("kubesync.io/"))
    );
    let l_ns = format!("{ns}-local-ns");
    let lw = until(&widgets(local, &l_ns), "test", "local", |_| true).await;
    assert_eq!(lw.data["spec"]["size"], 2);
    let n = Api::<Namespace>::all(local.client().expect("client"))
        .get(&l_ns)
        .await
        .expect("ns");
    assert_eq!(
        n.annotations()
            .get("cloud.teleport.dev/sync-owner")
            .map(String::as_str),
        Some("test")
    );
    running.stop().await;
}

#[tokio::test]
async fn a_new_local_namespace_is_created_once_for_many_objects_at_once() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("burst");
    remote.create_namespace(&ns).await.expect("ns");
    // Thirty objects of one namespace, all queued at once when the engine starts: sixteen
    // reconciles find the local namespace missing at the same moment.
    for i in 0..30 {
        apply_widget(
            remote,
            &ns,
            &format!("b{i}"),
            serde_json::json!({"spec": {"size": i}}),
        )
        .await;
    }
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(cluster(remote), cluster(local));
    let writes = engine.write_counter();
    let running = common::start_engine(engine).await;
    let l = widgets(local, &ns);
    for i in 0..30 {
        until(&l, &format!("b{i}"), "synced", |_| true).await;
    }
    running.stop().await;
    // One namespace create, not one per concurrent reconcile. (The Widgets' count is not
    // asserted: under load, a reconcile may start before the local store shows the Widget it
    // just created and try once more, which the apiserver refuses.)
    assert_eq!(writes.writes_of(local.name(), "namespaces"), 1);
    assert!(writes.writes_of(local.name(), "widgets") >= 30);
}

#[tokio::test]
async fn a_restart_with_everything_in_sync_makes_zero_writes() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("zero");
    remote.create_namespace(&ns).await.expect("ns");
    let build = || {
        SpecStatusSync::builder(widget_type())
            .namespace_prefix(&ns)
            .secret_names(["creds"])
            .build(cluster(remote), cluster(local))
    };
    let first = build();
    let writes = first.write_counter();
    let running = common::start_engine(first).await;
    for i in 0..5 {
        apply_widget(
            remote,
            &ns,
            &format!("z{i}"),
            serde_json::json!({"spec": {"size": i}}),
        )
        .await;
    }
    let (r, l) = (widgets(remote, &ns), widgets(local, &ns));
    for i in 0..5 {
        until(&l, &format!("z{i}"), "synced", |_| true).await;
        set_status(
            local,
            &ns,
            &format!("z{i}"),
            serde_json::json!({"phase": "Ready"}),
        )
        .await;
    }
    for i in 0..5 {
        until(&r, &format!("z{i}"), "status up", |o| {
            o.data["status"]["phase"] == "Ready"
        })
        .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.stop().await;
    assert!(writes.writes() > 0, "the first run did write");

    let second = build();
    let writes = second.write_counter();
    let began = std::time::Instant::now();
    let (running, mut reconciled) = common::start_engine_observed(second).await;
    // Every object's reconcile has completed: the witness that all were decided.
    for i in 0..5 {
        reconciled.after_start(&format!("z{i}"), began).await;
    }
    assert_eq!(writes.writes(), 0, "an in-sync restart writes nothing");
    running.stop().await;
}

#[tokio::test]
async fn no_local_deletion_while_the_remote_is_unreachable_and_catch_up_after() {
    init_tracing();
    let local = TestEnv::shared("local", true).expect("local");
    local.install_crds(CRD).await.expect("crd");
    let mut remote = TestEnv::builder()
        .name("flaky-remote")
        .start()
        .await
        .expect("remote");
    remote.install_crds(CRD).await.expect("crd");
    let ns = unique_ns("outage");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(cluster(&remote), cluster(local));
    let (running, mut reconciled, ctx) = common::start_engine_with_context(engine).await;
    let l = widgets(local, &ns);
    apply_widget(
        &remote,
        &ns,
        "keep",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    until(&l, "keep", "synced", |_| true).await;

    remote.stop_apiserver();
    eventually("the remote seen unreachable", T, || async {
        matches!(
            ctx.cluster_status(remote.name()),
            kubesync::ClusterStatus::Unreachable(_)
        )
        .then_some(())
    })
    .await;
    // Witness: a change of the local object is reconciled during the outage (its twin's
    // last known state is written back; nothing is deleted).
    let keep = reconciled.follow(key_of(local, &widget_type(), &ns, "keep"));
    let touched = Change::written(keep, &touch(&l, "keep").await);
    reconciled.saw("keep", &[&touched]).await;
    assert!(
        get(&l, "keep").await.is_some(),
        "no deletion while the remote is down"
    );
    // The dangerous case: kubesync restarts while the remote is down, so its remote store is
    // empty. The local object must still not be taken for an orphan.
    running.stop().await;
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(cluster(&remote), cluster(local));
    let (running, _, ctx) = common::start_engine_with_context(engine).await;
    // Witness: the local list queued the key, held (the remote never listed), never run.
    eventually("the key held in the queue", T, || async {
        (ctx.metrics().queued() >= 1).then_some(())
    })
    .await;
    assert_eq!(
        ctx.metrics().reconciles(),
        0,
        "nothing reconciled during the outage"
    );
    assert!(
        get(&l, "keep").await.is_some(),
        "no deletion after a restart during the outage"
    );

    remote.restart_apiserver().await.expect("restart");
    apply_widget(
        &remote,
        &ns,
        "keep",
        serde_json::json!({"spec": {"size": 7}}),
    )
    .await;
    until(&l, "keep", "caught up after the outage", |o| {
        o.data["spec"]["size"] == 7
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn sharding_by_suffix_across_two_local_clusters() {
    init_tracing();
    let (remote, east) = clusters().await;
    let west = TestEnv::shared("local-west", false).expect("west");
    west.install_crds(CRD).await.expect("crd");
    let ns = unique_ns("shard");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = |suffix: &str, local: &TestEnv| {
        SpecStatusSync::builder(widget_type())
            .remote_name_suffix(suffix)
            .local_namespace_suffix(suffix)
            .namespace_prefix(&ns)
            .build(cluster(remote), cluster(local))
    };
    let e = common::start_engine(engine("-east", east)).await;
    let w = common::start_engine(engine("-west", west)).await;
    apply_widget(
        remote,
        &ns,
        "a-east",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    apply_widget(
        remote,
        &ns,
        "b-west",
        serde_json::json!({"spec": {"size": 2}}),
    )
    .await;
    until(
        &widgets(east, &format!("{ns}-east")),
        "a",
        "east got a",
        |_| true,
    )
    .await;
    until(
        &widgets(west, &format!("{ns}-west")),
        "b",
        "west got b",
        |_| true,
    )
    .await;
    // Witness that east has seen (and passed over) b-west: a later object of its own shard
    // arrives on the same remote watch, after b-west's event.
    apply_widget(
        remote,
        &ns,
        "c-east",
        serde_json::json!({"spec": {"size": 3}}),
    )
    .await;
    until(
        &widgets(east, &format!("{ns}-east")),
        "c",
        "east got c",
        |_| true,
    )
    .await;
    assert!(
        get(&widgets(east, &format!("{ns}-east")), "b")
            .await
            .is_none()
    );
    assert!(
        get(&widgets(west, &format!("{ns}-west")), "a")
            .await
            .is_none()
    );
    // The namespace may not exist at all (nothing was ever created there): that is empty too;
    // any other error fails the test.
    let listed = match widgets(east, &format!("{ns}-west"))
        .list(&Default::default())
        .await
    {
        Ok(l) => l.items,
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => panic!("list: {e}"),
    };
    assert!(listed.is_empty(), "{} objects", listed.len());
    e.stop().await;
    w.stop().await;
}

#[tokio::test]
async fn a_failed_status_upload_holds_back_the_spec_until_it_succeeds() {
    use k8s_openapi::api::rbac::v1::PolicyRule;
    init_tracing();
    let local = TestEnv::shared("local", true).expect("local");
    local.install_crds(CRD).await.expect("crd");
    let remote = TestEnv::builder()
        .name("rbac-remote")
        .user("syncer", &[])
        .start()
        .await
        .expect("remote");
    remote.install_crds(CRD).await.expect("crd");
    let ns = unique_ns("blocked");
    remote.create_namespace(&ns).await.expect("ns");
    let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec!["demo.kubesync.io".into()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    };
    // Everything but the status subresource.
    remote
        .grant(
            "syncer",
            None,
            "widgets",
            vec![rule(
                &["widgets"],
                &["get", "list", "watch", "patch", "update"],
            )],
        )
        .await
        .expect("grant");
    let remote_as_syncer =
        kubesync::Cluster::new("rbac-remote", remote.client_as("syncer").expect("client"));
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(remote_as_syncer, cluster(local));
    let (running, _, ctx) = common::start_engine_with_context(engine).await;
    let (r, l) = (widgets(&remote, &ns), widgets(local, &ns));
    apply_widget(&remote, &ns, "w", serde_json::json!({"spec": {"size": 1}})).await;
    until(&l, "w", "created", |_| true).await;

    set_status(local, &ns, "w", serde_json::json!({"phase": "Degraded"})).await;
    apply_widget(&remote, &ns, "w", serde_json::json!({"spec": {"size": 2}})).await;
    // Witness: once the engine's store shows size 2, a further reconcile of w fails (the
    // status upload is forbidden) — that reconcile saw the new spec and held it back.
    let key = kubesync::ObjectKey::new("rbac-remote", &widget_type(), Some(ns.clone()), "w");
    eventually("the new spec in the store", T, || async {
        ctx.get(&key).filter(|o| o.data["spec"]["size"] == 2)
    })
    .await;
    let failures = ctx.metrics().failures();
    eventually("a failed reconcile after it", T, || async {
        (ctx.metrics().failures() > failures).then_some(())
    })
    .await;
    assert_eq!(
        get(&l, "w").await.expect("w").data["spec"]["size"],
        1,
        "spec held back while status cannot be written"
    );
    assert!(get(&r, "w").await.expect("w").data.get("status").is_none());

    remote
        .grant(
            "syncer",
            None,
            "widgets-status",
            vec![rule(&["widgets/status"], &["patch", "update"])],
        )
        .await
        .expect("grant status");
    until(&r, "w", "status up once allowed", |o| {
        o.data["status"]["phase"] == "Degraded"
    })
    .await;
    until(&l, "w", "then the spec comes down", |o| {
        o.data["spec"]["size"] == 2
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn a_terminating_local_object_is_waited_for_then_recreated() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("terminating");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(cluster(remote), cluster(local));
    let (running, mut reconciled) = common::start_engine_observed(engine).await;
    let (r, l) = (widgets(remote, &ns), widgets(local, &ns));
    apply_widget(remote, &ns, "t", serde_json::json!({"spec": {"size": 1}})).await;
    until(&l, "t", "created", |_| true).await;
    // A local controller's finalizer keeps the object terminating after a delete.
    l.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .expect("finalizer");
    let (remote_t, local_t) = (
        reconciled.follow(key_of(remote, &widget_type(), &ns, "t")),
        reconciled.follow(key_of(local, &widget_type(), &ns, "t")),
    );
    let terminating = l
        .delete("t", &DeleteParams::default())
        .await
        .expect("delete")
        .left()
        .expect("held by its finalizer");
    let terminating = Change::written(local_t, &terminating);
    let spec_2 = apply_widget(remote, &ns, "t", serde_json::json!({"spec": {"size": 2}})).await;
    // Witness: a reconcile on stores showing the local deletion pending and the new spec.
    reconciled
        .saw("t", &[&Change::written(remote_t, &spec_2), &terminating])
        .await;
    let waiting = get(&l, "t").await.expect("still terminating");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        waiting.data["spec"]["size"], 1,
        "a terminating object is not written"
    );
    let uid = waiting.metadata.uid.clone();
    l.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    until(&l, "t", "recreated with the current spec", |o| {
        o.metadata.uid != uid && o.data["spec"]["size"] == 2
    })
    .await;
    assert!(get(&r, "t").await.is_some());
    running.stop().await;
}

#[tokio::test]
async fn remote_objects_outside_the_namespace_prefix_are_never_touched() {
    init_tracing();
    let (remote, local) = clusters().await;
    let inside = unique_ns("prefix-in");
    let outside = unique_ns("other");
    for ns in [&inside, &outside] {
        remote.create_namespace(ns).await.expect("ns");
    }
    // Objects outside the prefix, present when the engine starts.
    for i in 0..30 {
        apply_widget(
            remote,
            &outside,
            &format!("old-{i}"),
            serde_json::json!({"spec": {"size": 1}}),
        )
        .await;
    }
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&inside)
        .build(cluster(remote), cluster(local));
    let (controller, reconciler) = engine.into_parts().await.expect("parts");
    let ctx = controller.context();
    let running = common::start(controller, reconciler);
    apply_widget(
        remote,
        &outside,
        "x",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    apply_widget(
        remote,
        &inside,
        "y",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    // x was applied before y on the same watch: when y is synced, x's event has been seen.
    until(&widgets(local, &inside), "y", "inside synced", |_| true).await;
    let x = get(&widgets(remote, &outside), "x").await.expect("x");
    assert!(
        x.finalizers().is_empty() && x.annotations().is_empty(),
        "not claimed, not annotated"
    );
    assert!(get(&widgets(local, &outside), "x").await.is_none());
    // They never even reach the queue: only "y" is reconciled (its first pass and the
    // echoes of its own writes), not the 31 objects outside the prefix.
    let reconciles = ctx.metrics().reconciles();
    assert!(reconciles <= 8, "{reconciles} reconciles");
    running.stop().await;
}

/// A controller over the engine's two clusters whose stores are filled by `remote_watches`
/// (and the local Widgets), run only to fill them: the context a safeguard test hands to the
/// engine's real reconciler, with the remote side in a chosen state.
async fn context_with(
    remote: &TestEnv,
    local: &TestEnv,
    remote_watches: Vec<kubesync::Watch>,
) -> (Running, kubesync::Context) {
    let mut controller = kubesync::Controller::new()
        .cluster(cluster(remote))
        .cluster(cluster(local))
        .watch(local.name(), kubesync::Watch::dynamic(widget_type()))
        .expect("watch")
        .watch(
            local.name(),
            kubesync::Watch::of::<Namespace>().metadata_only(),
        )
        .expect("watch");
    for w in remote_watches {
        controller = controller.watch(remote.name(), w).expect("watch");
    }
    let ctx = controller.context();
    let running = start(
        controller,
        kubesync::reconciler_fn(|_, _| async { Ok::<_, String>(kubesync::Action::done()) }),
    );
    (running, ctx)
}

/// A local object synced from `name`, and the engine that made it (stopped).
async fn synced_pair(
    remote: &TestEnv,
    local: &TestEnv,
    ns: &str,
    name: &str,
) -> kubesync::syncer::SyncEngine<SpecStatusSync> {
    let build = || {
        SpecStatusSync::builder(widget_type())
            .namespace_prefix(ns)
            .build(cluster(remote), cluster(local))
    };
    let running = common::start_engine(build()).await;
    apply_widget(remote, ns, name, serde_json::json!({"spec": {"size": 1}})).await;
    until(&widgets(local, ns), name, "synced", |_| true).await;
    running.stop().await;
    build()
}

/// Safeguard alone: the syncer acts on a source absent from its store only while the source
/// cluster is healthy. Here the remote Widget is really gone (so a live read confirms its
/// absence) but a remote watch fails: the reconcile waits and deletes nothing. (Checked:
/// without the cluster-status check the local object is deleted.)
#[tokio::test]
async fn an_absent_source_is_not_acted_on_while_its_cluster_is_unhealthy() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("guard-health");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = synced_pair(remote, local, &ns, "w").await;
    let writes = engine.write_counter();
    // Really gone: deleted, and kubesync's finalizer removed by hand.
    let r = widgets(remote, &ns);
    r.delete("w", &DeleteParams::default())
        .await
        .expect("delete");
    r.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("release");
    until_gone(&r, "w", "remote gone").await;
    // The remote Widgets listed (without w), plus a watch of a type the apiserver does not
    // serve: the remote cluster is unhealthy.
    let missing = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nowhere.kubesync.io", "v1", "Nothing"),
        "nothings",
    );
    let (running, ctx) = context_with(
        remote,
        local,
        vec![
            kubesync::Watch::dynamic(widget_type()),
            kubesync::Watch::dynamic(missing),
        ],
    )
    .await;
    let local_key = kubesync::ObjectKey::new(local.name(), &widget_type(), Some(ns.clone()), "w");
    eventually("stores filled, the remote unhealthy", T, || async {
        (ctx.get(&local_key).is_some()
            && matches!(
                ctx.cluster_status(remote.name()),
                kubesync::ClusterStatus::Unreachable(_)
            ))
        .then_some(())
    })
    .await;
    let (_, reconciler) = engine.into_parts().await.expect("parts");
    let key = kubesync::ObjectKey::new(remote.name(), &widget_type(), Some(ns.clone()), "w");
    let action = kubesync::Reconciler::reconcile(&reconciler, &key, &ctx)
        .await
        .expect("reconcile");
    assert!(action.requeue_after().is_some(), "it looks again later");
    assert_eq!(writes.writes(), 0, "nothing written or deleted");
    assert!(get(&widgets(local, &ns), "w").await.is_some());
    running.stop().await;
}

/// Safeguard alone: a teardown because the remote store lacks the object is confirmed by a
/// live read first. Here the remote is healthy and its store simply does not hold the
/// Widget (its watch is narrowed by a label the Widget lacks): nothing is deleted. (Checked:
/// without the live read the local object is deleted.)
#[tokio::test]
async fn an_object_missing_from_a_healthy_store_is_confirmed_absent_before_a_teardown() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("guard-live");
    remote.create_namespace(&ns).await.expect("ns");
    let engine = synced_pair(remote, local, &ns, "w").await;
    let writes = engine.write_counter();
    let (running, ctx) = context_with(
        remote,
        local,
        vec![kubesync::Watch::dynamic(widget_type()).labels("not-on-w=yes")],
    )
    .await;
    let local_key = kubesync::ObjectKey::new(local.name(), &widget_type(), Some(ns.clone()), "w");
    eventually("stores filled, the remote healthy", T, || async {
        (ctx.get(&local_key).is_some()
            && ctx.cluster_status(remote.name()) == kubesync::ClusterStatus::Ready)
            .then_some(())
    })
    .await;
    let (_, reconciler) = engine.into_parts().await.expect("parts");
    let key = kubesync::ObjectKey::new(remote.name(), &widget_type(), Some(ns.clone()), "w");
    kubesync::Reconciler::reconcile(&reconciler, &key, &ctx)
        .await
        .expect("reconcile");
    assert_eq!(writes.writes(), 0, "nothing written or deleted");
    assert!(get(&widgets(local, &ns), "w").await.is_some());
    assert!(get(&widgets(remote, &ns), "w").await.is_some());
    running.stop().await;
}

#[tokio::test]
async fn the_counter_counts_objects_in_sync_paused_and_how_long_behind() {
    use kubesync::syncers::spec_status::counts::Counts;
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("counts");
    remote.create_namespace(&ns).await.expect("ns");
    let outside = unique_ns("elsewhere");
    remote.create_namespace(&outside).await.expect("ns");
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(cluster(remote), cluster(local));
    let (controller, reconciler) = engine.into_parts().await.expect("parts");
    let counter = reconciler.syncer().counter();
    let ctx = controller.context();
    let running = start(controller, reconciler);
    let count = |at: std::time::Instant| counter.count(&ctx, remote.name(), local.name(), at);

    apply_widget(
        remote,
        &ns,
        "synced",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    apply_widget(
        remote,
        &ns,
        "held",
        serde_json::json!({
            "metadata": {"annotations": {"kubesync.io/paused": "true"}}, "spec": {"size": 1}
        }),
    )
    .await;
    // Outside the shard: never counted.
    apply_widget(
        remote,
        &outside,
        "other",
        serde_json::json!({"spec": {"size": 1}}),
    )
    .await;
    let l = widgets(local, &ns);
    until(&l, "synced", "synced copied", |o| {
        o.data["spec"]["size"] == 1
    })
    .await;
    let first = eventually("one in sync, one paused", T, || async {
        let now = std::time::Instant::now();
        let c = count(now);
        (c.objects == 2 && c.in_sync == 1 && c.paused == 1).then_some((now, c))
    })
    .await;
    // The paused one is behind, since it was first seen or first counted: the clock is a
    // parameter, so a later count says how long, without waiting.
    let later = first.0 + Duration::from_secs(90);
    let c = count(later);
    assert_eq!(
        Counts {
            oldest_behind: Duration::ZERO,
            ..c
        },
        Counts {
            objects: 2,
            in_sync: 1,
            paused: 1,
            oldest_behind: Duration::ZERO,
        }
    );
    assert!(
        c.oldest_behind >= Duration::from_secs(90),
        "behind for at least the 90 s between the counts: {:?}",
        c.oldest_behind
    );
    // Unpaused, it is copied: every object in sync, nothing behind.
    widgets(remote, &ns)
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"kubesync.io/paused": null}}}),
            ),
        )
        .await
        .expect("unpause");
    eventually("both in sync", T, || async {
        let c = count(std::time::Instant::now());
        (c == Counts {
            objects: 2,
            in_sync: 2,
            paused: 0,
            oldest_behind: Duration::ZERO,
        })
        .then_some(())
    })
    .await;
    running.stop().await;
}

/// A local object with no status yet uploads nothing: the remote's status stays as it is
/// (sync-controller wiped it with an empty one), and the local status, once there, goes up.
#[tokio::test]
async fn a_local_object_without_a_status_uploads_nothing() {
    init_tracing();
    let (remote, local) = clusters().await;
    let ns = unique_ns("nostatus");
    remote.create_namespace(&ns).await.expect("ns");
    apply_widget(remote, &ns, "s", serde_json::json!({"spec": {"size": 1}})).await;
    set_status(remote, &ns, "s", serde_json::json!({"phase": "Remote"})).await;
    let engine = SpecStatusSync::builder(widget_type())
        .namespace_prefix(&ns)
        .build(cluster(remote), cluster(local));
    let running = common::start_engine(engine).await;
    let (r, l) = (widgets(remote, &ns), widgets(local, &ns));
    let copy = until(&l, "s", "local created", |_| true).await;
    assert!(
        copy.data
            .get("status")
            .is_none_or(|s| s.is_null() || s == &serde_json::json!({}))
    );
    // The pass that writes the generation marks decided on the status first (status up, then
    // spec down, then the marks): it left the remote status alone.
    let rw = until(&r, "s", "generation marks", |o| {
        o.annotations()
            .contains_key("kubesync.io/sync-local-generation")
    })
    .await;
    assert_eq!(rw.data["status"], serde_json::json!({"phase": "Remote"}));
    // Once the local object has a status, it goes up.
    set_status(local, &ns, "s", serde_json::json!({"phase": "Local"})).await;
    until(&r, "s", "the local status uploaded", |o| {
        o.data["status"]["phase"] == "Local"
    })
    .await;
    running.stop().await;
}
