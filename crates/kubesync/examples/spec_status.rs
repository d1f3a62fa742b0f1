//! Spec/status sync as a library: pull objects of one kind down from a management ("remote")
//! cluster into this ("local") cluster and report their status back up.
//!
//! ```sh
//! cargo run -p kubesync --example spec_status -- \
//!     --remote mgmt --local eu-1 \
//!     --group demo.kubesync.io --version v1 --kind Widget \
//!     --remote-name-suffix -eu1 --namespace-prefix tenant-
//! ```
//!
//! The kind is resolved by discovery on the local cluster, so any CRD with spec and a status
//! subresource works.

use clap::Parser;
use kube::core::GroupVersionKind;
use kubesync::Cluster;
use kubesync::syncers::spec_status::SpecStatusSync;

#[derive(Parser)]
struct Args {
    /// Kubeconfig context of the remote (management) cluster.
    #[arg(long)]
    remote: String,
    /// Kubeconfig context of the local cluster.
    #[arg(long)]
    local: String,
    /// API group of the synced kind.
    #[arg(long, default_value = "")]
    group: String,
    /// API version of the synced kind.
    #[arg(long)]
    version: String,
    /// The synced kind.
    #[arg(long)]
    kind: String,
    /// Suffix of remote names for this cluster's shard.
    #[arg(long, default_value = "")]
    remote_name_suffix: String,
    /// Suffix appended to remote namespaces locally.
    #[arg(long, default_value = "")]
    local_namespace_suffix: String,
    /// Prefix synced namespaces must have.
    #[arg(long, default_value = "")]
    namespace_prefix: String,
    /// Local Secrets to upload (repeatable).
    #[arg(long = "secret")]
    secrets: Vec<String>,
    /// Annotation domain (`cloud.teleport.dev` for sync-controller compatibility).
    #[arg(long, default_value = "kubesync.io")]
    domain: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let remote = Cluster::from_context(&args.remote).await?;
    let local = Cluster::from_context(&args.local).await?;
    let gvk = GroupVersionKind::gvk(&args.group, &args.version, &args.kind);
    let (resource, _) = kube::discovery::pinned_kind(local.client(), &gvk).await?;
    SpecStatusSync::builder(resource)
        .remote_name_suffix(args.remote_name_suffix)
        .local_namespace_suffix(args.local_namespace_suffix)
        .namespace_prefix(args.namespace_prefix)
        .secret_names(args.secrets)
        .domain(args.domain)
        .build(remote, local)
        .run(kubesync::runtime::shutdown_signal())
        .await?;
    Ok(())
}
