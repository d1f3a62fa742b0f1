//! The one error type of the test environment.

/// Errors of the test environment.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The control-plane binaries could not be found or built.
    #[error("control-plane binaries: {0}")]
    Binaries(String),
    /// Certificate generation failed.
    #[error("certificates: {0}")]
    Certificates(String),
    /// A file-system or process operation failed.
    #[error("{0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// A control-plane process failed to start or become ready.
    #[error("{0}")]
    Process(String),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be built or parsed.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// A YAML document given to a helper is invalid.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// A wait ran out of time.
    #[error("timed out: {0}")]
    Timeout(String),
}
