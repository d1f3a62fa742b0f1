//! Objects: namespaces, server-side apply of YAML manifests, and CustomResourceDefinitions.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::wait::poll;
use crate::{Error, TestEnv};

impl TestEnv {
    /// Creates a namespace (succeeds if it already exists).
    pub async fn create_namespace(&self, name: &str) -> Result<(), Error> {
        let api: Api<Namespace> = Api::all(self.client()?);
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Applies every document of a multi-document YAML manifest with server-side apply (field
    /// manager `kubesync-testenv`), resolving each kind through discovery. Returns the applied
    /// objects.
    pub async fn apply_yaml(&self, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
        apply_with(self.client()?, yaml).await
    }

    /// [`apply_yaml`](Self::apply_yaml) as the user `user` (see
    /// [`TestEnvBuilder::user`](crate::TestEnvBuilder::user)): with that user's rights only.
    pub async fn apply_yaml_as(&self, user: &str, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
        apply_with(self.client_as(user)?, yaml).await
    }
}

/// Applies every document of `yaml` with `client` (see [`TestEnv::apply_yaml`]).
async fn apply_with(client: kube::Client, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
    let mut applied = Vec::new();
    for value in documents(yaml)? {
        let obj: DynamicObject = serde_json::from_value(value.clone())
            .map_err(|e| Error::Manifest(format!("not a Kubernetes object: {e}")))?;
        let types = obj
            .types
            .clone()
            .ok_or_else(|| Error::Manifest("a document lacks apiVersion/kind".into()))?;
        let gvk = GroupVersionKind::try_from(&types)
            .map_err(|e| Error::Manifest(format!("bad apiVersion: {e}")))?;
        let (ar, caps) = kube::discovery::pinned_kind(&client, &gvk).await?;
        let name = obj.name_any();
        let api = dynamic_api(client.clone(), &ar, &caps.scope, obj.namespace().as_deref());
        applied.push(
            api.patch(&name, &apply_params(), &Patch::Apply(&value))
                .await?,
        );
    }
    Ok(applied)
}

impl TestEnv {
    /// Applies CustomResourceDefinitions from YAML and waits until each is `Established`.
    pub async fn install_crds(&self, yaml: &str) -> Result<(), Error> {
        let applied = self.apply_yaml(yaml).await?;
        let api: Api<CustomResourceDefinition> = Api::all(self.client()?);
        let deadline = Instant::now() + Duration::from_secs(30);
        for obj in applied {
            if obj.types.as_ref().map(|t| t.kind.as_str()) != Some("CustomResourceDefinition") {
                continue;
            }
            let name = obj.name_any();
            let established = poll(deadline, Duration::from_millis(50), || async {
                let crd = api.get(&name).await?;
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "Established" && c.status == "True")
                    });
                Ok::<_, Error>(established.then_some(()))
            })
            .await?;
            if established.is_none() {
                return Err(Error::Timeout(format!(
                    "CRD {name} not Established after 30s"
                )));
            }
        }
        Ok(())
    }
}

/// Server-side apply as field manager `kubesync-testenv`, taking over conflicting fields.
fn apply_params() -> PatchParams {
    PatchParams::apply("kubesync-testenv").force()
}

/// Server-side applies a typed object (see [`apply_params`]), with the `apiVersion` and
/// `kind` an apply patch needs filled in from its type.
pub(crate) async fn apply_object<K>(api: &Api<K>, obj: &K) -> Result<K, Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Debug,
{
    let mut value = serde_json::to_value(obj).map_err(|e| Error::Manifest(e.to_string()))?;
    value["apiVersion"] = K::api_version(&()).into();
    value["kind"] = K::kind(&()).into();
    Ok(api
        .patch(&obj.name_any(), &apply_params(), &Patch::Apply(&value))
        .await?)
}

/// The API of a discovered resource: a namespaced resource in `namespace` (or the client's
/// default namespace when there is none), a cluster-scoped one cluster-wide.
fn dynamic_api(
    client: Client,
    resource: &ApiResource,
    scope: &Scope,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match (scope, namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client, ns, resource),
        (Scope::Namespaced, None) => Api::default_namespaced_with(client, resource),
        (Scope::Cluster, _) => Api::all_with(client, resource),
    }
}

/// The documents of a multi-document YAML stream, as JSON values; empty and null documents
/// (as between two `---` lines) are skipped.
fn documents(yaml: &str) -> Result<Vec<serde_json::Value>, Error> {
    serde_saphyr::from_multiple(yaml).map_err(|e| Error::Manifest(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_documents() {
        let docs = documents("a: 1\n---\nb: 2\n---\n\n---\nc: 3\n").expect("parses");
        assert_eq!(
            docs,
            vec![
                serde_json::json!({"a": 1}),
                serde_json::json!({"b": 2}),
                serde_json::json!({"c": 3})
            ]
        );
        let docs = documents("---\n# only a comment\n---\nkind: A\n...\n---\n~\n").expect("parses");
        assert_eq!(docs, vec![serde_json::json!({"kind": "A"})]);
        assert!(documents("a: [1\n").is_err());
        let crd = documents(crate::fixtures::WIDGET_CRD).expect("the fixture parses");
        assert_eq!(crd.len(), 1);
        assert_eq!(crd[0]["kind"], "CustomResourceDefinition");
    }
}
