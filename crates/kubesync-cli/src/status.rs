//! Shared status helpers of the operator's controllers: refusals, conditions and their
//! transition times, and the single path of the operator's own writes (status patches and
//! finalizers of kubesync's resources, through the library's [`Writer`]).
//!
//! Owns no controller logic and imports no controller.

use kube::core::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use kubesync::Cluster;
use kubesync::Writer;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::Condition;

/// Field manager of the operator's own writes.
pub const FIELD_MANAGER: &str = "kubesync-operator";

/// Why a declaration is refused: the `reason` of its `Ready=False` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A field is invalid (the message names it).
    InvalidSpec,
    /// A destination's patch is invalid or changes what the copy is.
    InvalidPatch,
    /// The object is a copy kubesync made, never a declaration.
    CopyNotADeclaration,
    /// The kind is not served by the cluster.
    ResourceNotFound,
    /// The kind may not be synced (operator flags, tenancy allow-list, kubesync's own kinds).
    ResourceNotAllowed,
    /// The source namespace is not the declaration's own (nor one allowed by a flag).
    SourceNamespaceNotAllowed,
    /// A named destination namespace is not allowed by the operator's flags.
    DestinationNotAllowed,
    /// The named RemoteCluster does not exist.
    RemoteClusterNotFound,
    /// The RemoteCluster does not admit the declaration's namespace.
    RemoteClusterNotAllowed,
    /// The RemoteCluster's kubeconfig Secret cannot be read or lacks its key.
    KubeconfigSecretInvalid,
    /// The RemoteCluster's kubeconfig does not parse or connect.
    KubeconfigInvalid,
    /// A declaration's destinations name two RemoteClusters of one apiserver.
    DuplicateCluster,
    /// An untrusted ObjectSync names no ServiceAccount to act as, and the operator sets no
    /// default.
    ServiceAccountRequired,
    /// The ServiceAccount a declaration acts as may not read its source.
    SourceForbidden,
    /// A ResourceSync's kind has no status subresource.
    NoStatusSubresource,
    /// A going ResourceSync's copies could not be released.
    FinalizersNotReleased,
}

impl Reason {
    /// The PascalCase reason as conditions carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::InvalidPatch => "InvalidPatch",
            Reason::CopyNotADeclaration => "CopyNotADeclaration",
            Reason::ResourceNotFound => "ResourceNotFound",
            Reason::ResourceNotAllowed => "ResourceNotAllowed",
            Reason::SourceNamespaceNotAllowed => "SourceNamespaceNotAllowed",
            Reason::DestinationNotAllowed => "DestinationNotAllowed",
            Reason::RemoteClusterNotFound => "RemoteClusterNotFound",
            Reason::RemoteClusterNotAllowed => "RemoteClusterNotAllowed",
            Reason::KubeconfigSecretInvalid => "KubeconfigSecretInvalid",
            Reason::KubeconfigInvalid => "KubeconfigInvalid",
            Reason::DuplicateCluster => "DuplicateCluster",
            Reason::ServiceAccountRequired => "ServiceAccountRequired",
            Reason::SourceForbidden => "SourceForbidden",
            Reason::NoStatusSubresource => "NoStatusSubresource",
            Reason::FinalizersNotReleased => "FinalizersNotReleased",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A reason and message for a `Ready=False` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why.
    pub reason: Reason,
    /// What is wrong, for a person.
    pub message: String,
}

impl Refusal {
    /// A refusal with this reason and message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// Now, rounded to the second (the precision of conditions' and destinations' times).
pub fn now() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now)
}

/// Longest message of a condition kubesync writes, in bytes (longer ones end in `...`).
pub const MAX_CONDITION_MESSAGE: usize = 1024;

/// A condition of type `type_`, `True` when `ok`. Its transition time is a placeholder (the
/// epoch) until [`with_transition`] sets it; every status is assembled through it. The
/// message is cut to [`MAX_CONDITION_MESSAGE`] bytes.
pub fn condition(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: kubesync::error::truncated(message.into(), MAX_CONDITION_MESSAGE),
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// A `Ready` condition.
pub fn ready(ok: bool, reason: &str, message: impl Into<String>) -> Condition {
    condition("Ready", ok, reason, message)
}

/// A `Ready=False` condition saying why a resource was refused.
pub fn refused(refusal: &Refusal) -> Condition {
    ready(false, refusal.reason.as_str(), refusal.message.clone())
}

/// Sets the condition's generation and transition time (pure): the previous transition time
/// is kept while the condition's status does not change, `now` otherwise.
pub fn with_transition(
    mut c: Condition,
    old: &[Condition],
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    c.observed_generation = generation;
    c.last_transition_time = match old.iter().find(|o| o.type_ == c.type_) {
        Some(o) if o.status == c.status => o.last_transition_time.clone(),
        _ => Time(now),
    };
    c
}

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

    /// Writes the status of one of the operator's own resources (a merge patch).
    pub async fn patch_status<K, S>(&self, obj: &K, status: &S) -> kubesync::Result<()>
    where
        K: Resource<DynamicType = ()> + ResourceExt,
        S: serde::Serialize,
    {
        let patch = serde_json::json!({ "status": status });
        self.writer
            .merge_patch_status(
                &self.local,
                &ApiResource::erase::<K>(&()),
                obj.namespace().as_deref(),
                &obj.name_any(),
                &patch,
                FIELD_MANAGER,
            )
            .await?;
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_is_kept_while_the_status_does_not_change() {
        let t0: jiff::Timestamp = "2024-01-01T00:00:00Z".parse().expect("time");
        let t1: jiff::Timestamp = "2024-01-01T00:01:00Z".parse().expect("time");
        let first = with_transition(ready(true, "Syncing", "a"), &[], Some(1), t0);
        assert_eq!(first.last_transition_time, Time(t0));
        assert_eq!(first.observed_generation, Some(1));
        // Same status, other reason and message: the time stays.
        let same = with_transition(
            ready(true, "Other", "b"),
            std::slice::from_ref(&first),
            Some(2),
            t1,
        );
        assert_eq!(same.last_transition_time, Time(t0));
        // Status flips: now.
        let flipped = with_transition(ready(false, "X", "c"), &[first], Some(2), t1);
        assert_eq!(flipped.last_transition_time, Time(t1));
    }

    #[test]
    fn now_is_whole_seconds() {
        assert_eq!(now().subsec_nanosecond(), 0);
    }
}

#[cfg(test)]
mod reason_tests {
    use super::Reason;

    /// The reasons conditions carry are PascalCase names of their variants, all different.
    #[test]
    fn reasons_are_their_variants_names() {
        let all = [
            Reason::InvalidSpec,
            Reason::InvalidPatch,
            Reason::CopyNotADeclaration,
            Reason::ResourceNotFound,
            Reason::ResourceNotAllowed,
            Reason::SourceNamespaceNotAllowed,
            Reason::DestinationNotAllowed,
            Reason::RemoteClusterNotFound,
            Reason::RemoteClusterNotAllowed,
            Reason::KubeconfigSecretInvalid,
            Reason::KubeconfigInvalid,
            Reason::NoStatusSubresource,
            Reason::FinalizersNotReleased,
        ];
        let names: std::collections::BTreeSet<&str> = all.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), all.len());
        for r in all {
            assert_eq!(r.as_str(), format!("{r:?}"));
            assert_eq!(r.to_string(), r.as_str());
        }
    }
}
