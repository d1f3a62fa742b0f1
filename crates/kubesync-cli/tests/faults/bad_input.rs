//! Scenario 6, bad input.

use std::time::{Duration, Instant};

use crate::common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync_testenv::{KubeconfigEntry, TestEnv, eventually, kubeconfig_yaml};

/// One hostile or invalid declaration that passes the CRD schema, and the condition it must
/// get: (type, status, reason).
struct Bad {
    kind: &'static str,
    name: &'static str,
    spec: String,
    expect: (&'static str, &'static str, &'static str),
}

fn object_sync(name: &'static str, spec: &str, expect: (&'static str, &'static str)) -> Bad {
    Bad {
        kind: "ObjectSync",
        name,
        spec: spec.to_string(),
        expect: (
            if matches!(expect.1, "NotAllSynced" | "AllSynced") {
                "Synced"
            } else {
                "Ready"
            },
            expect.0,
            expect.1,
        ),
    }
}

/// A declaration of `kind` whose `Ready` must be False with `reason`.
fn refused(kind: &'static str, name: &'static str, spec: &str, reason: &'static str) -> Bad {
    Bad {
        kind,
        name,
        spec: spec.to_string(),
        expect: ("Ready", "False", reason),
    }
}

fn invalid(name: &'static str, spec: &str) -> Bad {
    object_sync(name, spec, ("False", "InvalidSpec"))
}

/// The API of one kubesync kind (ObjectSyncs: in `apps`).
pub(crate) fn kubesync_api(env: &TestEnv, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase());
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubesync.io", "v1alpha1", kind),
        &plural,
    );
    let client = env.client().expect("client");
    if kind == "ObjectSync" {
        Api::namespaced_with(client, "apps", &ar)
    } else {
        Api::all_with(client, &ar)
    }
}

/// The condition `type_` of an object: (status, reason, message).
fn condition(obj: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    let c = obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?
        .clone();
    let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((text("status"), text("reason"), text("message")))
}

/// How long, after `tick` changes the healthy ObjectSync's source, its copies in `namespaces`
/// all hold the new value (median of `rounds`).
async fn propagation(
    env: &TestEnv,
    namespaces: &[String],
    rounds: u32,
    tick: &mut u32,
) -> Duration {
    let mut times = Vec::new();
    for _ in 0..rounds {
        *tick += 1;
        let value = tick.to_string();
        env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: healthy, namespace: apps}}\ndata: {{tick: \"{value}\"}}\n")).await.expect("source");
        let started = Instant::now();
        eventually("the healthy copies follow", T, || async {
            for ns in namespaces {
                let cm = Api::<ConfigMap>::namespaced(env.client().ok()?, ns)
                    .get_opt("healthy")
                    .await
                    .ok()??;
                if cm.data?.get("tick") != Some(&value) {
                    return None;
                }
            }
            Some(())
        })
        .await;
        times.push(started.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

/// Scenario 6, bad input: 30 invalid or hostile declarations that pass the CRD schema. Each
/// gets its condition with a reason and a message; the operator neither exits nor panics; a
/// healthy ObjectSync next to them keeps syncing: each of its source's changes is written
/// once into each copy while they are present (the audit log; its propagation time is
/// printed before and while they are present).
#[tokio::test]
async fn bad_input_gets_a_condition_and_no_noisy_neighbour() {
    let teams: Vec<String> = (0..5).map(|i| format!("team-{i}")).collect();
    let mut namespaces: Vec<&str> = vec!["apps", "kubesync"];
    namespaces.extend(teams.iter().map(String::as_str));
    let (env, other) = tokio::join!(
        operator_cluster_from(TestEnv::builder().name("faults").audit(true), &namespaces),
        TestEnv::builder().name("faults-other").start()
    );
    let other = other.expect("other");
    for ns in &teams {
        env.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{team: \"true\"}}}}\n"
        ))
        .await
        .expect("label");
    }
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps, labels: {app: cfg}}\ndata: {a: \"1\"}\n").await.expect("cm");
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other, namespace: apps}\ndata: {b: \"2\"}\n").await.expect("cm");
    // A source close to its size limit: a ConfigMap's data may hold 1 MiB; this one 4 KiB less.
    env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: huge, namespace: apps}}\ndata: {{blob: {}}}\n", "x".repeat(1_020 * 1024))).await.expect("huge");
    let running = start_trusting(&env, &["*"]);
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: healthy, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: healthy}\n  destinations: [{namespaceSelector: {matchLabels: {team: \"true\"}}}]\n").await.expect("healthy");
    let mut tick = 0;
    let before = propagation(&env, &teams, 11, &mut tick).await;

    // Kubeconfig Secrets: wrong key, garbage, an unreachable server, an untrusted CA.
    let secret = |name: &str, key: &str, value: &str| {
        serde_json::to_string(&serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "kubesync"},
            "stringData": {key: value}
        }))
        .expect("json")
    };
    let unreachable = kubeconfig_yaml(&[KubeconfigEntry {
        context: "gone",
        server: "https://127.0.0.1:1",
        ca_pem: env.ca_pem(),
        user: "admin",
        token: env.admin_token(),
    }]);
    let untrusted = kubeconfig_yaml(&[KubeconfigEntry {
        context: "untrusted",
        server: env.server(),
        ca_pem: other.ca_pem(),
        user: "admin",
        token: env.admin_token(),
    }]);
    for yaml in [
        secret("wrong-key", "config", &env.kubeconfig_yaml()),
        secret("garbage", "kubeconfig", "{{{ not: yaml"),
        secret("unreachable", "kubeconfig", &unreachable),
        secret("untrusted", "kubeconfig", &untrusted),
    ] {
        env.apply_yaml(&yaml).await.expect("secret");
    }
    let remote = |name: &'static str, secret: &str, reason: &'static str| {
        let spec = format!("kubeconfigSecretRef: {{namespace: kubesync, name: {secret}}}\n");
        refused("RemoteCluster", name, &spec, reason)
    };
    let long = "a".repeat(254);
    let prefix = "p".repeat(250);
    let bad = vec![
        invalid(
            "selector-operator",
            "source: {kind: ConfigMap, selector: {matchExpressions: [{key: app, operator: Near}]}}\ndestinations: [{namespace: team-0}]\n",
        ),
        invalid(
            "selector-values",
            "source: {kind: ConfigMap, selector: {matchExpressions: [{key: app, operator: In}]}}\ndestinations: [{namespace: team-0}]\n",
        ),
        invalid(
            "namespace-selector",
            "source: {kind: ConfigMap, name: settings}\ndestinations: [{namespaceSelector: {matchExpressions: [{key: team, operator: Near}]}}]\n",
        ),
        invalid(
            "selector-typo",
            "source: {kind: ConfigMap, selector: {matchLabels: {app: \"a(b\"}}}\ndestinations: [{namespace: team-0}]\n",
        ),
        invalid(
            "selector-key-space",
            "source: {kind: ConfigMap, selector: {matchExpressions: [{key: \"my app\", operator: Exists}]}}\ndestinations: [{namespace: team-0}]\n",
        ),
        invalid(
            "namespace-selector-value",
            "source: {kind: ConfigMap, name: settings}\ndestinations: [{namespace: \"*\", excludeNamespaces: [\"ab\"], namespaceSelector: {matchLabels: {Team: \"-x\"}}}]\n",
        ),
        refused(
            "RemoteCluster",
            "allowed-typo",
            "kubeconfigSecretRef: {namespace: kubesync, name: wrong-key}\nallowedNamespaces: {matchLabels: {tenant: \"a(b\"}}\n",
            "InvalidSpec",
        ),
        object_sync(
            "unknown-kind",
            "source: {group: demo.kubesync.io, kind: Gizmo, name: x}\ndestinations: [{namespace: team-0}]\n",
            ("False", "ResourceNotFound"),
        ),
        object_sync(
            "unknown-version",
            "source: {version: v9, kind: ConfigMap, name: settings}\ndestinations: [{namespace: team-0}]\n",
            ("False", "ResourceNotFound"),
        ),
        object_sync(
            "unknown-group",
            "source: {group: nowhere.example.com, kind: Thing, name: x}\ndestinations: [{namespace: team-0}]\n",
            ("False", "ResourceNotFound"),
        ),
        object_sync(
            "prefix-too-long",
            &format!(
                "source: {{kind: ConfigMap, selector: {{matchLabels: {{app: cfg}}}}}}\ndestinations: [{{namespace: team-0, namePrefix: {prefix}}}]\n"
            ),
            ("False", "NotAllSynced"),
        ),
        object_sync(
            "back-at-source",
            "source: {kind: ConfigMap, name: settings}\ndestinations: [{namespace: apps}]\n",
            ("False", "NotAllSynced"),
        ),
        object_sync(
            "patch-renames",
            "source: {kind: ConfigMap, name: settings}\ndestinations: [{namespace: team-0, name: renamed, patches: [{merge: {metadata: {name: elsewhere}}}]}]\n",
            ("False", "NotAllSynced"),
        ),
        object_sync(
            "source-missing",
            "source: {kind: ConfigMap, name: Not_There}\ndestinations: [{namespace: team-0}]\n",
            ("False", "SourceNotFound"),
        ),
        invalid(
            "cluster-scoped",
            "source: {group: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\ndestinations: [{namespace: team-0}]\n",
        ),
        object_sync(
            "unknown-remote",
            "source: {kind: ConfigMap, name: settings}\ndestinations: [{cluster: nowhere, namespace: team-0}]\n",
            ("False", "RemoteClusterNotFound"),
        ),
        invalid(
            "no-destinations",
            "source: {kind: ConfigMap, name: settings}\ndestinations: []\n",
        ),
        invalid(
            "rename-many",
            "source: {kind: ConfigMap, names: [settings, other]}\ndestinations: [{namespace: team-0, name: one}]\n",
        ),
        invalid(
            "bad-source-name",
            "source: {kind: ConfigMap, names: [\"..\"]}\ndestinations: [{namespace: team-0}]\n",
        ),
        object_sync(
            "near-the-limit",
            "source: {kind: ConfigMap, name: huge}\ndestinations: [{namespace: team-1}]\n",
            ("True", "AllSynced"),
        ),
        refused(
            "ClusterObjectSync",
            "no-source-namespace",
            "source: {kind: ConfigMap, name: settings}\ndestinations: [{namespace: team-0}]\n",
            "InvalidSpec",
        ),
        refused(
            "ClusterObjectSync",
            "namespaced-cluster-copy",
            "source: {group: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\ndestinations: [{namespace: team-0}]\n",
            "InvalidSpec",
        ),
        refused(
            "ResourceSync",
            "no-status-subresource",
            "resource: {version: v1, kind: ConfigMap}\nremoteCluster: unreachable\n",
            "NoStatusSubresource",
        ),
        refused(
            "ResourceSync",
            "hasty",
            "resource: {version: v1, kind: ConfigMap}\nremoteCluster: unreachable\nsecretNames: [creds]\nsecretRepairInterval: 1ms\n",
            "InvalidSpec",
        ),
        remote("missing-secret", "not-there", "KubeconfigSecretInvalid"),
        remote("wrong-key", "wrong-key", "KubeconfigSecretInvalid"),
        remote("garbage", "garbage", "KubeconfigInvalid"),
        remote("unreachable", "unreachable", "Unreachable"),
        remote("untrusted", "untrusted", "Unreachable"),
    ];
    // Two ObjectSyncs fighting over one copy: one of them reports the Conflict.
    let fighting = [("fight-a", "settings"), ("fight-b", "other")];
    let started = Instant::now();
    for b in &bad {
        let namespace = if b.kind == "ObjectSync" {
            "\n  namespace: apps"
        } else {
            ""
        };
        let spec: String = b.spec.lines().map(|l| format!("  {l}\n")).collect();
        env.apply_yaml(&format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: {}\nmetadata:\n  name: {}{namespace}\nspec:\n{spec}",
            b.kind, b.name
        ))
        .await
        .unwrap_or_else(|e| panic!("{} {} passes the schema: {e}", b.kind, b.name));
    }
    // What the CRD schema rules out never reaches kubesync: the apiserver refuses it at
    // admission, saying why (CEL rules, maxLength).
    let either = "give one object's name, or a selector and/or names";
    let at_admission = [
        (
            "name-and-selector",
            "{kind: ConfigMap, name: settings, selector: {matchLabels: {app: cfg}}}".to_string(),
            "[{namespace: team-0}]".to_string(),
            either,
        ),
        (
            "no-source",
            "{kind: ConfigMap}".into(),
            "[{namespace: team-0}]".into(),
            either,
        ),
        (
            "rename-too-long",
            "{kind: ConfigMap, name: settings}".into(),
            format!("[{{namespace: team-0, name: {long}}}]"),
            "may not be more than 253 bytes",
        ),
        (
            "namespace-glob",
            "{kind: ConfigMap, name: settings}".into(),
            "[{namespace: \"team-*\"}]".into(),
            "spec.destinations[0].namespace",
        ),
        (
            "bad-prefix",
            "{kind: ConfigMap, names: [settings]}".into(),
            "[{namespace: team-0, namePrefix: a/b}]".into(),
            "spec.destinations[0].namePrefix",
        ),
        (
            "kind-with-space",
            "{kind: \"Config Map\", name: settings}".into(),
            "[{namespace: team-0}]".into(),
            "spec.source.kind",
        ),
        (
            "invalid-patch",
            "{kind: ConfigMap, name: settings}".into(),
            "[{namespace: team-0, patches: [{}]}]".into(),
            "a patch gives exactly one of merge and json",
        ),
    ];
    for (name, source, destinations, why) in &at_admission {
        let err = env
            .apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  source: {source}\n  destinations: {destinations}\n"))
            .await
            .expect_err("refused at admission");
        assert!(err.to_string().contains(why), "{name}: {err}");
    }
    for (name, source) in fighting {
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  source: {{kind: ConfigMap, name: {source}}}\n  destinations: [{{namespace: team-2, name: contested}}]\n")).await.expect("fight");
    }
    let mut report = Vec::new();
    for b in &bad {
        let api = kubesync_api(&env, b.kind);
        let (type_, status, reason) = b.expect;
        let deadline = Instant::now() + T;
        let got = loop {
            let obj = api.get_opt(b.name).await.ok().flatten();
            let found = obj.as_ref().and_then(|o| condition(o, type_));
            match found {
                Some(c) if c.0 == status && c.1 == reason => break c,
                _ if Instant::now() > deadline => panic!(
                    "{} {}: no {type_}={status} {reason} after {T:?}; status: {}",
                    b.kind,
                    b.name,
                    obj.map(|o| o.data["status"].to_string())
                        .unwrap_or_default()
                ),
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        assert!(!got.2.is_empty(), "{} {}: a message", b.kind, b.name);
        // Every condition it has is said for people: no Rust Debug dump, bounded.
        let obj = api.get(b.name).await.expect("get");
        for c in obj.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let message = c["message"].as_str().unwrap_or_default();
            assert!(for_people(message), "{} {}: {message}", b.kind, b.name);
        }
        // The cause, not just "client error (Connect)".
        if b.name == "untrusted" {
            assert!(got.2.to_lowercase().contains("certificate"), "{}", got.2);
        }
        if b.name == "unreachable" {
            assert!(got.2.to_lowercase().contains("refused"), "{}", got.2);
        }
        report.push(format!(
            "{:<18} {:<24} {type_}={status} {reason}: {}",
            b.kind, b.name, got.2
        ));
    }
    let syncs = kubesync_api(&env, "ObjectSync");
    let conflicts = eventually(
        "one of the fighting ObjectSyncs reports the Conflict",
        T,
        || async {
            let mut conflicts = Vec::new();
            for (name, _) in fighting {
                let obj = syncs.get_opt(name).await.ok()??;
                let synced = condition(&obj, "Synced")?;
                if synced.0 == "False" {
                    conflicts.push(name);
                }
            }
            (conflicts.len() == 1).then_some(conflicts)
        },
    )
    .await;
    let reported_in = started.elapsed();
    let contested = Api::<ConfigMap>::namespaced(env.client().expect("client"), "team-2")
        .get("contested")
        .await
        .expect("the first one's copy");
    let winner = if conflicts[0] == "fight-a" { "b" } else { "a" };
    assert!(
        contested.data.unwrap_or_default().contains_key(winner),
        "the contested copy is the winner's"
    );
    let mark = env.audit().expect("audit").len();
    let during = propagation(&env, &teams, 11, &mut tick).await;
    // No noisy neighbour, counted: while the bad declarations are there, each of the 11
    // changes of the healthy source is written once into each of its 5 copies — no retry,
    // no conflict, no write starved or repeated.
    // (A write's line may be written after its copy is read: wait for them all.)
    let healthy_writes = eventually("the healthy writes in the audit log", T, || async {
        let n = env
            .audit()
            .expect("audit")
            .iter()
            .skip(mark)
            .filter(|e| {
                e.is_write()
                    && e.resource() == "configmaps"
                    && e.name() == "healthy"
                    && teams.iter().any(|t| t == e.namespace())
            })
            .count();
        (n >= 11 * teams.len()).then_some(n)
    })
    .await;
    assert_eq!(
        healthy_writes,
        11 * teams.len(),
        "one write per change and copy"
    );

    // The operator never panicked, and still runs (stop() checks it returns Ok).
    running.assert_no_panic();
    for line in &report {
        println!("  {line}");
    }
    println!(
        "bad input: {} declarations (+2 fighting), all reported {:.1} s after the first was applied, 0 panics; healthy neighbour: {} copies in {} ms before, {} ms with them",
        bad.len(),
        reported_in.as_secs_f64(),
        teams.len(),
        before.as_millis(),
        during.as_millis()
    );
    running.stop().await;
}
