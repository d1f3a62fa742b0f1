//! Which namespaces are destinations: names, globs and label selectors.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};

use crate::validate::{self, FieldError};

/// A Kubernetes label selector, checked as the apiserver checks one
/// ([`validate::label_selector`]: keys, values, operators and their values), ready to match.
/// The error names the offending field relative to the selector.
pub fn selector(s: &LabelSelector) -> Result<Selector, FieldError> {
    validate::label_selector(s)?;
    Selector::try_from(s.clone()).map_err(|e| FieldError::new("", e.to_string()))
}

/// Glob match with `*` (any run) and `?` (one character).
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0usize, 0usize, None::<usize>, 0usize);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// A namespace predicate beyond names, globs and selectors: `(name, labels) -> bool`, e.g.
/// another tool's pattern language. Compared by identity.
pub type NamespaceMatcher = super::Shared<NamespacePredicate>;

/// What a [`NamespaceMatcher`] calls: `(name, labels) -> bool`.
pub type NamespacePredicate = dyn Fn(&str, &BTreeMap<String, String>) -> bool + Send + Sync;

impl NamespaceMatcher {
    /// A matcher from a predicate.
    pub fn new(
        f: impl Fn(&str, &BTreeMap<String, String>) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self(std::sync::Arc::new(f))
    }
}

/// Which namespaces of a cluster receive a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceRule {
    /// A namespace name, or `"*"` / `""` / absent for all namespaces.
    pub namespace: Option<String>,
    /// Namespaces whose labels match (see [`selector`]).
    pub namespace_selector: Option<Selector>,
    /// Names or globs to leave out.
    pub exclude_namespaces: Vec<String>,
    /// If not empty, only namespaces matching one of these names or globs (an operator's
    /// allow list, on top of the rule).
    pub only_namespaces: Vec<String>,
    /// If given, only namespaces it matches too (on top of everything above).
    pub matcher: Option<NamespaceMatcher>,
}

impl NamespaceRule {
    /// Whether the rule names `namespace` itself (not through `"*"` or a selector alone).
    pub fn names(&self, namespace: &str) -> bool {
        self.namespace.as_deref() == Some(namespace)
    }

    /// Whether a namespace (name, labels, terminating?) is a destination.
    pub fn matches(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        terminating: bool,
    ) -> bool {
        if terminating {
            return false;
        }
        let by_name = match self.namespace.as_deref() {
            None | Some("") | Some("*") => true,
            Some(n) => n == name,
        };
        by_name
            && self
                .namespace_selector
                .as_ref()
                .is_none_or(|s| s.matches(labels))
            && !self.exclude_namespaces.iter().any(|g| glob(g, name))
            && (self.only_namespaces.is_empty()
                || self.only_namespaces.iter().any(|g| glob(g, name)))
            && self.matcher.as_ref().is_none_or(|m| (m.0)(name, labels))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn globs() {
        assert!(glob("kube-*", "kube-system"));
        assert!(glob("*-dev", "team-dev"));
        assert!(glob("a?c", "abc"));
        assert!(!glob("a?c", "ac"));
        assert!(glob("*", ""));
        assert!(!glob("kube-*", "default"));
        assert!(glob("exact", "exact") && !glob("exact", "exact2"));
    }

    #[test]
    fn namespace_rules() {
        let all = NamespaceRule {
            namespace: Some("*".into()),
            exclude_namespaces: vec!["kube-*".into()],
            ..Default::default()
        };
        assert!(all.matches("team-a", &labels(&[]), false));
        assert!(!all.matches("kube-system", &labels(&[]), false));
        assert!(
            !all.matches("team-a", &labels(&[]), true),
            "terminating namespaces get nothing"
        );
        let named = NamespaceRule {
            namespace: Some("team-a".into()),
            ..Default::default()
        };
        assert!(
            named.matches("team-a", &labels(&[]), false)
                && !named.matches("team-b", &labels(&[]), false)
        );
        let selected = NamespaceRule {
            namespace_selector: Some(
                selector(&LabelSelector {
                    match_labels: Some(labels(&[("env", "prod")])),
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "tier".into(),
                        operator: "NotIn".into(),
                        values: Some(vec!["legacy".into()]),
                    }]),
                })
                .expect("valid"),
            ),
            ..Default::default()
        };
        assert!(selected.matches("x", &labels(&[("env", "prod")]), false));
        assert!(!selected.matches("x", &labels(&[("env", "prod"), ("tier", "legacy")]), false));
        assert!(!selected.matches("x", &labels(&[("env", "dev")]), false));
        let matched = NamespaceRule {
            exclude_namespaces: vec!["team-x".into()],
            matcher: Some(NamespaceMatcher::new(|name, labels| {
                name.starts_with("team-") || labels.contains_key("shared")
            })),
            ..Default::default()
        };
        assert!(matched.matches("team-a", &labels(&[]), false));
        assert!(matched.matches("x", &labels(&[("shared", "")]), false));
        assert!(!matched.matches("x", &labels(&[]), false));
        assert!(
            !matched.matches("team-x", &labels(&[]), false),
            "the other rules still apply"
        );
        assert!(!matched.matches("team-a", &labels(&[]), true));
    }

    #[test]
    fn selector_validation() {
        let expression = |operator: &str, values: Option<Vec<String>>| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: operator.into(),
                values,
            }]),
            ..Default::default()
        };
        let bad = selector(&expression("Near", None));
        assert!(bad.expect_err("invalid").message.contains("Near"));
        assert!(selector(&expression("In", Some(vec![]))).is_err());
        assert!(selector(&expression("In", None)).is_err());
        assert!(selector(&expression("Exists", None)).is_ok());
    }
}
