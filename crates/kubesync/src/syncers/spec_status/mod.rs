//! Spec/status sync between a **remote** (management) cluster and a **local** (regional)
//! cluster, for any resource type with `spec` and `status` — sync-controller's behaviour,
//! without its bugs.
//!
//! - Remote `<name><remote_name_suffix>` in namespace `<ns>` ↔ local `<name>` in namespace
//!   `<ns><local_namespace_suffix>`; namespaces must start with `namespace_prefix`. Remote
//!   objects outside the shard are ignored and never touched.
//! - A new remote object is claimed with the finalizer `<domain>/sync-local`.
//! - A missing local namespace is created with `<domain>/sync-owner: <name>`.
//! - Spec, labels and annotations flow down (minus bookkeeping); local finalizers,
//!   ownerReferences and status are preserved. Local status flows up to the remote status
//!   subresource when it differs; if that fails, the spec is not pushed down in that pass.
//! - The remote records `<domain>/sync-remote-generation` and `<domain>/sync-local-generation`.
//! - Local Secrets named in `secret_names`, controlled by the local object, are written onto
//!   pre-existing remote Secrets `<secret><remote_name_suffix>` (update only). A remote Secret
//!   edited, or deleted and recreated, is repaired within seconds: watched when the remote
//!   identity may list and watch Secrets (asked with a SelfSubjectAccessReview at start),
//!   else re-read every `secret_repair_interval` ([`SecretRepair`]); unchanged ones are
//!   never rewritten.
//! - `<domain>/paused: "true"` on either side stops every write.
//! - Remote deleted: the local namespace it owns is deleted, or else the local object (with the
//!   propagation policy); then the remote finalizer is released.
//! - kubesync deletes a local object only if its `<domain>/sync-origin` mark names the remote
//!   object, and a namespace only if its `sync-owner` mark names the object.
//!
//! With `domain = "cloud.teleport.dev"` every annotation and the finalizer are
//! sync-controller's, so a sync-controller deployment can be replaced in place.

pub mod counts;
pub mod freshness;
pub mod plan;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Resource;
use kube::api::{DynamicObject, PropagationPolicy};
use kube::core::ApiResource;

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::key::ObjectKey;
use crate::runtime::{Action, Watch};
use crate::syncer::{ExtraWatch, Side, SyncContext, SyncEngine, Syncer};
use crate::syncers::fan_out::rules::{Drift, Strategy, changed_fields, changes_by_others};
use crate::translate::{ObjectName, SuffixTranslator, Translator};
use freshness::Freshness;
use plan::{Marks, Phase, Teardown};

mod config;
mod secrets;
pub use config::{LocalDrift, Observer, SpecStatusConfig, SpecStatusSyncBuilder};

/// Field manager of writes to the local cluster.
pub const FIELD_MANAGER_DOWN: &str = "kubesync-spec-down";
/// Field manager of writes to the remote cluster.
pub const FIELD_MANAGER_UP: &str = "kubesync-status-up";

/// Default of [`SpecStatusConfig::secret_repair_interval`].
pub const SECRET_REPAIR_INTERVAL: Duration = Duration::from_secs(30);

/// How edits of the remote Secrets (by someone else) are noticed, decided at start from what
/// the remote identity may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretRepair {
    /// It may list and watch Secrets in every namespace: the remote Secrets named
    /// `<secret><remote_name_suffix>` are watched (metadata only), and a change re-runs the
    /// objects of their namespace at once.
    Watch,
    /// It may not: every object that uploads a Secret is re-run this often, and re-reads its
    /// remote Secrets (with `get`; without it, remote edits cannot be seen, and only local
    /// changes are uploaded).
    Poll(Duration),
}

/// What [`Syncer::init`] learnt about the remote Secrets.
#[derive(Clone, Debug)]
struct SecretWatching {
    repair: SecretRepair,
    /// The source (remote) cluster's name, for the mapper's store reads.
    source: String,
}

/// The spec/status [`Syncer`]: source = remote cluster, target = local cluster.
pub struct SpecStatusSync {
    config: SpecStatusConfig,
    namespace_resource: ApiResource,
    secret_resource: ApiResource,
    /// Serialises local namespace creation: many objects of a new namespace arrive at once,
    /// and only the first of their reconciles should create it.
    namespace_creation: tokio::sync::Mutex<NamespacesCreated>,
    /// Set by [`Syncer::init`] when Secrets are uploaded.
    secret_watching: std::sync::OnceLock<SecretWatching>,
    /// Remote generations seen and not yet applied locally.
    freshness: Arc<Freshness>,
    /// Told each propagation lag.
    on_propagated: Option<Observer<Duration>>,
    /// Told each local copy found changed by someone else and reverted.
    on_drift: Option<Observer<LocalDrift>>,
}

/// Local namespaces this sync created, until the Namespace watch shows them (an entry is
/// trusted for a short while only, so a namespace deleted by someone else is recreated).
#[derive(Default)]
struct NamespacesCreated(std::collections::HashMap<String, std::time::Instant>);

impl NamespacesCreated {
    const TRUSTED_FOR: Duration = Duration::from_secs(10);

    fn recently(&mut self, ns: &str) -> bool {
        self.0.retain(|_, at| at.elapsed() < Self::TRUSTED_FOR);
        self.0.contains_key(ns)
    }
}

impl SpecStatusSync {
    /// A builder for syncing objects of `resource` (any kind with spec and status).
    pub fn builder(resource: ApiResource) -> SpecStatusSyncBuilder {
        SpecStatusSyncBuilder {
            config: SpecStatusConfig {
                resource,
                names: SuffixTranslator::default(),
                secret_names: Vec::new(),
                propagation_policy: PropagationPolicy::Foreground,
                marks: Marks::default(),
                secret_repair_interval: SECRET_REPAIR_INTERVAL,
            },
            concurrency: 16,
            resync: Some(Duration::from_secs(600)),
            on_propagated: None,
            on_drift: None,
        }
    }

    /// A builder for a typed resource.
    pub fn builder_for<K: Resource<DynamicType = ()>>() -> SpecStatusSyncBuilder {
        Self::builder(ApiResource::erase::<K>(&()))
    }

    /// A syncer from a configuration.
    pub fn new(config: SpecStatusConfig) -> Self {
        Self {
            config,
            namespace_resource: ApiResource::erase::<Namespace>(&()),
            secret_resource: ApiResource::erase::<Secret>(&()),
            namespace_creation: Default::default(),
            secret_watching: std::sync::OnceLock::new(),
            freshness: Arc::default(),
            on_propagated: None,
            on_drift: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SpecStatusConfig {
        &self.config
    }

    /// How remote Secret edits are noticed; `None` before the engine starts, or when no
    /// Secrets are uploaded.
    pub fn secret_repair(&self) -> Option<SecretRepair> {
        self.secret_watching.get().map(|w| w.repair)
    }

    /// Which remote objects carry a generation not yet applied locally, and since when this
    /// sync has seen it (shared: read it while the engine runs).
    pub fn freshness(&self) -> Arc<Freshness> {
        self.freshness.clone()
    }

    /// A remote generation was applied locally with this write: tell its lag.
    fn propagated(&self, key: &ObjectKey, generation: Option<i64>) {
        if let Some(lag) = self
            .freshness
            .applied(key, generation.unwrap_or(0), Instant::now())
            && let Some(observe) = &self.on_propagated
        {
            (observe.0)(&lag);
        }
    }
}

fn local_name(cx: &SyncContext<'_>) -> (String, String) {
    (
        cx.target_name.namespace.clone().unwrap_or_default(),
        cx.target_name.name.clone(),
    )
}

fn origin(cx: &SyncContext<'_>) -> String {
    cx.source_name.to_string()
}

impl SpecStatusSync {
    fn namespace<'a>(&self, cx: &SyncContext<'a>) -> Option<std::sync::Arc<DynamicObject>> {
        let (ns, _) = local_name(cx);
        cx.get_metadata(
            Side::Target,
            &self.namespace_resource,
            &ObjectName::cluster_scoped(ns),
        )
    }

    /// Creates the local namespace `ns` for object `name`, once even when many reconciles of
    /// its objects ask at the same time.
    async fn create_namespace(&self, cx: &SyncContext<'_>, ns: &str, name: &str) -> Result<()> {
        let mut created = self.namespace_creation.lock().await;
        if created.recently(ns) || self.namespace(cx).is_some() {
            return Ok(());
        }
        let namespace = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(ns.to_string()),
                annotations: Some([(self.config.marks.namespace_owner(), name.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let namespace = crate::object::to_dynamic(&namespace)?;
        match cx
            .writer
            .create(
                cx.target,
                &self.namespace_resource,
                &namespace,
                FIELD_MANAGER_DOWN,
            )
            .await
        {
            Ok(_) => tracing::info!(namespace = %ns, "(local) namespace created"),
            Err(Error::Kube(kube::Error::Api(s))) if s.is_already_exists() => {}
            Err(e) => return Err(e),
        }
        created.0.insert(ns.to_string(), std::time::Instant::now());
        Ok(())
    }

    async fn pass(
        &self,
        cx: &SyncContext<'_>,
        remote: Option<&DynamicObject>,
        local: Option<&DynamicObject>,
    ) -> Result<Action> {
        let marks = &self.config.marks;
        match plan::phase(remote, local, marks) {
            Phase::PausedRemote | Phase::PausedLocal => Ok(Action::done()),
            Phase::Teardown => self.teardown(cx, remote, local).await,
            Phase::Claim => {
                let Some(remote) = remote else {
                    return Ok(Action::done());
                };
                let claimed = cx
                    .writer
                    .set_finalizer(
                        cx.source,
                        &self.config.resource,
                        remote,
                        &marks.finalizer(),
                        true,
                        FIELD_MANAGER_UP,
                    )
                    .await?;
                tracing::info!(remote = %cx.source_name, "(remote) finalizer added");
                // The patch returned the remote's current state: go on with it (re-checking
                // the phase, e.g. a pause added meanwhile) instead of waiting for the event.
                match claimed {
                    Some(claimed) if plan::phase(Some(&claimed), local, marks) == Phase::Sync => {
                        self.sync_pass(cx, &claimed, local).await
                    }
                    _ => Ok(Action::done()),
                }
            }
            Phase::Sync => match remote {
                Some(remote) => self.sync_pass(cx, remote, local).await,
                None => Ok(Action::done()),
            },
        }
    }

    async fn teardown(
        &self,
        cx: &SyncContext<'_>,
        remote: Option<&DynamicObject>,
        local: Option<&DynamicObject>,
    ) -> Result<Action> {
        let marks = &self.config.marks;
        let (ns, name) = local_name(cx);
        let ns_obj = self.namespace(cx);
        let step = plan::teardown(remote, local, ns_obj.as_deref(), &name, &origin(cx), marks);
        if remote.is_none()
            && matches!(
                step,
                Teardown::DeleteNamespace | Teardown::DeleteLocal { .. }
            )
            && !cx.confirm_source_absent(&self.config.resource).await?
        {
            // The remote store is behind: the remote exists; its event is on the way.
            tracing::debug!(remote = %cx.source_name, "remote absent from the store but present in the cluster; not tearing down");
            return Ok(Action::done());
        }
        match step {
            Teardown::DeleteNamespace => {
                cx.writer
                    .delete(
                        cx.target,
                        &self.namespace_resource,
                        None,
                        &ns,
                        None,
                        ns_obj.as_ref().and_then(|n| n.metadata.uid.as_deref()),
                    )
                    .await?;
                self.namespace_creation.lock().await.0.remove(&ns);
                tracing::info!(namespace = %ns, "(local) deleted namespace");
                Ok(Action::requeue(Duration::from_secs(5)))
            }
            Teardown::DeleteLocal { uid } => {
                cx.writer
                    .delete(
                        cx.target,
                        &self.config.resource,
                        Some(&ns),
                        &name,
                        Some(self.config.propagation_policy.clone()),
                        uid.as_deref(),
                    )
                    .await?;
                tracing::info!(local = %cx.target_name, "(local) deleted resource");
                Ok(Action::requeue(Duration::from_secs(5)))
            }
            Teardown::WaitForNamespace | Teardown::WaitForLocal => {
                Ok(Action::requeue(Duration::from_secs(5)))
            }
            Teardown::RemoveFinalizer => {
                if let Some(remote) = remote {
                    cx.writer
                        .set_finalizer(
                            cx.source,
                            &self.config.resource,
                            remote,
                            &marks.finalizer(),
                            false,
                            FIELD_MANAGER_UP,
                        )
                        .await?;
                    tracing::info!(remote = %cx.source_name, "(remote) removed finalizer");
                }
                Ok(Action::done())
            }
            Teardown::Done => Ok(Action::done()),
        }
    }

    async fn sync_pass(
        &self,
        cx: &SyncContext<'_>,
        remote: &DynamicObject,
        local: Option<&DynamicObject>,
    ) -> Result<Action> {
        let marks = &self.config.marks;
        let (ns, name) = local_name(cx);
        let remote_ns = cx.source_name.namespace.clone().unwrap_or_default();

        // Status up first: the remote must know the current state before the spec changes.
        if let Some(local) = local {
            self.push_status(cx, remote, local, &remote_ns).await?;
        }

        // Secrets: failures are reported at the end but do not stop the spec.
        let (uploads, secret_error) = match local {
            Some(local) => match self
                .upload_secrets(cx, remote, local, &ns, &remote_ns)
                .await
            {
                Ok(uploads) => (uploads, None),
                Err(e) => (true, Some(e)),
            },
            None => (false, None),
        };

        if local.is_some_and(|l| l.metadata.deletion_timestamp.is_some()) {
            tracing::debug!(local = %cx.target_name, "(local) pending delete, waiting to recreate");
            return match secret_error {
                Some(e) => Err(e),
                None => Ok(Action::requeue(Duration::from_secs(5))),
            };
        }

        self.ensure_namespace(cx, &ns, &name).await?;

        let mut local_generation = local.and_then(|l| l.metadata.generation);
        if let Some(desired) = plan::desired_local(
            &self.config.resource,
            remote,
            local,
            &ns,
            &name,
            &origin(cx),
            marks,
        ) {
            let Some(written) = self.write_local(cx, remote, local, &desired).await? else {
                return Ok(Action::requeue(Duration::from_secs(1)));
            };
            local_generation = written.metadata.generation;
        }
        self.record_generation(cx, remote, local_generation, &remote_ns)
            .await?;
        match secret_error {
            Some(e) => Err(e),
            None => Ok(match self.secret_repair() {
                // Nothing tells us of remote edits: look again.
                Some(SecretRepair::Poll(every)) if uploads => Action::requeue(every),
                _ => Action::done(),
            }),
        }
    }

    /// Whether `patch` (of `kind`, `status` or `merge`) is to be sent to the remote: unless
    /// the store shows the remote object from before this writer's last, identical patch
    /// (see `Writer::already_written`).
    fn unsent(
        &self,
        cx: &SyncContext<'_>,
        remote: &DynamicObject,
        kind: crate::writer::WriteKind,
        patch: &serde_json::Value,
    ) -> bool {
        !cx.writer.already_written(
            cx.source,
            &self.config.resource,
            remote,
            (kind, FIELD_MANAGER_UP),
            patch,
        )
    }

    /// Patches the local status onto the remote's status subresource, when it differs.
    async fn push_status(
        &self,
        cx: &SyncContext<'_>,
        remote: &DynamicObject,
        local: &DynamicObject,
        remote_ns: &str,
    ) -> Result<()> {
        if let Some(patch) = plan::status_patch(remote, local)
            && self.unsent(cx, remote, crate::writer::WriteKind::Status, &patch)
        {
            cx.writer
                .merge_patch_status(
                    cx.source,
                    &self.config.resource,
                    Some(remote_ns),
                    &cx.source_name.name,
                    &patch,
                    FIELD_MANAGER_UP,
                )
                .await?;
            tracing::info!(remote = %cx.source_name, "(remote) status patched");
        }
        Ok(())
    }

    /// Creates the local namespace `ns` for object `name` if it is missing; an error if it is
    /// terminating.
    async fn ensure_namespace(&self, cx: &SyncContext<'_>, ns: &str, name: &str) -> Result<()> {
        match self.namespace(cx) {
            Some(n) if n.metadata.deletion_timestamp.is_some() => {
                Err(Error::NamespaceTerminating(ns.to_string()))
            }
            Some(_) => Ok(()),
            None => self.create_namespace(cx, ns, name).await,
        }
    }

    /// Writes `desired` over the local copy (or creates it), tells the propagation lag and any
    /// change by someone else it reverted; the object written, or `None` when this writer
    /// created it moments ago and the store does not show it yet.
    async fn write_local(
        &self,
        cx: &SyncContext<'_>,
        remote: &DynamicObject,
        local: Option<&DynamicObject>,
        desired: &DynamicObject,
    ) -> Result<Option<DynamicObject>> {
        // Someone else's changes to the copy, reverted by this write.
        let drift = match (local, &self.on_drift) {
            (Some(local), Some(_)) => {
                let changed = changed_fields(local, desired, Strategy::Replace);
                changes_by_others(local, &changed, FIELD_MANAGER_DOWN)
            }
            _ => None,
        };
        let written = if local.is_some() {
            cx.writer
                .replace(
                    cx.target,
                    &self.config.resource,
                    desired,
                    FIELD_MANAGER_DOWN,
                )
                .await?
        } else if cx
            .created_already(&self.config.resource, desired, FIELD_MANAGER_DOWN)
            .await?
        {
            // Created moments ago by this writer; the store does not show it yet. Its
            // watch event brings the next decision.
            tracing::debug!(local = %cx.target_name, "(local) created already; the store is behind");
            return Ok(None);
        } else {
            cx.writer
                .create(
                    cx.target,
                    &self.config.resource,
                    desired,
                    FIELD_MANAGER_DOWN,
                )
                .await?
        };
        tracing::info!(local = %cx.target_name, created = local.is_none(), "(local) spec and metadata written");
        self.propagated(cx.key, remote.metadata.generation);
        if let (Some(drift), Some(observe)) = (drift, &self.on_drift) {
            tracing::info!(local = %cx.target_name, %drift, "(local) reverted a change by someone else");
            (observe.0)(&LocalDrift {
                local: cx.target_name.clone(),
                drift,
            });
        }
        Ok(Some(written))
    }

    /// Patches the remote's generation marks to say the local object reached
    /// `local_generation`, unless they say so already.
    async fn record_generation(
        &self,
        cx: &SyncContext<'_>,
        remote: &DynamicObject,
        local_generation: Option<i64>,
        remote_ns: &str,
    ) -> Result<()> {
        if let Some(patch) = plan::generation_patch(remote, local_generation, &self.config.marks)
            && self.unsent(cx, remote, crate::writer::WriteKind::Merge, &patch)
        {
            cx.writer
                .merge_patch(
                    cx.source,
                    &self.config.resource,
                    Some(remote_ns),
                    &cx.source_name.name,
                    &patch,
                    FIELD_MANAGER_UP,
                )
                .await?;
        }
        Ok(())
    }

    /// The watch of the local namespaces: one kubesync created maps back to its owner, if the
    /// owner's name is in the shard's form.
    fn namespace_watch(&self) -> ExtraWatch {
        let names = self.config.names.clone();
        let owner_key = self.config.marks.namespace_owner();
        ExtraWatch {
            side: Side::Target,
            watch: Watch::dynamic(self.namespace_resource.clone()).metadata_only(),
            mapper: std::sync::Arc::new(move |ns: &DynamicObject, _| {
                let Some(owner) = ns
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(&owner_key))
                else {
                    return Vec::new();
                };
                let local = ObjectName::namespaced(
                    ns.metadata.name.clone().unwrap_or_default(),
                    owner.clone(),
                );
                names.to_source(&local).into_iter().collect()
            }),
        }
    }
}

impl Syncer for SpecStatusSync {
    fn source_resource(&self) -> &ApiResource {
        &self.config.resource
    }

    fn translator(&self) -> &dyn Translator {
        &self.config.names
    }

    fn is_owned(&self, target: &DynamicObject) -> bool {
        target
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(&self.config.marks.origin()))
    }

    async fn sync_down(&self, cx: &SyncContext<'_>, source: &DynamicObject) -> Result<Action> {
        self.pass(cx, Some(source), None).await
    }

    async fn sync(
        &self,
        cx: &SyncContext<'_>,
        source: &DynamicObject,
        target: &DynamicObject,
    ) -> Result<Action> {
        self.pass(cx, Some(source), Some(target)).await
    }

    async fn sync_up(&self, cx: &SyncContext<'_>, target: &DynamicObject) -> Result<Action> {
        self.pass(cx, None, Some(target)).await
    }

    async fn cleanup(&self, cx: &SyncContext<'_>) -> Result<Action> {
        // Neither object exists, but a namespace created for it may remain.
        self.pass(cx, None, None).await
    }

    fn source_seen(&self, key: &ObjectKey, remote: &DynamicObject) {
        // A remote being deleted is no change to propagate.
        let applied = plan::generation_applied(remote, &self.config.marks)
            || remote.metadata.deletion_timestamp.is_some();
        self.freshness.saw(
            key,
            remote.metadata.generation.unwrap_or(0),
            applied,
            Instant::now(),
        );
    }

    async fn init(&self, source: &Cluster, _target: &Cluster) -> Result<()> {
        if self.config.secret_names.is_empty() {
            return Ok(());
        }
        let repair = match secrets::may_watch_secrets(source).await {
            Ok(true) => SecretRepair::Watch,
            Ok(false) => SecretRepair::Poll(self.config.secret_repair_interval),
            Err(e) => {
                tracing::warn!(cluster = %source.name(), error = %e, "could not ask whether remote Secrets may be watched; re-reading them periodically");
                SecretRepair::Poll(self.config.secret_repair_interval)
            }
        };
        tracing::info!(cluster = %source.name(), ?repair, "remote Secret repair");
        let _ = self.secret_watching.set(SecretWatching {
            repair,
            source: source.name().to_string(),
        });
        Ok(())
    }

    fn extra_watches(&self) -> Vec<ExtraWatch> {
        let mut watches = Vec::new();
        // Remote Secrets uploaded to, watched when allowed: a change (an edit, a deletion, a
        // recreation) re-runs the objects of its namespace, which repair it. Metadata is all
        // the event needs (the pass reads the Secret), so no Secret data is held.
        if let Some(SecretWatching {
            repair: SecretRepair::Watch,
            source,
        }) = self.secret_watching.get()
        {
            for secret_name in &self.config.secret_names {
                watches.push(self.remote_secret_watch(secret_name, source));
            }
        }
        // Local namespaces kubesync created map back to their owner (and requeue it when a
        // namespace deletion finishes). Only namespaces in the shard's form are considered.
        watches.push(self.namespace_watch());
        // Local Secrets map to the remote object of their controller, through the same
        // (verified) translation as the objects themselves — also with a local namespace
        // suffix, which sync-controller got wrong. Their content is uploaded, so they are held
        // in full; one watch per name, selected on the server, holds those Secrets only.
        for secret_name in &self.config.secret_names {
            watches.push(self.local_secret_watch(secret_name));
        }
        watches
    }
}
