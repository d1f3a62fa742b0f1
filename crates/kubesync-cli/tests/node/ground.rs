//! The ground the node tests stand on: a control plane with real nodes, kubesync's image
//! imported into each, the chart installed with the values a cluster without a Pod network
//! needs, and readers of what the Pods did (the audit log by Pod, the Lease, the Pods' state).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kubesync_testenv::{AuditEvent, Node, TestEnv};

/// The release and namespace the chart is installed as.
pub const RELEASE: &str = "kubesync";
pub const NS: &str = "kubesync-system";
/// How long a state change on a node may take (Pod start, a Lease hand-over).
pub const T: Duration = Duration::from_secs(90);

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The image archive `make image` builds (or `$KUBESYNC_IMAGE`).
pub fn image_archive() -> PathBuf {
    let path = std::env::var_os("KUBESYNC_IMAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/kubesync-image.tar"));
    assert!(
        path.is_file(),
        "{} is missing: run `make image` (make node-test does)",
        path.display()
    );
    path
}

/// A control plane (audited) with `nodes` nodes, each holding kubesync's image.
pub struct Ground {
    pub env: TestEnv,
    pub nodes: Vec<Node>,
}

impl Ground {
    pub async fn start(name: &str, nodes: usize) -> Ground {
        let mut builder = TestEnv::builder().name(name).audit(true);
        let names: Vec<String> = (0..nodes).map(|i| format!("node-{i}")).collect();
        for n in &names {
            builder = builder.node(n);
        }
        let env = builder.start().await.expect("control plane");
        let mut started = Vec::new();
        for n in &names {
            let node = env.start_node(n).await.expect("node");
            let refs = node
                .import_image(&image_archive())
                .expect("import kubesync's image");
            assert!(
                !refs.is_empty(),
                "{} holds no image",
                image_archive().display()
            );
            started.push(node);
        }
        Ground {
            env,
            nodes: started,
        }
    }

    /// The node a Pod runs on.
    pub fn node_of(&self, pod: &Pod) -> &Node {
        let name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        self.nodes
            .iter()
            .find(|n| Some(n.name()) == name.as_deref())
            .expect("the Pod's node")
    }

    /// The apiserver's port on loopback (what `KUBERNETES_SERVICE_PORT` must say in the Pods).
    pub fn apiserver_port(&self) -> String {
        let server = self.env.server();
        server.rsplit(':').next().expect("port").to_string()
    }

    /// The values a cluster like this one needs (no Pod network: hostNetwork, the apiserver
    /// on loopback, nodes not ready), written to a file; and `more` (YAML) in a second one,
    /// which helm merges over the first.
    pub fn values(&self, more: &str) -> [PathBuf; 2] {
        let port = self.apiserver_port();
        let text = format!(
            "image: {{pullPolicy: Never}}\n\
             hostNetwork: true\n\
             telemetryAddress: \"$(POD_IP):8080\"\n\
             metrics: {{address: \"$(POD_IP):8443\"}}\n\
             extraEnv:\n\
             - {{name: KUBERNETES_SERVICE_HOST, value: 127.0.0.1}}\n\
             - {{name: KUBERNETES_SERVICE_PORT, value: \"{port}\"}}\n\
             tolerations:\n\
             - {{key: node.kubernetes.io/not-ready, operator: Exists}}\n"
        );
        let path = self.env.dir().join("node-values.yaml");
        std::fs::write(&path, text).expect("values");
        let more_path = self.env.dir().join("more-values.yaml");
        std::fs::write(&more_path, format!("{more}\n")).expect("values");
        [path, more_path]
    }

    /// Runs helm on the cluster; its output, or a panic with it.
    pub fn helm(&self, args: &[&str]) -> String {
        let home = self.env.dir().join("helm-home");
        let out = Command::new(kubesync_testenv::helm().expect("helm"))
            .args(args)
            .env(
                "KUBECONFIG",
                self.env.kubeconfig_path().expect("kubeconfig"),
            )
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null())
            .output()
            .expect("run helm");
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "helm {}: {said}", args.join(" "));
        said
    }

    /// `helm install` of this tree's chart with [`Ground::values`] and `more`.
    pub fn install(&self, more: &str) -> String {
        let chart = repo().join("charts/kubesync");
        let [values, more] = self.values(more);
        self.helm(&[
            "install",
            RELEASE,
            chart.to_str().expect("utf-8"),
            "--namespace",
            NS,
            "--create-namespace",
            "--values",
            values.to_str().expect("utf-8"),
            "--values",
            more.to_str().expect("utf-8"),
        ])
    }

    /// Posts one eviction of the chart's Pod `pod` (no retry); whether it was accepted, and
    /// what kubectl said.
    pub fn evict_once(&self, pod: &str) -> (bool, String) {
        let body = self.env.dir().join("eviction.json");
        let eviction = serde_json::json!({
            "apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": pod, "namespace": NS},
        });
        std::fs::write(&body, eviction.to_string()).expect("eviction");
        let out = Command::new(kubesync_testenv::kubectl().expect("kubectl"))
            .arg(format!(
                "--kubeconfig={}",
                self.env.kubeconfig_path().expect("kubeconfig").display()
            ))
            .args([
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{NS}/pods/{pod}/eviction"),
            ])
            .arg("-f")
            .arg(&body)
            .output()
            .expect("kubectl");
        let said = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), said)
    }

    pub fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.env.client().expect("client"), NS)
    }

    /// The chart's Pods.
    pub async fn pods(&self) -> Vec<Pod> {
        let lp = ListParams::default().labels("app.kubernetes.io/name=kubesync");
        self.pods_api()
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
    }

    /// Waits until `n` of the chart's Pods run (none terminating); returns them. On timeout
    /// the panic says each Pod's phase and why its container waits or ended.
    pub async fn running(&self, n: usize) -> Vec<Pod> {
        let deadline = std::time::Instant::now() + T;
        loop {
            let pods = self.pods().await;
            let running: Vec<Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| phase(p) == "Running")
                .cloned()
                .collect();
            if running.len() == n {
                return running;
            }
            if std::time::Instant::now() >= deadline {
                let states: Vec<String> = pods.iter().map(state).collect();
                panic!("timed out after {T:?} waiting for {n} kubesync Pods running: {states:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The leader Lease's holder identity (`<Pod name>-<pid>`), `None` when none holds it;
    /// `Err` if the Lease cannot be read.
    pub async fn holder(&self) -> Result<Option<String>, kube::Error> {
        let leases: Api<Lease> = Api::namespaced(self.env.client().expect("client"), NS);
        let lease = leases.get_opt("kubesync").await?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()))
    }

    /// The Pod holding the leader Lease (its identity is `<Pod name>-<pid>`).
    pub async fn leader(&self) -> Option<String> {
        let holder = self.holder().await.ok()??;
        let pods = self.pods().await;
        pods.into_iter()
            .filter_map(|p| p.metadata.name)
            .find(|name| holder.starts_with(&format!("{name}-")))
    }

    /// The writes (create, update, patch, delete) the audit log holds, by the Pod that sent
    /// them (requests with a Pod's ServiceAccount token).
    pub fn writes_by_pod(&self) -> BTreeMap<String, Vec<AuditEvent>> {
        let mut by = BTreeMap::<String, Vec<AuditEvent>>::new();
        for e in self.env.audit().expect("audit") {
            if is_write(&e)
                && let Some(pod) = e.user.pod_name().map(str::to_string)
            {
                by.entry(pod).or_default().push(e);
            }
        }
        by
    }
}

/// A write request (not a read, not a watch).
pub fn is_write(e: &AuditEvent) -> bool {
    matches!(
        e.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    )
}

/// A Pod's name, phase and its containers' waiting or terminated reason and message.
pub fn state(p: &Pod) -> String {
    let containers = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let why: Vec<String> = containers
        .iter()
        .filter_map(|c| {
            let state = c.state.as_ref()?;
            if let Some(w) = &state.waiting {
                return Some(format!("waiting {:?} {:?}", w.reason, w.message));
            }
            let t = state
                .terminated
                .as_ref()
                .or(c.last_state.as_ref().and_then(|l| l.terminated.as_ref()))?;
            Some(format!(
                "ended {:?} {:?} exit {}",
                t.reason, t.message, t.exit_code
            ))
        })
        .collect();
    format!("{} {} {}", name(p), phase(p), why.join("; "))
}

pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// Whether the Pod's Ready condition is True.
pub fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The restarts of the Pod's container.
pub fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|c| c.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

/// The Pod's IP (its node's address, on hostNetwork).
pub fn pod_ip(p: &Pod) -> std::net::IpAddr {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
        .expect("a Pod IP")
}

pub fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

pub fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// The kubesync process of a Pod, as the runtime started it.
pub fn kubesync_process(ground: &Ground, pod: &Pod) -> u32 {
    let node = ground.node_of(pod);
    node.pod_processes(&uid(pod))
        .into_iter()
        // By its executable: after a fresh start (the fence re-executes /proc/self/exe in
        // place) the process is the same, but its name is `exe`.
        .find(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|p| p == std::path::Path::new("/kubesync"))
        })
        .expect("the kubesync process")
}
