//! The syncer framework end to end, through the `service_mirror` example: entry points chosen
//! by existence, verified reverse names, default deletion of owned targets only, hooks.

mod common;

#[allow(dead_code)]
#[path = "../examples/service_mirror.rs"]
mod service_mirror;

use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::Service;
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DeleteParams, Patch, PatchParams};
use kubesync::syncer::SyncEngine;
use kubesync_testenv::eventually;

const T: Duration = Duration::from_secs(30);

fn service(name: &str, port: i32, annotations: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"ports": [{"name": "http", "port": port, "protocol": "TCP"}], "selector": {"app": name}},
    })
}

async fn apply_service(api: &Api<Service>, name: &str, body: serde_json::Value) -> Service {
    api.patch(
        name,
        &PatchParams::apply("tests").force(),
        &Patch::Apply(body),
    )
    .await
    .expect("apply service")
}

fn port(s: &Service) -> Option<i32> {
    s.spec.as_ref()?.ports.as_ref()?.first().map(|p| p.port)
}

#[tokio::test]
async fn a_custom_syncer_creates_updates_deletes_and_never_touches_foreign_objects() {
    init_tracing();
    let (src, dst) = (shared("fw-src"), shared("fw-dst"));
    let ns = unique_ns("mirror");
    src.create_namespace(&ns).await.expect("ns");
    dst.create_namespace(&ns).await.expect("ns");
    let source: Api<Service> = Api::namespaced(src.client().expect("client"), &ns);
    let target: Api<Service> = Api::namespaced(dst.client().expect("client"), &ns);
    // Foreign objects in the target: one named like a mirror of a source that exists,
    // one named like a mirror of a source that does not.
    apply_service(
        &target,
        "mirror-web",
        service("mirror-web", 9999, serde_json::json!({})),
    )
    .await;
    apply_service(
        &target,
        "mirror-ghost",
        service("mirror-ghost", 9999, serde_json::json!({})),
    )
    .await;

    let engine = SyncEngine::new(
        service_mirror::ServiceMirror::new(&ns),
        cluster(src),
        cluster(dst),
    );
    let writes = engine.write_counter();
    let began = std::time::Instant::now();
    let (running, mut reconciled) = start_engine_observed(engine).await;

    // sync_down: a new source gets its mirror.
    apply_service(&source, "api", service("api", 80, serde_json::json!({}))).await;
    let m = eventually("mirror created", T, || async {
        target.get_opt("mirror-api").await.expect("get")
    })
    .await;
    assert_eq!(port(&m), Some(80));
    assert_eq!(
        m.annotations().get(service_mirror::MIRROR_OF),
        Some(&format!("{ns}/api"))
    );

    // sync: a change reaches the mirror.
    apply_service(&source, "api", service("api", 8080, serde_json::json!({}))).await;
    eventually("mirror updated", T, || async {
        target
            .get_opt("mirror-api")
            .await
            .expect("get")
            .filter(|s| port(s) == Some(8080))
    })
    .await;

    // sync with a foreign target: left alone.
    let services = ApiResource::erase::<Service>(&());
    let web = reconciled.follow(key_of(src, &services, &ns, "web"));
    let web = Change::written(
        web,
        &apply_service(&source, "web", service("web", 81, serde_json::json!({}))).await,
    );

    // Hook: a source that opts out is skipped.
    let quiet = reconciled.follow(key_of(src, &services, &ns, "quiet"));
    let quiet = Change::written(
        quiet,
        &apply_service(
            &source,
            "quiet",
            service(
                "quiet",
                82,
                serde_json::json!({service_mirror::SKIP: "true"}),
            ),
        )
        .await,
    );

    // sync_up (default): the source goes, the owned mirror goes; foreign ones stay.
    source
        .delete("api", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("mirror deleted", T, || async {
        target
            .get_opt("mirror-api")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    // Witnesses, not a sleep: each of those keys was reconciled on a store showing its
    // change; the ghost's target (there before the engine) by the engine's first reconciles.
    reconciled.saw("web", &[&web]).await;
    reconciled.saw("quiet", &[&quiet]).await;
    reconciled.after_start("ghost", began).await;
    assert_eq!(
        port(&target.get("mirror-web").await.expect("foreign")),
        Some(9999)
    );
    assert_eq!(
        port(&target.get("mirror-ghost").await.expect("foreign")),
        Some(9999)
    );
    assert!(target.get_opt("mirror-quiet").await.expect("get").is_none());
    // create + update + delete: three writes, none for the foreign or skipped objects.
    assert_eq!(writes.writes(), 3, "writes: {}", writes.writes());
    running.stop().await;
}

/// A target is deleted only when its source is really gone: a source that is missing from the
/// store but exists in the cluster (here: it left the source watch's label selector) keeps
/// its target. The default `sync_up` confirms absence with a live read.
#[tokio::test]
async fn a_source_missing_from_the_store_but_present_keeps_its_target() {
    init_tracing();
    let (src, dst) = (shared("fw-src"), shared("fw-dst"));
    let ns = unique_ns("narrow");
    src.create_namespace(&ns).await.expect("ns");
    dst.create_namespace(&ns).await.expect("ns");
    let source: Api<Service> = Api::namespaced(src.client().expect("client"), &ns);
    let target: Api<Service> = Api::namespaced(dst.client().expect("client"), &ns);
    let engine = SyncEngine::new(
        service_mirror::ServiceMirror::new(&ns).selector("mirror=yes"),
        cluster(src),
        cluster(dst),
    );
    let writes = engine.write_counter();
    let (running, mut reconciled) = start_engine_observed(engine).await;

    let mut body = service("api", 80, serde_json::json!({}));
    body["metadata"]["labels"] = serde_json::json!({"mirror": "yes"});
    apply_service(&source, "api", body).await;
    eventually("mirror created", T, || async {
        target.get_opt("mirror-api").await.expect("get")
    })
    .await;

    // The label goes: the watch reports the source as deleted, but it still exists.
    let unlabelled = Change::gone(reconciled.follow(key_of(
        src,
        &ApiResource::erase::<Service>(&()),
        &ns,
        "api",
    )));
    source
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"mirror": null}}})),
        )
        .await
        .expect("unlabel");
    reconciled.saw("api", &[&unlabelled]).await;
    assert!(
        target.get_opt("mirror-api").await.expect("get").is_some(),
        "the mirror of a source that still exists was deleted"
    );
    assert_eq!(writes.writes(), 1, "writes: {}", writes.writes());
    running.stop().await;
}
