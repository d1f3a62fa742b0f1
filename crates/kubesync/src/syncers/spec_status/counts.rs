//! How a running spec/status sync stands, counted from the runtime's stores (no request):
//! remote objects in its shard, those whose local copy is current, those paused, and how long
//! the one behind longest has been behind. The operator's ResourceSync status and `/metrics`
//! show these; an embedding program can too.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::core::ApiResource;

use super::SpecStatusSync;
use super::freshness::Freshness;
use super::plan::{Marks, is_paused, local_current};
use crate::key::ObjectKey;
use crate::runtime::Context;
use crate::translate::{ObjectName, SuffixTranslator, Translator};

/// A running sync's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Remote objects in its shard (those its names map to a local object).
    pub objects: u32,
    /// Remote objects whose local copy is current (see [`local_current`]).
    pub in_sync: u32,
    /// Objects paused on either side.
    pub paused: u32,
    /// How long the remote object that has been behind longest has been behind (zero when
    /// none is): since its unapplied generation was first seen, or else (a local copy missing,
    /// a deletion not yet carried out locally) since a count first found it behind.
    pub oldest_behind: Duration,
}

/// Counts a running sync from its context's stores; cheap to clone (taken from
/// [`SpecStatusSync::counter`] before the sync starts).
#[derive(Clone)]
pub struct Counter {
    pub(super) resource: ApiResource,
    pub(super) names: SuffixTranslator,
    pub(super) marks: Marks,
    pub(super) freshness: Arc<Freshness>,
    /// Remote objects a count found behind without a first sight of their generation, since
    /// then (kept from one count to the next; only those still behind).
    pub(super) noticed: Arc<Mutex<HashMap<ObjectKey, Instant>>>,
}

impl SpecStatusSync {
    /// Counts this sync's objects from the runtime's stores while it runs (take it before
    /// the sync starts: the syncer moves into its engine). Each counter remembers on its own
    /// since when it found objects behind whose generation was not seen.
    pub fn counter(&self) -> Counter {
        Counter {
            resource: self.config.resource.clone(),
            names: self.config.names.clone(),
            marks: self.config.marks.clone(),
            freshness: self.freshness.clone(),
            noticed: Arc::default(),
        }
    }
}

impl Counter {
    /// The counts now: the remote objects of cluster `remote` and their copies in cluster
    /// `local`, as `ctx`'s stores show them. Also forgets first sightings of remote objects
    /// that are gone (a deleted object's last event does not say it is gone).
    pub fn count(&self, ctx: &Context, remote: &str, local: &str, now: Instant) -> Counts {
        let mut counts = Counts::default();
        let mut oldest = now;
        let mut noticed = self.noticed.lock();
        let mut still_noticed = HashMap::new();
        for object in ctx.list(remote, &self.resource) {
            let source = ObjectName {
                namespace: object.metadata.namespace.clone(),
                name: object.name_any(),
            };
            let Some(target) = self.names.to_target(&source) else {
                continue;
            };
            counts.objects += 1;
            let copy = ctx.get(&ObjectKey::new(
                local,
                &self.resource,
                target.namespace,
                target.name,
            ));
            if is_paused(&object, &self.marks)
                || copy.as_deref().is_some_and(|c| is_paused(c, &self.marks))
            {
                counts.paused += 1;
            }
            if local_current(&object, copy.is_some(), &self.marks) {
                counts.in_sync += 1;
                continue;
            }
            // Keys are built for the objects behind only: this runs at every scrape.
            let key = ObjectKey::for_object(remote, &self.resource, &object);
            let generation = object.metadata.generation.unwrap_or(0);
            let since = match self.freshness.since(&key, generation) {
                Some(seen) => seen,
                None => {
                    let since = noticed.get(&key).copied().unwrap_or(now);
                    still_noticed.insert(key, since);
                    since
                }
            };
            oldest = oldest.min(since);
        }
        *noticed = still_noticed;
        drop(noticed);
        if !self.freshness.is_empty() {
            self.freshness.retain(|k| ctx.get(k).is_some());
        }
        counts.oldest_behind = now.saturating_duration_since(oldest);
        counts
    }
}
