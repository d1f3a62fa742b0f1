//! From an ObjectSync's spec to the fan-out's declaration: the facts that need requests (the
//! kind's discovery, the RemoteClusters, the namespace's labels) gathered after the pure
//! checks, then the operator's policy and consent applied.

use super::*;

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

    /// Registers the RemoteCluster named by a destination and returns its runtime name.
    pub(super) async fn destination_cluster(
        &self,
        ctx: &Context,
        name: &str,
    ) -> Result<String, Refusal> {
        let conn = self.remotes.connect_named(ctx, name).await?;
        // Re-registering replaces the handle when the kubeconfig changed; the client itself
        // is cached by the remote-cluster service.
        ctx.add_cluster(conn.cluster.clone());
        Ok(conn.cluster.name().to_string())
    }

    /// The consent an ObjectSync in the untrusted `namespace` needs: its own namespace takes
    /// the default-grantable kinds without a grant; everything else needs a SyncGrant that
    /// admits it, and an adoption one that says `adopt: true` (see [`policy`]).
    pub(super) fn consent(&self, namespace: &str, resource: &ApiResource) -> Consent {
        let policy = self.policy.clone();
        let (ns, ar) = (namespace.to_string(), resource.clone());
        let admits: Admits = {
            let (policy, ns, ar) = (policy.clone(), ns.clone(), ar.clone());
            Arc::new(move |grant, source, at| policy.admits(grant, &ns, via(at), &ar, source))
        };
        let adopts: Admits = {
            let (policy, ns, ar) = (policy.clone(), ns.clone(), ar.clone());
            Arc::new(move |grant, source, at| policy.adopts(grant, &ns, via(at), &ar, source))
        };
        let exempts: Exempts = {
            let (policy, ar) = (policy.clone(), ar.clone());
            Arc::new(move |source| !policy.must_be_named(&ar, source))
        };
        Consent {
            resource: ApiResource::erase::<SyncGrant>(&()),
            exempt: vec![namespace.to_string()],
            max_copies: match self.policy.max_copies {
                0 => policy::DEFAULT_MAX_COPIES,
                n => n,
            },
            exempts,
            admits,
            adopts,
            refusal: Arc::new(move |source, at| {
                let named = policy.must_be_named(&ar, source);
                refusal_message(&ns, via(at), &ar, named, &at.namespace)
            }),
        }
    }

    /// An untrusted ObjectSync may write into a RemoteCluster only when the RemoteCluster's
    /// `allowedNamespaces` selects its namespace.
    pub(super) async fn check_remote_allowed(
        &self,
        ctx: &Context,
        namespace: &str,
        remote: &str,
    ) -> Result<(), Refusal> {
        let rc = RemoteClusters::lookup(ctx, remote)?;
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
        let labels = Api::<Namespace>::all(self.local.client().clone())
            .get(namespace)
            .await
            .map_err(|e| {
                not_allowed(format!(
                    "namespace {namespace} could not be read: {}",
                    describe_kube(&e)
                ))
            })?
            .metadata
            .labels
            .unwrap_or_default();
        if allowed.matches(&labels) {
            Ok(())
        } else {
            Err(not_allowed(format!(
                "its spec.allowedNamespaces ({allowed}) does not match the namespace's labels"
            )))
        }
    }

    /// The fan-out declaration of an ObjectSync in namespace `own` (`Some`), or of a
    /// ClusterObjectSync (`None`: an admin's, trusted, with sources anywhere).
    ///
    /// Every field is checked before any request ([`check_spec`]); then the kind is resolved
    /// (discovery), the kind-dependent rules and the operator's policy are applied, and only
    /// then are RemoteClusters registered.
    pub(super) async fn fan_out_spec(
        &self,
        own: Option<&str>,
        spec: &ObjectSyncSpec,
        ctx: &Context,
    ) -> Result<FanOutSpec, Refusal> {
        let Checked {
            selection,
            destinations: checked,
        } = check_spec(spec)?;
        let (resource, namespaced) = self
            .resolve_kind(
                &spec.source.group,
                spec.source.version.as_deref(),
                &spec.source.kind,
            )
            .await?;
        let source_ns = source_namespace(&spec.source, own, namespaced)?;
        for (i, d) in spec.destinations.iter().enumerate() {
            check_destination(d, namespaced, &spec.source.kind).map_err(|m| {
                Refusal::new(Reason::InvalidSpec, format!("spec.destinations[{i}]: {m}"))
            })?;
        }
        let named: Vec<Option<String>> = spec
            .destinations
            .iter()
            .map(|d| d.namespace.clone())
            .collect();
        self.policy.check(
            own,
            &source_ns,
            &spec.source.group,
            &spec.source.kind,
            &named,
        )?;
        let trusted = own.is_none_or(|ns| self.policy.is_trusted(ns));
        let consent = match own {
            Some(ns) if !trusted => Some(self.consent(ns, &resource)),
            _ => None,
        };
        if let Some(ns) = own.filter(|_| !trusted) {
            for c in spec
                .destinations
                .iter()
                .filter_map(|d| d.cluster.as_deref())
            {
                self.check_remote_allowed(ctx, ns, c).await?;
            }
        }
        let mut destinations = Vec::new();
        for (d, (selector, patches)) in spec.destinations.iter().zip(checked) {
            let cluster = match &d.cluster {
                None => None,
                Some(c) => Some(self.destination_cluster(ctx, c).await?),
            };
            let mut exclude = d.exclude_namespaces.clone();
            exclude.extend(self.policy.deny_destination_namespaces.iter().cloned());
            destinations.push(Destination {
                cluster,
                namespaces: NamespaceRule {
                    namespace: d.namespace.clone(),
                    namespace_selector: selector,
                    exclude_namespaces: exclude,
                    only_namespaces: self.policy.allow_destination_namespaces.clone(),
                },
                name: d.name.clone(),
                name_prefix: d.name_prefix.clone(),
                name_suffix: d.name_suffix.clone(),
                strategy: match d.strategy {
                    CopyStrategy::Apply => Strategy::Apply,
                    CopyStrategy::Replace => Strategy::Replace,
                },
                patches,
            });
        }
        Ok(FanOutSpec {
            source: match selection {
                None => SourceRef::one(resource, source_ns, spec.source.name.clone()),
                Some(selection) => SourceRef::selected(resource, source_ns, selection),
            },
            destinations,
            consent,
            on_conflict: match spec.on_conflict {
                ConflictPolicy::Skip => OnConflict::Skip,
                ConflictPolicy::Adopt => OnConflict::Adopt,
            },
            rules: CopyRules {
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
            },
            deletion_policy: deletion_policy(spec),
            mode: mode(spec),
        })
    }

    /// What a going declaration whose spec is refused needs to remove its copies: the kind
    /// it names (resolved), and the clusters its destinations name that can be connected.
    /// Nothing else matters when it goes: copies are found by their marks, and every one is
    /// removed (or released, under `deletionPolicy: Orphan`). `None` when the kind is not
    /// served: no object of it, hence no copy, can exist.
    pub(super) async fn clean_up_spec(
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
        let mut destinations = vec![Destination::default()];
        for c in spec
            .destinations
            .iter()
            .filter_map(|d| d.cluster.as_deref())
        {
            match self.destination_cluster(ctx, c).await {
                Ok(cluster) => destinations.push(Destination {
                    cluster: Some(cluster),
                    ..Destination::default()
                }),
                Err(r) => {
                    tracing::warn!(remote = c, reason = %r.reason, message = %r.message, "copies through this RemoteCluster cannot be removed")
                }
            }
        }
        Some(FanOutSpec {
            source: SourceRef::one(resource, namespace, spec.source.name.clone()),
            destinations,
            consent: None,
            on_conflict: OnConflict::Skip,
            rules: CopyRules::default(),
            deletion_policy: deletion_policy(spec),
            mode: mode(spec),
        })
    }
}
