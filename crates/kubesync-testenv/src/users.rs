//! Users and RBAC: token users known to the apiserver, clients acting as them, and grants.

use k8s_openapi::Resource as _;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::Client;
use kube::api::{Api, ObjectMeta};

use crate::apply::apply_object;
use crate::{Error, TestEnv};

/// The API group of roles, bindings and their subjects.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

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
    /// `kubesync-testenv:<user>:<role_name>`. A grant to a ServiceAccount's user name
    /// (`system:serviceaccount:<ns>:<name>`) also makes sure that ServiceAccount exists where
    /// its namespace does, as an admin granting rights to one would (kubesync acts only as
    /// existing ServiceAccounts).
    pub async fn grant(
        &self,
        user: &str,
        namespace: Option<&str>,
        role_name: &str,
        rules: Vec<PolicyRule>,
    ) -> Result<(), Error> {
        let client = self.client()?;
        if let Some((ns, sa)) = user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
        {
            let account = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(sa.to_string()),
                    namespace: Some(ns.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            // Where its namespace exists: a grant in another cluster to the same user name
            // (a RemoteCluster's) names a ServiceAccount that lives elsewhere.
            match apply_object(&Api::namespaced(client.clone(), ns), &account).await {
                Err(Error::Kube(kube::Error::Api(s))) if s.code == 404 => {}
                other => drop(other?),
            }
        }
        let name = format!("kubesync-testenv:{user}:{role_name}");
        let metadata = ObjectMeta {
            name: Some(name.clone()),
            namespace: namespace.map(str::to_string),
            ..Default::default()
        };
        let role_ref = |kind: &str| RoleRef {
            api_group: Some(RBAC_GROUP.into()),
            kind: kind.into(),
            name: name.clone(),
        };
        let subjects = Some(vec![Subject {
            kind: "User".into(),
            name: user.into(),
            api_group: Some(RBAC_GROUP.into()),
            namespace: None,
        }]);
        match namespace {
            Some(ns) => {
                let role = Role {
                    metadata: metadata.clone(),
                    rules: Some(rules),
                };
                let binding = RoleBinding {
                    metadata,
                    role_ref: role_ref(Role::KIND),
                    subjects,
                };
                apply_object(&Api::namespaced(client.clone(), ns), &role).await?;
                apply_object(&Api::namespaced(client, ns), &binding).await?;
            }
            None => {
                let role = ClusterRole {
                    metadata: metadata.clone(),
                    rules: Some(rules),
                    aggregation_rule: None,
                };
                let binding = ClusterRoleBinding {
                    metadata,
                    role_ref: role_ref(ClusterRole::KIND),
                    subjects,
                };
                apply_object(&Api::all(client.clone()), &role).await?;
                apply_object(&Api::all(client), &binding).await?;
            }
        }
        Ok(())
    }
}
