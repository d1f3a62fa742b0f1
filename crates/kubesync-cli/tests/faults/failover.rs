//! Scenario 5, leader failover: two replicas with `--leader-elect`, each its own identity;
//! the leader is killed with SIGKILL in the middle of a fan-out and the standby finishes it.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

use crate::common::T;
use crate::fleet::{Fleet, OPERATORS, Operator, Writes, size};
use kubesync_testenv::eventually;

/// The latest a standby of `kubesync run --leader-elect` may take over after the leader's
/// death: the leader's last renewal may come just before the kill, the standby sees it at its
/// next look (up to a retry period later), and takes over at its first look once the Lease
/// has not changed for the Lease duration on its own clock (up to another retry period); one
/// more second for the requests themselves. With client-go's timing: 15 + 2 + 2 + 1 s.
fn takeover_bound() -> Duration {
    let t = kubesync_cli::leader::Timing::default();
    t.lease_duration + 2 * t.retry_period + Duration::from_secs(1)
}

async fn wait_leading(operator: &Operator, want: bool) {
    eventually(&format!("a replica leading: {want}"), T, || async {
        (operator.leading().await == Some(want)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_killed_leader_is_replaced_and_no_copy_is_written_by_both() {
    let namespaces = size(300, 1000);
    let sources = 10;
    let fleet = Fleet::start("failover", namespaces, sources, |b| b).await;
    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        "kube-system",
    ];
    let [a, b] = OPERATORS;
    let leader = fleet.operator(a, &args, "info");
    wait_leading(&leader, true).await;
    let mut standby = fleet.operator(b, &args, "info");
    wait_leading(&standby, false).await;

    // Kill the leader once a fifth of the copies are written.
    let total = namespaces * sources - 1;
    fleet.declare("fleet", "fleet").await;
    let copies = Api::<ConfigMap>::all(fleet.client());
    let marked = ListParams::default().labels("kubesync.io/managed-by");
    eventually("a fifth of the copies", T, || async {
        let n = copies.list_metadata(&marked).await.ok()?.items.len();
        (n >= total / 5).then_some(())
    })
    .await;
    leader.kill();
    let killed = Instant::now();
    let left = fleet.state(&["fleet"]).await;
    let undone = left.missing + left.unequal;
    assert!(undone > 0, "the leader finished before it was killed");
    let takeover = loop {
        if standby.leading().await == Some(true) {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < takeover_bound() * 3, "no takeover");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let outcome = fleet
        .converge(&["fleet"], killed, Duration::from_secs(120))
        .await;
    let writes = Writes::of(&fleet.env, "configmaps");
    assert_eq!(standby.exited(), None, "the new leader runs on");
    println!(
        "leader failover: {namespaces} namespaces × {sources} sources, leader killed with {undone} copies undone; takeover {:.1} s after the kill (Lease {} s); {outcome}; {} by the killed leader, {} by the standby, {} copies written by both; converged {:.1} s after the kill",
        takeover.as_secs_f64(),
        kubesync_cli::leader::Timing::default()
            .lease_duration
            .as_secs(),
        writes.by(a),
        writes.by(b),
        outcome.written_by_both,
        outcome.converged_in.as_secs_f64()
    );
    assert!(
        takeover < takeover_bound(),
        "takeover took {takeover:?} (at most {:?})",
        takeover_bound()
    );
    assert!(writes.by(b) >= undone, "the standby finished the work");
    assert_eq!(outcome.written_by_both, 0, "no copy written by both");
    outcome.assert_exact("leader failover");
}
