//! Who works on what (pure): units of work assigned to the live members by rendezvous
//! hashing, and the rule that keeps two members from ever working on one unit at once while
//! membership changes.
//!
//! **Assignment.** A unit belongs to one of [`BUCKETS`] buckets, fixed by its id
//! ([`bucket_of`]); the copies it writes carry its bucket (the shard label), so a member
//! watches only the copies of its buckets. Every member computes the owner of a bucket from
//! the same inputs — the bucket and the sorted list of live members — so they agree without
//! talking: the owner is the member with the highest score `mix(point(bucket) ^
//! hash(member))` (rendezvous, or highest-random-weight, hashing). A bucket, and so a unit,
//! moves only when the members change, and then only to a member that joined or from one
//! that left: about `units / members` move per change. With 16 384 buckets, a member's share
//! spreads by 1.2 % at three members, 2.6 % at ten and 5.9 % at fifty (one standard deviation,
//! with 100 000 units; the simulation test checks 3.5 of them).
//!
//! **Handover** ([`Tenure`]). Members see a change at different moments, so for a while they
//! may disagree on the owner. A member *adopts* a view (a member list), stops and drains the
//! units it does not own under it, and only then *acknowledges* the view (in its member
//! Lease). A view is *settled* once every member in it acknowledged it. A member works on a
//! unit only while it has owned the unit in every view it adopted since the last view it saw
//! settled (and in that one): whoever owned a unit before had to acknowledge a view in which
//! it does not own it — so it had stopped — before the view could settle. A member missing
//! from a view is either gone (it drained before it left) or its Lease expired, and a member
//! that cannot renew its Lease stops working before the Lease can expire on anyone's clock.
//! A member reads the others only after its own Lease is written, so of two that join at once
//! the later reader sees the earlier. (With rendezvous hashing a unit changes owner only to a
//! member that joined or from one that left, so the chain of views since the last settled one
//! matters only if that were not so: it keeps the rule safe whatever the assignment.)
//! The hashes, the mixing and the digest are fixed ([`PROTOCOL`]): replicas of different
//! versions that computed differently would never acknowledge each other's views, so nothing
//! would move between them rather than move twice.

use sha2::{Digest, Sha256};

/// The version of the assignment's hashing and digest, part of every view's digest.
pub const PROTOCOL: &str = "kubesync-shards/v2";

/// How many buckets units are spread over (a power of two: a bucket is the top bits of the
/// unit's hash).
pub const BUCKETS: u16 = 1 << 14;

/// The bucket of the unit whose [`hash`] is `unit`: its top 14 bits.
pub fn bucket_of(unit: u64) -> u16 {
    (unit >> (64 - BUCKETS.trailing_zeros())) as u16
}

/// The point a bucket is assigned by: a fixed [`hash`] of its number.
pub fn point(bucket: u16) -> u64 {
    static POINTS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    POINTS.get_or_init(|| {
        (0..BUCKETS)
            .map(|b| hash(&format!("kubesync-bucket/{b}")))
            .collect()
    })[usize::from(bucket)]
}

/// A stable 64-bit hash of a text (the first 8 bytes of its SHA-256): the same on every
/// machine, build and version.
pub fn hash(text: &str) -> u64 {
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The finalizer of MurmurHash3 (a bijection that spreads every input bit over the output).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// The members one assignment is computed over: sorted, each with its hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    members: Vec<(String, u64)>,
    digest: String,
}

impl View {
    /// The view of these members (order and repeats do not matter).
    pub fn new<S: AsRef<str>>(members: impl IntoIterator<Item = S>) -> Self {
        let mut names: Vec<String> = members
            .into_iter()
            .map(|m| m.as_ref().to_string())
            .collect();
        names.sort();
        names.dedup();
        let mut text = String::from(PROTOCOL);
        for name in &names {
            text.push('\n');
            text.push_str(name);
        }
        let digest = format!("{:016x}", hash(&text));
        let members = names
            .into_iter()
            .map(|n| {
                let seed = mix(hash(&n));
                (n, seed)
            })
            .collect();
        Self { members, digest }
    }

    /// The member names, sorted.
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|(name, _)| name.as_str())
    }

    /// How many members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Whether `member` is in it.
    pub fn contains(&self, member: &str) -> bool {
        self.members
            .binary_search_by(|(name, _)| name.as_str().cmp(member))
            .is_ok()
    }

    /// A short text that names exactly this member list (and [`PROTOCOL`]): what members
    /// acknowledge.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The owner of the bucket whose [`point`] is `unit` (of a unit: its bucket's): the member
    /// of highest score (ties, which need equal 64-bit scores, go to the first name). `None`
    /// only without members.
    pub fn owner(&self, unit: u64) -> Option<&str> {
        let mut best: Option<(u64, &str)> = None;
        for (name, seed) in &self.members {
            let score = mix(unit ^ seed);
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, name));
            }
        }
        best.map(|(_, name)| name)
    }
}

/// The longest chain of adopted, unsettled views a member keeps; one more change makes it
/// wait for a settled view before working on anything (see [`Tenure::adopt`]).
const MAX_UNSETTLED: usize = 32;

/// One member's right to work: the last view it saw settled and the views it adopted since.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenure {
    me: String,
    /// The last view seen settled (`None` before the first, or after too many changes).
    settled: Option<View>,
    /// The views adopted since, oldest first; the last is the current one.
    since: Vec<View>,
}

impl Tenure {
    /// A member that has seen no view yet (it works on nothing).
    pub fn new(me: impl Into<String>) -> Self {
        Self {
            me: me.into(),
            settled: None,
            since: Vec::new(),
        }
    }

    /// This member's name.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// The view adopted last (`None` before the first).
    pub fn current(&self) -> Option<&View> {
        self.since.last().or(self.settled.as_ref())
    }

    /// Whether it works at all: it saw a settled view and did not resign since.
    pub fn is_active(&self) -> bool {
        self.settled.is_some()
    }

    /// Whether the current view is settled (the member works on all it owns under it).
    pub fn is_settled(&self) -> bool {
        self.settled.is_some() && self.since.is_empty()
    }

    /// Adopts `view` (the live members as just observed): whether it differs from the current
    /// one. Afterwards the member works on no unit it does not own under `view`; it
    /// acknowledges `view` once it has drained those.
    pub fn adopt(&mut self, view: View) -> bool {
        if self.current() == Some(&view) {
            return false;
        }
        self.since.push(view);
        if self.since.len() > MAX_UNSETTLED {
            // Forgetting views would allow more, never less: wait for a settled one instead.
            self.settled = None;
            self.since.drain(..self.since.len() - 1);
        }
        true
    }

    /// Records that every member of the current view acknowledged it (`acknowledged(member)`
    /// gives the digest a member acknowledged last): whether it became settled now.
    pub fn settle<'a>(&mut self, acknowledged: impl Fn(&str) -> Option<&'a str>) -> bool {
        let Some(current) = self.since.last() else {
            return false;
        };
        let everyone = current
            .members()
            .all(|m| acknowledged(m) == Some(current.digest()));
        if everyone {
            self.settled = self.since.pop();
            self.since.clear();
        }
        everyone
    }

    /// Whether this member may work on the unit whose bucket's [`point`] is `unit` now: it owns it in the
    /// last settled view and in every view adopted since.
    pub fn runs(&self, unit: u64) -> bool {
        let Some(settled) = &self.settled else {
            return false;
        };
        std::iter::once(settled)
            .chain(&self.since)
            .all(|v| v.owner(unit) == Some(self.me.as_str()))
    }

    /// Whether it owns the unit under the current view (it may have to wait for the view to
    /// settle before it works on it).
    pub fn owns(&self, unit: u64) -> bool {
        self.current()
            .is_some_and(|v| v.owner(unit) == Some(self.me.as_str()))
    }

    /// Stops working on everything (a member leaving, or one that lost its Lease).
    pub fn resign(&mut self) {
        self.settled = None;
        self.since.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (the simulation must replay the same steps).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix(self.0)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn member(i: usize) -> String {
        format!("kubesync-{i:x}-{}", 4000 + i * 7)
    }

    #[test]
    fn hashes_are_fixed() {
        // The same on every machine and version: members of different builds must agree.
        assert_eq!(hash(""), 0xe3b0_c442_98fc_1c14);
        assert_eq!(
            View::new(["b", "a", "a"]).digest(),
            View::new(["a", "b"]).digest()
        );
        assert_ne!(View::new(["a"]).digest(), View::new(["a", "b"]).digest());
        assert_eq!(View::new(["a", "b"]).len(), 2);
        assert!(View::new(Vec::<String>::new()).owner(1).is_none());
    }

    /// 100 000 units as members join one by one up to 50 and then leave in a shuffled order:
    /// at every step each bucket (so each unit) has exactly one owner, a member of the step;
    /// a change moves only the buckets of the member that joined or left, with about units /
    /// members units in them; and the members' shares stay even. Rendezvous hashing spreads
    /// the buckets binomially, and the units over the buckets too: a share's relative spread
    /// is `sd = sqrt((n - 1) / buckets + n / units)` with `n` members (1.2 % at three, 2.6 %
    /// at ten, 5.9 % at fifty); every share, and every change's moves, stay within 3.5 sd of
    /// even (4.3 %, 8.9 %, 21 %). The owners are followed incrementally (a
    /// join takes the buckets where the newcomer scores highest; a leave hands each of its
    /// buckets to its next best member) and checked against [`View::owner`] on every 7th
    /// bucket at every step.
    #[test]
    fn simulation_one_owner_and_few_moves() {
        const UNITS: usize = 100_000;
        let buckets = usize::from(BUCKETS);
        let mut in_bucket = vec![0usize; buckets];
        for i in 0..UNITS {
            let unit = hash(&format!("objectsync/team-{}/sync-{i}", i % 97));
            in_bucket[usize::from(bucket_of(unit))] += 1;
        }
        let points: Vec<u64> = (0..BUCKETS).map(point).collect();
        let names: Vec<String> = (0..50).map(member).collect();
        let seeds: Vec<u64> = names.iter().map(|n| mix(hash(n))).collect();
        let mut rng = Rng(7);
        let mut changes: Vec<(usize, bool)> = (0..50).map(|m| (m, true)).collect();
        let mut leaving: Vec<usize> = (0..50).collect();
        while leaving.len() > 1 {
            changes.push((leaving.remove(rng.below(leaving.len())), false));
        }
        let mut live: Vec<usize> = Vec::new();
        // Each bucket's owner (an index into `names`) and its score.
        let mut owner: Vec<Option<(usize, u64)>> = vec![None; buckets];
        for (m, joins) in changes {
            let before = live.len();
            let mut moved = 0usize;
            if joins {
                live.push(m);
                for (b, o) in owner.iter_mut().enumerate() {
                    let score = mix(points[b] ^ seeds[m]);
                    if o.is_none_or(|(_, best)| score > best) {
                        moved += if o.is_some() { in_bucket[b] } else { 0 };
                        *o = Some((m, score));
                    }
                }
            } else {
                live.retain(|l| *l != m);
                for (b, o) in owner.iter_mut().enumerate() {
                    if o.is_some_and(|(was, _)| was == m) {
                        moved += in_bucket[b];
                        *o = live
                            .iter()
                            .map(|&l| (l, mix(points[b] ^ seeds[l])))
                            .max_by_key(|(_, s)| *s);
                    }
                }
            }
            let view = View::new(live.iter().map(|&l| &names[l]));
            let n = live.len();
            let mut shares = vec![0usize; names.len()];
            for (b, o) in owner.iter().enumerate() {
                let (who, _) = o.expect("every bucket has an owner");
                assert!(live.contains(&who), "{} owns a bucket and left", names[who]);
                shares[who] += in_bucket[b];
                if b % 7 == 0 {
                    assert_eq!(view.owner(points[b]), Some(names[who].as_str()));
                }
            }
            let within = |count: usize, members: usize| {
                let sd = ((members - 1) as f64 / f64::from(BUCKETS)
                    + members as f64 / UNITS as f64)
                    .sqrt();
                let fair = (UNITS / members) as f64;
                (count as f64 - fair).abs() <= 3.5 * sd * fair
            };
            for &l in &live {
                assert!(
                    within(shares[l], n),
                    "{n} members: {} owns {}, a fair share is {}",
                    names[l],
                    shares[l],
                    UNITS / n
                );
            }
            if before > 0 {
                let members = n.max(before);
                assert!(
                    within(moved, members),
                    "{before} → {n} members: {moved} units moved, about {} expected",
                    UNITS / members
                );
            }
        }
    }

    #[test]
    fn buckets_are_fixed_and_spread() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(point(0), hash("kubesync-bucket/0"));
        // 100 000 unit ids fill every bucket within a few units of even.
        let mut in_bucket = vec![0usize; usize::from(BUCKETS)];
        for i in 0..100_000 {
            in_bucket[usize::from(bucket_of(hash(&format!("objectsync/ns/s-{i}"))))] += 1;
        }
        let max = in_bucket.iter().max().copied().unwrap_or_default();
        assert!(
            max <= 25,
            "a bucket with {max} of 100 000 units (6.1 on average)"
        );
    }

    /// Members that see membership changes at different moments, acknowledge views late and
    /// settle on stale reads: replayed over many seeds, no unit is ever worked on by two
    /// members at once, and once everyone has caught up every unit is worked on again.
    #[test]
    fn handover_never_runs_a_unit_twice() {
        const UNITS: usize = 300;
        let units: Vec<u64> = (0..UNITS).map(|i| hash(&format!("u{i}"))).collect();
        // Unit-steps with a worker, of all: the replay must spend time working, not waiting.
        let (mut worked, mut all) = (0usize, 0usize);
        for seed in 0..40 {
            let mut rng = Rng(seed);
            let names: Vec<String> = (0..8).map(member).collect();
            // The live set (as Leases say), each member's tenure and acknowledged digest.
            let mut live: Vec<bool> = (0..8).map(|i| i < 3).collect();
            let mut tenures: Vec<Tenure> = names.iter().map(Tenure::new).collect();
            let mut acks: Vec<Option<String>> = vec![None; 8];
            // What each member last read of the live set and of the others' acknowledgements:
            // nothing yet for those that join (a member reads only after its Lease is written).
            type Read = Option<(Vec<bool>, Vec<Option<String>>)>;
            let mut reads: Vec<Read> = vec![Some((live.clone(), acks.clone())); 8];
            for _ in 0..600 {
                let m = rng.below(8);
                match (rng.below(40), reads[m].clone()) {
                    // Membership changes: a graceful leave drains first (its tenure resigns).
                    (0, _) => {
                        live[m] = !live[m];
                        reads[m] = None;
                        if !live[m] {
                            tenures[m].resign();
                            acks[m] = None;
                        }
                    }
                    // A member reads the Leases (what it reads may be used later).
                    (1..=13, _) if live[m] => reads[m] = Some((live.clone(), acks.clone())),
                    // It adopts the live set it read, drains, and acknowledges.
                    (14..=26, Some((members, _))) if live[m] => {
                        let view =
                            View::new((0..8).filter(|&i| members[i] || i == m).map(|i| &names[i]));
                        tenures[m].adopt(view);
                        acks[m] = tenures[m].current().map(|v| v.digest().to_string());
                    }
                    // It settles on the acknowledgements it read (its own is current).
                    (27.., Some((_, read))) if live[m] => {
                        let mine = acks[m].clone();
                        tenures[m].settle(|who| {
                            let i = names.iter().position(|n| n == who)?;
                            match i == m {
                                true => mine.as_deref(),
                                false => read[i].as_deref(),
                            }
                        });
                    }
                    _ => {}
                }
                for u in &units {
                    let running = (0..8).filter(|&i| live[i] && tenures[i].runs(*u)).count();
                    assert!(
                        running <= 1,
                        "seed {seed}: a unit runs on {running} members"
                    );
                    worked += running;
                    all += 1;
                }
            }
            // Everyone catches up: read, adopt, acknowledge, read, settle.
            for m in (0..8).filter(|&m| live[m]) {
                let view = View::new((0..8).filter(|&i| live[i]).map(|i| &names[i]));
                tenures[m].adopt(view);
                acks[m] = tenures[m].current().map(|v| v.digest().to_string());
            }
            for m in (0..8).filter(|&m| live[m]) {
                let acks = acks.clone();
                tenures[m].settle(|who| {
                    let i = names.iter().position(|n| n == who)?;
                    acks[i].as_deref()
                });
            }
            if live.iter().any(|l| *l) {
                for u in &units {
                    let running = (0..8).filter(|&i| live[i] && tenures[i].runs(*u)).count();
                    assert_eq!(running, 1, "seed {seed}: settled, a unit has no worker");
                }
            }
        }
        assert!(
            worked * 4 > all,
            "units had workers in {worked} of {all} unit-steps"
        );
    }

    #[test]
    fn a_member_works_only_on_what_it_kept_since_the_last_settled_view() {
        let unit = (0..)
            .map(|i| hash(&format!("unit-{i}")))
            .find(|u| {
                View::new(["a", "b"]).owner(*u) == Some("a")
                    && View::new(["a"]).owner(*u) == Some("a")
            })
            .expect("a unit a owns");
        let mut a = Tenure::new("a");
        assert!(!a.runs(unit), "nothing before a settled view");
        a.adopt(View::new(["a", "b"]));
        assert!(a.owns(unit) && !a.runs(unit), "owned, but not settled yet");
        let ab = View::new(["a", "b"]);
        assert!(!a.settle(|m| (m == "a").then_some(ab.digest())));
        assert!(a.settle(|_| Some(ab.digest())));
        assert!(a.runs(unit) && a.is_settled());
        // b leaves: a keeps what it owned throughout, without waiting.
        assert!(a.adopt(View::new(["a"])));
        assert!(
            !a.adopt(View::new(["a"])),
            "the same view again is no change"
        );
        assert!(a.runs(unit) && !a.is_settled());
        a.resign();
        assert!(!a.runs(unit));
    }
}
