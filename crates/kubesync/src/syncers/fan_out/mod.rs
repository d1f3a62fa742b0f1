//! Object fan-out: one source object copied to many namespaces and clusters.
//!
//! This module holds the pure decisions ([`plan`]): which namespaces are destinations, what a
//! copy looks like (filters, renames, ownership marks), and what to do with what a destination
//! already holds (create, update, adopt, or report a conflict). Ownership is read from the
//! copies' marks — a `kubesync.io/managed-by` label with the declaration's uid and
//! annotations naming the declaration and the source — never from memory, so deletion works
//! after restarts.

pub mod engine;
pub mod plan;

pub use engine::{
    Declaration, Destination, DestinationState, DestinationStatus, FanOut, FanOutSpec, Report,
    SourceRef,
};
