//! Child processes that never outlive the test binary.
//!
//! Every control-plane process is spawned from one long-lived thread with
//! `PR_SET_PDEATHSIG = SIGKILL`. Linux delivers that signal when the spawning *thread* exits, so
//! spawning from a thread that lives as long as the process means: when the process ends for any
//! reason (normal exit, panic, `SIGKILL` of the test runner), its control planes die with it.

use parking_lot::Mutex;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::Error;

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<Request>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("kubesync-testenv-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
                // The channel lives in a static, so this loop never ends; park forever
                // rather than exit (exiting would kill every child).
                loop {
                    std::thread::park();
                }
            })
            .expect("spawn the kubesync-testenv spawner thread");
        Mutex::new(tx)
    })
}

/// A running control-plane process, killed on drop.
pub(crate) struct Process {
    pub name: &'static str,
    child: Child,
    pub log: std::path::PathBuf,
}

impl Process {
    /// Starts `program args…` with stdout and stderr going to `log`.
    pub(crate) fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Self, Error> {
        let file = std::fs::File::create(log)
            .map_err(|e| Error::Io(format!("create {}", log.display()), e))?;
        let file2 = file
            .try_clone()
            .map_err(|e| Error::Io(format!("dup {}", log.display()), e))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(file2));
        set_parent_death_signal(&mut cmd);
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .send((cmd, tx))
            .map_err(|_| Error::Process(format!("{name}: spawner thread is gone")))?;
        let child = rx
            .recv()
            .map_err(|_| Error::Process(format!("{name}: spawner thread is gone")))?
            .map_err(|e| Error::Io(format!("start {}", program.display()), e))?;
        Ok(Self {
            name,
            child,
            log: log.to_path_buf(),
        })
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` if the process has exited.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the process's log.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Sends SIGTERM, waits up to `grace`, then SIGKILLs; always reaps.
    pub(crate) fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        signal(self.child.id(), libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(2));
    }
}

/// Sends `sig` to `pid`.
pub(crate) fn signal(pid: u32, sig: i32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Whether a process with this pid exists.
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with signal 0 only checks for existence.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only calls the async-signal-safe
    // prctl(2); it touches no memory of the parent.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
