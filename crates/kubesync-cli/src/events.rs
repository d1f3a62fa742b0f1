//! Kubernetes Events that kube's `Recorder` does not write as kubesync needs them: always a new
//! Event (a second change of the same object must not fold into the first one's series and keep
//! its note), and about a cluster-scoped object in [`CLUSTER_EVENTS_NAMESPACE`]; an Event's
//! note bounded to what the API accepts ([`truncate_note`]).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;

/// Who publishes kubesync's Events: controller `kubesync`, instance `$POD_NAME` when set.
pub fn reporter() -> kube::runtime::events::Reporter {
    kube::runtime::events::Reporter {
        controller: "kubesync".into(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

/// Creates `event` about `regarding` as a new Event: in its namespace, or in
/// [`CLUSTER_EVENTS_NAMESPACE`] for a cluster-scoped object.
pub async fn create(
    client: &kube::Client,
    reporter: &kube::runtime::events::Reporter,
    event: &kube::runtime::events::Event,
    regarding: &ObjectReference,
) -> kube::Result<()> {
    let namespace = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| CLUSTER_EVENTS_NAMESPACE.into());
    // Not rounded to the second: the Event's name is made of it, and must be new.
    let now = jiff::Timestamp::now();
    let event = direct_event(event, regarding, &namespace, reporter, now);
    Api::namespaced(client.clone(), &namespace)
        .create(&Default::default(), &event)
        .await
        .map(drop)
}

/// The namespace of Events about cluster-scoped objects (ClusterObjectSyncs). Every
/// apiserver accepts an `events.k8s.io` Event about a cluster-scoped object there; v1.20
/// refuses one in `default`, where kube's Recorder would put it.
pub const CLUSTER_EVENTS_NAMESPACE: &str = "kube-system";

/// An Event about `regarding` in `namespace` (pure; what kube's Recorder writes, but always a
/// new Event, and in that namespace).
pub fn direct_event(
    event: &kube::runtime::events::Event,
    regarding: &ObjectReference,
    namespace: &str,
    reporter: &kube::runtime::events::Reporter,
    now: jiff::Timestamp,
) -> k8s_openapi::api::events::v1::Event {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    k8s_openapi::api::events::v1::Event {
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        type_: Some(
            match event.type_ {
                kube::runtime::events::EventType::Normal => "Normal",
                kube::runtime::events::EventType::Warning => "Warning",
            }
            .into(),
        ),
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(format!(
                "{}.{:x}",
                regarding.name.as_deref().unwrap_or(&reporter.controller),
                now.as_nanosecond()
            )),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Longest Event note the API accepts (events.k8s.io/v1: 1 kB).
pub const MAX_NOTE: usize = 1024;

/// `note` cut to [`MAX_NOTE`] bytes (ending in `...` when cut).
pub fn truncate_note(note: String) -> String {
    kubesync::error::truncated(note, MAX_NOTE)
}

/// At most this many Events about one object per minute; more are not written (a log line
/// says how many were dropped). A declaration that flaps, or copies someone keeps editing,
/// cannot flood the apiserver's Event store.
pub const EVENTS_PER_MINUTE: u32 = 10;

/// The per-minute Event budget of every object kubesync writes Events about (shared by the
/// operator's controllers). Memory: one entry per object with an Event in the last minute.
#[derive(Debug, Default)]
pub struct EventBudget {
    windows: parking_lot::Mutex<std::collections::HashMap<String, Window>>,
}

/// One object's current minute: when it began, Events written, Events dropped.
#[derive(Clone, Copy, Debug)]
struct Window {
    since: std::time::Instant,
    written: u32,
    dropped: u32,
}

impl EventBudget {
    /// Whether one more Event about `object` may be written at `now` (counted if so). When a
    /// new minute begins, the number of Events dropped in the last one is logged.
    pub fn allow(&self, object: &str, now: std::time::Instant) -> bool {
        const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);
        let mut windows = self.windows.lock();
        if windows.len() > 1024 {
            windows.retain(|_, w| now.duration_since(w.since) < MINUTE);
        }
        let w = windows.entry(object.to_string()).or_insert(Window {
            since: now,
            written: 0,
            dropped: 0,
        });
        if now.duration_since(w.since) >= MINUTE {
            if w.dropped > 0 {
                tracing::warn!(
                    object,
                    dropped = w.dropped,
                    "Events over the per-minute cap were not written"
                );
            }
            *w = Window {
                since: now,
                written: 0,
                dropped: 0,
            };
        }
        if w.written < EVENTS_PER_MINUTE {
            w.written += 1;
            true
        } else {
            w.dropped += 1;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_about_one_object_are_capped_per_minute() {
        let budget = EventBudget::default();
        let t0 = std::time::Instant::now();
        let allowed = (0..25).filter(|_| budget.allow("t1/flappy", t0)).count();
        assert_eq!(allowed, EVENTS_PER_MINUTE as usize);
        assert!(budget.allow("t1/other", t0), "per object");
        let later = t0 + std::time::Duration::from_secs(61);
        assert!(budget.allow("t1/flappy", later), "a new minute");
    }

    #[test]
    fn notes_are_bounded() {
        assert_eq!(truncate_note("short".into()), "short");
        let cut = truncate_note("é".repeat(MAX_NOTE));
        assert!(cut.len() <= MAX_NOTE, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }

    #[test]
    fn events_about_cluster_scoped_objects_go_to_kube_system() {
        let event = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Warning,
            reason: "NotAllSynced".into(),
            note: Some("1 conflict".into()),
            action: "Sync".into(),
            secondary: None,
        };
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            kind: Some("ClusterObjectSync".into()),
            name: Some("fleet".into()),
            ..Default::default()
        };
        let reporter = kube::runtime::events::Reporter {
            controller: "kubesync".into(),
            instance: None,
        };
        let now: jiff::Timestamp = "2024-01-01T00:00:00Z".parse().expect("time");
        let e = direct_event(&event, &regarding, CLUSTER_EVENTS_NAMESPACE, &reporter, now);
        assert_eq!(e.metadata.namespace.as_deref(), Some("kube-system"));
        assert!(
            e.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("fleet."))
        );
        assert_eq!(
            e.regarding.as_ref().and_then(|r| r.namespace.as_deref()),
            None
        );
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reporting_instance.as_deref(), Some("kubesync"));
        assert_eq!(e.note.as_deref(), Some("1 conflict"));
    }
}
