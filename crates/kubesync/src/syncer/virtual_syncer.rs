//! Virtual syncers: target objects that exist because other objects need them (vcluster's
//! "fake" syncers), e.g. a namespace that must exist while some source object refers to it.
//!
//! Keys are target names. A reconcile asks the syncer what should exist there
//! ([`VirtualSyncer::desired`]) and compares with the target store:
//!
//! | desired | target | action |
//! | --- | --- | --- |
//! | some | absent | create |
//! | some | owned, different | replace (guarded by resourceVersion) |
//! | some | not owned | leave it (logged) |
//! | none | owned | delete (uid precondition) |
//! | none | not owned / absent | nothing |

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{DynamicObject, PropagationPolicy};
use kube::core::ApiResource;

use crate::cluster::Cluster;
use crate::error::Result;
use crate::key::ObjectKey;
use crate::runtime::{Action, ClusterStatus, Context, Controller, Reconciler, Watch};
use crate::translate::ObjectName;
use crate::writer::Writer;

/// Maps an event of a watched object to the target names it may need.
pub type NeedMapper = Arc<dyn Fn(&DynamicObject) -> Vec<ObjectName> + Send + Sync>;

/// A watch whose objects create needs.
#[derive(Clone)]
pub struct NeedWatch {
    /// The cluster to watch (registered with the engine).
    pub cluster: Cluster,
    /// What to watch.
    pub watch: Watch,
    /// Event → target names that may be needed (or no longer needed).
    pub mapper: NeedMapper,
}

/// What a [`VirtualSyncer`] sees.
pub struct VirtualContext<'a> {
    /// Runtime context: every watch store.
    pub ctx: &'a Context,
    /// The target cluster.
    pub target: &'a Cluster,
}

/// Creates, updates and deletes target objects according to the needs of other objects.
pub trait VirtualSyncer: Send + Sync + 'static {
    /// The type of the target objects.
    fn target_resource(&self) -> &ApiResource;

    /// Watches whose events may change what is needed.
    fn needs(&self) -> Vec<NeedWatch>;

    /// The object that must exist at `name` (from the stores in `cx`), or `None`.
    fn desired(&self, cx: &VirtualContext<'_>, name: &ObjectName) -> Option<DynamicObject>;

    /// Whether a target object carries the marks that prove this syncer created it.
    fn is_owned(&self, target: &DynamicObject) -> bool;

    /// Whether the existing object already is as desired (default: same labels, annotations,
    /// and top-level fields of `desired` other than metadata). Labels the apiserver sets
    /// itself ([`APISERVER_LABELS`]) are no difference.
    fn in_sync(&self, desired: &DynamicObject, actual: &DynamicObject) -> bool {
        own_labels(desired) == own_labels(actual)
            && desired.metadata.annotations.clone().unwrap_or_default()
                == actual.metadata.annotations.clone().unwrap_or_default()
            && desired
                .data
                .as_object()
                .is_none_or(|m| m.iter().all(|(k, v)| actual.data.get(k) == Some(v)))
    }
}

/// Labels the apiserver sets on objects of a kind itself: `(kind, key)`. Every Namespace
/// carries `kubernetes.io/metadata.name` (its name; from Kubernetes v1.21 on), whatever the
/// writer sent, so a syncer that compared it would write on every reconcile and never settle.
pub const APISERVER_LABELS: &[(&str, &str)] = &[("Namespace", "kubernetes.io/metadata.name")];

/// An object's labels without those the apiserver sets itself (pure).
pub fn own_labels(obj: &DynamicObject) -> std::collections::BTreeMap<String, String> {
    let kind = obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("");
    let mut labels = obj.metadata.labels.clone().unwrap_or_default();
    for (k, key) in APISERVER_LABELS {
        if *k == kind {
            labels.remove(*key);
        }
    }
    labels
}

/// Runs a [`VirtualSyncer`].
#[must_use]
pub struct VirtualEngine<V: VirtualSyncer> {
    syncer: Arc<V>,
    target: Cluster,
    writer: Writer,
}

impl<V: VirtualSyncer> VirtualEngine<V> {
    /// An engine writing to `target`.
    pub fn new(syncer: V, target: Cluster) -> Self {
        Self {
            syncer: Arc::new(syncer),
            target,
            writer: Writer::new(),
        }
    }

    /// The writer whose counts this engine updates.
    pub fn write_counter(&self) -> Writer {
        self.writer.clone()
    }

    /// The runtime controller and reconciler, not yet running.
    pub fn into_parts(self) -> Result<(Controller, VirtualReconciler<V>)> {
        let t = self.target.name().to_string();
        let ar = self.syncer.target_resource().clone();
        let mut controller = Controller::new()
            .cluster(self.target.clone())
            .watch(&t, Watch::dynamic(ar.clone()))?;
        for need in self.syncer.needs() {
            let name = need.cluster.name().to_string();
            controller = controller
                .cluster(need.cluster.clone())
                .depends_on(&t, &name);
            let (t2, ar2, mapper) = (t.clone(), ar.clone(), need.mapper.clone());
            controller = controller.watch_mapped(&name, need.watch, move |_key, obj| {
                mapper(obj)
                    .into_iter()
                    .map(|n| ObjectKey::new(t2.clone(), &ar2, n.namespace, n.name))
                    .collect()
            })?;
        }
        Ok((
            controller,
            VirtualReconciler {
                syncer: self.syncer,
                target: self.target,
                writer: self.writer,
            },
        ))
    }

    /// Runs until `shutdown` resolves.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let (controller, reconciler) = self.into_parts()?;
        controller.run(reconciler, shutdown).await
    }
}

/// The runtime reconciler of a [`VirtualEngine`].
pub struct VirtualReconciler<V: VirtualSyncer> {
    syncer: Arc<V>,
    target: Cluster,
    writer: Writer,
}

impl<V: VirtualSyncer> Reconciler for VirtualReconciler<V> {
    type Error = crate::Error;

    async fn reconcile(&self, key: &ObjectKey, ctx: &Context) -> Result<Action> {
        let ar = self.syncer.target_resource();
        if key.cluster != self.target.name() || !key.is_of(ar) {
            return Ok(Action::done());
        }
        let name = ObjectName {
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        };
        let cx = VirtualContext {
            ctx,
            target: &self.target,
        };
        let desired = self.syncer.desired(&cx, &name);
        let actual = ctx.get(key);
        match (desired, actual.as_deref()) {
            (Some(d), None) => {
                self.writer
                    .create(&self.target, ar, &d, "kubesync-virtual")
                    .await?;
                tracing::info!(target = %name, "created (needed)");
            }
            (Some(d), Some(a)) if self.syncer.is_owned(a) && !self.syncer.in_sync(&d, a) => {
                let mut updated = a.clone();
                updated.metadata.labels = d.metadata.labels.clone();
                updated.metadata.annotations = d.metadata.annotations.clone();
                if let (Some(u), Some(dm)) = (updated.data.as_object_mut(), d.data.as_object()) {
                    for (k, v) in dm {
                        u.insert(k.clone(), v.clone());
                    }
                }
                self.writer
                    .replace(&self.target, ar, &updated, "kubesync-virtual")
                    .await?;
            }
            (Some(_), Some(a)) if self.syncer.is_owned(a) => {}
            (Some(_), Some(_)) => {
                tracing::info!(target = %name, "needed, but an object kubesync did not create is there; leaving it");
            }
            (None, Some(a))
                if self.syncer.is_owned(a) && a.metadata.deletion_timestamp.is_none() =>
            {
                // "Not needed" is only trusted while every cluster with needs is healthy.
                let healthy = self
                    .syncer
                    .needs()
                    .iter()
                    .all(|n| ctx.cluster_status(n.cluster.name()) == ClusterStatus::Ready);
                if !healthy {
                    return Ok(Action::requeue(Duration::from_secs(5)));
                }
                self.writer
                    .delete(
                        &self.target,
                        ar,
                        name.namespace.as_deref(),
                        &name.name,
                        Some(PropagationPolicy::Background),
                        a.metadata.uid.as_deref(),
                    )
                    .await?;
                tracing::info!(target = %name, "deleted (no longer needed)");
            }
            _ => {}
        }
        Ok(Action::done())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: &str, labels: serde_json::Value) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": kind,
            "metadata": {"name": "team-a", "labels": labels},
        }))
        .expect("object")
    }

    #[test]
    fn labels_the_apiserver_sets_are_no_difference() {
        let desired = object("Namespace", serde_json::json!({"team": "a"}));
        let actual = object(
            "Namespace",
            serde_json::json!({"team": "a", "kubernetes.io/metadata.name": "team-a"}),
        );
        assert_eq!(own_labels(&desired), own_labels(&actual));
        // Only for the kind the apiserver sets it on.
        let cm = object(
            "ConfigMap",
            serde_json::json!({"kubernetes.io/metadata.name": "team-a"}),
        );
        assert_eq!(own_labels(&cm).len(), 1);
        // Any other label still counts.
        let other = object("Namespace", serde_json::json!({"team": "b"}));
        assert_ne!(own_labels(&desired), own_labels(&other));
    }
}
