//! Locating (and, when needed, building) the `helm` binary the chart tests use.

use parking_lot::Mutex;
use std::path::{Path, PathBuf};

use crate::Error;
use crate::binaries::is_executable;

/// The path of `helm`, as `scripts/helm.sh` prepares it: the release pinned in
/// `hack/helm/go.mod`, built from Go modules into the cache
/// (`$KUBESYNC_CACHE_DIR/helm/<version>/helm`, by default under `~/.cache/kubesync`) on first
/// use, never one that happens to be on the machine's PATH.
///
/// The first call of a process runs the script (which prints the cached path at once, or
/// builds helm in a few minutes); later calls return the same path.
pub fn helm() -> Result<PathBuf, Error> {
    static FOUND: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut found = FOUND.lock();
    if let Some(path) = found.as_ref().filter(|p| is_executable(p)) {
        return Ok(path.clone());
    }
    let path = run_script(&script_path())?;
    if !is_executable(&path) {
        return Err(Error::Binaries(format!(
            "helm: scripts/helm.sh reported {} but there is no executable there",
            path.display()
        )));
    }
    *found = Some(path.clone());
    Ok(path)
}

/// `scripts/helm.sh` of this repository.
fn script_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/helm.sh")
}

/// Runs the script and returns the path it printed.
fn run_script(script: &Path) -> Result<PathBuf, Error> {
    if !script.exists() {
        return Err(Error::Binaries(format!(
            "helm: the build script {} does not exist",
            script.display()
        )));
    }
    crate::binaries::last_line_of(script, &[])
}
