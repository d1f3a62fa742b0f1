//! [`TestEnvBuilder`]: what an environment is started with.

use std::time::Duration;

use crate::users::{User, random_token};
use crate::{Binaries, Error, TestEnv};

/// Builder for a [`TestEnv`]; see [`TestEnv::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct TestEnvBuilder {
    pub(crate) name: String,
    pub(crate) controller_manager: bool,
    pub(crate) users: Vec<User>,
    pub(crate) binaries: Option<Binaries>,
    pub(crate) startup_timeout: Duration,
    pub(crate) apiserver_args: Vec<String>,
    pub(crate) audit: bool,
    /// What the audit log records besides the default ([`TestEnvBuilder::audit_also`]).
    pub(crate) audit_also: crate::audit::AuditAlso,
    /// Run every controller of kube-controller-manager's default set, not only those of
    /// [`TestEnvBuilder::with_controller_manager`].
    pub(crate) all_controllers: bool,
    /// The nodes [`TestEnv::start_node`] may start ([`TestEnvBuilder::node`]).
    pub(crate) nodes: Vec<String>,
}

impl TestEnvBuilder {
    /// The defaults: the name `"kubesync-test"`, no controller manager and no extra users.
    pub(crate) fn new() -> Self {
        Self {
            name: "kubesync-test".into(),
            controller_manager: false,
            users: Vec::new(),
            binaries: None,
            startup_timeout: Duration::from_secs(60),
            apiserver_args: Vec::new(),
            audit: false,
            audit_also: crate::audit::AuditAlso::default(),
            all_controllers: false,
            nodes: Vec::new(),
        }
    }

    /// The cluster's name: used for the kubeconfig context, cluster and user entries.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Also run `kube-controller-manager` (namespace, garbage-collector and service-account
    /// controllers), so that namespace deletion and ownerReference cascades really happen.
    pub fn with_controller_manager(mut self, enabled: bool) -> Self {
        self.controller_manager = enabled;
        self
    }

    /// Run `kube-controller-manager` with its default set of controllers (deployment, job,
    /// endpoints, service accounts, volume binding, …): copies live beside the controllers
    /// they live beside in a real cluster. (No scheduler or kubelet runs: Pods stay pending.)
    pub fn with_all_controllers(mut self) -> Self {
        self.controller_manager = true;
        self.all_controllers = true;
        self
    }

    /// Adds a user authenticated by a generated bearer token, member of `groups`. The user has
    /// no permissions until granted (see [`TestEnv::grant`]).
    pub fn user(self, name: impl Into<String>, groups: &[&str]) -> Self {
        let token = random_token();
        self.user_with_token(name, token, groups)
    }

    /// Adds a user authenticated by the given bearer token.
    pub fn user_with_token(
        mut self,
        name: impl Into<String>,
        token: impl Into<String>,
        groups: &[&str],
    ) -> Self {
        self.users.push(User {
            name: name.into(),
            token: token.into(),
            groups: groups.iter().map(|g| (*g).to_string()).collect(),
        });
        self
    }

    /// Uses these binaries instead of locating them.
    pub fn binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = Some(binaries);
        self
    }

    /// How long to wait for the apiserver to become ready (default 60 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Starts kube-apiserver with this extra flag as well, after its own (a repeated flag takes
    /// the last value): e.g. `--max-requests-inflight=2` for an apiserver that answers 429 to
    /// every client outside `system:masters` as soon as two of its requests are in flight.
    pub fn apiserver_arg(mut self, arg: impl Into<String>) -> Self {
        self.apiserver_args.push(arg.into());
        self
    }

    /// Has kube-apiserver write an audit log: every write request (create, update, patch,
    /// delete) with its request and response objects, every other request with its metadata,
    /// Leases and Events not at all. Read it with [`TestEnv::audit`](crate::TestEnv::audit): who
    /// wrote what, how often, and which requests were refused (e.g. 429).
    pub fn audit(mut self, enabled: bool) -> Self {
        self.audit = enabled;
        self
    }

    /// Has the audit log ([`TestEnvBuilder::audit`], which this turns on) record Events
    /// and/or Leases as well, with their metadata (who wrote which, when, with what answer):
    /// for a test that counts the Events a component publishes, or its Lease renewals.
    pub fn audit_also(mut self, also: crate::audit::AuditAlso) -> Self {
        self.audit = true;
        self.audit_also = also;
        self
    }

    /// Declares a node the test starts with [`TestEnv::start_node`]: the control plane then
    /// runs as a cluster with nodes does — kube-scheduler, every controller
    /// ([`TestEnvBuilder::with_all_controllers`]), the Node authorizer and the NodeRestriction
    /// and ServiceAccount admission plugins (Pods get their ServiceAccount's token) — and the
    /// node's credentials (user `system:node:<name>`, group `system:nodes`) are known. The
    /// node programs are located, or built, by [`NodeBinaries::locate`](crate::NodeBinaries).
    pub fn node(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        self = self.with_all_controllers();
        self = self.user(format!("system:node:{name}"), &["system:nodes"]);
        self.nodes.push(name);
        self
    }

    /// Starts the environment and waits until the apiserver is ready.
    pub async fn start(self) -> Result<TestEnv, Error> {
        let binaries = match self.binaries.clone() {
            Some(b) => b,
            None => tokio::task::spawn_blocking(Binaries::locate)
                .await
                .map_err(|e| Error::Process(format!("binary lookup panicked: {e}")))??,
        };
        if self.controller_manager && binaries.kube_controller_manager.is_none() {
            return Err(Error::Binaries(
                "kube-controller-manager was requested but is not in KUBEBUILDER_ASSETS (envtest \
                 assets do not ship it) nor in the cache; run `make control-plane` to build it"
                    .into(),
            ));
        }
        let nodes = match self.nodes.is_empty() {
            true => None,
            false => Some(
                tokio::task::spawn_blocking(crate::NodeBinaries::locate)
                    .await
                    .map_err(|e| Error::Process(format!("node lookup panicked: {e}")))??,
            ),
        };
        TestEnv::launch(self, binaries, nodes).await
    }

    /// Starts the environment from synchronous code, on a private runtime thread.
    pub fn start_blocking(self) -> Result<TestEnv, Error> {
        std::thread::scope(|s| {
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| Error::Io("build a tokio runtime".into(), e))?;
                rt.block_on(self.start())
            })
            .join()
            .map_err(|_| Error::Process("environment start panicked".into()))?
        })
    }
}
