//! A stop asked for (SIGTERM, as the kubelet sends it) always ends `kubesync run`, within the
//! 10 s a Pod's grace period leaves it, in the states that could lose it: a leader frozen past
//! its Lease (the signal arrives while it is frozen, and on waking it would start afresh,
//! executing its binary again in place), and a leader whose apiserver stops answering (its
//! shutdown cannot hand the Lease over, and its permit runs out meanwhile). Neither starts
//! afresh after the signal.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{RunningBinary, T, free_port, operator_command, request, sample};
use kubesync_testenv::{TestEnv, eventually};

/// How long a stopped replica may take to exit.
const GRACE: Duration = Duration::from_secs(10);

/// A leader on `kubeconfig`, its stderr in `log`, and its probes and `/metrics` on its port.
struct Leader {
    process: RunningBinary,
    port: u16,
    log: PathBuf,
}

impl Leader {
    async fn start(kubeconfig: &Path, log: PathBuf) -> Self {
        Self::start_with(kubeconfig, log, &[]).await
    }

    /// As [`Leader::start`], with `env` set too.
    async fn start_with(kubeconfig: &Path, log: PathBuf, env: &[(&str, &str)]) -> Self {
        let leader = Self::spawn(kubeconfig, log, env, &["--leader-elect"]);
        eventually("it leads", T, || async {
            let (_, metrics) = request(leader.port, "GET", "/metrics").await?;
            (sample(&metrics, "kubesync_leader")? == 1.0).then_some(())
        })
        .await;
        leader
    }

    /// `kubesync run` with `args` and `env`, its stderr in `log`.
    fn spawn(kubeconfig: &Path, log: PathBuf, env: &[(&str, &str)], args: &[&str]) -> Self {
        let port = free_port();
        let err = std::fs::File::create(&log).expect("log");
        let child = operator_command(kubeconfig, port, args)
            .envs(env.iter().copied())
            .env("POD_NAMESPACE", "kubesync-system")
            .env("RUST_LOG", "info")
            .stderr(err)
            .spawn()
            .expect("run kubesync");
        Self {
            process: RunningBinary(child),
            port,
            log,
        }
    }

    fn signal(&self, signal: &str) {
        common::signal(self.process.0.id(), signal);
    }

    /// Waits at most [`GRACE`] from `since` for the process to exit; says how long it took.
    async fn exited_within_grace(&mut self, since: Instant) -> Duration {
        loop {
            if let Some(status) = self.process.0.try_wait().expect("wait") {
                let took = since.elapsed();
                println!("exited after {took:?} ({status})");
                return took;
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            assert!(
                since.elapsed() < GRACE,
                "still running {GRACE:?} after SIGTERM; its log:\n{log}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its log never says it started afresh.
    fn never_started_afresh(&self) {
        let log = std::fs::read_to_string(&self.log).expect("log");
        assert!(
            !log.contains("starting afresh (fresh start"),
            "it started afresh after the stop was asked for:\n{log}"
        );
    }
}

async fn ground(name: &str) -> TestEnv {
    common::operator_cluster(name, false, &["kubesync-system", "team"]).await
}

/// Frozen past its Lease's renew deadline, the leader is sent SIGTERM (it arrives while the
/// process is stopped) and thawed: waking, its permit is found lost at once, which would start
/// it afresh; the stop asked for ends it instead.
#[tokio::test]
async fn a_stop_asked_for_while_frozen_past_the_lease_ends_the_process() {
    let env = ground("stop-frozen").await;
    let log = env.dir().join("frozen-leader.log");
    let mut leader = Leader::start(&env.kubeconfig_path().expect("kubeconfig"), log).await;
    leader.signal("STOP");
    // Past the renew deadline (10 s) as its own clock will see it on waking.
    tokio::time::sleep(Duration::from_secs(11)).await;
    leader.signal("TERM");
    let sent = Instant::now();
    leader.signal("CONT");
    leader.exited_within_grace(sent).await;
    leader.never_started_afresh();
}

/// The leader's apiserver stops answering (a proxy holds every connection), then SIGTERM: its
/// shutdown cannot release the Lease, and while it waits its permit runs out, which would start
/// it afresh in place and forget the signal. It exits within the grace period instead.
#[tokio::test]
async fn a_stop_asked_for_while_the_apiserver_is_gone_ends_the_process() {
    let env = ground("stop-unreachable").await;
    let proxy = common::proxy_to(&env).await;
    let kubeconfig = env.dir().join("proxied.kubeconfig");
    std::fs::write(
        &kubeconfig,
        env.kubeconfig_yaml()
            .replace(env.server(), &proxy.https_url()),
    )
    .expect("kubeconfig");
    let log = env.dir().join("cut-off-leader.log");
    let mut leader = Leader::start(&kubeconfig, log).await;
    proxy.block();
    // Its renewals hang now; the stop comes while its permit still holds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    leader.signal("TERM");
    let sent = Instant::now();
    leader.exited_within_grace(sent).await;
    leader.never_started_afresh();
    proxy.unblock();
}

/// Every worker of the leader's runtime blocked for 16 s (a named fault, as CPU-bound work a
/// tenant's input sizes would block them), past its renew deadline (10 s): the Lease is held
/// on a thread and runtime of its own, so it is renewed meanwhile (its `renewTime`, read by
/// the test, moves on during the stall), and once the workers are free again the replica still
/// leads and never started afresh. Before, the renewals ran on those workers: the Lease was not
/// renewed, the permit was lost, and the process started afresh on waking.
#[tokio::test]
async fn the_lease_is_renewed_while_every_worker_is_blocked() {
    let env = ground("stall").await;
    let log = env.dir().join("stalled-leader.log");
    let kubeconfig = env.kubeconfig_path().expect("kubeconfig");
    let leader = Leader::start_with(
        &kubeconfig,
        log.clone(),
        &[(kubesync_cli::faults::STALL_WORKERS, "4:16")],
    )
    .await;
    let stall = "blocking all";
    eventually("the stall begins", T, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        text.contains(stall).then_some(())
    })
    .await;
    let renewals = renewals_during(&env, 14, None).await;
    assert!(
        renewals >= 3,
        "the Lease was renewed {renewals} times in 14 s of the stall; its log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The stall over: it still leads, and never started afresh.
    tokio::time::sleep(Duration::from_secs(4)).await;
    eventually("it still leads", T, || async {
        let (_, metrics) = request(leader.port, "GET", "/metrics").await?;
        (sample(&metrics, "kubesync_leader")? == 1.0).then_some(())
    })
    .await;
    leader.never_started_afresh();
}

/// How many times the newest `renewTime` of the Leases in `kubesync-system` (those labelled
/// `labels`, if given) moved on in the next `seconds` seconds, read every half second.
async fn renewals_during(env: &TestEnv, seconds: u64, labels: Option<&str>) -> usize {
    let began = Instant::now();
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client().expect("client"), "kubesync-system");
    let params = labels.map_or_else(Default::default, |l| {
        kube::api::ListParams::default().labels(l)
    });
    let renewed = || async {
        let all = leases.list(&params).await.expect("leases");
        all.items
            .iter()
            .filter_map(|l| l.spec.as_ref()?.renew_time.clone())
            .map(|t| t.0)
            .max()
            .expect("the replica's Lease")
    };
    let mut last = renewed().await;
    let mut renewals = 0;
    while began.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = renewed().await;
        if now > last {
            renewals += 1;
            last = now;
        }
    }
    renewals
}

/// The same for a sharded replica's member Lease: every worker blocked for 16 s once it has
/// joined, past the renew deadline (10 s); its member Lease is renewed on a thread and
/// runtime of its own, so it moves on during the stall, and afterwards the replica is still
/// a member with a settled view and never started afresh. Before, the renewals ran on those
/// workers: the permit was lost and the replica started afresh on waking.
#[tokio::test]
async fn the_member_lease_is_renewed_while_every_worker_is_blocked() {
    let env = ground("stall-member").await;
    let log = env.dir().join("stalled-member.log");
    let kubeconfig = env.kubeconfig_path().expect("kubeconfig");
    let fault = [(kubesync_cli::faults::STALL_WORKERS, "6:16")];
    let member = Leader::spawn(
        &kubeconfig,
        log.clone(),
        &fault,
        &["--sharded", "--identity", "m1"],
    );
    let group = format!("{}=kubesync", kubesync_cli::shard::members::GROUP_LABEL);
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client().expect("client"), "kubesync-system");
    let params = kube::api::ListParams::default().labels(&group);
    let stalled = || std::fs::read_to_string(&log).is_ok_and(|t| t.contains("blocking all"));
    eventually("it joins", T, || async {
        let joined = !leases.list(&params).await.ok()?.items.is_empty();
        joined.then_some(())
    })
    .await;
    assert!(
        !stalled(),
        "the stall began before it joined: nothing would be shown"
    );
    eventually("the stall begins", T, || async { stalled().then_some(()) }).await;
    let renewals = renewals_during(&env, 14, Some(&group)).await;
    assert!(
        renewals >= 3,
        "the member Lease was renewed {renewals} times in 14 s of the stall; its log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    eventually("still a member, its view settled", T, || async {
        let (_, metrics) = request(member.port, "GET", "/metrics").await?;
        (sample(&metrics, "kubesync_shard_view_settled")? == 1.0).then_some(())
    })
    .await;
    member.never_started_afresh();
}
