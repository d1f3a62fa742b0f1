//! Work-queue keys that carry the cluster.

use std::fmt;

use kube::ResourceExt;
use kube::core::{ApiResource, DynamicObject};

/// The identity of one object in one cluster: what the work queue holds and what a
/// [`Reconciler`](crate::runtime::Reconciler) receives.
///
/// Displayed as `cluster/Kind.group/namespace/name` (`cluster/Kind/name` for the core group and
/// cluster-scoped objects), e.g. `east/ConfigMap/default/settings`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The cluster's name.
    pub cluster: String,
    /// The API group (empty for the core group).
    pub group: String,
    /// The kind, e.g. `ConfigMap`.
    pub kind: String,
    /// The namespace (`None` for cluster-scoped objects).
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// A key for an object of the given resource type.
    pub fn new(
        cluster: impl Into<String>,
        resource: &ApiResource,
        namespace: Option<String>,
        name: impl Into<String>,
    ) -> Self {
        Self {
            cluster: cluster.into(),
            group: resource.group.clone(),
            kind: resource.kind.clone(),
            namespace,
            name: name.into(),
        }
    }

    /// The key of a watched object.
    pub fn for_object(cluster: &str, resource: &ApiResource, obj: &DynamicObject) -> Self {
        Self::new(cluster, resource, obj.namespace(), obj.name_any())
    }

    /// The same object identity in another cluster.
    #[must_use]
    pub fn in_cluster(&self, cluster: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            ..self.clone()
        }
    }

    /// Whether the key is of this resource type.
    pub fn is_of(&self, resource: &ApiResource) -> bool {
        is_kind_of(&self.group, &self.kind, resource)
    }
}

/// Whether `group`/`kind` is `resource`'s group and kind (the core group, `""`, compared
/// without `memcmp`: see [`text`](crate::text)).
pub(crate) fn is_kind_of(group: &str, kind: &str, resource: &ApiResource) -> bool {
    crate::text::same(group, &resource.group) && kind == resource.kind
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.cluster, self.kind)?;
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        if let Some(ns) = &self.namespace {
            write!(f, "/{ns}")?;
        }
        write!(f, "/{}", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;

    #[test]
    fn display_carries_cluster_kind_group_namespace_name() {
        let cm = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
        let k = ObjectKey::new("east", &cm, Some("default".into()), "settings");
        assert_eq!(k.to_string(), "east/ConfigMap/default/settings");
        let w = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"));
        let k = ObjectKey::new("west", &w, None, "w1");
        assert_eq!(k.to_string(), "west/Widget.example.com/w1");
        assert!(k.is_of(&w) && !k.is_of(&cm));
        assert_eq!(k.in_cluster("east").cluster, "east");
    }
}
