//! The apiserver's audit log ([`TestEnvBuilder::audit`](crate::TestEnvBuilder::audit)): the
//! server's own record of every request, for tests that must prove who wrote what, how often,
//! and what was refused — independent of what the client under test reports about itself.

use serde::Deserialize;

use crate::{Error, TestEnv};

/// The log's file name in the environment's directory.
pub(crate) const LOG: &str = "audit.log";

/// What the audit log records besides its default ([`TestEnvBuilder::audit_also`](crate::TestEnvBuilder::audit_also)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AuditAlso {
    /// Events (both APIs), with their metadata.
    pub events: bool,
    /// Leases, with their metadata.
    pub leases: bool,
}

/// The audit policy: writes with their request and response objects, other requests with
/// their metadata; Leases and Events (renewals and reports, not state) not at all unless
/// `also` asks for them (then with their metadata). Only the final stage is recorded: one
/// line per request.
pub(crate) fn policy(also: AuditAlso) -> String {
    let mut rules = String::new();
    let dropped: Vec<&str> = [
        (!also.leases).then_some("  - {group: coordination.k8s.io, resources: [leases]}"),
        (!also.events).then_some("  - {group: \"\", resources: [events]}"),
        (!also.events).then_some("  - {group: events.k8s.io, resources: [events]}"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !dropped.is_empty() {
        rules.push_str("- level: None\n  resources:\n");
        for line in dropped {
            rules.push_str(line);
            rules.push('\n');
        }
    }
    let kept: Vec<&str> = [
        also.leases
            .then_some("  - {group: coordination.k8s.io, resources: [leases]}"),
        also.events
            .then_some("  - {group: \"\", resources: [events]}"),
        also.events
            .then_some("  - {group: events.k8s.io, resources: [events]}"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !kept.is_empty() {
        rules.push_str("- level: Metadata\n  resources:\n");
        for line in kept {
            rules.push_str(line);
            rules.push('\n');
        }
    }
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n{rules}- level: RequestResponse\n  verbs: [create, update, patch, delete, deletecollection]\n- level: Metadata\n"
    )
}

/// One request as the apiserver recorded it.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The request's URI, with its query (`?fieldManager=…`).
    #[serde(default, rename = "requestURI")]
    pub request_uri: String,
    /// Who sent it.
    pub user: AuditUser,
    /// Who it acted as, when it was sent with impersonation headers (`None`: as `user`).
    #[serde(default)]
    pub impersonated_user: Option<AuditUser>,
    /// What it addressed (absent for non-resource URLs such as `/version`).
    #[serde(default)]
    pub object_ref: Option<AuditObjectRef>,
    /// The answer's status (its `code`: 200, 201, 404, 409, 429, …).
    #[serde(default)]
    pub response_status: Option<AuditStatus>,
    /// The object the request carried (writes only).
    #[serde(default)]
    pub request_object: Option<serde_json::Value>,
    /// The object the apiserver returned (writes only).
    #[serde(default)]
    pub response_object: Option<serde_json::Value>,
    /// When the answer was complete (RFC 3339, microseconds).
    #[serde(default)]
    pub stage_timestamp: String,
    /// When the apiserver received the request (RFC 3339, microseconds): a request sent
    /// before a client froze may be answered, and logged, after it woke.
    #[serde(default)]
    pub request_received_timestamp: String,
}

/// The authenticated user of an [`AuditEvent`].
#[derive(Clone, Debug, Default, Deserialize)]
pub struct AuditUser {
    /// The user name.
    #[serde(default)]
    pub username: String,
    /// What the authenticator added: for a Pod's ServiceAccount token,
    /// `authentication.kubernetes.io/pod-name` (and `pod-uid`, `node-name`) tell which Pod
    /// sent the request.
    #[serde(default)]
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl AuditUser {
    /// The name of the Pod whose ServiceAccount token authenticated the request, if any.
    pub fn pod_name(&self) -> Option<&str> {
        self.extra
            .get("authentication.kubernetes.io/pod-name")
            .and_then(|v| v.first())
            .map(String::as_str)
    }
}

/// The object an [`AuditEvent`] addressed.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditObjectRef {
    /// Plural resource name, e.g. `configmaps`.
    #[serde(default)]
    pub resource: String,
    /// Its namespace (empty for cluster-scoped objects and cluster-wide requests).
    #[serde(default)]
    pub namespace: String,
    /// Its name (empty for lists and for some creates; see [`AuditEvent::name`]).
    #[serde(default)]
    pub name: String,
    /// The subresource, e.g. `status`.
    #[serde(default)]
    pub subresource: String,
}

/// The answer's status of an [`AuditEvent`].
#[derive(Clone, Debug, Default, Deserialize)]
pub struct AuditStatus {
    /// The HTTP status code.
    #[serde(default)]
    pub code: u16,
}

impl AuditEvent {
    /// The user the request acted as: the impersonated one, else the one who sent it.
    pub fn acting_user(&self) -> &str {
        self.impersonated_user
            .as_ref()
            .map_or(self.user.username.as_str(), |u| u.username.as_str())
    }

    /// The HTTP status code of the answer (0 if none was recorded).
    pub fn code(&self) -> u16 {
        self.response_status.as_ref().map_or(0, |s| s.code)
    }

    /// Whether the request succeeded (2xx).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code())
    }

    /// Whether it was a write: create, update, patch, delete or deletecollection.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// The resource addressed (`configmaps`, …), or `""` for a non-resource URL.
    pub fn resource(&self) -> &str {
        self.object_ref.as_ref().map_or("", |o| o.resource.as_str())
    }

    /// The subresource addressed (`status`, …), or `""`.
    pub fn subresource(&self) -> &str {
        self.object_ref
            .as_ref()
            .map_or("", |o| o.subresource.as_str())
    }

    /// The namespace addressed, or `""`.
    pub fn namespace(&self) -> &str {
        self.object_ref
            .as_ref()
            .map_or("", |o| o.namespace.as_str())
    }

    /// The request in one line, for a test's failure message: `verb resource/namespace/name
    /// (code)`.
    pub fn describe(&self) -> String {
        format!(
            "{} {}/{}/{} ({})",
            self.verb,
            self.resource(),
            self.namespace(),
            self.name(),
            self.code()
        )
    }

    /// The name of the object addressed: the reference's, else the returned object's, else
    /// the sent one's (a create the apiserver refused returns a Status, not the object).
    pub fn name(&self) -> &str {
        fn named(o: &Option<serde_json::Value>) -> Option<&str> {
            o.as_ref()
                .and_then(|o| o["metadata"]["name"].as_str())
                .filter(|n| !n.is_empty())
        }
        match self.object_ref.as_ref().map(|o| o.name.as_str()) {
            Some(name) if !name.is_empty() => name,
            _ => named(&self.response_object)
                .or_else(|| named(&self.request_object))
                .unwrap_or_default(),
        }
    }
}

impl TestEnv {
    /// Every request recorded so far, oldest first (the environment must have been built with
    /// [`TestEnvBuilder::audit`](crate::TestEnvBuilder::audit)). The apiserver writes a
    /// request's line when its handler returns: a large answer may reach the caller first, and
    /// another client may see a write's effect (a watch event, a read) before its line is
    /// written. To count writes someone else made, wait for the count
    /// ([`eventually`](crate::eventually)) rather than read the log once.
    pub fn audit(&self) -> Result<Vec<AuditEvent>, Error> {
        let path = self.dir.join(LOG);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::Io(format!("read {}", path.display()), e))?;
        parse(&text)
    }
}

/// The events of a log's complete lines. The apiserver may be writing a line while it is
/// read: a last line without its newline is not written yet, so it is left for the next read.
fn parse(text: &str) -> Result<Vec<AuditEvent>, Error> {
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    complete
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line)
                .map_err(|e| Error::Process(format!("audit log line {line:.200}: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_still_being_written_is_left_for_the_next_read() {
        let line = r#"{"kind":"Event","verb":"create","user":{"username":"u"},"responseStatus":{"code":201}}"#;
        let whole = format!("{line}\n{line}\n");
        assert_eq!(super::parse(&whole).expect("whole").len(), 2);
        let cut = format!("{line}\n{}", &line[..40]);
        assert_eq!(super::parse(&cut).expect("cut").len(), 1);
        assert_eq!(super::parse(&line[..40]).expect("first").len(), 0);
        let broken = format!("{}\n", &line[..40]);
        assert!(
            super::parse(&broken).is_err(),
            "a complete broken line is an error"
        );
    }

    #[test]
    fn the_policy_drops_leases_and_events_unless_asked_for() {
        let default = policy(AuditAlso::default());
        let none = default
            .split("- level: RequestResponse")
            .next()
            .expect("rules");
        assert!(
            none.contains("leases") && none.contains("events"),
            "{default}"
        );
        let with = policy(AuditAlso {
            events: true,
            leases: false,
        });
        let (dropped, kept) = with
            .split_once("- level: Metadata\n  resources:")
            .expect("kept");
        assert!(
            dropped.contains("leases") && !dropped.contains("events"),
            "{with}"
        );
        assert!(
            kept.contains("events")
                && !kept
                    .split("- level: RequestResponse")
                    .next()
                    .unwrap_or_default()
                    .contains("leases"),
            "{with}"
        );
        let both = policy(AuditAlso {
            events: true,
            leases: true,
        });
        assert!(!both.contains("level: None"), "{both}");
    }

    use super::*;

    #[test]
    fn an_audit_line_parses_and_names_its_object() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"x","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/a/configmaps?fieldManager=kubesync","verb":"create","user":{"username":"kubesync","groups":["system:authenticated"]},"objectRef":{"resource":"configmaps","namespace":"a","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"responseObject":{"kind":"ConfigMap","metadata":{"name":"settings","namespace":"a"}},"stageTimestamp":"2026-01-01T00:00:00.000001Z"}"#;
        let e: AuditEvent = serde_json::from_str(line).expect("parse");
        assert_eq!(e.verb, "create");
        assert_eq!(e.user.username, "kubesync");
        assert_eq!(
            (e.resource(), e.namespace(), e.name()),
            ("configmaps", "a", "settings")
        );
        assert!(e.is_write() && e.succeeded());
        let refused: AuditEvent = serde_json::from_str(
            r#"{"verb":"list","user":{"username":"u"},"responseStatus":{"code":429}}"#,
        )
        .expect("parse");
        assert_eq!(refused.code(), 429);
        assert!(!refused.succeeded() && !refused.is_write());
        assert_eq!(refused.name(), "");
    }
}
