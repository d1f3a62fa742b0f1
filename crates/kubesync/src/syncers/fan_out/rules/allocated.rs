//! Fields the apiserver allocates or controllers own, per kind: never copied, and never read
//! as a difference between a copy and what kubesync writes (pure).
//!
//! A copy is made from the live source, so it would carry what the apiserver allocated for
//! the source (a Service's cluster IP and node ports, a Job's generated selector and labels)
//! and what controllers wrote there (a Deployment's revision, a ServiceAccount's token
//! Secrets, a claim's bound volume). The apiserver refuses some of them in a copy
//! (`provided IP is already allocated`), and controllers rewrite the others at the copy, which
//! kubesync would then revert for ever. So [`strip`] removes them from the copy kubesync
//! writes, and [`comparable`] removes them from the copy it holds before comparing, where the
//! desired copy does not set them: the copy's own allocations never read as drift.
//!
//! A field a destination's patch sets (a pinned node port, a claim bound to a given volume)
//! is written and compared like any other: where the apiserver refuses it, that destination
//! says why (`Error`). Fields marked [`Rule::pinnable`] `false` are also dropped from the
//! copies kubesync holds in its stores ([`strip_held`]), before their large values are held
//! as digests.
//!
//! [`RULES`] is the table; the book's ObjectSync chapter lists it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde_json::Value;

/// One field never copied.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The kind's API group (`""`: the core group).
    pub group: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// The field: a path of keys from the object's root (`metadata`, `spec`, …); `*` is any
    /// element of a list. Under `metadata`, only `labels` and `annotations` are read.
    pub path: &'static [&'static str],
    /// When the source's value is kept after all (given the object and the value).
    pub keep: Option<fn(&DynamicObject, &Value) -> bool>,
    /// Whether a destination's patch may set it (a node port, a volume); otherwise it is never
    /// written by kubesync at all.
    pub pinnable: bool,
    /// Why it is not copied.
    pub why: &'static str,
}

fn headless(_: &DynamicObject, v: &Value) -> bool {
    v == "None" || *v == serde_json::json!(["None"])
}

fn manual_selector(obj: &DynamicObject, _: &Value) -> bool {
    obj.data.pointer("/spec/manualSelector") == Some(&Value::Bool(true))
}

/// A Service that asks for more than the default single IP family keeps its families.
fn not_single_stack(obj: &DynamicObject, _: &Value) -> bool {
    obj.data
        .pointer("/spec/ipFamilyPolicy")
        .and_then(Value::as_str)
        .is_some_and(|p| p != "SingleStack")
}

/// A ServiceAccount that restricts its Pods to the Secrets it lists keeps its list.
fn enforces_mountable_secrets(obj: &DynamicObject, _: &Value) -> bool {
    obj.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/enforce-mountable-secrets"))
        .is_some_and(|v| v == "true")
}

/// Any Secret but a service-account token keeps its data and annotations.
fn not_a_token(obj: &DynamicObject, _: &Value) -> bool {
    obj.data.get("type").and_then(Value::as_str) != Some("kubernetes.io/service-account-token")
}

const JOB_LABELS: [&str; 4] = [
    "controller-uid",
    "job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
];

/// Every field never copied, by kind.
pub const RULES: &[Rule] = &[
    Rule {
        group: "",
        kind: "Service",
        path: &["spec", "clusterIP"],
        keep: Some(headless),
        pinnable: true,
        why: "allocated by the apiserver for each Service (a headless Service's `None` is copied)",
    },
    Rule {
        group: "",
        kind: "Service",
        path: &["spec", "clusterIPs"],
        keep: Some(headless),
        pinnable: true,
        why: "allocated by the apiserver for each Service (a headless Service's `[None]` is copied)",
    },
    Rule {
        group: "",
        kind: "Service",
        path: &["spec", "ports", "*", "nodePort"],
        keep: None,
        pinnable: true,
        why: "allocated by the apiserver for each NodePort and LoadBalancer Service",
    },
    Rule {
        group: "",
        kind: "Service",
        path: &["spec", "healthCheckNodePort"],
        keep: None,
        pinnable: true,
        why: "allocated by the apiserver for a LoadBalancer Service with `externalTrafficPolicy: Local`",
    },
    Rule {
        group: "",
        kind: "Service",
        path: &["spec", "ipFamilies"],
        keep: Some(not_single_stack),
        pinnable: true,
        why: "filled in from the source cluster's IP families (kept when `ipFamilyPolicy` asks for dual stack)",
    },
    Rule {
        group: "",
        kind: "Service",
        path: &["spec", "ipFamilyPolicy"],
        keep: Some(not_single_stack),
        pinnable: true,
        why: "defaulted to `SingleStack` by the apiserver (other policies are copied)",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["spec", "selector"],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid (copied with `manualSelector: true`)",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["metadata", "labels", JOB_LABELS[0]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["metadata", "labels", JOB_LABELS[1]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["metadata", "labels", JOB_LABELS[2]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["metadata", "labels", JOB_LABELS[3]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["spec", "template", "metadata", "labels", JOB_LABELS[0]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["spec", "template", "metadata", "labels", JOB_LABELS[1]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["spec", "template", "metadata", "labels", JOB_LABELS[2]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &["spec", "template", "metadata", "labels", JOB_LABELS[3]],
        keep: Some(manual_selector),
        pinnable: false,
        why: "generated by the apiserver from the Job's uid and name",
    },
    Rule {
        group: "batch",
        kind: "Job",
        path: &[
            "metadata",
            "annotations",
            "batch.kubernetes.io/job-tracking",
        ],
        keep: None,
        pinnable: false,
        why: "written by the job controller of Kubernetes before 1.27",
    },
    Rule {
        group: "",
        kind: "ServiceAccount",
        path: &["secrets"],
        keep: Some(enforces_mountable_secrets),
        pinnable: false,
        why: "the token Secrets of the source's namespace (kept with `kubernetes.io/enforce-mountable-secrets: \"true\"`)",
    },
    Rule {
        group: "",
        kind: "Secret",
        path: &["data", "token"],
        keep: Some(not_a_token),
        pinnable: false,
        why: "a service-account token: signed for the source's account; the token controller fills the copy's",
    },
    Rule {
        group: "",
        kind: "Secret",
        path: &["data", "ca.crt"],
        keep: Some(not_a_token),
        pinnable: false,
        why: "a service-account token's: the token controller fills the copy's",
    },
    Rule {
        group: "",
        kind: "Secret",
        path: &["data", "namespace"],
        keep: Some(not_a_token),
        pinnable: false,
        why: "a service-account token's namespace: the token controller fills the copy's",
    },
    Rule {
        group: "",
        kind: "Secret",
        path: &[
            "metadata",
            "annotations",
            "kubernetes.io/service-account.uid",
        ],
        keep: Some(not_a_token),
        pinnable: false,
        why: "a service-account token's account uid: a wrong one makes the token controller delete the copy",
    },
    Rule {
        group: "",
        kind: "Secret",
        path: &["metadata", "labels", "kubernetes.io/legacy-token-last-used"],
        keep: Some(not_a_token),
        pinnable: false,
        why: "written by the apiserver when the source token is used",
    },
    Rule {
        group: "",
        kind: "Secret",
        path: &[
            "metadata",
            "labels",
            "kubernetes.io/legacy-token-invalid-since",
        ],
        keep: Some(not_a_token),
        pinnable: false,
        why: "written by the legacy token cleaner for the source token",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &["spec", "volumeName"],
        keep: None,
        pinnable: true,
        why: "the volume bound to the source claim; a copy binds its own",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &["metadata", "annotations", "pv.kubernetes.io/bind-completed"],
        keep: None,
        pinnable: false,
        why: "written by the volume binder for the source claim",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &[
            "metadata",
            "annotations",
            "pv.kubernetes.io/bound-by-controller",
        ],
        keep: None,
        pinnable: false,
        why: "written by the volume binder for the source claim",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &[
            "metadata",
            "annotations",
            "volume.beta.kubernetes.io/storage-provisioner",
        ],
        keep: None,
        pinnable: false,
        why: "written by the volume binder for the source claim",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &[
            "metadata",
            "annotations",
            "volume.kubernetes.io/storage-provisioner",
        ],
        keep: None,
        pinnable: false,
        why: "written by the volume binder for the source claim",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &[
            "metadata",
            "annotations",
            "volume.kubernetes.io/selected-node",
        ],
        keep: None,
        pinnable: false,
        why: "written by the scheduler for the source claim's first consumer",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &[
            "metadata",
            "annotations",
            "volume.kubernetes.io/storage-resizer",
        ],
        keep: None,
        pinnable: false,
        why: "written by the volume expander for the source claim",
    },
    Rule {
        group: "",
        kind: "PersistentVolumeClaim",
        path: &["metadata", "annotations", "pv.kubernetes.io/migrated-to"],
        keep: None,
        pinnable: false,
        why: "written by the volume controllers for the source claim",
    },
    Rule {
        group: "",
        kind: "Pod",
        path: &["spec", "nodeName"],
        keep: None,
        pinnable: true,
        why: "the node the scheduler bound the source Pod to",
    },
    Rule {
        group: "",
        kind: "Pod",
        path: &["spec", "ephemeralContainers"],
        keep: None,
        pinnable: false,
        why: "added to the source Pod by `kubectl debug`; the apiserver refuses them on create",
    },
    Rule {
        group: "",
        kind: "Pod",
        path: &["spec", "priority"],
        keep: None,
        pinnable: false,
        why: "set by admission from `priorityClassName` (the copy's cluster sets its own)",
    },
    Rule {
        group: "",
        kind: "Pod",
        path: &["spec", "preemptionPolicy"],
        keep: None,
        pinnable: false,
        why: "set by admission from `priorityClassName` (the copy's cluster sets its own)",
    },
    Rule {
        group: "apps",
        kind: "Deployment",
        path: &[
            "metadata",
            "annotations",
            "deployment.kubernetes.io/revision",
        ],
        keep: None,
        pinnable: false,
        why: "the source's rollout revision, kept by the deployment controller",
    },
    Rule {
        group: "apps",
        kind: "DaemonSet",
        path: &[
            "metadata",
            "annotations",
            "deprecated.daemonset.template.generation",
        ],
        keep: None,
        pinnable: false,
        why: "the source's template generation, kept by the daemon set controller",
    },
    Rule {
        group: "autoscaling",
        kind: "HorizontalPodAutoscaler",
        path: &[
            "metadata",
            "annotations",
            "autoscaling.alpha.kubernetes.io/current-metrics",
        ],
        keep: None,
        pinnable: false,
        why: "the source's status, as autoscaling/v1 shows it",
    },
    Rule {
        group: "autoscaling",
        kind: "HorizontalPodAutoscaler",
        path: &[
            "metadata",
            "annotations",
            "autoscaling.alpha.kubernetes.io/conditions",
        ],
        keep: None,
        pinnable: false,
        why: "the source's status, as autoscaling/v1 shows it",
    },
];

/// The rules of `group`/`kind`.
pub fn rules_of<'a>(group: &'a str, kind: &'a str) -> impl Iterator<Item = &'static Rule> + 'a {
    RULES
        .iter()
        .filter(move |r| r.group == group && r.kind == kind)
}

/// The group and kind of `obj`, from its `apiVersion` and `kind`.
fn group_kind(obj: &DynamicObject) -> Option<(&str, &str)> {
    let types = obj.types.as_ref()?;
    let group = match types.api_version.split_once('/') {
        Some((group, _)) => group,
        None => "",
    };
    Some((group, types.kind.as_str()))
}

/// Removes from the copy kubesync will write every field of [`RULES`] for its kind (unless
/// the rule keeps the source's value).
pub fn strip(copy: &mut DynamicObject) {
    strip_where(copy, |_| true);
}

/// Removes from a copy as kubesync holds it the fields no destination may set
/// ([`Rule::pinnable`] `false`): they are never compared.
pub fn strip_held(copy: &mut DynamicObject) {
    strip_where(copy, |r| !r.pinnable);
}

fn strip_where(copy: &mut DynamicObject, which: impl Fn(&Rule) -> bool) {
    let Some((group, kind)) = group_kind(copy) else {
        return;
    };
    let (group, kind) = (group.to_string(), kind.to_string());
    let mut gone = Vec::new();
    for rule in rules_of(&group, &kind).filter(|r| which(r)) {
        for path in concrete(copy, rule.path) {
            let kept = match (rule.keep, lookup(copy, &path)) {
                (Some(keep), Some(value)) => keep(copy, &value),
                _ => false,
            };
            if !kept {
                gone.push(path);
            }
        }
    }
    for path in &gone {
        remove(copy, path);
    }
}

/// `existing` (a copy kubesync holds) as it is compared with `desired`: without the fields of
/// [`RULES`] for its kind that `desired` does not set (borrowed when there are none).
pub fn comparable<'a>(
    existing: &'a DynamicObject,
    desired: &DynamicObject,
) -> Cow<'a, DynamicObject> {
    let Some((group, kind)) = group_kind(desired).or_else(|| group_kind(existing)) else {
        return Cow::Borrowed(existing);
    };
    let absent: Vec<Vec<String>> = rules_of(group, kind)
        .flat_map(|r| concrete(existing, r.path))
        .filter(|path| lookup(desired, path).is_none())
        .collect();
    if absent.is_empty() {
        return Cow::Borrowed(existing);
    }
    let mut out = existing.clone();
    for path in &absent {
        remove(&mut out, path);
    }
    Cow::Owned(out)
}

/// What a replacement (a PUT of `body` over `existing`) keeps of the copy's own allocations:
/// every field of [`RULES`] that `existing` has and `body` does not set, carried over (a
/// claim's bound volume, which a PUT may not remove). Fields kubesync does not hold
/// ([`strip_held`]) are not carried: where the apiserver requires them (a Job's selector), the
/// replacement is refused and the copy recreated.
pub fn carry_over(existing: &DynamicObject, body: &mut DynamicObject) {
    let Some((group, kind)) = group_kind(body).or_else(|| group_kind(existing)) else {
        return;
    };
    let (group, kind) = (group.to_string(), kind.to_string());
    for rule in rules_of(&group, &kind) {
        for path in concrete(existing, rule.path) {
            if lookup(body, &path).is_none()
                && let Some(value) = lookup(existing, &path)
            {
                insert(body, &path, value.into_owned());
            }
        }
    }
}

/// The label or annotation map a `metadata` path names.
fn meta_map<'a>(obj: &'a DynamicObject, map: &str) -> Option<&'a BTreeMap<String, String>> {
    match map {
        "labels" => obj.metadata.labels.as_ref(),
        "annotations" => obj.metadata.annotations.as_ref(),
        _ => None,
    }
}

/// The paths in `obj` that `pattern` names (`*` expanded to each index of a list).
fn concrete(obj: &DynamicObject, pattern: &[&str]) -> Vec<Vec<String>> {
    match pattern {
        ["metadata", map, key] => meta_map(obj, map)
            .filter(|m| m.contains_key(*key))
            .map(|_| {
                vec![vec![
                    "metadata".to_string(),
                    map.to_string(),
                    key.to_string(),
                ]]
            })
            .unwrap_or_default(),
        pattern => concrete_in(&obj.data, pattern),
    }
}

fn concrete_in(value: &Value, pattern: &[&str]) -> Vec<Vec<String>> {
    let Some((first, rest)) = pattern.split_first() else {
        return vec![Vec::new()];
    };
    let children: Vec<(String, &Value)> = match (*first, value) {
        ("*", Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        (key, Value::Object(map)) => map
            .get(key)
            .map(|v| (key.to_string(), v))
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };
    children
        .into_iter()
        .flat_map(|(key, child)| {
            concrete_in(child, rest).into_iter().map(move |mut tail| {
                tail.insert(0, key.clone());
                tail
            })
        })
        .collect()
}

/// The value at `path` in `obj` (a label's or annotation's as a string).
fn lookup<'a>(obj: &'a DynamicObject, path: &[String]) -> Option<Cow<'a, Value>> {
    match path {
        [meta, map, key] if meta == "metadata" => meta_map(obj, map)?
            .get(key)
            .map(|v| Cow::Owned(Value::String(v.clone()))),
        path => path
            .iter()
            .try_fold(&obj.data, |v, key| match v {
                Value::Object(map) => map.get(key),
                Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            })
            .map(Cow::Borrowed),
    }
}

/// Removes the field at `path` from `obj` (labels and annotations from its metadata).
fn remove(obj: &mut DynamicObject, path: &[String]) {
    match path {
        [meta, map, key] if meta == "metadata" => {
            let map = match map.as_str() {
                "labels" => &mut obj.metadata.labels,
                "annotations" => &mut obj.metadata.annotations,
                _ => return,
            };
            if let Some(m) = map {
                m.remove(key);
            }
        }
        [parent @ .., last] => {
            let parent = parent.iter().try_fold(&mut obj.data, |v, key| match v {
                Value::Object(map) => map.get_mut(key),
                Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
                _ => None,
            });
            if let Some(Value::Object(map)) = parent {
                map.remove(last);
            }
        }
        [] => {}
    }
}

/// Sets the field at `path` of `obj` (an existing parent only).
fn insert(obj: &mut DynamicObject, path: &[String], value: Value) {
    match path {
        [meta, map, key] if meta == "metadata" => {
            let map = match map.as_str() {
                "labels" => &mut obj.metadata.labels,
                "annotations" => &mut obj.metadata.annotations,
                _ => return,
            };
            if let Some(v) = value.as_str() {
                map.get_or_insert_with(BTreeMap::new)
                    .insert(key.clone(), v.to_string());
            }
        }
        [parent @ .., last] => {
            let parent = parent.iter().try_fold(&mut obj.data, |v, key| match v {
                Value::Object(map) => map.get_mut(key),
                Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
                _ => None,
            });
            if let Some(Value::Object(map)) = parent {
                map.insert(last.clone(), value);
            }
        }
        [] => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let pinned =
            service(json!({"ports": [{"port": 80, "nodePort": 30080}], "type": "NodePort"}));
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
}
