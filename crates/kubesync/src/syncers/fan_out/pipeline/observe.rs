//! Step 2 of a reconcile: what the stores show of a declaration's sources and copies, with
//! absences confirmed by a live read before anything is decided on them.

use super::*;

impl FanOut {
    /// What the stores show of `decl`'s sources and copies, once its watches have listed; a
    /// source (or a selection's member) the store no longer shows while copies of it exist is
    /// confirmed gone by a live read first (the store may be a moment behind), else
    /// [`Observed::NotReady`] and its event is awaited.
    pub(super) async fn observe(
        &self,
        ctx: &Context,
        decl: &Declaration,
        watched: &Watched,
    ) -> Result<Observed> {
        if !watched.ready {
            return Ok(Observed::NotReady);
        }
        let spec = &decl.spec;
        let ar = &spec.source.resource;
        let source_key = source_key(&self.local, decl);
        // A source that cannot be read is unknown: its store is neither read nor confirmed
        // against (the plan keeps every copy as it is).
        let unknown = watched.source_unreachable.is_some();
        let stored: Vec<Arc<DynamicObject>> = match (&spec.source.select, watched.source) {
            _ if unknown => Vec::new(),
            (None, Some(id)) => match self.source_in_full(ctx, id, &source_key, ar).await? {
                SourceRead::Held(source) => vec![source],
                SourceRead::Absent => Vec::new(),
                SourceRead::Coming => {
                    tracing::debug!(declaration = %decl.key, "the source's newer version is on its way; waiting for its event");
                    return Ok(Observed::NotReady);
                }
            },
            (None, None) => ctx.get(&source_key).into_iter().collect(),
            (Some(_), Some(id)) => ctx
                .list_watch(id)
                .into_iter()
                .filter(|s| spec.source.selects(s))
                .collect(),
            (Some(_), None) => Vec::new(),
        };
        let source_in_store = !stored.is_empty();
        let sources: Vec<Arc<DynamicObject>> = stored
            .into_iter()
            .filter(|s| s.metadata.deletion_timestamp.is_none() && !decl.reads_no_source())
            .collect();
        let mut owned: BTreeMap<DestinationRef, Arc<DynamicObject>> = BTreeMap::new();
        for c in &watched.clusters {
            for obj in ctx.list_labelled(c, ar, rules::MANAGED_BY, &decl.owner.uid) {
                if rules::owned_by(&obj, &decl.owner) {
                    let at = DestinationRef::new(
                        c.clone(),
                        obj.namespace().unwrap_or_default(),
                        obj.name_any(),
                    );
                    owned.insert(at, obj);
                }
            }
        }
        let confirmed = match &spec.source.select {
            _ if unknown => true,
            None => {
                !plan::must_confirm_source_gone(
                    source_in_store,
                    decl.reads_no_source(),
                    owned.len(),
                ) || ctx.confirm_absent(&source_key, ar).await?
            }
            Some(selection) => {
                decl.reads_no_source()
                    || self
                        .confirm_unselected(ctx, decl, selection, &sources, &owned)
                        .await?
            }
        };
        if !confirmed {
            tracing::debug!(declaration = %decl.key, "source not in the store yet; waiting for its event");
            return Ok(Observed::NotReady);
        }
        Ok(Observed::Ready(Facts {
            sources,
            owned,
            unreachable: watched.errors.iter().map(|(c, _)| c.clone()).collect(),
            source_unreachable: watched.source_unreachable.clone(),
        }))
    }

    /// The single source `key` in full, from the watch `id` of its namespace. That watch holds
    /// in full only the objects some declaration copies, each from its first event after the
    /// declaration named it; one that has not changed since is held as metadata only, so it
    /// is read live (one GET) and handed to the watch, which holds it in full from then on.
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

    /// A selection's copies whose source the store does not show selected are removed by the
    /// plan. Whether that is so is confirmed first by a live list of the selected sources (the
    /// store may be a moment behind the cluster): `false` if some such source is still there
    /// and selected (then its event is awaited). A failed list is an error, never "gone". The
    /// list is read where the sources live.
    pub(super) async fn confirm_unselected(
        &self,
        ctx: &Context,
        decl: &Declaration,
        selection: &Selection,
        sources: &[Arc<DynamicObject>],
        owned: &BTreeMap<DestinationRef, Arc<DynamicObject>>,
    ) -> Result<bool> {
        let (ar, ns) = (&decl.spec.source.resource, &decl.spec.source.namespace);
        let mark = |name: &str| rules::source_mark(ar, ns, name);
        let present: HashSet<String> = sources.iter().map(|s| mark(&s.name_any())).collect();
        let missing: HashSet<&str> = owned
            .values()
            .filter_map(|c| c.annotations().get(rules::SOURCE))
            .map(String::as_str)
            .filter(|m| !present.contains(*m))
            .collect();
        if missing.is_empty() {
            return Ok(true);
        }
        let live = ctx
            .api(
                decl.spec.source.cluster_or(&self.local),
                ar,
                decl.spec.source.namespace(),
            )?
            .list_metadata(&ListParams::default().labels(&selection.label_selector()))
            .await?;
        Ok(!live.items.iter().any(|o| {
            o.metadata.deletion_timestamp.is_none()
                && selection.selects_meta(&o.metadata)
                && missing.contains(mark(o.metadata.name.as_deref().unwrap_or_default()).as_str())
        }))
    }
}

/// A single source as its watch holds it.
pub(super) enum SourceRead {
    /// In full.
    Held(Arc<DynamicObject>),
    /// Not there: the object does not exist (once the watch has listed).
    Absent,
    /// A version of it is on its way in an event (which wakes the declarations copying it).
    Coming,
}

impl Facts {
    /// What the outcome says of them.
    pub(super) fn describe(&self, outcome: &mut Outcome) {
        outcome.unreachable = self.unreachable.iter().cloned().collect();
        outcome.source_unreachable = self.source_unreachable.clone();
        outcome.source_found = !self.sources.is_empty();
        outcome.sources = self.sources.len();
        outcome.remaining_copies = self.owned.len();
        outcome.source_versions = self
            .sources
            .iter()
            .map(|s| {
                let rv = s.metadata.resource_version.clone().unwrap_or_default();
                (s.name_any(), rv)
            })
            .collect();
    }
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
    /// This declaration's copies, read once per reconcile (their store is packed: every read
    /// parses).
    owned: &'a BTreeMap<DestinationRef, Arc<DynamicObject>>,
}

impl<'a> ContextStores<'a> {
    /// The stores as `decl`'s plan reads them; the consent objects of `clusters` gathered
    /// once.
    pub(super) fn new(
        ctx: &'a Context,
        decl: &'a Declaration,
        fan_out: &'a FanOut,
        clusters: &[String],
        owned: &'a BTreeMap<DestinationRef, Arc<DynamicObject>>,
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
            namespace_type: &fan_out.namespace_type,
            seen: &fan_out.seen,
            consents,
            owned,
        }
    }
}

impl Stores for ContextStores<'_> {
    fn namespaces(&self, cluster: &str) -> Vec<Arc<DynamicObject>> {
        self.ctx.list_metadata(cluster, self.namespace_type)
    }

    fn has_namespace(&self, cluster: &str, namespace: &str) -> bool {
        let key = ObjectKey::new(cluster, self.namespace_type, None, namespace);
        self.ctx.get_metadata(&key).is_some()
    }

    /// A copy in full; anything else at that name as metadata only.
    fn object(&self, at: &DestinationRef) -> Option<Arc<DynamicObject>> {
        if let Some(copy) = self.owned.get(at) {
            return Some(Arc::clone(copy));
        }
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
