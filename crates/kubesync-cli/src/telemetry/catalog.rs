//! Every metric `/metrics` serves: its name, type, labels and help, in one table (pure).
//!
//! The registry registers each metric from its entry here (so the name and the help text
//! cannot differ from what this table says), the book's metrics page is generated from it
//! ([`reference`]; `make reference`), and a test of the served exposition checks that every
//! family served is in the table, with its type, help and label names.

/// The kind of a metric, as the Prometheus text format names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (reset when the process starts).
    Counter,
    /// A value now.
    Gauge,
    /// Observations in buckets, with their sum and count.
    Histogram,
}

impl Kind {
    /// The name on the `# TYPE` line.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its label names, each with what its values are (empty: any name of that object).
    pub labels: &'static [(&'static str, &'static str)],
    /// The help text served on the `# HELP` line (the registry adds the final period).
    pub help: &'static str,
    /// More for the book's page (empty: the help says it all).
    pub more: &'static str,
}

/// Completed reconciles.
pub const RECONCILES: Entry = Entry {
    name: "kubesync_reconciles_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Reconciles of kubesync's own resources completed, successful or not",
    more: "",
};
/// Failed reconciles by category.
pub const RECONCILE_FAILURES: Entry = Entry {
    name: "kubesync_reconcile_failures_total",
    kind: Kind::Counter,
    labels: &[(
        "category",
        "`Forbidden`, `Unreachable`, `Conflict`, `Panic`, …",
    )],
    help: "Reconciles that returned an error or panicked, by the error's category (Forbidden, Unreachable, Panic, …)",
    more: "Every category is listed from 0.",
};
/// The work queue's depth.
pub const QUEUE_DEPTH: Entry = Entry {
    name: "kubesync_queue_depth",
    kind: Kind::Gauge,
    labels: &[],
    help: "Keys waiting in the work queue",
    more: "",
};
/// Reconciles running.
pub const IN_FLIGHT: Entry = Entry {
    name: "kubesync_reconciles_in_flight",
    kind: Kind::Gauge,
    labels: &[],
    help: "Reconciles running now",
    more: "",
};
/// Keys waiting for a retry.
pub const KEYS_FAILING: Entry = Entry {
    name: "kubesync_keys_failing",
    kind: Kind::Gauge,
    labels: &[],
    help: "Keys whose last reconcile failed, waiting for a retry",
    more: "",
};
/// Whether this replica leads.
pub const LEADER: Entry = Entry {
    name: "kubesync_leader",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 while this replica holds the leader Lease (only with --leader-elect)",
    more: "",
};
/// Fresh starts of this process (`--leader-elect`, `--sharded`).
pub const FRESH_STARTS: Entry = Entry {
    name: "kubesync_fresh_starts_total",
    kind: Kind::Counter,
    labels: &[],
    help: "Times this replica started afresh in place after it lost its write permit (only with --leader-elect or --sharded)",
    more: "A replica whose Lease renewal went past the renew deadline (a stall of the process or its node, an apiserver it could not reach) stops writing at once and executes itself again, same process id: no container restart. Its log says why. A rate above zero means stalls long enough to hand work over.",
};
/// Units this replica works on (`--sharded`).
pub const SHARD_UNITS: Entry = Entry {
    name: "kubesync_shard_units",
    kind: Kind::Gauge,
    labels: &[(
        "kind",
        "`ObjectSync`, `ClusterObjectSync`, `RemoteCluster`, `Annotated` (with `--compat`)",
    )],
    help: "Units of work this replica works on now, by kind (only with --sharded)",
    more: "A RemoteCluster's unit holds the ResourceSyncs that use it; every kind is listed from 0.",
};
/// Members in this replica's view (`--sharded`).
pub const SHARD_MEMBERS: Entry = Entry {
    name: "kubesync_shard_members",
    kind: Kind::Gauge,
    labels: &[],
    help: "Live members in the view this replica adopted last (only with --sharded)",
    more: "",
};
/// Whether that view is settled (`--sharded`).
pub const SHARD_SETTLED: Entry = Entry {
    name: "kubesync_shard_view_settled",
    kind: Kind::Gauge,
    labels: &[],
    help: "1 when every member acknowledged the view this replica adopted last (only with --sharded)",
    more: "Units that move to this replica wait for it; 0 for longer than a few seconds means a member does not acknowledge (see its logs).",
};
/// Units gained and lost (`--sharded`).
pub const SHARD_MOVES: Entry = Entry {
    name: "kubesync_shard_moves_total",
    kind: Kind::Counter,
    labels: &[("direction", "`gained`, `lost`")],
    help: "Units this replica started or stopped working on because the members changed (only with --sharded)",
    more: "",
};
/// Write requests sent.
pub const WRITES: Entry = Entry {
    name: "kubesync_writes_total",
    kind: Kind::Counter,
    labels: &[("component", "`operator`, `objectsync`, `resourcesync`")],
    help: "Write requests sent, by component",
    more: "",
};
/// Watches held for ObjectSyncs.
pub const OBJECT_SYNC_WATCHES: Entry = Entry {
    name: "kubesync_objectsync_watches",
    kind: Kind::Gauge,
    labels: &[],
    help: "Watches held for ObjectSyncs (per type and cluster, plus one Namespace watch per cluster)",
    more: "",
};
/// Copies held in memory.
pub const OBJECT_SYNC_COPIES_HELD: Entry = Entry {
    name: "kubesync_objectsync_copies_held",
    kind: Kind::Gauge,
    labels: &[],
    help: "Copies the fan-out's watches hold in memory (with --sharded: those of this replica's shards)",
    more: "",
};
/// ResourceSync syncs running.
pub const RESOURCE_SYNC_ENGINES: Entry = Entry {
    name: "kubesync_resourcesync_engines",
    kind: Kind::Gauge,
    labels: &[],
    help: "ResourceSyncs running",
    more: "",
};
/// An ObjectSync's readiness.
pub const OBJECT_SYNC_READY: Entry = Entry {
    name: "kubesync_objectsync_ready",
    kind: Kind::Gauge,
    labels: OBJECT_SYNC,
    help: "1 when the ObjectSync's Ready condition is True",
    more: "",
};
/// An ObjectSync's destinations by state.
pub const OBJECT_SYNC_DESTINATIONS: Entry = Entry {
    name: "kubesync_objectsync_destinations",
    kind: Kind::Gauge,
    labels: &[
        ("namespace", ""),
        ("objectsync", ""),
        (
            "state",
            "`Synced`, `Pending`, `OutOfSync`, `Conflict`, `Error`, `Refused`",
        ),
    ],
    help: "Destinations of an ObjectSync, by state (Synced, Pending, OutOfSync, Conflict, Error, Refused)",
    more: "",
};
/// An ObjectSync's copies behind their source.
pub const OBJECT_SYNC_STALE: Entry = Entry {
    name: "kubesync_objectsync_stale_copies",
    kind: Kind::Gauge,
    labels: OBJECT_SYNC,
    help: "Copies of an ObjectSync behind their source now (Pending, Error or OutOfSync, or of a source whose change is not copied yet)",
    more: "A source's change counts from the moment a watch sees it until a reconcile copies it. `Conflict` and `Refused` destinations are never written, and not counted.",
};
/// How long the oldest of them has been behind.
pub const OBJECT_SYNC_OLDEST_STALE: Entry = Entry {
    name: "kubesync_objectsync_oldest_stale_seconds",
    kind: Kind::Gauge,
    labels: OBJECT_SYNC,
    help: "How long the oldest copy of an ObjectSync that is behind its source has been behind (0 when none is)",
    more: "Since the first sight of what put it behind.",
};
/// Copies of an ObjectSync changed by someone else.
pub const OBJECT_SYNC_DRIFTS: Entry = Entry {
    name: "kubesync_objectsync_drifts_total",
    kind: Kind::Counter,
    labels: OBJECT_SYNC,
    help: "Copies of an ObjectSync found changed by someone else (reverted in Enforce mode)",
    more: "Each change is counted once.",
};
/// Remote objects of a ResourceSync.
pub const RESOURCE_SYNC_OBJECTS: Entry = Entry {
    name: "kubesync_resourcesync_objects",
    kind: Kind::Gauge,
    labels: RESOURCE_SYNC,
    help: "Remote objects in a running ResourceSync's shard",
    more: "",
};
/// Remote objects of a ResourceSync not applied locally.
pub const RESOURCE_SYNC_STALE: Entry = Entry {
    name: "kubesync_resourcesync_stale_objects",
    kind: Kind::Gauge,
    labels: RESOURCE_SYNC,
    help: "Remote objects of a running ResourceSync whose current generation is not applied locally (or whose local copy is missing)",
    more: "`objects` − `inSync`: paused objects count, and so does a deletion not yet carried out locally.",
};
/// How long the one behind longest has been behind.
pub const RESOURCE_SYNC_OLDEST_STALE: Entry = Entry {
    name: "kubesync_resourcesync_oldest_stale_seconds",
    kind: Kind::Gauge,
    labels: RESOURCE_SYNC,
    help: "How long the remote object of a running ResourceSync that is behind longest has been behind (0 when none is)",
    more: "Since its generation's first sight by the remote watch, or else since a count first found it behind.",
};
/// Local copies of a ResourceSync reverted.
pub const RESOURCE_SYNC_DRIFTS: Entry = Entry {
    name: "kubesync_resourcesync_drifts_total",
    kind: Kind::Counter,
    labels: RESOURCE_SYNC,
    help: "Local copies of a running ResourceSync found changed by someone else and reverted",
    more: "Since its sync started.",
};
/// Whether a RemoteCluster answers.
pub const REMOTE_REACHABLE: Entry = Entry {
    name: "kubesync_remotecluster_reachable",
    kind: Kind::Gauge,
    labels: REMOTE_CLUSTER,
    help: "1 when the RemoteCluster's last probe answered and none of its watches fails",
    more: "It is probed every 30 s.",
};
/// When a RemoteCluster last answered.
pub const REMOTE_LAST_CONTACT: Entry = Entry {
    name: "kubesync_remotecluster_last_contact_timestamp_seconds",
    kind: Kind::Gauge,
    labels: REMOTE_CLUSTER,
    help: "When the RemoteCluster last answered a probe or a watch (Unix time; 0: never)",
    more: "",
};
/// Watches of a RemoteCluster restarted.
pub const REMOTE_WATCH_RESTARTS: Entry = Entry {
    name: "kubesync_remotecluster_watch_restarts_total",
    kind: Kind::Counter,
    labels: REMOTE_CLUSTER,
    help: "Watches of the RemoteCluster that failed or expired and started again",
    more: "The operator's watches and every ResourceSync's, 410 Gone included.",
};
/// Propagation lags.
pub const PROPAGATION_LAG: Entry = Entry {
    name: "kubesync_propagation_lag_seconds",
    kind: Kind::Histogram,
    labels: &[
        ("sync", "`ObjectSync`, `ResourceSync`, `Annotations`"),
        ("cluster", "`local` or a RemoteCluster"),
    ],
    help: "Seconds from a change first seen by a watch (a source's new version, a new or relabelled namespace, a deleted copy) to the copy written with it, by sync kind and destination cluster",
    more: "ResourceSync (`cluster=\"local\"`): from the first sight of a remote object's new generation by the remote watch to the local write that applies it. Buckets 5 ms to 10 min. Reverts of someone else's edit (and, for ResourceSync, label-only changes) are not propagation, and not observed.",
};

/// Annotation-declared syncs.
pub const COMPAT_SYNCS: Entry = Entry {
    name: "kubesync_compat_syncs",
    kind: Kind::Gauge,
    labels: &[
        ("tool", "`reflector`, `replicator`"),
        ("direction", "`push`, `pull`"),
    ],
    help: "Syncs that reflector's or kubernetes-replicator's annotations declare now (with --compat), by tool and direction",
    more: "Served only with `--compat`; every pair of a tool turned on is listed from 0.",
};
/// Their destinations by state.
pub const COMPAT_DESTINATIONS: Entry = Entry {
    name: "kubesync_compat_destinations",
    kind: Kind::Gauge,
    labels: &[(
        "state",
        "`Synced`, `Pending`, `Conflict`, `Error`, `Refused`",
    )],
    help: "Destinations of the annotation-declared pushes, by state, summed over every annotated source",
    more: "Served only with `--compat`. Summed: a label per source would grow with the cluster's Secrets; `kubesync compat list` and the Events on each source say which.",
};
/// Pulls that do not stand.
pub const COMPAT_PULLS_NOT_PULLED: Entry = Entry {
    name: "kubesync_compat_pulls_not_pulled",
    kind: Kind::Gauge,
    labels: &[],
    help: "Annotation-declared pulls whose source is missing or refuses them, or whose write failed",
    more: "Served only with `--compat`; each says why in an Event on its target.",
};

const OBJECT_SYNC: &[(&str, &str)] = &[("namespace", ""), ("objectsync", "")];
const RESOURCE_SYNC: &[(&str, &str)] = &[("resourcesync", "")];
const REMOTE_CLUSTER: &[(&str, &str)] = &[("remotecluster", "")];

/// Every metric, in the order of the page.
pub const ALL: &[Entry] = &[
    RECONCILES,
    RECONCILE_FAILURES,
    QUEUE_DEPTH,
    IN_FLIGHT,
    KEYS_FAILING,
    LEADER,
    FRESH_STARTS,
    SHARD_UNITS,
    SHARD_MEMBERS,
    SHARD_SETTLED,
    SHARD_MOVES,
    WRITES,
    OBJECT_SYNC_WATCHES,
    OBJECT_SYNC_COPIES_HELD,
    RESOURCE_SYNC_ENGINES,
    OBJECT_SYNC_READY,
    OBJECT_SYNC_DESTINATIONS,
    OBJECT_SYNC_STALE,
    OBJECT_SYNC_OLDEST_STALE,
    OBJECT_SYNC_DRIFTS,
    PROPAGATION_LAG,
    COMPAT_SYNCS,
    COMPAT_DESTINATIONS,
    COMPAT_PULLS_NOT_PULLED,
    RESOURCE_SYNC_OBJECTS,
    RESOURCE_SYNC_STALE,
    RESOURCE_SYNC_OLDEST_STALE,
    RESOURCE_SYNC_DRIFTS,
    REMOTE_REACHABLE,
    REMOTE_LAST_CONTACT,
    REMOTE_WATCH_RESTARTS,
];

/// The entry of the metric `name`.
pub fn entry(name: &str) -> Option<&'static Entry> {
    ALL.iter().find(|e| e.name == name)
}

/// The book's table of metrics (Markdown, pure): one row per metric with its type, labels and
/// meaning.
pub fn reference() -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n| --- | --- | --- | --- |\n");
    for e in ALL {
        let labels: Vec<String> = e
            .labels
            .iter()
            .map(|(name, values)| match values {
                &"" => format!("`{name}`"),
                values => format!("`{name}` ({values})"),
            })
            .collect();
        let meaning = match e.more {
            "" => format!("{}.", e.help),
            more => format!("{}. {more}", e.help),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            e.name,
            e.kind.as_str(),
            labels.join(", "),
            meaning.replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_named_once_with_prometheus_conventions() {
        let mut names: Vec<&str> = ALL.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len(), "a metric is listed twice");
        for e in ALL {
            assert!(e.name.starts_with("kubesync_"), "{}", e.name);
            assert_eq!(
                e.kind == Kind::Counter,
                e.name.ends_with("_total"),
                "{}: counters and only counters end in _total",
                e.name
            );
            assert!(
                !e.help.ends_with('.'),
                "{}: the registry adds the period",
                e.name
            );
            // One series per declaration, cluster or category: never a destination namespace
            // or an object's name as a label of its own.
            for (label, _) in e.labels {
                assert!(
                    [
                        "category",
                        "component",
                        "namespace",
                        "objectsync",
                        "state",
                        "resourcesync",
                        "remotecluster",
                        "sync",
                        "cluster",
                        "tool",
                        "direction",
                        "kind"
                    ]
                    .contains(label),
                    "{}: unbounded label {label}",
                    e.name
                );
            }
        }
        assert!(entry("kubesync_writes_total").is_some());
        assert!(entry("kubesync_nothing").is_none());
    }
}
