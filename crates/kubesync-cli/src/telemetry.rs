//! The operator's HTTP endpoints, for Prometheus and the kubelet:
//!
//! - `GET /metrics`: Prometheus text format — the runtime's counters, writes, watches, and one
//!   gauge per ObjectSync and destination state (how many copies are `Synced`, `Pending`,
//!   `Conflict`, `Error`);
//! - `GET /healthz` (liveness): 200 while the operator's loop turns; 503 when it has not turned
//!   for [`STUCK_AFTER`] (it turns on every event and at least every few seconds when idle);
//! - `GET /readyz` (readiness): 200 once the operator's own watches have listed and none of
//!   them fails; 503 with the reason otherwise.
//!
//! The server answers one request per connection (`Connection: close`), which is all that
//! probes and scrapers need, and reads at most [`MAX_REQUEST`] bytes per request.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::operator::{LOCAL, Operator};

/// `/healthz` fails when the operator's loop has not turned for this long.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// Longest request head read.
pub const MAX_REQUEST: usize = 8 * 1024;

/// Serves the endpoints on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    operator: Arc<Operator>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let operator = operator.clone();
                    tokio::spawn(async move {
                        if let Err(e) = answer(stream, &operator).await {
                            tracing::debug!(error = %e, "telemetry request failed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "telemetry: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

async fn answer(mut stream: TcpStream, operator: &Operator) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let read = async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        std::io::Result::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "request head"))??;
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (code, content_type, body) = if method != "GET" && method != "HEAD" {
        (405, "text/plain", "only GET is served\n".to_string())
    } else {
        route(path, operator).await
    };
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Service Unavailable",
    };
    let mut response = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// The answer to a GET of `path`: (status code, content type, body).
async fn route(path: &str, operator: &Operator) -> (u16, &'static str, String) {
    match path {
        "/metrics" => (
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics(operator).await,
        ),
        "/healthz" | "/livez" => {
            let (ok, message) = liveness(operator);
            (if ok { 200 } else { 503 }, "text/plain", message + "\n")
        }
        "/readyz" => {
            let (ok, message) = readiness(operator);
            (if ok { 200 } else { 503 }, "text/plain", message + "\n")
        }
        _ => (
            404,
            "text/plain",
            "not found; try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

/// Alive while the operator's loop turns.
pub fn liveness(operator: &Operator) -> (bool, String) {
    let Some(ctx) = operator.context() else {
        return (true, "starting".into());
    };
    match ctx.metrics().idle_for() {
        None => (true, "starting".into()),
        Some(idle) if idle < STUCK_AFTER => (true, "ok".into()),
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

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Escapes a label value (backslash, double quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition of the operator's state.
pub async fn metrics(operator: &Operator) -> String {
    let mut out = String::new();
    if let Some(ctx) = operator.context() {
        let m = ctx.metrics();
        for (name, kind, help, value) in [
            (
                "kubesync_reconciles_total",
                "counter",
                "Reconciles of kubesync's own resources completed, successful or not.",
                m.reconciles(),
            ),
            (
                "kubesync_reconcile_failures_total",
                "counter",
                "Reconciles that returned an error or panicked.",
                m.failures(),
            ),
            (
                "kubesync_queue_depth",
                "gauge",
                "Keys waiting in the work queue.",
                m.queued(),
            ),
            (
                "kubesync_reconciles_in_flight",
                "gauge",
                "Reconciles running now.",
                m.in_flight(),
            ),
            (
                "kubesync_keys_failing",
                "gauge",
                "Keys whose last reconcile failed, waiting for a retry.",
                m.failing(),
            ),
        ] {
            family(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
    }
    if let Some(leading) = operator.leader() {
        family(
            &mut out,
            "kubesync_leader",
            "gauge",
            "1 while this replica holds the leader Lease (only with --leader-elect).",
        );
        let _ = writeln!(out, "kubesync_leader {}", u8::from(leading));
    }
    family(
        &mut out,
        "kubesync_writes_total",
        "counter",
        "Write requests sent, by component.",
    );
    for (component, value) in operator.writes_by_component().await {
        let _ = writeln!(
            out,
            "kubesync_writes_total{{component=\"{component}\"}} {value}"
        );
    }
    family(
        &mut out,
        "kubesync_objectsync_watches",
        "gauge",
        "Watches held for ObjectSyncs (one per type and cluster, plus one Namespace watch per cluster).",
    );
    let _ = writeln!(
        out,
        "kubesync_objectsync_watches {}",
        operator.fan_out_watches()
    );
    family(
        &mut out,
        "kubesync_resourcesync_engines",
        "gauge",
        "ResourceSync engines running.",
    );
    let _ = writeln!(
        out,
        "kubesync_resourcesync_engines {}",
        operator.running().await.len()
    );
    let gauges = operator.object_sync_gauges();
    family(
        &mut out,
        "kubesync_objectsync_ready",
        "gauge",
        "1 when the ObjectSync's Ready condition is True.",
    );
    for ((ns, name), g) in &gauges {
        let _ = writeln!(
            out,
            "kubesync_objectsync_ready{{namespace=\"{}\",objectsync=\"{}\"}} {}",
            label(ns),
            label(name),
            u8::from(g.ready)
        );
    }
    family(
        &mut out,
        "kubesync_objectsync_destinations",
        "gauge",
        "Destinations of an ObjectSync, by state (Synced, Pending, Conflict, Error).",
    );
    for ((ns, name), g) in &gauges {
        for (state, count) in &g.destinations {
            let _ = writeln!(
                out,
                "kubesync_objectsync_destinations{{namespace=\"{}\",objectsync=\"{}\",state=\"{}\"}} {count}",
                label(ns),
                label(name),
                label(state.as_str())
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
