//! The pure part of spec/status sync's controllers: names and intervals checked before any
//! request, the statuses of a ResourceSync and a RemoteCluster, the drift log, and whether a
//! refused spec can have left anything to release.

use super::*;

/// Counts of a running sync, as its status (and `/metrics`) shows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Remote objects in this shard.
    pub objects: u32,
    /// Remote objects whose local copy is current (see `plan::local_current`).
    pub in_sync: u32,
    /// How long the remote object that has been behind longest has been behind (zero when
    /// none is): since its unapplied generation was first seen, or else (a local copy missing,
    /// a deletion not yet carried out locally) since a count first found it behind.
    pub oldest_stale: Duration,
    /// Local copies found changed by someone else and reverted, since the sync started.
    pub drifts: u64,
    /// Objects paused on either side.
    pub paused: u32,
    /// Objects whose last reconcile failed.
    pub failing: u32,
    /// How its remote Secrets are repaired (with secret names).
    pub secret_repair: Option<SecretRepair>,
}

/// The status of a ResourceSync (pure): its `Ready` condition (transition time kept while
/// its status does not change), the counts of its sync, and the last local copy found changed
/// by someone else (the old record while the running sync found none).
pub fn resource_sync_status(
    old: &ResourceSyncStatus,
    generation: Option<i64>,
    ready: Condition,
    counts: Counts,
    last_drift: Option<LocalDriftRecord>,
    now: jiff::Timestamp,
) -> ResourceSyncStatus {
    ResourceSyncStatus {
        last_drift: last_drift.or_else(|| old.last_drift.clone()),
        observed_generation: generation,
        conditions: vec![with_transition(ready, &old.conditions, generation, now)],
        objects: counts.objects,
        in_sync: counts.in_sync,
        paused: counts.paused,
        failing: counts.failing,
        secret_repair: counts.secret_repair.map(|r| match r {
            SecretRepair::Watch => SecretRepairMode::Watch,
            SecretRepair::Poll(_) => SecretRepairMode::Poll,
        }),
    }
}

/// `spec.secretRepairInterval` (pure): a duration such as `30s`, `2m` or `1m30s`, at least
/// one second; absent, the default 30 s.
pub fn secret_repair_interval(spec: &ResourceSyncSpec) -> Result<Duration, Refusal> {
    let Some(text) = &spec.secret_repair_interval else {
        return Ok(SECRET_REPAIR_INTERVAL);
    };
    let invalid = |why: &str| {
        Refusal::new(
            Reason::InvalidSpec,
            format!("spec.secretRepairInterval {text:?} {why}"),
        )
    };
    let parsed: jiff::SignedDuration = text
        .parse()
        .map_err(|_| invalid("is not a duration (e.g. 30s, 2m, 1m30s)"))?;
    match Duration::try_from(parsed) {
        Ok(d) if d >= Duration::from_secs(1) => Ok(d),
        _ => Err(invalid("must be at least 1s")),
    }
}

/// The names in a ResourceSync's spec, judged as the apiserver judges names (pure): the
/// RemoteCluster's, the group and version, the affixes that form namespace and object names,
/// the Secrets' names and the annotation domain. The refusal names the field and the value.
pub(super) fn check_names(spec: &ResourceSyncSpec) -> Result<(), Refusal> {
    use kubesync::validate::{is_dns_label, is_dns_subdomain, quoted};
    let invalid = |field: &str, value: &str, what: &str| {
        Err(Refusal::new(
            Reason::InvalidSpec,
            format!("spec.{field}: {} is not {what}", quoted(value)),
        ))
    };
    // Lowercase letters, digits and '-': what may be added to a namespace's or object's name.
    let affix = |s: &str| {
        s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    let r = &spec.resource;
    if !r.group.is_empty() && !is_dns_subdomain(&r.group) {
        return invalid("resource.group", &r.group, "an API group (a DNS subdomain)");
    }
    if !is_dns_label(&r.version) {
        return invalid("resource.version", &r.version, "an API version such as v1");
    }
    if !is_dns_subdomain(&spec.remote_cluster) {
        return invalid(
            "remoteCluster",
            &spec.remote_cluster,
            "a RemoteCluster's name",
        );
    }
    for (field, value) in [
        ("remoteNameSuffix", &spec.remote_name_suffix),
        ("localNamespaceSuffix", &spec.local_namespace_suffix),
        ("namespacePrefix", &spec.namespace_prefix),
    ] {
        if !affix(value) {
            return invalid(
                field,
                value,
                "a name part: lowercase letters, digits and '-' only",
            );
        }
    }
    for (i, name) in spec.secret_names.iter().enumerate() {
        if !is_dns_subdomain(name) {
            return invalid(&format!("secretNames[{i}]"), name, "a Secret's name");
        }
    }
    if let Some(domain) = spec.annotation_domain.as_deref()
        && !is_dns_subdomain(domain)
    {
        return invalid(
            "annotationDomain",
            domain,
            "a DNS subdomain such as example.com",
        );
    }
    Ok(())
}

/// A RemoteCluster's spec, judged before any request (pure): the Secret it names, and its
/// `allowedNamespaces` selector (the refusal names the field's path).
pub fn check_remote_cluster(spec: &crate::crd::RemoteClusterSpec) -> Result<(), Refusal> {
    use kubesync::validate::{data_key, is_dns_label, is_dns_subdomain, quoted};
    let r = &spec.kubeconfig_secret_ref;
    let invalid = |m: String| Err(Refusal::new(Reason::InvalidSpec, m));
    if !is_dns_label(&r.namespace) {
        return invalid(format!(
            "spec.kubeconfigSecretRef.namespace: {} is not a namespace name",
            quoted(&r.namespace)
        ));
    }
    if !is_dns_subdomain(&r.name) {
        return invalid(format!(
            "spec.kubeconfigSecretRef.name: {} is not a Secret's name",
            quoted(&r.name)
        ));
    }
    if let Err(m) = data_key(&r.key) {
        return invalid(format!("spec.kubeconfigSecretRef.key: {m}"));
    }
    if let Some(allowed) = &spec.allowed_namespaces {
        kubesync::syncers::fan_out::rules::selector(allowed).map_err(|e| {
            Refusal::new(
                Reason::InvalidSpec,
                e.under("spec.allowedNamespaces").to_string(),
            )
        })?;
    }
    Ok(())
}

/// The status of a RemoteCluster (pure): its `Ready` condition, the server version it
/// answered with, and whether that version is within the supported range (condition
/// `VersionSupported`, with a warning for a person when it is not), and the apiserver URL its
/// kubeconfig names once connected (`server`; what a younger RemoteCluster of the same
/// cluster is refused by). A cluster that does not answer keeps the version it last reported
/// while it was not ready, and drops it (and the version condition) when it goes from ready
/// to not ready.
pub fn remote_cluster_status(
    old: &RemoteClusterStatus,
    generation: Option<i64>,
    ready: Condition,
    (version, server): (Option<String>, Option<String>),
    usage: Usage,
    now: jiff::Timestamp,
) -> RemoteClusterStatus {
    let was_ready = status::holds(&old.conditions, ConditionType::Ready);
    let server_version = version.or(if was_ready {
        None
    } else {
        old.server_version.clone()
    });
    let mut conditions = vec![with_transition(ready, &old.conditions, generation, now)];
    if let Some(v) = &server_version {
        let support = kubesync::version::support(v);
        let c = status::condition(
            ConditionType::VersionSupported,
            support.is_supported(),
            State::from(&support),
            format!("Kubernetes {v}: {}", support.message()),
        );
        conditions.push(with_transition(c, &old.conditions, generation, now));
    }
    RemoteClusterStatus {
        conditions,
        server_version,
        server,
        source_for: Some(usage.source_for),
        destination_for: Some(usage.destination_for),
    }
}

/// How many declarations use a RemoteCluster, and how.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Declarations reading their source from it (`spec.source.cluster`).
    pub source_for: u32,
    /// Declarations with a destination in it.
    pub destination_for: u32,
}

impl Usage {
    /// How the declarations whose specs are `specs` (ObjectSyncs', ClusterObjectSyncs', as
    /// stored: JSON) use the RemoteCluster `name` (pure; reads two fields of each).
    pub fn of<'a>(name: &str, specs: impl IntoIterator<Item = &'a serde_json::Value>) -> Self {
        let mut usage = Self::default();
        for spec in specs {
            let names =
                |v: &serde_json::Value| v.get("cluster").and_then(|c| c.as_str()) == Some(name);
            if spec.get("source").is_some_and(names) {
                usage.source_for += 1;
            }
            if spec
                .get("destinations")
                .and_then(|d| d.as_array())
                .is_some_and(|d| d.iter().any(names))
            {
                usage.destination_for += 1;
            }
        }
        usage
    }
}

/// Whether a refusal means no sync can have run under this spec, so no remote object can
/// carry its finalizer (pure): an invalid spec, or a kind this cluster does not serve or that
/// has no status subresource. A RemoteCluster that is missing or cannot be connected is not
/// such a case: its objects may carry finalizers that only a release removes.
pub fn nothing_to_release(refusal: &Refusal) -> bool {
    matches!(
        refusal.reason,
        Reason::InvalidSpec | Reason::ResourceNotFound | Reason::NoStatusSubresource
    )
}
