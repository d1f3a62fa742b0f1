//! A destination cluster's outage, through the `kubesync` binary: ObjectSyncs copy into a
//! RemoteCluster; while its apiserver is down, one source is deleted, one destination
//! namespace is dropped from a spec and the operator is restarted. Nothing can be deleted
//! while the cluster is away; once it answers, exactly the copies no longer wanted go (found
//! by their marks: the restarted operator never saw them), and the copies still wanted are
//! not written at all (the cluster's audit log, their uid and resourceVersion).

mod common;

use std::time::{Duration, Instant};

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubesync_cli::crd::ObjectSync;
use kubesync_testenv::{TestEnv, eventually};

/// How long the destination cluster is down.
const OUTAGE: Duration = Duration::from_secs(20);

const TEAMS: [&str; 3] = ["team-a", "team-b", "team-c"];

/// `(name, namespace) → (uid, resourceVersion)` of the copies in `env`'s team namespaces.
async fn copies(env: &TestEnv) -> Vec<(String, String, String, String)> {
    let mut found = Vec::new();
    for ns in TEAMS {
        let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), ns);
        for cm in cms.list(&Default::default()).await.expect("list").items {
            let meta = cm.metadata;
            if meta
                .labels
                .unwrap_or_default()
                .contains_key("kubesync.io/managed-by")
            {
                found.push((
                    meta.name.unwrap_or_default(),
                    ns.to_string(),
                    meta.uid.unwrap_or_default(),
                    meta.resource_version.unwrap_or_default(),
                ));
            }
        }
    }
    found.sort();
    found
}

/// The writes of ConfigMaps in the team namespaces among `events`, as `verb namespace/name`,
/// sorted.
fn team_writes(events: &[kubesync_testenv::AuditEvent]) -> Vec<String> {
    let mut writes: Vec<String> = events
        .iter()
        .filter(|e| e.is_write() && e.resource() == "configmaps" && TEAMS.contains(&e.namespace()))
        .map(|e| format!("{} {}/{}", e.verb, e.namespace(), e.name()))
        .collect();
    writes.sort();
    writes
}

fn names(copies: &[(String, String, String, String)]) -> Vec<String> {
    copies
        .iter()
        .map(|(n, ns, ..)| format!("{ns}/{n}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_destination_outage_deletes_nothing_then_exactly_the_unwanted_copies() {
    let (local, east) = tokio::join!(
        operator_cluster("local", false, &["apps"]),
        TestEnv::builder().name("east").audit(true).start()
    );
    let mut east = east.expect("east");
    for ns in TEAMS {
        east.create_namespace(ns).await.expect("ns");
    }
    add_remote_cluster(&local, &east, "east", "apps").await;
    local
        .apply_yaml(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: going, namespace: apps}\ndata: {a: '1'}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: staying, namespace: apps}\ndata: {b: '2'}\n",
        )
        .await
        .expect("sources");
    let everywhere = |name: &str| {
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  source: {{kind: ConfigMap, name: {name}}}\n  destinations:\n  - {{cluster: east, namespace: team-a}}\n  - {{cluster: east, namespace: team-b}}\n  - {{cluster: east, namespace: team-c}}\n"
        )
    };
    local
        .apply_yaml(&(everywhere("going") + "---\n" + &everywhere("staying")))
        .await
        .expect("objectsyncs");
    let operator = run_binary(&local, free_port(), &["--trusted-namespace", "apps"]);
    let all = eventually("six copies in east", T, || async {
        let found = copies(&east).await;
        (found.len() == 6).then_some(found)
    })
    .await;
    let wanted: Vec<_> = all
        .iter()
        .filter(|(n, ns, ..)| n == "staying" && ns != "team-c")
        .cloned()
        .collect();
    // (The creates' lines may be written after the copies are read: the mark follows them.)
    let mark = eventually("the copies' creates in the audit log", T, || async {
        let log = east.audit().expect("audit");
        (team_writes(&log).len() >= 6).then_some(log.len())
    })
    .await;

    // The outage (the apiserver process has exited when this returns).
    east.stop_apiserver();
    let down = Instant::now();
    let syncs: Api<ObjectSync> = Api::namespaced(local.client().expect("client"), "apps");
    // Meanwhile: the operator stops; a source is deleted and a namespace no longer selected;
    // the operator starts again (all it knows now it reads anew).
    drop(operator);
    Api::<ConfigMap>::namespaced(local.client().expect("client"), "apps")
        .delete("going", &DeleteParams::default())
        .await
        .expect("delete source");
    let unselected = syncs
        .patch(
            "staying",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"destinations": [
                {"cluster": "east", "namespace": "team-a"},
                {"cluster": "east", "namespace": "team-b"},
            ]}})),
        )
        .await
        .expect("unselect team-c");
    let _operator = run_binary(&local, free_port(), &["--trusted-namespace", "apps"]);
    // The restarted operator has judged the changed spec while the cluster is away (only it
    // can have written a status for the new generation).
    eventually("the restarted operator's status", T, || async {
        let st = syncs.get("staying").await.ok()?.status?;
        (st.observed_generation == unselected.metadata.generation).then_some(())
    })
    .await;
    tokio::time::sleep(OUTAGE.saturating_sub(down.elapsed())).await;

    // Back: exactly the unwanted copies go; the wanted ones are not written.
    east.restart_apiserver().await.expect("restart");
    let left = eventually("only the wanted copies are left", T, || async {
        let found = copies(&east).await;
        (names(&found) == names(&wanted)).then_some(found)
    })
    .await;
    assert_eq!(
        left, wanted,
        "the wanted copies keep their uid and resourceVersion"
    );
    let writes = eventually("the deletes in the audit log", T, || async {
        let writes = team_writes(&east.audit().expect("audit")[mark..]);
        (writes.len() >= 4).then_some(writes)
    })
    .await;
    assert_eq!(
        writes,
        [
            "delete team-a/going",
            "delete team-b/going",
            "delete team-c/going",
            "delete team-c/staying",
        ]
    );
}
