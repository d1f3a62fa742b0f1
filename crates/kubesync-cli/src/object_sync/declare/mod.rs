//! From an ObjectSync's spec to the fan-out's declaration, in four steps:
//!
//! 1. [`check_spec`]: every field on its own, before any request (pure);
//! 2. [`ObjectSyncController::gather`]: the facts that need requests ([`Gathered`]) — the kind's
//!    discovery, the RemoteClusters the destinations name, the declaring namespace's labels;
//! 3. [`declare`]: the operator's policy, the RemoteClusters' admission and consent applied to
//!    the spec and those facts (pure; unit-tested below);
//! 4. only for a declaration found valid: its RemoteClusters connected and registered.

use super::*;
use crate::policy::{self, admission, review};

impl ObjectSyncController {
    /// The kind's resource, and whether it is namespaced.
    pub(super) async fn resolve_kind(
        &self,
        group: &str,
        version: Option<&str>,
        kind: &str,
    ) -> Result<(ApiResource, bool), Refusal> {
        let not_found = |e: String| {
            Refusal::new(
                Reason::ResourceNotFound,
                format!("{kind} in group {group:?} is not served: {e}"),
            )
        };
        let (ar, caps) = match version {
            Some(v) => kube::discovery::pinned_kind(
                self.local.client(),
                &GroupVersionKind::gvk(group, v, kind),
            )
            .await
            .map_err(|e| not_found(describe_kube(&e)))?,
            None if group.is_empty() => kube::discovery::pinned_kind(
                self.local.client(),
                &GroupVersionKind::gvk("", "v1", kind),
            )
            .await
            .map_err(|e| not_found(describe_kube(&e)))?,
            None => {
                // The preferred version first, then the group's other versions in order (a
                // kind may be served only in a version the group does not prefer, e.g. a
                // beta kind beside a GA group version).
                let g = kube::discovery::group(self.local.client(), group)
                    .await
                    .map_err(|e| not_found(describe_kube(&e)))?;
                g.recommended_kind(kind)
                    .or_else(|| {
                        g.versions()
                            .flat_map(|v| g.versioned_resources(v))
                            .find(|(ar, _)| ar.kind == kind)
                    })
                    .ok_or_else(|| not_found("no version of the group serves it".into()))?
            }
        };
        Ok((ar, caps.scope == kube::discovery::Scope::Namespaced))
    }

    /// Connects the RemoteCluster `rc` and registers it with the runtime; returns its runtime
    /// name. Re-registering replaces the handle when the kubeconfig changed; the client itself
    /// is cached by the remote-cluster service.
    async fn register(&self, ctx: &Context, rc: &RemoteCluster) -> Result<String, Refusal> {
        let conn = self.remotes.connect(rc).await?;
        ctx.add_cluster(conn.cluster.clone());
        Ok(conn.cluster.name().to_string())
    }

    /// The facts an ObjectSync in namespace `own` (`None`: a ClusterObjectSync) is judged on,
    /// read with requests: the kind (discovery), every RemoteCluster its destinations name
    /// (from the operator's store) and, for an untrusted one that names any, its namespace's
    /// labels. Reads only; nothing is registered or written.
    pub(super) async fn gather(
        &self,
        own: Option<&str>,
        spec: &ObjectSyncSpec,
        ctx: &Context,
    ) -> Result<Gathered, Refusal> {
        let (resource, namespaced) = self
            .resolve_kind(
                &spec.source.group,
                spec.source.version.as_deref(),
                &spec.source.kind,
            )
            .await?;
        let remotes = remote_clusters(ctx, spec);
        let namespace_labels = match own {
            Some(ns) if !remotes.is_empty() && !self.policy.is_trusted(ns) => {
                Some(self.namespace_labels(ns).await)
            }
            _ => None,
        };
        let predecessors = self
            .predecessors(ctx, own, &spec.take_over, &resource)
            .await;
        Ok(Gathered {
            resource,
            namespaced,
            remotes,
            namespace_labels,
            predecessors,
        })
    }

    /// The declarations `take_over` names (of an ObjectSync in namespace `own`, or a
    /// ClusterObjectSync: `None`, whose source's kind is `resource`): their keys, marks and
    /// records — the ObjectSyncs' and ClusterObjectSyncs' from the operator's store, the
    /// annotated objects' from the compat records. Those not found, or without a record (an
    /// annotated object when the operator runs without `--compat`), are left out.
    pub(super) async fn predecessors(
        &self,
        ctx: &Context,
        own: Option<&str>,
        take_over: &[TakeOverRef],
        resource: &ApiResource,
    ) -> Vec<Predecessor> {
        let mut found = Vec::new();
        for r in take_over {
            let namespace = r.namespace.as_deref().or(own);
            match (r.kind, namespace) {
                (TakeOverKind::ClusterObjectSync, _) => {
                    found.extend(stored_predecessor::<ClusterObjectSync>(ctx, None, &r.name));
                }
                (TakeOverKind::ObjectSync, Some(ns)) => {
                    found.extend(stored_predecessor::<ObjectSync>(ctx, Some(ns), &r.name));
                }
                (TakeOverKind::Annotations, Some(ns)) => {
                    let Some(records) = &self.compat_records else {
                        continue;
                    };
                    let key = ObjectKey::new(LOCAL, resource, Some(ns.to_string()), &r.name);
                    let Some(uid) = ctx.get_metadata(&key).and_then(|o| o.uid()) else {
                        continue;
                    };
                    match records.record_of(&key, &uid).await {
                        Ok(Some(record)) => {
                            let owner = crate::compat::controller::owner(&key, &uid);
                            found.push(predecessor(key, owner.reference, uid, record));
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(annotated = %key, error = %e, "the record of the copies its annotations made cannot be read; none is taken over now")
                        }
                    }
                }
                (_, None) => {}
            }
        }
        found
    }

    /// The labels of `namespace`, or why they could not be read.
    pub(super) async fn namespace_labels(
        &self,
        namespace: &str,
    ) -> Result<BTreeMap<String, String>, String> {
        Api::<Namespace>::all(self.local.client().clone())
            .get(namespace)
            .await
            .map(|ns| ns.metadata.labels.unwrap_or_default())
            .map_err(|e| describe_kube(&e))
    }

    /// The fan-out declaration of an ObjectSync in namespace `own` (`Some`), or of a
    /// ClusterObjectSync (`None`: an admin's, trusted, with sources anywhere).
    ///
    /// Every field is checked before any request ([`check_spec`]); then the facts are read
    /// ([`Self::gather`]) and the spec judged on them ([`declare`], pure); only a declaration
    /// found valid has its RemoteClusters connected and registered.
    pub(super) async fn fan_out_spec(
        &self,
        (own, name): (Option<&str>, &str),
        spec: &ObjectSyncSpec,
        ctx: &Context,
    ) -> Result<FanOutSpec, Refusal> {
        let checked = check_spec(spec)?;
        refuse_take_over_cycle(ctx, (own, name), &spec.take_over)?;
        let gathered = self.gather(own, spec, ctx).await?;
        let declared = declare(own, spec, checked, &gathered, &self.policy)?;
        for rc in gathered.remotes.values().flatten() {
            self.register(ctx, rc).await?;
        }
        if let Some(who) = &declared.acting_as {
            let names = spec.service_account_name.is_some();
            let installed = match names {
                true => self.admission.installed().await,
                false => Ok(()),
            };
            let exists = admission::service_account_exists(&self.local, who).await;
            admission::may_act_as(who, names, installed, exists)?;
            // Read where the source is, as the identity it acts as there (a pull: the one the
            // hub's RemoteCluster maps it to).
            let (cluster, as_whom) = match &declared.source.cluster {
                None => (self.local.clone(), who),
                Some(c) => (
                    ctx.cluster(c).ok_or_else(|| {
                        Refusal::new(
                            Reason::SourceForbidden,
                            format!(
                                "RemoteCluster {} of the source is not connected",
                                crate::remote::display_name(c)
                            ),
                        )
                    })?,
                    declared.acting_as_in.get(c).unwrap_or(who),
                ),
            };
            review::may_read_source(&cluster, as_whom, &declared.source).await?;
        }
        Ok(declared)
    }

    /// What a going declaration whose spec is refused needs to remove its copies: the kind
    /// it names (resolved), and the clusters its destinations name that can be connected.
    /// Nothing else matters when it goes: copies are found by their marks, and every one is
    /// removed (or released, under `deletionPolicy: Orphan`). `None` when the kind is not
    /// served: no object of it, hence no copy, can exist.
    pub(super) async fn find_copies(
        &self,
        own: Option<&str>,
        spec: &ObjectSyncSpec,
        ctx: &Context,
    ) -> Option<FanOutSpec> {
        let (resource, namespaced) = self
            .resolve_kind(
                &spec.source.group,
                spec.source.version.as_deref(),
                &spec.source.kind,
            )
            .await
            .ok()?;
        let namespace = match (namespaced, own, spec.source.namespace.as_deref()) {
            (false, ..) => String::new(),
            (true, _, Some(ns)) if !ns.is_empty() => ns.to_string(),
            (true, own, _) => own.unwrap_or_default().to_string(),
        };
        let mut clusters = vec![None];
        for c in spec
            .destinations
            .iter()
            .filter_map(|d| d.cluster.as_deref())
        {
            let registered = match RemoteClusters::lookup(ctx, c) {
                Ok(rc) => self.register(ctx, &rc).await,
                Err(r) => Err(r),
            };
            match registered {
                Ok(cluster) => clusters.push(Some(cluster)),
                Err(r) => {
                    tracing::warn!(remote = c, reason = %r.reason, message = %r.message, "copies through this RemoteCluster cannot be removed")
                }
            }
        }
        let source = SourceRef::one(resource, namespace, spec.source.name.clone());
        Some(FanOutSpec {
            mode: mode(spec),
            ..FanOutSpec::removal(source, clusters, deletion_policy(spec))
        })
    }
}

/// What an ObjectSync is judged on besides its spec and the operator's policy: the facts
/// [`ObjectSyncController::gather`] read with requests.
#[derive(Clone, Debug)]
pub(super) struct Gathered {
    /// The source's kind, resolved by discovery.
    pub(super) resource: ApiResource,
    /// Whether that kind is namespaced.
    pub(super) namespaced: bool,
    /// Each RemoteCluster the spec names (the source's, the destinations'), as the
    /// operator's store holds it, or why it cannot be used (it does not exist).
    pub(super) remotes: BTreeMap<String, Result<RemoteCluster, Refusal>>,
    /// The declaring namespace's labels, or why they could not be read: read only for an
    /// untrusted ObjectSync that names a RemoteCluster.
    pub(super) namespace_labels: Option<Result<BTreeMap<String, String>, String>>,
    /// The declarations `spec.takeOver` names that exist and keep a record of the copies
    /// kubesync made for them, from the operator's store (one that does not exist, or keeps
    /// no record, has nothing to take over).
    pub(super) predecessors: Vec<Predecessor>,
}

/// The predecessor of `key`, whose copies carry the marks of `reference` and `uid` and whose
/// record is `record`.
fn predecessor(key: ObjectKey, reference: String, uid: String, record: CopiesMade) -> Predecessor {
    Predecessor {
        key,
        owner: Owner {
            reference,
            uid,
            shard: None,
        },
        record: Arc::new(record),
    }
}

/// The key of the ObjectSync (`namespace`) or ClusterObjectSync (`None`) `name`.
fn key_of<K: SyncObject>(namespace: Option<&str>, name: &str) -> ObjectKey {
    let ar = ApiResource::erase::<K>(&());
    ObjectKey::new(LOCAL, &ar, namespace.map(String::from), name)
}

/// The ObjectSync (`namespace`) or ClusterObjectSync (`None`) `name` as the operator's store
/// holds it.
fn stored<K: SyncObject>(ctx: &Context, namespace: Option<&str>, name: &str) -> Option<K> {
    ctx.get_as::<K>(&key_of::<K>(namespace, name))
        .ok()
        .flatten()
}

/// The ObjectSync or ClusterObjectSync `name` (of `namespace`) as a predecessor: its key, its
/// copies' marks (as [`declaration`] writes them) and its record; `None` when the store has
/// no such declaration, or it keeps no record.
fn stored_predecessor<K: SyncObject>(
    ctx: &Context,
    namespace: Option<&str>,
    name: &str,
) -> Option<Predecessor> {
    let found = stored::<K>(ctx, namespace, name)?;
    let record = status::record_of(found.sync_status())?;
    let reference = match namespace {
        Some(ns) => format!("{LOCAL}/{ns}/{name}"),
        None => format!("{LOCAL}/{name}"),
    };
    let key = key_of::<K>(namespace, name);
    Some(predecessor(key, reference, found.uid()?, record))
}

/// Where a `takeOver` entry of a declaration in namespace `base` (`None`: a ClusterObjectSync)
/// points: an ObjectSync's namespace and name, or a ClusterObjectSync's name (no namespace).
/// `None`: a ClusterObjectSync's entry that names no namespace for an ObjectSync.
fn take_over_target(r: &TakeOverRef, base: Option<&str>) -> Option<(Option<String>, String)> {
    match r.kind {
        TakeOverKind::ObjectSync => Some((
            Some(r.namespace.as_deref().or(base)?.to_string()),
            r.name.clone(),
        )),
        TakeOverKind::ClusterObjectSync => Some((None, r.name.clone())),
        // An annotated object takes over from nothing.
        TakeOverKind::Annotations => None,
    }
}

/// The most declarations a hand-over's chain is followed through ([`refuse_take_over_cycle`]).
const MAX_CHAIN: usize = 64;

/// Refuses a hand-over that comes back to the declaration `me` (its namespace, `None` for a
/// ClusterObjectSync, and name): one it takes over from that, through its own `takeOver` (or
/// theirs), takes over from `me` — each would take the copies back from the other, without
/// end. Follows the chain through the operator's store, at most [`MAX_CHAIN`] declarations.
fn refuse_take_over_cycle(
    ctx: &Context,
    me: (Option<&str>, &str),
    take_over: &[TakeOverRef],
) -> Result<(), Refusal> {
    let target = (me.0.map(String::from), me.1.to_string());
    let mut stack: Vec<(usize, (Option<String>, String))> = take_over
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, take_over_target(r, me.0)?)))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some((i, at)) = stack.pop() {
        if at == target {
            let named = match &take_over_target(&take_over[i], me.0) {
                Some((Some(ns), name)) => format!("ObjectSync {ns}/{name}"),
                Some((None, name)) => format!("ClusterObjectSync {name}"),
                None => "it".to_string(),
            };
            return Err(Refusal::new(
                Reason::TakeOverNotAllowed,
                format!(
                    "spec.takeOver[{i}]: {named} takes over, through its own takeOver, from this declaration: two declarations cannot take over from each other (each would take the copies back)"
                ),
            ));
        }
        if seen.len() >= MAX_CHAIN || !seen.insert(at.clone()) {
            continue;
        }
        let (ns, name) = at;
        let next: Vec<TakeOverRef> = match &ns {
            Some(ns) => stored::<ObjectSync>(ctx, Some(ns), &name).map(|o| o.spec.take_over),
            None => stored::<ClusterObjectSync>(ctx, None, &name).map(|o| o.spec.sync.take_over),
        }
        .unwrap_or_default();
        stack.extend(
            next.iter()
                .filter_map(|r| Some((i, take_over_target(r, ns.as_deref())?))),
        );
    }
    Ok(())
}

/// Whether an ObjectSync in namespace `own` (`None`: a ClusterObjectSync), `untrusted` or not,
/// may take over from each declaration `spec.takeOver` names (pure): a ClusterObjectSync has
/// no namespace; a ClusterObjectSync names the namespace of an ObjectSync or annotated object;
/// a tenant's ObjectSync takes over only from ObjectSyncs and annotated objects of its own
/// namespace.
fn check_take_over(
    own: Option<&str>,
    spec: &ObjectSyncSpec,
    untrusted: Option<&str>,
) -> Result<(), Refusal> {
    for (i, r) in spec.take_over.iter().enumerate() {
        let invalid =
            |m: &str| Refusal::new(Reason::InvalidSpec, format!("spec.takeOver[{i}]: {m}"));
        let namespace = match (r.kind, r.namespace.as_deref(), own) {
            (TakeOverKind::ClusterObjectSync, Some(_), _) => {
                return Err(invalid("a ClusterObjectSync has no namespace"));
            }
            (TakeOverKind::ClusterObjectSync, None, _) => None,
            (_, Some(ns), _) => Some(ns),
            (_, None, Some(own)) => Some(own),
            (TakeOverKind::ObjectSync, None, None) => {
                return Err(invalid(
                    "name the namespace of the ObjectSync to take over from",
                ));
            }
            (TakeOverKind::Annotations, None, None) => {
                return Err(invalid(
                    "name the namespace of the annotated object to take over from",
                ));
            }
        };
        if let Some(tenant) = untrusted
            && namespace != Some(tenant)
        {
            let named = match (r.kind, namespace) {
                (TakeOverKind::Annotations, Some(ns)) => {
                    format!("the annotations of {ns}/{}", r.name)
                }
                (_, Some(ns)) => format!("ObjectSync {ns}/{}", r.name),
                (_, None) => format!("ClusterObjectSync {}", r.name),
            };
            return Err(Refusal::new(
                Reason::TakeOverNotAllowed,
                format!(
                    "spec.takeOver[{i}]: an ObjectSync outside the trusted namespaces takes over only from ObjectSyncs and annotated objects of its own namespace ({tenant}), not from {named}"
                ),
            ));
        }
    }
    Ok(())
}

/// The RemoteClusters `spec` names (its source's, its destinations'), from the operator's
/// store.
pub(super) fn remote_clusters(
    ctx: &Context,
    spec: &ObjectSyncSpec,
) -> BTreeMap<String, Result<RemoteCluster, Refusal>> {
    spec.destinations
        .iter()
        .filter_map(|d| d.cluster.as_deref())
        .chain(spec.source.cluster.as_deref())
        .map(|c| (c.to_string(), RemoteClusters::lookup(ctx, c)))
        .collect()
}

/// Judges an ObjectSync in namespace `own` (`None`: a ClusterObjectSync), whose fields
/// [`check_spec`] found valid (`checked`), on the `gathered` facts and the operator's
/// `policy`, and returns the fan-out's declaration or the first refusal (pure).
///
/// In order: the kind-dependent field rules (source namespace, destination names), the
/// operator's policy (source namespace, kind, destination namespaces), each RemoteCluster
/// named (it exists and, for an untrusted ObjectSync, its `allowedNamespaces` admits the
/// namespace), then the declaration: destinations with the policy's namespace limits, the
/// copy rules, and for an untrusted ObjectSync the consent its copies need.
pub(super) fn declare(
    own: Option<&str>,
    spec: &ObjectSyncSpec,
    checked: Checked,
    gathered: &Gathered,
    policy: &Arc<ObjectSyncPolicy>,
) -> Result<FanOutSpec, Refusal> {
    let source_ns = source_namespace(&spec.source, own, gathered.namespaced)?;
    for (i, d) in spec.destinations.iter().enumerate() {
        check_destination(d, gathered.namespaced, &spec.source.kind).map_err(|m| {
            Refusal::new(Reason::InvalidSpec, format!("spec.destinations[{i}]: {m}"))
        })?;
    }
    let named: Vec<Option<String>> = spec
        .destinations
        .iter()
        .map(|d| d.namespace.clone())
        .collect();
    policy.check_from(
        own,
        spec.source.cluster.as_deref(),
        &source_ns,
        &spec.source.group,
        &spec.source.kind,
        &named,
    )?;
    let untrusted = own.filter(|ns| !policy.is_trusted(ns));
    check_take_over(own, spec, untrusted)?;
    admit_remote_clusters(spec, gathered, untrusted)?;
    let acting_as = acting_as(own, spec, policy)?;
    let acting_as_in = match &acting_as {
        Some(who) => remote_identities(spec, gathered, who)?,
        None => BTreeMap::new(),
    };
    let resource = gathered.resource.clone();
    let source = match checked.selection {
        None => SourceRef::one(resource.clone(), source_ns, spec.source.name.clone()),
        Some(selection) => SourceRef::selected(resource.clone(), source_ns, selection),
    };
    let source = match spec.source.cluster.as_deref() {
        Some(c) => source.in_cluster(runtime_name(c)),
        None => source,
    };
    Ok(FanOutSpec {
        acting_as,
        acting_as_in,
        consent: untrusted.map(|ns| policy::consent(policy, ns, &resource)),
        destinations: destinations(spec, checked.destinations, policy),
        on_conflict: match spec.on_conflict {
            ConflictPolicy::Skip => OnConflict::Skip,
            ConflictPolicy::Adopt => OnConflict::Adopt,
        },
        rules: copy_rules(spec, untrusted.is_some()),
        deletion_policy: deletion_policy(spec),
        mode: mode(spec),
        update_policy: match spec.update_policy {
            crate::crd::UpdatePolicy::Sync => UpdatePolicy::Sync,
            crate::crd::UpdatePolicy::CreateOnly => UpdatePolicy::CreateOnly,
        },
        take_over: gathered.predecessors.clone(),
        ..FanOutSpec::new(source)
    })
}

/// Each RemoteCluster `spec` names exists and, for an ObjectSync in the `untrusted` namespace,
/// admits it (reading a source from a RemoteCluster needs its admission as writing there
/// does); no two of those written to reach one apiserver.
fn admit_remote_clusters(
    spec: &ObjectSyncSpec,
    gathered: &Gathered,
    untrusted: Option<&str>,
) -> Result<(), Refusal> {
    let mut writes_to: Vec<&RemoteCluster> = Vec::new();
    let destinations = spec
        .destinations
        .iter()
        .filter_map(|d| d.cluster.as_deref());
    for (name, writes) in destinations
        .map(|n| (n, true))
        .chain(spec.source.cluster.as_deref().map(|n| (n, false)))
    {
        let rc = match (remote(gathered, name), untrusted) {
            (Ok(rc), _) => rc,
            (Err(why), Some(ns)) => return Err(unavailable(name, ns, &why)),
            (Err(why), None) => return Err(why),
        };
        if let Some(ns) = untrusted {
            // The namespace's own labels could not be read: nothing of the cluster's to hide.
            if let Some(Err(e)) = &gathered.namespace_labels {
                return Err(Refusal::new(
                    Reason::RemoteClusterNotAllowed,
                    format!(
                        "whether RemoteCluster {name:?} admits ObjectSyncs from namespace {ns} is not known: namespace {ns} could not be read: {e}"
                    ),
                ));
            }
            admitted(rc, ns, gathered.namespace_labels.as_ref())
                .map_err(|why| unavailable(name, ns, &why))?;
        }
        if writes {
            writes_to.push(rc);
        }
    }
    // One cluster through two names: the copies made through one would be strays through the
    // other, removed and made again without end.
    match crate::remote::same_apiserver(&writes_to) {
        Some((a, b, server)) => Err(Refusal::new(
            Reason::DuplicateCluster,
            format!(
                "the destinations name RemoteClusters {a} and {b}, which reach the same apiserver ({server}): through two names, the copies made through one would be taken for strays through the other and removed; name one of them"
            ),
        )),
        None => Ok(()),
    }
}

/// The fan-out's destinations of `spec`, each with what [`check_spec`] made of it (its
/// selector, patches and fields left to others) and the policy's namespace limits.
fn destinations(
    spec: &ObjectSyncSpec,
    checked: Vec<(Option<kube::core::Selector>, Vec<CopyPatch>, Ignore)>,
    policy: &ObjectSyncPolicy,
) -> Vec<Destination> {
    spec.destinations
        .iter()
        .zip(checked)
        .map(|(d, (selector, patches, ignore))| {
            let mut exclude = d.exclude_namespaces.clone();
            exclude.extend(policy.deny_destination_namespaces.iter().cloned());
            Destination {
                cluster: d.cluster.as_deref().map(runtime_name),
                namespaces: NamespaceRule {
                    namespace: d.namespace.clone(),
                    namespace_selector: selector,
                    exclude_namespaces: exclude,
                    only_namespaces: policy.allow_destination_namespaces.clone(),
                    matcher: None,
                },
                name: d.name.clone(),
                name_prefix: d.name_prefix.clone(),
                name_suffix: d.name_suffix.clone(),
                strategy: match d.strategy {
                    CopyStrategy::Apply => Strategy::Apply,
                    CopyStrategy::Replace => Strategy::Replace,
                },
                patches,
                ignore,
            }
        })
        .collect()
}

/// The copy rules of `spec`: its label, annotation and data filters; outside the trusted
/// namespaces (`untrusted`), the declaring tools' annotation prefixes reserved.
fn copy_rules(spec: &ObjectSyncSpec, untrusted: bool) -> CopyRules {
    CopyRules {
        labels: KeyFilter {
            include: spec.labels.include.clone(),
            exclude: spec.labels.exclude.clone(),
        },
        annotations: KeyFilter {
            include: spec.annotations.include.clone(),
            exclude: spec.annotations.exclude.clone(),
        },
        data: spec.data.as_ref().map(|d| DataFilter {
            include: d.include.clone(),
            rename: d.rename.clone(),
        }),
        reserved: match untrusted {
            true => policy::DECLARING_PREFIXES.map(String::from).to_vec(),
            false => Vec::new(),
        },
        other_owners: match spec.other_owners.copy {
            true => Vec::new(),
            false => (OTHER_OWNERS.iter().map(|k| k.to_string()))
                .chain(spec.other_owners.keys.iter().cloned())
                .collect(),
        },
        ..Default::default()
    }
}

/// The identity an ObjectSync in namespace `own` (`None`: a ClusterObjectSync) acts as
/// (pure): the ServiceAccount its spec names, else for an untrusted one the operator's
/// default; `None` where it acts with the operator's own rights (a ClusterObjectSync, or a
/// trusted ObjectSync that names none).
pub(super) fn acting_as(
    own: Option<&str>,
    spec: &ObjectSyncSpec,
    policy: &ObjectSyncPolicy,
) -> Result<Option<kubesync::ActAs>, Refusal> {
    let named = match (own, spec.service_account_name.as_deref()) {
        (None, Some(_)) => {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.serviceAccountName: a ClusterObjectSync acts with the operator's own rights (only cluster admins may create one) and names no ServiceAccount; an ObjectSync does, in its own namespace",
            ));
        }
        (None, None) => return Ok(None),
        (Some(ns), Some(sa)) => (ns, sa),
        (Some(ns), None) if policy.is_trusted(ns) => return Ok(None),
        (Some(ns), None) => match policy.default_service_account.as_deref() {
            Some(sa) => (ns, sa),
            None => {
                return Err(Refusal::new(
                    Reason::ServiceAccountRequired,
                    format!(
                        "an ObjectSync outside the operator's trusted namespaces acts as a ServiceAccount of its own namespace, so that Kubernetes RBAC decides what it may read and write: set spec.serviceAccountName to a ServiceAccount of {ns} that may get the source and create, update and patch the copies in their namespaces (or ask the operator's admin to set --default-service-account)"
                    ),
                ));
            }
        },
    };
    kubesync::ActAs::service_account(named.0, named.1)
        .map(Some)
        .map_err(|e| Refusal::new(Reason::InvalidSpec, format!("spec.serviceAccountName: {e}")))
}

/// The RemoteCluster `name` among the gathered facts, or why it cannot be used.
fn remote<'a>(gathered: &'a Gathered, name: &str) -> Result<&'a RemoteCluster, Refusal> {
    match gathered.remotes.get(name) {
        Some(Ok(rc)) => Ok(rc),
        Some(Err(refusal)) => Err(refusal.clone()),
        None => Err(Refusal::new(
            Reason::RemoteClusterNotFound,
            format!("RemoteCluster {name:?} does not exist"),
        )),
    }
}

/// Who a declaration that acts as `who` is through each RemoteCluster it names (its
/// destinations', its source's; by runtime name), or why it may not use one (pure): the ServiceAccount
/// `<identityNamespace>/<namespace>.<name>` the RemoteCluster maps it to. Without the mapping
/// it may not write there: the same user name is someone else in another cluster.
fn remote_identities(
    spec: &ObjectSyncSpec,
    gathered: &Gathered,
    who: &kubesync::ActAs,
) -> Result<BTreeMap<String, kubesync::ActAs>, Refusal> {
    let mut mapped = BTreeMap::new();
    let Some((namespace, name)) = who.service_account_of() else {
        return Ok(mapped);
    };
    let destinations = spec
        .destinations
        .iter()
        .filter_map(|d| d.cluster.as_deref());
    for c in destinations.chain(spec.source.cluster.as_deref()) {
        let rc = remote(gathered, c)?;
        let Some(identities) = rc.spec.identity_namespace.as_deref() else {
            return Err(Refusal::new(
                Reason::RemoteIdentityRequired,
                format!(
                    "RemoteCluster {c:?} maps no identity for declarations that act as a ServiceAccount: {who} of this cluster is someone else there (whoever owns namespace {namespace} in that cluster), so such a declaration reads and writes through a RemoteCluster only as the identity its admin maps it to; they set its spec.identityNamespace and grant the ServiceAccount <identityNamespace>/{namespace}.{name} there what the declaration needs"
                ),
            ));
        };
        let there = kubesync::ActAs::service_account(identities, &format!("{namespace}.{name}"))
            .map_err(|e| {
                Refusal::new(
                    Reason::RemoteIdentityRequired,
                    format!("{who} cannot be mapped into RemoteCluster {c:?}: {e}"),
                )
            })?;
        mapped.insert(runtime_name(c), there);
    }
    Ok(mapped)
}

/// What an ObjectSync in the untrusted `namespace` is told when the RemoteCluster `name` cannot
/// be used (`why`, logged for the operator's admin): the same whether it does not exist, is
/// broken, or does not admit the namespace, and never which labels would admit it — a tenant
/// learns nothing of the RemoteClusters she may not use.
fn unavailable(name: &str, namespace: &str, why: &Refusal) -> Refusal {
    tracing::info!(remote = name, namespace, reason = %why.reason, message = %why.message, "a RemoteCluster refused to an untrusted ObjectSync");
    Refusal::new(
        Reason::RemoteClusterNotAllowed,
        format!(
            "RemoteCluster {name:?} does not exist or does not admit ObjectSyncs from namespace {namespace}: outside the operator's trusted namespaces an ObjectSync uses a RemoteCluster only where the cluster's admin admits its namespace (spec.allowedNamespaces); ask them"
        ),
    )
}

/// Whether the RemoteCluster `rc` admits ObjectSyncs from the untrusted `namespace`, whose
/// labels are `labels` (pure): only when its `allowedNamespaces` selects them.
pub(super) fn admitted(
    rc: &RemoteCluster,
    namespace: &str,
    labels: Option<&Result<BTreeMap<String, String>, String>>,
) -> Result<(), Refusal> {
    let remote = rc.name_any();
    let not_allowed = |why: String| {
        Refusal::new(
            Reason::RemoteClusterNotAllowed,
            format!(
                "RemoteCluster {remote} does not admit ObjectSyncs from namespace {namespace}: {why}"
            ),
        )
    };
    let Some(allowed) = &rc.spec.allowed_namespaces else {
        return Err(not_allowed(
            "without spec.allowedNamespaces only the operator's trusted namespaces may use it; a selector there matching this namespace's labels would admit it".into(),
        ));
    };
    let allowed = selector(allowed)
        .map_err(|m| not_allowed(format!("its spec.allowedNamespaces is invalid: {m}")))?;
    let labels = match labels {
        Some(Ok(labels)) => labels,
        Some(Err(e)) => {
            return Err(not_allowed(format!(
                "namespace {namespace} could not be read: {e}"
            )));
        }
        None => &BTreeMap::new(),
    };
    if allowed.matches(labels) {
        Ok(())
    } else {
        Err(not_allowed(format!(
            "its spec.allowedNamespaces ({allowed}) does not match the namespace's labels"
        )))
    }
}

#[cfg(test)]
mod tests;
