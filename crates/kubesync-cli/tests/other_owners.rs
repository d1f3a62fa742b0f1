//! Copies carry no other tool's ownership: a source installed by the real (pinned) helm and
//! marked as Argo CD and Flux mark what they keep; its copies carry none of their keys unless
//! a declaration asks for them, and `helm install` of another release in a destination meets a
//! copy as it meets any object it does not own.

mod common;

use std::collections::BTreeMap;

use common::*;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kubesync_cli::crd::ObjectSync;
use kubesync_testenv::{TestEnv, eventually};

/// A chart whose one object is the ConfigMap `settings`, labelled and annotated as Argo CD
/// and Flux leave the objects they keep (Helm adds its own keys when it installs it).
fn chart(env: &TestEnv) -> String {
    let dir = env.dir().join("settings-chart");
    std::fs::create_dir_all(dir.join("templates")).expect("chart");
    std::fs::write(
        dir.join("Chart.yaml"),
        "apiVersion: v2\nname: settings\nversion: 1.0.0\n",
    )
    .expect("Chart.yaml");
    std::fs::write(
        dir.join("templates/settings.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  labels:\n    app.kubernetes.io/name: settings\n    app.kubernetes.io/instance: {{ .Release.Name }}\n    kustomize.toolkit.fluxcd.io/name: infra\n    kustomize.toolkit.fluxcd.io/namespace: flux-system\n  annotations:\n    argocd.argoproj.io/tracking-id: \"infra:/ConfigMap:{{ .Release.Namespace }}/settings\"\n    team.example.com/owner: platform\n    note: kept\ndata: {color: blue}\n",
    )
    .expect("template");
    dir.to_str().expect("utf-8").to_string()
}

/// The keys of a ConfigMap's labels and annotations but kubesync's own, with their values.
fn metadata(cm: &ConfigMap) -> BTreeMap<String, String> {
    let mut all = cm.metadata.labels.clone().unwrap_or_default();
    all.extend(cm.metadata.annotations.clone().unwrap_or_default());
    all.retain(|k, _| !k.starts_with("kubesync.io/"));
    all
}

/// What `helm install <release>` of the chart in `namespace` says when it fails, with the
/// namespace and release written as `<ns>` and `<release>`.
fn refused_install(helm: &Helm, chart: &str, release: &str, namespace: &str) -> String {
    let out = helm.run(&["install", release, chart, "--namespace", namespace]);
    assert!(
        !out.status.success(),
        "helm install {release} -n {namespace} succeeded over a copy"
    );
    String::from_utf8_lossy(&out.stderr)
        .replace(namespace, "<ns>")
        .replace(release, "<release>")
}

/// The copy `settings` in `namespace` once its data is the source's.
async fn copy_in(env: &TestEnv, namespace: &str) -> ConfigMap {
    let maps: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), namespace);
    eventually(&format!("the copy in {namespace}"), T, || async {
        let cm = maps.get_opt("settings").await.ok()??;
        (cm.data.as_ref()?.get("color")? == "blue").then_some(cm)
    })
    .await
}

#[tokio::test]
async fn copies_of_a_helm_installed_source_carry_no_tools_ownership() {
    let namespaces = ["apps", "team-a", "team-b", "team-c", "team-d"];
    let env = operator_cluster("other-owners", true, &namespaces).await;
    let helm = Helm::on(&env);
    let chart = chart(&env);
    helm.ok(&["install", "infra", &chart, "--namespace", "apps"]);
    let operator = start_trusting(&env, &["*"]);

    // The default, with a key of one's own tool added, and one of Argo CD's options set back by
    // a patch in team-b; and a declaration that copies them all (team-c).
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  otherOwners: {keys: [team.example.com/owner]}\n  destinations:\n  - namespace: team-a\n  - namespace: team-b\n    patches: [{merge: {metadata: {annotations: {argocd.argoproj.io/compare-options: IgnoreExtraneous}}}}]\n").await.expect("objectsync");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: everything, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: settings}\n  otherOwners: {copy: true}\n  destinations: [{namespace: team-c}]\n").await.expect("objectsync");

    let source: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "apps");
    let source = metadata(&source.get("settings").await.expect("source"));
    for key in [
        "app.kubernetes.io/managed-by",
        "meta.helm.sh/release-name",
        "meta.helm.sh/release-namespace",
    ] {
        assert!(source.contains_key(key), "helm set no {key}: {source:?}");
    }
    let plain: BTreeMap<String, String> =
        [("app.kubernetes.io/name", "settings"), ("note", "kept")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
    assert_eq!(metadata(&copy_in(&env, "team-a").await), plain);
    let mut patched = plain.clone();
    patched.insert(
        "argocd.argoproj.io/compare-options".into(),
        "IgnoreExtraneous".into(),
    );
    assert_eq!(metadata(&copy_in(&env, "team-b").await), patched);
    assert_eq!(metadata(&copy_in(&env, "team-c").await), source);

    // helm meets the copy as any object it does not own (an unowned ConfigMap of that name
    // made by hand in team-d) — not as the object of another release, as it does the copy
    // that carries Helm's keys.
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: team-d}\ndata: {color: red}\n").await.expect("unowned");
    let unowned = refused_install(&helm, &chart, "web", "team-d");
    assert!(unowned.contains("invalid ownership metadata"), "{unowned}");
    assert_eq!(refused_install(&helm, &chart, "web", "team-a"), unowned);
    let claimed = refused_install(&helm, &chart, "web", "team-c");
    assert_ne!(claimed, unowned);
    assert!(claimed.contains("\"infra\""), "{claimed}");

    // Turned back to the default, the copy in team-c loses the keys when it is next written
    // (a copy in sync is not written for a change of the declaration's filters).
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "apps");
    syncs
        .patch(
            "everything",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"otherOwners": {"copy": false}}})),
        )
        .await
        .expect("patch");
    let sources: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "apps");
    sources
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"color": "green"}})),
        )
        .await
        .expect("source");
    let maps: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "team-c");
    let mut without = plain.clone();
    without.insert("team.example.com/owner".into(), "platform".into());
    eventually(
        "team-c's copy, green, without the tools' keys",
        T,
        || async {
            let cm = maps.get_opt("settings").await.ok()??;
            let green = cm.data.as_ref()?.get("color")? == "green";
            (green && metadata(&cm) == without).then_some(())
        },
    )
    .await;
    operator.assert_no_panic();
    operator.stop().await;
}
