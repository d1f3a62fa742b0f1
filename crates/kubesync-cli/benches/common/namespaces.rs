//! Namespaces for the benchmarks' jobs, shared by the benchmarks (`#[path]`-included).

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};

/// Creates the namespaces `names`, each with the label `label` when given, 16 at a time.
pub async fn create_namespaces(
    client: &kube::Client,
    names: &[String],
    label: Option<(&str, &str)>,
) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let labels = label.map(|(k, v)| [(k.to_string(), v.to_string())].into());
    futures::stream::iter(names)
        .map(|name| {
            let api = api.clone();
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: labels.clone(),
                    ..Default::default()
                },
                ..Default::default()
            };
            async move { api.create(&PostParams::default(), &ns).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}
