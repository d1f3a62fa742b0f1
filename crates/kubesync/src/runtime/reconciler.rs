//! What the runtime calls: a [`Reconciler`], and the [`Action`] it asks for next.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::context::Context;
use crate::key::ObjectKey;

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Done: reconcile again only when something changes (or at the periodic resync).
    pub fn done() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// Reconcile again after `delay`, even if nothing changes.
    pub fn requeue(delay: Duration) -> Self {
        Self {
            requeue_after: Some(delay),
        }
    }

    /// The requested delay, if any.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// A failed reconcile's category: a short, bounded, PascalCase label for metrics (kubesync's
/// [`Error`](crate::Error) says `Forbidden`, `Unreachable`, `Conflict`, …). Implemented for
/// the library's error, for plain messages (`String`, `&str`: `Error`), and for boxed errors
/// (the category of a kubesync error inside, else `Error`); implement it for your own error
/// type to label its failures.
pub trait ErrorCategory {
    /// The category.
    fn category(&self) -> &'static str;
}

impl ErrorCategory for crate::Error {
    fn category(&self) -> &'static str {
        crate::Error::category(self)
    }
}

impl ErrorCategory for String {
    fn category(&self) -> &'static str {
        "Error"
    }
}

impl ErrorCategory for &'static str {
    fn category(&self) -> &'static str {
        "Error"
    }
}

impl ErrorCategory for Box<dyn std::error::Error + Send + Sync> {
    fn category(&self) -> &'static str {
        self.downcast_ref::<crate::Error>()
            .map_or("Error", crate::Error::category)
    }
}

/// Reconciles one key at a time. Implement it on a struct holding your own state, or wrap a
/// closure with [`reconciler_fn`].
///
/// Returning `Err` retries the key with exponential [`Backoff`](super::Backoff); the error is
/// logged with its key and counted by its [`ErrorCategory`]. A reconcile that panics counts as
/// failed (category `Panic`).
pub trait Reconciler: Send + Sync + 'static {
    /// The error type of a failed reconcile.
    type Error: fmt::Display + ErrorCategory + Send + 'static;

    /// Brings the world in line with the object behind `key` (which may no longer exist:
    /// check with [`Context::get`]).
    fn reconcile(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> impl Future<Output = std::result::Result<Action, Self::Error>> + Send;
}

/// A [`Reconciler`] made from a closure; see [`reconciler_fn`].
pub struct FnReconciler<F>(F);

/// Wraps `|key, ctx| async move { … }` as a [`Reconciler`].
pub fn reconciler_fn<F, Fut, E>(f: F) -> FnReconciler<F>
where
    F: Fn(ObjectKey, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Action, E>> + Send + 'static,
    E: fmt::Display + ErrorCategory + Send + 'static,
{
    FnReconciler(f)
}

impl<F, Fut, E> Reconciler for FnReconciler<F>
where
    F: Fn(ObjectKey, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Action, E>> + Send + 'static,
    E: fmt::Display + ErrorCategory + Send + 'static,
{
    type Error = E;

    fn reconcile(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> impl Future<Output = std::result::Result<Action, E>> + Send {
        (self.0)(key.clone(), ctx.clone())
    }
}
