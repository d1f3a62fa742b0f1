//! Properties of the pure rules, on generated input (no control plane).
//!
//! - The checks of names, label keys and values agree with the apiserver's own regular
//!   expressions (`k8s.io/apimachinery/pkg/util/validation`) on every input: nothing kubesync
//!   accepts is refused there, nothing refused there is accepted here.
//! - A label selector is accepted exactly when every key and value is valid and every
//!   operator has the values it takes; nothing panics.
//! - Globs match as the regular expression they stand for.
//! - A patch never panics, and a patched copy keeps its identity and kubesync's marks.
//!
//! `PROPTEST_CASES=<n>` runs more cases (the default is 256 per property).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::api::DynamicObject;
use kubesync::syncers::fan_out::rules::{self, CopyPatch, MANAGED_BY, OWNER};
use kubesync::validate;
use proptest::prelude::*;
use regex::Regex;

/// `qualifiedNameFmt`, `labelValueFmt`, `dns1123SubdomainFmt` and `configMapKeyFmt` of
/// apimachinery, anchored (compiled once).
fn oracle() -> &'static (Regex, Regex, Regex, Regex) {
    static ORACLE: std::sync::LazyLock<(Regex, Regex, Regex, Regex)> =
        std::sync::LazyLock::new(|| {
            (
                Regex::new(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$").expect("qualified name"),
                Regex::new(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").expect("label value"),
                Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
                    .expect("subdomain"),
                Regex::new(r"^[-._a-zA-Z0-9]+$").expect("configmap key"),
            )
        });
    &ORACLE
}

/// `IsQualifiedName`: an optional subdomain prefix and `/`, then a name of at most 63.
fn apiserver_label_key(key: &str) -> bool {
    let (name_re, _, subdomain, _) = oracle();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() || prefix.len() > 253 || !subdomain.is_match(prefix) {
                return false;
            }
            name
        }
        _ => return false,
    };
    !name.is_empty() && name.len() <= 63 && name_re.is_match(name)
}

/// `IsValidLabelValue`.
fn apiserver_label_value(value: &str) -> bool {
    value.len() <= 63 && oracle().1.is_match(value)
}

/// `IsConfigMapKey`.
fn apiserver_data_key(key: &str) -> bool {
    key.len() <= 253
        && oracle().3.is_match(key)
        && key != "."
        && key != ".."
        && !key.starts_with("..")
}

/// Text near the rules' edges: the characters that matter, short and long.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9._/ (),é-]{0,12}",
        "[a-z0-9.-]{0,70}(/[a-zA-Z0-9._-]{0,70})?",
        "[a-z0-9]{60,260}",
    ]
}

fn requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        text(),
        prop_oneof![
            Just("In"),
            Just("NotIn"),
            Just("Exists"),
            Just("DoesNotExist"),
            Just("Near"),
        ],
        proptest::option::of(proptest::collection::vec(text(), 0..3)),
    )
        .prop_map(|(key, op, values)| LabelSelectorRequirement {
            key,
            operator: op.to_string(),
            values,
        })
}

fn label_selector() -> impl Strategy<Value = LabelSelector> {
    (
        proptest::option::of(proptest::collection::btree_map(text(), text(), 0..3)),
        proptest::option::of(proptest::collection::vec(requirement(), 0..3)),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

/// Whether the apiserver takes `s` as a list's label selector.
fn apiserver_selector(s: &LabelSelector) -> bool {
    s.match_labels
        .iter()
        .flatten()
        .all(|(k, v)| apiserver_label_key(k) && apiserver_label_value(v))
        && s.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            apiserver_label_key(&e.key)
                && match e.operator.as_str() {
                    "In" | "NotIn" => {
                        !values.is_empty() && values.iter().all(|v| apiserver_label_value(v))
                    }
                    "Exists" | "DoesNotExist" => values.is_empty(),
                    _ => false,
                }
        })
}

/// A glob as a regular expression: `*` any run, `?` one character, the rest literal.
fn glob_regex(pattern: &str) -> Regex {
    let mut re = String::from("(?s)^");
    for c in pattern.chars() {
        match c {
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c => re.push_str(&regex::escape(&c.to_string())),
        }
    }
    re.push('$');
    Regex::new(&re).expect("glob regex")
}

/// A copy as the fan-out makes one, with kubesync's marks.
fn copy() -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": "team-a",
            "labels": {MANAGED_BY: "uid-1", "app": "web"},
            "annotations": {OWNER: "local/apps/sync"}},
        "data": {"a": "1"}
    }))
    .expect("copy")
}

/// Arbitrary JSON, a few levels deep, with the keys a patch would aim at.
fn json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z/.-]{0,8}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("metadata".to_string()),
                    Just("labels".to_string()),
                    Just("annotations".to_string()),
                    Just("name".to_string()),
                    Just(MANAGED_BY.to_string()),
                    Just("data".to_string()),
                    Just("kind".to_string()),
                    "[a-z]{1,4}",
                ],
                inner,
                0..4
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_ops() -> impl Strategy<Value = serde_json::Value> {
    proptest::collection::vec(
        (
            prop_oneof![
                Just("add"),
                Just("remove"),
                Just("replace"),
                Just("move"),
                Just("copy"),
                Just("test")
            ],
            prop_oneof![
                Just("/metadata/name"),
                Just("/metadata/labels/app"),
                Just("/metadata/labels/kubesync.io~1managed-by"),
                Just("/data/a"),
                Just("/data"),
                Just("/kind"),
                Just(""),
                Just("/nothing/here"),
            ],
            json(),
        )
            .prop_map(|(op, path, value)| {
                serde_json::json!({"op": op, "path": path, "from": "/data/a", "value": value})
            }),
        0..4,
    )
    .prop_map(serde_json::Value::from)
}

proptest! {
    #[test]
    fn label_keys_agree_with_the_apiserver(key in text()) {
        prop_assert_eq!(validate::label_key(&key).is_ok(), apiserver_label_key(&key), "{:?}", key);
    }

    #[test]
    fn label_values_agree_with_the_apiserver(value in text()) {
        prop_assert_eq!(validate::label_value(&value).is_ok(), apiserver_label_value(&value), "{:?}", value);
    }

    #[test]
    fn data_keys_and_subdomains_agree_with_the_apiserver(key in text()) {
        prop_assert_eq!(validate::data_key(&key).is_ok(), apiserver_data_key(&key), "{:?}", key);
        let subdomain = key.len() <= 253 && oracle().2.is_match(&key);
        prop_assert_eq!(validate::is_dns_subdomain(&key), subdomain, "{:?}", key);
    }

    #[test]
    fn a_selector_is_accepted_exactly_when_the_apiserver_takes_it(s in label_selector()) {
        let ours = rules::selector(&s);
        prop_assert_eq!(ours.is_ok(), apiserver_selector(&s), "{:?} -> {:?}", s, ours.err());
    }

    #[test]
    fn globs_match_as_their_regular_expression(pattern in "[a-c*?-]{0,6}", text in "[a-c-]{0,8}") {
        prop_assert_eq!(rules::glob(&pattern, &text), glob_regex(&pattern).is_match(&text), "{} ~ {}", pattern, text);
    }

    #[test]
    fn a_patch_never_panics_and_keeps_the_identity_and_the_marks(
        merges in proptest::collection::vec(json(), 0..3),
        ops in json_ops(),
    ) {
        let mut patches: Vec<CopyPatch> = merges.into_iter().map(CopyPatch::Merge).collect();
        if let Ok(ops) = serde_json::from_value(ops) {
            patches.push(CopyPatch::Json(ops));
        }
        let before = copy();
        if let Ok(after) = rules::patched(before.clone(), &patches, &[]) {
            prop_assert_eq!(&after.types, &before.types);
            prop_assert_eq!(&after.metadata.name, &before.metadata.name);
            prop_assert_eq!(&after.metadata.namespace, &before.metadata.namespace);
            let label = |o: &DynamicObject| o.metadata.labels.as_ref().and_then(|l| l.get(MANAGED_BY).cloned());
            let owner = |o: &DynamicObject| o.metadata.annotations.as_ref().and_then(|a| a.get(OWNER).cloned());
            prop_assert_eq!(label(&after), label(&before));
            prop_assert_eq!(owner(&after), owner(&before));
        }
    }
}
