//! [`TestEnv`]: one running control plane, its accessors and its lifecycle after start
//! (outages, stop, drop). Starting it is in [`launch`](crate::launch).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
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
    // Field order matters: the scheduler, controller manager and apiserver stop before etcd.
    pub(crate) scheduler: Option<Process>,
    pub(crate) controller_manager: Option<Process>,
    pub(crate) apiserver: Option<Process>,
    pub(crate) etcd: Option<Process>,
    pub(crate) apiserver_args: Vec<String>,
    pub(crate) binaries: Binaries,
    /// The programs of the nodes declared with [`TestEnvBuilder::node`].
    pub(crate) node_binaries: Option<crate::NodeBinaries>,
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
        let mut map = map.lock();
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

    /// The apiserver's version as it reports it (`gitVersion` of `/version`, e.g. `v1.37.2`).
    pub async fn server_version(&self) -> Result<String, Error> {
        Ok(self.client()?.apiserver_version().await?.git_version)
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
        [
            &self.etcd,
            &self.apiserver,
            &self.controller_manager,
            &self.scheduler,
        ]
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
        let answer = self
            .etcd_post(
                "/v3/kv/deleterange",
                serde_json::json!({"key": base64::engine::general_purpose::STANDARD.encode(key)}),
            )
            .await?;
        Ok(etcd_int(&answer["deleted"]))
    }

    /// Compacts etcd's history up to its current revision and returns that revision. Watches
    /// that resume from an older resourceVersion then get 410 Gone, and must re-list (together
    /// with a restart of the apiserver, whose watch cache otherwise still serves them).
    pub async fn compact_etcd(&self) -> Result<i64, Error> {
        use base64::Engine as _;
        let range = self
            .etcd_post(
                "/v3/kv/range",
                serde_json::json!({"key": base64::engine::general_purpose::STANDARD.encode("/"), "limit": 1}),
            )
            .await?;
        let revision = etcd_int(&range["header"]["revision"]) as i64;
        if revision == 0 {
            return Err(Error::Process(format!(
                "etcd answered no revision: {range}"
            )));
        }
        self.etcd_post(
            "/v3/kv/compaction",
            serde_json::json!({"revision": revision.to_string(), "physical": true}),
        )
        .await?;
        Ok(revision)
    }

    /// POSTs `body` to etcd's JSON gateway at `path` and returns its answer.
    async fn etcd_post(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> Result<serde_json::Value, Error> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = body.to_string();
        let host = self.etcd_url.trim_start_matches("http://");
        let io = |e| Error::Io(format!("etcd at {host}"), e);
        let mut stream = tokio::net::TcpStream::connect(host).await.map_err(io)?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.map_err(io)?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.map_err(io)?;
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        if !head.starts_with("HTTP/1.1 200") {
            return Err(Error::Process(format!("etcd {path}: {response}")));
        }
        // Unchunk a chunked body by taking its JSON object.
        let json = body
            .find('{')
            .and_then(|start| body.rfind('}').map(|end| &body[start..=end]))
            .unwrap_or("{}");
        serde_json::from_str(json).map_err(|e| Error::Process(format!("etcd {path}: {e}: {body}")))
    }

    /// Stops every process now and removes the directory (also done on drop).
    pub fn stop(&mut self) {
        for p in [
            self.scheduler.take(),
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

/// An int64 of etcd's JSON gateway: a string, a number, or absent (0).
fn etcd_int(v: &serde_json::Value) -> u64 {
    v.as_str()
        .and_then(|n| n.parse().ok())
        .or_else(|| v.as_u64())
        .unwrap_or(0)
}
