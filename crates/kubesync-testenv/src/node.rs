//! A real node beside a control plane: containerd (with runc) and a kubelet of the control
//! plane's release, on loopback, in a directory and a cgroup of its own; images imported from
//! archives, no registry. See [`TestEnvBuilder::node`](crate::TestEnvBuilder::node).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::api::{Api, Patch, PatchParams};

use crate::binaries::{is_executable, last_line_of};
use crate::host::{self, ConnectionWitness, HostGuard};
use crate::process::Process;
use crate::{Error, TestEnv};

/// The programs of a node, as `scripts/node.sh` builds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeBinaries {
    /// The directory that holds them all.
    pub dir: PathBuf,
    /// The pause (sandbox) image's name, as its archive names it.
    pub pause_image: String,
}

impl NodeBinaries {
    const PROGRAMS: &[&str] = &[
        "kubelet",
        "kube-scheduler",
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "runc",
    ];

    /// The programs in `dir`, if every one is there (with `pause.tar` and `pause.image`).
    pub fn in_dir(dir: &Path) -> Option<Self> {
        let complete = Self::PROGRAMS.iter().all(|p| is_executable(&dir.join(p)))
            && dir.join("pause.tar").is_file();
        let pause_image = std::fs::read_to_string(dir.join("pause.image")).ok()?;
        complete.then(|| Self {
            dir: dir.to_path_buf(),
            pause_image: pause_image.trim().to_string(),
        })
    }

    /// One program's path.
    pub fn program(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// From `KUBESYNC_NODE_ASSETS` when set, else the cache
    /// (`~/.cache/kubesync/node/<release>`), else built by `scripts/node.sh` (the first
    /// build takes 10-20 minutes).
    pub fn locate() -> Result<Self, Error> {
        static BUILD: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
        let _guard = BUILD.lock();
        if let Some(dir) = std::env::var_os("KUBESYNC_NODE_ASSETS").filter(|v| !v.is_empty()) {
            return Self::in_dir(Path::new(&dir)).ok_or_else(|| {
                Error::Binaries(format!(
                    "KUBESYNC_NODE_ASSETS={} lacks one of {:?}, pause.tar or pause.image",
                    Path::new(&dir).display(),
                    Self::PROGRAMS
                ))
            });
        }
        let cached = crate::binaries::cache_root()
            .join("node")
            .join(crate::kubernetes_version());
        if let Some(found) = Self::in_dir(&cached) {
            return Ok(found);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/node.sh");
        eprintln!(
            "kubesync-testenv: node programs of Kubernetes {} missing; running {} (the first \
             build takes 10-20 minutes)",
            crate::kubernetes_version(),
            script.display()
        );
        let dir = last_line_of(&script, &[("K8S_VERSION", crate::kubernetes_version())])?;
        Self::in_dir(&dir).ok_or_else(|| {
            Error::Binaries(format!(
                "{} reported {} but the node's programs are not all there",
                script.display(),
                dir.display()
            ))
        })
    }
}

/// The ports and paths of one node, decided before anything starts.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub name: String,
    pub dir: PathBuf,
    pub cgroup: String,
    /// The node's address: `127.0.0.<2 + n>` for the process's n-th node. Its hostNetwork
    /// Pods get it as their IP, so two of them bind the same port side by side.
    pub address: std::net::Ipv4Addr,
    pub kubelet_port: u16,
    pub healthz_port: u16,
    /// containerd's shim sockets: a directory of its own, as containerd refuses one longer
    /// than 42 characters (`/tmp/kubesync-testenv/<pid>-<n>-s`).
    pub shim_dir: PathBuf,
}

impl Layout {
    fn socket(&self) -> PathBuf {
        self.dir.join("c").join("containerd.sock")
    }
}

/// containerd's configuration (format version 3) for `node`: its state in the node's
/// directory, runc as the runtime, the pause image pinned as the sandbox, no CNI (only
/// hostNetwork Pods run), oom scores clamped to containerd's own (root here may lack
/// `CAP_SYS_RESOURCE`), nothing under `/run/containerd` or `/opt/containerd`.
pub(crate) fn containerd_config(node: &Layout, bins: &NodeBinaries) -> String {
    let d = node.dir.display();
    let sock = node.socket();
    let runtime = bins.program("containerd-shim-runc-v2");
    let runc = bins.program("runc");
    format!(
        r#"version = 3
root = '{d}/c/root'
state = '{d}/c/state'
disabled_plugins = ['io.containerd.nri.v1.nri']

[grpc]
  address = '{sock}'

[ttrpc]
  address = '{sock}.ttrpc'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '{pause}'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        runtime_path = '{runtime}'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '{runc}'
          SystemdCgroup = false
          Root = '{d}/c/runc'
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['{d}/cni/bin']
      conf_dir = '{d}/cni/conf'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
  [plugins.'io.containerd.internal.v1.opt']
    path = '{d}/c/opt'
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '{shims}'
"#,
        shims = node.shim_dir.display(),
        sock = sock.display(),
        pause = bins.pause_image,
        runtime = runtime.display(),
        runc = runc.display(),
    )
}

/// kubelet's configuration for `node`: cgroupfs under the node's cgroup, cgroup v1 allowed,
/// everything it serves on 127.0.0.1, no iptables chains, logs in the node's directory.
pub(crate) fn kubelet_config(node: &Layout, ca_file: &Path) -> String {
    let d = node.dir.display();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: /{cgroup}
containerRuntimeEndpoint: unix://{sock}
address: {address}
port: {port}
healthzBindAddress: {address}
healthzPort: {healthz}
readOnlyPort: 0
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization:
  mode: AlwaysAllow
podLogsDir: {d}/pod-logs
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, nodefs.inodesFree: 1%, imagefs.available: 1%}}
makeIPTablesUtilChains: false
volumePluginDir: {d}/kubelet/volume-plugins
syncFrequency: 10s
fileCheckFrequency: 5s
nodeStatusUpdateFrequency: 5s
"#,
        cgroup = node.cgroup,
        address = node.address,
        sock = node.socket().display(),
        port = node.kubelet_port,
        healthz = node.healthz_port,
        ca = ca_file.display(),
    )
}

/// A running node: containerd and a kubelet registered as a Node of the environment.
/// Dropping it stops both and undoes everything they changed on the machine.
pub struct Node {
    layout: Layout,
    bins: NodeBinaries,
    // Field order: kubelet stops before containerd; the guard restores the machine last.
    kubelet: Option<Process>,
    containerd: Option<Process>,
    _host: HostGuard,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.layout.name)
            .field("dir", &self.layout.dir)
            .finish_non_exhaustive()
    }
}

impl TestEnv {
    /// Starts the node `name` (declared with
    /// [`TestEnvBuilder::node`](crate::TestEnvBuilder::node)): containerd with the pause image
    /// imported, then kubelet; returns when the Node is registered with `127.0.0.1` as its
    /// address. Nodes of other test binaries are waited for (one machine-wide lock).
    pub async fn start_node(&self, name: &str) -> Result<Node, Error> {
        let bins = self.node_binaries.clone().ok_or_else(|| {
            Error::Process(format!(
                "environment {} was built without nodes; declare {name:?} with \
                 TestEnvBuilder::node",
                self.name
            ))
        })?;
        let token = self.user(&format!("system:node:{name}"))?.token.clone();
        let guard = tokio::task::spawn_blocking(HostGuard::enter)
            .await
            .map_err(|e| Error::Process(format!("node lock: {e}")))??;
        let layout = self.node_layout(name)?;
        let mut node = Node {
            layout,
            bins,
            kubelet: None,
            containerd: None,
            _host: guard,
        };
        node.start_containerd().await?;
        node.import_image(&node.bins.dir.join("pause.tar"))?;
        let kubeconfig = crate::kubeconfig::kubeconfig_yaml(&[self.entry(name, &token)]);
        node.start_kubelet(&kubeconfig, &self.dir.join("ca.crt"))
            .await?;
        self.wait_registered(&node).await?;
        Ok(node)
    }

    fn node_layout(&self, name: &str) -> Result<Layout, Error> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = self.dir.join(format!("node-{name}"));
        for sub in ["c", "cni/bin", "cni/conf", "pod-logs", "kubelet"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| Error::Io(format!("mkdir {}", dir.display()), e))?;
        }
        let n = N.fetch_add(1, Ordering::Relaxed);
        // Distinct for every node of this process (nodes of other processes wait for it).
        let address = std::net::Ipv4Addr::new(127, 0, 0, 2 + u8::try_from(n % 250).unwrap_or(0));
        let pid = std::process::id();
        let shim_dir = std::env::temp_dir()
            .join("kubesync-testenv")
            .join(format!("{pid}-{n}-s"));
        std::fs::create_dir_all(&shim_dir)
            .map_err(|e| Error::Io(format!("mkdir {}", shim_dir.display()), e))?;
        Ok(Layout {
            name: name.to_string(),
            dir,
            shim_dir,
            cgroup: format!("{}{pid}-{n}", host::CGROUP_PREFIX),
            address,
            kubelet_port: crate::launch::free_port()?,
            healthz_port: crate::launch::free_port()?,
        })
    }

    /// Waits for the Node object, then sets its addresses to the node's loopback address
    /// alone (kubelet refuses a loopback node IP and would publish none; it never overwrites
    /// them then).
    async fn wait_registered(&self, node: &Node) -> Result<(), Error> {
        let nodes: Api<NodeObject> = Api::all(self.client()?);
        let deadline = Instant::now() + Duration::from_secs(60);
        while nodes.get_opt(node.name()).await?.is_none() {
            if Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "node {} not registered after 60 s:\n{}",
                    node.name(),
                    node.kubelet_log_tail(30)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let patch = serde_json::json!({"status": {"addresses": [
            {"type": "InternalIP", "address": node.layout.address.to_string()}
        ]}});
        nodes
            .patch_status(node.name(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }
}

impl Node {
    /// The Node's name.
    pub fn name(&self) -> &str {
        &self.layout.name
    }

    /// The node's address (a loopback address of its own), its hostNetwork Pods' IP.
    pub fn address(&self) -> std::net::Ipv4Addr {
        self.layout.address
    }

    /// The node's directory (containerd's state, kubelet's root, the Pods' logs).
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }

    async fn start_containerd(&mut self) -> Result<(), Error> {
        host::create_cgroup(&self.layout.cgroup)?;
        let config = self.layout.dir.join("containerd.toml");
        std::fs::write(&config, containerd_config(&self.layout, &self.bins))
            .map_err(|e| Error::Io(format!("write {}", config.display()), e))?;
        let mut p = Process::spawn(
            "containerd",
            &self.bins.program("containerd"),
            &[format!("--config={}", config.display())],
            &self.layout.dir.join("containerd.log"),
        )?;
        host::adopt(&self.layout.cgroup, p.pid())?;
        // Serving is not enough: kubelet needs the CRI plugin, which may fail to load.
        wait_started(&mut p, "containerd", Duration::from_secs(30), |p| {
            let plugins = self.ctr(&["plugins", "ls"]).unwrap_or_default();
            let cri = plugins.lines().find(|l| {
                l.split_whitespace()
                    .take(2)
                    .eq(["io.containerd.grpc.v1", "cri"])
            });
            match cri.and_then(|l| l.split_whitespace().last()) {
                Some("ok") => Ok(true),
                Some(_) => {
                    let log = std::fs::read_to_string(&p.log).unwrap_or_default();
                    let failed: Vec<&str> = log
                        .lines()
                        .filter(|l| l.contains("failed to load plugin"))
                        .collect();
                    Err(Error::Process(format!(
                        "containerd's CRI plugin did not load:\n{}",
                        failed.join("\n")
                    )))
                }
                None => Ok(false),
            }
        })
        .await?;
        self.containerd = Some(p);
        Ok(())
    }

    async fn start_kubelet(&mut self, kubeconfig: &str, ca: &Path) -> Result<(), Error> {
        let d = &self.layout.dir;
        let write = |name: &str, text: &str| {
            let p = d.join(name);
            std::fs::write(&p, text)
                .map_err(|e| Error::Io(format!("write {}", p.display()), e))
                .map(|()| p)
        };
        let config = write("kubelet.yaml", &kubelet_config(&self.layout, ca))?;
        let kubeconfig = write("kubelet.kubeconfig", kubeconfig)?;
        let args = vec![
            format!("--config={}", config.display()),
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--root-dir={}", d.join("kubelet").display()),
            format!("--cert-dir={}", d.join("kubelet-pki").display()),
            format!("--hostname-override={}", self.layout.name),
            format!("--node-ip={}", self.layout.address),
            "--v=1".into(),
        ];
        let mut p = Process::spawn(
            "kubelet",
            &self.bins.program("kubelet"),
            &args,
            &d.join("kubelet.log"),
        )?;
        host::adopt(&self.layout.cgroup, p.pid())?;
        let (address, port) = (self.layout.address, self.layout.healthz_port);
        wait_started(&mut p, "kubelet", Duration::from_secs(60), |_| {
            Ok(healthz(address, port))
        })
        .await?;
        self.kubelet = Some(p);
        Ok(())
    }

    /// Runs `ctr` against this node's containerd (namespace `k8s.io`, kubelet's); its stdout.
    pub fn ctr(&self, args: &[&str]) -> Result<String, Error> {
        let out = Command::new(self.bins.program("ctr"))
            .arg(format!("--address={}", self.layout.socket().display()))
            .args(["--namespace", "k8s.io"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Io("run ctr".into(), e))?;
        if !out.status.success() {
            return Err(Error::Process(format!(
                "ctr {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Imports an image archive (OCI or Docker format) into the node's containerd; the
    /// images it holds are then there for Pods with `imagePullPolicy: Never`/`IfNotPresent`.
    /// An image named as a Pod names it (`kubesync:0.2.0`) is also tagged with the full
    /// reference kubelet looks it up by (`docker.io/library/kubesync:0.2.0`). Returns the
    /// references of the images it added.
    pub fn import_image(&self, archive: &Path) -> Result<Vec<String>, Error> {
        let before = self.images()?;
        self.ctr(&["images", "import", &archive.display().to_string()])?;
        let names: Vec<String> = self
            .images()?
            .into_iter()
            .filter(|n| !before.contains(n))
            .collect();
        let mut refs = Vec::new();
        for name in names {
            let full = full_reference(&name);
            if full != name {
                let _ = self.ctr(&["images", "rm", &full]);
                self.ctr(&["images", "tag", &name, &full])?;
            }
            refs.push(full);
        }
        Ok(refs)
    }

    /// The names of the images the node holds.
    pub fn images(&self) -> Result<Vec<String>, Error> {
        Ok(self
            .ctr(&["images", "list", "--quiet"])?
            .lines()
            .map(str::to_string)
            .collect())
    }

    /// The last `lines` lines of kubelet's log.
    pub fn kubelet_log_tail(&self, lines: usize) -> String {
        self.kubelet
            .as_ref()
            .map(|k| k.log_tail(lines))
            .unwrap_or_default()
    }

    /// The cgroup of the Pod with this uid, in `hierarchy` (`memory`, `freezer`, …; ignored
    /// on cgroup v2), whatever its QoS class.
    pub fn pod_cgroup(&self, uid: &str, hierarchy: &str) -> Option<PathBuf> {
        let root = match Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            true => PathBuf::from("/sys/fs/cgroup"),
            false => Path::new("/sys/fs/cgroup").join(hierarchy),
        };
        let kubepods = root.join(&self.layout.cgroup).join("kubepods");
        let pod = format!("pod{uid}");
        [
            kubepods.join(&pod),
            kubepods.join("burstable").join(&pod),
            kubepods.join("besteffort").join(&pod),
        ]
        .into_iter()
        .find(|p| p.is_dir())
    }

    /// The processes of the Pod with this uid (its sandbox's pause and its containers').
    pub fn pod_processes(&self, uid: &str) -> Vec<u32> {
        let Some(dir) = self.pod_cgroup(uid, "pids") else {
            return Vec::new();
        };
        let mut pids = Vec::new();
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            pids.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(e.path());
                }
            }
        }
        pids
    }

    /// Freezes (`true`) or thaws the Pod with this uid, as a stalled machine would: its
    /// processes get no CPU and notice nothing.
    pub fn freeze_pod(&self, uid: &str, frozen: bool) -> Result<(), Error> {
        let dir = self
            .pod_cgroup(uid, "freezer")
            .ok_or_else(|| Error::Process(format!("no cgroup of Pod {uid} on {}", self.name())))?;
        let (file, value) = match dir.join("freezer.state").exists() {
            true => ("freezer.state", if frozen { "FROZEN" } else { "THAWED" }),
            false => ("cgroup.freeze", if frozen { "1" } else { "0" }),
        };
        std::fs::write(dir.join(file), value)
            .map_err(|e| Error::Io(format!("write {}", dir.join(file).display()), e))
    }

    /// The most memory the Pod with this uid has used since it started, in bytes, as its
    /// cgroup counts it (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`).
    pub fn pod_memory_peak(&self, uid: &str) -> Result<u64, Error> {
        let dir = self
            .pod_cgroup(uid, "memory")
            .ok_or_else(|| Error::Process(format!("no cgroup of Pod {uid} on {}", self.name())))?;
        ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| Error::Process(format!("no memory peak in {}", dir.display())))
    }

    /// A witness of the TCP connections this node's containers open (see
    /// [`ConnectionWitness`]), sampling until dropped.
    pub fn connection_witness(&self) -> ConnectionWitness {
        ConnectionWitness::start(self.layout.cgroup.clone())
    }

    /// Stops kubelet, then containerd, and undoes what they left: containers and shims
    /// killed, mounts under the node's directory unmounted, its cgroups removed.
    pub fn stop(&mut self) {
        for p in [self.kubelet.take(), self.containerd.take()]
            .into_iter()
            .flatten()
        {
            let mut p = p;
            p.stop(Duration::from_secs(10));
        }
        host::clean(&self.layout.cgroup, &self.layout.dir);
        let _ = std::fs::remove_dir_all(&self.layout.shim_dir);
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An image name as the container runtime normalises it: `kubesync:1` is
/// `docker.io/library/kubesync:1`, `org/app:1` is `docker.io/org/app:1`; a name whose first
/// part is a host (`localhost/…`, `registry.example:5000/…`) stays.
pub(crate) fn full_reference(name: &str) -> String {
    match name.split_once('/') {
        None => format!("docker.io/library/{name}"),
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            name.to_string()
        }
        Some(_) => format!("docker.io/{name}"),
    }
}

/// Waits until `ready` says the started process `p` serves (`Err`: it never will), failing
/// with the tail of its log when it exits or `timeout` passes first.
async fn wait_started(
    p: &mut Process,
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut(&Process) -> Result<bool, Error>,
) -> Result<(), Error> {
    let deadline = Instant::now() + timeout;
    while !ready(p)? {
        if let Some(status) = p.exited() {
            return Err(Error::Process(format!(
                "{what} exited ({status}):\n{}",
                p.log_tail(30)
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout(format!(
                "{what} not serving after {timeout:?}:\n{}",
                p.log_tail(30)
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Whether kubelet's `/healthz` on `address`:`port` answers `ok`.
fn healthz(address: std::net::Ipv4Addr, port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect((address, port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.") && answer.contains(" 200 ") && answer.ends_with("ok")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            name: "node-a".into(),
            dir: PathBuf::from("/tmp/kubesync-testenv/1-0-x/node-node-a"),
            cgroup: "kubesync-node-1-0".into(),
            address: std::net::Ipv4Addr::new(127, 0, 0, 3),
            kubelet_port: 20250,
            healthz_port: 20248,
            shim_dir: PathBuf::from("/tmp/kubesync-testenv/1-0-s"),
        }
    }

    #[test]
    fn containerd_keeps_its_state_in_the_nodes_directory() {
        let bins = NodeBinaries {
            dir: PathBuf::from("/cache/node/v1.37.2"),
            pause_image: "localhost/kubesync/pause:3.10.2".into(),
        };
        let config = containerd_config(&layout(), &bins);
        assert!(config.contains("socket_dir = '/tmp/kubesync-testenv/1-0-s'\n"));
        for path in ["root = '", "state = '", "Root = '", "path = '"] {
            let line = config
                .lines()
                .find(|l| l.trim_start().starts_with(path))
                .unwrap_or_else(|| panic!("{path} in {config}"));
            assert!(
                line.contains("/tmp/kubesync-testenv/1-0-x/node-node-a/"),
                "{line}"
            );
        }
        assert!(config.contains("sandbox = 'localhost/kubesync/pause:3.10.2'"));
        assert!(config.contains("restrict_oom_score_adj = true"));
        assert!(config.contains("BinaryName = '/cache/node/v1.37.2/runc'"));
    }

    #[test]
    fn image_names_are_normalised_as_kubelet_looks_them_up() {
        assert_eq!(
            full_reference("kubesync:0.2.0"),
            "docker.io/library/kubesync:0.2.0"
        );
        assert_eq!(full_reference("org/app:1"), "docker.io/org/app:1");
        assert_eq!(
            full_reference("localhost/kubesync/pause:3.10.2"),
            "localhost/kubesync/pause:3.10.2"
        );
        assert_eq!(full_reference("r.example:5000/a:1"), "r.example:5000/a:1");
    }

    #[test]
    fn kubelet_serves_on_loopback_under_the_nodes_cgroup() {
        let config = kubelet_config(&layout(), Path::new("/env/ca.crt"));
        assert!(config.contains("cgroupRoot: /kubesync-node-1-0\n"));
        assert!(config.contains("address: 127.0.0.3\nport: 20250\n"));
        assert!(config.contains("healthzPort: 20248\n"));
        assert!(config.contains("failCgroupV1: false\n"));
        assert!(config.contains("readOnlyPort: 0\n"));
        assert!(config.contains("makeIPTablesUtilChains: false\n"));
    }
}
