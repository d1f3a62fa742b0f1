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
    /// etcd's client URL (plain HTTP on loopback).
    pub(crate) etcd_url: String,
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

    /// Deletes `key` (e.g. `/registry/configmaps/<namespace>/<name>`) in etcd directly,
    /// behind the apiserver's back: no watch ever sees a Delete event for it. For tests of
    /// what a controller notices after it re-lists (stop the apiserver first, restart it
    /// after: its watch cache then starts anew and older watches get 410 Gone). Returns how
    /// many keys etcd deleted.
    pub async fn delete_from_etcd(&self, key: &str) -> Result<u64, Error> {
        use base64::Engine as _;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = serde_json::json!({
            "key": base64::engine::general_purpose::STANDARD.encode(key),
        })
        .to_string();
        let host = self.etcd_url.trim_start_matches("http://");
        let io = |e| Error::Io(format!("etcd at {host}"), e);
        let mut stream = tokio::net::TcpStream::connect(host).await.map_err(io)?;
        let request = format!(
            "POST /v3/kv/deleterange HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.map_err(io)?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.map_err(io)?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        if !head.starts_with("HTTP/1.1 200") {
            return Err(Error::Process(format!(
                "etcd deleterange {key}: {response}"
            )));
        }
        // Unchunk a chunked body by taking its JSON object.
        let json = body
            .find('{')
            .and_then(|start| body.rfind('}').map(|end| &body[start..=end]))
            .unwrap_or("{}");
        let answer: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| Error::Process(format!("etcd deleterange {key}: {e}: {body}")))?;
        // int64 fields come as strings in etcd's JSON gateway; absent means 0.
        Ok(answer["deleted"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .or_else(|| answer["deleted"].as_u64())
            .unwrap_or(0))
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
