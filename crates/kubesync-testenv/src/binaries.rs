//! Locating (and, when needed, building) the control-plane binaries.

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Error;

/// The newest Kubernetes release the project pins and tests: the default test ground, and the
/// newest release the client crates (k8s-openapi's `latest`) describe.
pub const NEWEST_KUBERNETES: &str = "v1.37.2";

/// The oldest Kubernetes release the project supports and tests (`make test-oldest`): the
/// release line of k8s-openapi's `earliest`.
pub const OLDEST_KUBERNETES: &str = "v1.33.13";

/// The Kubernetes release whose binaries this process uses: `$K8S_VERSION` when set, else
/// [`NEWEST_KUBERNETES`]. (With `KUBEBUILDER_ASSETS`, what the apiserver reports is what those
/// assets are; [`TestEnv::server_version`](crate::TestEnv::server_version) asks it.)
pub fn kubernetes_version() -> String {
    std::env::var("K8S_VERSION")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| NEWEST_KUBERNETES.to_string())
}

/// Paths of the control-plane executables used by a [`TestEnv`](crate::TestEnv).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binaries {
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `kube-controller-manager`, when one was found.
    pub kube_controller_manager: Option<PathBuf>,
    /// `kubectl` of the same release, when one was found (tests use it rather than whatever
    /// kubectl a machine may have on its PATH).
    pub kubectl: Option<PathBuf>,
}

impl Binaries {
    /// Binaries in one directory (as in `KUBEBUILDER_ASSETS` or the cache), if etcd and
    /// kube-apiserver are both there.
    pub fn in_dir(dir: &Path) -> Option<Self> {
        let etcd = dir.join("etcd");
        let kube_apiserver = dir.join("kube-apiserver");
        if !is_executable(&etcd) || !is_executable(&kube_apiserver) {
            return None;
        }
        let found = |name: &str| Some(dir.join(name)).filter(|p| is_executable(p));
        Some(Self {
            etcd,
            kube_apiserver,
            kube_controller_manager: found("kube-controller-manager"),
            kubectl: found("kubectl"),
        })
    }

    /// Whether every program is there (envtest assets lack kube-controller-manager).
    fn complete(&self) -> bool {
        self.kube_controller_manager.is_some() && self.kubectl.is_some()
    }

    /// Fills what `self` lacks from `other`.
    fn or(mut self, other: Option<Self>) -> Self {
        if let Some(other) = other {
            self.kube_controller_manager = self
                .kube_controller_manager
                .or(other.kube_controller_manager);
            self.kubectl = self.kubectl.or(other.kubectl);
        }
        self
    }

    /// Finds the binaries, building them with `scripts/control-plane.sh` if they are missing.
    ///
    /// Looks in `KUBEBUILDER_ASSETS` first, then in the cache ([`cache_dir`]: the release
    /// [`kubernetes_version`] under `$KUBESYNC_CACHE_DIR` or `~/.cache/kubesync`). What
    /// `KUBEBUILDER_ASSETS` lacks (envtest assets ship no kube-controller-manager) comes from the
    /// cache, which the script fills when it is empty.
    pub fn locate() -> Result<Self, Error> {
        static BUILD: Mutex<()> = Mutex::new(());
        let _guard = BUILD.lock();
        if let Some(found) = Self::find().filter(Self::complete) {
            return Ok(found);
        }
        let dir = run_script()?;
        let built = Self::in_dir(&dir).ok_or_else(|| {
            Error::Binaries(format!(
                "the control-plane script reported {} but etcd/kube-apiserver are not there",
                dir.display()
            ))
        })?;
        Ok(match Self::find() {
            Some(found) => found.or(Some(built)),
            None => built,
        })
    }

    fn find() -> Option<Self> {
        let cached = Self::in_dir(&cache_dir());
        if let Some(assets) = std::env::var_os("KUBEBUILDER_ASSETS").filter(|v| !v.is_empty())
            && let Some(found) = Self::in_dir(Path::new(&assets))
        {
            return Some(found.or(cached));
        }
        cached
    }
}

/// The path of `kubectl` for tests and tools: the one of the test ground's release (built with
/// the control plane), never one that happens to be on the machine's PATH.
pub fn kubectl() -> Result<PathBuf, Error> {
    Binaries::locate()?
        .kubectl
        .ok_or_else(|| Error::Binaries("no kubectl among the control-plane binaries".into()))
}

/// The directory where the project script caches the binaries of [`kubernetes_version`].
pub fn cache_dir() -> PathBuf {
    cache_root()
        .join("control-plane")
        .join(kubernetes_version())
}

/// `$KUBESYNC_CACHE_DIR`, else `~/.cache/kubesync`: where every built program is kept.
pub(crate) fn cache_root() -> PathBuf {
    std::env::var_os("KUBESYNC_CACHE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
            PathBuf::from(home).join(".cache").join("kubesync")
        })
}

fn script_path() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBESYNC_CONTROL_PLANE_SCRIPT").filter(|v| !v.is_empty()) {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/control-plane.sh")
}

fn run_script() -> Result<PathBuf, Error> {
    let script = script_path();
    if !script.exists() {
        return Err(Error::Binaries(format!(
            "no control-plane binaries found (KUBEBUILDER_ASSETS unset or incomplete, nothing cached in {}) \
             and the build script {} does not exist; set KUBESYNC_CONTROL_PLANE_SCRIPT or KUBEBUILDER_ASSETS",
            cache_dir().display(),
            script.display()
        )));
    }
    eprintln!(
        "kubesync-testenv: control-plane binaries of Kubernetes {} missing; running {} \
         (the first build takes 10-20 minutes)",
        kubernetes_version(),
        script.display()
    );
    last_line_of(&script, &[("K8S_VERSION", kubernetes_version())])
}

/// Runs a project script with `bash` (its progress and errors go to this process's stderr) and
/// returns the last non-empty line of its stdout: the path it prepared.
pub(crate) fn last_line_of(script: &Path, env: &[(&str, String)]) -> Result<PathBuf, Error> {
    let output = Command::new("bash")
        .arg(script)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::Binaries(format!("could not run {}: {e}", script.display())))?;
    if !output.status.success() {
        return Err(Error::Binaries(format!(
            "{} failed ({}); see its output above",
            script.display(),
            output.status
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| Error::Binaries(format!("{} printed no path", script.display())))?;
    Ok(PathBuf::from(line.trim()))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_dir_requires_etcd_and_apiserver() {
        let dir = std::env::temp_dir().join(format!("kubesync-bin-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        assert_eq!(Binaries::in_dir(&dir), None);
        for name in ["etcd", "kube-apiserver"] {
            std::fs::write(dir.join(name), "#!/bin/sh\n").expect("write");
        }
        // Not executable yet.
        assert_eq!(Binaries::in_dir(&dir), None);
        use std::os::unix::fs::PermissionsExt;
        for name in ["etcd", "kube-apiserver"] {
            std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755))
                .expect("chmod");
        }
        let found = Binaries::in_dir(&dir).expect("found");
        assert_eq!(found.kube_controller_manager, None);
        assert_eq!(found.kubectl, None);
        assert!(!found.complete());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// The versions here and the ones the build script pins are the same.
    #[test]
    fn versions_match_the_build_script() {
        let out = Command::new("bash")
            .arg(script_path())
            .arg("--versions")
            .output()
            .expect("run the control-plane script");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text.split_whitespace().collect::<Vec<_>>(),
            [NEWEST_KUBERNETES, OLDEST_KUBERNETES]
        );
        for v in [NEWEST_KUBERNETES, OLDEST_KUBERNETES] {
            let go_mod = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../hack/control-plane")
                .join(v)
                .join("go.mod");
            let text = std::fs::read_to_string(&go_mod).expect("the pinned go.mod");
            assert!(
                text.contains(&format!("k8s.io/kubernetes {v}")),
                "{} does not require k8s.io/kubernetes {v}",
                go_mod.display()
            );
        }
    }
}
