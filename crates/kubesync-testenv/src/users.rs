//! Users and RBAC: token users known to the apiserver, clients acting as them, and grants.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::{Error, TestEnv};

/// A user known to the apiserver through its static token file.
#[derive(Clone, Debug)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) token: String,
    pub(crate) groups: Vec<String>,
}

/// A random 32-character bearer token.
pub(crate) fn random_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..32)
        .map(|_| char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[rng.random_range(0..36)]))
        .collect()
}

/// The apiserver's `--token-auth-file`: the admin (in `system:masters`), then every user.
pub(crate) fn token_file(admin_token: &str, users: &[User]) -> String {
    let mut tokens = format!("{admin_token},admin,admin,\"system:masters\"\n");
    for u in users {
        tokens.push_str(&format!(
            "{},{},{},\"{}\"\n",
            u.token,
            u.name,
            u.name,
            u.groups.join(",")
        ));
    }
    tokens
}

impl TestEnv {
    /// A new client authenticated as `user` (see [`TestEnvBuilder::user`](crate::TestEnvBuilder::user)).
    pub fn client_as(&self, user: &str) -> Result<Client, Error> {
        let token = self.user(user)?.token.clone();
        Ok(Client::try_from(self.config_for_token(&token)?)?)
    }

    pub(crate) fn user(&self, name: &str) -> Result<&User, Error> {
        self.users.iter().find(|u| u.name == name).ok_or_else(|| {
            Error::Kubeconfig(format!(
                "no user {name:?} in environment {}; add it with TestEnvBuilder::user",
                self.name
            ))
        })
    }

    /// Grants `user` the given rules: in `namespace` (a Role and RoleBinding) or cluster-wide
    /// (`None`: a ClusterRole and ClusterRoleBinding). The objects are named
    /// `kubesync-testenv:<user>:<role_name>`.
    pub async fn grant(
        &self,
        user: &str,
        namespace: Option<&str>,
        role_name: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<(), Error> {
        let client = self.client()?;
        let name = format!("kubesync-testenv:{user}:{role_name}");
        let pp = PatchParams::apply("kubesync-testenv").force();
        let meta = |ns: Option<&str>| kube::api::ObjectMeta {
            name: Some(name.clone()),
            namespace: ns.map(str::to_string),
            ..Default::default()
        };
        let subjects = Some(vec![Subject {
            kind: "User".into(),
            name: user.into(),
            api_group: Some("rbac.authorization.k8s.io".into()),
            namespace: None,
        }]);
        match namespace {
            Some(ns) => {
                let role = Role {
                    metadata: meta(Some(ns)),
                    rules: Some(rules),
                };
                let binding = RoleBinding {
                    metadata: meta(Some(ns)),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: name.clone(),
                    },
                    subjects,
                };
                Api::<Role>::namespaced(client.clone(), ns)
                    .patch(&name, &pp, &Patch::Apply(&with_type(&role, "Role")?))
                    .await?;
                Api::<RoleBinding>::namespaced(client, ns)
                    .patch(
                        &name,
                        &pp,
                        &Patch::Apply(&with_type(&binding, "RoleBinding")?),
                    )
                    .await?;
            }
            None => {
                let role = ClusterRole {
                    metadata: meta(None),
                    rules: Some(rules),
                    aggregation_rule: None,
                };
                let binding = ClusterRoleBinding {
                    metadata: meta(None),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "ClusterRole".into(),
                        name: name.clone(),
                    },
                    subjects,
                };
                Api::<ClusterRole>::all(client.clone())
                    .patch(&name, &pp, &Patch::Apply(&with_type(&role, "ClusterRole")?))
                    .await?;
                Api::<ClusterRoleBinding>::all(client)
                    .patch(
                        &name,
                        &pp,
                        &Patch::Apply(&with_type(&binding, "ClusterRoleBinding")?),
                    )
                    .await?;
            }
        }
        Ok(())
    }
}

fn with_type<T: serde::Serialize>(obj: &T, kind: &str) -> Result<serde_json::Value, Error> {
    let mut v = serde_json::to_value(obj).map_err(|e| Error::Manifest(e.to_string()))?;
    v["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
    v["kind"] = kind.into();
    Ok(v)
}
