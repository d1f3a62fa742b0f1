//! `--compat`: reflector's and kubernetes-replicator's annotations honoured as implicit
//! declarations, on a real control plane — as each tool documents them, and safe where they
//! are not: a same-named object kubesync did not make is never touched (an Event on the
//! source says so), the source is never written, edited or deleted copies are repaired, an
//! unreadable pattern matches nothing and says so while the others work, the tools' own
//! copies are taken over (migration), a deleted source's copies go also when it was deleted
//! while the operator was down, and an untrusted namespace's push needs its destinations'
//! consent. Writes are counted from the apiserver's audit log.

mod common;

use std::collections::BTreeMap;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kubesync::Cluster;
use kubesync_cli::compat::Tool;
use kubesync_cli::compat::declared::*;
use kubesync_cli::operator::OperatorOptions;
use kubesync_testenv::{TestEnv, eventually};

/// The user the operator runs as (its writes are told apart in the audit log).
const OPERATOR: &str = "kubesync-operator";

/// A control plane with an audit log, the operator's user, and these namespaces. Each
/// namespace's ServiceAccount `copier` (what its annotations act as outside the trusted
/// namespaces) may read and write ConfigMaps and Secrets in every one of them: RBAC is open,
/// so what these tests see refused is kubesync's own consent rules (the second wall).
async fn cluster(name: &str, namespaces: &[&str]) -> TestEnv {
    let mut all = namespaces.to_vec();
    all.push(RECORDS);
    let env = operator_cluster_from(
        TestEnv::builder()
            .name(name)
            .user(OPERATOR, &["system:masters"])
            .audit(true),
        &all,
    )
    .await;
    for ns in namespaces {
        let_copier_write(&env, ns, namespaces).await;
    }
    env
}

fn start(env: &TestEnv, tools: &[Tool], trusted: &[&str]) -> RunningOperator {
    start_operator(
        Cluster::new("local", env.client_as(OPERATOR).expect("client")),
        OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: trusted.iter().map(|t| t.to_string()).collect(),
                default_service_account: Some(COPIER.into()),
                ..Default::default()
            },
            compat: tools.to_vec(),
            compat_records: Some(RECORDS.into()),
            ..Default::default()
        },
    )
}

/// The operator's own namespace, where the records of the copies annotations made are kept.
const RECORDS: &str = "kubesync-system";

/// The operator's write requests to `resource` named `name` in `namespace`, from the audit
/// log.
fn operator_writes(env: &TestEnv, resource: &str, namespace: &str, name: &str) -> Vec<String> {
    env.audit()
        .expect("audit")
        .iter()
        .filter(|e| {
            e.is_write()
                && e.user.username == OPERATOR
                && e.resource() == resource
                && e.namespace() == namespace
                && e.name() == name
        })
        .map(|e| e.verb.clone())
        .collect()
}

fn annotations(o: &Option<BTreeMap<String, String>>) -> BTreeMap<String, String> {
    o.clone().unwrap_or_default()
}

/// Waits for a Warning Event on the source `namespace/name` whose note contains `text`.
async fn note_on(env: &TestEnv, namespace: &str, name: &str, text: &str) -> String {
    let event = event_where(env, namespace, &format!("an Event saying {text:?}"), |e| {
        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            && e.reason.as_deref() == Some("NotCopied")
            && e.note.as_deref().is_some_and(|n| n.contains(text))
    })
    .await;
    event.note.unwrap_or_default()
}

async fn secret_data(secrets: &Api<Secret>, name: &str) -> Option<String> {
    let s = secrets.get_opt(name).await.ok()??;
    let v = s.data?.get("password")?.0.clone();
    String::from_utf8(v).ok()
}

#[tokio::test]
async fn reflector_annotations_push_where_they_say_and_nowhere_unsafe() {
    let env = cluster(
        "compat-reflector",
        &["ops", "team-a", "team-b", "dev-x", "other"],
    )
    .await;
    let client = env.client().expect("client");
    let secrets = |ns: &str| Api::<Secret>::namespaced(client.clone(), ns);
    // Someone else's Secret of the same name in team-b, and reflector's own mirror in dev-x
    // (made before the swap: it is taken over).
    env.apply_yaml(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: team-b}\nstringData: {password: mine}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: dev-x\n  annotations:\n    reflector.v1.k8s.emberstack.com/reflects: ops/db\n    reflector.v1.k8s.emberstack.com/auto-reflects: \"True\"\n    reflector.v1.k8s.emberstack.com/reflected-version: \"1\"\nstringData: {password: old}\n",
    )
    .await
    .expect("objects there before");
    let theirs = secrets("team-b").get("db").await.expect("theirs");
    // The source: allowed in team-*, dev-* and its own namespace; automatic in four of them
    // (one pattern unreadable) and wherever a namespace is labelled mirror=yes.
    env.apply_yaml(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: ops\n  labels: {app: db}\n  annotations:\n    note: not copied\n    reflector.v1.k8s.emberstack.com/reflection-allowed: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces: \"team-.*,dev-.*,ops\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-enabled: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-namespaces: \"team-a,team-b,dev-x,ops,*\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-namespaces-selector: mirror=yes\ntype: Opaque\nstringData: {password: s3cret}\n",
    )
    .await
    .expect("source");
    let source = secrets("ops").get("db").await.expect("source");
    let source_uid = source.metadata.uid.clone().expect("uid");
    let running = start(&env, &[Tool::Reflector], &["ops"]);

    // A mirror in team-a, as reflector makes one: the data and type, no labels, no source
    // annotations, reflector's bookkeeping — and kubesync's marks.
    eventually("the mirror in team-a", T, || async {
        (secret_data(&secrets("team-a"), "db").await? == "s3cret").then_some(())
    })
    .await;
    let mirror = secrets("team-a").get("db").await.expect("mirror");
    let a = annotations(&mirror.metadata.annotations);
    assert_eq!(a[REFLECTS], "ops/db");
    assert_eq!(a[AUTO_REFLECTS], "True");
    assert_eq!(
        a[REFLECTED_VERSION],
        source.metadata.resource_version.clone().expect("rv")
    );
    assert!(a[REFLECTED_AT].ends_with("+00:00"), "{}", a[REFLECTED_AT]);
    assert!(!a.contains_key("note"), "reflector copies no annotation");
    let labels = mirror.metadata.labels.clone().unwrap_or_default();
    assert!(!labels.contains_key("app"), "reflector copies no label");
    assert_eq!(labels["kubesync.io/managed-by"], source_uid);
    assert_eq!(mirror.type_.as_deref(), Some("Opaque"));

    // reflector's own mirror is taken over and brought up to date.
    eventually("reflector's mirror in dev-x taken over", T, || async {
        let s = secrets("dev-x").get("db").await.ok()?;
        let managed = s.metadata.labels?.get("kubesync.io/managed-by")? == &source_uid;
        (managed && secret_data(&secrets("dev-x"), "db").await? == "s3cret").then_some(())
    })
    .await;

    // Someone else's Secret is left alone and the source says so; so does the unreadable
    // pattern, while the others work.
    let note = note_on(&env, "ops", "db", "namespace team-b").await;
    assert!(note.contains("left untouched"), "{note}");
    let note = note_on(&env, "ops", "db", "\"*\"").await;
    assert!(note.contains("matches no namespace"), "{note}");
    let still = secrets("team-b").get("db").await.expect("theirs");
    assert_eq!(
        (still.metadata.uid, still.metadata.resource_version),
        (
            theirs.metadata.uid.clone(),
            theirs.metadata.resource_version.clone()
        ),
        "never written"
    );
    assert!(operator_writes(&env, "secrets", "team-b", "db").is_empty());
    // Not allowed there: nothing in `other`; and the source, in a namespace its own pattern
    // names, is never written.
    assert!(secrets("other").get_opt("db").await.expect("get").is_none());
    assert!(operator_writes(&env, "secrets", "ops", "db").is_empty());

    // `kubesync compat list` shows the push and its state; `--as-objectsync` the ObjectSync
    // declaring the same, which the apiserver accepts.
    let listed = compat_list(&env, &[]);
    let row = listed
        .lines()
        .find(|l| l.starts_with("Secret ops/db\treflector\tpush\t"))
        .unwrap_or_else(|| panic!("no row for the push: {listed}"));
    assert!(
        row.contains("copies 2/3; someone else's object in team-b"),
        "{row}"
    );
    assert!(row.contains("matches no namespace"), "{row}");
    let yaml = compat_list(&env, &["--as-objectsync"]);
    let docs: Vec<kubesync_cli::crd::ObjectSync> = yaml
        .split("\n---\n")
        .filter_map(|d| serde_saphyr::from_str(d).ok())
        .collect();
    assert_eq!(docs.len(), 1, "{yaml}");
    let mut destinations: Vec<_> = docs[0]
        .spec
        .destinations
        .iter()
        .filter_map(|d| d.namespace.clone())
        .collect();
    destinations.sort();
    assert_eq!(destinations, ["dev-x", "team-a", "team-b"]);
    Api::<kubesync_cli::crd::ObjectSync>::namespaced(client.clone(), "ops")
        .create(
            &kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            },
            &docs[0],
        )
        .await
        .expect("the apiserver accepts the ObjectSync");

    // No version gate: an edited mirror is repaired, a deleted one made again.
    secrets("team-a")
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": "edited"}})),
        )
        .await
        .expect("edit the mirror");
    eventually("the edited mirror repaired", T, || async {
        (secret_data(&secrets("team-a"), "db").await? == "s3cret").then_some(())
    })
    .await;
    secrets("team-a")
        .delete("db", &DeleteParams::default())
        .await
        .expect("delete the mirror");
    eventually("the deleted mirror made again", T, || async {
        (secret_data(&secrets("team-a"), "db").await? == "s3cret").then_some(())
    })
    .await;

    // A namespace labelled later gets a mirror, and loses it with the label.
    env.apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-c, labels: {mirror: \"yes\"}}\n",
    )
    .await
    .expect("team-c");
    eventually("the mirror in the labelled namespace", T, || async {
        (secret_data(&secrets("team-c"), "db").await? == "s3cret").then_some(())
    })
    .await;
    Api::<Namespace>::all(client.clone())
        .patch(
            "team-c",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"mirror": null}}})),
        )
        .await
        .expect("unlabel");
    eventually("the mirror gone with the label", T, || async {
        secrets("team-c")
            .get_opt("db")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Reflection turned off on the source: its mirrors go; on again: they come back.
    let allowed = |value: &str| {
        serde_json::json!({"metadata": {"annotations": {
            "reflector.v1.k8s.emberstack.com/reflection-allowed": value}}})
    };
    secrets("ops")
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(allowed("false")),
        )
        .await
        .expect("turn reflection off");
    for ns in ["team-a", "dev-x"] {
        eventually(
            &format!("the mirror in {ns} gone with the consent"),
            T,
            || async {
                secrets(ns)
                    .get_opt("db")
                    .await
                    .ok()?
                    .is_none()
                    .then_some(())
            },
        )
        .await;
    }
    secrets("ops")
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(allowed("true")),
        )
        .await
        .expect("turn reflection on");
    for ns in ["team-a", "dev-x"] {
        eventually(&format!("the mirror in {ns} back"), T, || async {
            (secret_data(&secrets(ns), "db").await? == "s3cret").then_some(())
        })
        .await;
    }

    // The source deleted while the operator is down: its mirrors go once it is back (found by
    // their marks); someone else's Secret stays.
    running.stop().await;
    secrets("ops")
        .delete("db", &DeleteParams::default())
        .await
        .expect("delete the source");
    let running = start(&env, &[Tool::Reflector], &["ops"]);
    for ns in ["team-a", "dev-x"] {
        eventually(&format!("the mirror in {ns} gone"), T, || async {
            secrets(ns)
                .get_opt("db")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    }
    let still = secrets("team-b").get("db").await.expect("theirs stays");
    assert_eq!(still.metadata.uid, theirs.metadata.uid);
    assert!(operator_writes(&env, "secrets", "team-b", "db").is_empty());
    assert!(operator_writes(&env, "secrets", "ops", "db").is_empty());
    running.assert_no_panic();
    running.stop().await;
}

#[tokio::test]
async fn replicator_annotations_push_anchored_with_consent_and_their_removal_cleans_up() {
    let env = cluster(
        "compat-replicator",
        &["ops", "tenant", "team-a", "team-b", "team-a-extra"],
    )
    .await;
    let client = env.client().expect("client");
    let maps = |ns: &str| Api::<ConfigMap>::namespaced(client.clone(), ns);
    env.apply_yaml(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: labelled, labels: {shared: \"yes\"}}\n",
    )
    .await
    .expect("labelled");
    // `team-a|team-b` is exactly those two (replicator's `^team-a|team-b$` would also take
    // team-a-extra), plus every namespace labelled shared=yes.
    env.apply_yaml(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: ops\n  labels: {app: settings}\n  annotations:\n    replicator.v1.mittwald.de/replicate-to: \"team-a|team-b\"\n    replicator.v1.mittwald.de/replicate-to-matching: shared=yes\ndata: {b: \"2\", a: \"1\"}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: reader\n  namespace: ops\n  annotations: {replicator.v1.mittwald.de/replicate-to: team-a}\nrules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tenant-settings\n  namespace: tenant\n  annotations: {replicator.v1.mittwald.de/replicate-to: \".*\"}\ndata: {x: \"1\"}\n---\napiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-tenant, namespace: team-a}\nspec:\n  from: [{namespace: tenant}]\n",
    )
    .await
    .expect("sources");
    // The tenant also tries to push a Role everywhere (team-a's grant names no kinds; one of
    // its patterns is unreadable, and the Event saying so witnesses the reconcile), and to
    // pull a service-account token Secret that ops lets anyone pull: neither is written.
    env.apply_yaml(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: everything\n  namespace: tenant\n  annotations: {replicator.v1.mittwald.de/replicate-to: \".*,*\"}\nrules: [{apiGroups: [\"*\"], resources: [\"*\"], verbs: [\"*\"]}]\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: deployer, namespace: ops}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: deployer-token\n  namespace: ops\n  annotations:\n    kubernetes.io/service-account.name: deployer\n    replicator.v1.mittwald.de/replication-allowed: \"true\"\n    replicator.v1.mittwald.de/replication-allowed-namespaces: \".*\"\ntype: kubernetes.io/service-account-token\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: stolen\n  namespace: tenant\n  annotations: {replicator.v1.mittwald.de/replicate-from: ops/deployer-token}\n",
    )
    .await
    .expect("the tenant's attempts");
    let running = start(&env, &[Tool::Replicator], &["ops"]);

    for ns in ["team-a", "team-b", "labelled"] {
        eventually(&format!("the copy in {ns}"), T, || async {
            let cm = maps(ns).get_opt("settings").await.ok()??;
            (cm.data?.get("a")? == "1").then_some(())
        })
        .await;
    }
    let copy = maps("team-a").get("settings").await.expect("copy");
    let a = annotations(&copy.metadata.annotations);
    assert_eq!(a[REPLICATED_KEYS], "a,b");
    let source = maps("ops").get("settings").await.expect("source");
    assert_eq!(
        a[REPLICATED_FROM_VERSION],
        source.metadata.resource_version.clone().expect("rv")
    );
    assert!(a.contains_key(REPLICATED_AT));
    assert!(!a.contains_key(REPLICATE_TO), "the push is not copied");
    assert_eq!(
        copy.metadata
            .labels
            .clone()
            .unwrap_or_default()
            .get("app")
            .map(String::as_str),
        Some("settings"),
        "replicator copies labels"
    );
    // The Role too.
    let roles = Api::<Role>::namespaced(client.clone(), "team-a");
    eventually("the Role copied", T, || async {
        roles.get_opt("reader").await.ok()?.map(|_| ())
    })
    .await;
    // The tenant's push reaches only where a SyncGrant consents (team-a), not team-b.
    eventually("the tenant's copy in team-a", T, || async {
        maps("team-a")
            .get_opt("tenant-settings")
            .await
            .ok()?
            .map(|_| ())
    })
    .await;
    // Everything the operator will write has been written by now (its reconcile of
    // `settings` and of `tenant-settings` are done): nothing where it must not.
    for ns in ["team-a-extra", "ops"] {
        assert!(
            operator_writes(&env, "configmaps", ns, "settings").is_empty(),
            "{ns}"
        );
    }
    for ns in ["team-b", "labelled", "team-a-extra", "ops"] {
        assert!(
            operator_writes(&env, "configmaps", ns, "tenant-settings").is_empty(),
            "{ns}: no consent"
        );
    }
    assert!(operator_writes(&env, "configmaps", "tenant", "tenant-settings").is_empty());
    let note = note_on(
        &env,
        "tenant",
        "stolen",
        "not pulled from ops/deployer-token",
    )
    .await;
    assert!(note.contains("SyncGrant need not name"), "{note}");
    assert!(operator_writes(&env, "secrets", "tenant", "stolen").is_empty());
    // Its unreadable pattern's Event is published after the reconcile that wrote nothing.
    note_on(&env, "tenant", "everything", "\"*\"").await;
    for ns in ["team-a", "team-b", "ops", "labelled"] {
        assert!(
            operator_writes(&env, "roles", ns, "everything").is_empty(),
            "{ns}: a Role needs a grant that names it"
        );
    }

    // Removing the push removes its copies (replicator leaves them).
    maps("ops")
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                "replicator.v1.mittwald.de/replicate-to": null,
                "replicator.v1.mittwald.de/replicate-to-matching": null}}})),
        )
        .await
        .expect("remove the push");
    for ns in ["team-a", "team-b", "labelled"] {
        eventually(&format!("the copy in {ns} gone"), T, || async {
            maps(ns)
                .get_opt("settings")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    }
    assert!(
        maps("ops")
            .get_opt("settings")
            .await
            .expect("get")
            .is_some()
    );
    assert!(operator_writes(&env, "configmaps", "ops", "settings").is_empty());
    running.assert_no_panic();
    running.stop().await;
}

/// `kubesync compat list` on `env` with `args` more: its output.
fn compat_list(env: &TestEnv, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
        .args(["compat", "list", "--kubeconfig"])
        .arg(env.kubeconfig_path().expect("kubeconfig"))
        .args(args)
        .output()
        .expect("run kubesync compat list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The keys of a Secret and their values, decoded.
async fn secret_keys(secrets: &Api<Secret>, name: &str) -> Option<BTreeMap<String, String>> {
    let s = secrets.get_opt(name).await.ok()??;
    Some(
        s.data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect(),
    )
}

fn keys(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn pulls_need_the_sources_consent_bring_only_their_keys_and_take_only_those_back() {
    let env = cluster("compat-pull", &["ops", "team-a", "team-b"]).await;
    let client = env.client().expect("client");
    let secrets = |ns: &str| Api::<Secret>::namespaced(client.clone(), ns);
    let maps = |ns: &str| Api::<ConfigMap>::namespaced(client.clone(), ns);
    // Targets made before their sources (reflector leaves such a mirror empty for up to an
    // hour): team-a's with a key of its own; team-b's, which the source does not admit; a
    // ConfigMap pulled without consent (replicator copies ConfigMaps without asking); a
    // reflector mirror.
    env.apply_yaml(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: team-a\n  annotations: {replicator.v1.mittwald.de/replicate-from: ops/creds}\nstringData: {own: mine}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: team-b\n  annotations: {replicator.v1.mittwald.de/replicate-from: ops/creds}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  namespace: team-a\n  annotations: {replicator.v1.mittwald.de/replicate-from: ops/cfg}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: mirror\n  namespace: team-a\n  annotations: {reflector.v1.k8s.emberstack.com/reflects: ops/refl}\n",
    )
    .await
    .expect("targets");
    let running = start(&env, &[Tool::Reflector, Tool::Replicator], &[]);
    env.apply_yaml(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n  namespace: ops\n  annotations:\n    replicator.v1.mittwald.de/replication-allowed: \"true\"\n    replicator.v1.mittwald.de/replication-allowed-namespaces: team-a\nstringData: {password: s3cret, user: app}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: ops}\ndata: {internal: \"1\"}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: refl\n  namespace: ops\n  annotations:\n    reflector.v1.k8s.emberstack.com/reflection-allowed: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces: team-.*\nstringData: {token: t0k}\n",
    )
    .await
    .expect("sources");

    // The source's keys merged into the target's own, with replicator's bookkeeping.
    let merged = keys(&[("own", "mine"), ("password", "s3cret"), ("user", "app")]);
    eventually("team-a's pull", T, || async {
        (secret_keys(&secrets("team-a"), "creds").await? == merged).then_some(())
    })
    .await;
    let target = secrets("team-a").get("creds").await.expect("target");
    let a = annotations(&target.metadata.annotations);
    assert_eq!(a[REPLICATED_KEYS], "password,user");
    eventually("the reflector mirror filled", T, || async {
        (secret_keys(&secrets("team-a"), "mirror").await? == keys(&[("token", "t0k")]))
            .then_some(())
    })
    .await;
    let mirror = secrets("team-a").get("mirror").await.expect("mirror");
    let refl = secrets("ops").get("refl").await.expect("source");
    assert_eq!(
        annotations(&mirror.metadata.annotations)[REFLECTED_VERSION],
        refl.metadata.resource_version.expect("rv"),
        "reflector's bookkeeping on a pulled mirror"
    );
    // Refused where the source does not consent, for ConfigMaps too; said on the target.
    let note = note_on(&env, "team-b", "creds", "not pulled from ops/creds").await;
    assert!(
        note.contains("no such object consents to a pull into namespace team-b"),
        "{note}"
    );
    // A source that does not exist reads exactly as one that does not consent: naming objects
    // in other namespaces tells nobody which exist.
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata:\n  name: ghost\n  namespace: team-b\n  annotations: {replicator.v1.mittwald.de/replicate-from: ops/no-such}\n").await.expect("ghost");
    let missing = note_on(&env, "team-b", "ghost", "not pulled from ops/no-such").await;
    assert_eq!(missing.replace("ops/no-such", "ops/creds"), note);
    let note = note_on(&env, "team-a", "cfg", "not pulled from ops/cfg").await;
    assert!(note.contains("replication-allowed"), "{note}");
    let listed = compat_list(&env, &[]);
    for (row, state) in [
        (
            "Secret team-a/creds\treplicator\tpull\t",
            "from ops/creds: pulled",
        ),
        (
            "Secret team-b/creds\treplicator\tpull\t",
            "from ops/creds: refused",
        ),
        (
            "Secret team-a/mirror\treflector\tpull\t",
            "from ops/refl: pulled",
        ),
        (
            "ConfigMap team-a/cfg\treplicator\tpull\t",
            "from ops/cfg: refused",
        ),
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(row) && l.contains(state)),
            "{row}{state}: {listed}"
        );
    }
    assert!(operator_writes(&env, "secrets", "team-b", "creds").is_empty());
    assert!(operator_writes(&env, "configmaps", "team-a", "cfg").is_empty());
    assert_eq!(
        maps("team-a").get("cfg").await.expect("cfg").data,
        None,
        "nothing pulled"
    );

    // A pulled key edited in the target is repaired; a key that leaves the source leaves the
    // target; the target's own key stays.
    secrets("team-a")
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": "edited"}})),
        )
        .await
        .expect("edit");
    eventually("the edited key repaired", T, || async {
        (secret_keys(&secrets("team-a"), "creds").await? == merged).then_some(())
    })
    .await;
    secrets("ops")
        .patch(
            "creds",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(serde_json::json!([{"op": "remove", "path": "/data/user"}]))
                    .expect("patch"),
            ),
        )
        .await
        .expect("drop a key from the source");
    let smaller = keys(&[("own", "mine"), ("password", "s3cret")]);
    eventually("the dropped key gone from the target", T, || async {
        (secret_keys(&secrets("team-a"), "creds").await? == smaller).then_some(())
    })
    .await;

    // The sources deleted: the replicator pull's keys go (only those); the reflector mirror
    // keeps its data, as reflector does.
    for name in ["creds", "refl"] {
        secrets("ops")
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete the source");
    }
    eventually("only the target's own key left", T, || async {
        (secret_keys(&secrets("team-a"), "creds").await? == keys(&[("own", "mine")])).then_some(())
    })
    .await;
    let target = secrets("team-a").get("creds").await.expect("target");
    assert!(
        !annotations(&target.metadata.annotations).contains_key(REPLICATED_KEYS),
        "its bookkeeping goes with it"
    );
    assert_eq!(
        secret_keys(&secrets("team-a"), "mirror").await,
        Some(keys(&[("token", "t0k")]))
    );
    for name in ["creds", "refl", "cfg"] {
        assert!(operator_writes(&env, "secrets", "ops", name).is_empty());
        assert!(operator_writes(&env, "configmaps", "ops", name).is_empty());
    }
    running.assert_no_panic();
    running.stop().await;
}

#[tokio::test]
async fn the_version_gate_keeps_a_change_to_a_copy_until_the_source_changes() {
    let env = cluster("compat-gate", &["ops", "team-a"]).await;
    let client = env.client().expect("client");
    let secrets = |ns: &str| Api::<Secret>::namespaced(client.clone(), ns);
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  namespace: ops\n  annotations: {replicator.v1.mittwald.de/replicate-to: \"team-.*\"}\nstringData: {password: one}\n").await.expect("source");
    let running = start_operator(
        Cluster::new("local", env.client_as(OPERATOR).expect("client")),
        OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: vec!["ops".into()],
                ..Default::default()
            },
            compat: vec![Tool::Replicator],
            compat_version_gate: true,
            ..Default::default()
        },
    );
    eventually("the copy", T, || async {
        (secret_data(&secrets("team-a"), "db").await? == "one").then_some(())
    })
    .await;
    // (The copy's write may be logged after the copy is read.)
    let writes_before = eventually("the copy's write in the audit log", T, || async {
        let n = operator_writes(&env, "secrets", "team-a", "db").len();
        (n >= 1).then_some(n)
    })
    .await;
    let edited = secrets("team-a")
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": "mine"}})),
        )
        .await
        .expect("edit the copy");
    // Witnessed: a reconcile of the source that decided on a store showing the edit.
    let secret = |ns: &str| {
        kubesync::ObjectKey::new(
            "local",
            &kube::core::ApiResource::erase::<Secret>(&()),
            Some(ns.into()),
            "db",
        )
    };
    reconciled_after_seeing(
        &running.operator.context().expect("context"),
        &secret("team-a"),
        &edited.metadata.resource_version.expect("resourceVersion"),
        &secret("ops"),
    )
    .await;
    assert_eq!(
        operator_writes(&env, "secrets", "team-a", "db").len(),
        writes_before,
        "the edited copy is not written back"
    );
    // A reconcile of the source after the edit (a new namespace it selects) writes there, and
    // leaves the edited copy as it is.
    env.create_namespace("team-b").await.expect("team-b");
    eventually("the copy in team-b", T, || async {
        (secret_data(&secrets("team-b"), "db").await? == "one").then_some(())
    })
    .await;
    assert_eq!(
        secret_data(&secrets("team-a"), "db").await.as_deref(),
        Some("mine")
    );
    assert_eq!(
        operator_writes(&env, "secrets", "team-a", "db").len(),
        writes_before,
        "the edited copy is not written while the source stands still: {:?}",
        env.audit()
            .expect("audit")
            .iter()
            .filter(|e| e.is_write() && e.user.username == OPERATOR && e.name() == "db")
            .map(|e| format!(
                "{} {} {} {}",
                e.stage_timestamp,
                e.verb,
                e.code(),
                e.request_uri
            ))
            .collect::<Vec<_>>()
    );
    // The source changes: the copy follows it.
    secrets("ops")
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": "two"}})),
        )
        .await
        .expect("change the source");
    eventually("the copy follows the changed source", T, || async {
        (secret_data(&secrets("team-a"), "db").await? == "two").then_some(())
    })
    .await;
    running.assert_no_panic();
    running.stop().await;
}

#[tokio::test]
async fn pulls_of_roles_bindings_and_service_accounts_bring_only_their_field() {
    let env = cluster("compat-pull-rbac", &["ops", "team-a"]).await;
    let client = env.client().expect("client");
    let consent = "annotations:\n    replicator.v1.mittwald.de/replication-allowed: \"true\"\n    replicator.v1.mittwald.de/replication-allowed-namespaces: team-a";
    let pull = "annotations: {replicator.v1.mittwald.de/replicate-from: ops/app}";
    env.apply_yaml(&format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: app\n  namespace: ops\n  {consent}\nrules: [{{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: app\n  namespace: ops\n  {consent}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: app}}\nsubjects: [{{kind: ServiceAccount, name: app, namespace: team-a}}]\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n  namespace: ops\n  {consent}\nimagePullSecrets: [{{name: regcred}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: app\n  namespace: team-a\n  {pull}\n  labels: {{own: label}}\nrules: []\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: app\n  namespace: team-a\n  {pull}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: app}}\nsubjects: []\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: app\n  namespace: team-a\n  {pull}\n"
    ))
    .await
    .expect("sources and targets");
    // team-a is trusted: Roles and RoleBindings are kinds a grant must name elsewhere.
    let running = start(&env, &[Tool::Replicator], &["team-a"]);
    let roles = Api::<Role>::namespaced(client.clone(), "team-a");
    eventually("the Role's rules pulled", T, || async {
        let rules = roles.get("app").await.ok()?.rules?;
        (rules.len() == 1 && rules[0].verbs == ["get", "list"]).then_some(())
    })
    .await;
    let role = roles.get("app").await.expect("role");
    assert_eq!(
        role.metadata
            .labels
            .unwrap_or_default()
            .get("own")
            .map(String::as_str),
        Some("label"),
        "only the rules are the pull's"
    );
    let bindings =
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), "team-a");
    eventually("the RoleBinding's subjects pulled", T, || async {
        let subjects = bindings.get("app").await.ok()?.subjects?;
        (subjects.len() == 1 && subjects[0].name == "app").then_some(())
    })
    .await;
    let accounts =
        Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), "team-a");
    eventually(
        "the ServiceAccount's image pull secrets pulled",
        T,
        || async {
            let secrets = accounts.get("app").await.ok()?.image_pull_secrets?;
            (secrets.len() == 1 && secrets[0].name == "regcred").then_some(())
        },
    )
    .await;
    running.assert_no_panic();
    running.stop().await;
}

/// A tenant who received a copy knows its ObjectSync's uid (its `managed-by` label) and may
/// forge compat marks on an object of her own, naming any source: the cleanup of a source's
/// stale copies never takes a uid a live declaration holds, so the ObjectSync's copies
/// elsewhere stay.
#[tokio::test]
async fn forged_compat_marks_never_remove_another_declarations_copies() {
    let env = cluster("compat-forged", &["ops", "tenant", "team-a"]).await;
    let client = env.client().expect("client");
    let secrets = |ns: &str| Api::<Secret>::namespaced(client.clone(), ns);
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: shared, namespace: ops}\nstringData: {k: v}\n---\napiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: shared, namespace: ops}\nspec:\n  source: {kind: Secret, name: shared}\n  destinations: [{namespace: team-a}, {namespace: tenant}]\n").await.expect("an ObjectSync");
    let running = start(&env, &[Tool::Reflector, Tool::Replicator], &["ops"]);
    eventually("the ObjectSync's copies", T, || async {
        for ns in ["team-a", "tenant"] {
            secrets(ns).get_opt("shared").await.ok()??;
        }
        Some(())
    })
    .await;
    let copy = secrets("team-a").get("shared").await.expect("copy");
    let uid = copy.metadata.labels.clone().expect("labels")["kubesync.io/managed-by"].clone();
    // The tenant's forgery names ops/bait, a source with an unreadable pattern: the Event
    // about it is published after the reconcile the forgery triggers.
    env.apply_yaml(&format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: forged\n  namespace: tenant\n  labels: {{kubesync.io/declared-by: annotations, kubesync.io/managed-by: {uid}}}\n  annotations: {{kubesync.io/source: core/Secret/ops/bait}}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: bait\n  namespace: ops\n  annotations: {{replicator.v1.mittwald.de/replicate-to: \"nowhere,*\"}}\n")).await.expect("the forgery");
    note_on(&env, "ops", "bait", "\"*\"").await;
    let still = secrets("team-a")
        .get("shared")
        .await
        .expect("the copy stays");
    assert_eq!(still.metadata.uid, copy.metadata.uid);
    assert!(
        !operator_writes(&env, "secrets", "team-a", "shared")
            .iter()
            .any(|v| v == "delete"),
        "never deleted"
    );
    running.assert_no_panic();
    running.stop().await;
}

/// Attack 4 of the third round, in its compat form, across a restart: a tenant who may patch
/// two of the admins' Secrets in t2, but not delete them, writes compat marks on them while
/// the operator is down — on one the marks of her real push's copy (its source's uid), on the
/// other those of a declaration that never was — and then deletes her source. The operator,
/// started again, removes the copy its kept record holds (a ConfigMap in its own namespace)
/// and nothing else: never the admins' Secrets, never with a delete sent for them. Before,
/// the records of annotations were held in memory only, and a restart took every object with
/// both marks as a copy to delete with kubesync's rights.
#[tokio::test]
async fn forged_compat_marks_never_make_kubesync_delete_what_she_may_only_patch() {
    let env = operator_cluster_from(
        TestEnv::builder()
            .name("compat-forged-delete")
            .user(OPERATOR, &["system:masters"])
            .user("tina", &[])
            .audit(true),
        &["t1", "t2", RECORDS],
    )
    .await;
    let_copier_write(&env, "t1", &["t1", "t2"]).await;
    env.grant(
        "tina",
        Some("t2"),
        "tina",
        vec![k8s_openapi::api::rbac::v1::PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["secrets".into()]),
            verbs: ["get", "list", "watch", "patch"].map(String::from).to_vec(),
            ..Default::default()
        }],
    )
    .await
    .expect("she may patch in t2, not delete");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-t1, namespace: t2}\nspec:\n  from: [{namespace: t1}]\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: admin-tls, namespace: t2}\nstringData: {key: theirs}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: admin-key, namespace: t2}\nstringData: {key: theirs}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: app\n  namespace: t1\n  annotations: {replicator.v1.mittwald.de/replicate-to: t2}\nstringData: {k: v}\n").await.expect("apply");
    let client = env.client().expect("client");
    let t2: Api<Secret> = Api::namespaced(client.clone(), "t2");
    let t1: Api<Secret> = Api::namespaced(client.clone(), "t1");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), RECORDS);
    let source = t1.get("app").await.expect("her source");
    let uid = source.metadata.uid.clone().expect("uid");
    let running = start(&env, &[Tool::Replicator], &[]);
    let copy = eventually("her copy in t2, recorded", T, || async {
        let copy = t2.get_opt("app").await.ok()??;
        let records = maps
            .list(&kube::api::ListParams::default().labels("kubesync.io/record=annotations"))
            .await
            .ok()?;
        let kept = records.items.iter().any(|cm| {
            cm.data.as_ref().is_some_and(|d| {
                d.get(&format!("made.{uid}")).is_some_and(|m| m.len() == 12)
                    && !d.contains_key("openSince")
            })
        });
        kept.then_some(copy)
    })
    .await;
    running.assert_no_panic();
    running.stop().await;
    let before: Vec<Secret> = futures::future::join_all(
        ["admin-key", "admin-tls"].map(|n| async { t2.get(n).await.expect("theirs") }),
    )
    .await;
    // The forged uid sorts before any the apiserver gives, so its clean-up runs first.
    let forgeries = [
        ("admin-tls", uid.as_str()),
        ("admin-key", "00000000-0000-4000-8000-000000000000"),
    ];
    let hers = Api::<Secret>::namespaced(env.client_as("tina").expect("tina"), "t2");
    for (name, maker) in forgeries {
        let marks = serde_json::json!({"metadata": {
            "labels": {"kubesync.io/declared-by": "annotations", "kubesync.io/managed-by": maker},
            "annotations": {"kubesync.io/source": "core/Secret/t1/app", "kubesync.io/owner": "local/t1/app (Secret annotations)"},
        }});
        hers.patch(name, &PatchParams::default(), &Patch::Merge(&marks))
            .await
            .expect("she may patch it");
    }
    t1.delete("app", &DeleteParams::default())
        .await
        .expect("her source deleted");
    let running = start(&env, &[Tool::Replicator], &[]);
    eventually("her copy removed, and its record with it", T, || async {
        let gone = t2
            .get_opt("app")
            .await
            .ok()?
            .is_none_or(|c| c.metadata.uid != copy.metadata.uid);
        let records = maps
            .list(&kube::api::ListParams::default().labels("kubesync.io/record=annotations"))
            .await
            .ok()?;
        (gone && records.items.is_empty()).then_some(())
    })
    .await;
    for theirs in &before {
        let name = theirs.metadata.name.clone().unwrap_or_default();
        let now = t2.get(&name).await.expect("the admins' Secret stays");
        assert_eq!(
            now.metadata.uid, theirs.metadata.uid,
            "{name} never deleted"
        );
        assert!(now.metadata.deletion_timestamp.is_none(), "{name}");
        assert!(
            !operator_writes(&env, "secrets", "t2", &name)
                .iter()
                .any(|v| v == "delete"),
            "no delete was ever sent for {name}"
        );
    }
    running.assert_no_panic();
    running.stop().await;
}

/// Annotations outside the trusted namespaces act as their namespace's ServiceAccount (the
/// operator's `--default-service-account`), as an ObjectSync does: a replicator push from
/// `tenant` with consent (SyncGrants) in team-a and team-b is written where RBAC lets
/// tenant's copier write (team-a, as the ServiceAccount, by the audit log), and refused by
/// RBAC where it does not (team-b), said in an Event.
#[tokio::test]
async fn annotations_outside_the_trusted_namespaces_act_as_their_service_account() {
    let env = operator_cluster_from(
        TestEnv::builder()
            .name("compat-identity")
            .user(OPERATOR, &["system:masters"])
            .audit(true),
        &["tenant", "team-a", "team-b", RECORDS],
    )
    .await;
    let_copier_write(&env, "tenant", &["tenant", "team-a"]).await;
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-tenant, namespace: team-a}\nspec:\n  from: [{namespace: tenant}]\n---\napiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-tenant, namespace: team-b}\nspec:\n  from: [{namespace: tenant}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: tenant\n  annotations: {replicator.v1.mittwald.de/replicate-to: \"team-a,team-b\"}\ndata: {x: \"1\"}\n").await.expect("apply");
    let running = start(&env, &[Tool::Replicator], &[]);
    let team_a: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "team-a");
    eventually("copied into team-a", T, || async {
        team_a.get_opt("settings").await.ok()?
    })
    .await;
    // (Its line may be written after the copy is read.)
    let created = eventually("the copy's create in the audit log", T, || async {
        env.audit().expect("audit").into_iter().find(|e| {
            e.verb == "create"
                && e.resource() == "configmaps"
                && e.namespace() == "team-a"
                && e.name() == "settings"
        })
    })
    .await;
    assert_eq!(created.user.username, OPERATOR);
    assert_eq!(created.acting_user(), copier("tenant"));
    let note = note_on(&env, "tenant", "settings", "RBAC refuses").await;
    assert!(
        note.contains("team-b") && note.contains(&copier("tenant")),
        "{note}"
    );
    let team_b: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "team-b");
    assert!(team_b.get_opt("settings").await.expect("get").is_none());
    running.stop().await;
}
