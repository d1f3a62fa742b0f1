//! The fan-out engine on real control planes.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kubesync::syncers::fan_out::rules::{
    CopyRules, DataFilter, KeyFilter, NamespaceRule, OnConflict, Owner, Strategy,
};
use kubesync::syncers::fan_out::{
    Declaration, Destination, DestinationState, FanOut, FanOutSpec, Outcome, SourceRef,
};
use kubesync::{Action, Controller, Watch, reconciler_fn};
use kubesync_testenv::{TestEnv, eventually};

const T: Duration = Duration::from_secs(40);

type Specs = Arc<Mutex<HashMap<String, FanOutSpec>>>;
type Reports = Arc<Mutex<HashMap<String, Outcome>>>;

/// Runs a fan-out controller: each ConfigMap in `control` is a declaration whose spec is in
/// `specs` under its name; deleting the ConfigMap deletes the declaration.
fn run_fan_out(
    env: &TestEnv,
    control: &str,
    specs: Specs,
    outcomes: Reports,
    extra: Vec<kubesync::Cluster>,
) -> Running {
    run_fan_out_seen(env, control, specs, outcomes, extra).0
}

/// [`run_fan_out`], also returning the controller's context (to look into its stores).
fn run_fan_out_seen(
    env: &TestEnv,
    control: &str,
    specs: Specs,
    outcomes: Reports,
    extra: Vec<kubesync::Cluster>,
) -> (Running, kubesync::Context) {
    let (running, ctx, _) = run_fan_out_counted(env, control, specs, outcomes, extra);
    (running, ctx)
}

/// [`run_fan_out_seen`], also returning the engine's write counter.
fn run_fan_out_counted(
    env: &TestEnv,
    control: &str,
    specs: Specs,
    outcomes: Reports,
    extra: Vec<kubesync::Cluster>,
) -> (Running, kubesync::Context, kubesync::Writer) {
    let fan_out = Arc::new(FanOut::new("local"));
    run_fan_out_on(fan_out, env, control, specs, outcomes, extra)
}

/// [`run_fan_out_counted`] with the engine `fan_out`.
fn run_fan_out_on(
    fan_out: Arc<FanOut>,
    env: &TestEnv,
    control: &str,
    specs: Specs,
    outcomes: Reports,
    extra: Vec<kubesync::Cluster>,
) -> (Running, kubesync::Context, kubesync::Writer) {
    let writes = fan_out.write_counter();
    let mut controller = Controller::new()
        .cluster(kubesync::Cluster::new(
            "local",
            env.client().expect("client"),
        ))
        .watch("local", Watch::of::<ConfigMap>().namespace(control))
        .expect("watch");
    for c in extra {
        controller = controller.cluster(c);
    }
    let cm_type = ApiResource::erase::<ConfigMap>(&());
    let control = control.to_string();
    let ctx = controller.context();
    let running = start(
        controller,
        reconciler_fn(move |key, ctx| {
            let (fan_out, specs, outcomes, cm_type, control) = (
                fan_out.clone(),
                specs.clone(),
                outcomes.clone(),
                cm_type.clone(),
                control.clone(),
            );
            async move {
                if !key.is_of(&cm_type) || key.namespace.as_deref() != Some(control.as_str()) {
                    return Ok(Action::done());
                }
                let anchor = ctx.get(&key);
                let Some(spec) = specs.lock().expect("lock").get(&key.name).cloned() else {
                    return Ok(Action::done());
                };
                let Some(anchor) = anchor else {
                    // Declaration gone: its copies were removed while it was deleting (below);
                    // a restarted engine finds them by their marks through `owner_uid`.
                    return Ok(Action::done());
                };
                let deleting = anchor.annotations().get("test/deleting").is_some();
                let decl = Declaration {
                    key: key.clone(),
                    owner: Owner {
                        reference: format!("local/{control}/{}", key.name),
                        uid: anchor.uid().unwrap_or_default(),
                        shard: None,
                    },
                    spec,
                    deleting,
                    refused: false,
                    record: None,
                };
                let outcome = fan_out.reconcile(&ctx, &decl).await?;
                let again = !outcome.ready
                    || outcome
                        .destinations
                        .iter()
                        .any(|d| d.state == DestinationState::Error)
                    || (deleting && outcome.remaining_copies > 0);
                outcomes
                    .lock()
                    .expect("lock")
                    .insert(key.name.clone(), outcome);
                Ok::<_, kubesync::Error>(if again {
                    Action::requeue(Duration::from_millis(500))
                } else {
                    Action::done()
                })
            }
        }),
    );
    (running, ctx, writes)
}

/// The state the last outcome of the declaration `decl` reports for its destination in `ns`.
fn destination_state(outcomes: &Reports, decl: &str, ns: &str) -> Option<DestinationState> {
    let outcomes = outcomes.lock().expect("lock");
    let d = outcomes
        .get(decl)?
        .destinations
        .iter()
        .find(|d| d.namespace == ns)?;
    Some(d.state)
}

/// A destination: the namespace `ns`.
fn to(ns: &str) -> Destination {
    Destination {
        namespaces: NamespaceRule {
            namespace: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn secret_type() -> ApiResource {
    ApiResource::erase::<Secret>(&())
}

fn spec(source_ns: &str, name: &str, destinations: Vec<Destination>) -> FanOutSpec {
    FanOutSpec {
        source: SourceRef::one(secret_type(), source_ns, name),
        destinations,
        on_conflict: OnConflict::Skip,
        rules: CopyRules::default(),
        consent: None,
        deletion_policy: Default::default(),
        mode: Default::default(),
        update_policy: Default::default(),
        adoptable: None,
        acting_as: None,
        acting_as_in: Default::default(),
        take_over: Vec::new(),
    }
}

/// One named namespace.
fn into_namespace(namespace: &str) -> Destination {
    Destination {
        namespaces: NamespaceRule {
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn all_with_label(label: &str) -> Destination {
    Destination {
        namespaces: NamespaceRule {
            namespace: Some("*".into()),
            namespace_selector: Some(kube::core::Selector::from_iter([(
                label.to_string(),
                "yes".to_string(),
            )])),
            exclude_namespaces: vec![],
            only_namespaces: vec![],
            matcher: None,
        },
        ..Default::default()
    }
}

async fn create_ns(env: &TestEnv, name: &str, labels: &[(&str, &str)]) {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": labels.iter().cloned().collect::<HashMap<_, _>>()}})).expect("ns");
    Api::<Namespace>::all(env.client().expect("client"))
        .create(&PostParams::default(), &ns)
        .await
        .expect("create ns");
}

/// A unique tag for one test, and a namespace `<tag>-<suffix>` created for each suffix.
async fn namespaces<const N: usize>(
    env: &TestEnv,
    prefix: &str,
    suffixes: [&str; N],
) -> (String, [String; N]) {
    let tag = unique_ns(prefix);
    let names = suffixes.map(|s| format!("{tag}-{s}"));
    for ns in &names {
        create_ns(env, ns, &[]).await;
    }
    (tag, names)
}

async fn put_secret(
    env: &TestEnv,
    ns: &str,
    name: &str,
    data: &[(&str, &str)],
    type_: &str,
    annotations: &[(&str, &str)],
) {
    let v = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns,
        "annotations": annotations.iter().cloned().collect::<HashMap<_, _>>()},
        "type": type_, "stringData": data.iter().cloned().collect::<HashMap<_, _>>()});
    Api::<Secret>::namespaced(env.client().expect("client"), ns)
        .patch(name, &PatchParams::apply("tests").force(), &Patch::Apply(v))
        .await
        .expect("put secret");
}

fn value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).to_string())
}

async fn copies_with(env: &TestEnv, label: &str, name: &str, want: Option<&str>) -> usize {
    let namespaces = Api::<Namespace>::all(env.client().expect("client"))
        .list(&Default::default())
        .await
        .expect("list");
    let mut n = 0;
    for ns in namespaces
        .items
        .iter()
        .filter(|n| n.labels().get(label).is_some())
    {
        let s = Api::<Secret>::namespaced(env.client().expect("client"), &ns.name_any())
            .get_opt(name)
            .await
            .expect("get");
        if s.is_some_and(|s| want.is_none_or(|w| value(&s, "token").as_deref() == Some(w))) {
            n += 1;
        }
    }
    n
}

#[tokio::test]
async fn fan_out_to_100_namespaces_follows_source_namespaces_and_drift_then_cleans_up() {
    init_tracing();
    let env = shared("fan");
    let tag = unique_ns("f100");
    let control = format!("{tag}-control");
    let source_ns = format!("{tag}-src");
    create_ns(env, &control, &[]).await;
    create_ns(env, &source_ns, &[(&tag, "yes")]).await;
    for i in 0..100 {
        create_ns(env, &format!("{tag}-{i}"), &[(&tag, "yes")]).await;
    }
    put_secret(env, &source_ns, "pull", &[("token", "v1")], "Opaque", &[]).await;
    let specs: Specs = Arc::default();
    let outcomes: Reports = Arc::default();
    specs.lock().expect("lock").insert(
        "share".into(),
        spec(&source_ns, "pull", vec![all_with_label(&tag)]),
    );
    let running = run_fan_out(env, &control, specs.clone(), outcomes.clone(), vec![]);
    apply_cm(env, &configmap(&control, "share", &[], &[])).await;

    eventually("100 copies", T, || async {
        (copies_with(env, &tag, "pull", Some("v1")).await == 101).then_some(())
    })
    .await;
    // 101 namespaces carry the label, the source's among them: it is never copied onto itself
    // (the source is counted once).
    let r = outcomes.lock().expect("lock")["share"].clone();
    assert_eq!(r.destinations.len(), 100);
    assert!(
        r.destinations
            .iter()
            .all(|d| d.state == DestinationState::Synced)
    );

    // Source update reaches all.
    put_secret(env, &source_ns, "pull", &[("token", "v2")], "Opaque", &[]).await;
    eventually("update everywhere", T, || async {
        (copies_with(env, &tag, "pull", Some("v2")).await == 101).then_some(())
    })
    .await;

    // Drift: edit and delete of a copy are reverted.
    let c0: Api<Secret> = Api::namespaced(env.client().expect("client"), &format!("{tag}-0"));
    c0.patch(
        "pull",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"stringData": {"token": "hacked"}})),
    )
    .await
    .expect("edit");
    let c1: Api<Secret> = Api::namespaced(env.client().expect("client"), &format!("{tag}-1"));
    c1.delete("pull", &DeleteParams::default())
        .await
        .expect("delete copy");
    eventually("drift reverted", T, || async {
        let a = c0
            .get_opt("pull")
            .await
            .expect("get")
            .and_then(|s| value(&s, "token"));
        let b = c1
            .get_opt("pull")
            .await
            .expect("get")
            .and_then(|s| value(&s, "token"));
        (a.as_deref() == Some("v2") && b.as_deref() == Some("v2")).then_some(())
    })
    .await;

    // A new matching namespace gets its copy; a relabelled one gets one; one that stops
    // matching loses it.
    create_ns(env, &format!("{tag}-new"), &[(&tag, "yes")]).await;
    let late = format!("{tag}-late");
    create_ns(env, &late, &[]).await;
    Api::<Namespace>::all(env.client().expect("client"))
        .patch(
            &late,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {&tag: "yes"}}})),
        )
        .await
        .expect("label");
    Api::<Namespace>::all(env.client().expect("client"))
        .patch(
            &format!("{tag}-2"),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {&tag: null}}})),
        )
        .await
        .expect("unlabel");
    let new_api: Api<Secret> =
        Api::namespaced(env.client().expect("client"), &format!("{tag}-new"));
    let late_api: Api<Secret> = Api::namespaced(env.client().expect("client"), &late);
    let gone_api: Api<Secret> = Api::namespaced(env.client().expect("client"), &format!("{tag}-2"));
    eventually("namespace changes followed", T, || async {
        (new_api.get_opt("pull").await.expect("get").is_some()
            && late_api.get_opt("pull").await.expect("get").is_some()
            && gone_api.get_opt("pull").await.expect("get").is_none())
        .then_some(())
    })
    .await;

    // Source deleted: every copy goes, the source's namespace is untouched.
    Api::<Secret>::namespaced(env.client().expect("client"), &source_ns)
        .delete("pull", &DeleteParams::default())
        .await
        .expect("delete source");
    eventually("all copies deleted", T, || async {
        (copies_with(env, &tag, "pull", None).await == 0).then_some(())
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn conflicts_adoption_protection_and_two_declarations() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, skip_ns, adopt_ns, protect_ns]) =
        namespaces(env, "conf", ["control", "src", "skip", "adopt", "protect"]).await;
    put_secret(env, &src, "s", &[("token", "ours")], "Opaque", &[]).await;
    put_secret(env, &skip_ns, "s", &[("token", "theirs")], "Opaque", &[]).await;
    put_secret(env, &adopt_ns, "s", &[("token", "theirs")], "Opaque", &[]).await;
    put_secret(
        env,
        &protect_ns,
        "s",
        &[("token", "theirs")],
        "Opaque",
        &[("kubesync.io/protect", "true")],
    )
    .await;
    let specs: Specs = Arc::default();
    let outcomes: Reports = Arc::default();
    {
        let mut s = specs.lock().expect("lock");
        s.insert("skipper".into(), spec(&src, "s", vec![to(&skip_ns)]));
        let mut adopter = spec(&src, "s", vec![to(&adopt_ns), to(&protect_ns)]);
        adopter.on_conflict = OnConflict::Adopt;
        s.insert("adopter".into(), adopter);
        // A second declaration for the same destination as the adopter.
        s.insert("second".into(), spec(&src, "s", vec![to(&adopt_ns)]));
    }
    let (running, ctx) = run_fan_out_seen(env, &control, specs.clone(), outcomes.clone(), vec![]);
    apply_cm(env, &configmap(&control, "skipper", &[], &[])).await;
    apply_cm(env, &configmap(&control, "adopter", &[], &[])).await;
    let get = |ns: &str| {
        let api: Api<Secret> = Api::namespaced(env.client().expect("client"), ns);
        async move { api.get("s").await.expect("get") }
    };
    // Someone else's objects, as they were before any declaration ran.
    let identity = |o: &Secret| (o.metadata.uid.clone(), o.metadata.resource_version.clone());
    let theirs_before = [
        identity(&get(&skip_ns).await),
        identity(&get(&protect_ns).await),
    ];
    eventually("adopted", T, || async {
        (value(&get(&adopt_ns).await, "token").as_deref() == Some("ours")).then_some(())
    })
    .await;
    apply_cm(env, &configmap(&control, "second", &[], &[])).await;
    let state = |decl: &str, ns: &str| {
        outcomes
            .lock()
            .expect("lock")
            .get(decl)
            .and_then(|r| r.destinations.iter().find(|d| d.namespace == ns).cloned())
    };
    eventually("second reports a conflict", T, || async {
        state("second", &adopt_ns).filter(|d| d.state == DestinationState::Conflict)
    })
    .await;
    let skip = eventually("skip reported", T, || async {
        state("skipper", &skip_ns).filter(|d| d.state == DestinationState::Conflict)
    })
    .await;
    assert!(
        skip.message.contains("not created by kubesync"),
        "{}",
        skip.message
    );
    let protect = eventually("protect reported", T, || async {
        state("adopter", &protect_ns).filter(|d| d.state == DestinationState::Conflict)
    })
    .await;
    assert!(protect.message.contains("protect"));
    // Those decisions were taken on metadata: the engine holds no content of objects it did
    // not create (the adopted one it read live, and now holds as its copy's print).
    for ns in [&skip_ns, &protect_ns] {
        let key = kubesync::ObjectKey::new("local", &secret_type(), Some(ns.clone()), "s");
        assert!(ctx.get(&key).is_none(), "{ns}: no full object held");
        // The watch of the others starts once a first plan is carried out.
        let meta = eventually("metadata held", T, || async { ctx.get_metadata(&key) }).await;
        assert!(meta.data.is_null(), "{ns}: the store holds the content");
    }
    let adopted_key =
        kubesync::ObjectKey::new("local", &secret_type(), Some(adopt_ns.clone()), "s");
    let held = eventually("the adopted copy held as a copy (its print)", T, || async {
        ctx.get(&adopted_key)
            .filter(|o| o.labels().contains_key("kubesync.io/managed-by"))
    })
    .await;
    assert!(held.labels().contains_key("kubesync.io/managed-by"));
    // Untouched: the same objects (uid), never written (resourceVersion), still theirs.
    assert_eq!(
        [
            identity(&get(&skip_ns).await),
            identity(&get(&protect_ns).await)
        ],
        theirs_before,
        "untouched"
    );
    assert_eq!(
        value(&get(&skip_ns).await, "token").as_deref(),
        Some("theirs")
    );
    let adopted = get(&adopt_ns).await;
    assert!(adopted.labels().contains_key("kubesync.io/managed-by"));
    // The adopter keeps the copy: the second declaration did not change it.
    assert_eq!(
        adopted.annotations().get("kubesync.io/owner"),
        Some(&format!("local/{control}/adopter"))
    );

    // What blocked a destination changes: the declaration it blocked is woken at once (the
    // controller's periodic pass is 10 minutes away). The foreign object is deleted: the
    // skipper creates its copy; the protection is removed: the adopter adopts.
    let client = env.client().expect("client");
    Api::<Secret>::namespaced(client.clone(), &skip_ns)
        .delete("s", &DeleteParams::default())
        .await
        .expect("delete theirs");
    let skip_api: Api<Secret> = Api::namespaced(env.client().expect("client"), &skip_ns);
    eventually("copied once the name is free", T, || async {
        let copy = skip_api.get_opt("s").await.expect("get")?;
        (value(&copy, "token").as_deref() == Some("ours")).then_some(())
    })
    .await;
    Api::<Secret>::namespaced(client, &protect_ns)
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"annotations": {"kubesync.io/protect": null}}}),
            ),
        )
        .await
        .expect("unprotect");
    eventually("adopted once unprotected", T, || async {
        (value(&get(&protect_ns).await, "token").as_deref() == Some("ours")).then_some(())
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn replace_recreates_on_an_immutable_field_and_filters_apply() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, dst]) = namespaces(env, "repl", ["control", "src", "dst"]).await;
    let source_api: Api<Secret> = Api::namespaced(env.client().expect("client"), &src);
    put_secret(
        env,
        &src,
        "tls",
        &[("ca.crt", "CA"), ("tls.key", "KEY")],
        "Opaque",
        &[("argocd.argoproj.io/sync", "x"), ("keep", "1")],
    )
    .await;
    let mut s = spec(
        &src,
        "tls",
        vec![Destination {
            name: Some("ca-bundle".into()),
            strategy: Strategy::Replace,
            ..into_namespace(&dst)
        }],
    );
    s.rules = CopyRules {
        labels: KeyFilter::default(),
        annotations: KeyFilter {
            include: vec![],
            exclude: vec!["argocd.argoproj.io/".into()],
        },
        data: Some(DataFilter {
            include: vec!["ca.crt".into()],
            rename: [("ca.crt".to_string(), "bundle.pem".to_string())].into(),
        }),
        ..Default::default()
    };
    let specs: Specs = Arc::new(Mutex::new([("r".to_string(), s)].into()));
    let running = run_fan_out(env, &control, specs, Arc::default(), vec![]);
    apply_cm(env, &configmap(&control, "r", &[], &[])).await;
    let dst_api: Api<Secret> = Api::namespaced(env.client().expect("client"), &dst);
    let copy = eventually("copy", T, || async {
        dst_api.get_opt("ca-bundle").await.expect("get")
    })
    .await;
    assert_eq!(value(&copy, "bundle.pem").as_deref(), Some("CA"));
    assert!(
        value(&copy, "tls.key").is_none() && value(&copy, "ca.crt").is_none(),
        "only the included key, renamed"
    );
    assert_eq!(
        copy.annotations().get("keep").map(String::as_str),
        Some("1")
    );
    assert!(!copy.annotations().contains_key("argocd.argoproj.io/sync"));
    let uid = copy.uid();
    // The source is recreated with another type: a Secret's type is immutable.
    source_api
        .delete("tls", &DeleteParams::default())
        .await
        .expect("delete source");
    put_secret(
        env,
        &src,
        "tls",
        &[("ca.crt", "CA2")],
        "kubesync.io/custom",
        &[],
    )
    .await;
    let copy = eventually("recreated", T, || async {
        dst_api
            .get_opt("ca-bundle")
            .await
            .expect("get")
            .filter(|c| c.type_.as_deref() == Some("kubesync.io/custom"))
    })
    .await;
    assert_ne!(copy.uid(), uid, "a new object");
    assert_eq!(value(&copy, "bundle.pem").as_deref(), Some("CA2"));
    running.stop().await;
}

#[tokio::test]
async fn copies_are_deleted_after_a_restart_when_the_declaration_goes() {
    init_tracing();
    let env = shared("fan");
    let (tag, [control, src]) = namespaces(env, "restart", ["control", "src"]).await;
    for i in 0..3 {
        create_ns(env, &format!("{tag}-{i}"), &[(&tag, "yes")]).await;
    }
    put_secret(env, &src, "s", &[("token", "x")], "Opaque", &[]).await;
    let specs: Specs = Arc::new(Mutex::new(
        [("d".to_string(), spec(&src, "s", vec![all_with_label(&tag)]))].into(),
    ));
    let first = run_fan_out(env, &control, specs.clone(), Arc::default(), vec![]);
    apply_cm(env, &configmap(&control, "d", &[], &[])).await;
    eventually("copies", T, || async {
        (copies_with(env, &tag, "s", None).await == 3).then_some(())
    })
    .await;
    first.stop().await;

    // While no engine runs, the source is deleted.
    Api::<Secret>::namespaced(env.client().expect("client"), &src)
        .delete("s", &DeleteParams::default())
        .await
        .expect("delete");
    // A fresh engine (empty memory) finds the copies by their marks and deletes them.
    let second = run_fan_out(env, &control, specs, Arc::default(), vec![]);
    eventually("copies gone after restart", T, || async {
        (copies_with(env, &tag, "s", None).await == 0).then_some(())
    })
    .await;
    second.stop().await;
}

#[tokio::test]
async fn a_second_cluster_as_destination_and_its_outage() {
    init_tracing();
    let env = shared("fan");
    let mut other = own_cluster("fan-other").await;
    let (tag, [control, src]) = namespaces(env, "mc", ["control", "src"]).await;
    create_ns(&other, &format!("{tag}-remote"), &[(&tag, "yes")]).await;
    put_secret(env, &src, "s", &[("token", "one")], "Opaque", &[]).await;
    let mut dest = all_with_label(&tag);
    dest.cluster = Some("other".into());
    let specs: Specs = Arc::new(Mutex::new(
        [("mc".to_string(), spec(&src, "s", vec![dest]))].into(),
    ));
    let outcomes: Reports = Arc::default();
    let other_cluster = kubesync::Cluster::new("other", other.client().expect("client"));
    let running = run_fan_out(env, &control, specs, outcomes.clone(), vec![other_cluster]);
    apply_cm(env, &configmap(&control, "mc", &[], &[])).await;
    let remote_api: Api<Secret> =
        Api::namespaced(other.client().expect("client"), &format!("{tag}-remote"));
    eventually("copy in the other cluster", T, || async {
        remote_api.get_opt("s").await.expect("get")
    })
    .await;

    other.stop_apiserver();
    put_secret(env, &src, "s", &[("token", "two")], "Opaque", &[]).await;
    let r = eventually("status says the cluster is unreachable", T, || async {
        outcomes
            .lock()
            .expect("lock")
            .get("mc")
            .cloned()
            .filter(|r| !r.unreachable.is_empty())
    })
    .await;
    assert!(
        r.destinations
            .iter()
            .all(|d| d.state == DestinationState::Error && d.message.contains("unreachable")),
        "{:?}",
        r.destinations
    );
    other.restart_apiserver().await.expect("restart");
    let remote_api: Api<Secret> =
        Api::namespaced(other.client().expect("client"), &format!("{tag}-remote"));
    eventually(
        "caught up after the outage",
        Duration::from_secs(90),
        || async {
            remote_api
                .get_opt("s")
                .await
                .ok()
                .flatten()
                .filter(|s| value(s, "token").as_deref() == Some("two"))
        },
    )
    .await;
    running.stop().await;
}

/// Nothing is deleted in a destination cluster that cannot be reached: neither the copies of
/// a source deleted during the outage, nor a copy whose namespace a changed spec no longer
/// selects, nor after the engine restarts during the outage (its stores of that cluster are
/// then empty). Once the cluster is back, exactly the unwanted copies go.
#[tokio::test]
async fn nothing_is_deleted_in_an_unreachable_destination_cluster() {
    init_tracing();
    let env = shared("fan");
    let mut other = own_cluster("fan-outage").await;
    let (tag, [control, src, dst]) = namespaces(env, "gone", ["control", "src", "dst"]).await;
    let (keep, drop) = (format!("{tag}-keep"), format!("{tag}-drop"));
    for ns in [&keep, &drop] {
        create_ns(&other, ns, &[(&tag, "yes")]).await;
    }
    put_secret(env, &src, "s1", &[("token", "one")], "Opaque", &[]).await;
    put_secret(env, &src, "s2", &[("token", "two")], "Opaque", &[]).await;
    let mut remote = all_with_label(&tag);
    remote.cluster = Some("other".into());
    let specs: Specs = Arc::new(Mutex::new(
        [
            (
                "src-gone".to_string(),
                spec(&src, "s1", vec![remote.clone(), into_namespace(&dst)]),
            ),
            (
                "unselect".to_string(),
                spec(&src, "s2", vec![remote.clone()]),
            ),
        ]
        .into(),
    ));
    let outcomes: Reports = Arc::default();
    let other_cluster = |o: &TestEnv| kubesync::Cluster::new("other", o.client().expect("client"));
    let (running, _, writes) = run_fan_out_counted(
        env,
        &control,
        specs.clone(),
        outcomes.clone(),
        vec![other_cluster(&other)],
    );
    for name in ["src-gone", "unselect"] {
        apply_cm(env, &configmap(&control, name, &[], &[])).await;
    }
    let remote_secrets =
        |o: &TestEnv, ns: &str| Api::<Secret>::namespaced(o.client().expect("client"), ns);
    for ns in [&keep, &drop] {
        for name in ["s1", "s2"] {
            let api = remote_secrets(&other, ns);
            eventually("remote copies", T, || async {
                api.get_opt(name).await.expect("get")
            })
            .await;
        }
    }
    let local_copy: Api<Secret> = Api::namespaced(env.client().expect("client"), &dst);
    eventually("local copy", T, || async {
        local_copy.get_opt("s1").await.expect("get")
    })
    .await;

    other.stop_apiserver();
    let written = writes.writes_to("other");
    // The source goes: the local copy goes (the witness that the reconcile ran), the remote
    // ones stay.
    Api::<Secret>::namespaced(env.client().expect("client"), &src)
        .delete("s1", &DeleteParams::default())
        .await
        .expect("delete source");
    eventually("local copy removed during the outage", T, || async {
        local_copy
            .get_opt("s1")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let outcome = outcomes.lock().expect("lock").get("src-gone").cloned();
    assert_eq!(
        outcome.map(|r| r.unreachable),
        Some(vec!["other".to_string()]),
        "the reconcile that removed the local copy saw the cluster unreachable"
    );
    // A namespace is no longer selected: its copy stays while the cluster cannot be checked.
    specs
        .lock()
        .expect("lock")
        .get_mut("unselect")
        .expect("spec")
        .destinations[0]
        .namespaces
        .only_namespaces = vec![keep.clone()];
    apply_cm(
        env,
        &configmap(&control, "unselect", &[("touched", "1")], &[]),
    )
    .await;
    eventually("the changed spec decided on", T, || async {
        outcomes
            .lock()
            .expect("lock")
            .get("unselect")
            .filter(|r| {
                !r.unreachable.is_empty()
                    && !r.destinations.is_empty()
                    && r.destinations.iter().all(|d| d.namespace == keep)
            })
            .map(|_| ())
    })
    .await;
    assert_eq!(
        writes.writes_to("other"),
        written,
        "no write to the cluster that is down"
    );

    // A restart during the outage: the new engine's stores of `other` are empty.
    running.stop().await;
    outcomes.lock().expect("lock").clear();
    let (running, _, writes) = run_fan_out_counted(
        env,
        &control,
        specs.clone(),
        outcomes.clone(),
        vec![other_cluster(&other)],
    );
    eventually("both reconciled after the restart", T, || async {
        let r = outcomes.lock().expect("lock");
        (r.contains_key("src-gone") && r.contains_key("unselect")).then_some(())
    })
    .await;
    assert_eq!(
        writes.writes_to("other"),
        0,
        "nothing written or deleted there"
    );

    // The cluster returns: exactly the unwanted copies go.
    other.restart_apiserver().await.expect("restart");
    for ns in [&keep, &drop] {
        let api = remote_secrets(&other, ns);
        eventually(
            "the deleted source's copies go",
            Duration::from_secs(90),
            || async {
                api.get_opt("s1")
                    .await
                    .ok()
                    .flatten()
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    }
    let dropped = remote_secrets(&other, &drop);
    eventually(
        "the unselected copy goes",
        Duration::from_secs(90),
        || async {
            dropped
                .get_opt("s2")
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert!(
        remote_secrets(&other, &keep)
            .get_opt("s2")
            .await
            .expect("get")
            .is_some(),
        "the copy still selected stays"
    );
    running.stop().await;
}

/// Zero writes when everything is in sync: an engine restarted over 1000 copies decides on
/// every one of them and writes nothing, and so does every later reconcile.
#[tokio::test]
async fn a_restart_over_a_thousand_copies_in_sync_writes_nothing() {
    use futures::StreamExt;
    init_tracing();
    let env = own_cluster("fan-zero").await;
    let (tag, [control, src]) = namespaces(&env, "zero", ["control", "src"]).await;
    futures::stream::iter(0..1000)
        .for_each_concurrent(16, |i| {
            let (env, tag) = (&env, &tag);
            async move { create_ns(env, &format!("{tag}-d{i}"), &[(tag.as_str(), "yes")]).await }
        })
        .await;
    put_secret(&env, &src, "s", &[("token", "one")], "Opaque", &[]).await;
    let specs: Specs = Arc::new(Mutex::new(
        [("z".to_string(), spec(&src, "s", vec![all_with_label(&tag)]))].into(),
    ));
    let outcomes: Reports = Arc::default();
    let all_synced = || {
        let outcomes = outcomes.clone();
        async move {
            outcomes
                .lock()
                .expect("lock")
                .get("z")
                .cloned()
                .filter(|r| {
                    r.destinations.len() == 1000
                        && r.destinations
                            .iter()
                            .all(|d| d.state == DestinationState::Synced)
                })
        }
    };
    let (running, _, writes) =
        run_fan_out_counted(&env, &control, specs.clone(), outcomes.clone(), vec![]);
    apply_cm(&env, &configmap(&control, "z", &[], &[])).await;
    eventually("1000 copies", Duration::from_secs(120), all_synced).await;
    assert!(writes.writes() >= 1000, "the first run wrote the copies");
    running.stop().await;

    outcomes.lock().expect("lock").clear();
    let (running, _, writes) =
        run_fan_out_counted(&env, &control, specs.clone(), outcomes.clone(), vec![]);
    eventually("all decided after the restart", T, all_synced).await;
    assert_eq!(writes.writes(), 0, "an in-sync restart writes nothing");
    // Once more, on a later reconcile of the same declaration.
    outcomes.lock().expect("lock").clear();
    apply_cm(&env, &configmap(&control, "z", &[("touched", "1")], &[])).await;
    eventually("decided again", T, all_synced).await;
    assert_eq!(writes.writes(), 0, "a reconcile in sync writes nothing");
    running.stop().await;
}

#[tokio::test]
async fn changing_the_source_kind_removes_the_old_copies() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, dst]) = namespaces(env, "kind", ["control", "src", "dst"]).await;
    put_secret(env, &src, "cfg", &[("token", "s")], "Opaque", &[]).await;
    apply_cm(env, &configmap(&src, "cfg", &[], &[("token", "c")])).await;
    let to_dst = into_namespace(&dst);
    let specs: Specs = Arc::new(Mutex::new(
        [("k".to_string(), spec(&src, "cfg", vec![to_dst.clone()]))].into(),
    ));
    let running = run_fan_out(env, &control, specs.clone(), Arc::default(), vec![]);
    apply_cm(env, &configmap(&control, "k", &[], &[])).await;
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), &dst);
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), &dst);
    eventually("secret copy", T, || async {
        secrets.get_opt("cfg").await.expect("get")
    })
    .await;

    // The declaration now copies the ConfigMap of the same name.
    let mut next = spec(&src, "cfg", vec![to_dst]);
    next.source.resource = ApiResource::erase::<ConfigMap>(&());
    specs.lock().expect("lock").insert("k".into(), next);
    apply_cm(env, &configmap(&control, "k", &[("touch", "1")], &[])).await;
    eventually("old kind's copy removed, new kind copied", T, || async {
        let secret_gone = secrets.get_opt("cfg").await.expect("get").is_none();
        let cm = cms.get_opt("cfg").await.expect("get");
        (secret_gone
            && cm.is_some_and(|c| {
                c.data.unwrap_or_default().get("token").map(String::as_str) == Some("c")
            }))
        .then_some(())
    })
    .await;
    running.stop().await;
}

/// The managed-fields entries of `manager` on an object, as `operation` names.
fn operations_of(s: &Secret, manager: &str) -> Vec<String> {
    let mut ops: Vec<String> = s
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| e.manager.as_deref() == Some(manager))
        .filter_map(|e| e.operation.clone())
        .collect();
    ops.sort();
    ops
}

/// New copies are created with a POST (refused if an object of that name appeared after the
/// store was read, where an apply would take it over); the POST's `Update` ownership is handed
/// to kubesync's `Apply` entry before the first update that removes something, so keys the
/// source drops are removed from the copies too.
#[tokio::test]
async fn copies_are_created_by_post_and_lose_the_keys_the_source_drops() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, dst]) = namespaces(env, "post", ["control", "src", "dst"]).await;
    put_secret(
        env,
        &src,
        "app",
        &[("token", "a"), ("extra", "b")],
        "Opaque",
        &[("team.example.com/owner", "web")],
    )
    .await;
    let to_dst = into_namespace(&dst);
    let specs: Specs = Arc::new(Mutex::new(
        [("p".to_string(), spec(&src, "app", vec![to_dst]))].into(),
    ));
    let running = run_fan_out(env, &control, specs, Arc::default(), vec![]);
    apply_cm(env, &configmap(&control, "p", &[], &[])).await;
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), &dst);
    let copy = eventually("copy", T, || async {
        secrets.get_opt("app").await.expect("get")
    })
    .await;
    assert_eq!(value(&copy, "extra").as_deref(), Some("b"));
    // Created by a POST: its fields are owned by kubesync's `Update` entry.
    assert_eq!(operations_of(&copy, "kubesync"), ["Update"]);

    assert_eq!(
        copy.annotations()
            .get("team.example.com/owner")
            .map(String::as_str),
        Some("web")
    );
    // The source drops a data key and an annotation, and changes a value.
    Api::<Secret>::namespaced(env.client().expect("client"), &src)
        .patch(
            "app",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"annotations": {"team.example.com/owner": null}},
                "data": {"extra": null, "token": "YTI="}})),
        )
        .await
        .expect("update source");
    let copy = eventually("copy without the dropped key and annotation", T, || async {
        let c = secrets.get_opt("app").await.expect("get")?;
        (value(&c, "token").as_deref() == Some("a2")
            && value(&c, "extra").is_none()
            && !c.annotations().contains_key("team.example.com/owner"))
        .then_some(c)
    })
    .await;
    // Ownership now lies with kubesync's `Apply` entry alone.
    assert_eq!(operations_of(&copy, "kubesync"), ["Apply"]);
    assert!(copy.labels().contains_key("kubesync.io/managed-by"));
    running.stop().await;
}

/// Updates and adoptions are applied on the condition that the object is the one the decision
/// was made on: an object that replaced it between kubesync's read of its store and its write
/// is left untouched. Shown with the apiserver's own answers to those writes.
#[tokio::test]
async fn updates_never_take_over_an_object_that_replaced_the_copy() {
    use kubesync::Cluster;
    use kubesync::Writer;
    use kubesync::syncers::fan_out::FIELD_MANAGER;
    use kubesync::syncers::fan_out::rules::apply_precondition;

    let env = TestEnv::shared("fan-out-precondition", false).expect("env");
    let ns = "precondition";
    create_ns(env, ns, &[]).await;
    let cluster = Cluster::new("local", env.client().expect("client"));
    let writer = Writer::new();
    let ar = secret_type();
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), ns);
    let copy = |token: &str, uid: Option<String>| -> kube::api::DynamicObject {
        serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "copy", "namespace": ns, "uid": uid,
                "labels": {"kubesync.io/managed-by": "decl-uid"}},
            "type": "Opaque", "stringData": {"token": token}}))
        .expect("copy")
    };
    // Nothing in the store: the create carries no uid.
    let created = writer
        .apply(
            &cluster,
            &ar,
            &copy("v1", apply_precondition(None)),
            FIELD_MANAGER,
        )
        .await
        .expect("created");
    // An update carries the uid of the copy it was decided on.
    writer
        .apply(
            &cluster,
            &ar,
            &copy("v2", apply_precondition(Some(&created))),
            FIELD_MANAGER,
        )
        .await
        .expect("updated");
    assert_eq!(
        value(&secrets.get("copy").await.expect("copy"), "token").as_deref(),
        Some("v2")
    );
    // The copy was deleted and someone else created an object of that name: an update
    // decided on the old copy fails and leaves the new object alone.
    secrets
        .delete("copy", &DeleteParams::default())
        .await
        .expect("delete");
    put_secret(
        env,
        ns,
        "copy",
        &[("token", "someone else's")],
        "Opaque",
        &[],
    )
    .await;
    let err = writer
        .apply(
            &cluster,
            &ar,
            &copy("v3", apply_precondition(Some(&created))),
            FIELD_MANAGER,
        )
        .await
        .expect_err("a replaced object is not taken over");
    assert!(
        kubesync::syncers::fan_out::is_uid_precondition_failure(&err),
        "{err}"
    );
    let theirs = secrets.get("copy").await.expect("copy");
    assert_eq!(value(&theirs, "token").as_deref(), Some("someone else's"));
    assert!(!theirs.labels().contains_key("kubesync.io/managed-by"));
    // Deleted and not replaced yet: the update does not recreate it either (the next
    // reconcile, seeing it gone, creates it without a precondition).
    secrets
        .delete("copy", &DeleteParams::default())
        .await
        .expect("delete");
    let err = writer
        .apply(
            &cluster,
            &ar,
            &copy("v4", apply_precondition(Some(&theirs_as_dynamic(&theirs)))),
            FIELD_MANAGER,
        )
        .await
        .expect_err("not recreated by an update");
    assert!(
        kubesync::syncers::fan_out::is_uid_precondition_failure(&err),
        "{err}"
    );
    assert!(secrets.get_opt("copy").await.expect("get").is_none());
}

fn theirs_as_dynamic(s: &Secret) -> kube::api::DynamicObject {
    serde_json::from_value(serde_json::to_value(s).expect("json")).expect("dynamic")
}

/// Unrelated objects of the copied kind cost only their metadata: after a fan-out, the only
/// Secrets the engine holds in full are its source and its copies. Secrets of other owners —
/// in the source's namespace, at a destination under another name, elsewhere — and the
/// foreign object that blocks a destination are held as metadata only.
#[tokio::test]
async fn unrelated_objects_are_held_as_metadata_only() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, dst, blocked, other]) =
        namespaces(env, "meta", ["control", "src", "dst", "blocked", "other"]).await;
    let blob = "b".repeat(64 * 1024);
    put_secret(env, &src, "s", &[("token", "ours")], "Opaque", &[]).await;
    for ns in [&src, &dst, &other] {
        put_secret(
            env,
            ns,
            "release",
            &[("release", blob.as_str())],
            "Opaque",
            &[],
        )
        .await;
    }
    put_secret(env, &blocked, "s", &[("token", "theirs")], "Opaque", &[]).await;
    let specs: Specs = Arc::default();
    let outcomes: Reports = Arc::default();
    specs
        .lock()
        .expect("lock")
        .insert("d".into(), spec(&src, "s", vec![to(&dst), to(&blocked)]));
    let (running, ctx) = run_fan_out_seen(env, &control, specs, outcomes.clone(), vec![]);
    apply_cm(env, &configmap(&control, "d", &[], &[])).await;
    eventually("synced and blocked", T, || async {
        let state = |ns: &str| destination_state(&outcomes, "d", ns);
        (state(&dst) == Some(DestinationState::Synced)
            && state(&blocked) == Some(DestinationState::Conflict))
        .then_some(())
    })
    .await;
    let key = |ns: &str, name: &str| {
        kubesync::ObjectKey::new("local", &secret_type(), Some(ns.to_string()), name)
    };
    // The source in full; the copy as its print: its metadata for every reader, and for the
    // fan-out what judging it needs (no content).
    let source = ctx.get(&key(&src, "s")).expect("source");
    assert_eq!(source.data["data"]["token"], "b3Vycw==");
    let copy = ctx.get(&key(&dst, "s")).expect("copy");
    assert!(copy.data.is_null(), "the copy's content is not held");
    assert!(copy.labels().contains_key("kubesync.io/managed-by"));
    let held = ctx.list_labelled_held(
        "local",
        &secret_type(),
        "kubesync.io/managed-by",
        copy.labels()["kubesync.io/managed-by"].as_str(),
    );
    assert_eq!(held.len(), 1);
    assert!(
        held[0]
            .summary::<kubesync::syncers::fan_out::rules::CopyPrint>()
            .is_some(),
        "held as its print"
    );
    // Everything else: metadata only, without managedFields.
    for (ns, name) in [
        (&src, "release"),
        (&dst, "release"),
        (&other, "release"),
        (&blocked, "s"),
    ] {
        assert!(
            ctx.get(&key(ns, name)).is_none(),
            "{ns}/{name} held in full"
        );
        // The watch of the others starts once a first plan is carried out.
        let meta = eventually("metadata held", T, || async {
            ctx.get_metadata(&key(ns, name))
        })
        .await;
        assert!(
            meta.data.is_null(),
            "{ns}/{name}: the store holds the content"
        );
        assert!(meta.metadata.managed_fields.is_none());
        assert!(meta.metadata.uid.is_some());
    }
    // No other Secret anywhere in the cluster is held in full: only sources and copies.
    for held in ctx.list("local", &secret_type()) {
        let is_ours = held.labels().contains_key("kubesync.io/managed-by")
            || (held.namespace().as_deref() == Some(src.as_str()) && held.name_any() == "s");
        assert!(
            is_ours,
            "{}/{} held in full",
            held.namespace().unwrap_or_default(),
            held.name_any()
        );
    }
    running.stop().await;
}

/// The watch of the other objects of the copied kind (metadata only, every object without
/// kubesync's `managed-by` label: unrelated Secrets by the thousand) sends its first list only
/// once the first plan has been carried out, so its pages are not read while the first copies
/// are written (the apiserver's audit log: every create of a copy answered before that LIST
/// arrives). A destination someone else's object blocks is found by the create (409) and
/// reported; when that object goes, the copy follows.
#[tokio::test]
async fn the_other_objects_are_listed_after_the_first_copies_are_written() {
    init_tracing();
    let env = TestEnv::builder()
        .name("fan-others-later")
        .audit(true)
        .start()
        .await
        .expect("start");
    let (_, [control, src, a, b, blocked]) =
        namespaces(&env, "later", ["control", "src", "a", "b", "blocked"]).await;
    put_secret(&env, &src, "s", &[("token", "ours")], "Opaque", &[]).await;
    put_secret(&env, &blocked, "s", &[("token", "theirs")], "Opaque", &[]).await;
    for ns in [&a, &b] {
        put_secret(&env, ns, "unrelated", &[("k", "v")], "Opaque", &[]).await;
    }
    let specs: Specs = Arc::default();
    let outcomes: Reports = Arc::default();
    specs.lock().expect("lock").insert(
        "d".into(),
        spec(&src, "s", vec![to(&a), to(&b), to(&blocked)]),
    );
    let running = run_fan_out(&env, &control, specs, outcomes.clone(), vec![]);
    apply_cm(&env, &configmap(&control, "d", &[], &[])).await;
    let states = || {
        let state = |ns: &str| destination_state(&outcomes, "d", ns);
        Some([state(&a), state(&b), state(&blocked)])
    };
    let synced = Some(DestinationState::Synced);
    eventually("synced and blocked", T, || async {
        (states()? == [synced, synced, Some(DestinationState::Conflict)]).then_some(())
    })
    .await;
    // The others' watch lists (cluster-wide Secrets without the label), after every create.
    let others_lists = |log: &[kubesync_testenv::AuditEvent]| -> Vec<String> {
        log.iter()
            .filter(|e| e.verb == "list" && e.resource() == "secrets" && e.namespace().is_empty())
            .filter(|e| {
                e.request_uri
                    .replace("%21", "!")
                    .replace("%2F", "/")
                    .contains("labelSelector=!kubesync.io/managed-by")
            })
            .map(|e| e.request_received_timestamp.clone())
            .collect()
    };
    // The first plan's creates: one per destination, the one in the way refused (409). A
    // plan made again before the others' watch has listed sends that create again.
    let first_create = |log: &[kubesync_testenv::AuditEvent], ns: &str| {
        log.iter()
            .filter(|e| e.verb == "create" && e.resource() == "secrets")
            .filter(|e| e.namespace() == ns && e.name() == "s")
            .min_by(|x, y| x.stage_timestamp.cmp(&y.stage_timestamp))
            .cloned()
    };
    // (A line is written when its request's handler returns: wait for all of them.)
    let log = eventually("the others listed, the creates", T, || async {
        let log = env.audit().expect("audit");
        let created = [&a, &b, &blocked]
            .into_iter()
            .all(|ns| first_create(&log, ns).is_some());
        (created && !others_lists(&log).is_empty()).then_some(log)
    })
    .await;
    let first_list = others_lists(&log).into_iter().min().expect("a list");
    for (ns, code) in [(&a, 201), (&b, 201), (&blocked, 409)] {
        let create = first_create(&log, ns).expect("a create");
        assert_eq!(create.code(), code, "{}", create.describe());
        assert!(
            create.stage_timestamp < first_list,
            "{} answered at {}, after the others' first list at {first_list}",
            create.describe(),
            create.stage_timestamp
        );
    }
    // The object in the way goes: the copy follows (its event, or the others' first list).
    Api::<Secret>::namespaced(env.client().expect("client"), &blocked)
        .delete("s", &DeleteParams::default())
        .await
        .expect("delete theirs");
    eventually("copied where it was blocked", T, || async {
        (states()? == [synced, synced, synced]).then_some(())
    })
    .await;
    running.stop().await;
}

/// The bytes the apiserver has sent in ConfigMap watch events, to every watcher, from its
/// `/metrics` (the histogram's sum; labelled by kind or, on newer apiservers, by resource).
async fn configmap_watch_bytes(env: &TestEnv) -> f64 {
    let client = env.client().expect("client");
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("request");
    let text = client.request_text(req).await.expect("metrics");
    text.lines()
        .filter(|l| l.starts_with("apiserver_watch_events_sizes_sum{"))
        .filter(|l| l.contains("kind=\"ConfigMap\"") || l.contains("resource=\"configmaps\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The source namespace's other objects never reach kubesync in full: its shared watch of
/// the source namespace receives metadata only, and a new version of the source is read live
/// once. Witnessed by the apiserver's count of bytes sent in ConfigMap watch events, on a
/// control plane of this test alone whose controller-manager watches no ConfigMap in full: a
/// 512 KiB ConfigMap written next to the source costs a few KiB of events, not its size.
#[tokio::test]
async fn the_source_namespace_is_watched_as_metadata() {
    init_tracing();
    let env = &own_cluster("srcmeta").await;
    let (_, [control, src, dst]) = namespaces(env, "srcmeta", ["control", "src", "dst"]).await;
    let cm_type = ApiResource::erase::<ConfigMap>(&());
    apply_cm(env, &configmap(&src, "s", &[], &[("k", "one")])).await;
    let specs: Specs = Arc::default();
    let outcomes: Reports = Arc::default();
    let mut declared = spec(&src, "s", vec![to(&dst)]);
    declared.source = SourceRef::one(cm_type.clone(), &src, "s");
    specs.lock().expect("lock").insert("d".into(), declared);
    let (running, ctx) = run_fan_out_seen(env, &control, specs, outcomes, vec![]);
    apply_cm(env, &configmap(&control, "d", &[], &[])).await;
    let copies: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), &dst);
    let holds = |want: &'static str| {
        let copies = copies.clone();
        move || {
            let copies = copies.clone();
            async move {
                let copy = copies.get_opt("s").await.ok()??;
                (copy.data?.get("k")? == want).then_some(())
            }
        }
    };
    eventually("copied", T, holds("one")).await;
    let before = configmap_watch_bytes(env).await;
    // A large ConfigMap of someone else's next to the source, then a change of the source:
    // their watch sees the large one's event before the source's (one watch's events come in
    // order), and the copy shows the change only once the source was read live.
    let blob = "r".repeat(512 * 1024);
    apply_cm(
        env,
        &configmap(&src, "release", &[], &[("release", blob.as_str())]),
    )
    .await;
    apply_cm(env, &configmap(&src, "s", &[], &[("k", "two")])).await;
    eventually("the change copied", T, holds("two")).await;
    let sent = configmap_watch_bytes(env).await - before;
    assert!(
        sent < 64.0 * 1024.0,
        "{sent} bytes of ConfigMap watch events for a 512 KiB ConfigMap next to the source"
    );
    let key = |name: &str| kubesync::ObjectKey::new("local", &cm_type, Some(src.clone()), name);
    assert!(ctx.get(&key("release")).is_none(), "held in full");
    assert!(
        ctx.get_metadata(&key("release")).is_some(),
        "its metadata held"
    );
    let source = ctx.get(&key("s")).expect("the source in full");
    assert_eq!(source.data["data"]["k"], "two");
    running.stop().await;
}

/// Declarations that each copy one object from the same namespace share one watch of it, not
/// one each; it holds in full only their sources (the namespace's other Secrets as metadata);
/// a source that has not changed since before its declaration is read live once and copied;
/// a source no declaration copies any more is held as metadata again.
#[tokio::test]
async fn single_sources_of_one_namespace_share_one_watch_holding_only_the_sources() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, dst]) = namespaces(env, "one-ns", ["control", "src", "dst"]).await;
    let blob = "b".repeat(64 * 1024);
    for name in ["a", "b", "c"] {
        put_secret(env, &src, name, &[("token", name)], "Opaque", &[]).await;
    }
    put_secret(env, &src, "release", &[("release", &blob)], "Opaque", &[]).await;
    let (specs, outcomes): (Specs, Reports) = Default::default();
    for name in ["a", "b", "c"] {
        let decl = spec(&src, name, vec![to(&dst)]);
        specs.lock().expect("lock").insert(name.into(), decl);
    }
    let fan_out = Arc::new(FanOut::new("local"));
    let (running, ctx, _) = run_fan_out_on(
        fan_out.clone(),
        env,
        &control,
        specs,
        outcomes.clone(),
        vec![],
    );
    let synced = |names: &'static [&'static str]| {
        let outcomes = outcomes.clone();
        move || {
            let outcomes = outcomes.clone();
            async move {
                let all = outcomes.lock().expect("lock");
                names
                    .iter()
                    .all(|n| {
                        all.get(*n).is_some_and(|r| {
                            r.ready
                                && r.source_found
                                && !r.destinations.is_empty()
                                && r.destinations
                                    .iter()
                                    .all(|d| d.state == DestinationState::Synced)
                        })
                    })
                    .then_some(())
            }
        }
    };
    apply_cm(env, &configmap(&control, "a", &[], &[])).await;
    eventually("a copied", T, synced(&["a"])).await;
    // b and c: their sources are in the watch already, as metadata, and do not change.
    for name in ["b", "c"] {
        apply_cm(env, &configmap(&control, name, &[], &[])).await;
    }
    eventually("b and c copied", T, synced(&["a", "b", "c"])).await;
    let api = Api::<Secret>::namespaced(env.client().expect("client"), &dst);
    for name in ["a", "b", "c"] {
        let copy = api.get(name).await.expect("copy");
        assert_eq!(value(&copy, "token").as_deref(), Some(name));
    }
    // Copies, others, Namespaces, and one watch of the sources' namespace (not three).
    assert_eq!(fan_out.watch_count(), 4);
    let key =
        |name: &str| kubesync::ObjectKey::new("local", &secret_type(), Some(src.clone()), name);
    for name in ["a", "b", "c"] {
        assert!(ctx.get(&key(name)).is_some(), "the source {name} in full");
    }
    assert!(
        ctx.get(&key("release")).is_none(),
        "not a source: metadata only"
    );
    // A change of a source handed over live arrives as before.
    put_secret(env, &src, "b", &[("token", "b2")], "Opaque", &[]).await;
    eventually("b's change copied", T, || async {
        let copy = api.get("b").await.ok()?;
        (value(&copy, "token").as_deref() == Some("b2")).then_some(())
    })
    .await;
    // a goes: its source is held as metadata again; b's and c's stay in full.
    fan_out.forget(
        &ctx,
        &kubesync::ObjectKey::new(
            "local",
            &ApiResource::erase::<ConfigMap>(&()),
            Some(control.clone()),
            "a",
        ),
    );
    assert!(ctx.get(&key("a")).is_none(), "a is no longer a source");
    assert!(ctx.get_metadata(&key("a")).is_some());
    assert!(ctx.get(&key("b")).is_some() && ctx.get(&key("c")).is_some());
    assert_eq!(fan_out.watch_count(), 4, "the others still use the watch");
    running.stop().await;
}

/// A declaration copying from `src` into `dst`, prefixed `prefix`, the Secrets `selector`
/// (label pairs, as a set-based selector when `in_set`) and `names` select.
fn selecting(
    src: &str,
    dst: &str,
    prefix: &str,
    (selector, in_set): (&[(&str, &str)], bool),
    names: &[&str],
) -> FanOutSpec {
    let mut declared = spec(
        src,
        "",
        vec![Destination {
            name_prefix: prefix.into(),
            ..to(dst)
        }],
    );
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    let pairs = selector.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let selector = match (selector.is_empty(), in_set) {
        (true, _) => None,
        (false, false) => Some(kube::core::Selector::from_iter(pairs)),
        (false, true) => {
            let requirements = pairs.map(|(key, v)| LabelSelectorRequirement {
                key,
                operator: "In".into(),
                values: Some(vec![v]),
            });
            let set = LabelSelector {
                match_expressions: Some(requirements.collect()),
                ..Default::default()
            };
            Some(kube::core::Selector::try_from(set).expect("selector"))
        }
    };
    declared.source = SourceRef::selected(
        secret_type(),
        src.to_string(),
        kubesync::syncers::fan_out::Selection {
            selector,
            names: names.iter().map(|n| n.to_string()).collect(),
        },
    );
    declared
}

/// Selections of one namespace share its one watch with single sources, whatever their
/// selectors (not one watch of full objects per selector, each holding what it selects once
/// more); it holds in full only what some declaration copies: an object that leaves every
/// selection is held as metadata again, one that joins a selection is read and copied, and
/// a selection by name holds that one object, not the namespace.
#[tokio::test]
async fn selections_of_one_namespace_share_its_watch_holding_only_what_they_select() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, dst]) = namespaces(env, "sel-ns", ["control", "src", "dst"]).await;
    put_labelled(env, &src, "a", &[("app", "x")], "a").await;
    put_labelled(env, &src, "b", &[("app", "x")], "b").await;
    put_labelled(env, &src, "c", &[("app", "y")], "c").await;
    let blob = "b".repeat(64 * 1024);
    put_secret(env, &src, "release", &[("release", &blob)], "Opaque", &[]).await;
    let (specs, outcomes): (Specs, Reports) = Default::default();
    let declared = [
        (
            "eq",
            selecting(&src, &dst, "eq-", (&[("app", "x")], false), &[]),
        ),
        (
            "set",
            selecting(&src, &dst, "set-", (&[("app", "x")], true), &[]),
        ),
        (
            "named",
            selecting(&src, &dst, "named-", (&[], false), &["c"]),
        ),
        ("one", spec(&src, "c", vec![to(&dst)])),
    ];
    for (name, decl) in declared {
        specs.lock().expect("lock").insert(name.into(), decl);
    }
    let fan_out = Arc::new(FanOut::new("local"));
    let (running, ctx, _) = run_fan_out_on(
        fan_out.clone(),
        env,
        &control,
        specs,
        outcomes.clone(),
        vec![],
    );
    for name in ["eq", "set", "named", "one"] {
        apply_cm(env, &configmap(&control, name, &[], &[])).await;
    }
    let copied = |want: Vec<(String, String)>| {
        let dst = dst.clone();
        move || {
            let (dst, want) = (dst.clone(), want.clone());
            async move { (secret_names(env, &dst).await == want).then_some(()) }
        }
    };
    let all = pairs(&[
        ("c", "c"),
        ("eq-a", "a"),
        ("eq-b", "b"),
        ("named-c", "c"),
        ("set-a", "a"),
        ("set-b", "b"),
    ]);
    eventually("every selection copied", T, copied(all)).await;
    // Copies, others, Namespaces, and one watch of the sources' namespace for all four.
    assert_eq!(
        fan_out.watch_count(),
        4,
        "one watch of the source namespace"
    );
    let key =
        |name: &str| kubesync::ObjectKey::new("local", &secret_type(), Some(src.clone()), name);
    for name in ["a", "b", "c"] {
        assert!(ctx.get(&key(name)).is_some(), "the source {name} in full");
    }
    assert!(
        ctx.get(&key("release")).is_none(),
        "selected by none: metadata only"
    );
    assert!(ctx.get_metadata(&key("release")).is_some());
    // b leaves both selections, d joins them.
    put_labelled(env, &src, "b", &[("app", "z")], "b").await;
    put_labelled(env, &src, "d", &[("app", "x")], "d").await;
    let now = pairs(&[
        ("c", "c"),
        ("eq-a", "a"),
        ("eq-d", "d"),
        ("named-c", "c"),
        ("set-a", "a"),
        ("set-d", "d"),
    ]);
    eventually("the selections followed", T, copied(now)).await;
    eventually("b held as metadata again", T, || async {
        ctx.get(&key("b")).is_none().then_some(())
    })
    .await;
    assert!(ctx.get(&key("d")).is_some(), "d in full");
    assert_eq!(fan_out.watch_count(), 4);
    running.stop().await;
}

/// A sharded engine: declaration `x`'s copies carry the shard `s-x`, of the shards `s-a`,
/// `s-b` and `s-c` (it holds none until told).
fn sharded() -> Arc<FanOut> {
    let fan_out = FanOut::new("local");
    let all = ["s-a", "s-b", "s-c"].map(String::from).into();
    assert!(fan_out.shard_copies(|key| format!("s-{}", key.name), all));
    Arc::new(fan_out)
}

fn shards(held: &[&str]) -> std::collections::BTreeSet<String> {
    held.iter().map(|s| s.to_string()).collect()
}

/// The shard labels of the Secrets `name` in `namespaces`, in order (`None`: no label, or no
/// Secret).
async fn shard_labels(env: &TestEnv, namespaces: &[&String], name: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for ns in namespaces {
        let s = Api::<Secret>::namespaced(env.client().expect("client"), ns)
            .get_opt(name)
            .await
            .expect("get");
        out.push(s.and_then(|s| s.labels().get("kubesync.io/shard").cloned()));
    }
    out
}

#[tokio::test]
async fn sharded_copies_carry_their_shard_and_each_process_holds_its_own() {
    init_tracing();
    // Its own control plane: the engines hold the copies of the whole cluster, counted exactly.
    let env = &own_cluster("shards").await;
    let (_, [control, src, d0, d1, d2]) =
        namespaces(env, "shard", ["control", "src", "d0", "d1", "d2"]).await;
    put_secret(env, &src, "ca", &[("token", "v1")], "Opaque", &[]).await;
    let dests = [&d0, &d1, &d2];
    // Copies made before the operator was sharded: no shard label.
    let (specs, outcomes): (Specs, Reports) = Default::default();
    specs.lock().expect("lock").insert(
        "a".into(),
        spec(&src, "ca", dests.iter().map(|d| to(d)).collect()),
    );
    let running = run_fan_out(env, &control, specs.clone(), outcomes.clone(), vec![]);
    apply_cm(env, &configmap(&control, "a", &[], &[])).await;
    eventually("unsharded copies", T, || async {
        (copies_in(env, &dests, "ca").await == 3).then_some(())
    })
    .await;
    assert_eq!(shard_labels(env, &dests, "ca").await, [None, None, None]);
    running.stop().await;

    // A sharded process holding s-a and s-c labels a's copies (one write each) and holds them.
    let one = sharded();
    let (running_one, ctx_one, writes_one) = run_fan_out_on(
        one.clone(),
        env,
        &control,
        specs.clone(),
        outcomes.clone(),
        vec![],
    );
    one.hold_shards(&ctx_one, shards(&["s-a", "s-c"]));
    let labelled = vec![Some("s-a".to_string()); 3];
    eventually("a's copies labelled with its shard", T, || async {
        (shard_labels(env, &dests, "ca").await == labelled).then_some(())
    })
    .await;
    eventually(
        "the labelled copies held, the unlabelled watch empty",
        T,
        || async { (one.copies_held(&ctx_one) == 3).then_some(()) },
    )
    .await;
    assert_eq!(writes_one.writes(), 3, "one update per copy");
    // None left without a label: the watch of such copies stops (copies, others, Namespaces
    // and the sources' namespace remain).
    eventually("the watch of unlabelled copies stopped", T, || async {
        (one.watch_count() == 4).then_some(())
    })
    .await;

    // Another process, holding s-b, copies b to d0 as "taken": the first one holds none of it.
    let (specs_two, outcomes_two): (Specs, Reports) = Default::default();
    specs_two.lock().expect("lock").insert(
        "b".into(),
        copy_as(spec(&src, "ca", vec![to(&d0)]), "taken"),
    );
    let two = sharded();
    let (running_two, ctx_two, _) = run_fan_out_on(
        two.clone(),
        env,
        &control,
        specs_two,
        outcomes_two.clone(),
        vec![],
    );
    two.hold_shards(&ctx_two, shards(&["s-b"]));
    apply_cm(env, &configmap(&control, "b", &[], &[])).await;
    eventually("b's copy", T, || async {
        (shard_labels(env, &[&d0], "taken").await == [Some("s-b".to_string())]).then_some(())
    })
    .await;
    eventually("each process holds its own copies", T, || async {
        (two.copies_held(&ctx_two) == 1).then_some(())
    })
    .await;
    assert_eq!(one.copies_held(&ctx_one), 3, "not b's copy");

    // c, on the first process, wants d0/taken: b's copy (another shard's, held as metadata
    // only) is seen as taken without a write.
    let before = writes_one.writes();
    specs.lock().expect("lock").insert(
        "c".into(),
        copy_as(spec(&src, "ca", vec![to(&d0)]), "taken"),
    );
    apply_cm(env, &configmap(&control, "c", &[], &[])).await;
    eventually("c in conflict with b's copy", T, || async {
        let r = outcomes.lock().expect("lock").get("c").cloned()?;
        (r.destinations.first()?.state == DestinationState::Conflict).then_some(())
    })
    .await;
    assert_eq!(
        writes_one.writes(),
        before,
        "no write tried on a name seen taken"
    );
    let meta = ctx_one
        .get_metadata(&kubesync::ObjectKey::new(
            "local",
            &secret_type(),
            Some(d0.clone()),
            "taken",
        ))
        .expect("b's copy held as metadata");
    assert!(meta.data.is_null(), "another shard's copy held in full");

    // The first process takes s-b too: its watches restart, and it holds b's copy in full.
    one.hold_shards(&ctx_one, shards(&["s-a", "s-b", "s-c"]));
    eventually("b's copy held after the shards changed", T, || async {
        (one.copies_held(&ctx_one) == 4).then_some(())
    })
    .await;
    running_two.stop().await;

    // An engine that does not shard writes a's copy in d2 without a shard label, and a no
    // longer wants d2: the copy leaves the copies' watch; the other objects' watch shows it,
    // which starts the watch of unlabelled copies again, and the stray is found and deleted.
    let gone = spec(&src, "ca", vec![to(&d0), to(&d1)]);
    specs.lock().expect("lock").insert("a".into(), gone);
    let unlabel = serde_json::json!({"metadata": {"labels": {"kubesync.io/shard": null}}});
    Api::<Secret>::namespaced(env.client().expect("client"), &d2)
        .patch("ca", &PatchParams::default(), &Patch::Merge(unlabel))
        .await
        .expect("label removed");
    eventually("the unlabelled stray deleted", T, || async {
        (copies_in(env, &[&d2], "ca").await == 0).then_some(())
    })
    .await;
    eventually(
        "the watch of unlabelled copies stopped again",
        T,
        || async { (one.watch_count() == 4).then_some(()) },
    )
    .await;
    running_one.stop().await;
}

/// How many of `namespaces` have a Secret `name`.
async fn copies_in(env: &TestEnv, namespaces: &[&String], name: &str) -> usize {
    let mut n = 0;
    for ns in namespaces {
        n += usize::from(
            Api::<Secret>::namespaced(env.client().expect("client"), ns)
                .get_opt(name)
                .await
                .expect("get")
                .is_some(),
        );
    }
    n
}

/// `spec` with its copies named `name`.
fn copy_as(mut spec: FanOutSpec, name: &str) -> FanOutSpec {
    for d in &mut spec.destinations {
        d.name = Some(name.to_string());
    }
    spec
}

/// A Secret `name` in `ns` with `labels` and the data `token: <token>`.
async fn put_labelled(env: &TestEnv, ns: &str, name: &str, labels: &[(&str, &str)], token: &str) {
    let v = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns,
            "labels": labels.iter().cloned().collect::<HashMap<_, _>>()},
        "stringData": {"token": token}});
    Api::<Secret>::namespaced(env.client().expect("client"), ns)
        .patch(name, &PatchParams::apply("tests").force(), &Patch::Apply(v))
        .await
        .expect("put secret");
}

/// The names of the Secrets in `ns` that carry `token` `v` or (`None`) any token, sorted.
async fn secret_names(env: &TestEnv, ns: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> =
        Api::<Secret>::namespaced(env.client().expect("client"), ns)
            .list(&Default::default())
            .await
            .expect("list")
            .items
            .iter()
            .filter_map(|s| Some((s.name_any(), value(s, "token")?)))
            .collect();
    out.sort();
    out
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test]
async fn many_sources_by_selector_follow_their_labels_under_prefixed_names_and_never_cascade() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, a, b]) = namespaces(env, "many", ["control", "src", "a", "b"]).await;
    put_labelled(env, &src, "tls-1", &[("app", "tls")], "one").await;
    put_labelled(env, &src, "tls-2", &[("app", "tls")], "two").await;
    put_labelled(env, &src, "other", &[("app", "web")], "x").await;
    let mut spec = spec(
        &src,
        "",
        vec![
            Destination {
                name_prefix: "p-".into(),
                ..into_namespace(&a)
            },
            into_namespace(&b),
            // Into the source namespace itself: the copies carry the sources' labels, yet are
            // never taken for sources (no copies of copies).
            Destination {
                name_suffix: "-copy".into(),
                ..into_namespace(&src)
            },
        ],
    );
    spec.source = SourceRef::selected(
        secret_type(),
        src.clone(),
        kubesync::syncers::fan_out::Selection {
            selector: Some(kube::core::Selector::from_iter([(
                "app".to_string(),
                "tls".to_string(),
            )])),
            names: vec![],
        },
    );
    let specs: Specs = Arc::default();
    let outcomes: Reports = Arc::default();
    specs.lock().expect("lock").insert("tls".into(), spec);
    let running = run_fan_out(env, &control, specs.clone(), outcomes.clone(), vec![]);
    apply_cm(env, &configmap(&control, "tls", &[], &[])).await;

    let expect =
        |a_: Vec<(String, String)>, b_: Vec<(String, String)>, src_: Vec<(String, String)>| {
            let (a, b, src) = (a.clone(), b.clone(), src.clone());
            async move {
                let seen = (
                    secret_names(env, &a).await,
                    secret_names(env, &b).await,
                    secret_names(env, &src).await,
                );
                (seen == (a_.clone(), b_.clone(), src_.clone())).then_some(())
            }
        };
    eventually("each selected source copied under its own name", T, || {
        expect(
            pairs(&[("p-tls-1", "one"), ("p-tls-2", "two")]),
            pairs(&[("tls-1", "one"), ("tls-2", "two")]),
            pairs(&[
                ("other", "x"),
                ("tls-1", "one"),
                ("tls-1-copy", "one"),
                ("tls-2", "two"),
                ("tls-2-copy", "two"),
            ]),
        )
    })
    .await;
    let r = outcomes.lock().expect("lock")["tls"].clone();
    assert_eq!((r.sources, r.destinations.len()), (2, 6));
    assert!(
        r.destinations
            .iter()
            .all(|d| d.state == DestinationState::Synced && !d.source.is_empty())
    );

    // An object that starts matching gets its copies; one that stops matching, and one
    // deleted, lose theirs; an update reaches the copies.
    put_labelled(env, &src, "other", &[("app", "tls")], "x").await;
    put_labelled(env, &src, "tls-1", &[("app", "web")], "one").await;
    Api::<Secret>::namespaced(env.client().expect("client"), &src)
        .delete("tls-2", &DeleteParams::default())
        .await
        .expect("delete source");
    eventually("copies follow the selection", T, || {
        expect(
            pairs(&[("p-other", "x")]),
            pairs(&[("other", "x")]),
            pairs(&[("other", "x"), ("other-copy", "x"), ("tls-1", "one")]),
        )
    })
    .await;
    put_labelled(env, &src, "other", &[("app", "tls")], "y").await;
    eventually("an update reaches the copies", T, || {
        expect(
            pairs(&[("p-other", "y")]),
            pairs(&[("other", "y")]),
            pairs(&[("other", "y"), ("other-copy", "y"), ("tls-1", "one")]),
        )
    })
    .await;
    running.stop().await;
}

#[tokio::test]
async fn cluster_scoped_objects_selected_by_label_to_a_second_cluster() {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    init_tracing();
    let env = shared("fan");
    let other = own_cluster("fan-scoped").await;
    let (tag, [control]) = namespaces(env, "cs", ["control"]).await;
    let role = |name: &str, share: bool, verbs: &[&str]| {
        serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": format!("{tag}-{name}"),
                "labels": if share { serde_json::json!({"share": &tag}) } else { serde_json::json!({}) }},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]})
    };
    let put = |client: kube::Client, v: serde_json::Value| async move {
        let name = v["metadata"]["name"].as_str().expect("name").to_string();
        Api::<ClusterRole>::all(client)
            .patch(
                &name,
                &PatchParams::apply("tests").force(),
                &Patch::Apply(v),
            )
            .await
            .expect("put role")
    };
    put(
        env.client().expect("client"),
        role("viewer", true, &["get"]),
    )
    .await;
    put(
        env.client().expect("client"),
        role("editor", true, &["get", "update"]),
    )
    .await;
    put(
        env.client().expect("client"),
        role("private", false, &["*"]),
    )
    .await;
    // Someone else's ClusterRole in the other cluster, under a selected source's name.
    let foreign = put(
        other.client().expect("client"),
        role("editor", false, &["list"]),
    )
    .await;

    let cluster_role = ApiResource::erase::<ClusterRole>(&());
    let mut spec = spec("", "", vec![]);
    spec.source = SourceRef::selected(
        cluster_role,
        "",
        kubesync::syncers::fan_out::Selection {
            selector: Some(kube::core::Selector::from_iter([(
                "share".to_string(),
                tag.clone(),
            )])),
            names: vec![],
        },
    );
    spec.destinations = vec![Destination {
        cluster: Some("other".into()),
        ..Default::default()
    }];
    let specs: Specs = Arc::new(Mutex::new([("cs".to_string(), spec)].into()));
    let outcomes: Reports = Arc::default();
    let other_cluster = kubesync::Cluster::new("other", other.client().expect("client"));
    let running = run_fan_out(env, &control, specs, outcomes.clone(), vec![other_cluster]);
    apply_cm(env, &configmap(&control, "cs", &[], &[])).await;

    let remote: Api<ClusterRole> = Api::all(other.client().expect("client"));
    let verbs = |r: &ClusterRole| {
        r.rules
            .as_ref()
            .and_then(|rules| rules.first())
            .map(|rule| rule.verbs.clone())
            .unwrap_or_default()
    };
    eventually(
        "the selected ClusterRole copied to the other cluster",
        T,
        || async {
            remote
                .get_opt(&format!("{tag}-viewer"))
                .await
                .expect("get")
                .filter(|r| verbs(r) == ["get"])
        },
    )
    .await;
    let r = eventually("the foreign one is a conflict", T, || async {
        outcomes
            .lock()
            .expect("lock")
            .get("cs")
            .cloned()
            .filter(|r| r.destinations.len() == 2)
    })
    .await;
    let states: Vec<(String, String, DestinationState)> = r
        .destinations
        .iter()
        .map(|d| (d.namespace.clone(), d.name.clone(), d.state))
        .collect();
    assert_eq!(
        states,
        [
            (
                String::new(),
                format!("{tag}-editor"),
                DestinationState::Conflict
            ),
            (
                String::new(),
                format!("{tag}-viewer"),
                DestinationState::Synced
            ),
        ]
    );
    assert!(
        remote
            .get_opt(&format!("{tag}-private"))
            .await
            .expect("get")
            .is_none(),
        "not selected"
    );

    // A change reaches the copy; the source's deletion removes it; the foreign object is
    // never touched.
    put(
        env.client().expect("client"),
        role("viewer", true, &["get", "watch"]),
    )
    .await;
    eventually("the change reaches the copy", T, || async {
        remote
            .get_opt(&format!("{tag}-viewer"))
            .await
            .expect("get")
            .filter(|r| verbs(r) == ["get", "watch"])
    })
    .await;
    Api::<ClusterRole>::all(env.client().expect("client"))
        .delete(&format!("{tag}-viewer"), &DeleteParams::default())
        .await
        .expect("delete source");
    eventually("the copy goes with its source", T, || async {
        remote
            .get_opt(&format!("{tag}-viewer"))
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let still = remote
        .get(&format!("{tag}-editor"))
        .await
        .expect("the foreign ClusterRole");
    assert_eq!(still.resource_version(), foreign.resource_version());
    running.stop().await;
}

/// A declaration goes while its sources cannot be read (a selector the apiserver would refuse,
/// as a library user may build one): its copies are found by their marks and removed, and the
/// deletion finishes, though the source was never read. Before, a going declaration waited
/// for every watch, the failing source watch too, for ever.
#[tokio::test]
async fn a_declaration_goes_though_its_source_cannot_be_read() {
    init_tracing();
    let env = shared("fan");
    let (_, [control, src, dst]) = namespaces(env, "unread", ["control", "src", "dst"]).await;
    put_secret(env, &src, "s", &[("token", "x")], "Opaque", &[]).await;
    let specs: Specs = Arc::new(Mutex::new(
        [("d".to_string(), spec(&src, "s", vec![into_namespace(&dst)]))].into(),
    ));
    let outcomes: Reports = Arc::default();
    let running = run_fan_out(env, &control, specs.clone(), outcomes.clone(), vec![]);
    apply_cm(env, &configmap(&control, "d", &[], &[])).await;
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), &dst);
    let copy = eventually("the copy", T, || async {
        secrets.get_opt("s").await.expect("get")
    })
    .await;

    // Now it selects its sources with a selector the apiserver refuses.
    let mut bad = spec(&src, "", vec![into_namespace(&dst)]);
    bad.source = SourceRef::selected(
        secret_type(),
        src.clone(),
        kubesync::syncers::fan_out::Selection {
            selector: Some(kube::core::Selector::from_iter([(
                "app".to_string(),
                "a(b".to_string(),
            )])),
            names: vec![],
        },
    );
    specs.lock().expect("lock").insert("d".into(), bad);
    apply_cm(env, &configmap(&control, "d", &[("touch", "1")], &[])).await;
    let error = eventually("the source watch fails", T, || async {
        let outcomes = outcomes.lock().expect("lock");
        let r = outcomes.get("d")?;
        r.watch_errors
            .iter()
            .find(|e| e.message.starts_with("reading the source"))
            .map(|e| e.message.clone())
    })
    .await;
    // Said for people: what is wrong with the selector, no Debug dump.
    assert!(error.contains("\"a(b\" is not a label value"), "{error}");
    assert!(
        !error.contains("Status {") && !error.contains("Some("),
        "{error}"
    );
    // Nothing is deleted on a source that cannot be read.
    let still = secrets
        .get_opt("s")
        .await
        .expect("get")
        .expect("the copy stays");
    assert_eq!(still.uid(), copy.uid());

    // It goes: the copy is removed by its marks, and the deletion finishes.
    let mut going = configmap(&control, "d", &[("touch", "1")], &[]);
    going.metadata.annotations = Some([("test/deleting".to_string(), "yes".to_string())].into());
    apply_cm(env, &going).await;
    eventually("the copy is gone and the deletion is done", T, || async {
        let gone = secrets.get_opt("s").await.expect("get").is_none();
        let outcomes = outcomes.lock().expect("lock");
        let r = outcomes.get("d")?;
        (gone && r.ready && r.remaining_copies == 0).then_some(())
    })
    .await;
    running.stop().await;
}
