//! How one destination's write is carried through to an end: the copy-safety rules of the
//! fan-out's executor, as a pure state machine (the fan-out does the IO each [`Step`] asks for
//! and reports what happened).
//!
//! - **Adopt only after a live read**: the stores hold objects kubesync did not create as
//!   metadata only, so an adoption is decided again on the whole object, read now.
//! - **Re-decide after a 409 on create**: a create that finds the name taken (the store did
//!   not show the object yet: this fan-out's own copy from a moment ago, or someone else's new
//!   object) reads the object and decides once more — once.
//! - **Back off on a uid precondition**: an apply carries the uid of the object it was decided
//!   on; when the apiserver refuses it, that object was deleted or replaced, and nothing is
//!   changed (the destination is looked at again on the next pass).
//! - **Recreate after a 422 on a replace**: a copy written whole (`Replace`) whose immutable
//!   field changed is deleted and created again (conditional on its uid), once.
//! - Any other failure ends in the destination's `Error` with the apiserver's words.

use super::decide::{Decision, Strategy};
use crate::syncers::fan_out::spec::DestinationState;

/// What the fan-out does next at the destination.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Write the copy with the current decision on the object the fan-out holds.
    Write,
    /// Read the object live and report [`Settling::found`].
    LookAgain,
    /// Delete the object decided on (conditional on its uid) and create the copy again; report
    /// [`Settling::written`].
    Recreate,
    /// Done.
    Done(Settled),
}

/// How a destination ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Settled {
    /// Its state.
    pub state: DestinationState,
    /// Why (empty when synced).
    pub message: String,
    /// Whether a write was sent that the copy now shows.
    pub sent: bool,
}

impl Settled {
    fn synced(sent: bool) -> Step {
        Step::Done(Settled {
            state: DestinationState::Synced,
            message: String::new(),
            sent,
        })
    }

    fn error(message: impl Into<String>) -> Step {
        Step::Done(Settled {
            state: DestinationState::Error,
            message: message.into(),
            sent: false,
        })
    }
}

/// What a write ended with, as the rules need to know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written; `sent` is false when nothing needed sending (the writer had sent it already).
    Written {
        /// Whether a request was sent.
        sent: bool,
    },
    /// Refused or failed.
    Failed {
        /// What kind of failure.
        cause: Failure,
        /// The apiserver's words.
        message: String,
    },
}

/// The failures the rules tell apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// A create was refused: an object of that name exists.
    AlreadyExists,
    /// An apply was refused on its uid precondition (the object was deleted or replaced).
    UidPrecondition,
    /// An update or apply was refused on its resourceVersion precondition: the object changed
    /// after the store the decision was made on was read.
    Changed,
    /// The write was found invalid (422): e.g. a field that cannot change did.
    Invalid,
    /// Anything else.
    Other,
}

/// Why a live read was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reading {
    /// To decide an adoption on the whole object.
    Adoption,
    /// A create found the name taken.
    TakenName,
    /// An update found the object changed since it was read.
    Changed,
    /// The store the decision was made on may be behind (a copy this writer just created, a
    /// declaration just handed over by another replica): confirmed live before writing.
    Confirm,
}

/// One destination on its way to an end.
#[derive(Clone, Debug)]
pub struct Settling {
    decision: Decision,
    /// Whether the fan-out holds an object for the destination.
    existing: bool,
    strategy: Strategy,
    /// Whether the object held comes from a live read (at most one is made).
    live: bool,
    reading: Option<Reading>,
    /// Read the destination live before any write (see [`Settling::confirming`]).
    confirm: bool,
    /// Whether the copy was recreated (at most once).
    recreated: bool,
}

impl Settling {
    /// Reads the destination live before writing: the store the decision was made on may be
    /// behind the apiserver (a create this writer sent moments ago, a declaration another
    /// replica worked on until now). The write follows only if the live object still asks for
    /// it; a read is not a write.
    #[must_use]
    pub fn confirming(mut self, confirm: bool) -> Self {
        self.confirm = confirm;
        self
    }

    /// A destination the plan decided on: `existing` says whether the stores showed an object.
    pub fn new(decision: Decision, existing: bool, strategy: Strategy) -> Self {
        Self {
            decision,
            existing,
            strategy,
            live: false,
            reading: None,
            confirm: false,
            recreated: false,
        }
    }

    /// The first step.
    pub fn start(&mut self) -> Step {
        match &self.decision {
            Decision::InSync => Settled::synced(false),
            Decision::Conflict(message) => Step::Done(Settled {
                state: DestinationState::Conflict,
                message: message.clone(),
                sent: false,
            }),
            Decision::Adopt if !self.live => {
                self.live = true;
                self.reading = Some(Reading::Adoption);
                Step::LookAgain
            }
            Decision::Create | Decision::Update if self.confirm && !self.live => {
                self.live = true;
                self.reading = Some(Reading::Confirm);
                Step::LookAgain
            }
            Decision::Create | Decision::Update | Decision::Adopt => Step::Write,
        }
    }

    /// The decision now (to write with).
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The live read found an object (`exists`) or none, and the rules decided `decision` on
    /// it.
    pub fn found(&mut self, exists: bool, decision: Decision) -> Step {
        let reading = self.reading.take();
        if reading == Some(Reading::TakenName) && !exists {
            return Settled::error(
                "the name was taken while kubesync created its copy, and is free again; it is looked at again",
            );
        }
        self.existing = exists;
        self.decision = decision;
        self.start()
    }

    /// The write ended with `outcome`.
    pub fn written(&mut self, outcome: WriteOutcome) -> Step {
        match outcome {
            WriteOutcome::Written { sent } => Settled::synced(sent),
            WriteOutcome::Failed {
                cause: Failure::AlreadyExists,
                ..
            } if !self.existing && !self.live => {
                self.live = true;
                self.reading = Some(Reading::TakenName);
                Step::LookAgain
            }
            // Decided on an object older than the apiserver's: decided once more on the
            // object read live, and written conditioned on that one.
            WriteOutcome::Failed {
                cause: Failure::Changed,
                ..
            } if !self.live => {
                self.live = true;
                self.reading = Some(Reading::Changed);
                Step::LookAgain
            }
            WriteOutcome::Failed {
                cause: Failure::UidPrecondition,
                ..
            } if self.strategy == Strategy::Apply => Settled::error(
                "the object kubesync decided on was deleted or replaced while it wrote; nothing was changed, and it is looked at again",
            ),
            // A copy written whole whose immutable field changed: recreated, once.
            WriteOutcome::Failed {
                cause: Failure::Invalid,
                ..
            } if self.strategy == Strategy::Replace && self.existing && !self.recreated => {
                self.recreated = true;
                Step::Recreate
            }
            WriteOutcome::Failed { message, .. } => Settled::error(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(cause: Failure, message: &str) -> WriteOutcome {
        WriteOutcome::Failed {
            cause,
            message: message.into(),
        }
    }

    fn taken() -> WriteOutcome {
        failed(Failure::AlreadyExists, "AlreadyExists: taken")
    }

    fn done(step: Step) -> Settled {
        match step {
            Step::Done(s) => s,
            other => panic!("not done: {other:?}"),
        }
    }

    #[test]
    fn a_write_refused_as_decided_on_an_older_object_is_decided_again_live_once() {
        let changed = || failed(Failure::Changed, "the object has been modified (409)");
        let mut s = Settling::new(Decision::Update, true, Strategy::Apply);
        assert_eq!(s.start(), Step::Write);
        assert_eq!(s.written(changed()), Step::LookAgain);
        // Live, it asks for the write still: written once more, conditioned on what was read.
        assert_eq!(s.found(true, Decision::Update), Step::Write);
        // Refused again: an error, looked at again later (no third write now).
        assert!(matches!(
            s.written(changed()),
            Step::Done(Settled {
                state: DestinationState::Error,
                ..
            })
        ));
        // Live, it is in sync already: nothing is written.
        let mut s = Settling::new(Decision::Update, true, Strategy::Replace);
        assert_eq!(s.start(), Step::Write);
        assert_eq!(s.written(changed()), Step::LookAgain);
        assert_eq!(s.found(true, Decision::InSync), Settled::synced(false));
    }

    #[test]
    fn a_confirmed_write_reads_first_and_writes_only_what_the_live_object_asks() {
        // The store showed nothing; live, the copy is there and in sync: nothing is sent.
        let mut s = Settling::new(Decision::Create, false, Strategy::Apply).confirming(true);
        assert_eq!(s.start(), Step::LookAgain);
        assert_eq!(s.found(true, Decision::InSync), Settled::synced(false));
        // Live, it is absent indeed: created, once.
        let mut s = Settling::new(Decision::Create, false, Strategy::Apply).confirming(true);
        assert_eq!(s.start(), Step::LookAgain);
        assert_eq!(s.found(false, Decision::Create), Step::Write);
        assert_eq!(
            s.written(WriteOutcome::Written { sent: true }),
            Settled::synced(true)
        );
        // An update confirmed live that still differs is written.
        let mut s = Settling::new(Decision::Update, true, Strategy::Apply).confirming(true);
        assert_eq!(s.start(), Step::LookAgain);
        assert_eq!(s.found(true, Decision::Update), Step::Write);
        // Without confirming, the write goes at once.
        let mut s = Settling::new(Decision::Create, false, Strategy::Apply);
        assert_eq!(s.start(), Step::Write);
    }

    #[test]
    fn in_sync_and_conflicts_end_at_once_without_a_write() {
        let s = done(Settling::new(Decision::InSync, true, Strategy::Apply).start());
        assert_eq!((s.state, s.sent), (DestinationState::Synced, false));
        let s =
            done(Settling::new(Decision::Conflict("theirs".into()), true, Strategy::Apply).start());
        assert_eq!(
            (s.state, s.message.as_str()),
            (DestinationState::Conflict, "theirs")
        );
    }

    #[test]
    fn a_write_that_goes_through_is_synced_and_says_whether_it_was_sent() {
        for decision in [Decision::Create, Decision::Update] {
            let mut s = Settling::new(
                decision.clone(),
                decision == Decision::Update,
                Strategy::Apply,
            );
            assert_eq!(s.start(), Step::Write);
            let end = done(s.written(WriteOutcome::Written { sent: true }));
            assert_eq!((end.state, end.sent), (DestinationState::Synced, true));
        }
        let mut s = Settling::new(Decision::Update, true, Strategy::Apply);
        s.start();
        assert!(!done(s.written(WriteOutcome::Written { sent: false })).sent);
    }

    #[test]
    fn an_adoption_is_decided_on_a_live_read_first() {
        let mut s = Settling::new(Decision::Adopt, true, Strategy::Apply);
        assert_eq!(
            s.start(),
            Step::LookAgain,
            "never adopted on the store's metadata"
        );
        // Still someone else's, adoption allowed: written now, on the object read.
        assert_eq!(s.found(true, Decision::Adopt), Step::Write);
        assert_eq!(s.decision(), &Decision::Adopt);
        // Read again, it turned out protected: a conflict, nothing written.
        let mut s = Settling::new(Decision::Adopt, true, Strategy::Apply);
        s.start();
        let end = done(s.found(true, Decision::Conflict("protected".into())));
        assert_eq!(end.state, DestinationState::Conflict);
        // Gone meanwhile: created.
        let mut s = Settling::new(Decision::Adopt, true, Strategy::Apply);
        s.start();
        assert_eq!(s.found(false, Decision::Create), Step::Write);
    }

    #[test]
    fn a_create_that_finds_the_name_taken_decides_once_more_once() {
        // Its own copy from a moment ago: in sync.
        let mut s = Settling::new(Decision::Create, false, Strategy::Apply);
        s.start();
        assert_eq!(s.written(taken()), Step::LookAgain);
        assert_eq!(
            done(s.found(true, Decision::InSync)).state,
            DestinationState::Synced
        );
        // Someone else's new object: a conflict.
        let mut s = Settling::new(Decision::Create, false, Strategy::Apply);
        s.start();
        s.written(taken());
        let end = done(s.found(true, Decision::Conflict("theirs".into())));
        assert_eq!(end.state, DestinationState::Conflict);
        // Free again by the time it is read: an error, looked at on the next pass.
        let mut s = Settling::new(Decision::Create, false, Strategy::Apply);
        s.start();
        s.written(taken());
        let end = done(s.found(false, Decision::Create));
        assert_eq!(end.state, DestinationState::Error);
        assert!(end.message.contains("free again"), "{}", end.message);
        // Its own copy, but out of date: updated, and a second 409 is not read again.
        let mut s = Settling::new(Decision::Create, false, Strategy::Apply);
        s.start();
        s.written(taken());
        assert_eq!(s.found(true, Decision::Update), Step::Write);
        let end = done(s.written(taken()));
        assert_eq!(
            (end.state, end.message.as_str()),
            (DestinationState::Error, "AlreadyExists: taken")
        );
    }

    #[test]
    fn a_uid_precondition_failure_changes_nothing() {
        let mut s = Settling::new(Decision::Update, true, Strategy::Apply);
        s.start();
        let end = done(s.written(failed(Failure::UidPrecondition, "uid mismatch")));
        assert_eq!((end.state, end.sent), (DestinationState::Error, false));
        assert!(
            end.message.contains("nothing was changed"),
            "{}",
            end.message
        );
    }

    #[test]
    fn other_failures_are_the_destinations_error_in_the_apiservers_words() {
        let mut s = Settling::new(Decision::Update, true, Strategy::Replace);
        s.start();
        let end = done(s.written(failed(Failure::Other, "Forbidden: no")));
        assert_eq!(
            (end.state, end.message.as_str()),
            (DestinationState::Error, "Forbidden: no")
        );
    }

    #[test]
    fn a_replace_refused_as_invalid_recreates_the_copy_once_and_an_apply_does_not() {
        let invalid = || failed(Failure::Invalid, "Invalid: field is immutable");
        let mut s = Settling::new(Decision::Update, true, Strategy::Replace);
        assert_eq!(s.start(), Step::Write);
        assert_eq!(s.written(invalid()), Step::Recreate);
        assert_eq!(
            s.written(WriteOutcome::Written { sent: true }),
            Settled::synced(true)
        );
        // Recreated, and refused again: an error, not a second recreation.
        let mut s = Settling::new(Decision::Update, true, Strategy::Replace);
        s.start();
        assert_eq!(s.written(invalid()), Step::Recreate);
        assert_eq!(
            done(s.written(invalid())).message,
            "Invalid: field is immutable"
        );
        // An apply is never recreated: its 422 is the destination's error.
        let mut s = Settling::new(Decision::Update, true, Strategy::Apply);
        s.start();
        assert_eq!(done(s.written(invalid())).state, DestinationState::Error);
        // Nor is a create (there is nothing to delete).
        let mut s = Settling::new(Decision::Create, false, Strategy::Replace);
        s.start();
        assert_eq!(done(s.written(invalid())).state, DestinationState::Error);
    }
}
