//! What a copy looks like: the source's content, filtered, with ownership marks.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{LAST_APPLIED, MANAGED_BY, OWNER, SHARD, SOURCE, SOURCE_VERSION};
use crate::object::sanitize;

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
    /// The declaration's shard (the [`SHARD`] label value), when the operator is sharded.
    pub shard: Option<String>,
}

/// Annotations a copy carries besides the source's: `(source, copy) -> annotations`, computed
/// from the copy as built (filtered, marked) and its source, e.g. another tool's bookkeeping.
/// Must be a function of its arguments (the plan compares the copy it builds with the one
/// there). Never overrides kubesync's marks ([`OWNER`], [`SOURCE`], [`SOURCE_VERSION`]).
/// Compared by identity.
pub type Annotator = super::Shared<Annotate>;

/// What an [`Annotator`] calls: `(source, copy) -> annotations`.
pub type Annotate =
    dyn Fn(&DynamicObject, &DynamicObject) -> BTreeMap<String, String> + Send + Sync;

impl Annotator {
    /// An annotator from a function.
    pub fn new(
        f: impl Fn(&DynamicObject, &DynamicObject) -> BTreeMap<String, String> + Send + Sync + 'static,
    ) -> Self {
        Self(std::sync::Arc::new(f))
    }
}

/// Label and annotation keys (an entry ending in `/` or `*` is a prefix) by which other tools
/// claim an object as theirs — Helm's release, Argo CD's Application, Flux's Kustomization or
/// HelmRelease. A copy carrying them would claim to be part of a release or an Application in
/// a namespace where it is not (Argo CD prunes it or reports it orphaned, Helm names another
/// release's owner when installing an object of its name), so by default
/// ([`CopyRules::other_owners`]) they never reach a copy; a patch may still set one.
pub const OTHER_OWNERS: &[&str] = &[
    // Helm: the release's name and namespace, and the managing tool.
    "meta.helm.sh/",
    "app.kubernetes.io/managed-by",
    // Argo CD: its tracking annotation, instance label and options; its default tracking
    // label before 3.0 (also Helm's release name).
    "argocd.argoproj.io/",
    "app.kubernetes.io/instance",
    // Flux: the Kustomization's and the HelmRelease's name and namespace, and their options.
    "kustomize.toolkit.fluxcd.io/",
    "helm.toolkit.fluxcd.io/",
];

/// What the copy must carry besides the source's content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CopyRules {
    /// Labels that reach the copy.
    pub labels: KeyFilter,
    /// Annotations that reach the copy.
    pub annotations: KeyFilter,
    /// Secret/ConfigMap key control (ignored for other kinds).
    pub data: Option<DataFilter>,
    /// Labels every copy carries besides the source's (never the `managed-by` or shard mark).
    pub extra_labels: BTreeMap<String, String>,
    /// Annotations computed for each copy (see [`Annotator`]).
    pub annotate: Option<Annotator>,
    /// Label and annotation key prefixes that would make a copy act as someone's declaration
    /// or consent where it lands (e.g. another copier's, `replicator.v1.mittwald.de/`): never
    /// copied from the source, and a patch may not add, change or remove one
    /// ([`patched`](super::patched)). A declaration that may not speak for its destinations
    /// (one that needs their consent) is given them, so nothing it writes into a copy — nor
    /// what the copy keeps once released — ever declares or consents in their name.
    pub reserved: Vec<String>,
    /// Label and annotation keys (exact, or prefixes ending in `/` or `*`) of other tools'
    /// ownership, never copied from the source (a patch may set them): by default
    /// [`OTHER_OWNERS`]; empty copies them as any other key.
    pub other_owners: Vec<String>,
}

impl Default for CopyRules {
    /// Every label and annotation copied but kubesync's own, kubectl's last-applied one and
    /// [`OTHER_OWNERS`]; all data; nothing added, nothing reserved.
    fn default() -> Self {
        Self {
            labels: KeyFilter::default(),
            annotations: KeyFilter::default(),
            data: None,
            extra_labels: BTreeMap::new(),
            annotate: None,
            reserved: Vec::new(),
            other_owners: OTHER_OWNERS.iter().map(|k| k.to_string()).collect(),
        }
    }
}

/// Whether `key` starts with one of the `reserved` prefixes.
pub fn is_reserved(reserved: &[String], key: &str) -> bool {
    reserved.iter().any(|p| key.starts_with(p.as_str()))
}

/// The value of the [`SOURCE`] mark: `<group>/<kind>/<namespace>/<name>` (`core` for the core
/// group).
pub fn source_mark(resource: &ApiResource, namespace: &str, name: &str) -> String {
    let group = if resource.group.is_empty() {
        "core"
    } else {
        resource.group.as_str()
    };
    format!("{group}/{}/{namespace}/{name}", resource.kind)
}

/// The copy of `source` to `namespace`/`name`: the source's content minus identity and
/// server-managed fields (status too, and what the apiserver allocated or controllers wrote
/// for the source: [`allocated`](super::allocated)), filtered labels and annotations, and the
/// ownership marks.
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
    // An empty namespace: a cluster-scoped copy.
    copy.metadata.namespace = (!namespace.is_empty()).then(|| namespace.to_string());
    copy.metadata.name = Some(name.to_string());
    let mut labels = rules
        .labels
        .apply(&source.metadata.labels.clone().unwrap_or_default());
    labels.insert(MANAGED_BY.into(), owner.uid.clone());
    if let Some(shard) = &owner.shard {
        labels.insert(SHARD.into(), shard.clone());
    }
    let mut annotations = rules
        .annotations
        .apply(&source.metadata.annotations.clone().unwrap_or_default());
    annotations.insert(OWNER.into(), owner.reference.clone());
    annotations.insert(SOURCE.into(), source_ref.to_string());
    annotations.insert(
        SOURCE_VERSION.into(),
        source.metadata.resource_version.clone().unwrap_or_default(),
    );
    let kept = |k: &String| {
        !is_reserved(&rules.reserved, k) && !rules.other_owners.iter().any(|p| key_matches(p, k))
    };
    labels.retain(|k, _| kept(k));
    annotations.retain(|k, _| kept(k));
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
    super::allocated::strip(&mut copy);
    // Never the marks.
    if let Some(labels) = copy.metadata.labels.as_mut() {
        for (k, v) in rules
            .extra_labels
            .iter()
            .filter(|(k, _)| *k != MANAGED_BY && *k != SHARD)
        {
            labels.insert(k.clone(), v.clone());
        }
    }
    if let Some(annotate) = &rules.annotate {
        let extra = (annotate.0)(source, &copy);
        if let Some(annotations) = copy.metadata.annotations.as_mut() {
            let marks = [OWNER, SOURCE, SOURCE_VERSION];
            annotations.extend(
                extra
                    .into_iter()
                    .filter(|(k, _)| !marks.contains(&k.as_str())),
            );
        }
    }
    copy
}

/// Whether a copy is `owner`'s (to update, release or delete): it carries both of its marks,
/// its uid in [`MANAGED_BY`] and its reference (`<cluster>/<namespace>/<name>`) in [`OWNER`].
///
/// The uid alone is not enough: anyone who may write an object can forge a mark naming any
/// uid, and a declaration of another cluster (a fleet manager writing into this one) is one
/// this operator cannot see. A clean-up started for a forged uid (an annotation-declared
/// source that is gone) then takes only the copies whose reference is its own — never those
/// of the declaration that really holds the uid. Both marks are always required: an object
/// with only one of them (kubesync writes both, in one write) is someone else's — a
/// `Conflict`, never a copy to update, release or delete.
pub fn owned_by(copy: &DynamicObject, owner: &Owner) -> bool {
    let (labels, annotations) = (&copy.metadata.labels, &copy.metadata.annotations);
    labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY))
        .is_some_and(|uid| *uid == owner.uid)
        && annotations
            .as_ref()
            .and_then(|a| a.get(OWNER))
            .is_some_and(|reference| *reference == owner.reference)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use serde_json::json;

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

    /// The copy of the TLS Secret `certs/ca` into `team-a` under `rules`, for `owner`.
    fn ca_into_team_a(rules: &CopyRules, owner: &Owner) -> DynamicObject {
        desired_copy(
            &secret_type(),
            &tls_secret(),
            "team-a",
            "ca",
            rules,
            owner,
            "core/Secret/certs/ca",
        )
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
            extra_labels: labels(&[("tool", "x"), (MANAGED_BY, "forged")]),
            annotate: Some(Annotator::new(|source, copy| {
                let keys = copy.data["data"].as_object().map(|m| m.len()).unwrap_or(0);
                [
                    ("copied-keys".to_string(), keys.to_string()),
                    (
                        "from".to_string(),
                        source.metadata.name.clone().unwrap_or_default(),
                    ),
                    (OWNER.to_string(), "forged".to_string()),
                ]
                .into()
            })),
            reserved: vec![],
            other_owners: vec![],
        };
        let c = ca_into_team_a(&rules, &owner());
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
            json!({"app": "ca", "tool": "x", MANAGED_BY: "uid-1"})
        );
        assert_eq!(v["metadata"]["annotations"]["note"], "hi");
        assert_eq!(v["metadata"]["annotations"]["copied-keys"], "1");
        assert_eq!(v["metadata"]["annotations"]["from"], "ca");
        assert_eq!(v["metadata"]["annotations"].get(LAST_APPLIED), None);
        assert_eq!(v["metadata"]["annotations"][OWNER], "local/apps/share-ca");
        assert_eq!(v["metadata"]["annotations"][SOURCE], "core/Secret/certs/ca");
        assert_eq!(v["metadata"]["annotations"][SOURCE_VERSION], "42");
        assert_eq!(v["data"], json!({"bundle.pem": "Q0E="}));
        assert_eq!(v["type"], "kubernetes.io/tls");
    }

    #[test]
    fn other_tools_ownership_never_reaches_a_copy_unless_turned_off() {
        let mut source = tls_secret();
        let owned = [
            ("meta.helm.sh/release-name", "certs"),
            ("meta.helm.sh/release-namespace", "certs"),
            ("argocd.argoproj.io/tracking-id", "ca:/Secret:certs/ca"),
            ("kustomize.toolkit.fluxcd.io/name", "infra"),
            ("helm.toolkit.fluxcd.io/namespace", "flux-system"),
            ("team.example.com/owner", "platform"),
        ];
        for (k, v) in owned {
            let annotations = source.metadata.annotations.get_or_insert_default();
            annotations.insert(k.into(), v.into());
        }
        for (k, v) in [
            ("app.kubernetes.io/managed-by", "Helm"),
            ("app.kubernetes.io/instance", "certs"),
            ("app.kubernetes.io/name", "ca"),
        ] {
            let labels = source.metadata.labels.get_or_insert_default();
            labels.insert(k.into(), v.into());
        }
        let keys = |rules: &CopyRules| {
            let c = desired_copy(
                &secret_type(),
                &source,
                "team-a",
                "ca",
                rules,
                &owner(),
                "core/Secret/certs/ca",
            );
            let mut all: Vec<String> = c.metadata.labels.unwrap_or_default().into_keys().collect();
            all.extend(c.metadata.annotations.unwrap_or_default().into_keys());
            all.retain(|k| !k.starts_with("kubesync.io/"));
            all.sort();
            all
        };
        // By default none of Helm's, Argo CD's or Flux's keys (nor the fixture's label
        // `argocd.argoproj.io/instance`).
        assert_eq!(
            keys(&CopyRules::default()),
            [
                "app",
                "app.kubernetes.io/name",
                "note",
                "team.example.com/owner"
            ]
        );
        // Extended by a key of one's own tool.
        let mut extended = CopyRules::default();
        extended.other_owners.push("team.example.com/owner".into());
        assert_eq!(keys(&extended), ["app", "app.kubernetes.io/name", "note"]);
        // Turned off: copied as any other key.
        let off = CopyRules {
            other_owners: vec![],
            ..CopyRules::default()
        };
        // The fixture's two labels and one annotation (besides kubectl's), and the ones added.
        assert_eq!(keys(&off).len(), 2 + 1 + 3 + owned.len());
    }

    #[test]
    fn reserved_keys_of_the_source_never_reach_the_copy() {
        let mut source = tls_secret();
        for (k, v) in [
            ("replicator.v1.mittwald.de/replicate-to", "*"),
            ("reflector.v1.k8s.emberstack.com/reflection-allowed", "true"),
            ("note", "kept"),
        ] {
            source
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(k.into(), v.into());
        }
        source
            .metadata
            .labels
            .get_or_insert_default()
            .insert("replicator.v1.mittwald.de/x".into(), "y".into());
        let copy = |reserved: Vec<String>| {
            let rules = CopyRules {
                reserved,
                ..CopyRules::default()
            };
            desired_copy(
                &secret_type(),
                &source,
                "team-a",
                "ca",
                &rules,
                &owner(),
                "s",
            )
        };
        let guarded = copy(vec![
            "replicator.v1.mittwald.de/".into(),
            "reflector.v1.k8s.emberstack.com/".into(),
        ]);
        let annotations = guarded.metadata.annotations.expect("annotations");
        assert!(
            !annotations
                .keys()
                .any(|k| k.contains("mittwald") || k.contains("emberstack"))
        );
        assert_eq!(annotations.get("note").map(String::as_str), Some("kept"));
        let labels = guarded.metadata.labels.expect("labels");
        assert!(!labels.keys().any(|k| k.contains("mittwald")));
        // Without reserved prefixes (a trusted declaration), they are copied as any other.
        let plain = copy(vec![]);
        assert!(
            plain
                .metadata
                .annotations
                .expect("annotations")
                .contains_key("replicator.v1.mittwald.de/replicate-to")
        );
    }

    #[test]
    fn a_sharded_owner_marks_its_shard_and_nothing_forges_it() {
        let rules = CopyRules {
            extra_labels: labels(&[(SHARD, "forged")]),
            ..CopyRules::default()
        };
        let owner = Owner {
            shard: Some("03fa".into()),
            ..owner()
        };
        let c = ca_into_team_a(&rules, &owner);
        let labels = c.metadata.labels.expect("labels");
        assert_eq!(labels.get(SHARD).map(String::as_str), Some("03fa"));
        assert_eq!(labels.get(MANAGED_BY).map(String::as_str), Some("uid-1"));
        // Unsharded: no shard label, whatever the rules add.
        let plain = ca_into_team_a(&rules, &super::super::fixtures::owner());
        assert_eq!(plain.metadata.labels.expect("labels").get(SHARD), None);
    }
}
