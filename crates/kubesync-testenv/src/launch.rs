//! Starting an environment: its directory and files, free ports, and the etcd,
//! kube-apiserver and kube-controller-manager processes with their readiness checks.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::process::{self, Process};
use crate::users::{random_token, token_file};
use crate::{Binaries, Error, TestEnv, TestEnvBuilder, certs};

impl TestEnv {
    /// Starts the processes of `builder`'s environment and waits until they are ready.
    pub(crate) async fn launch(
        builder: TestEnvBuilder,
        binaries: Binaries,
        node_binaries: Option<crate::NodeBinaries>,
    ) -> Result<TestEnv, Error> {
        let started = Instant::now();
        let dir = make_dir(&builder.name)?;
        let certs = certs::Certs::generate(&builder.name)?;
        let files = Files::write(&dir, &certs, &builder)?;

        let etcd_port = free_port()?;
        let etcd_peer_port = free_port()?;
        let api_port = free_port()?;
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let etcd_args = etcd_args(&dir, &etcd_url, etcd_peer_port);
        let etcd = Process::spawn("etcd", &binaries.etcd, &etcd_args, &dir.join("etcd.log"))?;

        let mut apiserver_args = apiserver_args(&dir, &etcd_url, api_port, &files);
        if node_binaries.is_some() {
            with_nodes(&mut apiserver_args);
        }
        if builder.audit {
            let policy = crate::audit::policy(builder.audit_also);
            let policy = write(&dir, "audit-policy.yaml", &policy)?;
            apiserver_args.extend([
                format!("--audit-policy-file={}", policy.display()),
                format!("--audit-log-path={}", dir.join(crate::audit::LOG).display()),
                "--audit-log-mode=blocking".into(),
            ]);
        }
        apiserver_args.extend(builder.apiserver_args.iter().cloned());
        let mut env = TestEnv {
            name: builder.name.clone(),
            dir: dir.clone(),
            server: format!("https://127.0.0.1:{api_port}"),
            etcd_url: etcd_url.clone(),
            ca_pem: certs.ca_pem.clone(),
            admin_token: files.admin_token.clone(),
            users: builder.users.clone(),
            controller_manager: None,
            apiserver: None,
            etcd: Some(etcd),
            apiserver_args,
            binaries,
            node_binaries,
            scheduler: None,
            keep_dir: std::env::var_os("KUBESYNC_TESTENV_KEEP").is_some(),
        };
        env.start_apiserver(builder.startup_timeout).await?;

        if builder.controller_manager {
            env.start_controller_manager(builder.all_controllers, &files)
                .await?;
        }
        if env.node_binaries.is_some() {
            env.start_scheduler().await?;
        }
        tracing::info!(
            cluster = %env.name,
            server = %env.server,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "control plane ready"
        );
        Ok(env)
    }

    /// Spawns kube-controller-manager (every controller, or only those the tests rely on)
    /// and checks that it has not exited at once.
    async fn start_controller_manager(
        &mut self,
        all_controllers: bool,
        files: &Files,
    ) -> Result<(), Error> {
        let kubeconfig = write(
            &self.dir,
            "controller-manager.kubeconfig",
            &self.kubeconfig_yaml(),
        )?;
        let args: Vec<String> =
            vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            match all_controllers {
                true => "--controllers=*".into(),
                false => {
                    "--controllers=namespace,garbagecollector,serviceaccount,serviceaccount-token"
                        .into()
                }
            },
            "--leader-elect=false".into(),
            "--secure-port=0".into(),
            format!("--service-account-private-key-file={}", files.sa_key.display()),
            format!("--root-ca-file={}", files.ca.display()),
            "--use-service-account-credentials=false".into(),
            "--concurrent-namespace-syncs=5".into(),
            // Else it creates /usr/libexec/kubernetes/kubelet-plugins/volume/exec.
            format!("--flex-volume-plugin-dir={}", self.dir.join("flex").display()),
            "--namespace-sync-period=10s".into(),
            "--v=1".into(),
        ];
        let cm_bin = self
            .binaries
            .kube_controller_manager
            .clone()
            .ok_or_else(|| Error::Binaries("kube-controller-manager missing".into()))?;
        let mut cm = Process::spawn(
            "kube-controller-manager",
            &cm_bin,
            &args,
            &self.dir.join("kube-controller-manager.log"),
        )?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(status) = cm.exited() {
            return Err(Error::Process(format!(
                "kube-controller-manager exited ({status}):\n{}",
                cm.log_tail(30)
            )));
        }
        self.controller_manager = Some(cm);
        Ok(())
    }

    /// Spawns kube-scheduler (of the node programs' release) as the admin, serving its health
    /// on a free loopback port, and checks that it has not exited at once.
    async fn start_scheduler(&mut self) -> Result<(), Error> {
        let kubeconfig = write(&self.dir, "scheduler.kubeconfig", &self.kubeconfig_yaml())?;
        let program = self
            .node_binaries
            .as_ref()
            .map(|b| b.program("kube-scheduler"))
            .ok_or_else(|| Error::Binaries("kube-scheduler missing".into()))?;
        let k = kubeconfig.display();
        let args = vec![
            format!("--kubeconfig={k}"),
            format!("--authentication-kubeconfig={k}"),
            format!("--authorization-kubeconfig={k}"),
            "--leader-elect=false".into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", free_port()?),
            format!("--cert-dir={}", self.dir.join("scheduler-certs").display()),
            "--v=1".into(),
        ];
        let mut s = Process::spawn(
            "kube-scheduler",
            &program,
            &args,
            &self.dir.join("kube-scheduler.log"),
        )?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Some(status) = s.exited() {
            return Err(Error::Process(format!(
                "kube-scheduler exited ({status}):\n{}",
                s.log_tail(30)
            )));
        }
        self.scheduler = Some(s);
        Ok(())
    }

    /// Spawns kube-apiserver with the environment's arguments and waits until it is ready.
    pub(crate) async fn start_apiserver(&mut self, timeout: Duration) -> Result<(), Error> {
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
}

/// The files an environment's processes read, written into its directory, and the admin's
/// token.
struct Files {
    ca: PathBuf,
    tls_crt: PathBuf,
    tls_key: PathBuf,
    sa_key: PathBuf,
    sa_pub: PathBuf,
    token_file: PathBuf,
    admin_token: String,
}

impl Files {
    /// Writes the CA, the apiserver's serving pair, the service-account key pair and the
    /// token file (a new admin token, and `builder`'s users) into `dir`.
    fn write(dir: &Path, certs: &certs::Certs, builder: &TestEnvBuilder) -> Result<Files, Error> {
        let ca = write(dir, "ca.crt", &certs.ca_pem)?;
        let tls_crt = write(dir, "apiserver.crt", &certs.serving_cert_pem)?;
        let tls_key = write(dir, "apiserver.key", &certs.serving_key_pem)?;
        let sa_key = write(dir, "sa.key", &certs.service_account_key_pem)?;
        let sa_pub = write(dir, "sa.pub", &certs.service_account_pub_pem)?;
        let admin_token = random_token();
        let token_file = write(dir, "tokens.csv", &token_file(&admin_token, &builder.users))?;
        Ok(Files {
            ca,
            tls_crt,
            tls_key,
            sa_key,
            sa_pub,
            token_file,
            admin_token,
        })
    }
}

/// Writes `text` into `file` in `dir`; the file's path.
fn write(dir: &Path, file: &str, text: &str) -> Result<PathBuf, Error> {
    let p = dir.join(file);
    std::fs::write(&p, text).map_err(|e| Error::Io(format!("write {}", p.display()), e))?;
    Ok(p)
}

/// The arguments of a single-member etcd serving clients at `etcd_url` and its peer at
/// `peer_port`, its data in `dir`.
fn etcd_args(dir: &Path, etcd_url: &str, peer_port: u16) -> Vec<String> {
    vec![
        "--name=default".into(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
        format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
        "--log-level=warn".into(),
        "--logger=zap".into(),
    ]
}

/// The arguments of kube-apiserver on `api_port`, on the etcd at `etcd_url`, with `files`
/// (before the audit arguments and the builder's own).
fn apiserver_args(dir: &Path, etcd_url: &str, api_port: u16, files: &Files) -> Vec<String> {
    vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        // The `kubernetes` Service's endpoints would be this loopback address, which
        // current releases refuse; nothing here reaches the apiserver through that Service.
        "--endpoint-reconciler-type=none".into(),
        format!("--secure-port={api_port}"),
        format!("--cert-dir={}", dir.join("certs").display()),
        format!("--tls-cert-file={}", files.tls_crt.display()),
        format!("--tls-private-key-file={}", files.tls_key.display()),
        format!("--client-ca-file={}", files.ca.display()),
        format!("--token-auth-file={}", files.token_file.display()),
        "--authorization-mode=RBAC".into(),
        format!("--service-account-key-file={}", files.sa_pub.display()),
        format!(
            "--service-account-signing-key-file={}",
            files.sa_key.display()
        ),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--allow-privileged=true".into(),
        "--disable-admission-plugins=ServiceAccount".into(),
        "--enable-priority-and-fairness=false".into(),
        "--profiling=false".into(),
        "--v=1".into(),
    ]
}

/// kube-apiserver's arguments changed for a cluster with nodes: kubelets authorized as nodes
/// (the Node authorizer, NodeRestriction), Pods given their ServiceAccount's token.
fn with_nodes(args: &mut [String]) {
    for a in args.iter_mut() {
        if a == "--authorization-mode=RBAC" {
            *a = "--authorization-mode=Node,RBAC".into();
        } else if a == "--disable-admission-plugins=ServiceAccount" {
            *a = "--enable-admission-plugins=NodeRestriction".into();
        }
    }
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    let mut req = http::Request::new(Vec::new());
    *req.uri_mut() = path.parse().unwrap_or_default();
    req
}

/// A free loopback port, never handed out twice in this process.
pub(crate) fn free_port() -> Result<u16, Error> {
    static USED: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut used = USED.lock();
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
