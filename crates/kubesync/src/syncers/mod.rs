//! The built-in syncs, both on the same runtime (watches, queue, stores) and the same
//! [`Writer`](crate::writer::Writer):
//!
//! - [`spec_status`]: a [`Syncer`](crate::syncer::Syncer) that carries specs from a remote
//!   cluster into this one and statuses back;
//! - [`fan_out`]: not a `Syncer` (a declaration is not one object pair): [`fan_out::FanOut`]
//!   copies one source, or a selection, into many destinations and keeps them there.

pub mod fan_out;
pub mod spec_status;
