//! What a declaration says and what a reconcile reports: the fan-out's data, no behaviour.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde::{Deserialize, Serialize};

use super::rules::{
    CopyPatch, CopyRules, DeletionPolicy, Drift, Ignore, NamespaceRule, OnConflict, Owner, Shared,
    Strategy,
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
            self.namespace().map(String::from),
            &self.name,
        )
    }

    /// The namespace; `None` for a cluster-scoped object (an empty namespace).
    pub fn namespace(&self) -> Option<&str> {
        (!self.namespace.is_empty()).then_some(self.namespace.as_str())
    }
}

impl fmt::Display for DestinationRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace() {
            Some(ns) => write!(f, "{}/{ns}/{}", self.cluster, self.name),
            None => write!(f, "{}/{}", self.cluster, self.name),
        }
    }
}

/// The source of a fan-out: one object, or every object of its namespace that a
/// [`Selection`] selects, in the fan-out's own cluster or, with
/// [`cluster`](SourceRef::cluster), read from another one (pulled from a hub).
///
/// A cluster-scoped kind (ClusterRole, StorageClass, PriorityClass, a cluster-scoped custom
/// resource) has an empty `namespace`; its copies are cluster-scoped too: one per destination
/// cluster, whatever namespaces a [`Destination`] names.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceRef {
    /// Its type.
    pub resource: ApiResource,
    /// Its namespace; empty for a cluster-scoped kind.
    pub namespace: String,
    /// Its name (one source); ignored when [`select`](SourceRef::select) is given.
    pub name: String,
    /// Many sources: every object of the namespace that this selects, each copied under its
    /// own name.
    pub select: Option<Selection>,
    /// The cluster the source is read from (registered in the runtime context); `None`: the
    /// fan-out's own cluster. Only the source is watched there (no copies, no Namespaces):
    /// read rights on the source's kind are all a pull needs. While that cluster cannot be
    /// read, the source is *unknown*, never gone: no copy is changed or deleted for it
    /// ([`Outcome::source_unreachable`]).
    pub cluster: Option<String>,
}

impl SourceRef {
    /// One source object: `namespace`/`name` of type `resource`.
    pub fn one(
        resource: ApiResource,
        namespace: impl Into<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            resource,
            namespace: namespace.into(),
            name: name.into(),
            select: None,
            cluster: None,
        }
    }

    /// Every object of type `resource` in `namespace` that `selection` selects.
    pub fn selected(
        resource: ApiResource,
        namespace: impl Into<String>,
        selection: Selection,
    ) -> Self {
        Self {
            resource,
            namespace: namespace.into(),
            name: String::new(),
            select: Some(selection),
            cluster: None,
        }
    }

    /// The same source, read from the cluster `cluster` (registered in the runtime context).
    #[must_use]
    pub fn in_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = Some(cluster.into());
        self
    }

    /// The cluster the source is read from: [`cluster`](SourceRef::cluster), else `local`
    /// (the fan-out's own).
    pub fn cluster_or<'a>(&'a self, local: &'a str) -> &'a str {
        self.cluster.as_deref().unwrap_or(local)
    }

    /// The source namespace; `None` for a cluster-scoped kind.
    pub fn namespace(&self) -> Option<&str> {
        (!self.namespace.is_empty()).then_some(self.namespace.as_str())
    }

    /// Whether `obj` (an object of the source type in the source namespace) is a source.
    pub fn selects(&self, obj: &DynamicObject) -> bool {
        let name = obj.metadata.name.as_deref().unwrap_or_default();
        match &self.select {
            None => name == self.name,
            Some(selection) => selection.selects(obj),
        }
    }
}

/// Which objects of the source namespace are sources: those matching the label selector (if
/// given) **and** named in `names` (if not empty). kubesync's own copies (objects with the
/// `kubesync.io/managed-by` label) are never sources, so copies into the source namespace
/// never cascade into copies of copies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// A label selector (see [`rules::selector`](super::rules::selector)).
    pub selector: Option<kube::core::Selector>,
    /// Object names; empty: any.
    pub names: Vec<String>,
}

impl Selection {
    /// Whether `obj` is selected.
    pub fn selects(&self, obj: &DynamicObject) -> bool {
        self.selects_meta(&obj.metadata)
    }

    /// Whether the object with this metadata is selected.
    pub fn selects_meta(&self, meta: &kube::api::ObjectMeta) -> bool {
        use kube::core::SelectorExt;
        let none = std::collections::BTreeMap::new();
        let labels = meta.labels.as_ref().unwrap_or(&none);
        let name = meta.name.as_deref().unwrap_or_default();
        !labels.contains_key(super::rules::MANAGED_BY)
            && self.selector.as_ref().is_none_or(|s| s.matches(labels))
            && (self.names.is_empty() || self.names.iter().any(|n| n == name))
    }

    /// Why the apiserver would refuse its label selector (a key or value it does not take;
    /// `In` or `NotIn` without values), if it would: the selection is matched here, not by
    /// the apiserver, so a selector is checked as the apiserver checks one before it is
    /// used. A spec from a CRD is checked at admission already; this holds for a selection
    /// a library user builds.
    pub fn invalid(&self) -> Option<String> {
        use kube::core::Expression;
        let exprs = self.selector.clone().into_iter().flatten();
        exprs
            .map(|e| {
                let (key, values): (&String, Vec<&String>) = match &e {
                    Expression::In(k, vs) | Expression::NotIn(k, vs) if vs.is_empty() => {
                        return Err(format!(
                            "the label selector's {k:?} has an empty set of values"
                        ));
                    }
                    Expression::In(k, vs) | Expression::NotIn(k, vs) => (k, vs.iter().collect()),
                    Expression::Equal(k, v) | Expression::NotEqual(k, v) => (k, vec![v]),
                    Expression::Exists(k) | Expression::DoesNotExist(k) => (k, vec![]),
                };
                crate::validate::label_key(key)?;
                values
                    .into_iter()
                    .try_for_each(|v| crate::validate::label_value(v))
            })
            .find_map(|r| r.err())
            .map(|why| format!("the label selector is not valid: {why}"))
    }

    /// The label selector the source watch asks the apiserver for: the selector, and never
    /// kubesync's copies.
    pub fn label_selector(&self) -> String {
        let not_copies = format!("!{}", super::rules::MANAGED_BY);
        match &self.selector {
            Some(s) if !s.selects_all() => format!("{s},{not_copies}"),
            _ => not_copies,
        }
    }
}

/// Where copies go.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Destination {
    /// Cluster name (registered in the runtime context); `None`: the fan-out's own cluster.
    pub cluster: Option<String>,
    /// Which namespaces.
    pub namespaces: NamespaceRule,
    /// Name at the destination (default: the source's). For a single source only; a
    /// [`Selection`]'s copies are named [`name_prefix`](Destination::name_prefix) + the
    /// source's name + [`name_suffix`](Destination::name_suffix).
    pub name: Option<String>,
    /// Prepended to each source's name at this destination.
    pub name_prefix: String,
    /// Appended to each source's name at this destination.
    pub name_suffix: String,
    /// How copies are written.
    pub strategy: Strategy,
    /// Overrides of the copies here, applied in order after the filters (the drift check
    /// compares against the patched copy).
    pub patches: Vec<CopyPatch>,
    /// Fields of the copies here left to others: never reverted or reported, written only
    /// when a copy is created.
    pub ignore: Ignore,
}

/// A declaration whose copies another takes over ([`FanOutSpec::take_over`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Predecessor {
    /// Its key: the embedder wakes it when copies are taken from it (their events now wake
    /// their new owner), for it to find them another's.
    pub key: ObjectKey,
    /// Whose marks its copies carry.
    pub owner: Owner,
    /// Its record of the copies kubesync made for it: only the marked objects it vouches for
    /// are taken over (marks alone, which anyone who may patch an object can write, never).
    pub record: Arc<super::record::Record>,
}

impl Predecessor {
    /// Whether `there` is this predecessor's copy: its marks, and its record says kubesync
    /// created or adopted it (not one taken on its marks alone, nor one created while the
    /// record was open and not recorded since).
    pub fn holds(&self, there: &DynamicObject) -> bool {
        super::rules::owned_by(there, &self.owner)
            && there
                .metadata
                .uid
                .as_deref()
                .is_some_and(|uid| self.record.made_by_kubesync(uid))
    }
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
    /// Whether copies are written ([`Mode::Enforce`]) or only reported ([`Mode::Report`]).
    pub mode: Mode,
    /// Whether copies are updated once they exist.
    pub update_policy: UpdatePolicy,
    /// With [`OnConflict::Adopt`]: if given, only the objects it admits are adopted; every
    /// other object kubesync did not create is a `Conflict`.
    pub adoptable: Option<Adoptable>,
    /// Who the copies are written as (`None`: the destination cluster's own credentials). A
    /// declaration that acts as a tenant's ServiceAccount has every copy it creates, updates
    /// or adopts written as that identity ([`Cluster::acting_as`](crate::Cluster::acting_as)),
    /// so the apiserver's RBAC — its escalation and `bind` checks included — decides what the
    /// declaration may write. Deleting and releasing the copies it made (found by its marks,
    /// conditional on their uid) stays kubesync's own: a copy must go when consent ends, even
    /// if that identity lost its rights meanwhile.
    pub acting_as: Option<crate::ActAs>,
    /// Who the copies are written as in other clusters, by the runtime name of each, where
    /// that differs from [`acting_as`](Self::acting_as): a ServiceAccount's user name means
    /// someone else in another cluster (whoever owns that namespace there), so a declaration
    /// that acts as one writes through a RemoteCluster as the identity that cluster's admin
    /// mapped it to. A cluster without an entry is written as `acting_as`.
    pub acting_as_in: BTreeMap<String, crate::ActAs>,
    /// Declarations whose copies this one takes over (a declared hand-over: a rename, a split,
    /// a move between kinds). At one of this declaration's destinations, an object that
    /// carries a predecessor's marks and that the predecessor's record vouches for is adopted
    /// as this declaration's copy: one write moves the marks (and the content, where the two
    /// disagree on it), so the copy is never without an owner, and its data is not written
    /// where they agree. It is held to the destination's consent as an adoption is
    /// ([`OnConflict::Adopt`]), whatever `on_conflict` says, and written as
    /// [`acting_as`](Self::acting_as). The predecessor then finds the copy another's and
    /// leaves it: what was taken is never deleted with it.
    pub take_over: Vec<Predecessor>,
}

impl FanOutSpec {
    /// A declaration of `source` with no destination yet and every rule at its default: an
    /// object kubesync did not make left alone ([`OnConflict::Skip`]), nothing filtered, no
    /// consent needed, copies deleted with it, [`Mode::Enforce`], copies following their
    /// source, written with the destination cluster's own credentials. Every declaration
    /// starts here (`FanOutSpec { destinations, .., ..FanOutSpec::new(source) }`).
    pub fn new(source: SourceRef) -> Self {
        Self {
            source,
            destinations: Vec::new(),
            on_conflict: OnConflict::Skip,
            rules: CopyRules::default(),
            consent: None,
            deletion_policy: DeletionPolicy::Delete,
            mode: Mode::Enforce,
            update_policy: UpdatePolicy::Sync,
            adoptable: None,
            acting_as: None,
            acting_as_in: BTreeMap::new(),
            take_over: Vec::new(),
        }
    }

    /// What removing a declaration's copies needs, and nothing more: `source` (its kind, and
    /// where it lives), one destination entry per cluster its copies may be in (`None`: the
    /// fan-out's own), and whether they are deleted or released (`deletion_policy`). Its copies
    /// are found by their marks; nothing is written with it.
    pub fn removal(
        source: SourceRef,
        clusters: impl IntoIterator<Item = Option<String>>,
        deletion_policy: DeletionPolicy,
    ) -> Self {
        Self {
            destinations: clusters
                .into_iter()
                .map(|cluster| Destination {
                    cluster,
                    ..Destination::default()
                })
                .collect(),
            deletion_policy,
            ..Self::new(source)
        }
    }
}

/// What an [`Adoptable`] calls: `(object there, desired copy) -> bool`.
pub type AdoptionRule = dyn Fn(&DynamicObject, &DynamicObject) -> bool + Send + Sync;

/// Which objects kubesync did not create a declaration may adopt (with
/// [`OnConflict::Adopt`]), e.g. the copies another tool made of the same source.
#[derive(Clone, Debug, PartialEq)]
pub struct Adoptable {
    /// `(object there, desired copy)`: whether the object there (as the stores hold it:
    /// metadata at least; or as read live) may be adopted as that copy (which carries
    /// kubesync's marks, the source's among them).
    pub admits: Shared<AdoptionRule>,
    /// The Conflict's message for an object it does not admit.
    pub refusal: String,
}

/// Whether a declaration's copies are updated once they exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum UpdatePolicy {
    /// Copies follow their source, and changes made to them are reverted.
    #[default]
    Sync,
    /// A copy is created where it is missing (again when it was deleted) and never updated
    /// afterwards: it is its destination's. The plan reports it `Synced`, saying so when it
    /// differs from what kubesync would write. Deletion follows the [`DeletionPolicy`].
    CreateOnly,
    /// A copy is updated only when its source changed since it was written (the source's
    /// resourceVersion differs from the one the copy's mark carries): a change made to a copy
    /// stays until the source changes — the version gate of the copiers whose annotations
    /// kubesync honours, for those who rely on it. A missing copy is created.
    OnSourceChange,
}

/// Whether a declaration's copies are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Copies are created, updated and deleted as the plan says.
    #[default]
    Enforce,
    /// Nothing is written to any destination (nor deleted there, also when the declaration
    /// goes): each destination the plan would write to is reported
    /// [`DestinationState::OutOfSync`] with what would be done ([`Planned`]) and, for an
    /// update, the fields that would change.
    Report,
}

/// What [`Mode::Enforce`] would do at a destination that [`Mode::Report`] leaves alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Planned {
    /// Create the copy.
    Create,
    /// Update the copy (or adopt the object there).
    Update,
    /// Delete the copy (or release it: keep it, marks removed).
    Delete,
}

/// Whether a consent object admits a copy: `(consent object, source, destination)`.
pub type Admits =
    Arc<dyn Fn(&DynamicObject, &DynamicObject, &DestinationRef) -> bool + Send + Sync>;

/// Why a copy of a source is refused at a destination, and what would admit it.
pub type Refusal = Arc<dyn Fn(&DynamicObject, &DestinationRef) -> String + Send + Sync>;

/// Which sources a namespace exempt from consent takes without it.
pub type Exempts = Arc<dyn Fn(&DynamicObject) -> bool + Send + Sync>;

/// Copies go only where the destination namespace's owners consent: into `exempt` (e.g. the
/// declaration's own namespace, in the fan-out's own cluster) for the sources
/// [`exempts`](Consent::exempts) lets through there, or into a namespace holding an object of
/// type `resource` (e.g. kubesync's `SyncGrant`) that [`admits`](Consent::admits) the copy.
/// Adopting an object the declaration did not create needs a consent object that
/// [`adopts`](Consent::adopts) it, in every namespace (the exempt ones too); else that
/// destination is a `Conflict` and nothing is written. A declaration that needs consent makes
/// at most [`max_copies`](Consent::max_copies) copies. The fan-out watches `resource` in every destination cluster: a consent that
/// appears brings the copy, one withdrawn removes it.
///
/// A namespace a destination names explicitly and no consent admits is reported
/// [`DestinationState::Refused`] with [`refusal`](Consent::refusal)'s message; namespaces
/// that `"*"` or a selector would select are left out silently.
#[derive(Clone)]
pub struct Consent {
    /// The type of the consent objects.
    pub resource: ApiResource,
    /// Namespaces of the fan-out's own cluster that need no consent for the sources
    /// [`exempts`](Consent::exempts) lets through.
    pub exempt: Vec<String>,
    /// Which sources (as they will be written) the exempt namespaces take without consent.
    pub exempts: Exempts,
    /// Whether a consent object admits the copy of a source at a destination.
    pub admits: Admits,
    /// Whether a consent object admits adopting the object at a destination (the source, and
    /// the destination).
    pub adopts: Admits,
    /// At most this many copies per declaration: one that would make more writes and deletes
    /// nothing, and says so in one `Error` status (its existing copies stay as they are).
    pub max_copies: usize,
    /// Why a destination is refused, and what would admit it.
    pub refusal: Refusal,
}

impl Destination {
    /// The name of `source`'s copy here.
    pub fn copy_name(&self, source: &SourceRef, source_name: &str) -> String {
        match (&self.name, &source.select) {
            (Some(name), None) => name.clone(),
            _ => format!("{}{source_name}{}", self.name_prefix, self.name_suffix),
        }
    }
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
    /// The declaration's spec is refused (only its kind, source namespace and clusters are
    /// known, and its consent): write nothing, and remove only the copies whose consent was
    /// withdrawn. Consent ends when it is withdrawn, whatever state the declaration is in;
    /// the other copies stay until the spec is valid again or the declaration goes.
    pub refused: bool,
    /// Its [record](super::record) of the copies kubesync made for it, as it was last kept
    /// ([`Outcome::record`]); `None` for a declaration kept before records existed (the
    /// first time a fan-out sees it, its marks are trusted, and recorded).
    pub record: Option<super::record::Record>,
}

impl Declaration {
    /// Whether the source is left unread: the declaration goes, or its spec is refused (its
    /// copies are found by their marks).
    pub fn reads_no_source(&self) -> bool {
        self.deleting || self.refused
    }
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
    /// [`Mode::Report`]: the copy differs from what kubesync would write (or is missing, or
    /// would be deleted); nothing was written.
    OutOfSync,
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
    /// The source's name (empty where no one source is concerned, e.g. an unknown cluster).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source: String,
    /// [`Mode::Report`]: what would be done here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<Planned>,
    /// [`Mode::Report`], an update: the fields that would change (paths, never values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_fields: Vec<String>,
    /// The copy was found changed by someone else: which fields, and by which field managers
    /// (in [`Mode::Enforce`], reported once, by the reconcile that reverted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<Drift>,
    /// Not current: since when this process knows the copy is behind (the first sight of the
    /// source's version, of the destination namespace's, or of the copy's deletion, whichever
    /// is latest); `None` where unknown.
    #[serde(skip)]
    pub behind_since: Option<Instant>,
}

/// The outcome of one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Every watch the declaration needs has listed (otherwise nothing was decided).
    pub ready: bool,
    /// The source exists and is not being deleted (a selection: at least one object is
    /// selected).
    pub source_found: bool,
    /// How many source objects there are (0 or 1 for a single source).
    pub sources: usize,
    /// Per destination.
    pub destinations: Vec<DestinationStatus>,
    /// Copies of this declaration that still exist (0 after a complete cleanup).
    pub remaining_copies: usize,
    /// Clusters that could not be checked (unreachable): cleanup is not complete there.
    pub unreachable: Vec<String>,
    /// Failing watches of this declaration.
    pub watch_errors: Vec<WatchError>,
    /// Copies written by this reconcile that carry a change (a newer source version, or a
    /// new copy), each with its destination cluster and how long after the change was first
    /// seen it was written.
    pub propagated: Vec<Propagated>,
    /// Each source's name and resourceVersion as this reconcile copied it.
    pub source_versions: Vec<SourceVersion>,
    /// The source lives in another cluster that cannot be read now: it is unknown, not gone.
    /// No copy was written or deleted for it (only copies whose consent was withdrawn were
    /// removed); each is reported [`DestinationState::Error`], kept as it is.
    pub source_unreachable: Option<SourceUnreachable>,
    /// The cluster the source is read from, when it is not the fan-out's own
    /// ([`SourceRef::cluster`]).
    pub source_cluster: Option<String>,
    /// The declaration's [record](super::record) of the copies kubesync made for it, to keep
    /// (and to bring back in [`Declaration::record`]); `None`: nothing was decided, keep the
    /// one kept.
    pub record: Option<std::sync::Arc<super::record::Record>>,
    /// Its record was opened where it is kept during this reconcile (it is closed now): keep
    /// it again even if nothing else changed.
    pub record_opened: bool,
}

/// A failing watch of a declaration ([`Outcome::watch_errors`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchError {
    /// The cluster it watches.
    pub cluster: String,
    /// The API's message.
    pub message: String,
}

/// A copy written with a change ([`Outcome::propagated`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Propagated {
    /// The copy's cluster.
    pub cluster: String,
    /// How long after the change was first seen the copy was written.
    pub lag: std::time::Duration,
}

/// A source as a reconcile copied it ([`Outcome::source_versions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceVersion {
    /// Its name.
    pub name: String,
    /// Its resourceVersion.
    pub resource_version: String,
}

/// Why a source in another cluster cannot be read ([`Outcome::source_unreachable`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceUnreachable {
    /// The source's cluster.
    pub cluster: String,
    /// Why: the watch's last error, or that the cluster is not connected.
    pub message: String,
    /// Since when this process has found it failing (`None`: it was never connected).
    pub since: Option<std::time::SystemTime>,
}

impl DestinationStatus {
    /// Where it is.
    pub fn at(&self) -> DestinationRef {
        DestinationRef::new(&self.cluster, &self.namespace, &self.name)
    }

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
            source: String::new(),
            planned: None,
            changed_fields: Vec::new(),
            drift: None,
            behind_since: None,
        }
    }

    /// The same, about the copy of source `name`.
    #[must_use]
    pub fn of_source(mut self, name: &str) -> Self {
        self.source = name.to_string();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::Selection;
    use kube::core::{Expression, Selector};

    fn with(e: Expression) -> Selection {
        Selection {
            selector: Some(Selector::from(e)),
            names: vec![],
        }
    }

    #[test]
    fn a_selector_the_apiserver_would_refuse_is_told_apart() {
        assert_eq!(Selection::default().invalid(), None, "none selects all");
        let fine = with(Expression::In("app".into(), ["tls".into()].into()));
        assert_eq!(fine.invalid(), None);
        let bad_value = with(Expression::Equal("app".into(), "a(b".into()));
        let why = bad_value.invalid().expect("refused");
        assert!(why.contains("\"a(b\" is not a label value"), "{why}");
        let bad_key = with(Expression::Exists("-app".into()));
        assert!(
            bad_key
                .invalid()
                .expect("refused")
                .contains("not a label key")
        );
        let empty = with(Expression::NotIn("app".into(), Default::default()));
        assert!(empty.invalid().expect("refused").contains("empty set"));
    }
}
