//! How a replica of `kubesync run` works with the others: with `--sharded`, as a member that
//! works on its share (leader election is in [`crate::leader`] and the command line).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// With a Lease to hold (`leased`: `--leader-elect`, `--sharded`): the write permit its
/// renewals will feed, `local` fenced with it (every write of the operator asks it; the Lease
/// itself is written with the unfenced client), its deadline watchdog, and the task that starts
/// this replica afresh the moment the permit is lost (a missed deadline, a late renewal, a
/// write refused after a freeze), whatever else it was doing. Alone: `local` as it is.
pub fn fence(
    local: kubesync::Cluster,
    leased: bool,
    shards: Option<Arc<crate::shard::Shards>>,
) -> (kubesync::Cluster, Option<Arc<crate::fence::WritePermit>>) {
    if !leased {
        return (local, None);
    }
    let permit = crate::fence::WritePermit::new(crate::fence::Timing::default(), shards);
    tokio::spawn(permit.clone().watch_deadline());
    tokio::spawn({
        let permit = permit.clone();
        async move {
            let reason = permit.until_lost().await;
            crate::fence::start_afresh(&reason);
        }
    });
    (local.fenced(permit.clone()), Some(permit))
}

/// `kubesync run --sharded`: the operator runs while this replica is a member; once its
/// stores have listed it joins (its member Lease renewed apart, with a client `own` makes:
/// [`crate::apart`]), and on a stop it drains its share and leaves before the operator stops. A replica that loses its member Lease starts afresh at once ([`crate::fence`]).
pub async fn run_sharded(
    operator: Arc<crate::operator::Operator>,
    (client, own, membership, permit): (
        kube::Client,
        crate::apart::Connect,
        crate::shard::members::Membership,
        Arc<crate::fence::WritePermit>,
    ),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    stop_telemetry: tokio::sync::watch::Sender<()>,
) -> ExitCode {
    use crate::shard::members::{Ended, serve};
    let Some(shards) = operator.shards().cloned() else {
        return ExitCode::FAILURE;
    };
    let (left_tx, left_rx) = tokio::sync::oneshot::channel::<()>();
    let member = {
        let operator = operator.clone();
        tokio::spawn(async move {
            let stop = std::pin::pin!(stop);
            let mut stop = stop;
            // Join once the operator's own stores have listed: the units are known then.
            let listed = async {
                loop {
                    if let Some(ctx) = operator.context()
                        && ctx.own_watches_status(crate::operator::LOCAL)
                            == kubesync::runtime::ClusterStatus::Ready
                    {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            let ended = tokio::select! {
                () = listed => {
                    let work = Arc::new(crate::operator::SharedWork(operator.clone()));
                    serve((client, own), (membership, permit), shards, work, stop).await
                }
                () = &mut stop => Ended::Stopped,
            };
            if let Ended::Lost(reason) = ended {
                crate::fence::start_afresh(&reason);
            }
            let _ = left_tx.send(());
        })
    };
    let result = operator
        .clone()
        .run(async move {
            let _ = left_rx.await;
        })
        .await;
    let _ = member.await;
    let _ = stop_telemetry.send(());
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubesync: {e}");
            ExitCode::FAILURE
        }
    }
}
