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

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;

pub mod catalog;
mod registry;

pub use registry::metrics;

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

/// Ready once the operator's own watches have listed and none fails: watches a reconcile
/// starts later (a new ObjectSync's source, copies' watches restarted with a replica's new
/// shards) do not make a working replica unready while they list.
pub fn readiness(operator: &Operator) -> (bool, String) {
    if operator.leader() == Some(false) {
        return standby(
            operator.lease_read_ago(),
            crate::leader::Timing::default().lease_duration,
        );
    }
    if let Some(shards) = operator.shards()
        && !shards.active()
    {
        return (
            false,
            "joining: the members have not all acknowledged this replica yet".into(),
        );
    }
    let Some(ctx) = operator.context() else {
        return (false, "not started".into());
    };
    match ctx.own_watches_status(LOCAL) {
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

/// A standby's readiness: ready while it reads the leader Lease (it can take over when the
/// leader stops), so a rolling update and a node drain go on with it; not ready once it has
/// not read the Lease for a Lease duration (`read_ago`: since its last read).
pub fn standby(
    read_ago: Option<std::time::Duration>,
    lease: std::time::Duration,
) -> (bool, String) {
    match read_ago {
        Some(ago) if ago < lease => (
            true,
            "standby: ready to take over; another replica holds the leader Lease".into(),
        ),
        Some(ago) => (
            false,
            format!(
                "standby: cannot read the leader Lease (last read {} s ago), so it could not take over",
                ago.as_secs()
            ),
        ),
        None => (false, "standby: has not read the leader Lease yet".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_standby_is_ready_while_it_reads_the_lease() {
        let lease = Duration::from_secs(15);
        let (ready, why) = standby(Some(Duration::from_secs(2)), lease);
        assert!(ready, "{why}");
        assert!(why.contains("ready to take over"), "{why}");
        let (ready, why) = standby(Some(Duration::from_secs(15)), lease);
        assert!(!ready);
        assert!(
            why.contains("cannot read the leader Lease (last read 15 s ago)"),
            "{why}"
        );
        assert!(!standby(None, lease).0);
    }
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

    #[tokio::test]
    async fn a_member_is_ready_only_once_it_works_on_its_share() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        let shards = crate::shard::Shards::new("me");
        let operator = Operator::with_options(
            kubesync::Cluster::new("local", client),
            crate::operator::OperatorOptions {
                shards: Some(shards.clone()),
                ..Default::default()
            },
        );
        let (ready, why) = readiness(&operator);
        assert!(!ready && why.contains("joining"), "{why}");
        let view = crate::shard::assign::View::new(["me"]);
        let digest = view.digest().to_string();
        shards.change(|t| {
            t.adopt(view);
            t.settle(|_| Some(digest.as_str()))
        });
        // Active now: what remains is the operator's own watches.
        assert_eq!(readiness(&operator), (false, "not started".into()));
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
            body.contains("kubesync_objectsync_copies_held 0\n"),
            "{body}"
        );
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
}
