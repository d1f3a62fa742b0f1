//! The pinned helm (`scripts/helm.sh`), run with homes of its own.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use kubesync_testenv::TestEnv;

/// The pinned helm, with its configuration, cache and data directories under `home` (never
/// the user's), talking to the cluster of `kubeconfig` when there is one.
pub struct Helm {
    pub bin: PathBuf,
    pub home: PathBuf,
    pub kubeconfig: Option<PathBuf>,
}

impl Helm {
    /// For commands that need no cluster (lint, template).
    pub fn offline() -> Self {
        Self {
            bin: kubesync_testenv::helm().expect("helm (scripts/helm.sh)"),
            home: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("helm-home"),
            kubeconfig: None,
        }
    }

    /// For commands on `env`'s cluster, as its admin.
    pub fn on(env: &TestEnv) -> Self {
        Self {
            bin: kubesync_testenv::helm().expect("helm (scripts/helm.sh)"),
            home: env.dir().join("helm-home"),
            kubeconfig: Some(env.kubeconfig_path().expect("admin kubeconfig")),
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let mut command = Command::new(&self.bin);
        command
            .args(args)
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .stdin(Stdio::null());
        match &self.kubeconfig {
            Some(path) => command.env("KUBECONFIG", path),
            None => command.env_remove("KUBECONFIG"),
        };
        command.output().expect("run helm")
    }

    /// Runs helm; panics with its output unless it succeeds; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "helm {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8")
    }
}
