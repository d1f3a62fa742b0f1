//! `ObjectSync`: one object copied to many namespaces and clusters, run by the operator on the
//! library's fan-out engine.
//!
//! Security: by default the source must live in the ObjectSync's own namespace (whoever may
//! create an ObjectSync in namespace A cannot copy a Secret out of namespace B). The
//! [`ObjectSyncPolicy`] — set with `kubesync run` flags — allows named source namespaces,
//! restricts destination namespaces, and restricts which kinds may be synced. A refused
//! ObjectSync gets `Ready=False` with the rule that refused it.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use kubesync::ObjectKey;
use kubesync::runtime::{Action, Context};
use kubesync::syncers::fan_out::rules::{
    CopyRules, DataFilter, KeyFilter, NamespaceRule, OnConflict, Owner, Strategy, glob, selector,
};
use kubesync::syncers::fan_out::{
    Declaration, Destination, DestinationState, FanOutSpec, SourceRef,
};

use crate::crd::{
    Condition, ConflictPolicy, CopyStrategy, DestinationStatusEntry, ObjectSync, ObjectSyncStatus,
    RemoteCluster,
};
use crate::operator::{LOCAL, ObjectSyncGauge, Operator, Refusal, with_transition};

/// Finalizer on an ObjectSync: its copies are deleted before it goes.
pub const OBJECT_SYNC_FINALIZER: &str = "kubesync.io/objectsync-cleanup";

/// What ObjectSyncs may do (the operator's flags).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectSyncPolicy {
    /// Namespaces (names or globs) whose objects any ObjectSync may use as a source, besides
    /// its own namespace.
    pub source_namespaces: Vec<String>,
    /// If not empty, copies go only to namespaces matching one of these (names or globs).
    pub allow_destination_namespaces: Vec<String>,
    /// Copies never go to these namespaces (names or globs).
    pub deny_destination_namespaces: Vec<String>,
    /// If not empty, only these kinds may be synced: `Kind` for the core group or
    /// `Kind.group` (e.g. `Secret`, `ConfigMap`, `CronJob.batch`), or `*`.
    pub allowed_resources: Vec<String>,
}

impl ObjectSyncPolicy {
    /// Checks an ObjectSync's spec against the policy (pure).
    pub fn check(
        &self,
        own_namespace: &str,
        source_namespace: &str,
        group: &str,
        kind: &str,
        destinations: &[Option<String>],
    ) -> Result<(), Refusal> {
        if source_namespace != own_namespace
            && !self
                .source_namespaces
                .iter()
                .any(|g| glob(g, source_namespace))
        {
            return Err(Refusal::new(
                "SourceNamespaceNotAllowed",
                format!(
                    "the source must be in the ObjectSync's namespace {own_namespace:?}; {source_namespace:?} is not among the operator's allowed source namespaces"
                ),
            ));
        }
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        if !self.allowed_resources.is_empty()
            && !self
                .allowed_resources
                .iter()
                .any(|r| r == "*" || *r == qualified)
        {
            return Err(Refusal::new(
                "ResourceNotAllowed",
                format!("{qualified} is not among the operator's allowed resources"),
            ));
        }
        for ns in destinations
            .iter()
            .flatten()
            .filter(|n| !n.is_empty() && n.as_str() != "*")
        {
            if self.deny_destination_namespaces.iter().any(|g| glob(g, ns))
                || (!self.allow_destination_namespaces.is_empty()
                    && !self
                        .allow_destination_namespaces
                        .iter()
                        .any(|g| glob(g, ns)))
            {
                return Err(Refusal::new(
                    "DestinationNotAllowed",
                    format!("destination namespace {ns:?} is not allowed by the operator"),
                ));
            }
        }
        Ok(())
    }
}

impl Operator {
    async fn resolve_kind(
        &self,
        group: &str,
        version: Option<&str>,
        kind: &str,
    ) -> Result<ApiResource, Refusal> {
        let not_found = |e: String| {
            Refusal::new(
                "ResourceNotFound",
                format!("{kind} in group {group:?} is not served: {e}"),
            )
        };
        let (ar, caps) = match version {
            Some(v) => kube::discovery::pinned_kind(
                self.local.client(),
                &GroupVersionKind::gvk(group, v, kind),
            )
            .await
            .map_err(|e| not_found(e.to_string()))?,
            None if group.is_empty() => kube::discovery::pinned_kind(
                self.local.client(),
                &GroupVersionKind::gvk("", "v1", kind),
            )
            .await
            .map_err(|e| not_found(e.to_string()))?,
            None => {
                // The preferred version first, then the group's other versions in order (on
                // v1.20, batch prefers v1 but CronJob is only in v1beta1).
                let g = kube::discovery::group(self.local.client(), group)
                    .await
                    .map_err(|e| not_found(e.to_string()))?;
                g.recommended_kind(kind)
                    .or_else(|| {
                        g.versions()
                            .flat_map(|v| g.versioned_resources(v))
                            .find(|(ar, _)| ar.kind == kind)
                    })
                    .ok_or_else(|| not_found("no version of the group serves it".into()))?
            }
        };
        if caps.scope != kube::discovery::Scope::Namespaced {
            return Err(Refusal::new(
                "InvalidSpec",
                format!("{kind} is cluster-scoped; only namespaced kinds can be synced"),
            ));
        }
        Ok(ar)
    }

    /// Registers the RemoteCluster named by a destination and returns its runtime name.
    async fn destination_cluster(&self, ctx: &Context, name: &str) -> Result<String, Refusal> {
        let key = ObjectKey::new(LOCAL, &ApiResource::erase::<RemoteCluster>(&()), None, name);
        let rc = ctx
            .get_as::<RemoteCluster>(&key)
            .map_err(|e| Refusal::new("RemoteClusterNotFound", e.to_string()))?
            .ok_or_else(|| {
                Refusal::new(
                    "RemoteClusterNotFound",
                    format!("RemoteCluster {name:?} does not exist"),
                )
            })?;
        let (cluster, _) = self.connect_with_hash(&rc).await?;
        // Re-registering replaces the handle when the kubeconfig changed; the client itself
        // is cached by `connect_with_hash`.
        ctx.add_cluster(cluster.clone());
        Ok(cluster.name().to_string())
    }

    async fn object_sync_spec(
        &self,
        os: &ObjectSync,
        ctx: &Context,
    ) -> Result<FanOutSpec, Refusal> {
        let own_ns = os.namespace().unwrap_or_default();
        let spec = &os.spec;
        let source_ns = spec
            .source
            .namespace
            .clone()
            .unwrap_or_else(|| own_ns.clone());
        if spec.source.kind.is_empty() || spec.source.name.is_empty() {
            return Err(Refusal::new(
                "InvalidSpec",
                "spec.source needs a kind and a name",
            ));
        }
        if spec.destinations.is_empty() {
            return Err(Refusal::new("InvalidSpec", "spec.destinations is empty"));
        }
        let named: Vec<Option<String>> = spec
            .destinations
            .iter()
            .map(|d| d.namespace.clone())
            .collect();
        self.policy.check(
            &own_ns,
            &source_ns,
            &spec.source.group,
            &spec.source.kind,
            &named,
        )?;
        let resource = self
            .resolve_kind(
                &spec.source.group,
                spec.source.version.as_deref(),
                &spec.source.kind,
            )
            .await?;
        let mut destinations = Vec::new();
        for d in &spec.destinations {
            let selector = d
                .namespace_selector
                .as_ref()
                .map(|s| {
                    selector(&LabelSelector {
                        match_labels: Some(s.match_labels.clone()),
                        match_expressions: Some(
                            s.match_expressions
                                .iter()
                                .map(|e| LabelSelectorRequirement {
                                    key: e.key.clone(),
                                    operator: e.operator.clone(),
                                    values: Some(e.values.clone()),
                                })
                                .collect(),
                        ),
                    })
                })
                .transpose()
                .map_err(|m| Refusal::new("InvalidSpec", format!("namespaceSelector: {m}")))?;
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
                strategy: match d.strategy {
                    CopyStrategy::Apply => Strategy::Apply,
                    CopyStrategy::Replace => Strategy::Replace,
                },
            });
        }
        Ok(FanOutSpec {
            source: SourceRef {
                resource,
                namespace: source_ns,
                name: spec.source.name.clone(),
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
            },
        })
    }

    pub(crate) async fn reconcile_object_sync(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let Some(os) = ctx.get_as::<ObjectSync>(key)? else {
            self.forget_object_sync(ctx, key);
            return Ok(Action::done());
        };
        let ns = os.namespace().unwrap_or_default();
        let deleting = os.meta().deletion_timestamp.is_some();
        if !deleting && !os.finalizers().iter().any(|f| f == OBJECT_SYNC_FINALIZER) {
            self.set_own_finalizer(&os, OBJECT_SYNC_FINALIZER, true)
                .await?;
            return Ok(Action::done());
        }
        if deleting && !os.finalizers().iter().any(|f| f == OBJECT_SYNC_FINALIZER) {
            return Ok(Action::done());
        }
        let owner = Owner {
            reference: format!("{LOCAL}/{ns}/{}", os.name_any()),
            uid: os.uid().unwrap_or_default(),
        };
        let spec = match self.object_sync_spec(&os, ctx).await {
            Ok(spec) => spec,
            Err(refusal) => {
                if deleting {
                    // Nothing valid to clean up with; copies are still found by their marks
                    // below only when the spec resolves. Release the ObjectSync.
                    self.forget_object_sync(ctx, key);
                    self.set_own_finalizer(&os, OBJECT_SYNC_FINALIZER, false)
                        .await?;
                    return Ok(Action::done());
                }
                tracing::warn!(objectsync = %key, reason = refusal.reason, message = %refusal.message, "ObjectSync refused");
                self.patch_object_sync_status(
                    &os,
                    vec![Condition::ready(false, refusal.reason, refusal.message)],
                    Vec::new(),
                )
                .await?;
                return Ok(Action::requeue(Duration::from_secs(30)));
            }
        };
        let decl = Declaration {
            key: key.clone(),
            owner,
            spec,
            deleting,
        };
        let report = self.fan_out.reconcile(ctx, &decl).await?;
        if deleting {
            if report.ready && report.remaining_copies == 0 && report.unreachable.is_empty() {
                self.forget_object_sync(ctx, key);
                self.set_own_finalizer(&os, OBJECT_SYNC_FINALIZER, false)
                    .await?;
                return Ok(Action::done());
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        if !report.ready {
            // A watch that cannot list (forbidden, unreachable) says why.
            let failure = report
                .watch_errors
                .first()
                .map(|(c, m)| format!("{}: {m}", c.strip_prefix("remote:").unwrap_or(c)));
            let condition = match failure {
                Some(m) => Condition::ready(false, "WatchFailed", m),
                None => Condition::ready(
                    false,
                    "Starting",
                    "waiting for the first list of the watched types",
                ),
            };
            self.patch_object_sync_status(&os, vec![condition], Vec::new())
                .await?;
            return Ok(Action::requeue(Duration::from_millis(500)));
        }
        let old = os.status.clone().unwrap_or_default();
        let now = jiff::Timestamp::now()
            .round(jiff::Unit::Second)
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .to_string();
        let entries: Vec<DestinationStatusEntry> = report
            .destinations
            .iter()
            .map(|d| {
                let cluster = d
                    .cluster
                    .strip_prefix("remote:")
                    .unwrap_or(&d.cluster)
                    .to_string();
                let state = format!("{:?}", d.state);
                let previous = old.destinations.iter().find(|o| {
                    o.cluster == cluster && o.namespace == d.namespace && o.name == d.name
                });
                let unchanged = previous.is_some_and(|p| {
                    p.state == state && p.source_resource_version == d.source_resource_version
                });
                DestinationStatusEntry {
                    cluster,
                    namespace: d.namespace.clone(),
                    name: d.name.clone(),
                    state,
                    message: d.message.clone(),
                    last_sync_time: if d.state == DestinationState::Synced {
                        if unchanged {
                            previous.and_then(|p| p.last_sync_time.clone())
                        } else {
                            Some(now.clone())
                        }
                    } else {
                        previous.and_then(|p| p.last_sync_time.clone())
                    },
                    source_resource_version: d.source_resource_version.clone(),
                }
            })
            .collect();
        let synced = entries.iter().filter(|e| e.state == "Synced").count();
        let problems: Vec<String> = entries
            .iter()
            .filter(|e| e.state != "Synced")
            .take(3)
            .map(|e| format!("{}/{}: {} {}", e.cluster, e.namespace, e.state, e.message))
            .collect();
        let ready = if report.source_found {
            Condition::ready(
                true,
                "Syncing",
                format!(
                    "copying {} to {} destinations",
                    decl.spec.source.name,
                    entries.len()
                ),
            )
        } else {
            Condition::ready(
                false,
                "SourceNotFound",
                format!(
                    "source {}/{} does not exist; its copies were removed",
                    decl.spec.source.namespace, decl.spec.source.name
                ),
            )
        };
        let mut synced_cond = Condition::ready(
            problems.is_empty() && report.source_found,
            if problems.is_empty() {
                "AllSynced"
            } else {
                "NotAllSynced"
            },
            if problems.is_empty() {
                format!("{synced} of {} destinations in sync", entries.len())
            } else {
                problems.join("; ")
            },
        );
        synced_cond.type_ = "Synced".into();
        self.patch_object_sync_status(&os, vec![ready, synced_cond], entries)
            .await?;
        let retry = report
            .destinations
            .iter()
            .any(|d| d.state == DestinationState::Error);
        Ok(if retry {
            Action::requeue(Duration::from_secs(5))
        } else {
            Action::done()
        })
    }

    async fn patch_object_sync_status(
        &self,
        os: &ObjectSync,
        conditions: Vec<Condition>,
        destinations: Vec<DestinationStatusEntry>,
    ) -> kubesync::Result<()> {
        let old = os.status.clone().unwrap_or_default();
        let generation = os.metadata.generation;
        let events = self.record(os, &conditions, &destinations);
        for (type_, reason, note) in events {
            let event = kube::runtime::events::Event {
                type_,
                reason,
                note: Some(note),
                action: "Sync".into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &os.object_ref(&())).await {
                tracing::warn!(objectsync = %os.name_any(), error = %e, "could not publish an event");
            }
        }
        let status = ObjectSyncStatus {
            observed_generation: generation,
            conditions: conditions
                .into_iter()
                .map(|c| with_transition(c, &old.conditions, generation))
                .collect(),
            in_sync: u32::try_from(destinations.iter().filter(|d| d.state == "Synced").count())
                .unwrap_or(u32::MAX),
            total: u32::try_from(destinations.len()).unwrap_or(u32::MAX),
            destinations,
        };
        if status == old {
            return Ok(());
        }
        self.patch_own_status(os, &status).await?;
        Ok(())
    }

    /// Remembers an ObjectSync's state for `/metrics`, and returns the Events its condition
    /// changes call for: those of [`condition_events`] not published already.
    fn record(
        &self,
        os: &ObjectSync,
        conditions: &[Condition],
        destinations: &[DestinationStatusEntry],
    ) -> Vec<(kube::runtime::events::EventType, String, String)> {
        let mut gauge = ObjectSyncGauge {
            ready: conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            destinations: ["Synced", "Pending", "Conflict", "Error"]
                .into_iter()
                .map(|s| (s.to_string(), 0))
                .collect(),
        };
        for d in destinations {
            *gauge.destinations.entry(d.state.clone()).or_default() += 1;
        }
        let old = os.status.as_ref().map(|s| s.conditions.as_slice());
        let mut records = self.object_syncs.lock().unwrap_or_else(|e| e.into_inner());
        let record = records
            .entry((os.namespace().unwrap_or_default(), os.name_any()))
            .or_default();
        record.gauge = gauge;
        let mut events = Vec::new();
        for (event_type, condition, reason, note) in
            condition_events(old.unwrap_or_default(), conditions)
        {
            let status = conditions
                .iter()
                .find(|c| c.type_ == condition)
                .map(|c| c.status.clone())
                .unwrap_or_default();
            let now = (status, reason.clone());
            if record.published.get(&condition) != Some(&now) {
                record.published.insert(condition, now);
                events.push((event_type, reason, note));
            }
        }
        events
    }

    /// Forgets an ObjectSync that is gone: its engine state and its metrics.
    fn forget_object_sync(&self, ctx: &Context, key: &ObjectKey) {
        self.fan_out.forget(ctx, key);
        self.object_syncs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(key.namespace.clone().unwrap_or_default(), key.name.clone()));
    }
}

/// Longest Event note the API accepts (events.k8s.io/v1: 1 kB).
const MAX_NOTE: usize = 1024;

/// The Events to publish when conditions change (pure): one per condition whose status or
/// reason changed, except the transient `Starting` and a `Ready=True` that `Synced` already
/// reports. Warnings for conditions that are not `True`. Each: (event type, condition type,
/// reason, note).
pub fn condition_events(
    old: &[Condition],
    new: &[Condition],
) -> Vec<(kube::runtime::events::EventType, String, String, String)> {
    use kube::runtime::events::EventType;
    new.iter()
        .filter(|c| {
            let before = old.iter().find(|o| o.type_ == c.type_);
            let changed = before.is_none_or(|o| o.status != c.status || o.reason != c.reason);
            changed && c.reason != "Starting" && !(c.type_ == "Ready" && c.status == "True")
        })
        .map(|c| {
            let type_ = if c.status == "True" {
                EventType::Normal
            } else {
                EventType::Warning
            };
            let mut note = c.message.clone();
            if note.len() > MAX_NOTE {
                let mut end = MAX_NOTE - 3;
                while !note.is_char_boundary(end) {
                    end -= 1;
                }
                note.truncate(end);
                note.push_str("...");
            }
            (type_, c.type_.clone(), c.reason.clone(), note)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synced(ok: bool, reason: &str, message: &str) -> Condition {
        Condition {
            type_: "Synced".into(),
            ..Condition::ready(ok, reason, message)
        }
    }

    #[test]
    fn events_are_published_for_condition_transitions_only() {
        use kube::runtime::events::EventType;
        let all = vec![
            Condition::ready(true, "Syncing", "copying"),
            synced(true, "AllSynced", "2 of 2"),
        ];
        let conflict = vec![
            Condition::ready(true, "Syncing", "copying"),
            synced(false, "NotAllSynced", "local/team-c: Conflict not ours"),
        ];
        // The first time: AllSynced (Normal); Ready=True is what Synced already says.
        let first = condition_events(&[], &all);
        assert_eq!(first.len(), 1);
        assert!(matches!(first[0].0, EventType::Normal));
        assert_eq!(
            (first[0].1.as_str(), first[0].2.as_str()),
            ("Synced", "AllSynced")
        );
        // No change, no event.
        assert!(condition_events(&all, &all).is_empty());
        // A transition to a problem: a Warning with the condition's message.
        let warn = condition_events(&all, &conflict);
        assert_eq!(warn.len(), 1);
        assert!(matches!(warn[0].0, EventType::Warning));
        assert_eq!(warn[0].2, "NotAllSynced");
        assert_eq!(warn[0].3, "local/team-c: Conflict not ours");
        // Starting is transient; a refusal is a Warning.
        assert!(condition_events(&[], &[Condition::ready(false, "Starting", "")]).is_empty());
        let refused = condition_events(
            &all,
            &[Condition::ready(false, "SourceNamespaceNotAllowed", "no")],
        );
        assert_eq!(refused.len(), 1);
        assert!(matches!(refused[0].0, EventType::Warning));
    }

    #[test]
    fn long_event_notes_are_cut_at_a_character_boundary() {
        let long = "é".repeat(1000);
        let events = condition_events(&[], &[synced(false, "NotAllSynced", &long)]);
        let note = &events[0].3;
        assert!(note.len() <= MAX_NOTE, "{}", note.len());
        assert!(note.ends_with("..."));
    }

    #[test]
    fn policy_refuses_with_the_rule_that_refused() {
        let default = ObjectSyncPolicy::default();
        assert!(
            default
                .check("a", "a", "", "Secret", &[Some("*".into())])
                .is_ok()
        );
        let r = default
            .check("a", "b", "", "Secret", &[])
            .expect_err("cross-namespace");
        assert_eq!(r.reason, "SourceNamespaceNotAllowed");
        let p = ObjectSyncPolicy {
            source_namespaces: vec!["shared-*".into()],
            allow_destination_namespaces: vec!["team-*".into()],
            deny_destination_namespaces: vec!["team-secret".into()],
            allowed_resources: vec!["Secret".into(), "CronJob.batch".into()],
        };
        assert!(
            p.check("a", "shared-certs", "", "Secret", &[Some("team-x".into())])
                .is_ok()
        );
        assert_eq!(
            p.check("a", "a", "", "ConfigMap", &[])
                .expect_err("kind")
                .reason,
            "ResourceNotAllowed"
        );
        assert!(p.check("a", "a", "batch", "CronJob", &[]).is_ok());
        assert_eq!(
            p.check("a", "a", "", "Secret", &[Some("team-secret".into())])
                .expect_err("deny")
                .reason,
            "DestinationNotAllowed"
        );
        assert_eq!(
            p.check("a", "a", "", "Secret", &[Some("prod".into())])
                .expect_err("allow")
                .reason,
            "DestinationNotAllowed"
        );
    }
}
