//! Whether this process may still write: the write gate's second question (the first is who a
//! write acts as, [`ActAs`](crate::ActAs); the third what it was decided on, the
//! preconditions the [`Writer`](crate::Writer) sends).
//!
//! A process that works only while it holds a Lease (a leader, a member of a sharded group)
//! must stop writing the moment it can no longer be sure it holds it — also when it was
//! frozen (a long stall of the process or of its node) and wakes with work in its queue
//! decided before the pause. A loop that checks the Lease cannot promise that: a frozen
//! process checks nothing, and when it wakes its workers may run before the loop. So the
//! question is asked at the moment of writing, by every write:
//!
//! - [`Fence::live`] by every mutating request (`POST`, `PUT`, `PATCH`, `DELETE`; not the
//!   reviews, which are never stored) a [fenced](crate::Cluster::fenced) cluster's client
//!   sends, just before it leaves the process: whether this process may write at all now;
//! - [`Fence::admits`] by the [`Writer`](crate::Writer), for a write decided [`within`] a
//!   scope (a unit of work: an ObjectSync, a RemoteCluster): whether this process still works
//!   on that scope.
//!
//! A refused write fails with [`Fenced`] ([`Error::Fenced`](crate::Error::Fenced), or, refused
//! by the client, a [`kube::Error::Service`] that [`is_fenced`] recognises). It is not an
//! error to retry: the runtime drops the reconcile without requeueing it, and what to do next
//! (start afresh, rejoin) is the fence owner's decision. What the fence decides on (a Lease's
//! renewals on the process's own clock, a shard's tenure) is the owner's too: this library
//! knows no Lease.

use std::future::Future;

/// Decides whether this process may write now. Implemented by whoever runs the process's
/// coordination (leader election, shard membership); both methods are called on the write
/// path, so they must be cheap and never block.
pub trait Fence: Send + Sync + 'static {
    /// Whether any write may be sent now.
    fn live(&self) -> Result<(), Fenced>;

    /// Whether a write decided within `scope` (see [`within`]) may be sent now. The default
    /// admits every scope: only [`Fence::live`] decides.
    fn admits(&self, scope: u64) -> Result<(), Fenced> {
        let _ = scope;
        Ok(())
    }
}

/// A write the [`Fence`] refused, and why (for people).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("write fenced: {0}")]
pub struct Fenced(pub String);

tokio::task_local! {
    static SCOPE: u64;
}

/// Runs `work` with its writes decided within `scope`: each one the [`Writer`](crate::Writer)
/// sends is first [admitted](Fence::admits) for it. Tasks `work` spawns do not inherit the
/// scope (their writes are checked by [`Fence::live`] alone).
pub async fn within<F: Future>(scope: u64, work: F) -> F::Output {
    SCOPE.scope(scope, work).await
}

/// The scope the current task's writes are decided within, if any.
pub fn scope() -> Option<u64> {
    SCOPE.try_with(|s| *s).ok()
}

/// Whether a kube client error is a write the fence refused as it left the process.
pub fn is_fenced(e: &kube::Error) -> bool {
    match e {
        kube::Error::Service(inner) => inner.downcast_ref::<Fenced>().is_some(),
        _ => false,
    }
}

/// Whether a request changes what the apiserver stores (so the fence is asked): any method but
/// a read's, except the reviews (`TokenReview`, `SubjectAccessReview`, …), which are created
/// to be answered and never stored — a standby still answers who may read its `/metrics`.
pub(crate) fn mutates(method: &http::Method, path: &str) -> bool {
    let read = matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    let review = *method == http::Method::POST
        && [
            "/apis/authentication.k8s.io/",
            "/apis/authorization.k8s.io/",
        ]
        .iter()
        .any(|group| path.starts_with(group));
    !read && !review
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_scope_holds_inside_its_work_only() {
        assert_eq!(scope(), None);
        let inside = within(7, async { scope() }).await;
        assert_eq!(inside, Some(7));
        let nested = within(1, within(2, async { scope() })).await;
        assert_eq!(nested, Some(2));
        assert_eq!(scope(), None);
    }

    #[test]
    fn only_a_refusal_of_the_fence_is_fenced() {
        let refused = kube::Error::Service(Box::new(Fenced("stale".into())));
        assert!(is_fenced(&refused));
        assert!(!is_fenced(&kube::Error::Service("other".into())));
        let configmaps = "/api/v1/namespaces/a/configmaps/b";
        assert!(mutates(&http::Method::PATCH, configmaps));
        assert!(mutates(&http::Method::DELETE, configmaps));
        assert!(mutates(
            &http::Method::POST,
            "/api/v1/namespaces/a/configmaps"
        ));
        assert!(!mutates(&http::Method::GET, configmaps));
        // Reviews are answered, never stored.
        let review = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
        assert!(!mutates(&http::Method::POST, review));
        assert!(!mutates(
            &http::Method::POST,
            "/apis/authentication.k8s.io/v1/tokenreviews"
        ));
        // Not a prefix of another group's path.
        assert!(mutates(
            &http::Method::POST,
            "/apis/authorization.k8s.io.example/v1/x"
        ));
    }
}
