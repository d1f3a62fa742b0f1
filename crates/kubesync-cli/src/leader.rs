//! Leader election on a `coordination.k8s.io/v1` Lease, so that several replicas of the
//! operator can run and exactly one of them works (`kubesync run --leader-elect`).
//!
//! As client-go's leader election does: a replica holds the Lease by renewing it; the others
//! take it over when it has not changed for the lease duration, measured on their own clock
//! from when they last saw it change (so clocks of different machines need not agree). Every
//! write carries the Lease's resourceVersion: of two replicas racing for it, one wins. A
//! leader that cannot renew within the renew deadline may no longer write: its renewals feed
//! the write permit every write asks ([`crate::fence`]), and once the permit is lost the
//! process starts afresh as a standby. One that stops normally releases the Lease, so a
//! standby takes over at once.
//!
//! Why not the `kube-lease-manager` crate (0.13.1, which supports kube 5): it decides that a
//! Lease expired from the Lease's own `renewTime` plus `leaseDurationSeconds` compared with
//! the local wall clock — the writer's clock against the reader's, so a skewed clock takes a
//! fresh Lease early or waits long past expiry — where kubesync promises takeover after 15 s
//! without change *measured on its own clock*; and it writes the Lease with strategic-merge
//! and apply patches that carry no resourceVersion, where kubesync promises every write is
//! conditional on the resourceVersion it read (of two replicas racing, exactly one wins).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};

use crate::fence::{Stamp, WritePermit};

pub use crate::fence::Timing;

/// What to do with the Lease as observed (pure).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is none: create it, held by us.
    Create,
    /// We hold it: renew it.
    Renew,
    /// Someone else holds it and it is fresh: wait.
    Wait,
    /// Free (released) or expired: take it over.
    TakeOver,
}

/// Decides the next step: `expired` says whether the Lease has not changed for its duration
/// (on our clock).
pub fn step(lease: Option<&LeaseSpec>, me: &str, expired: bool) -> Step {
    let Some(spec) = lease else {
        return Step::Create;
    };
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == me => Step::Renew,
        Some(holder) if !holder.is_empty() && !expired => Step::Wait,
        _ => Step::TakeOver,
    }
}

/// When a replica last read the Lease (its own clock), as its elector notes it.
pub type LastRead = Arc<parking_lot::Mutex<Option<Instant>>>;

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    timing: Timing,
    /// The Lease's resourceVersion as last seen, and when (our clock) it was first seen so.
    observed: Option<(String, Instant)>,
    /// Its holder as last read (`None`: no Lease, or none holds it).
    holder: Option<String>,
    /// The write permit its renewals feed (see [`crate::fence`]).
    permit: Option<Arc<WritePermit>>,
    /// Noted at every read of the Lease ([`Elector::with_last_read`]).
    last_read: Option<LastRead>,
}

impl Elector {
    /// An elector for the Lease `namespace/name`, as `identity` (unique per replica).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            timing,
            observed: None,
            holder: None,
            permit: None,
            last_read: None,
        }
    }

    /// The same elector, talking to the Lease through `client` from now on (one whose
    /// connections the runtime it is held on drives).
    pub fn with_client(mut self, client: kube::Client) -> Self {
        self.api = Api::namespaced(client, &self.namespace);
        self
    }

    /// Notes in `last_read` when each read of the Lease succeeded (a standby's readiness).
    pub fn with_last_read(mut self, last_read: LastRead) -> Self {
        self.last_read = Some(last_read);
        self
    }

    /// Feeds `permit` with every renewal the apiserver accepts, and ends it when the Lease is
    /// lost (see [`crate::fence`]).
    pub fn with_permit(mut self, permit: Arc<WritePermit>) -> Self {
        self.permit = Some(permit);
        self
    }

    /// One attempt to acquire or renew, fed to the permit: whether this replica holds the
    /// Lease afterwards, and, if it holds it but the permit refused the renewal, why.
    async fn renew_once(&mut self) -> kube::Result<Result<bool, String>> {
        let sent = Stamp::now();
        let held = self.try_once().await?;
        Ok(match (&self.permit, held) {
            (Some(permit), true) if !permit.renewed(sent) => Err(permit.lost().unwrap_or_default()),
            _ => Ok(held),
        })
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn now() -> MicroTime {
        MicroTime(jiff::Timestamp::now())
    }

    /// One attempt to acquire or renew: whether this replica holds the Lease afterwards.
    pub async fn try_once(&mut self) -> kube::Result<bool> {
        let lease = self.api.get_opt(&self.name).await?;
        if let Some(last) = &self.last_read {
            *last.lock() = Some(Instant::now());
        }
        let rv = lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let seen_at = match &self.observed {
            Some((old, at)) if *old == rv => *at,
            _ => Instant::now(),
        };
        self.observed = Some((rv, seen_at));
        let spec = lease.as_ref().and_then(|l| l.spec.clone());
        self.holder = spec.as_ref().and_then(|s| s.holder_identity.clone());
        let duration = spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timing.lease_duration, Duration::from_secs);
        let expired = seen_at.elapsed() >= duration;
        let step = match (&lease, spec.as_ref()) {
            (Some(_), None) => Step::TakeOver,
            (_, spec) => step(spec, &self.identity, expired),
        };
        let seconds = i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let result = match (step, lease) {
            (Step::Wait, _) => return Ok(false),
            (Step::Create, _) | (_, None) => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(Self::now()),
                        renew_time: Some(Self::now()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            (step, Some(mut lease)) => {
                let mut spec = lease.spec.take().unwrap_or_default();
                if step == Step::TakeOver {
                    tracing::info!(previous = ?spec.holder_identity, "taking over the leader Lease");
                    spec.holder_identity = Some(self.identity.clone());
                    spec.acquire_time = Some(Self::now());
                    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                spec.lease_duration_seconds = Some(seconds);
                spec.renew_time = Some(Self::now());
                lease.spec = Some(spec);
                // Carries the resourceVersion read above: a concurrent change wins.
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(lease) => {
                let rv = lease.metadata.resource_version.unwrap_or_default();
                self.observed = Some((rv, Instant::now()));
                self.holder = Some(self.identity.clone());
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        loop {
            match self.renew_once().await {
                Ok(Ok(true)) => return,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: cannot read or write the Lease")
                }
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renews the Lease until a renewal has not succeeded for the renew deadline (or another
    /// replica holds it): returns then, with the reason. Leadership is lost.
    pub async fn hold(&mut self) -> String {
        let reason = self.renew_until_lost().await;
        if let Some(permit) = &self.permit {
            permit.lose(reason.clone());
        }
        reason
    }

    async fn renew_until_lost(&mut self) -> String {
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            // An attempt that hangs (an apiserver cut off) ends at the deadline.
            let left = self
                .timing
                .renew_deadline
                .saturating_sub(last_renewal.elapsed());
            let attempt = tokio::time::timeout(left, self.renew_once())
                .await
                .unwrap_or_else(|_| Ok(Ok(false)));
            match attempt {
                Ok(Ok(true)) => last_renewal = Instant::now(),
                // Renewed after the Lease could have expired on another's clock.
                Ok(Err(why)) => return why,
                // Another replica holds it now (as just read): lost. A write that lost a race
                // while the Lease still names us is tried again.
                Ok(Ok(false)) if self.holder.as_deref() != Some(self.identity.as_str()) => {
                    return format!("the Lease is held by {:?} now", self.holder);
                }
                Ok(Ok(false)) => {}
                Err(e) => tracing::warn!(error = %e, "leader election: renewal failed"),
            }
            if last_renewal.elapsed() >= self.timing.renew_deadline {
                return format!(
                    "the Lease was not renewed for {} s",
                    last_renewal.elapsed().as_secs()
                );
            }
        }
    }

    /// Gives the Lease up (on a normal stop), so a standby replica takes over at once.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(Self::now());
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => tracing::info!("released the leader Lease"),
            Err(e) => tracing::warn!(error = %e, "could not release the leader Lease"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            ..Default::default()
        }
    }

    #[test]
    fn steps_follow_the_holder_and_expiry() {
        assert_eq!(step(None, "me", false), Step::Create);
        assert_eq!(step(Some(&held_by("me")), "me", true), Step::Renew);
        assert_eq!(step(Some(&held_by("other")), "me", false), Step::Wait);
        assert_eq!(step(Some(&held_by("other")), "me", true), Step::TakeOver);
        // Released: free to take at once.
        assert_eq!(step(Some(&held_by("")), "me", false), Step::TakeOver);
        assert_eq!(
            step(Some(&LeaseSpec::default()), "me", false),
            Step::TakeOver
        );
    }
}
