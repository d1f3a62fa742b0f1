//! Scenario 4, flapping remote: a RemoteCluster's apiserver goes down and up five times while
//! spec/status sync (ResourceSync) and a cross-cluster fan-out (ObjectSync) run against it,
//! and both sides keep changing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync_testenv::{TestEnv, eventually};

use crate::common::{T, operator_cluster_from};
use crate::fleet::{OPERATORS, Operator, Random, Writes, grant_everything, reconciled_again, size};

const WIDGET_CRD: &str = include_str!("../../../kubesync-testenv/fixtures/widget-crd.yaml");

fn widgets(env: &TestEnv, ns: Option<&str>) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
        "widgets",
    );
    match ns {
        Some(ns) => Api::namespaced_with(env.client().expect("client"), ns, &ar),
        None => Api::all_with(env.client().expect("client"), &ar),
    }
}

/// A cluster with the audit log, the operator identity granted everything, and Widgets.
async fn cluster(name: &str, namespaces: &[&str]) -> TestEnv {
    let [a, _] = OPERATORS;
    let builder = TestEnv::builder().name(name).audit(true).user(a, &[]);
    let env = operator_cluster_from(builder, namespaces).await;
    env.install_crds(WIDGET_CRD).await.expect("widget crd");
    grant_everything(&env, a).await;
    env
}

/// What is not yet as it should be: (remote copies missing or behind the local source, local
/// Widgets missing or behind the remote spec, remote statuses behind the local ones).
async fn behind(
    local: &TestEnv,
    remote: &TestEnv,
    namespaces: &[String],
) -> Option<(usize, usize, usize)> {
    let source = Api::<ConfigMap>::namespaced(local.client().ok()?, "apps")
        .get("shared")
        .await
        .ok()?
        .data;
    let copies: BTreeMap<String, ConfigMap> = Api::<ConfigMap>::all(remote.client().ok()?)
        .list(&ListParams::default().fields("metadata.name=shared"))
        .await
        .ok()?
        .items
        .into_iter()
        .map(|cm| (cm.namespace().unwrap_or_default(), cm))
        .collect();
    let copies_behind = namespaces
        .iter()
        .filter(|ns| copies.get(*ns).map(|c| &c.data) != Some(&source))
        .count();
    let key = |w: &DynamicObject| (w.namespace().unwrap_or_default(), w.name_any());
    let remote_widgets: BTreeMap<_, DynamicObject> = widgets(remote, None)
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .filter(|w| w.namespace().is_some_and(|ns| ns.starts_with("t-")))
        .map(|w| (key(&w), w))
        .collect();
    let local_widgets: BTreeMap<_, DynamicObject> = widgets(local, None)
        .list(&Default::default())
        .await
        .ok()?
        .items
        .into_iter()
        .map(|w| (key(&w), w))
        .collect();
    let mut spec_behind = 0;
    let mut status_behind = 0;
    for (k, r) in &remote_widgets {
        match local_widgets.get(k) {
            Some(l) if l.data["spec"] == r.data["spec"] => {
                if l.data["status"] != r.data["status"] {
                    status_behind += 1;
                }
            }
            _ => spec_behind += 1,
        }
    }
    Some((copies_behind, spec_behind, status_behind))
}

/// The uid of every Widget of `env`, by `namespace/name`.
async fn uids(env: &TestEnv) -> BTreeMap<String, String> {
    widgets(env, None)
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|w| {
            (
                format!("{}/{}", w.namespace().unwrap_or_default(), w.name_any()),
                w.uid().unwrap_or_default(),
            )
        })
        .collect()
}

async fn set_source(local: &TestEnv, tick: u32) {
    local.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: shared, namespace: apps}}\ndata: {{tick: \"{tick}\"}}\n")).await.expect("source");
}

/// Patches every Widget of `env` in `namespaces`: its spec (remote side) or its status (local).
async fn patch_all(
    env: &TestEnv,
    namespaces: &[String],
    per_namespace: usize,
    status: bool,
    tick: u32,
) {
    let patches: Vec<(String, String)> = namespaces
        .iter()
        .flat_map(|ns| (0..per_namespace).map(move |i| (ns.clone(), format!("w-{i}"))))
        .collect();
    stream::iter(patches)
        .for_each_concurrent(16, |(ns, name)| async move {
            let api = widgets(env, Some(&ns));
            let pp = PatchParams::default();
            if status {
                let patch =
                    Patch::Merge(serde_json::json!({"status": {"phase": format!("tick-{tick}")}}));
                api.patch_status(&name, &pp, &patch).await.expect("status");
            } else {
                let patch = Patch::Merge(serde_json::json!({"spec": {"size": tick}}));
                api.patch(&name, &pp, &patch).await.expect("spec");
            }
        })
        .await;
}

#[tokio::test]
async fn a_flapping_remote_loses_nothing_locally_and_converges() {
    let per_namespace = 5;
    let namespaces: Vec<String> = (0..size(20, 50)).map(|i| format!("t-{i:04}")).collect();
    let mut remote_namespaces: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    remote_namespaces.push("other");
    let (local, remote) = tokio::join!(
        cluster("flap-local", &["apps", "kubesync"]),
        cluster("flap-remote", &remote_namespaces)
    );
    let mut remote = remote;
    for ns in &namespaces {
        remote.apply_yaml(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{fleet: \"yes\"}}}}\n")).await.expect("label");
        for i in 0..per_namespace {
            remote.apply_yaml(&format!("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {{name: w-{i}, namespace: {ns}}}\nspec: {{size: 0}}\n")).await.expect("widget");
        }
    }
    // Objects kubesync must not touch on the remote side.
    remote.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: unrelated, namespace: {}}}\ndata: {{owner: someone-else}}\n", namespaces[0])).await.expect("foreign");
    remote.apply_yaml("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: x, namespace: other}\nspec: {size: 7}\n").await.expect("foreign");
    let foreign_versions = |remote: &TestEnv| {
        let configmaps =
            Api::<ConfigMap>::namespaced(remote.client().expect("client"), &namespaces[0]);
        let others = widgets(remote, Some("other"));
        async move {
            let cm = configmaps.get("unrelated").await.expect("cm");
            let w = others.get("x").await.expect("widget");
            (cm.resource_version(), w.resource_version())
        }
    };
    let foreign_before = foreign_versions(&remote).await;

    let [a, _] = OPERATORS;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "mgmt-kubeconfig", "namespace": "kubesync"},
        "stringData": {"kubeconfig": remote.kubeconfig_yaml_as(a).expect("kubeconfig")}
    }))
    .expect("secret");
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        local.client().expect("client"),
        "kubesync",
    )
    .create(&Default::default(), &secret)
    .await
    .expect("secret");
    set_source(&local, 0).await;
    local.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {name: mgmt}\nspec:\n  kubeconfigSecretRef: {namespace: kubesync, name: mgmt-kubeconfig}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: widgets}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: mgmt\n  namespacePrefix: t-\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: shared, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: shared}\n  destinations: [{cluster: mgmt, namespaceSelector: {matchLabels: {fleet: \"yes\"}}}]\n").await.expect("declarations");
    let mut operator = Operator::start(&local, a, &[], "info");

    // Settled: every local Widget exists, with a status the local side set.
    eventually("the local Widgets", T, || async {
        let (_, spec, _) = behind(&local, &remote, &namespaces).await?;
        (spec == 0).then_some(())
    })
    .await;
    patch_all(&local, &namespaces, per_namespace, true, 0).await;
    eventually("settled", T, || async {
        (behind(&local, &remote, &namespaces).await? == (0, 0, 0)).then_some(())
    })
    .await;
    let uids = self::uids(&local).await;

    // Five flaps: while the remote is down the local side changes (the source, the local
    // statuses); while it is up the remote side changes (the specs).
    let (mut random, seed) = Random::new();
    let mut downtimes = Vec::new();
    let mut back = Instant::now();
    for tick in 1..=5 {
        remote.stop_apiserver();
        let down = Instant::now();
        set_source(&local, tick).await;
        patch_all(&local, &namespaces, per_namespace, true, tick).await;
        tokio::time::sleep(Duration::from_millis(random.below(1000..3000))).await;
        remote.restart_apiserver().await.expect("restart");
        back = Instant::now();
        downtimes.push(down.elapsed().as_millis());
        patch_all(&remote, &namespaces, per_namespace, false, tick).await;
        if tick < 5 {
            tokio::time::sleep(Duration::from_millis(random.below(500..2000))).await;
        }
    }
    let converged = eventually(
        "converged after the last return",
        Duration::from_secs(120),
        || async {
            (behind(&local, &remote, &namespaces).await? == (0, 0, 0)).then(|| back.elapsed())
        },
    )
    .await;
    // Work the flaps caused and still in flight finishes before the writes are counted, as
    // witnesses on the watches say (each watch delivers in order): the ObjectSync reconciles
    // once more (a spec change that changes no copy, seen in its status at the new
    // generation; one key is never reconciled twice at once), a spec change of one remote
    // Widget comes down and a status change of its local twin goes up (behind every earlier
    // event of both Widget watches). Then SIGTERM: the operator finishes the reconciles in
    // flight and exits, so every write it sent is in the audit logs.
    assert_eq!(operator.exited(), None, "the operator runs on");
    witnessed(&local, &remote, &namespaces[0]).await;
    let exit = operator.terminate().await;
    assert!(exit.success(), "a graceful stop: {exit}");

    // Nothing local deleted: the same objects (uids), and no delete in the local audit log.
    let uids_after = self::uids(&local).await;
    let (remote_audit, local_audit) = (
        remote.audit().expect("audit"),
        local.audit().expect("audit"),
    );
    let local_deletions = local_audit
        .iter()
        .filter(|e| e.verb.starts_with("delete") && e.succeeded() && e.user.username == a)
        .count();
    let copies = Writes::from_events(&remote_audit, "configmaps");
    let remote_widgets = Writes::from_events(&remote_audit, "widgets");
    let local_widgets = Writes::from_events(&local_audit, "widgets");
    let all = [&copies, &remote_widgets, &local_widgets];
    let duplicates: usize = all.iter().map(|w| w.duplicates()).sum();
    let foreign_after = foreign_versions(&remote).await;
    let foreign_writes = usize::from(foreign_after.0 != foreign_before.0)
        + usize::from(foreign_after.1 != foreign_before.1)
        + copies.to(|_, name| name == "unrelated")
        + remote_widgets.to(|ns, _| ns == "other");
    let writes: usize = all.iter().map(|w| w.total()).sum();
    println!(
        "flapping remote: 5 outages of {downtimes:?} ms (seed {seed}); {} Widgets synced spec down and status up, 1 ConfigMap fanned out to {} remote namespaces; {} local deletions, {} local Widgets replaced, {foreign_writes} foreign writes, {duplicates} duplicate writes ({writes} writes); converged {:.1} s after the last return",
        uids.len(),
        namespaces.len(),
        local_deletions,
        uids.iter()
            .filter(|(k, uid)| uids_after.get(*k) != Some(uid))
            .count(),
        converged.as_secs_f64()
    );
    assert_eq!(uids_after, uids, "the same local Widgets");
    assert_eq!(local_deletions, 0);
    assert_eq!(foreign_writes, 0);
    assert_eq!(duplicates, 0);
}

/// The witnesses that the operator has taken in every change made before: see the caller.
async fn witnessed(local: &TestEnv, remote: &TestEnv, ns: &str) {
    reconciled_again(local.client().expect("client"), &["shared"]).await;
    let pp = PatchParams::default();
    widgets(remote, Some(ns))
        .patch(
            "w-0",
            &pp,
            &Patch::Merge(serde_json::json!({"spec": {"size": 1000}})),
        )
        .await
        .expect("witness spec");
    let local_widgets = widgets(local, Some(ns));
    eventually("the witness spec down", T, || async {
        let w = local_widgets.get("w-0").await.ok()?;
        (w.data["spec"]["size"] == 1000).then_some(())
    })
    .await;
    local_widgets
        .patch_status(
            "w-0",
            &pp,
            &Patch::Merge(serde_json::json!({"status": {"phase": "witness"}})),
        )
        .await
        .expect("witness status");
    let remote_widgets = widgets(remote, Some(ns));
    eventually("the witness status up", T, || async {
        let w = remote_widgets.get("w-0").await.ok()?;
        (w.data["status"]["phase"] == "witness").then_some(())
    })
    .await;
}
