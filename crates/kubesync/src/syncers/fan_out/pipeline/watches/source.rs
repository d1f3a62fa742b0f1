//! The watch set's sources: the watch of a declaration's sources where they live, its
//! health (in another cluster, a source that cannot be read is unknown, not gone), and a
//! single source held in full (read live once per version).

use kube::core::ApiResource;

use super::{SourceRead, WatchSet, Watched};
use crate::error::Result;
use crate::key::ObjectKey;
use crate::runtime::{Context, Watch, WatchId};
use crate::syncers::fan_out::index::{EventOf, Scope, WatchKey};
use crate::syncers::fan_out::pipeline::needs::Needs;
use crate::syncers::fan_out::spec::{SourceUnreachable, WatchError};

impl WatchSet {
    /// The watch of a declaration's sources, in their cluster (where they live):
    /// - one object: the watch of the source namespace's objects of its kind, shared by
    ///   every declaration copying one object from there ([`Scope::Sources`]). It receives
    ///   metadata only (no selector can name a set of names, so a watch of full objects
    ///   would receive every other object there in full: a namespace of Helm releases is
    ///   hundreds of MiB to send and parse before the first copy); a version of an object
    ///   some declaration copies is read live once and held in full
    ///   ([`WatchSet::source_in_full`]), the others stay metadata;
    /// - a selection: the source namespace's objects its label selector selects, in full.
    ///
    /// A source is copied as it is, so it is held in full.
    fn ensure_source_watch(&self, ctx: &Context, needs: &Needs) -> Result<WatchId> {
        let (ar, sources, cluster) = (&needs.resource, &needs.source_scope, &needs.source_cluster);
        // The source namespace (a cluster-scoped kind has none).
        let in_source_namespace = |w: Watch| match needs.source_namespace.as_deref() {
            Some(ns) => w.namespace(ns),
            None => w,
        };
        let event = match sources {
            Scope::Selected { .. } => EventOf::Users,
            _ => EventOf::Source,
        };
        let index = self.index.clone();
        self.ensure_watch(
            ctx,
            WatchKey::scoped(cluster, ar, sources.clone()),
            event,
            &needs.key,
            || {
                let watch = in_source_namespace(Watch::dynamic(ar.clone()));
                match sources {
                    Scope::Selected { labels, .. } => watch.labels(labels),
                    _ => watch
                        .metadata_only()
                        .full_only_for(move |k| index.with(|idx| idx.is_source(k))),
                }
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
        let version = live.metadata.resource_version.clone();
        if ctx.hold_in_full(id, live)
            && let Some(rv) = &version
        {
            self.seen.saw(key, rv);
        }
        // Not held: the watch holds another version, whose event (held in full, the object
        // being a source now) has come or is on its way.
        Ok(ctx.get(key).map_or(SourceRead::Coming, SourceRead::Held))
    }
}
