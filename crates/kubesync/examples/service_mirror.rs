//! A custom syncer on kubesync's framework: Services of one namespace in a source cluster are
//! mirrored into a target cluster as `mirror-<name>`, with the same ports and selector.
//!
//! ```sh
//! cargo run -p kubesync --example service_mirror -- --source east --target west --namespace shop
//! ```
//!
//! What the framework gives it: the entry point is chosen by which side exists (create,
//! update, or delete the mirror when the source goes — only if the mirror carries this
//! syncer's mark), names are translated both ways and the reverse is verified (a
//! `mirror-x` that kubesync did not create is never taken for one), and a hook lets a source
//! opt out with the annotation `mirror.kubesync.io/skip: "true"`.

use std::future::Future;

use k8s_openapi::api::core::v1::Service;
use kube::api::{DynamicObject, ResourceExt};
use kube::core::ApiResource;
use kubesync::runtime::{Action, Watch};
use kubesync::syncer::{Flow, SyncContext, SyncEngine, Syncer};
use kubesync::translate::{ObjectName, Translator};
use kubesync::{Cluster, Result};

/// Annotation on every mirror, naming its source (`<namespace>/<name>`): the ownership mark.
pub const MIRROR_OF: &str = "mirror.kubesync.io/mirror-of";
/// Annotation on a source Service that keeps it from being mirrored.
pub const SKIP: &str = "mirror.kubesync.io/skip";
const FIELD_MANAGER: &str = "kubesync-service-mirror";

/// `<name>` ↔ `mirror-<name>`, same namespace, only in the watched namespace.
pub struct MirrorNames {
    namespace: String,
}

impl Translator for MirrorNames {
    fn to_target(&self, source: &ObjectName) -> Option<ObjectName> {
        (source.namespace.as_deref() == Some(self.namespace.as_str()))
            .then(|| ObjectName::namespaced(&self.namespace, format!("mirror-{}", source.name)))
    }

    fn to_source_unverified(&self, target: &ObjectName) -> Option<ObjectName> {
        let name = target.name.strip_prefix("mirror-")?;
        Some(ObjectName::namespaced(target.namespace.clone()?, name))
    }
}

/// The mirroring syncer.
pub struct ServiceMirror {
    names: MirrorNames,
    resource: ApiResource,
    selector: Option<String>,
}

impl ServiceMirror {
    /// Mirrors Services of `namespace`.
    pub fn new(namespace: &str) -> Self {
        Self {
            names: MirrorNames {
                namespace: namespace.to_string(),
            },
            resource: ApiResource::erase::<Service>(&()),
            selector: None,
        }
    }

    /// Mirrors only Services matching this label selector. A Service that stops matching
    /// keeps its mirror: only a source that is really gone takes its mirror with it.
    pub fn selector(mut self, selector: &str) -> Self {
        self.selector = Some(selector.to_string());
        self
    }

    fn desired(&self, cx: &SyncContext<'_>, source: &DynamicObject) -> Result<DynamicObject> {
        let service: Service =
            source
                .clone()
                .try_parse()
                .map_err(|e| kubesync::Error::Convert {
                    key: cx.key.to_string(),
                    target: "Service",
                    message: e.to_string(),
                })?;
        let spec = service.spec.unwrap_or_default();
        let mirror = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {
                "name": cx.target_name.name, "namespace": cx.target_name.namespace,
                "labels": source.labels(),
                "annotations": { MIRROR_OF: cx.source_name.to_string() },
            },
            // Only what defines the service; clusterIP is allocated by the target cluster.
            "spec": { "ports": spec.ports, "selector": spec.selector, "type": spec.type_ },
        });
        Ok(serde_json::from_value(mirror)?)
    }
}

impl Syncer for ServiceMirror {
    fn source_resource(&self) -> &ApiResource {
        &self.resource
    }

    fn translator(&self) -> &dyn Translator {
        &self.names
    }

    fn source_watch(&self) -> Watch {
        let watch = Watch::of::<Service>().namespace(&self.names.namespace);
        match &self.selector {
            Some(selector) => watch.labels(selector),
            None => watch,
        }
    }

    fn target_watch(&self) -> Watch {
        Watch::of::<Service>().namespace(&self.names.namespace)
    }

    fn is_owned(&self, target: &DynamicObject) -> bool {
        target.annotations().contains_key(MIRROR_OF)
    }

    fn reconcile_start(
        &self,
        _cx: &SyncContext<'_>,
        source: Option<&DynamicObject>,
        _target: Option<&DynamicObject>,
    ) -> impl Future<Output = Result<Flow>> + Send {
        let skip =
            source.is_some_and(|s| s.annotations().get(SKIP).map(String::as_str) == Some("true"));
        async move {
            Ok(if skip {
                Flow::Skip(Action::done())
            } else {
                Flow::Continue
            })
        }
    }

    async fn sync_down(&self, cx: &SyncContext<'_>, source: &DynamicObject) -> Result<Action> {
        let mirror = self.desired(cx, source)?;
        cx.writer
            .create(cx.target, &self.resource, &mirror, FIELD_MANAGER)
            .await?;
        tracing::info!(target: "service_mirror", "created {}/{} from {}", cx.target.name(), cx.target_name, cx.source_name);
        Ok(Action::done())
    }

    async fn sync(
        &self,
        cx: &SyncContext<'_>,
        source: &DynamicObject,
        target: &DynamicObject,
    ) -> Result<Action> {
        if !self.is_owned(target) {
            tracing::info!(target: "service_mirror", "{} exists and is not a mirror; leaving it", cx.target_name);
            return Ok(Action::done());
        }
        let desired = self.desired(cx, source)?;
        let same = target.data["spec"]["ports"] == desired.data["spec"]["ports"]
            && target.data["spec"]["selector"] == desired.data["spec"]["selector"]
            && target.labels() == desired.labels();
        if !same {
            // The mirror is wholly ours: replace the fields we define on the current object
            // (keeping what the target cluster allocated, like clusterIP), guarded by its
            // resourceVersion.
            let mut updated = target.clone();
            updated.metadata.labels = desired.metadata.labels.clone();
            updated.data["spec"]["ports"] = desired.data["spec"]["ports"].clone();
            updated.data["spec"]["selector"] = desired.data["spec"]["selector"].clone();
            cx.writer
                .replace(cx.target, &self.resource, &updated, FIELD_MANAGER)
                .await?;
            tracing::info!(target: "service_mirror", "updated {}/{}", cx.target.name(), cx.target_name);
        }
        Ok(Action::done())
    }
}

/// Mirrors Services of `namespace` from `source` to `target` until `shutdown` resolves.
pub async fn run_mirror(
    source: Cluster,
    target: Cluster,
    namespace: &str,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    SyncEngine::new(ServiceMirror::new(namespace), source, target)
        .run(shutdown)
        .await
}

#[derive(clap::Parser)]
struct Args {
    /// Kubeconfig context of the source cluster.
    #[arg(long)]
    source: String,
    /// Kubeconfig context of the target cluster.
    #[arg(long)]
    target: String,
    /// Namespace whose Services are mirrored.
    #[arg(long)]
    namespace: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use clap::Parser;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let source = Cluster::from_context(&args.source).await?;
    let target = Cluster::from_context(&args.target).await?;
    run_mirror(
        source,
        target,
        &args.namespace,
        kubesync::runtime::shutdown_signal(),
    )
    .await?;
    Ok(())
}
