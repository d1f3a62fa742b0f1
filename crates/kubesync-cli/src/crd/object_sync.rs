//! `ObjectSync` and `ClusterObjectSync`: one source (or a selection) copied into many
//! namespaces and clusters, and their status.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pattern;
use super::{Condition, LabelSelector};

/// The source of an [`ObjectSync`].
#[derive(Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.name) && self.name != '') != (has(self.selector) || (has(self.names) && size(self.names) > 0))",
    "message": "give one object's name, or a selector and/or names (not both, not neither)",
}]))]
pub struct ObjectSyncSource {
    /// API group (empty for the core group).
    #[serde(default)]
    #[schemars(length(max = 253), pattern(pattern::GROUP))]
    pub group: String,
    /// API version (default: the group's preferred version, by discovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(pattern::VERSION))]
    pub version: Option<String>,
    /// Kind, e.g. `Secret`.
    #[schemars(length(max = 63), pattern(pattern::KIND))]
    pub kind: String,
    /// Name of the source object. Give either a name, or a `selector` and/or `names`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253), pattern(pattern::NAME_PART))]
    pub name: String,
    /// Many sources: every object of this kind in the source namespace whose labels match
    /// (and, if `names` is given too, that is named there). Each is copied under its own
    /// name; kubesync's own copies are never sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Many sources: the objects of this kind in the source namespace with these names (and,
    /// if `selector` is given too, whose labels match). At most 1000.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 1000),
        inner(length(max = 253), pattern(pattern::NAME_PART))
    )]
    pub names: Vec<String>,
    /// Namespace of the source. In an ObjectSync: default its own namespace. In a
    /// ClusterObjectSync: required for a namespaced kind, absent for a cluster-scoped one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(pattern::NAMESPACE_OR_EMPTY))]
    pub namespace: Option<String>,
    /// A RemoteCluster to read the source from (a pull from a hub; default: this cluster).
    /// Only read rights on the source's kind are needed there. While that cluster cannot be
    /// read, no copy is changed or deleted. An ObjectSync outside the trusted namespaces may
    /// name only a RemoteCluster whose `allowedNamespaces` admits its namespace, and read
    /// only from the namespace of its own name there (unless the operator allows more).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), pattern(pattern::SUBDOMAIN))]
    pub cluster: Option<String>,
}

/// How copies are written.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum CopyStrategy {
    /// Server-side apply with kubesync's field manager, forced; other managers keep theirs.
    #[default]
    Apply,
    /// kubesync owns the whole copy; an immutable-field change deletes and recreates it.
    Replace,
}

/// Where copies go.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.name) || ((!has(self.namePrefix) || self.namePrefix == '') && (!has(self.nameSuffix) || self.nameSuffix == ''))",
    "message": "give a name, or a namePrefix and/or nameSuffix, not both",
}]))]
pub struct ObjectSyncDestination {
    /// A namespace name, or `"*"` / `""` / absent for all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), pattern(pattern::NAMESPACE_OR_ALL))]
    pub namespace: Option<String>,
    /// Namespaces whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Namespace names or globs to leave out (at most 100).
    #[serde(default)]
    #[schemars(
        length(max = 100),
        inner(length(max = 63), pattern(pattern::NAMESPACE_GLOB))
    )]
    pub exclude_namespaces: Vec<String>,
    /// A RemoteCluster name (default: this cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), pattern(pattern::SUBDOMAIN))]
    pub cluster: Option<String>,
    /// Name at the destination (default: the source's name). For a single source only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), pattern(pattern::NAME_PART))]
    pub name: Option<String>,
    /// Prepended to each source's name at this destination (instead of `name`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253), pattern(pattern::NAME_PART))]
    pub name_prefix: String,
    /// Appended to each source's name at this destination (instead of `name`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 253), pattern(pattern::NAME_PART))]
    pub name_suffix: String,
    /// How copies are written (default `apply`).
    #[serde(default)]
    pub strategy: CopyStrategy,
    /// Overrides of the copies at this destination, applied in order after the filters: each
    /// entry is a JSON merge patch (`merge`) or a JSON patch (`json`, RFC 6902). They may not
    /// change the copy's apiVersion, kind, namespace or name, nor kubesync's marks. At most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub patches: Vec<DestinationPatch>,
    /// Fields of the copies at this destination left to others, as JSON pointers (RFC 6901, e.g. `/spec/replicas`,
    /// `/metadata/annotations/sidecar.istio.io~1status`): kubesync neither reverts nor reports
    /// them, and writes them only when it creates a copy. Of the metadata, only labels and
    /// annotations (not kubesync's own). At most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), inner(length(max = 512)))]
    pub ignore_fields: Vec<String>,
    /// Field managers whose fields in the copies are theirs (e.g. an autoscaler's, a mesh's
    /// injector): whatever they own in a copy's managedFields is left to them, as with
    /// `ignoreFields`. At most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20), inner(length(min = 1, max = 128)))]
    pub ignore_managers: Vec<String>,
}

/// One override of a destination's copies: exactly one of `merge` and `json`.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.merge) != has(self.json)",
    "message": "a patch gives exactly one of merge and json",
}]))]
pub struct DestinationPatch {
    /// A JSON merge patch (RFC 7386), e.g. `{spec: {replicas: 3}}`; `null` removes a field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub merge: Option<serde_json::Value>,
    /// A JSON patch (RFC 6902), e.g. `[{op: replace, path: /spec/replicas, value: 3}]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "json_patch_operations")]
    pub json: Option<Vec<serde_json::Value>>,
}

/// Schema of a free-form JSON object (kept as given by the apiserver).
fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// Schema of a list of JSON patch operations (each kept as given).
fn json_patch_operations(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "maxItems": 100,
        "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    })
}

/// What to do when a destination holds an object kubesync did not create.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ConflictPolicy {
    /// Leave it untouched and report a Conflict (default).
    #[default]
    Skip,
    /// Take it over, unless it carries `kubesync.io/protect: "true"`.
    Adopt,
}

/// What becomes of an ObjectSync's copies when it, or its source, is deleted.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum ObjectSyncDeletionPolicy {
    /// The copies are deleted (default; only kubesync's own).
    #[default]
    Delete,
    /// The copies stay, with kubesync's label and annotations removed: ordinary objects that
    /// nothing manages any more.
    Orphan,
}

/// Whether an ObjectSync updates its copies once they exist.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum UpdatePolicy {
    /// Copies follow their source; changes made to them are reverted (default).
    #[default]
    Sync,
    /// A copy is created where it is missing (again when it is deleted) and never updated:
    /// afterwards it is its destination's. The status says which copies differ from their
    /// source. Cleanup follows `deletionPolicy`.
    CreateOnly,
}

/// Whether an ObjectSync writes its copies.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum SyncMode {
    /// Copies are created, updated and deleted (default).
    #[default]
    Enforce,
    /// Nothing is written to any destination, nor deleted there (also when the ObjectSync is
    /// deleted): the status lists per destination what would be created, updated (with the
    /// changed field paths) or deleted, and who changed a copy.
    Report,
}

/// What [`SyncMode::Report`] would do at a destination.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum PlannedAction {
    /// Create the copy.
    Create,
    /// Update the copy (or adopt the object there).
    Update,
    /// Delete the copy (or release it, with `deletionPolicy: Orphan`).
    Delete,
}

impl From<kubesync::syncers::fan_out::Planned> for PlannedAction {
    fn from(p: kubesync::syncers::fan_out::Planned) -> Self {
        use kubesync::syncers::fan_out::Planned as P;
        match p {
            P::Create => Self::Create,
            P::Update => Self::Update,
            P::Delete => Self::Delete,
        }
    }
}

/// A copy found changed by someone other than kubesync: which fields (paths, never values),
/// and the field managers owning them in the copy's managedFields.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DriftRecord {
    /// When kubesync found it (RFC 3339).
    pub detected_time: String,
    /// Every field that differed from what kubesync wrote.
    pub fields: Vec<String>,
    /// Who changed them, newest first; a removed field is owned by no one and listed in
    /// `fields` only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managers: Vec<FieldManagerChange>,
}

/// One field manager that changed a copy.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct FieldManagerChange {
    /// The field manager (e.g. `kubectl-edit`, `helm`).
    pub manager: String,
    /// `Update` or `Apply`.
    pub operation: String,
    /// When it last wrote (RFC 3339, from its managedFields entry).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub time: String,
    /// The changed fields it owns.
    pub fields: Vec<String>,
}

impl DriftRecord {
    /// The record of `drift`, found at `now`.
    pub fn of(drift: &kubesync::syncers::fan_out::rules::Drift, now: jiff::Timestamp) -> Self {
        Self {
            detected_time: now.to_string(),
            fields: drift.fields.clone(),
            managers: drift
                .managers
                .iter()
                .map(|m| FieldManagerChange {
                    manager: m.manager.clone(),
                    operation: m.operation.clone(),
                    time: m.time.clone(),
                    fields: m.fields.clone(),
                })
                .collect(),
        }
    }

    /// Whether `other` records the same change (found at another time).
    pub fn same_change(&self, other: &Self) -> bool {
        self.fields == other.fields && self.managers == other.managers
    }
}

/// Include and exclude lists of keys (exact keys, or prefixes ending in `/` or `*`).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct KeyFilterSpec {
    /// Keys to copy (empty: all). At most 100.
    #[serde(default)]
    #[schemars(length(max = 100), inner(length(max = 317)))]
    pub include: Vec<String>,
    /// Keys never to copy. At most 100.
    #[serde(default)]
    #[schemars(length(max = 100), inner(length(max = 317)))]
    pub exclude: Vec<String>,
}

/// Other tools' ownership metadata in the source (Helm's release, Argo CD's Application,
/// Flux's Kustomization or HelmRelease): by default never copied, so that no copy claims to
/// be part of a release or an Application where it is not.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct OtherOwnersSpec {
    /// `true`: copy them as any other label or annotation (the `labels` and `annotations`
    /// filters still apply). Default `false`: the keys kubesync knows (`meta.helm.sh/`,
    /// `app.kubernetes.io/managed-by`, `argocd.argoproj.io/`, `app.kubernetes.io/instance`,
    /// `kustomize.toolkit.fluxcd.io/`, `helm.toolkit.fluxcd.io/`) and `keys` never reach a
    /// copy; a destination's patch may still set one.
    #[serde(default)]
    pub copy: bool,
    /// More keys of that kind (exact keys, or prefixes ending in `/` or `*`), e.g. a
    /// tool of your own. At most 50.
    #[serde(default)]
    #[schemars(length(max = 50), inner(length(max = 317)))]
    pub keys: Vec<String>,
}

/// Key-level control of Secret and ConfigMap data.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub struct DataFilterSpec {
    /// Keys to copy (empty: all). At most 1000.
    #[serde(default)]
    #[schemars(length(max = 1000), inner(length(max = 253)))]
    pub include: Vec<String>,
    /// Source key → destination key. At most 1000 entries.
    #[serde(default)]
    #[schemars(length(max = 1000))]
    pub rename: std::collections::BTreeMap<String, String>,
}

/// The kind of declaration `spec.takeOver` names.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
pub enum TakeOverKind {
    /// An ObjectSync (of this one's namespace unless `namespace` says otherwise).
    #[default]
    ObjectSync,
    /// A ClusterObjectSync (no namespace).
    ClusterObjectSync,
    /// The copies reflector's or replicator's annotations declared on an object of the source's
    /// kind (`kubesync run --compat`): the annotated object, in this declaration's namespace
    /// unless `namespace` says otherwise.
    Annotations,
}

/// A declaration whose copies this one takes over: a declared hand-over, with no moment in
/// which a copy has no owner and no write to the data of a copy both agree on.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct TakeOverRef {
    /// `ObjectSync` (default), `ClusterObjectSync`, or `Annotations` (an annotated object's,
    /// under `--compat`).
    #[serde(default)]
    pub kind: TakeOverKind,
    /// An ObjectSync's or annotated object's namespace (default: this declaration's own). Not
    /// for a ClusterObjectSync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(pattern::NAMESPACE_PART))]
    pub namespace: Option<String>,
    /// Its name.
    #[schemars(length(min = 1, max = 253), pattern(pattern::SUBDOMAIN))]
    pub name: String,
}

/// One object kept in sync across many namespaces and clusters.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "kubesync.io",
    version = "v1alpha1",
    kind = "ObjectSync",
    namespaced,
    status = "ObjectSyncStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.source.kind"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.name"}"#,
    printcolumn = r#"{"name":"Sources","type":"integer","jsonPath":".status.sources"}"#,
    printcolumn = r#"{"name":"In sync","type":"integer","jsonPath":".status.inSync"}"#,
    printcolumn = r#"{"name":"Destinations","type":"integer","jsonPath":".status.total"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSyncSpec {
    /// The object (or objects) to copy.
    pub source: ObjectSyncSource,
    /// The ServiceAccount of this ObjectSync's namespace that it acts as: its source is read,
    /// and every copy created, updated and adopted, as that ServiceAccount (Kubernetes
    /// impersonation), locally and through RemoteClusters, so the apiserver's RBAC decides
    /// what it may copy and where. Outside the operator's trusted namespaces an ObjectSync
    /// that names none acts as the operator's `--default-service-account`, and is refused
    /// (`ServiceAccountRequired`) when that is not set either. Not for a ClusterObjectSync,
    /// which acts with the operator's own rights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// Where to copy it. At most 100 entries (each may select many namespaces).
    #[schemars(length(max = 100))]
    pub destinations: Vec<ObjectSyncDestination>,
    /// What to do with objects kubesync did not create (default `skip`).
    #[serde(default)]
    pub on_conflict: ConflictPolicy,
    /// Which source labels reach the copies.
    #[serde(default)]
    pub labels: KeyFilterSpec,
    /// Which source annotations reach the copies.
    #[serde(default)]
    pub annotations: KeyFilterSpec,
    /// Other tools' ownership metadata (Helm's, Argo CD's, Flux's): by default never copied.
    #[serde(default)]
    pub other_owners: OtherOwnersSpec,
    /// Key-level control of data (Secret and ConfigMap only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataFilterSpec>,
    /// What becomes of the copies when this ObjectSync or its source is deleted: `Delete`
    /// (default) or `Orphan` (kept, kubesync's marks removed). A copy annotated
    /// `kubesync.io/orphan-on-delete: "true"` is always kept.
    #[serde(default)]
    pub deletion_policy: ObjectSyncDeletionPolicy,
    /// `Enforce` (default): copies are written. `Report`: nothing is written to any
    /// destination; the status says per destination what would be done.
    #[serde(default)]
    pub mode: SyncMode,
    /// `Sync` (default): copies follow their source. `CreateOnly`: a copy is created where it
    /// is missing and never updated afterwards.
    #[serde(default)]
    pub update_policy: UpdatePolicy,
    /// Fields of every copy left to others (each destination may add its own), as JSON pointers (RFC 6901, e.g. `/spec/replicas`,
    /// `/metadata/annotations/sidecar.istio.io~1status`): kubesync neither reverts nor reports
    /// them, and writes them only when it creates a copy. Of the metadata, only labels and
    /// annotations (not kubesync's own). At most 50.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50), inner(length(max = 512)))]
    pub ignore_fields: Vec<String>,
    /// Field managers whose fields in the copies are theirs (e.g. an autoscaler's, a mesh's
    /// injector): whatever they own in a copy's managedFields is left to them, as with
    /// `ignoreFields`. At most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20), inner(length(min = 1, max = 128)))]
    pub ignore_managers: Vec<String>,
    /// Declarations whose copies this one takes over (a rename, a split, a move between
    /// kinds): at its destinations, a copy kubesync made for one of them (its marks, and its
    /// record of the copies it made) becomes this declaration's in one write that moves its
    /// marks — its data is written only where the two disagree on it — and the old
    /// declaration leaves it (deleting it then deletes only the copies not taken). Held to the
    /// destination's consent as an adoption is (a SyncGrant with `adopt: true` outside the
    /// trusted namespaces), whatever `onConflict` says; a tenant's ObjectSync takes over only
    /// from ObjectSyncs (and annotated objects) of its own namespace. At most 10.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub take_over: Vec<TakeOverRef>,
}

/// Cluster-scoped objects (ClusterRole, StorageClass, PriorityClass, cluster-scoped custom
/// resources) kept in sync in other clusters, or namespaced objects from any namespace: an
/// [`ObjectSync`] only cluster admins can declare. Same spec and status.
#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema, PartialEq)]
#[kube(
    group = "kubesync.io",
    version = "v1alpha1",
    kind = "ClusterObjectSync",
    status = "ObjectSyncStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.source.kind"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.source.name"}"#,
    printcolumn = r#"{"name":"Sources","type":"integer","jsonPath":".status.sources"}"#,
    printcolumn = r#"{"name":"In sync","type":"integer","jsonPath":".status.inSync"}"#,
    printcolumn = r#"{"name":"Destinations","type":"integer","jsonPath":".status.total"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
pub struct ClusterObjectSyncSpec {
    /// The fields of an ObjectSync's spec.
    #[serde(flatten)]
    pub sync: ObjectSyncSpec,
}

/// State of one destination's copy, as the status shows it: the library's
/// [`DestinationState`](kubesync::syncers::fan_out::DestinationState), serialized by name.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    Deserialize,
    Serialize,
    JsonSchema,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
)]
pub enum CopyState {
    /// The copy is current.
    Synced,
    /// Not written yet (e.g. waiting for a cluster's first list).
    #[default]
    Pending,
    /// Someone else's object is there.
    Conflict,
    /// Writing failed or the cluster cannot be reached.
    Error,
    /// The destination namespace's owners do not consent (no SyncGrant admits the copy).
    Refused,
    /// `mode: Report`: the copy is missing, differs, or would be deleted; nothing is written.
    OutOfSync,
}

impl CopyState {
    /// Every state, in the order metrics list them.
    pub const ALL: [CopyState; 6] = [
        Self::Synced,
        Self::Pending,
        Self::OutOfSync,
        Self::Conflict,
        Self::Error,
        Self::Refused,
    ];

    /// Whether a copy in this state is behind its source: not current, and kubesync means to
    /// write it (`Pending`, `Error`, `OutOfSync`). `Conflict` and `Refused` copies are never
    /// written, and counted apart.
    pub fn is_behind(self) -> bool {
        matches!(self, Self::Pending | Self::Error | Self::OutOfSync)
    }

    /// The name, as serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Synced => "Synced",
            Self::Pending => "Pending",
            Self::Conflict => "Conflict",
            Self::Error => "Error",
            Self::Refused => "Refused",
            Self::OutOfSync => "OutOfSync",
        }
    }
}

impl From<kubesync::syncers::fan_out::DestinationState> for CopyState {
    fn from(s: kubesync::syncers::fan_out::DestinationState) -> Self {
        use kubesync::syncers::fan_out::DestinationState as S;
        match s {
            S::Synced => Self::Synced,
            S::Pending => Self::Pending,
            S::Conflict => Self::Conflict,
            S::Error => Self::Error,
            S::Refused => Self::Refused,
            S::OutOfSync => Self::OutOfSync,
        }
    }
}

impl std::fmt::Display for CopyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with a state's serialized name, for readers of the status (e.g. tests that check
/// `state == "Synced"`); the operator itself compares states as values.
impl PartialEq<&str> for CopyState {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// State of one destination in [`ObjectSyncStatus`]: one copy (a single source), or every
/// copy in one namespace (many sources).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DestinationStatusEntry {
    /// Cluster (`local` for this cluster, else the RemoteCluster name).
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
    /// Name of the copy (a single source).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `Synced`, `Pending`, `Conflict`, `Error` or `Refused`; for many sources, `Synced` when
    /// every copy is, else the state of the first that is not.
    pub state: CopyState,
    /// Why, for Conflict and Error (for many sources: the first copy that is not synced).
    #[serde(default)]
    pub message: String,
    /// Many sources: how many of the copies here are current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources_in_sync: Option<u32>,
    /// Many sources: how many copies belong here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources_total: Option<u32>,
    /// When the copy was last written or confirmed current (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<String>,
    /// The source resourceVersion the copy carries.
    #[serde(default)]
    pub source_resource_version: String,
    /// `mode: Report`: what would be done here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_action: Option<PlannedAction>,
    /// `mode: Report`, an update: the fields that would change (paths, never values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_fields: Vec<String>,
    /// The last time the copy was found changed by someone else (one source): which fields
    /// and who. In `Enforce` mode the change was reverted, and a Warning Event names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drift: Option<DriftRecord>,
}

/// Observed state of an [`ObjectSync`]. Never contains Secret data.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectSyncStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` (the sync runs) and `Synced` (every destination is current).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Destinations whose copy is current.
    #[serde(default)]
    pub in_sync: u32,
    /// All destinations.
    #[serde(default)]
    pub total: u32,
    /// One entry per destination (many sources: per destination namespace).
    #[serde(default)]
    pub destinations: Vec<DestinationStatusEntry>,
    /// Many sources: how many objects the source selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<u32>,
    /// Many sources: the first copies that are not current (at most
    /// [`MAX_FAILURES`](crate::object_sync::status::MAX_FAILURES)), with the reasons.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<CopyFailure>,
    /// The record of the copies kubesync made (or adopted) for this declaration and has not
    /// removed since. Only an object this record holds is updated, released or deleted as
    /// this declaration's copy: an object that merely carries its marks is someone else's.
    /// Written by kubesync alone (tenants' roles grant no `objectsyncs/status`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<CopyRecord>,
}

/// The copies kubesync made for a declaration ([`ObjectSyncStatus::record`]).
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CopyRecord {
    /// How many copies it holds.
    #[serde(default)]
    pub copies: u32,
    /// Their uids' digests: 8 bytes of each uid's SHA-256, sorted, base64.
    #[serde(default)]
    pub made: String,
    /// Those of `made` taken as this declaration's on their marks alone (it was reconciled
    /// before records were kept): updated as the declaration's identity, but never removed
    /// with kubesync's own rights. Digests as in `made`; written even when empty (the status
    /// is written as a merge patch).
    #[serde(default)]
    pub seeded: String,
    /// While copies are being created: since when (RFC 3339). A copy created since then that
    /// carries the declaration's marks is taken as its own even if the record does not hold
    /// it yet (the operator stopped before it could record it). Written as `null` when closed
    /// (the status is written as a merge patch: a field left out would stay).
    #[serde(default)]
    pub open_since: Option<String>,
}

/// A copy of one source at one destination that is not current.
#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CopyFailure {
    /// The source's name.
    pub source: String,
    /// Cluster (`local` for this cluster, else the RemoteCluster name).
    pub cluster: String,
    /// Namespace.
    pub namespace: String,
    /// Name of the copy.
    pub name: String,
    /// Its state.
    pub state: CopyState,
    /// Why.
    pub message: String,
    /// `mode: Report`: what would be done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_action: Option<PlannedAction>,
    /// `mode: Report`, an update: the fields that would change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_fields: Vec<String>,
    /// The copy was found changed by someone else: which fields and who.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<DriftRecord>,
}
