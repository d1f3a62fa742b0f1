//! The policy's rules, without IO.

use super::*;

#[test]
fn policy_refuses_with_the_rule_that_refused() {
    let default = ObjectSyncPolicy::default();
    assert!(
        default
            .check(Some("a"), "a", "", "Secret", &[Some("*".into())])
            .is_ok()
    );
    let r = default
        .check(Some("a"), "b", "", "Secret", &[])
        .expect_err("cross-namespace");
    assert_eq!(r.reason, "SourceNamespaceNotAllowed");
    // A ClusterObjectSync (an admin's) copies from any namespace.
    assert!(default.check(None, "b", "", "Secret", &[]).is_ok());
    let p = ObjectSyncPolicy {
        source_namespaces: vec!["shared-*".into()],
        allow_destination_namespaces: vec!["team-*".into()],
        deny_destination_namespaces: vec!["team-secret".into()],
        allowed_resources: vec!["Secret".into(), "CronJob.batch".into()],
        ..Default::default()
    };
    assert!(
        p.check(
            Some("a"),
            "shared-certs",
            "",
            "Secret",
            &[Some("team-x".into())]
        )
        .is_ok()
    );
    assert_eq!(
        p.check(Some("a"), "a", "", "ConfigMap", &[])
            .expect_err("kind")
            .reason,
        "ResourceNotAllowed"
    );
    assert!(p.check(Some("a"), "a", "batch", "CronJob", &[]).is_ok());
    // The kind and destination rules bind a ClusterObjectSync too.
    assert_eq!(
        p.check(None, "", "storage.k8s.io", "StorageClass", &[])
            .expect_err("kind")
            .reason,
        "ResourceNotAllowed"
    );
    assert_eq!(
        p.check(None, "b", "", "Secret", &[Some("prod".into())])
            .expect_err("allow")
            .reason,
        "DestinationNotAllowed"
    );
    let denied = p
        .check(Some("a"), "a", "", "Secret", &[Some("team-secret".into())])
        .expect_err("deny");
    assert_eq!(denied.reason, "DestinationNotAllowed");
    // Each refusal names the flag that refuses it.
    assert!(
        denied
            .message
            .ends_with("(--deny-destination-namespace team-secret)"),
        "{}",
        denied.message
    );
    let outside = p
        .check(Some("a"), "a", "", "Secret", &[Some("prod".into())])
        .expect_err("allow");
    assert!(
        outside
            .message
            .ends_with("(--allow-destination-namespace team-*)"),
        "{}",
        outside.message
    );
    assert_eq!(
        p.check(Some("a"), "a", "", "Secret", &[Some("prod".into())])
            .expect_err("allow")
            .reason,
        "DestinationNotAllowed"
    );
}

fn resource(group: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(group, "v1", kind))
}

fn grant(from: &[(&str, Option<&str>)], kinds: &[(&str, &str)]) -> SyncGrantSpec {
    SyncGrantSpec {
        from: from
            .iter()
            .map(|(ns, c)| crate::crd::GrantSource {
                namespace: ns.to_string(),
                cluster: c.map(String::from),
            })
            .collect(),
        kinds: kinds
            .iter()
            .map(|(g, k)| crate::crd::GrantKind {
                group: g.to_string(),
                kind: k.to_string(),
            })
            .collect(),
        adopt: false,
    }
}

fn object(v: serde_json::Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

#[test]
fn grants_admit_their_namespaces_clusters_and_kinds() {
    let cm = resource("", "ConfigMap");
    let rb = resource("rbac.authorization.k8s.io", "RoleBinding");
    let any = grant(&[("team-*", None)], &[]);
    assert!(grant_admits(&any, "team-a", None, &cm, false));
    assert!(!grant_admits(&any, "other", None, &cm, false), "namespace");
    assert!(
        !grant_admits(&any, "team-a", Some("hub"), &cm, false),
        "another cluster"
    );
    assert!(
        !grant_admits(&any, "team-a", None, &rb, true),
        "privileged, not named"
    );
    let remote = grant(&[("apps", Some("hub"))], &[]);
    assert!(grant_admits(&remote, "apps", Some("hub"), &cm, false));
    assert!(!grant_admits(&remote, "apps", None, &cm, false));
    let named = grant(
        &[("t1", None)],
        &[("rbac.authorization.k8s.io", "RoleBinding")],
    );
    assert!(grant_admits(&named, "t1", None, &rb, true));
    assert!(
        !grant_admits(&named, "t1", None, &cm, false),
        "only the kinds named"
    );
}

#[test]
fn only_default_grantable_kinds_go_without_a_grant_that_names_them() {
    let p = ObjectSyncPolicy {
        privileged_resources: vec!["Secret".into()],
        grantable_resources: vec!["Widget.demo.kubesync.io".into()],
        trusted_namespaces: vec!["kubesync-system".into(), "platform-*".into()],
        ..Default::default()
    };
    let plain = object(serde_json::json!({"metadata": {"name": "s"}, "type": "Opaque"}));
    let token = object(serde_json::json!({"metadata": {"name": "s"},
        "type": "kubernetes.io/service-account-token"}));
    let default = ObjectSyncPolicy::default();
    // The allow-list: ConfigMaps and Secrets that are not tokens; nothing else.
    assert!(!default.must_be_named(&resource("", "ConfigMap"), &plain));
    assert!(!default.must_be_named(&resource("", "Secret"), &plain));
    assert!(default.must_be_named(&resource("", "Secret"), &token));
    for (group, kind) in [
        ("", "ServiceAccount"),
        ("rbac.authorization.k8s.io", "Role"),
        ("apps", "Deployment"),
        ("", "ResourceQuota"),
        ("argoproj.io", "Application"),
        ("demo.kubesync.io", "Widget"),
    ] {
        assert!(
            default.must_be_named(&resource(group, kind), &plain),
            "{kind}"
        );
    }
    // An admin widens the list, and narrows it.
    assert!(!p.must_be_named(&resource("demo.kubesync.io", "Widget"), &plain));
    assert!(p.must_be_named(&resource("", "Secret"), &plain));
    assert!(p.is_trusted("kubesync-system") && p.is_trusted("platform-eu"));
    assert!(!p.is_trusted("t1"));
}

#[test]
fn alias_groups_are_the_same_kind_for_every_rule() {
    assert_eq!(
        canonical("extensions", "Ingress"),
        ("networking.k8s.io", "Ingress")
    );
    assert_eq!(canonical("events.k8s.io", "Event"), ("", "Event"));
    assert_eq!(canonical("apps", "Deployment"), ("apps", "Deployment"));
    let p = ObjectSyncPolicy {
        grantable_resources: vec!["Ingress.networking.k8s.io".into(), "Event".into()],
        privileged_resources: vec!["Ingress.networking.k8s.io".into()],
        allowed_resources: vec!["Event".into()],
        ..Default::default()
    };
    let o = object(serde_json::json!({"metadata": {"name": "x"}}));
    // --privileged-resource on one name holds for the alias.
    assert!(p.must_be_named(&resource("extensions", "Ingress"), &o));
    assert!(!p.must_be_named(&resource("events.k8s.io", "Event"), &o));
    assert!(
        p.check(Some("a"), "a", "events.k8s.io", "Event", &[])
            .is_ok()
    );
    // A grant naming one name admits the alias.
    let g = grant(&[("t1", None)], &[("networking.k8s.io", "Ingress")]);
    assert!(grant_admits(
        &g,
        "t1",
        None,
        &resource("extensions", "Ingress"),
        true
    ));
}

#[test]
fn kubesyncs_own_kinds_are_never_copied_by_an_untrusted_declaration() {
    let p = ObjectSyncPolicy {
        trusted_namespaces: vec!["kubesync-system".into()],
        ..Default::default()
    };
    for kind in ["ObjectSync", "SyncGrant", "RemoteCluster"] {
        let r = p
            .check(Some("t1"), "t1", "kubesync.io", kind, &[])
            .expect_err(kind);
        assert_eq!(r.reason, "ResourceNotAllowed");
        assert!(r.message.contains("kubesync's own kinds"), "{}", r.message);
    }
    assert!(
        p.check(
            Some("kubesync-system"),
            "kubesync-system",
            "kubesync.io",
            "ObjectSync",
            &[]
        )
        .is_ok()
    );
    assert!(
        p.check(None, "apps", "kubesync.io", "ObjectSync", &[])
            .is_ok()
    );
}

#[test]
fn adoption_needs_a_grant_that_says_so_and_a_copy_is_never_consent() {
    let cm = resource("", "ConfigMap");
    let mut g = grant(&[("t1", None)], &[]);
    assert!(grant_admits(&g, "t1", None, &cm, false));
    assert!(!grant_adopts(&g, "t1", None, &cm, false));
    g.adopt = true;
    assert!(grant_adopts(&g, "t1", None, &cm, false));
    assert!(!grant_adopts(&g, "t2", None, &cm, false));
    let p = ObjectSyncPolicy::default();
    let source = object(serde_json::json!({"metadata": {"name": "s"}}));
    let planted = object(
        serde_json::json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
        "metadata": {"name": "g", "namespace": "victim",
            "labels": {"kubesync.io/managed-by": "0000"}},
        "spec": {"from": [{"namespace": "t1"}], "kinds": [{"kind": "ConfigMap"}], "adopt": true}}),
    );
    assert!(!p.admits(&planted, "t1", None, &cm, &source));
    assert!(!p.adopts(&planted, "t1", None, &cm, &source));
}

#[test]
fn a_grant_object_from_the_store_is_read_as_a_syncgrant() {
    let p = ObjectSyncPolicy::default();
    let g = object(
        serde_json::json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
        "metadata": {"name": "g", "namespace": "victim"},
        "spec": {"from": [{"namespace": "t1"}], "kinds": [{"kind": "ConfigMap"}]}}),
    );
    let source = object(serde_json::json!({"metadata": {"name": "s"}}));
    assert!(p.admits(&g, "t1", None, &resource("", "ConfigMap"), &source));
    assert!(!p.admits(&g, "t1", None, &resource("", "Secret"), &source));
    let broken = object(
        serde_json::json!({"apiVersion": "kubesync.io/v1alpha1", "kind": "SyncGrant",
        "metadata": {"name": "g", "namespace": "victim"}, "spec": {"from": "everyone"}}),
    );
    assert!(!p.admits(&broken, "t1", None, &resource("", "ConfigMap"), &source));
}

#[test]
fn refusals_say_what_would_admit() {
    let m = refusal_message("t1", None, &resource("", "ConfigMap"), false, "victim");
    assert!(
        m.contains("SyncGrant in victim with from: [{namespace: t1}]"),
        "{m}"
    );
    let m = refusal_message(
        "t1",
        Some("hub"),
        &resource("rbac.authorization.k8s.io", "RoleBinding"),
        true,
        "victim",
    );
    assert!(
        m.contains("only when it names them") && m.contains("cluster: hub"),
        "{m}"
    );
    assert!(m.contains("kind: RoleBinding"), "{m}");
}

#[test]
fn a_source_the_service_account_may_not_read_is_refused_with_what_to_grant() {
    let who = kubesync::ActAs::service_account("t1", "copier").expect("identity");
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    assert_eq!(
        source_readable(&who, ("get", &ar, Some("t1"), Some("db")), Ok(true)),
        Ok(())
    );
    let no =
        source_readable(&who, ("get", &ar, Some("t1"), Some("db")), Ok(false)).expect_err("no");
    assert_eq!(no.reason, Reason::SourceForbidden);
    assert!(
        no.message.contains("ServiceAccount t1/copier")
            && no.message.contains("get on secrets in namespace t1"),
        "{}",
        no.message
    );
    let status = |code: u16| {
        kubesync::Error::Kube(kube::Error::Api(
            kube::core::Status::failure("no", "Forbidden")
                .with_code(code)
                .boxed(),
        ))
    };
    let unasked = source_readable(&who, ("list", &ar, Some("t1"), None), Err(status(403)))
        .expect_err("unasked");
    assert!(
        unasked.message.contains("impersonate"),
        "{}",
        unasked.message
    );
    let unreachable = source_readable(&who, ("list", &ar, Some("t1"), None), Err(status(503)))
        .expect_err("unreachable");
    assert!(
        !unreachable.message.contains("impersonate"),
        "{}",
        unreachable.message
    );
}

#[test]
fn a_copy_kubesync_has_no_record_of_making_is_removed_as_its_declaration_or_left() {
    let p = ObjectSyncPolicy {
        trusted_namespaces: vec!["kubesync-system".into()],
        default_service_account: Some("copier".into()),
        ..Default::default()
    };
    let at = |cluster: &str, ns: &str| DestinationRef::new(cluster, ns, "copy");
    let copier = kubesync::ActAs::service_account("t1", "copier").expect("a name");
    for (cluster, ns) in [(LOCAL, "t2"), (LOCAL, "kubesync-system"), ("east", "t1")] {
        assert_eq!(
            p.unrecorded(&at(cluster, ns), Some(&copier)),
            Unrecorded::As(copier.clone()),
            "as the identity the declaration acts as, wherever"
        );
    }
    assert_eq!(
        p.unrecorded(&at(LOCAL, "kubesync-system"), None),
        Unrecorded::Own,
        "no tenant writes a trusted namespace"
    );
    for (cluster, ns, words) in [
        (LOCAL, "t1", "namespace t1, which is not trusted"),
        ("east", "kubesync-system", "cluster east"),
        (LOCAL, "", "cluster-scoped"),
    ] {
        match p.unrecorded(&at(cluster, ns), None) {
            Unrecorded::Leave(why) => assert!(why.contains(words), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
