//! Step 4 of a reconcile: the executor. It owns the writer and the budget of writes in
//! flight, and carries out a plan — nothing else: with bounded concurrency, each write
//! carried to an end by the pure [`rules::settle`], deletes and releases conditional on the
//! copy's uid.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{DynamicObject, PropagationPolicy};
use kube::core::ApiResource;

use crate::error::{Error, Result};
use crate::key::ObjectKey;
use crate::runtime::Context;
use crate::syncers::fan_out::plan::{self, Delete, Job, Plan, Write};
use crate::syncers::fan_out::record::RemoveUnrecorded;
use crate::syncers::fan_out::rules::settle::{Failure, Settling, Step, WriteOutcome};
use crate::syncers::fan_out::rules::{self, Decision, FIELD_MANAGER, Strategy};
use crate::syncers::fan_out::spec::{
    DestinationRef, DestinationState, DestinationStatus, Propagated,
};
use crate::writer::{Deleted, Writer};

mod remove;

/// The default budget of bytes in flight ([`Executor::budget`]), in KiB.
const DEFAULT_BUDGET_KIB: u32 = 16 * 1024;

/// The default number of writes and deletes in flight across every reconcile
/// ([`Executor::slots`]).
const DEFAULT_SLOTS: usize = 32;

/// How many waves are carried out together with `slots` writes in flight at once and
/// `concurrency` per reconcile: enough to fill the slots, and one more.
fn waves(slots: usize, concurrency: usize) -> usize {
    slots.div_ceil(concurrency.max(1)) + 1
}

/// Carries out plans: the one part of the fan-out that writes.
pub(super) struct Executor {
    writer: Writer,
    /// At most this many writes in flight per reconcile.
    concurrency: usize,
    /// The bytes of copies in flight (bodies being sent, answers being read), in KiB, for
    /// every reconcile at once ([`Executor::budget`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    /// Its size, in KiB.
    budget_kib: u32,
    /// Writes and deletes in flight, across every reconcile ([`Executor::slots`]): each holds
    /// a connection to its apiserver (and its buffers) while it lasts.
    slots: Arc<tokio::sync::Semaphore>,
    /// Its size.
    slot_count: usize,
    /// Plans too large to be sent at once that are carried out together ([`Executor::wave`]).
    waves: Arc<tokio::sync::Semaphore>,
    /// Declarations whose writes are confirmed by a live read first, until when (see
    /// [`Executor::confirm_writes`]).
    confirm: parking_lot::Mutex<HashMap<ObjectKey, Instant>>,
    /// Who removes a copy kubesync has no record of making (`None`: the cluster's own
    /// credentials; see [`Executor::unrecorded`]).
    unrecorded: Option<RemoveUnrecorded>,
    /// The copies left in place already said so of (see `remove::first_left`).
    left: parking_lot::Mutex<std::collections::HashSet<String>>,
}

/// What carrying out a plan did.
#[derive(Default)]
pub(super) struct Executed {
    /// The written destinations' states.
    pub statuses: Vec<DestinationStatus>,
    /// How many copies were deleted (or released).
    pub deleted: usize,
    /// The propagation lags of the writes that carried a change.
    pub propagated: Vec<Propagated>,
    /// The uids of the objects written as copies (created, adopted or updated): the record's.
    pub made: Vec<String>,
    /// The uids of the copies deleted (or released): no longer the declaration's.
    pub unmade: Vec<String>,
}

impl Executor {
    /// An executor with at most 16 writes in flight per reconcile, and 16 MiB of copies in
    /// flight at once.
    pub(super) fn new() -> Self {
        Self {
            writer: Writer::new(),
            concurrency: 16,
            in_flight: Arc::new(tokio::sync::Semaphore::new(DEFAULT_BUDGET_KIB as usize)),
            budget_kib: DEFAULT_BUDGET_KIB,
            slots: Arc::new(tokio::sync::Semaphore::new(DEFAULT_SLOTS)),
            slot_count: DEFAULT_SLOTS,
            waves: Arc::new(tokio::sync::Semaphore::new(waves(DEFAULT_SLOTS, 16))),
            confirm: parking_lot::Mutex::default(),
            unrecorded: None,
            left: parking_lot::Mutex::default(),
        }
    }

    /// Removes the copies kubesync has no record of making as `remove` says (see
    /// [`FanOut::remove_unrecorded_as`](super::FanOut::remove_unrecorded_as)).
    pub(super) fn unrecorded(&mut self, remove: RemoveUnrecorded) {
        self.unrecorded = Some(remove);
    }

    /// At most `n` copy writes in flight per reconcile.
    pub(super) fn concurrency(&mut self, n: usize) {
        self.concurrency = n.max(1);
        self.waves = Arc::new(tokio::sync::Semaphore::new(waves(
            self.slot_count,
            self.concurrency,
        )));
    }

    /// Whether `plan` is a wave: more writes and deletes than a reconcile sends at once.
    pub(super) fn is_wave(&self, plan: &Plan) -> bool {
        plan.writes.len() + plan.deletes.len() > self.concurrency
    }

    /// A place among the waves carried out together: enough of them to keep every slot
    /// busy, and one more that is planned while the others are sent (`None`: all are taken
    /// now). A plan holds its writes until they are sent, so plans that would wait for
    /// slots are not held meanwhile: a reconcile without a place waits for one
    /// ([`Executor::wave`]) and plans again on what the stores show then.
    pub(super) fn try_wave(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.waves).try_acquire_owned().ok()
    }

    /// Waits for a place among the waves (see [`Executor::try_wave`]).
    pub(super) async fn wave(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.waves).acquire_owned().await.ok()
    }

    /// At most about `bytes` of copies in flight at once, across every reconcile (see
    /// [`FanOut::write_budget`](super::FanOut::write_budget)).
    pub(super) fn budget(&mut self, bytes: usize) {
        let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).max(1);
        self.in_flight = Arc::new(tokio::sync::Semaphore::new(kib as usize));
        self.budget_kib = kib;
    }

    /// At most `n` writes and deletes in flight across every reconcile (at least 1).
    pub(super) fn slots(&mut self, n: usize) {
        self.slot_count = n.max(1);
        self.slots = Arc::new(tokio::sync::Semaphore::new(self.slot_count));
        self.waves = Arc::new(tokio::sync::Semaphore::new(waves(
            self.slot_count,
            self.concurrency,
        )));
    }

    /// What a write of a copy of about `bytes` holds of the budget, in KiB: four times its
    /// size (the copy, the body sent, the answer read and decoded), at least 1, at most all.
    fn write_cost(&self, bytes: usize) -> u32 {
        let kib = (bytes.saturating_mul(4) / 1024).max(1);
        u32::try_from(kib).unwrap_or(u32::MAX).min(self.budget_kib)
    }

    /// The writer whose counts this executor updates.
    pub(super) fn writer(&self) -> Writer {
        self.writer.clone()
    }

    /// For `window`, every write and delete of the declaration `decl` is confirmed by a live
    /// read of its destination first (see
    /// [`FanOut::confirm_writes`](super::FanOut::confirm_writes)).
    pub(super) fn confirm_writes(&self, decl: &ObjectKey, window: Duration) {
        let mut confirm = self.confirm.lock();
        let now = Instant::now();
        confirm.retain(|_, until| *until > now);
        confirm.insert(decl.clone(), now + window);
    }

    /// Whether the writes of `decl` are confirmed live now.
    fn confirming(&self, decl: &ObjectKey) -> bool {
        self.confirm
            .lock()
            .get(decl)
            .is_some_and(|until| *until > Instant::now())
    }

    /// Carries out `plan`, made for `job`: its writes and deletes.
    pub(super) async fn carry_out(&self, ctx: &Context, job: &Job, plan: Plan) -> Executed {
        self.execute(ctx, job, (plan.writes, &plan.bulk), plan.deletes)
            .await
    }

    /// Carries out a plan's writes (their copies' large values held in `bulk`) and deletes,
    /// at most `concurrency` at once and within the budget of bytes in flight; returns the
    /// written destinations' states, how many copies were deleted, and the propagation lags
    /// of the writes that carried a change (see [`plan::behind`]).
    async fn execute(
        &self,
        ctx: &Context,
        job: &Job,
        (writes, bulk): (Vec<Write>, &rules::Bulk),
        deletes: Vec<Delete>,
    ) -> Executed {
        let confirm = self.confirming(&job.declaration);
        let ops = writes
            .into_iter()
            .map(|w| Op::Write(Box::new(w)))
            .chain(deletes.into_iter().map(Op::Delete));
        let results: Vec<Done> = futures::stream::iter(ops)
            .map(|op| async move {
                // The semaphore is never closed.
                let _slot = self.slots.acquire().await.ok();
                match op {
                    Op::Delete(d) => self.remove(ctx, job, d, confirm).await,
                    Op::Write(w) => self.write(ctx, job, (*w, bulk), confirm).await,
                }
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let mut executed = Executed {
            deleted: results.iter().filter(|d| d.deleted).count(),
            ..Executed::default()
        };
        for done in results {
            executed.made.extend(done.made);
            executed.unmade.extend(done.unmade);
            if let Some(st) = done.status {
                if let Some(lag) = done.lag {
                    executed.propagated.push(Propagated {
                        cluster: st.cluster.clone(),
                        lag,
                    });
                }
                executed.statuses.push(st);
            }
        }
        executed
    }

    /// Writes one copy of the plan (its large values held in `bulk`), within the budget of
    /// bytes in flight, and says how it ended and the lag it propagated.
    async fn write(
        &self,
        ctx: &Context,
        job: &Job,
        (w, bulk): (Write, &rules::Bulk),
        confirm: bool,
    ) -> Done {
        // Its share of the budget first, then its copy in full: only the writes in flight
        // hold their bodies (a plan holds each as its text).
        let planned = match w.desired.object() {
            Ok(planned) => planned,
            Err(e) => {
                let message = format!("the planned copy could not be read back: {e}");
                let st = DestinationStatus::new(&w.at, DestinationState::Error, message, "");
                return Done {
                    status: Some(st.of_source(&w.source)),
                    deleted: false,
                    lag: None,
                    made: None,
                    unmade: None,
                };
            }
        };
        let cost = self.write_cost(bulk.bytes(&planned));
        // The semaphore is never closed.
        let _permit = self.in_flight.acquire_many(cost).await.ok();
        let desired = bulk.hydrate(&planned);
        drop(planned);
        let (mut st, sent, (made, unmade)) = self.settle(ctx, job, (&w, &desired), confirm).await;
        // The reconcile that reverts someone else's change reports it.
        if sent && w.decision == Decision::Update {
            st.drift = w.drift.clone();
        }
        let synced = st.state == DestinationState::Synced;
        let lag = match w.behind {
            Some(b) if b.propagates && sent && synced => Some(b.since.elapsed()),
            _ => None,
        };
        if !synced {
            st.behind_since = w.behind.map(|b| b.since);
        }
        Done {
            status: Some(st.of_source(&w.source)),
            deleted: false,
            lag,
            made,
            unmade,
        }
    }

    /// Carries out `decision` at one destination and says how it ended, and whether a write
    /// was sent that the copy now shows. The rules (adopt only after a live read, decide once
    /// more after a create finds the name taken, back off on a uid precondition, recreate
    /// after a replace found invalid) are the pure
    /// [`rules::settle`]; this does the reads and writes it asks for.
    async fn settle(
        &self,
        ctx: &Context,
        job: &Job,
        (w, desired): (&Write, &DynamicObject),
        confirm: bool,
    ) -> (DestinationStatus, bool, (Option<String>, Option<String>)) {
        let ar = &job.resource;
        // The uid of the object written last as the copy, and of one deleted to recreate it.
        let (mut made, mut unmade) = (None, None);
        let at = &w.at;
        let mut existing = w.existing.clone();
        // A copy this writer created or wrote moments ago that the stores do not show (yet: a
        // create not seen, or a copy its shard label moved from one watch to another) is not
        // created again before a live read says it is needed.
        let created = existing.is_none()
            && ctx.cluster(&at.cluster).is_some_and(|cluster| {
                self.writer.written_recently(
                    &cluster,
                    ar,
                    (at.namespace(), &at.name),
                    FIELD_MANAGER,
                )
            });
        // Decided on an object known only by its metadata (another watch showed this
        // declaration's new copy before the copies' watch did): its fields are unknown, so
        // whether to write is decided again on it read live. An update decided on the copy's
        // print is not: its fields were judged by their digests.
        let partial = !w.printed && existing.as_ref().is_some_and(|e| e.data.is_null());
        let mut settling = Settling::new(w.decision.clone(), existing.is_some(), w.strategy)
            .confirming(confirm || created || partial);
        let mut step = settling.start();
        loop {
            step = match step {
                Step::Done(end) => {
                    let version = match end.state {
                        DestinationState::Synced => w.source_resource_version.as_str(),
                        _ => "",
                    };
                    return (
                        DestinationStatus::new(at, end.state, end.message, version),
                        end.sent,
                        (made, unmade),
                    );
                }
                Step::LookAgain => match self.look_again(ctx, job, (w, desired)).await {
                    Ok((found, again)) => {
                        let exists = found.is_some();
                        existing = found;
                        settling.found(exists, again)
                    }
                    Err(status) => return (status, false, (made, unmade)),
                },
                Step::Write => {
                    let acting = (ar, job.acting_in(&at.cluster));
                    let written = self
                        .write_copy(ctx, (acting, job), (w, desired), existing.as_deref())
                        .await;
                    if let Ok(Some(uid)) = &written {
                        made = Some(uid.clone());
                    }
                    settling.written(write_outcome(job, at, written.map(|u| u.is_some())))
                }
                Step::Recreate => {
                    let acting = (ar, job.acting_in(&at.cluster));
                    let recreated = self
                        .recreate(ctx, (acting, job), (w, desired), existing.as_deref())
                        .await;
                    if let Ok(Some(uid)) = &recreated {
                        unmade = existing.as_ref().and_then(|e| e.metadata.uid.clone());
                        made = Some(uid.clone());
                    }
                    settling.written(write_outcome(job, at, recreated.map(|u| u.is_some())))
                }
            };
        }
    }

    /// Reads the object at `at` live and decides again on it; a failed read is the
    /// destination's error status.
    async fn look_again(
        &self,
        ctx: &Context,
        job: &Job,
        (w, desired): (&Write, &DynamicObject),
    ) -> std::result::Result<(Option<Arc<DynamicObject>>, Decision), DestinationStatus> {
        let at = &w.at;
        match self.read(ctx, &job.resource, at).await {
            Ok(found) => {
                // The plan's decision, made again on the object read live.
                let decision = plan::redecide(job, (w, desired), found.as_ref());
                Ok((found.map(Arc::new), decision))
            }
            Err(e) => Err(DestinationStatus::new(
                at,
                DestinationState::Error,
                api_message(&e),
                "",
            )),
        }
    }

    /// A live read of one destination object.
    async fn read(
        &self,
        ctx: &Context,
        ar: &ApiResource,
        at: &DestinationRef,
    ) -> Result<Option<DynamicObject>> {
        let cluster = ctx.require_cluster(&at.cluster)?;
        let api = crate::cluster::api(cluster.client().clone(), at.namespace(), ar);
        Ok(api.get_opt(&at.name).await?)
    }

    /// Writes the copy `w` decided at its destination, over `existing` (the object the
    /// decision was made on, if any): the uid of the object written (`None`: nothing was
    /// sent). A create opens the declaration's record first.
    async fn write_copy(
        &self,
        ctx: &Context,
        ((ar, acting_as), job): ((&ApiResource, Option<&crate::ActAs>), &Job),
        (w, desired): (&Write, &DynamicObject),
        existing: Option<&DynamicObject>,
    ) -> Result<Option<String>> {
        let (at, strategy, ignore) = (&w.at, w.strategy, &w.ignore);
        let cluster = writing_as(ctx, at, acting_as)?;
        match (strategy, existing) {
            (Strategy::Apply, Some(existing)) => {
                // Conditional on the object decided on: never takes over an object that
                // replaced it after the store was read. Fields left to others keep the
                // copy's values.
                let desired = &*rules::ignore::body(desired, existing, ignore);
                let mut body = desired.clone();
                // Conditioned on the object decided on: its uid (never takes over an object
                // that replaced it) and its resourceVersion (never overwrites a newer value: a
                // write decided on a stale store fails with 409, see `crate::fence`).
                body.metadata.uid = rules::apply_precondition(Some(existing));
                body.metadata.resource_version = existing.metadata.resource_version.clone();
                // Decided on a store that does not show this writer's last apply yet, which
                // sent the same: nothing to do.
                if self.writer.already_written(
                    &cluster,
                    ar,
                    existing,
                    (crate::writer::WriteKind::Apply, FIELD_MANAGER),
                    &body,
                ) {
                    return Ok(None);
                }
                // A copy created by a POST: its fields are owned by an `Update` entry, which an
                // apply cannot remove; hand them to the `Apply` entry first when this apply
                // leaves something out.
                if let Some(patch) = rules::ownership_upgrade(existing, desired, FIELD_MANAGER) {
                    let upgraded = self
                        .writer
                        .json_patch(
                            &cluster,
                            ar,
                            at.namespace(),
                            &at.name,
                            &patch,
                            FIELD_MANAGER,
                        )
                        .await?;
                    // The apply follows the patch it just made.
                    body.metadata.resource_version = upgraded.metadata.resource_version;
                }
                self.writer
                    .apply(&cluster, ar, &body, FIELD_MANAGER)
                    .await
                    .map(|o| o.metadata.uid)
            }
            // A new copy is created, never applied: the apiserver refuses a create when an
            // object of that name appeared after the store was read, where an apply would
            // take it over.
            (Strategy::Apply | Strategy::Replace, None) => {
                opened(job).await?;
                self.writer
                    .create(&cluster, ar, desired, FIELD_MANAGER)
                    .await
                    .map(|o| o.metadata.uid)
            }
            (Strategy::Replace, Some(existing)) => {
                let mut body = rules::ignore::body(desired, existing, ignore).into_owned();
                body.metadata.resource_version = existing.metadata.resource_version.clone();
                rules::allocated::carry_over(existing, &mut body);
                self.writer
                    .replace(&cluster, ar, &body, FIELD_MANAGER)
                    .await
                    .map(|o| o.metadata.uid)
            }
        }
    }

    /// Deletes the object `existing` at `w`'s destination (conditional on its uid) and creates
    /// the copy again: a replace found an immutable field changed ([`Step::Recreate`]). Both
    /// as the identity that writes the copy: a copy it may not make again is not deleted.
    async fn recreate(
        &self,
        ctx: &Context,
        ((ar, acting_as), job): ((&ApiResource, Option<&crate::ActAs>), &Job),
        (w, desired): (&Write, &DynamicObject),
        existing: Option<&DynamicObject>,
    ) -> Result<Option<String>> {
        let cluster = writing_as(ctx, &w.at, acting_as)?;
        opened(job).await?;
        tracing::info!(destination = %w.at, "immutable field changed; recreating the copy");
        let uid = existing.and_then(|e| e.metadata.uid.as_deref());
        self.delete_in(&cluster, ar, &w.at, uid).await?;
        self.writer
            .create(&cluster, ar, desired, FIELD_MANAGER)
            .await
            .map(|o| o.metadata.uid)
    }

    /// Deletes the copy at `at` (of `uid`) through `cluster` (its own identity, or the one it
    /// acts as).
    async fn delete_in(
        &self,
        cluster: &crate::Cluster,
        ar: &ApiResource,
        at: &DestinationRef,
        uid: Option<&str>,
    ) -> Result<Deleted> {
        self.writer
            .delete(
                cluster,
                ar,
                at.namespace(),
                &at.name,
                Some(PropagationPolicy::Background),
                uid,
            )
            .await
    }
}

/// The message of a failed write at `at`: the apiserver's, and for a 403 to a declaration
/// that acts as an identity of its own, what that means and what would admit the copy.
fn refused_as(job: &Job, at: &DestinationRef, e: &Error) -> String {
    let message = api_message(e);
    match (job.acting_in(&at.cluster), e) {
        (Some(who), Error::Kube(kube::Error::Api(s))) if s.code == 403 => {
            let place = match at.namespace() {
                Some(ns) => format!("namespace {ns} of cluster {}", at.cluster),
                None => format!("cluster {}", at.cluster),
            };
            crate::error::bounded(format!(
                "RBAC refuses {who}, which this declaration's copies are written as, this write (grant it the rights it lacks in {place} if the copy should be made): {message}"
            ))
        }
        _ => message,
    }
}

/// The cluster of `at` as a copy is written there: as the declaration's identity when it acts
/// as one (the apiserver's RBAC decides), else with the cluster's own credentials.
fn writing_as(
    ctx: &Context,
    at: &DestinationRef,
    acting_as: Option<&crate::ActAs>,
) -> Result<crate::Cluster> {
    let cluster = ctx.require_cluster(&at.cluster)?;
    Ok(match acting_as {
        Some(who) => cluster.acting_as(who),
        None => cluster,
    })
}

/// What a write (or a recreation) at `at` ended with, as the rules of [`rules::settle`] tell
/// it apart; logged once here (a fenced write is said once, by whoever owns the fence).
fn write_outcome(job: &Job, at: &DestinationRef, written: Result<bool>) -> WriteOutcome {
    let e = match written {
        Ok(sent) => return WriteOutcome::Written { sent },
        Err(e) => e,
    };
    let cause = if is_already_exists(&e) {
        Failure::AlreadyExists
    } else if is_uid_precondition_failure(&e) {
        tracing::info!(destination = %at, "the object was replaced while kubesync wrote its copy; left untouched");
        Failure::UidPrecondition
    } else if is_changed(&e) {
        tracing::debug!(destination = %at, "the copy changed after it was read; deciding again on it read live");
        Failure::Changed
    } else if matches!(&e, Error::Kube(kube::Error::Api(s)) if s.is_invalid()) {
        tracing::info!(destination = %at, error = %e, "the write was refused as invalid");
        Failure::Invalid
    } else {
        if !e.is_fenced() {
            tracing::warn!(destination = %at, error = %e, "writing a copy failed");
        }
        Failure::Other
    };
    WriteOutcome::Failed {
        cause,
        message: refused_as(job, at, &e),
    }
}

/// One operation of a plan.
enum Op {
    Write(Box<Write>),
    Delete(Delete),
}

/// How one operation of a plan ended.
struct Done {
    /// A write's destination status.
    status: Option<DestinationStatus>,
    /// A delete (or release) that removed the copy.
    deleted: bool,
    /// The propagation lag a write that carried a change measured.
    lag: Option<std::time::Duration>,
    /// The uid of the object a write left as the copy.
    made: Option<String>,
    /// The uid of a copy removed (deleted, released, or deleted to be recreated).
    unmade: Option<String>,
}

impl Done {
    fn deleted(deleted: bool, unmade: Option<String>) -> Self {
        Self {
            status: None,
            deleted,
            lag: None,
            made: None,
            unmade,
        }
    }
}

/// The declaration's record opened where it is kept (when it is kept), before a copy is
/// created.
async fn opened(job: &Job) -> Result<()> {
    match &job.opening {
        Some(opening) => opening.open().await,
        None => Ok(()),
    }
}

/// Whether a write was refused on its resourceVersion precondition (409 `Conflict`, not a uid
/// mismatch): the object changed after it was read.
fn is_changed(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s)) if s.is_conflict() && !s.message.contains("uid mismatch"))
}

/// Whether a create failed because an object of that name exists.
fn is_already_exists(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(s)) if s.is_already_exists())
}

/// Whether a write failed on its uid precondition ([`rules::apply_precondition`]): the object
/// it was decided on is gone (409, "uid mismatch") or was replaced by another one (422,
/// `metadata.uid` is immutable).
pub fn is_uid_precondition_failure(e: &Error) -> bool {
    let Error::Kube(kube::Error::Api(s)) = e else {
        return false;
    };
    (s.code == 409 && s.message.contains("uid mismatch"))
        || (s.code == 422
            && s.details
                .as_ref()
                .is_some_and(|d| d.causes.iter().any(|c| c.field == "metadata.uid")))
}

/// The apiserver's reason and message of a failed request (bounded), or the error.
fn api_message(e: &Error) -> String {
    match e {
        Error::Kube(kube::Error::Api(s)) => {
            crate::error::bounded(format!("{}: {}", s.reason, s.message))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
