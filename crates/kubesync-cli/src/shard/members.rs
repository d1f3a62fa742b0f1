//! The member Leases: each replica of `kubesync run --sharded` holds one
//! (`coordination.k8s.io/v1`, in its namespace, labelled [`GROUP_LABEL`]), renews it, and
//! writes in it the view it acknowledged ([`VIEW_ANNOTATION`]); it reads the others' to know
//! the live members.
//!
//! As for the leader Lease ([`crate::leader`]), expiry is measured on the reader's own clock:
//! another member's Lease is expired when its resourceVersion has not changed for its
//! duration since this replica first read it so — from reads of the apiserver (lists, never a
//! cache), so a slow watch cannot make a live member look dead. A member writes only
//! while its permit holds ([`crate::fence`], fed by its renewals here): every write asks, so a
//! member that cannot renew within the renew deadline (shorter than the duration), or wakes
//! from a freeze, has stopped writing before anyone can see its Lease expire, and starts
//! afresh. A member that stops normally drains
//! its work and deletes its Lease: its units move at once.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use super::Shards;
use super::assign::{Tenure, View};
use crate::fence::{Stamp, WritePermit};
use crate::leader::Timing;

/// The label naming the group a member Lease belongs to (its value: the group's name).
pub const GROUP_LABEL: &str = "kubesync.io/member-of";
/// The annotation holding the digest of the view the member acknowledged last.
pub const VIEW_ANNOTATION: &str = "kubesync.io/view";
/// Another member's Lease expired this many durations ago is deleted (a replica gone for good:
/// a pod replaced by one of another name).
const FORGET_AFTER: u32 = 4;

/// What the membership loop needs of the work it shares.
pub trait Work: Send + Sync {
    /// Every unit known now, each with the keys to queue when this replica starts working on it.
    fn units(&self) -> Vec<(super::Unit, kubesync::ObjectKey)>;
    /// Queues the key of a unit this replica starts working on; `handed_over`: another member
    /// may have worked on it until now (its writes may not show in this replica's stores yet).
    fn wake(&self, key: kubesync::ObjectKey, handed_over: bool);
    /// Forgets what is kept in memory for the units this replica no longer works on (and stops
    /// their running syncs); writes nothing.
    fn release(&self, shards: &Shards) -> impl Future<Output = ()> + Send;
}

/// Where the member Leases live, and who this replica is.
#[derive(Clone, Debug)]
pub struct Membership {
    /// Namespace of the Leases.
    pub namespace: String,
    /// The group's name (several groups may share a namespace).
    pub group: String,
    /// This replica's identity (unique among live replicas).
    pub identity: String,
    /// Lease timing (the leader election's).
    pub timing: Timing,
}

/// The Lease name of a member (pure): `<group>-<identity>`, made a valid name.
pub fn lease_name(group: &str, identity: &str) -> String {
    let raw = format!("{group}-{identity}").to_lowercase();
    let mut name: String = raw
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '-' | '.' => c,
            _ => '-',
        })
        .collect();
    if name != raw || name.len() > 200 {
        // Two identities that differ only where the name cannot: told apart by a hash.
        name.truncate(200);
        name = format!(
            "{}-{:08x}",
            name.trim_end_matches(['-', '.']),
            super::assign::hash(&raw) as u32
        );
    }
    name.trim_start_matches(['-', '.']).to_string()
}

/// A member as read from its Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Its identity (the holder).
    pub identity: String,
    /// The view digest it acknowledged.
    pub acknowledged: Option<String>,
    /// Whether its Lease is live (not expired on this replica's clock).
    pub live: bool,
}

/// One replica's reads of the member Leases: when each resourceVersion was first seen.
#[derive(Default)]
struct Reads {
    seen: HashMap<String, (String, Instant)>,
    /// The duration of each other member's Lease.
    durations: HashMap<String, Duration>,
}

impl Reads {
    /// Notes a Lease as a watch delivered it: a new resourceVersion is seen from now on (a
    /// renewal seen early postpones that member's expiry; it never brings it closer).
    fn saw(&mut self, lease: &Lease) {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let entry = self
            .seen
            .entry(name_of(lease))
            .or_insert_with(|| (String::new(), Instant::now()));
        if entry.0 != rv {
            *entry = (rv, Instant::now());
        }
    }

    /// The next moment another member's Lease expires unless it changes.
    fn next_expiry(&self) -> Option<Instant> {
        let now = Instant::now();
        self.durations
            .iter()
            .filter_map(|(name, d)| self.seen.get(name).map(|(_, first)| *first + *d))
            .filter(|e| *e > now)
            .min()
    }

    /// The members in `leases` (as just listed) other than `me`; and the Leases expired for
    /// long (to delete).
    fn observe(
        &mut self,
        leases: &[Lease],
        me: &str,
        default: Duration,
    ) -> (Vec<Observed>, Vec<Lease>) {
        let now = Instant::now();
        let mut seen = HashMap::new();
        let mut durations = HashMap::new();
        let mut members = Vec::new();
        let mut forgotten = Vec::new();
        for lease in leases {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let first = match self.seen.get(&name) {
                Some((old, at)) if *old == rv => *at,
                _ => now,
            };
            seen.insert(name.clone(), (rv, first));
            let spec = lease.spec.clone().unwrap_or_default();
            let Some(identity) = spec.holder_identity.filter(|h| !h.is_empty()) else {
                continue;
            };
            if identity == me {
                continue;
            }
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(default, Duration::from_secs);
            let unchanged = now.saturating_duration_since(first);
            durations.insert(name, duration);
            if unchanged >= duration * FORGET_AFTER {
                forgotten.push(lease.clone());
            }
            members.push(Observed {
                identity,
                acknowledged: lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(VIEW_ANNOTATION).cloned()),
                live: unchanged < duration,
            });
        }
        self.seen = seen;
        self.durations = durations;
        (members, forgotten)
    }
}

/// The view of the live members as read, with `me` (pure).
pub fn view_of(me: &str, others: &[Observed]) -> View {
    View::new(
        others
            .iter()
            .filter(|o| o.live)
            .map(|o| o.identity.as_str())
            .chain([me]),
    )
}

/// How holding the member Lease ended.
#[derive(Debug)]
pub enum Ended {
    /// Stopped normally: the work was drained and the Lease deleted.
    Stopped,
    /// The Lease could not be renewed in time: the work was dropped; the process must start
    /// afresh.
    Lost(String),
}

/// Holds this replica's member Lease and follows the others' until `stop` resolves: adopts
/// each change of the live members, drains and releases the units it no longer works on,
/// acknowledges, settles, and queues the units it starts working on.
pub async fn serve<W: Work>(
    (client, own): (kube::Client, crate::apart::Connect),
    (membership, permit): (Membership, Arc<WritePermit>),
    shards: Arc<Shards>,
    work: Arc<W>,
    stop: impl Future<Output = ()> + Send,
) -> Ended {
    let api: Api<Lease> = Api::namespaced(client, &membership.namespace);
    let name = lease_name(&membership.group, &membership.identity);
    let (ack_tx, ack_rx) = watch::channel(None::<String>);
    let (written_tx, written_rx) = watch::channel(None::<String>);
    let (lost_tx, mut lost_rx) = watch::channel(None::<String>);
    let (joined_tx, mut joined_rx) = watch::channel(false);
    let (halt_tx, halt_rx) = tokio::sync::oneshot::channel::<()>();
    let renewing = renew_apart(
        own,
        (name.clone(), (membership.clone(), permit.clone())),
        (ack_rx, (written_tx, joined_tx), lost_tx),
        halt_rx,
    );
    let mut renewing = std::pin::pin!(renewing);
    tracing::info!(identity = %membership.identity, lease = %format!("{}/{name}", membership.namespace), "joining the members");
    // Reads start once this replica's Lease is written: a member that read the others before
    // it was visible to them could settle a view they never see, alone.
    let follow = async {
        let _ = joined_rx.wait_for(|joined| *joined).await;
        follow(
            &api,
            &membership,
            &shards,
            work.as_ref(),
            &ack_tx,
            written_rx,
        )
        .await
    };
    let mut renewals_ended = false;
    let ended = tokio::select! {
        () = follow => unreachable!("following never ends"),
        () = stop => None,
        lost = lost_rx.wait_for(|l| l.is_some()) => lost.ok().and_then(|l| l.clone()),
        // A write found the permit gone (its deadline passed unnoticed, as after a freeze).
        why = permit.until_lost() => Some(why),
        // The renewals ended without saying they lost the Lease: they could not start.
        done = &mut renewing => {
            renewals_ended = true;
            Some(match done {
                Ok(Ok(())) => "the member Lease's renewals ended".to_string(),
                Ok(Err(why)) => why,
                Err(_) => "the member Lease's thread ended".to_string(),
            })
        }
    };
    let _ = halt_tx.send(());
    if !renewals_ended {
        let _ = renewing.await;
    }
    let before = shards.tenure();
    shards.change(Tenure::resign);
    if let Some(reason) = ended {
        permit.lose(reason.clone());
        // No reconcile starts any more; the caller starts afresh at once, before the Lease can
        // expire on another member's clock (no waiting for the ones in flight).
        tracing::error!(%reason, "lost the member Lease: stopped working");
        return Ended::Lost(reason);
    }
    // Stop working on everything, let the reconciles in flight finish, then leave.
    shards.drain().await;
    work.release(&shards).await;
    count(&shards, work.as_ref(), &before);
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => tracing::info!("left the members: the member Lease is deleted"),
        Err(e) => tracing::warn!(error = %e, "could not delete the member Lease"),
    }
    Ended::Stopped
}

/// The renewals of the member Lease `name` ([`renew`]) on a thread and runtime of their own,
/// with a client `own` makes there: no work on the operator's workers delays one
/// ([`crate::apart`]). They end when they lose the Lease (said on `lost`) or on `halt`; the
/// receiver says when they ended, or why they could not start.
fn renew_apart(
    own: crate::apart::Connect,
    (name, held): (String, (Membership, Arc<WritePermit>)),
    (ack, said, lost): Channels,
    halt: tokio::sync::oneshot::Receiver<()>,
) -> tokio::sync::oneshot::Receiver<Result<(), String>> {
    let namespace = held.0.namespace.clone();
    crate::apart::spawn("kubesync-member-lease", own, move |client| async move {
        let api: Api<Lease> = Api::namespaced(client, &namespace);
        tokio::select! {
            () = renew(api, name, held, ack, said, lost) => {}
            _ = halt => {}
        }
    })
}

/// What the renewals read (the acknowledged view) and say (the view written, that the Lease
/// was written once, and its loss).
type Channels = (
    watch::Receiver<Option<String>>,
    (watch::Sender<Option<String>>, watch::Sender<bool>),
    watch::Sender<Option<String>>,
);

/// Renews the member Lease every retry period, and at once when the acknowledged view
/// changes; reports on `written` what the Lease says now, and on `lost` when no renewal
/// succeeded within the renew deadline.
async fn renew(
    api: Api<Lease>,
    name: String,
    (membership, permit): (Membership, Arc<WritePermit>),
    mut ack: watch::Receiver<Option<String>>,
    (written, joined): (watch::Sender<Option<String>>, watch::Sender<bool>),
    lost: watch::Sender<Option<String>>,
) {
    let timing = &membership.timing;
    let mut last = Instant::now();
    let mut acquired = false;
    // The Lease as last written: renewed without reading it again, unless a write failed.
    let mut held: Option<Lease> = None;
    loop {
        let digest = ack.borrow_and_update().clone();
        let fresh = !acquired;
        let sent = Stamp::now();
        // A write that hangs (an apiserver cut off) ends at the deadline.
        let left = timing.renew_deadline.saturating_sub(last.elapsed());
        let attempt = write(
            &api,
            &name,
            &membership,
            digest.as_deref(),
            fresh,
            &mut held,
        );
        let outcome = tokio::time::timeout(left.max(Duration::from_millis(1)), attempt)
            .await
            .unwrap_or_else(|_| Err(kube::Error::Service("no answer by the deadline".into())));
        match outcome {
            // Accepted after the Lease could have expired on another's clock (a freeze, or
            // requests that did not get through): it proves nothing, the permit is lost.
            Ok(()) if !permit.renewed(sent) => {
                let _ = lost.send(permit.lost());
                return;
            }
            Ok(()) => {
                last = Instant::now();
                acquired = true;
                written.send_replace(digest);
                joined.send_replace(true);
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the member Lease"),
        }
        if last.elapsed() >= timing.renew_deadline {
            let _ = lost.send(Some(format!(
                "the member Lease was not renewed for {} s",
                last.elapsed().as_secs()
            )));
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(timing.retry_period) => {}
            _ = ack.changed() => {}
        }
    }
}

/// Writes the member Lease: held by this replica, renewed now, with the acknowledged view
/// (`fresh`: as at start, with a new acquire time). Every update carries the resourceVersion
/// of `held` (the Lease as last written), or of a fresh read when there is none.
async fn write(
    api: &Api<Lease>,
    name: &str,
    membership: &Membership,
    acknowledged: Option<&str>,
    fresh: bool,
    held: &mut Option<Lease>,
) -> kube::Result<()> {
    let now = MicroTime(jiff::Timestamp::now());
    let seconds = i32::try_from(membership.timing.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let mut lease = match held.take() {
        Some(lease) => lease,
        None => api.get_opt(name).await?.unwrap_or_default(),
    };
    let labels = lease.metadata.labels.get_or_insert_default();
    labels.insert(GROUP_LABEL.into(), membership.group.clone());
    let annotations = lease.metadata.annotations.get_or_insert_default();
    match acknowledged {
        Some(digest) => annotations.insert(VIEW_ANNOTATION.into(), digest.into()),
        None => annotations.remove(VIEW_ANNOTATION),
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if fresh || spec.holder_identity.as_deref() != Some(membership.identity.as_str()) {
        spec.acquire_time = Some(now.clone());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(-1) + 1);
    }
    spec.holder_identity = Some(membership.identity.clone());
    spec.lease_duration_seconds = Some(seconds);
    spec.renew_time = Some(now);
    let written = if lease.metadata.resource_version.is_none() {
        lease.metadata.name = Some(name.to_string());
        api.create(&PostParams::default(), &lease).await?
    } else {
        api.replace(name, &PostParams::default(), &lease).await?
    };
    *held = Some(written);
    Ok(())
}

/// Follows the members: reads their Leases every retry period and whenever one changes in a
/// way that matters (a member or an acknowledgement), and applies what it read.
async fn follow<W: Work>(
    api: &Api<Lease>,
    membership: &Membership,
    shards: &Arc<Shards>,
    work: &W,
    ack: &watch::Sender<Option<String>>,
    mut written: watch::Receiver<Option<String>>,
) {
    let selector = format!("{GROUP_LABEL}={}", membership.group);
    // A failing watch retries with backoff (the periodic list goes on meanwhile).
    let mut changes = Box::pin(
        watcher(api.clone(), watcher::Config::default().labels(&selector)).default_backoff(),
    );
    let mut reads = Reads::default();
    // What mattered of each Lease as last read: (holder, acknowledged view).
    let mut last: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
    let me = membership.identity.as_str();
    loop {
        match api.list(&ListParams::default().labels(&selector)).await {
            Ok(list) => {
                last = list
                    .items
                    .iter()
                    .map(|l| (name_of(l), matters(l)))
                    .collect();
                let (others, forgotten) =
                    reads.observe(&list.items, me, membership.timing.lease_duration);
                apply(shards, work, me, &others, ack, &written).await;
                for lease in forgotten {
                    forget(api, &lease).await;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot list the member Leases"),
        }
        // Until the next period or the moment a member's Lease would expire, or a change that
        // matters (a renewal alone does not, but it postpones that member's expiry).
        let wake = Instant::now() + membership.timing.retry_period;
        loop {
            let until = reads.next_expiry().map_or(wake, |e| e.min(wake));
            tokio::select! {
                () = tokio::time::sleep_until(until.into()) => break,
                _ = written.changed() => break,
                event = changes.next() => match event {
                    Some(Ok(watcher::Event::Apply(l))) => {
                        if last.get(&name_of(&l)) != Some(&matters(&l)) {
                            break;
                        }
                        reads.saw(&l);
                    }
                    Some(Ok(watcher::Event::Delete(_))) => break,
                    Some(_) => {}
                    None => break,
                },
            }
        }
    }
}

fn name_of(lease: &Lease) -> String {
    lease.metadata.name.clone().unwrap_or_default()
}

fn matters(lease: &Lease) -> (Option<String>, Option<String>) {
    (
        lease.spec.as_ref().and_then(|s| s.holder_identity.clone()),
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(VIEW_ANNOTATION).cloned()),
    )
}

/// Applies one read of the members: adopts the live members as the view (draining and
/// releasing what moves away, then acknowledging it), settles it when everyone acknowledged
/// it, and queues the units gained.
async fn apply<W: Work>(
    shards: &Arc<Shards>,
    work: &W,
    me: &str,
    others: &[Observed],
    ack: &watch::Sender<Option<String>>,
    written: &watch::Receiver<Option<String>>,
) {
    let before = shards.tenure();
    let view = view_of(me, others);
    let digest = view.digest().to_string();
    let members = view.len();
    if shards.change(|t| t.adopt(view)) {
        tracing::info!(members, view = %digest, "the members changed");
        shards.drain().await;
        work.release(shards).await;
        ack.send_replace(Some(digest));
    }
    let mine = written.borrow().clone();
    let settled = shards.change(|t| {
        !t.is_settled()
            && t.settle(|who| match who == me {
                true => mine.as_deref(),
                false => others
                    .iter()
                    .find(|o| o.identity == who && o.live)
                    .and_then(|o| o.acknowledged.as_deref()),
            })
    });
    if settled {
        tracing::info!(members, "every member acknowledged the view");
    }
    count(shards, work, &before);
}

/// Counts the units gained and lost since `before`, and queues the gained ones.
fn count<W: Work>(shards: &Shards, work: &W, before: &Tenure) {
    let now = shards.tenure();
    if now == *before {
        return;
    }
    let (mut gained, mut lost) = (0, 0);
    let mut seen = std::collections::HashSet::new();
    let me = now.me();
    for (unit, key) in work.units() {
        let (was, is) = (before.runs(unit.point()), now.runs(unit.point()));
        if is && !was {
            // Another member owned it in the view this one saw before, or this one just
            // joined members that were working.
            let handed_over = match before.current() {
                Some(view) => view.owner(unit.point()) != Some(me),
                None => now.current().is_some_and(|v| v.len() > 1),
            };
            work.wake(key, handed_over);
        }
        if seen.insert(unit.hash) {
            gained += u64::from(is && !was);
            lost += u64::from(was && !is);
        }
    }
    if gained + lost > 0 {
        tracing::info!(gained, lost, "units moved");
        shards.count_moves(gained, lost);
    }
}

/// Deletes a member Lease expired for long, if it did not change since it was read.
async fn forget(api: &Api<Lease>, lease: &Lease) {
    let name = name_of(lease);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: lease.metadata.resource_version.clone(),
            uid: lease.metadata.uid.clone(),
        }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => tracing::info!(lease = %name, "deleted the Lease of a member gone for good"),
        Err(e) => tracing::debug!(lease = %name, error = %e, "a gone member's Lease stays"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    #[test]
    fn lease_names_are_valid_and_distinct() {
        assert_eq!(
            lease_name("kubesync", "kubesync-7d9-abc-1"),
            "kubesync-kubesync-7d9-abc-1"
        );
        let a = lease_name("kubesync", "Host_A-12");
        let b = lease_name("kubesync", "host-a-12");
        assert_ne!(a, b, "told apart by a hash");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(lease_name("g", &"x".repeat(400)).len() <= 253);
    }

    fn lease(name: &str, holder: &str, rv: &str, ack: Option<&str>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                annotations: ack.map(|a| [(VIEW_ANNOTATION.to_string(), a.to_string())].into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(1),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_member_expires_when_its_lease_stops_changing() {
        let mut reads = Reads::default();
        let leases = [
            lease("g-a", "a", "1", Some("d")),
            lease("g-b", "b", "1", None),
            lease("g-me", "me", "1", None),
            lease("g-gone", "", "1", None),
        ];
        let (members, _) = reads.observe(&leases, "me", Duration::from_secs(15));
        assert_eq!(
            members,
            vec![
                Observed {
                    identity: "a".into(),
                    acknowledged: Some("d".into()),
                    live: true
                },
                Observed {
                    identity: "b".into(),
                    acknowledged: None,
                    live: true
                },
            ]
        );
        // Back-date b's first read beyond its duration; a renewed meanwhile.
        reads.seen.get_mut("g-b").expect("read").1 -= Duration::from_secs(2);
        let leases = [
            lease("g-a", "a", "2", Some("d")),
            lease("g-b", "b", "1", None),
        ];
        let (members, forgotten) = reads.observe(&leases, "me", Duration::from_secs(15));
        assert!(members[0].live && !members[1].live);
        assert!(forgotten.is_empty());
        let view = view_of("me", &members);
        assert_eq!(view.members().collect::<Vec<_>>(), ["a", "me"]);
        reads.seen.get_mut("g-b").expect("read").1 -= Duration::from_secs(3);
        let (_, forgotten) = reads.observe(&leases, "me", Duration::from_secs(15));
        assert_eq!(forgotten.len(), 1, "expired for four durations: deleted");
    }
}
