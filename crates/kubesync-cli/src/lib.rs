//! The `kubesync` operator: its custom resources, the operator loop and the command line.
//!
//! Kept as a library so the operator can be tested in-process and embedded; `main.rs` only
//! calls [`cli::main`].
#![forbid(unsafe_code)]

pub mod access;
pub mod apart;
pub mod cli;
pub mod compat;
pub mod crd;
pub mod events;
pub mod faults;
pub mod fence;
pub mod lag;
pub mod leader;
pub mod object_sync;
pub mod operator;
pub mod own_writes;
pub mod policy;
pub mod remote;
pub mod remote_check;
pub mod replicas;
pub mod resource_sync;
pub mod shard;
pub mod status;
pub mod stop;
pub mod telemetry;
pub mod tls;
