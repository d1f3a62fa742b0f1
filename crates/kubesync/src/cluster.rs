//! Cluster connections: a name plus a [`kube::Client`], and [`client`], which builds that
//! client with `TCP_NODELAY`.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::{Error, Result};

/// One Kubernetes cluster known to kubesync: a name (used in every [`ObjectKey`](crate::ObjectKey)
/// and log line) and a client.
///
/// Cloning is cheap.
#[derive(Clone)]
pub struct Cluster {
    name: Arc<str>,
    client: Client,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// A cluster from an existing client.
    pub fn new(name: impl Into<String>, client: Client) -> Self {
        Self {
            name: name.into().into(),
            client,
        }
    }

    /// A cluster from a context of the default kubeconfig (`$KUBECONFIG` or `~/.kube/config`),
    /// named after the context.
    pub async fn from_context(context: &str) -> Result<Self> {
        let opts = KubeConfigOptions {
            context: Some(context.to_string()),
            ..Default::default()
        };
        let config = Config::from_kubeconfig(&opts)
            .await
            .map_err(|e| Error::Kubeconfig(format!("context {context:?}: {e}")))?;
        Self::from_config(context, config)
    }

    /// A cluster from a kubeconfig file. `context` defaults to the file's current context; the
    /// cluster is named after the context used.
    pub async fn from_kubeconfig_file(
        path: impl AsRef<Path>,
        context: Option<&str>,
    ) -> Result<Self> {
        let path = path.as_ref();
        let kubeconfig = Kubeconfig::read_from(path)
            .map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
        Self::from_kubeconfig(kubeconfig, context, None).await
    }

    /// A cluster from kubeconfig bytes (YAML), as stored in a Secret. `name` defaults to the
    /// context used.
    pub async fn from_kubeconfig_bytes(
        bytes: &[u8],
        context: Option<&str>,
        name: Option<&str>,
    ) -> Result<Self> {
        let text =
            std::str::from_utf8(bytes).map_err(|e| Error::Kubeconfig(format!("not UTF-8: {e}")))?;
        let kubeconfig =
            Kubeconfig::from_yaml(text).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        Self::from_kubeconfig(kubeconfig, context, name).await
    }

    /// A cluster from a parsed kubeconfig.
    pub async fn from_kubeconfig(
        kubeconfig: Kubeconfig,
        context: Option<&str>,
        name: Option<&str>,
    ) -> Result<Self> {
        let context = match context {
            Some(c) => c.to_string(),
            None => kubeconfig.current_context.clone().ok_or_else(|| {
                Error::Kubeconfig("no context given and no current-context set".into())
            })?,
        };
        if !kubeconfig.contexts.iter().any(|c| c.name == context) {
            let known: Vec<_> = kubeconfig
                .contexts
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(Error::Kubeconfig(format!(
                "context {context:?} not found (known: {})",
                known.join(", ")
            )));
        }
        let opts = KubeConfigOptions {
            context: Some(context.clone()),
            ..Default::default()
        };
        let config = Config::from_custom_kubeconfig(kubeconfig, &opts)
            .await
            .map_err(|e| Error::Kubeconfig(format!("context {context:?}: {e}")))?;
        Self::from_config(name.unwrap_or(&context), config)
    }

    /// The cluster kubesync runs in, from the pod's service account.
    pub fn in_cluster(name: impl Into<String>) -> Result<Self> {
        let config = Config::incluster().map_err(|e| Error::InCluster(e.to_string()))?;
        Self::from_config(name, config)
    }

    /// A cluster from a [`kube::Config`], with a client built by [`client`].
    pub fn from_config(name: impl Into<String>, config: Config) -> Result<Self> {
        Ok(Self::new(name, client(config)?))
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cluster's client (cheap to clone).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The apiserver's version (`gitVersion`), e.g. `v1.20.2`.
    pub async fn server_version(&self) -> Result<String> {
        Ok(self.client.apiserver_version().await?.git_version)
    }

    /// Whether this connection's identity may `verb` objects of `resource` (plural) in
    /// `group`: in `namespace`, or in every namespace when `None`. Asks the apiserver with a
    /// SelfSubjectAccessReview (a question, not a write: nothing is stored), which every
    /// authenticated identity may create.
    pub async fn may(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> Result<bool> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.into()),
                    group: Some(group.into()),
                    resource: Some(resource.into()),
                    namespace: namespace.map(String::from),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = kube::Api::<SelfSubjectAccessReview>::all(self.client.clone())
            .create(&Default::default(), &review)
            .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// A dynamic API handle for objects of `resource`: in `namespace`, or in all namespaces (and
/// for cluster-scoped kinds) when `None`.
pub fn api(
    client: Client,
    namespace: Option<&str>,
    resource: &kube::core::ApiResource,
) -> kube::Api<kube::api::DynamicObject> {
    api_of(client, namespace, resource)
}

/// Like [`api`], for any dynamic type: e.g. `PartialObjectMeta<DynamicObject>`, whose requests
/// ask the apiserver for metadata only.
pub fn api_of<K>(
    client: Client,
    namespace: Option<&str>,
    resource: &kube::core::ApiResource,
) -> kube::Api<K>
where
    K: kube::Resource<
            DynamicType = kube::core::ApiResource,
            Scope = kube::core::DynamicResourceScope,
        >,
{
    match namespace {
        Some(ns) => kube::Api::namespaced_with(client, ns, resource),
        None => kube::Api::all_with(client, resource),
    }
}

/// The largest read buffer of one connection. hyper grows a connection's buffer up to about
/// 400 KiB while a large response arrives, and an idle connection in the pool keeps it: with
/// the dozens of connections a fan-out's concurrent writes open, a heap profile of 10 000
/// copies (`make bench-memory`) found about 9 MiB in them. Larger responses are read in pieces.
const READ_BUFFER: usize = 64 * 1024;

/// A [`kube::Client`] for `config`: kube's own request stack (base URI, retries of 429/503/504
/// when `config.default_retry` is set, authentication and token refresh, extra headers, connect,
/// read and write timeouts) over connections with `TCP_NODELAY` set.
///
/// kube's default client leaves Nagle's algorithm on. Every new connection then waits for the
/// apiserver's delayed acknowledgement (about 40 ms on Linux) before its first request goes out,
/// and a client opens a new HTTP/1.1 connection for each request it sends while the others are
/// busy: a controller's concurrent writes and its watches' first lists. `make bench` measures the
/// difference (`runtime` benchmark, "new connections").
///
/// With `config.proxy_url` set, the client is kube's default one (its proxy connectors are not
/// public). The client carries no expiry ([`Client::valid_until`]), which kube sets only for
/// client certificates issued by an exec plugin.
pub fn client(config: Config) -> Result<Client> {
    use kube::client::ConfigExt;
    use tower::ServiceBuilder;

    if config.proxy_url.is_some() {
        return Ok(Client::try_from(config)?);
    }
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let transport =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http1_max_buf_size(READ_BUFFER)
            .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(transport);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace).build())
}
