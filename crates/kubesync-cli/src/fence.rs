//! This replica's write permit (`--leader-elect`, `--sharded`): whether it may still write,
//! asked by every write at the moment it leaves the process (see [`kubesync::fence`]).
//!
//! **The rule.** A replica may write while the last renewal of its Lease (the leader Lease, or
//! its member Lease) that the apiserver accepted was *sent* less than the renew deadline ago
//! (10 s), measured on this machine's boot clock (`CLOCK_BOOTTIME`: monotonic, and it goes on
//! counting while the process is frozen or the machine suspended). Another replica takes over
//! only once that Lease has not changed for the lease duration (15 s) on *its* clock, counted
//! from when it first saw the renewal — which the apiserver stored after it was sent. So the
//! permit ends at least 5 s before anyone else may start, whatever the two clocks say of the
//! time of day, as long as they tick at about the same rate.
//!
//! One more case: a renewal accepted after the Lease could already have expired on another's
//! clock — sent late after a stall, or slow in flight — no longer proves the replica kept its
//! Lease: another may have taken its work over meanwhile (a member Lease is written by its
//! member alone, so a late renewal of it succeeds). When the renewal before it was sent a
//! lease duration or more before this one was answered, the permit is lost for good.
//!
//! **Lost for good.** A refused write, a missed deadline, a late renewal: the permit is
//! *lost* and never comes back in this process. Its owner ([`crate::cli`]) starts afresh: the
//! replica executes its own binary again in place (same process id, same arguments), which
//! discards every queue, store and plan of the old term before anything else runs, and joins
//! again as a standby or a new member — without a container restart (no `CrashLoopBackOff`
//! on a node that stalls now and then).
//!
//! With `--sharded` a write decided for a unit ([`kubesync::fence::within`] the unit's point)
//! is also refused once this replica no longer works on the unit under its current view.

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use kubesync::fence::{Fence, Fenced};

use crate::shard::Shards;

/// Timing of a Lease: the leader election's and the member Leases' (client-go's defaults).
#[derive(Clone, Debug)]
pub struct Timing {
    /// A Lease unchanged for this long may be taken over.
    pub lease_duration: Duration,
    /// A leader that could not renew for this long stops.
    pub renew_deadline: Duration,
    /// How often the Lease is renewed or tried.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// A reading of the boot clock (`CLOCK_BOOTTIME`): time since boot, suspends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp(Duration);

impl Stamp {
    /// Now, on the boot clock.
    pub fn now() -> Self {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        Self(Duration::new(
            u64::try_from(ts.tv_sec).unwrap_or(0),
            u32::try_from(ts.tv_nsec).unwrap_or(0),
        ))
    }

    /// How long after `earlier` this is (zero if it is not after).
    pub fn since(self, earlier: Stamp) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// A stamp `d` later (for tests).
    pub fn plus(self, d: Duration) -> Self {
        Self(self.0 + d)
    }
}

/// Whether a replica whose last accepted renewal was sent at `last` may write at `now`
/// (pure): the reason if not.
pub fn may_write(last: Option<Stamp>, now: Stamp, timing: &Timing) -> Result<(), String> {
    let Some(last) = last else {
        return Err("this replica holds no Lease yet".into());
    };
    let age = now.since(last);
    if age >= timing.renew_deadline {
        return Err(format!(
            "its Lease was last renewed {:.1} s ago, past the renew deadline of {} s: another replica may take its work over",
            age.as_secs_f64(),
            timing.renew_deadline.as_secs()
        ));
    }
    Ok(())
}

/// What a renewal sent at `sent` and accepted at `answered` proves (pure): the stamp writes
/// are permitted from now on, or why the Lease may have been lost before it (the renewal
/// accepted before it, `previous`, was sent a lease duration or more before this answer).
pub fn renewal(
    previous: Option<Stamp>,
    sent: Stamp,
    answered: Stamp,
    timing: &Timing,
) -> Result<Stamp, String> {
    if let Some(previous) = previous {
        let gap = answered.since(previous);
        if gap >= timing.lease_duration {
            return Err(format!(
                "its Lease went unrenewed for {:.1} s (a stall, or requests that did not get through), longer than the lease duration of {} s: another replica may have taken its work over",
                gap.as_secs_f64(),
                timing.lease_duration.as_secs()
            ));
        }
    }
    Ok(previous.map_or(sent, |p| p.max(sent)))
}

struct State {
    /// When the last accepted renewal was sent.
    last: Option<Stamp>,
    /// Why the permit was lost, once it is.
    lost: Option<String>,
}

/// This replica's write permit: fed by its Lease's renewals, asked by every write.
pub struct WritePermit {
    timing: Timing,
    state: Mutex<State>,
    /// With `--sharded`: whose units a scoped write must belong to.
    shards: Option<Arc<Shards>>,
    lost: tokio::sync::watch::Sender<Option<String>>,
}

impl std::fmt::Debug for WritePermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WritePermit")
            .field("lost", &self.state.lock().lost)
            .finish_non_exhaustive()
    }
}

impl WritePermit {
    /// A permit that holds nothing yet (every write refused until the first renewal).
    pub fn new(timing: Timing, shards: Option<Arc<Shards>>) -> Arc<Self> {
        Arc::new(Self {
            timing,
            state: Mutex::new(State {
                last: None,
                lost: None,
            }),
            shards,
            lost: tokio::sync::watch::Sender::new(None),
        })
    }

    /// Notes a renewal the apiserver accepted, sent at `sent` (a [`Stamp::now`] taken before
    /// the request): whether the permit holds afterwards.
    pub fn renewed(&self, sent: Stamp) -> bool {
        let mut state = self.state.lock();
        if state.lost.is_some() {
            return false;
        }
        match renewal(state.last, sent, Stamp::now(), &self.timing) {
            Ok(last) => {
                state.last = Some(last);
                true
            }
            Err(why) => {
                drop(state);
                self.lose(why);
                false
            }
        }
    }

    /// Ends the permit for good (the first reason is kept).
    pub fn lose(&self, why: String) {
        let mut state = self.state.lock();
        if state.lost.is_some() {
            return;
        }
        tracing::error!(reason = %why, "this replica may no longer write: it starts afresh");
        state.lost = Some(why.clone());
        drop(state);
        self.lost.send_replace(Some(why));
    }

    /// Why the permit was lost, if it is.
    pub fn lost(&self) -> Option<String> {
        self.state.lock().lost.clone()
    }

    /// Ends the permit the moment its deadline passes without a renewal, whether or not
    /// anything tries to write then (a renewal stuck in flight decides nothing). Runs until
    /// the permit is lost.
    pub async fn watch_deadline(self: Arc<Self>) {
        loop {
            let wait = {
                let state = self.state.lock();
                if state.lost.is_some() {
                    return;
                }
                match state.last {
                    Some(last) => self
                        .timing
                        .renew_deadline
                        .saturating_sub(Stamp::now().since(last)),
                    None => self.timing.retry_period,
                }
            };
            tokio::time::sleep(wait.max(Duration::from_millis(10))).await;
            if self.state.lock().last.is_some() {
                let _ = self.live();
            }
        }
    }

    /// Resolves, with the reason, once the permit is lost.
    pub async fn until_lost(&self) -> String {
        let mut rx = self.lost.subscribe();
        let why = match rx.wait_for(Option::is_some).await {
            Ok(why) => why.clone(),
            // The sender lives as long as `self`.
            Err(_) => None,
        };
        match why {
            Some(why) => why,
            None => std::future::pending().await,
        }
    }
}

impl Fence for WritePermit {
    fn live(&self) -> Result<(), Fenced> {
        let state = self.state.lock();
        if let Some(why) = &state.lost {
            return Err(Fenced(why.clone()));
        }
        let verdict = may_write(state.last, Stamp::now(), &self.timing);
        let held = state.last.is_some();
        drop(state);
        match verdict {
            Ok(()) => Ok(()),
            Err(why) => {
                // Holding nothing yet is not losing anything; a missed deadline is.
                if held {
                    self.lose(why.clone());
                }
                Err(Fenced(why))
            }
        }
    }

    fn admits(&self, scope: u64) -> Result<(), Fenced> {
        match &self.shards {
            Some(shards) if !shards.runs_point(scope) => Err(Fenced(
                "this replica no longer works on the unit the write was decided for".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// The environment variable that counts this replica's fresh starts (set by
/// [`start_afresh`]; read at start for `/metrics`).
pub const FRESH_STARTS: &str = "KUBESYNC_FRESH_STARTS";

/// How many times this process started afresh in place (zero for a new process).
pub fn fresh_starts() -> u64 {
    std::env::var(FRESH_STARTS)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Starts this replica afresh after its permit was lost: executes its own binary again in
/// place (same process id, same arguments and environment, plus the count of fresh starts).
/// Nothing of the old term survives: no queue, no store, no plan, no task. Exits non-zero
/// (the container restarts) only if that fails.
///
/// A stop asked for (SIGTERM) is never lost to it ([`crate::stop`]): asked for before, the
/// process exits instead; during, the signal ends it.
pub fn start_afresh(reason: &str) -> ! {
    use std::os::unix::process::CommandExt;
    if crate::stop::before_fresh_start() {
        eprintln!(
            "kubesync: {reason}; a stop was asked for, so exiting instead of starting afresh"
        );
        std::process::exit(0)
    }
    let starts = fresh_starts() + 1;
    eprintln!("kubesync: {reason}; starting afresh (fresh start {starts} of this process)");
    let mut args = std::env::args_os();
    let argv0 = args.next().unwrap_or_else(|| "kubesync".into());
    // `/proc/self/exe`: the binary this process runs, even if its file was replaced since.
    let error = std::process::Command::new("/proc/self/exe")
        .arg0(argv0)
        .args(args)
        .env(FRESH_STARTS, starts.to_string())
        .exec();
    eprintln!("kubesync: cannot start afresh ({error}); exiting");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: f64) -> Stamp {
        Stamp(Duration::from_secs(1000)).plus(Duration::from_secs_f64(s))
    }

    #[test]
    fn writes_are_permitted_until_the_renew_deadline_after_the_last_renewal_was_sent() {
        let t = Timing::default();
        assert!(may_write(None, at(0.0), &t).is_err(), "no Lease yet");
        assert!(may_write(Some(at(0.0)), at(9.9), &t).is_ok());
        let refused = may_write(Some(at(0.0)), at(10.0), &t).expect_err("past the deadline");
        assert!(refused.contains("10.0 s ago"), "{refused}");
        // A frozen process wakes a minute later: refused, whatever it had in its queue.
        assert!(may_write(Some(at(0.0)), at(60.0), &t).is_err());
    }

    #[test]
    fn a_renewal_answered_a_lease_duration_after_the_one_before_proves_nothing() {
        let t = Timing::default();
        // The first renewal (acquiring) starts the permit at its send.
        assert_eq!(renewal(None, at(0.0), at(0.2), &t), Ok(at(0.0)));
        // Every retry period: the permit moves on to each send.
        assert_eq!(renewal(Some(at(0.0)), at(2.0), at(2.1), &t), Ok(at(2.0)));
        // Sent in time but answered late: others may have seen the Lease expire meanwhile.
        assert!(renewal(Some(at(0.0)), at(7.0), at(15.5), &t).is_err());
        // Woken from a freeze: the renewal goes through (nobody else writes a member Lease),
        // and still the permit is lost.
        assert!(renewal(Some(at(0.0)), at(40.0), at(40.1), &t).is_err());
        // An answer that arrives after a later one does not move the permit back.
        assert_eq!(renewal(Some(at(4.0)), at(2.0), at(4.5), &t), Ok(at(4.0)));
    }

    #[test]
    fn a_permit_once_lost_never_comes_back() {
        let permit = WritePermit::new(Timing::default(), None);
        assert!(permit.live().is_err(), "nothing renewed yet");
        assert_eq!(permit.lost(), None, "holding nothing yet is not losing");
        assert!(permit.renewed(Stamp::now()));
        assert!(permit.live().is_ok());
        permit.lose("stalled".into());
        assert_eq!(permit.live(), Err(Fenced("stalled".into())));
        assert!(!permit.renewed(Stamp::now()), "a renewal after the loss");
        assert!(permit.live().is_err());
    }

    #[test]
    fn a_missed_deadline_seen_by_a_write_loses_the_permit() {
        let permit = WritePermit::new(Timing::default(), None);
        // Renewed, as far as the permit knows, 11 s ago.
        permit.state.lock().last = Some(Stamp(
            Stamp::now().0.saturating_sub(Duration::from_secs(11)),
        ));
        assert!(permit.live().is_err());
        assert!(
            permit
                .lost()
                .is_some_and(|why| why.contains("renew deadline"))
        );
        let lost = futures::FutureExt::now_or_never(permit.until_lost());
        assert!(lost.is_some(), "the owner is told at once");
    }

    #[test]
    fn a_scoped_write_needs_its_unit_in_the_current_view() {
        use crate::shard::Unit;
        use crate::shard::assign::View;
        let shards = Shards::new("a");
        let permit = WritePermit::new(Timing::default(), Some(shards.clone()));
        assert!(permit.renewed(Stamp::now()));
        let unit = Unit::object_sync(Some("team"), "s");
        assert!(permit.admits(unit.point()).is_err(), "no view yet");
        let view = View::new(["a"]);
        let digest = view.digest().to_string();
        shards.change(|t| {
            t.adopt(view);
            t.settle(|_| Some(digest.as_str()));
        });
        assert!(permit.admits(unit.point()).is_ok());
    }
}
