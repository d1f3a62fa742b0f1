//! [`TestEnv`]: one running control plane, its accessors and its lifecycle after start
//! (outages, stop, drop). Starting it is in [`launch`](crate::launch).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::process::Process;
use crate::users::User;
use crate::{Binaries, Error, TestEnvBuilder};

/// One running control plane. Dropping it stops the processes and removes its directory.
pub struct TestEnv {
    pub(crate) name: String,
    pub(crate) dir: PathBuf,
    pub(crate) server: String,
    pub(crate) ca_pem: String,
    pub(crate) admin_token: String,
    pub(crate) users: Vec<User>,
    // Field order matters: the controller manager and apiserver stop before etcd.
    pub(crate) controller_manager: Option<Process>,
    pub(crate) apiserver: Option<Process>,
    pub(crate) etcd: Option<Process>,
    pub(crate) apiserver_args: Vec<String>,
    pub(crate) binaries: Binaries,
    pub(crate) keep_dir: bool,
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
        TestEnvBuilder::new()
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
