//! The rules of [`super`], on objects as the apiserver shows them.

use super::*;
use serde_json::json;
use std::collections::BTreeMap;

fn obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("object")
}

fn service(spec: Value) -> DynamicObject {
    obj(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "a"},
        "spec": spec,
    }))
}

#[test]
fn a_services_allocations_are_not_copied_but_headless_is() {
    let mut s = service(json!({
        "type": "NodePort",
        "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"],
        "ports": [{"port": 80, "nodePort": 30080}, {"port": 443, "nodePort": 30443}],
        "healthCheckNodePort": 31000,
        "selector": {"app": "web"},
    }));
    strip(&mut s);
    assert_eq!(
        s.data["spec"],
        json!({"type": "NodePort", "ports": [{"port": 80}, {"port": 443}], "selector": {"app": "web"}})
    );
    let mut headless = service(json!({"clusterIP": "None", "clusterIPs": ["None"]}));
    strip(&mut headless);
    assert_eq!(
        headless.data["spec"],
        json!({"clusterIP": "None", "clusterIPs": ["None"]})
    );
    // Other kinds keep fields of the same name.
    let mut other = obj(json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"clusterIP": "x"},
    }));
    strip(&mut other);
    assert_eq!(other.data["spec"]["clusterIP"], "x");
}

#[test]
fn a_jobs_generated_selector_and_labels_are_not_copied_unless_manual() {
    let labels = json!({
        "controller-uid": "u", "job-name": "j",
        "batch.kubernetes.io/controller-uid": "u", "batch.kubernetes.io/job-name": "j",
        "app": "batch",
    });
    let job = |manual: bool| {
        obj(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j", "labels": labels},
            "spec": {
                "manualSelector": manual,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": []}},
            },
        }))
    };
    let mut generated = job(false);
    strip(&mut generated);
    let only_app = BTreeMap::from([("app".to_string(), "batch".to_string())]);
    assert_eq!(generated.metadata.labels.as_ref(), Some(&only_app));
    assert_eq!(generated.data["spec"].get("selector"), None);
    assert_eq!(
        generated.data["spec"]["template"]["metadata"]["labels"],
        json!({"app": "batch"})
    );
    let mut manual = job(true);
    let before = manual.clone();
    strip(&mut manual);
    assert_eq!(manual.data, before.data);
    assert_eq!(manual.metadata.labels, before.metadata.labels);
}

#[test]
fn controllers_fields_are_not_copied() {
    let mut sa = obj(json!({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"},
        "secrets": [{"name": "builder-token-x"}], "imagePullSecrets": [{"name": "registry"}],
    }));
    strip(&mut sa);
    assert_eq!(sa.data.get("secrets"), None);
    assert_eq!(sa.data["imagePullSecrets"], json!([{"name": "registry"}]));

    let mut pvc = obj(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "annotations": {
            "pv.kubernetes.io/bind-completed": "yes",
            "volume.kubernetes.io/selected-node": "n1",
            "team": "a",
        }},
        "spec": {"volumeName": "pv-1", "resources": {"requests": {"storage": "1Gi"}}},
    }));
    strip(&mut pvc);
    assert_eq!(
        pvc.data["spec"],
        json!({"resources": {"requests": {"storage": "1Gi"}}})
    );
    assert_eq!(
        pvc.metadata.annotations,
        Some(BTreeMap::from([("team".to_string(), "a".to_string())]))
    );

    let mut deploy = obj(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {"replicas": 2},
    }));
    strip(&mut deploy);
    assert_eq!(deploy.metadata.annotations, Some(BTreeMap::new()));
    assert_eq!(deploy.data["spec"]["replicas"], 2);
}

#[test]
fn a_copys_own_allocations_are_not_a_difference_but_a_pinned_value_is() {
    let desired = {
        let mut d =
            service(json!({"ports": [{"port": 80, "nodePort": 30080}], "type": "NodePort"}));
        strip(&mut d);
        d
    };
    let copy = service(json!({
        "type": "NodePort", "clusterIP": "10.0.0.9", "clusterIPs": ["10.0.0.9"],
        "ports": [{"port": 80, "nodePort": 31999}],
    }));
    let compared = comparable(&copy, &desired);
    assert!(matches!(compared, Cow::Owned(_)));
    assert_eq!(compared.data["spec"], desired.data["spec"]);
    // A node port a destination's patch pins is compared: another value is a difference.
    let pinned = service(json!({"ports": [{"port": 80, "nodePort": 30080}], "type": "NodePort"}));
    assert_eq!(
        comparable(&copy, &pinned).data["spec"]["ports"][0]["nodePort"],
        31999
    );
    // Nothing to leave out: the copy itself, not a clone.
    let plain = obj(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}),
    );
    assert!(matches!(comparable(&plain, &plain), Cow::Borrowed(_)));
}

#[test]
fn held_copies_lose_only_what_no_destination_may_set() {
    let mut job = obj(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "labels": {"job-name": "j"}},
        "spec": {"selector": {"matchLabels": {"controller-uid": "u"}}},
    }));
    strip_held(&mut job);
    assert_eq!(job.metadata.labels, Some(BTreeMap::new()));
    assert_eq!(job.data["spec"].get("selector"), None);
    let mut svc =
        service(json!({"clusterIP": "10.0.0.1", "ports": [{"port": 80, "nodePort": 30000}]}));
    let before = svc.data.clone();
    strip_held(&mut svc);
    assert_eq!(
        svc.data, before,
        "pinnable fields stay in the store, to be compared"
    );
}

#[test]
fn a_service_account_tokens_signed_parts_are_not_copied_other_secrets_are() {
    let secret = |type_: &str| {
        obj(json!({
            "apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": {"name": "t", "annotations": {
                "kubernetes.io/service-account.name": "builder",
                "kubernetes.io/service-account.uid": "u-1",
            }},
            "data": {"token": "dA==", "ca.crt": "Yw==", "namespace": "YQ==", "extra": "eA=="},
        }))
    };
    let mut token = secret("kubernetes.io/service-account-token");
    strip(&mut token);
    assert_eq!(token.data["data"], json!({"extra": "eA=="}));
    assert_eq!(
        token.metadata.annotations,
        Some(BTreeMap::from([(
            "kubernetes.io/service-account.name".to_string(),
            "builder".to_string()
        )]))
    );
    let mut opaque = secret("Opaque");
    let before = opaque.clone();
    strip(&mut opaque);
    assert_eq!(opaque.data, before.data);
    assert_eq!(opaque.metadata.annotations, before.metadata.annotations);
}

#[test]
fn ip_families_are_copied_only_when_the_policy_asks_for_them() {
    let mut single = service(json!({"ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]}));
    strip(&mut single);
    assert_eq!(single.data["spec"], json!({}));
    let mut dual =
        service(json!({"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv6", "IPv4"]}));
    let before = dual.data.clone();
    strip(&mut dual);
    assert_eq!(dual.data, before);
}

#[test]
fn a_replacement_keeps_the_copys_own_allocations() {
    let existing = obj(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"volumeName": "pv-9", "resources": {"requests": {"storage": "1Gi"}}},
    }));
    let mut body = obj(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"resources": {"requests": {"storage": "2Gi"}}},
    }));
    carry_over(&existing, &mut body);
    assert_eq!(body.data["spec"]["volumeName"], "pv-9");
    assert_eq!(body.data["spec"]["resources"]["requests"]["storage"], "2Gi");
    // A value the body sets (a pinned volume) is the body's.
    let mut pinned = body.clone();
    pinned.data["spec"]["volumeName"] = json!("pv-1");
    carry_over(&existing, &mut pinned);
    assert_eq!(pinned.data["spec"]["volumeName"], "pv-1");
}

#[test]
fn every_rule_names_a_field_and_says_why() {
    for r in RULES {
        assert!(!r.path.is_empty() && !r.why.is_empty(), "{r:?}");
        if r.path[0] == "metadata" {
            assert!(
                r.path.len() == 3 && matches!(r.path[1], "labels" | "annotations"),
                "{r:?}: under metadata only labels and annotations"
            );
        }
    }
}
