//! Mirrors (pure): an object whose annotations name a source (reflector's `reflects` on a
//! mirror it did not make, replicator's `replicate-from`) receives that source's content —
//! only when the source consents to its namespace, for every kind. (The book, `kubesync
//! compat list` and the metrics call this direction a *pull*; in the code, "pull" is the pull
//! from a hub, `spec.source.cluster`, and this is a mirror.)
//!
//! A mirror is filled by a pull that writes into an object its namespace owns, so it writes only the fields it brings:
//! a server-side apply under its own field manager ([`MIRROR_MANAGER`]) of the source's data
//! (Secret `data`; ConfigMap `data` and `binaryData`; Role `rules`; RoleBinding `subjects`;
//! ServiceAccount `imagePullSecrets`) and the tool's bookkeeping. The apiserver then keeps
//! the object's own keys, and removes a key the pull brought once it leaves the source — or
//! every key it brought, when the pull ends (an empty apply).

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde_json::{Map, Value};

use super::Tool;
use super::declared::{
    AUTO_REFLECTS, REFLECTION_ALLOWED, REFLECTION_ALLOWED_NAMESPACES, REFLECTION_ALLOWED_SELECTOR,
    REFLECTS, REPLICATE_FROM, copies, written_from,
};
use super::parse::{
    Dialect, PatternList, label_selector, namespaced_name, reflector_bool, replicator_bool,
};

/// The field manager of every mirror's writes (its value, written into clusters' managedFields
/// since the first release, never changes).
pub const MIRROR_MANAGER: &str = "kubesync-pull";

/// replicator: the source consents to pulls (`strconv.ParseBool`).
pub const REPLICATION_ALLOWED: &str = "replicator.v1.mittwald.de/replication-allowed";
/// replicator: the namespaces that may pull (pattern list; required).
pub const REPLICATION_ALLOWED_NAMESPACES: &str =
    "replicator.v1.mittwald.de/replication-allowed-namespaces";

/// A pull an object declares: which tool's annotation, and the source's namespace and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    /// Whose annotation declares it.
    pub tool: Tool,
    /// The source's namespace.
    pub namespace: String,
    /// The source's name.
    pub name: String,
}

/// The pull the annotations of an object of type `resource` declare for the `tools` turned
/// on: `Ok(None)` when none, `Err` (for people) when one is declared but cannot be read.
/// replicator's `replicate-from` wins over reflector's `reflects` when both are there; a
/// mirror reflector made itself (`auto-reflects: True`) is no pull.
pub fn declared_mirror(
    tools: &[Tool],
    resource: &ApiResource,
    annotations: &BTreeMap<String, String>,
) -> Result<Option<Mirror>, String> {
    let get = |k: &str| annotations.get(k).map(String::as_str);
    let candidates = [
        (Tool::Replicator, REPLICATE_FROM, get(REPLICATE_FROM)),
        (Tool::Reflector, REFLECTS, get(REFLECTS)),
    ];
    for (tool, key, value) in candidates {
        let Some(value) = value else { continue };
        if !tools.contains(&tool) || !copies(tool, resource) {
            continue;
        }
        if tool == Tool::Reflector && reflector_bool(get(AUTO_REFLECTS)) {
            continue;
        }
        return match namespaced_name(value) {
            Some((namespace, name)) => Ok(Some(Mirror {
                tool,
                namespace,
                name,
            })),
            None => Err(format!(
                "{key}: {value:?} is not namespace/name; nothing is pulled"
            )),
        };
    }
    Ok(None)
}

/// Whether the source's annotations consent to a pull by `tool` into `namespace` (whose
/// labels are `labels`; only a reflector selector needs them, see [`needs_labels`]): reflector's
/// `reflection-allowed` and its allowed namespaces (pattern list or selector; neither: all);
/// replicator's `replication-allowed` and its required `replication-allowed-namespaces` —
/// for every kind (replicator skips the check for ConfigMaps; kubesync does not). `Err` says
/// why not, for people.
pub fn consents(
    tool: Tool,
    source: &BTreeMap<String, String>,
    namespace: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<(), String> {
    let get = |k: &str| source.get(k).map(String::as_str);
    match tool {
        Tool::Reflector => {
            if !reflector_bool(get(REFLECTION_ALLOWED)) {
                return Err(format!(
                    "the source does not say {REFLECTION_ALLOWED}: \"true\""
                ));
            }
            let list = PatternList::parse(
                Dialect::Reflector,
                get(REFLECTION_ALLOWED_NAMESPACES).unwrap_or_default(),
            );
            let selector = get(REFLECTION_ALLOWED_SELECTOR).filter(|s| !s.trim().is_empty());
            if list.is_empty() && selector.is_none() || list.matches(namespace) {
                return Ok(());
            }
            if let Some(selector) = selector
                && let Ok(selector) = label_selector(selector)
                && labels.is_some_and(|l| kube::core::SelectorExt::matches(&selector, l))
            {
                return Ok(());
            }
            Err(format!(
                "the source's {REFLECTION_ALLOWED_NAMESPACES} and {REFLECTION_ALLOWED_SELECTOR} do not admit namespace {namespace}"
            ))
        }
        Tool::Replicator => {
            if get(REPLICATION_ALLOWED).and_then(replicator_bool) != Some(true) {
                return Err(format!(
                    "the source does not say {REPLICATION_ALLOWED}: \"true\""
                ));
            }
            let Some(allowed) = get(REPLICATION_ALLOWED_NAMESPACES) else {
                return Err(format!(
                    "the source has no {REPLICATION_ALLOWED_NAMESPACES} (it is required)"
                ));
            };
            match PatternList::parse(Dialect::Replicator, allowed).matches(namespace) {
                true => Ok(()),
                false => Err(format!(
                    "the source's {REPLICATION_ALLOWED_NAMESPACES} does not admit namespace {namespace}"
                )),
            }
        }
    }
}

/// Whether judging the consent of `source` (its annotations) needs the namespace's labels.
pub fn needs_labels(tool: Tool, source: &BTreeMap<String, String>) -> bool {
    tool == Tool::Reflector
        && source
            .get(REFLECTION_ALLOWED_SELECTOR)
            .is_some_and(|s| !s.trim().is_empty())
}

/// The fields a pull brings, by kind (see the module's documentation).
pub fn mirrored_fields(resource: &ApiResource) -> &'static [&'static str] {
    match (resource.group.as_str(), resource.kind.as_str()) {
        ("", "Secret") => &["data"],
        ("", "ConfigMap") => &["data", "binaryData"],
        ("rbac.authorization.k8s.io", "Role") => &["rules"],
        ("rbac.authorization.k8s.io", "RoleBinding") => &["subjects"],
        ("", "ServiceAccount") => &["imagePullSecrets"],
        _ => &[],
    }
}

/// What a pull applies to `target` (identified, with its uid and resourceVersion as the
/// preconditions: an apply that carries a uid never creates, and one decided on an older
/// target than the apiserver's fails with 409): the source's pulled fields and the tool's
/// bookkeeping;
/// with no `source` (the pull ends), nothing — the apiserver then removes everything the pull
/// brought.
pub fn apply_body(
    resource: &ApiResource,
    target: &DynamicObject,
    tool: Tool,
    source: Option<&DynamicObject>,
) -> DynamicObject {
    let mut body = DynamicObject::new(
        target.metadata.name.as_deref().unwrap_or_default(),
        resource,
    );
    body.metadata.namespace = target.metadata.namespace.clone();
    body.metadata.uid = target.metadata.uid.clone();
    body.metadata.resource_version = target.metadata.resource_version.clone();
    body.data = Value::Object(Map::new());
    let Some(source) = source else {
        // The maps stay in the applied configuration, empty: the apiserver removes the keys
        // this manager owned there (an apply that leaves a map out entirely only gives up
        // its ownership and keeps the values).
        body.metadata.annotations = Some(BTreeMap::new());
        for field in mirrored_fields(resource) {
            if matches!(*field, "data" | "binaryData") {
                body.data[*field] = Value::Object(Map::new());
            }
        }
        return body;
    };
    let mut fields = Map::new();
    for field in mirrored_fields(resource) {
        if let Some(v) = source.data.get(*field).filter(|v| !v.is_null()) {
            fields.insert((*field).to_string(), v.clone());
        }
    }
    let fields = Value::Object(fields);
    let annotations = written_from(tool, source, &resource.kind, &fields);
    body.metadata.annotations = Some(annotations);
    body.data = fields;
    body
}

/// Whether `target` (read live, with its managedFields) shows what `body` applies under
/// [`MIRROR_MANAGER`]: every field and annotation the body sets has its value there, and the
/// pull owns nothing the body leaves out (which the apply would remove).
pub fn in_sync(target: &DynamicObject, body: &DynamicObject) -> bool {
    let none = BTreeMap::new();
    let want = body.metadata.annotations.as_ref().unwrap_or(&none);
    let have = target.metadata.annotations.as_ref().unwrap_or(&none);
    let annotations_shown = want.iter().all(|(k, v)| have.get(k) == Some(v));
    let fields_shown = body
        .data
        .as_object()
        .into_iter()
        .flatten()
        .all(|(field, v)| match (v, target.data.get(field)) {
            (Value::Object(want), have) => want
                .iter()
                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v)),
            (want, have) => have == Some(want),
        });
    annotations_shown && fields_shown && owned(target) == wanted(body)
}

/// The paths (`data.<key>`, `metadata.annotations.<key>`, or a whole field) the pull's field
/// manager owns in `target`, from its managedFields.
fn owned(target: &DynamicObject) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for entry in target.metadata.managed_fields.iter().flatten() {
        if entry.manager.as_deref() != Some(MIRROR_MANAGER)
            || entry.operation.as_deref() != Some("Apply")
        {
            continue;
        }
        let Some(tree) = kubesync::object::fields_v1(entry) else {
            continue;
        };
        for (top, inner) in tree.as_object().into_iter().flatten() {
            let Some(top) = top.strip_prefix("f:") else {
                continue;
            };
            match (top, inner.as_object()) {
                ("metadata", Some(meta)) => {
                    for (k, v) in meta {
                        if k == "f:annotations" {
                            for a in v.as_object().into_iter().flatten().map(|(a, _)| a) {
                                if let Some(a) = a.strip_prefix("f:") {
                                    out.insert(format!("metadata.annotations.{a}"));
                                }
                            }
                        }
                    }
                }
                ("data" | "binaryData", Some(keys)) => {
                    for k in keys.keys().filter_map(|k| k.strip_prefix("f:")) {
                        out.insert(format!("{top}.{k}"));
                    }
                }
                (field, _) => {
                    out.insert(field.to_string());
                }
            }
        }
    }
    out
}

/// The paths `body` sets, as [`owned`] names them.
fn wanted(body: &DynamicObject) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = body
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| format!("metadata.annotations.{k}"))
        .collect();
    for (field, v) in body.data.as_object().into_iter().flatten() {
        match (field.as_str(), v.as_object()) {
            ("data" | "binaryData", Some(keys)) => {
                out.extend(keys.keys().map(|k| format!("{field}.{k}")));
            }
            _ => {
                out.insert(field.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::declared::{REPLICATED_AT, REPLICATED_FROM_VERSION, REPLICATED_KEYS};
    use super::*;
    use serde_json::json;

    fn pairs(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn secret() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
    }

    const BOTH: [Tool; 2] = [Tool::Reflector, Tool::Replicator];

    #[test]
    fn a_pull_is_declared_by_the_target_and_read_as_each_tool_reads_it() {
        let read = |p: &[(&str, &str)]| declared_mirror(&BOTH, &secret(), &pairs(p));
        assert_eq!(read(&[]), Ok(None));
        assert_eq!(
            read(&[(REPLICATE_FROM, " ops / db ")]),
            Ok(Some(Mirror {
                tool: Tool::Replicator,
                namespace: "ops".into(),
                name: "db".into()
            }))
        );
        assert_eq!(
            read(&[(REFLECTS, "ops/db")])
                .expect("read")
                .expect("pull")
                .tool,
            Tool::Reflector
        );
        assert_eq!(
            read(&[(REFLECTS, "ops/db"), (AUTO_REFLECTS, "True")]),
            Ok(None),
            "reflector's own mirror is no pull"
        );
        assert!(
            read(&[(REFLECTS, "db")])
                .expect_err("bare")
                .contains("namespace/name")
        );
        assert_eq!(
            declared_mirror(
                &[Tool::Reflector],
                &secret(),
                &pairs(&[(REPLICATE_FROM, "a/b")])
            ),
            Ok(None),
            "only the tools turned on"
        );
    }

    #[test]
    fn the_source_consents_for_every_kind() {
        let no_labels = None;
        let refl =
            |p: &[(&str, &str)], ns: &str| consents(Tool::Reflector, &pairs(p), ns, no_labels);
        assert!(refl(&[], "a").is_err());
        assert!(
            refl(&[(REFLECTION_ALLOWED, "true")], "a").is_ok(),
            "no list: all"
        );
        assert!(
            refl(
                &[
                    (REFLECTION_ALLOWED, "true"),
                    (REFLECTION_ALLOWED_NAMESPACES, "team-.*")
                ],
                "a"
            )
            .is_err()
        );
        let by_label = consents(
            Tool::Reflector,
            &pairs(&[
                (REFLECTION_ALLOWED, "true"),
                (REFLECTION_ALLOWED_SELECTOR, "pull=yes"),
            ]),
            "a",
            Some(&pairs(&[("pull", "yes")])),
        );
        assert!(by_label.is_ok());
        let repl =
            |p: &[(&str, &str)], ns: &str| consents(Tool::Replicator, &pairs(p), ns, no_labels);
        assert!(
            repl(&[(REPLICATION_ALLOWED, "true")], "a")
                .expect_err("required")
                .contains("required")
        );
        assert!(
            repl(
                &[
                    (REPLICATION_ALLOWED, "1"),
                    (REPLICATION_ALLOWED_NAMESPACES, "a|b")
                ],
                "b"
            )
            .is_ok()
        );
        assert!(
            repl(
                &[
                    (REPLICATION_ALLOWED, "1"),
                    (REPLICATION_ALLOWED_NAMESPACES, "a|b")
                ],
                "ab"
            )
            .is_err()
        );
        assert!(
            repl(
                &[
                    (REPLICATION_ALLOWED, "yes"),
                    (REPLICATION_ALLOWED_NAMESPACES, ".*")
                ],
                "a"
            )
            .is_err()
        );
    }

    fn target(managed: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "team-a", "uid": "t-1",
                "annotations": {REPLICATE_FROM: "ops/db"},
                "managedFields": managed},
            "data": {"own": "bWluZQ==", "password": "czNjcmV0"},
        }))
        .expect("target")
    }

    fn source() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "ops", "resourceVersion": "9",
                "creationTimestamp": "2026-03-01T00:00:00Z"},
            "type": "kubernetes.io/tls",
            "data": {"password": "czNjcmV0"},
        }))
        .expect("source")
    }

    #[test]
    fn a_pull_applies_only_what_it_brings_and_sees_when_it_is_shown() {
        let body = apply_body(
            &secret(),
            &target(json!([])),
            Tool::Replicator,
            Some(&source()),
        );
        let v = serde_json::to_value(&body).expect("json");
        assert_eq!(v["metadata"]["uid"], "t-1", "never creates");
        assert_eq!(v["data"], json!({"password": "czNjcmV0"}));
        assert_eq!(v.get("type"), None, "the type is the target's");
        assert_eq!(v["metadata"]["annotations"][REPLICATED_KEYS], "password");
        assert_eq!(v["metadata"]["annotations"][REPLICATED_FROM_VERSION], "9");
        assert_eq!(v["metadata"]["annotations"].get(REPLICATE_FROM), None);
        // Shown, but not owned yet: a write is needed (the first apply takes the key over).
        assert!(!in_sync(&target(json!([])), &body));
        let mut shown = target(json!([{"manager": MIRROR_MANAGER, "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": {
                "f:data": {"f:password": {}},
                "f:metadata": {"f:annotations": {
                    format!("f:{REPLICATED_KEYS}"): {},
                    format!("f:{REPLICATED_FROM_VERSION}"): {},
                    format!("f:{REPLICATED_AT}"): {}}}}}]));
        shown.metadata.annotations = Some(
            body.metadata
                .annotations
                .clone()
                .expect("annotations")
                .into_iter()
                .chain([(REPLICATE_FROM.to_string(), "ops/db".to_string())])
                .collect(),
        );
        assert!(in_sync(&shown, &body));
        // A key the pull brought that left the source: the apply removes it.
        let mut smaller = source();
        smaller.data["data"] = json!({});
        let less = apply_body(&secret(), &shown, Tool::Replicator, Some(&smaller));
        assert!(!in_sync(&shown, &less));
        // The pull ends: nothing is applied, and what it owns goes.
        let end = apply_body(&secret(), &shown, Tool::Replicator, None);
        let v = serde_json::to_value(&end).expect("json");
        assert_eq!(v["data"], json!({}), "an empty map: the keys it owned go");
        assert_eq!(v["metadata"]["annotations"], json!({}));
        assert!(!in_sync(&shown, &end));
        assert!(
            in_sync(&target(json!([])), &end),
            "nothing owned, nothing to remove"
        );
    }
}
