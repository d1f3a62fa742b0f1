//! Copies ConfigMaps labelled `kubesync.io/copy=true` from a source cluster to a target cluster,
//! keeps the copies up to date (edits and deletions of a copy are reverted), and deletes a copy
//! when its source goes away or loses the label.
//!
//! ```sh
//! cargo run -p kubesync --example copy -- --source east --target west
//! ```
//!
//! It shows the runtime's building blocks: a primary watch in one cluster, a secondary watch in
//! another whose events map back to the primary key, reads from the watch stores, every write
//! through one [`Writer`] (which counts them: an in-sync restart writes nothing), and
//! ownership marks so that only copies made by this program are ever deleted.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta};
use kube::core::ApiResource;
use kube::{Resource, ResourceExt};
use kubesync::object::to_dynamic;
use kubesync::{Action, Cluster, Context, Controller, ObjectKey, Reconciler, Watch, Writer};

/// Label that selects ConfigMaps to copy.
pub const COPY_LABEL: &str = "kubesync.io/copy";
/// Label on every copy, naming the source cluster (the ownership mark).
pub const COPIED_FROM_LABEL: &str = "kubesync.io/copied-from";
/// Annotation on every copy: `<cluster>/<namespace>/<name>` of its source.
pub const ORIGIN_ANNOTATION: &str = "kubesync.io/origin";
const FIELD_MANAGER: &str = "kubesync-copy-example";

/// Runs the copy controller until `shutdown` resolves.
pub async fn run_copy(
    source: Cluster,
    target: Cluster,
    shutdown: impl Future<Output = ()> + Send,
) -> kubesync::Result<()> {
    let (controller, copier) = copy_controller(source, target)?;
    controller.run(copier, shutdown).await
}

/// The copy controller's watches and its reconciler, not yet running.
pub fn copy_controller(source: Cluster, target: Cluster) -> kubesync::Result<(Controller, Copier)> {
    let (s, t) = (source.name().to_string(), target.name().to_string());
    let mapped_source = s.clone();
    let controller = Controller::new()
        .cluster(source)
        .cluster(target)
        // A source key is decided on what the target store shows: not before it has listed
        // (else a copy that exists looks missing, and its create is refused).
        .depends_on(&s, &t)
        .watch(
            &s,
            Watch::of::<ConfigMap>().labels(&format!("{COPY_LABEL}=true")),
        )?
        // Copies in the target map back to their source: drift or deletion of a copy
        // re-runs the source's reconcile, which repairs it.
        .watch_mapped(
            &t,
            Watch::of::<ConfigMap>().labels(&format!("{COPIED_FROM_LABEL}={s}")),
            move |key, _| vec![key.in_cluster(mapped_source.clone())],
        )?;
    let copier = Copier {
        target: t,
        namespaces: Mutex::default(),
        writer: Writer::new(),
    };
    Ok((controller, copier))
}

/// The copy controller's reconciler.
pub struct Copier {
    target: String,
    /// Namespaces known to exist in the target (saves a request per object).
    namespaces: Mutex<HashSet<String>>,
    /// Every write goes through it (and is counted).
    writer: Writer,
}

/// An API error's status, if `e` is one.
fn api_status(e: &kubesync::Error) -> Option<&kube::core::Status> {
    match e {
        kubesync::Error::Kube(kube::Error::Api(s)) => Some(s),
        _ => None,
    }
}

impl Reconciler for Copier {
    type Error = kubesync::Error;

    async fn reconcile(&self, key: &ObjectKey, ctx: &Context) -> kubesync::Result<Action> {
        let target = ctx.require_cluster(&self.target)?;
        let ns = key.namespace.clone().unwrap_or_default();
        let cm_type = ApiResource::erase::<ConfigMap>(&());
        // The target watch holds exactly the copies made from this source cluster.
        let existing_copy: Option<ConfigMap> = ctx.get_as(&key.in_cluster(&self.target))?;
        let source: Option<ConfigMap> = ctx.get_as(key)?;
        let origin = format!("{}/{}/{}", key.cluster, ns, key.name);
        let ours = |c: &ConfigMap| c.annotations().get(ORIGIN_ANNOTATION) == Some(&origin);

        let Some(source) = source.filter(|s| s.meta().deletion_timestamp.is_none()) else {
            // Source gone (or no longer labelled): delete the copy, but only if it is ours
            // (and still the very object looked at: its uid is the precondition).
            if let Some(copy) = existing_copy.filter(|c| ours(c)) {
                tracing::info!(target: "copy", "source {origin} is gone; deleting {}/{ns}/{}", self.target, key.name);
                let deleted = self
                    .writer
                    .delete(
                        &target,
                        &cm_type,
                        Some(&ns),
                        &key.name,
                        None,
                        copy.metadata.uid.as_deref(),
                    )
                    .await;
                match deleted {
                    Ok(_) => {}
                    Err(e) if api_status(&e).is_some_and(|s| s.is_conflict()) => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(Action::done());
        };

        let mut desired = desired_copy(&source, &key.cluster, &origin);
        match existing_copy {
            Some(copy) if !ours(&copy) => {
                tracing::info!(target: "copy", "{}/{ns}/{} is not a copy of {origin}; leaving it", self.target, key.name);
            }
            Some(copy) if in_sync(&copy, &desired) => {}
            Some(copy) => {
                // The copy is wholly ours: replace it, guarded by its resourceVersion.
                tracing::info!(target: "copy", "updating {}/{ns}/{} from {origin}", self.target, key.name);
                desired.metadata.resource_version = copy.metadata.resource_version.clone();
                self.writer
                    .replace(&target, &cm_type, &to_dynamic(&desired)?, FIELD_MANAGER)
                    .await?;
            }
            None => {
                self.ensure_namespace(&target, &ns).await?;
                let created = self
                    .writer
                    .create(&target, &cm_type, &to_dynamic(&desired)?, FIELD_MANAGER)
                    .await;
                match created {
                    Ok(_) => {
                        tracing::info!(target: "copy", "created {}/{ns}/{} from {origin}", self.target, key.name)
                    }
                    // Something else already has the name: never overwrite it.
                    Err(e) if api_status(&e).is_some_and(|s| s.is_already_exists()) => {
                        let copies: Api<ConfigMap> = Api::namespaced(target.client().clone(), &ns);
                        let other = copies.get_opt(&key.name).await?;
                        if other.as_ref().is_some_and(|c| !ours(c)) {
                            tracing::info!(target: "copy", "{}/{ns}/{} exists and is not a copy of {origin}; leaving it", self.target, key.name);
                        }
                    }
                    Err(e) if api_status(&e).is_some_and(|s| s.is_not_found()) => {
                        // The namespace went away since we last looked.
                        self.lock_namespaces().remove(&ns);
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(Action::done())
    }
}

impl Copier {
    fn lock_namespaces(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.namespaces.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn ensure_namespace(&self, target: &Cluster, ns: &str) -> kubesync::Result<()> {
        if self.lock_namespaces().contains(ns) {
            return Ok(());
        }
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        let ns_type = ApiResource::erase::<Namespace>(&());
        match self
            .writer
            .create(target, &ns_type, &to_dynamic(&namespace)?, FIELD_MANAGER)
            .await
        {
            Ok(_) => {}
            Err(e) if api_status(&e).is_some_and(|s| s.is_already_exists()) => {}
            Err(e) => return Err(e),
        }
        self.lock_namespaces().insert(ns.to_string());
        Ok(())
    }

    /// The writer whose counts this copier updates.
    pub fn write_counter(&self) -> Writer {
        self.writer.clone()
    }
}

fn desired_copy(source: &ConfigMap, source_cluster: &str, origin: &str) -> ConfigMap {
    let mut labels: BTreeMap<String, String> = source.labels().clone();
    labels.remove(COPY_LABEL);
    labels.insert(COPIED_FROM_LABEL.into(), source_cluster.into());
    ConfigMap {
        metadata: ObjectMeta {
            name: source.metadata.name.clone(),
            namespace: source.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some([(ORIGIN_ANNOTATION.to_string(), origin.to_string())].into()),
            ..Default::default()
        },
        data: source.data.clone(),
        binary_data: source.binary_data.clone(),
        ..Default::default()
    }
}

fn in_sync(copy: &ConfigMap, desired: &ConfigMap) -> bool {
    copy.data.clone().unwrap_or_default() == desired.data.clone().unwrap_or_default()
        && copy.binary_data.clone().unwrap_or_default()
            == desired.binary_data.clone().unwrap_or_default()
        && desired
            .labels()
            .iter()
            .all(|(k, v)| copy.labels().get(k) == Some(v))
        && copy.labels().len() == desired.labels().len()
}

#[derive(clap::Parser)]
struct Args {
    /// Kubeconfig context of the source cluster.
    #[arg(long)]
    source: String,
    /// Kubeconfig context of the target cluster.
    #[arg(long)]
    target: String,
    /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
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
    let load = |context: String| {
        let path = args.kubeconfig.clone();
        async move {
            match path {
                Some(p) => Cluster::from_kubeconfig_file(p, Some(&context)).await,
                None => Cluster::from_context(&context).await,
            }
        }
    };
    let source = load(args.source.clone()).await?;
    let target = load(args.target.clone()).await?;
    run_copy(source, target, kubesync::runtime::shutdown_signal()).await?;
    Ok(())
}
