//! What ObjectSyncs may do: the operator's `kubesync run` flags, checked purely.
//!
//! Security: by default the source must live in the ObjectSync's own namespace (whoever may
//! create an ObjectSync in namespace A cannot copy a Secret out of namespace B). The policy
//! allows named source namespaces, restricts destination namespaces, and restricts which kinds
//! may be synced. A refused ObjectSync gets `Ready=False` with the rule that refused it.

use kubesync::syncers::fan_out::rules::glob;

use crate::status::Refusal;

/// What ObjectSyncs may do (the operator's flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectSyncPolicy {
    /// Namespaces (names or globs) whose objects any ObjectSync may use as a source, besides
    /// its own namespace.
    pub source_namespaces: Vec<String>,
    /// If not empty, copies go only to namespaces matching one of these (names or globs).
    pub allow_destination_namespaces: Vec<String>,
    /// Copies never go to these namespaces (names or globs).
    pub deny_destination_namespaces: Vec<String>,
    /// If not empty, only these kinds may be synced: `Kind` for the core group or
    /// `Kind.group` (e.g. `Secret`, `ConfigMap`, `CronJob.batch`), or `*`.
    pub allowed_resources: Vec<String>,
}

impl ObjectSyncPolicy {
    /// Checks an ObjectSync's spec against the policy (pure).
    pub fn check(
        &self,
        own_namespace: &str,
        source_namespace: &str,
        group: &str,
        kind: &str,
        destinations: &[Option<String>],
    ) -> Result<(), Refusal> {
        if source_namespace != own_namespace
            && !self
                .source_namespaces
                .iter()
                .any(|g| glob(g, source_namespace))
        {
            return Err(Refusal::new(
                "SourceNamespaceNotAllowed",
                format!(
                    "the source must be in the ObjectSync's namespace {own_namespace:?}; {source_namespace:?} is not among the operator's allowed source namespaces"
                ),
            ));
        }
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        if !self.allowed_resources.is_empty()
            && !self
                .allowed_resources
                .iter()
                .any(|r| r == "*" || *r == qualified)
        {
            return Err(Refusal::new(
                "ResourceNotAllowed",
                format!("{qualified} is not among the operator's allowed resources"),
            ));
        }
        for ns in destinations
            .iter()
            .flatten()
            .filter(|n| !n.is_empty() && n.as_str() != "*")
        {
            if self.deny_destination_namespaces.iter().any(|g| glob(g, ns))
                || (!self.allow_destination_namespaces.is_empty()
                    && !self
                        .allow_destination_namespaces
                        .iter()
                        .any(|g| glob(g, ns)))
            {
                return Err(Refusal::new(
                    "DestinationNotAllowed",
                    format!("destination namespace {ns:?} is not allowed by the operator"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_refuses_with_the_rule_that_refused() {
        let default = ObjectSyncPolicy::default();
        assert!(
            default
                .check("a", "a", "", "Secret", &[Some("*".into())])
                .is_ok()
        );
        let r = default
            .check("a", "b", "", "Secret", &[])
            .expect_err("cross-namespace");
        assert_eq!(r.reason, "SourceNamespaceNotAllowed");
        let p = ObjectSyncPolicy {
            source_namespaces: vec!["shared-*".into()],
            allow_destination_namespaces: vec!["team-*".into()],
            deny_destination_namespaces: vec!["team-secret".into()],
            allowed_resources: vec!["Secret".into(), "CronJob.batch".into()],
        };
        assert!(
            p.check("a", "shared-certs", "", "Secret", &[Some("team-x".into())])
                .is_ok()
        );
        assert_eq!(
            p.check("a", "a", "", "ConfigMap", &[])
                .expect_err("kind")
                .reason,
            "ResourceNotAllowed"
        );
        assert!(p.check("a", "a", "batch", "CronJob", &[]).is_ok());
        assert_eq!(
            p.check("a", "a", "", "Secret", &[Some("team-secret".into())])
                .expect_err("deny")
                .reason,
            "DestinationNotAllowed"
        );
        assert_eq!(
            p.check("a", "a", "", "Secret", &[Some("prod".into())])
                .expect_err("allow")
                .reason,
            "DestinationNotAllowed"
        );
    }
}
