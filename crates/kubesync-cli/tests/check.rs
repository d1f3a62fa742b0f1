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
    let version = a.server_version().await.expect("version");
    // A supported version: no warning.
    assert!(
        stdout.contains(&format!("check-a\tready\t{version}\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("check-b\tready\t{version}")),
        "{stdout}"
    );

    b.stop_apiserver();
    let out = run(path);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(stdout.contains("check-a\tready"), "{stdout}");
    assert!(stdout.contains("check-b\terror\tUnreachable"), "{stdout}");
    // With the cause, not only "client error (Connect)".
    assert!(stdout.contains("Connection refused"), "{stdout}");
}

/// An apiserver that answers `/version` with `git_version` (and nothing else), over plain HTTP
/// on a loopback port: stands in for a cluster of a release the test ground does not build.
fn version_only_apiserver(git_version: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let body = format!(
                r#"{{"major":"1","minor":"29","gitVersion":"{git_version}","gitCommit":"","gitTreeState":"clean","buildDate":"2024-01-01T00:00:00Z","goVersion":"go1.22","compiler":"gc","platform":"linux/amd64"}}"#
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn check_warns_about_a_version_outside_the_supported_range() {
    let dir = std::env::temp_dir().join(format!("kubesync-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let (old, new) = (
        version_only_apiserver("v1.29.4-gke.100"),
        version_only_apiserver("v1.40.0"),
    );
    let path = dir.join("versions.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n\
             - {{name: old, cluster: {{server: \"http://127.0.0.1:{old}\"}}}}\n\
             - {{name: new, cluster: {{server: \"http://127.0.0.1:{new}\"}}}}\n\
             users:\n- {{name: anon, user: {{}}}}\n\
             contexts:\n\
             - {{name: old, context: {{cluster: old, user: anon}}}}\n\
             - {{name: new, context: {{cluster: new, user: anon}}}}\n\
             current-context: old\n"
        ),
    )
    .expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubesync"))
        .args(["check", "--timeout", "5", "--kubeconfig"])
        .arg(&path)
        .args(["--context", "old", "--context", "new"])
        .output()
        .expect("run kubesync");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a warning does not fail the check: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no line for {name}: {stdout}"))
            .to_string()
    };
    let old = line("old");
    assert!(
        old.starts_with("old\tready\tv1.29.4-gke.100\twarning: ")
            && old.contains("older than the oldest release kubesync supports (v1.33)"),
        "{old}"
    );
    let new = line("new");
    assert!(
        new.starts_with("new\tready\tv1.40.0\twarning: ") && new.contains("not tested"),
        "{new}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
