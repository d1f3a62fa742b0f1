//! Cluster connections: a name plus a [`kube::Client`], and [`client`], which builds that
//! client with `TCP_NODELAY`; how the cluster's watches fetch their initial state
//! ([`ListStrategy`]: streaming lists where the apiserver serves them); and the identity a
//! connection's requests act as ([`ActAs`], Kubernetes impersonation), so that a tenant's
//! declaration is carried out with her namespace's rights, not kubesync's.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::{Client, Config};

use crate::error::{Error, Result};
use crate::fence::Fence;

/// One Kubernetes cluster known to kubesync: a name (used in every [`ObjectKey`](crate::ObjectKey)
/// and log line) and a client.
///
/// Cloning is cheap.
#[derive(Clone)]
pub struct Cluster {
    name: Arc<str>,
    client: Client,
    lists: Arc<Lists>,
    /// The identity its requests act as (`None`: its own credentials').
    acting_as: Option<ActAs>,
    /// What decides whether this process may still write to it (`None`: always).
    fence: Option<Arc<dyn Fence>>,
}

/// An identity requests act as, by Kubernetes impersonation (`Impersonate-User`): the
/// apiserver checks that the connection's own identity may `impersonate` it, then authorizes
/// and admits the request — RBAC's escalation and `bind` checks included — as that identity,
/// and its audit log records both.
///
/// kubesync acts as a ServiceAccount of a declaration's own namespace
/// ([`ActAs::service_account`]): with no group given, the apiserver adds the ServiceAccount's
/// groups (`system:serviceaccounts`, `system:serviceaccounts:<namespace>`,
/// `system:authenticated`), so RBAC sees what a pod running as that ServiceAccount presents.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActAs {
    user: String,
}

impl ActAs {
    /// The ServiceAccount `name` of `namespace` (user `system:serviceaccount:<ns>:<name>`).
    /// Both must be DNS subdomains, as the apiserver names them; anything else is refused
    /// with why (a header built from it could carry other text).
    pub fn service_account(namespace: &str, name: &str) -> Result<Self> {
        for (what, value) in [("namespace", namespace), ("ServiceAccount name", name)] {
            if !crate::validate::is_dns_subdomain(value) {
                return Err(Error::Config(format!(
                    "{what} {value:?} is not a valid name (a DNS subdomain)"
                )));
            }
        }
        Ok(Self {
            user: format!("system:serviceaccount:{namespace}:{name}"),
        })
    }

    /// The user name requests act as.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The ServiceAccount's namespace and name, when it is one.
    pub fn service_account_of(&self) -> Option<(&str, &str)> {
        self.user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
    }
}

impl fmt::Display for ActAs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.service_account_of() {
            Some((ns, name)) => write!(f, "ServiceAccount {ns}/{name}"),
            None => write!(f, "user {}", self.user),
        }
    }
}

/// How the watches of a cluster fetch their initial state (and each re-list after a watch
/// expired).
///
/// A **streaming list** (`sendInitialEvents=true`, Kubernetes' WatchList) sends the initial
/// objects as watch events, one at a time, ending with a bookmark; a plain list sends them as
/// one response that the client holds whole while it decodes it. For a watch of thousands of
/// objects that response is the client's largest allocation: `make bench-memory` compares the
/// two.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ListStrategy {
    /// Streaming lists where the apiserver serves them, else list+watch. Whether it serves them
    /// is asked once per cluster, by a streaming watch that matches no object: an apiserver
    /// whose `WatchList` feature is off refuses it, and then every watch lists. A watch of
    /// metadata only ([`Watch::metadata_only`](crate::Watch::metadata_only)) lists in pages
    /// either way: the apiserver sends a page of metadata for a fraction of what it spends
    /// streaming the same objects.
    #[default]
    Auto,
    /// List (in pages of 100 objects, the most recent state), then watch.
    ListWatch,
    /// Streaming lists always, for watches of metadata only too; a watch on an apiserver that
    /// does not serve them fails and retries with backoff.
    StreamingList,
}

impl ListStrategy {
    /// Reads `auto`, `list-watch` or `streaming-list`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "auto" => Some(Self::Auto),
            "list-watch" => Some(Self::ListWatch),
            "streaming-list" => Some(Self::StreamingList),
            _ => None,
        }
    }
}

/// A cluster's [`ListStrategy`] and, once probed, whether its apiserver serves streaming
/// lists.
#[derive(Debug, Default)]
struct Lists {
    strategy: ListStrategy,
    served: tokio::sync::OnceCell<bool>,
}

/// How long the streaming-list probe may take before the watch lists instead (and the probe
/// is asked again at the watch's next start).
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("acting_as", &self.acting_as)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// A cluster from an existing client.
    pub fn new(name: impl Into<String>, client: Client) -> Self {
        Self {
            name: name.into().into(),
            client,
            lists: Arc::default(),
            acting_as: None,
            fence: None,
        }
    }

    /// The same cluster whose writes `fence` gates (see [`crate::fence`]): every mutating
    /// request its client sends asks [`Fence::live`] just before it leaves the process, and
    /// fails with [`Fenced`](crate::fence::Fenced) when refused; the [`Writer`](crate::Writer) also asks
    /// [`Fence::admits`] for the scope a write was decided within. Reads are never gated.
    pub fn fenced(&self, fence: Arc<dyn Fence>) -> Self {
        let gate = fence.clone();
        let client = self.through(move |request| {
            match crate::fence::mutates(request.method(), request.uri().path()) {
                true => gate
                    .live()
                    .map_err(|fenced| kube::Error::Service(Box::new(fenced))),
                false => Ok(()),
            }
        });
        Self {
            client,
            fence: Some(fence),
            ..self.clone()
        }
    }

    /// The fence that gates this cluster's writes, if any (see [`Cluster::fenced`]): a
    /// cluster connected at run time for the same work is fenced with it too.
    pub fn fence(&self) -> Option<&Arc<dyn Fence>> {
        self.fence.as_ref()
    }

    /// Whether a write to this cluster may be sent now: its fence's verdict ([`Fence::live`],
    /// and [`Fence::admits`] for the [scope](crate::fence::scope) the current task decides
    /// within); always yes without a fence.
    pub fn may_write(&self) -> Result<()> {
        let Some(fence) = &self.fence else {
            return Ok(());
        };
        fence.live()?;
        match crate::fence::scope() {
            Some(scope) => Ok(fence.admits(scope)?),
            None => Ok(()),
        }
    }

    /// The same cluster (name, connections, list strategy) whose requests act as `who`
    /// (Kubernetes impersonation; see [`ActAs`]). The requests share this cluster's
    /// connections: only their headers differ. Cheap (one small task for the client's request
    /// buffer): build one per reconcile that acts as `who`, rather than keeping one per
    /// identity.
    pub fn acting_as(&self, who: &ActAs) -> Self {
        // Validated by `ActAs::service_account`: a header value can always be made of it.
        let user = http::HeaderValue::from_str(&who.user).ok();
        let client = self.through(move |request| {
            let headers = request.headers_mut();
            // Whatever the request carried, it acts as `who` and nobody else.
            let extras: Vec<http::HeaderName> = headers
                .keys()
                .filter(|k| k.as_str().starts_with("impersonate-"))
                .cloned()
                .collect();
            for k in extras {
                headers.remove(k);
            }
            match &user {
                Some(user) => {
                    headers.insert(IMPERSONATE_USER, user.clone());
                    Ok(())
                }
                None => Err(kube::Error::Service(
                    "an identity that is not a valid header value".into(),
                )),
            }
        });
        Self {
            client,
            acting_as: Some(who.clone()),
            ..self.clone()
        }
    }

    /// This cluster's client with `prepare` run on every request before it is sent (on the
    /// same connections): it may change the request, or refuse it with an error, and then
    /// nothing is sent.
    fn through(
        &self,
        prepare: impl Fn(&mut http::Request<kube::client::Body>) -> std::result::Result<(), kube::Error>
        + Send
        + Sync
        + 'static,
    ) -> Client {
        let base = self.client.clone();
        let prepare = Arc::new(prepare);
        let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
            let base = base.clone();
            let prepared = prepare(&mut request);
            async move {
                prepared?;
                base.send(request).await
            }
        });
        Client::new(service, self.client.default_namespace().to_string())
    }

    /// The identity this cluster's requests act as, if not its own credentials'.
    pub fn acts_as(&self) -> Option<&ActAs> {
        self.acting_as.as_ref()
    }

    /// The same cluster (client, list strategy) under another name.
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into().into();
        self
    }

    /// The same cluster whose watches fetch their initial state with `strategy` (default
    /// [`ListStrategy::Auto`]).
    pub fn with_list_strategy(mut self, strategy: ListStrategy) -> Self {
        self.lists = Arc::new(Lists {
            strategy,
            served: tokio::sync::OnceCell::new(),
        });
        self
    }

    /// The cluster's [`ListStrategy`].
    pub fn list_strategy(&self) -> ListStrategy {
        self.lists.strategy
    }

    /// Whether watches of `resource` (in `namespace`, or all) should use streaming lists: by
    /// the strategy, and for [`ListStrategy::Auto`] by the apiserver's answer to one probe per
    /// cluster. A probe that says nothing either way (no right to watch `resource`, no answer)
    /// is not remembered, and that watch lists.
    pub async fn streaming_lists(&self, resource: &ApiResource, namespace: Option<&str>) -> bool {
        match self.lists.strategy {
            ListStrategy::ListWatch => false,
            ListStrategy::StreamingList => true,
            ListStrategy::Auto => {
                if let Some(served) = self.lists.served.get() {
                    return *served;
                }
                // An apiserver that is starting may accept the request and answer it only
                // once it is ready: the probe never holds a watch back for longer than this.
                let probe = probe_streaming_lists(&self.client, resource, namespace);
                match tokio::time::timeout(PROBE_TIMEOUT, probe)
                    .await
                    .ok()
                    .flatten()
                {
                    Some(served) => {
                        let _ = self.lists.served.set(served);
                        tracing::debug!(cluster = %self.name, served, "streaming lists probed");
                        served
                    }
                    None => false,
                }
            }
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

    /// The apiserver's version (`gitVersion`), e.g. `v1.37.2`; [`crate::version::support`]
    /// says whether it is within the supported range.
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
        self.may_on(verb, group, resource, namespace, None).await
    }

    /// Like [`Cluster::may`], for the one object `name` when given. On a cluster
    /// [acting as](Cluster::acting_as) another identity, the answer is that identity's (the
    /// review is made as it).
    pub async fn may_on(
        &self,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
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
                    name: name.map(String::from),
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

/// The header naming the user a request acts as.
const IMPERSONATE_USER: &str = "impersonate-user";

/// The largest read buffer of one connection. hyper grows a connection's buffer up to about
/// 400 KiB while a large response arrives, and an idle connection in the pool keeps it: with
/// the dozens of connections a fan-out's concurrent writes open, a heap profile of 10 000
/// copies (`make bench-memory`) found about 9 MiB in them. Larger responses are read in pieces.
const READ_BUFFER: usize = 64 * 1024;

/// A [`kube::Client`] for `config`: kube's own request stack (base URI, retries of 429/503/504
/// when `config.default_retry` is set, as [`retry_policy`] says, authentication and token refresh, extra headers, connect,
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
        .then(|| tower::retry::RetryLayer::new(retry_policy()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(transport);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace).build())
}

/// Asks the apiserver whether it serves streaming lists: a watch of `resource` with
/// `sendInitialEvents=true` and a field selector that matches no object. `Some(true)` when the
/// initial events end with their bookmark, `Some(false)` when it refuses the request (400 or
/// 422: the `WatchList` feature is off) or sends no such bookmark, `None` when the answer says
/// nothing about the feature (forbidden, unreachable).
async fn probe_streaming_lists(
    client: &Client,
    resource: &ApiResource,
    namespace: Option<&str>,
) -> Option<bool> {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};

    let refused = |code: u16| code == 400 || code == 422;
    let api = api(client.clone(), namespace, resource);
    let params = WatchParams::streaming_lists()
        .fields("metadata.name=kubesync.io-streaming-list-probe")
        .timeout(2);
    let stream = match api.watch(&params, "0").await {
        Ok(stream) => stream,
        Err(kube::Error::Api(status)) if refused(status.code) => return Some(false),
        Err(_) => return None,
    };
    let mut stream = std::pin::pin!(stream);
    match stream.next().await {
        Some(Ok(WatchEvent::Bookmark(bookmark))) => Some(
            bookmark
                .metadata
                .annotations
                .contains_key(INITIAL_EVENTS_END),
        ),
        Some(Ok(WatchEvent::Error(status))) if refused(status.code) => Some(false),
        // The watch ended, or sent something else first: the request's parameter was ignored.
        None | Some(Ok(_)) => Some(false),
        Some(Err(_)) => None,
    }
}

/// Retries of a request the apiserver answered 429, 503 or 504.
const RETRIES: u32 = 10;
/// The first retry's delay when the apiserver gives no `Retry-After`; it doubles each time.
const RETRY_MIN_DELAY: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest wait between two tries.
const RETRY_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(2);

/// How a request answered 429 (too many requests), 503 or 504 is retried: after the
/// apiserver's `Retry-After` (an apiserver over its in-flight limit says 1 s) or an exponential
/// backoff from 50 ms, whichever is longer, never more than 2 s apart, at most 10 times —
/// like client-go, which waits `Retry-After` up to 10 times. After that the request fails and
/// its reconcile is retried with the runtime's backoff.
///
/// kube's `RetryPolicy::server_retry` allows 15 retries with a delay that doubles up to
/// 1000 s: under a sustained overload a request that lost a few times in a row waited minutes.
/// The fault suite's overload scenario (an apiserver admitting one request at a time) found it:
/// the last copies of a 900-copy update wave were written 280 s after the first, the 15th
/// retry's wait alone being 160 s.
pub fn retry_policy() -> kube::client::retry::RetryPolicy {
    kube::client::retry::RetryPolicy::new(RETRY_MIN_DELAY, RETRY_MAX_DELAY, RETRIES, true)
        .expect("valid retry parameters")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tower::retry::Policy;

    /// A cluster whose client answers every request with 403 and records its headers.
    fn recording() -> (Cluster, Arc<parking_lot::Mutex<Vec<http::HeaderMap>>>) {
        let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let record = seen.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            record.lock().push(request.headers().clone());
            async move {
                let body = r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"no"}"#;
                http::Response::builder()
                    .status(403)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body.as_bytes().to_vec()))
                    .map_err(|e| kube::Error::Service(e.into()))
            }
        });
        (Cluster::new("c", Client::new(service, "default")), seen)
    }

    /// Refuses every write while `stale`, and any write decided for scope 7.
    struct TestFence {
        stale: bool,
    }

    impl Fence for TestFence {
        fn live(&self) -> std::result::Result<(), crate::fence::Fenced> {
            match self.stale {
                true => Err(crate::fence::Fenced("stale".into())),
                false => Ok(()),
            }
        }
        fn admits(&self, scope: u64) -> std::result::Result<(), crate::fence::Fenced> {
            match scope {
                7 => Err(crate::fence::Fenced("not mine".into())),
                _ => Ok(()),
            }
        }
    }

    #[tokio::test]
    async fn a_fenced_cluster_sends_no_write_its_fence_refuses_and_every_read() {
        use crate::fence::{is_fenced, within};
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let copy: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "copy", "namespace": "t1"}
        }))
        .expect("object");
        let (cluster, seen) = recording();
        let stale = cluster.fenced(Arc::new(TestFence { stale: true }));
        let writer = crate::Writer::new();
        // Through the writer: refused before anything is sent or counted.
        let refused = writer.create(&stale, &ar, &copy, "fm").await;
        assert!(matches!(refused, Err(Error::Fenced(_))), "{refused:?}");
        assert_eq!(writer.writes(), 0);
        // Past the writer, the client refuses it as it leaves: nothing reaches the server.
        let configmaps = api(stale.client().clone(), Some("t1"), &ar);
        let deleted = configmaps.delete("copy", &Default::default()).await;
        assert!(deleted.as_ref().is_err_and(is_fenced), "{deleted:?}");
        // So does a cluster acting as someone derived from it.
        let who = ActAs::service_account("t1", "copier").expect("identity");
        let acting = api(stale.acting_as(&who).client().clone(), Some("t1"), &ar);
        let patched = acting
            .patch(
                "copy",
                &Default::default(),
                &kube::api::Patch::Merge(serde_json::json!({})),
            )
            .await;
        assert!(patched.as_ref().is_err_and(is_fenced), "{patched:?}");
        assert!(seen.lock().is_empty(), "a write was sent");
        // Reads are never fenced.
        let read = configmaps.get_opt("copy").await;
        assert!(read.as_ref().is_err_and(|e| !is_fenced(e)), "{read:?}");
        assert_eq!(seen.lock().len(), 1);
        // A live fence lets writes through, except those decided for a scope it refuses.
        let live = cluster.fenced(Arc::new(TestFence { stale: false }));
        let mine = within(8, writer.create(&live, &ar, &copy, "fm")).await;
        assert!(matches!(&mine, Err(Error::Kube(kube::Error::Api(s))) if s.code == 403));
        let theirs = within(7, writer.create(&live, &ar, &copy, "fm")).await;
        assert!(matches!(theirs, Err(Error::Fenced(_))), "{theirs:?}");
        assert_eq!(seen.lock().len(), 2, "only the write of scope 8 was sent");
    }

    #[tokio::test]
    async fn a_cluster_acting_as_a_service_account_sends_only_its_identity() {
        let (cluster, seen) = recording();
        let who = ActAs::service_account("t1", "copier").expect("identity");
        assert_eq!(who.user(), "system:serviceaccount:t1:copier");
        assert_eq!(who.to_string(), "ServiceAccount t1/copier");
        let acting = cluster.acting_as(&who);
        assert_eq!(acting.name(), "c");
        assert_eq!(acting.acts_as(), Some(&who));
        assert!(cluster.acts_as().is_none());
        let _ = acting.may("create", "", "pods", Some("t1")).await;
        let _ = cluster.may("create", "", "pods", Some("t1")).await;
        let seen = seen.lock();
        assert_eq!(seen.len(), 2);
        assert_eq!(
            seen[0]
                .get_all("impersonate-user")
                .iter()
                .collect::<Vec<_>>(),
            ["system:serviceaccount:t1:copier"]
        );
        assert!(seen[0].get("impersonate-group").is_none());
        assert!(
            seen[1].get("impersonate-user").is_none(),
            "the cluster itself acts as itself"
        );
    }

    #[test]
    fn only_valid_names_make_an_identity() {
        for (ns, name) in [
            ("t1", "a b"),
            ("t1", "x\r\nimpersonate-group: system:masters"),
            ("T1", "copier"),
            ("", "copier"),
            ("t1", ""),
        ] {
            assert!(ActAs::service_account(ns, name).is_err(), "{ns:?} {name:?}");
        }
    }

    fn too_many_requests() -> Result<http::Response<()>, tower::BoxError> {
        Ok(http::Response::builder()
            .status(429)
            .header("Retry-After", "1")
            .body(())
            .expect("response"))
    }

    /// Every wait of a request refused again and again is bounded, and so is their number.
    #[tokio::test]
    async fn a_refused_request_is_retried_at_most_ten_times_never_more_than_two_seconds_apart() {
        let mut policy = retry_policy();
        let mut request = http::Request::new(kube::client::Body::empty());
        let mut waits = Vec::new();
        while let Some(sleep) = policy.retry(&mut request, &mut too_many_requests()) {
            waits.push(sleep.deadline() - tokio::time::Instant::now());
            assert!(waits.len() <= 20, "endless retries");
        }
        assert_eq!(waits.len(), RETRIES as usize, "{waits:?}");
        for wait in &waits {
            // The apiserver's Retry-After at least; the cap at most (the deadline is computed
            // when the retry is decided; nothing sleeps here).
            assert!(
                *wait + Duration::from_millis(10) >= Duration::from_secs(1)
                    && *wait <= RETRY_MAX_DELAY,
                "{waits:?}"
            );
        }
        let mut ok = Ok(http::Response::builder().status(200).body(()).expect("ok"));
        assert!(retry_policy().retry(&mut request, &mut ok).is_none());
    }
}
