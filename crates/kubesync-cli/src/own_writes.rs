//! The binary's only path to status patches and finalizers of kubesync's resources, through
//! the library's [`Writer`].
//!
//! Owns no controller logic, decides nothing and imports no controller: the controllers say
//! what to write, [`OwnWrites`] writes it.

use futures::future::BoxFuture;
use kube::core::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use kubesync::syncers::fan_out::record::Ledger;
use kubesync::{Cluster, ObjectKey, Writer};

/// Field manager of the operator's own writes.
pub const FIELD_MANAGER: &str = "kubesync-operator";

/// The operator's own writes to kubesync's resources in the cluster it runs in: status merge
/// patches and finalizers, all through one [`Writer`] (counted as component `operator`).
#[derive(Clone, Debug)]
pub struct OwnWrites {
    local: Cluster,
    writer: Writer,
}

impl OwnWrites {
    /// Writes into `local`, counted by `writer`.
    pub fn new(local: Cluster, writer: Writer) -> Self {
        Self { local, writer }
    }

    /// The cluster written to.
    pub fn local(&self) -> &Cluster {
        &self.local
    }

    /// The writer (and its counts).
    pub fn writer(&self) -> &Writer {
        &self.writer
    }

    /// Writes the status of one of the operator's own resources (a merge patch), decided on
    /// `obj` as read: only if the object is still at `obj`'s resourceVersion
    /// ([`Writer::write_status`]). A status refused because the object changed since (another
    /// replica's write after this one was paused, an edit) is not an error: the change
    /// enqueues the object again, and that reconcile decides on what it shows.
    pub async fn patch_status<K, S>(&self, obj: &K, status: &S) -> kubesync::Result<()>
    where
        K: Resource<DynamicType = ()> + ResourceExt,
        S: serde::Serialize,
    {
        let mut observed = DynamicObject::new(&obj.name_any(), &ApiResource::erase::<K>(&()));
        observed.metadata.namespace = obj.namespace();
        observed.metadata.resource_version = obj.resource_version();
        let written = self
            .writer
            .write_status(
                &self.local,
                &ApiResource::erase::<K>(&()),
                &observed,
                status,
                FIELD_MANAGER,
            )
            .await;
        match written {
            Err(kubesync::Error::Kube(kube::Error::Api(e))) if e.is_conflict() => {
                tracing::debug!(
                    object = %obj.name_any(),
                    "status not written: the object changed since it was decided on"
                );
                Ok(())
            }
            other => other.map(drop),
        }
    }

    /// Adds or removes one of the operator's finalizers on one of its own resources.
    pub async fn set_finalizer<K>(
        &self,
        obj: &K,
        finalizer: &str,
        present: bool,
    ) -> kubesync::Result<()>
    where
        K: Resource<DynamicType = ()> + serde::Serialize,
    {
        let dynamic: DynamicObject = serde_json::from_value(serde_json::to_value(obj)?)?;
        self.writer
            .set_finalizer(
                &self.local,
                &ApiResource::erase::<K>(&()),
                &dynamic,
                finalizer,
                present,
                FIELD_MANAGER,
            )
            .await?;
        Ok(())
    }

    /// Adds or removes a finalizer on an object of another cluster (the remote objects a
    /// ResourceSync releases).
    pub async fn set_foreign_finalizer(
        &self,
        cluster: &Cluster,
        ar: &ApiResource,
        obj: &DynamicObject,
        finalizer: &str,
        present: bool,
    ) -> kubesync::Result<()> {
        self.writer
            .set_finalizer(cluster, ar, obj, finalizer, present, FIELD_MANAGER)
            .await?;
        Ok(())
    }
}

/// The records of the copies kubesync made are kept in the status of the ObjectSync or
/// ClusterObjectSync that declares them ([`ObjectSyncStatus::record`](crate::crd::ObjectSyncStatus::record)).
/// Other declarations' records (the compat tools' annotations) are kept elsewhere
/// ([`crate::compat::records`]; [`Ledgers`] opens each kind's where it is kept).
impl Ledger for OwnWrites {
    /// Merges `openSince` into the declaration's `status.record`, unconditionally (opening
    /// only widens what a restart takes as made; this writer's next status write of the
    /// object is based on the version it answered).
    fn open<'a>(
        &'a self,
        decl: &'a ObjectKey,
        since: jiff::Timestamp,
    ) -> BoxFuture<'a, kubesync::Result<()>> {
        Box::pin(async move {
            let ar = match decl.kind.as_str() {
                "ObjectSync" if decl.group == crate::crd::GROUP => {
                    ApiResource::erase::<crate::crd::ObjectSync>(&())
                }
                "ClusterObjectSync" if decl.group == crate::crd::GROUP => {
                    ApiResource::erase::<crate::crd::ClusterObjectSync>(&())
                }
                _ => return Ok(()),
            };
            let mut target = DynamicObject::new(&decl.name, &ar);
            target.metadata.namespace = decl.namespace.clone();
            let opened = serde_json::json!({"record": {"openSince": since.to_string()}});
            self.writer
                .write_status(&self.local, &ar, &target, &opened, FIELD_MANAGER)
                .await
                .map(drop)
        })
    }
}

/// Where every declaration's record is kept: an ObjectSync's or ClusterObjectSync's in its
/// status ([`OwnWrites`]), any other's (the compat tools' annotations) in `others`, if any.
#[derive(Clone)]
pub struct Ledgers {
    /// The ledger of kubesync's own declarations.
    pub objects: OwnWrites,
    /// The ledger of the others (`None`: they keep none).
    pub others: Option<std::sync::Arc<dyn Ledger>>,
}

impl Ledger for Ledgers {
    fn open<'a>(
        &'a self,
        decl: &'a ObjectKey,
        since: jiff::Timestamp,
    ) -> BoxFuture<'a, kubesync::Result<()>> {
        let own = decl.group == crate::crd::GROUP
            && matches!(decl.kind.as_str(), "ObjectSync" | "ClusterObjectSync");
        match (own, &self.others) {
            (true, _) => self.objects.open(decl, since),
            (false, Some(others)) => others.open(decl, since),
            (false, None) => Box::pin(async { Ok(()) }),
        }
    }
}
