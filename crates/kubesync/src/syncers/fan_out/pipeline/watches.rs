//! Step 1 of a reconcile, and the watches' lifecycle: which watches a declaration needs in
//! each cluster, started through the index (shared with other declarations), their health;
//! a declaration forgotten, or copying another kind, releases what it no longer uses.

use super::*;

impl FanOut {
    /// The watch `key` for `decl` (events mapped as `event`), started with `watch()` if no
    /// declaration uses it yet.
    pub(super) fn ensure_watch(
        &self,
        ctx: &Context,
        key: WatchKey,
        event: EventOf,
        decl: &ObjectKey,
        watch: impl FnOnce() -> Watch,
    ) -> Result<WatchId> {
        let this_watch = key.clone();
        self.index
            .with(|idx| idx.watch_for(key, decl, || self.start(ctx, this_watch, event, watch())))
    }

    /// Starts `watch` as the watch `key`, its events mapped as `event`.
    pub(super) fn start(
        &self,
        ctx: &Context,
        key: WatchKey,
        event: EventOf,
        watch: Watch,
    ) -> Result<WatchId> {
        let index = self.index.clone();
        let seen = self.seen.clone();
        let cluster = key.cluster.clone();
        let mapper: crate::runtime::Mapper = Arc::new(move |k: &ObjectKey, obj: &DynamicObject| {
            let declarations = index.with(|idx| {
                let mut declarations = idx.declarations_for(event, &key, k, obj);
                if event == EventOf::Other {
                    declarations.extend(idx.note_unlabelled(&key, obj));
                }
                declarations
            });
            // Not unrelated objects (nor a source namespace's objects no declaration copies):
            // memory must not grow with them.
            let followed = match event {
                EventOf::Other => false,
                EventOf::Source => !declarations.is_empty(),
                _ => true,
            };
            if followed && let Some(rv) = &obj.metadata.resource_version {
                seen.saw(k, rv);
            }
            declarations
        });
        ctx.start_watch(&cluster, watch, Some(mapper))
    }

    /// The watch of kubesync's copies of `ar` (sharded: of the shards held, selected on the
    /// server), in full.
    pub(super) fn copies_watch(&self, ar: &ApiResource) -> Watch {
        let selector = match self.held_shards() {
            None => rules::MANAGED_BY.to_string(),
            Some((mine, all)) => format!("{},{}", rules::MANAGED_BY, among(&mine, all)),
        };
        Self::copies(ar, &selector)
    }

    /// The watch of the other objects of `ar`, metadata only: those without the `managed-by`
    /// label, or, sharded, those not of a shard held (other replicas' copies, and copies not
    /// labelled yet, are others too).
    pub(super) fn others_watch(&self, ar: &ApiResource) -> Watch {
        let shard = rules::SHARD;
        let selector = match self.held_shards() {
            None => format!("!{}", rules::MANAGED_BY),
            Some((mine, _)) if mine.is_empty() => format!("{shard} notin (none)"),
            Some((mine, all)) if mine.len() == all.len() => format!("!{shard}"),
            Some((mine, _)) => format!("{shard} notin ({})", list(&mine)),
        };
        Self::metadata(ar, &selector)
    }

    /// A metadata-only watch of the objects of `ar` that `selector` selects.
    fn metadata(ar: &ApiResource, selector: &str) -> Watch {
        Watch::dynamic(ar.clone())
            .labels(selector)
            .metadata_only()
            .packed()
    }

    /// Copies as the stores hold them: packed, indexed by owner, large values as digests.
    fn copies(ar: &ApiResource, selector: &str) -> Watch {
        Watch::dynamic(ar.clone())
            .labels(selector)
            .index_label(rules::MANAGED_BY)
            .transform(rules::hold)
            .packed()
    }

    /// The watches `decl` needs in `cluster`, started where no declaration uses them yet:
    ///
    /// | watch | holds | events wake |
    /// |---|---|---|
    /// | copies of the source type (`managed-by` label, server-side; sharded: of the shards held) | full objects (managedFields compacted) | the copy's owner |
    /// | sharded only: copies of the source type without a shard label | full objects | the copy's owner |
    /// | other objects of the source type (no `managed-by` label; sharded: not of the shards held) | metadata only | the declarations they block (a `Conflict` there) |
    /// | Namespaces | metadata only | declarations with destinations in the cluster |
    /// | consent objects, if the declaration asks for consent | full objects | the same |
    ///
    /// Unrelated objects of the copied type (Helm release Secrets, say) are thus held as
    /// metadata only: enough to see that a destination name is taken, by whom (marks, labels,
    /// `kubesync.io/protect`), and its uid and resourceVersion. An adoption reads the object
    /// live before it writes.
    ///
    /// The sources are watched apart, where they live ([`Self::ensure_source_watch`]): the
    /// source namespace's objects, the sources in full (one watch for every declaration
    /// copying one object from there), or the objects a label selector selects there, in
    /// full; their events wake the declarations copying them.
    ///
    /// Returns the watches a plan waits for, and apart the watch of the others: a plan does
    /// not wait for its first list (thousands of unrelated objects must not delay the first
    /// copies). It only spares requests: an object it does not show yet is found by the
    /// create, which the apiserver refuses (409), and decided on after a live read. Nothing
    /// is deleted on what it shows or does not show.
    pub(super) fn ensure_watches(
        &self,
        ctx: &Context,
        cluster: &str,
        decl: &Declaration,
    ) -> Result<Watches> {
        let ar = &decl.spec.source.resource;
        let ns_type = &self.namespace_type;
        let key = &decl.key;
        let others = self.ensure_watch(
            ctx,
            WatchKey::scoped(cluster, ar, Scope::Others),
            EventOf::Other,
            key,
            || self.others_watch(ar),
        )?;
        let mut ids = vec![
            self.ensure_watch(
                ctx,
                WatchKey::scoped(cluster, ar, Scope::Copies),
                EventOf::Copy,
                key,
                || self.copies_watch(ar),
            )?,
            self.ensure_watch(
                ctx,
                WatchKey::of(cluster, ns_type),
                EventOf::Cluster,
                key,
                || Watch::dynamic(ns_type.clone()).metadata_only(),
            )?,
        ];
        if self.sharding.get().is_some() {
            ids.extend(self.ensure_unlabelled_watch(ctx, cluster, ar, key, others)?);
        }
        if let Some(consent) = decl.spec.consent.as_ref().filter(|_| !decl.deleting) {
            let ct = &consent.resource;
            ids.push(self.ensure_watch(
                ctx,
                WatchKey::of(cluster, ct),
                EventOf::Cluster,
                key,
                || Watch::dynamic(ct.clone()).transform(compact_consent),
            )?);
        }
        Ok(Watches { ids, others })
    }

    /// Sharded: the watch of the copies of `ar` in `cluster` that carry no shard label (written
    /// before the engine was sharded, or by an engine that does not shard), in full, for the
    /// declaration `decl`, until none is left. Once it has listed none, and the watch of the
    /// other objects (`others`, which sees such copies as metadata) shows none either, it is
    /// stopped; a copy without a shard label that the other objects' watch shows later starts
    /// it again (and wakes its owner). Returns it while it runs.
    fn ensure_unlabelled_watch(
        &self,
        ctx: &Context,
        cluster: &str,
        ar: &ApiResource,
        decl: &ObjectKey,
        others: WatchId,
    ) -> Result<Option<WatchId>> {
        let key = WatchKey::scoped(cluster, ar, Scope::Unlabelled);
        if self.index.with(|idx| idx.unlabelled_settled(&key)) {
            return Ok(None);
        }
        let id = self.ensure_watch(ctx, key.clone(), EventOf::Copy, decl, || {
            Self::copies(ar, &format!("{},!{}", rules::MANAGED_BY, rules::SHARD))
        })?;
        let unlabelled = |o: &Arc<DynamicObject>| {
            let labels = o.labels();
            labels.contains_key(rules::MANAGED_BY) && !labels.contains_key(rules::SHARD)
        };
        // Cheap checks first: while copies are being labelled, the store is not empty.
        let none_left = || {
            [id, others]
                .iter()
                .all(|w| ctx.watch_listed(*w) && ctx.watch_error(*w).is_none())
                && ctx.watch_size(id) == 0
                && !ctx.list_watch(others).iter().any(unlabelled)
        };
        // Checked under the index's lock: a copy the other objects' watch stores after the
        // check is noted (by its mapper, which takes the lock) after the settling, and starts
        // the watch again; one stored before is seen by the check.
        let settled = self.index.with(|idx| {
            if none_left() {
                Ok(idx.settle_unlabelled(&key))
            } else {
                Err(())
            }
        });
        match settled {
            Err(()) => Ok(Some(id)),
            Ok(stopped) => {
                if let Some(id) = stopped {
                    ctx.stop_watch(id);
                }
                Ok(None)
            }
        }
    }

    /// The watch of `decl`'s sources in `cluster` (where they live):
    /// - one object: the watch of the source namespace's objects of its kind, shared by
    ///   every declaration copying one object from there ([`Scope::Sources`]); it holds in
    ///   full the objects some declaration copies, the others as metadata only (their
    ///   content dropped as they arrive: a tenant's other Secrets cost their metadata);
    /// - a selection: the source namespace's objects its label selector selects, in full.
    ///
    /// A source is copied as it is, so it is held in full.
    pub(super) fn ensure_source_watch(
        &self,
        ctx: &Context,
        cluster: &str,
        decl: &Declaration,
        sources: &Scope,
    ) -> Result<WatchId> {
        let ar = &decl.spec.source.resource;
        // The source namespace (a cluster-scoped kind has none).
        let in_source_namespace = |w: Watch| match decl.spec.source.namespace() {
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
            &decl.key,
            || {
                let watch = in_source_namespace(Watch::dynamic(ar.clone()));
                match sources {
                    Scope::Selected { labels, .. } => watch.labels(labels),
                    _ => watch.full_only_for(move |k| index.with(|idx| idx.is_source(k))),
                }
            },
        )
    }

    /// The declarations that use the cluster `cluster` (destinations or copies there, or
    /// sources read there): those to decide on again when what is known of that cluster
    /// changes.
    pub fn declarations_in(&self, cluster: &str) -> Vec<ObjectKey> {
        self.index.with(|idx| idx.declarations_in(cluster))
    }

    /// Every declaration it knows (reconciled, and not forgotten since).
    pub fn declarations(&self) -> Vec<ObjectKey> {
        self.index.with(|idx| idx.declarations())
    }

    /// Drops a declaration that is gone: its index entries, and the watches no other
    /// declaration uses.
    pub fn forget(&self, ctx: &Context, key: &ObjectKey) {
        for id in self.index.with(|idx| idx.forget(key)) {
            ctx.stop_watch(id);
        }
        self.drop_unnamed_sources(ctx);
    }

    /// Drops the content of source objects no declaration copies any more from the watches
    /// still running that hold them (their metadata is kept, as for any object there).
    fn drop_unnamed_sources(&self, ctx: &Context) {
        for (id, key) in self.index.with(|idx| idx.unnamed_sources()) {
            ctx.hold_as_metadata(id, &key);
        }
    }

    /// The declaration now copies another kind: delete the copies of the old kind first (found
    /// by their marks in the old kind's stores) and release its watches. Until that is done,
    /// the index keeps the old kind, so a failure is retried.
    pub(super) async fn retire_previous_type(
        &self,
        ctx: &Context,
        decl: &Declaration,
    ) -> Result<()> {
        let ar = &decl.spec.source.resource;
        let Some(retire) = self.index.with(|idx| idx.begin_type(&decl.key, ar)) else {
            return Ok(());
        };
        let Retire { old, watches } = &retire;
        // Copies are looked for where copies are watched; a cluster sources were only read
        // from (a hub) holds none, and its outage holds nothing up.
        for wk in watches.iter().filter(|w| !w.scope.of_sources()) {
            if let ClusterStatus::Unreachable(m) = ctx.cluster_status(&wk.cluster) {
                return Err(Error::ClusterUnreachable {
                    cluster: wk.cluster.clone(),
                    message: format!("{m}; cannot remove the old copies yet"),
                });
            }
            for copy in ctx
                .list_labelled(&wk.cluster, old, rules::MANAGED_BY, &decl.owner.uid)
                .iter()
                .filter(|c| rules::owned_by(c, &decl.owner))
            {
                let at = DestinationRef::new(
                    wk.cluster.clone(),
                    copy.namespace().unwrap_or_default(),
                    copy.name_any(),
                );
                self.delete_copy(ctx, old, &at, copy.metadata.uid.as_deref())
                    .await?;
                tracing::info!(destination = %at, kind = %old.kind, "the source kind changed; deleted the old copy");
            }
        }
        for id in self
            .index
            .with(|idx| idx.finish_retire(&decl.key, &retire, ar))
        {
            ctx.stop_watch(id);
        }
        self.drop_unnamed_sources(ctx);
        Ok(())
    }

    /// The watches `decl` needs in every cluster it touches, started if need be (shared with
    /// other declarations through the index), and whether they have listed and are healthy.
    /// A watch that has not listed, or fails, wakes the declaration when it lists. A
    /// declaration that now copies another kind first retires the old kind's copies and
    /// watches ([`Self::retire_previous_type`]).
    pub(super) async fn watch(&self, ctx: &Context, decl: &Declaration) -> Result<Watched> {
        self.retire_previous_type(ctx, decl).await?;
        let spec = &decl.spec;
        let source_key = source_key(&self.local, decl);
        let source_cluster = spec.source.cluster_or(&self.local);
        let source_scope = match &spec.source.select {
            None => Scope::Sources {
                namespace: spec.source.namespace().map(String::from),
            },
            Some(selection) => Scope::Selected {
                namespace: spec.source.namespace.clone(),
                labels: selection.label_selector(),
            },
        };
        let wanted = spec
            .destinations
            .iter()
            .map(|d| d.cluster.clone().unwrap_or_else(|| self.local.clone()))
            .chain([self.local.clone()]);
        let single = spec.source.select.is_none().then(|| source_key.clone());
        let clusters = self
            .index
            .with(|idx| idx.register(&decl.key, &decl.owner.uid, single.clone(), wanted));
        // Going (or refused): the source watch is released (it may be the one that fails).
        let (keep_source, keep_key) = if decl.reads_no_source() {
            (Scope::Copies, None)
        } else {
            (source_scope.clone(), single.as_ref())
        };
        for id in self
            .index
            .with(|idx| idx.retain_source(&decl.key, source_cluster, &keep_source, keep_key))
        {
            ctx.stop_watch(id);
        }
        self.drop_unnamed_sources(ctx);
        let mut watched = Watched {
            clusters,
            unknown: Vec::new(),
            ready: true,
            errors: Vec::new(),
            source: None,
            source_unreachable: None,
        };
        for c in &watched.clusters {
            if ctx.cluster(c).is_none() {
                watched.unknown.push(c.clone());
                continue;
            }
            let Watches { ids, others } = self.ensure_watches(ctx, c, decl)?;
            for id in &ids {
                if !ctx.watch_listed(*id) {
                    // Look again when it has listed: its objects may map to no declaration
                    // (no copies yet), and then no event would.
                    watched.ready = false;
                    ctx.when_listed(*id, decl.key.clone());
                }
            }
            // Health is judged from this declaration's own watches, not the whole cluster's. A
            // failing watch wakes the declaration when it lists again: what was put off while
            // the cluster could not be checked (deletes there) is then decided, even if no
            // object of it changes.
            let first_error = ids.iter().chain([&others]).find_map(|id| {
                let e = ctx.watch_error(*id)?;
                ctx.when_listed(*id, decl.key.clone());
                Some(e)
            });
            if let Some(e) = first_error {
                watched.errors.push((c.clone(), e));
            }
        }
        // A declaration that goes needs no source: its copies are found by their marks, so a
        // source watch that cannot start (a selector the apiserver refuses, a kind no longer
        // served, a source cluster gone) never holds its deletion up.
        if !decl.reads_no_source() {
            self.watch_source(ctx, decl, source_cluster, &source_scope, &mut watched)?;
        }
        Ok(watched)
    }

    /// The source watch, where the source lives, and its health. In this cluster, a failing
    /// source watch is this cluster's error (as any other watch here). In another cluster
    /// (a pull), a source that cannot be read is *unknown*: neither waited for nor taken as
    /// gone ([`Watched::source_unreachable`]) — also when the cluster is not connected, or
    /// when it failed before its first list (a restart during an outage).
    fn watch_source(
        &self,
        ctx: &Context,
        decl: &Declaration,
        cluster: &str,
        scope: &Scope,
        watched: &mut Watched,
    ) -> Result<()> {
        let remote = cluster != self.local;
        if remote && ctx.cluster(cluster).is_none() {
            watched.source_unreachable = Some(SourceUnreachable {
                cluster: cluster.to_string(),
                message: "not connected".into(),
                since: None,
            });
            return Ok(());
        }
        let id = self.ensure_source_watch(ctx, cluster, decl, scope)?;
        watched.source = Some(id);
        match ctx.watch_error(id) {
            Some(e) => {
                ctx.when_listed(id, decl.key.clone());
                if remote {
                    watched.source_unreachable = Some(SourceUnreachable {
                        cluster: cluster.to_string(),
                        message: e,
                        since: ctx.watch_failing_since(id),
                    });
                } else if !watched.errors.iter().any(|(c, _)| c == cluster) {
                    watched
                        .errors
                        .push((cluster.to_string(), format!("reading the source: {e}")));
                }
                if !remote && !ctx.watch_listed(id) {
                    watched.ready = false;
                }
            }
            None if !ctx.watch_listed(id) => {
                watched.ready = false;
                ctx.when_listed(id, decl.key.clone());
            }
            None => {}
        }
        if remote && watched.source_unreachable.is_none() {
            // Its failure must be said at once (the copies are then kept as they are), not
            // at the next periodic pass.
            ctx.when_failing(id, decl.key.clone());
        }
        Ok(())
    }
}

/// A selector of the objects whose shard is one of `these` (of `all`, which holds them): `in`
/// them, or, when they are more than the rest, labelled and `notin` the rest — a selector names
/// at most half of the shards. None: a value no shard has (the apiserver refuses an empty
/// list).
fn among(these: &BTreeSet<String>, all: &BTreeSet<String>) -> String {
    let shard = rules::SHARD;
    let rest = all.len().saturating_sub(these.len());
    if these.len() <= rest {
        if these.is_empty() {
            return format!("{shard} in (none)");
        }
        format!("{shard} in ({})", list(these))
    } else if rest == 0 {
        shard.to_string()
    } else {
        let rest: BTreeSet<String> = all.difference(these).cloned().collect();
        format!("{shard},{shard} notin ({})", list(&rest))
    }
}

/// Shards as a selector's list of values.
fn list(set: &BTreeSet<String>) -> String {
    set.iter().map(String::as_str).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn a_shard_selector_names_the_smaller_side() {
        let s = rules::SHARD;
        assert_eq!(
            among(&set(&["a"]), &set(&["a", "b", "c"])),
            format!("{s} in (a)")
        );
        assert_eq!(
            among(&set(&["a", "b"]), &set(&["a", "b", "c"])),
            format!("{s},{s} notin (c)"),
            "labelled (not a copy written before shards), and not another's"
        );
        assert_eq!(among(&set(&["a", "b"]), &set(&["a", "b"])), s);
        assert_eq!(among(&set(&[]), &set(&["a"])), format!("{s} in (none)"));
        assert_eq!(
            among(&set(&["a"]), &set(&["a", "b"])),
            format!("{s} in (a)")
        );
    }
}
