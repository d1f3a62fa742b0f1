//! Copies ConfigMaps labelled `kubesync.io/copy=true` from a source cluster to a target cluster,
//! keeps the copies up to date (edits and deletions of a copy are reverted), and deletes a copy
//! when its source goes away or loses the label.
//!
//! ```sh
//! cargo run -p kubesync --example copy -- --source east --target west
//! ```
//!
//! It shows the runtime's building blocks: a primary watch in one cluster, a secondary watch in
//! another whose events map back to the primary key, reads from the watch stores, and
//! ownership marks so that only copies made by this program are ever deleted.

use std::collections::BTreeMap;
use std::future::Future;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use kubesync::{Action, Cluster, Context, Controller, ObjectKey, Reconciler, Watch};

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
    let (s, t) = (source.name().to_string(), target.name().to_string());
    let mapped_source = s.clone();
    Controller::new()
        .cluster(source)
        .cluster(target)
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
        )?
        .run(Copier { target: t }, shutdown)
        .await
}

struct Copier {
    target: String,
}

impl Reconciler for Copier {
    type Error = kubesync::Error;

    async fn reconcile(&self, key: &ObjectKey, ctx: &Context) -> kubesync::Result<Action> {
        let target = ctx.require_cluster(&self.target)?;
        let ns = key.namespace.clone().unwrap_or_default();
        let copies: Api<ConfigMap> = Api::namespaced(target.client().clone(), &ns);
        let existing_copy: Option<ConfigMap> = ctx.get_as(&key.in_cluster(&self.target))?;
        let source: Option<ConfigMap> = ctx.get_as(key)?;
        let origin = format!("{}/{}/{}", key.cluster, ns, key.name);

        let Some(source) = source.filter(|s| s.meta().deletion_timestamp.is_none()) else {
            // Source gone (or no longer labelled): delete the copy, but only if it is ours.
            if let Some(copy) = existing_copy
                && copy.annotations().get(ORIGIN_ANNOTATION) == Some(&origin)
            {
                println!(
                    "copy: source {origin} is gone; deleting {}/{ns}/{}",
                    self.target, key.name
                );
                match copies.delete(&key.name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.is_not_found() => {}
                    Err(e) => return Err(e.into()),
                }
            }
            return Ok(Action::done());
        };

        let desired = desired_copy(&source, &key.cluster, &origin);
        // The target watch only holds our copies; something else may sit under the name.
        let existing_copy = match existing_copy {
            Some(copy) => Some(copy),
            None => copies.get_opt(&key.name).await?,
        };
        if let Some(copy) = &existing_copy {
            if copy.annotations().get(ORIGIN_ANNOTATION) != Some(&origin) {
                // Not ours: never overwrite an object this program did not create.
                println!(
                    "copy: {}/{ns}/{} exists and is not a copy of {origin}; leaving it",
                    self.target, key.name
                );
                return Ok(Action::done());
            }
            if in_sync(copy, &desired) {
                return Ok(Action::done());
            }
        }
        ensure_namespace(target.client(), &ns).await?;
        let verb = if existing_copy.is_some() {
            "updating"
        } else {
            "creating"
        };
        println!(
            "copy: {verb} {}/{ns}/{} from {origin}",
            self.target, key.name
        );
        copies
            .patch(
                &key.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&desired),
            )
            .await?;
        Ok(Action::done())
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
        immutable: source.immutable,
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

async fn ensure_namespace(client: &kube::Client, ns: &str) -> kubesync::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(ns).await?.is_some() {
        return Ok(());
    }
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
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
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
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
