//! A process under measurement, shared by the benchmarks (`#[path]`-included).

use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A process under measurement; killed when dropped, however the benchmark ends.
pub struct Running(pub Child);

impl Running {
    /// `VmRSS` and `VmHWM` of the process, in bytes.
    pub fn memory(&self) -> anyhow::Result<(f64, f64)> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.0.id()))?;
        let field = |name: &str| -> anyhow::Result<f64> {
            let line = status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .ok_or_else(|| anyhow::anyhow!("no {name} in /proc/<pid>/status"))?;
            let kib: f64 = line.trim().trim_end_matches("kB").trim().parse()?;
            Ok(kib * 1024.0)
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// Resets the process's peak resident set (`VmHWM`) to its current one (`5` into
    /// `/proc/<pid>/clear_refs`), so that the next [`Running::memory`] reports the peak of
    /// what came after.
    #[allow(dead_code)]
    pub fn reset_peak(&self) -> anyhow::Result<()> {
        std::fs::write(format!("/proc/{}/clear_refs", self.0.id()), "5")?;
        Ok(())
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL if it has not exited after 10 s.
    #[allow(dead_code)]
    pub async fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.alive() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Drop kills it if it still runs.
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.alive() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// The `GLIBC_TUNABLES` the container image sets for kubesync (read from `scripts/image.sh`,
/// so that a benchmark runs the process users run).
#[allow(dead_code)]
pub fn image_malloc_tunables() -> Option<&'static str> {
    include_str!("../../../../scripts/image.sh")
        .lines()
        .find_map(|l| l.trim().strip_prefix("--env GLIBC_TUNABLES="))
        .map(|v| v.trim_end_matches('\\').trim())
}
