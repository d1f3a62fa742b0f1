//! The library's error type.

/// Errors of the kubesync engine.
///
/// Every variant has a bounded [`category`](Error::category), suitable as a metric label or a
/// status-condition reason.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A watch, store or key names a cluster that was never registered.
    #[error("unknown cluster {0:?}: register it with Controller::cluster first")]
    UnknownCluster(String),
    /// A kubeconfig could not be read or did not contain the requested context.
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    /// The in-cluster configuration (service-account token, env vars) is missing or invalid.
    #[error("in-cluster configuration: {0}")]
    InCluster(String),
    /// A Kubernetes API request failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be converted to the requested Rust type.
    #[error("cannot read {key} as {target}: {message}")]
    Convert {
        /// The object's key.
        key: String,
        /// The Rust type it was read as.
        target: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The controller was configured inconsistently.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An object could not be serialized, parsed, or patched as JSON.
    #[error("serialization: {0}")]
    Serialization(String),
    /// A cluster cannot be reached, so a decision that needs it waits.
    #[error("cluster {cluster} is unreachable ({message})")]
    ClusterUnreachable {
        /// The cluster's name.
        cluster: String,
        /// Why (the watch's or the request's error).
        message: String,
    },
    /// A namespace is being deleted; what must be created in it waits until it is gone.
    #[error("namespace {0} is terminating")]
    NamespaceTerminating(String),
    /// The controller's run loop has stopped, so it takes no new watches.
    #[error("the controller is not running")]
    NotRunning,
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Serialization(e.to_string())
    }
}

impl Error {
    /// A short, bounded PascalCase category for metrics and condition reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::UnknownCluster(_) => "UnknownCluster",
            Error::Kubeconfig(_) => "Kubeconfig",
            Error::InCluster(_) => "InClusterConfig",
            Error::Kube(kube::Error::Api(s)) if s.is_forbidden() => "Forbidden",
            Error::Kube(kube::Error::Api(s)) if s.is_not_found() => "NotFound",
            Error::Kube(kube::Error::Api(s)) if s.is_conflict() => "Conflict",
            Error::Kube(kube::Error::Api(_)) => "ApiError",
            Error::Kube(_) => "Unreachable",
            Error::Convert { .. } => "Convert",
            Error::Config(_) => "InvalidConfig",
            Error::Serialization(_) => "Serialization",
            Error::ClusterUnreachable { .. } => "Unreachable",
            Error::NamespaceTerminating(_) => "NamespaceTerminating",
            Error::NotRunning => "NotRunning",
        }
    }
}

/// Every failure category a reconcile can be counted under: those of [`Error::category`],
/// `Error` (a plain message, see [`ErrorCategory`](crate::runtime::ErrorCategory)) and
/// `Panic`. Exporters list each from the start (at zero), so that a rate over them exists
/// before the first failure.
pub const CATEGORIES: [&str; 15] = [
    "UnknownCluster",
    "Kubeconfig",
    "InClusterConfig",
    "Forbidden",
    "NotFound",
    "Conflict",
    "ApiError",
    "Unreachable",
    "Convert",
    "InvalidConfig",
    "Serialization",
    "NamespaceTerminating",
    "NotRunning",
    "Error",
    "Panic",
];

/// An error's message followed by its causes (`a: b: c`), leaving out a cause whose text the
/// message already holds. `client error (Connect)` alone does not say whether the port was
/// closed or the server's certificate untrusted; its causes do.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    text
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Layer(&'static str, #[source] Option<Box<Layer>>);

    #[test]
    fn a_chain_names_every_cause_once() {
        let e = Layer(
            "client error (Connect)",
            Some(Box::new(Layer(
                "invalid peer certificate: UnknownIssuer",
                Some(Box::new(Layer("UnknownIssuer", None))),
            ))),
        );
        assert_eq!(
            chain(&e),
            "client error (Connect): invalid peer certificate: UnknownIssuer"
        );
    }
}
