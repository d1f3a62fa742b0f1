//! Built-in syncers, each a [`Syncer`](crate::syncer::Syncer) on the same engine.

pub mod fan_out;
pub mod spec_status;
