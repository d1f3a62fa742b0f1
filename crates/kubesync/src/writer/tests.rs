//! The writer's memory of its recent writes, without a cluster.

use super::*;

fn written(resource_version: u64, fingerprint: u64) -> Written {
    Written {
        resource_version,
        fingerprint,
        at: Instant::now(),
    }
}

#[tokio::test]
async fn creates_and_deletes_are_remembered_for_their_object() {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let cluster = Cluster::new("c", kube::Client::try_from(config).expect("client"));
    let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let writer = Writer::new();
    let at = (Some("ns"), "copy");
    assert!(!writer.written_recently(&cluster, &ar, at, "fm"));
    let record = |kind: WriteKind, manager: &str, fingerprint: u64, age: Duration| {
        writer.recent.lock().remember(
            write_key((&cluster, &ar, at.0, at.1), kind, manager),
            Written {
                resource_version: 7,
                fingerprint,
                at: Instant::now() - age,
            },
        )
    };
    record(WriteKind::Create, "fm", 0, Duration::ZERO);
    assert!(writer.written_recently(&cluster, &ar, at, "fm"));
    assert!(!writer.written_recently(&cluster, &ar, (Some("ns"), "else"), "fm"));
    assert!(!writer.written_recently(&cluster, &ar, at, "other-manager"));
    // An update too (it may move the object to another watch's selector).
    record(WriteKind::Create, "fm", 0, REMEMBER);
    assert!(!writer.written_recently(&cluster, &ar, at, "fm"));
    record(WriteKind::Apply, "fm", 0, Duration::ZERO);
    assert!(writer.written_recently(&cluster, &ar, at, "fm"));
    record(WriteKind::Apply, "fm", 0, REMEMBER);
    record(WriteKind::Delete, "", fingerprint(&"uid-1"), Duration::ZERO);
    assert!(writer.deleted_recently(&cluster, &ar, at, "uid-1"));
    assert!(
        !writer.deleted_recently(&cluster, &ar, at, "uid-2"),
        "another object"
    );
    // Forgotten after REMEMBER.
    assert!(!writer.written_recently(&cluster, &ar, at, "fm"));
}

/// A cluster that cannot be reached (anything sent to it fails), the ConfigMap type and
/// the ConfigMap `ns/a` at resourceVersion 19.
fn unreachable_with_config_map_at_19() -> (Cluster, ApiResource, DynamicObject) {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
    let cluster = Cluster::new("c", kube::Client::try_from(config).expect("client"));
    let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let obj: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "19"}
    }))
    .expect("object");
    (cluster, ar, obj)
}

#[tokio::test]
async fn a_finalizer_patch_is_not_sent_again_on_an_object_older_than_its_answer() {
    let (cluster, ar, obj) = unreachable_with_config_map_at_19();
    let writer = Writer::new();
    let patch = crate::object::finalizer_patch(&obj, "mine", true).expect("patch");
    writer.recent.lock().remember(
        write_key((&cluster, &ar, Some("ns"), "a"), WriteKind::Finalizer, "fm"),
        written(20, fingerprint(&patch)),
    );
    let again = writer.set_finalizer(&cluster, &ar, &obj, "mine", true, "fm");
    assert!(matches!(again.await, Ok(None)), "sent again");
    // The same object once the store shows the answer (or a newer one): decided afresh.
    let mut newer = obj.clone();
    newer.metadata.resource_version = Some("21".into());
    let sent = writer.set_finalizer(&cluster, &ar, &newer, "mine", true, "fm");
    assert!(sent.await.is_err(), "sent to the unreachable cluster");
}

#[tokio::test]
async fn a_finalizer_patch_stays_remembered_when_another_merge_patch_follows_it() {
    // A syncer claims an object (its finalizer, answered at 20), then writes its marks
    // (a merge patch by the same manager, answered at 21). A store still at 19 must not
    // lead to the finalizer's patch again: it would be sent on 19 and refused.
    let (cluster, ar, obj) = unreachable_with_config_map_at_19();
    let writer = Writer::new();
    let target = (&cluster, &ar, Some("ns"), "a");
    let finalizer = crate::object::finalizer_patch(&obj, "mine", true).expect("patch");
    writer.remember(
        target,
        (WriteKind::Finalizer, "fm"),
        fingerprint(&finalizer),
        Some("20"),
    );
    let marks = serde_json::json!({"metadata": {"annotations": {"gen": "1"}}});
    writer.remember(
        target,
        (WriteKind::Merge, "fm"),
        fingerprint(&marks),
        Some("21"),
    );
    let again = writer.set_finalizer(&cluster, &ar, &obj, "mine", true, "fm");
    assert!(matches!(again.await, Ok(None)), "sent again");
    assert!(
        writer.already_written(&cluster, &ar, &obj, (WriteKind::Merge, "fm"), &marks),
        "the marks are remembered too"
    );
    // A status decided on that store is conditioned on the newest of the writes.
    assert_eq!(writer.last_written(target, "fm"), Some(21));
}

#[test]
fn a_write_decided_on_an_older_object_with_the_same_body_is_done_already() {
    let w = written(20, 7);
    assert!(
        superseded(Some(&w), Some("19"), 7),
        "the store is behind the write"
    );
    assert!(
        !superseded(Some(&w), Some("20"), 7),
        "the store shows the write"
    );
    assert!(
        !superseded(Some(&w), Some("21"), 7),
        "someone wrote after it"
    );
    assert!(!superseded(Some(&w), Some("19"), 8), "another body");
    assert!(!superseded(None, Some("19"), 7), "never written");
    assert!(!superseded(Some(&w), None, 7), "no resourceVersion");
    assert!(!superseded(Some(&w), Some("abc"), 7), "not a number");
}

#[test]
fn writes_are_forgotten_after_a_while() {
    let mut recent = Recent::default();
    let start = Instant::now();
    let at = |s| Written {
        at: start + Duration::from_secs(s),
        ..written(1, 1)
    };
    recent.remember(1, at(0));
    recent.remember(2, at(10));
    recent.remember(1, at(20));
    // 30 s after the first: key 1's first entry expires, its newer one stays.
    recent.remember(3, at(30));
    assert_eq!(recent.written.len(), 3);
    recent.remember(4, at(41));
    assert_eq!(
        recent
            .written
            .keys()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        [1, 3, 4].into()
    );
    recent.remember(5, at(100));
    assert_eq!(recent.written.keys().copied().collect::<Vec<_>>(), [5]);
    assert_eq!(recent.order.len(), 1);
}

#[test]
fn fingerprints_tell_bodies_apart() {
    let a = serde_json::json!({"data": {"v": "1"}});
    let b = serde_json::json!({"data": {"v": "2"}});
    assert_eq!(fingerprint(&a), fingerprint(&a.clone()));
    assert_ne!(fingerprint(&a), fingerprint(&b));
}
