//! The pure checks of an ObjectSync's spec, before any request: every field judged, and a
//! refusal that names the field's path and value.

use super::*;

/// The selection of an ObjectSync's sources: `None` for one object by name; a refusal for a
/// source that gives both a name and a selection, or neither.
pub(super) fn source_selection(source: &ObjectSyncSource) -> Result<Option<Selection>, Refusal> {
    let invalid = |m: String| Refusal::new(Reason::InvalidSpec, m);
    let many = source.selector.is_some() || !source.names.is_empty();
    match (source.name.is_empty(), many) {
        (false, false) => Ok(None),
        (false, true) => Err(invalid(
            "spec.source gives a name and a selector or names; give one object's name, or a selector and/or names".into(),
        )),
        (true, false) => Err(invalid(
            "spec.source needs a name, or a selector and/or names".into(),
        )),
        (true, true) => {
            let selector = source
                .selector
                .as_ref()
                .map(selector)
                .transpose()
                .map_err(|e| invalid(e.under("spec.source.selector").to_string()))?;
            if let Some((i, bad)) = source.names.iter().enumerate().find(|(_, n)| !is_object_name(n)) {
                return Err(invalid(format!(
                    "spec.source.names[{i}]: {} is not a valid object name",
                    validate::quoted(bad)
                )));
            }
            Ok(Some(Selection {
                selector,
                names: source.names.clone(),
            }))
        }
    }
}

/// The source namespace (pure) of an ObjectSync in namespace `own` (`Some`) or of a
/// ClusterObjectSync (`None`), for a `namespaced` kind or not. The fan-out reads an empty
/// namespace as a cluster-scoped kind, so:
/// - an ObjectSync copies namespaced kinds only, from the namespace given, else (absent or
///   empty) its own: never empty;
/// - a ClusterObjectSync has no namespace of its own: it names the source's for a namespaced
///   kind, and none for a cluster-scoped one.
pub(super) fn source_namespace(
    source: &ObjectSyncSource,
    own: Option<&str>,
    namespaced: bool,
) -> Result<String, Refusal> {
    let invalid = |m: String| Err(Refusal::new(Reason::InvalidSpec, m));
    let kind = &source.kind;
    let given = source.namespace.clone().filter(|ns| !ns.is_empty());
    match (own, namespaced, given) {
        (_, true, Some(ns)) => Ok(ns),
        (Some(own), true, None) => Ok(own.to_string()),
        (Some(_), false, _) => invalid(format!(
            "{kind} is cluster-scoped: an ObjectSync copies namespaced kinds only; a ClusterObjectSync (declared by cluster admins) copies cluster-scoped ones"
        )),
        (None, true, None) => invalid(format!(
            "{kind} is namespaced: a ClusterObjectSync names the source's namespace in spec.source.namespace"
        )),
        (None, false, None) => Ok(String::new()),
        (None, false, Some(ns)) => invalid(format!(
            "{kind} is cluster-scoped: spec.source.namespace ({ns}) must be absent"
        )),
    }
}

/// How a status describes a source selection, e.g. `selector app=tls, names a, b`; `None`
/// for a single source.
pub(super) fn selection_text(source: &ObjectSyncSource) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(s) = &source.selector {
        let text = selector(s).map_or_else(|e| e.to_string(), |s| s.to_string());
        parts.push(format!("selector {text}"));
    }
    if !source.names.is_empty() {
        parts.push(format!("names {}", source.names.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Whether `name` may name an object of some kind: the apiserver's rule for every kind (at
/// most [`MAX_NAME`] characters, not `.` or `..`, no `/` or `%`). Kinds narrow it further (a
/// ConfigMap's name is a DNS subdomain; a ClusterRole's may hold `:`), and the apiserver
/// refuses a copy named against its kind's rule: that destination's `Error`.
pub(super) fn is_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name != "."
        && name != ".."
        && name.chars().all(is_name_char)
}

/// Whether an object name of any kind may hold `c`.
pub(super) fn is_name_char(c: char) -> bool {
    c != '/' && c != '%'
}

/// What [`check_spec`] found valid, parsed: the source selection (`None`: one object by
/// name), and per destination its namespace selector and patches.
pub(super) struct Checked {
    pub(super) selection: Option<Selection>,
    /// Per destination: its namespace selector, its patches, and the fields its copies leave
    /// to others (the spec's and its own).
    pub(super) destinations: Vec<(Option<kube::core::Selector>, Vec<CopyPatch>, Ignore)>,
}

/// Every field of an ObjectSync's spec that can be judged without a request, judged the way
/// the apiserver would (pure): the source (kind, group, version, name, names, namespace,
/// selector), each destination (namespace, namespaceSelector, excludeNamespaces, cluster,
/// copy names, patches) and the filters. The refusal names the field's path and the value.
/// What depends on the kind (namespaced or not) or on the cluster is judged after discovery.
pub(super) fn check_spec(spec: &ObjectSyncSpec) -> Result<Checked, Refusal> {
    let selection = check_source_fields(&spec.source)?;
    if spec.destinations.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            "spec.destinations is empty",
        ));
    }
    let mut destinations = Vec::new();
    let every = ignore_of("spec", &spec.ignore_fields, &spec.ignore_managers)?;
    for (i, d) in spec.destinations.iter().enumerate() {
        destinations.push(check_destination_fields(i, d, selection.is_some(), &every)?);
    }
    check_filters(spec)?;
    Ok(Checked {
        selection,
        destinations,
    })
}

/// The refusal of the field at `path` with message `m`.
fn invalid_field(path: String, m: String) -> Refusal {
    Refusal::new(Reason::InvalidSpec, format!("{path}: {m}"))
}

/// The source's fields judged (kind, group, version, name, names, namespace, selector,
/// cluster); its selection parsed (`None`: one object by name).
fn check_source_fields(source: &ObjectSyncSource) -> Result<Option<Selection>, Refusal> {
    if source.kind.is_empty() {
        return Err(Refusal::new(
            Reason::InvalidSpec,
            "spec.source needs a kind",
        ));
    }
    if !source.kind.chars().all(|c| c.is_ascii_alphanumeric())
        || !source.kind.starts_with(|c: char| c.is_ascii_alphabetic())
    {
        return Err(invalid_field(
            "spec.source.kind".into(),
            format!(
                "{} is not a kind: give a name such as ConfigMap (letters and digits)",
                validate::quoted(&source.kind)
            ),
        ));
    }
    if !source.group.is_empty() && !validate::is_dns_subdomain(&source.group) {
        return Err(invalid_field(
            "spec.source.group".into(),
            format!(
                "{} is not an API group: give a DNS subdomain such as apps or example.com, or nothing for the core group",
                validate::quoted(&source.group)
            ),
        ));
    }
    if let Some(v) = source
        .version
        .as_deref()
        .filter(|v| !validate::is_dns_label(v))
    {
        return Err(invalid_field(
            "spec.source.version".into(),
            format!(
                "{} is not an API version such as v1 or v1beta1",
                validate::quoted(v)
            ),
        ));
    }
    let selection = source_selection(source)?;
    if !source.name.is_empty() && !is_object_name(&source.name) {
        return Err(invalid_field(
            "spec.source.name".into(),
            format!(
                "{} is not a valid object name",
                validate::quoted(&source.name)
            ),
        ));
    }
    if let Some(ns) = source.namespace.as_deref().filter(|ns| !ns.is_empty())
        && !validate::is_dns_label(ns)
    {
        return Err(invalid_field(
            "spec.source.namespace".into(),
            format!("{} is not a namespace name", validate::quoted(ns)),
        ));
    }
    if let Some(c) = source.cluster.as_deref()
        && !validate::is_dns_subdomain(c)
    {
        return Err(invalid_field(
            "spec.source.cluster".into(),
            format!("{} is not a RemoteCluster's name", validate::quoted(c)),
        ));
    }
    Ok(selection)
}

/// The fields of destination `i` judged (copy names, for `many` sources or one; namespace,
/// namespaceSelector, excludeNamespaces, cluster, patches, ignored fields); its namespace
/// selector, patches and the fields its copies leave to others (`every` destination's and its
/// own) parsed.
fn check_destination_fields(
    i: usize,
    d: &ObjectSyncDestination,
    many: bool,
    every: &Ignore,
) -> Result<(Option<kube::core::Selector>, Vec<CopyPatch>, Ignore), Refusal> {
    let at = |field: &str| format!("spec.destinations[{i}]{field}");
    check_copy_names(d, many).map_err(|m| invalid_field(at(""), m))?;
    let namespace = d.namespace.as_deref().unwrap_or_default();
    if !(namespace.is_empty() || namespace == "*" || validate::is_dns_label(namespace)) {
        return Err(invalid_field(
            at(".namespace"),
            format!(
                "{} is not a namespace name: give one name, \"*\" for all, or a namespaceSelector (and excludeNamespaces, which takes globs)",
                validate::quoted(namespace)
            ),
        ));
    }
    let selector = d
        .namespace_selector
        .as_ref()
        .map(selector)
        .transpose()
        .map_err(|e| {
            Refusal::new(
                Reason::InvalidSpec,
                e.under(&at(".namespaceSelector")).to_string(),
            )
        })?;
    for (j, glob) in d.exclude_namespaces.iter().enumerate() {
        validate::namespace_glob(glob)
            .map_err(|m| invalid_field(at(&format!(".excludeNamespaces[{j}]")), m))?;
    }
    if let Some(c) = d.cluster.as_deref()
        && !validate::is_dns_subdomain(c)
    {
        return Err(invalid_field(
            at(".cluster"),
            format!("{} is not a RemoteCluster's name", validate::quoted(c)),
        ));
    }
    let patches = copy_patches(&d.patches)
        .map_err(|m| Refusal::new(Reason::InvalidPatch, format!("{}: {m}", at(""))))?;
    let own = ignore_of(&at(""), &d.ignore_fields, &d.ignore_managers)?;
    let mut ignore = every.clone();
    ignore.pointers.extend(own.pointers);
    ignore.managers.extend(own.managers);
    Ok((selector, patches, ignore))
}

/// The label and annotation filters' entries and the data filter's keys judged.
fn check_filters(spec: &ObjectSyncSpec) -> Result<(), Refusal> {
    for (field, filter) in [("labels", &spec.labels), ("annotations", &spec.annotations)] {
        for (list, entries) in [("include", &filter.include), ("exclude", &filter.exclude)] {
            for (j, e) in entries.iter().enumerate() {
                validate::key_filter_entry(e)
                    .map_err(|m| invalid_field(format!("spec.{field}.{list}[{j}]"), m))?;
            }
        }
    }
    for (j, e) in spec.other_owners.keys.iter().enumerate() {
        validate::key_filter_entry(e)
            .map_err(|m| invalid_field(format!("spec.otherOwners.keys[{j}]"), m))?;
    }
    if let Some(data) = &spec.data {
        for (j, k) in data.include.iter().enumerate() {
            validate::data_key(k)
                .map_err(|m| invalid_field(format!("spec.data.include[{j}]"), m))?;
        }
        for (from, to) in &data.rename {
            let at = format!("spec.data.rename[{}]", validate::quoted(from));
            validate::data_key(from).map_err(|m| invalid_field(at.clone(), m))?;
            validate::data_key(to).map_err(|m| invalid_field(at.clone(), m))?;
        }
    }
    Ok(())
}

/// The fields left to others under `path` (`spec` or a destination): each pointer parsed
/// (RFC 6901; never apiVersion, kind, kubesync's marks or metadata but labels and
/// annotations), each manager named and not kubesync's own.
pub(super) fn ignore_of(
    path: &str,
    fields: &[String],
    managers: &[String],
) -> Result<Ignore, Refusal> {
    let invalid = |at: String, m: String| Refusal::new(Reason::InvalidSpec, format!("{at}: {m}"));
    let mut ignore = Ignore::default();
    for (j, f) in fields.iter().enumerate() {
        ignore
            .pointers
            .push(Pointer::parse(f).map_err(|m| invalid(format!("{path}.ignoreFields[{j}]"), m))?);
    }
    for (j, m) in managers.iter().enumerate() {
        let at = format!("{path}.ignoreManagers[{j}]");
        if m.is_empty() || m.len() > 128 {
            return Err(invalid(
                at,
                "a field manager's name has 1 to 128 characters".into(),
            ));
        }
        if m == FIELD_MANAGER {
            return Err(invalid(
                at,
                format!(
                    "{m:?} is kubesync's own field manager: its fields are what kubesync writes"
                ),
            ));
        }
        ignore.managers.push(m.clone());
    }
    Ok(ignore)
}

/// A destination's copy names: `name` only for a single source and not with a prefix or
/// suffix; a prefix or suffix of the characters an object name may hold.
pub(super) fn check_copy_names(d: &ObjectSyncDestination, many: bool) -> Result<(), String> {
    let affixed = !d.name_prefix.is_empty() || !d.name_suffix.is_empty();
    match &d.name {
        Some(_) if many => {
            return Err(
                "name renames a single source; with a selector or names use namePrefix or nameSuffix".into(),
            );
        }
        Some(_) if affixed => {
            return Err("give a name, or a namePrefix and/or nameSuffix, not both".into());
        }
        Some(name) if !is_object_name(name) => {
            return Err(format!("name {name:?} is not a valid object name"));
        }
        _ => {}
    }
    for (field, value) in [
        ("namePrefix", &d.name_prefix),
        ("nameSuffix", &d.name_suffix),
    ] {
        if !value.chars().all(is_name_char) {
            return Err(format!("{field} {value:?} may not hold '/' or '%'"));
        }
    }
    Ok(())
}

/// A destination's namespaces, once the kind is known (pure): a destination of a
/// cluster-scoped kind names none (each destination cluster gets one copy). The namespace
/// fields themselves are checked by [`check_spec`].
pub(super) fn check_destination(
    d: &ObjectSyncDestination,
    namespaced: bool,
    kind: &str,
) -> Result<(), String> {
    let namespace = d.namespace.as_deref().unwrap_or_default();
    if !namespaced
        && (!namespace.is_empty()
            || d.namespace_selector.is_some()
            || !d.exclude_namespaces.is_empty())
    {
        return Err(format!(
            "{kind} is cluster-scoped: give no namespace, namespaceSelector or excludeNamespaces (each cluster gets one copy)"
        ));
    }
    Ok(())
}

/// A destination's patches as the fan-out applies them; why not, for an entry that gives
/// neither or both of `merge` and `json`, or a `json` that is no list of RFC 6902 operations.
pub(super) fn copy_patches(patches: &[DestinationPatch]) -> Result<Vec<CopyPatch>, String> {
    patches
        .iter()
        .enumerate()
        .map(|(j, p)| match (&p.merge, &p.json) {
            (Some(merge), None) => Ok(CopyPatch::Merge(merge.clone())),
            (None, Some(ops)) => serde_json::from_value(serde_json::Value::Array(ops.clone()))
                .map(CopyPatch::Json)
                .map_err(|e| format!("patches[{j}].json: {e}")),
            _ => Err(format!("patches[{j}]: give exactly one of merge and json")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(v: serde_json::Value) -> ObjectSyncSource {
        serde_json::from_value(v).expect("source")
    }

    fn destination(v: serde_json::Value) -> ObjectSyncDestination {
        serde_json::from_value(v).expect("destination")
    }

    #[test]
    fn a_source_is_one_name_or_a_selection_never_both_or_neither() {
        let one = source(serde_json::json!({"kind": "Secret", "name": "ca"}));
        assert_eq!(source_selection(&one).expect("one"), None);
        assert_eq!(selection_text(&one), None);
        let many = source(serde_json::json!({"kind": "Secret",
            "selector": {"matchLabels": {"app": "tls"}}, "names": ["a", "b"]}));
        let selection = source_selection(&many).expect("many").expect("a selection");
        assert_eq!(selection.names, ["a", "b"]);
        assert_eq!(
            selection_text(&many).as_deref(),
            Some("selector app=tls, names a, b")
        );
        for (bad, says) in [
            (serde_json::json!({"kind": "Secret"}), "needs a name"),
            (
                serde_json::json!({"kind": "Secret", "name": "ca", "names": ["a"]}),
                "gives a name and",
            ),
            (
                serde_json::json!({"kind": "Secret", "selector": {"matchExpressions":
                    [{"key": "app", "operator": "Near"}]}}),
                "spec.source.selector",
            ),
            (
                serde_json::json!({"kind": "Secret", "names": ["a/b"]}),
                "not a valid object name",
            ),
        ] {
            let refusal = source_selection(&source(bad)).expect_err("refused");
            assert_eq!(refusal.reason, "InvalidSpec");
            assert!(refusal.message.contains(says), "{}", refusal.message);
        }
    }

    #[test]
    fn the_source_namespace_is_never_empty() {
        let given = |ns: Option<&str>| {
            let mut s = source(serde_json::json!({"kind": "Secret", "name": "ca"}));
            s.namespace = ns.map(String::from);
            source_namespace(&s, Some("team-a"), true).expect("namespaced")
        };
        assert_eq!(given(Some("shared")), "shared");
        assert_eq!(given(None), "team-a");
        assert_eq!(given(Some("")), "team-a", "not every namespace at once");
        // An ObjectSync of a cluster-scoped kind points to ClusterObjectSync.
        let s = source(serde_json::json!({"kind": "ClusterRole", "name": "view"}));
        let refusal = source_namespace(&s, Some("team-a"), false).expect_err("cluster-scoped");
        assert_eq!(refusal.reason, "InvalidSpec");
        assert!(
            refusal.message.contains("a ClusterObjectSync"),
            "{}",
            refusal.message
        );
    }

    #[test]
    fn a_cluster_object_sync_names_a_namespace_exactly_for_namespaced_kinds() {
        let with = |ns: Option<&str>, namespaced| {
            let mut s = source(serde_json::json!({"kind": "Thing", "name": "x"}));
            s.namespace = ns.map(String::from);
            source_namespace(&s, None, namespaced)
        };
        assert_eq!(
            with(Some("platform"), true).expect("namespaced"),
            "platform"
        );
        assert_eq!(with(None, false).expect("cluster-scoped"), "");
        assert_eq!(with(Some(""), false).expect("empty is absent"), "");
        for (ns, namespaced, says) in [
            (None, true, "names the source's namespace"),
            (Some(""), true, "names the source's namespace"),
            (Some("platform"), false, "must be absent"),
        ] {
            let refusal = with(ns, namespaced).expect_err("refused");
            assert_eq!(refusal.reason, "InvalidSpec");
            assert!(refusal.message.contains(says), "{}", refusal.message);
        }
    }

    #[test]
    fn a_cluster_scoped_destination_names_no_namespace() {
        let ok = |v| check_destination(&destination(v), false, "ClusterRole");
        assert!(ok(serde_json::json!({"cluster": "eu"})).is_ok());
        assert!(ok(serde_json::json!({"cluster": "eu", "namespace": ""})).is_ok());
        for bad in [
            serde_json::json!({"cluster": "eu", "namespace": "*"}),
            serde_json::json!({"cluster": "eu", "namespaceSelector": {}}),
            serde_json::json!({"cluster": "eu", "excludeNamespaces": ["kube-system"]}),
        ] {
            let message = ok(bad).expect_err("refused");
            assert!(
                message.contains("ClusterRole is cluster-scoped"),
                "{message}"
            );
        }
    }

    fn spec(v: serde_json::Value) -> ObjectSyncSpec {
        serde_json::from_value(v).expect("spec")
    }

    /// The refusal of a spec whose first destination is `d` (a ConfigMap by name).
    fn refusal_of(d: serde_json::Value) -> Refusal {
        let s = spec(serde_json::json!({
            "source": {"kind": "ConfigMap", "name": "cm"},
            "destinations": [d],
        }));
        check_spec(&s).err().unwrap_or_else(|| panic!("accepted"))
    }

    #[test]
    fn a_destination_namespace_is_a_name_or_all() {
        for ok in [
            serde_json::json!({}),
            serde_json::json!({"namespace": ""}),
            serde_json::json!({"namespace": "*"}),
            serde_json::json!({"namespace": "team-a"}),
        ] {
            let s = spec(serde_json::json!({
                "source": {"kind": "ConfigMap", "name": "cm"}, "destinations": [ok]}));
            assert!(check_spec(&s).is_ok(), "{:?}", s.destinations);
        }
        for bad in ["team-*", "Team-A", "team_a", "-a", &"a".repeat(64)] {
            let message = refusal_of(serde_json::json!({"namespace": bad})).message;
            assert!(
                message.starts_with("spec.destinations[0].namespace: ")
                    && message.contains("is not a namespace name"),
                "{message}"
            );
        }
    }

    #[test]
    fn every_field_is_checked_before_any_request_and_named_by_its_path() {
        let source = |src: serde_json::Value| {
            let s = spec(serde_json::json!({"source": src, "destinations": [{"namespace": "a"}]}));
            check_spec(&s).err().map(|r| r.message)
        };
        let says = |got: Option<String>, path: &str, what: &str| {
            let got = got.unwrap_or_else(|| panic!("{path}: accepted"));
            assert!(got.starts_with(path) && got.contains(what), "{got}");
            assert!(!got.contains("Some(") && !got.contains('{'), "{got}");
        };
        says(
            source(serde_json::json!({"kind": "ConfigMap",
                "selector": {"matchLabels": {"app": "a(b"}}})),
            "spec.source.selector.matchLabels[\"app\"]: ",
            "\"a(b\" is not a label value",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap",
                "selector": {"matchExpressions": [{"key": "a b", "operator": "Exists"}]}})),
            "spec.source.selector.matchExpressions[0].key: ",
            "is not a label key",
        );
        says(
            source(
                serde_json::json!({"kind": "ConfigMap", "selector": {"matchExpressions":
                [{"key": "app", "operator": "DoesNotExist", "values": ["x"]}]}}),
            ),
            "spec.source.selector.matchExpressions[0].values: ",
            "takes no values",
        );
        says(
            source(serde_json::json!({"kind": "Config Map", "name": "x"})),
            "spec.source.kind: ",
            "is not a kind",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "group": "Apps", "name": "x"})),
            "spec.source.group: ",
            "is not an API group",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "version": "v 1", "name": "x"})),
            "spec.source.version: ",
            "is not an API version",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "name": "a/b"})),
            "spec.source.name: ",
            "not a valid object name",
        );
        says(
            source(serde_json::json!({"kind": "ConfigMap", "name": "x", "namespace": "A"})),
            "spec.source.namespace: ",
            "not a namespace name",
        );
        let dest = |d| Some(refusal_of(d).message);
        says(
            dest(serde_json::json!({"ignoreFields": ["/spec/replicas", "spec/x"]})),
            "spec.destinations[0].ignoreFields[1]: ",
            "is not a JSON pointer",
        );
        says(
            dest(serde_json::json!({"ignoreFields": ["/metadata/labels/kubesync.io~1managed-by"]})),
            "spec.destinations[0].ignoreFields[0]: ",
            "kubesync's own marks",
        );
        says(
            dest(serde_json::json!({"ignoreManagers": ["kubesync"]})),
            "spec.destinations[0].ignoreManagers[0]: ",
            "kubesync's own field manager",
        );
        says(
            check_spec(&spec(serde_json::json!({
                "source": {"kind": "ConfigMap", "name": "x"},
                "destinations": [{}],
                "ignoreFields": ["/metadata/name"],
            })))
            .err()
            .map(|r| r.message),
            "spec.ignoreFields[0]: ",
            "only a label or an annotation",
        );
        says(
            dest(serde_json::json!({"namespaceSelector": {"matchExpressions":
                [{"key": "team", "operator": "In", "values": ["a", "b c"]}]}})),
            "spec.destinations[0].namespaceSelector.matchExpressions[0].values[1]: ",
            "is not a label value",
        );
        says(
            dest(serde_json::json!({"excludeNamespaces": ["Kube-*"]})),
            "spec.destinations[0].excludeNamespaces[0]: ",
            "which no namespace's name holds",
        );
        says(
            dest(serde_json::json!({"cluster": "EU West"})),
            "spec.destinations[0].cluster: ",
            "is not a RemoteCluster's name",
        );
        let patch = refusal_of(serde_json::json!({"patches": [{"json": [{"op": "jump"}]}]}));
        assert_eq!(patch.reason, "InvalidPatch");
        assert!(
            patch
                .message
                .starts_with("spec.destinations[0]: patches[0].json"),
            "{}",
            patch.message
        );
        let filters = |extra: serde_json::Value| {
            let mut v = serde_json::json!({
                "source": {"kind": "ConfigMap", "name": "cm"},
                "destinations": [{"namespace": "a"}]});
            v.as_object_mut()
                .expect("object")
                .extend(extra.as_object().cloned().expect("object"));
            check_spec(&spec(v)).err().map(|r| r.message)
        };
        says(
            filters(serde_json::json!({"labels": {"exclude": ["ok", "not ok"]}})),
            "spec.labels.exclude[1]: ",
            "is not a label key",
        );
        says(
            filters(serde_json::json!({"otherOwners": {"keys": ["example.com/", "Bad Key"]}})),
            "spec.otherOwners.keys[1]: ",
            "is not a label key",
        );
        says(
            filters(serde_json::json!({"data": {"rename": {"a": "b/c"}}})),
            "spec.data.rename[\"a\"]: ",
            "is not a data key",
        );
        assert_eq!(
            filters(serde_json::json!({"labels": {"include": ["example.com/", "app*"]}})),
            None
        );
    }

    #[test]
    fn a_destination_leaves_to_others_what_the_spec_and_it_name() {
        let s = spec(serde_json::json!({
            "source": {"kind": "ConfigMap", "name": "x"},
            "destinations": [{"namespace": "a", "ignoreManagers": ["istio"]}, {"namespace": "b"}],
            "ignoreFields": ["/data/local"],
        }));
        let checked = check_spec(&s).expect("valid");
        let (a, b) = (&checked.destinations[0].2, &checked.destinations[1].2);
        assert_eq!(a.pointers.len(), 1);
        assert_eq!(a.managers, vec!["istio".to_string()]);
        assert_eq!(b.pointers.len(), 1);
        assert!(b.managers.is_empty());
    }

    #[test]
    fn copy_names_rename_one_source_or_affix_many() {
        let ok = |v, many| check_copy_names(&destination(v), many);
        assert!(ok(serde_json::json!({"name": "x"}), false).is_ok());
        assert!(
            ok(
                serde_json::json!({"namePrefix": "p-", "nameSuffix": ".s"}),
                true
            )
            .is_ok()
        );
        assert!(ok(serde_json::json!({"namePrefix": "p-"}), false).is_ok());
        // Names of kinds other than ConfigMaps and Secrets may hold more (a ClusterRole's `:`).
        assert!(ok(serde_json::json!({"name": "system:fleet-reader"}), false).is_ok());
        assert!(ok(serde_json::json!({"namePrefix": "fleet:"}), true).is_ok());
        for (v, many, says) in [
            (
                serde_json::json!({"name": "x"}),
                true,
                "namePrefix or nameSuffix",
            ),
            (
                serde_json::json!({"name": "x", "namePrefix": "p-"}),
                false,
                "not both",
            ),
            (
                serde_json::json!({"name": ".."}),
                false,
                "not a valid object name",
            ),
            (
                serde_json::json!({"name": "x".repeat(254)}),
                false,
                "not a valid object name",
            ),
            (serde_json::json!({"nameSuffix": "/s"}), true, "nameSuffix"),
        ] {
            let message = ok(v, many).expect_err("refused");
            assert!(message.contains(says), "{message}");
        }
    }
}
