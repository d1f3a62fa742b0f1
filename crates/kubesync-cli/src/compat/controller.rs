//! The compat controller: each object whose annotations declare a push (reflector's
//! `reflection-auto-enabled`, replicator's `replicate-to`/`replicate-to-matching`) is an
//! implicit declaration, keyed by the object itself, reconciled on the same fan-out as
//! ObjectSyncs.
//!
//! A reconcile reads like an ObjectSync's: gather (the object's annotations from the
//! operator's store, the copies its earlier selves made, found by their marks) → decide (the
//! pure [`declared`](super::declared) reading, the operator's policy) → the fan-out, which
//! writes. What it could not do (a same-named object it did not make, an unreadable pattern,
//! a refusal) is said in Events on the source, once per change. The source is never written:
//! it holds no finalizer, and a deleted source's copies are found by their marks
//! ([`DECLARED_BY`](super::DECLARED_BY) and the uid in `managed-by`), also after a restart.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kubesync::ObjectKey;
use kubesync::runtime::{Action, Context, Watch};
use kubesync::syncers::fan_out::FanOut;
use kubesync::syncers::fan_out::rules::{MANAGED_BY, SOURCE};
use parking_lot::Mutex;

use super::declared::{self, REFLECTOR, REPLICATOR, marked_source};
use super::{DECLARED_BY, DECLARED_BY_ANNOTATIONS, Tool};
use crate::events;
use crate::policy::ObjectSyncPolicy;
use crate::remote::LOCAL;

mod mirror;
mod push;

pub(crate) use push::owner;

/// The compat controller (see the module's documentation).
pub struct CompatController {
    pub(super) tools: Vec<Tool>,
    resources: Vec<ApiResource>,
    pub(super) policy: Arc<ObjectSyncPolicy>,
    pub(super) local: kubesync::Cluster,
    /// Which copies each source made.
    copies: Arc<CopyIndex>,
    /// Copies and pulls are written only when their source changed (`--compat-version-gate`).
    pub(super) version_gate: bool,
    /// Which object pulls from which source, as the last reconcile of each puller read it.
    pub(super) mirrors: Mutex<Mirrors>,
    reporter: kube::runtime::events::Reporter,
    budget: events::EventBudget,
    /// Per declaration, the notes last published as Events (each is published once, until it
    /// no longer holds).
    announced: Mutex<HashMap<ObjectKey, BTreeSet<String>>>,
    /// What each declaring object declares, as its last reconcile found it (for `/metrics`).
    summaries: Mutex<HashMap<ObjectKey, Summary>>,
    /// The propagation lags of the copies written.
    lags: crate::lag::Lags,
    /// Where the records of the copies made are kept (`None`: in memory only).
    pub(super) records: Option<Arc<super::records::CompatRecords>>,
}

/// Which object pulls from which source.
#[derive(Debug, Default)]
pub(super) struct Mirrors {
    pub(super) by_target: HashMap<ObjectKey, ObjectKey>,
    pub(super) by_source: HashMap<ObjectKey, BTreeSet<ObjectKey>>,
}

impl Mirrors {
    /// `target` pulls from `source` now (`None`: from nothing).
    pub(super) fn set(&mut self, target: &ObjectKey, source: Option<ObjectKey>) {
        if let Some(old) = self.by_target.remove(target)
            && let Some(set) = self.by_source.get_mut(&old)
        {
            set.remove(target);
            if set.is_empty() {
                self.by_source.remove(&old);
            }
        }
        if let Some(source) = source {
            self.by_source
                .entry(source.clone())
                .or_default()
                .insert(target.clone());
            self.by_target.insert(target.clone(), source);
        }
    }
}

/// What a reconcile found: what to say in Events, and what to count.
#[derive(Debug, Default)]
pub(super) struct Found {
    /// What could not be done (or read), for people.
    pub(super) notes: BTreeSet<String>,
    /// What the object declares.
    pub(super) summary: Summary,
}

/// What one object declares, as its last reconcile found it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Summary {
    /// The tools whose push it declares.
    pub(super) push: Vec<Tool>,
    /// Its push's destinations by state.
    pub(super) destinations: BTreeMap<String, u32>,
    /// The tool whose pull it declares, and whether the pull stands (its source exists,
    /// consents, and the target shows it).
    pub(super) mirror: Option<(Tool, bool)>,
}

/// The annotation-declared syncs, counted for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompatCounts {
    /// By (tool, `push` or `pull`): how many are declared (every pair present).
    pub syncs: BTreeMap<(Tool, &'static str), u32>,
    /// The pushes' destinations by state, summed.
    pub destinations: BTreeMap<String, u32>,
    /// Mirrors that do not stand: the source is missing or refuses, or the write failed.
    pub mirrors_not_filled: u32,
}

/// A source's copies a reconcile found by their marks: each owner uid that made some.
type Makers = BTreeSet<String>;

impl CompatController {
    /// A controller honouring the annotations of `tools`, under the operator's `policy`.
    pub fn new(
        local: kubesync::Cluster,
        tools: Vec<Tool>,
        policy: Arc<ObjectSyncPolicy>,
        lags: crate::lag::Lags,
    ) -> Self {
        let mut tools = tools;
        tools.sort();
        tools.dedup();
        // Only the kinds the operator may sync (`--allowed-resource`): a restricted install's
        // RBAC does not let it watch the others, and a watch that never lists would hold back
        // every reconcile.
        let resources = declared::resources(&tools)
            .into_iter()
            .filter(|ar| policy.check(None, "", &ar.group, &ar.kind, &[]).is_ok())
            .collect();
        Self {
            tools,
            resources,
            policy,
            local,
            mirrors: Mutex::default(),
            copies: Arc::default(),
            version_gate: false,
            reporter: events::reporter(),
            budget: events::EventBudget::default(),
            announced: Mutex::new(HashMap::new()),
            summaries: Mutex::default(),
            lags,
            records: None,
        }
    }

    /// Writes copies and pulls only when their source changed since they were written:
    /// changes made to them stay until then (the tools' version gate; off by default).
    #[must_use]
    pub fn with_version_gate(mut self, on: bool) -> Self {
        self.version_gate = on;
        self
    }

    /// Keeps the records of the copies made in `records` (`None`: in memory only).
    #[must_use]
    pub fn with_records(mut self, records: Option<Arc<super::records::CompatRecords>>) -> Self {
        self.records = records;
        self
    }

    /// The tools turned on.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The kinds whose objects may be annotated.
    pub fn resources(&self) -> &[ApiResource] {
        &self.resources
    }

    /// The type of `key`, if it is one of [`resources`](Self::resources) in this cluster.
    pub fn resource_of(&self, key: &ObjectKey) -> Option<&ApiResource> {
        (key.cluster == LOCAL)
            .then(|| self.resources.iter().find(|ar| key.is_of(ar)))
            .flatten()
    }

    /// The watches the controller needs, per kind: the annotated objects (metadata only,
    /// holding only the tools' annotations and never kubesync's copies or records), whose keys are its
    /// declarations; and the copies annotations declared (metadata only), each mapped to
    /// the key of the source its marks name.
    pub fn watches(&self) -> Vec<(Watch, Watch)> {
        self.resources
            .iter()
            .map(|ar| {
                let annotated = Watch::dynamic(ar.clone())
                    .metadata_only()
                    .labels(&format!("!{MANAGED_BY},!{}", super::records::RECORD_LABEL))
                    .transform(keep_tool_annotations);
                let copies = Watch::dynamic(ar.clone())
                    .metadata_only()
                    .labels(&format!("{DECLARED_BY}={DECLARED_BY_ANNOTATIONS}"))
                    .transform(keep_marks);
                (annotated, copies)
            })
            .collect()
    }

    /// Forgets (in memory only) the objects for which `keep` is false: a replica of
    /// `--sharded` that no longer works on them. Writes nothing.
    pub fn release(&self, keep: impl Fn(&ObjectKey) -> bool) {
        self.announced.lock().retain(|k, _| keep(k));
        self.summaries.lock().retain(|k, _| keep(k));
        if let Some(records) = &self.records {
            records.release(&keep);
        }
    }

    /// Forgets (in memory only) one object: a replica of `--sharded` that does not work on it.
    pub fn forget(&self, key: &ObjectKey) {
        self.announced.lock().remove(key);
        self.summaries.lock().remove(key);
        if let Some(records) = &self.records {
            records.release(|k| k != key);
        }
    }

    /// Which copies each source made (fed by the copies' watch: see [`CopyIndex::note`]).
    pub fn copies(&self) -> Arc<CopyIndex> {
        self.copies.clone()
    }

    /// Reconciles the implicit declarations of the object `key`: the push it declares (on
    /// `fan_out`), and the pull; then wakes the objects that pull from it.
    pub async fn reconcile(
        &self,
        key: &ObjectKey,
        ctx: &Context,
        fan_out: &FanOut,
    ) -> kubesync::Result<Action> {
        let Some(ar) = self.resource_of(key).cloned() else {
            return Ok(Action::done());
        };
        // The object as the store shows it (only the tools' annotations); kubesync's copies
        // are never declarations.
        let object = ctx
            .get_metadata(key)
            .filter(|o| o.metadata.deletion_timestamp.is_none())
            .filter(|o| {
                !o.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(MANAGED_BY))
            });
        let mut found = Found::default();
        let push = self
            .push(key, &ar, object.as_deref(), ctx, fan_out, &mut found)
            .await?;
        let writer = fan_out.write_counter();
        let pull = self
            .mirror(key, &ar, object.as_deref(), &writer, &mut found)
            .await;
        let Found { notes, summary } = found;
        match &object {
            Some(object) => self.announce(key, object, &ar, notes).await,
            None => {
                self.announced.lock().remove(key);
            }
        }
        match summary == Summary::default() {
            true => self.summaries.lock().remove(key),
            false => self.summaries.lock().insert(key.clone(), summary),
        };
        for target in self.mirrors_of(key) {
            ctx.enqueue(target);
        }
        Ok(sooner(push, pull))
    }

    /// The annotation-declared syncs, counted (for `/metrics`).
    pub fn counts(&self) -> CompatCounts {
        let mut counts = CompatCounts::default();
        for tool in &self.tools {
            for direction in ["push", "pull"] {
                counts.syncs.insert((*tool, direction), 0);
            }
        }
        for s in self.summaries.lock().values() {
            for tool in &s.push {
                *counts.syncs.entry((*tool, "push")).or_default() += 1;
            }
            for (state, n) in &s.destinations {
                *counts.destinations.entry(state.clone()).or_default() += n;
            }
            if let Some((tool, stands)) = s.mirror {
                *counts.syncs.entry((tool, "pull")).or_default() += 1;
                counts.mirrors_not_filled += u32::from(!stands);
            }
        }
        counts
    }

    /// Publishes the notes about `key` not published already, as Warning Events on the
    /// object, and remembers what holds now.
    async fn announce(
        &self,
        key: &ObjectKey,
        object: &DynamicObject,
        ar: &ApiResource,
        notes: BTreeSet<String>,
    ) {
        let new: Vec<String> = {
            let announced = self.announced.lock();
            let before = announced.get(key);
            notes
                .iter()
                .filter(|n| before.is_none_or(|b| !b.contains(*n)))
                .cloned()
                .collect()
        };
        self.announced.lock().insert(key.clone(), notes);
        let regarding = ObjectReference {
            api_version: Some(ar.api_version.clone()),
            kind: Some(ar.kind.clone()),
            namespace: key.namespace.clone(),
            name: Some(key.name.clone()),
            uid: object.metadata.uid.clone(),
            ..Default::default()
        };
        for note in new {
            if !self.budget.allow(&key.to_string(), Instant::now()) {
                break;
            }
            let event = kube::runtime::events::Event {
                type_: kube::runtime::events::EventType::Warning,
                reason: "NotCopied".into(),
                note: Some(crate::events::truncate_note(note)),
                action: "Sync".into(),
                secondary: None,
            };
            if let Err(e) =
                events::create(self.local.client(), &self.reporter, &event, &regarding).await
            {
                tracing::warn!(source = %key, error = %e, "could not publish an event");
            }
        }
    }
}

/// The sooner of two actions.
fn sooner(a: Action, b: Action) -> Action {
    match (a.requeue_after(), b.requeue_after()) {
        (Some(x), Some(y)) => Action::requeue(x.min(y)),
        (Some(_), None) => a,
        _ => b,
    }
}

/// Which copies each source made, as the copies' watch saw them: a copy's event files it
/// under the source its mark names; a reconcile of that source reads only those, and drops
/// the ones the stores no longer show. (A scan of every object of the kind would make each
/// reconcile grow with the cluster.)
#[derive(Debug, Default)]
pub struct CopyIndex(Mutex<HashMap<ObjectKey, BTreeSet<ObjectKey>>>);

impl CopyIndex {
    /// Files the copy `key` under its source and returns the source's key (the mapper of the
    /// copies' watch).
    pub fn file(&self, ar: &ApiResource, key: &ObjectKey, copy: &DynamicObject) -> Vec<ObjectKey> {
        let Some((ns, name)) = marked_source(copy) else {
            return Vec::new();
        };
        let source = ObjectKey::new(LOCAL, ar, Some(ns), &name);
        self.0
            .lock()
            .entry(source.clone())
            .or_default()
            .insert(key.clone());
        vec![source]
    }

    /// The uids that made the copies of `source` the stores show (by their marks).
    fn makers(&self, ctx: &Context, source: &ObjectKey) -> Makers {
        let filed: Vec<ObjectKey> = self
            .0
            .lock()
            .get(source)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        let wanted = (
            source.namespace.clone().unwrap_or_default(),
            source.name.clone(),
        );
        let mut makers = Makers::new();
        let mut gone = Vec::new();
        for key in filed {
            let uid = ctx.get_metadata(&key).and_then(|c| {
                let labels = c.metadata.labels.as_ref()?;
                let ours = labels.get(DECLARED_BY).map(String::as_str)
                    == Some(DECLARED_BY_ANNOTATIONS)
                    && marked_source(&c).as_ref() == Some(&wanted);
                ours.then(|| labels.get(MANAGED_BY).cloned()).flatten()
            });
            match uid {
                Some(uid) => {
                    makers.insert(uid);
                }
                None => gone.push(key),
            }
        }
        if !gone.is_empty() {
            let mut index = self.0.lock();
            if let Some(set) = index.get_mut(source) {
                for key in &gone {
                    set.remove(key);
                }
                if set.is_empty() {
                    index.remove(source);
                }
            }
        }
        makers
    }
}

/// The watch transform of annotated objects: only the tools' annotations and the
/// `managed-by` label are kept (a store of every Secret's metadata holds little more than
/// names).
fn keep_tool_annotations(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.retain(|k, _| k.starts_with(REFLECTOR) || k.starts_with(REPLICATOR));
    }
    if let Some(l) = o.metadata.labels.as_mut() {
        l.retain(|k, _| k == MANAGED_BY);
    }
}

/// The watch transform of the copies annotations declared: only what finds their source and
/// maker (the `source` mark, the `managed-by` and `declared-by` labels).
fn keep_marks(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.retain(|k, _| k == SOURCE);
    }
    if let Some(l) = o.metadata.labels.as_mut() {
        l.retain(|k, _| k == MANAGED_BY || k == DECLARED_BY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_copy_names_its_source_by_its_mark() {
        let copy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "team-a",
                "annotations": {SOURCE: "core/Secret/ops/db"}},
        }))
        .expect("copy");
        assert_eq!(marked_source(&copy), Some(("ops".into(), "db".into())));
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let index = CopyIndex::default();
        let key = ObjectKey::new(LOCAL, &ar, Some("team-a".into()), "db");
        let source = ObjectKey::new(LOCAL, &ar, Some("ops".into()), "db");
        assert_eq!(index.file(&ar, &key, &copy), vec![source.clone()]);
        assert_eq!(index.0.lock()[&source], BTreeSet::from([key]));
    }

    #[test]
    fn the_store_keeps_only_the_tools_annotations() {
        let mut o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "ops",
                "labels": {"app": "x", MANAGED_BY: "u"},
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}",
                    declared::REPLICATE_TO: ".*", declared::REFLECTS: "a/b"}},
        }))
        .expect("object");
        keep_tool_annotations(&mut o);
        let a = o.metadata.annotations.expect("annotations");
        assert_eq!(
            a.keys().cloned().collect::<Vec<_>>(),
            [declared::REFLECTS, declared::REPLICATE_TO]
        );
        assert_eq!(
            o.metadata
                .labels
                .expect("labels")
                .keys()
                .cloned()
                .collect::<Vec<_>>(),
            [MANAGED_BY]
        );
    }

    #[tokio::test]
    async fn only_the_kinds_the_operator_may_sync_are_watched() {
        let local = kubesync::Cluster::new(
            LOCAL,
            kube::Client::try_from(kube::Config::new(
                "http://127.0.0.1:1".parse().expect("url"),
            ))
            .expect("client"),
        );
        let restricted = ObjectSyncPolicy {
            allowed_resources: vec!["ConfigMap".into(), "Secret".into()],
            ..Default::default()
        };
        let c = CompatController::new(
            local.clone(),
            vec![Tool::Replicator],
            Arc::new(restricted),
            crate::lag::Lags::default(),
        );
        let kinds: Vec<&str> = c.resources().iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["ConfigMap", "Secret"]);
        let all = CompatController::new(
            local,
            vec![Tool::Replicator],
            Arc::default(),
            crate::lag::Lags::default(),
        );
        assert_eq!(all.resources().len(), 5);
    }

    #[test]
    fn the_kinds_are_those_of_the_tools_turned_on() {
        let kinds = |tools: &[Tool]| {
            declared::resources(tools)
                .iter()
                .map(|r| format!("{}/{}", r.kind, r.plural))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            kinds(&[Tool::Reflector]),
            ["ConfigMap/configmaps", "Secret/secrets"]
        );
        let both = kinds(&[Tool::Reflector, Tool::Replicator]);
        assert_eq!(both.len(), 5);
        assert!(both.contains(&"RoleBinding/rolebindings".to_string()));
        assert!(both.contains(&"ServiceAccount/serviceaccounts".to_string()));
    }
}
