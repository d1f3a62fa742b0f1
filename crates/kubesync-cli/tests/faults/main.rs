//! The fault suite, on real control planes: each scenario ends with an exact check of the
//! final state and prints its figures. `make test` runs it at sizes that fit CI; `make chaos`
//! runs it alone at full size (`KUBESYNC_CHAOS_FULL=1`) and shows the figures
//! (`--nocapture`).
//!
//! 1. crash loop ([`crash_loop`])
//! 2. watch expiry ([`watch_expiry`])
//! 3. overload ([`overload`])
//! 4. flapping remote ([`flapping_remote`])
//! 5. leader failover ([`failover`])
//! 6. bad input ([`bad_input`])
//! 7. a seeded campaign of hostile declarations ([`campaign`]; `make chaos SEED=<n>`)
//!
//! [`fleet`] is the harness of 1, 2, 3 and 5.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod campaign;
mod crash_loop;
mod failover;
mod flapping_remote;
mod fleet;
mod overload;
mod watch_expiry;
