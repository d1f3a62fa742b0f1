//! Status assembly from outcomes, conditions and their transitions.

use super::*;
use kubesync::syncers::fan_out::WatchError;

fn synced(ok: bool, reason: State, message: &str) -> Condition {
    status::condition(ConditionType::Synced, ok, reason, message)
}

#[test]
fn a_missing_source_is_one_event_not_two() {
    let new = [
        status::ready(false, State::SourceNotFound, "source apps/x does not exist"),
        synced(false, State::SourceNotFound, "no source to copy"),
    ];
    let events = condition_events(&[], &new);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].1.as_str(), events[0].2.as_str()),
        ("Ready", "SourceNotFound")
    );
}

fn t(s: &str) -> jiff::Timestamp {
    s.parse().expect("time")
}

fn dest(cluster: &str, ns: &str, state: DestinationState, message: &str) -> DestinationStatus {
    let at = kubesync::syncers::fan_out::DestinationRef::new(cluster, ns, "settings");
    DestinationStatus::new(&at, state, message.into(), "42")
}

fn outcome(destinations: Vec<DestinationStatus>) -> Outcome {
    Outcome {
        ready: true,
        source_found: true,
        destinations,
        ..Default::default()
    }
}

fn assemble(old: &ObjectSyncStatus, outcome: &Outcome, now: &str) -> ObjectSyncStatus {
    assemble_with(old, outcome, now, None)
}

/// What the fan-out reported for source `apps/settings`.
fn settings(outcome: &Outcome) -> Observation<'_> {
    Observation::Reconciled {
        outcome,
        source_namespace: "apps",
        source_name: "settings",
        selection: None,
        report_only: false,
    }
}

/// The status of source `apps/settings`, or of a `selection` in `apps`.
fn assemble_with(
    old: &ObjectSyncStatus,
    outcome: &Outcome,
    now: &str,
    selection: Option<&str>,
) -> ObjectSyncStatus {
    object_sync_status(
        old,
        Some(2),
        Observation::Reconciled {
            outcome,
            source_namespace: "apps",
            source_name: "settings",
            selection,
            report_only: false,
        },
        t(now),
    )
}

fn find<'a>(s: &'a ObjectSyncStatus, type_: &str) -> &'a Condition {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .expect("condition")
}

#[test]
fn report_mode_lists_planned_actions_and_keeps_a_drift_found_earlier() {
    use kubesync::syncers::fan_out::rules::{Drift, ManagerChange};
    let drift = Drift {
        fields: vec!["data.a".into()],
        managers: vec![ManagerChange {
            manager: "alice".into(),
            operation: "Update".into(),
            time: "2024-01-01T00:00:00Z".into(),
            fields: vec!["data.a".into()],
        }],
    };
    let mut update = dest(
        "local",
        "team-a",
        DestinationState::OutOfSync,
        "would update data.a",
    );
    update.planned = Some(Planned::Update);
    update.changed_fields = vec!["data.a".into()];
    update.drift = Some(drift);
    let mut create = dest(
        "local",
        "team-b",
        DestinationState::OutOfSync,
        "would create",
    );
    create.planned = Some(Planned::Create);
    let r = outcome(vec![update, create]);
    let status = |old: &ObjectSyncStatus, now: &str| {
        object_sync_status(
            old,
            Some(2),
            Observation::Reconciled {
                outcome: &r,
                source_namespace: "apps",
                source_name: "settings",
                selection: None,
                report_only: true,
            },
            t(now),
        )
    };
    let first = status(&ObjectSyncStatus::default(), "2024-01-01T00:00:05Z");
    let ready = find(&first, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Reporting")
    );
    assert!(
        ready.message.contains("nothing is written"),
        "{}",
        ready.message
    );
    let synced = find(&first, "Synced");
    assert_eq!(synced.reason, "OutOfSync");
    assert!(
        synced
            .message
            .contains("would create 1, update 1 and delete 0"),
        "{}",
        synced.message
    );
    let a = &first.destinations[0];
    assert_eq!(a.planned_action, Some(crate::crd::PlannedAction::Update));
    assert_eq!(a.changed_fields, ["data.a"]);
    let found = a.last_drift.clone().expect("drift");
    assert_eq!(found.detected_time, "2024-01-01T00:00:05Z");
    assert_eq!(found.managers[0].manager, "alice");
    assert_eq!(
        first.destinations[1].planned_action,
        Some(crate::crd::PlannedAction::Create)
    );
    // The same change found again later keeps the time it was first found.
    let again = status(&first, "2024-01-01T00:01:00Z");
    assert_eq!(again.destinations[0].last_drift, Some(found));
}

#[test]
fn all_synced() {
    let r = outcome(vec![
        dest("local", "team-a", DestinationState::Synced, ""),
        dest("remote:eu", "edge-1", DestinationState::Synced, ""),
    ]);
    let s = assemble(&ObjectSyncStatus::default(), &r, "2024-01-01T00:00:00Z");
    assert_eq!((s.in_sync, s.total), (2, 2));
    assert_eq!(s.observed_generation, Some(2));
    let ready = find(&s, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "Syncing")
    );
    assert_eq!(ready.message, "copying settings to 2 destinations");
    let synced = find(&s, "Synced");
    assert_eq!(
        (synced.status.as_str(), synced.reason.as_str()),
        ("True", "AllSynced")
    );
    assert_eq!(synced.message, "2 of 2 destinations in sync");
    assert_eq!(s.destinations[1].cluster, "eu", "the RemoteCluster's name");
    assert!(s.destinations.iter().all(|d| d.last_sync_time.is_some()));
    // A later reconcile with the same outcome changes nothing (no write, no Event).
    let again = assemble(&s, &r, "2024-01-01T00:10:00Z");
    assert_eq!(again, s);
    // A new source version moves lastSyncTime.
    let mut newer = r.clone();
    newer.destinations[0].source_resource_version = "43".into();
    let moved = assemble(&s, &newer, "2024-01-01T00:10:00Z");
    assert_eq!(
        moved.destinations[0].last_sync_time.as_deref(),
        Some("2024-01-01T00:10:00Z")
    );
    assert_eq!(
        moved.destinations[1].last_sync_time,
        s.destinations[1].last_sync_time
    );
}

/// The status of a selection's copy of `source` at `ns`.
fn pair(ns: &str, source: &str, state: DestinationState, rv: &str) -> DestinationStatus {
    DestinationStatus {
        name: format!("p-{source}"),
        source: source.into(),
        source_resource_version: rv.into(),
        ..dest(
            "local",
            ns,
            state,
            if state == DestinationState::Synced {
                ""
            } else {
                "failed"
            },
        )
    }
}

fn assemble_many(old: &ObjectSyncStatus, outcome: &Outcome, now: &str) -> ObjectSyncStatus {
    assemble_with(old, outcome, now, Some("selector app=tls"))
}

#[test]
fn many_sources_are_counted_per_namespace_with_a_bounded_list_of_failures() {
    use DestinationState::{Error, Synced};
    let mut copies: Vec<DestinationStatus> = (0..50)
        .flat_map(|i| {
            let s = format!("s{i:02}");
            [
                pair("team-a", &s, Synced, "7"),
                pair("team-b", &s, if i % 2 == 0 { Error } else { Synced }, "9"),
            ]
        })
        .collect();
    copies.push(pair("team-b", "s99", DestinationState::Refused, ""));
    let mut r = outcome(copies);
    r.sources = 51;
    let s = assemble_many(&ObjectSyncStatus::default(), &r, "2024-01-01T00:00:00Z");
    assert_eq!(s.sources, Some(51));
    assert_eq!((s.in_sync, s.total), (1, 2), "one entry per namespace");
    let (a, b) = (&s.destinations[0], &s.destinations[1]);
    assert_eq!(
        (
            a.state,
            a.sources_in_sync,
            a.sources_total,
            a.source_resource_version.as_str()
        ),
        (CopyState::Synced, Some(50), Some(50), "7")
    );
    assert!(a.last_sync_time.is_some() && a.name.is_empty());
    assert_eq!(
        (b.state, b.sources_in_sync, b.sources_total),
        (CopyState::Refused, Some(25), Some(51))
    );
    assert_eq!(
        b.message, "s99: failed",
        "the refusal first, with its source"
    );
    assert_eq!(s.failures.len(), MAX_FAILURES, "never thousands of entries");
    assert_eq!(
        (s.failures[0].source.as_str(), s.failures[0].state),
        ("s99", CopyState::Refused)
    );
    assert_eq!(
        (s.failures[1].source.as_str(), s.failures[1].name.as_str()),
        ("s00", "p-s00")
    );
    assert_eq!(
        find(&s, "Ready").message,
        "copying 51 sources (selector app=tls in apps) to 2 destinations"
    );
    // The same outcome later changes nothing.
    assert_eq!(assemble_many(&s, &r, "2024-01-01T00:10:00Z"), s);
    // Nothing selected: SourceNotFound.
    let none = Outcome {
        source_found: false,
        ..outcome(vec![])
    };
    let s = assemble_many(&s, &none, "2024-01-01T00:20:00Z");
    assert_eq!(find(&s, "Ready").reason, "SourceNotFound");
    assert_eq!(s.sources, Some(0));
}

#[test]
fn a_conflict() {
    let r = outcome(vec![
        dest("local", "team-a", DestinationState::Synced, ""),
        dest("local", "team-c", DestinationState::Conflict, "not ours"),
    ]);
    let s = assemble(&ObjectSyncStatus::default(), &r, "2024-01-01T00:00:00Z");
    assert_eq!((s.in_sync, s.total), (1, 2));
    assert_eq!(find(&s, "Ready").status, "True");
    let synced = find(&s, "Synced");
    assert_eq!(
        (synced.status.as_str(), synced.reason.as_str()),
        ("False", "NotAllSynced")
    );
    assert_eq!(synced.message, "local/team-c: Conflict not ours");
    assert_eq!(s.destinations[1].last_sync_time, None);
    let events = condition_events(&[], &s.conditions);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].2, "NotAllSynced");
}

#[test]
fn source_not_found() {
    let mut r = outcome(Vec::new());
    r.source_found = false;
    let s = assemble(&ObjectSyncStatus::default(), &r, "2024-01-01T00:00:00Z");
    let ready = find(&s, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "SourceNotFound")
    );
    assert_eq!(
        ready.message,
        "source apps/settings does not exist; its copies were removed"
    );
    // Its reason agrees with its status: nothing is "all synced" without a source.
    let synced = find(&s, "Synced");
    assert_eq!(
        (synced.status.as_str(), synced.reason.as_str()),
        ("False", "SourceNotFound")
    );
    assert_eq!((s.in_sync, s.total), (0, 0));
}

#[test]
fn a_cluster_scoped_source_is_named_without_a_namespace() {
    let mut r = outcome(Vec::new());
    r.source_found = false;
    let ready = |source_name, selection| {
        let observed = Observation::Reconciled {
            outcome: &r,
            source_namespace: "",
            source_name,
            selection,
            report_only: false,
        };
        let s = object_sync_status(
            &ObjectSyncStatus::default(),
            Some(1),
            observed,
            t("2024-01-01T00:00:00Z"),
        );
        find(&s, "Ready").message.clone()
    };
    assert_eq!(
        ready("fleet-reader", None),
        "source fleet-reader does not exist; its copies were removed"
    );
    assert_eq!(
        ready("", Some("selector share=fleet")),
        "no object matches the source's selector share=fleet; its copies were removed"
    );
}

#[test]
fn watch_errors_and_unreachable_destinations() {
    let failing = Outcome {
        ready: false,
        watch_errors: vec![WatchError {
            cluster: "remote:eu".into(),
            message: "widgets is forbidden".into(),
        }],
        ..Default::default()
    };
    let s = assemble(
        &ObjectSyncStatus::default(),
        &failing,
        "2024-01-01T00:00:00Z",
    );
    assert_eq!(s.conditions.len(), 1);
    let ready = find(&s, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "WatchFailed")
    );
    assert_eq!(ready.message, "eu: widgets is forbidden");
    assert!(s.destinations.is_empty());
    // A destination cluster that cannot be reached: Error, never "no copies".
    let r = outcome(vec![dest(
        "remote:eu",
        "edge-1",
        DestinationState::Error,
        "cluster unreachable",
    )]);
    let s = assemble(&ObjectSyncStatus::default(), &r, "2024-01-01T00:00:00Z");
    assert_eq!(s.destinations[0].state, CopyState::Error);
    let synced = find(&s, "Synced");
    assert_eq!(synced.message, "eu/edge-1: Error cluster unreachable");
}

#[test]
fn a_decided_status_is_kept_while_the_watches_are_only_starting() {
    let decided = assemble(
        &ObjectSyncStatus::default(),
        &outcome(vec![dest("local", "team-a", DestinationState::Synced, "")]),
        "2024-01-01T00:00:00Z",
    );
    let starting = Outcome::default();
    let kept = object_sync_status(
        &decided,
        decided.observed_generation,
        settings(&starting),
        t("2024-01-01T00:05:00Z"),
    );
    assert_eq!(kept, decided, "a restart rewrites nothing");
    // A new generation, or a watch that fails, is reported.
    let next = object_sync_status(
        &decided,
        decided.observed_generation.map(|g| g + 1),
        settings(&starting),
        t("2024-01-01T00:05:00Z"),
    );
    assert_eq!(find(&next, "Ready").reason, "Starting");
    let failing = Outcome {
        watch_errors: vec![WatchError {
            cluster: "local".into(),
            message: "secrets is forbidden".into(),
        }],
        ..Default::default()
    };
    let failed = object_sync_status(
        &decided,
        decided.observed_generation,
        settings(&failing),
        t("2024-01-01T00:05:00Z"),
    );
    assert_eq!(find(&failed, "Ready").reason, "WatchFailed");
}

#[test]
fn not_ready_and_refused() {
    let starting = Outcome::default();
    let s = assemble(
        &ObjectSyncStatus::default(),
        &starting,
        "2024-01-01T00:00:00Z",
    );
    assert_eq!(find(&s, "Ready").reason, "Starting");
    assert!(
        condition_events(&[], &s.conditions).is_empty(),
        "Starting is transient"
    );
    let refusal = Refusal::new(crate::status::Reason::SourceNamespaceNotAllowed, "no");
    let s = object_sync_status(
        &s,
        Some(3),
        Observation::Refused(&refusal),
        t("2024-01-01T00:01:00Z"),
    );
    assert_eq!(s.conditions.len(), 1);
    let ready = find(&s, "Ready");
    assert_eq!(ready.reason, "SourceNamespaceNotAllowed");
    // Still False: the transition time stays.
    assert_eq!(ready.last_transition_time.0, t("2024-01-01T00:00:00Z"));
    assert_eq!(s.observed_generation, Some(3));
}

#[test]
fn events_are_published_for_condition_transitions_only() {
    use kube::runtime::events::EventType;
    let all = vec![
        status::ready(true, State::Syncing, "copying"),
        synced(true, State::AllSynced, "2 of 2"),
    ];
    let conflict = vec![
        status::ready(true, State::Syncing, "copying"),
        synced(
            false,
            State::NotAllSynced,
            "local/team-c: Conflict not ours",
        ),
    ];
    // The first time: AllSynced (Normal); Ready=True is what Synced already says.
    let first = condition_events(&[], &all);
    assert_eq!(first.len(), 1);
    assert!(matches!(first[0].0, EventType::Normal));
    assert_eq!(
        (first[0].1.as_str(), first[0].2.as_str()),
        ("Synced", "AllSynced")
    );
    // No change, no event.
    assert!(condition_events(&all, &all).is_empty());
    // A transition to a problem: a Warning with the condition's message.
    let warn = condition_events(&all, &conflict);
    assert_eq!(warn.len(), 1);
    assert!(matches!(warn[0].0, EventType::Warning));
    assert_eq!(warn[0].2, "NotAllSynced");
    assert_eq!(warn[0].3, "local/team-c: Conflict not ours");
    // Starting is transient; a refusal is a Warning.
    assert!(condition_events(&[], &[status::ready(false, State::Starting, "")]).is_empty());
    let refused = condition_events(
        &all,
        &[status::refused(&Refusal::new(
            crate::status::Reason::SourceNamespaceNotAllowed,
            "no",
        ))],
    );
    assert_eq!(refused.len(), 1);
    assert!(matches!(refused[0].0, EventType::Warning));
}

#[test]
fn long_event_notes_are_cut_at_a_character_boundary() {
    let long = "é".repeat(1000);
    let events = condition_events(&[], &[synced(false, State::NotAllSynced, &long)]);
    let note = &events[0].3;
    assert!(note.len() <= crate::events::MAX_NOTE, "{}", note.len());
    assert!(note.ends_with("..."));
}

#[test]
fn refused_destinations_are_reported_first_with_their_reason() {
    let outcome = Outcome {
        ready: true,
        source_found: true,
        destinations: vec![
            dest("local", "team-a", DestinationState::Error, "boom"),
            dest(
                "local",
                "victim",
                DestinationState::Refused,
                "no SyncGrant in namespace victim",
            ),
        ],
        ..Default::default()
    };
    let st = object_sync_status(
        &ObjectSyncStatus::default(),
        Some(1),
        Observation::Reconciled {
            outcome: &outcome,
            source_namespace: "t1",
            source_name: "s",
            selection: None,
            report_only: false,
        },
        jiff::Timestamp::UNIX_EPOCH,
    );
    let synced = st
        .conditions
        .iter()
        .find(|c| c.type_ == "Synced")
        .expect("Synced");
    assert_eq!(
        (synced.status.as_str(), synced.reason.as_str()),
        ("False", "DestinationRefused")
    );
    assert!(
        synced
            .message
            .starts_with("local/victim: Refused no SyncGrant"),
        "{}",
        synced.message
    );
    assert_eq!(st.destinations[1].state, CopyState::Refused);
    let events = condition_events(&[], &st.conditions);
    assert!(
        events.iter().any(|e| e.2 == "DestinationRefused"),
        "a Warning Event: {events:?}"
    );
}

#[test]
fn a_source_in_another_cluster_that_cannot_be_read_is_unknown_and_says_since_when() {
    let kept = dest("local", "a", DestinationState::Error, "kept as it is");
    let mut down = outcome(vec![kept]);
    down.source_found = false;
    down.source_cluster = Some("remote:hub".into());
    down.source_unreachable = Some(kubesync::syncers::fan_out::SourceUnreachable {
        cluster: "remote:hub".into(),
        message: "connection refused".into(),
        since: None,
    });
    let first = assemble(&ObjectSyncStatus::default(), &down, "2026-01-01T00:00:00Z");
    let ready = find(&first, "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "SourceUnreachable")
    );
    assert!(
        ready.message.contains("hub") && ready.message.contains("2026-01-01T00:00:00Z"),
        "{}",
        ready.message
    );
    assert!(!ready.message.contains("removed"), "{}", ready.message);
    assert_eq!(find(&first, "Synced").reason, "SourceUnreachable");
    let reachable = find(&first, "SourceReachable");
    assert_eq!(reachable.status, "False");
    assert!(reachable.message.contains("connection refused"));
    // Later (or after a restart: the status is all that is kept): still since the start.
    let later = assemble(&first, &down, "2026-01-01T00:05:00Z");
    assert_eq!(later.conditions, first.conditions, "nothing to rewrite");
    // Read again: reachable, the copies synced.
    let mut up = outcome(vec![dest("local", "a", DestinationState::Synced, "")]);
    up.source_cluster = Some("remote:hub".into());
    let back = assemble(&later, &up, "2026-01-01T00:06:00Z");
    assert_eq!(find(&back, "Ready").status, "True");
    let reachable = find(&back, "SourceReachable");
    assert_eq!(
        (reachable.status.as_str(), reachable.reason.as_str()),
        ("True", "Read")
    );
    // A source in this cluster has no such condition.
    let local = assemble(
        &ObjectSyncStatus::default(),
        &outcome(vec![]),
        "2026-01-01T00:00:00Z",
    );
    assert!(
        local
            .conditions
            .iter()
            .all(|c| c.type_ != "SourceReachable")
    );
}
