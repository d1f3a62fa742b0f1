//! Hello world of the multi-cluster runtime: watch ConfigMaps in two clusters, named by
//! kubeconfig contexts, and print `cluster/namespace/name` for every event.
//!
//! ```sh
//! cargo run -p kubesync --example helloworld -- --context east --context west
//! ```

use clap::Parser;
use k8s_openapi::api::core::v1::ConfigMap;
use kubesync::runtime::shutdown_signal;
use kubesync::{Action, Cluster, Controller, Watch, reconciler_fn};

#[derive(Parser)]
struct Args {
    /// Kubeconfig contexts to watch (repeat the flag); each becomes a cluster of that name.
    #[arg(long = "context", required = true)]
    contexts: Vec<String>,
    /// Kubeconfig file (default: $KUBECONFIG or ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let mut controller = Controller::new();
    for context in &args.contexts {
        let cluster = match &args.kubeconfig {
            Some(path) => Cluster::from_kubeconfig_file(path, Some(context)).await?,
            None => Cluster::from_context(context).await?,
        };
        controller = controller.cluster(cluster);
    }
    for context in &args.contexts {
        controller = controller.watch(context, Watch::of::<ConfigMap>())?;
    }
    controller
        .run(
            reconciler_fn(|key, ctx| async move {
                let ns = key.namespace.as_deref().unwrap_or("");
                let state = if ctx.get(&key).is_some() {
                    "present"
                } else {
                    "deleted"
                };
                println!("{}/{}/{} ({state})", key.cluster, ns, key.name);
                Ok::<_, kubesync::Error>(Action::done())
            }),
            shutdown_signal(),
        )
        .await?;
    Ok(())
}
