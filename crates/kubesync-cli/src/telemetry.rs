//! The operator's HTTP endpoints, for Prometheus and the kubelet:
//!
//! - `GET /metrics`: Prometheus text format — the runtime's counters, writes, watches, and one
//!   gauge per ObjectSync and destination state (how many copies are `Synced`, `Pending`,
//!   `Conflict`, `Error`). Served over HTTPS on its own address, to holders of a bearer token
//!   that the apiserver says may `get` `/metrics` ([`crate::access`]); over plain HTTP without
//!   authentication only when asked (`--metrics-insecure`: the demo, loopback, tests);
//! - `GET /healthz` (liveness): 200 while the operator's loop turns; 503 when it has not turned
//!   for [`STUCK_AFTER`] (it turns on every event and at least every few seconds when idle);
//! - `GET /readyz` (readiness): 200 once the operator's own watches have listed and none of
//!   them fails; 503 with the reason otherwise. The probes name no ObjectSync and need no
//!   authentication.
//!
//! Served by `axum` (hyper 1); metrics are encoded by `prometheus-client` from a registry
//! filled with the operator's state at each scrape. Every response closes its connection
//! (`Connection: close`), which is all that probes and scrapers need.
//!
//! Reads the operator's state; never writes to a cluster (the access reviews create nothing).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::access::{Access, Verdict};
use crate::operator::{LOCAL, Operator};

pub use crate::operator::STUCK_AFTER;

/// Content type of `/metrics`: the Prometheus text format, version 0.0.4.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Where and how the endpoints are served, as the command line asks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    /// `/healthz`, `/livez`, `/readyz` over plain HTTP (`None`: not served).
    pub probes: Option<SocketAddr>,
    /// `/metrics`.
    pub metrics: Metrics,
}

/// How `/metrics` is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Metrics {
    /// Not served.
    Off,
    /// HTTPS, to holders of a token that may `get` `/metrics`; the certificate from the
    /// directory (`tls.crt`, `tls.key`) or self-signed.
    Secure {
        /// The address.
        address: SocketAddr,
        /// The certificate's directory.
        cert_dir: Option<PathBuf>,
    },
    /// Plain HTTP without authentication (asked for with `--metrics-insecure`).
    Insecure(SocketAddr),
}

fn address(flag: &str, text: &str) -> Result<Option<SocketAddr>, String> {
    match text.trim() {
        "none" | "" => Ok(None),
        addr => addr
            .parse()
            .map(Some)
            .map_err(|e| format!("{flag} {addr:?}: {e} (host:port, or none)")),
    }
}

impl Endpoints {
    /// The endpoints of `--telemetry-address`, `--metrics-address`, `--metrics-insecure` and
    /// `--metrics-cert-dir`; an address may be `none`. The probes and insecure metrics may
    /// share one address (one listener then serves both); secure metrics may not.
    pub fn from_flags(
        telemetry: &str,
        metrics: &str,
        insecure: bool,
        cert_dir: Option<PathBuf>,
    ) -> Result<Self, String> {
        let probes = address("--telemetry-address", telemetry)?;
        let metrics = match (address("--metrics-address", metrics)?, insecure) {
            (None, _) => Metrics::Off,
            (Some(address), true) => {
                if cert_dir.is_some() {
                    return Err(
                        "--metrics-cert-dir is for HTTPS; --metrics-insecure serves plain HTTP"
                            .into(),
                    );
                }
                Metrics::Insecure(address)
            }
            (Some(address), false) => {
                if probes == Some(address) {
                    return Err(format!(
                        "--metrics-address {address} is also --telemetry-address: HTTPS metrics need an address of their own (or --metrics-insecure)"
                    ));
                }
                Metrics::Secure { address, cert_dir }
            }
        };
        Ok(Self { probes, metrics })
    }
}

/// Binds and starts serving `endpoints` for `operator` until `stop` changes or is dropped.
/// Fails (before serving anything) when an address cannot be bound or the certificate cannot
/// be read or made.
pub async fn start(
    endpoints: &Endpoints,
    operator: Arc<Operator>,
    stop: tokio::sync::watch::Receiver<()>,
) -> Result<(), String> {
    let until = move || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.changed().await;
        }
    };
    let bind = |address: SocketAddr, flag: &'static str| async move {
        TcpListener::bind(address)
            .await
            .map_err(|e| format!("cannot listen on {address} ({flag}): {e}"))
    };
    let shared = matches!(endpoints.metrics, Metrics::Insecure(a) if Some(a) == endpoints.probes);
    if let Some(address) = endpoints.probes {
        let listener = bind(address, "--telemetry-address").await?;
        let (router, what) = if shared {
            (
                router(operator.clone()),
                "/metrics (no authentication), /healthz and /readyz",
            )
        } else {
            (probes(operator.clone()), "/healthz and /readyz")
        };
        tracing::info!(%address, "serving {what}");
        tokio::spawn(serve_router(listener, router, until()));
    }
    match &endpoints.metrics {
        Metrics::Off => {}
        Metrics::Insecure(_) if shared => {}
        Metrics::Insecure(address) => {
            let listener = bind(*address, "--metrics-address").await?;
            if !address.ip().is_loopback() {
                tracing::warn!(%address, "serving /metrics over plain HTTP without authentication (--metrics-insecure): anyone who reaches this address reads the names of every ObjectSync");
            }
            tracing::info!(%address, "serving /metrics (no authentication)");
            tokio::spawn(serve_router(
                listener,
                metrics_router(operator, None),
                until(),
            ));
        }
        Metrics::Secure { address, cert_dir } => {
            let namespace = std::env::var("POD_NAMESPACE").ok();
            let names = crate::tls::self_signed_names(namespace.as_deref());
            let certificate = crate::tls::Certificate::new(cert_dir.as_deref(), &names)
                .map_err(|e| format!("--metrics-cert-dir: {e}"))?;
            let config = Arc::new(certificate)
                .server_config()
                .map_err(|e| format!("the metrics TLS configuration: {e}"))?;
            let tcp = bind(*address, "--metrics-address").await?;
            let listener = crate::tls::TlsListener::new(tcp, config)
                .map_err(|e| format!("cannot listen on {address} (--metrics-address): {e}"))?;
            let access = Arc::new(Access::new(operator.local().client().clone(), "/metrics"));
            let certificate = match cert_dir {
                Some(dir) => format!("the certificate of {}", dir.display()),
                None => "a self-signed certificate".to_string(),
            };
            tracing::info!(%address, "serving /metrics over HTTPS with {certificate}, to bearer tokens allowed to get /metrics");
            tokio::spawn(serve_router(
                listener,
                metrics_router(operator, Some(access)),
                until(),
            ));
        }
    }
    Ok(())
}

/// Serves the endpoints on `listener`, without authentication, until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    operator: Arc<Operator>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    serve_router(listener, router(operator), shutdown).await
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve_router<L: axum::serve::Listener>(
    listener: L,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) where
    L::Addr: std::fmt::Debug,
{
    if let Err(e) = axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        tracing::warn!(error = %e, "telemetry: the server stopped");
    }
}

/// Every endpoint, without authentication, as an axum router.
pub fn router(operator: Arc<Operator>) -> Router {
    finish(probe_routes().merge(metrics_routes(None)), operator)
}

/// `/healthz`, `/livez` and `/readyz`.
pub fn probes(operator: Arc<Operator>) -> Router {
    finish(probe_routes(), operator)
}

/// `/metrics`; with `access`, only for requests it allows.
pub fn metrics_router(operator: Arc<Operator>, access: Option<Arc<Access>>) -> Router {
    finish(metrics_routes(access), operator)
}

fn probe_routes() -> Router<Arc<Operator>> {
    Router::new()
        .route("/healthz", get_or_405().get(liveness_endpoint))
        .route("/livez", get_or_405().get(liveness_endpoint))
        .route("/readyz", get_or_405().get(readiness_endpoint))
}

fn metrics_routes(access: Option<Arc<Access>>) -> Router<Arc<Operator>> {
    let route = get_or_405().get(metrics_endpoint);
    let route = match access {
        Some(access) => route.layer(axum::middleware::from_fn_with_state(access, guard)),
        None => route,
    };
    Router::new().route("/metrics", route)
}

/// The fallback, the closing of every connection, and the state.
fn finish(routes: Router<Arc<Operator>>, operator: Arc<Operator>) -> Router {
    routes
        .fallback(not_found)
        .layer(axum::middleware::map_response(close_connection))
        .with_state(operator)
}

/// Lets a request through when `access` allows it; else 401, 403 or 503 with the reason.
async fn guard(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    match access.verdict(authorization).await {
        Verdict::Allowed => next.run(request).await,
        Verdict::Unauthenticated(m) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            m + "\n",
        )
            .into_response(),
        Verdict::Forbidden(m) => (StatusCode::FORBIDDEN, m + "\n").into_response(),
        Verdict::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m + "\n").into_response(),
    }
}

/// A method router whose other methods answer 405 with a word of explanation.
fn get_or_405() -> axum::routing::MethodRouter<Arc<Operator>> {
    axum::routing::MethodRouter::new()
        .fallback(|| async { (StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n") })
}

async fn close_connection(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

async fn not_found(request: Request) -> Response {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n").into_response();
    }
    (
        StatusCode::NOT_FOUND,
        "not found; try /metrics, /healthz or /readyz\n",
    )
        .into_response()
}

fn probe((ok, message): (bool, String)) -> Response {
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, message + "\n").into_response()
}

async fn liveness_endpoint(State(operator): State<Arc<Operator>>) -> Response {
    probe(liveness(&operator))
}

async fn readiness_endpoint(State(operator): State<Arc<Operator>>) -> Response {
    probe(readiness(&operator))
}

async fn metrics_endpoint(State(operator): State<Arc<Operator>>) -> Response {
    match metrics(&operator).await {
        Ok(body) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the metrics: {e}\n"),
        )
            .into_response(),
    }
}

/// Alive while the operator's loop turns.
pub fn liveness(operator: &Operator) -> (bool, String) {
    let Some(ctx) = operator.context() else {
        return (true, "starting".into());
    };
    match ctx.metrics().idle_for() {
        None => (true, "starting".into()),
        Some(idle) if idle < operator.stuck_after() => (true, "ok".into()),
        Some(idle) => (
            false,
            format!(
                "the operator's loop has not turned for {} s",
                idle.as_secs()
            ),
        ),
    }
}

/// Ready once the operator's own watches have listed and none fails.
pub fn readiness(operator: &Operator) -> (bool, String) {
    if operator.leader() == Some(false) {
        return (
            false,
            "standby: another replica holds the leader Lease".into(),
        );
    }
    let Some(ctx) = operator.context() else {
        return (false, "not started".into());
    };
    match ctx.cluster_status(LOCAL) {
        kubesync::runtime::ClusterStatus::Ready => (true, "ok".into()),
        kubesync::runtime::ClusterStatus::Unreachable(m) => {
            (false, format!("the local cluster's watches fail: {m}"))
        }
        other => (
            false,
            format!("the operator's watches have not listed yet ({other:?})"),
        ),
    }
}

/// A counter whose value is read from the operator at each scrape.
///
/// Registered under its full name (`…_total`) and encoded as the Prometheus text format
/// 0.0.4 writes counters: prometheus-client's own `Counter` follows OpenMetrics, whose
/// `# TYPE` line names the family without `_total` — a change of the exposition that
/// scrapers and kubesync's tests would see.
#[derive(Debug, Default)]
struct ScrapedCounter(AtomicU64);

impl ScrapedCounter {
    fn set(&self, value: u64) {
        self.0.store(value, Ordering::Relaxed);
    }
}

impl TypedMetric for ScrapedCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ScrapedCounter {
    fn encode(&self, mut encoder: MetricEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.encode_gauge(&self.0.load(Ordering::Relaxed))
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

fn counter(value: u64) -> ScrapedCounter {
    let c = ScrapedCounter::default();
    c.set(value);
    c
}

fn gauge(value: impl TryInto<i64>) -> Gauge {
    let g = Gauge::default();
    g.set(value.try_into().unwrap_or(i64::MAX));
    g
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabels {
    component: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CategoryLabels {
    category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectSyncLabels {
    namespace: String,
    objectsync: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceSyncLabels {
    resourcesync: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RemoteLabels {
    remotecluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DestinationLabels {
    namespace: String,
    objectsync: String,
    state: String,
}

/// The operator's state as a Prometheus registry (help texts without their final period:
/// the registry adds it).
async fn registry(operator: &Operator) -> Registry {
    let mut r = Registry::default();
    if let Some(ctx) = operator.context() {
        let m = ctx.metrics();
        r.register(
            "kubesync_reconciles_total",
            "Reconciles of kubesync's own resources completed, successful or not",
            counter(m.reconciles()),
        );
        let failures = Family::<CategoryLabels, ScrapedCounter>::default();
        for category in kubesync::error::CATEGORIES {
            failures
                .get_or_create(&CategoryLabels {
                    category: category.into(),
                })
                .set(0);
        }
        for (category, value) in m.failures_by_category() {
            failures
                .get_or_create(&CategoryLabels {
                    category: category.into(),
                })
                .set(value);
        }
        r.register(
            "kubesync_reconcile_failures_total",
            "Reconciles that returned an error or panicked, by the error's category (Forbidden, Unreachable, Panic, …)",
            failures,
        );
        r.register(
            "kubesync_queue_depth",
            "Keys waiting in the work queue",
            gauge(m.queued()),
        );
        r.register(
            "kubesync_reconciles_in_flight",
            "Reconciles running now",
            gauge(m.in_flight()),
        );
        r.register(
            "kubesync_keys_failing",
            "Keys whose last reconcile failed, waiting for a retry",
            gauge(m.failing()),
        );
    }
    if let Some(leading) = operator.leader() {
        r.register(
            "kubesync_leader",
            "1 while this replica holds the leader Lease (only with --leader-elect)",
            gauge(u8::from(leading)),
        );
    }
    let writes = Family::<ComponentLabels, ScrapedCounter>::default();
    for (component, value) in operator.writes_by_component().await {
        writes
            .get_or_create(&ComponentLabels {
                component: component.into(),
            })
            .set(value);
    }
    r.register(
        "kubesync_writes_total",
        "Write requests sent, by component",
        writes,
    );
    r.register(
        "kubesync_objectsync_watches",
        "Watches held for ObjectSyncs (one per type and cluster, plus one Namespace watch per cluster)",
        gauge(operator.fan_out_watches()),
    );
    r.register(
        "kubesync_resourcesync_engines",
        "ResourceSync engines running",
        gauge(operator.running().await.len()),
    );
    let ready = Family::<ObjectSyncLabels, Gauge>::default();
    let destinations = Family::<DestinationLabels, Gauge>::default();
    let stale = Family::<ObjectSyncLabels, Gauge>::default();
    let oldest = Family::<ObjectSyncLabels, Gauge<f64, AtomicU64>>::default();
    let drifts = Family::<ObjectSyncLabels, ScrapedCounter>::default();
    for ((namespace, objectsync), g) in operator.object_sync_gauges() {
        let labels = ObjectSyncLabels {
            namespace: namespace.clone(),
            objectsync: objectsync.clone(),
        };
        ready
            .get_or_create(&labels)
            .set(i64::from(u8::from(g.ready)));
        stale.get_or_create(&labels).set(i64::from(g.stale));
        oldest
            .get_or_create(&labels)
            .set(g.oldest_stale.as_secs_f64());
        drifts.get_or_create(&labels).set(g.drifts);
        for (state, count) in &g.destinations {
            destinations
                .get_or_create(&DestinationLabels {
                    namespace: namespace.clone(),
                    objectsync: objectsync.clone(),
                    state: state.as_str().into(),
                })
                .set(i64::from(*count));
        }
    }
    r.register(
        "kubesync_objectsync_ready",
        "1 when the ObjectSync's Ready condition is True",
        ready,
    );
    r.register(
        "kubesync_objectsync_destinations",
        "Destinations of an ObjectSync, by state (Synced, Pending, OutOfSync, Conflict, Error, Refused)",
        destinations,
    );
    r.register(
        "kubesync_objectsync_stale_copies",
        "Copies of an ObjectSync behind their source now (Pending, Error or OutOfSync, or of a source whose change is not copied yet)",
        stale,
    );
    r.register(
        "kubesync_objectsync_oldest_stale_seconds",
        "How long the oldest copy of an ObjectSync that is behind its source has been behind (0 when none is)",
        oldest,
    );
    r.register(
        "kubesync_objectsync_drifts_total",
        "Copies of an ObjectSync found changed by someone else (reverted in Enforce mode)",
        drifts,
    );
    let objects = Family::<ResourceSyncLabels, Gauge>::default();
    let stale_objects = Family::<ResourceSyncLabels, Gauge>::default();
    let oldest_stale_object = Family::<ResourceSyncLabels, Gauge<f64, AtomicU64>>::default();
    let local_drifts = Family::<ResourceSyncLabels, ScrapedCounter>::default();
    for (name, counts) in operator.resource_sync_counts().await {
        let labels = ResourceSyncLabels { resourcesync: name };
        objects
            .get_or_create(&labels)
            .set(i64::from(counts.objects));
        stale_objects
            .get_or_create(&labels)
            .set(i64::from(counts.objects.saturating_sub(counts.in_sync)));
        oldest_stale_object
            .get_or_create(&labels)
            .set(counts.oldest_stale.as_secs_f64());
        local_drifts.get_or_create(&labels).set(counts.drifts);
    }
    r.register(
        "kubesync_resourcesync_objects",
        "Remote objects in a running ResourceSync's shard",
        objects,
    );
    r.register(
        "kubesync_resourcesync_stale_objects",
        "Remote objects of a running ResourceSync whose current generation is not applied locally (or whose local copy is missing)",
        stale_objects,
    );
    r.register(
        "kubesync_resourcesync_oldest_stale_seconds",
        "How long the remote object of a running ResourceSync that is behind longest has been behind (0 when none is)",
        oldest_stale_object,
    );
    r.register(
        "kubesync_resourcesync_drifts_total",
        "Local copies of a running ResourceSync found changed by someone else and reverted",
        local_drifts,
    );
    let reachable = Family::<RemoteLabels, Gauge>::default();
    let contact = Family::<RemoteLabels, Gauge<f64, AtomicU64>>::default();
    let restarts = Family::<RemoteLabels, ScrapedCounter>::default();
    for h in operator.remote_cluster_health().await {
        let labels = RemoteLabels {
            remotecluster: h.name,
        };
        reachable
            .get_or_create(&labels)
            .set(i64::from(u8::from(h.reachable)));
        let at = h
            .last_contact
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        contact.get_or_create(&labels).set(at);
        restarts.get_or_create(&labels).set(h.watch_restarts);
    }
    r.register(
        "kubesync_remotecluster_reachable",
        "1 when the RemoteCluster's last probe answered and none of its watches fails",
        reachable,
    );
    r.register(
        "kubesync_remotecluster_last_contact_timestamp_seconds",
        "When the RemoteCluster last answered a probe or a watch (Unix time; 0: never)",
        contact,
    );
    r.register(
        "kubesync_remotecluster_watch_restarts_total",
        "Watches of the RemoteCluster that failed or expired and started again",
        restarts,
    );
    r.register(
        "kubesync_propagation_lag_seconds",
        "Seconds from a change first seen by a watch (a source's new version, a new or relabelled namespace, a deleted copy) to the copy written with it, by sync kind and destination cluster",
        operator.lags().family(),
    );
    r
}

/// The Prometheus text exposition of the operator's state.
pub async fn metrics(operator: &Operator) -> Result<String, std::fmt::Error> {
    let registry = registry(operator).await;
    let mut out = String::new();
    prometheus_client::encoding::text::encode_registry(&mut out, &registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn metrics_are_secure_on_their_own_address_unless_asked() {
        let a: SocketAddr = "0.0.0.0:8080".parse().expect("addr");
        let m: SocketAddr = "0.0.0.0:8443".parse().expect("addr");
        let e = Endpoints::from_flags("0.0.0.0:8080", "0.0.0.0:8443", false, None).expect("ok");
        assert_eq!(e.probes, Some(a));
        assert_eq!(
            e.metrics,
            Metrics::Secure {
                address: m,
                cert_dir: None
            }
        );
        // Sharing the probes' address: only without TLS, and only when asked.
        let e = Endpoints::from_flags("0.0.0.0:8080", "0.0.0.0:8080", false, None)
            .expect_err("secure metrics may not share");
        assert!(e.contains("--metrics-insecure"), "{e}");
        let e = Endpoints::from_flags("0.0.0.0:8080", "0.0.0.0:8080", true, None).expect("ok");
        assert_eq!(e.metrics, Metrics::Insecure(a));
        // Off, and bad input named by its flag.
        let e = Endpoints::from_flags("none", "none", false, None).expect("ok");
        assert_eq!((e.probes, e.metrics), (None, Metrics::Off));
        let e = Endpoints::from_flags("0.0.0.0:8080", "localhost", false, None).expect_err("bad");
        assert!(e.starts_with("--metrics-address \"localhost\""), "{e}");
        let e = Endpoints::from_flags("0.0.0.0:8080", "0.0.0.0:1", true, Some("/tls".into()))
            .expect_err("a certificate without TLS");
        assert!(e.contains("--metrics-cert-dir"), "{e}");
    }

    /// An operator whose cluster is never contacted.
    fn idle_operator() -> Arc<Operator> {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        Operator::new(kubesync::Cluster::new("local", client))
    }

    async fn request(port: u16, method: &str, path: &str) -> (u16, String, String) {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        let head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
        stream.write_all(head.as_bytes()).await.expect("write");
        let mut response = String::new();
        // Reads to the end: the server must close the connection.
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
            .await
            .expect("the connection is closed after the response")
            .expect("read");
        let code = response
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("status");
        let (head, body) = response.split_once("\r\n\r\n").expect("head");
        (code, head.to_string(), body.to_string())
    }

    #[tokio::test]
    async fn endpoints_answer_and_close_the_connection() {
        let operator = idle_operator();
        operator.set_leader(Some(true));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, operator, async {
            let _ = stopped.await;
        }));

        let (code, head, body) = request(port, "GET", "/metrics").await;
        assert_eq!(code, 200);
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
            "{head}"
        );
        assert!(
            body.contains("# TYPE kubesync_writes_total counter\n"),
            "{body}"
        );
        assert!(
            body.contains("# HELP kubesync_writes_total Write requests sent, by component.\n"),
            "{body}"
        );
        assert!(
            body.contains("kubesync_writes_total{component=\"operator\"} 0\n"),
            "{body}"
        );
        assert!(
            body.contains("# TYPE kubesync_leader gauge\nkubesync_leader 1\n"),
            "{body}"
        );
        assert!(body.contains("kubesync_objectsync_watches 0\n"), "{body}");
        assert!(
            !body.contains("# EOF"),
            "Prometheus text, not OpenMetrics: {body}"
        );

        let (code, _, body) = request(port, "GET", "/healthz").await;
        assert_eq!((code, body.as_str()), (200, "starting\n"));
        let (code, _, body) = request(port, "GET", "/readyz").await;
        assert_eq!((code, body.as_str()), (503, "not started\n"));
        assert_eq!(request(port, "GET", "/nope").await.0, 404);
        assert_eq!(request(port, "POST", "/metrics").await.0, 405);
        assert_eq!(request(port, "DELETE", "/nope").await.0, 405);
        let (code, _, body) = request(port, "HEAD", "/metrics").await;
        assert_eq!((code, body.as_str()), (200, ""));

        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("stops")
            .expect("join");
    }

    #[test]
    fn counters_keep_the_prometheus_text_type_line() {
        let mut r = Registry::default();
        r.register("x_total", "An x", counter(3));
        let labelled = Family::<ObjectSyncLabels, Gauge>::default();
        labelled
            .get_or_create(&ObjectSyncLabels {
                namespace: "a\"b\\c\nd".into(),
                objectsync: "s".into(),
            })
            .set(1);
        r.register("y", "A y", labelled);
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, &r).expect("encode");
        assert_eq!(
            out,
            "# HELP x_total An x.\n# TYPE x_total counter\nx_total 3\n\
             # HELP y A y.\n# TYPE y gauge\ny{namespace=\"a\\\"b\\\\c\\nd\",objectsync=\"s\"} 1\n"
        );
    }
}
