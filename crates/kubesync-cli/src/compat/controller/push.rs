//! The push an object's annotations declare: the fan-out declaration made of them (under the
//! operator's policy), and the clean-up of the copies its earlier selves made.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use kubesync::ObjectKey;
use kubesync::runtime::{Action, Context};
use kubesync::syncers::fan_out::rules::{
    Annotator, CopyRules, DeletionPolicy, KeyFilter, NamespaceMatcher, NamespaceRule, OnConflict,
    Owner, Shared,
};
use kubesync::syncers::fan_out::{
    Adoptable, Declaration, Destination, DestinationState, FanOut, FanOutSpec, Outcome, SourceRef,
    UpdatePolicy,
};

use super::{CompatController, Found, Summary};
use crate::compat::declared::{self, Declared, marked_source};
use crate::compat::{DECLARED_BY, DECLARED_BY_ANNOTATIONS};
use crate::remote::LOCAL;

impl CompatController {
    /// The push `object`'s annotations declare (none when it is gone): gather (who made
    /// copies of it) → decide (the operator's policy, the declaration) → the fan-out writes.
    pub(super) async fn push(
        &self,
        key: &ObjectKey,
        ar: &ApiResource,
        object: Option<&DynamicObject>,
        ctx: &Context,
        fan_out: &FanOut,
        found: &mut Found,
    ) -> kubesync::Result<Action> {
        let Found { notes, summary } = found;
        let makers = self.copies.makers(ctx, key);
        let declared = object.map(|o| self.declared(ar, o));
        let uid = object
            .and_then(|o| o.metadata.uid.clone())
            .unwrap_or_default();
        if let Some(declared) = &declared {
            notes.extend(declared.problems.iter().cloned());
        }
        let declared = declared.filter(Declared::pushes);

        // Copies made by another object of that name (deleted and made again), or by this
        // one when it no longer declares a push: they go. Only this object's own uid, or one
        // no live declaration holds: the marks the copies' watch reads can be forged by anyone
        // who can write an object, and a cleanup removes every copy of its uid, anywhere.
        let mut cleaning = false;
        let gone = makers
            .iter()
            .filter(|m| declared.is_none() || **m != uid)
            .filter(|m| **m == uid || !self.claimed(ctx, m));
        for maker in gone {
            let decl = Declaration {
                key: key.clone(),
                owner: owner(key, maker),
                spec: removal_of(ar, key),
                deleting: true,
                refused: false,
                record: self.kept_record(key, maker, false).await?,
            };
            let outcome = fan_out.reconcile(ctx, &decl).await?;
            let done = outcome.ready && outcome.remaining_copies == 0;
            if !done {
                cleaning = true;
            }
            self.keep_record(key, maker, &outcome, done).await?;
        }
        let Some(declared) = declared else {
            if cleaning {
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
            fan_out.forget(ctx, key);
            return Ok(Action::done());
        };

        let Some(spec) = self.push_spec(key, ar, &declared, notes).await else {
            return Ok(Action::done());
        };
        summary.push = declared.tools();
        let decl = Declaration {
            key: key.clone(),
            owner: owner(key, &uid),
            spec,
            deleting: false,
            refused: false,
            record: self.kept_record(key, &uid, true).await?,
        };
        let outcome = fan_out.reconcile(ctx, &decl).await?;
        self.keep_record(key, &uid, &outcome, false).await?;
        self.record_push(&outcome, summary, notes);
        Ok(match cleaning {
            true => Action::requeue(Duration::from_millis(500)),
            false => crate::policy::requeue_after(&outcome),
        })
    }

    /// The record kept of the copies `key`'s declaration of `uid` made (see
    /// [`records`](crate::compat::records)). None kept: for a `live` declaration, `None` —
    /// its marks are taken once, as seeded copies (those an earlier kubesync made), updated
    /// and removed only as its identity; for a clean-up, an empty record (nothing found by
    /// marks alone is removed), unless no place to keep records is configured.
    async fn kept_record(
        &self,
        key: &ObjectKey,
        uid: &str,
        live: bool,
    ) -> kubesync::Result<Option<kubesync::syncers::fan_out::record::Record>> {
        let Some(records) = &self.records else {
            return Ok(None);
        };
        Ok(match records.record_of(key, uid).await? {
            Some(record) => Some(record),
            None if live => None,
            None => Some(kubesync::syncers::fan_out::record::Record::new()),
        })
    }

    /// Keeps the record `outcome` hands over for `key`'s declaration of `uid`, or, once a
    /// clean-up is `done`, forgets it.
    async fn keep_record(
        &self,
        key: &ObjectKey,
        uid: &str,
        outcome: &Outcome,
        done: bool,
    ) -> kubesync::Result<()> {
        let Some(records) = &self.records else {
            return Ok(());
        };
        match (&outcome.record, done) {
            (_, true) => records.forget(key, uid).await,
            (Some(record), false) => records.keep(key, uid, record).await,
            (None, false) => Ok(()),
        }
    }

    /// What `object`'s annotations (of the tools turned on) declare.
    fn declared(&self, ar: &ApiResource, object: &DynamicObject) -> Declared {
        let none = BTreeMap::new();
        let annotations = object.metadata.annotations.as_ref().unwrap_or(&none);
        Declared::read(&self.tools, ar, annotations)
    }

    /// The fan-out declaration of the push `declared` by the object `key`, if the operator's
    /// policy allows it and its namespace's identity may read the source; else `None`, with
    /// the reason in `notes`.
    async fn push_spec(
        &self,
        key: &ObjectKey,
        ar: &ApiResource,
        declared: &Declared,
        notes: &mut BTreeSet<String>,
    ) -> Option<FanOutSpec> {
        let namespace = key.namespace.clone().unwrap_or_default();
        if let Err(refusal) =
            self.policy
                .check(Some(&namespace), &namespace, &ar.group, &ar.kind, &[])
        {
            notes.insert(format!("not copied: {}", refusal.message));
            return None;
        }
        // Outside the trusted namespaces, carried out as the namespace's ServiceAccount: RBAC
        // decides what it reads and writes, as for an ObjectSync.
        let acting_as = match self.policy.default_identity(&namespace) {
            Ok(who) => who,
            Err(why) => {
                notes.insert(format!("not copied: {why}"));
                return None;
            }
        };
        let spec = self.spec(ar, key, &namespace, declared.clone());
        let spec = FanOutSpec { acting_as, ..spec };
        if let Some(who) = &spec.acting_as
            && let Err(refusal) =
                crate::policy::review::may_read_source(&self.local, who, &spec.source).await
        {
            notes.insert(format!("not copied: {}", refusal.message));
            return None;
        }
        Some(spec)
    }

    /// Counts the push's destinations by state into `summary`, observes the propagation lags
    /// and notes each destination not written.
    fn record_push(&self, outcome: &Outcome, summary: &mut Summary, notes: &mut BTreeSet<String>) {
        for d in &outcome.destinations {
            *summary
                .destinations
                .entry(format!("{:?}", d.state))
                .or_default() += 1;
        }
        for p in &outcome.propagated {
            self.lags.observe("Annotations", &p.cluster, p.lag);
        }
        notes.extend(destination_notes(outcome));
    }

    /// Whether a live declaration has the uid `uid`: an ObjectSync, a ClusterObjectSync, or an
    /// object of the tools' kinds (an annotated source).
    fn claimed(&self, ctx: &Context, uid: &str) -> bool {
        let declarations = [
            ApiResource::erase::<crate::crd::ObjectSync>(&()),
            ApiResource::erase::<crate::crd::ClusterObjectSync>(&()),
        ];
        declarations.iter().chain(&self.resources).any(|ar| {
            ctx.list_metadata(LOCAL, ar)
                .iter()
                .any(|o| o.metadata.uid.as_deref() == Some(uid))
        })
    }

    /// The fan-out declaration of a push the annotations of `key` declare (pure but for the
    /// policy it reads).
    fn spec(
        &self,
        ar: &ApiResource,
        key: &ObjectKey,
        namespace: &str,
        declared: Declared,
    ) -> FanOutSpec {
        let tools = declared.tools();
        let labels = match declared.copies_labels() {
            true => KeyFilter::default(),
            false => nothing(),
        };
        let untrusted = !self.policy.is_trusted(namespace);
        let mut exclude = vec![namespace.to_string()];
        exclude.extend(self.policy.deny_destination_namespaces.iter().cloned());
        let refusal = format!(
            "exists and was made neither by kubesync nor by {} as a copy of this source: left untouched",
            tools
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        );
        let adopt_tools = tools.clone();
        let declared = Arc::new(declared);
        let source = SourceRef::one(ar.clone(), namespace, key.name.clone());
        FanOutSpec {
            destinations: vec![Destination {
                namespaces: NamespaceRule {
                    namespace: None,
                    namespace_selector: None,
                    exclude_namespaces: exclude,
                    only_namespaces: self.policy.allow_destination_namespaces.clone(),
                    matcher: Some(NamespaceMatcher::new(move |name, labels| {
                        declared.admits(name, labels)
                    })),
                },
                ..Destination::default()
            }],
            on_conflict: OnConflict::Adopt,
            adoptable: Some(Adoptable {
                admits: Shared(Arc::new(move |there, copy| {
                    marked_source(copy).is_some_and(|s| declared::made_by(&adopt_tools, there, &s))
                })),
                refusal,
            }),
            rules: CopyRules {
                // Its own bookkeeping is the tool's annotations (the annotator's); it copies
                // none of the source's.
                reserved: Vec::new(),
                labels,
                annotations: nothing(),
                data: None,
                extra_labels: [(DECLARED_BY.to_string(), DECLARED_BY_ANNOTATIONS.to_string())]
                    .into(),
                annotate: Some(Annotator::new(move |source, copy| {
                    declared::bookkeeping(&tools, source, copy)
                })),
                // No label of Helm's, Argo CD's or Flux's ownership.
                ..CopyRules::default()
            },
            consent: untrusted.then(|| crate::policy::consent(&self.policy, namespace, ar)),
            update_policy: match self.version_gate {
                true => UpdatePolicy::OnSourceChange,
                false => UpdatePolicy::Sync,
            },
            ..FanOutSpec::new(source)
        }
    }
}

/// The notes an outcome calls for: each destination kubesync could not write, and why.
fn destination_notes(outcome: &Outcome) -> Vec<String> {
    outcome
        .destinations
        .iter()
        .filter(|d| {
            matches!(
                d.state,
                DestinationState::Conflict | DestinationState::Error | DestinationState::Refused
            )
        })
        .map(|d| format!("not copied to namespace {}: {}", d.namespace, d.message))
        .collect()
}

/// A key filter that lets nothing through.
fn nothing() -> KeyFilter {
    KeyFilter {
        include: Vec::new(),
        exclude: vec!["*".into()],
    }
}

/// The owner of the copies an object with uid `uid` declared.
pub(crate) fn owner(key: &ObjectKey, uid: &str) -> Owner {
    Owner {
        reference: format!(
            "{LOCAL}/{}/{} ({} annotations)",
            key.namespace.as_deref().unwrap_or_default(),
            key.name,
            key.kind
        ),
        uid: uid.to_string(),
        shard: None,
    }
}

/// What removing every copy of `key` needs: the kind, the source, this cluster.
fn removal_of(ar: &ApiResource, key: &ObjectKey) -> FanOutSpec {
    let source = SourceRef::one(
        ar.clone(),
        key.namespace.clone().unwrap_or_default(),
        key.name.clone(),
    );
    FanOutSpec::removal(source, [None], DeletionPolicy::Delete)
}
