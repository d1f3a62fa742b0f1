//! Pure decisions of the fan-out: which namespaces are destinations, what a copy must look
//! like, and what to do with what is already there. No IO.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use kube::core::ApiResource;

use crate::apply::sanitize;

/// Label on every copy: the uid of the declaration (e.g. the ObjectSync) that made it.
pub const MANAGED_BY: &str = "kubesync.io/managed-by";
/// Annotation: `<cluster>/<namespace>/<name>` of the declaration that made the copy.
pub const OWNER: &str = "kubesync.io/owner";
/// Annotation: `<group>/<kind>/<namespace>/<name>` of the source (`core` for the core group).
pub const SOURCE: &str = "kubesync.io/source";
/// Annotation: the source resourceVersion the copy carries.
pub const SOURCE_VERSION: &str = "kubesync.io/source-resource-version";
/// Annotation on a destination object that vetoes adoption: `"true"`.
pub const PROTECT: &str = "kubesync.io/protect";
/// kubectl's annotation, never copied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `matchLabels` / `matchExpressions`, as in Kubernetes label selectors.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Every pair must be present.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Every expression must hold.
    #[serde(default)]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` match. An unknown operator matches nothing (see [`LabelSelector::validate`]).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator.as_str() {
                    "In" => value.is_some_and(|v| e.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }

    /// An error message for an invalid selector.
    pub fn validate(&self) -> Result<(), String> {
        for e in &self.match_expressions {
            match e.operator.as_str() {
                "In" | "NotIn" if e.values.is_empty() => {
                    return Err(format!(
                        "matchExpressions[{}]: {} needs values",
                        e.key, e.operator
                    ));
                }
                "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
                other => {
                    return Err(format!(
                        "matchExpressions[{}]: unknown operator {other:?}",
                        e.key
                    ));
                }
            }
        }
        Ok(())
    }
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

/// Which namespaces of a cluster receive a copy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceRule {
    /// A namespace name, or `"*"` / `""` / absent for all namespaces.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Namespaces whose labels match.
    #[serde(default)]
    pub namespace_selector: Option<LabelSelector>,
    /// Names or globs to leave out.
    #[serde(default)]
    pub exclude_namespaces: Vec<String>,
    /// If not empty, only namespaces matching one of these names or globs (an operator's
    /// allow list, on top of the rule).
    #[serde(default)]
    pub only_namespaces: Vec<String>,
}

impl NamespaceRule {
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
    }
}

/// Include and exclude lists of label or annotation keys. An entry ending in `/` or `*` is a
/// prefix; any other entry is an exact key. Empty `include` means all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFilter {
    /// Keys (or prefixes) to copy; empty: all.
    #[serde(default)]
    pub include: Vec<String>,
    /// Keys (or prefixes) never to copy.
    #[serde(default)]
    pub exclude: Vec<String>,
}

fn key_matches(pattern: &str, key: &str) -> bool {
    if let Some(prefix) = pattern.strip_suffix('*') {
        key.starts_with(prefix)
    } else if pattern.ends_with('/') {
        key.starts_with(pattern)
    } else {
        pattern == key
    }
}

impl KeyFilter {
    /// Whether `key` is copied (kubesync's own `kubesync.io/` keys and kubectl's last-applied
    /// annotation never are).
    pub fn allows(&self, key: &str) -> bool {
        if key.starts_with("kubesync.io/") || key == LAST_APPLIED {
            return false;
        }
        (self.include.is_empty() || self.include.iter().any(|p| key_matches(p, key)))
            && !self.exclude.iter().any(|p| key_matches(p, key))
    }

    fn apply(&self, map: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        map.iter()
            .filter(|(k, _)| self.allows(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Key-level control of Secret and ConfigMap data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFilter {
    /// Keys to copy (empty: all).
    #[serde(default)]
    pub include: Vec<String>,
    /// Source key → destination key.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
}

impl DataFilter {
    fn apply(&self, data: &Value) -> Value {
        let Some(map) = data.as_object() else {
            return data.clone();
        };
        let mut out = serde_json::Map::new();
        for (k, v) in map {
            if !self.include.is_empty() && !self.include.contains(k) {
                continue;
            }
            out.insert(
                self.rename.get(k).cloned().unwrap_or_else(|| k.clone()),
                v.clone(),
            );
        }
        Value::Object(out)
    }
}

/// Who made a copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The declaration's cluster, namespace and name: `<cluster>/<namespace>/<name>`.
    pub reference: String,
    /// The declaration's uid (the `managed-by` label value).
    pub uid: String,
}

/// What the copy must carry besides the source's content.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CopyRules {
    /// Labels that reach the copy.
    pub labels: KeyFilter,
    /// Annotations that reach the copy.
    pub annotations: KeyFilter,
    /// Secret/ConfigMap key control (ignored for other kinds).
    pub data: Option<DataFilter>,
}

/// The copy of `source` to `namespace`/`name`: the source's content minus identity and
/// server-managed fields (status too), filtered labels and annotations, and the ownership
/// marks.
pub fn desired_copy(
    resource: &ApiResource,
    source: &DynamicObject,
    namespace: &str,
    name: &str,
    rules: &CopyRules,
    owner: &Owner,
    source_ref: &str,
) -> DynamicObject {
    let mut copy = source.clone();
    sanitize(&mut copy, |_| false);
    // The object is of the synced resource type (the source may be untyped).
    copy.types = Some(kube::core::TypeMeta {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
    });
    copy.metadata.namespace = Some(namespace.to_string());
    copy.metadata.name = Some(name.to_string());
    let mut labels = rules
        .labels
        .apply(&source.metadata.labels.clone().unwrap_or_default());
    labels.insert(MANAGED_BY.into(), owner.uid.clone());
    let mut annotations = rules
        .annotations
        .apply(&source.metadata.annotations.clone().unwrap_or_default());
    annotations.insert(OWNER.into(), owner.reference.clone());
    annotations.insert(SOURCE.into(), source_ref.to_string());
    annotations.insert(
        SOURCE_VERSION.into(),
        source.metadata.resource_version.clone().unwrap_or_default(),
    );
    copy.metadata.labels = Some(labels);
    copy.metadata.annotations = Some(annotations);
    if let Some(m) = copy.data.as_object_mut() {
        m.remove("status");
        let is_data_kind = resource.group.is_empty()
            && resource.version == "v1"
            && matches!(resource.kind.as_str(), "Secret" | "ConfigMap");
        if is_data_kind && let Some(filter) = &rules.data {
            for field in ["data", "binaryData", "stringData"] {
                if let Some(v) = m.get(field).cloned() {
                    m.insert(field.to_string(), filter.apply(&v));
                }
            }
        }
    }
    copy
}

/// How copies are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Strategy {
    /// Server-side apply with kubesync's field manager, forced; other managers keep theirs.
    #[default]
    Apply,
    /// kubesync owns the whole object; an update rejected for an immutable field deletes and
    /// recreates the copy.
    Replace,
}

/// What to do when the destination holds an object kubesync did not create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnConflict {
    /// Leave it untouched and report a Conflict.
    #[default]
    Skip,
    /// Take it over (unless it carries `kubesync.io/protect: "true"`).
    Adopt,
}

/// The decision for one destination.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nothing there: create the copy.
    Create,
    /// Our copy, out of date or drifted: write it with the strategy.
    Update,
    /// A foreign object we may adopt: write it with the strategy (marks included).
    Adopt,
    /// Our copy is current.
    InSync,
    /// Someone else's object: leave it; the message says why.
    Conflict(String),
}

/// Whether `existing` already carries everything `desired` says: every top-level field except
/// metadata and status equal, and the desired labels and annotations present with their values
/// (with `Replace`, also no other labels or annotations than desired).
pub fn in_sync(existing: &DynamicObject, desired: &DynamicObject, strategy: Strategy) -> bool {
    let fields_equal = desired
        .data
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| existing.data.get(k) == Some(v)))
        && (strategy == Strategy::Apply
            || existing.data.as_object().is_none_or(|m| {
                m.keys()
                    .all(|k| k == "status" || desired.data.get(k).is_some())
            }));
    let subset = |want: &Option<BTreeMap<String, String>>,
                  have: &Option<BTreeMap<String, String>>| {
        let (want, have) = (
            want.clone().unwrap_or_default(),
            have.clone().unwrap_or_default(),
        );
        want.iter().all(|(k, v)| have.get(k) == Some(v))
            && (strategy == Strategy::Apply || want.len() == have.len())
    };
    fields_equal
        && subset(&desired.metadata.labels, &existing.metadata.labels)
        && subset(
            &desired.metadata.annotations,
            &existing.metadata.annotations,
        )
}

/// What to do at one destination.
pub fn decide(
    existing: Option<&DynamicObject>,
    desired: &DynamicObject,
    owner: &Owner,
    strategy: Strategy,
    on_conflict: OnConflict,
) -> Decision {
    let Some(existing) = existing else {
        return Decision::Create;
    };
    let labels = existing.metadata.labels.clone().unwrap_or_default();
    let annotations = existing.metadata.annotations.clone().unwrap_or_default();
    match labels.get(MANAGED_BY) {
        Some(uid) if *uid == owner.uid => {
            if in_sync(existing, desired, strategy) {
                Decision::InSync
            } else {
                Decision::Update
            }
        }
        Some(_) => Decision::Conflict(format!(
            "managed by {}",
            annotations
                .get(OWNER)
                .cloned()
                .unwrap_or_else(|| "another kubesync declaration".into())
        )),
        None if annotations.get(PROTECT).map(String::as_str) == Some("true") => Decision::Conflict(
            "exists, not created by kubesync, and protected by kubesync.io/protect".into(),
        ),
        None if on_conflict == OnConflict::Adopt => Decision::Adopt,
        None => {
            Decision::Conflict("exists and was not created by kubesync (onConflict: skip)".into())
        }
    }
}

/// The uid an apply carries as its precondition: that of the object the decision was made on.
/// The apiserver refuses the apply (409, "uid mismatch") if that object was deleted and
/// replaced by another one in the meantime, so an update or adoption never takes over an
/// object it did not decide on. `None` when the store showed no object: an apply with a uid
/// never creates, so a create carries none.
pub fn apply_precondition(existing: Option<&DynamicObject>) -> Option<String> {
    existing.and_then(|e| e.metadata.uid.clone())
}

/// The JSON patch that hands to `manager`'s `Apply` entry the fields it owns through an
/// `Update` entry, when that entry owns a field `desired` no longer sets; `None` otherwise.
///
/// New copies are created with a POST, which the apiserver refuses when an object of that name
/// appeared after the store was read (an apply would take it over). A POST records its fields
/// under an `Update` entry, and fields owned there survive later applies that leave them out:
/// a key removed from the source would stay on the copy. So before the first apply that
/// removes something, the `Update` entry is merged into the `Apply` entry (as
/// `kubectl apply --server-side` upgrades client-side ownership). The patch is guarded by the
/// copy's uid and resourceVersion; updates that only change values need no patch.
pub fn ownership_upgrade(
    existing: &DynamicObject,
    desired: &DynamicObject,
    manager: &str,
) -> Option<Value> {
    let entries = existing
        .metadata
        .managed_fields
        .as_deref()
        .unwrap_or_default();
    let is_update = |e: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some("Update")
            && e.subresource.is_none()
    };
    // Most copies have no such entry (applied, or already upgraded): nothing to serialize.
    if !entries.iter().any(|e| is_update(&e)) {
        return None;
    }
    let desired_value = serde_json::to_value(desired).ok()?;
    let leaves_something_out = entries.iter().filter(is_update).any(|e| {
        e.fields_v1
            .as_ref()
            .is_some_and(|f| owns_absent(&f.0, Some(&desired_value)))
    });
    if !leaves_something_out {
        return None;
    }
    let mut owned = Value::Object(Default::default());
    let mut rest = Vec::new();
    let mut apply_entry = None;
    for e in entries {
        if is_update(&e) {
            if let Some(f) = &e.fields_v1 {
                merge_fields(&mut owned, &f.0);
            }
        } else if e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some("Apply")
            && apply_entry.is_none()
        {
            apply_entry = Some(e.clone());
        } else {
            rest.push(e.clone());
        }
    }
    let template = entries.iter().find(is_update)?;
    let mut entry = apply_entry.unwrap_or_else(|| template.clone());
    if let Some(f) = &entry.fields_v1 {
        merge_fields(&mut owned, &f.0);
    }
    entry.operation = Some("Apply".into());
    entry.fields_type = Some("FieldsV1".into());
    entry.fields_v1 = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
        owned,
    ));
    rest.push(entry);
    Some(serde_json::json!([
        {"op": "test", "path": "/metadata/uid", "value": existing.metadata.uid},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": existing.metadata.resource_version},
        {"op": "replace", "path": "/metadata/managedFields", "value": rest},
    ]))
}

/// Whether a `fieldsV1` tree owns something `value` does not have. Keyed list items (`k:`),
/// set values (`v:`) and list indexes (`i:`) are not resolved: they count as absent, so an
/// upgrade is done rather than a removal missed.
fn owns_absent(fields: &Value, value: Option<&Value>) -> bool {
    let Some(fields) = fields.as_object() else {
        return false;
    };
    fields.iter().any(|(key, sub)| {
        if key == "." {
            return false;
        }
        match key.strip_prefix("f:") {
            Some(name) => match value.and_then(|v| v.get(name)) {
                None => true,
                Some(child) => owns_absent(sub, Some(child)),
            },
            None => true,
        }
    })
}

/// Adds the fields of `other` to `into` (both `fieldsV1` trees).
fn merge_fields(into: &mut Value, other: &Value) {
    let (Some(into), Some(other)) = (into.as_object_mut(), other.as_object()) else {
        return;
    };
    for (k, v) in other {
        match into.get_mut(k) {
            Some(existing) => merge_fields(existing, v),
            None => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Whether a copy may be deleted by `owner`: only copies that carry its marks.
pub fn owned_by(copy: &DynamicObject, owner: &Owner) -> bool {
    copy.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY))
        .is_some_and(|uid| *uid == owner.uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn applies_are_conditional_on_the_object_decided_on() {
        let existing = obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "a", "namespace": "n", "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}));
        assert_eq!(
            apply_precondition(Some(&existing)).as_deref(),
            Some("1b4e28ba-2fa1-11d2-883f-0016d3cca427")
        );
        assert_eq!(apply_precondition(None), None);
    }

    fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn owner() -> Owner {
        Owner {
            reference: "local/apps/share-ca".into(),
            uid: "uid-1".into(),
        }
    }

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
            namespace_selector: Some(LabelSelector {
                match_labels: labels(&[("env", "prod")]),
                match_expressions: vec![LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "NotIn".into(),
                    values: vec!["legacy".into()],
                }],
            }),
            ..Default::default()
        };
        assert!(selected.matches("x", &labels(&[("env", "prod")]), false));
        assert!(!selected.matches("x", &labels(&[("env", "prod"), ("tier", "legacy")]), false));
        assert!(!selected.matches("x", &labels(&[("env", "dev")]), false));
    }

    #[test]
    fn selector_validation() {
        let bad = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Near".into(),
                values: vec![],
            }],
            ..Default::default()
        };
        assert!(bad.validate().expect_err("invalid").contains("Near"));
        let empty_in = LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "In".into(),
                values: vec![],
            }],
            ..Default::default()
        };
        assert!(empty_in.validate().is_err());
    }

    #[test]
    fn key_filters() {
        let f = KeyFilter {
            include: vec![],
            exclude: vec![
                "argocd.argoproj.io/".into(),
                "internal*".into(),
                "secret-note".into(),
            ],
        };
        assert!(f.allows("app"));
        assert!(!f.allows("argocd.argoproj.io/instance"));
        assert!(!f.allows("internal-id") && !f.allows("secret-note"));
        assert!(!f.allows(LAST_APPLIED) && !f.allows("kubesync.io/anything"));
        let only = KeyFilter {
            include: vec!["team".into(), "example.com/".into()],
            exclude: vec![],
        };
        assert!(only.allows("team") && only.allows("example.com/x") && !only.allows("app"));
    }

    fn secret_type() -> ApiResource {
        ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "Secret"))
    }

    fn tls_secret() -> DynamicObject {
        // As a list item of a built-in kind: no apiVersion or kind.
        obj(json!({
            "metadata": {"name": "ca", "namespace": "certs", "uid": "s-uid", "resourceVersion": "42",
                         "labels": {"app": "ca", "argocd.argoproj.io/instance": "x"},
                         "annotations": {LAST_APPLIED: "{}", "note": "hi"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "u"}]},
            "type": "kubernetes.io/tls",
            "data": {"ca.crt": "Q0E=", "tls.crt": "Q1JU", "tls.key": "S0VZ"}
        }))
    }

    #[test]
    fn desired_copy_filters_and_marks() {
        let rules = CopyRules {
            labels: KeyFilter {
                include: vec![],
                exclude: vec!["argocd.argoproj.io/".into()],
            },
            annotations: KeyFilter::default(),
            data: Some(DataFilter {
                include: vec!["ca.crt".into()],
                rename: [("ca.crt".to_string(), "bundle.pem".to_string())].into(),
            }),
        };
        let c = desired_copy(
            &secret_type(),
            &tls_secret(),
            "team-a",
            "ca",
            &rules,
            &owner(),
            "core/Secret/certs/ca",
        );
        let v = serde_json::to_value(&c).expect("json");
        assert_eq!(
            (v["apiVersion"].as_str(), v["kind"].as_str()),
            (Some("v1"), Some("Secret"))
        );
        assert_eq!(v["metadata"]["namespace"], "team-a");
        assert_eq!(v["metadata"].get("uid"), None);
        assert_eq!(v["metadata"].get("resourceVersion"), None);
        assert_eq!(v["metadata"].get("ownerReferences"), None);
        assert_eq!(
            v["metadata"]["labels"],
            json!({"app": "ca", MANAGED_BY: "uid-1"})
        );
        assert_eq!(v["metadata"]["annotations"]["note"], "hi");
        assert_eq!(v["metadata"]["annotations"].get(LAST_APPLIED), None);
        assert_eq!(v["metadata"]["annotations"][OWNER], "local/apps/share-ca");
        assert_eq!(v["metadata"]["annotations"][SOURCE], "core/Secret/certs/ca");
        assert_eq!(v["metadata"]["annotations"][SOURCE_VERSION], "42");
        assert_eq!(v["data"], json!({"bundle.pem": "Q0E="}));
        assert_eq!(v["type"], "kubernetes.io/tls");
    }

    #[test]
    fn decisions() {
        let desired = desired_copy(
            &secret_type(),
            &tls_secret(),
            "team-a",
            "ca",
            &CopyRules::default(),
            &owner(),
            "core/Secret/certs/ca",
        );
        assert_eq!(
            decide(None, &desired, &owner(), Strategy::Apply, OnConflict::Skip),
            Decision::Create
        );
        let mut ours = desired.clone();
        assert_eq!(
            decide(
                Some(&ours),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::InSync
        );
        // Another manager's extra label is fine with Apply, not with Replace.
        ours.metadata
            .labels
            .get_or_insert_default()
            .insert("extra".into(), "1".into());
        assert_eq!(
            decide(
                Some(&ours),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::InSync
        );
        assert_eq!(
            decide(
                Some(&ours),
                &desired,
                &owner(),
                Strategy::Replace,
                OnConflict::Skip
            ),
            Decision::Update
        );
        // Drift in the data is reverted.
        let mut drifted = desired.clone();
        drifted.data["data"]["ca.crt"] = json!("eA==");
        assert_eq!(
            decide(
                Some(&drifted),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::Update
        );
        // Someone else's object.
        let foreign = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "team-a"}}),
        );
        assert!(matches!(
            decide(
                Some(&foreign),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::Conflict(_)
        ));
        assert_eq!(
            decide(
                Some(&foreign),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Adopt
            ),
            Decision::Adopt
        );
        let protected = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "team-a", "annotations": {PROTECT: "true"}}}),
        );
        assert!(
            matches!(decide(Some(&protected), &desired, &owner(), Strategy::Apply, OnConflict::Adopt), Decision::Conflict(m) if m.contains("protect"))
        );
        // Another declaration's copy: the first keeps it.
        let theirs = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "team-a",
            "labels": {MANAGED_BY: "uid-2"}, "annotations": {OWNER: "local/other/sync"}}}),
        );
        let d = decide(
            Some(&theirs),
            &desired,
            &owner(),
            Strategy::Apply,
            OnConflict::Adopt,
        );
        assert_eq!(d, Decision::Conflict("managed by local/other/sync".into()));
        assert!(
            owned_by(&desired, &owner())
                && !owned_by(&theirs, &owner())
                && !owned_by(&foreign, &owner())
        );
    }

    fn copy_with_fields(entries: Value) -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "team-a", "uid": "u1", "resourceVersion": "9",
                "labels": {MANAGED_BY: "uid-1"}, "managedFields": entries},
            "type": "Opaque", "data": {"ca.crt": "Y2E=", "old": "b2xk"}}))
    }

    fn desired_without_old() -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "team-a", "labels": {MANAGED_BY: "uid-1"}},
            "type": "Opaque", "data": {"ca.crt": "bmV3"}}))
    }

    fn entry(manager: &str, operation: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": fields, "time": "2026-11-22T10:00:00Z"})
    }

    #[test]
    fn ownership_upgrade_only_when_a_post_owns_what_the_apply_leaves_out() {
        let post = entry(
            "kubesync",
            "Update",
            json!({"f:data": {".": {}, "f:ca.crt": {}, "f:old": {}}, "f:type": {},
                "f:metadata": {"f:labels": {".": {}, "f:kubesync.io/managed-by": {}}}}),
        );
        // Already applied: nothing to hand over.
        let applied = copy_with_fields(json!([entry(
            "kubesync",
            "Apply",
            json!({"f:data": {"f:old": {}}})
        )]));
        assert_eq!(
            ownership_upgrade(&applied, &desired_without_old(), "kubesync"),
            None
        );
        // Created by a POST, and the update sets everything it owns (values may change).
        let created = copy_with_fields(json!([post.clone()]));
        let mut same_keys = desired_without_old();
        same_keys.data["data"]["old"] = json!("bmV3");
        assert_eq!(ownership_upgrade(&created, &same_keys, "kubesync"), None);
        // Another manager's Update entry is not kubesync's business.
        let edited = copy_with_fields(json!([entry(
            "kubectl-edit",
            "Update",
            json!({"f:data": {"f:old": {}}})
        )]));
        assert_eq!(
            ownership_upgrade(&edited, &desired_without_old(), "kubesync"),
            None
        );
    }

    #[test]
    fn ownership_upgrade_merges_the_post_entry_into_the_apply_entry() {
        let copy = copy_with_fields(json!([
            entry(
                "kubesync",
                "Update",
                json!({"f:data": {"f:ca.crt": {}, "f:old": {}}, "f:type": {}})
            ),
            entry("kubectl-edit", "Update", json!({"f:data": {"f:extra": {}}})),
            entry(
                "kubesync",
                "Apply",
                json!({"f:metadata": {"f:labels": {"f:kubesync.io/managed-by": {}}}})
            ),
        ]));
        let patch = ownership_upgrade(&copy, &desired_without_old(), "kubesync").expect("upgrade");
        // Guarded by the copy's uid and resourceVersion.
        assert_eq!(
            patch[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "u1"})
        );
        assert_eq!(
            patch[1],
            json!({"op": "replace", "path": "/metadata/resourceVersion", "value": "9"})
        );
        assert_eq!(patch[2]["path"], "/metadata/managedFields");
        let entries = patch[2]["value"].as_array().expect("entries");
        assert_eq!(entries.len(), 2, "{entries:?}");
        // Others' entries are kept as they were.
        assert_eq!(entries[0]["manager"], "kubectl-edit");
        assert_eq!(entries[0]["fieldsV1"], json!({"f:data": {"f:extra": {}}}));
        // kubesync has one Apply entry, owning what both of its entries owned.
        assert_eq!(entries[1]["manager"], "kubesync");
        assert_eq!(entries[1]["operation"], "Apply");
        assert_eq!(
            entries[1]["fieldsV1"],
            json!({"f:data": {"f:ca.crt": {}, "f:old": {}}, "f:type": {},
                "f:metadata": {"f:labels": {"f:kubesync.io/managed-by": {}}}})
        );
    }

    #[test]
    fn owned_list_items_count_as_left_out() {
        // A keyed list item cannot be matched without the schema: upgrade rather than miss.
        let fields = json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}}}}});
        let value = json!({"spec": {"containers": [{"name": "app"}]}});
        assert!(owns_absent(&fields, Some(&value)));
        assert!(!owns_absent(
            &json!({"f:spec": {"f:replicas": {}}}),
            Some(&json!({"spec": {"replicas": 2}}))
        ));
        assert!(owns_absent(
            &json!({"f:spec": {"f:paused": {}}}),
            Some(&json!({"spec": {"replicas": 2}}))
        ));
    }
}
