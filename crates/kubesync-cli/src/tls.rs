//! TLS for the metrics endpoint: the serving certificate and a listener that completes each
//! TLS handshake before handing the connection to the HTTP server.
//!
//! The certificate comes from a directory (`tls.crt` and `tls.key`, as cert-manager and a
//! `kubernetes.io/tls` Secret mounted as a volume lay them out), read again whenever either
//! file changes, so a renewed certificate is served without a restart; or, without a
//! directory, from a self-signed certificate made at start (what kubebuilder's operators do:
//! the scraper then skips verification, and the bearer token still authenticates it).

use parking_lot::{Mutex, RwLock};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rustls::ServerConfig;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A handshake not finished within this time is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// At most this many handshakes run at once; further connections wait to be accepted.
pub const MAX_HANDSHAKES: usize = 64;

/// How often the certificate directory is looked at for a renewed certificate.
pub const RELOAD_EVERY: Duration = Duration::from_secs(10);

/// Why no serving certificate could be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file of the certificate directory cannot be read or holds no usable PEM.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The certificate and key do not make a usable pair, or no certificate could be made.
    #[error("{0}")]
    Certificate(String),
}

/// The provider every TLS object here uses (ring, as the kube client does).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn file_error(path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// A certificate chain and key from PEM files.
pub fn load_pair(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error(cert, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(cert, e))?;
    if chain.is_empty() {
        return Err(file_error(cert, "holds no PEM certificate"));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, e))?;
    certified(chain, key_der)
}

fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let key = CertifiedKey::from_der(chain, key, &provider())
        .map_err(|e| TlsError::Certificate(format!("the certificate and key do not pair: {e}")))?;
    Ok(Arc::new(key))
}

/// A self-signed certificate for `names` (DNS names or IP addresses).
pub fn self_signed(names: &[String]) -> Result<Arc<CertifiedKey>, TlsError> {
    let made = rcgen::generate_simple_self_signed(names.to_vec())
        .map_err(|e| TlsError::Certificate(format!("cannot make a certificate: {e}")))?;
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
        .map_err(|e| TlsError::Certificate(format!("cannot use the made key: {e}")))?;
    certified(vec![made.cert.der().clone()], key)
}

/// The names a self-signed certificate is made for: loopback, and the metrics Service in the
/// pod's namespace.
pub fn self_signed_names(namespace: Option<&str>) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    names.push("kubesync-metrics".into());
    if let Some(ns) = namespace.filter(|ns| !ns.is_empty()) {
        names.push(format!("kubesync-metrics.{ns}.svc"));
        names.push(format!("kubesync-metrics.{ns}.svc.cluster.local"));
    }
    names
}

/// The serving certificate, swapped when the files it came from change.
#[derive(Debug)]
pub struct Certificate {
    current: RwLock<Arc<CertifiedKey>>,
    files: Option<Files>,
}

#[derive(Debug)]
struct Files {
    cert: PathBuf,
    key: PathBuf,
    /// When the files were last looked at, and their modification times then.
    seen: Mutex<(Instant, Option<(SystemTime, SystemTime)>)>,
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Certificate {
    /// The certificate of `dir` (`tls.crt`, `tls.key`), or a self-signed one for `names`.
    pub fn new(dir: Option<&Path>, names: &[String]) -> Result<Self, TlsError> {
        match dir {
            Some(dir) => {
                let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
                let stamp = modified(&cert).zip(modified(&key));
                let pair = load_pair(&cert, &key)?;
                Ok(Self {
                    current: RwLock::new(pair),
                    files: Some(Files {
                        cert,
                        key,
                        seen: Mutex::new((Instant::now(), stamp)),
                    }),
                })
            }
            None => Ok(Self {
                current: RwLock::new(self_signed(names)?),
                files: None,
            }),
        }
    }

    /// The certificate to serve now; reads the files again when [`RELOAD_EVERY`] has passed
    /// and either changed. A pair that fails to load leaves the previous one in place.
    pub fn get(&self) -> Arc<CertifiedKey> {
        if let Some(files) = &self.files {
            self.reload_if_changed(files, Instant::now());
        }
        self.current.read().clone()
    }

    fn reload_if_changed(&self, files: &Files, now: Instant) {
        let mut seen = files.seen.lock();
        if now.duration_since(seen.0) < RELOAD_EVERY {
            return;
        }
        seen.0 = now;
        let stamp = modified(&files.cert).zip(modified(&files.key));
        if stamp.is_none() || stamp == seen.1 {
            return;
        }
        match load_pair(&files.cert, &files.key) {
            Ok(pair) => {
                seen.1 = stamp;
                *self.current.write() = pair;
                tracing::info!(cert = %files.cert.display(), "metrics: serving the renewed certificate");
            }
            // Half-written renewals are common (the key before the certificate): try again.
            Err(e) => {
                tracing::warn!(error = %e, "metrics: the renewed certificate is not usable yet; serving the previous one")
            }
        }
    }

    /// A server configuration that serves this certificate (HTTP/1.1, TLS 1.2 and 1.3).
    pub fn server_config(self: Arc<Self>) -> Result<Arc<ServerConfig>, TlsError> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Certificate(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(self);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.get())
    }
}

/// Accepts TCP connections and completes their TLS handshakes (each in its own task, at most
/// [`MAX_HANDSHAKES`] at once, each within [`HANDSHAKE_TIMEOUT`]), so one slow client never
/// holds up another. A listener for `axum::serve`.
pub struct TlsListener {
    incoming: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Starts accepting on `tcp`; stops when the listener is dropped.
    pub fn new(tcp: TcpListener, config: Arc<ServerConfig>) -> io::Result<Self> {
        let local = tcp.local_addr()?;
        let (tx, incoming) = mpsc::channel(MAX_HANDSHAKES);
        let acceptor = TlsAcceptor::from(config);
        let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (stream, peer) = tokio::select! {
                    () = tx.closed() => return,
                    accepted = tcp.accept() => match accepted {
                        Ok(accepted) => accepted,
                        Err(e) => {
                            tracing::debug!(error = %e, "metrics: accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    let shaken =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    drop(slot);
                    match shaken {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "metrics: TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "metrics: TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { incoming, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.incoming.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended (it never does while the listener lives).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, names: &[&str]) -> Vec<u8> {
        let made = rcgen::generate_simple_self_signed(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .expect("certificate");
        std::fs::write(dir.join("tls.crt"), made.cert.pem()).expect("write");
        std::fs::write(dir.join("tls.key"), made.signing_key.serialize_pem()).expect("write");
        made.cert.der().to_vec()
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kubesync-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn a_directory_pair_is_served_and_a_renewal_replaces_it() {
        let dir = temp_dir("renew");
        let first = write_pair(&dir, &["a.example"]);
        let cert = Certificate::new(Some(&dir), &[]).expect("loads");
        assert_eq!(cert.get().cert[0].as_ref(), first.as_slice());
        // A renewal: new files (with a later mtime); seen once RELOAD_EVERY has passed.
        std::thread::sleep(Duration::from_millis(20));
        let second = write_pair(&dir, &["b.example"]);
        let files = cert.files.as_ref().expect("files");
        let later = Instant::now() + RELOAD_EVERY;
        cert.reload_if_changed(files, later);
        assert_eq!(cert.get().cert[0].as_ref(), second.as_slice());
        // A half-written renewal keeps the last good pair.
        std::fs::write(dir.join("tls.key"), "not a key").expect("write");
        cert.reload_if_changed(files, later + RELOAD_EVERY);
        assert_eq!(cert.get().cert[0].as_ref(), second.as_slice());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_or_mismatched_pair_is_refused_with_its_path() {
        let dir = temp_dir("bad");
        let e = Certificate::new(Some(&dir), &[]).expect_err("no files");
        assert!(e.to_string().contains("tls.crt"), "{e}");
        write_pair(&dir, &["a.example"]);
        let other = rcgen::KeyPair::generate().expect("key");
        std::fs::write(dir.join("tls.key"), other.serialize_pem()).expect("write");
        let e = Certificate::new(Some(&dir), &[]).expect_err("mismatched");
        assert!(e.to_string().contains("do not pair"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_self_signed_certificate_names_the_metrics_service() {
        let names = self_signed_names(Some("kubesync-system"));
        assert!(names.contains(&"kubesync-metrics.kubesync-system.svc".to_string()));
        assert!(names.contains(&"127.0.0.1".to_string()));
        let cert = Certificate::new(None, &names).expect("made");
        assert_eq!(cert.get().cert.len(), 1);
        assert!(Arc::new(cert).server_config().is_ok());
    }
}
