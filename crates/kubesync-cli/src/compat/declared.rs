//! What an object's annotations declare, read as each tool reads them (pure): whether it is a
//! push source and where its copies go, what its copies carry (labels, the tool's bookkeeping
//! annotations), which objects already there were that tool's copies of it, and what in the
//! annotations cannot be read.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kube::core::{ApiResource, Selector, SelectorExt};

use super::Tool;
use super::parse::{
    Dialect, PatternList, label_selector, namespaced_name, reflector_bool, replicator_bool,
};
use kubesync::syncers::fan_out::rules::SOURCE;

/// reflector's annotation prefix.
pub const REFLECTOR: &str = crate::policy::DECLARING_PREFIXES[0];
/// replicator's annotation prefix.
pub const REPLICATOR: &str = crate::policy::DECLARING_PREFIXES[1];

/// reflector: the source may be reflected at all.
pub const REFLECTION_ALLOWED: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed";
/// reflector: namespaces allowed to hold mirrors (pattern list; empty: all).
pub const REFLECTION_ALLOWED_NAMESPACES: &str =
    "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces";
/// reflector: namespaces allowed to hold mirrors, by label (ORed with the list).
pub const REFLECTION_ALLOWED_SELECTOR: &str =
    "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces-selector";
/// reflector: push to the namespaces below automatically.
pub const REFLECTION_AUTO_ENABLED: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-enabled";
/// reflector: where automatic mirrors go (pattern list; empty: all allowed).
pub const REFLECTION_AUTO_NAMESPACES: &str =
    "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces";
/// reflector: where automatic mirrors go, by label (ORed with the list).
pub const REFLECTION_AUTO_SELECTOR: &str =
    "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces-selector";
/// reflector, on a mirror: `namespace/name` of its source.
pub const REFLECTS: &str = "reflector.v1.k8s.emberstack.com/reflects";
/// reflector, on a mirror it made: `"True"`.
pub const AUTO_REFLECTS: &str = "reflector.v1.k8s.emberstack.com/auto-reflects";
/// reflector, on a mirror: the source resourceVersion copied.
pub const REFLECTED_VERSION: &str = "reflector.v1.k8s.emberstack.com/reflected-version";
/// reflector, on a mirror: when it was copied.
pub const REFLECTED_AT: &str = "reflector.v1.k8s.emberstack.com/reflected-at";

/// replicator: push to namespaces whose names match (pattern list).
pub const REPLICATE_TO: &str = "replicator.v1.mittwald.de/replicate-to";
/// replicator: push to namespaces whose labels match (label selector).
pub const REPLICATE_TO_MATCHING: &str = "replicator.v1.mittwald.de/replicate-to-matching";
/// replicator, on a target: pull from `namespace/name`.
pub const REPLICATE_FROM: &str = "replicator.v1.mittwald.de/replicate-from";
/// replicator: do not copy the source's labels.
pub const STRIP_LABELS: &str = "replicator.v1.mittwald.de/strip-labels";
/// replicator: copy the source's owner references (not honoured).
pub const KEEP_OWNER_REFERENCES: &str = "replicator.v1.mittwald.de/keep-owner-references";
/// replicator, on a copy: when it was copied.
pub const REPLICATED_AT: &str = "replicator.v1.mittwald.de/replicated-at";
/// replicator, on a copy: the source resourceVersion copied.
pub const REPLICATED_FROM_VERSION: &str = "replicator.v1.mittwald.de/replicated-from-version";
/// replicator, on a copy: the data keys it owns (sorted, comma-joined).
pub const REPLICATED_KEYS: &str = "replicator.v1.mittwald.de/replicated-keys";

/// The kinds a tool copies: reflector Secrets and ConfigMaps; replicator also Roles,
/// RoleBindings and ServiceAccounts (as `(group, kind)`).
pub fn kinds(tool: Tool) -> &'static [(&'static str, &'static str)] {
    match tool {
        Tool::Reflector => &[("", "Secret"), ("", "ConfigMap")],
        Tool::Replicator => &[
            ("", "Secret"),
            ("", "ConfigMap"),
            ("rbac.authorization.k8s.io", "Role"),
            ("rbac.authorization.k8s.io", "RoleBinding"),
            ("", "ServiceAccount"),
        ],
    }
}

/// The types of the kinds `tools` copy, each once, in order.
pub fn resources(tools: &[Tool]) -> Vec<ApiResource> {
    let mut kinds: Vec<(&str, &str)> = tools
        .iter()
        .flat_map(|t| kinds(*t).iter().copied())
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    kinds
        .into_iter()
        .map(|(group, kind)| {
            let gvk = kube::core::GroupVersionKind::gvk(group, "v1", kind);
            ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()))
        })
        .collect()
}

/// Whether `tool` copies objects of type `resource`.
pub fn copies(tool: Tool, resource: &ApiResource) -> bool {
    kinds(tool)
        .iter()
        .any(|(g, k)| resource.group == *g && resource.kind == *k)
}

/// A namespace label selector as written in an annotation.
#[derive(Clone, Debug)]
enum SelectorField {
    /// Not given (or empty, where the tool reads empty as not given).
    Absent,
    /// Given and valid.
    Valid(Selector),
    /// Given and unreadable: matches nothing.
    Invalid,
}

impl SelectorField {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        matches!(self, Self::Valid(s) if s.matches(labels))
    }
}

/// reflector's push: where automatic mirrors go.
#[derive(Clone, Debug)]
struct ReflectorPush {
    allowed: PatternList,
    allowed_selector: SelectorField,
    auto: PatternList,
    auto_selector: SelectorField,
}

impl ReflectorPush {
    /// reflector's rule: a namespace matches a (list, selector) pair when both are empty, or
    /// the list matches its name, or the selector its labels; a mirror goes where both the
    /// allowed pair and the automatic pair match.
    fn admits(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        let pair = |list: &PatternList, selector: &SelectorField| {
            (list.is_empty() && matches!(selector, SelectorField::Absent))
                || list.matches(namespace)
                || selector.matches(labels)
        };
        pair(&self.allowed, &self.allowed_selector) && pair(&self.auto, &self.auto_selector)
    }
}

/// replicator's push: the union of the names and the labels it lists.
#[derive(Clone, Debug)]
struct ReplicatorPush {
    to: Option<PatternList>,
    matching: SelectorField,
    strip_labels: bool,
}

impl ReplicatorPush {
    fn admits(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.to.as_ref().is_some_and(|l| l.matches(namespace)) || self.matching.matches(labels)
    }
}

/// What one object's annotations declare as a push source, for the tools turned on.
#[derive(Clone, Debug, Default)]
pub struct Declared {
    reflector: Option<ReflectorPush>,
    replicator: Option<ReplicatorPush>,
    /// What could not be read (or is not honoured), each said for people; the rest still
    /// works.
    pub problems: Vec<String>,
}

impl Declared {
    /// Reads the annotations of an object of type `resource` for the `tools` turned on.
    /// Objects reflector reads as mirrors (`reflects`) or replicator as pull targets
    /// (`replicate-from`) are no push source of that tool.
    pub fn read(
        tools: &[Tool],
        resource: &ApiResource,
        annotations: &BTreeMap<String, String>,
    ) -> Self {
        let mut declared = Self::default();
        let get = |k: &str| annotations.get(k).map(String::as_str);
        if tools.contains(&Tool::Reflector)
            && copies(Tool::Reflector, resource)
            && get(REFLECTS).is_none()
            && reflector_bool(get(REFLECTION_ALLOWED))
            && reflector_bool(get(REFLECTION_AUTO_ENABLED))
        {
            let mut list = |key: &str| {
                let list = PatternList::parse(Dialect::Reflector, get(key).unwrap_or_default());
                declared.note_invalid(key, &list);
                list
            };
            let (allowed, auto) = (
                list(REFLECTION_ALLOWED_NAMESPACES),
                list(REFLECTION_AUTO_NAMESPACES),
            );
            declared.reflector = Some(ReflectorPush {
                allowed,
                auto,
                allowed_selector: declared.selector(
                    get(REFLECTION_ALLOWED_SELECTOR),
                    false,
                    REFLECTION_ALLOWED_SELECTOR,
                ),
                auto_selector: declared.selector(
                    get(REFLECTION_AUTO_SELECTOR),
                    false,
                    REFLECTION_AUTO_SELECTOR,
                ),
            });
        }
        let pushes = get(REPLICATE_TO).is_some() || get(REPLICATE_TO_MATCHING).is_some();
        if tools.contains(&Tool::Replicator)
            && copies(Tool::Replicator, resource)
            && get(REPLICATE_FROM).is_none()
            && pushes
        {
            let to = get(REPLICATE_TO).map(|v| {
                let list = PatternList::parse(Dialect::Replicator, v);
                declared.note_invalid(REPLICATE_TO, &list);
                list
            });
            let matching =
                declared.selector(get(REPLICATE_TO_MATCHING), true, REPLICATE_TO_MATCHING);
            // replicator strips labels whenever the annotation is there, "false" too; here
            // "false" means false.
            let strip_labels = get(STRIP_LABELS).is_some_and(|v| replicator_bool(v) != Some(false));
            if get(KEEP_OWNER_REFERENCES).is_some() {
                declared.problems.push(format!(
                    "{KEEP_OWNER_REFERENCES} is not honoured: copies never carry the source's owner references (an owner in the source's namespace would have every copy elsewhere garbage-collected)"
                ));
            }
            declared.replicator = Some(ReplicatorPush {
                to,
                matching,
                strip_labels,
            });
        }
        declared
    }

    fn note_invalid(&mut self, key: &str, list: &PatternList) {
        for (entry, why) in list.invalid() {
            self.problems.push(format!(
                "{key}: the pattern {entry:?} matches no namespace ({why}); the others still apply"
            ));
        }
    }

    /// A selector annotation: replicator reads an empty one as "everything", reflector as
    /// "not given".
    fn selector(
        &mut self,
        value: Option<&str>,
        empty_selects_all: bool,
        key: &str,
    ) -> SelectorField {
        match value {
            None => SelectorField::Absent,
            Some(v) if v.trim().is_empty() && !empty_selects_all => SelectorField::Absent,
            Some(v) => match label_selector(v) {
                Ok(s) => SelectorField::Valid(s),
                Err(why) => {
                    self.problems
                        .push(format!("{key}: {why}; it selects no namespace"));
                    SelectorField::Invalid
                }
            },
        }
    }

    /// Whether the annotations declare a push of any tool turned on.
    pub fn pushes(&self) -> bool {
        self.reflector.is_some() || self.replicator.is_some()
    }

    /// The tools whose push is declared.
    pub fn tools(&self) -> Vec<Tool> {
        let mut tools = Vec::new();
        if self.reflector.is_some() {
            tools.push(Tool::Reflector);
        }
        if self.replicator.is_some() {
            tools.push(Tool::Replicator);
        }
        tools
    }

    /// Whether a namespace (name and labels) receives a copy: any declared tool's rule admits
    /// it (the source's own namespace is left out by the caller).
    pub fn admits(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.reflector
            .as_ref()
            .is_some_and(|r| r.admits(namespace, labels))
            || self
                .replicator
                .as_ref()
                .is_some_and(|r| r.admits(namespace, labels))
    }

    /// Whether copies carry the source's labels: only replicator copies them, unless told
    /// not to (`strip-labels`).
    pub fn copies_labels(&self) -> bool {
        self.replicator.as_ref().is_some_and(|r| !r.strip_labels)
    }
}

/// The source `namespace/name` a copy's kubesync `source` mark names (`group/kind/ns/name`).
pub fn marked_source(copy: &DynamicObject) -> Option<(String, String)> {
    let mark = copy.metadata.annotations.as_ref()?.get(SOURCE)?;
    let mut parts = mark.rsplitn(3, '/');
    let name = parts.next()?;
    let namespace = parts.next()?;
    Some((namespace.to_string(), name.to_string()))
}

/// When the source last changed: the latest time in its managedFields, else its creation.
/// A function of the source, so the copy a plan builds compares equal while the source
/// stands still.
pub fn changed_at(source: &DynamicObject) -> Option<jiff::Timestamp> {
    let latest = source
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|e| e.time.as_ref().map(|t| t.0))
        .max();
    latest.or_else(|| source.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// A time as reflector writes it (.NET's round-trip format: seven fractional digits and the
/// offset), e.g. `2026-01-01T10:00:00.0000000+00:00`.
pub fn dotnet_time(at: jiff::Timestamp) -> String {
    let ticks = at.subsec_nanosecond() / 100;
    format!("{}.{ticks:07}+00:00", at.strftime("%Y-%m-%dT%H:%M:%S"))
}

/// The bookkeeping annotations each tool writes on its copies, for the copy of `source` as
/// built (`copy`): reflector `reflects`, `auto-reflects: "True"`, `reflected-version`,
/// `reflected-at` (as .NET's round-trip format); replicator `replicated-at` (RFC 3339),
/// `replicated-from-version`, and for Secrets and ConfigMaps `replicated-keys`. The times are
/// the source's last change (see `changed_at`).
pub fn bookkeeping(
    tools: &[Tool],
    source: &DynamicObject,
    copy: &DynamicObject,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if tools.contains(&Tool::Reflector) {
        let from = format!(
            "{}/{}",
            source.metadata.namespace.as_deref().unwrap_or_default(),
            source.metadata.name.as_deref().unwrap_or_default()
        );
        out.insert(REFLECTS.to_string(), from);
        out.insert(AUTO_REFLECTS.to_string(), "True".to_string());
    }
    let kind = copy
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or_default();
    for tool in tools {
        out.extend(written_from(*tool, source, kind, &copy.data));
    }
    out
}

/// What `tool` notes on an object it wrote `fields` (a copy's or a pull's) into from
/// `source`, for an object of `kind`: reflector `reflected-version` and `reflected-at` (.NET's
/// round-trip format); replicator `replicated-from-version`, `replicated-at` (RFC 3339) and,
/// for Secrets and ConfigMaps, `replicated-keys` (the keys of `data` and `binaryData`, sorted,
/// comma-joined). The times are the source's last change ([`changed_at`]).
pub fn written_from(
    tool: Tool,
    source: &DynamicObject,
    kind: &str,
    fields: &serde_json::Value,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let version = source.metadata.resource_version.clone().unwrap_or_default();
    let at = changed_at(source);
    match tool {
        Tool::Reflector => {
            out.insert(REFLECTED_VERSION.to_string(), version);
            if let Some(at) = at {
                out.insert(REFLECTED_AT.to_string(), dotnet_time(at));
            }
        }
        Tool::Replicator => {
            out.insert(REPLICATED_FROM_VERSION.to_string(), version);
            if let Some(at) = at {
                out.insert(
                    REPLICATED_AT.to_string(),
                    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                );
            }
            if matches!(kind, "Secret" | "ConfigMap") {
                let keys: std::collections::BTreeSet<&str> = ["data", "binaryData"]
                    .iter()
                    .filter_map(|f| fields.get(*f).and_then(|v| v.as_object()))
                    .flat_map(|m| m.keys().map(String::as_str))
                    .collect();
                let keys: Vec<&str> = keys.into_iter().collect();
                out.insert(REPLICATED_KEYS.to_string(), keys.join(","));
            }
        }
    }
    out
}

/// Whether the object `there` was made by one of `tools` as its copy of the source
/// `(namespace, name)`, by its bookkeeping:
/// reflector's `reflects` naming that source with `auto-reflects: True`; replicator's
/// `replicated-from-version` (replicator's push copies name no source; the name, the
/// namespace the push selects and the bookkeeping together identify them). An object that
/// declares anything itself (a pull, a push) is never such a copy.
pub fn made_by(tools: &[Tool], there: &DynamicObject, source: &(String, String)) -> bool {
    let none = BTreeMap::new();
    let a = there.metadata.annotations.as_ref().unwrap_or(&none);
    let declares = [
        REPLICATE_FROM,
        REPLICATE_TO,
        REPLICATE_TO_MATCHING,
        REFLECTION_ALLOWED,
        REFLECTION_AUTO_ENABLED,
    ]
    .iter()
    .any(|k| a.contains_key(*k));
    if declares {
        return false;
    }
    let reflector = tools.contains(&Tool::Reflector)
        && a.get(REFLECTS).and_then(|v| namespaced_name(v)).as_ref() == Some(source)
        && reflector_bool(a.get(AUTO_REFLECTS).map(String::as_str));
    let replicator = tools.contains(&Tool::Replicator)
        && a.contains_key(REPLICATED_FROM_VERSION)
        && !a.contains_key(REFLECTS);
    reflector || replicator
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn secret() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
    }

    fn role() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&())
    }

    const BOTH: [Tool; 2] = [Tool::Reflector, Tool::Replicator];

    fn no_labels() -> BTreeMap<String, String> {
        BTreeMap::new()
    }

    #[test]
    fn reflector_pushes_only_when_allowed_and_auto_enabled_where_both_pairs_match() {
        let read = |pairs: &[(&str, &str)]| Declared::read(&BOTH, &secret(), &annotations(pairs));
        assert!(!read(&[(REFLECTION_ALLOWED, "true")]).pushes());
        assert!(!read(&[(REFLECTION_AUTO_ENABLED, "true")]).pushes());
        assert!(
            !read(&[
                (REFLECTION_ALLOWED, "yes"),
                (REFLECTION_AUTO_ENABLED, "true")
            ])
            .pushes(),
            "only true/false are booleans to reflector"
        );
        let all = read(&[
            (REFLECTION_ALLOWED, " True "),
            (REFLECTION_AUTO_ENABLED, "TRUE"),
        ]);
        assert!(all.pushes() && all.admits("anything", &no_labels()));
        assert!(!all.copies_labels());
        let narrowed = read(&[
            (REFLECTION_ALLOWED, "true"),
            (REFLECTION_ALLOWED_NAMESPACES, "team-.*,ops"),
            (REFLECTION_AUTO_ENABLED, "true"),
            (REFLECTION_AUTO_NAMESPACES, "team-a,ops,other"),
        ]);
        assert!(narrowed.admits("team-a", &no_labels()));
        assert!(narrowed.admits("ops", &no_labels()));
        assert!(
            !narrowed.admits("team-b", &no_labels()),
            "not automatic there"
        );
        assert!(!narrowed.admits("other", &no_labels()), "not allowed there");
        let selected = read(&[
            (REFLECTION_ALLOWED, "true"),
            (REFLECTION_ALLOWED_SELECTOR, "env in (dev, test)"),
            (REFLECTION_AUTO_ENABLED, "true"),
        ]);
        let env = |v: &str| annotations(&[("env", v)]);
        assert!(selected.admits("x", &env("dev")) && !selected.admits("x", &env("prod")));
        // A mirror is never a source.
        assert!(
            !read(&[
                (REFLECTION_ALLOWED, "true"),
                (REFLECTION_AUTO_ENABLED, "true"),
                (REFLECTS, "a/b")
            ])
            .pushes()
        );
        // reflector copies no Role.
        assert!(
            !Declared::read(
                &BOTH,
                &role(),
                &annotations(&[
                    (REFLECTION_ALLOWED, "true"),
                    (REFLECTION_AUTO_ENABLED, "true")
                ])
            )
            .pushes()
        );
    }

    #[test]
    fn unreadable_parts_match_nothing_and_say_so_while_the_rest_works() {
        let d = Declared::read(
            &BOTH,
            &secret(),
            &annotations(&[
                (REFLECTION_ALLOWED, "true"),
                (REFLECTION_AUTO_ENABLED, "true"),
                (REFLECTION_AUTO_NAMESPACES, "*,team-a"),
                (REFLECTION_AUTO_SELECTOR, "env in (dev"),
            ]),
        );
        assert!(d.admits("team-a", &no_labels()));
        assert!(!d.admits("team-b", &annotations(&[("env", "dev")])));
        assert_eq!(d.problems.len(), 2, "{:?}", d.problems);
        assert!(d.problems[0].contains("\"*\""), "{}", d.problems[0]);
        assert!(d.problems[1].contains(REFLECTION_AUTO_SELECTOR));
        // Only an invalid list: nothing, not everything.
        let only_invalid = Declared::read(
            &BOTH,
            &secret(),
            &annotations(&[
                (REFLECTION_ALLOWED, "true"),
                (REFLECTION_AUTO_ENABLED, "true"),
                (REFLECTION_AUTO_NAMESPACES, "*"),
            ]),
        );
        assert!(!only_invalid.admits("team-a", &no_labels()));
    }

    #[test]
    fn replicator_pushes_to_the_union_of_names_and_labels_anchored_correctly() {
        let read = |pairs: &[(&str, &str)]| Declared::read(&BOTH, &role(), &annotations(pairs));
        let d = read(&[
            (REPLICATE_TO, "a|b, team-.*"),
            (REPLICATE_TO_MATCHING, "shared=yes"),
        ]);
        assert!(d.pushes() && d.copies_labels());
        for ns in ["a", "b", "team-x"] {
            assert!(d.admits(ns, &no_labels()), "{ns}");
        }
        for ns in ["ab", "ax", "xb"] {
            assert!(!d.admits(ns, &no_labels()), "{ns}: ^(?:a|b)$, not ^a|b$");
        }
        assert!(d.admits("other", &annotations(&[("shared", "yes")])));
        assert!(
            !read(&[(REPLICATE_TO, "")]).admits("x", &no_labels()),
            "empty: nowhere"
        );
        assert!(
            read(&[(REPLICATE_TO_MATCHING, "")]).admits("x", &no_labels()),
            "replicator reads an empty selector as everything"
        );
        // A pull target never pushes.
        assert!(!read(&[(REPLICATE_TO, ".*"), (REPLICATE_FROM, "a/b")]).pushes());
        // strip-labels: present strips, "false" does not (replicator strips then too).
        assert!(!read(&[(REPLICATE_TO, "x"), (STRIP_LABELS, "true")]).copies_labels());
        assert!(!read(&[(REPLICATE_TO, "x"), (STRIP_LABELS, "")]).copies_labels());
        assert!(read(&[(REPLICATE_TO, "x"), (STRIP_LABELS, "false")]).copies_labels());
        let kept = read(&[(REPLICATE_TO, "x"), (KEEP_OWNER_REFERENCES, "true")]);
        assert!(kept.problems[0].contains("not honoured"));
        // Only the tools turned on.
        assert!(
            !Declared::read(
                &[Tool::Reflector],
                &role(),
                &annotations(&[(REPLICATE_TO, ".*")])
            )
            .pushes()
        );
    }

    fn source() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "ops", "resourceVersion": "42",
                "creationTimestamp": "2026-01-02T03:04:05Z",
                "managedFields": [
                    {"manager": "a", "operation": "Update", "time": "2026-02-03T04:05:06Z"},
                    {"manager": "b", "operation": "Update", "time": "2026-01-05T00:00:00Z"}]},
            "data": {"b": "", "a": ""},
        }))
        .expect("source")
    }

    fn copy() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "db", "namespace": "team-a",
                "annotations": {SOURCE: "core/ConfigMap/ops/db"}},
            "data": {"b": "", "a": ""}, "binaryData": {"c": ""},
        }))
        .expect("copy")
    }

    #[test]
    fn copies_carry_each_tools_bookkeeping_from_the_source() {
        let b = bookkeeping(&BOTH, &source(), &copy());
        assert_eq!(b[REFLECTS], "ops/db");
        assert_eq!(b[AUTO_REFLECTS], "True");
        assert_eq!(b[REFLECTED_VERSION], "42");
        assert_eq!(b[REFLECTED_AT], "2026-02-03T04:05:06.0000000+00:00");
        assert_eq!(b[REPLICATED_FROM_VERSION], "42");
        assert_eq!(b[REPLICATED_AT], "2026-02-03T04:05:06Z");
        assert_eq!(b[REPLICATED_KEYS], "a,b,c");
        let only = bookkeeping(&[Tool::Replicator], &source(), &copy());
        assert!(!only.contains_key(REFLECTS));
        assert_eq!(
            bookkeeping(&BOTH, &source(), &copy()),
            b,
            "a function of the source"
        );
    }

    /// The source `copy()` is made from.
    fn src() -> (String, String) {
        marked_source(&copy()).expect("marked")
    }

    fn there(pairs: &[(&str, &str)]) -> DynamicObject {
        let mut o = copy();
        o.metadata.annotations = Some(annotations(pairs));
        o
    }

    #[test]
    fn only_the_tools_own_copies_of_this_source_are_taken_over() {
        let mirror = there(&[(REFLECTS, "ops/db"), (AUTO_REFLECTS, "True")]);
        assert!(made_by(&BOTH, &mirror, &src()));
        assert!(!made_by(&[Tool::Replicator], &mirror, &src()));
        for other in [
            there(&[(REFLECTS, "ops/other"), (AUTO_REFLECTS, "True")]),
            there(&[(REFLECTS, "ops/db"), (AUTO_REFLECTS, "False")]),
            there(&[(REFLECTS, "ops/db")]),
            there(&[]),
            there(&[(REPLICATED_FROM_VERSION, "1"), (REPLICATE_FROM, "x/y")]),
            there(&[(REPLICATED_FROM_VERSION, "1"), (REPLICATE_TO, ".*")]),
        ] {
            assert!(
                !made_by(&BOTH, &other, &src()),
                "{:?}",
                other.metadata.annotations
            );
        }
        let replicated = there(&[(REPLICATED_FROM_VERSION, "7"), (REPLICATED_KEYS, "a")]);
        assert!(made_by(&BOTH, &replicated, &src()));
        assert!(!made_by(&[Tool::Reflector], &replicated, &src()));
    }
}
