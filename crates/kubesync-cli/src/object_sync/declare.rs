//! From an ObjectSync's spec to the fan-out's declaration, in four steps:
//!
//! 1. [`check_spec`]: every field on its own, before any request (pure);
//! 2. [`ObjectSyncController::gather`]: the [`Facts`] that need requests — the kind's
//!    discovery, the RemoteClusters the destinations name, the declaring namespace's labels;
//! 3. [`declare`]: the operator's policy, the RemoteClusters' admission and consent applied to
//!    the spec and those facts (pure; unit-tested below);
//! 4. only for a declaration found valid: its RemoteClusters connected and registered.

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
    ) -> Result<Facts, Refusal> {
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
        Ok(Facts {
            resource,
            namespaced,
            remotes,
            namespace_labels,
        })
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
        own: Option<&str>,
        spec: &ObjectSyncSpec,
        ctx: &Context,
    ) -> Result<FanOutSpec, Refusal> {
        let checked = check_spec(spec)?;
        let facts = self.gather(own, spec, ctx).await?;
        let declared = declare(own, spec, checked, &facts, &self.policy)?;
        for rc in facts.remotes.values().flatten() {
            self.register(ctx, rc).await?;
        }
        Ok(declared)
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
            let registered = match RemoteClusters::lookup(ctx, c) {
                Ok(rc) => self.register(ctx, &rc).await,
                Err(r) => Err(r),
            };
            match registered {
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
            update_policy: Default::default(),
            adoptable: None,
        })
    }
}

/// What an ObjectSync is judged on besides its spec and the operator's policy: the facts
/// [`ObjectSyncController::gather`] read with requests.
#[derive(Clone, Debug)]
pub(super) struct Facts {
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
/// [`check_spec`] found valid (`checked`), on the gathered `facts` and the operator's
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
    facts: &Facts,
    policy: &Arc<ObjectSyncPolicy>,
) -> Result<FanOutSpec, Refusal> {
    let source_ns = source_namespace(&spec.source, own, facts.namespaced)?;
    for (i, d) in spec.destinations.iter().enumerate() {
        check_destination(d, facts.namespaced, &spec.source.kind).map_err(|m| {
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
    // Reading a source from a RemoteCluster needs its admission as writing there does.
    for name in spec
        .destinations
        .iter()
        .filter_map(|d| d.cluster.as_deref())
        .chain(spec.source.cluster.as_deref())
    {
        let rc = remote(facts, name)?;
        if let Some(ns) = untrusted {
            admitted(rc, ns, facts.namespace_labels.as_ref())?;
        }
    }
    // One cluster through two names: the copies made through one would be strays through the
    // other, removed and made again without end.
    let mut writes_to: Vec<&RemoteCluster> = Vec::new();
    for name in spec
        .destinations
        .iter()
        .filter_map(|d| d.cluster.as_deref())
    {
        let rc = remote(facts, name)?;
        if !writes_to
            .iter()
            .any(|r| r.metadata.name == rc.metadata.name)
        {
            writes_to.push(rc);
        }
    }
    if let Some((a, b, server)) = crate::remote::same_apiserver(&writes_to) {
        return Err(Refusal::new(
            Reason::DuplicateCluster,
            format!(
                "the destinations name RemoteClusters {a} and {b}, which reach the same apiserver ({server}): through two names, the copies made through one would be taken for strays through the other and removed; name one of them"
            ),
        ));
    }
    let destinations = spec
        .destinations
        .iter()
        .zip(checked.destinations)
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
        .collect();
    let resource = facts.resource.clone();
    Ok(FanOutSpec {
        consent: untrusted.map(|ns| consent(policy, ns, &resource)),
        source: {
            let source = match checked.selection {
                None => SourceRef::one(resource, source_ns, spec.source.name.clone()),
                Some(selection) => SourceRef::selected(resource, source_ns, selection),
            };
            match spec.source.cluster.as_deref() {
                Some(c) => source.in_cluster(runtime_name(c)),
                None => source,
            }
        },
        destinations,
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
            ..Default::default()
        },
        deletion_policy: deletion_policy(spec),
        mode: mode(spec),
        update_policy: match spec.update_policy {
            crate::crd::UpdatePolicy::Sync => UpdatePolicy::Sync,
            crate::crd::UpdatePolicy::CreateOnly => UpdatePolicy::CreateOnly,
        },
        adoptable: None,
    })
}

/// The RemoteCluster `name` among the facts, or why it cannot be used.
fn remote<'a>(facts: &'a Facts, name: &str) -> Result<&'a RemoteCluster, Refusal> {
    match facts.remotes.get(name) {
        Some(Ok(rc)) => Ok(rc),
        Some(Err(refusal)) => Err(refusal.clone()),
        None => Err(Refusal::new(
            Reason::RemoteClusterNotFound,
            format!("RemoteCluster {name:?} does not exist"),
        )),
    }
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

/// The consent an ObjectSync in the untrusted `namespace` needs (pure): its own namespace
/// takes the default-grantable kinds without a grant; everything else needs a SyncGrant that
/// admits it, and an adoption one that says `adopt: true` (see [`policy`]).
pub(crate) fn consent(
    policy: &Arc<ObjectSyncPolicy>,
    namespace: &str,
    resource: &ApiResource,
) -> Consent {
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
    let refusal = {
        let policy = policy.clone();
        Arc::new(move |source: &_, at: &_| {
            let named = policy.must_be_named(&ar, source);
            refusal_message(&ns, via(at), &ar, named, &at.namespace)
        })
    };
    Consent {
        resource: ApiResource::erase::<SyncGrant>(&()),
        exempt: vec![namespace.to_string()],
        max_copies: match policy.max_copies {
            0 => policy::DEFAULT_MAX_COPIES,
            n => n,
        },
        exempts,
        admits,
        adopts,
        refusal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> ObjectSyncSpec {
        serde_json::from_value(v).expect("spec")
    }

    fn remote(name: &str, allowed: Option<serde_json::Value>) -> RemoteCluster {
        let mut spec =
            json!({"kubeconfigSecretRef": {"namespace": "ops", "name": "kc", "key": "config"}});
        if let Some(a) = allowed {
            spec["allowedNamespaces"] = a;
        }
        serde_json::from_value(json!({
            "apiVersion": "kubesync.io/v1alpha1", "kind": "RemoteCluster",
            "metadata": {"name": name}, "spec": spec,
        }))
        .expect("remote cluster")
    }

    /// Facts about a ConfigMap source (namespaced), with these RemoteClusters and labels.
    fn facts(
        remotes: Vec<RemoteCluster>,
        labels: Option<Result<BTreeMap<String, String>, String>>,
    ) -> Facts {
        Facts {
            resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            namespaced: true,
            remotes: remotes
                .into_iter()
                .map(|rc| (rc.name_any(), Ok(rc)))
                .collect(),
            namespace_labels: labels,
        }
    }

    fn judged(
        own: Option<&str>,
        s: &ObjectSyncSpec,
        facts: &Facts,
        policy: ObjectSyncPolicy,
    ) -> Result<FanOutSpec, Refusal> {
        let checked = check_spec(s).expect("fields valid");
        declare(own, s, checked, facts, &Arc::new(policy))
    }

    fn labels(team: &str) -> Option<Result<BTreeMap<String, String>, String>> {
        Some(Ok(BTreeMap::from([("team".into(), team.into())])))
    }

    #[test]
    fn a_declaration_writes_into_one_cluster_through_one_name() {
        let with_server = |name: &str, server: Option<&str>| {
            let mut rc = remote(name, None);
            rc.status = Some(crate::crd::RemoteClusterStatus {
                server: server.map(str::to_string),
                ..Default::default()
            });
            rc
        };
        let both = spec(json!({
            "source": {"kind": "ConfigMap", "name": "cm"},
            "destinations": [{"namespace": "a", "cluster": "eu"},
                {"namespace": "b", "cluster": "eu-again"}, {"namespace": "c", "cluster": "eu"}],
        }));
        let judge = |eu_again: Option<&str>| {
            let remotes = vec![
                with_server("eu", Some("https://h:443")),
                with_server("eu-again", eu_again),
            ];
            judged(Some("ops"), &both, &facts(remotes, None), trusting_ops())
        };
        let refused = judge(Some("https://h:443")).expect_err("refused");
        assert_eq!(refused.reason, Reason::DuplicateCluster);
        assert!(
            refused.message.contains("eu and eu-again")
                && refused.message.contains("https://h:443"),
            "{}",
            refused.message
        );
        // Another apiserver, or one not connected yet (no server known): declared.
        judge(Some("https://other:443")).expect("two clusters");
        judge(None).expect("not known to be the same");
        // One name in several destinations is one cluster.
        let once = spec(json!({
            "source": {"kind": "ConfigMap", "name": "cm"},
            "destinations": [{"namespace": "a", "cluster": "eu"}, {"namespace": "b", "cluster": "eu"}],
        }));
        let remotes = vec![with_server("eu", Some("https://h:443"))];
        judged(Some("ops"), &once, &facts(remotes, None), trusting_ops()).expect("one name");
    }

    fn trusting_ops() -> ObjectSyncPolicy {
        ObjectSyncPolicy {
            trusted_namespaces: vec!["ops".into()],
            ..Default::default()
        }
    }

    #[test]
    fn an_untrusted_declaration_writes_only_through_remote_clusters_that_admit_its_namespace() {
        let s = spec(json!({
            "source": {"kind": "ConfigMap", "name": "cm"},
            "destinations": [{"namespace": "apps", "cluster": "east"}],
        }));
        let team_a = json!({"matchLabels": {"team": "a"}});
        let policy = || ObjectSyncPolicy {
            trusted_namespaces: vec!["ops".into()],
            ..Default::default()
        };

        let ok = judged(
            Some("a"),
            &s,
            &facts(vec![remote("east", Some(team_a.clone()))], labels("a")),
            policy(),
        )
        .expect("admitted");
        assert_eq!(ok.destinations[0].cluster.as_deref(), Some("remote:east"));
        assert!(
            ok.consent.is_some(),
            "an untrusted declaration needs consent"
        );
        assert_eq!(ok.source.namespace, "a");

        let refused = |f: Facts| judged(Some("a"), &s, &f, policy()).expect_err("refused");
        let other_team = refused(facts(
            vec![remote("east", Some(team_a.clone()))],
            labels("b"),
        ));
        assert_eq!(other_team.reason, Reason::RemoteClusterNotAllowed);
        assert!(
            other_team
                .message
                .contains("does not match the namespace's labels"),
            "{}",
            other_team.message
        );
        let no_selector = refused(facts(vec![remote("east", None)], labels("a")));
        assert_eq!(no_selector.reason, Reason::RemoteClusterNotAllowed);
        assert!(
            no_selector
                .message
                .contains("without spec.allowedNamespaces")
        );
        let unread = refused(facts(
            vec![remote("east", Some(team_a.clone()))],
            Some(Err("forbidden".into())),
        ));
        assert_eq!(unread.reason, Reason::RemoteClusterNotAllowed);
        assert!(
            unread
                .message
                .contains("namespace a could not be read: forbidden")
        );
        let invalid = refused(facts(
            vec![remote(
                "east",
                Some(json!({"matchExpressions": [{"key": "team", "operator": "Sideways"}]})),
            )],
            labels("a"),
        ));
        assert_eq!(invalid.reason, Reason::RemoteClusterNotAllowed);
        assert!(invalid.message.contains("allowedNamespaces is invalid"));
        let missing = refused(facts(Vec::new(), labels("a")));
        assert_eq!(missing.reason, Reason::RemoteClusterNotFound);

        // A trusted namespace and a ClusterObjectSync need neither the selector nor consent.
        let mut cluster_wide = s.clone();
        cluster_wide.source.namespace = Some("ops".into());
        for (own, s) in [(Some("ops"), &s), (None, &cluster_wide)] {
            let trusted = judged(own, s, &facts(vec![remote("east", None)], None), policy())
                .expect("trusted");
            assert!(trusted.consent.is_none());
            assert_eq!(
                trusted.destinations[0].cluster.as_deref(),
                Some("remote:east")
            );
        }
        // A missing RemoteCluster is refused for them too.
        assert_eq!(
            judged(Some("ops"), &s, &facts(Vec::new(), None), policy())
                .expect_err("missing")
                .reason,
            Reason::RemoteClusterNotFound
        );
    }

    #[test]
    fn a_source_read_from_a_remote_cluster_needs_its_admission_and_the_namespace_of_the_same_name()
    {
        let pull = |namespace: Option<&str>| {
            let mut source = json!({"kind": "ConfigMap", "name": "cm", "cluster": "hub"});
            if let Some(ns) = namespace {
                source["namespace"] = json!(ns);
            }
            spec(json!({"source": source, "destinations": [{"namespace": "a"}]}))
        };
        let team_a = json!({"matchLabels": {"team": "a"}});
        let hub = || facts(vec![remote("hub", Some(team_a.clone()))], labels("a"));
        let policy = || ObjectSyncPolicy {
            trusted_namespaces: vec!["ops".into()],
            ..Default::default()
        };
        // Its own namespace there, through a RemoteCluster that admits it.
        let ok = judged(Some("a"), &pull(None), &hub(), policy()).expect("admitted");
        assert_eq!(ok.source.cluster.as_deref(), Some("remote:hub"));
        assert_eq!(ok.source.namespace, "a");
        assert!(ok.consent.is_some(), "its copies still need consent here");
        // Another namespace there: refused, whatever this cluster's source rule says.
        let local_rule = ObjectSyncPolicy {
            source_namespaces: vec!["shared".into()],
            ..policy()
        };
        let other = judged(Some("a"), &pull(Some("shared")), &hub(), local_rule)
            .expect_err("another namespace there");
        assert_eq!(other.reason, Reason::SourceNamespaceNotAllowed);
        assert!(other.message.contains("hub"), "{}", other.message);
        // … unless the operator allows it for that cluster.
        let allowed = ObjectSyncPolicy {
            remote_source_namespaces: vec!["hub/shared*".into()],
            ..policy()
        };
        assert!(judged(Some("a"), &pull(Some("shared")), &hub(), allowed.clone()).is_ok());
        let elsewhere = facts(vec![remote("hub-2", Some(team_a.clone()))], labels("a"));
        let mut s = pull(Some("shared"));
        s.source.cluster = Some("hub-2".into());
        assert_eq!(
            judged(Some("a"), &s, &elsewhere, allowed)
                .expect_err("other cluster")
                .reason,
            Reason::SourceNamespaceNotAllowed
        );
        // A RemoteCluster that does not admit the namespace, or none at all.
        let other_team = judged(
            Some("a"),
            &pull(None),
            &facts(vec![remote("hub", Some(team_a.clone()))], labels("b")),
            policy(),
        )
        .expect_err("other team");
        assert_eq!(other_team.reason, Reason::RemoteClusterNotAllowed);
        let missing = judged(
            Some("a"),
            &pull(None),
            &facts(vec![], labels("a")),
            policy(),
        )
        .expect_err("missing");
        assert_eq!(missing.reason, Reason::RemoteClusterNotFound);
        // A trusted namespace needs no admission (its own namespace there, as here); a
        // ClusterObjectSync reads from any namespace there.
        let trusted = judged(
            Some("ops"),
            &pull(None),
            &facts(vec![remote("hub", None)], None),
            policy(),
        );
        assert!(trusted.is_ok());
        let cluster_wide = judged(
            None,
            &pull(Some("shared")),
            &facts(vec![remote("hub", None)], None),
            policy(),
        )
        .expect("cluster-wide");
        assert_eq!(cluster_wide.source.namespace, "shared");
    }

    #[test]
    fn the_operators_policy_bounds_every_destination_and_source() {
        let s = spec(json!({
            "source": {"kind": "ConfigMap", "name": "cm"},
            "destinations": [
                {"namespace": "*", "excludeNamespaces": ["kube-system"]},
                {"namespace": "team-b", "name": "renamed", "strategy": "replace"},
            ],
            "labels": {"exclude": ["internal"]},
            "deletionPolicy": "Orphan",
        }));
        let policy = || ObjectSyncPolicy {
            allow_destination_namespaces: vec!["team-*".into()],
            deny_destination_namespaces: vec!["team-secret".into()],
            ..Default::default()
        };
        let d = judged(Some("a"), &s, &facts(Vec::new(), None), policy()).expect("valid");
        assert_eq!(d.destinations.len(), 2);
        for dest in &d.destinations {
            assert_eq!(dest.cluster, None);
            assert_eq!(dest.namespaces.only_namespaces, vec!["team-*".to_string()]);
            assert!(
                dest.namespaces
                    .exclude_namespaces
                    .contains(&"team-secret".to_string())
            );
        }
        assert_eq!(
            d.destinations[0].namespaces.exclude_namespaces,
            vec!["kube-system".to_string(), "team-secret".to_string()]
        );
        assert_eq!(d.destinations[1].name.as_deref(), Some("renamed"));
        assert_eq!(d.destinations[1].strategy, Strategy::Replace);
        assert_eq!(d.rules.labels.exclude, vec!["internal".to_string()]);
        assert_eq!(d.deletion_policy, DeletionPolicy::Orphan);

        // A destination the policy denies by name refuses the whole declaration.
        let denied = spec(json!({
            "source": {"kind": "ConfigMap", "name": "cm"},
            "destinations": [{"namespace": "team-secret"}],
        }));
        assert_eq!(
            judged(Some("a"), &denied, &facts(Vec::new(), None), policy())
                .expect_err("denied")
                .reason,
            Reason::DestinationNotAllowed
        );
        // So does a source in another namespace.
        let elsewhere = spec(json!({
            "source": {"kind": "ConfigMap", "name": "cm", "namespace": "b"},
            "destinations": [{"namespace": "team-b"}],
        }));
        assert_eq!(
            judged(Some("a"), &elsewhere, &facts(Vec::new(), None), policy())
                .expect_err("elsewhere")
                .reason,
            Reason::SourceNamespaceNotAllowed
        );
    }

    #[test]
    fn the_kind_as_discovered_decides_namespaces() {
        let s = spec(json!({
            "source": {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "destinations": [{"name": "view-copy"}],
        }));
        let cluster_scoped = Facts {
            resource: ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&()),
            namespaced: false,
            remotes: BTreeMap::new(),
            namespace_labels: None,
        };
        let d = judged(None, &s, &cluster_scoped, ObjectSyncPolicy::default())
            .expect("a ClusterObjectSync of a cluster-scoped kind");
        assert_eq!(d.source.namespace, "");
        assert_eq!(d.source.resource.kind, "ClusterRole");

        // A destination namespace means nothing for a cluster-scoped kind: refused by path.
        let with_namespace = spec(json!({
            "source": {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "destinations": [{"namespace": "apps", "name": "view-copy"}],
        }));
        let r = judged(
            None,
            &with_namespace,
            &cluster_scoped,
            ObjectSyncPolicy::default(),
        )
        .expect_err("namespace on a cluster-scoped kind");
        assert_eq!(r.reason, Reason::InvalidSpec);
        assert!(
            r.message.starts_with("spec.destinations[0]"),
            "{}",
            r.message
        );
    }
}
