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
    #[error("kubernetes API: {}", describe_kube(.0))]
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
    /// This process may no longer write (see [`crate::fence`]): the write was not sent, and
    /// the work that decided it is dropped, not retried.
    #[error(transparent)]
    Fenced(#[from] crate::fence::Fenced),
    /// A declaration's record of the copies it made could not be opened where it is kept
    /// ([`Ledger::open`](crate::syncers::fan_out::record::Ledger::open)): no copy is created
    /// that a restart could no longer tell from someone else's object.
    #[error(
        "the record of the copies kubesync made could not be opened, so no copy is created yet: {0}"
    )]
    RecordNotOpened(String),
    /// A copy kubesync has no record of making is not removed: nobody may remove it for
    /// kubesync ([`Unrecorded::Leave`](crate::syncers::fan_out::record::Unrecorded::Leave));
    /// the message says where and why.
    #[error("{0}")]
    LeftInPlace(String),
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
            Error::Kube(e) if crate::fence::is_fenced(e) => "Fenced",
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
            Error::Fenced(_) => "Fenced",
            Error::RecordNotOpened(_) => "RecordNotOpened",
            Error::LeftInPlace(_) => "LeftInPlace",
        }
    }

    /// Whether the write was refused by this process's [fence](crate::fence) (by the
    /// [`Writer`](crate::Writer) or as it left the client): work to drop, not to retry.
    pub fn is_fenced(&self) -> bool {
        match self {
            Error::Fenced(_) => true,
            Error::Kube(e) => crate::fence::is_fenced(e),
            _ => false,
        }
    }
}

/// Every failure category a reconcile can be counted under: those of [`Error::category`],
/// `Error` (a plain message, see [`ErrorCategory`](crate::runtime::ErrorCategory)) and
/// `Panic`. Exporters list each from the start (at zero), so that a rate over them exists
/// before the first failure.
pub const CATEGORIES: [&str; 18] = [
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
    "Fenced",
    "RecordNotOpened",
    "LeftInPlace",
    "Error",
    "Panic",
];

/// Longest text of an error kubesync puts in a condition, an Event or a log line.
pub const MAX_MESSAGE: usize = 512;

/// What the apiserver said, for people: its message and HTTP code, e.g. `found '(', expected:
/// ',' or 'end of string' (400)`; its reason where it sent no message. Never a `Debug` dump;
/// at most [`MAX_MESSAGE`] bytes.
pub fn api_message(status: &kube::core::Status) -> String {
    let text = match (status.message.trim(), status.reason.as_str()) {
        ("", "") => "no message".to_string(),
        ("", reason) => reason.to_string(),
        (message, _) => message.to_string(),
    };
    let text = if status.code == 0 {
        text
    } else {
        format!("{text} ({})", status.code)
    };
    bounded(text)
}

/// A kube client error, for people: the apiserver's message and code ([`api_message`]), or
/// the error with its causes ([`chain`]).
pub fn describe_kube(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => api_message(status),
        other => chain(other),
    }
}

/// `text` cut to [`MAX_MESSAGE`] bytes (ending in `...` when cut).
pub fn bounded(text: String) -> String {
    truncated(text, MAX_MESSAGE)
}

/// `text` cut to `max` bytes (at least 3), at a character boundary, ending in `...` when cut.
pub fn truncated(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.max(3) - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// An error's message followed by its causes (`a: b: c`), leaving out a cause whose text the
/// message already holds. `client error (Connect)` alone does not say whether the port was
/// closed or the server's certificate untrusted; its causes do. An apiserver's refusal in
/// the chain ends it, said as [`api_message`] says it. At most [`MAX_MESSAGE`] bytes.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(kube::Error::Api(status)) = e.downcast_ref::<kube::Error>() {
        return api_message(status);
    }
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        if let Some(kube::Error::Api(status)) = c.downcast_ref::<kube::Error>() {
            // The message above it repeats the Debug dump of kube's Display: replace it.
            text = match text.find("ApiError: ") {
                Some(at) => text[..at].to_string(),
                None => format!("{text}: "),
            };
            text.push_str(&api_message(status));
            return bounded(text);
        }
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    bounded(text)
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{0}")]
    struct Layer(&'static str, #[source] Option<Box<Layer>>);

    fn status(message: &str, reason: &str, code: u16) -> kube::core::Status {
        kube::core::Status {
            message: message.into(),
            reason: reason.into(),
            code,
            ..Default::default()
        }
    }

    #[test]
    fn the_apiservers_refusal_is_said_once_without_debug_formatting() {
        let refused = status(
            "found '(', expected: ',' or 'end of string'",
            "BadRequest",
            400,
        );
        let e = kube::Error::Api(Box::new(refused.clone()));
        assert_eq!(
            describe_kube(&e),
            "found '(', expected: ',' or 'end of string' (400)"
        );
        assert_eq!(chain(&e), describe_kube(&e));
        let text = Error::Kube(e).to_string();
        assert_eq!(
            text,
            "kubernetes API: found '(', expected: ',' or 'end of string' (400)"
        );
        // Wrapped (as a watcher wraps it): the wrapper's words, then the refusal once.
        let wrapped =
            kube::runtime::watcher::Error::InitialListFailed(kube::Error::Api(Box::new(refused)));
        let text = chain(&wrapped);
        assert_eq!(
            text,
            "failed to perform initial object list: found '(', expected: ',' or 'end of string' (400)"
        );
        assert!(
            !text.contains("Status {") && !text.contains("Some("),
            "{text}"
        );
        assert_eq!(
            api_message(&status("", "Forbidden", 403)),
            "Forbidden (403)"
        );
        assert_eq!(api_message(&status("", "", 0)), "no message");
    }

    /// Every variant's category is one of [`CATEGORIES`] (so exporters list it from zero), and
    /// every category but the runtime's own two (`Error`, `Panic`) belongs to some variant.
    #[test]
    fn every_category_is_listed_and_every_listed_one_is_used() {
        let api = |code: u16, reason: &str| {
            Error::Kube(kube::Error::Api(Box::new(status("m", reason, code))))
        };
        let every = [
            Error::UnknownCluster("c".into()),
            Error::Kubeconfig("k".into()),
            Error::InCluster("i".into()),
            api(403, "Forbidden"),
            api(404, "NotFound"),
            api(409, "Conflict"),
            api(422, "Invalid"),
            Error::Kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Convert {
                key: "k".into(),
                target: "T",
                message: "m".into(),
            },
            Error::Config("c".into()),
            Error::Serialization("s".into()),
            Error::ClusterUnreachable {
                cluster: "c".into(),
                message: "m".into(),
            },
            Error::NamespaceTerminating("n".into()),
            Error::NotRunning,
            Error::Fenced(crate::fence::Fenced("stale".into())),
            Error::RecordNotOpened("r".into()),
            Error::LeftInPlace("l".into()),
            Error::Kube(kube::Error::Service(Box::new(crate::fence::Fenced(
                "refused by the client".into(),
            )))),
        ];
        // A new variant must be added above (the match makes the compiler say so).
        for e in &every {
            match e {
                Error::UnknownCluster(_)
                | Error::Kubeconfig(_)
                | Error::InCluster(_)
                | Error::Kube(_)
                | Error::Convert { .. }
                | Error::Config(_)
                | Error::Serialization(_)
                | Error::ClusterUnreachable { .. }
                | Error::NamespaceTerminating(_)
                | Error::NotRunning
                | Error::Fenced(_)
                | Error::RecordNotOpened(_)
                | Error::LeftInPlace(_) => {}
            }
        }
        let used: std::collections::BTreeSet<&str> = every.iter().map(Error::category).collect();
        for category in &used {
            assert!(CATEGORIES.contains(category), "{category} is not listed");
        }
        for listed in CATEGORIES {
            assert!(
                used.contains(listed) || ["Error", "Panic"].contains(&listed),
                "{listed} is listed but no variant has it"
            );
        }
    }

    #[test]
    fn messages_are_bounded() {
        let long = api_message(&status(&"é".repeat(2000), "BadRequest", 400));
        assert!(
            long.len() <= MAX_MESSAGE && long.ends_with("..."),
            "{}",
            long.len()
        );
        assert_eq!(bounded("short".into()), "short");
    }

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
