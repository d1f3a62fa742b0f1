//! Report mode and drift attribution through the operator, on a real control plane: what
//! kubesync would write and who changed a copy, named from the copy's managedFields.

mod common;

use std::collections::BTreeMap;

use common::*;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams};
use kubesync_cli::crd::{CopyState, DestinationStatusEntry, ObjectSync, PlannedAction};
use kubesync_testenv::eventually;

/// Values that must never appear in a status or an Event (base64 too).
const ALICE: &str = "hunter2-alice";
const BOB: &str = "root-bob";

fn b64(s: &str) -> String {
    let bytes = k8s_openapi::ByteString(s.as_bytes().to_vec());
    serde_json::to_value(bytes)
        .expect("base64")
        .as_str()
        .expect("a string")
        .to_string()
}

fn entry<'a>(os: &'a ObjectSync, ns: &str) -> Option<&'a DestinationStatusEntry> {
    os.status
        .as_ref()?
        .destinations
        .iter()
        .find(|d| d.namespace == ns)
}

/// The decoded data of a Secret.
fn data(s: &Secret) -> BTreeMap<String, String> {
    s.data
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8(v.0).expect("utf-8")))
        .collect()
}

/// An ObjectSync in Report mode writes nothing and lists, per destination, what it would
/// create, update (with the changed field paths) and delete, and who changed a copy: two
/// field managers (one by update, one by apply) edit a copy while its source also changes;
/// only their fields are attributed to them, each with its time. Back in Enforce mode the
/// copies are written, the edits reverted, and a Warning Event names both managers and their
/// fields. A later edit by a third manager is reverted and named too. Never a value.
#[tokio::test]
async fn report_mode_lists_what_would_change_and_drift_names_the_field_managers() {
    let env = operator_cluster_from(
        kubesync_testenv::TestEnv::builder()
            .name("drift")
            .audit(true),
        &["apps", "team-a", "team-b", "team-c"],
    )
    .await;
    let client = env.client().expect("client");
    // kubesync's writes to the destinations' Secrets (its field manager, or a delete), from the
    // audit log.
    let kubesync_writes = || {
        env.audit()
            .expect("audit")
            .iter()
            .filter(|e| {
                e.resource() == "secrets"
                    && e.namespace().starts_with("team-")
                    && (e.verb == "delete"
                        || (e.is_write() && e.request_uri.contains("fieldManager=kubesync")))
            })
            .count()
    };
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: apps}\ntype: Opaque\nstringData: {user: admin, password: s3cr3t, host: db1}\n").await.expect("secret");
    let sync = |mode: &str, destinations: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: db, namespace: apps}}\nspec:\n  mode: {mode}\n  source: {{kind: Secret, name: db}}\n  destinations: {destinations}\n"
        )
    };
    env.apply_yaml(&sync(
        "Enforce",
        "[{namespace: team-a}, {namespace: team-b}]",
    ))
    .await
    .expect("objectsync");
    let running = start_trusting(&env, &["*"]);
    let syncs: Api<ObjectSync> = Api::namespaced(client.clone(), "apps");
    let secrets = |ns: &str| Api::<Secret>::namespaced(client.clone(), ns);
    eventually("both copies synced", T, || async {
        let s = syncs.get("db").await.ok()?.status?;
        (s.total == 2 && s.in_sync == 2).then_some(())
    })
    .await;

    // Report mode, team-b dropped and team-c added: nothing is written. (The creates' lines
    // may be written after the status shows the copies.)
    let written_before_report = eventually("kubesync's creates in the audit log", T, || async {
        let n = kubesync_writes();
        (n >= 2).then_some(n)
    })
    .await;
    env.apply_yaml(&sync(
        "Report",
        "[{namespace: team-a}, {namespace: team-c}]",
    ))
    .await
    .expect("report mode");
    let os = eventually("team-b would be deleted, team-c created", T, || async {
        let os = syncs.get("db").await.ok()?;
        let s = os.status.as_ref()?;
        (s.destinations.len() == 3
            && entry(&os, "team-b")?.planned_action == Some(PlannedAction::Delete)
            && entry(&os, "team-c")?.planned_action == Some(PlannedAction::Create))
        .then_some(os)
    })
    .await;
    assert_eq!(entry(&os, "team-b").expect("b").state, CopyState::OutOfSync);
    assert_eq!(entry(&os, "team-a").expect("a").state, CopyState::Synced);
    let synced = os
        .status
        .as_ref()
        .expect("status")
        .conditions
        .iter()
        .find(|c| c.type_ == "Synced")
        .expect("Synced")
        .clone();
    assert_eq!(synced.reason, "OutOfSync", "{}", synced.message);
    assert!(
        synced
            .message
            .contains("would create 1, update 0 and delete 1"),
        "{}",
        synced.message
    );
    assert!(
        secrets("team-b")
            .get_opt("db")
            .await
            .expect("get")
            .is_some(),
        "Report mode deleted a copy"
    );
    assert!(
        secrets("team-c")
            .get_opt("db")
            .await
            .expect("get")
            .is_none(),
        "Report mode created a copy"
    );

    // Two managers edit team-a's copy (alice by update, bob by a forced apply); the source's
    // host changes too.
    secrets("team-a")
        .patch(
            "db",
            &PatchParams {
                field_manager: Some("alice".into()),
                ..Default::default()
            },
            &Patch::Merge(serde_json::json!({"data": {"password": b64(ALICE)}})),
        )
        .await
        .expect("alice");
    secrets("team-a")
        .patch(
            "db",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "db", "namespace": "team-a"},
                "data": {"user": b64(BOB)}})),
        )
        .await
        .expect("bob");
    secrets("apps")
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"host": "db2"}})),
        )
        .await
        .expect("source");
    let os = eventually(
        "team-a would be updated, its drift attributed",
        T,
        || async {
            let os = syncs.get("db").await.ok()?;
            let a = entry(&os, "team-a")?;
            let drift = a.last_drift.as_ref()?;
            (a.planned_action == Some(PlannedAction::Update)
                && drift.managers.len() == 2
                && a.changed_fields.iter().any(|f| f == "data.host"))
            .then_some(os)
        },
    )
    .await;
    let a = entry(&os, "team-a").expect("team-a");
    assert_eq!(a.state, CopyState::OutOfSync);
    assert_eq!(
        a.changed_fields,
        ["data.host", "data.password", "data.user"]
    );
    let drift = a.last_drift.as_ref().expect("drift");
    assert_eq!(
        drift.fields,
        ["data.password", "data.user"],
        "the source's own change is not drift"
    );
    let mut who: Vec<(&str, &str, Vec<String>)> = drift
        .managers
        .iter()
        .map(|m| (m.manager.as_str(), m.operation.as_str(), m.fields.clone()))
        .collect();
    who.sort();
    assert_eq!(
        who,
        [
            ("alice", "Update", vec!["data.password".to_string()]),
            ("bob", "Apply", vec!["data.user".to_string()]),
        ]
    );
    assert!(
        drift
            .managers
            .iter()
            .all(|m| m.time.parse::<jiff::Timestamp>().is_ok()),
        "{drift:?}"
    );
    // Three copies are behind (one to update, one to create, one to delete), for a while.
    let gauge = running.operator.object_sync_gauges()[0].1.clone();
    assert_eq!(gauge.stale, 3, "{gauge:?}");
    assert!(gauge.oldest_stale > std::time::Duration::ZERO, "{gauge:?}");
    let copy = data(&secrets("team-a").get("db").await.expect("copy"));
    assert_eq!(
        (
            copy["password"].as_str(),
            copy["user"].as_str(),
            copy["host"].as_str()
        ),
        (ALICE, BOB, "db1"),
        "Report mode wrote"
    );
    // Counted from the audit log: no create, update, patch or delete by kubesync at any
    // destination while in Report mode (the status above, at the edits, is the witness that
    // it reconciled them).
    assert_eq!(
        kubesync_writes(),
        written_before_report,
        "Report mode wrote"
    );
    let status_text = serde_json::to_string(&os.status).expect("json");

    // Enforce again: written, reverted, announced.
    env.apply_yaml(&sync(
        "Enforce",
        "[{namespace: team-a}, {namespace: team-c}]",
    ))
    .await
    .expect("enforce");
    eventually("copies as the source, team-b gone", T, || async {
        let a = data(&secrets("team-a").get("db").await.ok()?);
        let c = secrets("team-c").get_opt("db").await.ok()??;
        let gone = secrets("team-b").get_opt("db").await.ok()?.is_none();
        (gone
            && a["password"] == "s3cr3t"
            && a["user"] == "admin"
            && a["host"] == "db2"
            && data(&c)["host"] == "db2")
            .then_some(())
    })
    .await;
    let reverted = event_where(&env, "apps", "a Warning Event naming alice and bob", |e| {
        e.reason.as_deref() == Some("CopyChanged")
            && e.type_.as_deref() == Some("Warning")
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains("alice") && n.contains("bob"))
    })
    .await;
    let note = reverted.note.clone().unwrap_or_default();
    assert!(
        note.contains("local/team-a/db")
            && note.contains("data.password by alice")
            && note.contains("data.user by bob"),
        "{note}"
    );
    let os = syncs.get("db").await.expect("os");
    assert_eq!(
        entry(&os, "team-a")
            .expect("a")
            .last_drift
            .as_ref()
            .map(|d| d.managers.len()),
        Some(2),
        "the last drift stays in the status"
    );

    // A third manager's edit in Enforce mode: reverted and named.
    secrets("team-a")
        .patch(
            "db",
            &PatchParams {
                field_manager: Some("carol".into()),
                ..Default::default()
            },
            &Patch::Merge(serde_json::json!({"data": {"host": b64("elsewhere")}})),
        )
        .await
        .expect("carol");
    event_where(&env, "apps", "a Warning Event naming carol", |e| {
        e.reason.as_deref() == Some("CopyChanged")
            && e.note
                .as_deref()
                .is_some_and(|n| n.contains("data.host by carol (Update"))
    })
    .await;
    eventually("carol's edit reverted and recorded", T, || async {
        let a = data(&secrets("team-a").get("db").await.ok()?);
        let os = syncs.get("db").await.ok()?;
        let drift = entry(&os, "team-a")?.last_drift.clone()?;
        (a["host"] == "db2" && drift.managers.first()?.manager == "carol").then_some(())
    })
    .await;
    let gauges = running.operator.object_sync_gauges();
    assert!(gauges[0].1.drifts >= 2, "{gauges:?}");
    assert_eq!(
        (gauges[0].1.stale, gauges[0].1.oldest_stale),
        (0, std::time::Duration::ZERO),
        "{gauges:?}"
    );

    // Paths only: no value edited by anyone reached a status or an Event.
    let notes: Vec<String> = Api::<Event>::namespaced(client.clone(), "apps")
        .list(&Default::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    let reported = format!(
        "{status_text}\n{}\n{}",
        serde_json::to_string(&syncs.get("db").await.expect("os").status).expect("json"),
        notes.join("\n")
    );
    for value in [ALICE, BOB, "elsewhere", "s3cr3t"] {
        assert!(
            !reported.contains(value) && !reported.contains(&b64(value)),
            "{value} in {reported}"
        );
    }

    // Deleting an ObjectSync in Report mode deletes nothing: it goes, its copies stay.
    env.apply_yaml(&sync(
        "Report",
        "[{namespace: team-a}, {namespace: team-c}]",
    ))
    .await
    .expect("report mode");
    eventually("reporting", T, || async {
        let os = syncs.get("db").await.ok()?;
        let ready = os
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready")?;
        (ready.reason == "Reporting").then_some(())
    })
    .await;
    syncs
        .delete("db", &Default::default())
        .await
        .expect("delete");
    eventually("the ObjectSync is gone", T, || async {
        syncs.get_opt("db").await.ok()?.is_none().then_some(())
    })
    .await;
    for ns in ["team-a", "team-c"] {
        assert!(
            secrets(ns).get_opt("db").await.expect("get").is_some(),
            "Report mode deleted the copy in {ns}"
        );
    }
    running.stop().await;
}

/// The audit log once at least `n` of its requests after the first `from` match `of`: a
/// write whose effect the status shows may not be logged yet (the apiserver writes its line
/// when its handler returns).
async fn logged(
    env: &kubesync_testenv::TestEnv,
    what: &str,
    from: usize,
    n: usize,
    of: impl Fn(&kubesync_testenv::AuditEvent) -> bool,
) -> Vec<kubesync_testenv::AuditEvent> {
    eventually(&format!("{what} in the audit log"), T, || async {
        let audit = env.audit().expect("audit");
        (audit[from..].iter().filter(|e| of(e)).count() >= n).then_some(audit)
    })
    .await
}

/// Writes (create, update, patch) to ConfigMaps in `namespace` by anyone but the test's
/// admin, from the audit log.
fn copy_writes(env: &kubesync_testenv::TestEnv, namespace: &str, by: &str) -> usize {
    env.audit()
        .expect("audit")
        .iter()
        .filter(|e| {
            matches!(e.verb.as_str(), "create" | "update" | "patch")
                && e.user.username == by
                && e.object_ref.as_ref().is_some_and(|o| {
                    o.resource == "configmaps"
                        && o.namespace == namespace
                        && o.subresource.is_empty()
                })
        })
        .count()
}

/// Copies of a large object are held by kubesync as their prints (copy amplification costs
/// bytes per copy), and are judged exactly as before: a current copy is not written again,
/// someone's edit of the large value is reverted and attributed to them by field, and Report
/// mode names the large field that would change.
#[tokio::test]
async fn large_copies_are_held_as_prints_and_judged_as_before() {
    let env = operator_cluster_from(
        kubesync_testenv::TestEnv::builder()
            .name("big-copies")
            .audit(true),
        &["apps", "team-a", "team-b"],
    )
    .await;
    let client = env.client().expect("client");
    let blob = |c: char| c.to_string().repeat(20_000);
    let maps =
        |ns: &str| Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), ns);
    maps("apps")
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "big", "namespace": "apps"},
                "data": {"blob": blob('a'), "small": "x"},
            }))
            .expect("configmap"),
        )
        .await
        .expect("source");
    let sync = |mode: &str, destinations: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: big, namespace: apps}}\nspec:\n  mode: {mode}\n  source: {{kind: ConfigMap, name: big}}\n  destinations: {destinations}\n"
        )
    };
    env.apply_yaml(&sync("Enforce", "[{namespace: team-a}]"))
        .await
        .expect("objectsync");
    let running = start_trusting(&env, &["*"]);
    let syncs: Api<ObjectSync> = Api::namespaced(client.clone(), "apps");
    let blob_of = |ns: &'static str| {
        let maps = maps(ns);
        async move { maps.get_opt("big").await.ok()??.data?.get("blob").cloned() }
    };
    eventually("the copy in team-a", T, || async {
        (blob_of("team-a").await? == blob('a')).then_some(())
    })
    .await;
    let uid = syncs
        .get("big")
        .await
        .expect("objectsync")
        .metadata
        .uid
        .expect("uid");

    // The store holds the copy as its print: a digest of each top-level field, no content;
    // readers of objects see its metadata.
    let ctx = running.operator.context().expect("running");
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    let held = eventually("the copy in the store", T, || async {
        ctx.list_labelled_held(
            "local",
            &ar,
            kubesync::syncers::fan_out::rules::MANAGED_BY,
            &uid,
        )
        .into_iter()
        .next()
    })
    .await;
    assert!(
        held.summary::<kubesync::syncers::fan_out::rules::CopyPrint>()
            .is_some(),
        "held as a print: {held:?}"
    );
    let shown = ctx.list_labelled(
        "local",
        &ar,
        kubesync::syncers::fan_out::rules::MANAGED_BY,
        &uid,
    );
    assert!(shown.len() == 1 && shown[0].data.is_null(), "{shown:?}");

    // A current copy is not written again: another destination is added, and only its copy
    // is written. (The operator runs in-process, as the test's own user; nobody else writes
    // into team-a here.)
    // (Its line may be written after the copy is read.)
    let writer = eventually("kubesync's write of the copy", T, || async {
        env.audit()
            .expect("audit")
            .iter()
            .find(|e| {
                matches!(e.verb.as_str(), "create" | "patch")
                    && e.object_ref
                        .as_ref()
                        .is_some_and(|o| o.resource == "configmaps" && o.namespace == "team-a")
            })
            .map(|e| e.user.username.clone())
    })
    .await;
    let written = copy_writes(&env, "team-a", &writer);
    env.apply_yaml(&sync(
        "Enforce",
        "[{namespace: team-a}, {namespace: team-b}]",
    ))
    .await
    .expect("objectsync");
    eventually("the copy in team-b", T, || async {
        (blob_of("team-b").await? == blob('a')).then_some(())
    })
    .await;
    eventually("both synced", T, || async {
        let s = syncs.get("big").await.ok()?.status?;
        (s.total == 2 && s.in_sync == 2).then_some(())
    })
    .await;
    assert_eq!(
        copy_writes(&env, "team-a", &writer),
        written,
        "the current copy in team-a was written again"
    );

    // Someone edits the large value: reverted, and attributed to them by field.
    maps("team-a")
        .patch(
            "big",
            &PatchParams {
                field_manager: Some("mallory".into()),
                ..Default::default()
            },
            &Patch::Merge(serde_json::json!({"data": {"blob": blob('m')}})),
        )
        .await
        .expect("mallory");
    let drift = eventually("reverted and attributed", T, || async {
        let os = syncs.get("big").await.ok()?;
        let drift = entry(&os, "team-a")?.last_drift.clone()?;
        (blob_of("team-a").await? == blob('a')).then_some(drift)
    })
    .await;
    assert_eq!(drift.fields, ["data.blob"]);
    assert_eq!(drift.managers.len(), 1, "{drift:?}");
    assert_eq!(drift.managers[0].manager, "mallory");
    assert_eq!(drift.managers[0].fields, ["data.blob"]);

    // The source's large value changes: both copies follow.
    maps("apps")
        .patch(
            "big",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"blob": blob('c')}})),
        )
        .await
        .expect("source");
    for ns in ["team-a", "team-b"] {
        eventually(&format!("{ns} follows"), T, || async {
            (blob_of(ns).await? == blob('c')).then_some(())
        })
        .await;
    }
    // Each apply of a copy (the revert, both follows) asks the apiserver not to decode its
    // 20 KB body a second time for field validation (`fieldValidation=Ignore`).
    // A write another client has seen the effect of may not be in the log yet (the
    // apiserver writes its line when the handler returns): wait for all three.
    let applies = eventually(
        "the revert and both follows in the audit log",
        T,
        || async {
            let applies: Vec<String> = env
                .audit()
                .ok()?
                .into_iter()
                .filter(|e| {
                    e.verb == "patch"
                        && e.request_uri.contains("force=true")
                        && e.object_ref
                            .as_ref()
                            .is_some_and(|o| o.resource == "configmaps" && o.name == "big")
                })
                .map(|e| e.request_uri)
                .collect();
            (applies.len() >= 3).then_some(applies)
        },
    )
    .await;
    assert!(
        applies
            .iter()
            .all(|uri| uri.contains("fieldValidation=Ignore")),
        "{applies:?}"
    );

    // Report mode names the large field that would change.
    env.apply_yaml(&sync(
        "Report",
        "[{namespace: team-a}, {namespace: team-b}]",
    ))
    .await
    .expect("report mode");
    maps("team-b")
        .patch(
            "big",
            &PatchParams {
                field_manager: Some("mallory".into()),
                ..Default::default()
            },
            &Patch::Merge(serde_json::json!({"data": {"blob": blob('m')}})),
        )
        .await
        .expect("mallory again");
    let changed = eventually("team-b would be updated", T, || async {
        let os = syncs.get("big").await.ok()?;
        let b = entry(&os, "team-b")?;
        (b.planned_action == Some(PlannedAction::Update)).then(|| b.changed_fields.clone())
    })
    .await;
    assert_eq!(changed, ["data.blob"]);
    running.stop().await;
}

/// A source change reaches copies only kubesync wrote without reading them first: each
/// update is decided on the copy's print and written as an apply conditioned on its uid and
/// resourceVersion (counted in the audit log: one patch per copy, no read of a copy — neither
/// a GET nor a list of the declaration's copies, though more than 16 would be listed).
#[tokio::test]
async fn a_source_change_is_written_over_prints_without_reading_the_copies() {
    let namespaces: Vec<String> = (0..20).map(|i| format!("wave-{i:02}")).collect();
    let mut all: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    all.push("apps");
    let env = operator_cluster_from(
        kubesync_testenv::TestEnv::builder()
            .name("update-wave")
            .audit(true),
        &all,
    )
    .await;
    let client = env.client().expect("client");
    let destinations: Vec<String> = namespaces
        .iter()
        .map(|ns| format!("{{namespace: {ns}}}"))
        .collect();
    env.apply_yaml(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: wave, namespace: apps}}\ndata: {{k: one}}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: wave, namespace: apps}}\nspec:\n  source: {{kind: ConfigMap, name: wave}}\n  destinations: [{}]\n",
        destinations.join(", ")
    ))
    .await
    .expect("objectsync");
    let running = start_trusting(&env, &["*"]);
    let syncs: Api<ObjectSync> = Api::namespaced(client.clone(), "apps");
    // Every copy in sync with the source's version `rv`, as the status says (the copies are
    // never read by this test: each read in the audit log is kubesync's).
    let all_at = |rv: String| {
        let syncs = syncs.clone();
        async move {
            let s = syncs.get("wave").await.ok()?.status?;
            let current = s
                .destinations
                .iter()
                .filter(|d| d.state == CopyState::Synced && d.source_resource_version == rv);
            (current.count() == 20).then_some(())
        }
    };
    let maps = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "apps");
    let rv = maps
        .get("wave")
        .await
        .expect("source")
        .metadata
        .resource_version;
    eventually("20 copies", T, || all_at(rv.clone().unwrap_or_default())).await;
    let uid = syncs
        .get("wave")
        .await
        .expect("objectsync")
        .metadata
        .uid
        .expect("uid");
    // The copies' writes may be logged after the status shows them: the mark follows them.
    let seen = logged(&env, "the copies' writes", 0, 20, |e| {
        e.is_write() && e.resource() == "configmaps" && e.namespace().starts_with("wave-")
    })
    .await
    .len();

    let changed = maps
        .patch(
            "wave",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"k": "two"}})),
        )
        .await
        .expect("source");
    let rv = changed.metadata.resource_version.unwrap_or_default();
    eventually("20 copies updated", T, || all_at(rv.clone())).await;
    let audit = logged(&env, "the 20 applies", seen, 20, |e| {
        e.verb == "patch" && e.resource() == "configmaps" && e.namespace().starts_with("wave-")
    })
    .await;
    let of_copies: Vec<_> = audit[seen..]
        .iter()
        .filter(|e| {
            e.object_ref
                .as_ref()
                .is_some_and(|o| o.resource == "configmaps" && o.namespace.starts_with("wave-"))
                || (e.verb == "list" && e.request_uri.contains(&uid))
        })
        .map(|e| (e.verb.as_str(), e.request_uri.as_str()))
        .collect();
    assert_eq!(
        of_copies
            .iter()
            .filter(|(verb, _)| *verb == "patch")
            .count(),
        20,
        "one apply per copy: {of_copies:#?}"
    );
    assert!(
        of_copies
            .iter()
            .all(|(verb, _)| *verb == "patch" || *verb == "watch"),
        "no copy read before it is written: {of_copies:#?}"
    );
    running.stop().await;
}

/// Someone who keeps editing a copy cannot flood the Event store: every edit is reverted, but
/// kubesync writes at most ten Events a minute about the ObjectSync.
#[tokio::test]
async fn edits_of_a_copy_make_at_most_ten_events_a_minute() {
    let env = operator_cluster("event-cap", false, &["apps", "team-a"]).await;
    let client = env.client().expect("client");
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: noisy, namespace: apps}\ndata: {k: original}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: noisy, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: noisy}\n  destinations: [{namespace: team-a}]\n").await.expect("objectsync");
    let running = start_trusting(&env, &["*"]);
    let copies = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "team-a");
    let value = || async { copies.get_opt("noisy").await.ok()??.data?.get("k").cloned() };
    eventually("the copy", T, || async {
        (value().await? == "original").then_some(())
    })
    .await;
    let events = Api::<Event>::namespaced(client.clone(), "apps");
    let about = || async {
        let list = events.list(&Default::default()).await.expect("events");
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("noisy"))
            .collect::<Vec<_>>()
    };
    let started = std::time::Instant::now();
    const EDITS: usize = 16;
    for i in 0..EDITS {
        copies
            .patch(
                "noisy",
                &PatchParams {
                    field_manager: Some("mallory".into()),
                    ..Default::default()
                },
                &Patch::Merge(serde_json::json!({"data": {"k": format!("edit-{i}")}})),
            )
            .await
            .expect("edit");
        eventually(&format!("edit {i} reverted"), T, || async {
            (value().await? == "original").then_some(())
        })
        .await;
    }
    let changed = eventually("the cap reached", T, || async {
        let changed = about()
            .await
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("CopyChanged"))
            .count();
        (changed >= 5).then_some(changed)
    })
    .await;
    let elapsed = started.elapsed();
    assert!(
        elapsed < std::time::Duration::from_secs(55),
        "the edits took {elapsed:?}: too slow to test a per-minute cap"
    );
    let all = about().await;
    assert!(
        all.len() <= kubesync_cli::events::EVENTS_PER_MINUTE as usize,
        "{} Events about the ObjectSync for {EDITS} reverted edits ({changed} CopyChanged): {:?}",
        all.len(),
        all.iter().map(|e| e.reason.clone()).collect::<Vec<_>>()
    );
    running.stop().await;
}
