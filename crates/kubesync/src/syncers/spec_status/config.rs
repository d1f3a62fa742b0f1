//! How a spec/status sync is configured: [`SpecStatusConfig`], the observers of propagation
//! and drift, and [`SpecStatusSyncBuilder`], which builds it into an engine.

use super::*;

/// Configuration of a spec/status sync. Build it with [`SpecStatusSync::builder`].
#[derive(Clone, Debug)]
pub struct SpecStatusConfig {
    /// The synced resource type.
    pub resource: ApiResource,
    /// Name translation and sharding.
    pub names: SuffixTranslator,
    /// Local Secrets to upload.
    pub secret_names: Vec<String>,
    /// How a local object is deleted when its remote goes (default Foreground).
    pub propagation_policy: PropagationPolicy,
    /// Annotation and finalizer names.
    pub marks: Marks,
    /// How often an object's remote Secrets are re-read when they cannot be watched
    /// (default 30 s; see [`SecretRepair`]).
    pub secret_repair_interval: Duration,
}

/// A callback the sync tells what it did (see [`SpecStatusSyncBuilder::on_propagated`] and
/// [`SpecStatusSyncBuilder::on_drift`]). It runs in the reconcile: keep it cheap, never block.
pub struct Observer<T: ?Sized>(pub(super) Arc<dyn Fn(&T) + Send + Sync>);

impl<T: ?Sized> Observer<T> {
    /// An observer calling `f`.
    pub fn new(f: impl Fn(&T) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl<T: ?Sized> Clone for Observer<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: ?Sized> std::fmt::Debug for Observer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// A local copy found changed by someone else, and reverted: which fields, and the field
/// managers owning them in its managedFields (paths only, never values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalDrift {
    /// The local object.
    pub local: ObjectName,
    /// What changed, and who changed it.
    pub drift: Drift,
}

/// Builder of a spec/status sync; see [`SpecStatusSync::builder`].
#[derive(Clone, Debug)]
#[must_use]
pub struct SpecStatusSyncBuilder {
    pub(super) config: SpecStatusConfig,
    pub(super) concurrency: usize,
    pub(super) resync: Option<Duration>,
    pub(super) on_propagated: Option<Observer<Duration>>,
    pub(super) on_drift: Option<Observer<LocalDrift>>,
}

impl SpecStatusSyncBuilder {
    /// Suffix of remote names for this shard (removed locally).
    pub fn remote_name_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.config.names.remote_name_suffix = suffix.into();
        self
    }
    /// Suffix appended to remote namespaces to form local namespaces.
    pub fn local_namespace_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.config.names.local_namespace_suffix = suffix.into();
        self
    }
    /// Prefix every synced namespace must have.
    pub fn namespace_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.names.namespace_prefix = prefix.into();
        self
    }
    /// Local Secrets to upload to the remote.
    pub fn secret_names<I, S>(mut self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.config.secret_names = names.into_iter().map(Into::into).collect();
        self
    }
    /// How often an object's remote Secrets are re-read when the remote identity may not
    /// watch them (default 30 s; see [`SecretRepair`]).
    pub fn secret_repair_interval(mut self, every: Duration) -> Self {
        self.config.secret_repair_interval = every;
        self
    }
    /// Propagation policy for deleting local objects (default Foreground).
    pub fn propagation_policy(mut self, policy: PropagationPolicy) -> Self {
        self.config.propagation_policy = policy;
        self
    }
    /// Annotation domain (default `kubesync.io`; `cloud.teleport.dev` for sync-controller
    /// compatibility).
    pub fn domain(mut self, domain: impl Into<String>) -> Self {
        self.config.marks = Marks::new(domain);
        self
    }
    /// Objects reconciled at once (each object serially).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }
    /// Periodic resync (`None`: never).
    pub fn resync(mut self, every: Option<Duration>) -> Self {
        self.resync = every;
        self
    }
    /// Calls `observer` with the propagation lag of each remote generation applied locally:
    /// from the generation's first sight by the remote watch to the local write (a local
    /// copy rewritten for any other reason — a revert of someone else's edit, labels — is no
    /// propagation, and not observed).
    pub fn on_propagated(mut self, observer: Observer<Duration>) -> Self {
        self.on_propagated = Some(observer);
        self
    }
    /// Calls `observer` with each local copy found changed by someone else and reverted: the
    /// fields at which it differed from what kubesync writes that other field managers own
    /// (no removal is inferred: a field missing locally may be new on the remote).
    pub fn on_drift(mut self, observer: Observer<LocalDrift>) -> Self {
        self.on_drift = Some(observer);
        self
    }
    /// The engine syncing from `remote` to `local`.
    pub fn build(self, remote: Cluster, local: Cluster) -> SyncEngine<SpecStatusSync> {
        let mut syncer = SpecStatusSync::new(self.config);
        syncer.on_propagated = self.on_propagated;
        syncer.on_drift = self.on_drift;
        SyncEngine::new(syncer, remote, local)
            .concurrency(self.concurrency)
            .resync(self.resync)
    }
}
