//! The watch set's sources: the watch of a declaration's sources where they live, its
//! health (in another cluster, a source that cannot be read is unknown, not gone), and the
//! sources held in full — a single source, or a selection's members — each read live once
//! per version.

use std::collections::HashSet;
use std::sync::Arc;

use kube::api::{DynamicObject, ListParams};
use kube::core::ApiResource;

use super::{SelectionRead, SourceRead, WatchSet, Watched};
use crate::error::Result;
use crate::key::ObjectKey;
use crate::runtime::{Context, Watch, WatchId};
use crate::syncers::fan_out::index::{EventOf, WatchKey};
use crate::syncers::fan_out::pipeline::needs::Needs;
use crate::syncers::fan_out::rules;
use crate::syncers::fan_out::spec::{Selection, SourceUnreachable, WatchError};

/// A selection's members missing in full are read one by one up to this many; more are
/// listed (by the selection's label selector), page by page.
const READ_ONE_BY_ONE: usize = 16;

/// The first page of such a list asks for this many objects; the next ones for about
/// [`READ_PAGE_BYTES`] by the sizes the pages before showed (a selection of large objects
/// is read a few at a time).
const FIRST_PAGE: usize = 4;

/// About how many bytes of sources one page of such a list may hold.
const READ_PAGE_BYTES: usize = 2 << 20;

/// The most objects one page of such a list asks for.
const READ_PAGE_MAX: usize = 250;

impl WatchSet {
    /// The watch of a declaration's sources, in their cluster (where they live): the source
    /// namespace's objects of its kind, shared by every declaration copying from there
    /// ([`Scope::Sources`](crate::syncers::fan_out::index::Scope::Sources)), however many
    /// selectors they use. It receives metadata only: no selector can name a set of names,
    /// and a watch of full objects per selector would hold the same objects once per
    /// selector (ten selectors over the same Secrets, ten times their bytes) — a namespace of
    /// Helm releases is hundreds of MiB to send and parse before the first copy. A version
    /// of an object some declaration copies (its one object, or a member of its selection)
    /// is read live once and held in full ([`WatchSet::source_in_full`],
    /// [`WatchSet::selected_in_full`]), the others stay metadata: memory follows what is
    /// copied.
    fn ensure_source_watch(&self, ctx: &Context, needs: &Needs) -> Result<WatchId> {
        let (ar, sources, cluster) = (&needs.resource, &needs.source_scope, &needs.source_cluster);
        let index = self.index.clone();
        self.ensure_watch(
            ctx,
            WatchKey::scoped(cluster, ar, sources.clone()),
            EventOf::Source,
            &needs.key,
            || {
                let watch = Watch::dynamic(ar.clone());
                // The source namespace (a cluster-scoped kind has none).
                let watch = match needs.source_namespace.as_deref() {
                    Some(ns) => watch.namespace(ns),
                    None => watch,
                };
                watch
                    .metadata_only()
                    .full_only_for(move |k| index.with(|idx| idx.is_source(k)))
            },
        )
    }

    /// The source watch, where the source lives, and its health. In this cluster, a failing
    /// source watch is this cluster's error (as any other watch here). In another cluster
    /// (a pull), a source that cannot be read is *unknown*: neither waited for nor taken as
    /// gone ([`Watched::source_unreachable`]) — also when the cluster is not connected, or
    /// when it failed before its first list (a restart during an outage).
    pub(super) fn watch_source(
        &self,
        ctx: &Context,
        needs: &Needs,
        watched: &mut Watched,
    ) -> Result<()> {
        let cluster = needs.source_cluster.as_str();
        let remote = cluster != self.local;
        // A selector the apiserver would refuse selects nothing it can be trusted with: the
        // sources are not read (nothing is decided on them), as when their watch fails.
        if let Some(why) = needs.selection.as_ref().and_then(|s| s.invalid()) {
            watched.errors.push(WatchError {
                cluster: cluster.to_string(),
                message: format!("reading the source: {why}"),
            });
            watched.ready = false;
            return Ok(());
        }
        if remote && ctx.cluster(cluster).is_none() {
            watched.source_unreachable = Some(SourceUnreachable {
                cluster: cluster.to_string(),
                message: "not connected".into(),
                since: None,
            });
            return Ok(());
        }
        let id = self.ensure_source_watch(ctx, needs)?;
        watched.source = Some(id);
        match ctx.watch_error(id) {
            Some(e) => {
                ctx.when_listed(id, needs.key.clone());
                if remote {
                    watched.source_unreachable = Some(SourceUnreachable {
                        cluster: cluster.to_string(),
                        message: e,
                        since: ctx.watch_failing_since(id),
                    });
                } else if !watched.errors.iter().any(|w| w.cluster == cluster) {
                    watched.errors.push(WatchError {
                        cluster: cluster.to_string(),
                        message: format!("reading the source: {e}"),
                    });
                }
                if !remote && !ctx.watch_listed(id) {
                    watched.ready = false;
                }
            }
            None if !ctx.watch_listed(id) => {
                watched.ready = false;
                ctx.when_listed(id, needs.key.clone());
            }
            None => {}
        }
        if remote && watched.source_unreachable.is_none() {
            // Its failure must be said at once (the copies are then kept as they are), not
            // at the next periodic pass.
            ctx.when_failing(id, needs.key.clone());
        }
        Ok(())
    }

    /// The single source `key` in full, from the watch `id` of its namespace. That watch
    /// receives metadata only: each version of a source is read live once (one GET, by the
    /// first reconcile that needs it) and handed to the watch, which holds it in full until
    /// the source's next event brings a newer version's metadata. A live read of another
    /// version than the watch holds is not handed over: the newer version's event has come
    /// or is on its way, and its reconcile reads again.
    pub(super) async fn source_in_full(
        &self,
        ctx: &Context,
        id: WatchId,
        key: &ObjectKey,
        ar: &ApiResource,
    ) -> Result<SourceRead> {
        if let Some(source) = ctx.get(key) {
            return Ok(SourceRead::Held(source));
        }
        if !ctx.held_as_metadata(id, key) {
            return Ok(SourceRead::Absent);
        }
        let Some(live) = ctx
            .api(&key.cluster, ar, key.namespace.as_deref())?
            .get_opt(&key.name)
            .await?
        else {
            // Deleted since: the deletion's event is on its way.
            return Ok(SourceRead::Coming);
        };
        self.hold_read(ctx, id, key, live);
        // Not held: the watch holds another version, whose event (held in full, the object
        // being a source now) has come or is on its way.
        Ok(ctx.get(key).map_or(SourceRead::Coming, SourceRead::Held))
    }

    /// A selection's members in full, from the watch `id` of its namespace (metadata only,
    /// as for a single source): the objects there it selects, registered as the
    /// declaration's sources (so their events wake it, and those it no longer selects lose
    /// their content), each version read live once and handed to the watch, which holds it
    /// in full until its next event. A few are read one by one; more by a list of the
    /// selection's label selector in pages of about [`READ_PAGE_BYTES`], so what is read at
    /// once is bounded, not the selection's size. Reads of one watch's objects take turns:
    /// ten selections reconciled at once over the same objects read them once, not ten
    /// times.
    pub(super) async fn selected_in_full(
        &self,
        ctx: &Context,
        id: WatchId,
        needs: &Needs,
        selection: &Selection,
    ) -> Result<SelectionRead> {
        let (cluster, ar) = (needs.source_cluster.as_str(), &needs.resource);
        // What the watch holds of them: in full already, or metadata to read.
        let (mut members, mut held, mut missing) = (HashSet::new(), Vec::new(), Vec::new());
        for obj in ctx.list_watch(id) {
            let meta = &obj.metadata;
            if meta.deletion_timestamp.is_some() || !selection.selects_meta(meta) {
                continue;
            }
            let key = ObjectKey::for_object(cluster, ar, &obj);
            match ctx.held_as_metadata(id, &key) {
                true => missing.push(key.clone()),
                false => held.push(obj),
            }
            members.insert(key);
        }
        self.index
            .with(|idx| idx.select_members(&needs.key, &members));
        self.drop_unnamed_sources(ctx);
        if missing.is_empty() {
            held.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            return Ok(SelectionRead::Held(held));
        }
        let turn = self.reading_turn(id);
        let _turn = turn.lock().await;
        // Another reconcile may have read some while this one waited its turn.
        let unread: Vec<&ObjectKey> = (missing.iter())
            .filter(|k| ctx.held_as_metadata(id, k))
            .collect();
        if unread.len() <= READ_ONE_BY_ONE {
            for key in unread {
                self.source_in_full(ctx, id, key, ar).await?;
            }
        } else {
            let wanted: HashSet<&ObjectKey> = unread.into_iter().collect();
            self.list_in_full(ctx, id, needs, selection, &wanted)
                .await?;
        }
        for key in &missing {
            match ctx.get(key) {
                Some(obj) => held.push(obj),
                // A newer version's event has come (held as metadata) or is on its way.
                None if ctx.held_as_metadata(id, key) => return Ok(SelectionRead::Coming),
                // Deleted since: no longer a member.
                None => {}
            }
        }
        held.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(SelectionRead::Held(held))
    }

    /// Reads the objects `wanted` of the watch `id` live, by a list of `selection`'s label
    /// selector in the source namespace, page by page (each about [`READ_PAGE_BYTES`] by the
    /// sizes seen so far), and hands each to the watch; the others a page brings are dropped
    /// as they come.
    async fn list_in_full(
        &self,
        ctx: &Context,
        id: WatchId,
        needs: &Needs,
        selection: &Selection,
        wanted: &HashSet<&ObjectKey>,
    ) -> Result<()> {
        let (cluster, ar) = (needs.source_cluster.as_str(), &needs.resource);
        let api = ctx.api(cluster, ar, needs.source_namespace.as_deref())?;
        let selector = selection.label_selector();
        let (mut limit, mut token) = (FIRST_PAGE, None::<String>);
        let (mut read, mut bytes) = (0usize, 0usize);
        loop {
            let mut params = ListParams::default().labels(&selector).limit(limit as u32);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            let page = api.list(&params).await?;
            for obj in page.items {
                read += 1;
                bytes += rules::bulk::approximate_len(&obj.data);
                self.hand_over(ctx, id, cluster, ar, wanted, obj);
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(());
            }
            let each = (bytes / read.max(1)).max(1);
            limit = (READ_PAGE_BYTES / each).clamp(1, READ_PAGE_MAX);
        }
    }

    /// Hands `obj`, read live, to the watch `id` if it is one of `wanted` ([`Self::hold_read`]).
    fn hand_over(
        &self,
        ctx: &Context,
        id: WatchId,
        cluster: &str,
        ar: &ApiResource,
        wanted: &HashSet<&ObjectKey>,
        obj: DynamicObject,
    ) {
        let key = ObjectKey::for_object(cluster, ar, &obj);
        if wanted.contains(&key) {
            self.hold_read(ctx, id, &key, obj);
        }
    }

    /// Hands `obj` (the object `key`), read live, to the watch `id`, which holds it in full if
    /// it holds the metadata of the same version; that version is then noted as seen.
    fn hold_read(&self, ctx: &Context, id: WatchId, key: &ObjectKey, obj: DynamicObject) {
        let version = obj.metadata.resource_version.clone();
        if ctx.hold_in_full(id, obj)
            && let Some(rv) = &version
        {
            self.seen.saw(key, rv);
        }
    }

    /// The turn of the reads in full of the watch `id`'s objects: one reconcile reads at a
    /// time, and the next finds what it read held.
    fn reading_turn(&self, id: WatchId) -> Arc<tokio::sync::Mutex<()>> {
        let mut turns = self.reading.lock();
        // Turns nobody waits for are dropped (a watch stopped leaves none behind).
        turns.retain(|_, t| Arc::strong_count(t) > 1);
        Arc::clone(turns.entry(id).or_default())
    }
}
