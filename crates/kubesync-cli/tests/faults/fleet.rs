//! The fleet: one control plane with many namespaces, ConfigMaps fanned out by ObjectSyncs and
//! the real `kubesync` binary, for the scenarios that fault the operator or its apiserver in
//! the middle of a fan-out; and the exact check that ends each of them.
//!
//! The check reads the cluster, not kubesync: every expected copy present and equal to its
//! source, no copy without a live declaration, the objects kubesync did not create untouched
//! (same resourceVersion), and — from the apiserver's audit log — no write to them and no
//! duplicate write (a write that left a copy as kubesync's previous write had left it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use kubesync_testenv::{AuditEvent, TestEnv, TestEnvBuilder};
use serde_json::Value;

use crate::common::{
    RunningBinary, free_port, operator_cluster_from, operator_command, request, sample,
};

/// The identities the operator's replicas run as: ordinary users that RBAC grants
/// everything. Not `system:masters`, so that an apiserver's in-flight limits apply to them
/// (the test itself, as admin, is exempt), and so that the audit log tells replicas apart.
pub const OPERATORS: [&str; 2] = ["kubesync-a", "kubesync-b"];

/// The label every fleet namespace carries (`fleet: "yes"`); the destinations select it.
const FLEET_LABEL: &str = "fleet";

/// Grants `user` every verb on every resource, through RBAC.
pub async fn grant_everything(env: &TestEnv, user: &str) {
    let everything = PolicyRule {
        api_groups: Some(vec!["*".into()]),
        resources: Some(vec!["*".into()]),
        verbs: vec!["*".into()],
        ..Default::default()
    };
    env.grant(user, None, "everything", vec![everything])
        .await
        .expect("grant");
}

/// `ci` in `make test`, `full` in `make chaos` (`KUBESYNC_CHAOS_FULL=1`).
pub fn size(ci: usize, full: usize) -> usize {
    if std::env::var_os("KUBESYNC_CHAOS_FULL").is_some() {
        full
    } else {
        ci
    }
}

/// The name of the fleet's `i`-th namespace.
pub fn namespace(i: usize) -> String {
    format!("fleet-{i:04}")
}

/// A small deterministic random source (xorshift), seeded from the clock unless
/// `KUBESYNC_CHAOS_SEED` replays a run; the seed is printed with the figures.
pub struct Random(u64);

impl Random {
    pub fn new() -> (Self, u64) {
        let seed = std::env::var("KUBESYNC_CHAOS_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            })
            | 1;
        (Self(seed), seed)
    }

    /// A number in `range`.
    pub fn below(&mut self, range: std::ops::Range<u64>) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        range.start + self.0 % (range.end - range.start).max(1)
    }
}

pub struct Fleet {
    pub env: TestEnv,
    /// Namespaces created so far (`fleet-0000`, …), whether or not since deleted.
    created: usize,
    /// Namespaces this test deleted.
    deleted: BTreeSet<String>,
    /// The objects kubesync did not create: (namespace, name) → resourceVersion.
    foreign: BTreeMap<(String, String), String>,
}

impl Fleet {
    /// A control plane (with the namespace and garbage-collector controllers, and the audit
    /// log) with kubesync's CRDs, the operator identities, the namespace `apps` holding
    /// `sources` ConfigMaps `src-<i>` labelled `share: fleet`, `namespaces` fleet namespaces,
    /// and objects kubesync must not touch: a ConfigMap `unrelated` in every tenth namespace
    /// and, in `fleet-0000`, someone else's ConfigMap named `src-0`.
    pub async fn start(
        name: &str,
        namespaces: usize,
        sources: usize,
        configure: impl FnOnce(TestEnvBuilder) -> TestEnvBuilder,
    ) -> Fleet {
        let builder = OPERATORS.iter().fold(
            TestEnv::builder()
                .name(name)
                .with_controller_manager(true)
                .audit(true),
            |b, user| b.user(*user, &[]),
        );
        let env = operator_cluster_from(configure(builder), &["apps"]).await;
        for user in OPERATORS {
            grant_everything(&env, user).await;
        }
        let mut fleet = Fleet {
            env,
            created: 0,
            deleted: BTreeSet::new(),
            foreign: BTreeMap::new(),
        };
        fleet.add_namespaces(namespaces).await;
        for i in 0..sources {
            fleet.set_source(&format!("src-{i}"), "fleet", "0").await;
        }
        let mut foreign: Vec<(String, &str)> = (0..namespaces)
            .step_by(10)
            .map(|i| (namespace(i), "unrelated"))
            .collect();
        foreign.push((namespace(0), "src-0"));
        for (ns, name) in foreign {
            fleet.env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{owner: someone-else}}\n")).await.expect("foreign");
            let rv = Api::<ConfigMap>::namespaced(fleet.client(), &ns)
                .get(name)
                .await
                .expect("foreign")
                .resource_version()
                .unwrap_or_default();
            fleet.foreign.insert((ns, name.to_string()), rv);
        }
        fleet
    }

    pub fn client(&self) -> kube::Client {
        self.env.client().expect("client")
    }

    /// Creates `n` more fleet namespaces (16 at a time).
    pub async fn add_namespaces(&mut self, n: usize) {
        let names: Vec<String> = (self.created..self.created + n).map(namespace).collect();
        self.created += n;
        let env = &self.env;
        stream::iter(names)
            .for_each_concurrent(16, |ns| async move {
                env.apply_yaml(&format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{{FLEET_LABEL}: \"yes\"}}}}\n"))
                    .await
                    .expect("namespace");
            })
            .await;
    }

    /// Deletes `n` fleet namespaces that hold no foreign object, the newest first.
    pub async fn delete_namespaces(&mut self, n: usize) {
        let api = Api::<Namespace>::all(self.client());
        let doomed: Vec<String> = (0..self.created)
            .rev()
            .filter(|i| i % 10 != 0)
            .map(namespace)
            .filter(|ns| !self.deleted.contains(ns))
            .take(n)
            .collect();
        for ns in doomed {
            api.delete(&ns, &DeleteParams::default())
                .await
                .expect("delete namespace");
            self.deleted.insert(ns);
        }
    }

    /// Creates or changes the source `name` in `apps`, labelled `share: <share>`.
    pub async fn set_source(&self, name: &str, share: &str, value: &str) {
        self.env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: apps, labels: {{share: {share}}}}}\ndata: {{v: \"{value}\"}}\n")).await.expect("source");
    }

    /// Declares the ObjectSync `name` in `apps`: every source labelled `share: <share>` into
    /// every fleet namespace.
    pub async fn declare(&self, name: &str, share: &str) {
        self.env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  source: {{kind: ConfigMap, selector: {{matchLabels: {{share: {share}}}}}}}\n  destinations: [{{namespaceSelector: {{matchLabels: {{{FLEET_LABEL}: \"yes\"}}}}}}]\n")).await.expect("objectsync");
    }

    /// Makes every declaration in `declared` reconcile once more and waits for it (see
    /// [`reconciled_again`]).
    pub async fn reconciled_again(&self, declared: &[&str]) {
        reconciled_again(self.client(), declared).await;
    }

    /// Starts `kubesync run` on the fleet's cluster (see [`Operator::start`]).
    pub fn operator(&self, user: &'static str, args: &[&str], log: &str) -> Operator {
        Operator::start(&self.env, user, args, log)
    }

    /// The state as it is now (without the audit log's figures).
    pub async fn state(&self, declared: &[&str]) -> Outcome {
        let client = self.client();
        let namespaces = Api::<Namespace>::all(client.clone())
            .list(&Default::default())
            .await
            .expect("namespaces")
            .items;
        let active: BTreeSet<String> = namespaces
            .iter()
            .filter(|ns| {
                ns.labels().get(FLEET_LABEL).map(String::as_str) == Some("yes")
                    && ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active")
            })
            .map(|ns| ns.name_any())
            .collect();
        let live: BTreeSet<String> = namespaces
            .iter()
            .filter(|ns| ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active"))
            .map(|ns| ns.name_any())
            .collect();
        let terminating = namespaces
            .iter()
            .filter(|ns| ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating"))
            .count();
        let all = Api::<ConfigMap>::all(client)
            .list(&Default::default())
            .await
            .expect("configmaps")
            .items;
        let sources: BTreeMap<String, &ConfigMap> = all
            .iter()
            .filter(|cm| cm.namespace().as_deref() == Some("apps"))
            .filter(|cm| {
                cm.labels()
                    .get("share")
                    .is_some_and(|s| declared.contains(&s.as_str()))
            })
            .map(|cm| (cm.name_any(), cm))
            .collect();
        let found: BTreeMap<(String, String), &ConfigMap> = all
            .iter()
            .map(|cm| ((cm.namespace().unwrap_or_default(), cm.name_any()), cm))
            .collect();
        let mut outcome = Outcome {
            terminating,
            ..Default::default()
        };
        let mut expected = BTreeSet::new();
        for ns in &active {
            for (name, source) in &sources {
                let key = (ns.clone(), name.clone());
                if self.foreign.contains_key(&key) {
                    continue;
                }
                outcome.copies += 1;
                match found.get(&key) {
                    None => outcome.missing += 1,
                    Some(copy) if copy.data != source.data => outcome.unequal += 1,
                    Some(_) => {}
                }
                expected.insert(key);
            }
        }
        outcome.orphans = found
            .iter()
            .filter(|(key, cm)| {
                cm.labels().contains_key("kubesync.io/managed-by")
                    && live.contains(&key.0)
                    && !expected.contains(*key)
            })
            .count();
        for (key, rv) in &self.foreign {
            if self.deleted.contains(&key.0) {
                continue;
            }
            if found.get(key).and_then(|cm| cm.resource_version()).as_ref() != Some(rv) {
                outcome.foreign_writes += 1;
            }
        }
        outcome
    }

    /// Waits until the state is converged (every copy present and equal, no orphan, no
    /// namespace still terminating) and returns it with the time since `since`; then, once
    /// every declaration has reconciled again after it ([`Self::reconciled_again`]: late
    /// writes are done), adds the audit log's figures.
    pub async fn converge(&self, declared: &[&str], since: Instant, timeout: Duration) -> Outcome {
        let mut last;
        loop {
            last = self.state(declared).await;
            if last.converged() {
                break;
            }
            assert!(
                since.elapsed() < timeout,
                "not converged after {timeout:?}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let took = since.elapsed();
        self.reconciled_again(declared).await;
        let mut outcome = self.state(declared).await;
        outcome.converged_in = took;
        let writes = Writes::of(&self.env, "configmaps");
        outcome.writes = writes.total();
        outcome.duplicate_writes = writes.duplicates();
        outcome.conflicts = writes.conflicts();
        outcome.foreign_writes += writes.to(|ns, name| {
            self.foreign
                .contains_key(&(ns.to_string(), name.to_string()))
        });
        outcome.written_by_both = writes.by_more_than_one();
        outcome
    }
}

/// The final state of a scenario.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Copies expected (sources × active fleet namespaces, less the foreign one).
    pub copies: usize,
    pub missing: usize,
    pub unequal: usize,
    /// Copies (objects with kubesync's mark, in a namespace not being deleted) where no live
    /// declaration wants one.
    pub orphans: usize,
    /// Objects kubesync did not create that were changed or deleted, plus operator writes
    /// to them in the audit log.
    pub foreign_writes: usize,
    /// Fleet namespaces still terminating.
    pub terminating: usize,
    /// Successful writes of the operators to ConfigMaps (audit log).
    pub writes: usize,
    /// Writes that left a ConfigMap as the operators' previous write had left it (and copies
    /// deleted and created again as they were).
    pub duplicate_writes: usize,
    /// Operator writes refused with 409 (sent again after a new decision): reported, not a
    /// fault (a write decided on a store a moment behind is refused by design).
    pub conflicts: usize,
    /// ConfigMaps written by more than one operator identity.
    pub written_by_both: usize,
    pub converged_in: Duration,
}

impl Outcome {
    pub fn converged(&self) -> bool {
        self.missing == 0 && self.unequal == 0 && self.orphans == 0 && self.terminating == 0
    }

    /// Converged, nothing foreign touched, no duplicate write.
    pub fn assert_exact(&self, scenario: &str) {
        assert!(
            self.converged() && self.foreign_writes == 0 && self.duplicate_writes == 0,
            "{scenario}: {self}"
        );
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} copies, {} missing, {} unequal, {} orphans, {} foreign writes, {} duplicate writes ({} writes, {} refused with 409)",
            self.copies,
            self.missing,
            self.unequal,
            self.orphans,
            self.foreign_writes,
            self.duplicate_writes,
            self.writes,
            self.conflicts
        )?;
        if self.terminating > 0 {
            write!(f, ", {} namespaces terminating", self.terminating)?;
        }
        Ok(())
    }
}

/// A running `kubesync run`.
pub struct Operator {
    pub child: RunningBinary,
    pub port: u16,
    pub log: PathBuf,
}

impl Operator {
    /// Starts `kubesync run` on `env` as `user` with `args` besides the kubeconfig, the
    /// telemetry address and `--trusted-namespace apps`; it logs JSON lines at `log` level
    /// into a file of the environment's directory.
    pub fn start(env: &TestEnv, user: &str, args: &[&str], log: &str) -> Operator {
        let kubeconfig = env.dir().join(format!("{user}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            env.kubeconfig_yaml_as(user).expect("kubeconfig"),
        )
        .expect("write kubeconfig");
        let n = std::fs::read_dir(env.dir()).map_or(0, |d| d.count());
        let log_path = env.dir().join(format!("{user}-{n}.log"));
        let port = free_port();
        let child = operator_command(&kubeconfig, port, &["--trusted-namespace", "apps"])
            .args(args)
            .env("RUST_LOG", log)
            .env("KUBESYNC_LOG_FORMAT", "json")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).expect("log file"))
            .spawn()
            .expect("run kubesync");
        Operator {
            child: RunningBinary(child),
            port,
            log: log_path,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`, `TERM`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal}");
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill(mut self) {
        let _ = self.child.0.kill();
        let _ = self.child.0.wait();
    }

    /// Kills it (SIGKILL) and returns its log, to read after.
    pub fn kill_keeping_log(self) -> OperatorLog {
        let log = OperatorLog(self.log.clone());
        self.kill();
        log
    }

    /// Its log, read as it is written.
    pub fn log(&self) -> OperatorLog {
        OperatorLog(self.log.clone())
    }

    /// SIGTERM, and wait (at most 30 s) for it to exit: it finishes the reconciles in flight
    /// first, so every write it sent has been answered (and is in an audit log) after.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal("TERM");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the operator did not exit within 30 s of SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Whether it has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.0.try_wait().expect("wait")
    }

    /// Its `kubesync_leader` gauge, once it answers.
    pub async fn leading(&self) -> Option<bool> {
        let (_, metrics) = request(self.port, "GET", "/metrics").await?;
        sample(&metrics, "kubesync_leader").map(|v| v == 1.0)
    }

    /// How many of its log lines contain `text`.
    pub fn log_count(&self, text: &str) -> usize {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(text))
            .count()
    }

    /// Its log lines (JSON objects) at these levels.
    pub fn log_lines(&self, levels: &[&str]) -> Vec<Value> {
        self.log().lines(levels)
    }
}

/// An operator's log file (JSON lines), alive or killed.
pub struct OperatorLog(std::path::PathBuf);

impl OperatorLog {
    /// The lines (JSON objects) at these levels.
    pub fn lines(&self, levels: &[&str]) -> Vec<Value> {
        std::fs::read_to_string(&self.0)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| levels.contains(&l["level"].as_str().unwrap_or_default()))
            .collect()
    }

    /// Whether it was read at all: it holds the operator's start line (a positive control for
    /// a check that finds no error in it).
    pub fn read_started(&self) -> bool {
        self.lines(&["INFO"])
            .iter()
            .any(|l| l["fields"]["message"] == "kubesync operator starting")
    }
}

/// The writes to one resource, per object, in the order the apiserver finished them (its
/// audit log): the operators' and everyone else's, which a duplicate must not be confused with
/// (a copy someone edited and kubesync restored holds what kubesync's previous write left).
pub struct Writes {
    objects: BTreeMap<(String, String, String), Vec<Write>>,
    /// Operator writes the apiserver refused with 409 (decided on an object that had changed,
    /// or a create whose name was taken): each one a request sent again after a new decision.
    conflicts: usize,
}

struct Write {
    user: String,
    /// What the object holds after the write (None: deleted).
    content: Option<Value>,
}

impl Write {
    fn by_operator(&self) -> bool {
        OPERATORS.contains(&self.user.as_str())
    }
}

impl Writes {
    /// The successful writes to `resource` (its main resource and each subresource on its
    /// own).
    pub fn of(env: &TestEnv, resource: &str) -> Writes {
        Self::from_events(&env.audit().expect("audit log"), resource)
    }

    pub fn from_events(events: &[AuditEvent], resource: &str) -> Writes {
        let mut objects: BTreeMap<_, Vec<Write>> = BTreeMap::new();
        let mut conflicts = 0;
        for e in events {
            if !(e.is_write() && e.resource() == resource) {
                continue;
            }
            if !e.succeeded() {
                conflicts +=
                    usize::from(e.code() == 409 && OPERATORS.contains(&e.user.username.as_str()));
                continue;
            }
            // What follows compares the objects the writes left: an entry without one would
            // make every comparison pass.
            assert!(
                e.verb == "delete" || e.verb == "deletecollection" || e.response_object.is_some(),
                "an audit entry of a write carries the object it left: {}",
                e.describe()
            );
            if e.verb == "deletecollection" {
                // Everything in the namespace is gone.
                for ((ns, _, _), writes) in objects.iter_mut() {
                    if ns == e.namespace() {
                        writes.push(Write {
                            user: e.user.username.clone(),
                            content: None,
                        });
                    }
                }
                continue;
            }
            let key = (
                e.namespace().to_string(),
                e.name().to_string(),
                e.subresource().to_string(),
            );
            let content = (e.verb != "delete")
                .then(|| e.response_object.as_ref().map(content))
                .flatten();
            objects.entry(key).or_default().push(Write {
                user: e.user.username.clone(),
                content,
            });
        }
        Writes { objects, conflicts }
    }

    /// Operator writes refused with 409 (each a request sent again after a new decision).
    pub fn conflicts(&self) -> usize {
        self.conflicts
    }

    fn operators(&self) -> impl Iterator<Item = &Write> {
        self.objects.values().flatten().filter(|w| w.by_operator())
    }

    /// The operators' writes.
    pub fn total(&self) -> usize {
        self.operators().count()
    }

    /// Operator writes after which the object held what it held before: a write that changed
    /// nothing, and a copy the operators deleted and created again as it was (the delete and
    /// the create count as one wasted pair).
    pub fn duplicates(&self) -> usize {
        self.objects
            .values()
            .map(|writes| {
                let unchanged = writes
                    .windows(2)
                    .filter(|w| {
                        w[1].by_operator() && w[1].content.is_some() && w[0].content == w[1].content
                    })
                    .count();
                let recreated = writes
                    .windows(3)
                    .filter(|w| {
                        w[0].content.is_some()
                            && w[1].by_operator()
                            && w[1].content.is_none()
                            && w[2].by_operator()
                            && same_but_identity(&w[0].content, &w[2].content)
                    })
                    .count();
                unchanged + recreated
            })
            .sum()
    }

    /// Operator writes to objects `foreign(namespace, name)` says are not kubesync's.
    pub fn to(&self, foreign: impl Fn(&str, &str) -> bool) -> usize {
        self.objects
            .iter()
            .filter(|((ns, name, _), _)| foreign(ns, name))
            .map(|(_, w)| w.iter().filter(|w| w.by_operator()).count())
            .sum()
    }

    /// Objects written by more than one operator identity.
    pub fn by_more_than_one(&self) -> usize {
        self.objects
            .values()
            .filter(|w| {
                w.iter()
                    .filter(|w| w.by_operator())
                    .map(|w| &w.user)
                    .collect::<BTreeSet<_>>()
                    .len()
                    > 1
            })
            .count()
    }

    /// Successful writes by `user`.
    pub fn by(&self, user: &str) -> usize {
        self.operators().filter(|w| w.user == user).count()
    }
}

/// Whether two objects a write left are the same but for what a new object gets anew (its uid
/// and creation time).
fn same_but_identity(a: &Option<Value>, b: &Option<Value>) -> bool {
    let strip = |v: &Option<Value>| {
        v.clone().map(|mut v| {
            if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("uid");
                meta.remove("creationTimestamp");
            }
            v
        })
    };
    strip(a) == strip(b)
}

/// What a write left in an object: everything but the bookkeeping the apiserver changes on
/// every write (resourceVersion, managedFields, generation).
fn content(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["resourceVersion", "managedFields", "generation"] {
            meta.remove(key);
        }
    }
    object
}

/// Makes every ObjectSync of `apps` in `declared` reconcile once more and waits for it: a spec
/// change that changes no copy (one more label to leave out, found on no source), witnessed
/// by its status at the new generation. Work in flight before finishes first (one key is
/// never reconciled twice at once), so its writes are in the audit log after.
pub async fn reconciled_again(client: kube::Client, declared: &[&str]) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static ROUND: AtomicUsize = AtomicUsize::new(0);
    let round = ROUND.fetch_add(1, Ordering::Relaxed);
    let syncs: Api<kubesync_cli::crd::ObjectSync> = Api::namespaced(client, "apps");
    for name in declared {
        let patched = syncs
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({
                    "spec": {"labels": {"exclude": [format!("kubesync-witness-{round}")]}}
                })),
            )
            .await
            .expect("reconcile again");
        let generation = patched.metadata.generation;
        kubesync_testenv::eventually(
            &format!("{name} reconciled at generation {generation:?}"),
            crate::common::T,
            || async {
                let st = syncs.get(name).await.ok()?.status?;
                (st.observed_generation == generation).then_some(())
            },
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(user: &str, verb: &str, code: u16, object: Value) -> AuditEvent {
        serde_json::from_value(serde_json::json!({
            "verb": verb, "user": {"username": user},
            "objectRef": {"resource": "configmaps", "namespace": "a", "name": object["metadata"]["name"]},
            "responseStatus": {"code": code}, "responseObject": object,
        }))
        .expect("event")
    }

    #[test]
    fn duplicates_are_operator_writes_that_changed_nothing() {
        let cm = |v: &str, rv: &str| serde_json::json!({"metadata": {"name": "x", "resourceVersion": rv}, "data": {"v": v}});
        let [a, b] = OPERATORS;
        let events = [
            write(a, "create", 201, cm("1", "1")),
            write(a, "patch", 200, cm("2", "2")),
            // The same content again (another resourceVersion: only managedFields changed).
            write(b, "patch", 200, cm("2", "3")),
            write(a, "patch", 409, cm("3", "3")),
            write(a, "delete", 200, cm("2", "3")),
            // Created again as it was (a new uid): a wasted pair, one duplicate.
            write(a, "create", 201, cm("2", "4")),
            // Someone edits it, and the operator restores what it had written: no duplicate.
            write("someone", "patch", 200, cm("9", "5")),
            write(a, "patch", 200, cm("2", "6")),
        ];
        let writes = Writes::from_events(&events, "configmaps");
        assert_eq!(writes.total(), 6);
        assert_eq!(writes.duplicates(), 2);
        assert_eq!(writes.conflicts(), 1, "the 409 is counted");
        assert_eq!(writes.by_more_than_one(), 1);
        assert_eq!(writes.by(b), 1);
        assert_eq!(writes.to(|_, name| name == "x"), 6);
        assert_eq!(writes.to(|_, name| name == "y"), 0);
    }

    #[test]
    #[should_panic(expected = "carries the object")]
    fn an_audit_entry_without_its_object_is_refused() {
        let mut e = write(
            OPERATORS[0],
            "patch",
            200,
            serde_json::json!({"metadata": {"name": "x"}}),
        );
        e.response_object = None;
        Writes::from_events(&[e], "configmaps");
    }
}
