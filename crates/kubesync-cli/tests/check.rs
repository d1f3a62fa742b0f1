//! `kubesync check` against real control planes.

use kubesync_testenv::{TestEnv, merged_kubeconfig};

#[tokio::test]
async fn check_reports_each_cluster_and_fails_on_an_unreachable_one() {
    let (a, mut b) = tokio::join!(
        TestEnv::builder().name("check-a").start(),
        TestEnv::builder().name("check-b").start()
    );
    let (a, b) = (a.expect("a"), b.as_mut().expect("b"));
    let path = a.dir().join("both.kubeconfig");
    std::fs::write(&path, merged_kubeconfig(&[&a, b])).expect("write");
    let run = |path: std::path::PathBuf| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
            .args(["check", "--timeout", "5", "--kubeconfig"])
            .arg(path)
            .args(["--context", "check-a", "--context", "check-b"])
            .output()
            .expect("run kubesync")
    };
    let out = run(path.clone());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("check-a\tready\tv1.20.2"), "{stdout}");
    assert!(stdout.contains("check-b\tready\tv1.20.2"), "{stdout}");

    b.stop_apiserver();
    let out = run(path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(stdout.contains("check-a\tready"), "{stdout}");
    assert!(stdout.contains("check-b\terror\tUnreachable"), "{stdout}");
    // With the cause, not only "client error (Connect)".
    assert!(stdout.contains("Connection refused"), "{stdout}");
}
