//! What a watch hands its store: an object parsed, or — for a packed watch of full objects —
//! its metadata parsed and the object kept as the very text it arrived as.
//!
//! A packed store holds each object as its JSON text ([`Watch::packed`](super::Watch::packed)).
//! Decoding a watch event into an object tree only to write it back out as text costs the
//! tree for the moment it lives: a declaration whose status lists a thousand destinations is
//! about 100 KiB of text and about 1 MiB as a tree of maps and strings (its `managedFields`
//! another tree beside it). [`Delivered`] decodes such an event by keeping the object's text
//! as it arrived and parsing only its type and metadata (without `managedFields`) from it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use kube::core::TypeMeta;
use serde::Deserialize;
use serde_json::value::RawValue;

/// An object as a watch delivers it to its store.
#[derive(Clone, Debug)]
pub(super) struct Delivered {
    /// The object; where `text` is kept, only its type and metadata (`data` is `null`,
    /// `managedFields` left out).
    pub(super) object: DynamicObject,
    /// The object's whole JSON text as the apiserver sent it, where the watch decoded it
    /// that way (a packed watch of full objects).
    pub(super) text: Option<Box<str>>,
}

impl From<DynamicObject> for Delivered {
    fn from(object: DynamicObject) -> Self {
        Self { object, text: None }
    }
}

/// What is parsed of an object kept as text: its type and its metadata, `managedFields`
/// skipped (serde skips the other fields without building them).
#[derive(Deserialize)]
struct Head {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default, deserialize_with = "super::metadata::slim")]
    metadata: ObjectMeta,
}

impl<'de> Deserialize<'de> for Delivered {
    /// Keeps the object's text and parses its type and metadata from it. An object whose
    /// text does not name its type (items of a plain list of a built-in kind) is parsed
    /// whole instead, so that the store's text, written from it once typed, names it.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let raw = Box::<RawValue>::deserialize(d)?;
        let head: Head = serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
        let (Some(api_version), Some(kind)) = (head.api_version, head.kind) else {
            let object =
                serde_json::from_str::<DynamicObject>(raw.get()).map_err(D::Error::custom)?;
            return Ok(object.into());
        };
        Ok(Self {
            object: DynamicObject {
                types: Some(TypeMeta { api_version, kind }),
                metadata: head.metadata,
                data: serde_json::Value::Null,
            },
            text: Some(raw.into()),
        })
    }
}

super::metadata::resource_of_any_type!(Delivered, metadata_api: false, meta: object.metadata);

#[cfg(test)]
mod tests {
    use super::*;

    fn declaration(destinations: usize) -> serde_json::Value {
        let states: Vec<_> = (0..destinations)
            .map(|i| serde_json::json!({"namespace": format!("t-{i}"), "state": "Synced"}))
            .collect();
        serde_json::json!({
            "apiVersion": "kubesync.io/v1alpha1", "kind": "ObjectSync",
            "metadata": {
                "name": "registry", "namespace": "apps", "uid": "u-1", "resourceVersion": "42",
                "generation": 3, "labels": {"team": "a"},
                "managedFields": [{"manager": "kubesync", "operation": "Apply",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]
            },
            "spec": {"source": {"name": "registry"}},
            "status": {"destinations": states}
        })
    }

    #[test]
    fn an_object_that_names_its_type_is_kept_as_its_text_with_its_metadata_parsed() {
        let sent = declaration(3);
        let text = serde_json::to_string(&sent).expect("serializes");
        let d: Delivered = serde_json::from_str(&text).expect("decodes");
        assert_eq!(
            d.text.as_deref(),
            Some(text.as_str()),
            "the text as it arrived"
        );
        let o = &d.object;
        assert_eq!(o.data, serde_json::Value::Null, "no tree of the rest");
        assert_eq!(o.metadata.managed_fields, None, "managedFields not parsed");
        assert_eq!(
            (o.metadata.name.as_deref(), o.metadata.namespace.as_deref()),
            (Some("registry"), Some("apps"))
        );
        assert_eq!(o.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(o.metadata.generation, Some(3));
        let types = o.types.as_ref().expect("typed");
        assert_eq!(
            (types.api_version.as_str(), types.kind.as_str()),
            ("kubesync.io/v1alpha1", "ObjectSync")
        );
        // The text is the object: parsed back, it is what was sent.
        let back: serde_json::Value =
            serde_json::from_str(d.text.as_deref().expect("text")).expect("JSON");
        assert_eq!(back, sent);
    }

    #[test]
    fn an_object_that_does_not_name_its_type_is_parsed_whole() {
        let mut sent = declaration(1);
        let map = sent.as_object_mut().expect("an object");
        map.remove("apiVersion");
        map.remove("kind");
        let d: Delivered = serde_json::from_value(sent).expect("decodes");
        assert_eq!(d.text, None, "left to the store to pack once it is typed");
        assert!(d.object.data.get("status").is_some(), "parsed whole");
        assert!(d.object.metadata.managed_fields.is_some());
    }

    #[test]
    fn a_watch_event_of_a_packed_object_keeps_its_text() {
        // kube decodes each line of a watch as a `WatchEvent` (type first, as the apiserver
        // writes it), which hands the object's text on to `Delivered` unbuffered.
        let object = serde_json::to_string(&declaration(2)).expect("serializes");
        let line = format!(r#"{{"type":"MODIFIED","object":{object}}}"#);
        let event: kube::api::WatchEvent<Delivered> = serde_json::from_str(&line).expect("decodes");
        let kube::api::WatchEvent::Modified(d) = event else {
            panic!("a modification");
        };
        assert_eq!(d.text.as_deref(), Some(object.as_str()));
        assert_eq!(d.object.metadata.resource_version.as_deref(), Some("42"));
        // Full objects are asked for, and kube's watcher reads the resourceVersion it resumes
        // from through `meta()`.
        use kube::Resource;
        assert!(!Delivered::metadata_api());
        assert_eq!(d.meta().resource_version.as_deref(), Some("42"));
    }
}
