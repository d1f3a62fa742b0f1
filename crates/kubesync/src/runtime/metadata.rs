//! What a metadata-only watch decodes: an object's metadata without `managedFields`.
//!
//! kube's `PartialObjectMeta` decodes every field of `metadata`, `managedFields` included (often
//! the larger part of it), and through a flattened field that first buffers the whole object.
//! [`MetadataOnly`] asks the apiserver for the same `PartialObjectMetadata` but skips
//! `managedFields` while decoding, field by field, so a list of thousands of unrelated objects
//! never holds them in memory, not even for a moment.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::DynamicObject;
use kube::core::{ApiResource, TypeMeta};
use serde::Deserialize;

/// An object's metadata as a metadata-only request returns it, without `managedFields`.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct MetadataOnly {
    #[serde(default, deserialize_with = "slim")]
    metadata: ObjectMeta,
}

/// `metadata` decoded without `managedFields` (see [`SlimMeta`]).
pub(super) fn slim<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        uid: m.uid,
        managed_fields: None,
        self_link: None,
    })
}

/// `ObjectMeta` without `managedFields` (and the deprecated `selfLink`): serde skips unknown
/// fields while decoding, without building them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    uid: Option<String>,
}

impl MetadataOnly {
    /// The object as a store keeps it: its metadata, `null` data, and the watched type.
    pub(super) fn into_object(self, resource: &ApiResource) -> DynamicObject {
        DynamicObject {
            types: Some(TypeMeta {
                api_version: resource.api_version.clone(),
                kind: resource.kind.clone(),
            }),
            metadata: self.metadata,
            data: serde_json::Value::Null,
        }
    }
}

/// `impl Resource` for a type a watch decodes objects of any [`ApiResource`] into: its type
/// is the watch's `ApiResource`, its metadata at `$($meta).+`; `metadata_api`: whether
/// requests ask for `PartialObjectMetadata`.
macro_rules! resource_of_any_type {
    ($type:ty, metadata_api: $metadata_api:expr, meta: $($meta:ident).+) => {
        impl ::kube::Resource for $type {
            type DynamicType = ::kube::core::ApiResource;
            type Scope = ::kube::core::DynamicResourceScope;

            fn metadata_api() -> bool {
                $metadata_api
            }

            fn group(dt: &::kube::core::ApiResource) -> ::std::borrow::Cow<'_, str> {
                dt.group.as_str().into()
            }

            fn version(dt: &::kube::core::ApiResource) -> ::std::borrow::Cow<'_, str> {
                dt.version.as_str().into()
            }

            fn kind(dt: &::kube::core::ApiResource) -> ::std::borrow::Cow<'_, str> {
                dt.kind.as_str().into()
            }

            fn api_version(dt: &::kube::core::ApiResource) -> ::std::borrow::Cow<'_, str> {
                dt.api_version.as_str().into()
            }

            fn plural(dt: &::kube::core::ApiResource) -> ::std::borrow::Cow<'_, str> {
                dt.plural.as_str().into()
            }

            fn meta(&self) -> &::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.$($meta).+
            }

            fn meta_mut(
                &mut self,
            ) -> &mut ::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.$($meta).+
            }
        }
    };
}
pub(super) use resource_of_any_type;

// Requests ask for `PartialObjectMetadata` (and lists for `PartialObjectMetadataList`).
resource_of_any_type!(MetadataOnly, metadata_api: true, meta: metadata);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn decodes_metadata_without_managed_fields() {
        let item = serde_json::json!({
            "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
            "metadata": {
                "name": "rel", "namespace": "helm", "uid": "u-1", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-11-22T10:00:00Z",
                "deletionTimestamp": "2026-11-22T11:00:00Z", "finalizers": ["f"],
                "labels": {"owner": "helm"}, "annotations": {"kubesync.io/protect": "true"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "x", "uid": "o"}],
                "managedFields": [{"manager": "helm", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}]
            }
        });
        let decoded: MetadataOnly = serde_json::from_value(item).expect("decodes");
        let secret = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let obj = decoded.into_object(&secret);
        let m = &obj.metadata;
        assert_eq!(m.managed_fields, None);
        assert_eq!(
            (m.name.as_deref(), m.namespace.as_deref(), m.uid.as_deref()),
            (Some("rel"), Some("helm"), Some("u-1"))
        );
        assert_eq!(m.resource_version.as_deref(), Some("7"));
        assert_eq!(m.generation, Some(2));
        assert!(m.creation_timestamp.is_some() && m.deletion_timestamp.is_some());
        assert_eq!(m.finalizers.as_deref(), Some(&["f".to_string()][..]));
        assert_eq!(
            m.labels
                .as_ref()
                .and_then(|l| l.get("owner"))
                .map(String::as_str),
            Some("helm")
        );
        assert!(
            m.annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("kubesync.io/protect"))
        );
        assert_eq!(m.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(obj.types.as_ref().map(|t| t.kind.as_str()), Some("Secret"));
        assert!(obj.data.is_null());
        assert!(
            MetadataOnly::metadata_api(),
            "requests ask for metadata only"
        );
    }
}
