//! Locating (and, when needed, building) the control-plane binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::Error;

/// The Kubernetes version the project script builds.
pub const KUBERNETES_VERSION: &str = "v1.20.2";

/// Paths of the control-plane executables used by a [`TestEnv`](crate::TestEnv).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binaries {
    /// `etcd`.
    pub etcd: PathBuf,
    /// `kube-apiserver`.
    pub kube_apiserver: PathBuf,
    /// `kube-controller-manager`, when one was found.
    pub kube_controller_manager: Option<PathBuf>,
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
        let cm = dir.join("kube-controller-manager");
        Some(Self {
            etcd,
            kube_apiserver,
            kube_controller_manager: is_executable(&cm).then_some(cm),
        })
    }

    /// Finds the binaries, building them with `scripts/control-plane.sh` if they are missing.
    ///
    /// Looks in `KUBEBUILDER_ASSETS` first, then in the cache
    /// (`$KUBESYNC_CACHE_DIR` or `~/.cache/kubesync`, under `control-plane/v1.20.2`). When
    /// `KUBEBUILDER_ASSETS` has no `kube-controller-manager` (envtest assets do not ship one),
    /// the cached one is used if present.
    pub fn locate() -> Result<Self, Error> {
        static BUILD: Mutex<()> = Mutex::new(());
        let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = Self::find() {
            return Ok(found);
        }
        let dir = run_script()?;
        Self::in_dir(&dir).ok_or_else(|| {
            Error::Binaries(format!(
                "the control-plane script reported {} but etcd/kube-apiserver are not there",
                dir.display()
            ))
        })
    }

    fn find() -> Option<Self> {
        let cached = Self::in_dir(&cache_dir());
        if let Some(assets) = std::env::var_os("KUBEBUILDER_ASSETS").filter(|v| !v.is_empty())
            && let Some(mut found) = Self::in_dir(Path::new(&assets))
        {
            if found.kube_controller_manager.is_none() {
                found.kube_controller_manager = cached.and_then(|c| c.kube_controller_manager);
            }
            return Some(found);
        }
        cached.filter(|c| c.kube_controller_manager.is_some())
    }
}

/// The directory where the project script caches the binaries it builds.
pub fn cache_dir() -> PathBuf {
    let root = std::env::var_os("KUBESYNC_CACHE_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
            PathBuf::from(home).join(".cache").join("kubesync")
        });
    root.join("control-plane").join(KUBERNETES_VERSION)
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
        "kubesync-testenv: control-plane binaries missing; running {} (the first build takes ~6 minutes)",
        script.display()
    );
    let output = Command::new("bash")
        .arg(&script)
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
    let dir = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .ok_or_else(|| Error::Binaries(format!("{} printed no directory", script.display())))?;
    Ok(PathBuf::from(dir.trim()))
}

fn is_executable(path: &Path) -> bool {
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
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
