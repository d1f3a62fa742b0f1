//! The record of the copies a declaration made: what kubesync acts on as that declaration's
//! own, known from something no tenant can write.
//!
//! A copy's marks (the `kubesync.io/managed-by` label and the `kubesync.io/owner`
//! annotation) say which declaration it belongs to, but anyone who may patch an object may
//! write them — on an object she may not delete, which kubesync would then delete with its own
//! rights. So the marks only *find* candidates; an object is the declaration's copy only if
//! its record vouches for it: its uid is among those of the objects kubesync created or
//! adopted for it (the apiserver chooses uids, and never changes one), or it was created
//! while the record was [open](Record::open) — copies being created when the process stopped
//! before it could record them. A marked object the record does not vouch for is someone
//! else's: a conflict, never a copy to update, release or delete.
//!
//! The record is kept where the embedder says ([`Ledger`]; kubesync's operator: the
//! declaration's status, which tenants' roles do not grant) and held in memory by the fan-out
//! meanwhile. Its text is compact: 8 bytes of each uid's SHA-256, base64, sorted.
//!
//! A declaration that brings no record (one kept before records existed, or one whose embedder
//! keeps none, as the compat tools' annotations) has its marked objects taken as its copies
//! the first time this process sees it: they are recorded as **seeded**, found by their marks
//! alone. kubesync updates them as the declaration's identity, but never deletes or releases
//! them with its own rights unless the embedder says so ([`Unrecorded`],
//! [`FanOut::remove_unrecorded_as`](super::FanOut::remove_unrecorded_as)): as the identity
//! the declaration acts as, so the apiserver decides, or nobody.

use std::collections::BTreeSet;
use std::sync::Arc;

use base64::Engine as _;
use futures::future::BoxFuture;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use sha2::{Digest as _, Sha256};

use crate::error::Result;
use crate::key::ObjectKey;

/// How much earlier than the record was opened a copy created while it was open may appear
/// to be created: the destination cluster's clock may be behind this process's. An object
/// created this long before the record opened is not vouched for by the opening.
pub const CLOCK_SKEW: SignedDuration = SignedDuration::from_secs(60);

/// The most copies one record holds: about 530 KiB of text. A declaration that would have
/// more gets an error at the destinations beyond it.
pub const MAX_RECORDED: usize = 50_000;

/// The copies one declaration made (or adopted) and has not removed since.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    made: BTreeSet<u64>,
    /// Those of `made` taken on their marks alone ([`Record::seed`]).
    seeded: BTreeSet<u64>,
    open_since: Option<Timestamp>,
}

/// A record's text that is not one ([`Record::decode`]).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the record of copies made is not valid: {0}")]
pub struct RecordError(String);

impl Record {
    /// An empty record: nothing is vouched for.
    pub fn new() -> Self {
        Self::default()
    }

    /// The record whose text is `made` ([`Record::encode`]), open since `open_since`.
    pub fn decode(
        made: &str,
        open_since: Option<Timestamp>,
    ) -> std::result::Result<Self, RecordError> {
        Ok(Self {
            made: digests(made)?,
            seeded: BTreeSet::new(),
            open_since,
        })
    }

    /// The record's text: its digests, sorted, base64.
    pub fn encode(&self) -> String {
        text(&self.made)
    }

    /// The text of the copies it holds that were taken on their marks alone
    /// ([`Record::seed`]), as [`Record::encode`] writes digests.
    pub fn encode_seeded(&self) -> String {
        text(&self.seeded)
    }

    /// The record with the copies of `seeded` (an [`encode_seeded`](Record::encode_seeded)
    /// text) known as taken on their marks alone; those it does not hold are ignored.
    pub fn with_seeded(mut self, seeded: &str) -> std::result::Result<Self, RecordError> {
        self.seeded = digests(seeded)?
            .into_iter()
            .filter(|d| self.made.contains(d))
            .collect();
        Ok(self)
    }

    /// How many copies it holds.
    pub fn len(&self) -> usize {
        self.made.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.made.is_empty()
    }

    /// Whether it holds the object of `uid`.
    pub fn contains(&self, uid: &str) -> bool {
        self.made.contains(&digest(uid))
    }

    /// Whether it holds an object `other` holds too: after a hand-over
    /// ([`FanOutSpec::take_over`](super::FanOutSpec::take_over)), the predecessor's record
    /// still holds copies its successor took, until the predecessor is reconciled again.
    pub fn shares_any(&self, other: &Record) -> bool {
        let (small, large) = match self.made.len() <= other.made.len() {
            true => (&self.made, &other.made),
            false => (&other.made, &self.made),
        };
        small.iter().any(|d| large.contains(d))
    }

    /// Records the object of `uid` as made (or adopted); `false` if it is full
    /// ([`MAX_RECORDED`]) and `uid` is not in it already.
    pub fn insert(&mut self, uid: &str) -> bool {
        let d = digest(uid);
        if self.made.len() >= MAX_RECORDED && !self.made.contains(&d) {
            return false;
        }
        self.made.insert(d);
        true
    }

    /// Records the object of `uid` as taken on its marks alone: held (as
    /// [`insert`](Record::insert) holds it), but not made by kubesync
    /// ([`made_by_kubesync`](Record::made_by_kubesync)) — unless it is held already.
    pub fn seed(&mut self, uid: &str) -> bool {
        let d = digest(uid);
        if self.made.contains(&d) {
            return true;
        }
        if !self.insert(uid) {
            return false;
        }
        self.seeded.insert(d);
        true
    }

    /// Whether it holds the object of `uid` as one kubesync created or adopted, not one taken
    /// on its marks alone ([`Record::seed`]): what kubesync may delete with its own rights.
    pub fn made_by_kubesync(&self, uid: &str) -> bool {
        let d = digest(uid);
        self.made.contains(&d) && !self.seeded.contains(&d)
    }

    /// How many of the copies it holds were taken on their marks alone.
    pub fn seeded(&self) -> usize {
        self.seeded.len()
    }

    /// Forgets the object of `uid` (deleted, or released).
    pub fn remove(&mut self, uid: &str) {
        let d = digest(uid);
        self.made.remove(&d);
        self.seeded.remove(&d);
    }

    /// Forgets every object but those of `uids` (the copies there are).
    pub fn retain<'a>(&mut self, uids: impl IntoIterator<Item = &'a str>) {
        let keep: BTreeSet<u64> = uids.into_iter().map(digest).collect();
        self.made.retain(|d| keep.contains(d));
        self.seeded.retain(|d| keep.contains(d));
    }

    /// Since when copies may have been created that it does not hold yet (`None`: closed).
    pub fn open_since(&self) -> Option<Timestamp> {
        self.open_since
    }

    /// Opens it at `now`: copies are about to be created (kept open if it is).
    pub fn open(&mut self, now: Timestamp) {
        self.open_since.get_or_insert(now);
    }

    /// Closes it: every copy created since it opened is held.
    pub fn close(&mut self) {
        self.open_since = None;
    }

    /// Whether the object of `uid`, created at `created`, is vouched for: held, or created
    /// while the record is open (less [`CLOCK_SKEW`]).
    pub fn vouches(&self, uid: Option<&str>, created: Option<Timestamp>) -> bool {
        let Some(uid) = uid else {
            return false;
        };
        self.contains(uid)
            || self
                .open_since
                .zip(created)
                .is_some_and(|(since, created)| {
                    since
                        .checked_sub(CLOCK_SKEW)
                        .is_ok_and(|earliest| created >= earliest)
                })
    }
}

/// 8 bytes of `uid`'s SHA-256: a tenant cannot choose an object's uid, so it cannot choose one
/// whose digest a record holds.
fn digest(uid: &str) -> u64 {
    let hash = Sha256::digest(uid.as_bytes());
    u64::from_be_bytes(hash[..8].try_into().unwrap_or_default())
}

/// Digests as text: big-endian, sorted, base64.
fn text(digests: &BTreeSet<u64>) -> String {
    let bytes: Vec<u8> = digests.iter().flat_map(|d| d.to_be_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The digests a [`text`] holds.
fn digests(text: &str) -> std::result::Result<BTreeSet<u64>, RecordError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| RecordError(e.to_string()))?;
    if bytes.len() % 8 != 0 {
        return Err(RecordError(format!(
            "{} bytes, not a whole number of 8-byte digests",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_be_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

/// Who removes (deletes or releases) a copy kubesync has no record of making: one its record
/// holds as taken on its marks alone ([`Record::seed`]), or one whose declaration brings no
/// record at all. Marks are written by anyone who may patch an object, so such a copy is never
/// removed with kubesync's own rights unless the embedder says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unrecorded {
    /// With the destination cluster's own credentials: where no tenant can write the marks.
    Own,
    /// As this identity: the apiserver's RBAC decides.
    As(crate::ActAs),
    /// By nobody: it is left in place, for the reason given (for people).
    Leave(String),
}

/// Who removes the unrecorded copy at a destination ([`Unrecorded`]), given the identity the
/// declaration acts as in that cluster (`None`: the cluster's own credentials).
pub type RemoveUnrecorded = Arc<
    dyn Fn(&super::DestinationRef, Option<&crate::ActAs>) -> Unrecorded + Send + Sync + 'static,
>;

/// What one reconcile takes as a declaration's own: the marked objects its record vouches
/// for, or — for a declaration kept before records existed (and an embedder that keeps
/// none), the first time this process sees it — every object carrying both marks, which are
/// then recorded.
#[derive(Clone, Debug, Default)]
pub struct Vouch(Option<Arc<Record>>);

impl Vouch {
    /// The marks alone vouch.
    pub fn marks() -> Self {
        Self(None)
    }

    /// `record` vouches.
    pub fn record(record: Record) -> Self {
        Self(Some(Arc::new(record)))
    }

    /// `record`, shared, vouches.
    pub fn shared(record: Arc<Record>) -> Self {
        Self(Some(record))
    }

    /// Whether the marked object of `uid`, created at `created`, is the declaration's.
    pub fn vouches(&self, uid: Option<&str>, created: Option<Timestamp>) -> bool {
        match &self.0 {
            None => true,
            Some(record) => record.vouches(uid, created),
        }
    }

    /// Whether the object of `uid` is one kubesync created or adopted, by its record (the
    /// marks alone: never; see [`Unrecorded`]).
    pub fn made_by_kubesync(&self, uid: Option<&str>) -> bool {
        match (&self.0, uid) {
            (Some(record), Some(uid)) => record.made_by_kubesync(uid),
            _ => false,
        }
    }

    /// How many more copies the record can hold ([`MAX_RECORDED`]; the marks alone: no bound).
    pub fn room(&self) -> usize {
        match &self.0 {
            None => usize::MAX,
            Some(record) => MAX_RECORDED.saturating_sub(record.len()),
        }
    }

    /// Whether the marked object `meta` is the declaration's.
    pub fn vouches_for(
        &self,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> bool {
        self.vouches(
            meta.uid.as_deref(),
            meta.creation_timestamp.as_ref().map(|t| t.0),
        )
    }
}

/// Where the records outlive the process: the embedder keeps each declaration's record
/// (kubesync's operator, in its status). The fan-out holds it in memory meanwhile, hands it to
/// the embedder in each [`Outcome`](super::Outcome) to keep, and — before it creates a copy
/// the record does not hold yet — [opens](Ledger::open) it where it is kept, so that a copy
/// created just before the process stops is still vouched for after it.
pub trait Ledger: Send + Sync {
    /// Keeps, before the declaration `decl` creates copies, that its record is open since
    /// `since`. A failure stops the creates (their destinations report it).
    fn open<'a>(&'a self, decl: &'a ObjectKey, since: Timestamp) -> BoxFuture<'a, Result<()>>;
}

/// A declaration's record opened where it is kept, once per reconcile, before its first create
/// ([`Ledger::open`]); the reconcile that creates nothing opens nothing.
pub struct Opening {
    ledger: Arc<dyn Ledger>,
    decl: ObjectKey,
    since: Timestamp,
    done: tokio::sync::OnceCell<std::result::Result<(), String>>,
}

impl Opening {
    /// The opening of `decl`'s record in `ledger`, since `since`.
    pub fn new(ledger: Arc<dyn Ledger>, decl: ObjectKey, since: Timestamp) -> Self {
        Self {
            ledger,
            decl,
            since,
            done: tokio::sync::OnceCell::new(),
        }
    }

    /// Opens the record (the first call; later ones say how that ended).
    pub async fn open(&self) -> Result<()> {
        self.done
            .get_or_init(|| async {
                self.ledger
                    .open(&self.decl, self.since)
                    .await
                    .map_err(|e| e.to_string())
            })
            .await
            .clone()
            .map_err(crate::Error::RecordNotOpened)
    }

    /// Since when it is open, if it was opened.
    pub fn opened(&self) -> Option<Timestamp> {
        matches!(self.done.get(), Some(Ok(()))).then_some(self.since)
    }
}

impl std::fmt::Debug for Opening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opening")
            .field("decl", &self.decl)
            .field("since", &self.since)
            .field("done", &self.done.get())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "6f1d2a9c-0b7e-4c1a-9e57-3c2b1a0f9d8e";
    const B: &str = "0a4c8e12-7d3b-4f6a-8c21-9b0e5d7f3a64";

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    #[test]
    fn records_that_hold_one_object_share_it() {
        let (mut old, mut new) = (Record::new(), Record::new());
        old.insert(A);
        old.insert(B);
        assert!(!old.shares_any(&new) && !new.shares_any(&old));
        new.insert("c");
        assert!(!old.shares_any(&new));
        new.insert(B);
        assert!(old.shares_any(&new) && new.shares_any(&old));
        old.retain([A]);
        assert!(
            !old.shares_any(&new),
            "the predecessor forgot what was taken"
        );
    }

    #[test]
    fn a_record_holds_what_it_was_given_and_reads_back_from_its_text() {
        let mut r = Record::new();
        assert!(r.insert(A) && r.insert(B) && r.insert(A));
        assert_eq!(r.len(), 2);
        let text = r.encode();
        assert_eq!(text.len(), 24, "two digests of 8 bytes, base64");
        let back = Record::decode(&text, None).expect("its own text");
        assert!(back.contains(A) && back.contains(B) && !back.contains("another"));
        assert_eq!(back, r);
        r.remove(A);
        assert!(!r.contains(A) && r.contains(B));
        r.insert(A);
        r.retain([A, "not held"]);
        assert!(r.contains(A) && !r.contains(B) && r.len() == 1);
    }

    #[test]
    fn a_copy_taken_on_its_marks_is_held_but_not_made_by_kubesync() {
        let mut r = Record::new();
        assert!(r.seed(A) && r.insert(B));
        assert!(r.contains(A) && r.contains(B));
        assert!(!r.made_by_kubesync(A) && r.made_by_kubesync(B));
        // An update of a seeded copy (written again) does not make it kubesync's.
        r.insert(A);
        assert!(!r.made_by_kubesync(A));
        // Seeding what kubesync made changes nothing.
        r.seed(B);
        assert!(r.made_by_kubesync(B) && r.seeded() == 1);
        let back = Record::decode(&r.encode(), None)
            .and_then(|b| b.with_seeded(&r.encode_seeded()))
            .expect("its own texts");
        assert_eq!(back, r);
        assert!(
            Record::decode(&r.encode(), None)
                .expect("made")
                .made_by_kubesync(A),
            "without its seeded text, a record takes every copy as made"
        );
        r.remove(A);
        assert_eq!(r.seeded(), 0);
        r.seed(A);
        r.retain([B]);
        assert_eq!((r.len(), r.seeded()), (1, 0));
        let vouch = Vouch::record(back);
        assert!(vouch.made_by_kubesync(Some(B)) && !vouch.made_by_kubesync(Some(A)));
        assert!(
            !Vouch::marks().made_by_kubesync(Some(B)),
            "marks make nothing kubesync's"
        );
    }

    #[test]
    fn a_text_that_is_not_a_record_is_refused() {
        assert!(Record::decode("not base64!", None).is_err());
        assert!(Record::decode("AAAA", None).is_err(), "3 bytes");
        assert_eq!(Record::decode("", None).expect("empty"), Record::new());
    }

    #[test]
    fn marks_alone_never_vouch_once_there_is_a_record() {
        let mut r = Record::new();
        r.insert(A);
        let vouch = Vouch::record(r);
        assert!(vouch.vouches(Some(A), None));
        assert!(!vouch.vouches(Some(B), Some(at("2026-12-02T10:00:00Z"))));
        assert!(!vouch.vouches(None, None));
        assert!(Vouch::marks().vouches(Some(B), None));
    }

    #[test]
    fn an_open_record_vouches_only_for_objects_created_since_it_opened() {
        let mut r = Record::new();
        r.open(at("2026-12-02T10:00:00Z"));
        // Opening again keeps the first time.
        r.open(at("2026-12-02T11:00:00Z"));
        assert_eq!(r.open_since(), Some(at("2026-12-02T10:00:00Z")));
        assert!(r.vouches(Some(B), Some(at("2026-12-02T10:00:01Z"))));
        assert!(
            r.vouches(Some(B), Some(at("2026-12-02T09:59:30Z"))),
            "within the clock skew"
        );
        assert!(!r.vouches(Some(B), Some(at("2026-12-02T09:58:59Z"))));
        assert!(!r.vouches(Some(B), None), "no creation time: not vouched");
        r.close();
        assert!(!r.vouches(Some(B), Some(at("2026-12-02T10:00:01Z"))));
    }

    #[test]
    fn a_full_record_takes_no_more() {
        let mut r = Record::new();
        for i in 0..MAX_RECORDED {
            assert!(r.insert(&format!("uid-{i}")));
        }
        assert!(!r.insert("one-more"));
        assert!(r.insert("uid-7"), "one it holds is taken again");
        assert_eq!(r.len(), MAX_RECORDED);
    }
}
