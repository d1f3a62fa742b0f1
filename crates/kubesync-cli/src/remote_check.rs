//! `kubesync check --remote-clusters`: the RemoteClusters of one cluster, each connected with
//! its own kubeconfig Secret as the operator would, and what it serves as — a source for the
//! declarations that pull from it (`spec.source.cluster`), a destination for those that write
//! into it. For a source, whether its credentials may read each kind pulled from it (get,
//! list and watch: a pull needs nothing else) and whether they may also write it (more than
//! a pull needs: a warning). The reading of the declarations is pure ([`pulls`]); the checks
//! are SelfSubjectAccessReviews (questions, nothing stored).

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync::Cluster;

use crate::crd::{ClusterObjectSync, ObjectSync, RemoteCluster};
use crate::remote::RemoteClusters;
use crate::resource_sync::Usage;

/// The verbs a pull needs on the hub.
pub const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// One kind read from a RemoteCluster, in one namespace (empty: cluster-scoped, or every
/// namespace).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pull {
    /// API group (empty: core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// The source namespace (empty for a cluster-scoped kind).
    pub namespace: String,
}

/// The kinds and namespaces the declarations read from the RemoteCluster `name` (pure):
/// `declarations` are `(own namespace, spec)` as stored — an ObjectSync's namespace, `None`
/// for a ClusterObjectSync.
pub fn pulls<'a>(
    name: &str,
    declarations: impl IntoIterator<Item = (Option<&'a str>, &'a serde_json::Value)>,
) -> BTreeSet<Pull> {
    let text = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(|s| s.as_str())
            .unwrap_or_default()
            .to_string()
    };
    declarations
        .into_iter()
        .filter_map(|(own, spec)| {
            let source = spec.get("source")?;
            (source.get("cluster")?.as_str()? == name).then(|| {
                let given = text(source, "namespace");
                Pull {
                    group: text(source, "group"),
                    kind: text(source, "kind"),
                    namespace: match own {
                        Some(own) if given.is_empty() => own.to_string(),
                        _ => given,
                    },
                }
            })
        })
        .collect()
}

/// What the check says of one kind read from a source cluster (pure): `reads` the verbs
/// allowed of [`READ_VERBS`], `writes` whether it may also create. `Err` when a read verb is
/// denied (the pull cannot work).
pub fn verdict(pull: &Pull, reads: &[&str], writes: bool) -> Result<String, String> {
    let what = match (pull.group.as_str(), pull.namespace.as_str()) {
        ("", "") => pull.kind.clone(),
        ("", ns) => format!("{} in {ns}", pull.kind),
        (g, "") => format!("{}.{g}", pull.kind),
        (g, ns) => format!("{}.{g} in {ns}", pull.kind),
    };
    let denied: Vec<&str> = READ_VERBS
        .iter()
        .copied()
        .filter(|v| !reads.contains(v))
        .collect();
    if !denied.is_empty() {
        return Err(format!(
            "reads {what}: {} denied (a pull needs get, list and watch)",
            denied.join(", ")
        ));
    }
    Ok(if writes {
        format!(
            "reads {what}: allowed; warning: these credentials may also create {what} (a pull needs read rights only)"
        )
    } else {
        format!("reads {what}: allowed (read only)")
    })
}

/// Runs the check on the cluster `local` and prints one block per RemoteCluster; returns
/// whether every RemoteCluster answered and may read what is pulled from it.
pub async fn check(local: &Cluster, timeout: Duration) -> kubesync::Result<bool> {
    let client = local.client().clone();
    let remotes = Api::<RemoteCluster>::all(client.clone())
        .list(&Default::default())
        .await?;
    let declarations = declarations(&client).await?;
    let stored = || declarations.iter().map(|(ns, spec)| (ns.as_deref(), spec));
    let service = RemoteClusters::new(local.clone());
    let mut ok = true;
    if remotes.items.is_empty() {
        println!("no RemoteCluster in this cluster");
    }
    for rc in &remotes.items {
        let name = rc.name_any();
        let usage = Usage::of(&name, stored().map(|(_, s)| s));
        let serves = format!(
            "source for {}, destination for {}",
            usage.source_for, usage.destination_for
        );
        let cluster = match service.connect(rc).await {
            Ok(conn) => conn.cluster,
            Err(refusal) => {
                ok = false;
                println!(
                    "{name}\terror\t{}: {}\t{serves}",
                    refusal.reason, refusal.message
                );
                continue;
            }
        };
        match tokio::time::timeout(timeout, cluster.server_version()).await {
            Ok(Ok(version)) => println!("{name}\tready\t{version}\t{serves}"),
            Ok(Err(e)) => {
                ok = false;
                println!(
                    "{name}\terror\t{}: {}\t{serves}",
                    e.category(),
                    kubesync::error::chain(&e)
                );
                continue;
            }
            Err(_) => {
                ok = false;
                println!("{name}\terror\tUnreachable: no answer within {timeout:?}\t{serves}");
                continue;
            }
        }
        for pull in pulls(&name, stored()) {
            match pull_line(local, &cluster, &pull).await? {
                Ok(line) => println!("  {line}"),
                Err(line) => {
                    ok = false;
                    println!("  error: {line}");
                }
            }
        }
    }
    Ok(ok)
}

/// Every ObjectSync's and ClusterObjectSync's `(own namespace, spec)` as stored.
async fn declarations(
    client: &kube::Client,
) -> kubesync::Result<Vec<(Option<String>, serde_json::Value)>> {
    let mut declarations: Vec<(Option<String>, serde_json::Value)> = Vec::new();
    for ar in [
        ApiResource::erase::<ObjectSync>(&()),
        ApiResource::erase::<ClusterObjectSync>(&()),
    ] {
        let all = Api::<DynamicObject>::all_with(client.clone(), &ar)
            .list(&Default::default())
            .await?;
        for d in all.items {
            let spec = d.data.get("spec").cloned().unwrap_or_default();
            declarations.push((d.namespace(), spec));
        }
    }
    Ok(declarations)
}

/// The [`verdict`] on `pull` of the RemoteCluster `cluster`'s credentials, its kind resolved
/// by the cluster `local`'s discovery; `Err` also when the kind is not served there.
async fn pull_line(
    local: &Cluster,
    cluster: &Cluster,
    pull: &Pull,
) -> kubesync::Result<Result<String, String>> {
    Ok(match plural(local, pull).await {
        Err(e) => Err(format!("{} is not served by this cluster: {e}", pull.kind)),
        Ok(resource) => {
            let ns = (!pull.namespace.is_empty()).then_some(pull.namespace.as_str());
            let mut reads = Vec::new();
            for verb in READ_VERBS {
                if cluster.may(verb, &pull.group, &resource, ns).await? {
                    reads.push(verb);
                }
            }
            let writes = cluster.may("create", &pull.group, &resource, ns).await?;
            verdict(pull, &reads, writes)
        }
    })
}

/// The plural resource name of `pull`'s kind, by this cluster's discovery (the operator
/// resolves kinds the same way).
async fn plural(local: &Cluster, pull: &Pull) -> Result<String, String> {
    let client = local.client();
    let found = if pull.group.is_empty() {
        kube::discovery::pinned_kind(client, &GroupVersionKind::gvk("", "v1", &pull.kind))
            .await
            .map(|(ar, _)| ar)
            .map_err(|e| kubesync::error::describe_kube(&e))
    } else {
        kube::discovery::group(client, &pull.group)
            .await
            .map_err(|e| kubesync::error::describe_kube(&e))?
            .recommended_kind(&pull.kind)
            .map(|(ar, _)| ar)
            .ok_or_else(|| "no version of the group serves it".to_string())
    };
    found.map(|ar| ar.plural)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_kinds_read_from_a_cluster_are_found_in_the_declarations_that_name_it() {
        let specs = [
            (
                Some("ops"),
                json!({"source": {"kind": "ConfigMap", "name": "a", "cluster": "hub"}}),
            ),
            (
                Some("ops"),
                json!({"source": {"kind": "Secret", "namespace": "certs", "selector": {}, "cluster": "hub"}}),
            ),
            (
                None,
                json!({"source": {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "p", "cluster": "hub"}}),
            ),
            (
                Some("ops"),
                json!({"source": {"kind": "ConfigMap", "name": "b"}}),
            ),
            (
                Some("x"),
                json!({"source": {"kind": "ConfigMap", "name": "c", "cluster": "other"}}),
            ),
        ];
        let found = pulls("hub", specs.iter().map(|(ns, s)| (*ns, s)));
        let kinds: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|p| (p.group.as_str(), p.kind.as_str(), p.namespace.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("", "ConfigMap", "ops"),
                ("", "Secret", "certs"),
                ("scheduling.k8s.io", "PriorityClass", "")
            ]
        );
    }

    #[test]
    fn a_pull_needs_every_read_verb_and_more_is_a_warning() {
        let p = Pull {
            group: String::new(),
            kind: "Secret".into(),
            namespace: "ops".into(),
        };
        assert_eq!(
            verdict(&p, &READ_VERBS, false),
            Ok("reads Secret in ops: allowed (read only)".into())
        );
        let more = verdict(&p, &READ_VERBS, true).expect("works");
        assert!(
            more.contains("warning") && more.contains("create"),
            "{more}"
        );
        let denied = verdict(&p, &["get"], false).expect_err("cannot watch");
        assert!(denied.contains("list, watch denied"), "{denied}");
    }
}
