//! The pure part of the spec/status controllers.

use super::*;

fn t(s: &str) -> jiff::Timestamp {
    s.parse().expect("time")
}

#[test]
fn resource_sync_status_carries_counts_and_keeps_the_transition_time() {
    let counts = Counts {
        objects: 3,
        in_sync: 2,
        paused: 1,
        failing: 0,
        secret_repair: Some(SecretRepair::Poll(SECRET_REPAIR_INTERVAL)),
        oldest_stale: Duration::from_secs(7),
        drifts: 1,
    };
    let drift = LocalDriftRecord {
        object: "ops-a/w1".into(),
        detected_time: "2024-01-01T00:00:00Z".into(),
        fields: vec!["spec.size".into()],
        managers: Vec::new(),
    };
    let first = resource_sync_status(
        &ResourceSyncStatus::default(),
        Some(4),
        status::ready(true, State::Syncing, "syncing Widget from remote:mgmt"),
        counts,
        Some(drift.clone()),
        t("2024-01-01T00:00:00Z"),
    );
    assert_eq!(first.observed_generation, Some(4));
    assert_eq!(first.last_drift.as_ref(), Some(&drift));
    assert_eq!(
        (first.objects, first.in_sync, first.paused, first.failing),
        (3, 2, 1, 0)
    );
    let again = resource_sync_status(
        &first,
        Some(4),
        status::ready(true, State::Syncing, "syncing Widget from remote:mgmt"),
        counts,
        None,
        t("2024-01-01T00:05:00Z"),
    );
    assert_eq!(
        again, first,
        "nothing changed (the last drift kept while a restarted sync found none): nothing to write"
    );
    assert_eq!(first.secret_repair, Some(SecretRepairMode::Poll));
    let refused = resource_sync_status(
        &first,
        Some(5),
        status::refused(&Refusal::new(
            Reason::InvalidSpec,
            "spec.remoteCluster is empty",
        )),
        Counts::default(),
        None,
        t("2024-01-01T00:05:00Z"),
    );
    assert_eq!(refused.conditions[0].reason, "InvalidSpec");
    assert_ne!(
        refused.conditions[0].last_transition_time,
        first.conditions[0].last_transition_time
    );
}

#[test]
fn drift_events_are_limited_per_minute_but_every_drift_is_counted() {
    let mut log = DriftLog::default();
    let t0 = Instant::now();
    let record = |n: u64| LocalDriftRecord {
        object: format!("ns/w{n}"),
        ..Default::default()
    };
    let allowed = (0..15)
        .filter(|n| log.found(record(*n), t0 + Duration::from_secs(*n)))
        .count();
    assert_eq!(allowed, MAX_DRIFT_EVENTS_PER_MINUTE as usize);
    assert_eq!(log.count, 15);
    assert_eq!(log.last.as_ref().map(|r| r.object.as_str()), Some("ns/w14"));
    assert!(
        log.found(record(99), t0 + Duration::from_secs(60)),
        "a new minute"
    );
}

#[test]
fn secret_repair_intervals_are_durations_of_at_least_a_second() {
    let with = |v: Option<&str>| {
        let mut spec: ResourceSyncSpec = serde_json::from_value(serde_json::json!({
            "resource": {"version": "v1", "kind": "Widget"}, "remoteCluster": "mgmt"
        }))
        .expect("spec");
        spec.secret_repair_interval = v.map(String::from);
        secret_repair_interval(&spec)
    };
    assert_eq!(with(None).expect("default"), Duration::from_secs(30));
    for (text, secs) in [("30s", 30), ("2m", 120), ("1m30s", 90), ("1s", 1)] {
        assert_eq!(with(Some(text)).expect(text), Duration::from_secs(secs));
    }
    for (bad, says) in [
        ("soon", "is not a duration"),
        ("500ms", "at least 1s"),
        ("-5s", "at least 1s"),
    ] {
        let refusal = with(Some(bad)).expect_err(bad);
        assert_eq!(refusal.reason, "InvalidSpec");
        assert!(refusal.message.contains(says), "{}", refusal.message);
    }
}

#[test]
fn only_specs_that_cannot_have_run_skip_the_release() {
    assert!(nothing_to_release(&Refusal::new(Reason::InvalidSpec, "")));
    assert!(nothing_to_release(&Refusal::new(
        Reason::NoStatusSubresource,
        ""
    )));
    for reason in [
        Reason::RemoteClusterNotFound,
        Reason::KubeconfigSecretInvalid,
        Reason::KubeconfigInvalid,
    ] {
        assert!(!nothing_to_release(&Refusal::new(reason, "")), "{reason}");
    }
}

#[test]
fn remote_cluster_version_is_dropped_when_it_stops_answering() {
    let now = t("2024-01-01T00:00:00Z");
    let up = remote_cluster_status(
        &RemoteClusterStatus::default(),
        None,
        status::ready(true, State::Connected, "apiserver v1.37.2 answered"),
        (Some("v1.37.2".into()), Some("https://h:443".into())),
        Usage::default(),
        now,
    );
    assert_eq!(up.server_version.as_deref(), Some("v1.37.2"));
    assert_eq!(up.server.as_deref(), Some("https://h:443"));
    let supported = &up.conditions[1];
    assert_eq!(
        (supported.type_.as_str(), supported.status.as_str()),
        ("VersionSupported", "True")
    );
    let down = remote_cluster_status(
        &up,
        None,
        status::ready(false, State::Unreachable, "connect"),
        (None, Some("https://h:443".into())),
        Usage::default(),
        now,
    );
    assert_eq!(down.server_version, None);
    // Connected (its kubeconfig names the server) though it does not answer: still claimed.
    assert_eq!(down.server.as_deref(), Some("https://h:443"));
    assert_eq!(down.conditions.len(), 1, "{:?}", down.conditions);
}

#[test]
fn a_remote_cluster_says_how_many_declarations_read_from_it_and_write_into_it() {
    let specs = [
        serde_json::json!({"source": {"kind": "ConfigMap", "name": "a", "cluster": "hub"},
            "destinations": [{"namespace": "*"}]}),
        serde_json::json!({"source": {"kind": "ConfigMap", "name": "b"},
            "destinations": [{"namespace": "*", "cluster": "hub"}, {"cluster": "hub"}]}),
        serde_json::json!({"source": {"kind": "ConfigMap", "name": "c", "cluster": "hub-2"},
            "destinations": [{"cluster": "east"}]}),
    ];
    assert_eq!(
        Usage::of("hub", &specs),
        Usage {
            source_for: 1,
            destination_for: 1
        }
    );
    assert_eq!(Usage::of("east", &specs).destination_for, 1);
    assert_eq!(Usage::of("nowhere", &specs), Usage::default());
    let status = remote_cluster_status(
        &RemoteClusterStatus::default(),
        None,
        status::ready(true, State::Connected, "answered"),
        (None, None),
        Usage::of("hub", &specs),
        t("2024-01-01T00:00:00Z"),
    );
    assert_eq!(
        (status.source_for, status.destination_for),
        (Some(1), Some(1))
    );
}

#[test]
fn remote_cluster_outside_the_supported_range_is_warned_about() {
    let (t0, t1) = (t("2024-01-01T00:00:00Z"), t("2024-01-01T00:10:00Z"));
    let ready = || status::ready(true, State::Connected, "answered");
    let old = remote_cluster_status(
        &RemoteClusterStatus::default(),
        Some(1),
        ready(),
        (Some("v1.29.4-gke.100".into()), None),
        Usage::default(),
        t0,
    );
    let c = &old.conditions[1];
    assert_eq!(c.type_, "VersionSupported");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "OlderThanSupported")
    );
    assert!(
        c.message.contains("v1.29.4-gke.100") && c.message.contains("v1.33"),
        "{}",
        c.message
    );
    // Ready stays True: an old cluster is still served.
    assert_eq!(old.conditions[0].status, "True");
    // Upgraded: the condition turns True at the new time.
    let upgraded = remote_cluster_status(
        &old,
        Some(1),
        ready(),
        (Some("v1.35.0".into()), None),
        Usage::default(),
        t1,
    );
    assert_eq!(upgraded.conditions[1].status, "True");
    assert_eq!(upgraded.conditions[1].last_transition_time.0, t1);
    let newer = remote_cluster_status(
        &old,
        Some(1),
        ready(),
        (Some("v1.40.1".into()), None),
        Usage::default(),
        t1,
    );
    assert_eq!(newer.conditions[1].reason, "NewerThanTested");
    assert_eq!(
        newer.conditions[1].last_transition_time.0, t0,
        "still False"
    );
}

#[test]
fn names_in_a_resource_sync_and_a_remote_cluster_are_checked_before_any_request() {
    let rs = |v: serde_json::Value| -> ResourceSyncSpec {
        let mut base = serde_json::json!({
            "resource": {"group": "demo.kubesync.io", "version": "v1", "kind": "Widget"},
            "remoteCluster": "eu"});
        base.as_object_mut()
            .expect("object")
            .extend(v.as_object().cloned().expect("object"));
        serde_json::from_value(base).expect("spec")
    };
    assert_eq!(
        check_names(&rs(
            serde_json::json!({"namespacePrefix": "t-", "remoteNameSuffix": "-west", "secretNames": ["creds"]})
        )),
        Ok(())
    );
    for (v, says) in [
        (
            serde_json::json!({"remoteCluster": "EU West"}),
            "spec.remoteCluster: \"EU West\" is not a RemoteCluster's name",
        ),
        (
            serde_json::json!({"namespacePrefix": "T_"}),
            "spec.namespacePrefix: \"T_\" is not a name part",
        ),
        (
            serde_json::json!({"secretNames": ["ok", "not/ok"]}),
            "spec.secretNames[1]: \"not/ok\" is not a Secret's name",
        ),
        (
            serde_json::json!({"annotationDomain": "Example.com"}),
            "spec.annotationDomain:",
        ),
        (
            serde_json::json!({"resource": {"version": "v 1", "kind": "Widget"}}),
            "spec.resource.version:",
        ),
    ] {
        let refusal = check_names(&rs(v)).expect_err(says);
        assert_eq!(refusal.reason, "InvalidSpec");
        assert!(refusal.message.starts_with(says), "{}", refusal.message);
    }
    let rc = |v: serde_json::Value| -> crate::crd::RemoteClusterSpec {
        serde_json::from_value(v).expect("spec")
    };
    let ok = rc(
        serde_json::json!({"kubeconfigSecretRef": {"namespace": "kubesync", "name": "eu"},
        "allowedNamespaces": {"matchLabels": {"tenant": "yes"}}}),
    );
    assert_eq!(check_remote_cluster(&ok), Ok(()));
    for (v, says) in [
        (
            serde_json::json!({"kubeconfigSecretRef": {"namespace": "kubesync", "name": "eu"},
            "allowedNamespaces": {"matchLabels": {"tenant": "a(b"}}}),
            "spec.allowedNamespaces.matchLabels[\"tenant\"]: \"a(b\" is not a label value",
        ),
        (
            serde_json::json!({"kubeconfigSecretRef": {"namespace": "Kube Sync", "name": "eu"}}),
            "spec.kubeconfigSecretRef.namespace:",
        ),
        (
            serde_json::json!({"kubeconfigSecretRef": {"namespace": "kubesync", "name": "eu", "key": "a/b"}}),
            "spec.kubeconfigSecretRef.key:",
        ),
    ] {
        let refusal = check_remote_cluster(&rc(v)).expect_err(says);
        assert!(refusal.message.starts_with(says), "{}", refusal.message);
    }
}
