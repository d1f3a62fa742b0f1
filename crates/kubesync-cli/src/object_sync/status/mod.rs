//! An ObjectSync's status, assembled from what the fan-out reported (pure: no IO, no clock;
//! the time is a parameter), and the Events its condition changes call for.

use std::collections::BTreeMap;

use kubesync::syncers::fan_out::{DestinationState, DestinationStatus, Outcome, Planned};

use crate::crd::{
    Condition, CopyFailure, CopyRecord, CopyState, DestinationStatusEntry, DriftRecord,
    ObjectSyncStatus,
};
use crate::events::truncate_note;
use crate::remote::display_name;
use crate::status::{self, ConditionExt, ConditionType, Refusal, State, with_transition};

/// What a reconcile of an ObjectSync found.
#[derive(Clone, Copy, Debug)]
pub enum Observation<'a> {
    /// The spec was refused (invalid, or not allowed by the operator's policy).
    Refused(&'a Refusal),
    /// The fan-out reconciled it.
    Reconciled {
        /// The fan-out's outcome.
        outcome: &'a Outcome,
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
    // Many sources also say how many there are and the first failing copies.
    let mut many: (Option<u32>, Vec<CopyFailure>) = (None, Vec::new());
    let (conditions, destinations) = match observed {
        Observation::Reconciled { outcome, .. }
            if !outcome.ready
                && outcome.watch_errors.is_empty()
                && !old.conditions.is_empty()
                && old.observed_generation == generation =>
        {
            return old.clone();
        }
        Observation::Refused(refusal) => (vec![status::refused(refusal)], Vec::new()),
        Observation::Reconciled { outcome, .. } if !outcome.ready => {
            (vec![not_listed_condition(outcome)], Vec::new())
        }
        Observation::Reconciled {
            outcome,
            source_namespace,
            source_name,
            selection,
            report_only,
        } => {
            let (entries, mut ready) = match selection {
                None => {
                    let entries = destination_entries(old, outcome, now);
                    let ready = ready_condition(outcome, &entries, source_namespace, source_name);
                    (entries, ready)
                }
                Some(selection) => {
                    many = (
                        Some(u32::try_from(outcome.sources).unwrap_or(u32::MAX)),
                        failures(old, outcome, now),
                    );
                    let entries = namespace_entries(old, outcome, now);
                    let ready = selection_ready(outcome, &entries, source_namespace, selection);
                    (entries, ready)
                }
            };
            if report_only {
                report_mode(&mut ready);
            }
            let mut conditions = vec![ready, synced_condition(outcome, &entries)];
            if let Some(cluster) = &outcome.source_cluster {
                source_reachability(old, outcome, cluster, &entries, now, &mut conditions);
            }
            (conditions, entries)
        }
    };
    let (sources, failures) = many;
    ObjectSyncStatus {
        record: kept_record(old, &observed),
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

/// The record of copies made to keep: the fan-out's, after a reconcile that decided; else the
/// one kept — and for a declaration never reconciled, an empty one (from then on, its marks
/// alone never make an object its copy).
fn kept_record(old: &ObjectSyncStatus, observed: &Observation<'_>) -> Option<CopyRecord> {
    match observed {
        Observation::Reconciled {
            outcome:
                Outcome {
                    record: Some(record),
                    ..
                },
            ..
        } => Some(CopyRecord {
            copies: u32::try_from(record.len()).unwrap_or(u32::MAX),
            made: record.encode(),
            seeded: record.encode_seeded(),
            open_since: record.open_since().map(|t| t.to_string()),
        }),
        _ if old.record.is_none() && old.observed_generation.is_none() => {
            Some(CopyRecord::default())
        }
        _ => old.record.clone(),
    }
}

/// The record of copies made that `status` keeps, for the fan-out: `None` for a declaration
/// an earlier kubesync reconciled before records existed (its marks are trusted once, and
/// recorded); an empty one for a declaration never reconciled, or a record that cannot be read
/// (then its copies are someone else's objects until it is mended: nothing is deleted).
pub fn record_of(
    status: Option<&ObjectSyncStatus>,
) -> Option<kubesync::syncers::fan_out::record::Record> {
    use kubesync::syncers::fan_out::record::Record;
    let Some(status) = status else {
        return Some(Record::new());
    };
    let Some(kept) = &status.record else {
        return status.observed_generation.is_none().then(Record::new);
    };
    let open_since = kept
        .open_since
        .as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok());
    match Record::decode(&kept.made, open_since).and_then(|r| r.with_seeded(&kept.seeded)) {
        Ok(record) => Some(record),
        Err(e) => {
            tracing::warn!(error = %e, "an ObjectSync's record of copies made cannot be read; its marked objects are taken as someone else's");
            Some(Record::new())
        }
    }
}

/// The `Ready=False` condition while the watches have not listed: `WatchFailed` with the
/// first failing watch's cluster and message (a watch that cannot list, forbidden or
/// unreachable, says why), else `Starting`.
fn not_listed_condition(outcome: &Outcome) -> Condition {
    match outcome.watch_errors.first() {
        Some(e) => status::ready(
            false,
            State::WatchFailed,
            format!("{}: {}", display_name(&e.cluster), e.message),
        ),
        None => status::ready(
            false,
            State::Starting,
            "waiting for the first list of the watched types",
        ),
    }
}

/// The `Ready` condition reworded for `mode: Report`: copies would be removed, not removed;
/// when ready, `Reporting`, comparing instead of copying.
fn report_mode(ready: &mut Condition) {
    if State::SourceNotFound == ready.reason.as_str() {
        ready.message = ready.message.replace(
            "its copies were removed",
            "its copies would be removed (mode Report: nothing is deleted)",
        );
    }
    if ready.is_true() {
        ready.reason = State::Reporting.as_str().into();
        ready.message = format!(
            "{} (mode Report: nothing is written to destinations)",
            ready.message.replacen("copying", "comparing", 1)
        );
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
fn failures(old: &ObjectSyncStatus, outcome: &Outcome, now: jiff::Timestamp) -> Vec<CopyFailure> {
    let failing = |d: &&DestinationStatus| d.state != DestinationState::Synced;
    let refused = |d: &&DestinationStatus| d.state == DestinationState::Refused;
    outcome
        .destinations
        .iter()
        .filter(failing)
        .filter(refused)
        .chain(
            outcome
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
    outcome: &Outcome,
    now: jiff::Timestamp,
) -> Vec<DestinationStatusEntry> {
    let mut by_namespace: BTreeMap<(String, String), Vec<&DestinationStatus>> = BTreeMap::new();
    for d in &outcome.destinations {
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
    outcome: &Outcome,
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
    if outcome.source_found {
        status::ready(
            true,
            State::Syncing,
            format!(
                "copying {} sources ({selection}{place}) to {} destinations",
                outcome.sources,
                entries.len()
            ),
        )
    } else {
        status::ready(
            false,
            State::SourceNotFound,
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
    outcome: &Outcome,
    now: jiff::Timestamp,
) -> Vec<DestinationStatusEntry> {
    outcome
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

/// A source read from another cluster (`cluster`, its runtime name): the condition
/// `SourceReachable`, and while that cluster cannot be read, `Ready` and `Synced` say so —
/// the source is unknown, not gone, and every copy is kept as it is. Since when: the time the
/// condition turned False (kept across restarts: it is in the status), else the first failure
/// this process saw.
fn source_reachability(
    old: &ObjectSyncStatus,
    outcome: &Outcome,
    cluster: &str,
    entries: &[DestinationStatusEntry],
    now: jiff::Timestamp,
    conditions: &mut Vec<Condition>,
) {
    let name = display_name(cluster);
    let Some(unreachable) = &outcome.source_unreachable else {
        conditions.push(status::condition(
            ConditionType::SourceReachable,
            true,
            State::Read,
            format!("the source is read from RemoteCluster {name}"),
        ));
        return;
    };
    let since = old
        .conditions
        .iter()
        .find(|c| c.is(ConditionType::SourceReachable) && c.is_false())
        .map(|c| c.last_transition_time.0)
        .or_else(|| {
            unreachable
                .since
                .and_then(|t| jiff::Timestamp::try_from(t).ok())
        })
        .unwrap_or(now)
        .round(jiff::Unit::Second)
        .unwrap_or(now);
    let kept = entries.len();
    let reachable = status::condition(
        ConditionType::SourceReachable,
        false,
        State::SourceClusterUnreachable,
        format!(
            "RemoteCluster {name} cannot be read since {since}: {}",
            unreachable.message
        ),
    );
    conditions[0] = status::ready(
        false,
        State::SourceUnreachable,
        format!(
            "the source's cluster {name} cannot be read since {since}; the source is unknown, not gone: the copies ({kept} destinations) are kept as they are until a read from {name} succeeds"
        ),
    );
    conditions[1] = status::condition(
        ConditionType::Synced,
        false,
        State::SourceUnreachable,
        format!(
            "nothing is written while the source cannot be read ({kept} destinations kept as they are)"
        ),
    );
    conditions.push(reachable);
}

fn ready_condition(
    outcome: &Outcome,
    entries: &[DestinationStatusEntry],
    source_namespace: &str,
    source_name: &str,
) -> Condition {
    if outcome.source_found {
        status::ready(
            true,
            State::Syncing,
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
            State::SourceNotFound,
            format!("source {source} does not exist; its copies were removed"),
        )
    }
}

fn synced_condition(outcome: &Outcome, entries: &[DestinationStatusEntry]) -> Condition {
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
        outcome
            .destinations
            .iter()
            .filter(|d| d.planned == Some(p))
            .count()
    };
    if problems.is_empty() && !outcome.source_found {
        // Nothing out of sync, and nothing to copy either: not "all synced".
        status::condition(
            ConditionType::Synced,
            false,
            State::SourceNotFound,
            "no source to copy, so no destination holds a copy",
        )
    } else if problems.is_empty() {
        let in_sync = entries.iter().filter(|e| e.state == synced).count();
        status::condition(
            ConditionType::Synced,
            true,
            State::AllSynced,
            format!("{in_sync} of {} destinations in sync", entries.len()),
        )
    } else if entries.iter().any(|e| e.state == CopyState::Refused) {
        status::condition(
            ConditionType::Synced,
            false,
            State::DestinationRefused,
            problems.join("; "),
        )
    } else if entries.iter().any(|e| e.state == CopyState::OutOfSync) {
        let (create, update, delete) = (
            planned(Planned::Create),
            planned(Planned::Update),
            planned(Planned::Delete),
        );
        status::condition(
            ConditionType::Synced,
            false,
            State::OutOfSync,
            format!(
                "mode Report: would create {create}, update {update} and delete {delete} copies; {}",
                problems.join("; ")
            ),
        )
    } else {
        status::condition(
            ConditionType::Synced,
            false,
            State::NotAllSynced,
            problems.join("; "),
        )
    }
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
    let ready_reason = status::find(new, ConditionType::Ready).map(|c| c.reason.as_str());
    new.iter()
        .filter(|c| {
            let before = old.iter().find(|o| o.type_ == c.type_);
            let changed = before.is_none_or(|o| o.status != c.status || o.reason != c.reason);
            let said = c.is(ConditionType::Synced) && ready_reason == Some(c.reason.as_str());
            changed
                && !said
                && State::Starting != c.reason.as_str()
                && !(c.is(ConditionType::Ready) && c.is_true())
        })
        .map(|c| {
            let type_ = if c.is_true() {
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
mod tests;
