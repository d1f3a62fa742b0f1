//! Step 2 of a reconcile: what the stores show of a declaration's sources and copies, with
//! absences confirmed by a live read before anything is decided on them; and the stores as
//! the plan reads them ([`ContextStores`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams};
use kube::core::ApiResource;

use super::watches::{SelectionRead, SourceRead, WatchSet, Watched};
use crate::error::Result;
use crate::key::ObjectKey;
use crate::runtime::Context;
use crate::runtime::Holding;
use crate::syncers::fan_out::plan::{self, HeldCopy, Stores};
use crate::syncers::fan_out::record::Vouch;
use crate::syncers::fan_out::rules;
use crate::syncers::fan_out::rules::CopyPrint;
use crate::syncers::fan_out::seen::Seen;
use crate::syncers::fan_out::spec::{
    Declaration, DestinationRef, Selection, SourceRef, SourceUnreachable,
};

/// What a reconcile observed ([`observe`]).
pub(super) enum Observed {
    /// A watch has not listed, or a source's absence is not confirmed yet: nothing is
    /// decided (the declaration is woken when that changes).
    NotReady,
    /// The facts the plan decides on.
    Ready(Facts),
}

/// A declaration's sources and copies, as the stores show them.
pub(super) struct Facts {
    /// The source objects (none while the declaration goes or is refused).
    pub sources: Vec<Arc<DynamicObject>>,
    /// Its copies, by destination, as their store holds them.
    pub owned: BTreeMap<DestinationRef, HeldCopy>,
    /// Clusters that cannot be checked now.
    pub unreachable: BTreeSet<String>,
    /// The source's cluster cannot be read now: the sources are unknown (not gone).
    pub source_unreachable: Option<SourceUnreachable>,
}

/// What the stores show of `decl`'s sources and copies, once its watches have listed; a
/// source (or a selection's member) the store no longer shows while copies of it exist is
/// confirmed gone by a live read first (the store may be a moment behind), else
/// [`Observed::NotReady`] and its event is awaited.
pub(super) async fn observe(
    ctx: &Context,
    local: &str,
    (decl, vouch): (&Declaration, &Vouch),
    watched: &Watched,
) -> Result<Observed> {
    if !watched.ready {
        return Ok(Observed::NotReady);
    }
    let spec = &decl.spec;
    let ar = &spec.source.resource;
    let source_key = &watched.source_key;
    // A source that cannot be read is unknown: its store is neither read nor confirmed
    // against (the plan keeps every copy as it is).
    let unknown = watched.source_unreachable.is_some();
    let stored: Vec<Arc<DynamicObject>> = match (&spec.source.select, watched.source) {
        _ if unknown => Vec::new(),
        (None, Some(_)) => match &watched.held {
            Some(SourceRead::Held(source)) => vec![source.clone()],
            Some(SourceRead::Absent) | None => Vec::new(),
            Some(SourceRead::Coming) => {
                tracing::debug!(declaration = %decl.key, "the source's newer version is on its way; waiting for its event");
                return Ok(Observed::NotReady);
            }
        },
        (None, None) => ctx.get(source_key).into_iter().collect(),
        (Some(_), Some(_)) => match &watched.selected {
            Some(SelectionRead::Held(members)) => members.clone(),
            None => Vec::new(),
            Some(SelectionRead::Coming) => {
                tracing::debug!(declaration = %decl.key, "a member's newer version is on its way; waiting for its event");
                return Ok(Observed::NotReady);
            }
        },
        (Some(_), None) => Vec::new(),
    };
    let source_in_store = !stored.is_empty();
    let sources: Vec<Arc<DynamicObject>> = stored
        .into_iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none() && !decl.reads_no_source())
        .collect();
    let owned = held_copies(ctx, (decl, vouch), watched);
    let confirmed = match &spec.source.select {
        _ if unknown => true,
        None => {
            !plan::must_confirm_source_gone(source_in_store, decl.reads_no_source(), owned.len())
                || ctx.confirm_absent(source_key, ar).await?
        }
        Some(selection) => {
            decl.reads_no_source()
                || confirm_unselected(ctx, local, &spec.source, selection, &sources, &owned).await?
        }
    };
    if !confirmed {
        tracing::debug!(declaration = %decl.key, "source not in the store yet; waiting for its event");
        return Ok(Observed::NotReady);
    }
    Ok(Observed::Ready(Facts {
        sources,
        owned,
        unreachable: watched.errors.iter().map(|w| w.cluster.clone()).collect(),
        source_unreachable: watched.source_unreachable.clone(),
    }))
}

/// The copies of `decl` its copies' watches hold: the objects that carry its marks and that
/// `vouch` takes as its own (a marked object it does not is someone else's, left to the plan
/// as such), by destination.
fn held_copies(
    ctx: &Context,
    (decl, vouch): (&Declaration, &Vouch),
    watched: &Watched,
) -> BTreeMap<DestinationRef, HeldCopy> {
    let ar = &decl.spec.source.resource;
    let mut owned: BTreeMap<DestinationRef, HeldCopy> = BTreeMap::new();
    for c in &watched.clusters {
        for held in ctx.list_labelled_held(c, ar, rules::MANAGED_BY, &decl.owner.uid) {
            let (namespace, name, copy) = match (&held, held.summary::<CopyPrint>()) {
                (_, Some(print)) if print.owned_by(&decl.owner) => (
                    print.namespace().unwrap_or_default().to_string(),
                    print.name().to_string(),
                    HeldCopy::Print(print),
                ),
                (Holding::Object(obj), _) if rules::owned_by(obj, &decl.owner) => (
                    obj.namespace().unwrap_or_default(),
                    obj.name_any(),
                    HeldCopy::Full(Arc::clone(obj)),
                ),
                _ => continue,
            };
            if !copy.vouched(vouch) {
                continue;
            }
            owned.insert(DestinationRef::new(c.clone(), namespace, name), copy);
        }
    }
    owned
}

/// A selection's copies whose source the store does not show selected are removed by the
/// plan. Whether that is so is confirmed first by a live list of the selected sources (the
/// store may be a moment behind the cluster): `false` if some such source is still there
/// and selected (then its event is awaited). A failed list is an error, never "gone". The
/// list is read where the sources live.
async fn confirm_unselected(
    ctx: &Context,
    local: &str,
    source: &SourceRef,
    selection: &Selection,
    sources: &[Arc<DynamicObject>],
    owned: &BTreeMap<DestinationRef, HeldCopy>,
) -> Result<bool> {
    let (ar, ns) = (&source.resource, &source.namespace);
    let mark = |name: &str| rules::source_mark(ar, ns, name);
    let present: HashSet<String> = sources.iter().map(|s| mark(&s.name_any())).collect();
    let missing: HashSet<&str> = owned
        .values()
        .filter_map(|c| c.annotation(rules::SOURCE))
        .filter(|m| !present.contains(*m))
        .collect();
    if missing.is_empty() {
        return Ok(true);
    }
    let live = ctx
        .api(source.cluster_or(local), ar, source.namespace())?
        .list_metadata(&ListParams::default().labels(&selection.label_selector()))
        .await?;
    Ok(!live.items.iter().any(|o| {
        o.metadata.deletion_timestamp.is_none()
            && selection.selects_meta(&o.metadata)
            && missing.contains(mark(o.metadata.name.as_deref().unwrap_or_default()).as_str())
    }))
}

/// Copies read one by one up to this many; more are listed (by their declaration's mark).
const READ_ONE_BY_ONE: usize = 16;

/// About how many bytes of copies one page of such a list may hold (a page of large copies
/// is shorter): what is read is held as the stores held copies before prints (each value
/// over 1 KiB as a digest), page by page.
const READ_PAGE_BYTES: usize = 4 << 20;

/// The most copies one page of such a list asks for.
const READ_PAGE_MAX: usize = 500;

/// Reads the copies `unread` of `decl` live and holds them in full in `owned` (as their store
/// would have before prints: [`rules::hold`], large values as digests), for a plan that must
/// see them so; a copy no longer there, or no longer the declaration's, leaves `owned` (the
/// store will show why). A few are read one by one; more with a list of the declaration's
/// copies in each cluster (by their `managed-by` label), in pages of about
/// [`READ_PAGE_BYTES`] by the prints' sizes (a copy amplified a hundred times is never held a
/// hundred times at once), each copy held as it comes.
pub(super) async fn read_in_full(
    ctx: &Context,
    (decl, vouch): (&Declaration, &Vouch),
    owned: &mut BTreeMap<DestinationRef, HeldCopy>,
    unread: &BTreeSet<DestinationRef>,
) -> Result<()> {
    let ar = &decl.spec.source.resource;
    let hold = |mut copy: DynamicObject| {
        if copy.types.is_none() {
            copy.types = Some(kube::core::TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            });
        }
        rules::hold(&mut copy);
        copy
    };
    let mut found: BTreeMap<DestinationRef, DynamicObject> = BTreeMap::new();
    if unread.len() <= READ_ONE_BY_ONE {
        for at in unread {
            let api = ctx.api(&at.cluster, ar, at.namespace())?;
            if let Some(copy) = api.get_opt(&at.name).await? {
                found.insert(at.clone(), hold(copy));
            }
        }
    } else {
        let largest = unread
            .iter()
            .filter_map(|at| match owned.get(at) {
                Some(HeldCopy::Print(p)) => Some(p.size()),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let page = (READ_PAGE_BYTES / largest.max(1)).clamp(1, READ_PAGE_MAX);
        let clusters: BTreeSet<&str> = unread.iter().map(|at| at.cluster.as_str()).collect();
        let selector = format!("{}={}", rules::MANAGED_BY, decl.owner.uid);
        for cluster in clusters {
            let api = ctx.api(cluster, ar, None)?;
            let mut params = ListParams::default().labels(&selector).limit(page as u32);
            loop {
                let listed = api.list(&params).await?;
                for copy in listed.items {
                    let at = DestinationRef::new(
                        cluster,
                        copy.namespace().unwrap_or_default(),
                        copy.name_any(),
                    );
                    if unread.contains(&at) {
                        found.insert(at, hold(copy));
                    }
                }
                match listed.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(next) => params = params.continue_token(&next),
                    None => break,
                }
            }
        }
    }
    for at in unread {
        match found.remove(at) {
            Some(copy)
                if rules::owned_by(&copy, &decl.owner) && vouch.vouches_for(&copy.metadata) =>
            {
                owned.insert(at.clone(), HeldCopy::Full(Arc::new(copy)));
            }
            // Gone, or no longer this declaration's (or one its record does not vouch for).
            _ => {
                owned.remove(at);
            }
        }
    }
    Ok(())
}

/// The runtime's stores, as the plan reads them.
pub(super) struct ContextStores<'a> {
    ctx: &'a Context,
    resource: &'a ApiResource,
    namespace_type: &'a ApiResource,
    /// First sightings of the versions copies depend on.
    seen: &'a Seen,
    /// Consent objects by (cluster, namespace), gathered once per reconcile.
    consents: HashMap<(String, String), Vec<Arc<DynamicObject>>>,
}

impl<'a> ContextStores<'a> {
    /// The stores as `decl`'s plan reads them; the consent objects of `clusters` gathered
    /// once.
    pub(super) fn new(
        ctx: &'a Context,
        decl: &'a Declaration,
        watches: &'a WatchSet,
        clusters: &[String],
    ) -> Self {
        let mut consents: HashMap<(String, String), Vec<Arc<DynamicObject>>> = HashMap::new();
        if let Some(consent) = &decl.spec.consent {
            for c in clusters {
                for obj in ctx.list(c, &consent.resource) {
                    let key = (c.clone(), obj.namespace().unwrap_or_default());
                    consents.entry(key).or_default().push(obj);
                }
            }
        }
        Self {
            ctx,
            resource: &decl.spec.source.resource,
            namespace_type: watches.namespace_type(),
            seen: watches.first_sightings(),
            consents,
        }
    }
}

impl Stores for ContextStores<'_> {
    fn namespaces(&self, cluster: &str) -> Vec<Arc<DynamicObject>> {
        self.ctx.list_metadata(cluster, self.namespace_type)
    }

    fn has_namespace(&self, cluster: &str, namespace: &str) -> bool {
        let key = ObjectKey::new(cluster, self.namespace_type, None, namespace);
        self.ctx.holds(&key)
    }

    /// The object at `at` as the stores show it: metadata only (the declaration's own copies
    /// are in [`Facts::owned`], as their store holds them).
    fn object(&self, at: &DestinationRef) -> Option<Arc<DynamicObject>> {
        self.ctx.get_metadata(&at.key(self.resource))
    }

    fn consents(&self, cluster: &str, namespace: &str) -> Vec<Arc<DynamicObject>> {
        self.consents
            .get(&(cluster.to_string(), namespace.to_string()))
            .cloned()
            .unwrap_or_default()
    }

    fn first_seen(&self, key: &ObjectKey, version: Option<&str>) -> Option<Instant> {
        match version {
            Some(v) => self.seen.since(key, v),
            None => self.seen.changed(key),
        }
    }

    fn namespace_seen(&self, cluster: &str, namespace: &str) -> Option<Instant> {
        let key = ObjectKey::new(cluster, self.namespace_type, None, namespace);
        self.seen.changed(&key)
    }
}
