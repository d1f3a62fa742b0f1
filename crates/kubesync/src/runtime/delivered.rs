//! What a watch hands its store: an object parsed, or — for a packed watch of full objects —
//! its metadata parsed and the object kept as the very text it arrived as.
//!
//! A packed store holds each object as its JSON text ([`Watch::packed`](super::Watch::packed)).
//! Decoding a watch event into an object tree only to write it back out as text costs the
//! tree for the moment it lives: a declaration whose status lists a thousand destinations is
//! about 100 KiB of text and about 1 MiB as a tree of maps and strings (its `managedFields`
//! another tree beside it). [`Delivered`] decodes such an event by keeping the object's text
//! as it arrived and parsing only its type and metadata (without `managedFields`) from it.

use std::borrow::Cow;

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

impl Delivered {
    /// The object without `metadata.managedFields`: cut out of its text where it is kept
    /// (the other fields stay as they arrived, as text), else from the object.
    pub(super) fn without_managed_fields(&mut self) {
        self.object.metadata.managed_fields = None;
        let Some(text) = &self.text else {
            return;
        };
        match without_managed_fields(text) {
            Ok(Some(cut)) => self.text = Some(cut),
            Ok(None) => {}
            // Not expected (the text was just decoded as JSON); then it is decoded whole.
            Err(e) => {
                tracing::debug!(error = %e, "an object's text could not be cut; decoding it");
                if let Ok(mut object) = serde_json::from_str::<DynamicObject>(text) {
                    object.metadata.managed_fields = None;
                    *self = object.into();
                }
            }
        }
    }
}

/// An object's fields, each as its text.
type Fields<'a> = std::collections::BTreeMap<Cow<'a, str>, &'a RawValue>;

/// `text` (an object) without `metadata.managedFields`, or `None` where it has none. Only
/// the object's and its metadata's fields are read, each kept as text: no tree is built.
fn without_managed_fields(text: &str) -> serde_json::Result<Option<Box<str>>> {
    let mut fields: Fields<'_> = serde_json::from_str(text)?;
    let Some(metadata) = fields.get("metadata") else {
        return Ok(None);
    };
    let mut meta: Fields<'_> = serde_json::from_str(metadata.get())?;
    if meta.remove("managedFields").is_none() {
        return Ok(None);
    }
    let meta = RawValue::from_string(serde_json::to_string(&meta)?)?;
    fields.insert(Cow::Borrowed("metadata"), &meta);
    Ok(Some(serde_json::to_string(&fields)?.into_boxed_str()))
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
    fn managed_fields_are_cut_out_of_the_text_and_nothing_else() {
        let sent = declaration(3);
        let mut d: Delivered =
            serde_json::from_str(&serde_json::to_string(&sent).expect("serializes"))
                .expect("decodes");
        d.without_managed_fields();
        let kept: serde_json::Value =
            serde_json::from_str(d.text.as_deref().expect("still text")).expect("JSON");
        let mut want = sent;
        want["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("managedFields");
        assert_eq!(kept, want, "only managedFields is gone");
        // Read back as the store reads it: no managedFields.
        let back: DynamicObject =
            serde_json::from_str(d.text.as_deref().expect("text")).expect("object");
        assert_eq!(back.metadata.managed_fields, None);
        // An object without them, and one decoded whole, come out alike.
        let before = d.text.clone();
        d.without_managed_fields();
        assert_eq!(d.text, before, "nothing to cut");
        let mut whole = Delivered::from(
            serde_json::from_value::<DynamicObject>(declaration(1)).expect("object"),
        );
        assert!(whole.object.metadata.managed_fields.is_some());
        whole.without_managed_fields();
        assert_eq!(whole.object.metadata.managed_fields, None);
        assert_eq!(whole.text, None);
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
