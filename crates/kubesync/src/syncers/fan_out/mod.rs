//! Object fan-out: one source object copied to many namespaces and clusters.
//!
//! - [`spec`]: what a declaration says and what a reconcile reports (data only);
//! - [`rules`]: the pure rules — which namespaces are destinations, what a copy looks like
//!   (filters, renames, ownership marks), what to do with what a destination holds;
//! - [`plan`]: the pure decision of one reconcile — observed state in, writes, deletes and
//!   statuses out;
//! - [`index`]: which declarations an event concerns and which watches they share (pure,
//!   one lock per operation);
//! - [`pipeline`]: [`FanOut`], a reconcile as a pipeline — reads the stores, runs the plan, writes through the
//!   [`Writer`](crate::writer::Writer). The only module here that does IO.
//!
//! Copies are found by their marks — a `kubesync.io/managed-by` label with the declaration's
//! uid and annotations naming the declaration and the source — and are the declaration's only
//! if its [`record`] vouches for them: marks anyone who may patch an object can write never
//! make kubesync update, release or delete it. The record is kept where the embedder says
//! ([`record::Ledger`]), so deletion works after restarts.

pub mod index;
pub mod pipeline;
pub mod plan;
pub mod record;
pub mod rules;
pub mod seen;
pub mod spec;

pub use pipeline::{FIELD_MANAGER, FanOut, is_uid_precondition_failure};
pub use spec::{
    Adoptable, Declaration, Destination, DestinationRef, DestinationState, DestinationStatus,
    FanOutSpec, Mode, Outcome, Planned, Predecessor, Propagated, Selection, SourceRef,
    SourceUnreachable, SourceVersion, UpdatePolicy, WatchError,
};
