//! Real Kubernetes control planes for tests, examples and demos.
//!
//! A [`TestEnv`] is one cluster: `etcd` + `kube-apiserver` (+ optionally
//! `kube-controller-manager`, running the namespace, garbage-collector and service-account
//! controllers) started as local processes on free loopback ports, in a temporary directory,
//! with a certificate authority and an admin token of its own. Several environments can run
//! side by side in one process; each is stopped and its directory removed when it is dropped,
//! and no process outlives the test binary (see [`process`](crate::process) for how).
//!
//! The binaries come from `KUBEBUILDER_ASSETS` when set, otherwise from the project's cache
//! (`~/.cache/kubesync/control-plane/v1.20.2`), which `scripts/control-plane.sh` fills on first
//! use by building Kubernetes v1.20.2 from Debian's source package.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubesync_testenv::Error> {
//! use kubesync_testenv::TestEnv;
//!
//! let env = TestEnv::builder()
//!     .name("mgmt")
//!     .with_controller_manager(true)
//!     .user("alice", &[])
//!     .start()
//!     .await?;
//! let client = env.client()?;
//! env.create_namespace("team-a").await?;
//! let alice = env.client_as("alice")?; // denied everything until granted
//! # let _ = (client, alice);
//! # Ok(()) }
//! ```
#![deny(unsafe_code)]

mod binaries;
mod certs;
mod process;

use std::collections::{BTreeMap, HashSet};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Client, Config, ResourceExt};

pub use binaries::{Binaries, KUBERNETES_VERSION, cache_dir};

/// Manifests for tests and demos.
pub mod fixtures {
    /// A namespaced demo CRD `widgets.demo.kubesync.io/v1` with spec, a status subresource
    /// and printer columns; any fields are allowed in spec and status.
    pub const WIDGET_CRD: &str = include_str!("../fixtures/widget-crd.yaml");
}

use process::Process;

/// Errors of the test environment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control-plane binaries could not be found or built.
    #[error("control-plane binaries: {0}")]
    Binaries(String),
    /// Certificate generation failed.
    #[error("certificates: {0}")]
    Certificates(String),
    /// A file-system or process operation failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// A control-plane process failed to start or become ready.
    #[error("{0}")]
    Process(String),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be built or parsed.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// A YAML document given to a helper is invalid.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// A wait ran out of time.
    #[error("timed out: {0}")]
    Timeout(String),
}

/// A user known to the apiserver through its static token file.
#[derive(Clone, Debug)]
struct User {
    name: String,
    token: String,
    groups: Vec<String>,
}

/// Builder for a [`TestEnv`]; see [`TestEnv::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct TestEnvBuilder {
    name: String,
    controller_manager: bool,
    users: Vec<User>,
    binaries: Option<Binaries>,
    startup_timeout: Duration,
}

impl TestEnvBuilder {
    /// The cluster's name: used for the kubeconfig context, cluster and user entries.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Also run `kube-controller-manager` (namespace, garbage-collector and service-account
    /// controllers), so that namespace deletion and ownerReference cascades really happen.
    pub fn with_controller_manager(mut self, enabled: bool) -> Self {
        self.controller_manager = enabled;
        self
    }

    /// Adds a user authenticated by a generated bearer token, member of `groups`. The user has
    /// no permissions until granted (see [`TestEnv::grant`]).
    pub fn user(self, name: impl Into<String>, groups: &[&str]) -> Self {
        let token = random_token();
        self.user_with_token(name, token, groups)
    }

    /// Adds a user authenticated by the given bearer token.
    pub fn user_with_token(
        mut self,
        name: impl Into<String>,
        token: impl Into<String>,
        groups: &[&str],
    ) -> Self {
        self.users.push(User {
            name: name.into(),
            token: token.into(),
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
        });
        self
    }

    /// Uses these binaries instead of locating them.
    pub fn binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    /// How long to wait for the apiserver to become ready (default 60 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Starts the environment and waits until the apiserver is ready.
    pub async fn start(self) -> Result<TestEnv, Error> {
        let binaries = match self.binaries.clone() {
            Some(b) => b,
            None => tokio::task::spawn_blocking(Binaries::locate)
                .await
                .map_err(|e| Error::Process(format!("binary lookup panicked: {e}")))??,
        };
        if self.controller_manager && binaries.kube_controller_manager.is_none() {
            return Err(Error::Binaries(
                "kube-controller-manager was requested but is not in KUBEBUILDER_ASSETS (envtest \
                 assets do not ship it) nor in the cache; run `make control-plane` to build it"
                    .into(),
            ));
        }
        TestEnv::launch(self, binaries).await
    }

    /// Starts the environment from synchronous code, on a private runtime thread.
    pub fn start_blocking(self) -> Result<TestEnv, Error> {
        std::thread::scope(|s| {
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::Io("build a tokio runtime".into(), e))?;
                rt.block_on(self.start())
            })
            .join()
            .map_err(|_| Error::Process("environment start panicked".into()))?
        })
    }
}

/// One running control plane. Dropping it stops the processes and removes its directory.
pub struct TestEnv {
    name: String,
    dir: PathBuf,
    server: String,
    ca_pem: String,
    admin_token: String,
    users: Vec<User>,
    // Field order matters: the controller manager and apiserver stop before etcd.
    controller_manager: Option<Process>,
    apiserver: Option<Process>,
    etcd: Option<Process>,
    apiserver_args: Vec<String>,
    binaries: Binaries,
    keep_dir: bool,
}

impl std::fmt::Debug for TestEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEnv")
            .field("name", &self.name)
            .field("server", &self.server)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl TestEnv {
    /// A builder with the name `"kubesync-test"`, no controller manager and no extra users.
    pub fn builder() -> TestEnvBuilder {
        TestEnvBuilder {
            name: "kubesync-test".into(),
            controller_manager: false,
            users: Vec::new(),
            binaries: None,
            startup_timeout: Duration::from_secs(60),
        }
    }

    /// A process-wide environment shared by all tests of one test binary, started on first
    /// use. Tests sharing it should isolate themselves by namespace. Its processes end with
    /// the test binary; its directory is removed by the next environment started afterwards.
    ///
    /// Call [`TestEnv::client`] inside each test to get a client bound to that test's runtime.
    pub fn shared(name: &str, with_controller_manager: bool) -> Result<&'static TestEnv, Error> {
        static SHARED: OnceLock<Mutex<BTreeMap<String, &'static TestEnv>>> = OnceLock::new();
        let map = SHARED.get_or_init(|| Mutex::new(BTreeMap::new()));
        let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(env) = map.get(name) {
            return Ok(env);
        }
        let env = TestEnv::builder()
            .name(name)
            .with_controller_manager(with_controller_manager)
            .start_blocking()?;
        let env: &'static TestEnv = Box::leak(Box::new(env));
        map.insert(name.to_string(), env);
        Ok(env)
    }

    async fn launch(builder: TestEnvBuilder, binaries: Binaries) -> Result<TestEnv, Error> {
        let started = Instant::now();
        let dir = make_dir(&builder.name)?;
        let certs = certs::Certs::generate(&builder.name)?;
        let write = |file: &str, text: &str| -> Result<PathBuf, Error> {
            let p = dir.join(file);
            std::fs::write(&p, text).map_err(|e| Error::Io(format!("write {}", p.display()), e))?;
            Ok(p)
        };
        let ca = write("ca.crt", &certs.ca_pem)?;
        let tls_crt = write("apiserver.crt", &certs.serving_cert_pem)?;
        let tls_key = write("apiserver.key", &certs.serving_key_pem)?;
        let sa_key = write("sa.key", &certs.service_account_key_pem)?;
        let sa_pub = write("sa.pub", &certs.service_account_pub_pem)?;
        let admin_token = random_token();
        let mut tokens = format!("{admin_token},admin,admin,\"system:masters\"\n");
        for u in &builder.users {
            tokens.push_str(&format!(
                "{},{},{},\"{}\"\n",
                u.token,
                u.name,
                u.name,
                u.groups.join(",")
            ));
        }
        let token_file = write("tokens.csv", &tokens)?;

        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let api_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd_args: Vec<String> = vec![
            "--name=default".into(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{etcd_peer_port}"),
            "--log-level=warn".into(),
            "--logger=zap".into(),
        ];
        let etcd = Process::spawn("etcd", &binaries.etcd, &etcd_args, &dir.join("etcd.log"))?;

        let apiserver_args: Vec<String> = vec![
            format!("--etcd-servers={etcd_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={api_port}"),
            "--insecure-port=0".into(),
            format!("--cert-dir={}", dir.join("certs").display()),
            format!("--tls-cert-file={}", tls_crt.display()),
            format!("--tls-private-key-file={}", tls_key.display()),
            format!("--client-ca-file={}", ca.display()),
            format!("--token-auth-file={}", token_file.display()),
            "--authorization-mode=RBAC".into(),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            "--disable-admission-plugins=ServiceAccount".into(),
            "--enable-priority-and-fairness=false".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        let mut env = TestEnv {
            name: builder.name.clone(),
            dir: dir.clone(),
            server: format!("https://127.0.0.1:{api_port}"),
            ca_pem: certs.ca_pem.clone(),
            admin_token,
            users: builder.users.clone(),
            controller_manager: None,
            apiserver: None,
            etcd: Some(etcd),
            apiserver_args,
            binaries,
            keep_dir: std::env::var_os("KUBESYNC_TESTENV_KEEP").is_some(),
        };
        env.start_apiserver(builder.startup_timeout).await?;

        if builder.controller_manager {
            let kubeconfig = write("controller-manager.kubeconfig", &env.kubeconfig_yaml())?;
            let args: Vec<String> = vec![
                format!("--kubeconfig={}", kubeconfig.display()),
                "--controllers=namespace,garbagecollector,serviceaccount,serviceaccount-token"
                    .into(),
                "--leader-elect=false".into(),
                "--port=0".into(),
                "--secure-port=0".into(),
                format!("--service-account-private-key-file={}", sa_key.display()),
                format!("--root-ca-file={}", ca.display()),
                "--use-service-account-credentials=false".into(),
                "--concurrent-namespace-syncs=5".into(),
                "--namespace-sync-period=10s".into(),
                "--v=1".into(),
            ];
            let cm_bin = env
                .binaries
                .kube_controller_manager
                .clone()
                .ok_or_else(|| Error::Binaries("kube-controller-manager missing".into()))?;
            let mut cm = Process::spawn(
                "kube-controller-manager",
                &cm_bin,
                &args,
                &dir.join("kube-controller-manager.log"),
            )?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            if let Some(status) = cm.exited() {
                return Err(Error::Process(format!(
                    "kube-controller-manager exited ({status}):\n{}",
                    cm.log_tail(30)
                )));
            }
            env.controller_manager = Some(cm);
        }
        tracing::info!(
            cluster = %env.name,
            server = %env.server,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "control plane ready"
        );
        Ok(env)
    }

    async fn start_apiserver(&mut self, timeout: Duration) -> Result<(), Error> {
        let mut api = Process::spawn(
            "kube-apiserver",
            &self.binaries.kube_apiserver,
            &self.apiserver_args,
            &self.dir.join("kube-apiserver.log"),
        )?;
        let client = self.client()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = api.exited() {
                let etcd_tail = self
                    .etcd
                    .as_ref()
                    .map(|e| e.log_tail(10))
                    .unwrap_or_default();
                return Err(Error::Process(format!(
                    "kube-apiserver exited ({status}):\n{}\n--- etcd:\n{etcd_tail}",
                    api.log_tail(30)
                )));
            }
            let addr = self.server.trim_start_matches("https://").to_string();
            if tokio::net::TcpStream::connect(&addr).await.is_err() {
                if Instant::now() > deadline {
                    return Err(Error::Timeout(format!(
                        "kube-apiserver not listening after {timeout:?}:\n{}",
                        api.log_tail(30)
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            // Poll quietly: the client logs every 5xx at ERROR level, and /readyz answers 500
            // until the post-start hooks are done. So first wait for /version and for the
            // objects the bootstrap hooks create (404 until then), and only then ask /readyz.
            let mut ready = true;
            for path in [
                "/version",
                "/api/v1/namespaces/default",
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/cluster-admin",
                "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical",
            ] {
                if client.request_text(http_get(path)).await.is_err() {
                    ready = false;
                    break;
                }
            }
            if ready
                && let Ok(text) = client.request_text(http_get("/readyz")).await
                && text.trim() == "ok"
            {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "kube-apiserver not ready after {timeout:?}:\n{}",
                    api.log_tail(30)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.apiserver = Some(api);
        Ok(())
    }

    /// The cluster's name (its kubeconfig context name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The environment's directory (certificates, logs, etcd data).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The PEM of the environment's certificate authority.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The admin's bearer token (member of `system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The process ids of the running control-plane processes.
    pub fn pids(&self) -> Vec<u32> {
        [&self.etcd, &self.apiserver, &self.controller_manager]
            .into_iter()
            .flatten()
            .map(Process::pid)
            .collect()
    }

    /// A kubeconfig (YAML) for the admin, with one context named after the cluster.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&[KubeconfigEntry {
            context: &self.name,
            server: &self.server,
            ca_pem: &self.ca_pem,
            user: "admin",
            token: &self.admin_token,
        }])
    }

    /// A kubeconfig (YAML) for a user added with [`TestEnvBuilder::user`].
    pub fn kubeconfig_yaml_as(&self, user: &str) -> Result<String, Error> {
        let u = self.user(user)?;
        Ok(kubeconfig_yaml(&[KubeconfigEntry {
            context: &self.name,
            server: &self.server,
            ca_pem: &self.ca_pem,
            user: &u.name,
            token: &u.token,
        }]))
    }

    /// The admin kubeconfig, parsed.
    pub fn kubeconfig(&self) -> Result<Kubeconfig, Error> {
        Kubeconfig::from_yaml(&self.kubeconfig_yaml()).map_err(|e| Error::Kubeconfig(e.to_string()))
    }

    /// Writes the admin kubeconfig into the environment's directory and returns its path.
    pub fn kubeconfig_path(&self) -> Result<PathBuf, Error> {
        let path = self.dir.join("admin.kubeconfig");
        std::fs::write(&path, self.kubeconfig_yaml())
            .map_err(|e| Error::Io(format!("write {}", path.display()), e))?;
        Ok(path)
    }

    /// A `kube::Config` for the admin.
    pub fn config(&self) -> Result<Config, Error> {
        self.config_for_token(&self.admin_token)
    }

    fn config_for_token(&self, token: &str) -> Result<Config, Error> {
        let yaml = kubeconfig_yaml(&[KubeconfigEntry {
            context: &self.name,
            server: &self.server,
            ca_pem: &self.ca_pem,
            user: "user",
            token,
        }]);
        let kc = Kubeconfig::from_yaml(&yaml).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        config_from_kubeconfig(kc, &self.name)
    }

    /// A new admin client. Clients are bound to the tokio runtime they are created in, so
    /// create one per test (this is cheap).
    pub fn client(&self) -> Result<Client, Error> {
        Ok(Client::try_from(self.config()?)?)
    }

    /// A new client authenticated as `user` (see [`TestEnvBuilder::user`]).
    pub fn client_as(&self, user: &str) -> Result<Client, Error> {
        let token = self.user(user)?.token.clone();
        Ok(Client::try_from(self.config_for_token(&token)?)?)
    }

    fn user(&self, name: &str) -> Result<&User, Error> {
        self.users.iter().find(|u| u.name == name).ok_or_else(|| {
            Error::Kubeconfig(format!(
                "no user {name:?} in environment {}; add it with TestEnvBuilder::user",
                self.name
            ))
        })
    }

    /// Creates a namespace (succeeds if it already exists).
    pub async fn create_namespace(&self, name: &str) -> Result<(), Error> {
        let api: Api<Namespace> = Api::all(self.client()?);
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Grants `user` the given rules: in `namespace` (a Role and RoleBinding) or cluster-wide
    /// (`None`: a ClusterRole and ClusterRoleBinding). The objects are named
    /// `kubesync-testenv:<user>:<role_name>`.
    pub async fn grant(
        &self,
        user: &str,
        namespace: Option<&str>,
        role_name: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<(), Error> {
        let client = self.client()?;
        let name = format!("kubesync-testenv:{user}:{role_name}");
        let pp = PatchParams::apply("kubesync-testenv").force();
        let meta = |ns: Option<&str>| kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: ns.map(str::to_string),
            ..Default::default()
        };
        let subjects = Some(vec![Subject {
            kind: "User".into(),
            name: user.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        }]);
        match namespace {
            Some(ns) => {
                let role = Role {
                    metadata: meta(Some(ns)),
                    rules: Some(rules),
                };
                let binding = RoleBinding {
                    metadata: meta(Some(ns)),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: name.clone(),
                    },
                    subjects,
                };
                Api::<Role>::namespaced(client.clone(), ns)
                    .patch(&name, &pp, &Patch::Apply(&with_type(&role, "Role")?))
                    .await?;
                Api::<RoleBinding>::namespaced(client, ns)
                    .patch(
                        &name,
                        &pp,
                        &Patch::Apply(&with_type(&binding, "RoleBinding")?),
                    )
                    .await?;
            }
            None => {
                let role = ClusterRole {
                    metadata: meta(None),
                    rules: Some(rules),
                    aggregation_rule: None,
                };
                let binding = ClusterRoleBinding {
                    metadata: meta(None),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: name.clone(),
                    },
                    subjects,
                };
                Api::<ClusterRole>::all(client.clone())
                    .patch(&name, &pp, &Patch::Apply(&with_type(&role, "ClusterRole")?))
                    .await?;
                Api::<ClusterRoleBinding>::all(client)
                    .patch(
                        &name,
                        &pp,
                        &Patch::Apply(&with_type(&binding, "ClusterRoleBinding")?),
                    )
                    .await?;
            }
        }
        Ok(())
    }

    /// Applies every document of a multi-document YAML manifest with server-side apply (field
    /// manager `kubesync-testenv`), resolving each kind through discovery. Returns the applied
    /// objects.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
        let client = self.client()?;
        let mut applied = Vec::new();
        for doc in split_yaml(yaml) {
            let value: serde_json::Value =
                serde_saphyr_value(doc).map_err(|e| Error::Manifest(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            let obj: DynamicObject = serde_json::from_value(value.clone())
                .map_err(|e| Error::Manifest(format!("not a Kubernetes object: {e}")))?;
            let types = obj
                .types
                .clone()
                .ok_or_else(|| Error::Manifest("a document lacks apiVersion/kind".into()))?;
            let gvk = GroupVersionKind::try_from(&types)
                .map_err(|e| Error::Manifest(format!("bad apiVersion: {e}")))?;
            let (ar, caps) = kube::discovery::pinned_kind(&client, &gvk).await?;
            let name = obj.name_any();
            let api: Api<DynamicObject> = match (&caps.scope, obj.namespace()) {
                (kube::discovery::Scope::Namespaced, Some(ns)) => {
                    Api::namespaced_with(client.clone(), &ns, &ar)
                }
                (kube::discovery::Scope::Namespaced, None) => {
                    Api::default_namespaced_with(client.clone(), &ar)
                }
                (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
            };
            let pp = PatchParams::apply("kubesync-testenv").force();
            applied.push(api.patch(&name, &pp, &Patch::Apply(&value)).await?);
        }
        Ok(applied)
    }

    /// Applies CustomResourceDefinitions from YAML and waits until each is `Established`.
    pub async fn install_crds(&self, yaml: &str) -> Result<(), Error> {
        let applied = self.apply_yaml(yaml).await?;
        let api: Api<CustomResourceDefinition> = Api::all(self.client()?);
        let deadline = Instant::now() + Duration::from_secs(30);
        for obj in applied {
            if obj.types.as_ref().map(|t| t.kind.as_str()) != Some("CustomResourceDefinition") {
                continue;
            }
            let name = obj.name_any();
            loop {
                let crd = api.get(&name).await?;
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                if established {
                    break;
                }
                if Instant::now() > deadline {
                    return Err(Error::Timeout(format!(
                        "CRD {name} not Established after 30s"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Stops the apiserver (etcd keeps running), to simulate an unreachable cluster.
    pub fn stop_apiserver(&mut self) {
        if let Some(mut api) = self.apiserver.take() {
            api.stop(Duration::from_secs(5));
        }
    }

    /// Starts the apiserver again on the same port after [`TestEnv::stop_apiserver`].
    pub async fn restart_apiserver(&mut self) -> Result<(), Error> {
        if self.apiserver.is_some() {
            return Ok(());
        }
        self.start_apiserver(Duration::from_secs(60)).await
    }

    /// Stops every process now and removes the directory (also done on drop).
    pub fn stop(&mut self) {
        for p in [
            self.controller_manager.take(),
            self.apiserver.take(),
            self.etcd.take(),
        ]
        .into_iter()
        .flatten()
        {
            let mut p = p;
            p.stop(Duration::from_secs(2));
            tracing::debug!(process = p.name, "stopped");
        }
        if !self.keep_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One context of a kubeconfig written by [`kubeconfig_yaml`].
#[derive(Clone, Copy, Debug)]
pub struct KubeconfigEntry<'a> {
    /// Context (and cluster) name.
    pub context: &'a str,
    /// Server URL.
    pub server: &'a str,
    /// The server's CA certificate, PEM.
    pub ca_pem: &'a str,
    /// User entry name (made unique per context).
    pub user: &'a str,
    /// Bearer token.
    pub token: &'a str,
}

/// Builds a kubeconfig with one context per entry; the first is the current context.
pub fn kubeconfig_yaml(entries: &[KubeconfigEntry<'_>]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut clusters = String::new();
    let mut users = String::new();
    let mut contexts = String::new();
    for e in entries {
        let user = format!("{}@{}", e.user, e.context);
        clusters.push_str(&format!(
            "- name: {ctx}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n",
            ctx = e.context,
            server = e.server,
            ca = b64.encode(e.ca_pem)
        ));
        users.push_str(&format!(
            "- name: {user}\n  user:\n    token: {}\n",
            e.token
        ));
        contexts.push_str(&format!(
            "- name: {ctx}\n  context:\n    cluster: {ctx}\n    user: {user}\n",
            ctx = e.context
        ));
    }
    let current = entries.first().map(|e| e.context).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: {current}\nclusters:\n{clusters}users:\n{users}contexts:\n{contexts}"
    )
}

/// A kubeconfig (YAML) with the admin context of each environment.
pub fn merged_kubeconfig(envs: &[&TestEnv]) -> String {
    let entries: Vec<KubeconfigEntry<'_>> = envs
        .iter()
        .map(|e| KubeconfigEntry {
            context: &e.name,
            server: &e.server,
            ca_pem: &e.ca_pem,
            user: "admin",
            token: &e.admin_token,
        })
        .collect();
    kubeconfig_yaml(&entries)
}

fn config_from_kubeconfig(kc: Kubeconfig, context: &str) -> Result<Config, Error> {
    let opts = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    // `from_custom_kubeconfig` is async only because of exec plugins; with static tokens it
    // completes immediately, so drive it on the spot.
    futures::executor::block_on(Config::from_custom_kubeconfig(kc, &opts))
        .map_err(|e| Error::Kubeconfig(e.to_string()))
}

fn with_type<T: serde::Serialize>(obj: &T, kind: &str) -> Result<serde_json::Value, Error> {
    let mut v = serde_json::to_value(obj).map_err(|e| Error::Manifest(e.to_string()))?;
    v["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
    v["kind"] = kind.into();
    Ok(v)
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    let mut req = http::Request::new(Vec::new());
    *req.uri_mut() = path.parse().unwrap_or_default();
    req
}

fn serde_saphyr_value(doc: &str) -> Result<serde_json::Value, String> {
    serde_saphyr::from_str::<serde_json::Value>(doc).map_err(|e| e.to_string())
}

fn split_yaml(yaml: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in yaml.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(&yaml[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&yaml[start..]);
    docs.into_iter().filter(|d| !d.trim().is_empty()).collect()
}

fn random_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

/// A free loopback port, never handed out twice in this process.
fn free_port() -> Result<u16, Error> {
    static USED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut used = USED.lock().unwrap_or_else(|e| e.into_inner());
    let used = used.get_or_insert_with(HashSet::new);
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| Error::Io("bind a loopback port".into(), e))?;
        let port = l
            .local_addr()
            .map_err(|e| Error::Io("read a loopback port".into(), e))?
            .port();
        if used.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::Process("no free loopback port".into()))
}

/// Creates `<tmp>/kubesync-testenv/<pid>-<n>-<name>`, after removing directories left behind
/// by processes that no longer exist.
fn make_dir(name: &str) -> Result<PathBuf, Error> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let base = std::env::temp_dir().join("kubesync-testenv");
    if let Ok(entries) = std::fs::read_dir(&base) {
        for entry in entries.flatten() {
            let stale = entry
                .file_name()
                .to_str()
                .and_then(|n| n.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !process::alive(pid));
            if stale {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let dir = base.join(format!(
        "{}-{}-{safe}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Error::Io(format!("mkdir {}", dir.display()), e))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_yaml_documents() {
        let docs = split_yaml("a: 1\n---\nb: 2\n---\n\n---\nc: 3\n");
        assert_eq!(docs, vec!["a: 1\n", "b: 2\n", "c: 3\n"]);
    }

    #[test]
    fn kubeconfig_has_one_context_per_entry() {
        let yaml = kubeconfig_yaml(&[
            KubeconfigEntry {
                context: "a",
                server: "https://127.0.0.1:1",
                ca_pem: "x",
                user: "admin",
                token: "t1",
            },
            KubeconfigEntry {
                context: "b",
                server: "https://127.0.0.1:2",
                ca_pem: "y",
                user: "admin",
                token: "t2",
            },
        ]);
        let kc = Kubeconfig::from_yaml(&yaml).expect("parses");
        assert_eq!(kc.current_context.as_deref(), Some("a"));
        let names: Vec<_> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(kc.auth_infos.len(), 2);
    }
}
