//! What a declaration needs watched, read off it once (pure): its key and uid, the copied
//! kind, where its sources live and how they are watched, the clusters it touches, and whether
//! it reads a source at all. The watch set's steps take this, not the declaration.

use kube::core::ApiResource;

use crate::key::ObjectKey;
use crate::syncers::fan_out::index::{Copying, Scope};
use crate::syncers::fan_out::spec::{Declaration, Selection};

/// What a declaration needs watched, read off it once ([`Needs::of`]): the steps of
/// [`WatchSet::watch`] take this, not the declaration.
pub(super) struct Needs {
    /// The declaration's key (events map back to it).
    pub(super) key: ObjectKey,
    /// Its uid (its copies' `managed-by` label).
    pub(super) uid: String,
    /// The copied kind.
    pub(super) resource: ApiResource,
    /// Its single source's key (a selection: the source namespace, no name).
    pub(super) source: ObjectKey,
    /// Its selection (none: it copies one object).
    pub(super) selection: Option<Selection>,
    /// The source's cluster.
    pub(super) source_cluster: String,
    /// The source namespace (none for a cluster-scoped kind).
    pub(super) source_namespace: Option<String>,
    /// The watch scope of its sources.
    pub(super) source_scope: Scope,
    /// The clusters its destinations name, and this one.
    pub(super) wanted: Vec<String>,
    /// The consent objects' kind, while its copies need consent and it does not go.
    pub(super) consent: Option<ApiResource>,
    /// It reads no source (it goes, or its spec is refused).
    pub(super) reads_no_source: bool,
}

impl Needs {
    /// What `decl`, of a fan-out in the cluster `local`, needs watched.
    pub(super) fn of(local: &str, decl: &Declaration) -> Self {
        let source = &decl.spec.source;
        Self {
            key: decl.key.clone(),
            uid: decl.owner.uid.clone(),
            resource: source.resource.clone(),
            // Its single source's key (a selection's: the namespace, an empty name).
            source: ObjectKey::new(
                source.cluster_or(local).to_string(),
                &source.resource,
                source.namespace().map(String::from),
                &source.name,
            ),
            selection: source.select.clone(),
            source_cluster: source.cluster_or(local).to_string(),
            source_namespace: source.namespace().map(String::from),
            source_scope: Scope::Sources {
                namespace: source.namespace().map(String::from),
            },
            wanted: (decl.spec.destinations.iter())
                .map(|d| d.cluster.clone().unwrap_or_else(|| local.to_string()))
                .chain([local.to_string()])
                .collect(),
            consent: (decl.spec.consent.as_ref())
                .filter(|_| !decl.deleting)
                .map(|c| c.resource.clone()),
            reads_no_source: decl.reads_no_source(),
        }
    }

    /// What it copies, as the index registers it.
    pub(super) fn copying(&self) -> Copying {
        match &self.selection {
            None => Copying::One(self.source.clone()),
            Some(selection) => Copying::Selection(selection.clone()),
        }
    }

    /// Whether `source`, a source it copied before, may still be one of its sources now: its
    /// one object, or an object of the namespace its selection selects from (whether it is
    /// still selected is the selection's to say, once its watch has listed).
    pub(super) fn may_copy(&self, source: &ObjectKey) -> bool {
        match &self.selection {
            _ if self.reads_no_source => false,
            None => *source == self.source,
            Some(_) => {
                let place = &self.source;
                (source.cluster == place.cluster)
                    && (source.group == place.group)
                    && (source.kind == place.kind)
                    && (source.namespace == place.namespace)
            }
        }
    }
}
