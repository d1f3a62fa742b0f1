//! The remote-cluster service shared by the controllers: connects `RemoteCluster`s from their
//! kubeconfig Secrets (one client per RemoteCluster, rebuilt only when its kubeconfig or
//! context changes) and names clusters at run time.
//!
//! The only place that knows how a RemoteCluster's runtime cluster name is spelled (the
//! `remote:` prefix). Reads Secrets; never writes anything.

use parking_lot::Mutex;
use std::collections::HashMap;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::ApiResource;
use kubesync::runtime::Context;
use kubesync::{Cluster, ObjectKey};
use sha2::Digest;

use crate::crd::RemoteCluster;
use crate::status::{Reason, Refusal};

/// Name of the cluster the operator runs in, in keys and logs.
pub const LOCAL: &str = "local";

/// Prefix of a RemoteCluster's runtime cluster name.
const REMOTE_PREFIX: &str = "remote:";

/// The runtime cluster name of the RemoteCluster `name` (pure).
pub fn runtime_name(name: &str) -> String {
    format!("{REMOTE_PREFIX}{name}")
}

/// The name users know a runtime cluster by (pure): the RemoteCluster's name, or `local`.
pub fn display_name(runtime: &str) -> &str {
    runtime.strip_prefix(REMOTE_PREFIX).unwrap_or(runtime)
}

/// A connected RemoteCluster.
#[derive(Clone)]
pub struct Connection {
    /// The cluster handle (named [`runtime_name`]).
    pub cluster: Cluster,
    /// Changes whenever the kubeconfig or the context changes.
    pub fingerprint: String,
}

/// Connects RemoteClusters, caching one client per RemoteCluster.
pub struct RemoteClusters {
    local: Cluster,
    /// By RemoteCluster name: (fingerprint, cluster).
    clients: Mutex<HashMap<String, (String, Cluster)>>,
}

impl RemoteClusters {
    /// Reads kubeconfig Secrets from `local`.
    pub fn new(local: Cluster) -> Self {
        Self {
            local,
            clients: Mutex::new(HashMap::new()),
        }
    }

    /// The RemoteCluster `name` from the operator's store.
    pub fn lookup(ctx: &Context, name: &str) -> Result<RemoteCluster, Refusal> {
        let key = ObjectKey::new(LOCAL, &ApiResource::erase::<RemoteCluster>(&()), None, name);
        ctx.get_as::<RemoteCluster>(&key)
            .map_err(|e| Refusal::new(Reason::RemoteClusterNotFound, e.to_string()))?
            .ok_or_else(|| {
                Refusal::new(
                    Reason::RemoteClusterNotFound,
                    format!("RemoteCluster {name:?} does not exist"),
                )
            })
    }

    /// The RemoteCluster `name` from the store, connected.
    pub async fn connect_named(&self, ctx: &Context, name: &str) -> Result<Connection, Refusal> {
        let rc = Self::lookup(ctx, name)?;
        self.connect(&rc).await
    }

    /// The cluster handle of a RemoteCluster. The Secret is read each time (to notice a
    /// changed kubeconfig); the client is built only when the kubeconfig changed, and shared
    /// by every sync that uses the cluster.
    pub async fn connect(&self, rc: &RemoteCluster) -> Result<Connection, Refusal> {
        let r = &rc.spec.kubeconfig_secret_ref;
        let secrets: Api<Secret> = Api::namespaced(self.local.client().clone(), &r.namespace);
        let secret = match secrets.get_opt(&r.name).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(Refusal::new(
                    Reason::KubeconfigSecretInvalid,
                    format!("Secret {}/{} not found", r.namespace, r.name),
                ));
            }
            Err(e) => {
                return Err(Refusal::new(
                    Reason::KubeconfigSecretInvalid,
                    format!(
                        "reading Secret {}/{}: {}",
                        r.namespace,
                        r.name,
                        kubesync::error::describe_kube(&e)
                    ),
                ));
            }
        };
        let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(&r.key)) else {
            return Err(Refusal::new(
                Reason::KubeconfigSecretInvalid,
                format!("Secret {}/{} has no key {:?}", r.namespace, r.name, r.key),
            ));
        };
        let fingerprint = fingerprint(&bytes.0, rc.spec.context.as_deref());
        let rc_name = rc.name_any();
        if let Some((f, cluster)) = self.lock().get(&rc_name)
            && *f == fingerprint
        {
            return Ok(Connection {
                cluster: cluster.clone(),
                fingerprint,
            });
        }
        let cluster = Cluster::from_kubeconfig_bytes(
            &bytes.0,
            rc.spec.context.as_deref(),
            Some(&runtime_name(&rc_name)),
        )
        .await
        .map_err(|e| Refusal::new(Reason::KubeconfigInvalid, e.to_string()))?
        .with_list_strategy(self.local.list_strategy());
        self.lock()
            .insert(rc_name, (fingerprint.clone(), cluster.clone()));
        Ok(Connection {
            cluster,
            fingerprint,
        })
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<String, (String, Cluster)>> {
        self.clients.lock()
    }
}

/// What a client is built from (pure): the kubeconfig's hash and the context.
fn fingerprint(kubeconfig: &[u8], context: Option<&str>) -> String {
    let hash: String = sha2::Sha256::digest(kubeconfig)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{hash}/{}", context.unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_names_round_trip() {
        assert_eq!(runtime_name("eu"), "remote:eu");
        assert_eq!(display_name(&runtime_name("eu")), "eu");
        assert_eq!(display_name(LOCAL), "local");
    }

    #[test]
    fn fingerprint_changes_with_kubeconfig_and_context() {
        let a = fingerprint(b"x", None);
        assert_eq!(a, fingerprint(b"x", Some("")));
        assert_ne!(a, fingerprint(b"y", None));
        assert_ne!(a, fingerprint(b"x", Some("east")));
    }
}
