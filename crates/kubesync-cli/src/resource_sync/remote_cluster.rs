//! The RemoteCluster controller: a RemoteCluster's kubeconfig read, its cluster connected and
//! probed, its status written; and the resolution of the cluster and kind a ResourceSync
//! names.

use super::*;

impl ResourceSyncController {
    /// Reconciles one RemoteCluster: connects and reports whether it answers.
    pub async fn reconcile_remote_cluster(
        &self,
        key: &ObjectKey,
        ctx: &Context,
    ) -> kubesync::Result<Action> {
        let Some(rc) = ctx.get_as::<RemoteCluster>(key)? else {
            return Ok(Action::done());
        };
        let checked = check_remote_cluster(&rc.spec);
        let connected = match checked {
            Err(refusal) => Err(refusal),
            Ok(()) => self.remotes.connect(&rc).await,
        };
        let server = connected.as_ref().ok().map(|c| c.server.clone());
        let (condition, version) = match connected {
            Err(refusal) => (status::refused(&refusal), None),
            Ok(conn) => {
                match tokio::time::timeout(Duration::from_secs(10), conn.cluster.server_version())
                    .await
                {
                    Ok(Ok(v)) => {
                        ctx.metrics().cluster(conn.cluster.name()).contacted();
                        (
                            status::ready(
                                true,
                                State::Connected,
                                format!("apiserver {v} answered"),
                            ),
                            Some(v),
                        )
                    }
                    Ok(Err(e)) => (
                        status::ready(false, State::Unreachable, kubesync::error::chain(&e)),
                        None,
                    ),
                    Err(_) => (
                        status::ready(false, State::Unreachable, "no answer within 10s"),
                        None,
                    ),
                }
            }
        };
        let old = rc.status.clone().unwrap_or_default();
        let declarations = [
            ApiResource::erase::<ObjectSync>(&()),
            ApiResource::erase::<ClusterObjectSync>(&()),
        ]
        .iter()
        .flat_map(|ar| ctx.list(LOCAL, ar))
        .collect::<Vec<_>>();
        let usage = Usage::of(
            &rc.name_any(),
            declarations.iter().filter_map(|d| d.data.get("spec")),
        );
        let status = remote_cluster_status(
            &old,
            rc.metadata.generation,
            condition,
            (version, server),
            usage,
            status::now(),
        );
        if status != old {
            self.writes.patch_status(&rc, &status).await?;
        }
        // Reachability is re-checked every three status-refresh periods (30 s by default).
        Ok(Action::requeue(self.status_refresh * 3))
    }

    pub(super) async fn resolve(
        &self,
        rs: &ResourceSync,
        ctx: &Context,
    ) -> Result<(ApiResource, Cluster, String, Duration), Refusal> {
        let spec = &rs.spec;
        if spec.resource.kind.is_empty() || spec.resource.version.is_empty() {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.resource needs a version and a kind",
            ));
        }
        if spec.remote_cluster.is_empty() {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.remoteCluster is empty",
            ));
        }
        check_names(spec)?;
        if spec.concurrency == Some(0) {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                "spec.concurrency must be at least 1",
            ));
        }
        let repair_interval = secret_repair_interval(spec)?;
        let gvk = GroupVersionKind::gvk(
            &spec.resource.group,
            &spec.resource.version,
            &spec.resource.kind,
        );
        let (ar, caps) = kube::discovery::pinned_kind(self.local.client(), &gvk)
            .await
            .map_err(|e| {
                Refusal::new(
                    Reason::ResourceNotFound,
                    format!(
                        "{}/{} {} is not served by this cluster: {}",
                        gvk.group,
                        gvk.version,
                        gvk.kind,
                        kubesync::error::describe_kube(&e)
                    ),
                )
            })?;
        if caps.scope != kube::discovery::Scope::Namespaced {
            return Err(Refusal::new(
                Reason::InvalidSpec,
                format!(
                    "{} is cluster-scoped; only namespaced kinds can be synced",
                    gvk.kind
                ),
            ));
        }
        if !caps
            .subresources
            .iter()
            .any(|(sub, _)| sub.plural == "status")
        {
            return Err(Refusal::new(
                Reason::NoStatusSubresource,
                format!("{} has no status subresource", gvk.kind),
            ));
        }
        let conn = self
            .remotes
            .connect_named(ctx, &spec.remote_cluster)
            .await?;
        Ok((ar, conn.cluster, conn.fingerprint, repair_interval))
    }
}
