//! What a declaration says and what a reconcile reports: the fan-out's data, no behaviour.

use std::fmt;
use std::sync::Arc;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde::{Deserialize, Serialize};

use super::rules::{
    CopyPatch, CopyRules, DeletionPolicy, NamespaceRule, OnConflict, Owner, Strategy,
};
use crate::key::ObjectKey;

/// One destination object: cluster, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestinationRef {
    /// The cluster's name.
    pub cluster: String,
    /// The namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl DestinationRef {
    /// The destination `cluster`/`namespace`/`name`.
    pub fn new(
        cluster: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            cluster: cluster.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The runtime key of the object there, of type `resource`.
    pub fn key(&self, resource: &ApiResource) -> ObjectKey {
        ObjectKey::new(
            self.cluster.clone(),
            resource,
            Some(self.namespace.clone()),
            &self.name,
        )
    }
}

impl fmt::Display for DestinationRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.cluster, self.namespace, self.name)
    }
}

/// The source of a fan-out (in the engine's own cluster).
#[derive(Clone, Debug, PartialEq)]
pub struct SourceRef {
    /// Its type.
    pub resource: ApiResource,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// Where copies go.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Destination {
    /// Cluster name (registered in the runtime context); `None`: the engine's own cluster.
    pub cluster: Option<String>,
    /// Which namespaces.
    pub namespaces: NamespaceRule,
    /// Name at the destination (default: the source's).
    pub name: Option<String>,
    /// How copies are written.
    pub strategy: Strategy,
    /// Overrides of the copies here, applied in order after the filters (the drift check
    /// compares against the patched copy).
    pub patches: Vec<CopyPatch>,
}

/// A resolved fan-out declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct FanOutSpec {
    /// What to copy.
    pub source: SourceRef,
    /// Where.
    pub destinations: Vec<Destination>,
    /// What to do with pre-existing objects.
    pub on_conflict: OnConflict,
    /// Label, annotation and data filters.
    pub rules: CopyRules,
    /// Whose consent a copy needs (`None`: the declaration may write wherever its
    /// destinations say).
    pub consent: Option<Consent>,
    /// What becomes of the copies when the declaration or its source is deleted.
    pub deletion_policy: DeletionPolicy,
}

/// Whether a consent object admits a copy: `(consent object, source, destination)`.
pub type Admits =
    Arc<dyn Fn(&DynamicObject, &DynamicObject, &DestinationRef) -> bool + Send + Sync>;

/// Why a copy of a source is refused at a destination, and what would admit it.
pub type Refusal = Arc<dyn Fn(&DynamicObject, &DestinationRef) -> String + Send + Sync>;

/// Copies go only where the destination namespace's owners consent: into `exempt` (e.g. the
/// declaration's own namespace, in the engine's own cluster), or into a namespace holding an
/// object of type `resource` (e.g. kubesync's `SyncGrant`) that [`admits`](Consent::admits)
/// the copy. The engine watches `resource` in every destination cluster: a consent that
/// appears brings the copy, one withdrawn removes it.
///
/// A namespace a destination names explicitly and no consent admits is reported
/// [`DestinationState::Refused`] with [`refusal`](Consent::refusal)'s message; namespaces
/// that `"*"` or a selector would select are left out silently.
#[derive(Clone)]
pub struct Consent {
    /// The type of the consent objects.
    pub resource: ApiResource,
    /// Namespaces of the engine's own cluster that need no consent.
    pub exempt: Vec<String>,
    /// Whether a consent object admits the copy of a source at a destination.
    pub admits: Admits,
    /// Why a destination is refused, and what would admit it.
    pub refusal: Refusal,
}

impl fmt::Debug for Consent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consent")
            .field("resource", &self.resource)
            .field("exempt", &self.exempt)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Consent {
    fn eq(&self, other: &Self) -> bool {
        self.resource == other.resource
            && self.exempt == other.exempt
            && Arc::ptr_eq(&self.admits, &other.admits)
            && Arc::ptr_eq(&self.refusal, &other.refusal)
    }
}

/// One declaration to reconcile.
#[derive(Clone, Debug)]
pub struct Declaration {
    /// The runtime key of the declaring object (events are mapped back to it).
    pub key: ObjectKey,
    /// Who owns the copies (`<cluster>/<namespace>/<name>` and uid).
    pub owner: Owner,
    /// The resolved spec.
    pub spec: FanOutSpec,
    /// The declaration is being deleted: remove every copy it made.
    pub deleting: bool,
}

/// State of one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DestinationState {
    /// The copy is current.
    Synced,
    /// Not written yet (e.g. waiting for a cluster's first list).
    Pending,
    /// Someone else's object is there.
    Conflict,
    /// Writing failed or the cluster cannot be reached.
    Error,
    /// The destination's owners do not consent (see [`Consent`]): nothing is written there.
    Refused,
}

/// What a reconcile found at one destination.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationStatus {
    /// Cluster name.
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// State.
    pub state: DestinationState,
    /// Why (for Conflict and Error: the reason, e.g. the API's message).
    pub message: String,
    /// The source resourceVersion the copy carries.
    pub source_resource_version: String,
}

/// The outcome of one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Every watch the declaration needs has listed (otherwise nothing was decided).
    pub ready: bool,
    /// The source exists and is not being deleted.
    pub source_found: bool,
    /// Per destination.
    pub destinations: Vec<DestinationStatus>,
    /// Copies of this declaration that still exist (0 after a complete cleanup).
    pub remaining_copies: usize,
    /// Clusters that could not be checked (unreachable): cleanup is not complete there.
    pub unreachable: Vec<String>,
    /// Failing watches of this declaration: (cluster, the API's message).
    pub watch_errors: Vec<(String, String)>,
}

impl DestinationStatus {
    /// The status of destination `at`.
    pub fn new(
        at: &DestinationRef,
        state: DestinationState,
        message: String,
        source_rv: &str,
    ) -> Self {
        Self {
            cluster: at.cluster.clone(),
            namespace: at.namespace.clone(),
            name: at.name.clone(),
            state,
            message,
            source_resource_version: source_rv.to_string(),
        }
    }
}
