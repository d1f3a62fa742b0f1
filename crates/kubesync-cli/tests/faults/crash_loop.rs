//! Scenario 1, crash loop: `kubesync run` killed with SIGKILL ten times at random moments of
//! a fan-out, while sources change, namespaces come and go and an ObjectSync is deleted;
//! restarted each time.

use std::time::{Duration, Instant};

use kube::api::DeleteParams;

use crate::bad_input::kubesync_api;
use crate::fleet::{Fleet, OPERATORS, Random, size};

#[tokio::test]
async fn a_crash_loop_loses_nothing_and_touches_nothing_foreign() {
    let namespaces = size(300, 1000);
    let kills = 10;
    let mut fleet = Fleet::start("crash-loop", namespaces, 3, |b| b).await;
    fleet.set_source("doomed-src", "doomed", "0").await;
    fleet.declare("fleet", "fleet").await;
    fleet.declare("doomed", "doomed").await;
    let object_syncs = kubesync_api(&fleet.env, "ObjectSync");
    let (mut random, seed) = Random::new();
    let mut lives = Vec::new();
    let mut pending = Vec::new();
    let mut logs = Vec::new();
    for round in 0..kills {
        let operator = fleet.operator(OPERATORS[0], &[], "info");
        let born = Instant::now();
        let life = random.below(300..3000);
        let change_at = random.below(0..life);
        lives.push(life);
        tokio::time::sleep(Duration::from_millis(change_at)).await;
        // One change of each sort while it runs: a source, then namespaces (created in even
        // rounds, deleted in odd ones); halfway, the second ObjectSync goes.
        let source = format!("src-{}", round % 3);
        fleet
            .set_source(&source, "fleet", &(round + 1).to_string())
            .await;
        if round % 2 == 0 {
            fleet.add_namespaces(5).await;
        } else {
            fleet.delete_namespaces(5).await;
        }
        if round == kills / 2 {
            object_syncs
                .delete("doomed", &DeleteParams::default())
                .await
                .expect("delete the ObjectSync");
        }
        tokio::time::sleep_until((born + Duration::from_millis(life)).into()).await;
        logs.push(operator.kill_keeping_log());
        // What the killed operator left undone (copies missing, behind or orphaned).
        let declared: &[&str] = if round < kills / 2 {
            &["fleet", "doomed"]
        } else {
            &["fleet"]
        };
        let left = fleet.state(declared).await;
        pending.push(left.missing + left.unequal + left.orphans);
    }
    let started = Instant::now();
    let mut operator = fleet.operator(OPERATORS[0], &[], "info");
    let outcome = fleet
        .converge(&["fleet"], started, Duration::from_secs(180))
        .await;
    assert!(
        object_syncs.get_opt("doomed").await.expect("get").is_none(),
        "the deleted ObjectSync is gone once its copies are"
    );
    assert_eq!(operator.exited(), None, "the last operator runs on");
    // Every life's log, the last one's included, is read: errors logged before a kill count.
    logs.push(operator.log());
    let errors: Vec<_> = logs.iter().flat_map(|l| l.lines(&["ERROR"])).collect();
    println!(
        "crash loop: {kills} kills (lives {lives:?} ms, seed {seed}; {} of them with work undone: {pending:?} copies), {namespaces} namespaces (+25 created, 25 deleted), 3 sources changed 10 times, 1 ObjectSync deleted: {outcome}; converged {:.1} s after the last start",
        pending.iter().filter(|p| **p > 0).count(),
        outcome.converged_in.as_secs_f64()
    );
    // Each log is read as it was written (JSON lines): each life's start line is in its own,
    // so an empty list of errors is not a list of unreadable logs.
    let read = logs.iter().filter(|l| l.read_started()).count();
    assert_eq!(
        read,
        kills + 1,
        "every life's log is read ({read} of {})",
        kills + 1
    );
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        pending.iter().any(|p| *p > 0),
        "no kill landed in the middle of the work: {pending:?}"
    );
    outcome.assert_exact("crash loop");
}
