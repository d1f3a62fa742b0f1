//! Names, label selectors and globs, checked the way the apiserver checks them (pure).
//!
//! A declaration is judged by these before any request is made: a selector the apiserver
//! would refuse as a list's `labelSelector` (a value with `(`, a key with a space,
//! `DoesNotExist` with values) is an invalid spec with the field's path, never a watch that
//! fails for ever. Each error is a sentence for people, naming the offending value.
//!
//! The rules are Kubernetes' own (`k8s.io/apimachinery/pkg/util/validation` and
//! `pkg/labels`): DNS-1123 labels and subdomains, qualified names (label keys), label values,
//! and the operators of a `LabelSelector` with how many values each takes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Longest DNS-1123 label (a namespace's name, a label key's name part).
pub const MAX_LABEL: usize = 63;
/// Longest DNS-1123 subdomain (most objects' names, a label key's prefix).
pub const MAX_SUBDOMAIN: usize = 253;

/// A value with the field path where it was found, and why it is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path, e.g. `spec.source.selector.matchExpressions[0].values[1]`.
    pub path: String,
    /// Why, for people.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl FieldError {
    /// The error `message` at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The same error under a parent path (`spec.source` + `.selector...`).
    #[must_use]
    pub fn under(mut self, parent: &str) -> Self {
        self.path = if self.path.is_empty() {
            parent.to_string()
        } else if self.path.starts_with('[') {
            format!("{parent}{}", self.path)
        } else {
            format!("{parent}.{}", self.path)
        };
        self
    }
}

/// A value quoted for a message: at most 80 characters of it.
pub fn quoted(value: &str) -> String {
    const SHOWN: usize = 80;
    if value.chars().count() <= SHOWN {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(SHOWN).collect();
        format!("{head:?}... ({} bytes)", value.len())
    }
}

fn alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// Whether `s` is a DNS-1123 label: 1 to 63 lowercase letters, digits and `-`, starting and
/// ending with a letter or digit (a namespace's name).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_LABEL
        && s.chars().all(|c| alnum_lower(c) || c == '-')
        && s.starts_with(alnum_lower)
        && s.ends_with(alnum_lower)
}

/// Whether `s` is a DNS-1123 subdomain: at most 253 characters of dot-separated DNS labels
/// (except that a part may be longer than 63), e.g. `example.com` (most objects' names).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SUBDOMAIN
        && s.split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(|c| alnum_lower(c) || c == '-')
                && part.starts_with(alnum_lower)
                && part.ends_with(alnum_lower)
        })
}

/// Whether `s` may be a label value's or a key's name part: letters, digits, `-`, `_` and
/// `.`, starting and ending with a letter or digit (no length check).
fn is_qualified_part(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !s.is_empty()
        && s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// A label (or annotation) key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit.
pub fn label_key(key: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{} is not a label key: {why}", quoted(key)));
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return bad(
            "its prefix (before '/') must be a DNS subdomain: lowercase letters, digits, '-' and '.', at most 253 characters",
        );
    }
    if name.is_empty() {
        return bad("the name (after any prefix and '/') is empty");
    }
    if name.len() > MAX_LABEL {
        return bad("the name (after any prefix and '/') is longer than 63 characters");
    }
    if !is_qualified_part(name) {
        return bad(
            "the name may hold only letters, digits, '-', '_' and '.', and must start and end with a letter or digit",
        );
    }
    Ok(())
}

/// A label value: empty, or at most 63 letters, digits, `-`, `_` and `.`, starting and
/// ending with a letter or digit.
pub fn label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > MAX_LABEL {
        return Err(format!(
            "{} is not a label value: longer than 63 characters",
            quoted(value)
        ));
    }
    if !is_qualified_part(value) {
        return Err(format!(
            "{} is not a label value: it may hold only letters, digits, '-', '_' and '.', and must start and end with a letter or digit",
            quoted(value)
        ));
    }
    Ok(())
}

/// A `LabelSelector` as the apiserver takes it in a list's `labelSelector`: every key and
/// value valid ([`label_key`], [`label_value`]); `In` and `NotIn` with at least one value,
/// `Exists` and `DoesNotExist` with none; no other operator. Paths are relative to the
/// selector (`matchLabels.app`, `matchExpressions[0].values[1]`).
pub fn label_selector(s: &LabelSelector) -> Result<(), FieldError> {
    for (key, value) in s.match_labels.iter().flatten() {
        let at = || format!("matchLabels[{}]", quoted(key));
        label_key(key).map_err(|m| FieldError::new(at(), m))?;
        label_value(value).map_err(|m| FieldError::new(at(), m))?;
    }
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let at = |field: &str| format!("matchExpressions[{i}]{field}");
        label_key(&e.key).map_err(|m| FieldError::new(at(".key"), m))?;
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(FieldError::new(
                    at(".values"),
                    format!("operator {} needs at least one value", e.operator),
                ));
            }
            "In" | "NotIn" => {
                for (j, v) in values.iter().enumerate() {
                    label_value(v).map_err(|m| FieldError::new(at(&format!(".values[{j}]")), m))?;
                }
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(FieldError::new(
                    at(".values"),
                    format!(
                        "operator {} takes no values (it tests only whether the key is present)",
                        e.operator
                    ),
                ));
            }
            "Exists" | "DoesNotExist" => {}
            other => {
                return Err(FieldError::new(
                    at(".operator"),
                    format!(
                        "unknown operator {}: give In, NotIn, Exists or DoesNotExist",
                        quoted(other)
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A namespace glob (`*` any run, `?` one character), as `excludeNamespaces` and a
/// SyncGrant's `from` take them: at most 63 characters that a namespace's name may hold, or
/// `*` and `?`. A capital or a `/` would match no namespace at all.
pub fn namespace_glob(pattern: &str) -> Result<(), String> {
    let ok = |c: char| alnum_lower(c) || matches!(c, '-' | '*' | '?');
    if pattern.is_empty() {
        return Err("an empty pattern matches no namespace".into());
    }
    if pattern.len() > MAX_LABEL {
        return Err(format!(
            "{} is longer than a namespace's name may be (63 characters)",
            quoted(pattern)
        ));
    }
    match pattern.chars().find(|c| !ok(*c)) {
        Some(c) => Err(format!(
            "{} holds {c:?}, which no namespace's name holds: use lowercase letters, digits, '-', and '*' or '?' as wildcards",
            quoted(pattern)
        )),
        None => Ok(()),
    }
}

/// An entry of a label or annotation key filter: an exact key ([`label_key`]), or a prefix
/// ending in `/` (a key's prefix) or `*` (any start of a key).
pub fn key_filter_entry(entry: &str) -> Result<(), String> {
    if let Some(prefix) = entry.strip_suffix('/') {
        return if is_dns_subdomain(prefix) {
            Ok(())
        } else {
            Err(format!(
                "{} is not a key prefix: before the final '/' give a DNS subdomain such as example.com",
                quoted(entry)
            ))
        };
    }
    if let Some(start) = entry.strip_suffix('*') {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/');
        return match start.chars().find(|c| !ok(*c)) {
            Some(c) => Err(format!(
                "{} holds {c:?}, which no label or annotation key holds",
                quoted(entry)
            )),
            None => Ok(()),
        };
    }
    label_key(entry)
}

/// A key of a ConfigMap's or Secret's data: 1 to 253 letters, digits, `-`, `_` and `.`.
pub fn data_key(key: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if key.is_empty()
        || key.len() > MAX_SUBDOMAIN
        || !key.chars().all(ok)
        || key == "."
        || key.starts_with("..")
    {
        Err(format!(
            "{} is not a data key: 1 to 253 letters, digits, '-', '_' and '.'",
            quoted(key)
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: (!values.is_empty())
                    .then(|| values.iter().map(|v| v.to_string()).collect()),
            }]),
            match_labels: None,
        }
    }

    fn labels(key: &str, value: &str) -> LabelSelector {
        LabelSelector {
            match_labels: Some([(key.to_string(), value.to_string())].into()),
            match_expressions: None,
        }
    }

    #[test]
    fn label_keys_follow_kubernetes() {
        for ok in [
            "app",
            "a",
            "app.kubernetes.io/name",
            "A_b-c.d",
            "example.com/x",
            &"k".repeat(63),
            &format!("{}/n", "p".repeat(253)),
        ] {
            assert_eq!(label_key(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "-app",
            "app-",
            "a(b",
            "/x",
            "Example.com/x",
            "example.com/",
            "a/b/c",
            "_x",
            &"k".repeat(64),
            &format!("{}/n", "p".repeat(254)),
        ] {
            assert!(label_key(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn label_values_follow_kubernetes() {
        for ok in ["", "v", "v1.2_3-x", "A", &"v".repeat(63)] {
            assert_eq!(label_value(ok), Ok(()), "{ok}");
        }
        for bad in ["a(b", "a b", "-v", "v-", "a,b", "a/b", &"v".repeat(64), "é"] {
            assert!(label_value(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn selectors_name_the_offending_field() {
        let err = label_selector(&labels("app", "a(b")).expect_err("value");
        assert_eq!(err.path, "matchLabels[\"app\"]");
        assert!(
            err.message.contains("\"a(b\" is not a label value"),
            "{err}"
        );
        let err = label_selector(&expr("a b", "Exists", &[])).expect_err("key");
        assert_eq!(err.path, "matchExpressions[0].key");
        let err = label_selector(&expr("app", "DoesNotExist", &["x"])).expect_err("values");
        assert_eq!(err.path, "matchExpressions[0].values");
        assert!(err.message.contains("takes no values"), "{err}");
        let err = label_selector(&expr("app", "In", &[])).expect_err("no values");
        assert!(err.message.contains("at least one value"), "{err}");
        let err = label_selector(&expr("app", "In", &["ok", "not ok"])).expect_err("value");
        assert_eq!(err.path, "matchExpressions[0].values[1]");
        let err = label_selector(&expr("app", "Near", &["x"])).expect_err("operator");
        assert_eq!(err.path, "matchExpressions[0].operator");
        assert_eq!(
            err.under("spec.source.selector").to_string(),
            "spec.source.selector.matchExpressions[0].operator: unknown operator \"Near\": give In, NotIn, Exists or DoesNotExist"
        );
        for ok in [
            expr("app", "In", &["a", "b"]),
            expr("app", "NotIn", &[""]),
            expr("example.com/app", "Exists", &[]),
            expr("app", "DoesNotExist", &[]),
            labels("app", ""),
            LabelSelector::default(),
        ] {
            assert_eq!(label_selector(&ok), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn namespace_globs_hold_what_namespace_names_hold() {
        for ok in ["team-*", "*", "a?c", "kube-system"] {
            assert_eq!(namespace_glob(ok), Ok(()), "{ok}");
        }
        for bad in ["", "Team-*", "a/b", "team_*", "a.b", &"n".repeat(64)] {
            assert!(namespace_glob(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn key_filters_are_keys_or_prefixes() {
        for ok in ["app", "example.com/", "example.com/*", "app*", "*", "a.b/c"] {
            assert_eq!(key_filter_entry(ok), Ok(()), "{ok}");
        }
        for bad in ["", "Example.com/", "a b", "a b*", "a(b"] {
            assert!(key_filter_entry(bad).is_err(), "{bad:?} passed");
        }
    }

    #[test]
    fn data_keys_and_dns_names() {
        for ok in ["a", "config.yaml", "A_B-c", ".hidden"] {
            assert_eq!(data_key(ok), Ok(()), "{ok}");
        }
        for bad in ["", ".", "..", "..a", "a/b", "a b", &"k".repeat(254)] {
            assert!(data_key(bad).is_err(), "{bad:?} passed");
        }
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(!is_dns_subdomain("A"));
        assert!(is_dns_label("team-1"));
        assert!(!is_dns_label("team.1"));
    }

    #[test]
    fn long_values_are_quoted_short() {
        let q = quoted(&"x".repeat(1000));
        assert!(q.len() < 120, "{q}");
        assert!(q.ends_with("(1000 bytes)"), "{q}");
    }
}
