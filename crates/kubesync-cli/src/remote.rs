//! The remote-cluster service shared by the controllers: connects `RemoteCluster`s from their
//! kubeconfig Secrets (one client per RemoteCluster, rebuilt only when its kubeconfig or
//! context changes) and names clusters at run time.
//!
//! The only place that knows how a RemoteCluster's runtime cluster name is spelled (the
//! `remote:` prefix), and which apiserver a RemoteCluster's kubeconfig names (its
//! `status.server`, by which a declaration naming one cluster twice is refused). Reads
//! Secrets; never writes anything.

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
    /// The apiserver URL of the kubeconfig's context, normalized ([`normalize_server`]).
    pub server: String,
}

/// Connects RemoteClusters, caching one client per RemoteCluster.
pub struct RemoteClusters {
    local: Cluster,
    /// By RemoteCluster name: (fingerprint, server, cluster).
    clients: Mutex<HashMap<String, (String, String, Cluster)>>,
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

    /// The cluster handle of a RemoteCluster, with the apiserver its kubeconfig names. The
    /// Secret is read each time (to notice a changed kubeconfig); the client is built only when
    /// the kubeconfig changed, and shared by every sync that uses the cluster.
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
        if let Some((f, server, cluster)) = self.lock().get(&rc_name)
            && *f == fingerprint
        {
            return Ok(Connection {
                cluster: cluster.clone(),
                fingerprint,
                server: server.clone(),
            });
        }
        let server = server_of(&bytes.0, rc.spec.context.as_deref())
            .map_err(|e| Refusal::new(Reason::KubeconfigInvalid, e))?;
        let cluster = Cluster::from_kubeconfig_bytes(
            &bytes.0,
            rc.spec.context.as_deref(),
            Some(&runtime_name(&rc_name)),
        )
        .await
        .map_err(|e| Refusal::new(Reason::KubeconfigInvalid, e.to_string()))?
        .with_list_strategy(self.local.list_strategy());
        // Written to under the same permit as the local cluster (see `crate::fence`).
        let cluster = match self.local.fence() {
            Some(fence) => cluster.fenced(fence.clone()),
            None => cluster,
        };
        self.lock().insert(
            rc_name,
            (fingerprint.clone(), server.clone(), cluster.clone()),
        );
        Ok(Connection {
            cluster,
            fingerprint,
            server,
        })
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<String, (String, String, Cluster)>> {
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

/// The apiserver URL of a kubeconfig's context (`context`, or its current one), normalized
/// (pure).
pub fn server_of(kubeconfig: &[u8], context: Option<&str>) -> Result<String, String> {
    let text = std::str::from_utf8(kubeconfig).map_err(|e| format!("not UTF-8: {e}"))?;
    let config = kube::config::Kubeconfig::from_yaml(text).map_err(|e| e.to_string())?;
    let context = context
        .map(str::to_string)
        .or(config.current_context.clone())
        .ok_or("no context given and no current-context set")?;
    let cluster = config
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone())
        .ok_or_else(|| format!("context {context:?} not found"))?;
    let server = config
        .clusters
        .iter()
        .find(|c| c.name == cluster)
        .and_then(|c| c.cluster.as_ref()?.server.clone())
        .ok_or_else(|| format!("cluster {cluster:?} of context {context:?} has no server"))?;
    Ok(normalize_server(&server))
}

/// An apiserver URL as two spellings of it compare equal (pure): scheme and host in lower
/// case, the scheme's default port written out, no trailing `/`.
pub fn normalize_server(server: &str) -> String {
    let trimmed = server.trim().trim_end_matches('/');
    let (scheme, rest) = trimmed.split_once("://").unwrap_or(("https", trimmed));
    let scheme = scheme.to_ascii_lowercase();
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host, port.to_string())
        }
        _ => (
            authority,
            if scheme == "http" { "80" } else { "443" }.to_string(),
        ),
    };
    format!("{scheme}://{}:{port}{path}", host.to_ascii_lowercase())
}

/// Two of `named` (RemoteClusters a declaration's destinations name) whose kubeconfigs name
/// the same apiserver, by their `status.server` (set once each connected), with that server
/// (pure). A declaration writing through both would find its copies made through one among
/// those of the other and remove them as strays, without end.
pub fn same_apiserver<'a>(named: &[&'a RemoteCluster]) -> Option<(&'a str, &'a str, &'a str)> {
    let server = |r: &'a RemoteCluster| r.status.as_ref()?.server.as_deref();
    let name = |r: &'a RemoteCluster| r.metadata.name.as_deref().unwrap_or_default();
    named.iter().enumerate().find_map(|(i, a)| {
        let s = server(a)?;
        named[i + 1..]
            .iter()
            .find(|b| name(b) != name(a) && server(b) == Some(s))
            .map(|b| (name(a), name(b), s))
    })
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
    fn servers_compare_equal_however_spelled() {
        let same = [
            "https://API.example.com",
            "https://api.example.com:443/",
            "HTTPS://api.example.com:443",
            "api.example.com",
        ];
        for s in same {
            assert_eq!(normalize_server(s), "https://api.example.com:443", "{s}");
        }
        assert_eq!(normalize_server("http://h"), "http://h:80");
        assert_eq!(
            normalize_server("https://[::1]:6443/prefix/"),
            "https://[::1]:6443/prefix"
        );
        assert_eq!(normalize_server("https://[::1]"), "https://[::1]:443");
        assert_ne!(
            normalize_server("https://h:6443"),
            normalize_server("https://h:6444")
        );
        assert_ne!(
            normalize_server("https://h/a"),
            normalize_server("https://h/b")
        );
    }

    #[test]
    fn a_kubeconfig_names_the_server_of_its_context() {
        let kubeconfig = br#"
apiVersion: v1
kind: Config
current-context: one
contexts:
- {name: one, context: {cluster: a, user: u}}
- {name: two, context: {cluster: b, user: u}}
clusters:
- {name: a, cluster: {server: "https://A.example:6443/"}}
- {name: b, cluster: {server: "https://b.example"}}
users:
- {name: u, user: {token: t}}
"#;
        assert_eq!(
            server_of(kubeconfig, None).as_deref(),
            Ok("https://a.example:6443")
        );
        assert_eq!(
            server_of(kubeconfig, Some("two")).as_deref(),
            Ok("https://b.example:443")
        );
        assert!(server_of(kubeconfig, Some("three")).is_err());
        assert!(server_of(b"not: [a kubeconfig", None).is_err());
    }

    fn remote_cluster(name: &str, server: Option<&str>) -> RemoteCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubesync.io/v1alpha1", "kind": "RemoteCluster",
            "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "ns", "name": "s"}},
            "status": {"conditions": [], "server": server},
        }))
        .expect("RemoteCluster")
    }

    #[test]
    fn two_names_of_one_apiserver_are_found() {
        let s = "https://h:443";
        let eu = remote_cluster("eu", Some(s));
        let again = remote_cluster("eu-again", Some(s));
        let other = remote_cluster("other", Some("https://o:443"));
        let unconnected = remote_cluster("new", None);
        assert_eq!(
            same_apiserver(&[&eu, &other, &again]),
            Some(("eu", "eu-again", s))
        );
        assert_eq!(same_apiserver(&[&eu, &other, &unconnected]), None);
        assert_eq!(
            same_apiserver(&[&eu, &eu]),
            None,
            "one name twice is one cluster"
        );
        assert_eq!(same_apiserver(&[]), None);
    }

    #[test]
    fn fingerprint_changes_with_kubeconfig_and_context() {
        let a = fingerprint(b"x", None);
        assert_eq!(a, fingerprint(b"x", Some("")));
        assert_ne!(a, fingerprint(b"y", None));
        assert_ne!(a, fingerprint(b"x", Some("east")));
    }
}
