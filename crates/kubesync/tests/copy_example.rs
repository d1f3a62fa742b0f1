//! The `copy` example end to end, between two real control planes.

mod common;

#[allow(dead_code)]
#[path = "../examples/copy.rs"]
mod copy;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, Patch, PatchParams};
use kubesync_testenv::eventually;

#[tokio::test]
async fn copy_example_creates_updates_repairs_and_deletes_copies() {
    init_tracing();
    let (src, dst) = (shared("copy-src"), shared("copy-dst"));
    let ns = unique_ns("copy");
    src.create_namespace(&ns).await.expect("ns");
    // The namespace does not exist in the target: the example creates it.
    let (controller, copier) = copy::copy_controller(cluster(src), cluster(dst)).expect("copy");
    let running = start(controller, copier);
    let dst_cms: Api<ConfigMap> = Api::namespaced(dst.client().expect("client"), &ns);
    let src_cms: Api<ConfigMap> = Api::namespaced(src.client().expect("client"), &ns);
    let get_data = |name: &'static str| {
        let api = dst_cms.clone();
        move || {
            let api = api.clone();
            async move { api.get_opt(name).await.expect("get").and_then(|c| c.data) }
        }
    };

    // Create: labelled ConfigMaps are copied, others are not.
    apply_cm(
        src,
        &configmap(
            &ns,
            "settings",
            &[(copy::COPY_LABEL, "true"), ("team", "a")],
            &[("color", "blue")],
        ),
    )
    .await;
    apply_cm(src, &configmap(&ns, "private", &[], &[("secret", "no")])).await;
    let data = eventually(
        "copy created",
        Duration::from_secs(20),
        get_data("settings"),
    )
    .await;
    assert_eq!(data["color"], "blue");
    let copy = dst_cms.get("settings").await.expect("copy");
    assert_eq!(copy.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(
        copy.labels()
            .get(copy::COPIED_FROM_LABEL)
            .map(String::as_str),
        Some("copy-src")
    );
    assert!(!copy.labels().contains_key(copy::COPY_LABEL));
    assert_eq!(
        copy.annotations()
            .get(copy::ORIGIN_ANNOTATION)
            .map(String::as_str),
        Some(format!("copy-src/{ns}/settings").as_str())
    );

    // Update: source changes reach the copy.
    apply_cm(
        src,
        &configmap(
            &ns,
            "settings",
            &[(copy::COPY_LABEL, "true"), ("team", "a")],
            &[("color", "green")],
        ),
    )
    .await;
    eventually("copy updated", Duration::from_secs(20), || {
        let f = get_data("settings");
        async move { f().await.filter(|d| d["color"] == "green") }
    })
    .await;

    // Drift: an edit of the copy is reverted; a deleted copy comes back.
    dst_cms
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"color": "red"}})),
        )
        .await
        .expect("edit copy");
    eventually("edit reverted", Duration::from_secs(20), || {
        let f = get_data("settings");
        async move { f().await.filter(|d| d["color"] == "green") }
    })
    .await;
    dst_cms
        .delete("settings", &DeleteParams::default())
        .await
        .expect("delete copy");
    eventually("copy recreated", Duration::from_secs(20), || {
        let api = dst_cms.clone();
        async move {
            api.get_opt("settings")
                .await
                .expect("get")
                .filter(|c| c.metadata.deletion_timestamp.is_none())
        }
    })
    .await;

    // Zero writes when in sync: restarted, the copier decides on the copy and writes
    // nothing (its writes go through kubesync's Writer, which counts them).
    running.stop().await;
    let (controller, copier) = copy::copy_controller(cluster(src), cluster(dst)).expect("copy");
    let writes = copier.write_counter();
    let (copier, mut reconciled) = observed(copier);
    let restarted = std::time::Instant::now();
    let running = start(controller, copier);
    reconciled.after_start("settings", restarted).await;
    assert_eq!(writes.writes(), 0, "an in-sync restart writes nothing");

    // An object in the target that is not our copy is never touched.
    apply_cm(
        dst,
        &configmap(&ns, "foreign", &[], &[("owner", "someone-else")]),
    )
    .await;
    apply_cm(
        src,
        &configmap(
            &ns,
            "foreign",
            &[(copy::COPY_LABEL, "true")],
            &[("owner", "source")],
        ),
    )
    .await;

    // Delete: removing the source (or its label) deletes the copy.
    src_cms
        .delete("settings", &DeleteParams::default())
        .await
        .expect("delete source");
    eventually("copy deleted", Duration::from_secs(20), || {
        let api = dst_cms.clone();
        async move {
            api.get_opt("settings")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        }
    })
    .await;
    let gone = Change::gone(reconciled.follow(key_of(
        src,
        &ApiResource::erase::<ConfigMap>(&()),
        &ns,
        "foreign",
    )));
    src_cms
        .delete("foreign", &DeleteParams::default())
        .await
        .expect("delete source");
    // Witness: the source's deletion was reconciled (and the foreign object left alone).
    reconciled.saw("foreign", &[&gone]).await;
    let foreign = dst_cms
        .get("foreign")
        .await
        .expect("foreign object survives");
    assert_eq!(foreign.data.expect("data")["owner"], "someone-else");
    assert!(dst_cms.get_opt("private").await.expect("get").is_none());
    let namespaces: Api<Namespace> = Api::all(dst.client().expect("client"));
    assert!(namespaces.get_opt(&ns).await.expect("get").is_some());

    running.stop().await;
}
