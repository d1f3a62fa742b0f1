//! Waiting for a condition: [`eventually`] for tests, [`poll`] inside the crate.

use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] checks its condition.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Checks `check` every [`POLL_INTERVAL`] until it returns `Some`, and returns that value;
/// panics with `timed out after <timeout> waiting for <what>` once `timeout` has passed.
///
/// For tests: a condition that becomes true through a controller, the garbage collector or
/// an informer cache takes a moment. Make the closure return a fresh future each time:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let env = kubesync_testenv::TestEnv::builder().name("wait").with_controller_manager(true).start().await.expect("env");
/// # env.create_namespace("doomed").await.expect("ns");
/// use std::time::Duration;
/// use k8s_openapi::api::core::v1::Namespace;
/// use kube::Api;
///
/// let namespaces: Api<Namespace> = Api::all(env.client().expect("client"));
/// namespaces.delete("doomed", &Default::default()).await.expect("delete");
/// // The namespace controller finalizes it a moment later.
/// kubesync_testenv::eventually("namespace gone", Duration::from_secs(60), || async {
///     namespaces.get_opt("doomed").await.expect("get").is_none().then_some(())
/// })
/// .await;
/// # }
/// ```
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let outcome = poll(Instant::now() + timeout, POLL_INTERVAL, || {
        let next = check();
        async move { Ok::<_, Infallible>(next.await) }
    })
    .await;
    let Ok(found) = outcome;
    found.unwrap_or_else(|| panic!("timed out after {timeout:?} waiting for {what}"))
}

/// Checks `check` every `interval` until it returns `Ok(Some(_))` or an error, or until
/// `deadline` has passed (`Ok(None)`). The first check is immediate.
pub(crate) async fn poll<T, E, F, Fut>(
    deadline: Instant,
    interval: Duration,
    mut check: F,
) -> Result<Option<T>, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, E>>,
{
    loop {
        if let Some(found) = check().await? {
            return Ok(Some(found));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_returns_the_first_value() {
        let mut calls = 0;
        let found = eventually("the third call", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move { (n == 3).then_some(n) }
        })
        .await;
        assert_eq!(found, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 100ms waiting for nothing")]
    async fn eventually_panics_naming_what_it_waited_for() {
        eventually("nothing", Duration::from_millis(100), || async {
            None::<()>
        })
        .await;
    }

    #[tokio::test]
    async fn poll_stops_at_an_error_or_the_deadline() {
        let err = poll(
            Instant::now() + Duration::from_secs(5),
            POLL_INTERVAL,
            || async { Err::<Option<()>, _>("broken") },
        )
        .await;
        assert_eq!(err, Err("broken"));
        let none = poll(Instant::now(), POLL_INTERVAL, || async {
            Ok::<Option<()>, ()>(None)
        })
        .await;
        assert_eq!(none, Ok(None));
    }
}
