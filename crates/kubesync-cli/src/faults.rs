//! Named faults for the tests of what the operator must survive, armed by the environment
//! alone (never by a flag, a spec or anything a tenant writes); unset, nothing is armed.
//!
//! - `KUBESYNC_FAULT_STALL_WORKERS=<after>:<for>` (seconds): `<after>` seconds after the
//!   operator starts, every worker thread of its runtime is blocked for `<for>` seconds, as
//!   CPU-bound work a tenant's input sizes would block them. The Lease is renewed meanwhile
//!   (it is held on a thread of its own): the replica keeps leading and never starts afresh.

use std::time::Duration;

/// The environment variable that stalls the operator's workers.
pub const STALL_WORKERS: &str = "KUBESYNC_FAULT_STALL_WORKERS";

/// `<after>:<for>` in seconds.
fn parse(spec: &str) -> Option<(Duration, Duration)> {
    let (after, stall) = spec.split_once(':')?;
    Some((
        Duration::from_secs(after.trim().parse().ok()?),
        Duration::from_secs(stall.trim().parse().ok()?),
    ))
}

/// Arms the faults the environment names, on the current runtime.
pub fn arm() {
    let Ok(spec) = std::env::var(STALL_WORKERS) else {
        return;
    };
    let Some((after, stall)) = parse(&spec) else {
        eprintln!(
            "kubesync: {STALL_WORKERS}={spec:?} is not <after>:<for> in seconds; no fault armed"
        );
        return;
    };
    let runtime = tokio::runtime::Handle::current();
    let workers = runtime.metrics().num_workers();
    // Spawned from a thread outside the runtime, the tasks go to its shared queue: each
    // worker takes one and is blocked by it.
    let spawned = std::thread::Builder::new()
        .name("kubesync-fault".into())
        .spawn(move || {
            std::thread::sleep(after);
            eprintln!(
                "kubesync: fault {STALL_WORKERS}: blocking all {workers} workers for {} s",
                stall.as_secs()
            );
            for _ in 0..workers {
                runtime.spawn(async move { std::thread::sleep(stall) });
            }
        });
    if let Err(e) = spawned {
        eprintln!("kubesync: {STALL_WORKERS}: cannot arm it: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stall_is_after_and_for_in_seconds() {
        assert_eq!(
            parse("3:20"),
            Some((Duration::from_secs(3), Duration::from_secs(20)))
        );
        assert_eq!(parse("3"), None);
        assert_eq!(parse("a:1"), None);
    }
}
