//! An upgrade from the previous release (`releases/previous`, built from this repository's
//! history by `scripts/previous-release.sh`; `make upgrade-test`) on a real control plane: the
//! old binary makes an estate of copies — ObjectSyncs with one source and with many, patches,
//! Report mode, `deletionPolicy: Orphan`, a tenant's ObjectSync, a ClusterObjectSync, a
//! RemoteCluster with a ResourceSync, reflector annotations — and stops; the new CRDs are
//! applied the documented way; the new binary takes over. From the apiserver's audit log: no
//! copy is deleted or recreated (every uid is the same), no copy in sync is written, nothing
//! new appears; every declaration is Ready again, except the tenant's, which the new release
//! refuses until it names a ServiceAccount (`ServiceAccountRequired`) — its copy stays. And a
//! rolling upgrade of three `--sharded` replicas, one at a time: nothing in sync is written,
//! and a change while old and new members work side by side is written once per copy. Also
//! (not needing the previous release): a CRD that tightens a field over an object stored
//! before.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{RunningBinary, T, add_remote_cluster, free_port, kubectl, request, sample};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync_testenv::{TestEnv, eventually};

/// The previous release's binary (`make upgrade-test` sets it).
fn previous() -> PathBuf {
    std::env::var_os("KUBESYNC_PREVIOUS_BINARY")
        .map(PathBuf::from)
        .expect(
            "KUBESYNC_PREVIOUS_BINARY: the previous release's binary (make upgrade-test builds it)",
        )
}

/// `binary run` on `env` as its admin, the ObjectSyncs of `apps` trusted, with reflector's
/// annotations honoured; its `/metrics` on the returned port.
fn run(binary: &std::path::Path, env: &TestEnv) -> (RunningBinary, u16) {
    let port = free_port();
    let child = std::process::Command::new(binary)
        .arg("run")
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path().expect("kubeconfig"))
        .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
        .args(["--metrics-address", &format!("127.0.0.1:{port}")])
        .arg("--metrics-insecure")
        .args(["--trusted-namespace", "apps", "--compat", "reflector"])
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("run kubesync");
    (RunningBinary(child), port)
}

/// Stops a replica with SIGTERM and waits for it to exit.
async fn stop(mut replica: RunningBinary) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &replica.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exited = tokio::task::spawn_blocking(move || replica.0.wait().expect("wait"))
        .await
        .expect("join");
    assert!(exited.success(), "a normal stop exits 0: {exited:?}");
}

/// Applies the previous release's CRDs, as `previous crds` prints them, as an admin would.
fn previous_crds(env: &TestEnv, previous: &std::path::Path) {
    let printed = std::process::Command::new(previous)
        .arg("crds")
        .output()
        .expect("previous crds");
    assert!(printed.status.success());
    let file = env.dir().join("previous-crds.yaml");
    std::fs::write(&file, &printed.stdout).expect("write");
    kubectl(
        env,
        &[
            "apply",
            "--server-side",
            "-f",
            file.to_str().expect("utf-8"),
        ],
    );
    common::crds_established(env);
}

/// The estate's declarations: (resource, namespace, name).
const DECLARATIONS: [(&str, &str, &str); 6] = [
    ("objectsyncs", "apps", "registry"),
    ("objectsyncs", "apps", "tls"),
    ("objectsyncs", "apps", "settings"),
    ("objectsyncs", "apps", "kept"),
    ("clusterobjectsyncs", "", "ca"),
    ("resourcesyncs", "", "widgets"),
];

fn resource(plural: &str) -> ApiResource {
    let kind = match plural {
        "objectsyncs" => "ObjectSync",
        "clusterobjectsyncs" => "ClusterObjectSync",
        "resourcesyncs" => "ResourceSync",
        _ => "RemoteCluster",
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk("kubesync.io", "v1alpha1", kind))
}

/// A declaration's Ready condition: (status, reason), once it has one.
async fn ready(
    env: &TestEnv,
    plural: &str,
    namespace: &str,
    name: &str,
) -> Option<(String, String)> {
    let ar = resource(plural);
    let client = env.client().expect("client");
    let api: Api<DynamicObject> = match namespace {
        "" => Api::all_with(client, &ar),
        ns => Api::namespaced_with(client, ns, &ar),
    };
    let obj = api.get_opt(name).await.ok()??;
    let conditions = obj.data["status"]["conditions"].as_array()?.clone();
    conditions.iter().find(|c| c["type"] == "Ready").map(|c| {
        (
            c["status"].as_str().unwrap_or_default().to_string(),
            c["reason"].as_str().unwrap_or_default().to_string(),
        )
    })
}

/// Every copy in the destination namespaces (ConfigMaps and Secrets), by (kind, namespace,
/// name) → uid.
async fn copies(env: &TestEnv) -> BTreeMap<(String, String, String), String> {
    let client = env.client().expect("client");
    let mut all = BTreeMap::new();
    for ns in ["team-a", "team-b", "team-c"] {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for c in configmaps
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
        {
            let name = c.metadata.name.clone().unwrap_or_default();
            if name != "kube-root-ca.crt" {
                all.insert(
                    ("ConfigMap".into(), ns.into(), name),
                    c.metadata.uid.unwrap_or_default(),
                );
            }
        }
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        for s in secrets
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
        {
            let name = s.metadata.name.clone().unwrap_or_default();
            all.insert(
                ("Secret".into(), ns.into(), name),
                s.metadata.uid.unwrap_or_default(),
            );
        }
    }
    all
}

/// Waits until the replica on `port` has reconciled every declaration of the estate once (its
/// gauges of each are served only then: its decisions on every copy are made, and sent), the
/// ResourceSync's sync counts its Widget, and reflector's copy is seen.
async fn reconciled_all(port: u16) {
    let series = [
        "kubesync_objectsync_ready{namespace=\"apps\",objectsync=\"registry\"}",
        "kubesync_objectsync_ready{namespace=\"apps\",objectsync=\"tls\"}",
        "kubesync_objectsync_ready{namespace=\"apps\",objectsync=\"settings\"}",
        "kubesync_objectsync_ready{namespace=\"apps\",objectsync=\"kept\"}",
        "kubesync_objectsync_ready{namespace=\"tenant\",objectsync=\"mine\"}",
        "kubesync_objectsync_ready{namespace=\"\",objectsync=\"ca\"}",
        "kubesync_resourcesync_objects{resourcesync=\"widgets\"}",
        "kubesync_compat_destinations{state=\"Synced\"}",
    ];
    eventually(
        "every declaration reconciled by the new release",
        T,
        || async {
            let (_, m) = request(port, "GET", "/metrics").await?;
            let missing: Vec<&str> = series
                .iter()
                .copied()
                .filter(|s| sample(&m, s).is_none_or(|v| v == 0.0 && !s.contains("tenant")))
                .collect();
            missing.is_empty().then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-test"]
async fn an_upgrade_from_the_previous_release_keeps_every_copy_and_writes_none_in_sync() {
    let previous = previous();
    let (env, remote) = tokio::join!(
        TestEnv::builder().name("upgrade").audit(true).start(),
        TestEnv::builder().name("upgrade-edge").start()
    );
    let (env, remote) = (env.expect("local"), remote.expect("remote"));
    previous_crds(&env, &previous);
    env.install_crds(kubesync_testenv::fixtures::WIDGET_CRD)
        .await
        .expect("widget crd");
    remote
        .install_crds(kubesync_testenv::fixtures::WIDGET_CRD)
        .await
        .expect("widget crd");
    for ns in [
        "apps",
        "team-a",
        "team-b",
        "team-c",
        "tenant",
        "kubesync-system",
    ] {
        env.create_namespace(ns).await.expect("ns");
    }
    let namespaces: Api<Namespace> = Api::all(env.client().expect("client"));
    for ns in ["team-a", "team-b", "team-c"] {
        namespaces
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"team": "true"}}})),
            )
            .await
            .expect("label");
    }
    remote.create_namespace("ops-a").await.expect("ns");
    remote.apply_yaml("apiVersion: demo.kubesync.io/v1\nkind: Widget\nmetadata: {name: w, namespace: ops-a}\nspec: {size: 3}\n").await.expect("widget");
    add_remote_cluster(&env, &remote, "edge", "kubesync-system").await;
    let estate = [
        // One source, two destinations, one of them patched.
        "apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData: {token: t0k3n}\n",
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: registry, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations:\n  - {namespace: team-a}\n  - namespace: team-b\n    patches: [{merge: {metadata: {labels: {patched: \"yes\"}}}}]\n",
        // Many sources by a selector, renamed.
        "apiVersion: v1\nkind: Secret\nmetadata: {name: tls-1, namespace: apps, labels: {share: tls}}\nstringData: {crt: one}\n",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: tls-2, namespace: apps, labels: {share: tls}}\nstringData: {crt: two}\n",
        "apiVersion: v1\nkind: Secret\nmetadata: {name: tls-3, namespace: apps, labels: {share: tls}}\nstringData: {crt: three}\n",
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: tls, namespace: apps}\nspec:\n  source: {kind: Secret, selector: {matchLabels: {share: tls}}}\n  destinations:\n  - namespaceSelector: {matchLabels: {team: \"true\"}}\n    namePrefix: platform-\n",
        // Report mode: plans, writes nothing.
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {level: debug}\n",
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: settings, namespace: apps}\nspec:\n  mode: Report\n  source: {kind: ConfigMap, name: settings}\n  destinations: [{namespace: team-c}]\n",
        // Orphan: copies outlive it.
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kept, namespace: apps}\ndata: {k: v}\n",
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: kept, namespace: apps}\nspec:\n  deletionPolicy: Orphan\n  source: {kind: ConfigMap, name: kept}\n  destinations: [{namespace: team-a}]\n",
        // A ClusterObjectSync.
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca, namespace: apps}\ndata: {ca.crt: pem}\n",
        "apiVersion: kubesync.io/v1alpha1\nkind: ClusterObjectSync\nmetadata: {name: ca}\nspec:\n  source: {kind: ConfigMap, namespace: apps, name: ca}\n  destinations:\n  - namespaceSelector: {matchLabels: {team: \"true\"}}\n    name: cluster-ca\n",
        // A tenant's ObjectSync, with the destination's consent.
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: mine, namespace: tenant}\ndata: {k: tenant}\n",
        "apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-tenant, namespace: team-c}\nspec:\n  from: [{namespace: tenant}]\n",
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: mine, namespace: tenant}\nspec:\n  source: {kind: ConfigMap, name: mine}\n  destinations: [{namespace: team-c}]\n",
        // Reflector's annotations.
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: mirrored\n  namespace: apps\n  annotations:\n    reflector.v1.k8s.emberstack.com/reflection-allowed: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-enabled: \"true\"\n    reflector.v1.k8s.emberstack.com/reflection-auto-namespaces: team-b\nstringData: {token: mirrored}\n",
        // A RemoteCluster's Widgets synced down.
        "apiVersion: kubesync.io/v1alpha1\nkind: ResourceSync\nmetadata: {name: widgets}\nspec:\n  resource: {group: demo.kubesync.io, version: v1, kind: Widget}\n  remoteCluster: edge\n  namespacePrefix: ops-\n",
    ];
    for yaml in estate {
        env.apply_yaml(yaml).await.expect("estate");
    }

    // The previous release makes the copies.
    let (old, _) = run(&previous, &env);
    for (plural, ns, name) in DECLARATIONS {
        eventually(
            &format!("{plural} {ns}/{name} Ready under the previous release"),
            T,
            || async { (ready(&env, plural, ns, name).await?.0 == "True").then_some(()) },
        )
        .await;
    }
    eventually("the tenant's copy", T, || async {
        (ready(&env, "objectsyncs", "tenant", "mine").await?.0 == "True").then_some(())
    })
    .await;
    // registry 2, tls 3 × 3, kept 1, ca 3, the tenant's 1, reflector's 1 (Report mode: none).
    let expected = 2 + 3 * 3 + 1 + 3 + 1 + 1;
    let before = eventually(&format!("{expected} copies"), T, || async {
        let now = copies(&env).await;
        (now.len() == expected).then_some(now)
    })
    .await;
    stop(old).await;

    // The new CRDs, the documented way; then the new release.
    let crd = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd");
    kubectl(
        &env,
        &["apply", "--server-side", "-k", crd.to_str().expect("utf-8")],
    );
    let mark = env.audit().expect("audit").len();
    let (_new, port) = run(env!("CARGO_BIN_EXE_kubesync").as_ref(), &env);
    for (plural, ns, name) in DECLARATIONS {
        eventually(
            &format!("{plural} {ns}/{name} Ready under the new release"),
            T,
            || async { (ready(&env, plural, ns, name).await?.0 == "True").then_some(()) },
        )
        .await;
    }
    let tenant = eventually("the tenant's ObjectSync refused", T, || async {
        let (status, reason) = ready(&env, "objectsyncs", "tenant", "mine").await?;
        (status == "False").then_some(reason)
    })
    .await;
    assert_eq!(tenant, "ServiceAccountRequired");
    reconciled_all(port).await;

    // Every copy is the one the previous release made; none was written, none deleted.
    let after = copies(&env).await;
    assert_eq!(after, before, "copies deleted, recreated or added");
    let log = env.audit().expect("audit");
    let copy_writes: Vec<String> = log[mark..]
        .iter()
        .filter(|e| {
            e.is_write()
                && matches!(e.resource(), "configmaps" | "secrets")
                && e.namespace().starts_with("team-")
        })
        .map(kubesync_testenv::AuditEvent::describe)
        .collect();
    assert!(
        copy_writes.is_empty(),
        "copies in sync written: {copy_writes:?}"
    );
    let deletes: Vec<String> = log[mark..]
        .iter()
        .filter(|e| e.verb == "delete" || e.verb == "deletecollection")
        .map(|e| format!("{}/{}/{}", e.resource(), e.namespace(), e.name()))
        .collect();
    assert!(deletes.is_empty(), "deleted: {deletes:?}");
    // The Widget synced down by the previous release is the same object.
    let widgets = ApiResource::from_gvk(&GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"));
    let local: Api<DynamicObject> =
        Api::namespaced_with(env.client().expect("client"), "ops-a", &widgets);
    assert!(local.get_opt("w").await.expect("get").is_some());
    let widget_writes = log[mark..]
        .iter()
        .filter(|e| e.is_write() && e.resource() == "widgets")
        .count();
    assert_eq!(widget_writes, 0, "the Widget in sync was written");
}

/// A sharded replica of `binary` as the user `name` (in `system:masters`), with that identity.
fn member(binary: &std::path::Path, env: &TestEnv, name: &str) -> (RunningBinary, u16) {
    let kubeconfig = env.dir().join(format!("{name}.kubeconfig"));
    std::fs::write(
        &kubeconfig,
        env.kubeconfig_yaml_as(name).expect("kubeconfig"),
    )
    .expect("write");
    let port = free_port();
    let child = std::process::Command::new(binary)
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--telemetry-address", &format!("127.0.0.1:{port}")])
        .args(["--metrics-address", &format!("127.0.0.1:{port}")])
        .arg("--metrics-insecure")
        .args([
            "--sharded",
            "--identity",
            name,
            "--trusted-namespace",
            "team",
        ])
        .env("POD_NAMESPACE", "kubesync-system")
        .env("RUST_LOG", "warn")
        .spawn()
        .expect("run kubesync");
    (RunningBinary(child), port)
}

/// Waits until the members on `ports` have all settled one view of exactly them, and own the
/// `syncs` ObjectSyncs between them.
async fn settled(ports: &[u16], syncs: usize) {
    eventually(
        &format!("{} members settled", ports.len()),
        T * 2,
        || async {
            let mut owned = 0.0;
            for port in ports {
                let (_, m) = request(*port, "GET", "/metrics").await?;
                if sample(&m, "kubesync_shard_view_settled")? != 1.0
                    || sample(&m, "kubesync_shard_members")? != ports.len() as f64
                {
                    return None;
                }
                owned += sample(&m, "kubesync_shard_units{kind=\"ObjectSync\"}")?;
            }
            (owned == syncs as f64).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs the previous release's binary: make upgrade-test"]
async fn a_rolling_upgrade_of_sharded_replicas_writes_each_copy_once_per_change() {
    const SYNCS: usize = 12;
    const NAMESPACES: usize = 10;
    let previous = previous();
    let current: PathBuf = env!("CARGO_BIN_EXE_kubesync").into();
    let old_names = ["old-0", "old-1", "old-2"];
    let new_names = ["new-0", "new-1", "new-2"];
    let mut builder = TestEnv::builder().name("upgrade-sharded").audit(true);
    for name in old_names.iter().chain(&new_names) {
        builder = builder.user(*name, &["system:masters"]);
    }
    let env = builder.start().await.expect("start");
    previous_crds(&env, &previous);
    for ns in ["team", "kubesync-system"] {
        env.create_namespace(ns).await.expect("ns");
    }
    let namespaces: Api<Namespace> = Api::all(env.client().expect("client"));
    for i in 0..NAMESPACES {
        let ns = format!("dest-{i}");
        env.create_namespace(&ns).await.expect("ns");
        namespaces
            .patch(
                &ns,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"labels": {"fan-out": "yes"}}})),
            )
            .await
            .expect("label");
    }
    let set = |v: u32| {
        let env = &env;
        async move {
            for i in 0..SYNCS {
                env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm-{i}, namespace: team}}\ndata: {{version: \"{v}\"}}\n")).await.expect("source");
            }
        }
    };
    set(1).await;
    for i in 0..SYNCS {
        env.apply_yaml(&format!("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: sync-{i}, namespace: team}}\nspec:\n  source: {{kind: ConfigMap, name: cm-{i}}}\n  destinations:\n  - namespaceSelector: {{matchLabels: {{fan-out: \"yes\"}}}}\n")).await.expect("objectsync");
    }
    let all: Api<ConfigMap> = Api::all(env.client().expect("client"));
    let at = |v: u32| {
        let all = all.clone();
        async move {
            let copies = all
                .list(&ListParams::default().labels("kubesync.io/managed-by"))
                .await
                .ok()?;
            let uids: BTreeMap<(String, String), String> = copies
                .items
                .iter()
                .filter(|c| c.data.as_ref().and_then(|d| d.get("version")) == Some(&v.to_string()))
                .map(|c| {
                    let m = &c.metadata;
                    (
                        (
                            m.namespace.clone().unwrap_or_default(),
                            m.name.clone().unwrap_or_default(),
                        ),
                        m.uid.clone().unwrap_or_default(),
                    )
                })
                .collect();
            (uids.len() == SYNCS * NAMESPACES).then_some(uids)
        }
    };
    let mut replicas: Vec<(RunningBinary, u16)> = old_names
        .iter()
        .map(|n| member(&previous, &env, n))
        .collect();
    settled(&replicas.iter().map(|r| r.1).collect::<Vec<_>>(), SYNCS).await;
    let before = eventually("every copy at v1", T, || at(1)).await;
    let copy_writes = |from: usize| -> Vec<kubesync_testenv::AuditEvent> {
        env.audit().expect("audit")[from..]
            .iter()
            .filter(|e| {
                e.is_write()
                    && e.resource() == "configmaps"
                    && e.namespace().starts_with("dest-")
                    && e.code() != 429
            })
            .cloned()
            .collect()
    };

    // The new CRDs, then one replica at a time: the old one stops (SIGTERM: it drains and
    // leaves), a new one joins. In sync throughout: nothing is written.
    let crd = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd");
    kubectl(
        &env,
        &["apply", "--server-side", "-k", crd.to_str().expect("utf-8")],
    );
    let mark = env.audit().expect("audit").len();
    for (i, name) in new_names.iter().enumerate() {
        let (old, _) = std::mem::replace(&mut replicas[i], member(&current, &env, name));
        stop(old).await;
        settled(&replicas.iter().map(|r| r.1).collect::<Vec<_>>(), SYNCS).await;
        if i == 0 {
            // Old and new members at once: a change of every source is written once per copy,
            // by one of them.
            let written = copy_writes(mark);
            assert!(
                written.is_empty(),
                "{} copies in sync written",
                written.len()
            );
            let changed = env.audit().expect("audit").len();
            set(2).await;
            eventually("every copy at v2", T, || at(2)).await;
            // (A write's line may be written after its copy is read: wait for them all.)
            let written = eventually("a write of every copy at v2", T, || async {
                let written = copy_writes(changed);
                (written.len() >= SYNCS * NAMESPACES).then_some(written)
            })
            .await;
            assert!(written.iter().all(|e| e.succeeded()), "writes refused");
            let copies: std::collections::BTreeSet<(&str, &str)> =
                written.iter().map(|e| (e.namespace(), e.name())).collect();
            assert_eq!(
                (written.len(), copies.len()),
                (SYNCS * NAMESPACES, SYNCS * NAMESPACES),
                "each copy written once"
            );
        }
    }
    let after = eventually("every copy at v2", T, || at(2)).await;
    assert_eq!(after, before, "copies recreated or added");
    let log = env.audit().expect("audit");
    let deleted = log[mark..]
        .iter()
        .filter(|e| e.verb == "delete" && e.resource() == "configmaps")
        .count();
    assert_eq!(deleted, 0, "copies deleted");
    // Once every member is new: the next change is written once per copy too.
    let changed = log.len();
    set(3).await;
    eventually("every copy at v3", T, || at(3)).await;
    let written = eventually("a write of every copy at v3", T, || async {
        let written = copy_writes(changed);
        (written.len() >= SYNCS * NAMESPACES).then_some(written)
    })
    .await;
    assert_eq!(written.len(), SYNCS * NAMESPACES, "each copy written once");
}

/// A CRD that tightens a field (here: `spec.source.name` of ObjectSyncs, bounded to 5
/// characters) over an object stored before: the apiserver's validation ratcheting keeps it
/// working — the operator's status writes go through, and so does an update of its spec that
/// leaves that field as it is — while a new object that breaks the bound is refused.
#[tokio::test]
async fn a_tightened_crd_keeps_the_objects_stored_before_working() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env =
        common::operator_cluster("upgrade-ratchet", false, &["apps", "team-a", "team-b"]).await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: registry, namespace: apps}\nstringData: {token: t}\n").await.expect("source");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: legacy, namespace: apps}\nspec:\n  source: {kind: Secret, name: registry}\n  destinations: [{namespace: team-a}]\n").await.expect("objectsync");

    // The tightening, as a new release's CRD would bring it.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client().expect("client"));
    let mut crd = crds.get("objectsyncs.kubesync.io").await.expect("crd");
    for version in &mut crd.spec.versions {
        let schema = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut());
        let name = schema
            .and_then(|s| s.properties.as_mut()?.get_mut("spec"))
            .and_then(|s| s.properties.as_mut()?.get_mut("source"))
            .and_then(|s| s.properties.as_mut()?.get_mut("name"))
            .expect("spec.source.name");
        name.max_length = Some(5);
    }
    crds.replace("objectsyncs.kubesync.io", &Default::default(), &crd)
        .await
        .expect("tightened CRD");
    let objectsyncs: Api<DynamicObject> = Api::namespaced_with(
        env.client().expect("client"),
        "apps",
        &resource("objectsyncs"),
    );
    // Each attempt names a new object: one created before the new schema was in force would
    // be kept working by the very ratcheting under test, and never refused.
    let attempt = std::sync::atomic::AtomicUsize::new(0);
    eventually("the tightening in force", T, || async {
        let name = format!("new-{}", attempt.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let new = serde_json::json!({
            "apiVersion": "kubesync.io/v1alpha1", "kind": "ObjectSync",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"source": {"kind": "Secret", "name": "registry"}, "destinations": [{"namespace": "team-a"}]}
        });
        let refused = objectsyncs
            .patch(&name, &PatchParams::apply("test"), &Patch::Apply(new))
            .await;
        if refused.is_ok() {
            // Accepted under the old schema: gone again before the operator starts.
            let _ = objectsyncs.delete(&name, &Default::default()).await;
        }
        matches!(refused, Err(kube::Error::Api(s)) if s.code == 422).then_some(())
    })
    .await;

    // The operator works on the object stored before: its status is written, its copy made.
    let operator = common::start_trusting(&env, &["apps"]);
    eventually("the stored ObjectSync Ready", T, || async {
        (ready(&env, "objectsyncs", "apps", "legacy").await?.0 == "True").then_some(())
    })
    .await;
    let copies: Api<Secret> = Api::namespaced(env.client().expect("client"), "team-a");
    assert!(copies.get_opt("registry").await.expect("get").is_some());
    // Its spec changes elsewhere: accepted, and carried out.
    objectsyncs
        .patch(
            "legacy",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"destinations": [{"namespace": "team-a"}, {"namespace": "team-b"}]}})),
        )
        .await
        .expect("an update that leaves the tightened field as it is");
    let team_b: Api<Secret> = Api::namespaced(env.client().expect("client"), "team-b");
    eventually("the new destination's copy", T, || async {
        team_b.get_opt("registry").await.ok()?
    })
    .await;
    operator.assert_no_panic();
    operator.stop().await;
}
