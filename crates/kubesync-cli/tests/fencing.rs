//! A replica that was frozen (`SIGSTOP`, as a long stall of the process or its node would do)
//! past its Lease writes nothing when it wakes, in both modes: three `--sharded` replicas and
//! two with `--leader-elect`, each under a ServiceAccount of its own bound exactly as the
//! install (`config/sharded`, `config/default`) binds `kubesync`. While it is frozen every
//! source changes twice and the others take its work over; then it wakes (`SIGCONT`). The
//! evidence is the apiserver's: its audit log (who wrote what) and a watch of every copy (no
//! copy ever goes back to an older value). Also: a leader whose apiserver connection a proxy
//! holds stops writing before its Lease could expire on the standby's clock, and what it had
//! in flight lands late without effect.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    RunningBinary, T, free_port, install_for_accounts, kubeconfig_of_account, operator_command,
    request, sample,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use kubesync_testenv::{AuditEvent, TestEnv, eventually};

const SYSTEM: &str = "kubesync-system";
const SYNCS: usize = 24;
const NAMESPACES: usize = 15;

fn dest(i: usize) -> String {
    format!("dest-{i:02}")
}

/// One replica: the real binary as the ServiceAccount `account`.
struct Replica {
    process: RunningBinary,
    port: u16,
    account: String,
}

impl Replica {
    fn start(kubeconfig: &Path, account: &str, args: &[&str]) -> Self {
        let port = free_port();
        let mut all = vec!["--identity", account, "--trusted-namespace", "team"];
        all.extend_from_slice(args);
        let child = operator_command(kubeconfig, port, &all)
            .env("POD_NAMESPACE", SYSTEM)
            .spawn()
            .expect("run kubesync");
        Self {
            process: RunningBinary(child),
            port,
            account: account.to_string(),
        }
    }

    fn user(&self) -> String {
        format!("system:serviceaccount:{SYSTEM}:{}", self.account)
    }

    fn signal(&self, signal: &str) {
        common::signal(self.process.0.id(), signal);
    }

    async fn metric(&self, series: &str) -> Option<f64> {
        let (_, metrics) = request(self.port, "GET", "/metrics").await?;
        sample(&metrics, series)
    }

    /// Waits until this replica's term that froze is over: it started afresh (or, as a
    /// build without fencing does, exited). Its writes of that term are all logged then.
    async fn term_over(&mut self) {
        let deadline = Instant::now() + T;
        loop {
            let exited = self.process.0.try_wait().ok().flatten().is_some();
            if exited || self.metric("kubesync_fresh_starts_total").await == Some(1.0) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}'s frozen term never ended",
                self.account
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until this process (the same process id) has started afresh `n` times.
    async fn started_afresh(&self, n: f64) {
        eventually(
            &format!("{} started afresh {n} times", self.account),
            T,
            || async { (self.metric("kubesync_fresh_starts_total").await? == n).then_some(()) },
        )
        .await;
    }
}

/// A control plane with its audit log, the overlay installed for `accounts`, the source
/// namespace `team` with [`SYNCS`] ConfigMaps at `v1`, each copied by an ObjectSync to
/// [`NAMESPACES`] namespaces; and a kubeconfig per account.
async fn ground(
    name: &str,
    overlay: &str,
    accounts: &[&str],
) -> (TestEnv, Vec<std::path::PathBuf>) {
    let env = TestEnv::builder()
        .name(name)
        .audit(true)
        .start()
        .await
        .expect("start");
    install_for_accounts(&env, overlay, accounts).await;
    env.create_namespace("team").await.expect("ns");
    let namespaces: Api<Namespace> = Api::all(env.client().expect("client"));
    for i in 0..NAMESPACES {
        env.create_namespace(&dest(i)).await.expect("ns");
        namespaces
            .patch(
                &dest(i),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"fan-out": "yes"}}})),
            )
            .await
            .expect("label");
    }
    set_sources(&env, 1).await;
    for i in 0..SYNCS {
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: sync-{i:02}, namespace: team}}\nspec:\n  source: {{kind: ConfigMap, name: cm-{i:02}}}\n  destinations:\n  - namespaceSelector: {{matchLabels: {{fan-out: \"yes\"}}}}\n")).await.expect("objectsync");
    }
    let mut kubeconfigs = Vec::new();
    for account in accounts {
        kubeconfigs.push(
            kubeconfig_of_account(&env, account, None, &format!("{account}.kubeconfig")).await,
        );
    }
    (env, kubeconfigs)
}

/// Sets every source to version `v`.
async fn set_sources(env: &TestEnv, v: u32) {
    let api: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "team");
    let calls = (0..SYNCS).map(|i| {
        let api = api.clone();
        async move {
            api.patch(
                &format!("cm-{i:02}"),
                &PatchParams::apply("test").force(),
                &Patch::Apply(serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:02}"), "namespace": "team"},
                    "data": {"version": v.to_string()},
                })),
            )
            .await
            .expect("source");
        }
    });
    futures::future::join_all(calls).await;
}

/// The version a copy (or a write's answer) carries.
fn version_of(data: Option<&BTreeMap<String, String>>) -> Option<u32> {
    data?.get("version")?.parse().ok()
}

/// Waits until every copy exists at version `v`.
async fn copies_at(env: &TestEnv, v: u32, within: Duration) {
    let all: Api<ConfigMap> = Api::all(env.client().expect("client"));
    eventually(&format!("every copy at v{v}"), within, || async {
        let copies = all
            .list(&kube::api::ListParams::default().labels("kubesync.io/managed-by"))
            .await
            .ok()?;
        let at = copies
            .items
            .iter()
            .filter(|c| version_of(c.data.as_ref()) == Some(v))
            .count();
        (at == SYNCS * NAMESPACES).then_some(())
    })
    .await;
}

/// Every version each copy showed, in the order a watch delivered them.
type Seen = Arc<parking_lot::Mutex<BTreeMap<(String, String), Vec<u32>>>>;

/// A watch of every copy, recording the versions each one goes through.
fn witness(env: &TestEnv) -> (Seen, tokio::task::JoinHandle<()>) {
    let api: Api<ConfigMap> = Api::all(env.client().expect("client"));
    let seen: Seen = Arc::default();
    let task = tokio::spawn({
        let seen = seen.clone();
        async move {
            let config = kube::runtime::watcher::Config::default().labels("kubesync.io/managed-by");
            let mut events = Box::pin(kube::runtime::WatchStreamExt::default_backoff(
                kube::runtime::watcher(api, config),
            ));
            while let Some(event) = events.next().await {
                let (Ok(kube::runtime::watcher::Event::Apply(c))
                | Ok(kube::runtime::watcher::Event::InitApply(c))) = event
                else {
                    continue;
                };
                let Some(v) = version_of(c.data.as_ref()) else {
                    continue;
                };
                let key = (
                    c.metadata.namespace.unwrap_or_default(),
                    c.metadata.name.unwrap_or_default(),
                );
                let mut seen = seen.lock();
                let history = seen.entry(key).or_default();
                if history.last() != Some(&v) {
                    history.push(v);
                }
            }
        }
    });
    (seen, task)
}

/// The copies the witness saw go back to an older version, with their histories.
fn regressions(seen: &Seen) -> Vec<String> {
    seen.lock()
        .iter()
        .filter(|(_, h)| h.windows(2).any(|w| w[1] < w[0]))
        .map(|((ns, name), h)| format!("{ns}/{name}: {h:?}"))
        .collect()
}

/// Whether an audit entry is a write of a copy.
fn is_copy_write(e: &AuditEvent) -> bool {
    e.is_write() && e.resource() == "configmaps" && e.namespace().starts_with("dest-")
}

/// Every successful write of a copy in `events`, by (copy, version it left) → the users that
/// wrote it so.
fn copy_writers(events: &[AuditEvent]) -> BTreeMap<(String, String, u32), BTreeSet<String>> {
    let mut writers: BTreeMap<_, BTreeSet<String>> = BTreeMap::new();
    for e in events.iter().filter(|e| is_copy_write(e) && e.succeeded()) {
        let Some(v) = e
            .response_object
            .as_ref()
            .and_then(|o| o["data"]["version"].as_str())
            .and_then(|v| v.parse().ok())
        else {
            continue;
        };
        writers
            .entry((e.namespace().to_string(), e.name().to_string(), v))
            .or_default()
            .insert(e.acting_user().to_string());
    }
    writers
}

/// Whether the apiserver received the request at `at` or later (a request sent before a
/// freeze may be answered, and logged, after the wake).
fn received_since(e: &AuditEvent, at: jiff::Timestamp) -> bool {
    e.request_received_timestamp
        .parse::<jiff::Timestamp>()
        .is_ok_and(|received| received >= at)
}

/// Asserts what the log shows after a replica woke at `woke` (`after`: what was logged
/// since): none of its writes took effect, and nobody wrote a copy (every copy was in sync).
/// A write the fence let out just before the freeze may still reach the apiserver after the
/// wake; every write carries the resourceVersion it was decided on (copies, finalizers and
/// status alike), so such a write is refused (409) once the others wrote the object since, and
/// could only land on the very object it was decided on. Refused writes are printed.
fn nothing_written_after_the_wake(after: &[AuditEvent], woken: &Replica, woke: jiff::Timestamp) {
    let after: Vec<&AuditEvent> = after.iter().filter(|e| received_since(e, woke)).collect();
    let (landed, refused): (Vec<&AuditEvent>, Vec<&AuditEvent>) = after
        .iter()
        .filter(|e| e.is_write() && e.acting_user() == woken.user())
        .partition(|e| e.succeeded());
    let landed: Vec<String> = landed.iter().map(|e| e.describe()).collect();
    assert!(
        landed.is_empty(),
        "{} wrote {} times after it woke: {:?}",
        woken.account,
        landed.len(),
        &landed[..landed.len().min(10)]
    );
    if !refused.is_empty() {
        let refused: Vec<String> = refused.iter().map(|e| e.describe()).collect();
        println!(
            "{}: sent after the wake and refused: {refused:?}",
            woken.account
        );
    }
    let copies = after.iter().filter(|e| is_copy_write(e)).count();
    assert_eq!(copies, 0, "copies written after the wake, all in sync");
}

/// Asserts that `events` (the log of one change of every source) wrote each copy exactly
/// once: no write refused, none sent twice. Requests throttled by API Priority and Fairness
/// (429: a ServiceAccount's requests share a priority level; the client sends them again)
/// did nothing and are not writes.
fn written_once_each(events: &[AuditEvent]) {
    let writes: Vec<&AuditEvent> = events
        .iter()
        .filter(|e| is_copy_write(e) && e.code() != 429)
        .collect();
    let codes: BTreeMap<u16, usize> = writes.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.code()).or_default() += 1;
        m
    });
    let copies: BTreeSet<(&str, &str)> = writes.iter().map(|e| (e.namespace(), e.name())).collect();
    assert!(
        writes.len() == SYNCS * NAMESPACES && copies.len() == SYNCS * NAMESPACES,
        "{} writes of {} copies for one change of each source, by answer: {codes:?}",
        writes.len(),
        copies.len()
    );
    assert!(writes.iter().all(|e| e.succeeded()), "{codes:?}");
}

/// The audit log once it holds, after its first `mark` entries, as many writes of copies (not
/// throttled) as there are copies: a write's line may be written after its copy is read.
async fn log_with_copy_writes(env: &TestEnv, mark: usize) -> Vec<AuditEvent> {
    eventually("a write of every copy in the audit log", T, || async {
        let log = env.audit().expect("audit");
        let written = log[mark..]
            .iter()
            .filter(|e| is_copy_write(e) && e.code() != 429)
            .count();
        (written >= SYNCS * NAMESPACES).then_some(log)
    })
    .await
}

/// Asserts that every version of every copy was written by one replica only.
fn each_copy_written_by_one_replica(events: &[AuditEvent]) {
    let shared: Vec<_> = copy_writers(events)
        .into_iter()
        .filter(|(_, users)| users.len() > 1)
        .collect();
    assert!(shared.is_empty(), "written by two replicas: {shared:?}");
}

const MEMBERS: [&str; 3] = ["kubesync-0", "kubesync-1", "kubesync-2"];

/// The ObjectSyncs each of `replicas` works on, once all are settled and own them all.
async fn settled_shares(replicas: &[&Replica]) -> Vec<usize> {
    eventually(
        &format!("the ObjectSyncs spread over {} replicas", replicas.len()),
        T * 2,
        || async {
            let mut shares = Vec::new();
            for r in replicas {
                if r.metric("kubesync_shard_view_settled").await? != 1.0
                    || r.metric("kubesync_shard_members").await? != replicas.len() as f64
                {
                    return None;
                }
                shares.push(
                    r.metric("kubesync_shard_units{kind=\"ObjectSync\"}")
                        .await? as usize,
                );
            }
            (shares.iter().sum::<usize>() == SYNCS).then_some(shares)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_member_writes_nothing_when_it_wakes() {
    let (env, kubeconfigs) = ground("fence-sharded", "sharded", &MEMBERS).await;
    let (seen, watch) = witness(&env);
    let replicas: Vec<Replica> = MEMBERS
        .iter()
        .zip(&kubeconfigs)
        .map(|(name, kubeconfig)| Replica::start(kubeconfig, name, &["--sharded"]))
        .collect();
    let all: Vec<&Replica> = replicas.iter().collect();
    let shares = settled_shares(&all).await;
    copies_at(&env, 1, T * 2).await;
    println!("ObjectSyncs per replica: {shares:?}");

    // The busiest replica freezes past its Lease; every source changes twice meanwhile, and
    // the other two take its share over.
    let busiest = (0..replicas.len())
        .max_by_key(|i| shares[*i])
        .expect("a replica");
    let frozen = &replicas[busiest];
    let others: Vec<&Replica> = (0..replicas.len())
        .filter(|i| *i != busiest)
        .map(|i| &replicas[i])
        .collect();
    frozen.signal("STOP");
    let frozen_at = Instant::now();
    set_sources(&env, 2).await;
    copies_at(&env, 2, T * 2).await;
    println!("the other two took over in {:?}", frozen_at.elapsed());
    settled_shares(&others).await;
    set_sources(&env, 3).await;
    copies_at(&env, 3, T).await;

    // It wakes: it starts afresh (the same process), rejoins, and works on a share again.
    let mark = env.audit().expect("audit").len();
    let woke = jiff::Timestamp::now();
    frozen.signal("CONT");
    let shares = settled_shares(&all).await;
    assert!(
        shares[busiest] > 0,
        "the woken replica rejoined: {shares:?}"
    );
    copies_at(&env, 3, T).await;
    let log = env.audit().expect("audit");
    nothing_written_after_the_wake(&log[mark..], frozen, woke);
    let back = regressions(&seen);
    assert!(
        back.is_empty(),
        "copies went back to an older value: {back:?}"
    );
    // It rejoined as a new term of the same process: started afresh.
    frozen.started_afresh(1.0).await;

    // Work goes on: one more change reaches every copy, each written once, by one replica.
    let mark = log.len();
    set_sources(&env, 4).await;
    copies_at(&env, 4, T).await;
    let log = log_with_copy_writes(&env, mark).await;
    written_once_each(&log[mark..]);
    each_copy_written_by_one_replica(&log);
    assert!(regressions(&seen).is_empty());
    watch.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_frozen_leader_writes_nothing_when_it_wakes() {
    let accounts = ["kubesync-a", "kubesync-b"];
    let (env, kubeconfigs) = ground("fence-leader", "default", &accounts).await;
    let (seen, watch) = witness(&env);
    let mut leader = Replica::start(&kubeconfigs[0], accounts[0], &["--leader-elect"]);
    eventually("a leads", T, || async {
        (leader.metric("kubesync_leader").await? == 1.0).then_some(())
    })
    .await;
    let standby = Replica::start(&kubeconfigs[1], accounts[1], &["--leader-elect"]);
    copies_at(&env, 1, T * 2).await;
    eventually("b stands by", T, || async {
        (standby.metric("kubesync_leader").await? == 0.0).then_some(())
    })
    .await;

    leader.signal("STOP");
    set_sources(&env, 2).await;
    eventually("b leads", T, || async {
        (standby.metric("kubesync_leader").await? == 1.0).then_some(())
    })
    .await;
    copies_at(&env, 2, T).await;
    set_sources(&env, 3).await;
    copies_at(&env, 3, T).await;

    let mark = env.audit().expect("audit").len();
    let woke = jiff::Timestamp::now();
    leader.signal("CONT");
    // Its frozen term ends; while it found out that it had lost the Lease, it wrote nothing.
    leader.term_over().await;
    eventually("b leads on", T, || async {
        (standby.metric("kubesync_leader").await? == 1.0).then_some(())
    })
    .await;
    let log = env.audit().expect("audit");
    nothing_written_after_the_wake(&log[mark..], &leader, woke);
    // It stands by, as a new term of the same process.
    eventually("the woken one stands by", T, || async {
        (leader.metric("kubesync_leader").await? == 0.0).then_some(())
    })
    .await;
    let back = regressions(&seen);
    assert!(
        back.is_empty(),
        "copies went back to an older value: {back:?}"
    );
    // As a new term of the same process: started afresh.
    leader.started_afresh(1.0).await;

    let (mark, changed) = (log.len(), jiff::Timestamp::now());
    set_sources(&env, 4).await;
    copies_at(&env, 4, T).await;
    let log = env.audit().expect("audit");
    // The standby writes nothing; b alone carried the change.
    nothing_written_after_the_wake(
        &log[mark..]
            .iter()
            .filter(|e| !is_copy_write(e))
            .cloned()
            .collect::<Vec<_>>(),
        &leader,
        changed,
    );
    each_copy_written_by_one_replica(&log);
    watch.abort();
}

/// A leader whose connection to the apiserver a proxy holds (a partition): it stops writing,
/// and starts afresh, before the standby can take its Lease over; what it had sent before
/// lands late, when the proxy lets it through, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_stops_writing_before_its_lease_can_expire() {
    let accounts = ["kubesync-a", "kubesync-b"];
    let (env, kubeconfigs) = ground("fence-partition", "default", &accounts).await;
    let (seen, watch) = witness(&env);
    let proxy = common::proxy_to(&env).await;
    let through_proxy = kubeconfig_of_account(
        &env,
        accounts[0],
        Some(&proxy.https_url()),
        "a-proxied.kubeconfig",
    )
    .await;
    let leader = Replica::start(&through_proxy, accounts[0], &["--leader-elect"]);
    eventually("a leads", T, || async {
        (leader.metric("kubesync_leader").await? == 1.0).then_some(())
    })
    .await;
    let standby = Replica::start(&kubeconfigs[1], accounts[1], &["--leader-elect"]);
    copies_at(&env, 1, T * 2).await;

    // Cut off in the middle of a fan-out (its first copies at v2 are out, the rest in
    // flight): a's renewals hang. It must give up writing before b may take over, each moment
    // seen from outside, 100 ms apart at most.
    set_sources(&env, 2).await;
    eventually("a writes v2", T, || async {
        seen.lock()
            .values()
            .any(|h| h.last() == Some(&2))
            .then_some(())
    })
    .await;
    proxy.block();
    let cut = Instant::now();
    let (mut gave_up, mut took_over) = (None, None);
    while took_over.is_none() {
        assert!(cut.elapsed() < T, "b never took over");
        if gave_up.is_none() && leader.metric("kubesync_fresh_starts_total").await == Some(1.0) {
            gave_up = Some(cut.elapsed());
        }
        if standby.metric("kubesync_leader").await == Some(1.0) {
            took_over = Some(cut.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("a gave up after {gave_up:?}, b took over after {took_over:?}");
    let gave_up = gave_up.expect("a gave up writing before b took over");
    assert!(gave_up < took_over.expect("took over"));
    copies_at(&env, 2, T).await;

    // What a sent before the cut and never got answered goes through now, late: nothing of it
    // changes a copy. Then it stands by.
    let mark = env.audit().expect("audit").len();
    proxy.unblock();
    set_sources(&env, 3).await;
    copies_at(&env, 3, T).await;
    eventually("the cut-off one stands by", T, || async {
        (leader.metric("kubesync_leader").await? == 0.0).then_some(())
    })
    .await;
    let log = env.audit().expect("audit");
    let late: Vec<&AuditEvent> = log[mark..]
        .iter()
        .filter(|e| is_copy_write(e) && e.acting_user() == leader.user())
        .collect();
    let landed: Vec<_> = late
        .iter()
        .filter(|e| e.succeeded())
        .map(|e| format!("{}/{}", e.namespace(), e.name()))
        .collect();
    println!(
        "{} writes of a arrived late, refused: {:?}",
        late.len(),
        late.iter().map(|e| e.code()).collect::<BTreeSet<_>>()
    );
    assert!(landed.is_empty(), "late writes changed copies: {landed:?}");
    let back = regressions(&seen);
    assert!(
        back.is_empty(),
        "copies went back to an older value: {back:?}"
    );
    each_copy_written_by_one_replica(&log);
    drop(proxy);
    watch.abort();
}

/// The gate's third question, for the operator's own status writes: a status decided on an
/// ObjectSync that changed since (as a paused replica's would be, once another took its work
/// over) is refused by the apiserver and changes nothing; decided on the object as it is, it is
/// written; and one sent again from a store behind the write is not sent at all.
#[tokio::test]
async fn a_status_decided_on_an_older_object_changes_nothing() {
    use kubesync_cli::crd::{ObjectSync, ObjectSyncStatus};
    let env = common::operator_cluster_from(
        TestEnv::builder().name("fence-status").audit(true),
        &["team"],
    )
    .await;
    let client = env.client().expect("client");
    env.apply_yaml(
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: s, namespace: team}\nspec:\n  source: {kind: ConfigMap, name: c}\n  destinations:\n  - {namespace: x}\n",
    )
    .await
    .expect("objectsync");
    let syncs = Api::<ObjectSync>::namespaced(client.clone(), "team");
    let stale = syncs.get("s").await.expect("get");
    let writes = kubesync_cli::own_writes::OwnWrites::new(
        kubesync::Cluster::new("local", client.clone()),
        kubesync::Writer::new(),
    );
    let status = |total| ObjectSyncStatus {
        total,
        ..Default::default()
    };
    // Someone changes it (here: a label; another replica's status would do the same).
    syncs
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"changed": "yes"}}})),
        )
        .await
        .expect("change");
    let audit_mark = env.audit().expect("audit").len();
    writes
        .patch_status(&stale, &status(7))
        .await
        .expect("a refused status is not an error");
    let current = syncs.get("s").await.expect("get");
    assert_eq!(
        current.status.as_ref().map(|s| s.total).unwrap_or_default(),
        0,
        "the status decided on the older object changed nothing"
    );
    let sent: Vec<u16> = env.audit().expect("audit")[audit_mark..]
        .iter()
        .filter(|e| e.is_write() && e.resource() == "objectsyncs")
        .map(|e| e.code())
        .collect();
    assert_eq!(sent, [409], "sent once, refused as a conflict");
    // Decided on the object as it is: written.
    writes
        .patch_status(&current, &status(3))
        .await
        .expect("status");
    let written = syncs.get("s").await.expect("get");
    assert_eq!(written.status.as_ref().map(|s| s.total), Some(3));
    // The same decision again, from a store that does not show the write yet: nothing sent.
    let mark = env.audit().expect("audit").len();
    writes
        .patch_status(&current, &status(3))
        .await
        .expect("status");
    let again = env.audit().expect("audit")[mark..]
        .iter()
        .filter(|e| e.is_write() && e.resource() == "objectsyncs")
        .count();
    assert_eq!(again, 0, "a write already made is not sent again");
}
