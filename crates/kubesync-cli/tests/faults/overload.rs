//! Scenario 3, overload: an apiserver that admits one request at a time (one read, one
//! write) from anyone outside `system:masters`, and answers 429 to the rest.

use std::time::{Duration, Instant};

use crate::fleet::{Fleet, OPERATORS, size};

#[tokio::test]
async fn an_overloaded_apiserver_slows_the_fan_out_down_and_nothing_else() {
    let namespaces = size(300, 1000);
    let sources = 3;
    let fleet = Fleet::start("overload", namespaces, sources, |b| {
        b.apiserver_arg("--max-requests-inflight=1")
            .apiserver_arg("--max-mutating-requests-inflight=1")
    })
    .await;
    let [a, _] = OPERATORS;
    let mut operator = fleet.operator(a, &[], "info");
    fleet.declare("fleet", "fleet").await;
    let started = Instant::now();
    let first = fleet
        .converge(&["fleet"], started, Duration::from_secs(300))
        .await;
    // A second wave: every source changes.
    for i in 0..sources {
        fleet.set_source(&format!("src-{i}"), "fleet", "1").await;
    }
    let changed = Instant::now();
    let outcome = fleet
        .converge(&["fleet"], changed, Duration::from_secs(300))
        .await;
    let refused: Vec<_> = fleet
        .env
        .audit()
        .expect("audit")
        .into_iter()
        .filter(|e| e.user.username == a && e.code() == 429)
        .collect();
    let refused_writes = refused.iter().filter(|e| e.is_write()).count();
    let warnings = operator.log_lines(&["WARN", "ERROR"]);
    // A positive control: the log is read (its start line is in it), so few warnings are
    // few warnings, not an unreadable log.
    assert!(operator.log().read_started(), "the operator's log is read");
    println!(
        "overload (--max-requests-inflight=1, --max-mutating-requests-inflight=1): {namespaces} namespaces × {sources} sources; {} requests answered 429 ({refused_writes} of them writes), each retried after the apiserver's Retry-After; {} warnings or errors logged; {outcome}; fan-out {:.1} s, update wave {:.1} s",
        refused.len(),
        warnings.len(),
        first.converged_in.as_secs_f64(),
        outcome.converged_in.as_secs_f64()
    );
    assert!(!refused.is_empty(), "the apiserver never refused a request");
    assert_eq!(operator.exited(), None, "the operator runs on");
    assert!(
        warnings.len() * 10 <= refused.len(),
        "an error storm: {} warnings for {} refusals: {:?}",
        warnings.len(),
        refused.len(),
        warnings.iter().take(5).collect::<Vec<_>>()
    );
    outcome.assert_exact("overload");
}
