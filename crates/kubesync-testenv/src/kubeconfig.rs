//! Kubeconfigs for environments, and the `kube` configs and clients built from them.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::{Error, TestEnv};

impl TestEnv {
    /// A kubeconfig (YAML) for the admin, with one context named after the cluster.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&[KubeconfigEntry {
            context: &self.name,
            server: &self.server,
            ca_pem: &self.ca_pem,
            user: "admin",
            token: &self.admin_token,
        }])
    }

    /// A kubeconfig (YAML) for a user added with [`TestEnvBuilder::user`].
    pub fn kubeconfig_yaml_as(&self, user: &str) -> Result<String, Error> {
        let u = self.user(user)?;
        Ok(kubeconfig_yaml(&[KubeconfigEntry {
            context: &self.name,
            server: &self.server,
            ca_pem: &self.ca_pem,
            user: &u.name,
            token: &u.token,
        }]))
    }

    /// The admin kubeconfig, parsed.
    pub fn kubeconfig(&self) -> Result<Kubeconfig, Error> {
        Kubeconfig::from_yaml(&self.kubeconfig_yaml()).map_err(|e| Error::Kubeconfig(e.to_string()))
    }

    /// Writes the admin kubeconfig into the environment's directory and returns its path.
    pub fn kubeconfig_path(&self) -> Result<PathBuf, Error> {
        let path = self.dir.join("admin.kubeconfig");
        std::fs::write(&path, self.kubeconfig_yaml())
            .map_err(|e| Error::Io(format!("write {}", path.display()), e))?;
        Ok(path)
    }

    /// A `kube::Config` for the admin.
    pub fn config(&self) -> Result<Config, Error> {
        self.config_for_token(&self.admin_token)
    }

    /// A `kube::Config` authenticating with `token`.
    pub(crate) fn config_for_token(&self, token: &str) -> Result<Config, Error> {
        let yaml = kubeconfig_yaml(&[KubeconfigEntry {
            context: &self.name,
            server: &self.server,
            ca_pem: &self.ca_pem,
            user: "user",
            token,
        }]);
        let kc = Kubeconfig::from_yaml(&yaml).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        config_from_kubeconfig(kc, &self.name)
    }

    /// A new admin client. Clients are bound to the tokio runtime they are created in, so
    /// create one per test (this is cheap).
    pub fn client(&self) -> Result<Client, Error> {
        Ok(Client::try_from(self.config()?)?)
    }
}

/// One context of a kubeconfig written by [`kubeconfig_yaml`].
#[derive(Clone, Copy, Debug)]
pub struct KubeconfigEntry<'a> {
    /// Context (and cluster) name.
    pub context: &'a str,
    /// Server URL.
    pub server: &'a str,
    /// The server's CA certificate, PEM.
    pub ca_pem: &'a str,
    /// User entry name (made unique per context).
    pub user: &'a str,
    /// Bearer token.
    pub token: &'a str,
}

/// Builds a kubeconfig with one context per entry; the first is the current context.
pub fn kubeconfig_yaml(entries: &[KubeconfigEntry<'_>]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut clusters = String::new();
    let mut users = String::new();
    let mut contexts = String::new();
    for e in entries {
        let user = format!("{}@{}", e.user, e.context);
        clusters.push_str(&format!(
            "- name: {ctx}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n",
            ctx = e.context,
            server = e.server,
            ca = b64.encode(e.ca_pem)
        ));
        users.push_str(&format!(
            "- name: {user}\n  user:\n    token: {}\n",
            e.token
        ));
        contexts.push_str(&format!(
            "- name: {ctx}\n  context:\n    cluster: {ctx}\n    user: {user}\n",
            ctx = e.context
        ));
    }
    let current = entries.first().map(|e| e.context).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: {current}\nclusters:\n{clusters}users:\n{users}contexts:\n{contexts}"
    )
}

/// A kubeconfig (YAML) with the admin context of each environment.
pub fn merged_kubeconfig(envs: &[&TestEnv]) -> String {
    let entries: Vec<KubeconfigEntry<'_>> = envs
        .iter()
        .map(|e| KubeconfigEntry {
            context: &e.name,
            server: &e.server,
            ca_pem: &e.ca_pem,
            user: "admin",
            token: &e.admin_token,
        })
        .collect();
    kubeconfig_yaml(&entries)
}

fn config_from_kubeconfig(kc: Kubeconfig, context: &str) -> Result<Config, Error> {
    let opts = KubeConfigOptions {
        context: Some(context.to_string()),
        ..Default::default()
    };
    // `from_custom_kubeconfig` is async only because of exec plugins; with static tokens it
    // completes immediately, so drive it on the spot.
    futures::executor::block_on(Config::from_custom_kubeconfig(kc, &opts))
        .map_err(|e| Error::Kubeconfig(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_has_one_context_per_entry() {
        let yaml = kubeconfig_yaml(&[
            KubeconfigEntry {
                context: "a",
                server: "https://127.0.0.1:1",
                ca_pem: "x",
                user: "admin",
                token: "t1",
            },
            KubeconfigEntry {
                context: "b",
                server: "https://127.0.0.1:2",
                ca_pem: "y",
                user: "admin",
                token: "t2",
            },
        ]);
        let kc = Kubeconfig::from_yaml(&yaml).expect("parses");
        assert_eq!(kc.current_context.as_deref(), Some("a"));
        let names: Vec<_> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(kc.auth_infos.len(), 2);
    }
}
