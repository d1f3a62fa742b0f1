//! Building `Cluster`s from kubeconfig files, bytes and contexts, and their clients' connections,
//! against real control planes.

mod common;

use common::*;
use kubesync::Cluster;
use kubesync_testenv::merged_kubeconfig;

/// The range kubesync claims is the range its test ground builds and tests.
#[test]
fn the_supported_range_is_the_tested_range() {
    use kubesync::version::{NEWEST, OLDEST, Release};
    use kubesync_testenv::{NEWEST_KUBERNETES, OLDEST_KUBERNETES};
    assert_eq!(Release::parse(NEWEST_KUBERNETES), Some(NEWEST));
    assert_eq!(Release::parse(OLDEST_KUBERNETES), Some(OLDEST));
}

#[tokio::test]
async fn clusters_from_kubeconfig_file_bytes_and_context() {
    let (east, west) = (shared("k-east"), shared("k-west"));
    let yaml = merged_kubeconfig(&[east, west]);
    let dir = std::env::temp_dir().join(format!("kubesync-kc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let path = dir.join("config");
    std::fs::write(&path, &yaml).expect("write");

    // File, explicit context: named after the context.
    let c = Cluster::from_kubeconfig_file(&path, Some("k-west"))
        .await
        .expect("file");
    assert_eq!(c.name(), "k-west");
    assert_eq!(
        c.server_version().await.expect("version"),
        west.server_version()
            .await
            .expect("the test ground's version")
    );
    // File, current context.
    let c = Cluster::from_kubeconfig_file(&path, None)
        .await
        .expect("file");
    assert_eq!(c.name(), "k-east");
    // Bytes (as read from a Secret), with a name of our choosing.
    let c = Cluster::from_kubeconfig_bytes(yaml.as_bytes(), Some("k-west"), Some("regional-1"))
        .await
        .expect("bytes");
    assert_eq!(c.name(), "regional-1");
    c.server_version().await.expect("reachable");
    // Default kubeconfig through $KUBECONFIG, by context.
    // SAFETY of the environment change: this test binary has no other test reading KUBECONFIG.
    unsafe { std::env::set_var("KUBECONFIG", &path) };
    let c = Cluster::from_context("k-west").await.expect("context");
    assert_eq!(c.name(), "k-west");
    c.server_version().await.expect("reachable");

    // Errors say what is wrong.
    let err = Cluster::from_kubeconfig_file(&path, Some("nope"))
        .await
        .expect_err("missing context");
    assert_eq!(err.category(), "Kubeconfig");
    assert!(
        err.to_string().contains("k-east"),
        "lists the known contexts: {err}"
    );
    let err = Cluster::from_kubeconfig_bytes(b"not: [valid", None, None)
        .await
        .expect_err("bad yaml");
    assert_eq!(err.category(), "Kubeconfig");
    let err = Cluster::in_cluster("here").expect_err("not in a pod");
    assert_eq!(err.category(), "InClusterConfig");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

/// This process's established TCP connections to `port` on the loopback interface: the socket
/// inode of each (from `/proc/self/net/tcp` and `tcp6`).
fn connections_to(port: u16) -> std::collections::BTreeSet<u64> {
    let mut inodes = std::collections::BTreeSet::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if remote_port == Some(port) && *state == "01" {
                inodes.insert(inode.parse().expect("inode"));
            }
        }
    }
    inodes
}

/// Whether the socket with `inode`, one of this process's descriptors, has `TCP_NODELAY` set.
fn nodelay(inode: u64) -> bool {
    let target = format!("socket:[{inode}]");
    for entry in std::fs::read_dir("/proc/self/fd").expect("fds").flatten() {
        if std::fs::read_link(entry.path()).is_ok_and(|l| l.to_string_lossy() == target) {
            let fd: i32 = entry.file_name().to_string_lossy().parse().expect("fd");
            let mut value: libc::c_int = 0;
            let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            // SAFETY: `fd` is an open socket of this process (its connection is still pooled by
            // a client alive in the caller); `value` and `len` are valid for the call.
            let rc = unsafe {
                libc::getsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    (&mut value as *mut libc::c_int).cast(),
                    &mut len,
                )
            };
            assert_eq!(rc, 0, "getsockopt on fd {fd}");
            return value != 0;
        }
    }
    panic!("no descriptor for socket inode {inode}")
}

/// The connections `client` opens for four concurrent requests, with their `TCP_NODELAY`.
async fn nodelay_of_new_connections(client: &kube::Client, port: u16) -> Vec<bool> {
    let before = connections_to(port);
    let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    let params = kube::api::ListParams::default();
    let lists = (0..4).map(|_| api.list(&params));
    for r in futures::future::join_all(lists).await {
        r.expect("list namespaces");
    }
    let opened: Vec<u64> = connections_to(port).difference(&before).copied().collect();
    assert!(!opened.is_empty(), "the requests opened no connection");
    opened.into_iter().map(nodelay).collect()
}

#[tokio::test]
async fn clusters_connect_with_tcp_nodelay() {
    let env = shared("k-nodelay");
    let port: u16 = env
        .server()
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("apiserver port");
    // kube's default client leaves Nagle's algorithm on: the check below can tell the two apart.
    let default = kube::Client::try_from(env.config().expect("config")).expect("client");
    let seen = nodelay_of_new_connections(&default, port).await;
    assert!(seen.iter().all(|on| !on), "kube's default client: {seen:?}");

    let cluster =
        Cluster::from_config("k-nodelay", env.config().expect("config")).expect("cluster");
    let seen = nodelay_of_new_connections(cluster.client(), port).await;
    assert!(seen.iter().all(|on| *on), "kubesync's client: {seen:?}");
    // The same stack authenticates and verifies the apiserver's certificate like kube's.
    let version = cluster.server_version().await.expect("version");
    assert!(version.starts_with("v1."), "{version}");
    drop(default);
}
