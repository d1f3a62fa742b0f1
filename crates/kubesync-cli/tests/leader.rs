//! `kubesync run --leader-elect`: several replicas of the real binary on one control plane;
//! exactly one works, a stopped leader hands over at once, a killed one after its Lease
//! expires.

mod common;

use std::time::{Duration, Instant};

use common::{RunningBinary, T, free_port, operator_cluster, operator_command, request, sample};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kubesync_testenv::{TestEnv, eventually};

/// The command of a replica with leader election, its telemetry on `port`.
fn replica_command(env: &TestEnv, port: u16) -> std::process::Command {
    operator_command(
        &env.kubeconfig_path().expect("kubeconfig"),
        port,
        &[
            "--leader-elect",
            "--leader-election-namespace",
            "kube-system",
            "--trusted-namespace",
            "apps",
        ],
    )
}

/// Starts a replica with leader election; returns it and its telemetry port.
fn replica(env: &TestEnv) -> (RunningBinary, u16) {
    let port = free_port();
    let child = replica_command(env, port).spawn().expect("run kubesync");
    (RunningBinary(child), port)
}

/// The replica's `kubesync_leader` gauge, once it answers.
async fn leading(port: u16) -> Option<bool> {
    let (_, metrics) = request(port, "GET", "/metrics").await?;
    sample(&metrics, "kubesync_leader").map(|v| v == 1.0)
}

async fn wait_leading(port: u16, want: bool) {
    eventually(&format!("replica on {port} leading: {want}"), T, || async {
        (leading(port).await == Some(want)).then_some(())
    })
    .await;
}

/// The Lease's holder (empty when released) and its number of transitions.
async fn lease(env: &TestEnv) -> (String, i32) {
    let spec = Api::<Lease>::namespaced(env.client().expect("client"), "kube-system")
        .get("kubesync")
        .await
        .expect("lease")
        .spec
        .unwrap_or_default();
    (
        spec.holder_identity.unwrap_or_default(),
        spec.lease_transitions.unwrap_or_default(),
    )
}

async fn holder(env: &TestEnv) -> String {
    lease(env).await.0
}

async fn copy_token(env: &TestEnv) -> Option<String> {
    let s = Api::<Secret>::namespaced(env.client().expect("client"), "team-a")
        .get_opt("registry")
        .await
        .ok()??;
    let data = s.data?;
    Some(String::from_utf8_lossy(&data.get("token")?.0).to_string())
}

async fn set_token(env: &TestEnv, token: &str) {
    env.apply_yaml(&format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: registry, namespace: apps}}\ntype: Opaque\nstringData: {{token: {token}}}\n")).await.expect("source");
}

#[tokio::test]
async fn one_replica_leads_a_stopped_leader_hands_over_and_a_killed_one_expires() {
    let env = operator_cluster("leader", false, &["apps", "team-a"]).await;
    set_token(&env, "one").await;
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations:\n  - {namespace: team-a}\n").await.expect("objectsync");

    // The first replica leads and works; the second waits.
    let (a, port_a) = replica(&env);
    wait_leading(port_a, true).await;
    let (b, port_b) = replica(&env);
    wait_leading(port_b, false).await;
    assert!(holder(&env).await.ends_with(&format!("-{}", a.0.id())));
    eventually("the leader copies", T, || async {
        (copy_token(&env).await.as_deref() == Some("one")).then_some(())
    })
    .await;
    // Ready nonetheless: it reads the Lease and can take over (a rolling update waits for
    // new Pods to be ready; a PodDisruptionBudget counts ready Pods).
    let (code, body) = request(port_b, "GET", "/readyz").await.expect("readyz");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("standby: ready to take over"), "{body}");
    // The leader renews its Lease: for three Lease durations, one holder throughout, its
    // renewTime advancing (never a gap of a Lease duration, so it never expired), no
    // transition; the standby never leads. Facts of the Lease, read every second.
    let spec = || async {
        Api::<Lease>::namespaced(env.client().expect("client"), "kube-system")
            .get("kubesync")
            .await
            .expect("lease")
            .spec
            .unwrap_or_default()
    };
    let first = spec().await;
    let duration = Duration::from_secs(
        u64::try_from(first.lease_duration_seconds.expect("duration")).expect("positive"),
    );
    let renewed = |s: &k8s_openapi::api::coordination::v1::LeaseSpec| {
        s.renew_time.as_ref().expect("renewTime").0
    };
    let (mut last, mut renewals) = (renewed(&first), 0);
    let until = Instant::now() + duration * 3;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = spec().await;
        assert_eq!(
            now.holder_identity, first.holder_identity,
            "one holder throughout"
        );
        assert_eq!(
            now.lease_transitions, first.lease_transitions,
            "no transition"
        );
        assert_eq!(leading(port_b).await, Some(false), "still one leader");
        let at = renewed(&now);
        if at > last {
            let gap = at.duration_since(last);
            assert!(
                gap < jiff::SignedDuration::try_from(duration).expect("duration"),
                "renewed {gap:?} after the last renewal: the Lease had expired"
            );
            renewals += 1;
            last = at;
        }
    }
    assert!(
        renewals >= 3,
        "renewed {renewals} times in three Lease durations"
    );

    // A leader stopped with SIGTERM releases the Lease: the standby takes over without
    // waiting for it to expire (15 s). Checked on the Lease, not on the clock: the moment the
    // old leader has exited it no longer holds the Lease, and the next holder is the standby,
    // one transition later.
    let mut a = a;
    let (_, transitions) = lease(&env).await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &a.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || {
        let code = a.0.wait().expect("wait");
        (a, code)
    })
    .await
    .expect("join");
    assert!(exit.1.success(), "a normal stop exits 0: {:?}", exit.1);
    let (after_exit, _) = lease(&env).await;
    assert!(
        !after_exit.ends_with(&format!("-{}", exit.0.0.id())),
        "the stopped leader still holds the Lease ({after_exit}): not released"
    );
    wait_leading(port_b, true).await;
    let (now, now_transitions) = lease(&env).await;
    assert!(now.ends_with(&format!("-{}", b.0.id())), "{now}");
    assert_eq!(now_transitions, transitions + 1, "one handover");
    set_token(&env, "two").await;
    eventually("the new leader copies", T, || async {
        (copy_token(&env).await.as_deref() == Some("two")).then_some(())
    })
    .await;

    // A leader killed without a chance to release: a standby takes over once the Lease has
    // not been renewed for its duration.
    let (_c, port_c) = replica(&env);
    wait_leading(port_c, false).await;
    drop(b);
    let killed_at = Instant::now();
    wait_leading(port_c, true).await;
    assert!(
        killed_at.elapsed() >= Duration::from_secs(10),
        "took over a fresh Lease after {:?}",
        killed_at.elapsed()
    );
    set_token(&env, "three").await;
    eventually("the third leader copies", T, || async {
        (copy_token(&env).await.as_deref() == Some("three")).then_some(())
    })
    .await;
}

/// A leader that cannot renew its Lease (the apiserver is gone) steps down: after the renew
/// deadline (10 s) it may no longer write, and it starts afresh in place — the same process,
/// its queue and stores discarded — as a standby, so that no two replicas ever work at once.
#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down() {
    let mut env = operator_cluster("leader-renew", false, &["apps"]).await;
    let port = free_port();
    let child = replica_command(&env, port).spawn().expect("run kubesync");
    let mut replica = RunningBinary(child);
    wait_leading(port, true).await;
    let before = sample_of(port, "kubesync_fresh_starts_total").await;
    assert_eq!(before, Some(0.0), "a new process");
    // Stopping takes a few seconds (SIGTERM, then SIGKILL after 5 s): counted from its start.
    let stopped = Instant::now();
    env.stop_apiserver();
    eventually(
        "the leader started afresh",
        Duration::from_secs(40),
        || async { (sample_of(port, "kubesync_fresh_starts_total").await? == 1.0).then_some(()) },
    )
    .await;
    assert!(
        stopped.elapsed() >= Duration::from_secs(8),
        "gave up after {:?}, before the renew deadline",
        stopped.elapsed()
    );
    assert_eq!(leading(port).await, Some(false), "it stands by");
    assert!(
        replica.0.try_wait().expect("wait").is_none(),
        "the same process goes on"
    );
    // Once the apiserver is back, it leads again (nobody else took the Lease).
    env.restart_apiserver().await.expect("restart");
    wait_leading(port, true).await;
}

async fn sample_of(port: u16, series: &str) -> Option<f64> {
    let (_, metrics) = request(port, "GET", "/metrics").await?;
    sample(&metrics, series)
}
