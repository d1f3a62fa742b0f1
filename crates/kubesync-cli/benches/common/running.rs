//! A process under measurement, shared by the benchmarks (`#[path]`-included).

use std::path::Path;
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

/// `kubesync run` against `kubeconfig` as the container image runs it: with the
/// `GLIBC_TUNABLES` that `scripts/image.sh` sets (read from that script; glibc's defaults
/// unless `image_malloc`), logging at `warn` (`KUBESYNC_BENCH_LOG` sets another level). For
/// investigations, `KUBESYNC_BENCH_WRAPPER` runs it under a profiler, e.g.
/// `KUBESYNC_BENCH_WRAPPER="valgrind --tool=massif"` (its RSS is then the wrapper's), and
/// `KUBESYNC_BENCH_BINARY` runs another build (e.g. the one before a change, to measure both
/// with the same benchmark). The caller adds the flags of its run.
#[allow(dead_code)]
pub fn kubesync_run(kubeconfig: &Path, image_malloc: bool) -> Command {
    let binary = std::env::var_os("KUBESYNC_BENCH_BINARY")
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_kubesync").into());
    let mut command = match std::env::var("KUBESYNC_BENCH_WRAPPER") {
        Ok(wrapper) if !wrapper.trim().is_empty() => {
            let mut words = wrapper.split_whitespace();
            let mut c = Command::new(words.next().unwrap_or_default());
            c.args(words).arg(binary);
            c
        }
        _ => Command::new(binary),
    };
    command
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env(
            "RUST_LOG",
            std::env::var("KUBESYNC_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .env_remove("GLIBC_TUNABLES");
    let tunables = include_str!("../../../../scripts/image.sh")
        .lines()
        .find_map(|l| l.trim().strip_prefix("--env GLIBC_TUNABLES="))
        .map(|v| v.trim_end_matches('\\').trim());
    if image_malloc && let Some(tunables) = tunables {
        command.env("GLIBC_TUNABLES", tunables);
    }
    command
}
