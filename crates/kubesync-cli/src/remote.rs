//! The remote-cluster service shared by the controllers: connects `RemoteCluster`s from their
//! kubeconfig Secrets (one client per RemoteCluster, rebuilt only when its kubeconfig or
//! context changes) and names clusters at run time.
//!
//! The only place that knows how a RemoteCluster's runtime cluster name is spelled (the
//! `remote:` prefix), and that refuses a RemoteCluster naming the apiserver of an older one
//! (two names for one cluster would have one declaration's copies taken for strays through
//! the other, removed and made again without end). Reads Secrets; never writes anything.

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

    /// Every RemoteCluster in the operator's store.
    pub fn stored(ctx: &Context) -> Vec<RemoteCluster> {
        ctx.list(LOCAL, &ApiResource::erase::<RemoteCluster>(&()))
            .iter()
            .filter_map(|o| serde_json::from_value(serde_json::to_value(&**o).ok()?).ok())
            .collect()
    }

    /// The cluster handle of a RemoteCluster, refused if one of `others` (every RemoteCluster
    /// known; the operator's store) is older and names the same apiserver
    /// ([`duplicate_of`]). The Secret is read each time (to notice a changed kubeconfig); the
    /// client is built only when the kubeconfig changed, and shared by every sync that uses
    /// the cluster.
    pub async fn connect(
        &self,
        rc: &RemoteCluster,
        others: &[RemoteCluster],
    ) -> Result<Connection, Refusal> {
        let conn = self.client_of(rc).await?;
        if let Some(older) = duplicate_of(rc, &conn.server, others) {
            return Err(Refusal::new(
                Reason::DuplicateCluster,
                format!(
                    "RemoteCluster {older} already names the apiserver {}: one RemoteCluster per cluster (through two, one declaration's copies would be taken for strays and removed through the other); use {older}, or delete one of them",
                    conn.server
                ),
            ));
        }
        Ok(conn)
    }

    async fn client_of(&self, rc: &RemoteCluster) -> Result<Connection, Refusal> {
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

/// The older RemoteCluster among `others` that names `server` (in its status, once it
/// connected), if any (pure). Older: created earlier, or in the same second with a name that
/// sorts first. The oldest keeps working; every younger one is refused.
pub fn duplicate_of<'a>(
    rc: &RemoteCluster,
    server: &str,
    others: &'a [RemoteCluster],
) -> Option<&'a str> {
    let age = |r: &RemoteCluster| {
        (
            r.metadata.creation_timestamp.clone().map(|t| t.0),
            r.metadata.name.clone(),
        )
    };
    others
        .iter()
        .filter(|o| o.metadata.name != rc.metadata.name)
        .filter(|o| {
            o.status
                .as_ref()
                .and_then(|s| s.server.as_deref())
                .is_some_and(|s| s == server)
        })
        .filter(|o| age(o) < age(rc))
        .min_by_key(|o| age(o))
        .and_then(|o| o.metadata.name.as_deref())
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

    fn remote_cluster(name: &str, created: &str, server: Option<&str>) -> RemoteCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubesync.io/v1alpha1", "kind": "RemoteCluster",
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"kubeconfigSecretRef": {"namespace": "ns", "name": "s"}},
            "status": {"conditions": [], "server": server},
        }))
        .expect("RemoteCluster")
    }

    #[test]
    fn the_younger_of_two_remote_clusters_of_one_apiserver_is_the_duplicate() {
        let s = "https://h:443";
        let all = [
            remote_cluster("b", "2026-01-01T00:00:00Z", Some(s)),
            remote_cluster("c", "2026-01-01T00:00:00Z", Some(s)),
            remote_cluster("a", "2026-01-02T00:00:00Z", Some(s)),
            remote_cluster("other", "2025-01-01T00:00:00Z", Some("https://o:443")),
            remote_cluster("unconnected", "2025-01-01T00:00:00Z", None),
        ];
        // Oldest: b (c was created in the same second but sorts after it).
        assert_eq!(duplicate_of(&all[0], s, &all), None);
        assert_eq!(duplicate_of(&all[1], s, &all), Some("b"));
        assert_eq!(duplicate_of(&all[2], s, &all), Some("b"));
        assert_eq!(duplicate_of(&all[3], "https://o:443", &all), None);
        // One whose status names no server yet (never connected) claims nothing; once it
        // connects, it is the oldest.
        assert_eq!(duplicate_of(&all[2], s, &all[3..]), None);
        assert_eq!(duplicate_of(&all[4], s, &all), None);
    }

    #[test]
    fn fingerprint_changes_with_kubeconfig_and_context() {
        let a = fingerprint(b"x", None);
        assert_eq!(a, fingerprint(b"x", Some("")));
        assert_ne!(a, fingerprint(b"y", None));
        assert_ne!(a, fingerprint(b"x", Some("east")));
    }
}
