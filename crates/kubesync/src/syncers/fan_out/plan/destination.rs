//! One destination's decision, pure: what to do there, given the object there and the copy
//! as it must be. The plan decides with [`decide_at`] on what the stores show; a write that
//! reads its destination live ([`rules::settle`](crate::syncers::fan_out::rules::settle)) decides
//! again with the same function on what it read ([`redecide`]), so the two cannot drift apart.

use kube::ResourceExt;
use kube::api::DynamicObject;

use kube::core::ApiResource;

use super::Write;
use crate::key::ObjectKey;
use crate::syncers::fan_out::rules::{
    self, Decision, Drift, FieldPath, OnConflict, Owner, Strategy,
};
use crate::syncers::fan_out::spec::{Adoptable, Declaration, Predecessor, UpdatePolicy};

/// What decides at one destination besides the object there and the desired copy: the
/// declaration's rules, its destination entry's, and what the destination's namespace says
/// of adoption.
#[derive(Clone, Copy, Debug)]
pub struct Judge<'a> {
    /// Whose copies count as this declaration's.
    pub owner: &'a Owner,
    /// How the copy is written (what "in sync" means).
    pub strategy: Strategy,
    /// What to do with an object kubesync did not create.
    pub on_conflict: OnConflict,
    /// The fields there left to others: compared nowhere.
    pub ignore: &'a rules::Ignore,
    /// Why the destination's namespace does not consent to adoption (`None`: it does, or
    /// none is needed).
    pub adoption_refused: Option<&'a str>,
    /// The declaration's adoption rule.
    pub adoptable: Option<&'a Adoptable>,
    /// Whether copies are updated once they exist.
    pub update_policy: UpdatePolicy,
    /// The source's resourceVersion, which the copy carries.
    pub source_version: &'a str,
    /// What takes an object carrying the declaration's marks as its own.
    pub vouch: &'a crate::syncers::fan_out::record::Vouch,
    /// The declarations whose copies it takes over.
    pub take_over: &'a [Predecessor],
}

impl<'a> Judge<'a> {
    /// The judge of the write `w` of `job`: the same rules the plan decided it with.
    pub fn of_write(job: &'a Job, w: &'a Write) -> Self {
        Self {
            owner: &job.owner,
            strategy: w.strategy,
            on_conflict: job.on_conflict,
            ignore: &w.ignore,
            adoption_refused: w.adoption_refused.as_deref(),
            adoptable: job.adoptable.as_ref(),
            update_policy: job.update_policy,
            vouch: &job.vouch,
            source_version: &w.source_resource_version,
            take_over: &job.take_over,
        }
    }
}

/// What carrying out a declaration's plan needs of the declaration, and nothing else: its
/// key, the kind of its copies, who they are written as, and the rules a write read live is
/// decided again by ([`redecide`]).
#[derive(Clone, Debug)]
pub struct Job {
    /// The declaration's key.
    pub declaration: ObjectKey,
    /// The kind of its copies.
    pub resource: ApiResource,
    /// Who its copies are written as (`None`: the destination cluster's own credentials).
    pub acting_as: Option<crate::ActAs>,
    /// Who they are written as in other clusters, where that differs (by runtime name).
    pub acting_as_in: std::collections::BTreeMap<String, crate::ActAs>,
    /// Whose copies count as its own.
    pub owner: Owner,
    /// What to do with an object kubesync did not create.
    pub on_conflict: OnConflict,
    /// Its adoption rule.
    pub adoptable: Option<Adoptable>,
    /// Whether its copies are updated once they exist.
    pub update_policy: UpdatePolicy,
    /// What takes an object carrying its marks as its own (its record, as the plan saw it).
    pub vouch: crate::syncers::fan_out::record::Vouch,
    /// Opens its record where it is kept before a copy is created.
    pub opening: Option<std::sync::Arc<crate::syncers::fan_out::record::Opening>>,
    /// The declarations whose copies it takes over.
    pub take_over: Vec<Predecessor>,
}

impl Job {
    /// Who its copies in `cluster` are written as (`None`: that cluster's own credentials).
    pub fn acting_in(&self, cluster: &str) -> Option<&crate::ActAs> {
        self.acting_as_in.get(cluster).or(self.acting_as.as_ref())
    }

    /// What carrying out `decl`'s plans needs, its marked objects vouched for by `vouch`.
    pub fn of(decl: &Declaration, vouch: crate::syncers::fan_out::record::Vouch) -> Self {
        let spec = &decl.spec;
        Self {
            declaration: decl.key.clone(),
            resource: spec.source.resource.clone(),
            acting_as: spec.acting_as.clone(),
            acting_as_in: spec.acting_as_in.clone(),
            owner: decl.owner.clone(),
            on_conflict: spec.on_conflict,
            adoptable: spec.adoptable.clone(),
            update_policy: spec.update_policy,
            vouch,
            opening: None,
            take_over: spec.take_over.clone(),
        }
    }
}

/// What one destination needs.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Nothing to write: the copy is in sync, or its update is held back by the update
    /// policy (`message` says why; empty when in sync). Its status reports `version`.
    Synced {
        /// Why it is not written though it differs (empty: it does not differ).
        message: &'static str,
        /// The source version the destination's status reports.
        version: String,
    },
    /// Left as it is: someone else's object (or one the adoption rules refuse).
    Conflict(String),
    /// Written: [`Decision::Create`], [`Decision::Update`] or [`Decision::Adopt`].
    Write {
        /// Which write.
        decision: Decision,
        /// An update: the fields that change (compared without the fields left to others).
        changed: Vec<FieldPath>,
        /// An update of a copy someone else changed: who changed what.
        drift: Option<Drift>,
    },
}

impl Verdict {
    /// The decision a write carries out: [`Decision::InSync`] for a destination not written.
    pub fn decision(&self) -> Decision {
        match self {
            Verdict::Synced { .. } => Decision::InSync,
            Verdict::Conflict(message) => Decision::Conflict(message.clone()),
            Verdict::Write { decision, .. } => decision.clone(),
        }
    }
}

/// Why an object that carries the declaration's marks is not written: kubesync did not make
/// it (its record does not hold it).
pub const UNVOUCHED: &str = "exists and carries this declaration's marks, but kubesync did not create it (its record of the copies it made does not hold it): someone else's object, left untouched; delete it, or remove the marks and adopt it (onConflict: adopt with a SyncGrant), for kubesync to manage it";

/// Decides what the destination holding `there` (as the stores show it, or as read live)
/// needs for the copy `desired`: compared without the fields left to others, an adoption
/// held to the namespace's consent and the declaration's adoption rule, an update held back
/// by the update policy.
pub fn decide_at(
    judge: &Judge<'_>,
    there: Option<&DynamicObject>,
    desired: &DynamicObject,
) -> Verdict {
    let theirs = match there {
        Some(copy) if !judge.ignore.is_empty() => rules::ignore::resolve(copy, judge.ignore),
        _ => Vec::new(),
    };
    if let Some(verdict) = there.and_then(|there| marked_verdict(judge, there, desired)) {
        return verdict;
    }
    let compared = there.map(|e| rules::ignore::without(e, &theirs));
    let wanted = rules::ignore::without(desired, &theirs);
    let decision = rules::decide(
        compared.as_deref(),
        &wanted,
        judge.owner,
        judge.strategy,
        judge.on_conflict,
    );
    let decision = gate_adoption(
        decision,
        judge.adoption_refused,
        judge.adoptable,
        there,
        desired,
    );
    match decision {
        Decision::InSync => Verdict::Synced {
            message: "",
            version: judge.source_version.to_string(),
        },
        Decision::Update
            if let Some((message, version)) = held_back(
                judge.update_policy,
                there.and_then(|e| {
                    e.annotations()
                        .get(rules::SOURCE_VERSION)
                        .map(String::as_str)
                }),
                judge.source_version,
            ) =>
        {
            Verdict::Synced {
                message,
                version: version.to_string(),
            }
        }
        Decision::Conflict(message) => Verdict::Conflict(message),
        Decision::Update => {
            // A copy (held in full) that is updated: what changes, and whether someone else
            // changed it.
            let (changed, drift) = match compared.as_deref() {
                Some(copy) => {
                    let changed = rules::changed_fields(copy, &wanted, judge.strategy);
                    let drift = rules::drift(copy, desired, &changed, rules::FIELD_MANAGER);
                    (changed, drift)
                }
                None => (Vec::new(), None),
            };
            Verdict::Write {
                decision: Decision::Update,
                changed,
                drift,
            }
        }
        decision => Verdict::Write {
            decision,
            changed: Vec::new(),
            drift: None,
        },
    }
}

/// The verdict on `there` decided by the marks it carries, if they decide it: this
/// declaration's marks that its record does not vouch for (someone else's object, a
/// conflict), or a predecessor's copy (its marks, held by its record: adopted as consent
/// allows an adoption there, one write moving the marks).
fn marked_verdict(
    judge: &Judge<'_>,
    there: &DynamicObject,
    desired: &DynamicObject,
) -> Option<Verdict> {
    if rules::owned_by(there, judge.owner) {
        return (!judge.vouch.vouches_for(&there.metadata))
            .then(|| Verdict::Conflict(UNVOUCHED.to_string()));
    }
    if !judge.take_over.iter().any(|p| p.holds(there)) {
        return None;
    }
    let adopt = gate_adoption(
        Decision::Adopt,
        judge.adoption_refused,
        None,
        Some(there),
        desired,
    );
    Some(match adopt {
        Decision::Conflict(message) => Verdict::Conflict(message),
        decision => Verdict::Write {
            decision,
            changed: Vec::new(),
            drift: None,
        },
    })
}

/// The decision on `found`, the object at `w`'s destination read live: the plan's decision
/// ([`decide_at`], with the same rules, for `w`'s copy as it is sent: `desired`) made again on
/// it.
pub fn redecide(
    job: &Job,
    (w, desired): (&Write, &DynamicObject),
    found: Option<&DynamicObject>,
) -> Decision {
    decide_at(&Judge::of_write(job, w), found, desired).decision()
}

/// Why an update of a copy is held back by the update policy, with the source version its
/// status reports: created once, then the destination's (`CreateOnly`: never updated); or the
/// version gate (`OnSourceChange`: the copy carries the source's version `source_rv` as
/// `carried`, and someone else's change to it stays until the source changes).
pub fn held_back<'a>(
    policy: UpdatePolicy,
    carried: Option<&str>,
    source_rv: &'a str,
) -> Option<(&'static str, &'a str)> {
    match policy {
        UpdatePolicy::OnSourceChange if carried == Some(source_rv) => Some((
            "held back by the version gate: the source has not changed since this copy was written",
            source_rv,
        )),
        UpdatePolicy::CreateOnly => Some((
            "held back by updatePolicy: CreateOnly (created once, never updated; it differs from the source now)",
            "",
        )),
        _ => None,
    }
}

/// The verdict on one of the declaration's copies held as a [print](rules::print), where the
/// print is enough to reach the one [`decide_at`] would reach on the copy: in sync; or not,
/// and its update held back by the update policy; or an update that the copy read in full
/// would decide the same way (applied, no fields left to others, nobody else wrote it, the
/// source changed: [`CopyPrint::updatable_to`](rules::CopyPrint::updatable_to)), when the
/// fields that change need not be listed (`paths`: Report mode lists them). `None`: the copy
/// must be read in full (an update needs the fields that change and who changed them; fields
/// left to others, or a field the apiserver allocates that the copy sets, are compared on the
/// copy itself).
pub fn judge_print(
    judge: &Judge<'_>,
    print: &rules::CopyPrint,
    desired: &DynamicObject,
    paths: bool,
) -> Option<Verdict> {
    if !print.owned_by(judge.owner) {
        return None;
    }
    if print.in_sync(desired, judge.strategy) {
        return Some(Verdict::Synced {
            message: "",
            version: judge.source_version.to_string(),
        });
    }
    // Not in sync: exactly so unless fields are left to others or the desired copy pins one
    // the print leaves out.
    if !judge.ignore.is_empty() || rules::allocated::pins_any(desired) {
        return None;
    }
    if let Some((message, version)) = held_back(
        judge.update_policy,
        print.annotation(rules::SOURCE_VERSION),
        judge.source_version,
    ) {
        return Some(Verdict::Synced {
            message,
            version: version.to_string(),
        });
    }
    (!paths && judge.strategy == Strategy::Apply && print.updatable_to(desired)).then(|| {
        Verdict::Write {
            decision: Decision::Update,
            changed: Vec::new(),
            drift: None,
        }
    })
}

/// A decision to adopt the object `there`, held to the destination's consent (`refused`: why
/// it does not allow adoption) and the declaration's adoption rule (judged on the object and
/// the `desired` copy); any other decision is kept.
pub fn gate_adoption(
    decision: Decision,
    refused: Option<&str>,
    adoptable: Option<&Adoptable>,
    there: Option<&DynamicObject>,
    desired: &DynamicObject,
) -> Decision {
    if decision != Decision::Adopt {
        return decision;
    }
    if let Some(why) = refused {
        return Decision::Conflict(why.to_string());
    }
    match adoptable {
        Some(a) if !there.is_some_and(|e| (a.admits.0)(e, desired)) => {
            Decision::Conflict(a.refusal.clone())
        }
        _ => decision,
    }
}
