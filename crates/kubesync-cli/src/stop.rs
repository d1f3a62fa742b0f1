//! A stop, once asked for, always ends the process.
//!
//! `SIGTERM` (the kubelet's, at a Pod's deletion or eviction) or `SIGINT` asks `kubesync run` to
//! stop: it hands its Lease over and exits. Two things could lose that request, and neither may:
//!
//! - **a fresh start** ([`crate::fence::start_afresh`]): a replica whose write permit is lost
//!   executes its own binary again in place, and the new image knows nothing of a signal the
//!   old one received. So a fresh start first says it is starting ([`before_fresh_start`]);
//!   a stop asked for before then ends the process instead, and one that arrives while the
//!   binary is executed ends it at once (the signal handler exits; once the new image runs,
//!   the signal's default action does);
//! - **a shutdown that cannot finish** (its Lease released to an apiserver that is gone, work
//!   that holds every async worker): the stop's deadline, kept on a thread of its own,
//!   ends the process [`--shutdown-timeout`](crate::cli) after the signal, whatever the rest
//!   of it is doing.
//!
//! The flags are set by the signal handlers themselves (no task needs to run for them), so a
//! stalled or frozen runtime cannot delay them.

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use signal_hook::consts::{SIGINT, SIGTERM};

/// Set by the handler of `SIGTERM` and `SIGINT`.
static REQUESTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Set once a fresh start has begun: a stop asked for from then on exits at once.
static STARTING_AFRESH: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

/// Installs the handlers and the deadline: a stop asked for ends this process within
/// `timeout`, gracefully or not (exit code 1 and a line on stderr when the deadline ends it).
pub fn install(timeout: Duration) -> std::io::Result<()> {
    for signal in [SIGTERM, SIGINT] {
        // In this order, in the handler: the request is recorded, then an exec under way is
        // cut short (both sequentially consistent, as [`before_fresh_start`] reads them).
        signal_hook::flag::register(signal, REQUESTED.clone())?;
        signal_hook::flag::register_conditional_shutdown(signal, 0, STARTING_AFRESH.clone())?;
    }
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::Builder::new()
        .name("kubesync-stop-deadline".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                std::thread::sleep(timeout);
                eprintln!(
                    "kubesync: still running {}s after the stop was asked for; exiting",
                    timeout.as_secs_f32()
                );
                std::process::exit(1);
            }
        })?;
    Ok(())
}

/// Whether a stop was asked for.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}

/// Says that a fresh start begins; `true` when a stop was asked for already (then the caller
/// exits instead). A stop asked for after this call ends the process in its signal handler.
pub fn before_fresh_start() -> bool {
    STARTING_AFRESH.store(true, Ordering::SeqCst);
    requested()
}
