//! Kubeconfigs for environments, and the `kube` configs and clients built from them.

use std::path::PathBuf;

use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};
use kube::{Client, Config};

use crate::{Error, TestEnv};

impl TestEnv {
    /// This environment's context for `user`, authenticated by `token`.
    pub(crate) fn entry<'a>(&'a self, user: &'a str, token: &'a str) -> KubeconfigEntry<'a> {
        KubeconfigEntry {
            context: &self.name,
            server: &self.server,
            ca_pem: &self.ca_pem,
            user,
            token,
        }
    }

    /// This environment's context for the admin.
    fn admin_entry(&self) -> KubeconfigEntry<'_> {
        self.entry("admin", &self.admin_token)
    }

    /// A kubeconfig (YAML) for the admin, with one context named after the cluster.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&[self.admin_entry()])
    }

    /// A kubeconfig (YAML) for a user added with
    /// [`TestEnvBuilder::user`](crate::TestEnvBuilder::user).
    pub fn kubeconfig_yaml_as(&self, user: &str) -> Result<String, Error> {
        let u = self.user(user)?;
        Ok(kubeconfig_yaml(&[self.entry(&u.name, &u.token)]))
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> Result<Kubeconfig, Error> {
        Ok(kubeconfig(&[self.admin_entry()]))
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
        config_from_kubeconfig(kubeconfig(&[self.entry("user", token)]), &self.name)
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

/// A kubeconfig with one context per entry (cluster named after the context, user
/// `<user>@<context>`); the first is the current context.
fn kubeconfig(entries: &[KubeconfigEntry<'_>]) -> Kubeconfig {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut kc = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        current_context: entries.first().map(|e| e.context.to_string()),
        ..Default::default()
    };
    for e in entries {
        let user = format!("{}@{}", e.user, e.context);
        kc.clusters.push(NamedCluster {
            name: e.context.into(),
            cluster: Some(Cluster {
                server: Some(e.server.into()),
                certificate_authority_data: Some(b64.encode(e.ca_pem)),
                ..Default::default()
            }),
            ..Default::default()
        });
        kc.auth_infos.push(NamedAuthInfo {
            name: user.clone(),
            auth_info: Some(AuthInfo {
                token: Some(e.token.into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        kc.contexts.push(NamedContext {
            name: e.context.into(),
            context: Some(Context {
                cluster: e.context.into(),
                user: Some(user),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    kc
}

/// Builds a kubeconfig (YAML) with one context per entry; the first is the current context.
pub fn kubeconfig_yaml(entries: &[KubeconfigEntry<'_>]) -> String {
    // Plain scalars, as kubectl writes them: no folded block for the long CA data.
    let options = serde_saphyr::ser_options! { prefer_block_scalars: false };
    // A kubeconfig holds only strings, lists and maps, which always serialize.
    serde_saphyr::to_string_with_options(&kubeconfig(entries), options)
        .expect("a kubeconfig serializes to YAML")
}

/// A kubeconfig (YAML) with the admin context of each environment.
pub fn merged_kubeconfig(envs: &[&TestEnv]) -> String {
    let entries: Vec<KubeconfigEntry<'_>> = envs.iter().map(|e| e.admin_entry()).collect();
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

    #[test]
    fn kubeconfig_values_survive_yaml() {
        use base64::Engine as _;
        // A real CA is longer than a YAML line; tokens and names may look like numbers or
        // YAML 1.1 booleans.
        let ca = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            "A".repeat(1500)
        );
        let yaml = kubeconfig_yaml(&[KubeconfigEntry {
            context: "yes",
            server: "https://127.0.0.1:3",
            ca_pem: &ca,
            user: "admin",
            token: "12345678901234567890123456789012",
        }]);
        assert!(!yaml.contains('>'), "no folded scalars:\n{yaml}");
        let kc = Kubeconfig::from_yaml(&yaml).expect("parses");
        assert_eq!(kc.current_context.as_deref(), Some("yes"));
        let cluster = kc.clusters[0].cluster.as_ref().expect("cluster");
        let ca_data = cluster.certificate_authority_data.as_deref().expect("CA");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(ca_data)
            .expect("base64");
        assert_eq!(decoded, ca.as_bytes());
        let config = config_from_kubeconfig(kc, "yes").expect("config");
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:3/");
    }
}
