//! Mirrors filled: gather (the source and the target, read live; the namespace's labels when a
//! selector asks) → decide ([`mirror`](crate::compat::mirror): declared? consented? what to
//! write?) → one server-side apply under [`MIRROR_MANAGER`], or none when the target shows it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kubesync::ObjectKey;
use kubesync::runtime::Action;

use super::CompatController;
use crate::compat::Tool;
use crate::compat::declared::{REFLECTED_VERSION, REPLICATED_FROM_VERSION};
use crate::compat::mirror::{
    MIRROR_MANAGER, Mirror, apply_body, consents, declared_mirror, in_sync, needs_labels,
};
use crate::remote::LOCAL;

/// What a pull reconcile ends with: nothing to do, or an apply of this body.
enum Next {
    Nothing,
    Apply(Box<DynamicObject>),
}

impl CompatController {
    /// The objects that pull from `source`.
    pub(super) fn mirrors_of(&self, source: &ObjectKey) -> Vec<ObjectKey> {
        self.mirrors
            .lock()
            .by_source
            .get(source)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// The pull `object`'s annotations declare; when it declares none (or cannot be read,
    /// or its source refuses, or the source of a replicator pull is gone) and a pull wrote
    /// into it before, what that pull brought is removed. Failures are notes, retried.
    pub(super) async fn mirror(
        &self,
        key: &ObjectKey,
        ar: &ApiResource,
        object: Option<&DynamicObject>,
        writer: &kubesync::Writer,
        found: &mut super::Found,
    ) -> Action {
        let super::Found { notes, summary } = found;
        let Some(object) = object else {
            self.mirrors.lock().set(key, None);
            return Action::done();
        };
        let none = BTreeMap::new();
        let annotations = object.metadata.annotations.as_ref().unwrap_or(&none);
        let declared = declared_mirror(&self.tools, ar, annotations);
        let pull = match declared {
            Ok(pull) => pull,
            Err(why) => {
                notes.insert(why);
                None
            }
        };
        self.mirrors.lock().set(
            key,
            pull.as_ref()
                .map(|p| ObjectKey::new(LOCAL, ar, Some(p.namespace.clone()), &p.name)),
        );
        // Only an object a pull (or the tool) wrote bookkeeping into may hold what a pull
        // brought: the others are not read at all.
        let bookkept = [REPLICATED_FROM_VERSION, REFLECTED_VERSION]
            .iter()
            .any(|k| annotations.contains_key(*k));
        if pull.is_none() && !bookkept {
            return Action::done();
        }
        let before = notes.len();
        // The target is written as its namespace's ServiceAccount outside the trusted
        // namespaces (its source consents by its annotations, and is read as kubesync).
        let namespace = key.namespace.as_deref().unwrap_or_default();
        let target_cluster = match self.policy.default_identity(namespace) {
            Ok(None) => self.local.clone(),
            Ok(Some(who)) => self.local.acting_as(&who),
            Err(why) => {
                notes.insert(format!("not pulled: {why}"));
                summary.mirror = pull.map(|p| (p.tool, false));
                return Action::done();
            }
        };
        let action = match self.decide_mirror(key, ar, pull.as_ref(), notes).await {
            Ok(Next::Nothing) => Action::done(),
            Ok(Next::Apply(body)) => {
                match writer
                    .apply(&target_cluster, ar, &body, MIRROR_MANAGER)
                    .await
                {
                    Ok(_) => Action::done(),
                    Err(e) => {
                        notes.insert(format!("not pulled: {e}"));
                        Action::requeue(Duration::from_secs(5))
                    }
                }
            }
            Err(why) => {
                notes.insert(why);
                Action::requeue(Duration::from_secs(5))
            }
        };
        // A pull stands when nothing was said about it (the push's notes come before).
        summary.mirror = pull.map(|p| (p.tool, notes.len() == before));
        action
    }

    /// Reads the target and the source, and decides what to apply (`Err`: a read failed).
    async fn decide_mirror(
        &self,
        key: &ObjectKey,
        ar: &ApiResource,
        pull: Option<&Mirror>,
        notes: &mut BTreeSet<String>,
    ) -> Result<Next, String> {
        let namespace = key.namespace.clone().unwrap_or_default();
        let api =
            |ns: &str| Api::<DynamicObject>::namespaced_with(self.local.client().clone(), ns, ar);
        let target = match api(&namespace).get_opt(&key.name).await {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(Next::Nothing),
            Err(e) => return Err(format!("not pulled: the object could not be read: {e}")),
        };
        let Some(pull) = pull else {
            return Ok(end(ar, &target, Tool::Replicator));
        };
        let from = format!("{}/{}", pull.namespace, pull.name);
        let source = match api(&pull.namespace).get_opt(&pull.name).await {
            Ok(s) => s,
            Err(e) => return Err(format!("not pulled from {from}: it could not be read: {e}")),
        };
        let Some(source) = source else {
            notes.insert(refused(&from, pull.tool, &namespace));
            // reflector keeps a mirror's data when its source goes; replicator's keys go.
            return Ok(match pull.tool {
                Tool::Reflector => Next::Nothing,
                Tool::Replicator => end(ar, &target, pull.tool),
            });
        };
        let none = BTreeMap::new();
        let consenting = source.metadata.annotations.as_ref().unwrap_or(&none);
        let labels = match needs_labels(pull.tool, consenting) {
            true => self.namespace_labels(&namespace).await,
            false => None,
        };
        if consents(pull.tool, consenting, &namespace, labels.as_ref()).is_err() {
            notes.insert(refused(&from, pull.tool, &namespace));
            return Ok(end(ar, &target, pull.tool));
        }
        // Past its consent, the source may be told about.
        if let Err(why) = self.grantable(&namespace, ar, &source) {
            notes.insert(format!("not pulled from {from}: {why}"));
            return Ok(end(ar, &target, pull.tool));
        }
        // The version gate: the target says it carries this version of the source.
        let carried = match pull.tool {
            Tool::Reflector => REFLECTED_VERSION,
            Tool::Replicator => REPLICATED_FROM_VERSION,
        };
        if self.version_gate
            && target
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(carried))
                == source.metadata.resource_version.as_ref()
        {
            return Ok(Next::Nothing);
        }
        let body = apply_body(ar, &target, pull.tool, Some(&source));
        Ok(match in_sync(&target, &body) {
            true => Next::Nothing,
            false => Next::Apply(Box::new(body)),
        })
    }

    /// A pull needs no SyncGrant (its source consents), but outside the trusted namespaces
    /// its kind must be one a grant need not name (as the source will be written).
    fn grantable(
        &self,
        namespace: &str,
        ar: &ApiResource,
        source: &DynamicObject,
    ) -> Result<(), String> {
        if self.policy.is_trusted(namespace) || !self.policy.must_be_named(ar, source) {
            return Ok(());
        }
        Err(format!(
            "namespace {namespace} may pull only kinds a SyncGrant need not name (ConfigMaps, Secrets that are no service-account tokens, and those of --grantable-resource); this is a {}",
            ar.kind
        ))
    }

    /// The labels of `namespace` (read live; `None` when it cannot be read: no selector
    /// matches then).
    async fn namespace_labels(&self, namespace: &str) -> Option<BTreeMap<String, String>> {
        Api::<Namespace>::all(self.local.client().clone())
            .get(namespace)
            .await
            .ok()
            .map(|ns| ns.metadata.labels.unwrap_or_default())
    }
}

/// Why a pull from `from` into `namespace` is not made, whether its source is missing or does
/// not consent: one answer for both, so that naming objects in other namespaces tells nobody
/// which exist (an existence oracle). What the source must say is the tool's documentation.
fn refused(from: &str, tool: Tool, namespace: &str) -> String {
    let says = match tool {
        Tool::Reflector => format!(
            "{}: \"true\" and allowed namespaces that admit it",
            super::declared::REFLECTION_ALLOWED
        ),
        Tool::Replicator => format!(
            "{}: \"true\" and {} that admit it",
            crate::compat::mirror::REPLICATION_ALLOWED,
            crate::compat::mirror::REPLICATION_ALLOWED_NAMESPACES
        ),
    };
    format!(
        "not pulled from {from}: no such object consents to a pull into namespace {namespace} (it must exist and say {says})"
    )
}

/// The pull ends: remove what it brought, if it brought anything.
fn end(ar: &ApiResource, target: &DynamicObject, tool: Tool) -> Next {
    let body = apply_body(ar, target, tool, None);
    match in_sync(target, &body) {
        true => Next::Nothing,
        false => Next::Apply(Box::new(body)),
    }
}
