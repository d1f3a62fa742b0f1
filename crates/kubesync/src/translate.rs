//! Name translation between a source and a target cluster. Pure: no IO.
//!
//! A [`Translator`] maps a source object's namespace and name to the target's, and back. The
//! reverse direction is always **verified**: a target reference is accepted as the twin of a
//! source reference only if translating that source reference forward gives the target
//! reference again. A foreign object whose name merely looks like ours is never mistaken for
//! ours.

use std::fmt;

/// A namespace (or none, for cluster-scoped objects) and a name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectName {
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectName {
    /// A namespaced name.
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// A cluster-scoped name.
    pub fn cluster_scoped(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Maps names between the source and the target side of a syncer.
///
/// Implement [`to_target`](Translator::to_target) (returning `None` for source objects the
/// syncer ignores) and a candidate inverse in [`to_source_unverified`]; callers use
/// [`to_source`](Translator::to_source), which verifies the round trip.
///
/// [`to_source_unverified`]: Translator::to_source_unverified
pub trait Translator: Send + Sync + 'static {
    /// The target name of a source object, or `None` if the syncer ignores it.
    fn to_target(&self, source: &ObjectName) -> Option<ObjectName>;

    /// A candidate source name for a target object (not yet verified).
    fn to_source_unverified(&self, target: &ObjectName) -> Option<ObjectName>;

    /// The source name of a target object, verified by translating it forward again.
    fn to_source(&self, target: &ObjectName) -> Option<ObjectName> {
        let source = self.to_source_unverified(target)?;
        (self.to_target(&source).as_ref() == Some(target)).then_some(source)
    }

    /// The target namespace of a source namespace, when the mapping is per namespace. The
    /// default probes [`to_target`](Translator::to_target) with the name `x`; translators
    /// that constrain names must override it.
    fn namespace_to_target(&self, source_namespace: &str) -> Option<String> {
        self.to_target(&ObjectName::namespaced(source_namespace, "x"))
            .and_then(|t| t.namespace)
    }

    /// The source namespace of a target namespace (verified).
    fn namespace_to_source(&self, target_namespace: &str) -> Option<String> {
        let probe = self.to_source_unverified(&ObjectName::namespaced(target_namespace, "x"))?;
        let ns = probe.namespace?;
        (self.namespace_to_target(&ns).as_deref() == Some(target_namespace)).then_some(ns)
    }
}

/// The identity translation: same namespace, same name.
#[derive(Clone, Copy, Debug, Default)]
pub struct Identity;

impl Translator for Identity {
    fn to_target(&self, source: &ObjectName) -> Option<ObjectName> {
        Some(source.clone())
    }

    fn to_source_unverified(&self, target: &ObjectName) -> Option<ObjectName> {
        Some(target.clone())
    }
}

/// Sharding by suffix, as in sync-controller: remote `<name><remote_name_suffix>` in namespace
/// `<ns>` ↔ local `<name>` in namespace `<ns><local_namespace_suffix>`, for namespaces that
/// start with `namespace_prefix`. Empty values match everything.
///
/// The source side is the remote cluster, the target side the local one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SuffixTranslator {
    /// Suffix of remote object names, removed locally (the shard of this local cluster).
    pub remote_name_suffix: String,
    /// Suffix appended to the remote namespace to form the local namespace.
    pub local_namespace_suffix: String,
    /// Prefix every synced namespace must start with.
    pub namespace_prefix: String,
}

impl SuffixTranslator {
    /// Whether a remote object (namespace, name) belongs to this shard.
    pub fn matches_remote(&self, namespace: &str, name: &str) -> bool {
        namespace.starts_with(&self.namespace_prefix)
            && name.len() > self.remote_name_suffix.len()
            && name.ends_with(&self.remote_name_suffix)
    }
}

impl Translator for SuffixTranslator {
    fn to_target(&self, source: &ObjectName) -> Option<ObjectName> {
        let ns = source.namespace.as_deref()?;
        if !self.matches_remote(ns, &source.name) {
            return None;
        }
        let name = &source.name[..source.name.len() - self.remote_name_suffix.len()];
        Some(ObjectName::namespaced(
            format!("{ns}{}", self.local_namespace_suffix),
            name,
        ))
    }

    fn to_source_unverified(&self, target: &ObjectName) -> Option<ObjectName> {
        let ns = target.namespace.as_deref()?;
        let remote_ns = ns.strip_suffix(self.local_namespace_suffix.as_str())?;
        if remote_ns.is_empty() || !remote_ns.starts_with(&self.namespace_prefix) {
            return None;
        }
        Some(ObjectName::namespaced(
            remote_ns,
            format!("{}{}", target.name, self.remote_name_suffix),
        ))
    }

    fn namespace_to_target(&self, source_namespace: &str) -> Option<String> {
        source_namespace
            .starts_with(&self.namespace_prefix)
            .then(|| format!("{source_namespace}{}", self.local_namespace_suffix))
    }

    fn namespace_to_source(&self, target_namespace: &str) -> Option<String> {
        let ns = target_namespace.strip_suffix(self.local_namespace_suffix.as_str())?;
        (!ns.is_empty() && ns.starts_with(&self.namespace_prefix)).then(|| ns.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(rs: &str, ls: &str, p: &str) -> SuffixTranslator {
        SuffixTranslator {
            remote_name_suffix: rs.into(),
            local_namespace_suffix: ls.into(),
            namespace_prefix: p.into(),
        }
    }

    #[test]
    fn suffixes_map_both_ways() {
        let tr = t("-east", "-local", "team-");
        let remote = ObjectName::namespaced("team-a", "db-east");
        let local = tr.to_target(&remote).expect("matches");
        assert_eq!(local, ObjectName::namespaced("team-a-local", "db"));
        assert_eq!(tr.to_source(&local), Some(remote));
        assert_eq!(
            tr.namespace_to_target("team-a").as_deref(),
            Some("team-a-local")
        );
        assert_eq!(
            tr.namespace_to_source("team-a-local").as_deref(),
            Some("team-a")
        );
    }

    #[test]
    fn objects_outside_the_shard_or_prefix_are_ignored() {
        let tr = t("-east", "-local", "team-");
        assert_eq!(
            tr.to_target(&ObjectName::namespaced("team-a", "db-west")),
            None
        );
        assert_eq!(
            tr.to_target(&ObjectName::namespaced("other", "db-east")),
            None
        );
        // The suffix alone is not a name.
        assert_eq!(
            tr.to_target(&ObjectName::namespaced("team-a", "-east")),
            None
        );
        // Local objects in namespaces without the suffix or the prefix are not ours.
        assert_eq!(tr.to_source(&ObjectName::namespaced("team-a", "db")), None);
        assert_eq!(
            tr.to_source(&ObjectName::namespaced("other-local", "db")),
            None
        );
        assert_eq!(tr.to_target(&ObjectName::cluster_scoped("db-east")), None);
    }

    #[test]
    fn empty_values_match_everything() {
        let tr = t("", "", "");
        let n = ObjectName::namespaced("any", "thing");
        assert_eq!(tr.to_target(&n), Some(n.clone()));
        assert_eq!(tr.to_source(&n), Some(n));
    }

    #[test]
    fn reverse_is_verified_by_round_trip() {
        // A translator whose inverse is sloppy: it guesses names it never produces.
        struct Sloppy;
        impl Translator for Sloppy {
            fn to_target(&self, s: &ObjectName) -> Option<ObjectName> {
                s.name
                    .starts_with("ok-")
                    .then(|| ObjectName::namespaced("t", &s.name))
            }
            fn to_source_unverified(&self, t: &ObjectName) -> Option<ObjectName> {
                Some(ObjectName::namespaced("s", &t.name))
            }
        }
        assert_eq!(
            Sloppy.to_source(&ObjectName::namespaced("t", "ok-1")),
            Some(ObjectName::namespaced("s", "ok-1"))
        );
        assert_eq!(
            Sloppy.to_source(&ObjectName::namespaced("t", "foreign")),
            None
        );
    }

    #[test]
    fn round_trip_holds_for_many_names() {
        let tr = t("-rs", "-ls", "p");
        for ns in ["p", "p-1", "pp-ls", "p-rs"] {
            for name in ["a", "a-rs", "x-ls", "rs"] {
                let remote = ObjectName::namespaced(ns, format!("{name}-rs"));
                let local = tr.to_target(&remote).expect("in shard");
                assert_eq!(tr.to_source(&local), Some(remote));
            }
        }
    }
}
