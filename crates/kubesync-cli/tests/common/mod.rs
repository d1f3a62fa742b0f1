//! Helpers shared by the operator's integration tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use kubesync::Cluster;
use kubesync_cli::crd::Condition;
use kubesync_cli::operator::{Operator, OperatorOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod helm;
#[allow(unused_imports)]
pub use helm::Helm;

/// How long a test waits for a state (with `kubesync_testenv::eventually`).
pub const T: Duration = Duration::from_secs(40);

/// Status and reason of the `Ready` condition.
pub fn ready_condition(conditions: &[Condition]) -> Option<(String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// The `Ready` condition of an ObjectSync, once it is not `Starting`: (status, reason, message).
pub async fn verdict(
    syncs: &kube::Api<kubesync_cli::crd::ObjectSync>,
    name: &str,
) -> (String, String, String) {
    kubesync_testenv::eventually(&format!("{name}'s verdict"), T, || async {
        let os = syncs.get_opt(name).await.ok()??;
        let c = os
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready" && c.reason != "Starting")?;
        Some((c.status, c.reason, c.message))
    })
    .await
}

/// An RBAC rule: `verbs` on `resources` of `groups`, only on `names` when any are given.
pub fn rule(
    groups: &[&str],
    resources: &[&str],
    verbs: &[&str],
    names: &[&str],
) -> k8s_openapi::api::rbac::v1::PolicyRule {
    let strings = |v: &[&str]| Some(v.iter().map(|s| s.to_string()).collect());
    k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: strings(groups),
        resources: strings(resources),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        resource_names: (!names.is_empty()).then(|| strings(names)).flatten(),
        ..Default::default()
    }
}

/// A proxy in front of `env`'s apiserver (to cut a client off: [`kubesync_testenv::Proxy::block`]).
pub async fn proxy_to(env: &kubesync_testenv::TestEnv) -> kubesync_testenv::Proxy {
    let server: std::net::SocketAddr = env
        .server()
        .trim_start_matches("https://")
        .parse()
        .expect("apiserver address");
    kubesync_testenv::Proxy::start(server).await.expect("proxy")
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`, …) to the process `pid`.
pub fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal}");
}

/// An operator running in the background of a test.
pub struct RunningOperator {
    pub operator: Arc<Operator>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<kubesync::Result<()>>,
}

/// An operator on `env` whose trusted namespaces are `trusted` (globs), defaults otherwise.
pub fn start_trusting(env: &kubesync_testenv::TestEnv, trusted: &[&str]) -> RunningOperator {
    start_operator(
        Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: trusted.iter().map(|t| t.to_string()).collect(),
                ..Default::default()
            },
            ..Default::default()
        },
    )
}

impl RunningOperator {
    /// Asserts that no reconcile of the operator panicked (its failures by category).
    pub fn assert_no_panic(&self) {
        let failures = self
            .operator
            .context()
            .expect("running")
            .metrics()
            .failures_by_category();
        assert_eq!(failures.get("Panic"), None, "{failures:?}");
    }
}

/// Whether a condition's message is written for people: no Rust `Debug` dump (`Some(`,
/// `Status {`), at most 1 KiB.
pub fn for_people(message: &str) -> bool {
    !message.contains("Some(") && !message.contains("Status {") && message.len() <= 1024
}

/// Runs an operator on `local` with a 1 s status refresh and the given options otherwise.
pub fn start_operator(local: Cluster, options: OperatorOptions) -> RunningOperator {
    let operator = Operator::with_options(
        local,
        OperatorOptions {
            status_refresh: Duration::from_secs(1),
            ..options
        },
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(operator.clone().run(async {
        let _ = stopped.await;
    }));
    RunningOperator {
        operator,
        stop,
        task,
    }
}

impl RunningOperator {
    /// Signals shutdown and waits (at most 30 s) for the operator to return successfully.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("stops")
            .expect("join")
            .expect("run");
    }
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Sends one request and returns (status code, body); `None` if nothing listens yet.
pub async fn request(port: u16, method: &str, path: &str) -> Option<(u16, String)> {
    request_at(std::net::Ipv4Addr::LOCALHOST.into(), port, method, path).await
}

/// [`request`] to `host` (a loopback address: a node's Pod).
pub async fn request_at(
    host: std::net::IpAddr,
    port: u16,
    method: &str,
    path: &str,
) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    let head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

/// The value of the first sample line that starts with `series`.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// The `kubesync` binary the tests run: this build's, or the one `$KUBESYNC_TEST_BINARY`
/// names (to run a test against another build, e.g. the one before a fix, and see it fail).
pub fn binary() -> std::path::PathBuf {
    std::env::var_os("KUBESYNC_TEST_BINARY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_kubesync").into())
}

/// `kubesync run` on `kubeconfig`, its probes and `/metrics` (plain HTTP) on `port`, with `args`
/// more (logs at `warn`, to the test's output).
pub fn operator_command(
    kubeconfig: &std::path::Path,
    port: u16,
    args: &[&str],
) -> std::process::Command {
    let mut command = std::process::Command::new(binary());
    command
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
        .args(["--metrics-address", &format!("127.0.0.1:{port}")])
        .arg("--metrics-insecure")
        .args(args)
        .env("RUST_LOG", "warn");
    command
}

/// Whether resourceVersion `seen` is `at` or newer (both as the apiserver writes them:
/// decimal numbers; anything else compares equal only to itself).
fn at_or_after(seen: &str, at: &str) -> bool {
    match (seen.parse::<u64>(), at.parse::<u64>()) {
        (Ok(s), Ok(a)) => s >= a,
        _ => seen == at,
    }
}

/// Waits (at most [`T`]) for a reconcile of `key` that began on a store showing its object at
/// `resource_version` or newer, and ended: a witness that *this* object was decided on after
/// a change, which no other key's reconcile can stand in for.
pub async fn reconciled_at(
    ctx: &kubesync::runtime::Context,
    key: &kubesync::ObjectKey,
    resource_version: &str,
) -> kubesync::runtime::LastReconcile {
    kubesync_testenv::eventually(
        &format!("a reconcile of {key} at {resource_version}"),
        T,
        || async {
            ctx.metrics()
                .last_reconcile(key)
                .filter(|r| at_or_after(&r.resource_version, resource_version))
        },
    )
    .await
}

/// Waits (at most [`T`]) until `ctx`'s stores show `object` at `resource_version` or newer
/// (a change the test made), then enqueues `key` and waits until a reconcile of it began after
/// that and finished: a reconcile that decided on a store showing the change — the ordered
/// witness that the change was judged, before a test asserts what it did (or did not) lead
/// to. (The change's own event may have started one before the stores were looked at; the
/// enqueue makes sure one starts after.)
pub async fn reconciled_after_seeing(
    ctx: &kubesync::runtime::Context,
    object: &kubesync::ObjectKey,
    resource_version: &str,
    key: &kubesync::ObjectKey,
) -> kubesync::runtime::LastReconcile {
    kubesync_testenv::eventually(
        &format!("{object} at {resource_version} in the stores"),
        T,
        || async {
            ctx.get_metadata(object)
                .and_then(|o| o.metadata.resource_version.clone())
                .filter(|rv| at_or_after(rv, resource_version))
        },
    )
    .await;
    let seen = std::time::Instant::now();
    ctx.enqueue(key.clone());
    kubesync_testenv::eventually(
        &format!("a reconcile of {key} after {object} at {resource_version}"),
        T,
        || async {
            ctx.metrics()
                .last_reconcile(key)
                .filter(|r| r.started >= seen)
        },
    )
    .await
}

/// Waits (at most [`T`]) until the log at `path` (a binary's, at `debug` for the runtime's
/// controller) shows a finished reconcile of `key` (as its `Display` writes it) that began
/// on a store showing its object at `resource_version` or newer: the binary's witness of
/// *this* object's reconcile.
pub async fn reconciled_in_log(path: &std::path::Path, key: &str, resource_version: &str) {
    let span = format!("key={key}}}");
    kubesync_testenv::eventually(
        &format!("a logged reconcile of {key} at {resource_version}"),
        T,
        || async {
            let log = std::fs::read_to_string(path).ok()?;
            log.lines()
                .filter(|l| l.contains(&span) && l.contains(" reconciled "))
                .filter_map(|l| l.split("resource_version=").nth(1))
                .map(|rest| rest.trim_matches(|c: char| c == '"' || c.is_whitespace()))
                .map(|rv| {
                    rv.split(|c: char| c == '"' || c.is_whitespace())
                        .next()
                        .unwrap_or(rv)
                })
                .any(|rv| at_or_after(rv, resource_version))
                .then_some(())
        },
    )
    .await;
}

#[test]
fn a_resource_version_witness_compares_as_the_apiserver_counts() {
    assert!(at_or_after("12", "9"), "numbers, not text");
    assert!(at_or_after("9", "9"));
    assert!(!at_or_after("8", "9"));
    assert!(!at_or_after("x", "9"));
}

/// A `kubesync` process, killed when the test ends, however it ends.
pub struct RunningBinary(pub std::process::Child);

/// `kubesync run` on `env`, its probes on `port`, `/metrics` off, with `args` more.
pub fn run_binary(env: &kubesync_testenv::TestEnv, port: u16, args: &[&str]) -> RunningBinary {
    RunningBinary(
        std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(env.kubeconfig_path().expect("kubeconfig"))
            .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
            .args(["--metrics-address", "none"])
            .args(args)
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("run kubesync"),
    )
}

impl Drop for RunningBinary {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A control plane with kubesync's CRDs installed and these namespaces created.
pub async fn operator_cluster(
    name: &str,
    with_controller_manager: bool,
    namespaces: &[&str],
) -> kubesync_testenv::TestEnv {
    operator_cluster_from(
        kubesync_testenv::TestEnv::builder()
            .name(name)
            .with_controller_manager(with_controller_manager),
        namespaces,
    )
    .await
}

/// Like [`operator_cluster`], for a control plane configured by `builder` (users, …).
pub async fn operator_cluster_from(
    builder: kubesync_testenv::TestEnvBuilder,
    namespaces: &[&str],
) -> kubesync_testenv::TestEnv {
    let env = builder.start().await.expect("start");
    env.install_crds(&kubesync_cli::crd::crds_yaml().expect("crds"))
        .await
        .expect("crds");
    install_service_account_policy(&env, "").await;
    for ns in namespaces {
        env.create_namespace(ns).await.expect("ns");
    }
    env
}

/// The admission policy of `config/admission`, as installed.
pub const SERVICE_ACCOUNT_POLICY: &str =
    include_str!("../../../../config/admission/service_account_use.yaml");

/// Installs (or updates) the admission policy of `config/admission` on `env`, with
/// `default_service_account` as the operator's default ('' for none), as an admin does with
/// the install: whoever creates an ObjectSync acting as a ServiceAccount must be allowed to use it.
pub async fn install_service_account_policy(
    env: &kubesync_testenv::TestEnv,
    default_service_account: &str,
) {
    let yaml = SERVICE_ACCOUNT_POLICY.replace(
        "- name: defaultServiceAccount\n    expression: \"''\"",
        &format!("- name: defaultServiceAccount\n    expression: \"'{default_service_account}'\""),
    );
    assert!(
        default_service_account.is_empty() || yaml != SERVICE_ACCOUNT_POLICY,
        "the policy's defaultServiceAccount variable moved"
    );
    env.apply_yaml(&yaml).await.expect("the admission policy");
}

/// The record policy of `config/admission`, as installed.
pub const RECORD_POLICY: &str = include_str!("../../../../config/admission/record_writers.yaml");

/// Installs the record policy of `config/admission` on `env`, naming `operator` as the user
/// the operator runs as (the only one that may change `status.record`; installed, the policy
/// admits every ServiceAccount of the operator's namespace).
pub async fn install_record_policy(env: &kubesync_testenv::TestEnv, operator: &str) {
    let yaml = RECORD_POLICY.replace(
        "'system:serviceaccount:kubesync-system:'",
        &format!("'{operator}'"),
    );
    assert!(
        yaml != RECORD_POLICY,
        "the policy's operator variable moved"
    );
    env.apply_yaml(&yaml).await.expect("the record policy");
}

/// The admission policy of `config/compat`, as installed.
pub const COMPAT_SERVICE_ACCOUNT_POLICY: &str =
    include_str!("../../../../config/compat/compat_service_account_use.yaml");

/// Installs the admission policy of `config/compat` on `env`, with `default_service_account`
/// as the operator's default, as an admin does with `--compat`: whoever writes a copier's
/// declaring annotation outside the trusted namespaces must be allowed to use that default.
pub async fn install_compat_policy(env: &kubesync_testenv::TestEnv, default_service_account: &str) {
    let yaml = COMPAT_SERVICE_ACCOUNT_POLICY.replace(
        "- name: defaultServiceAccount\n    expression: \"''\"",
        &format!("- name: defaultServiceAccount\n    expression: \"'{default_service_account}'\""),
    );
    assert!(
        yaml != COMPAT_SERVICE_ACCOUNT_POLICY,
        "the policy's defaultServiceAccount variable moved"
    );
    env.apply_yaml(&yaml)
        .await
        .expect("the compat admission policy");
}

/// Makes `remote` reachable from `local` as the RemoteCluster `name`: its kubeconfig in the
/// Secret `<name>-kubeconfig` of `namespace` (which must exist), and the RemoteCluster.
pub async fn add_remote_cluster(
    local: &kubesync_testenv::TestEnv,
    remote: &kubesync_testenv::TestEnv,
    name: &str,
    namespace: &str,
) {
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-kubeconfig"), "namespace": namespace},
        "stringData": {"kubeconfig": remote.kubeconfig_yaml()}
    }))
    .expect("secret");
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        local.client().expect("client"),
        namespace,
    )
    .create(&Default::default(), &secret)
    .await
    .expect("kubeconfig secret");
    local
        .apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: RemoteCluster\nmetadata: {{name: {name}}}\nspec:\n  kubeconfigSecretRef: {{namespace: {namespace}, name: {name}-kubeconfig}}\n"))
        .await
        .expect("RemoteCluster");
}

/// Waits (at most [`T`]) for an `events.k8s.io` Event in `namespace` of `env` that `matches`.
pub async fn event_where(
    env: &kubesync_testenv::TestEnv,
    namespace: &str,
    what: &str,
    matches: impl Fn(&k8s_openapi::api::events::v1::Event) -> bool,
) -> k8s_openapi::api::events::v1::Event {
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(env.client().expect("client"), namespace);
    let matches = &matches;
    kubesync_testenv::eventually(what, T, || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(matches)
    })
    .await
}

/// `kubectl kustomize config/<overlay>` of this repository: the objects as they are installed,
/// as JSON values (one per object).
pub fn kustomize(overlay: &str) -> Vec<serde_json::Value> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../config")
        .join(overlay);
    let out = std::process::Command::new(kubesync_testenv::kubectl().expect("kubectl"))
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize config/{overlay}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    serde_saphyr::from_multiple::<serde_json::Value>(&text).expect("YAML documents")
}

/// Runs the test ground's kubectl as `env`'s admin; panics with its output on failure.
pub fn kubectl(env: &kubesync_testenv::TestEnv, args: &[&str]) -> String {
    let admin = env.kubeconfig_path().expect("admin kubeconfig");
    let out = std::process::Command::new(kubesync_testenv::kubectl().expect("kubectl"))
        .arg(format!("--kubeconfig={}", admin.display()))
        .args(args)
        .output()
        .expect("run kubectl");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl {}: {text}", args.join(" "));
    text
}

/// A kubeconfig file (`file` in `env`'s directory) authenticating as the installed operator's
/// ServiceAccount, `kubesync-system/kubesync`, with a token from the TokenRequest API (current
/// Kubernetes creates no token Secrets).
pub async fn service_account_kubeconfig(
    env: &kubesync_testenv::TestEnv,
    file: &str,
) -> std::path::PathBuf {
    kubeconfig_of_account(env, "kubesync", None, file).await
}

/// A kubeconfig file (`file` in `env`'s directory) authenticating as the ServiceAccount
/// `kubesync-system/<account>` (a token from the TokenRequest API), for the apiserver at
/// `server` (`None`: `env`'s own; a [`kubesync_testenv::Proxy`]'s URL to go through it).
#[allow(dead_code)]
pub async fn kubeconfig_of_account(
    env: &kubesync_testenv::TestEnv,
    account: &str,
    server: Option<&str>,
    file: &str,
) -> std::path::PathBuf {
    let token = service_account_token(env, "kubesync-system", account).await;
    let user = format!("system:serviceaccount:kubesync-system:{account}");
    let yaml = kubesync_testenv::kubeconfig_yaml(&[kubesync_testenv::KubeconfigEntry {
        context: env.name(),
        server: server.unwrap_or(env.server()),
        ca_pem: env.ca_pem(),
        user: &user,
        token: &token,
    }]);
    let path = env.dir().join(file);
    std::fs::write(&path, yaml).expect("write kubeconfig");
    path
}

/// Waits (at most 60 s) until every CRD of `env` is established.
pub fn crds_established(env: &kubesync_testenv::TestEnv) {
    kubectl(
        env,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "customresourcedefinitions",
            "--all",
        ],
    );
}

/// Applies `config/<overlay>` as a user would (`kubectl apply --server-side -k`) and waits for
/// its CRDs; returns what kubectl said. It takes over what the test ground applied of the
/// same objects (`--force-conflicts`: the admission policy, on a control plane made with
/// [`operator_cluster`]).
pub fn apply_overlay(env: &kubesync_testenv::TestEnv, overlay: &str) -> String {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../config")
        .join(overlay);
    let applied = kubectl(
        env,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-k",
            dir.to_str().expect("utf-8 path"),
        ],
    );
    crds_established(env);
    applied
}

/// Installs `config/<overlay>` ([`apply_overlay`]) and binds every role it binds to its ServiceAccount `kubesync-system/kubesync`
/// to the ServiceAccounts `accounts` (made here) as well, exactly so: each replica of a test
/// runs with the install's own RBAC, under a name of its own in the audit log.
#[allow(dead_code)]
pub async fn install_for_accounts(
    env: &kubesync_testenv::TestEnv,
    overlay: &str,
    accounts: &[&str],
) {
    apply_overlay(env, overlay);
    for account in accounts {
        env.apply_yaml(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {account}, namespace: kubesync-system}}\n"
        ))
        .await
        .expect("service account");
    }
    let installed = serde_json::json!({"kind": "ServiceAccount", "name": "kubesync", "namespace": "kubesync-system"});
    let mut bound = 0;
    for mut object in kustomize(overlay) {
        if !matches!(
            object["kind"].as_str(),
            Some("ClusterRoleBinding" | "RoleBinding")
        ) {
            continue;
        }
        let Some(subjects) = object["subjects"].as_array_mut() else {
            continue;
        };
        if !subjects.contains(&installed) {
            continue;
        }
        for account in accounts {
            subjects.push(serde_json::json!({"kind": "ServiceAccount", "name": account, "namespace": "kubesync-system"}));
        }
        env.apply_yaml(&object.to_string()).await.expect("binding");
        bound += 1;
    }
    assert!(
        bound > 0,
        "config/{overlay} binds nothing to its ServiceAccount"
    );
}

/// A token of the ServiceAccount `namespace/name` from the TokenRequest API (valid one hour).
pub async fn service_account_token(
    env: &kubesync_testenv::TestEnv,
    namespace: &str,
    name: &str,
) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use kube::api::{Api, PostParams};
    let client = env.client().expect("client");
    kubesync_testenv::eventually(&format!("a token of {namespace}/{name}"), T, || {
        let accounts = Api::<ServiceAccount>::namespaced(client.clone(), namespace);
        async move {
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..Default::default()
                }),
                ..Default::default()
            };
            let answer = accounts
                .create_token_request(name, &PostParams::default(), &request)
                .await
                .ok()?;
            answer.status?.token
        }
    })
    .await
}

/// Tokens of two ServiceAccounts in namespace `monitoring` (made here): `prometheus`, bound
/// to the ClusterRole `kubesync-metrics-reader` (which must exist), and `nosy`, bound to
/// nothing. Returns (reader's token, nosy's token).
pub async fn metrics_tokens(env: &kubesync_testenv::TestEnv) -> (String, String) {
    env.apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: monitoring}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: prometheus, namespace: monitoring}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: nosy, namespace: monitoring}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: prometheus-kubesync-metrics}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kubesync-metrics-reader}\nsubjects: [{kind: ServiceAccount, name: prometheus, namespace: monitoring}]\n",
    )
    .await
    .expect("the scrapers' ServiceAccounts");
    (
        service_account_token(env, "monitoring", "prometheus").await,
        service_account_token(env, "monitoring", "nosy").await,
    )
}

/// Accepts any server certificate: for the operator's self-signed metrics certificate, whose
/// trust is not what a test checks (the bearer token is).
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &rustls_pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// GET `path` over HTTPS on loopback `port`, with `token` as the bearer token; returns
/// (status code, body), `None` if nothing listens or TLS fails. `ca_pem`: trust only this CA
/// and check the name `server_name`; `None`: accept any certificate.
pub async fn request_tls(
    port: u16,
    path: &str,
    token: Option<&str>,
    ca_pem: Option<(&str, &str)>,
) -> Option<(u16, String)> {
    request_tls_to(
        std::net::Ipv4Addr::LOCALHOST.into(),
        port,
        path,
        token,
        ca_pem,
    )
    .await
}

/// [`request_tls`] to `host` (a loopback address: a node's Pod).
pub async fn request_tls_to(
    host: std::net::IpAddr,
    port: u16,
    path: &str,
    token: Option<&str>,
    ca_pem: Option<(&str, &str)>,
) -> Option<(u16, String)> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("protocols");
    let (config, name) = match ca_pem {
        Some((pem, name)) => {
            use rustls_pki_types::pem::PemObject;
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.expect("CA PEM")).expect("CA");
            }
            (
                builder.with_root_certificates(roots).with_no_client_auth(),
                name.to_string(),
            )
        }
        None => (
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth(),
            "localhost".to_string(),
        ),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    let name = rustls_pki_types::ServerName::try_from(name).ok()?;
    let mut stream = connector.connect(name, tcp).await.ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let head = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}\r\n");
    stream.write_all(head.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    // The server closes the connection after the response (a TLS peer may skip close_notify).
    let _ = stream.read_to_end(&mut response).await;
    let response = String::from_utf8_lossy(&response);
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

/// The ServiceAccount (of their own namespace) that untrusted ObjectSyncs act as in the tests
/// that start the operator with `--default-service-account copier`.
pub const COPIER: &str = "copier";

/// The user name of the ServiceAccount `copier` of `namespace`.
pub fn copier(namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:{COPIER}")
}

/// Lets the ServiceAccount `copier` of `namespace` read `resources` (plurals) of `group` there:
/// the sources its ObjectSyncs copy.
pub async fn let_copier_read(
    env: &kubesync_testenv::TestEnv,
    namespace: &str,
    group: &str,
    resources: &[&str],
) {
    let rule = k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: ["get", "list", "watch"].map(String::from).to_vec(),
        ..Default::default()
    };
    let name = format!("read-{}", if group.is_empty() { "core" } else { group });
    env.grant(&copier(namespace), Some(namespace), &name, vec![rule])
        .await
        .expect("grant the copier");
}

/// What a namespace's admin grants a tenant's copier where its copies may go: ConfigMaps and
/// Secrets of each of `namespaces` (read, and write) for the ServiceAccount `copier` of
/// `from`, as a Role and RoleBinding there.
pub async fn let_copier_write(env: &kubesync_testenv::TestEnv, from: &str, namespaces: &[&str]) {
    let rule = k8s_openapi::api::rbac::v1::PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec!["configmaps".into(), "secrets".into()]),
        verbs: [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    };
    for ns in namespaces {
        env.grant(&copier(from), Some(ns), "copier", vec![rule.clone()])
            .await
            .expect("grant the copier");
    }
}
