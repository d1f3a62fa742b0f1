//! `kubesync run`: the operator as its flags configure it — alone, as the elected leader of
//! several replicas, or on its share of the work among them — until SIGTERM or Ctrl-C.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use kubesync::Cluster;
use tokio::sync::{oneshot, watch};

use super::{RunArgs, load};
use crate::fence::WritePermit;
use crate::operator::Operator;

/// How this replica works with the others.
enum Replicas {
    /// Alone: it works on everything.
    One,
    /// With leader election: it works on everything while it holds the leader Lease.
    Elected(Election),
    /// Sharded: it works on its share.
    Sharded(crate::shard::members::Membership),
}

/// Where the leader Lease lives, and who this replica is.
struct Election {
    namespace: String,
    name: String,
    identity: String,
}

/// This replica's identity in the election: the pod's (or host's) name and the process id.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .or_else(|_| std::fs::read_to_string("/proc/sys/kernel/hostname"))
        .unwrap_or_else(|_| "kubesync".into());
    format!("{}-{}", host.trim(), std::process::id())
}

/// How the holding of the Lease ended.
enum Held {
    /// Leadership was lost (the operator must stop and the process exit non-zero).
    Lost(String),
    /// The operator stopped normally; the Lease was released.
    Released,
}

/// `kubesync run`: the operator's policy ($POD_NAMESPACE trusted too), endpoints and
/// replicas read from `args`, then the operator run.
pub(super) async fn command(args: RunArgs) -> ExitCode {
    // First: a stop asked for from here on ends the process, whatever else happens.
    if let Err(e) = crate::stop::install(std::time::Duration::from_secs(args.shutdown_timeout)) {
        eprintln!("kubesync: cannot handle SIGTERM: {e}");
        return ExitCode::FAILURE;
    }
    let mut trusted_namespaces = args.trusted_namespaces;
    if let Ok(own) = std::env::var("POD_NAMESPACE")
        && !own.is_empty()
    {
        trusted_namespaces.push(own);
    }
    let policy = crate::policy::ObjectSyncPolicy {
        source_namespaces: args.source_namespaces,
        remote_source_namespaces: args.remote_source_namespaces,
        allow_destination_namespaces: args.allow_destination_namespaces,
        deny_destination_namespaces: args.deny_destination_namespaces,
        allowed_resources: args.allowed_resources,
        trusted_namespaces,
        privileged_resources: args.privileged_resources,
        grantable_resources: args.grantable_resources,
        max_copies: args.max_copies,
        default_service_account: args.default_service_account,
    };
    let endpoints = match crate::telemetry::Endpoints::from_flags(
        &args.telemetry_address,
        &args.metrics_address,
        args.metrics_insecure,
        args.metrics_cert_dir,
    ) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("kubesync: {e}");
            return ExitCode::FAILURE;
        }
    };
    let own_namespace = || {
        std::env::var("POD_NAMESPACE")
            .ok()
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".into())
    };
    let given_identity = args.identity;
    let replicas = match (args.leader_elect, args.sharded) {
        (true, _) => Replicas::Elected(Election {
            namespace: args.leader_election_namespace.unwrap_or_else(own_namespace),
            name: args.leader_election_name,
            identity: given_identity.clone().unwrap_or_else(identity),
        }),
        (false, true) => Replicas::Sharded(crate::shard::members::Membership {
            namespace: args.shard_namespace.unwrap_or_else(own_namespace),
            group: args.shard_group,
            identity: given_identity.clone().unwrap_or_else(identity),
            timing: crate::leader::Timing::default(),
        }),
        (false, false) => Replicas::One,
    };
    run(
        args.kubeconfig,
        args.context,
        policy,
        endpoints,
        replicas,
        args.list_strategy,
        (args.compat, args.compat_version_gate),
    )
    .await
}

/// The operator's options: `policy`, the compat tools (and their version gate), the shards.
fn options(
    policy: crate::policy::ObjectSyncPolicy,
    (compat, compat_version_gate): (Vec<crate::compat::Tool>, bool),
    shards: Option<std::sync::Arc<crate::shard::Shards>>,
) -> crate::operator::OperatorOptions {
    crate::operator::OperatorOptions {
        policy,
        compat_records: compat_records(&compat),
        compat,
        compat_version_gate,
        shards,
        ..Default::default()
    }
}

/// Where the records of the copies annotations made are kept: the operator's own namespace
/// ($POD_NAMESPACE), which tenants do not write; without one they are held in memory only.
fn compat_records(compat: &[crate::compat::Tool]) -> Option<String> {
    let namespace = std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty());
    if !compat.is_empty() && namespace.is_none() {
        tracing::warn!(
            "--compat without $POD_NAMESPACE: the records of the copies annotations make are held in memory only, so after a restart the copies of a source deleted meanwhile are left in place outside the trusted namespaces"
        );
    }
    namespace
}

async fn run(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    policy: crate::policy::ObjectSyncPolicy,
    endpoints: crate::telemetry::Endpoints,
    replicas: Replicas,
    list_strategy: kubesync::cluster::ListStrategy,
    compat: (Vec<crate::compat::Tool>, bool),
) -> ExitCode {
    let connect = (kubeconfig, context);
    let Some(local) = connect_local(connect.0.clone(), connect.1.clone(), list_strategy).await
    else {
        return ExitCode::FAILURE;
    };
    tracing::info!("kubesync operator starting");
    crate::faults::arm();
    let (election, membership) = match replicas {
        Replicas::One => (None, None),
        Replicas::Elected(election) => (Some(election), None),
        Replicas::Sharded(membership) => (None, Some(membership)),
    };
    let shards = membership
        .as_ref()
        .map(|m| crate::shard::Shards::new(&m.identity));
    let base = local.client().clone();
    let leased = election.is_some() || membership.is_some();
    let (local, permit) = crate::replicas::fence(local, leased, shards.clone());
    let operator = Operator::with_options(local, options(policy, compat, shards));
    let (stop_telemetry, telemetry_stopped) = watch::channel(());
    if let Err(e) = crate::telemetry::start(&endpoints, operator.clone(), telemetry_stopped).await {
        eprintln!("kubesync: {e}");
        return ExitCode::FAILURE;
    }
    let stop_rx = shutdown_watch();
    let mut holding = None;
    let mut lost_rx = None;
    if let (Some(election), Some(permit)) = (election, &permit) {
        let own = own_connection(connect.clone());
        let leading = lead(&operator, (&base, own), &election, permit, &stop_rx).await;
        let Some((held, lost)) = leading else {
            let _ = stop_telemetry.send(());
            return ExitCode::SUCCESS;
        };
        holding = Some(held);
        lost_rx = Some(lost);
    }
    if let (Some(membership), Some(permit)) = (membership, permit) {
        return crate::replicas::run_sharded(
            operator,
            (base, own_connection(connect), membership, permit),
            stopped(&stop_rx),
            stop_telemetry,
        )
        .await;
    }
    let until_stopped = stopped(&stop_rx);
    let result = operator
        .clone()
        .run(async move {
            match lost_rx {
                Some(lost) => {
                    tokio::select! {
                        () = until_stopped => {}
                        _ = lost => {}
                    }
                }
                None => until_stopped.await,
            }
        })
        .await;
    let _ = stop_telemetry.send(());
    finish(&operator, holding, result).await
}

/// The local cluster (in-cluster config without `kubeconfig` and `context`, else the
/// kubeconfig's), listing with `list_strategy`; `None` after saying why it is not.
async fn connect_local(
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    list_strategy: kubesync::cluster::ListStrategy,
) -> Option<Cluster> {
    let local = if kubeconfig.is_none() && context.is_none() {
        match Cluster::in_cluster(crate::operator::LOCAL) {
            Ok(c) => Ok(c),
            Err(_) => load(&None, None).await,
        }
    } else {
        load(&kubeconfig, context.as_deref()).await
    };
    match local {
        Ok(c) => Some(c.with_list_strategy(list_strategy)),
        Err(e) => {
            eprintln!("kubesync: cannot connect to the local cluster: {e}");
            None
        }
    }
}

/// SIGTERM / Ctrl-C, observable from several places: `true` once received.
fn shutdown_watch() -> watch::Receiver<bool> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        kubesync::runtime::shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    stop_rx
}

/// Resolves once `rx` says stop.
fn stopped(rx: &watch::Receiver<bool>) -> impl Future<Output = ()> + use<> {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// Waits until this replica leads (`None`: stopped first), then holds the Lease on a thread
/// and runtime of its own, with connections of its own (`own` makes them there):
/// no work on the operator's workers — a tenant's pattern, a large list — ever delays a
/// renewal, so the Lease and the write permit it feeds are never lost behind it. The holding
/// ends when the leadership is lost (telling the receiver returned) or on stop (releasing the
/// Lease), and says which.
async fn lead(
    operator: &Operator,
    (base, own): (&kube::Client, crate::apart::Connect),
    election: &Election,
    permit: &Arc<WritePermit>,
    stop_rx: &watch::Receiver<bool>,
) -> Option<(oneshot::Receiver<Held>, oneshot::Receiver<()>)> {
    let mut elector = crate::leader::Elector::new(
        base.clone(),
        &election.namespace,
        &election.name,
        &election.identity,
        crate::leader::Timing::default(),
    )
    .with_last_read(operator.lease_read())
    .with_permit(permit.clone());
    operator.set_leader(Some(false));
    tracing::info!(identity = elector.identity(), lease = %format!("{}/{}", election.namespace, election.name), "waiting to become the leader");
    tokio::select! {
        () = elector.acquire() => {}
        () = stopped(stop_rx) => return None,
    }
    operator.set_leader(Some(true));
    tracing::info!(identity = elector.identity(), "became the leader");
    let (lost_tx, lost_rx) = oneshot::channel::<()>();
    let (held_tx, held_rx) = oneshot::channel::<Held>();
    let until_stopped = stopped(stop_rx);
    let holding = crate::apart::spawn("kubesync-lease", own, move |client| {
        hold_apart(elector.with_client(client), until_stopped)
    });
    // Whatever ends the holding (lost, released, or never started) is said to both sides.
    tokio::spawn(async move {
        let held = match holding.await {
            Ok(Ok(held)) => held,
            Ok(Err(why)) => Held::Lost(why),
            Err(_) => Held::Lost("the Lease's thread ended".into()),
        };
        if matches!(held, Held::Lost(_)) {
            let _ = lost_tx.send(());
        }
        let _ = held_tx.send(held);
    });
    Some((held_rx, lost_rx))
}

/// A client for work held apart from the operator's runtime ([`crate::apart`]): the local
/// cluster connected again, where that work runs.
fn own_connection(
    (kubeconfig, context): (Option<PathBuf>, Option<String>),
) -> crate::apart::Connect {
    Arc::new(move || {
        let (kubeconfig, context) = (kubeconfig.clone(), context.clone());
        Box::pin(async move {
            let own = connect_local(kubeconfig, context, Default::default()).await?;
            Some(own.client().clone())
        })
    })
}

/// The holding of the Lease, on its own runtime with its own client ([`crate::apart`]):
/// renewals until the leadership is lost or the stop, then the Lease released.
async fn hold_apart(
    mut elector: crate::leader::Elector,
    until_stopped: impl Future<Output = ()>,
) -> Held {
    tokio::select! {
        reason = elector.hold() => Held::Lost(reason),
        () = until_stopped => {
            elector.release().await;
            Held::Released
        }
    }
}

/// The exit code after the operator ran (`result`): the Lease released if it was held to
/// the end, a failure if the leadership was lost or the election failed.
async fn finish(
    operator: &Operator,
    holding: Option<oneshot::Receiver<Held>>,
    result: kubesync::Result<()>,
) -> ExitCode {
    if let Some(holding) = holding {
        match holding.await {
            Ok(Held::Released) => {}
            Ok(Held::Lost(reason)) => {
                operator.set_leader(Some(false));
                eprintln!("kubesync: lost the leadership ({reason}); stopping");
                return ExitCode::FAILURE;
            }
            Err(_) => {
                eprintln!("kubesync: leader election failed: the Lease's thread ended");
                return ExitCode::FAILURE;
            }
        }
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubesync: {e}");
            ExitCode::FAILURE
        }
    }
}
