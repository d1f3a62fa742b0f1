//! Building `Cluster`s from kubeconfig files, bytes and contexts, against real control planes.

mod common;

use common::*;
use kubesync::Cluster;
use kubesync_testenv::merged_kubeconfig;

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
    assert_eq!(c.server_version().await.expect("version"), "v1.20.2");
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
