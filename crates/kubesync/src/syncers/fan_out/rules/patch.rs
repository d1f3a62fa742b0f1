//! Per-destination overrides: patches applied to a copy after the filters, before it is
//! compared and written (so the drift check compares against the patched copy).

use kube::api::DynamicObject;
use serde_json::Value;

/// One override of the copies at a destination.
#[derive(Clone, Debug, PartialEq)]
pub enum CopyPatch {
    /// A JSON merge patch (RFC 7386): objects merge, `null` removes a field.
    Merge(Value),
    /// A JSON patch (RFC 6902): a list of operations (`add`, `replace`, `remove`, `test`, …).
    Json(json_patch::Patch),
}

/// What a patch may not change: the copy's type, namespace and name.
fn identity(obj: &DynamicObject) -> (Option<(String, String)>, Option<String>, Option<String>) {
    (
        obj.types
            .as_ref()
            .map(|t| (t.api_version.clone(), t.kind.clone())),
        obj.metadata.namespace.clone(),
        obj.metadata.name.clone(),
    )
}

/// Every `kubesync.io/` label and annotation on a copy (its marks, and any other key of
/// kubesync's, such as `kubesync.io/orphan-on-delete`), and every one with a `reserved`
/// prefix: a patch may not add, change or remove one. Only kubesync speaks in its own keys (a
/// patch that set `orphan-on-delete` would keep the copy after consent is withdrawn), and a
/// reserved key would make the copy a declaration or consent where it lands.
fn marks(obj: &DynamicObject, reserved: &[String]) -> Vec<(bool, String, String)> {
    let ours = |m: &Option<std::collections::BTreeMap<String, String>>, label: bool| {
        m.iter()
            .flatten()
            .filter(|(k, _)| {
                k.starts_with(KUBESYNC_PREFIX) || super::copy::is_reserved(reserved, k)
            })
            .map(|(k, v)| (label, k.clone(), v.clone()))
            .collect::<Vec<_>>()
    };
    let mut all = ours(&obj.metadata.labels, true);
    all.extend(ours(&obj.metadata.annotations, false));
    all
}

/// The largest copy patches may build: the apiserver's limit on a request's body (3 MiB by
/// default), which no write of a larger copy could pass anyway.
pub const MAX_PATCHED_BYTES: usize = 3 * 1024 * 1024;

/// Applies the JSON patch `ops` to `value`, or says why not (after the patch's number). Every
/// operation's growth is bounded before it is made: only `copy` grows a document by more than
/// its own text (by the value it copies, which a series of them doubles each time), so the
/// size the copy could reach (`size`, an upper bound kept across patches, measured once) is
/// counted up to each `copy` and a `copy` that would pass [`MAX_PATCHED_BYTES`] is refused
/// before anything is allocated.
fn json_ops(
    value: &mut Value,
    ops: &[json_patch::PatchOperation],
    size: &mut Option<usize>,
) -> Result<(), String> {
    use json_patch::PatchOperation;
    let mut start = 0;
    // Without the undo of `json_patch::patch`, which panics when it cannot undo (a `move` of a
    // value into its own parent, then a failing operation): on an error the half-patched value
    // is dropped anyway.
    let apply = |value: &mut Value, from: usize, to: usize| {
        json_patch::patch_unsafe(value, &ops[from..to]).map_err(|mut e| {
            e.operation += from;
            format!(" does not apply: {e}")
        })
    };
    for (i, op) in ops.iter().enumerate() {
        let grows = match op {
            PatchOperation::Add(o) => super::digest::json_len(&o.value),
            PatchOperation::Replace(o) => super::digest::json_len(&o.value),
            PatchOperation::Copy(o) => {
                // What it copies is the document as the operations before it left it.
                apply(value, start, i)?;
                start = i;
                value
                    .pointer(o.from.as_str())
                    .map_or(0, super::digest::json_len)
            }
            _ => 0,
        };
        let now = *size.get_or_insert_with(|| super::digest::json_len(value));
        let after = now.saturating_add(grows).saturating_add(o_len(op));
        if after > MAX_PATCHED_BYTES {
            return Err(format!(
                ", operation '/{i}': the copy could grow to {} KiB, over the {} KiB the apiserver accepts in one request; a copy's patches may not make it larger (each copy operation adds what it copies)",
                after / 1024,
                MAX_PATCHED_BYTES / 1024
            ));
        }
        *size = Some(after);
    }
    apply(value, start, ops.len())
}

/// The bytes an operation's paths may add to a document (a new key).
fn o_len(op: &json_patch::PatchOperation) -> usize {
    use json_patch::PatchOperation;
    match op {
        PatchOperation::Add(o) => o.path.as_str().len(),
        PatchOperation::Copy(o) => o.path.as_str().len(),
        PatchOperation::Move(o) => o.path.as_str().len(),
        _ => 0,
    }
}

/// The prefix of kubesync's own label and annotation keys.
const KUBESYNC_PREFIX: &str = "kubesync.io/";

/// `desired` with `patches` applied in order, or why that fails: a patch that does not apply
/// (a JSON patch's `test` or path, naming its position), or a result that changes the copy's
/// apiVersion, kind, namespace or name, kubesync's marks, or a key with a `reserved` prefix
/// (see [`CopyRules::reserved`](super::CopyRules::reserved)).
pub fn patched(
    desired: DynamicObject,
    patches: &[CopyPatch],
    reserved: &[String],
) -> Result<DynamicObject, String> {
    if patches.is_empty() {
        return Ok(desired);
    }
    let mut value = serde_json::to_value(&desired).map_err(|e| e.to_string())?;
    let mut size = None;
    for (i, p) in patches.iter().enumerate() {
        match p {
            CopyPatch::Merge(m) => {
                // It adds at most its own text.
                if let Some(size) = size.as_mut() {
                    *size += super::digest::json_len(m);
                }
                json_patch::merge(&mut value, m)
            }
            CopyPatch::Json(ops) => {
                json_ops(&mut value, ops, &mut size).map_err(|e| format!("patch {}{e}", i + 1))?
            }
        }
    }
    let out: DynamicObject = serde_json::from_value(value)
        .map_err(|e| format!("the patched copy is not a Kubernetes object: {e}"))?;
    if identity(&out) != identity(&desired) {
        return Err(
            "the patches change the copy's apiVersion, kind, namespace or name, which they may not"
                .into(),
        );
    }
    if marks(&out, &[]) != marks(&desired, &[]) {
        return Err("the patches add, change or remove a kubesync.io/ label or annotation on the copy (kubesync's marks and its own keys), which they may not".into());
    }
    if marks(&out, reserved) != marks(&desired, reserved) {
        return Err(format!(
            "the patches add, change or remove a label or annotation under {}, which would make the copy a declaration or consent where it lands; a declaration that needs its destinations' consent may not write one",
            reserved.join(", ")
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::obj;
    use super::super::{MANAGED_BY, ORPHAN_ON_DELETE, OWNER};
    use super::*;
    use serde_json::json;

    fn copy() -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "eu",
                "labels": {MANAGED_BY: "u"}, "annotations": {OWNER: "local/apps/cfg"}},
            "data": {"color": "blue", "size": "s"}}))
    }

    fn patch(desired: DynamicObject, patches: &[CopyPatch]) -> Result<DynamicObject, String> {
        patched(desired, patches, &[])
    }

    /// A JSON patch of `copy` operations doubles the copy each time (12 of them make 64 MiB of
    /// a 16 KiB ConfigMap): refused at the operation that would pass the apiserver's limit,
    /// before it is made; a copy operation within the limit applies.
    #[test]
    fn copy_operations_may_not_grow_a_copy_past_the_apiservers_limit() {
        let mut big = copy();
        big.data["data"]["blob"] = json!("x".repeat(16 * 1024));
        let doubling: Vec<Value> = (0..12)
            .map(|i| json!({"op": "copy", "from": "/data", "path": format!("/data/d{i}")}))
            .collect();
        let e = patch(big.clone(), &[json_ops(json!(doubling))]).expect_err("unbounded growth");
        assert!(
            e.starts_with("patch 1, operation '/7':") && e.contains("3072 KiB"),
            "refused at the first copy past 3 MiB (16 KiB doubled 8 times): {e}"
        );
        // Spread over patches, merges between them, it is the same copy growing.
        let patches: Vec<CopyPatch> = (0..12)
            .flat_map(|i| {
                [
                    json_ops(
                        json!([{"op": "copy", "from": "/data", "path": format!("/data/d{i}")}]),
                    ),
                    CopyPatch::Merge(json!({"metadata": {"labels": {format!("l{i}"): "x"}}})),
                ]
            })
            .collect();
        let e = patch(big.clone(), &patches).expect_err("growth across patches");
        assert!(e.starts_with("patch 15, operation '/0':"), "{e}");
        // Within the limit: applied, in order, and an error still names its operation.
        let ok = patch(
            big.clone(),
            &[json_ops(json!([
                {"op": "copy", "from": "/data/blob", "path": "/data/blob2"},
                {"op": "remove", "path": "/data/size"},
            ]))],
        )
        .expect("a small copy");
        assert_eq!(ok.data["data"]["blob2"], big.data["data"]["blob"]);
        assert!(ok.data["data"].get("size").is_none());
        let e = patch(
            big,
            &[json_ops(json!([
                {"op": "copy", "from": "/data/blob", "path": "/data/blob2"},
                {"op": "remove", "path": "/data/missing"},
            ]))],
        )
        .expect_err("a missing path");
        assert!(
            e.starts_with("patch 1 does not apply") && e.contains("operation '/1'"),
            "{e}"
        );
    }

    #[test]
    fn patches_may_not_write_reserved_keys() {
        let reserved = vec!["replicator.v1.mittwald.de/".to_string()];
        for p in [
            json!({"metadata": {"annotations": {"replicator.v1.mittwald.de/replicate-to": "*"}}}),
            json!({"metadata": {"labels": {"replicator.v1.mittwald.de/x": "y"}}}),
        ] {
            let e = patched(copy(), &[CopyPatch::Merge(p.clone())], &reserved)
                .expect_err("reserved key");
            assert!(e.contains("declaration or consent"), "{e}");
            // Without reserved prefixes (a trusted declaration), the same patch applies.
            assert!(patched(copy(), &[CopyPatch::Merge(p)], &[]).is_ok());
        }
        let other = json!({"metadata": {"annotations": {"team": "a"}}});
        assert!(patched(copy(), &[CopyPatch::Merge(other)], &reserved).is_ok());
    }

    fn json_ops(v: Value) -> CopyPatch {
        CopyPatch::Json(serde_json::from_value(v).expect("ops"))
    }

    #[test]
    fn merge_and_json_patches_apply_in_order() {
        let out = patch(
            copy(),
            &[
                CopyPatch::Merge(json!({"data": {"color": "red", "size": null}})),
                json_ops(json!([{"op": "add", "path": "/data/region", "value": "eu"}])),
            ],
        )
        .expect("patched");
        assert_eq!(out.data["data"], json!({"color": "red", "region": "eu"}));
        assert_eq!(patch(copy(), &[]).expect("unchanged"), copy());
    }

    #[test]
    fn patches_that_fail_or_change_what_the_copy_is_are_refused() {
        let failing = json_ops(json!([{"op": "test", "path": "/data/color", "value": "green"}]));
        let e = patch(copy(), &[CopyPatch::Merge(json!({})), failing]).expect_err("test fails");
        assert!(e.starts_with("patch 2 does not apply"), "{e}");
        for p in [
            json!({"metadata": {"name": "other"}}),
            json!({"metadata": {"namespace": "us"}}),
            json!({"kind": "Secret"}),
        ] {
            let e = patch(copy(), &[CopyPatch::Merge(p)]).expect_err("identity");
            assert!(e.contains("may not"), "{e}");
        }
        let e = patch(
            copy(),
            &[CopyPatch::Merge(
                json!({"metadata": {"labels": {MANAGED_BY: null}}}),
            )],
        )
        .expect_err("marks");
        assert!(e.contains("marks"), "{e}");
        // No kubesync.io/ key at all: a patch that set orphan-on-delete would keep the copy
        // after consent is withdrawn.
        for p in [
            json!({"metadata": {"annotations": {ORPHAN_ON_DELETE: "true"}}}),
            json!({"metadata": {"labels": {"kubesync.io/anything": "x"}}}),
            json!({"metadata": {"annotations": {OWNER: "local/t1/other"}}}),
        ] {
            let e = patch(copy(), &[CopyPatch::Merge(p.clone())]).expect_err("kubesync key");
            assert!(e.contains("kubesync.io/"), "{p}: {e}");
        }
        let ops = json_ops(
            json!([{"op": "add", "path": "/metadata/annotations/kubesync.io~1orphan-on-delete", "value": "true"}]),
        );
        assert!(patch(copy(), &[ops]).is_err());
        // Keys of others stay the patch's to set.
        assert!(
            patch(
                copy(),
                &[CopyPatch::Merge(
                    json!({"metadata": {"labels": {"example.com/x": "y"}}})
                )]
            )
            .is_ok()
        );
    }

    #[test]
    fn a_json_patch_that_fails_after_a_move_into_its_parent_is_an_error_not_a_panic() {
        // Found by tests/properties.rs: json_patch::patch panicked undoing the first move.
        let ops: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "move", "from": "/data/a", "path": "/data"},
            {"op": "move", "from": "/data/a", "path": "/metadata/name"}
        ]))
        .expect("ops");
        let copy: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cfg", "namespace": "a"}, "data": {"a": "1"}
        }))
        .expect("copy");
        let err = patch(copy, &[CopyPatch::Json(ops)]).expect_err("does not apply");
        assert!(err.starts_with("patch 1 does not apply"), "{err}");
    }
}
