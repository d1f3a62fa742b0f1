//! What to do at one destination, given what is there.

use std::collections::BTreeMap;

use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};

use super::copy::Owner;
use super::digest;
use super::{MANAGED_BY, ORPHAN_ON_DELETE, OWNER, PROTECT, SHARD, SOURCE, SOURCE_VERSION};

/// How copies are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Strategy {
    /// Server-side apply with kubesync's field manager, forced; other managers keep theirs.
    #[default]
    Apply,
    /// kubesync owns the whole object; an update rejected for an immutable field deletes and
    /// recreates the copy.
    Replace,
}

/// What to do when the destination holds an object kubesync did not create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OnConflict {
    /// Leave it untouched and report a Conflict.
    #[default]
    Skip,
    /// Take it over (unless it carries `kubesync.io/protect: "true"`).
    Adopt,
}

/// What becomes of the copies when their declaration or its source is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeletionPolicy {
    /// They are deleted (only kubesync's own copies, found by their marks).
    #[default]
    Delete,
    /// They stay, and kubesync's marks are removed from them: ordinary objects that no
    /// declaration manages any more.
    Orphan,
}

/// Whether a copy kubesync no longer wants is released (its marks removed, the object kept)
/// rather than deleted: under [`DeletionPolicy::Orphan`] once the source or the declaration
/// is gone (`source_gone`), and always for a copy annotated `kubesync.io/orphan-on-delete:
/// "true"`. A copy that only left the destinations (a changed spec) is deleted under either
/// policy, unless annotated.
pub fn orphans(copy: &DynamicObject, policy: DeletionPolicy, source_gone: bool) -> bool {
    let annotated = copy
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ORPHAN_ON_DELETE))
        .is_some_and(|v| v == "true");
    annotated || (policy == DeletionPolicy::Orphan && source_gone)
}

/// The JSON merge patch that releases a copy: removes kubesync's labels and annotations, and
/// carries the copy's uid (when known), so that the apiserver refuses it (409) if the object
/// was replaced.
pub fn release_patch(uid: Option<&str>) -> serde_json::Value {
    let mut patch = serde_json::json!({"metadata": {
        "labels": {MANAGED_BY: null, SHARD: null},
        "annotations": {OWNER: null, SOURCE: null, SOURCE_VERSION: null},
    }});
    if let Some(uid) = uid {
        patch["metadata"]["uid"] = uid.into();
    }
    patch
}

/// The decision for one destination.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Nothing there: create the copy.
    Create,
    /// Our copy, out of date or drifted: write it with the strategy.
    Update,
    /// A foreign object we may adopt: write it with the strategy (marks included).
    Adopt,
    /// Our copy is current.
    InSync,
    /// Someone else's object: leave it; the message says why.
    Conflict(String),
}

/// Whether `existing` already carries everything `desired` says: every top-level field except
/// metadata and status equal (a value the store holds as a [`digest`] compared by it), and the desired labels and annotations present with their values
/// (with `Replace`, also no other labels or annotations than desired).
pub fn in_sync(existing: &DynamicObject, desired: &DynamicObject, strategy: Strategy) -> bool {
    let existing = &*super::allocated::comparable(existing, desired);
    let fields_equal = desired.data.as_object().is_none_or(|m| {
        m.iter()
            .all(|(k, v)| existing.data.get(k).is_some_and(|h| digest::same(h, v)))
    }) && (strategy == Strategy::Apply
        || existing.data.as_object().is_none_or(|m| {
            m.keys()
                .all(|k| k == "status" || desired.data.get(k).is_some())
        }));
    let subset = |want: &Option<BTreeMap<String, String>>,
                  have: &Option<BTreeMap<String, String>>| {
        let (want, have) = (
            want.clone().unwrap_or_default(),
            have.clone().unwrap_or_default(),
        );
        want.iter().all(|(k, v)| have.get(k) == Some(v))
            && (strategy == Strategy::Apply || want.len() == have.len())
    };
    fields_equal
        && subset(&desired.metadata.labels, &existing.metadata.labels)
        && subset(
            &desired.metadata.annotations,
            &existing.metadata.annotations,
        )
}

/// What to do at one destination.
pub fn decide(
    existing: Option<&DynamicObject>,
    desired: &DynamicObject,
    owner: &Owner,
    strategy: Strategy,
    on_conflict: OnConflict,
) -> Decision {
    let Some(existing) = existing else {
        return Decision::Create;
    };
    let labels = existing.metadata.labels.clone().unwrap_or_default();
    let annotations = existing.metadata.annotations.clone().unwrap_or_default();
    match labels.get(MANAGED_BY) {
        Some(_) if super::owned_by(existing, owner) => {
            if in_sync(existing, desired, strategy) {
                Decision::InSync
            } else {
                Decision::Update
            }
        }
        Some(_) => Decision::Conflict(format!(
            "managed by {}",
            annotations
                .get(OWNER)
                .cloned()
                .unwrap_or_else(|| "another kubesync declaration".into())
        )),
        None if annotations.get(PROTECT).map(String::as_str) == Some("true") => Decision::Conflict(
            "exists, not created by kubesync, and protected by kubesync.io/protect".into(),
        ),
        None if on_conflict == OnConflict::Adopt => Decision::Adopt,
        None => {
            Decision::Conflict("exists and was not created by kubesync (onConflict: skip)".into())
        }
    }
}

/// The uid an apply carries as its precondition: that of the object the decision was made on.
/// The apiserver refuses the apply (409, "uid mismatch") if that object was deleted and
/// replaced by another one in the meantime, so an update or adoption never takes over an
/// object it did not decide on. `None` when the store showed no object: an apply with a uid
/// never creates, so a create carries none.
pub fn apply_precondition(existing: Option<&DynamicObject>) -> Option<String> {
    existing.and_then(|e| e.metadata.uid.clone())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;
    use crate::syncers::fan_out::rules::copy::owned_by;
    use serde_json::json;

    #[test]
    fn copies_are_released_under_orphan_or_when_annotated() {
        let plain = obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "a", "namespace": "n"}}));
        let annotated = obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "a", "namespace": "n",
                "annotations": {ORPHAN_ON_DELETE: "true"}}}));
        use DeletionPolicy::{Delete, Orphan};
        assert!(!orphans(&plain, Delete, true), "deleted by default");
        assert!(
            orphans(&plain, Orphan, true),
            "kept when the source is gone"
        );
        assert!(
            !orphans(&plain, Orphan, false),
            "a destination that is no longer wanted loses its copy under either policy"
        );
        assert!(orphans(&annotated, Delete, true));
        assert!(orphans(&annotated, Delete, false));
        let patch = release_patch(Some("u1"));
        assert_eq!(patch["metadata"]["uid"], "u1");
        assert!(
            release_patch(None)["metadata"].get("uid").is_none(),
            "never a null uid"
        );
        for l in [MANAGED_BY, SHARD] {
            assert!(patch["metadata"]["labels"][l].is_null());
        }
        for a in [OWNER, SOURCE, SOURCE_VERSION] {
            assert!(patch["metadata"]["annotations"][a].is_null());
        }
    }

    #[test]
    fn applies_are_conditional_on_the_object_decided_on() {
        let existing = obj(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "a", "namespace": "n", "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427"}}));
        assert_eq!(
            apply_precondition(Some(&existing)).as_deref(),
            Some("1b4e28ba-2fa1-11d2-883f-0016d3cca427")
        );
        assert_eq!(apply_precondition(None), None);
    }

    #[test]
    fn decisions() {
        let desired = tls_copy();
        assert_eq!(
            decide(None, &desired, &owner(), Strategy::Apply, OnConflict::Skip),
            Decision::Create
        );
        let mut ours = desired.clone();
        assert_eq!(
            decide(
                Some(&ours),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::InSync
        );
        // Another manager's extra label is fine with Apply, not with Replace.
        ours.metadata
            .labels
            .get_or_insert_default()
            .insert("extra".into(), "1".into());
        assert_eq!(
            decide(
                Some(&ours),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::InSync
        );
        assert_eq!(
            decide(
                Some(&ours),
                &desired,
                &owner(),
                Strategy::Replace,
                OnConflict::Skip
            ),
            Decision::Update
        );
        // Drift in the data is reverted.
        let mut drifted = desired.clone();
        drifted.data["data"]["ca.crt"] = json!("eA==");
        assert_eq!(
            decide(
                Some(&drifted),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::Update
        );
        // Someone else's object.
        let foreign = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "team-a"}}),
        );
        assert!(matches!(
            decide(
                Some(&foreign),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Skip
            ),
            Decision::Conflict(_)
        ));
        assert_eq!(
            decide(
                Some(&foreign),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Adopt
            ),
            Decision::Adopt
        );
        let protected = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "team-a", "annotations": {PROTECT: "true"}}}),
        );
        assert!(
            matches!(decide(Some(&protected), &desired, &owner(), Strategy::Apply, OnConflict::Adopt), Decision::Conflict(m) if m.contains("protect"))
        );
        // Another declaration's copy: the first keeps it.
        let theirs = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "team-a",
            "labels": {MANAGED_BY: "uid-2"}, "annotations": {OWNER: "local/other/sync"}}}),
        );
        let d = decide(
            Some(&theirs),
            &desired,
            &owner(),
            Strategy::Apply,
            OnConflict::Adopt,
        );
        assert_eq!(d, Decision::Conflict("managed by local/other/sync".into()));
        assert!(
            owned_by(&desired, &owner())
                && !owned_by(&theirs, &owner())
                && !owned_by(&foreign, &owner())
        );
        // A copy whose uid is ours but whose reference is another's (a declaration of another
        // cluster with a forged uid, or a forged mark): not ours to write or remove.
        let forged = obj(
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "ca", "namespace": "team-a",
            "labels": {MANAGED_BY: owner().uid}, "annotations": {OWNER: "fleet/apps/sync"}}}),
        );
        assert!(!owned_by(&forged, &owner()));
        assert_eq!(
            decide(
                Some(&forged),
                &desired,
                &owner(),
                Strategy::Apply,
                OnConflict::Adopt
            ),
            Decision::Conflict("managed by fleet/apps/sync".into())
        );
    }
}
