//! The declaration's judgement (`declare`), on canned facts.
use super::*;
use serde_json::json;

fn spec(v: serde_json::Value) -> ObjectSyncSpec {
    serde_json::from_value(v).expect("spec")
}

fn remote(name: &str, allowed: Option<serde_json::Value>) -> RemoteCluster {
    let mut spec =
        json!({"kubeconfigSecretRef": {"namespace": "ops", "name": "kc", "key": "config"}});
    if let Some(a) = allowed {
        spec["allowedNamespaces"] = a;
    }
    serde_json::from_value(json!({
        "apiVersion": "kubesync.io/v1alpha1", "kind": "RemoteCluster",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("remote cluster")
}

/// Gathered about a ConfigMap source (namespaced), with these RemoteClusters and labels.
fn facts(
    remotes: Vec<RemoteCluster>,
    labels: Option<Result<BTreeMap<String, String>, String>>,
) -> Gathered {
    Gathered {
        resource: ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        namespaced: true,
        remotes: remotes
            .into_iter()
            .map(|rc| (rc.name_any(), Ok(rc)))
            .collect(),
        namespace_labels: labels,
        predecessors: Vec::new(),
    }
}

fn judged(
    own: Option<&str>,
    s: &ObjectSyncSpec,
    facts: &Gathered,
    policy: ObjectSyncPolicy,
) -> Result<FanOutSpec, Refusal> {
    let checked = check_spec(s).expect("fields valid");
    declare(own, s, checked, facts, &Arc::new(policy))
}

fn labels(team: &str) -> Option<Result<BTreeMap<String, String>, String>> {
    Some(Ok(BTreeMap::from([("team".into(), team.into())])))
}

#[test]
fn a_declaration_writes_into_one_cluster_through_one_name() {
    let with_server = |name: &str, server: Option<&str>| {
        let mut rc = remote(name, None);
        rc.status = Some(crate::crd::RemoteClusterStatus {
            server: server.map(str::to_string),
            ..Default::default()
        });
        rc
    };
    let both = spec(json!({
        "source": {"kind": "ConfigMap", "name": "cm"},
        "destinations": [{"namespace": "a", "cluster": "eu"},
            {"namespace": "b", "cluster": "eu-again"}, {"namespace": "c", "cluster": "eu"}],
    }));
    let judge = |eu_again: Option<&str>| {
        let remotes = vec![
            with_server("eu", Some("https://h:443")),
            with_server("eu-again", eu_again),
        ];
        judged(Some("ops"), &both, &facts(remotes, None), trusting_ops())
    };
    let refused = judge(Some("https://h:443")).expect_err("refused");
    assert_eq!(refused.reason, Reason::DuplicateCluster);
    assert!(
        refused.message.contains("eu and eu-again") && refused.message.contains("https://h:443"),
        "{}",
        refused.message
    );
    // Another apiserver, or one not connected yet (no server known): declared.
    judge(Some("https://other:443")).expect("two clusters");
    judge(None).expect("not known to be the same");
    // One name in several destinations is one cluster.
    let once = spec(json!({
        "source": {"kind": "ConfigMap", "name": "cm"},
        "destinations": [{"namespace": "a", "cluster": "eu"}, {"namespace": "b", "cluster": "eu"}],
    }));
    let remotes = vec![with_server("eu", Some("https://h:443"))];
    judged(Some("ops"), &once, &facts(remotes, None), trusting_ops()).expect("one name");
}

fn trusting_ops() -> ObjectSyncPolicy {
    ObjectSyncPolicy {
        trusted_namespaces: vec!["ops".into()],
        ..Default::default()
    }
}

#[test]
fn an_untrusted_declaration_writes_only_through_remote_clusters_that_admit_its_namespace() {
    let s = spec(json!({
        "source": {"kind": "ConfigMap", "name": "cm"},
        "destinations": [{"namespace": "apps", "cluster": "east"}],
    }));
    let team_a = json!({"matchLabels": {"team": "a"}});
    let policy = || ObjectSyncPolicy {
        trusted_namespaces: vec!["ops".into()],
        default_service_account: Some("copier".into()),
        ..Default::default()
    };

    // Acting as its ServiceAccount, it writes there only as the identity east maps it to.
    let unmapped = judged(
        Some("a"),
        &s,
        &facts(vec![remote("east", Some(team_a.clone()))], labels("a")),
        policy(),
    )
    .expect_err("no identity there");
    assert_eq!(unmapped.reason, Reason::RemoteIdentityRequired);
    assert!(
        unmapped.message.contains("ServiceAccount a/copier")
            && unmapped.message.contains("spec.identityNamespace"),
        "{}",
        unmapped.message
    );
    let mut east = remote("east", Some(team_a.clone()));
    east.spec.identity_namespace = Some("from-west".into());
    let ok = judged(Some("a"), &s, &facts(vec![east], labels("a")), policy()).expect("admitted");
    assert_eq!(ok.destinations[0].cluster.as_deref(), Some("remote:east"));
    assert_eq!(
        ok.acting_as_in.get("remote:east").map(|who| who.user()),
        Some("system:serviceaccount:from-west:a.copier"),
        "east's identity for a/copier"
    );
    assert_eq!(
        ok.acting_as.as_ref().map(|who| who.user()),
        Some("system:serviceaccount:a:copier"),
        "here, its own"
    );
    assert!(
        ok.consent.is_some(),
        "an untrusted declaration needs consent"
    );
    assert_eq!(ok.source.namespace, "a");

    let refused = |f: Gathered| judged(Some("a"), &s, &f, policy()).expect_err("refused");
    let other_team = refused(facts(
        vec![remote("east", Some(team_a.clone()))],
        labels("b"),
    ));
    assert_eq!(other_team.reason, Reason::RemoteClusterNotAllowed);
    // To a tenant, a RemoteCluster that does not admit her reads as one that does not exist,
    // and nothing says which labels would admit her.
    assert!(
        other_team
            .message
            .contains("\"east\" does not exist or does not admit ObjectSyncs from namespace a")
            && !other_team.message.contains("team"),
        "{}",
        other_team.message
    );
    let no_selector = refused(facts(vec![remote("east", None)], labels("a")));
    assert_eq!(no_selector, other_team);
    let unread = refused(facts(
        vec![remote("east", Some(team_a.clone()))],
        Some(Err("forbidden".into())),
    ));
    assert_eq!(unread.reason, Reason::RemoteClusterNotAllowed);
    assert!(
        unread
            .message
            .contains("namespace a could not be read: forbidden")
    );
    let invalid = refused(facts(
        vec![remote(
            "east",
            Some(json!({"matchExpressions": [{"key": "team", "operator": "Sideways"}]})),
        )],
        labels("a"),
    ));
    assert_eq!(invalid, other_team);
    let missing = refused(facts(Vec::new(), labels("a")));
    assert_eq!(missing, other_team, "missing reads as not admitting");

    // A trusted namespace and a ClusterObjectSync need neither the selector nor consent.
    let mut cluster_wide = s.clone();
    cluster_wide.source.namespace = Some("ops".into());
    for (own, s) in [(Some("ops"), &s), (None, &cluster_wide)] {
        let trusted =
            judged(own, s, &facts(vec![remote("east", None)], None), policy()).expect("trusted");
        assert!(trusted.consent.is_none());
        assert_eq!(
            trusted.destinations[0].cluster.as_deref(),
            Some("remote:east")
        );
    }
    // A missing RemoteCluster is refused for them too.
    assert_eq!(
        judged(Some("ops"), &s, &facts(Vec::new(), None), policy())
            .expect_err("missing")
            .reason,
        Reason::RemoteClusterNotFound
    );
}

#[test]
fn a_source_read_from_a_remote_cluster_needs_its_admission_and_the_namespace_of_the_same_name() {
    let pull = |namespace: Option<&str>| {
        let mut source = json!({"kind": "ConfigMap", "name": "cm", "cluster": "hub"});
        if let Some(ns) = namespace {
            source["namespace"] = json!(ns);
        }
        spec(json!({"source": source, "destinations": [{"namespace": "a"}]}))
    };
    let team_a = json!({"matchLabels": {"team": "a"}});
    let mapped = || {
        let mut hub = remote("hub", Some(team_a.clone()));
        hub.spec.identity_namespace = Some("tenants".into());
        hub
    };
    let hub = || facts(vec![mapped()], labels("a"));
    let policy = || ObjectSyncPolicy {
        trusted_namespaces: vec!["ops".into()],
        default_service_account: Some("copier".into()),
        ..Default::default()
    };
    // Acting as its ServiceAccount, it reads there only as the identity the hub maps it to.
    let unmapped = judged(
        Some("a"),
        &pull(None),
        &facts(vec![remote("hub", Some(team_a.clone()))], labels("a")),
        policy(),
    )
    .expect_err("no identity on the hub");
    assert_eq!(unmapped.reason, Reason::RemoteIdentityRequired);
    // Its own namespace there, through a RemoteCluster that admits it.
    let ok = judged(Some("a"), &pull(None), &hub(), policy()).expect("admitted");
    assert_eq!(
        ok.acting_as_in.get("remote:hub").map(|who| who.user()),
        Some("system:serviceaccount:tenants:a.copier"),
        "reviewed on the hub as its mapped identity"
    );
    assert_eq!(ok.source.cluster.as_deref(), Some("remote:hub"));
    assert_eq!(ok.source.namespace, "a");
    assert!(ok.consent.is_some(), "its copies still need consent here");
    // Another namespace there: refused, whatever this cluster's source rule says.
    let local_rule = ObjectSyncPolicy {
        source_namespaces: vec!["shared".into()],
        ..policy()
    };
    let other = judged(Some("a"), &pull(Some("shared")), &hub(), local_rule)
        .expect_err("another namespace there");
    assert_eq!(other.reason, Reason::SourceNamespaceNotAllowed);
    assert!(other.message.contains("hub"), "{}", other.message);
    // … unless the operator allows it for that cluster.
    let allowed = ObjectSyncPolicy {
        remote_source_namespaces: vec!["hub/shared*".into()],
        ..policy()
    };
    assert!(judged(Some("a"), &pull(Some("shared")), &hub(), allowed.clone()).is_ok());
    let elsewhere = facts(vec![remote("hub-2", Some(team_a.clone()))], labels("a"));
    let mut s = pull(Some("shared"));
    s.source.cluster = Some("hub-2".into());
    assert_eq!(
        judged(Some("a"), &s, &elsewhere, allowed)
            .expect_err("other cluster")
            .reason,
        Reason::SourceNamespaceNotAllowed
    );
    // A RemoteCluster that does not admit the namespace, or none at all.
    let other_team = judged(
        Some("a"),
        &pull(None),
        &facts(vec![remote("hub", Some(team_a.clone()))], labels("b")),
        policy(),
    )
    .expect_err("other team");
    assert_eq!(other_team.reason, Reason::RemoteClusterNotAllowed);
    let missing = judged(
        Some("a"),
        &pull(None),
        &facts(vec![], labels("a")),
        policy(),
    )
    .expect_err("missing");
    assert_eq!(
        missing, other_team,
        "a missing hub reads as one that does not admit"
    );
    // A trusted namespace needs no admission (its own namespace there, as here); a
    // ClusterObjectSync reads from any namespace there.
    let trusted = judged(
        Some("ops"),
        &pull(None),
        &facts(vec![remote("hub", None)], None),
        policy(),
    );
    assert!(trusted.is_ok());
    let cluster_wide = judged(
        None,
        &pull(Some("shared")),
        &facts(vec![remote("hub", None)], None),
        policy(),
    )
    .expect("cluster-wide");
    assert_eq!(cluster_wide.source.namespace, "shared");
}

#[test]
fn the_operators_policy_bounds_every_destination_and_source() {
    let s = spec(json!({
        "source": {"kind": "ConfigMap", "name": "cm"},
        "destinations": [
            {"namespace": "*", "excludeNamespaces": ["kube-system"]},
            {"namespace": "team-b", "name": "renamed", "strategy": "replace"},
        ],
        "labels": {"exclude": ["internal"]},
        "deletionPolicy": "Orphan",
    }));
    let policy = || ObjectSyncPolicy {
        allow_destination_namespaces: vec!["team-*".into()],
        deny_destination_namespaces: vec!["team-secret".into()],
        default_service_account: Some("copier".into()),
        ..Default::default()
    };
    let d = judged(Some("a"), &s, &facts(Vec::new(), None), policy()).expect("valid");
    assert_eq!(d.destinations.len(), 2);
    for dest in &d.destinations {
        assert_eq!(dest.cluster, None);
        assert_eq!(dest.namespaces.only_namespaces, vec!["team-*".to_string()]);
        assert!(
            dest.namespaces
                .exclude_namespaces
                .contains(&"team-secret".to_string())
        );
    }
    assert_eq!(
        d.destinations[0].namespaces.exclude_namespaces,
        vec!["kube-system".to_string(), "team-secret".to_string()]
    );
    assert_eq!(d.destinations[1].name.as_deref(), Some("renamed"));
    assert_eq!(d.destinations[1].strategy, Strategy::Replace);
    assert_eq!(d.rules.labels.exclude, vec!["internal".to_string()]);
    assert_eq!(d.deletion_policy, DeletionPolicy::Orphan);

    // A destination the policy denies by name refuses the whole declaration.
    let denied = spec(json!({
        "source": {"kind": "ConfigMap", "name": "cm"},
        "destinations": [{"namespace": "team-secret"}],
    }));
    assert_eq!(
        judged(Some("a"), &denied, &facts(Vec::new(), None), policy())
            .expect_err("denied")
            .reason,
        Reason::DestinationNotAllowed
    );
    // So does a source in another namespace.
    let elsewhere = spec(json!({
        "source": {"kind": "ConfigMap", "name": "cm", "namespace": "b"},
        "destinations": [{"namespace": "team-b"}],
    }));
    assert_eq!(
        judged(Some("a"), &elsewhere, &facts(Vec::new(), None), policy())
            .expect_err("elsewhere")
            .reason,
        Reason::SourceNamespaceNotAllowed
    );
}

#[test]
fn the_kind_as_discovered_decides_namespaces() {
    let s = spec(json!({
        "source": {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "destinations": [{"name": "view-copy"}],
    }));
    let cluster_scoped = Gathered {
        resource: ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&()),
        namespaced: false,
        remotes: BTreeMap::new(),
        namespace_labels: None,
        predecessors: Vec::new(),
    };
    let d = judged(None, &s, &cluster_scoped, ObjectSyncPolicy::default())
        .expect("a ClusterObjectSync of a cluster-scoped kind");
    assert_eq!(d.source.namespace, "");
    assert_eq!(d.source.resource.kind, "ClusterRole");

    // A destination namespace means nothing for a cluster-scoped kind: refused by path.
    let with_namespace = spec(json!({
        "source": {"group": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "destinations": [{"namespace": "apps", "name": "view-copy"}],
    }));
    let r = judged(
        None,
        &with_namespace,
        &cluster_scoped,
        ObjectSyncPolicy::default(),
    )
    .expect_err("namespace on a cluster-scoped kind");
    assert_eq!(r.reason, Reason::InvalidSpec);
    assert!(
        r.message.starts_with("spec.destinations[0]"),
        "{}",
        r.message
    );
}

#[test]
fn who_a_declaration_acts_as() {
    let base = json!({"source": {"kind": "ConfigMap", "name": "cfg"}, "destinations": [{"namespace": "t1"}]});
    let named = {
        let mut v = base.clone();
        v["serviceAccountName"] = json!("copier");
        spec(v)
    };
    let unnamed = spec(base);
    let strict = trusting_ops();
    let lenient = ObjectSyncPolicy {
        default_service_account: Some("kubesync-copier".into()),
        ..trusting_ops()
    };
    let user =
        |r: Result<Option<kubesync::ActAs>, Refusal>| r.map(|a| a.map(|a| a.user().to_string()));
    // Named: that ServiceAccount of the ObjectSync's own namespace, trusted or not.
    for (ns, policy) in [("t1", &strict), ("ops", &strict), ("t1", &lenient)] {
        assert_eq!(
            user(acting_as(Some(ns), &named, policy)),
            Ok(Some(format!("system:serviceaccount:{ns}:copier")))
        );
    }
    // Unnamed: the operator's own rights in a trusted namespace, else the default, else refused.
    assert_eq!(user(acting_as(Some("ops"), &unnamed, &strict)), Ok(None));
    assert_eq!(
        user(acting_as(Some("t1"), &unnamed, &lenient)),
        Ok(Some("system:serviceaccount:t1:kubesync-copier".into()))
    );
    let refused = acting_as(Some("t1"), &unnamed, &strict).expect_err("no default");
    assert_eq!(refused.reason, Reason::ServiceAccountRequired);
    assert!(
        refused.message.contains("spec.serviceAccountName"),
        "{}",
        refused.message
    );
    // A ClusterObjectSync acts with the operator's rights and may not name one.
    assert_eq!(user(acting_as(None, &unnamed, &strict)), Ok(None));
    let e = acting_as(None, &named, &strict).expect_err("cluster-scoped");
    assert_eq!(e.reason, Reason::InvalidSpec);
    // A name that is no ServiceAccount name is refused, not sent as a header.
    let mut v = json!({"source": {"kind": "ConfigMap", "name": "cfg"}, "destinations": []});
    v["serviceAccountName"] = json!("a b\r\nX-Evil: 1");
    let e = acting_as(Some("t1"), &spec(v), &strict).expect_err("invalid");
    assert_eq!(e.reason, Reason::InvalidSpec);
    // Annotations name none: the default, or why not.
    assert_eq!(lenient.default_identity("ops").expect("trusted"), None);
    assert!(
        strict
            .default_identity("t1")
            .expect_err("none")
            .contains("--default-service-account")
    );
}

#[test]
fn other_tools_ownership_is_dropped_by_default_extended_by_keys_and_copied_on_request() {
    let source =
        json!({"source": {"kind": "ConfigMap", "name": "c"}, "destinations": [{"namespace": "a"}]});
    let rules = |other: Option<serde_json::Value>| {
        let mut s = source.clone();
        if let Some(o) = other {
            s["otherOwners"] = o;
        }
        copy_rules(&spec(s), false).other_owners
    };
    let known: Vec<String> = OTHER_OWNERS.iter().map(|k| k.to_string()).collect();
    assert_eq!(rules(None), known);
    let mut extended = known.clone();
    extended.push("team.example.com/".into());
    assert_eq!(
        rules(Some(json!({"keys": ["team.example.com/"]}))),
        extended
    );
    assert!(rules(Some(json!({"copy": true, "keys": ["x"]}))).is_empty());
}

#[test]
fn a_tenant_takes_over_only_from_objectsyncs_of_her_namespace() {
    let with = |take_over: serde_json::Value| {
        spec(json!({"source": {"kind": "ConfigMap", "name": "cfg"},
            "destinations": [{"namespace": "t2"}], "takeOver": take_over}))
    };
    let policy = || ObjectSyncPolicy {
        default_service_account: Some("copier".into()),
        ..trusting_ops()
    };
    let reason = |own: Option<&str>, s: &ObjectSyncSpec| {
        judged(own, s, &facts(vec![], None), policy()).map_err(|r| (r.reason, r.message))
    };
    // Her own namespace's ObjectSync, named with or without the namespace: allowed, and the
    // predecessors gathered reach the declaration.
    for ok in [
        json!([{"name": "old"}]),
        json!([{"name": "old", "namespace": "t1"}]),
    ] {
        let s = with(ok);
        assert!(reason(Some("t1"), &s).is_ok());
        let mut gathered = facts(vec![], None);
        let record = kubesync::syncers::fan_out::record::Record::new();
        gathered.predecessors = vec![Predecessor {
            key: ObjectKey::new(
                "local",
                &ApiResource::erase::<ObjectSync>(&()),
                Some("t1".into()),
                "old",
            ),
            owner: kubesync::syncers::fan_out::rules::Owner {
                reference: "local/t1/old".into(),
                uid: "u-old".into(),
                shard: None,
            },
            record: Arc::new(record),
        }];
        let d = judged(Some("t1"), &s, &gathered, policy()).expect("allowed");
        assert_eq!(d.take_over, gathered.predecessors);
    }
    // Another namespace's, or a ClusterObjectSync: refused, naming what and why.
    for (refused, named) in [
        (
            json!([{"name": "old", "namespace": "t2"}]),
            "ObjectSync t2/old",
        ),
        (
            json!([{"kind": "ClusterObjectSync", "name": "fleet"}]),
            "ClusterObjectSync fleet",
        ),
        (
            json!([{"kind": "Annotations", "name": "db", "namespace": "ops"}]),
            "the annotations of ops/db",
        ),
    ] {
        let (r, m) = reason(Some("t1"), &with(refused)).expect_err("refused");
        assert_eq!(r, Reason::TakeOverNotAllowed);
        assert!(m.contains(named) && m.contains("own namespace (t1)"), "{m}");
    }
    // A trusted namespace's ObjectSync, or a ClusterObjectSync, takes over from anywhere.
    let anywhere = with(json!([{"name": "old", "namespace": "t2"},
        {"kind": "ClusterObjectSync", "name": "fleet"}]));
    assert_eq!(reason(Some("ops"), &anywhere).err(), None);
    let mut cluster_wide = anywhere.clone();
    cluster_wide.source.namespace = Some("t1".into());
    assert_eq!(reason(None, &cluster_wide).err(), None);
    // Fields that cannot name one: said where.
    let (r, m) = reason(
        Some("ops"),
        &with(
            json!([{"name": "old"}, {"kind": "ClusterObjectSync", "name": "f", "namespace": "x"}]),
        ),
    )
    .expect_err("invalid");
    assert_eq!(r, Reason::InvalidSpec);
    assert_eq!(m, "spec.takeOver[1]: a ClusterObjectSync has no namespace");
    assert!(
        reason(
            Some("t1"),
            &with(json!([{"kind": "Annotations", "name": "db"}]))
        )
        .is_ok()
    );
    let mut unnamed = with(json!([{"kind": "Annotations", "name": "db"}]));
    unnamed.source.namespace = Some("t1".into());
    let (_, m) = reason(None, &unnamed).expect_err("invalid");
    assert_eq!(
        m,
        "spec.takeOver[0]: name the namespace of the annotated object to take over from"
    );
    let mut unnamed = with(json!([{"name": "old"}]));
    unnamed.source.namespace = Some("t1".into());
    let (_, m) = reason(None, &unnamed).expect_err("invalid");
    assert_eq!(
        m,
        "spec.takeOver[0]: name the namespace of the ObjectSync to take over from"
    );
}
