//! Work that must never wait behind the operator's: the leader's Lease and a sharded
//! replica's member Lease are held on a thread and current-thread runtime of their own, with a
//! client made there (a client's connections are driven by the runtime that made them, so one
//! made on the operator's runtime would wait for its workers too). CPU-bound work a tenant's
//! input sizes can occupy every worker of the operator's runtime; a renewal then still goes
//! out on time.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::oneshot;

/// Makes a client, on the runtime it is called on (`None` after saying why it could not).
pub type Connect = Arc<dyn Fn() -> BoxFuture<'static, Option<kube::Client>> + Send + Sync>;

/// Runs `work` with a client `connect` makes, on a thread named `name` with a current-thread
/// runtime of its own; the receiver gets what `work` returned, or why it could not run (the
/// thread, its runtime or its connection could not be made). Dropping the receiver does not
/// stop the work: `work` ends itself (the callers hand it a signal to stop on).
pub fn spawn<T, W, F>(name: &str, connect: Connect, work: W) -> oneshot::Receiver<Result<T, String>>
where
    T: Send + 'static,
    W: FnOnce(kube::Client) -> F + Send + 'static,
    F: Future<Output = T>,
{
    let (done_tx, done_rx) = oneshot::channel();
    let what = name.to_string();
    let done = Arc::new(parking_lot::Mutex::new(Some(done_tx)));
    let on_thread = done.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let outcome = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime.block_on(async move {
                    match connect().await {
                        Some(client) => Ok(work(client).await),
                        None => Err(format!("{what}: its own connection could not be made")),
                    }
                }),
                Err(e) => Err(format!("{what}: its runtime could not start: {e}")),
            };
            if let Some(tx) = on_thread.lock().take() {
                let _ = tx.send(outcome);
            }
        });
    if let Err(e) = spawned
        && let Some(tx) = done.lock().take()
    {
        let _ = tx.send(Err(format!("{name}: its thread could not start: {e}")));
    }
    done_rx
}
