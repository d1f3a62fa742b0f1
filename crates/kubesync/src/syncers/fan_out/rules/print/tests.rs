use std::sync::Arc;

use kube::api::DynamicObject;
use serde_json::json;

use super::super::fixtures::*;
use super::super::{Strategy, hold, in_sync};
use super::*;

fn desired() -> DynamicObject {
    tls_copy()
}

/// `desired` as the apiserver shows it once written: with its identity, and the fields a
/// copy gains there.
fn written(desired: &DynamicObject) -> DynamicObject {
    let mut copy = desired.clone();
    copy.metadata.uid = Some("c-uid".into());
    copy.metadata.resource_version = Some("7".into());
    copy.metadata.creation_timestamp = None;
    copy
}

/// Whether the print of `copy` and the copy as its store held it before prints (see
/// [`hold`]) are judged the same against `desired`, under both strategies; returns the
/// verdict under `Apply`.
fn judged_alike(copy: &DynamicObject, desired: &DynamicObject) -> bool {
    let printer = Printer::default();
    let mut held = copy.clone();
    hold(&mut held);
    let mut apply = None;
    for strategy in [Strategy::Apply, Strategy::Replace] {
        let by_print = printer.print(copy).in_sync(desired, strategy);
        let by_copy = in_sync(&held, desired, strategy);
        assert_eq!(
            by_print, by_copy,
            "{strategy:?}: print {by_print}, copy {by_copy}\ncopy: {copy:?}\ndesired: {desired:?}"
        );
        apply.get_or_insert(by_print);
    }
    apply.unwrap_or_default()
}

/// Sets `key` in `map` to `value`, or removes it (`None`).
fn set(map: &mut std::collections::BTreeMap<String, String>, key: &str, value: Option<&str>) {
    match value {
        Some(v) => map.insert(key.into(), v.into()),
        None => map.remove(key),
    };
}

#[test]
fn a_print_is_judged_as_the_copy_is() {
    let want = desired();
    let copy = written(&want);
    assert!(judged_alike(&copy, &want), "as written");

    let edit = |f: &dyn Fn(&mut DynamicObject)| {
        let mut c = copy.clone();
        f(&mut c);
        c
    };
    // Content: a changed value, a removed key, an added key, another top-level field.
    assert!(!judged_alike(
        &edit(&|c| c.data["data"]["tls.key"] = json!("eA==")),
        &want
    ));
    assert!(!judged_alike(
        &edit(&|c| {
            c.data["data"].as_object_mut().map(|m| m.remove("tls.key"));
        }),
        &want
    ));
    assert!(!judged_alike(
        &edit(&|c| c.data["data"]["extra"] = json!("eA==")),
        &want
    ));
    assert!(!judged_alike(
        &edit(&|c| c.data["type"] = json!("Opaque")),
        &want
    ));
    // Another top-level field, and a status: in sync with Apply (not with Replace, for the
    // field), as the copy itself is judged.
    assert!(judged_alike(
        &edit(&|c| c.data["immutable"] = json!(false)),
        &want
    ));
    assert!(judged_alike(
        &edit(&|c| c.data["status"] = json!({"x": 1})),
        &want
    ));
    // Labels and annotations: others' extra ones, changed ones, missing ones.
    let label = |c: &mut DynamicObject, k: &str, v: Option<&str>| {
        set(c.metadata.labels.get_or_insert_default(), k, v)
    };
    assert!(judged_alike(
        &edit(&|c| label(c, "extra", Some("1"))),
        &want
    ));
    assert!(!judged_alike(
        &edit(&|c| label(c, "app", Some("other"))),
        &want
    ));
    assert!(!judged_alike(&edit(&|c| label(c, "app", None)), &want));
    assert!(!judged_alike(&edit(&|c| label(c, MANAGED_BY, None)), &want));
    let annotate = |c: &mut DynamicObject, k: &str, v: Option<&str>| {
        set(c.metadata.annotations.get_or_insert_default(), k, v)
    };
    assert!(judged_alike(
        &edit(&|c| annotate(c, "note-by-a-tool", Some("1"))),
        &want
    ));
    assert!(!judged_alike(
        &edit(&|c| annotate(c, OWNER, Some("x/y/z"))),
        &want
    ));
    assert!(!judged_alike(&edit(&|c| annotate(c, "note", None)), &want));
    // A large value (held as a digest before prints): equal, and changed.
    let mut big = want.clone();
    big.data["data"]["blob"] = json!("QUFB".repeat(2000));
    let big_copy = written(&big);
    assert!(judged_alike(&big_copy, &big));
    let mut changed = big_copy.clone();
    changed.data["data"]["blob"] = json!("QkJC".repeat(2000));
    assert!(!judged_alike(&changed, &big));
}

#[test]
fn fields_the_apiserver_allocates_are_left_out_unless_the_copy_should_set_them() {
    let service = |spec: serde_json::Value| -> DynamicObject {
        obj(json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "n", "labels": {MANAGED_BY: "uid-1"}},
            "spec": spec}))
    };
    let want = service(json!({"ports": [{"port": 80}]}));
    let copy = written(&service(
        json!({"ports": [{"port": 80}], "clusterIP": "10.0.0.7"}),
    ));
    assert!(
        judged_alike(&copy, &want),
        "an allocated clusterIP is not compared"
    );
    // A destination that pins it: compared.
    let pinned = service(json!({"ports": [{"port": 80}], "clusterIP": "10.0.0.9"}));
    assert!(!judged_alike(&copy, &pinned));
    assert!(allocated::pins_any(&pinned) && !allocated::pins_any(&want));
}

#[test]
fn copies_of_one_source_share_what_they_have_in_common() {
    let printer = Printer::default();
    let want = desired();
    let prints: Vec<CopyPrint> = (0..100)
        .map(|i| {
            let mut c = written(&want);
            c.metadata.namespace = Some(format!("team-{i}"));
            c.metadata.uid = Some(format!("uid-{i}"));
            printer.print(&c)
        })
        .collect();
    assert_eq!(printer.shared_parts(), 1, "one kind, one set of labels");
    assert!(
        prints
            .iter()
            .all(|p| Arc::ptr_eq(&p.shared, &prints[0].shared))
    );
    assert_eq!(prints[42].namespace(), Some("team-42"));
    assert_eq!(prints[42].name(), "ca");
    assert_eq!(prints[42].uid().as_deref(), Some("uid-42"));
    // Copies in one namespace hold its name once; a copy of another name has its own part.
    let mut other = written(&want);
    other.metadata.namespace = Some("team-42".into());
    other.metadata.name = Some("other".into());
    let other = printer.print(&other);
    assert_eq!(other.name(), "other");
    assert!(Arc::ptr_eq(
        other.namespace.as_ref().expect("a namespace"),
        prints[42].namespace.as_ref().expect("a namespace")
    ));
    assert_eq!(printer.shared_parts(), 2);
    drop(other);
    // Parts no print uses are swept as new ones come.
    drop(prints);
    for i in 0..2 * SWEEP_FROM {
        let mut c = written(&want);
        c.metadata.labels = Some([("n".to_string(), i.to_string())].into());
        let _ = printer.print(&c);
    }
    assert!(printer.shared_parts() <= SWEEP_FROM + 1);
}

#[test]
fn readers_of_objects_see_the_copy_s_metadata() {
    let want = desired();
    let mut copy = written(&want);
    copy.metadata.namespace = Some("team-a".into());
    let print = Printer::default().print(&copy);
    let shown = crate::runtime::Summary::object(&print);
    assert_eq!(shown.metadata.name, copy.metadata.name);
    assert_eq!(shown.metadata.namespace, copy.metadata.namespace);
    assert_eq!(shown.metadata.uid.as_deref(), Some("c-uid"));
    assert_eq!(shown.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(shown.metadata.labels, copy.metadata.labels);
    assert_eq!(shown.metadata.annotations, copy.metadata.annotations);
    assert_eq!(shown.types, copy.types);
    assert!(shown.data.is_null(), "metadata only");
    assert!(print.owned_by(&owner()));
    assert!(super::super::owned_by(&shown, &owner()));
    let mut other = owner();
    other.reference = "fleet/apps/other".into();
    assert!(!print.owned_by(&other), "a forged reference is not ours");
}

/// Both marks, always: an object that carries only the declaration's uid (a label anyone who
/// may patch it can add) or only its reference is someone else's, on the object and on its
/// print alike.
#[test]
fn one_mark_alone_is_never_ownership() {
    let want = desired();
    let both = written(&want);
    assert!(super::super::owned_by(&both, &owner()));
    let mut uid_only = both.clone();
    uid_only
        .metadata
        .annotations
        .as_mut()
        .expect("annotations")
        .remove(super::super::OWNER);
    let mut reference_only = both.clone();
    reference_only
        .metadata
        .labels
        .as_mut()
        .expect("labels")
        .remove(super::super::MANAGED_BY);
    let printer = Printer::default();
    for (what, copy) in [("uid only", &uid_only), ("reference only", &reference_only)] {
        assert!(!super::super::owned_by(copy, &owner()), "{what}");
        assert!(!printer.print(copy).owned_by(&owner()), "{what}, printed");
    }
}

#[test]
fn a_print_holds_a_fraction_of_the_copy() {
    let printer = Printer::default();
    let want = desired();
    let copies: Vec<DynamicObject> = (0..2).map(|_| written(&want)).collect();
    let prints: Vec<CopyPrint> = copies.iter().map(|c| printer.print(c)).collect();
    // What one more copy holds: its own strings and digests (the shared part, name and
    // namespace are held once).
    let own = |p: &CopyPrint| {
        std::mem::size_of::<CopyPrint>()
            + [&p.uid, &p.resource_version]
                .iter()
                .map(|c| match c {
                    Some(Compact::Text(t)) => t.len(),
                    _ => 0,
                })
                .sum::<usize>()
            + p.values.len() * std::mem::size_of::<ValueDigest>()
    };
    let text = serde_json::to_string(&copies[1]).expect("json").len();
    assert!(
        own(&prints[1]) * 2 < text,
        "{} bytes against {text} as text",
        own(&prints[1])
    );
}

/// `copy` with managedFields entries of `(manager, operation, fieldsV1)`.
fn managed(copy: &DynamicObject, entries: &[(&str, &str, serde_json::Value)]) -> DynamicObject {
    let mut copy = copy.clone();
    let entries: Vec<serde_json::Value> = entries
        .iter()
        .map(|(manager, operation, fields)| {
            json!({"manager": manager, "operation": operation, "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": fields})
        })
        .collect();
    copy.metadata.managed_fields =
        Some(serde_json::from_value(json!(entries)).expect("managedFields"));
    copy
}

/// An update is written on a print only where the copy in full would need nothing more:
/// no drift to attribute, no ownership upgrade; the same with managedFields held compacted.
#[test]
fn an_update_is_written_on_a_print_only_where_the_copy_would_need_nothing_more() {
    let old = written(&desired());
    let data = json!({"f:data": {".": {}, "f:ca.crt": {}, "f:tls.crt": {}, "f:tls.key": {}}});
    let posted = managed(&old, &[(FIELD_MANAGER, "Update", data.clone())]);
    let mut newer = desired();
    newer.data["data"]["tls.crt"] = json!("TkVX");
    let annotations = newer.metadata.annotations.as_mut().expect("annotations");
    annotations.insert(SOURCE_VERSION.into(), "43".into());
    let mut fewer = newer.clone();
    fewer.data["data"]
        .as_object_mut()
        .expect("data")
        .remove("tls.key");
    let edited = managed(
        &old,
        &[
            (FIELD_MANAGER, "Update", data.clone()),
            (
                "kubectl-edit",
                "Update",
                json!({"f:data": {"f:tls.crt": {}}}),
            ),
        ],
    );
    let mut compacted = posted.clone();
    crate::object::compact_managed_fields(&mut compacted);
    let mut changed_there = posted.clone();
    changed_there.data["data"]["tls.key"] = json!("R09ORQ==");
    let printer = Printer::default();
    for (copy, to, updatable) in [
        (&old, &newer, true),
        (&posted, &newer, true),
        (&compacted, &newer, true),
        // The POST owns a key the update leaves out: ownership upgrade first.
        (&posted, &fewer, false),
        (&compacted, &fewer, false),
        // Someone else wrote a field: who changed what is read from the copy.
        (&edited, &newer, false),
        // The copy carries the source's version: someone may have removed a field.
        (&changed_there, &old, false),
    ] {
        let print = printer.print(copy);
        assert!(!print.in_sync(to, Strategy::Apply));
        assert_eq!(print.updatable_to(to), updatable, "{copy:?} to {to:?}");
        if updatable {
            let changed = super::super::changed_fields(copy, to, Strategy::Apply);
            assert!(super::super::drift(copy, to, &changed, FIELD_MANAGER).is_none());
            assert!(super::super::ownership_upgrade(copy, to, FIELD_MANAGER).is_none());
        }
    }
    let full = |copy: &DynamicObject, to: &DynamicObject| {
        let changed = super::super::changed_fields(copy, to, Strategy::Apply);
        super::super::drift(copy, to, &changed, FIELD_MANAGER)
    };
    assert!(super::super::ownership_upgrade(&posted, &fewer, FIELD_MANAGER).is_some());
    assert!(
        full(&edited, &newer).is_some(),
        "attributed to kubectl-edit"
    );
}

/// A print holds a uid and a resourceVersion without an allocation when they have the
/// apiserver's forms, and gives back exactly the text it was made of, whatever it is.
#[test]
fn uids_and_resource_versions_read_back_as_they_were() {
    for text in [
        "0b5e3c1e-8f0a-4c1d-9e2b-3a4f5d6e7f80",
        "00000000-0000-0000-0000-000000000000",
        "0B5E3C1E-8F0A-4C1D-9E2B-3A4F5D6E7F80",
        "0b5e3c1e-8f0a-4c1d-9e2b-3a4f5d6e7f8",
        "0b5e3c1e8f0a4c1d9e2b3a4f5d6e7f80abcd",
        "1234567",
        "0",
        "007",
        "18446744073709551616",
        "+5",
        "",
        "uid-42",
    ] {
        let compact = Compact::new(text);
        assert_eq!(compact.text(), text, "{compact:?}");
    }
    assert!(matches!(
        Compact::new("0b5e3c1e-8f0a-4c1d-9e2b-3a4f5d6e7f80"),
        Compact::Uuid(_)
    ));
    assert!(matches!(Compact::new("1234567"), Compact::Number(1234567)));
    assert!(matches!(Compact::new("007"), Compact::Text(_)));
}
