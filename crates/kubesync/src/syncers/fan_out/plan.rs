//! The fan-out's decision for one declaration: observed state in, actions out. Pure: the
//! stores are read through [`Stores`], nothing is written, nothing waits.
//!
//! [`plan`] chooses the destinations (never the source itself), decides per destination with
//! [`rules::decide()`], and deletes this declaration's copies that are no longer wanted — except
//! in clusters that cannot be checked and in namespaces the Namespace store does not show yet.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::rules::{self, Decision, OnConflict, Strategy};
use super::spec::{
    Consent, Declaration, Destination, DestinationRef, DestinationState, DestinationStatus, Mode,
    Planned,
};
use crate::key::ObjectKey;

mod destination;

pub use destination::{
    Job, Judge, Verdict, decide_at, gate_adoption, held_back, judge_print, redecide,
};

/// One of a declaration's copies as a plan reads it: in full, or as the [print](rules::print)
/// its store holds. A plan that must see a print's copy in full asks for it
/// ([`Plan::unread`]), and is made again once it has been read.
#[derive(Clone, Debug)]
pub enum HeldCopy {
    /// The copy itself (read live, or held in full).
    Full(Arc<DynamicObject>),
    /// Its print.
    Print(Arc<rules::CopyPrint>),
}

impl HeldCopy {
    /// The copy's uid.
    pub fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            Self::Full(c) => c.metadata.uid.as_deref().map(std::borrow::Cow::Borrowed),
            Self::Print(p) => p.uid(),
        }
    }

    /// When the copy was created, if known.
    pub fn created(&self) -> Option<k8s_openapi::jiff::Timestamp> {
        match self {
            Self::Full(c) => c.metadata.creation_timestamp.as_ref().map(|t| t.0),
            Self::Print(p) => p.created(),
        }
    }

    /// Whether `vouch` takes the copy (which carries the marks) as the declaration's own.
    pub fn vouched(&self, vouch: &super::record::Vouch) -> bool {
        vouch.vouches(self.uid().as_deref(), self.created())
    }

    /// The copy's annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        match self {
            Self::Full(c) => c.annotations().get(key).map(String::as_str),
            Self::Print(p) => p.annotation(key),
        }
    }

    /// The copy in full, if it is held so.
    pub fn full(&self) -> Option<&Arc<DynamicObject>> {
        match self {
            Self::Full(c) => Some(c),
            Self::Print(_) => None,
        }
    }

    /// The copy's metadata (all of the copy, if it is held in full).
    pub fn metadata(&self) -> Arc<DynamicObject> {
        match self {
            Self::Full(c) => Arc::clone(c),
            Self::Print(p) => Arc::new(crate::runtime::Summary::object(&**p)),
        }
    }
}

impl From<Arc<DynamicObject>> for HeldCopy {
    fn from(copy: Arc<DynamicObject>) -> Self {
        Self::Full(copy)
    }
}

/// What the plan reads from the fan-out's stores.
pub trait Stores {
    /// The namespaces of `cluster`, as its Namespace store shows them.
    fn namespaces(&self, cluster: &str) -> Vec<Arc<DynamicObject>>;
    /// Whether the Namespace store of `cluster` shows `namespace`.
    fn has_namespace(&self, cluster: &str, namespace: &str) -> bool;
    /// The object at `at`, as the store of the copied type shows it.
    fn object(&self, at: &DestinationRef) -> Option<Arc<DynamicObject>>;
    /// The consent objects (see [`Consent`]) in `namespace` of `cluster`.
    fn consents(&self, cluster: &str, namespace: &str) -> Vec<Arc<DynamicObject>>;
    /// When the watches first saw the latest change of `key` (its latest version, or its
    /// deletion), or of that `version` of it (`None` when another version is the latest).
    fn first_seen(&self, key: &ObjectKey, version: Option<&str>) -> Option<Instant>;
    /// When the watches first saw the latest change of `namespace` of `cluster`.
    fn namespace_seen(&self, cluster: &str, namespace: &str) -> Option<Instant>;
}

/// What one reconcile observed.
pub struct Snapshot<'a, S> {
    /// The fan-out's own cluster: destinations name it by default, and sources live there
    /// unless the declaration reads them from another one.
    pub local: &'a str,
    /// The declaration.
    pub declaration: &'a Declaration,
    /// The sources that exist, unless the declaration is being deleted (then none). For a
    /// single source, at most that one; for a selection, every object it selects.
    pub sources: &'a [Arc<DynamicObject>],
    /// The sources live in another cluster that cannot be read now (why): they are
    /// unknown, not gone — every copy stays as it is ([`keep_while_unknown`]).
    pub source_unreachable: Option<&'a str>,
    /// Destination clusters the runtime does not know.
    pub unknown_clusters: &'a [String],
    /// Clusters whose watches fail: nothing is created, updated or deleted there.
    pub unreachable: &'a BTreeSet<String>,
    /// The copies this declaration has (found by their marks, vouched for by its
    /// [record](super::record)), by destination.
    pub owned: &'a BTreeMap<DestinationRef, HeldCopy>,
    /// What takes a marked object as the declaration's own: an object there that carries its
    /// marks but that this does not vouch for is someone else's (a conflict).
    pub vouch: &'a super::record::Vouch,
    /// The stores.
    pub stores: &'a S,
}

/// A copy to write.
#[derive(Clone, Debug)]
pub struct Write {
    /// Where.
    pub at: DestinationRef,
    /// The copy as it must be, as its text, its large values held in the plan's
    /// [`Plan::bulk`] (read it back and hydrate it with that before it is sent or compared
    /// again).
    pub desired: PlannedCopy,
    /// What the store showed there (the decision was made on it).
    pub existing: Option<Arc<DynamicObject>>,
    /// The fields there left to others: an update writes the copy's own values there.
    pub ignore: rules::Ignore,
    /// How it is written.
    pub strategy: Strategy,
    /// [`Decision::Create`], [`Decision::Update`] or [`Decision::Adopt`].
    pub decision: Decision,
    /// The name of the source it is a copy of.
    pub source: String,
    /// That source's resourceVersion.
    pub source_resource_version: String,
    /// An update of a copy someone else changed: who changed what.
    pub drift: Option<rules::Drift>,
    /// An update in [`Mode::Report`]: the fields that change (paths, never values).
    pub changed: Vec<String>,
    /// Why adopting an object found here is refused by its namespace's consent (`None`:
    /// consent allows it); a decision made again on a live read is held to it
    /// ([`gate_adoption`]).
    pub adoption_refused: Option<String>,
    /// Since when the copy has been behind, as the watches first saw it ([`behind`]).
    pub behind: Option<Behind>,
    /// Decided on the copy's [print](rules::print) (an update the print suffices for:
    /// [`judge_print`]): `existing` is the print's metadata, and the update is written
    /// without reading the copy, conditioned on its uid and resourceVersion like any other.
    pub printed: bool,
}

/// A copy to write as a plan holds it: its JSON text without its namespace, held once for all
/// the copies that differ only there ([`Texts`]), and its namespace (a plan that creates a
/// thousand copies of one source into a thousand namespaces holds one text).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedCopy {
    text: Arc<str>,
    namespace: Option<Box<str>>,
}

impl PlannedCopy {
    /// `copy` as a plan holds it, its text shared through `texts`.
    pub fn new(mut copy: DynamicObject, texts: &mut Texts) -> Self {
        let namespace = copy.metadata.namespace.take().map(Into::into);
        // Serializing an object parsed from JSON (or built of JSON values) cannot fail; if it
        // did, reading it back fails and the destination reports it.
        let text = serde_json::to_string(&copy).unwrap_or_default();
        Self {
            text: texts.intern(text),
            namespace,
        }
    }

    /// The copy, read back.
    pub fn object(&self) -> Result<DynamicObject, serde_json::Error> {
        let mut copy: DynamicObject = serde_json::from_str(&self.text)?;
        copy.metadata.namespace = self.namespace.as_deref().map(String::from);
        Ok(copy)
    }
}

/// The texts of a plan's copies ([`PlannedCopy`]), each distinct one held once.
#[derive(Clone, Debug, Default)]
pub struct Texts(HashSet<Arc<str>>);

impl Texts {
    /// `text`, or the one held that equals it.
    fn intern(&mut self, text: String) -> Arc<str> {
        if let Some(held) = self.0.get(text.as_str()) {
            return Arc::clone(held);
        }
        let text: Arc<str> = text.into();
        self.0.insert(Arc::clone(&text));
        text
    }
}

/// Since when a copy has been behind what it must be, and whether writing it propagates a
/// change of its source (what the propagation lag measures).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Behind {
    /// When the change it lacks was first seen.
    pub since: Instant,
    /// Whether the write carries a change: a new copy, or a newer source version.
    pub propagates: bool,
}

/// A copy of this declaration to delete, or to release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    /// Where.
    pub at: DestinationRef,
    /// The copy's uid: the delete's (or release's) precondition.
    pub uid: Option<String>,
    /// Keep the object and remove kubesync's marks instead ([`rules::orphans`]).
    pub orphan: bool,
}

/// What a reconcile does.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Copies to create or update.
    pub writes: Vec<Write>,
    /// Copies to delete.
    pub deletes: Vec<Delete>,
    /// Destinations whose state is known without writing (in sync, conflicts, unknown or
    /// unreachable clusters).
    pub statuses: Vec<DestinationStatus>,
    /// The source resourceVersion the copies will carry (a single source; empty for a
    /// selection: each [`Write`] says its own).
    pub source_resource_version: String,
    /// The large values of the copies to write, each held once: a [`Write`]'s `desired`
    /// names them by placeholders, and is [hydrated](rules::Bulk::hydrate) when it is sent.
    pub bulk: rules::Bulk,
    /// The texts of the copies to write, each held once (see [`PlannedCopy`]).
    pub texts: Texts,
    /// Copies held as prints that this plan must see in full to decide (which fields differ,
    /// who changed them, whether consent still holds): read them live and plan again. A plan
    /// with unread copies is never carried out.
    pub unread: BTreeSet<DestinationRef>,
}

/// Whether a source missing from its store must be confirmed gone by a live read before
/// anything is decided: the store may be a moment behind the cluster, and copies would be
/// deleted for it.
pub fn must_confirm_source_gone(in_store: bool, deleting: bool, copies: usize) -> bool {
    !in_store && !deleting && copies > 0
}

/// Longest object name the API accepts (a DNS subdomain).
pub const MAX_NAME: usize = 253;

/// The name of `obj`.
fn name_of(obj: &DynamicObject) -> &str {
    obj.metadata.name.as_deref().unwrap_or_default()
}

/// Decides what one reconcile of `snapshot.declaration` does.
///
/// Every source is copied to every destination under [`Destination::copy_name`]. Where two
/// sources would be copied to the same name, neither is written and the destination is a
/// `Conflict` naming both (an existing copy stays as it is); a copy is never written onto
/// one of the declaration's sources, nor under a name longer than [`MAX_NAME`]. Each
/// destination is decided by [`decide_at`]. In [`Mode::Report`], and for a refused spec,
/// only the deletes whose consent was withdrawn are carried out ([`as_declared`]).
pub fn plan<S: Stores>(snapshot: &Snapshot<'_, S>) -> Plan {
    // Each large value the destinations want is hashed once for the whole plan.
    let _memo = rules::digest::Memo::start();
    let plan = match snapshot.source_unreachable {
        Some(why) => keep_while_unknown(snapshot, why),
        None => decide_all(snapshot),
    };
    as_declared(snapshot, plan)
}

/// A plan as the declaration's mode has it carried out: in [`Mode::Enforce`] as it is; in
/// [`Mode::Report`] (and for a refused spec) only the deletes whose consent was withdrawn
/// (consent ends when it is withdrawn, whatever the mode), every other write and delete
/// reported as what would be done ([`report_mode_statuses`]).
pub fn as_declared<S: Stores>(snapshot: &Snapshot<'_, S>, mut plan: Plan) -> Plan {
    let decl = snapshot.declaration;
    if decl.spec.mode == Mode::Enforce && !decl.refused {
        return plan;
    }
    let deletes = std::mem::take(&mut plan.deletes);
    let (withdrawn, others) = match &decl.spec.consent {
        Some(consent) => withdrawn(
            consent,
            (snapshot.local, snapshot.stores),
            snapshot.owned,
            deletes,
            &mut plan.unread,
        ),
        None => (Vec::new(), deletes),
    };
    let writes = std::mem::take(&mut plan.writes);
    plan.statuses.extend(report_mode_statuses(writes, others));
    plan.deletes = withdrawn;
    plan
}

/// What every destination needs (see [`plan`]), as if enforced.
fn decide_all<S: Stores>(snapshot: &Snapshot<'_, S>) -> Plan {
    let spec = &snapshot.declaration.spec;
    let ar = &spec.source.resource;
    let mut sources: Vec<&DynamicObject> = snapshot.sources.iter().map(AsRef::as_ref).collect();
    sources.sort_by(|a, b| name_of(a).cmp(name_of(b)));
    let mut plan = Plan {
        source_resource_version: match (&spec.source.select, sources.first()) {
            (None, Some(s)) => s.metadata.resource_version.clone().unwrap_or_default(),
            _ => String::new(),
        },
        ..Plan::default()
    };
    // Each source's mark, made once (every copy of it carries it).
    let marks: BTreeMap<&str, String> = sources
        .iter()
        .map(|s| {
            (
                name_of(s),
                rules::source_mark(ar, &spec.source.namespace, name_of(s)),
            )
        })
        .collect();
    // Destinations that stay as they are: not written, and their copies not deleted.
    let mut kept = BTreeSet::new();
    let targets = targets(snapshot, &sources, &mut plan.statuses, &mut kept);
    if let Some(too_many) = too_many_copies(snapshot, targets.len()) {
        plan.statuses = vec![too_many];
        return plan;
    }
    for (at, (source, dest)) in &targets {
        let mark = &marks[name_of(source)];
        plan_destination(snapshot, at, (source, dest), mark, &mut plan);
    }
    let current: BTreeSet<&str> = marks.values().map(String::as_str).collect();
    plan.deletes = unwanted(snapshot, &targets, &kept, &current);
    plan
}

/// Bounded work per declaration: the one status of a declaration that needs consent and
/// would make more copies than it may (nothing is then written or deleted).
fn too_many_copies<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    copies: usize,
) -> Option<DestinationStatus> {
    let consent = snapshot.declaration.spec.consent.as_ref()?;
    (copies > consent.max_copies).then(|| {
        DestinationStatus::new(
            &DestinationRef::new(snapshot.local, "", ""),
            DestinationState::Error,
            format!(
                "this declaration would make {copies} copies; at most {} are allowed for a declaration outside the trusted namespaces (nothing is written or deleted until it asks for fewer)",
                consent.max_copies
            ),
            "",
        )
    })
}

/// Decides the destination `at` of `source` (selected by the entry `dest`; its copies carry
/// `mark`) and adds what it needs to `plan`: a status, or a write.
fn plan_destination<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    at: &DestinationRef,
    (source, dest): (&DynamicObject, &Destination),
    mark: &str,
    plan: &mut Plan,
) {
    let spec = &snapshot.declaration.spec;
    let source_rv = source.metadata.resource_version.clone().unwrap_or_default();
    let status = |state, message: String, rv: &str| {
        DestinationStatus::new(at, state, message, rv).of_source(name_of(source))
    };
    let desired = match desired_at(snapshot, at, (source, dest), mark) {
        Ok(desired) => desired,
        // Nothing is written there (an existing copy stays as it is).
        Err((state, message)) => {
            plan.statuses.push(status(state, message, ""));
            return;
        }
    };
    let adoption_refused = adoption_refused(snapshot, source, at);
    let judge = judge_of(snapshot, dest, adoption_refused.as_deref(), &source_rv);
    let Some((existing, printed, verdict)) =
        verdict_at(snapshot, at, &judge, &desired, &mut plan.unread)
    else {
        return;
    };
    match verdict {
        Verdict::Synced { message, version } => {
            plan.statuses
                .push(status(DestinationState::Synced, message.into(), &version));
        }
        Verdict::Conflict(message) => {
            plan.statuses
                .push(status(DestinationState::Conflict, message, ""));
        }
        Verdict::Write {
            decision,
            changed,
            drift,
        } => {
            let behind = behind(
                snapshot.stores,
                (&source_key(snapshot, name_of(source)), &source_rv),
                (at, &spec.source.resource),
                &decision,
                existing.as_deref(),
            );
            plan.writes.push(Write {
                at: at.clone(),
                desired: PlannedCopy::new(plan.bulk.hold(desired), &mut plan.texts),
                existing,
                ignore: dest.ignore.clone(),
                strategy: dest.strategy,
                decision,
                source: name_of(source).to_string(),
                source_resource_version: source_rv,
                drift,
                // The paths are kept for Report mode only (Enforce writes at once).
                changed: match spec.mode {
                    Mode::Report => changed.iter().map(ToString::to_string).collect(),
                    Mode::Enforce => Vec::new(),
                },
                adoption_refused,
                behind,
                printed,
            });
        }
    }
}

/// What decides at a destination of `dest`'s entry: the declaration's rules, the entry's, the
/// destination's consent to adoption (`adoption_refused`: why not) and the source's version.
fn judge_of<'a, S: Stores>(
    snapshot: &'a Snapshot<'_, S>,
    dest: &'a Destination,
    adoption_refused: Option<&'a str>,
    source_version: &'a str,
) -> Judge<'a> {
    let spec = &snapshot.declaration.spec;
    Judge {
        owner: &snapshot.declaration.owner,
        strategy: dest.strategy,
        on_conflict: spec.on_conflict,
        ignore: &dest.ignore,
        adoption_refused,
        adoptable: spec.adoptable.as_ref(),
        update_policy: spec.update_policy,
        source_version,
        vouch: snapshot.vouch,
        take_over: &spec.take_over,
    }
}

/// The object at `at` as the stores show it, and the verdict on it for the copy `desired`; a
/// copy held as a print is judged on it where that suffices (then the object is the print's
/// metadata, and `true` says so), else it is added to `unread` (read in full, the plan is made
/// again) and `None` returned.
fn verdict_at<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    at: &DestinationRef,
    judge: &Judge<'_>,
    desired: &DynamicObject,
    unread: &mut BTreeSet<DestinationRef>,
) -> Option<(Option<Arc<DynamicObject>>, bool, Verdict)> {
    let existing = match snapshot.owned.get(at) {
        Some(HeldCopy::Print(print)) => {
            let paths = snapshot.declaration.spec.mode == Mode::Report;
            let Some(verdict) = judge_print(judge, print, desired, paths) else {
                unread.insert(at.clone());
                return None;
            };
            // An update written on the print is conditioned on its uid and resourceVersion.
            let metadata = matches!(verdict, Verdict::Write { .. })
                .then(|| Arc::new(crate::runtime::Summary::object(&**print)));
            return Some((metadata, true, verdict));
        }
        Some(HeldCopy::Full(copy)) => Some(Arc::clone(copy)),
        None => snapshot.stores.object(at),
    };
    let verdict = decide_at(judge, existing.as_deref(), desired);
    Some((existing, false, verdict))
}

/// The copy of `source` at `at` as it must be (the entry `dest`'s patches applied; its
/// source's `mark` on it), or the destination's state and why nothing is written there: its
/// cluster cannot be checked, a patch fails, or its namespace's owners do not consent to the
/// patched copy.
fn desired_at<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    at: &DestinationRef,
    (source, dest): (&DynamicObject, &Destination),
    mark: &str,
) -> Result<DynamicObject, (DestinationState, String)> {
    let decl = snapshot.declaration;
    let spec = &decl.spec;
    if snapshot.unreachable.contains(&at.cluster) {
        let message = format!("cluster {} is unreachable", at.cluster);
        return Err((DestinationState::Error, message));
    }
    let desired = rules::desired_copy(
        &spec.source.resource,
        source,
        &at.namespace,
        &at.name,
        &spec.rules,
        &decl.owner,
        mark,
    );
    let desired = rules::patched(desired, &dest.patches, &spec.rules.reserved)
        .map_err(|message| (DestinationState::Error, message))?;
    // Consent was given for the source; a patched copy is judged again as it will be
    // written (a patch may turn a plain Secret into a privilege-bearing one).
    if let Some(consent) = &spec.consent
        && !dest.patches.is_empty()
        && !consented(consent, snapshot.local, snapshot.stores, &desired, at)
    {
        return Err((DestinationState::Refused, (consent.refusal)(&desired, at)));
    }
    Ok(desired)
}

/// The key of the source named `name`, in its cluster.
fn source_key<S: Stores>(snapshot: &Snapshot<'_, S>, name: &str) -> ObjectKey {
    let source = &snapshot.declaration.spec.source;
    ObjectKey::new(
        source.cluster_or(snapshot.local).to_string(),
        &source.resource,
        source.namespace().map(String::from),
        name,
    )
}

/// Since when the copy at `at` has been behind, as the watches first saw it, and whether its
/// write propagates a change: a new copy (since the latest sight of its source's version, of
/// its namespace's, or of the copy's deletion), or a newer source version (since that
/// version's first sight). Other updates (a copy someone else changed; a changed
/// declaration) are behind since the copy's last change, and propagate nothing.
pub fn behind<S: Stores>(
    stores: &S,
    (source, source_rv): (&ObjectKey, &str),
    (at, resource): (&DestinationRef, &kube::core::ApiResource),
    decision: &Decision,
    existing: Option<&DynamicObject>,
) -> Option<Behind> {
    let copy = at.key(resource);
    let (since, propagates) = match decision {
        Decision::Create => {
            let namespace = at
                .namespace()
                .and_then(|ns| stores.namespace_seen(&at.cluster, ns));
            let since = [
                stores.first_seen(source, None),
                namespace,
                stores.first_seen(&copy, None),
            ]
            .into_iter()
            .flatten()
            .max()?;
            (since, true)
        }
        Decision::Update => {
            let carried =
                existing.and_then(|e| e.annotations().get(rules::SOURCE_VERSION).cloned());
            if carried.as_deref() == Some(source_rv) {
                (stores.first_seen(&copy, None)?, false)
            } else {
                (stores.first_seen(source, Some(source_rv))?, true)
            }
        }
        _ => return None,
    };
    Some(Behind { since, propagates })
}

/// Why adopting the object at `at` as the copy of `source` is refused by its namespace's
/// owners (`None`: they consent, or the declaration needs no consent or adopts nothing).
/// Adopting someone else's object needs their consent also where copies need none.
fn adoption_refused<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    source: &DynamicObject,
    at: &DestinationRef,
) -> Option<String> {
    let spec = &snapshot.declaration.spec;
    let consent = spec.consent.as_ref()?;
    let adopts = spec.on_conflict == OnConflict::Adopt;
    ((adopts || !spec.take_over.is_empty())
        && !adoption_consented(consent, snapshot.stores, source, at))
    .then(|| match adopts {
        true => format!(
            "{} exists and kubesync did not create it; adopting it (onConflict: adopt) needs a SyncGrant in {} with adopt: true that admits this declaration",
            at.name, at.namespace
        ),
        false => format!(
            "{} is another declaration's copy; taking it over (takeOver) needs a SyncGrant in {} with adopt: true that admits this declaration",
            at.name, at.namespace
        ),
    })
}

/// The copies this declaration has that are no longer wanted (`current`: the marks of the
/// sources it copies now), to delete or release — but not where the cluster cannot be
/// checked, and not while the Namespace store does not show the copy's namespace: the copy
/// exists, so its namespace does, and the store is behind — not a sign the copy is unwanted.
fn unwanted<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    targets: &BTreeMap<DestinationRef, (&DynamicObject, &Destination)>,
    kept: &BTreeSet<DestinationRef>,
    current: &BTreeSet<&str>,
) -> Vec<Delete> {
    let spec = &snapshot.declaration.spec;
    let mut deletes = Vec::new();
    for (at, copy) in snapshot.owned {
        if targets.contains_key(at)
            || kept.contains(at)
            || snapshot.unreachable.contains(&at.cluster)
            || (at.namespace().is_some()
                && !snapshot.stores.has_namespace(&at.cluster, &at.namespace))
        {
            continue;
        }
        let source_gone = copy
            .annotation(rules::SOURCE)
            .is_none_or(|m| !current.contains(m));
        deletes.push(Delete {
            at: at.clone(),
            uid: copy.uid().map(std::borrow::Cow::into_owned),
            orphan: rules::orphans(&copy.metadata(), spec.deletion_policy, source_gone),
        });
    }
    deletes
}

/// A plan whose new copies (creates and adoptions) fit in the `room` its declaration's record
/// has left ([`MAX_RECORDED`](super::record::MAX_RECORDED) copies): those beyond it are not
/// written, and their destinations say why.
pub fn within_record(plan: &mut Plan, room: usize) {
    let mut new = 0usize;
    let mut beyond = Vec::new();
    plan.writes.retain(|w| {
        if !matches!(w.decision, Decision::Create | Decision::Adopt) {
            return true;
        }
        new += 1;
        if new <= room {
            return true;
        }
        beyond.push(
            DestinationStatus::new(
                &w.at,
                DestinationState::Error,
                format!(
                    "not created: this declaration has {} copies, the most kubesync records for one declaration; split it",
                    super::record::MAX_RECORDED
                ),
                "",
            )
            .of_source(&w.source),
        );
        false
    });
    plan.statuses.extend(beyond);
}

/// The deletes that retire a kind a declaration no longer copies: each of its copies of that
/// kind (found by their marks), conditional on its uid, deleted (never released: the
/// declaration still wants copies, of the kind it names now).
pub fn retire(copies: Vec<(DestinationRef, Arc<DynamicObject>)>) -> Vec<Delete> {
    copies
        .into_iter()
        .map(|(at, copy)| Delete {
            at,
            uid: copy.metadata.uid.clone(),
            orphan: false,
        })
        .collect()
}

/// The plan while the sources are unknown (their cluster cannot be read: `why`): nothing is
/// written, and every copy stays as it is, reported `Error` with the source version it
/// carries — except the copies whose consent was withdrawn (consent ends when it is
/// withdrawn, whatever the source's state), which are deleted where their cluster can be
/// checked. A source counts as gone only after a read from its cluster says so.
pub fn keep_while_unknown<S: Stores>(snapshot: &Snapshot<'_, S>, why: &str) -> Plan {
    let spec = &snapshot.declaration.spec;
    let mut plan = Plan::default();
    for (at, copy) in snapshot.owned {
        // Consent is judged on the copy itself.
        let withdrawn = match (&spec.consent, copy) {
            (None, _) => false,
            (Some(_), HeldCopy::Print(_)) => {
                plan.unread.insert(at.clone());
                continue;
            }
            (Some(c), HeldCopy::Full(copy)) => {
                !consented(c, snapshot.local, snapshot.stores, copy, at)
            }
        };
        let checkable = !snapshot.unreachable.contains(&at.cluster)
            && (at.namespace().is_none()
                || snapshot.stores.has_namespace(&at.cluster, &at.namespace));
        if withdrawn && checkable {
            plan.deletes.push(Delete {
                at: at.clone(),
                uid: copy.uid().map(std::borrow::Cow::into_owned),
                orphan: rules::orphans(&copy.metadata(), spec.deletion_policy, false),
            });
            continue;
        }
        let source = copy
            .annotation(rules::SOURCE)
            .and_then(|m| m.rsplit('/').next())
            .unwrap_or_default();
        let rv = copy.annotation(rules::SOURCE_VERSION).unwrap_or_default();
        plan.statuses.push(
            DestinationStatus::new(
                at,
                DestinationState::Error,
                format!("kept as it is: the source's cluster cannot be read ({why})"),
                rv,
            )
            .of_source(source),
        );
    }
    plan
}

/// [`Mode::Report`]: the statuses of the destinations a plan
/// would write to or delete, instead of writing (each [`DestinationState::OutOfSync`], with
/// what would be done, the fields an update would change, and who changed the copy).
pub fn report_mode_statuses(writes: Vec<Write>, deletes: Vec<Delete>) -> Vec<DestinationStatus> {
    let writes = writes.into_iter().map(|w| {
        let (planned, message) = match w.decision {
            Decision::Create => (Planned::Create, "would create the copy".to_string()),
            Decision::Adopt => (
                Planned::Update,
                "would adopt the object there (onConflict: adopt)".to_string(),
            ),
            _ if w.changed.is_empty() => (Planned::Update, "would update the copy".to_string()),
            _ => (
                Planned::Update,
                format!("would update {}", w.changed.join(", ")),
            ),
        };
        let mut st = DestinationStatus::new(&w.at, DestinationState::OutOfSync, message, "")
            .of_source(&w.source);
        st.planned = Some(planned);
        st.behind_since = w.behind.map(|b| b.since);
        st.changed_fields = w.changed;
        st.drift = w.drift;
        st
    });
    let deletes = deletes.into_iter().map(|d| {
        let message = if d.orphan {
            "would release the copy (keep it, kubesync's marks removed)"
        } else {
            "would delete the copy"
        };
        let mut st = DestinationStatus::new(&d.at, DestinationState::OutOfSync, message.into(), "");
        st.planned = Some(Planned::Delete);
        st
    });
    writes.chain(deletes).collect()
}

/// Whether the owners of `at`'s namespace consent to the copy of `source` there.
pub fn consented<S: Stores>(
    consent: &Consent,
    local: &str,
    stores: &S,
    source: &DynamicObject,
    at: &DestinationRef,
) -> bool {
    (at.cluster == local && consent.exempt.contains(&at.namespace) && (consent.exempts)(source))
        || stores
            .consents(&at.cluster, &at.namespace)
            .iter()
            .any(|grant| (consent.admits)(grant, source, at))
}

/// The deletes of copies whose consent no longer holds (their namespace's owners withdrew
/// it), apart from the others: (withdrawn, others). A copy stands for its source here (same
/// kind, and as written). In [`Mode::Report`] the first are still
/// carried out: consent ends when it is withdrawn, whatever mode the declaration is in.
pub fn withdrawn<S: Stores>(
    consent: &Consent,
    (local, stores): (&str, &S),
    owned: &BTreeMap<DestinationRef, HeldCopy>,
    deletes: Vec<Delete>,
    unread: &mut BTreeSet<DestinationRef>,
) -> (Vec<Delete>, Vec<Delete>) {
    deletes.into_iter().partition(|d| match owned.get(&d.at) {
        Some(HeldCopy::Full(copy)) => !consented(consent, local, stores, copy, &d.at),
        // Consent is judged on the copy itself.
        Some(HeldCopy::Print(_)) => {
            unread.insert(d.at.clone());
            false
        }
        None => false,
    })
}

/// Whether the owners of `at`'s namespace consent to kubesync adopting the object there as
/// the copy of `source` (no namespace is exempt).
pub fn adoption_consented<S: Stores>(
    consent: &Consent,
    stores: &S,
    source: &DynamicObject,
    at: &DestinationRef,
) -> bool {
    stores
        .consents(&at.cluster, &at.namespace)
        .iter()
        .any(|grant| (consent.adopts)(grant, source, at))
}

/// The destination namespaces of each destination entry: `(cluster, namespace, entry)`, in
/// the entries' order; for a cluster-scoped kind, one `(cluster, "", entry)` per entry.
/// Destinations in unknown clusters get an error status instead.
fn namespaces<'a, S: Stores>(
    snapshot: &Snapshot<'a, S>,
    statuses: &mut Vec<DestinationStatus>,
) -> Vec<(&'a str, String, &'a Destination)> {
    let spec = &snapshot.declaration.spec;
    let mut out = Vec::new();
    for d in &spec.destinations {
        let cluster = d.cluster.as_deref().unwrap_or(snapshot.local);
        if snapshot.unknown_clusters.iter().any(|c| c == cluster) {
            statuses.push(DestinationStatus::new(
                &DestinationRef::new(cluster, "", ""),
                DestinationState::Error,
                format!("unknown cluster {cluster:?}"),
                "",
            ));
            continue;
        }
        if spec.source.namespace().is_none() {
            out.push((cluster, String::new(), d));
            continue;
        }
        for ns in snapshot.stores.namespaces(cluster) {
            let name = ns.name_any();
            if d.namespaces
                .matches(&name, ns.labels(), ns.metadata.deletion_timestamp.is_some())
            {
                out.push((cluster, name, d));
            }
        }
    }
    out
}

/// The copies to make: destination → (source, the destination entry that selected it; the
/// first that selects one wins: its strategy and patches apply). Statuses instead for
/// namespaces a destination names that refuse their consent, names two sources share
/// (`Conflict`; such destinations are `kept`), names of sources, and names too long.
fn targets<'a, 's, S: Stores>(
    snapshot: &Snapshot<'a, S>,
    sources: &[&'s DynamicObject],
    statuses: &mut Vec<DestinationStatus>,
    kept: &mut BTreeSet<DestinationRef>,
) -> BTreeMap<DestinationRef, (&'s DynamicObject, &'a Destination)> {
    let spec = &snapshot.declaration.spec;
    let mut targets: BTreeMap<DestinationRef, (&'s DynamicObject, &'a Destination)> =
        BTreeMap::new();
    if sources.is_empty() {
        return targets;
    }
    let namespaces = namespaces(snapshot, statuses);
    let source_names: BTreeSet<&str> = sources.iter().map(|s| name_of(s)).collect();
    // Destination → the sources that would be copied there, where more than one would.
    let mut shared: BTreeMap<DestinationRef, BTreeSet<&str>> = BTreeMap::new();
    let mut reported = BTreeSet::new();
    for source in sources {
        let source_name = name_of(source);
        for (cluster, namespace, d) in &namespaces {
            let name = d.copy_name(&spec.source, source_name);
            let at = DestinationRef::new(*cluster, namespace.clone(), name);
            let mut report = |(state, message): (DestinationState, String)| {
                if reported.insert(at.clone()) {
                    let status = DestinationStatus::new(&at, state, message, "");
                    statuses.push(status.of_source(source_name));
                }
            };
            if let Some(onto) = onto_a_source(snapshot, &at, source_name, d, &source_names) {
                onto.map(&mut report);
                continue;
            }
            if let Some((other, _)) = targets.get(&at) {
                let other = name_of(other);
                if other != source_name {
                    shared.entry(at).or_default().extend([other, source_name]);
                }
                continue;
            }
            match admitted(snapshot, &at, source, d) {
                Ok(()) => {
                    targets.insert(at, (*source, *d));
                }
                Err(refused) => refused.map(&mut report).unwrap_or_default(),
            }
        }
    }
    refuse_missing_namespaces(snapshot, sources, &mut reported, statuses);
    for (at, names) in shared {
        targets.remove(&at);
        let names: Vec<&str> = names.into_iter().collect();
        statuses.push(DestinationStatus::new(
            &at,
            DestinationState::Conflict,
            format!(
                "sources {} would all be copied to {}; none is (give the destination a namePrefix or nameSuffix)",
                names.join(", "),
                at.name
            ),
            "",
        )
        .of_source(&names.join(", ")));
        kept.insert(at);
    }
    targets
}

/// Whether `at` is the place of one of the sources (a copy is never written onto a source),
/// and then what is reported there (`None`: skipped silently). A source's own place is
/// skipped silently where "*" or a selector reaches it, and reported where the destination
/// `d` names it (a namespace, or this cluster for a cluster-scoped kind).
fn onto_a_source<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    at: &DestinationRef,
    source_name: &str,
    d: &Destination,
    source_names: &BTreeSet<&str>,
) -> Option<Option<(DestinationState, String)>> {
    let spec = &snapshot.declaration.spec;
    if at.cluster != spec.source.cluster_or(snapshot.local)
        || at.namespace != spec.source.namespace
        || !source_names.contains(at.name.as_str())
    {
        return None;
    }
    if at.name != source_name {
        let message = format!(
            "{} is one of the sources; its copy of {source_name} is not written",
            at.name
        );
        return Some(Some((DestinationState::Conflict, message)));
    }
    if d.namespaces.names(&at.namespace) || spec.source.namespace().is_none() {
        let message = format!(
            "the copy of {source_name} would be the source itself; give this destination another namespace or cluster, or a name, namePrefix or nameSuffix"
        );
        return Some(Some((DestinationState::Conflict, message)));
    }
    Some(None)
}

/// Whether the copy of `source` may be made at `at` (selected by the entry `d`), or the state
/// and reason reported there instead (`None`: skipped silently): never under a name too long;
/// never where its namespace's owners do not consent (reported where `d` names the
/// namespace).
fn admitted<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    at: &DestinationRef,
    source: &DynamicObject,
    d: &Destination,
) -> Result<(), Option<(DestinationState, String)>> {
    let spec = &snapshot.declaration.spec;
    if at.name.len() > MAX_NAME {
        let message = format!(
            "the copy's name would be {} characters long; at most {MAX_NAME} are allowed",
            at.name.len()
        );
        return Err(Some((DestinationState::Error, message)));
    }
    if let Some(consent) = &spec.consent
        && !consented(consent, snapshot.local, snapshot.stores, source, at)
    {
        return Err(d
            .namespaces
            .names(&at.namespace)
            .then(|| (DestinationState::Refused, (consent.refusal)(source, at))));
    }
    Ok(())
}

/// To a declaration that needs consent, a namespace it names that does not exist reads
/// exactly as one that exists and refuses: no oracle of which namespaces exist.
fn refuse_missing_namespaces<S: Stores>(
    snapshot: &Snapshot<'_, S>,
    sources: &[&DynamicObject],
    reported: &mut BTreeSet<DestinationRef>,
    statuses: &mut Vec<DestinationStatus>,
) {
    let spec = &snapshot.declaration.spec;
    let Some(consent) = &spec.consent else {
        return;
    };
    if spec.source.namespace().is_none() {
        return;
    }
    for d in &spec.destinations {
        let Some(ns) = d
            .namespaces
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty() && *n != "*")
        else {
            continue;
        };
        let cluster = d.cluster.as_deref().unwrap_or(snapshot.local);
        if snapshot.unknown_clusters.iter().any(|c| c == cluster)
            || snapshot.stores.has_namespace(cluster, ns)
        {
            continue;
        }
        for source in sources {
            let name = d.copy_name(&spec.source, name_of(source));
            let at = DestinationRef::new(cluster, ns.to_string(), name);
            if reported.insert(at.clone()) {
                let refusal = (consent.refusal)(source, &at);
                let status = DestinationStatus::new(&at, DestinationState::Refused, refusal, "");
                statuses.push(status.of_source(name_of(source)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
    use kube::core::ApiResource;
    use serde_json::{Value, json};

    use super::*;
    use crate::syncers::fan_out::rules::{CopyRules, MANAGED_BY, NamespaceRule, OnConflict, Owner};
    use crate::syncers::fan_out::spec::{
        Adoptable, Destination, FanOutSpec, SourceRef, UpdatePolicy,
    };

    /// Stores held in maps.
    #[derive(Clone, Default)]
    struct Fake {
        namespaces: HashMap<String, Vec<Arc<DynamicObject>>>,
        objects: HashMap<DestinationRef, Arc<DynamicObject>>,
        consents: HashMap<(String, String), Vec<Arc<DynamicObject>>>,
        /// First sightings: the latest version of an object, and when it was first seen.
        seen: HashMap<ObjectKey, (String, Instant)>,
        namespace_seen: HashMap<(String, String), Instant>,
    }

    impl Stores for Fake {
        fn namespaces(&self, cluster: &str) -> Vec<Arc<DynamicObject>> {
            self.namespaces.get(cluster).cloned().unwrap_or_default()
        }
        fn has_namespace(&self, cluster: &str, namespace: &str) -> bool {
            self.namespaces(cluster)
                .iter()
                .any(|n| n.name_any() == namespace)
        }
        fn object(&self, at: &DestinationRef) -> Option<Arc<DynamicObject>> {
            self.objects.get(at).cloned()
        }
        fn consents(&self, cluster: &str, namespace: &str) -> Vec<Arc<DynamicObject>> {
            self.consents
                .get(&(cluster.to_string(), namespace.to_string()))
                .cloned()
                .unwrap_or_default()
        }
        fn first_seen(&self, key: &ObjectKey, version: Option<&str>) -> Option<Instant> {
            let (rv, at) = self.seen.get(key)?;
            version.is_none_or(|v| v == rv).then_some(*at)
        }
        fn namespace_seen(&self, cluster: &str, namespace: &str) -> Option<Instant> {
            self.namespace_seen
                .get(&(cluster.to_string(), namespace.to_string()))
                .copied()
        }
    }

    impl Fake {
        fn with_namespaces(mut self, cluster: &str, names: &[(&str, serde_json::Value)]) -> Self {
            let list = names
                .iter()
                .map(|(n, labels)| {
                    Arc::new(obj(json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": n, "labels": labels}})))
                })
                .collect();
            self.namespaces.insert(cluster.into(), list);
            self
        }
        fn with_object(mut self, at: &DestinationRef, o: DynamicObject) -> Self {
            self.objects.insert(at.clone(), Arc::new(o));
            self
        }
    }

    fn obj(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn secret_type() -> ApiResource {
        ApiResource::erase::<Secret>(&())
    }

    fn source() -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "src", "uid": "s", "resourceVersion": "42"},
            "data": {"ca.crt": "Q0E="}}))
    }

    fn destination(cluster: Option<&str>, namespace: &str) -> Destination {
        Destination {
            cluster: cluster.map(String::from),
            namespaces: NamespaceRule {
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn declaration(destinations: Vec<Destination>) -> Declaration {
        Declaration {
            key: ObjectKey::new("local", &secret_type(), Some("ctl".into()), "d"),
            owner: Owner {
                reference: "local/ctl/d".into(),
                uid: "uid-d".into(),
                shard: None,
            },
            spec: FanOutSpec {
                source: SourceRef::one(secret_type(), "src", "ca"),
                destinations,
                on_conflict: OnConflict::Skip,
                rules: CopyRules::default(),
                consent: None,
                deletion_policy: Default::default(),
                mode: Default::default(),
                update_policy: Default::default(),
                adoptable: None,
                acting_as: None,
                acting_as_in: Default::default(),
                take_over: Vec::new(),
            },
            deleting: false,
            refused: false,
            record: None,
        }
    }

    fn at(cluster: &str, namespace: &str) -> DestinationRef {
        DestinationRef::new(cluster, namespace, "ca")
    }

    /// `decl`'s copy of [`source`] in namespace `a`, as the plan wants it.
    fn copy_in_a(decl: &Declaration) -> DynamicObject {
        rules::desired_copy(
            &secret_type(),
            &source(),
            "a",
            "ca",
            &CopyRules::default(),
            &decl.owner,
            "core/Secret/src/ca",
        )
    }

    fn copy(uid: &str, managed_by: &str) -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "x", "uid": uid,
                "labels": {MANAGED_BY: managed_by},
                "annotations": {rules::SOURCE: "core/Secret/src/ca", rules::OWNER: "local/ctl/d"}},
            "data": {"old": "b2xk"}}))
    }

    struct Run {
        decl: Declaration,
        sources: Vec<Arc<DynamicObject>>,
        unknown: Vec<String>,
        unreachable: BTreeSet<String>,
        source_unreachable: Option<String>,
        owned: BTreeMap<DestinationRef, HeldCopy>,
        vouch: crate::syncers::fan_out::record::Vouch,
        stores: Fake,
    }

    impl Run {
        fn new(decl: Declaration, stores: Fake) -> Self {
            Self {
                decl,
                sources: vec![Arc::new(source())],
                unknown: vec![],
                unreachable: BTreeSet::new(),
                source_unreachable: None,
                owned: BTreeMap::new(),
                vouch: crate::syncers::fan_out::record::Vouch::marks(),
                stores,
            }
        }
        /// A copy of this declaration at `at`, in the stores too.
        fn owning(mut self, at: DestinationRef, uid: &str) -> Self {
            let c = Arc::new(copy(uid, "uid-d"));
            self.stores.objects.insert(at.clone(), c.clone());
            self.owned.insert(at, c.into());
            self
        }
        fn plan(&self) -> Plan {
            plan(&Snapshot {
                local: "local",
                declaration: &self.decl,
                sources: &self.sources,
                source_unreachable: self.source_unreachable.as_deref(),
                unknown_clusters: &self.unknown,
                unreachable: &self.unreachable,
                owned: &self.owned,
                vouch: &self.vouch,
                stores: &self.stores,
            })
        }
    }

    fn written(plan: &Plan) -> Vec<(DestinationRef, Decision)> {
        plan.writes
            .iter()
            .map(|w| (w.at.clone(), w.decision.clone()))
            .collect()
    }

    fn states(plan: &Plan) -> Vec<(String, DestinationState)> {
        plan.statuses
            .iter()
            .map(|s| (format!("{}/{}", s.cluster, s.namespace), s.state))
            .collect()
    }

    #[test]
    fn report_mode_turns_writes_and_deletes_into_what_would_be_done() {
        let write = |decision: Decision, changed: &[&str]| Write {
            at: at("local", "a"),
            desired: PlannedCopy::new(source(), &mut Texts::default()),
            existing: None,
            ignore: Default::default(),
            strategy: Strategy::Apply,
            decision,
            source: "ca".into(),
            source_resource_version: "42".into(),
            drift: None,
            changed: changed.iter().map(|c| c.to_string()).collect(),
            adoption_refused: None,
            behind: None,
            printed: false,
        };
        let statuses = report_mode_statuses(
            vec![
                write(Decision::Create, &[]),
                write(Decision::Update, &["data.x", "data[\"tls.crt\"]"]),
                write(Decision::Adopt, &[]),
            ],
            vec![
                Delete {
                    at: at("local", "b"),
                    uid: None,
                    orphan: false,
                },
                Delete {
                    at: at("local", "c"),
                    uid: None,
                    orphan: true,
                },
            ],
        );
        let got: Vec<(Option<Planned>, &str)> = statuses
            .iter()
            .map(|s| (s.planned, s.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(Planned::Create), "would create the copy"),
                (
                    Some(Planned::Update),
                    "would update data.x, data[\"tls.crt\"]"
                ),
                (
                    Some(Planned::Update),
                    "would adopt the object there (onConflict: adopt)"
                ),
                (Some(Planned::Delete), "would delete the copy"),
                (
                    Some(Planned::Delete),
                    "would release the copy (keep it, kubesync's marks removed)"
                ),
            ]
        );
        assert!(
            statuses
                .iter()
                .all(|s| s.state == DestinationState::OutOfSync)
        );
        assert_eq!(statuses[1].changed_fields, ["data.x", "data[\"tls.crt\"]"]);
        assert_eq!(statuses[0].source, "ca");
    }

    #[test]
    fn copies_go_to_every_selected_namespace_but_never_onto_the_source() {
        let stores = Fake::default().with_namespaces(
            "local",
            &[("src", json!({})), ("a", json!({})), ("b", json!({}))],
        );
        let plan = Run::new(declaration(vec![destination(None, "*")]), stores).plan();
        assert_eq!(
            written(&plan),
            [
                (at("local", "a"), Decision::Create),
                (at("local", "b"), Decision::Create)
            ]
        );
        assert_eq!(plan.source_resource_version, "42");
        let labels = plan.writes[0]
            .desired
            .object()
            .expect("copy")
            .metadata
            .labels;
        assert_eq!(
            labels
                .unwrap_or_default()
                .get(MANAGED_BY)
                .map(String::as_str),
            Some("uid-d")
        );
        assert!(plan.deletes.is_empty() && plan.statuses.is_empty());
        // Named, the source's own namespace is reported: the copy would be the source.
        let stores = Fake::default().with_namespaces("local", &[("src", json!({}))]);
        let plan = Run::new(declaration(vec![destination(None, "src")]), stores).plan();
        assert!(written(&plan).is_empty());
        assert_eq!(
            states(&plan),
            [("local/src".into(), DestinationState::Conflict)]
        );
        assert!(
            plan.statuses[0]
                .message
                .contains("would be the source itself")
        );
    }

    fn named(name: &str) -> Arc<DynamicObject> {
        Arc::new(obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "src", "uid": name, "resourceVersion": "7"},
            "data": {"k": "dg=="}})))
    }

    /// A declaration copying every Secret of `src`.
    fn selecting(destinations: Vec<Destination>) -> Declaration {
        let mut decl = declaration(destinations);
        decl.spec.source = SourceRef::selected(secret_type(), "src", Default::default());
        decl
    }

    fn prefixed(namespace: &str, prefix: &str) -> Destination {
        Destination {
            name_prefix: prefix.into(),
            ..destination(None, namespace)
        }
    }

    #[test]
    fn every_selected_source_is_copied_under_its_own_name_and_unselected_ones_lose_their_copies() {
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        let mut run = Run::new(selecting(vec![prefixed("a", "p-")]), stores);
        run.sources = vec![named("two"), named("one")];
        // A copy of a source that is no longer selected.
        let gone = DestinationRef::new("local", "a", "p-gone");
        let mut old = copy("c-gone", "uid-d");
        old.annotations_mut()
            .insert(rules::SOURCE.into(), "core/Secret/src/gone".into());
        run.owned.insert(gone.clone(), Arc::new(old).into());
        let plan = run.plan();
        let writes: Vec<(String, String, String)> = plan
            .writes
            .iter()
            .map(|w| {
                (
                    w.at.name.clone(),
                    w.source.clone(),
                    w.source_resource_version.clone(),
                )
            })
            .collect();
        assert_eq!(
            writes,
            [
                ("p-one".into(), "one".into(), "7".into()),
                ("p-two".into(), "two".into(), "7".into())
            ]
        );
        assert_eq!(
            plan.writes[0]
                .desired
                .object()
                .expect("copy")
                .annotations()
                .get(rules::SOURCE)
                .map(String::as_str),
            Some("core/Secret/src/one")
        );
        assert_eq!(
            plan.deletes,
            [Delete {
                at: gone,
                uid: Some("c-gone".into()),
                orphan: false
            }]
        );
        // Under Orphan, a copy whose source stopped matching is released, not deleted.
        run.decl.spec.deletion_policy = rules::DeletionPolicy::Orphan;
        assert!(run.plan().deletes.iter().all(|d| d.orphan));
    }

    #[test]
    fn two_sources_copied_to_one_name_are_a_conflict_and_neither_is_written() {
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        // "x-y" with no prefix and "y" with prefix "x-" both become "x-y".
        let decl = selecting(vec![destination(None, "a"), prefixed("a", "x-")]);
        let shared = DestinationRef::new("local", "a", "x-y");
        let mut run = Run::new(decl, stores).owning(shared.clone(), "c1");
        run.sources = vec![named("y"), named("x-y")];
        let plan = run.plan();
        let conflict = plan
            .statuses
            .iter()
            .find(|s| s.name == "x-y")
            .expect("a status for the shared name");
        assert_eq!(conflict.state, DestinationState::Conflict);
        assert!(
            conflict.message.contains("x-y, y"),
            "names both: {}",
            conflict.message
        );
        assert!(
            plan.writes.iter().all(|w| w.at != shared),
            "neither written"
        );
        assert!(plan.deletes.is_empty(), "the existing copy stays");
        let others: Vec<&str> = plan.writes.iter().map(|w| w.at.name.as_str()).collect();
        assert_eq!(others, ["x-x-y", "y"], "the other copies are made");
    }

    #[test]
    fn a_copy_never_overwrites_a_source_and_never_gets_a_name_too_long() {
        let stores = Fake::default().with_namespaces("local", &[("src", json!({}))]);
        let long = "n".repeat(MAX_NAME - 1);
        let mut run = Run::new(selecting(vec![prefixed("src", "p-")]), stores);
        run.sources = vec![named("a"), named("p-a"), named(&long)];
        let plan = run.plan();
        let states: Vec<(&str, DestinationState)> = plan
            .statuses
            .iter()
            .map(|s| (s.source.as_str(), s.state))
            .collect();
        assert_eq!(
            states,
            [
                ("a", DestinationState::Conflict),
                (long.as_str(), DestinationState::Error)
            ]
        );
        assert!(plan.statuses[1].message.contains("254 characters"));
        let written: Vec<&str> = plan.writes.iter().map(|w| w.at.name.as_str()).collect();
        assert_eq!(
            written,
            ["p-p-a"],
            "p-a is a source: a's copy is not written there"
        );
    }

    #[test]
    fn a_cluster_scoped_kind_is_copied_once_per_destination_cluster() {
        let role = ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&());
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({}))])
            .with_namespaces("east", &[("a", json!({})), ("b", json!({}))]);
        let mut decl = declaration(vec![
            // The namespaces a destination names do not apply to a cluster-scoped kind.
            destination(Some("east"), "*"),
            destination(None, "a"),
        ]);
        decl.spec.source = SourceRef::one(role.clone(), "", "viewer");
        let mut run = Run::new(decl, stores);
        run.sources = vec![Arc::new(obj(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "viewer", "uid": "r", "resourceVersion": "3"},
            "rules": []})))];
        // A copy in a cluster no longer named: deleted, though no Namespace store shows "".
        let gone = DestinationRef::new("west", "", "viewer");
        let mut old = copy("c-west", "uid-d");
        old.metadata.namespace = None;
        old.annotations_mut().insert(
            rules::SOURCE.into(),
            rules::source_mark(&role, "", "viewer"),
        );
        run.owned.insert(gone.clone(), Arc::new(old).into());
        let plan = run.plan();
        assert_eq!(
            written(&plan),
            [(DestinationRef::new("east", "", "viewer"), Decision::Create)],
            "one copy in east; none onto the source itself in the local cluster"
        );
        assert_eq!(
            plan.writes[0]
                .desired
                .object()
                .expect("copy")
                .metadata
                .namespace,
            None
        );
        assert_eq!(plan.writes[0].at.to_string(), "east/viewer");
        assert_eq!(
            states(&plan),
            [("local/".into(), DestinationState::Conflict)]
        );
        assert_eq!(
            plan.deletes
                .iter()
                .map(|d| d.at.clone())
                .collect::<Vec<_>>(),
            [gone]
        );
    }

    #[test]
    fn copies_in_sync_and_foreign_objects_are_not_written() {
        let decl = declaration(vec![destination(None, "*")]);
        let desired = copy_in_a(&decl);
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({})), ("b", json!({}))])
            .with_object(&at("local", "a"), desired)
            .with_object(&at("local", "b"), copy("f", "someone-else"));
        let plan = Run::new(decl, stores).plan();
        assert!(plan.writes.is_empty());
        assert_eq!(
            states(&plan),
            [
                ("local/a".into(), DestinationState::Synced),
                ("local/b".into(), DestinationState::Conflict)
            ]
        );
        assert_eq!(plan.statuses[0].source_resource_version, "42");
    }

    #[test]
    fn no_more_copies_are_created_than_the_record_holds() {
        let stores = Fake::default().with_namespaces(
            "local",
            &[("a", json!({})), ("b", json!({})), ("c", json!({}))],
        );
        let mut plan = Run::new(declaration(vec![destination(None, "*")]), stores).plan();
        assert_eq!(plan.writes.len(), 3);
        within_record(&mut plan, 1);
        assert_eq!(written(&plan), [(at("local", "a"), Decision::Create)]);
        let refused: Vec<&str> = plan
            .statuses
            .iter()
            .filter(|s| s.state == DestinationState::Error)
            .map(|s| s.namespace.as_str())
            .collect();
        assert_eq!(refused, ["b", "c"]);
        assert!(
            plan.statuses[0]
                .message
                .contains("the most kubesync records")
        );
    }

    #[test]
    fn an_object_with_both_marks_that_the_record_does_not_hold_is_someone_elses() {
        use crate::syncers::fan_out::record::{Record, Vouch};
        let decl = declaration(vec![destination(None, "a")]);
        // Both marks, forged onto an object kubesync never made (uid "forged").
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({}))])
            .with_object(&at("local", "a"), copy("forged", "uid-d"));
        let mut record = Record::new();
        record.insert("made-by-kubesync");
        let mut run = Run::new(decl, stores);
        run.vouch = Vouch::record(record);
        let plan = run.plan();
        assert!(plan.writes.is_empty() && plan.deletes.is_empty());
        assert_eq!(
            states(&plan),
            [("local/a".into(), DestinationState::Conflict)]
        );
        assert!(
            plan.statuses[0]
                .message
                .contains("kubesync did not create it")
        );
        // The marks alone (a declaration kept before records existed): its copy, updated.
        run.vouch = Vouch::marks();
        assert_eq!(written(&run.plan()), [(at("local", "a"), Decision::Update)]);
    }

    #[test]
    fn a_planned_copy_reads_back_as_it_was_planned_and_holds_less() {
        let decl = declaration(vec![destination(None, "a")]);
        let mut copy = copy_in_a(&decl);
        copy.data["data"]["blob"] = json!("QUFB".repeat(1000));
        let mut bulk = rules::Bulk::default();
        let held = bulk.hold(copy.clone());
        let mut texts = Texts::default();
        let planned = PlannedCopy::new(held.clone(), &mut texts);
        assert_eq!(planned.object().expect("copy"), held);
        assert_eq!(bulk.hydrate(&planned.object().expect("copy")), copy);
        assert!(
            planned.text.len() < 1024,
            "the large value is the bulk's, held once"
        );
        // The copies of one source into other namespaces share its text.
        let mut elsewhere = held.clone();
        elsewhere.metadata.namespace = Some("b".into());
        let other = PlannedCopy::new(elsewhere.clone(), &mut texts);
        assert_eq!(other.object().expect("copy"), elsewhere);
        assert!(Arc::ptr_eq(&planned.text, &other.text) && texts.0.len() == 1);
        let mut patched = elsewhere;
        patched.data["data"]["region"] = json!("ZXU=");
        let third = PlannedCopy::new(patched.clone(), &mut texts);
        assert_eq!(third.object().expect("copy"), patched);
        assert_eq!(
            texts.0.len(),
            2,
            "a copy that differs has a text of its own"
        );
    }

    #[test]
    fn copies_held_as_prints_are_judged_on_them_or_read_in_full_first() {
        let decl = declaration(vec![destination(None, "a")]);
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        let desired = copy_in_a(&decl);
        let mut written = desired.clone();
        written.metadata.uid = Some("c-a".into());
        written.metadata.resource_version = Some("7".into());
        let printer = rules::Printer::default();
        let print = HeldCopy::Print(Arc::new(printer.print(&written)));
        let mut run = Run::new(decl, stores);
        run.owned.insert(at("local", "a"), print.clone());
        // In sync: decided on the print.
        let plan = run.plan();
        assert!(plan.unread.is_empty() && plan.writes.is_empty());
        assert_eq!(
            states(&plan),
            [("local/a".into(), DestinationState::Synced)]
        );
        // The source changed, and someone else wrote the copy: the update needs it (who
        // changed what).
        written.metadata.managed_fields = Some(managers(&[("kubectl-edit", "Update")]));
        let print = HeldCopy::Print(Arc::new(printer.print(&written)));
        run.owned.insert(at("local", "a"), print.clone());
        let mut changed = source();
        changed.data["data"]["ca.crt"] = json!("TkVX");
        changed.metadata.resource_version = Some("43".into());
        run.sources = vec![Arc::new(changed)];
        let plan = run.plan();
        assert_eq!(plan.unread, BTreeSet::from([at("local", "a")]));
        assert!(plan.writes.is_empty() && plan.statuses.is_empty());
        // Read in full, it is planned as before prints.
        run.owned
            .insert(at("local", "a"), Arc::new(written.clone()).into());
        let plan = run.plan();
        assert!(plan.unread.is_empty());
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(plan.writes[0].decision, Decision::Update);
        // An update held back by the update policy is decided on the print.
        run.owned.insert(at("local", "a"), print.clone());
        run.decl.spec.update_policy = UpdatePolicy::CreateOnly;
        let plan = run.plan();
        assert!(plan.unread.is_empty() && plan.writes.is_empty());
        assert!(plan.statuses[0].message.contains("CreateOnly"));
        // Fields left to others are compared on the copy itself.
        run.decl.spec.update_policy = UpdatePolicy::default();
        run.decl.spec.destinations[0].ignore = rules::Ignore {
            managers: vec!["kubectl-edit".into()],
            ..Default::default()
        };
        assert_eq!(run.plan().unread.len(), 1);
        // Whether consent to a copy that goes was withdrawn is judged on the copy itself.
        run.decl.spec.destinations[0].ignore = rules::Ignore::default();
        run.decl.spec.destinations[0].namespaces.namespace = Some("elsewhere".into());
        run.decl.spec.consent = Some(grant_consent());
        run.decl.spec.mode = Mode::Report;
        assert_eq!(run.plan().unread, BTreeSet::from([at("local", "a")]));
    }

    /// managedFields entries of `(manager, operation)`, each owning the copy's `data.ca.crt`.
    fn managers(entries: &[(&str, &str)]) -> Vec<ManagedFieldsEntry> {
        let entries: Vec<Value> = entries
            .iter()
            .map(|(manager, operation)| {
                json!({"manager": manager, "operation": operation, "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:ca.crt": {}}}})
            })
            .collect();
        serde_json::from_value(Value::Array(entries)).expect("managedFields")
    }

    #[test]
    fn an_update_of_a_copy_only_kubesync_wrote_is_decided_on_its_print() {
        let decl = declaration(vec![destination(None, "a")]);
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        let mut copy = copy_in_a(&decl);
        copy.metadata.uid = Some("c-a".into());
        copy.metadata.resource_version = Some("7".into());
        // Created by kubesync's POST (its `Update` entry), then applied once.
        copy.metadata.managed_fields =
            Some(managers(&[("kubesync", "Update"), ("kubesync", "Apply")]));
        let printer = rules::Printer::default();
        let held = |copy: &DynamicObject| HeldCopy::Print(Arc::new(printer.print(copy)));
        let mut run = Run::new(decl, stores);
        run.owned.insert(at("local", "a"), held(&copy));
        // The source's value changed: the update is written on the print, conditioned on the
        // copy's uid and resourceVersion, with the verdict the copy in full gets.
        let mut changed = source();
        changed.data["data"]["ca.crt"] = json!("TkVX");
        changed.metadata.resource_version = Some("43".into());
        run.sources = vec![Arc::new(changed.clone())];
        let plan = run.plan();
        assert!(plan.unread.is_empty());
        assert_eq!(written(&plan), [(at("local", "a"), Decision::Update)]);
        let w = &plan.writes[0];
        let meta = &w
            .existing
            .as_deref()
            .expect("the print's metadata")
            .metadata;
        assert!(w.printed && w.drift.is_none() && w.changed.is_empty());
        assert_eq!(meta.uid.as_deref(), Some("c-a"));
        assert_eq!(meta.resource_version.as_deref(), Some("7"));
        run.owned
            .insert(at("local", "a"), Arc::new(copy.clone()).into());
        let full = run.plan();
        assert_eq!(written(&full), written(&plan));
        assert!(!full.writes[0].printed && full.writes[0].drift.is_none());
        assert_eq!(full.writes[0].desired, w.desired);
        // Read in full instead: a key kubesync's POST owns goes (an ownership upgrade first),
        let mut renamed = changed.clone();
        renamed.data["data"] = json!({"tls.crt": "TkVX"});
        run.sources = vec![Arc::new(renamed)];
        run.owned.insert(at("local", "a"), held(&copy));
        assert_eq!(run.plan().unread.len(), 1);
        // someone else wrote a field of the copy (who changed what),
        run.sources = vec![Arc::new(changed)];
        assert!(run.plan().unread.is_empty());
        let mut edited = copy.clone();
        edited.metadata.managed_fields = Some(managers(&[
            ("kubesync", "Apply"),
            ("kubectl-edit", "Update"),
        ]));
        run.owned.insert(at("local", "a"), held(&edited));
        assert_eq!(run.plan().unread.len(), 1);
        // the copy already carries the source's version (a field may have been removed),
        let mut current = copy.clone();
        current
            .metadata
            .annotations
            .as_mut()
            .expect("annotations")
            .insert(rules::SOURCE_VERSION.into(), "43".into());
        current.data["data"] = json!({});
        run.owned.insert(at("local", "a"), held(&current));
        assert_eq!(run.plan().unread.len(), 1);
        // Report mode lists the fields that change, and a replace writes over the whole copy.
        run.owned.insert(at("local", "a"), held(&copy));
        run.decl.spec.mode = Mode::Report;
        assert_eq!(run.plan().unread.len(), 1);
        run.decl.spec.mode = Mode::Enforce;
        run.decl.spec.destinations[0].strategy = Strategy::Replace;
        assert_eq!(run.plan().unread.len(), 1);
    }

    #[test]
    fn an_adoption_rule_adopts_only_what_it_admits() {
        let mut decl = declaration(vec![destination(None, "*")]);
        decl.spec.on_conflict = OnConflict::Adopt;
        decl.spec.adoptable = Some(Adoptable {
            admits: rules::Shared(Arc::new(|there, copy| {
                there.annotations().get("made-from") == copy.annotations().get(rules::SOURCE)
            })),
            refusal: "not made from this source".into(),
        });
        let mut theirs = obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "a", "uid": "t",
                "annotations": {"made-from": "core/Secret/src/ca"}}}));
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({})), ("b", json!({}))])
            .with_object(&at("local", "a"), theirs.clone());
        theirs.metadata.annotations = None;
        let stores = stores.with_object(&at("local", "b"), theirs);
        let plan = Run::new(decl, stores).plan();
        assert_eq!(written(&plan), [(at("local", "a"), Decision::Adopt)]);
        assert_eq!(
            states(&plan),
            [("local/b".into(), DestinationState::Conflict)]
        );
        assert_eq!(plan.statuses[0].message, "not made from this source");
    }

    #[test]
    fn create_only_creates_where_missing_and_never_updates() {
        let mut decl = declaration(vec![destination(None, "*")]);
        decl.spec.update_policy = UpdatePolicy::CreateOnly;
        // In a: a copy of an older source (it differs); b: none.
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({})), ("b", json!({}))])
            .with_object(&at("local", "a"), copy("c", "uid-d"));
        let plan = Run::new(decl.clone(), stores.clone()).plan();
        let written: Vec<String> = plan.writes.iter().map(|w| w.at.to_string()).collect();
        assert_eq!(written, ["local/b/ca"]);
        assert_eq!(plan.writes[0].decision, Decision::Create);
        let held = plan
            .statuses
            .iter()
            .find(|s| s.namespace == "a")
            .expect("a's status");
        assert_eq!(held.state, DestinationState::Synced);
        assert!(held.message.contains("CreateOnly"), "{}", held.message);
        // The same store under Sync: the differing copy is updated.
        decl.spec.update_policy = UpdatePolicy::Sync;
        let plan = Run::new(decl, stores).plan();
        assert_eq!(plan.writes.len(), 2);
    }

    #[test]
    fn the_version_gate_updates_only_copies_of_an_older_source() {
        let mut decl = declaration(vec![destination(None, "*")]);
        decl.spec.update_policy = UpdatePolicy::OnSourceChange;
        // a: an edited copy of the current version (42); b: a copy of an older one; c: none.
        let mut edited = copy("c", "uid-d");
        edited
            .annotations_mut()
            .insert(rules::SOURCE_VERSION.into(), "42".into());
        let mut older = copy("o", "uid-d");
        older
            .annotations_mut()
            .insert(rules::SOURCE_VERSION.into(), "41".into());
        let stores = Fake::default()
            .with_namespaces(
                "local",
                &[("a", json!({})), ("b", json!({})), ("c", json!({}))],
            )
            .with_object(&at("local", "a"), edited)
            .with_object(&at("local", "b"), older);
        let plan = Run::new(decl, stores).plan();
        let written: Vec<(String, Decision)> = plan
            .writes
            .iter()
            .map(|w| (w.at.to_string(), w.decision.clone()))
            .collect();
        assert_eq!(
            written,
            [
                ("local/b/ca".to_string(), Decision::Update),
                ("local/c/ca".to_string(), Decision::Create)
            ]
        );
        let held = plan
            .statuses
            .iter()
            .find(|s| s.namespace == "a")
            .expect("a");
        assert_eq!(held.state, DestinationState::Synced);
        assert!(held.message.contains("version gate"), "{}", held.message);
    }

    #[test]
    fn unknown_and_unreachable_clusters_get_errors_and_keep_their_copies() {
        let stores = Fake::default()
            .with_namespaces("local", &[("a", json!({}))])
            .with_namespaces("east", &[("a", json!({})), ("gone", json!({}))]);
        let mut run = Run::new(
            declaration(vec![
                destination(Some("east"), "a"),
                destination(Some("nowhere"), "a"),
            ]),
            stores,
        )
        .owning(at("east", "gone"), "c1");
        run.unknown = vec!["nowhere".into()];
        run.unreachable = BTreeSet::from(["east".to_string()]);
        let plan = run.plan();
        assert!(plan.writes.is_empty());
        assert!(
            plan.deletes.is_empty(),
            "nothing deleted in an unreachable cluster"
        );
        assert_eq!(
            states(&plan),
            [
                ("nowhere/".into(), DestinationState::Error),
                ("east/a".into(), DestinationState::Error)
            ]
        );
    }

    #[test]
    fn unwanted_copies_are_deleted_unless_their_namespace_is_not_in_the_store_yet() {
        let stores = Fake::default().with_namespaces(
            "local",
            &[("a", json!({"env": "prod"})), ("b", json!({"env": "dev"}))],
        );
        let mut only_prod = destination(None, "*");
        only_prod.namespaces.namespace_selector = Some(kube::core::Selector::from_iter([(
            "env".to_string(),
            "prod".to_string(),
        )]));
        let run = Run::new(declaration(vec![only_prod]), stores)
            .owning(at("local", "a"), "c-a")
            .owning(at("local", "b"), "c-b")
            .owning(at("local", "unseen"), "c-u");
        let plan = run.plan();
        assert_eq!(
            written(&plan),
            [(at("local", "a"), Decision::Update)],
            "the copy in a differs from the source"
        );
        assert_eq!(
            plan.deletes,
            [Delete {
                at: at("local", "b"),
                uid: Some("c-b".into()),
                orphan: false,
            }],
            "b is no longer selected; unseen's namespace is not in the store"
        );
    }

    #[test]
    fn without_a_source_every_copy_goes() {
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        let mut run = Run::new(declaration(vec![destination(None, "*")]), stores)
            .owning(at("local", "a"), "c-a");
        run.sources.clear();
        let plan = run.plan();
        assert!(plan.writes.is_empty() && plan.statuses.is_empty());
        assert_eq!(plan.deletes.len(), 1);
        assert_eq!(plan.source_resource_version, "");
    }

    #[test]
    fn under_orphan_the_copies_of_a_gone_source_are_released_not_deleted() {
        let stores =
            Fake::default().with_namespaces("local", &[("a", json!({})), ("b", json!({}))]);
        let mut decl = declaration(vec![destination(None, "a")]);
        decl.spec.deletion_policy = rules::DeletionPolicy::Orphan;
        let mut run = Run::new(decl, stores)
            .owning(at("local", "a"), "c-a")
            .owning(at("local", "b"), "c-b");
        // With the source: b only left the destinations, and goes.
        let plan = run.plan();
        assert_eq!(
            plan.deletes
                .iter()
                .map(|d| (d.at.namespace.as_str(), d.orphan))
                .collect::<Vec<_>>(),
            [("b", false)]
        );
        // Without it (deleted, or the declaration is): every copy is released.
        run.sources.clear();
        let plan = run.plan();
        assert!(plan.deletes.iter().all(|d| d.orphan) && plan.deletes.len() == 2);
    }

    #[test]
    fn a_destination_s_patches_shape_its_copy_and_a_failing_one_is_its_error_alone() {
        use rules::CopyPatch;
        let stores =
            Fake::default().with_namespaces("local", &[("a", json!({})), ("b", json!({}))]);
        let mut patched = destination(None, "a");
        patched.patches = vec![CopyPatch::Merge(json!({"data": {"region": "ZXU="}}))];
        let mut broken = destination(None, "b");
        broken.patches = vec![CopyPatch::Merge(json!({"metadata": {"name": "other"}}))];
        let plan = Run::new(declaration(vec![patched, broken]), stores).plan();
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(plan.writes[0].at, at("local", "a"));
        assert_eq!(
            plan.writes[0].desired.object().expect("copy").data["data"]["region"],
            "ZXU="
        );
        assert_eq!(
            plan.writes[0].desired.object().expect("copy").data["data"]["ca.crt"],
            "Q0E="
        );
        assert_eq!(
            states(&plan),
            [("local/b".into(), DestinationState::Error)],
            "nothing is written at b"
        );
        assert!(plan.statuses[0].message.contains("may not"));
    }

    #[test]
    fn the_first_destination_entry_decides_the_strategy() {
        let stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        let mut replace = destination(None, "a");
        replace.strategy = Strategy::Replace;
        let plan = Run::new(declaration(vec![replace, destination(None, "*")]), stores).plan();
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(plan.writes[0].strategy, Strategy::Replace);
    }

    #[test]
    fn a_missing_source_is_confirmed_only_when_copies_would_go() {
        assert!(must_confirm_source_gone(false, false, 1));
        assert!(!must_confirm_source_gone(true, false, 1), "in the store");
        assert!(!must_confirm_source_gone(false, true, 1), "being deleted");
        assert!(
            !must_confirm_source_gone(false, false, 0),
            "nothing to delete"
        );
    }

    /// Grants are objects whose `admits` label lists the source names they admit.
    fn grant_consent() -> Consent {
        Consent {
            resource: ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                "kubesync.io",
                "v1alpha1",
                "SyncGrant",
            )),
            exempt: vec!["src".into()],
            max_copies: 1000,
            exempts: Arc::new(|source: &DynamicObject| {
                source.labels().get("exempt").is_none_or(|v| v != "no")
            }),
            adopts: Arc::new(
                |grant: &DynamicObject, _source: &DynamicObject, _at: &DestinationRef| {
                    grant.labels().get("adopt").map(String::as_str) == Some("true")
                },
            ),
            admits: Arc::new(
                |grant: &DynamicObject, source: &DynamicObject, _at: &DestinationRef| {
                    grant.labels().get("admits").map(String::as_str) == Some(&source.name_any())
                },
            ),
            refusal: Arc::new(|_source: &DynamicObject, at: &DestinationRef| {
                format!("no grant in {}", at.namespace)
            }),
        }
    }

    #[test]
    fn a_patched_copy_needs_consent_as_it_will_be_written() {
        use rules::CopyPatch;
        // The owners of `granted` consent to anything but service-account-token Secrets.
        let consent = Consent {
            admits: Arc::new(
                |_grant: &DynamicObject, obj: &DynamicObject, _at: &DestinationRef| {
                    obj.data["type"] != "kubernetes.io/service-account-token"
                },
            ),
            refusal: Arc::new(|obj: &DynamicObject, _at: &DestinationRef| {
                format!("no grant for {}", obj.data["type"])
            }),
            ..grant_consent()
        };
        let mut stores = Fake::default().with_namespaces("local", &[("granted", json!({}))]);
        stores
            .consents
            .insert(("local".into(), "granted".into()), vec![grant("ca")]);
        let mut dest = destination(None, "granted");
        dest.patches = vec![CopyPatch::Merge(
            json!({"type": "kubernetes.io/service-account-token",
            "metadata": {"annotations": {"kubernetes.io/service-account.name": "admin"}}}),
        )];
        let mut decl = declaration(vec![dest]);
        decl.spec.consent = Some(consent);
        let plan = Run::new(decl, stores).plan();
        assert!(plan.writes.is_empty(), "the patched copy is not written");
        assert_eq!(
            states(&plan),
            [("local/granted".into(), DestinationState::Refused)]
        );
        assert!(plan.statuses[0].message.contains("service-account-token"));
    }

    fn grant(admits: &str) -> Arc<DynamicObject> {
        Arc::new(obj(
            json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "x", "labels": {"admits": admits}}}),
        ))
    }

    #[test]
    fn copies_go_only_where_the_owners_consent() {
        let mut stores = Fake::default().with_namespaces(
            "local",
            &[
                ("src", json!({})),
                ("granted", json!({})),
                ("wrong", json!({})),
                ("silent", json!({})),
            ],
        );
        stores
            .consents
            .insert(("local".into(), "granted".into()), vec![grant("ca")]);
        stores
            .consents
            .insert(("local".into(), "wrong".into()), vec![grant("other")]);
        let mut decl = declaration(vec![destination(None, "*"), destination(None, "wrong")]);
        // The own namespace is exempt: the copy there is renamed so it is not the source.
        let mut own = destination(None, "src");
        own.name = Some("ca-copy".into());
        decl.spec.destinations.push(own);
        decl.spec.consent = Some(grant_consent());
        let plan = Run::new(decl, stores)
            .owning(at("local", "silent"), "c-s")
            .plan();
        assert_eq!(
            written(&plan),
            [
                (at("local", "granted"), Decision::Create),
                (
                    DestinationRef::new("local", "src", "ca-copy"),
                    Decision::Create
                ),
            ]
        );
        assert_eq!(
            states(&plan),
            [("local/wrong".into(), DestinationState::Refused)],
            "a named namespace is reported; those \"*\" would select are left out silently"
        );
        assert_eq!(plan.statuses[0].message, "no grant in wrong");
        assert_eq!(
            plan.deletes,
            [Delete {
                at: at("local", "silent"),
                uid: Some("c-s".into()),
                orphan: false,
            }],
            "a copy where consent is withdrawn goes"
        );
    }

    #[test]
    fn a_missing_namespace_reads_as_one_that_refuses() {
        let stores =
            Fake::default().with_namespaces("local", &[("src", json!({})), ("exists", json!({}))]);
        let mut decl = declaration(vec![
            destination(None, "exists"),
            destination(None, "missing"),
        ]);
        decl.spec.consent = Some(grant_consent());
        let plan = Run::new(decl, stores).plan();
        assert!(plan.writes.is_empty());
        assert_eq!(
            states(&plan),
            [
                ("local/exists".into(), DestinationState::Refused),
                ("local/missing".into(), DestinationState::Refused),
            ]
        );
        assert_eq!(plan.statuses[0].message, "no grant in exists");
        assert_eq!(plan.statuses[1].message, "no grant in missing");
        // Without consent rules (a trusted declaration), a missing namespace is just not there.
        let stores = Fake::default().with_namespaces("local", &[("src", json!({}))]);
        let plan = Run::new(declaration(vec![destination(None, "missing")]), stores).plan();
        assert!(plan.statuses.is_empty() && plan.writes.is_empty());
    }

    #[test]
    fn the_own_namespace_takes_only_what_its_exemption_lets_through() {
        let stores = Fake::default().with_namespaces("local", &[("src", json!({}))]);
        let mut own = destination(None, "src");
        own.name = Some("ca-copy".into());
        let mut decl = declaration(vec![own]);
        decl.spec.consent = Some(grant_consent());
        let mut run = Run::new(decl, stores);
        assert_eq!(written(&run.plan()).len(), 1, "exempt");
        run.sources = vec![Arc::new(obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca", "namespace": "src", "labels": {"exempt": "no"}}})))];
        let plan = run.plan();
        assert!(plan.writes.is_empty(), "not exempt: a grant must admit it");
        assert_eq!(
            states(&plan),
            [("local/src".into(), DestinationState::Refused)]
        );
    }

    #[test]
    fn adopting_needs_consent_that_says_so_even_in_the_own_namespace() {
        let theirs = Arc::new(obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "ca-copy", "namespace": "src", "uid": "theirs"}})));
        let mut own = destination(None, "src");
        own.name = Some("ca-copy".into());
        let mut decl = declaration(vec![own]);
        decl.spec.consent = Some(grant_consent());
        decl.spec.on_conflict = OnConflict::Adopt;
        let at_own = DestinationRef::new("local", "src", "ca-copy");
        let mut stores = Fake::default().with_namespaces("local", &[("src", json!({}))]);
        stores.objects.insert(at_own.clone(), theirs.clone());
        let mut run = Run::new(decl, stores);
        let plan = run.plan();
        assert!(plan.writes.is_empty(), "not adopted without consent");
        assert_eq!(plan.statuses[0].state, DestinationState::Conflict);
        assert!(
            plan.statuses[0].message.contains("adopt: true"),
            "{}",
            plan.statuses[0].message
        );
        let adopt = Arc::new(obj(
            json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "src", "labels": {"adopt": "true"}}}),
        ));
        run.stores
            .consents
            .insert(("local".into(), "src".into()), vec![adopt]);
        assert_eq!(written(&run.plan()), [(at_own, Decision::Adopt)]);
    }

    #[test]
    fn a_predecessors_copy_its_record_vouches_for_is_taken_over_as_consent_allows_adoption() {
        use crate::syncers::fan_out::record::Record;
        use crate::syncers::fan_out::spec::Predecessor;
        let old = Owner {
            reference: "local/ctl/old".into(),
            uid: "uid-old".into(),
            shard: None,
        };
        let theirs = |uid: &str| {
            Arc::new(obj(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "ca", "namespace": "a", "uid": uid,
                    "labels": {MANAGED_BY: "uid-old"},
                    "annotations": {rules::SOURCE: "core/Secret/src/ca", rules::OWNER: "local/ctl/old"}},
                "data": {"k": "dg=="}})))
        };
        let mut record = Record::new();
        record.insert("made-for-old");
        let predecessor = Predecessor {
            key: ObjectKey::new("local", &secret_type(), Some("ctl".into()), "old"),
            owner: old,
            record: Arc::new(record),
        };
        let mut stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        stores
            .objects
            .insert(at("local", "a"), theirs("made-for-old"));
        let mut decl = declaration(vec![destination(None, "a")]);
        let mut run = Run::new(decl.clone(), stores);
        let plan = run.plan();
        assert!(plan.writes.is_empty(), "without takeOver: another's copy");
        assert!(
            plan.statuses[0]
                .message
                .contains("managed by local/ctl/old")
        );
        decl.spec.take_over = vec![predecessor.clone()];
        run.decl = decl.clone();
        assert_eq!(
            written(&run.plan()),
            [(at("local", "a"), Decision::Adopt)],
            "its record vouches for it: taken over, whatever onConflict says"
        );
        // The predecessor's marks on an object its record does not hold (forged): not taken.
        run.stores
            .objects
            .insert(at("local", "a"), theirs("forged"));
        let plan = run.plan();
        assert!(plan.writes.is_empty());
        assert_eq!(plan.statuses[0].state, DestinationState::Conflict);
        // Where copies need consent, taking over needs the consent an adoption needs.
        run.stores
            .objects
            .insert(at("local", "a"), theirs("made-for-old"));
        decl.spec.consent = Some(grant_consent());
        run.decl = decl;
        let granted = Arc::new(obj(
            json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "a", "labels": {"admits": "ca"}}}),
        ));
        run.stores
            .consents
            .insert(("local".into(), "a".into()), vec![granted]);
        let plan = run.plan();
        assert!(
            plan.writes.is_empty(),
            "a grant without adopt: not taken over"
        );
        assert!(
            plan.statuses[0]
                .message
                .contains("taking it over (takeOver)"),
            "{}",
            plan.statuses[0].message
        );
        let adopt = Arc::new(obj(
            json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
            "metadata": {"name": "g", "namespace": "a", "labels": {"admits": "ca", "adopt": "true"}}}),
        ));
        run.stores
            .consents
            .insert(("local".into(), "a".into()), vec![adopt]);
        assert_eq!(written(&run.plan()), [(at("local", "a"), Decision::Adopt)]);
    }

    #[test]
    fn withdrawn_consent_is_told_apart_from_other_deletes() {
        let mut stores = Fake::default().with_namespaces(
            "local",
            &[
                ("src", json!({})),
                ("granted", json!({})),
                ("silent", json!({})),
            ],
        );
        stores
            .consents
            .insert(("local".into(), "granted".into()), vec![grant("ca")]);
        let mut decl = declaration(vec![]);
        decl.spec.consent = Some(grant_consent());
        let run = Run::new(decl, stores)
            .owning(at("local", "granted"), "c-g")
            .owning(at("local", "silent"), "c-s");
        // No destination wants them any more: both are deleted; only one lost its consent.
        let plan = run.plan();
        assert_eq!(plan.deletes.len(), 2);
        let consent = run.decl.spec.consent.as_ref().expect("consent");
        let mut unread = BTreeSet::new();
        let (withdrawn, others) = withdrawn(
            consent,
            ("local", &run.stores),
            &run.owned,
            plan.deletes,
            &mut unread,
        );
        assert!(unread.is_empty(), "copies held in full");
        assert_eq!(
            withdrawn
                .iter()
                .map(|d| d.at.namespace.as_str())
                .collect::<Vec<_>>(),
            ["silent"]
        );
        assert_eq!(
            others
                .iter()
                .map(|d| d.at.namespace.as_str())
                .collect::<Vec<_>>(),
            ["granted"]
        );
    }

    /// In Report mode, and for a refused spec, the plan carries out only the deletes whose
    /// consent was withdrawn; every other write and delete is reported as what would be done.
    #[test]
    fn report_mode_and_a_refused_spec_carry_out_only_withdrawn_consent() {
        let mut stores = Fake::default().with_namespaces(
            "local",
            &[
                ("src", json!({})),
                ("granted", json!({})),
                ("silent", json!({})),
                ("new", json!({})),
            ],
        );
        for ns in ["granted", "new"] {
            stores
                .consents
                .insert(("local".into(), ns.into()), vec![grant("ca")]);
        }
        let enforce = || {
            let mut decl = declaration(vec![destination(None, "new")]);
            decl.spec.consent = Some(grant_consent());
            Run::new(decl, stores.clone())
                .owning(at("local", "granted"), "c-g")
                .owning(at("local", "silent"), "c-s")
        };
        // Enforced: a copy made in `new`, both unwanted copies deleted.
        let plan = enforce().plan();
        assert_eq!(written(&plan), [(at("local", "new"), Decision::Create)]);
        assert_eq!(plan.deletes.len(), 2);
        let mut report = enforce();
        report.decl.spec.mode = Mode::Report;
        let mut refused = enforce();
        refused.decl.refused = true;
        for run in [report, refused] {
            let plan = run.plan();
            assert!(plan.writes.is_empty(), "nothing is written");
            let deleted: Vec<&str> = plan
                .deletes
                .iter()
                .map(|d| d.at.namespace.as_str())
                .collect();
            assert_eq!(
                deleted,
                ["silent"],
                "only the copy whose consent was withdrawn goes"
            );
            let planned: Vec<(&str, Option<Planned>)> = plan
                .statuses
                .iter()
                .map(|s| (s.namespace.as_str(), s.planned))
                .collect();
            assert_eq!(
                planned,
                [
                    ("new", Some(Planned::Create)),
                    ("granted", Some(Planned::Delete))
                ]
            );
        }
    }

    #[test]
    fn while_the_source_s_cluster_cannot_be_read_copies_stay_unless_consent_is_withdrawn() {
        let mut stores = Fake::default()
            .with_namespaces("local", &[("granted", json!({})), ("silent", json!({}))]);
        stores
            .consents
            .insert(("local".into(), "granted".into()), vec![grant("ca")]);
        let mut decl = declaration(vec![destination(None, "*")]);
        decl.spec.source = decl.spec.source.clone().in_cluster("hub");
        let mut run = Run::new(decl, stores)
            .owning(at("local", "granted"), "c-g")
            .owning(at("local", "silent"), "c-s");
        // The store shows no source (a restart during the outage): unknown, not gone.
        run.sources.clear();
        run.source_unreachable = Some("connection refused".into());
        let plan = run.plan();
        assert!(plan.writes.is_empty() && plan.deletes.is_empty());
        assert_eq!(
            states(&plan),
            [
                ("local/granted".into(), DestinationState::Error),
                ("local/silent".into(), DestinationState::Error)
            ]
        );
        let message = &plan.statuses[0].message;
        assert!(message.contains("connection refused"), "{message}");
        assert_eq!(plan.statuses[0].source, "ca");
        // Consent withdrawn still ends a copy (the store shows `silent` without a grant).
        run.decl.spec.consent = Some(grant_consent());
        let plan = run.plan();
        assert!(plan.writes.is_empty());
        assert_eq!(
            plan.deletes
                .iter()
                .map(|d| d.at.namespace.as_str())
                .collect::<Vec<_>>(),
            ["silent"]
        );
        assert_eq!(
            states(&plan),
            [("local/granted".into(), DestinationState::Error)]
        );
        // Once a read says the source is gone, its copies go.
        run.source_unreachable = None;
        run.decl.spec.consent = None;
        assert_eq!(run.plan().deletes.len(), 2);
    }

    #[test]
    fn a_source_read_from_another_cluster_is_copied_into_its_namespace_here() {
        let stores = Fake::default().with_namespaces("local", &[("src", json!({}))]);
        let mut decl = declaration(vec![destination(None, "src")]);
        decl.spec.source = decl.spec.source.clone().in_cluster("hub");
        let plan = Run::new(decl, stores).plan();
        assert_eq!(written(&plan), [(at("local", "src"), Decision::Create)]);
        // Into the source's own cluster, the same place is the source itself.
        let stores = Fake::default().with_namespaces("hub", &[("src", json!({}))]);
        let mut decl = declaration(vec![destination(Some("hub"), "src")]);
        decl.spec.source = decl.spec.source.clone().in_cluster("hub");
        let plan = Run::new(decl, stores).plan();
        assert!(plan.writes.is_empty());
        assert_eq!(
            states(&plan),
            [("hub/src".into(), DestinationState::Conflict)]
        );
    }

    #[test]
    fn a_declaration_that_needs_consent_makes_at_most_max_copies() {
        let mut stores = Fake::default().with_namespaces(
            "local",
            &[
                ("src", json!({})),
                ("a", json!({})),
                ("b", json!({})),
                ("c", json!({})),
            ],
        );
        for ns in ["a", "b", "c"] {
            stores
                .consents
                .insert(("local".into(), ns.into()), vec![grant("ca")]);
        }
        let mut decl = declaration(vec![destination(None, "*")]);
        decl.spec.consent = Some(Consent {
            max_copies: 2,
            ..grant_consent()
        });
        let plan = Run::new(decl, stores)
            .owning(at("local", "a"), "c-a")
            .plan();
        assert!(
            plan.writes.is_empty() && plan.deletes.is_empty(),
            "{:?}",
            written(&plan)
        );
        assert_eq!(plan.statuses.len(), 1);
        assert_eq!(plan.statuses[0].state, DestinationState::Error);
        assert!(
            plan.statuses[0]
                .message
                .contains("would make 3 copies; at most 2"),
            "{}",
            plan.statuses[0].message
        );
    }

    /// The object at the destination, one of the shapes the rules tell apart, made from the
    /// copy as it must be (`desired`).
    fn there(shape: u8, desired: &DynamicObject) -> Option<DynamicObject> {
        let mut o = desired.clone();
        o.metadata.uid = Some("there".into());
        o.metadata.resource_version = Some("7".into());
        let annotate = |o: &mut DynamicObject, k: &str, v: &str| {
            o.metadata
                .annotations
                .get_or_insert_default()
                .insert(k.into(), v.into());
        };
        match shape {
            // None.
            0 => return None,
            // This declaration's copy, in sync.
            1 => {}
            // Its copy, changed by someone (and carrying an older source version).
            2 => {
                o.data["data"]["ca.crt"] = json!("ZWRpdGVk");
                annotate(&mut o, rules::SOURCE_VERSION, "41");
            }
            // Its copy, changed, carrying the current source version (the version gate).
            3 => o.data["data"]["ca.crt"] = json!("ZWRpdGVk"),
            // Its copy, changed only at the field a destination may leave to others.
            4 => o.data["data"]["theirs"] = json!("dGhlaXJz"),
            // Another declaration's copy.
            5 => {
                o.metadata
                    .labels
                    .get_or_insert_default()
                    .insert(MANAGED_BY.into(), "uid-other".into());
            }
            // Someone else's object: unmarked, then also protected, then made from this
            // source (the adoption rule admits it).
            6..=8 => {
                o.metadata.labels = None;
                o.metadata.annotations = None;
                o.data["data"] = json!({"x": "eA=="});
                if shape == 7 {
                    annotate(&mut o, rules::PROTECT, "true");
                }
                if shape == 8 {
                    annotate(&mut o, "made-from", "core/Secret/src/ca");
                }
            }
            // Its copy without data.
            _ => o.data["data"] = json!({}),
        }
        Some(o)
    }

    /// The declaration and its stores for one combination of the rules a destination is
    /// decided by.
    fn judged_case(rules: (u8, u8, u8, u8, u8), shape: Option<DynamicObject>) -> Run {
        let (conflict, policy, adoptable, ignore, consent) = rules;
        let mut dest = destination(None, "a");
        dest.strategy = if ignore % 2 == 0 {
            Strategy::Apply
        } else {
            Strategy::Replace
        };
        if ignore >= 2 {
            dest.ignore.pointers = vec![rules::Pointer::parse("/data/theirs").expect("pointer")];
        }
        let mut decl = declaration(vec![dest]);
        decl.spec.on_conflict = [OnConflict::Skip, OnConflict::Adopt][usize::from(conflict % 2)];
        decl.spec.update_policy = [
            UpdatePolicy::Sync,
            UpdatePolicy::CreateOnly,
            UpdatePolicy::OnSourceChange,
        ][usize::from(policy % 3)];
        if adoptable % 2 == 1 {
            decl.spec.adoptable = Some(Adoptable {
                admits: rules::Shared(Arc::new(|there, copy| {
                    there.annotations().get("made-from") == copy.annotations().get(rules::SOURCE)
                })),
                refusal: "not made from this source".into(),
            });
        }
        let mut stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        if consent % 3 != 0 {
            decl.spec.consent = Some(grant_consent());
            let g = grant("ca");
            let mut g = (*g).clone();
            if consent % 3 == 2 {
                g.labels_mut().insert("adopt".into(), "true".into());
            }
            stores
                .consents
                .insert(("local".into(), "a".into()), vec![Arc::new(g)]);
        }
        if let Some(o) = shape {
            stores = stores.with_object(&at("local", "a"), o);
        }
        Run::new(decl, stores)
    }

    /// The live re-decision of a write (made when its destination is read again) equals the
    /// plan's decision on the same object, for every shape of object and every combination of
    /// the rules that decide: conflicts, update policy, adoption rule, fields left to others,
    /// strategy and consent (all 1 440 cases; every kind of decision among them).
    #[test]
    fn the_live_re_decision_equals_the_plan_s_decision_on_the_same_facts() {
        let mut seen = BTreeMap::new();
        for conflict in 0..2 {
            for policy in 0..3 {
                for adoptable in 0..2 {
                    for ignore in 0..4 {
                        for consent in 0..3 {
                            for shape in 0..10 {
                                let rules = (conflict, policy, adoptable, ignore, consent);
                                let decision = re_decided_as_planned(rules, shape);
                                let kind = match decision {
                                    Decision::Conflict(_) => "Conflict".to_string(),
                                    other => format!("{other:?}"),
                                };
                                *seen.entry(kind).or_insert(0) += 1;
                            }
                        }
                    }
                }
            }
        }
        let kinds: Vec<&str> = seen.keys().map(String::as_str).collect();
        assert_eq!(
            kinds,
            ["Adopt", "Conflict", "Create", "InSync", "Update"],
            "{seen:?}"
        );
    }

    /// The plan's decision at a destination holding the object of `shape`, checked against
    /// the live re-decision of the write the plan made where nothing was.
    fn re_decided_as_planned(rules: (u8, u8, u8, u8, u8), shape: u8) -> Decision {
        // The write the plan makes where nothing is (a create), as the executor holds it.
        let empty = judged_case(rules, None);
        let first = empty.plan();
        assert_eq!(first.writes.len(), 1, "{:?}", first.statuses);
        let w0 = &first.writes[0];
        let desired = first.bulk.hydrate(&w0.desired.object().expect("copy"));
        let found = there(shape, &desired);
        // The plan on the same object, held in the stores.
        let case = judged_case(rules, found.clone());
        let planned = case.plan();
        let expected = match (planned.writes.as_slice(), planned.statuses.as_slice()) {
            ([w], []) => w.decision.clone(),
            ([], [st]) => match st.state {
                DestinationState::Synced => Decision::InSync,
                DestinationState::Conflict => Decision::Conflict(st.message.clone()),
                other => panic!("unexpected state {other:?}: {}", st.message),
            },
            other => panic!("one destination, one verdict: {other:?}"),
        };
        let live = redecide(
            &Job::of(&case.decl, Default::default()),
            (w0, &desired),
            found.as_ref(),
        );
        assert_eq!(live, expected, "shape {shape}, rules {rules:?}");
        expected
    }

    /// The lag a write measures is decided by the plan, from the first sightings it is given:
    /// a create is behind since the latest of its source's version, its namespace and its
    /// copy's deletion; an update to a newer source version since that version; an update of
    /// a copy someone changed since that change, and it propagates nothing.
    #[test]
    fn a_write_is_behind_since_the_change_it_carries_was_first_seen() {
        let t0 = Instant::now();
        let t = |s: u64| t0 + std::time::Duration::from_secs(s);
        let source_key = ObjectKey::new("local", &secret_type(), Some("src".into()), "ca");
        let copy_key = at("local", "a").key(&secret_type());
        let mut stores = Fake::default().with_namespaces("local", &[("a", json!({}))]);
        stores.seen.insert(source_key.clone(), ("42".into(), t(1)));
        stores
            .namespace_seen
            .insert(("local".into(), "a".into()), t(3));
        stores.seen.insert(copy_key.clone(), ("9".into(), t(2)));
        let behind_of = |stores: &Fake| {
            let plan = Run::new(declaration(vec![destination(None, "a")]), stores.clone()).plan();
            assert_eq!(plan.writes.len(), 1, "{:?}", plan.statuses);
            (plan.writes[0].decision.clone(), plan.writes[0].behind)
        };
        // Created: since its namespace appeared (the latest of the three).
        assert_eq!(
            behind_of(&stores),
            (
                Decision::Create,
                Some(Behind {
                    since: t(3),
                    propagates: true
                })
            )
        );
        // An update to a newer source version: since that version was first seen.
        let mut old = copy("c", "uid-d");
        old.annotations_mut()
            .insert(rules::SOURCE_VERSION.into(), "41".into());
        let with_copy = stores.clone().with_object(&at("local", "a"), old.clone());
        assert_eq!(
            behind_of(&with_copy),
            (
                Decision::Update,
                Some(Behind {
                    since: t(1),
                    propagates: true
                })
            )
        );
        // The same source version, changed by someone: since that change, propagating nothing.
        old.annotations_mut()
            .insert(rules::SOURCE_VERSION.into(), "42".into());
        let edited = stores.clone().with_object(&at("local", "a"), old);
        assert_eq!(
            behind_of(&edited),
            (
                Decision::Update,
                Some(Behind {
                    since: t(2),
                    propagates: false
                })
            )
        );
        // Nothing seen: no lag to measure.
        assert_eq!(
            behind_of(&Fake::default().with_namespaces("local", &[("a", json!({}))])).1,
            None
        );
    }
}
