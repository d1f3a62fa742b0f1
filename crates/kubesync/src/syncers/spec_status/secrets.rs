//! The local Secrets a spec/status sync uploads onto pre-existing remote Secrets, and the
//! watches that notice changes of either side.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;

use super::plan::{self, SecretUpload};
use super::{FIELD_MANAGER_DOWN, FIELD_MANAGER_UP, SpecStatusSync};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::runtime::Watch;
use crate::syncer::{ExtraWatch, Side, SyncContext};
use crate::translate::{ObjectName, SuffixTranslator, Translator};

/// Where one uploaded Secret is: locally, and its copy on the remote.
struct SecretPlace<'a> {
    /// The local object's namespace, which holds the local Secret.
    ns: &'a str,
    /// The local Secret's name.
    name: &'a str,
    /// The remote object's namespace, which holds the remote copy.
    remote_ns: &'a str,
    /// The remote copy's name.
    remote_name: &'a str,
}

impl SpecStatusSync {
    /// Uploads the local Secrets this object controls; whether it controls any.
    pub(super) async fn upload_secrets(
        &self,
        cx: &SyncContext<'_>,
        remote: &DynamicObject,
        local: &DynamicObject,
        ns: &str,
        remote_ns: &str,
    ) -> Result<bool> {
        let mut first_error = None;
        let mut uploads = false;
        for secret_name in &self.config.secret_names {
            let local_secret = match self.controlled_secret(cx, local, ns, secret_name) {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            uploads = true;
            let remote_name = format!("{secret_name}{}", self.config.names.remote_name_suffix);
            let place = SecretPlace {
                ns,
                name: secret_name,
                remote_ns,
                remote_name: &remote_name,
            };
            if let Err(e) = self.upload_secret(cx, remote, &local_secret, &place).await {
                first_error.get_or_insert(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(uploads),
        }
    }

    /// The local Secret `secret_name` in `ns` from the store, if `local` controls it.
    fn controlled_secret(
        &self,
        cx: &SyncContext<'_>,
        local: &DynamicObject,
        ns: &str,
        secret_name: &str,
    ) -> Result<Option<Secret>> {
        let Some(obj) = cx.get(
            Side::Target,
            &self.secret_resource,
            &ObjectName::namespaced(ns, secret_name),
        ) else {
            return Ok(None);
        };
        let local_secret: Secret = match (*obj).clone().try_parse() {
            Ok(s) => s,
            Err(e) => {
                return Err(Error::Convert {
                    key: format!("{ns}/{secret_name}"),
                    target: "Secret",
                    message: e.to_string(),
                });
            }
        };
        let controlled = local_secret
            .metadata
            .owner_references
            .as_ref()
            .is_some_and(|refs| {
                refs.iter().any(|o| {
                    o.controller == Some(true) && Some(&o.uid) == local.metadata.uid.as_ref()
                })
            });
        Ok(controlled.then_some(local_secret))
    }

    /// Writes `local_secret` onto its remote copy at `place` unless the copy is current, then
    /// records the uploaded hash on the local Secret.
    async fn upload_secret(
        &self,
        cx: &SyncContext<'_>,
        remote: &DynamicObject,
        local_secret: &Secret,
        place: &SecretPlace<'_>,
    ) -> Result<()> {
        let marks = &self.config.marks;
        let remote_secrets: Api<Secret> =
            Api::namespaced(cx.source.client().clone(), place.remote_ns);
        // Reading the remote copy lets us repair drift; with update-only RBAC we cannot,
        // and fall back to the local hash.
        let current = match remote_secrets.get_opt(place.remote_name).await {
            Ok(s) => s,
            Err(kube::Error::Api(s)) if s.is_forbidden() => None,
            Err(e) => return Err(e.into()),
        };
        match plan::secret_upload(
            local_secret,
            current.as_ref(),
            remote,
            place.remote_ns,
            place.remote_name,
            marks,
        ) {
            SecretUpload::Unchanged => Ok(()),
            SecretUpload::Update {
                remote: desired,
                hash,
            } => {
                let written = match crate::object::to_dynamic(&*desired) {
                    Ok(d) => {
                        cx.writer
                            .replace(cx.source, &self.secret_resource, &d, FIELD_MANAGER_UP)
                            .await
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = written {
                    tracing::warn!(secret = %place.remote_name, error = %e, "(remote) failed to update secret");
                    return Err(e);
                }
                tracing::info!(secret = %place.remote_name, "(remote) secret updated");
                let patch = serde_json::json!({"metadata": {"annotations": {marks.last_uploaded_hash(): hash}}});
                cx.writer
                    .merge_patch(
                        cx.target,
                        &self.secret_resource,
                        Some(place.ns),
                        place.name,
                        &patch,
                        FIELD_MANAGER_DOWN,
                    )
                    .await?;
                Ok(())
            }
        }
    }

    /// The watch of the remote Secret `secret_name` uploads to, in the remote cluster
    /// `source`: a change (an edit, a deletion, a recreation) re-runs the objects of its
    /// namespace, which repair it. Metadata is all the event needs (the pass reads the
    /// Secret), so no Secret data is held.
    pub(super) fn remote_secret_watch(&self, secret_name: &str, source: &str) -> ExtraWatch {
        let remote_name = format!("{secret_name}{}", self.config.names.remote_name_suffix);
        let (names, resource, source) = (
            self.config.names.clone(),
            self.config.resource.clone(),
            source.to_string(),
        );
        ExtraWatch {
            side: Side::Source,
            watch: Watch::dynamic(self.secret_resource.clone())
                .fields(&format!("metadata.name={remote_name}"))
                .metadata_only(),
            mapper: std::sync::Arc::new(move |secret: &DynamicObject, ctx| {
                objects_in_namespace(ctx, &source, &resource, &names, secret)
            }),
        }
    }

    /// The watch of the local Secrets named `secret_name`: each maps to the remote object of
    /// its controller, through the same (verified) translation as the objects themselves —
    /// also with a local namespace suffix, which sync-controller got wrong. Their content is
    /// uploaded, so they are held in full; selected on the server, the watch holds those
    /// Secrets only.
    pub(super) fn local_secret_watch(&self, secret_name: &str) -> ExtraWatch {
        let names = self.config.names.clone();
        let kind = self.config.resource.kind.clone();
        let api_version = self.config.resource.api_version.clone();
        let wanted = secret_name.to_string();
        ExtraWatch {
            side: Side::Target,
            watch: Watch::dynamic(self.secret_resource.clone())
                .fields(&format!("metadata.name={secret_name}")),
            mapper: std::sync::Arc::new(move |secret: &DynamicObject, _| {
                if secret.metadata.name.as_deref() != Some(wanted.as_str()) {
                    return Vec::new();
                }
                let Some(ns) = secret.metadata.namespace.clone() else {
                    return Vec::new();
                };
                secret
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .filter(|o| {
                        o.controller == Some(true) && o.kind == kind && o.api_version == api_version
                    })
                    .filter_map(|o| {
                        names.to_source(&ObjectName::namespaced(ns.clone(), o.name.clone()))
                    })
                    .collect()
            }),
        }
    }
}

/// Whether `cluster`'s identity may list and watch Secrets in every namespace.
pub(super) async fn may_watch_secrets(cluster: &Cluster) -> Result<bool> {
    Ok(cluster.may("list", "", "secrets", None).await?
        && cluster.may("watch", "", "secrets", None).await?)
}

/// The synced source objects in `obj`'s namespace (of this shard), as the source store holds
/// them.
fn objects_in_namespace(
    ctx: &crate::runtime::Context,
    source: &str,
    resource: &ApiResource,
    names: &SuffixTranslator,
    obj: &DynamicObject,
) -> Vec<ObjectName> {
    let Some(ns) = obj.metadata.namespace.as_deref() else {
        return Vec::new();
    };
    ctx.list_in(source, resource, ns)
        .iter()
        .map(|o| ObjectName::namespaced(ns, o.metadata.name.clone().unwrap_or_default()))
        .filter(|n| names.to_target(n).is_some())
        .collect()
}
