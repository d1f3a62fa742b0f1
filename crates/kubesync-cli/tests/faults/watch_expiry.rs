//! Scenario 2, watch expiry: the operator is frozen (SIGSTOP) while sources, copies and
//! namespaces change, unrelated objects churn, etcd is compacted and the apiserver restarts;
//! when it thaws, every watch it held resumes from a resourceVersion that is gone (410 Gone)
//! and must re-list. Checked by content: nothing that changed meanwhile is missed.

use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};

use crate::fleet::{Fleet, OPERATORS, namespace, size};

#[tokio::test]
async fn changes_made_while_the_watches_expire_are_all_seen() {
    let namespaces = size(300, 1000);
    let churn = 300;
    let mut fleet = Fleet::start("watch-expiry", namespaces, 3, |b| b).await;
    fleet
        .env
        .create_namespace("churn")
        .await
        .expect("namespace");
    let [a, _] = OPERATORS;
    let mut operator = fleet.operator(a, &[], "info,kubesync::runtime::reflect=debug");
    fleet.declare("fleet", "fleet").await;
    fleet
        .converge(&["fleet"], Instant::now(), Duration::from_secs(120))
        .await;

    operator.signal("STOP");
    let client = fleet.client();
    let configmaps = |ns: &str| Api::<ConfigMap>::namespaced(client.clone(), ns);
    // Sources: one changed, one deleted, one new.
    fleet.set_source("src-0", "fleet", "changed").await;
    configmaps("apps")
        .delete("src-1", &DeleteParams::default())
        .await
        .expect("delete a source");
    fleet.set_source("src-3", "fleet", "new").await;
    // Copies: five deleted, five edited.
    for i in 1..=5 {
        configmaps(&namespace(i))
            .delete("src-2", &DeleteParams::default())
            .await
            .expect("delete a copy");
        configmaps(&namespace(i + 5))
            .patch(
                "src-2",
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"data": {"v": "drifted"}})),
            )
            .await
            .expect("edit a copy");
    }
    // Namespaces: five new, five deleted, three no longer selected.
    fleet.add_namespaces(5).await;
    fleet.delete_namespaces(5).await;
    for i in [11, 12, 13] {
        fleet.env.apply_yaml(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {}, labels: {{fleet: \"no\"}}}}\n", namespace(i))).await.expect("unlabel");
    }
    // Churn past the apiserver's watch cache (100 events per kind), then compact etcd and
    // restart the apiserver: no resourceVersion the operator holds can be resumed.
    let churn_api = configmaps("churn");
    stream::iter(0..churn)
        .for_each_concurrent(16, |i| {
            let api = churn_api.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("churn-{i}")}, "data": {"i": i.to_string()}
                }))
                .expect("configmap");
                api.create(&Default::default(), &cm).await.expect("churn");
            }
        })
        .await;
    let revision = fleet.env.compact_etcd().await.expect("compact");
    fleet.env.stop_apiserver();
    fleet.env.restart_apiserver().await.expect("restart");

    operator.signal("CONT");
    let thawed = Instant::now();
    let outcome = fleet
        .converge(&["fleet"], thawed, Duration::from_secs(120))
        .await;
    let expired = operator.log_count("watch expired");
    assert_eq!(operator.exited(), None, "the operator runs on");
    println!(
        "watch expiry: {namespaces} namespaces; while frozen: 3 source changes (1 changed, 1 deleted, 1 new), 10 copies deleted or edited, 5 namespaces created, 5 deleted, 3 unselected, {churn} unrelated writes, etcd compacted at revision {revision}, apiserver restarted; after the thaw {expired} watches got 410 Gone and re-listed; {outcome}; converged {:.1} s after the thaw",
        outcome.converged_in.as_secs_f64()
    );
    assert!(expired > 0, "no watch expired: the scenario tested nothing");
    outcome.assert_exact("watch expiry");
}
