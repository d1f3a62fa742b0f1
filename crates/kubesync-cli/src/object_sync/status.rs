//! An ObjectSync's status, assembled from what the fan-out reported (pure: no IO, no clock;
//! the time is a parameter), and the Events its condition changes call for.

use std::collections::BTreeMap;

use kubesync::syncers::fan_out::{DestinationState, DestinationStatus, Planned, Report};

use crate::crd::{
    Condition, CopyFailure, CopyState, DestinationStatusEntry, DriftRecord, ObjectSyncStatus,
};
use crate::remote::display_name;
use crate::status::{self, Refusal, with_transition};

/// What a reconcile of an ObjectSync found.
#[derive(Clone, Copy, Debug)]
pub enum Observation<'a> {
    /// The spec was refused (invalid, or not allowed by the operator's policy).
    Refused(&'a Refusal),
    /// The fan-out reconciled it.
    Reported {
        /// The fan-out's report.
        report: &'a Report,
        /// Namespace of the source object.
        source_namespace: &'a str,
        /// Name of the source object (one source).
        source_name: &'a str,
        /// Many sources: what selects them (e.g. `selector app=tls`); `None` for one source.
        selection: Option<&'a str>,
        /// `mode: Report`: nothing was written.
        report_only: bool,
    },
}

/// The status an ObjectSync should have (pure). `old` is its current status (transition and
/// sync times are kept from it while nothing changed), `now` the time of this reconcile.
///
/// - refused: `Ready=False` with the refusal, no destinations;
/// - the watches have not listed: `Ready=False`, `WatchFailed` with the first failing watch's
///   cluster and message, else `Starting`; no destinations — except that a status already
///   decided for this generation is kept while the watches are only starting (an operator
///   that restarts knows nothing new yet, and rewrites nothing);
/// - otherwise `Ready` (`Syncing`, or `SourceNotFound`), `Synced` (`AllSynced`, or
///   `NotAllSynced` naming up to three destinations that are not), and one entry per
///   destination.
pub fn object_sync_status(
    old: &ObjectSyncStatus,
    generation: Option<i64>,
    observed: Observation<'_>,
    now: jiff::Timestamp,
) -> ObjectSyncStatus {
    // Many sources also report how many there are and the first failing copies.
    let mut many: (Option<u32>, Vec<CopyFailure>) = (None, Vec::new());
    let (conditions, destinations) = match observed {
        Observation::Reported { report, .. }
            if !report.ready
                && report.watch_errors.is_empty()
                && !old.conditions.is_empty()
                && old.observed_generation == generation =>
        {
            return old.clone();
        }
        Observation::Refused(refusal) => (vec![status::refused(refusal)], Vec::new()),
        Observation::Reported { report, .. } if !report.ready => {
            // A watch that cannot list (forbidden, unreachable) says why.
            let condition = match report.watch_errors.first() {
                Some((cluster, m)) => status::ready(
                    false,
                    "WatchFailed",
                    format!("{}: {m}", display_name(cluster)),
                ),
                None => status::ready(
                    false,
                    "Starting",
                    "waiting for the first list of the watched types",
                ),
            };
            (vec![condition], Vec::new())
        }
        Observation::Reported {
            report,
            source_namespace,
            source_name,
            selection,
            report_only,
        } => {
            let (entries, mut ready) = match selection {
                None => {
                    let entries = destination_entries(old, report, now);
                    let ready = ready_condition(report, &entries, source_namespace, source_name);
                    (entries, ready)
                }
                Some(selection) => {
                    many = (
                        Some(u32::try_from(report.sources).unwrap_or(u32::MAX)),
                        failures(old, report, now),
                    );
                    let entries = namespace_entries(old, report, now);
                    let ready = selection_ready(report, &entries, source_namespace, selection);
                    (entries, ready)
                }
            };
            if report_only && ready.reason == "SourceNotFound" {
                ready.message = ready.message.replace(
                    "its copies were removed",
                    "its copies would be removed (mode Report: nothing is deleted)",
                );
            }
            if report_only && ready.status == "True" {
                ready.reason = "Reporting".into();
                ready.message = format!(
                    "{} (mode Report: nothing is written to destinations)",
                    ready.message.replacen("copying", "comparing", 1)
                );
            }
            let conditions = vec![ready, synced_condition(report, &entries)];
            (conditions, entries)
        }
    };
    let (sources, failures) = many;
    ObjectSyncStatus {
        observed_generation: generation,
        conditions: conditions
            .into_iter()
            .map(|c| with_transition(c, &old.conditions, generation, now))
            .collect(),
        in_sync: count(destinations.iter().filter(|d| d.state == CopyState::Synced)),
        total: count(destinations.iter()),
        destinations,
        sources,
        failures,
    }
}

/// At most this many failing copies are listed in a status (many sources).
pub const MAX_FAILURES: usize = 10;

/// The record of a copy's drift found now, or, when it records the same change, the one
/// already in the status (found earlier).
fn drift_record(
    found: Option<&kubesync::syncers::fan_out::rules::Drift>,
    before: Option<&DriftRecord>,
    now: jiff::Timestamp,
) -> Option<DriftRecord> {
    let found = DriftRecord::of(found?, now);
    match before {
        Some(b) if b.same_change(&found) => Some(b.clone()),
        _ => Some(found),
    }
}

/// The first [`MAX_FAILURES`] copies that are not current, refusals first.
fn failures(old: &ObjectSyncStatus, report: &Report, now: jiff::Timestamp) -> Vec<CopyFailure> {
    let failing = |d: &&DestinationStatus| d.state != DestinationState::Synced;
    let refused = |d: &&DestinationStatus| d.state == DestinationState::Refused;
    report
        .destinations
        .iter()
        .filter(failing)
        .filter(refused)
        .chain(
            report
                .destinations
                .iter()
                .filter(failing)
                .filter(|d| !refused(d)),
        )
        .take(MAX_FAILURES)
        .map(|d| {
            let cluster = display_name(&d.cluster).to_string();
            let before = old
                .failures
                .iter()
                .find(|f| f.cluster == cluster && f.namespace == d.namespace && f.name == d.name)
                .and_then(|f| f.drift.as_ref());
            CopyFailure {
                source: d.source.clone(),
                cluster,
                namespace: d.namespace.clone(),
                name: d.name.clone(),
                state: d.state.into(),
                message: d.message.clone(),
                planned_action: d.planned.map(Into::into),
                changed_fields: d.changed_fields.clone(),
                drift: drift_record(d.drift.as_ref(), before, now),
            }
        })
        .collect()
}

/// Many sources: one entry per destination namespace, counting its copies. `Synced` when all
/// are, else the state of the first that is not (refusals first) with its source and
/// message. `lastSyncTime` moves when the namespace becomes (or is again) all current with
/// a newer source version.
fn namespace_entries(
    old: &ObjectSyncStatus,
    report: &Report,
    now: jiff::Timestamp,
) -> Vec<DestinationStatusEntry> {
    let mut by_namespace: BTreeMap<(String, String), Vec<&DestinationStatus>> = BTreeMap::new();
    for d in &report.destinations {
        by_namespace
            .entry((d.cluster.clone(), d.namespace.clone()))
            .or_default()
            .push(d);
    }
    by_namespace
        .into_iter()
        .map(|((cluster, namespace), copies)| {
            let cluster = display_name(&cluster).to_string();
            let synced = |d: &&&DestinationStatus| d.state == DestinationState::Synced;
            let in_sync = copies.iter().filter(synced).count();
            let first_bad = copies
                .iter()
                .find(|d| d.state == DestinationState::Refused)
                .or_else(|| copies.iter().find(|d| !synced(d)));
            let (state, message) = match first_bad {
                None => (CopyState::Synced, String::new()),
                Some(d) if d.source.is_empty() => (d.state.into(), d.message.clone()),
                Some(d) => (d.state.into(), format!("{}: {}", d.source, d.message)),
            };
            // The newest source version among the current copies.
            let newest = copies
                .iter()
                .filter(synced)
                .map(|d| d.source_resource_version.as_str())
                .max_by_key(|v| (v.len(), *v))
                .unwrap_or_default()
                .to_string();
            let previous = old
                .destinations
                .iter()
                .find(|o| o.cluster == cluster && o.namespace == namespace && o.name.is_empty());
            let unchanged =
                previous.is_some_and(|p| p.state == state && p.source_resource_version == newest);
            let last_sync_time = if state == CopyState::Synced && !unchanged {
                Some(now.to_string())
            } else {
                previous.and_then(|p| p.last_sync_time.clone())
            };
            DestinationStatusEntry {
                cluster,
                namespace,
                name: String::new(),
                state,
                message,
                sources_in_sync: Some(u32::try_from(in_sync).unwrap_or(u32::MAX)),
                sources_total: Some(count(copies.iter())),
                last_sync_time,
                source_resource_version: newest,
                ..Default::default()
            }
        })
        .collect()
}

fn selection_ready(
    report: &Report,
    entries: &[DestinationStatusEntry],
    source_namespace: &str,
    selection: &str,
) -> Condition {
    // Cluster-scoped sources have no namespace.
    let place = if source_namespace.is_empty() {
        String::new()
    } else {
        format!(" in {source_namespace}")
    };
    if report.source_found {
        status::ready(
            true,
            "Syncing",
            format!(
                "copying {} sources ({selection}{place}) to {} destinations",
                report.sources,
                entries.len()
            ),
        )
    } else {
        status::ready(
            false,
            "SourceNotFound",
            format!("no object{place} matches the source's {selection}; its copies were removed"),
        )
    }
}

fn count<T>(items: impl Iterator<Item = T>) -> u32 {
    u32::try_from(items.count()).unwrap_or(u32::MAX)
}

/// One entry per destination; `lastSyncTime` moves only when a copy becomes (or is again)
/// current with another source version.
fn destination_entries(
    old: &ObjectSyncStatus,
    report: &Report,
    now: jiff::Timestamp,
) -> Vec<DestinationStatusEntry> {
    report
        .destinations
        .iter()
        .map(|d| {
            let cluster = display_name(&d.cluster).to_string();
            let state = d.state.into();
            let previous = old
                .destinations
                .iter()
                .find(|o| o.cluster == cluster && o.namespace == d.namespace && o.name == d.name);
            let unchanged = previous.is_some_and(|p| {
                p.state == state && p.source_resource_version == d.source_resource_version
            });
            let last_sync_time = if d.state == DestinationState::Synced && !unchanged {
                Some(now.to_string())
            } else {
                previous.and_then(|p| p.last_sync_time.clone())
            };
            let before = previous.and_then(|p| p.last_drift.as_ref());
            DestinationStatusEntry {
                cluster,
                namespace: d.namespace.clone(),
                name: d.name.clone(),
                state,
                message: d.message.clone(),
                last_sync_time,
                source_resource_version: d.source_resource_version.clone(),
                planned_action: d.planned.map(Into::into),
                changed_fields: d.changed_fields.clone(),
                last_drift: drift_record(d.drift.as_ref(), before, now).or_else(|| before.cloned()),
                ..Default::default()
            }
        })
        .collect()
}

fn ready_condition(
    report: &Report,
    entries: &[DestinationStatusEntry],
    source_namespace: &str,
    source_name: &str,
) -> Condition {
    if report.source_found {
        status::ready(
            true,
            "Syncing",
            format!("copying {source_name} to {} destinations", entries.len()),
        )
    } else {
        let source = if source_namespace.is_empty() {
            source_name.to_string()
        } else {
            format!("{source_namespace}/{source_name}")
        };
        status::ready(
            false,
            "SourceNotFound",
            format!("source {source} does not exist; its copies were removed"),
        )
    }
}

fn synced_condition(report: &Report, entries: &[DestinationStatusEntry]) -> Condition {
    let synced = CopyState::Synced;
    // Refusals first: they name the rule and what would admit the copy.
    let refused = |e: &&DestinationStatusEntry| e.state == CopyState::Refused;
    let problems: Vec<String> = entries
        .iter()
        .filter(refused)
        .chain(entries.iter().filter(|e| e.state != synced && !refused(e)))
        .take(3)
        .map(|e| format!("{}/{}: {} {}", e.cluster, e.namespace, e.state, e.message))
        .collect();
    let planned = |p: Planned| {
        report
            .destinations
            .iter()
            .filter(|d| d.planned == Some(p))
            .count()
    };
    if problems.is_empty() && !report.source_found {
        // Nothing out of sync, and nothing to copy either: not "all synced".
        status::condition(
            "Synced",
            false,
            "SourceNotFound",
            "no source to copy, so no destination holds a copy",
        )
    } else if problems.is_empty() {
        let in_sync = entries.iter().filter(|e| e.state == synced).count();
        status::condition(
            "Synced",
            true,
            "AllSynced",
            format!("{in_sync} of {} destinations in sync", entries.len()),
        )
    } else if entries.iter().any(|e| e.state == CopyState::Refused) {
        status::condition("Synced", false, "DestinationRefused", problems.join("; "))
    } else if entries.iter().any(|e| e.state == CopyState::OutOfSync) {
        let (create, update, delete) = (
            planned(Planned::Create),
            planned(Planned::Update),
            planned(Planned::Delete),
        );
        status::condition(
            "Synced",
            false,
            "OutOfSync",
            format!(
                "mode Report: would create {create}, update {update} and delete {delete} copies; {}",
                problems.join("; ")
            ),
        )
    } else {
        status::condition("Synced", false, "NotAllSynced", problems.join("; "))
    }
}

/// Longest Event note the API accepts (events.k8s.io/v1: 1 kB).
pub const MAX_NOTE: usize = 1024;

/// `note` cut to [`MAX_NOTE`] bytes (ending in `...` when cut).
pub fn truncate_note(note: String) -> String {
    kubesync::error::truncated(note, MAX_NOTE)
}

/// The Events to publish when conditions change (pure): one per condition whose status or
/// reason changed, except the transient `Starting` and a `Ready=True` that `Synced` already
/// reports, or a `Synced` with the reason `Ready` already gives (a missing source is said
/// once). Warnings for conditions that are not `True`. Each: (event type, condition type,
/// reason, note).
pub fn condition_events(
    old: &[Condition],
    new: &[Condition],
) -> Vec<(kube::runtime::events::EventType, String, String, String)> {
    use kube::runtime::events::EventType;
    let ready_reason = new
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.as_str());
    new.iter()
        .filter(|c| {
            let before = old.iter().find(|o| o.type_ == c.type_);
            let changed = before.is_none_or(|o| o.status != c.status || o.reason != c.reason);
            let said = c.type_ == "Synced" && ready_reason == Some(c.reason.as_str());
            changed
                && !said
                && c.reason != "Starting"
                && !(c.type_ == "Ready" && c.status == "True")
        })
        .map(|c| {
            let type_ = if c.status == "True" {
                EventType::Normal
            } else {
                EventType::Warning
            };
            (
                type_,
                c.type_.clone(),
                c.reason.clone(),
                truncate_note(c.message.clone()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synced(ok: bool, reason: &str, message: &str) -> Condition {
        status::condition("Synced", ok, reason, message)
    }

    #[test]
    fn a_missing_source_is_one_event_not_two() {
        let new = [
            status::ready(false, "SourceNotFound", "source apps/x does not exist"),
            synced(false, "SourceNotFound", "no source to copy"),
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

    fn report(destinations: Vec<DestinationStatus>) -> Report {
        Report {
            ready: true,
            source_found: true,
            destinations,
            ..Default::default()
        }
    }

    fn assemble(old: &ObjectSyncStatus, report: &Report, now: &str) -> ObjectSyncStatus {
        assemble_with(old, report, now, None)
    }

    /// What the fan-out reported for source `apps/settings`.
    fn settings(report: &Report) -> Observation<'_> {
        Observation::Reported {
            report,
            source_namespace: "apps",
            source_name: "settings",
            selection: None,
            report_only: false,
        }
    }

    /// The status of source `apps/settings`, or of a `selection` in `apps`.
    fn assemble_with(
        old: &ObjectSyncStatus,
        report: &Report,
        now: &str,
        selection: Option<&str>,
    ) -> ObjectSyncStatus {
        object_sync_status(
            old,
            Some(2),
            Observation::Reported {
                report,
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
        let r = report(vec![update, create]);
        let status = |old: &ObjectSyncStatus, now: &str| {
            object_sync_status(
                old,
                Some(2),
                Observation::Reported {
                    report: &r,
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
        let r = report(vec![
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
        // A later reconcile with the same report changes nothing (no write, no Event).
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

    fn assemble_many(old: &ObjectSyncStatus, report: &Report, now: &str) -> ObjectSyncStatus {
        assemble_with(old, report, now, Some("selector app=tls"))
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
        let mut r = report(copies);
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
        // The same report later changes nothing.
        assert_eq!(assemble_many(&s, &r, "2024-01-01T00:10:00Z"), s);
        // Nothing selected: SourceNotFound.
        let none = Report {
            source_found: false,
            ..report(vec![])
        };
        let s = assemble_many(&s, &none, "2024-01-01T00:20:00Z");
        assert_eq!(find(&s, "Ready").reason, "SourceNotFound");
        assert_eq!(s.sources, Some(0));
    }

    #[test]
    fn a_conflict() {
        let r = report(vec![
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
        let mut r = report(Vec::new());
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
        let mut r = report(Vec::new());
        r.source_found = false;
        let ready = |source_name, selection| {
            let observed = Observation::Reported {
                report: &r,
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
        let failing = Report {
            ready: false,
            watch_errors: vec![("remote:eu".into(), "widgets is forbidden".into())],
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
        let r = report(vec![dest(
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
            &report(vec![dest("local", "team-a", DestinationState::Synced, "")]),
            "2024-01-01T00:00:00Z",
        );
        let starting = Report::default();
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
        let failing = Report {
            watch_errors: vec![("local".into(), "secrets is forbidden".into())],
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
        let starting = Report::default();
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
            status::ready(true, "Syncing", "copying"),
            synced(true, "AllSynced", "2 of 2"),
        ];
        let conflict = vec![
            status::ready(true, "Syncing", "copying"),
            synced(false, "NotAllSynced", "local/team-c: Conflict not ours"),
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
        assert!(condition_events(&[], &[status::ready(false, "Starting", "")]).is_empty());
        let refused = condition_events(
            &all,
            &[status::ready(false, "SourceNamespaceNotAllowed", "no")],
        );
        assert_eq!(refused.len(), 1);
        assert!(matches!(refused[0].0, EventType::Warning));
    }

    #[test]
    fn long_event_notes_are_cut_at_a_character_boundary() {
        let long = "é".repeat(1000);
        let events = condition_events(&[], &[synced(false, "NotAllSynced", &long)]);
        let note = &events[0].3;
        assert!(note.len() <= MAX_NOTE, "{}", note.len());
        assert!(note.ends_with("..."));
    }

    #[test]
    fn refused_destinations_are_reported_first_with_their_reason() {
        let report = Report {
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
            Observation::Reported {
                report: &report,
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
}
