//! Tests of the test environment itself, on real control planes.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kubesync_testenv::{TestEnv, eventually};

fn configmap(ns: &str, name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

fn proc_alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would show state Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')),
        Err(_) => false,
    }
}

#[tokio::test]
async fn two_environments_are_isolated() {
    let (a, b) = tokio::join!(
        TestEnv::builder().name("iso-a").start(),
        TestEnv::builder().name("iso-b").start()
    );
    let (a, b) = (a.expect("start a"), b.expect("start b"));
    assert_ne!(a.server(), b.server());
    a.create_namespace("only-in-a").await.expect("create ns");
    let cms: Api<ConfigMap> = Api::namespaced(a.client().expect("client"), "only-in-a");
    cms.create(&PostParams::default(), &configmap("only-in-a", "x"))
        .await
        .expect("create cm");

    let b_ns: Api<Namespace> = Api::all(b.client().expect("client"));
    assert!(b_ns.get_opt("only-in-a").await.expect("get").is_none());
    // Each cluster trusts only its own CA: a's token and CA do not open b.
    let mut cross = a.config().expect("config");
    cross.cluster_url = b.server().parse().expect("uri");
    let cross_client = kube::Client::try_from(cross).expect("client");
    assert!(cross_client.apiserver_version().await.is_err());
}

#[tokio::test]
async fn rbac_user_is_denied_until_granted() {
    let env = TestEnv::builder()
        .name("rbac")
        .user("alice", &["team-a"])
        .start()
        .await
        .expect("start");
    env.create_namespace("alice-ns").await.expect("ns");
    let alice = env.client_as("alice").expect("alice client");
    let cms: Api<ConfigMap> = Api::namespaced(alice.clone(), "alice-ns");
    match cms.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected forbidden, got {other:?}"),
    }
    env.grant(
        "alice",
        Some("alice-ns"),
        "cm-reader",
        vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }],
    )
    .await
    .expect("grant");
    // RBAC is enforced from the authorizer's informer cache: allow a moment.
    eventually("alice may list", Duration::from_secs(10), || {
        let cms = cms.clone();
        async move { cms.list(&Default::default()).await.is_ok().then_some(()) }
    })
    .await;
    // Still denied what was not granted: writes, and other namespaces.
    match cms
        .create(&PostParams::default(), &configmap("alice-ns", "nope"))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403),
        other => panic!("expected forbidden, got {other:?}"),
    }
    let default_cms: Api<ConfigMap> = Api::namespaced(alice, "default");
    match default_cms.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403, "{s:?}"),
        other => panic!("expected forbidden in another namespace, got {other:?}"),
    }
    // A token the apiserver does not know is rejected by the apiserver (401), not allowed
    // anonymous access.
    let mut bogus = env.config().expect("config");
    bogus.auth_info.token = Some("not-a-known-token".to_string().into());
    let stranger = kube::Client::try_from(bogus).expect("client");
    match Api::<ConfigMap>::namespaced(stranger, "alice-ns")
        .list(&Default::default())
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 401, "{s:?}"),
        other => panic!("expected unauthorized, got {other:?}"),
    }
}

#[tokio::test]
async fn controller_manager_deletes_namespaces_and_cascades() {
    let env = TestEnv::builder()
        .name("cm")
        .with_controller_manager(true)
        .start()
        .await
        .expect("start");
    let client = env.client().expect("client");
    env.create_namespace("doomed").await.expect("ns");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    cms.create(&PostParams::default(), &configmap("doomed", "inside"))
        .await
        .expect("cm");

    // ownerReference cascade: deleting the owner deletes the dependent (garbage collector).
    env.create_namespace("gc").await.expect("ns");
    let gc: Api<ConfigMap> = Api::namespaced(client.clone(), "gc");
    let owner = gc
        .create(&PostParams::default(), &configmap("gc", "owner"))
        .await
        .expect("owner");
    let mut dependent = configmap("gc", "dependent");
    dependent.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().expect("uid"),
            ..Default::default()
        },
    ]);
    gc.create(&PostParams::default(), &dependent)
        .await
        .expect("dependent");
    gc.delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");

    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .expect("delete ns");
    eventually("namespace deletion", Duration::from_secs(60), || {
        let namespaces = namespaces.clone();
        async move {
            namespaces
                .get_opt("doomed")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        }
    })
    .await;
    eventually("garbage collection", Duration::from_secs(60), || {
        let gc = gc.clone();
        async move {
            gc.get_opt("dependent")
                .await
                .expect("get")
                .is_none()
                .then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn drop_stops_every_process_and_removes_the_directory() {
    let env = TestEnv::builder()
        .name("dropme")
        .with_controller_manager(true)
        .start()
        .await
        .expect("start");
    let pids = env.pids();
    assert_eq!(pids.len(), 3);
    assert!(pids.iter().all(|p| proc_alive(*p)));
    let dir = env.dir().to_path_buf();
    assert!(dir.exists());
    drop(env);
    for pid in pids {
        assert!(!proc_alive(pid), "process {pid} survived drop");
    }
    assert!(!dir.exists());
}

#[test]
fn a_panicking_test_leaves_no_process() {
    let (tx, rx) = std::sync::mpsc::channel();
    let result = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let env = TestEnv::builder()
                .name("panics")
                .start()
                .await
                .expect("start");
            tx.send(env.pids()).expect("send");
            panic!("deliberate panic while the environment runs");
        })
    })
    .join();
    assert!(result.is_err());
    let pids = rx.recv().expect("pids");
    assert!(!pids.is_empty());
    for pid in pids {
        assert!(!proc_alive(pid), "process {pid} survived the panic");
    }
}

/// Helper run as a child process by `killing_the_test_binary_kills_its_control_planes`: starts
/// an environment, prints its pids and directory and waits to be killed. Not a test of its
/// own (ignored: the parent runs it with `--ignored`), and does nothing unless the parent sets
/// `KUBESYNC_TESTENV_CHILD`.
#[test]
#[ignore = "run by killing_the_test_binary_kills_its_control_planes as its child process"]
fn child_process_helper() {
    if std::env::var_os("KUBESYNC_TESTENV_CHILD").is_none() {
        return;
    }
    let env = TestEnv::builder()
        .name("child")
        .start_blocking()
        .expect("start");
    println!("PIDS {:?}", env.pids());
    println!("DIR {}", env.dir().display());
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn killing_the_test_binary_kills_its_control_planes() {
    use std::io::BufRead;
    let exe = std::env::current_exe().expect("exe");
    let mut child = std::process::Command::new(exe)
        .args([
            "child_process_helper",
            "--exact",
            "--nocapture",
            "--ignored",
        ])
        .env("KUBESYNC_TESTENV_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("stdout");
    let mut pids: Vec<u32> = Vec::new();
    let mut dir = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.expect("line");
        if let Some(rest) = line.strip_prefix("PIDS ") {
            pids = rest
                .trim_matches(|c| c == '[' || c == ']')
                .split(", ")
                .map(|p| p.parse().expect("pid"))
                .collect();
        }
        if let Some(rest) = line.strip_prefix("DIR ") {
            dir = Some(std::path::PathBuf::from(rest));
            break;
        }
    }
    assert_eq!(pids.len(), 2, "etcd and kube-apiserver");
    let dir = dir.expect("the child printed its directory");
    assert!(
        dir.exists(),
        "{} exists while the child runs",
        dir.display()
    );
    assert!(pids.iter().all(|p| proc_alive(*p)));
    child.kill().expect("SIGKILL the child test binary");
    child.wait().expect("reap");
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| proc_alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "control planes outlived their test binary"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The killed binary's directory (etcd's data, certificates) is removed by the next
    // environment that starts.
    let next = TestEnv::builder()
        .name("after-kill")
        .start_blocking()
        .expect("start");
    assert!(!dir.exists(), "{} outlived its test binary", dir.display());
    drop(next);
}

#[tokio::test]
async fn install_crds_waits_until_established() {
    let env = TestEnv::builder()
        .name("crds")
        .start()
        .await
        .expect("start");
    env.install_crds(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#,
    )
    .await
    .expect("install");
    env.create_namespace("w").await.expect("ns");
    let applied = env
        .apply_yaml("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: w}\nspec: {size: 3}\n")
        .await
        .expect("apply a Widget right after the CRD is Established");
    assert_eq!(applied.len(), 1);
    assert_eq!(applied[0].data["spec"]["size"], 3);
}

/// The kubeconfigs are read by kubectl (client-go), not only by kube: the kubectl built with the
/// control plane, of the same release.
#[tokio::test]
async fn kubectl_reads_the_kubeconfigs() {
    let kubectl_path = kubesync_testenv::kubectl().expect("kubectl of the test ground");
    let version = std::process::Command::new(&kubectl_path)
        .args(["version", "--client", "-o", "json"])
        .output()
        .expect("run kubectl");
    assert!(version.status.success());
    let text = String::from_utf8_lossy(&version.stdout);
    let env = TestEnv::builder()
        .name("kubectl")
        .user("bob", &[])
        .start()
        .await
        .expect("start");
    let server = env.server_version().await.expect("server version");
    if std::env::var_os("KUBEBUILDER_ASSETS").is_none() {
        assert_eq!(
            server,
            kubesync_testenv::kubernetes_version(),
            "the test ground runs the release it was asked for (stamped by the module build)"
        );
    }
    assert!(
        text.contains(&format!("\"gitVersion\": \"{server}\"")),
        "kubectl and the apiserver are one release ({server}): {text}"
    );
    let kubectl = |kubeconfig: &Path, args: &[&str]| {
        let out = std::process::Command::new(&kubectl_path)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args(args)
            .output()
            .expect("run kubectl");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let admin = env.kubeconfig_path().expect("admin kubeconfig");
    let (ok, out) = kubectl(&admin, &["get", "namespace", "default", "-o", "name"]);
    assert!(ok && out.trim() == "namespace/default", "{out}");

    let merged = env.dir().join("merged.kubeconfig");
    std::fs::write(&merged, kubesync_testenv::merged_kubeconfig(&[&env])).expect("write");
    let (ok, out) = kubectl(&merged, &["--context=kubectl", "get", "--raw", "/version"]);
    assert!(ok && out.contains("gitVersion"), "{out}");

    let bob = env.dir().join("bob.kubeconfig");
    std::fs::write(&bob, env.kubeconfig_yaml_as("bob").expect("bob")).expect("write");
    let (ok, out) = kubectl(&bob, &["auth", "can-i", "list", "pods"]);
    assert!(
        !ok && out.trim() == "no",
        "bob is authenticated and has no rights: {out}"
    );
    // A cluster-wide grant (ClusterRole and ClusterRoleBinding).
    env.grant(
        "bob",
        None,
        "ns-reader",
        vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["namespaces".into()]),
            verbs: vec!["list".into()],
            ..Default::default()
        }],
    )
    .await
    .expect("grant");
    eventually(
        "bob may list namespaces",
        Duration::from_secs(10),
        || async {
            let (ok, out) = kubectl(&bob, &["auth", "can-i", "list", "namespaces"]);
            // stdout says yes; stderr warns that namespaces are not namespaced.
            (ok && out.starts_with("yes\n")).then_some(())
        },
    )
    .await;
}
