use super::super::watch::Summarize;
use super::*;
use crate::runtime::delivered::Delivered;

fn obj(ns: Option<&str>, name: &str, rv: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv}
    }))
    .expect("object")
}

fn rv(o: Option<Arc<DynamicObject>>) -> Option<String> {
    o.and_then(|o| o.metadata.resource_version.clone())
}

#[test]
fn changes_and_relists() {
    for packed in [false, true] {
        changes_and_relists_when(packed);
    }
}

#[test]
fn a_packed_store_holds_text_and_reads_back_the_same_object() {
    let mut w = ObjectsWriter::new(true, None);
    let mut o = obj(Some("a"), "x", "1");
    o.data = serde_json::json!({"data": {"k": "dg=="}, "type": "Opaque"});
    o.metadata.labels = Some([("l".to_string(), "v".to_string())].into());
    w.apply(Event::Apply(o.clone()));
    let objects = w.objects();
    let inner = objects.inner.read();
    assert!(
        matches!(inner.objects["a"]["x"].held, Held::Text { .. }),
        "held as text, not as a tree"
    );
    drop(inner);
    assert_eq!(w.objects().get(Some("a"), "x").as_deref(), Some(&o));
    assert_eq!(w.objects().state().len(), 1);
    // Metadata only (`data` null) reads back as such, not as an empty object.
    let mut meta = obj(Some("a"), "m", "2");
    meta.data = serde_json::Value::Null;
    w.apply(Event::Apply(meta.clone()));
    assert_eq!(w.objects().get(Some("a"), "m").as_deref(), Some(&meta));
}

#[test]
fn a_packed_store_keeps_the_text_a_watch_delivered_and_reads_it_as_the_object() {
    let mut w = ObjectsWriter::new(true, Some("l"));
    let mut o = obj(Some("a"), "x", "7");
    o.data = serde_json::json!({"spec": {"k": "v"}, "status": {"n": [1, 2]}});
    o.metadata.labels = Some([("l".to_string(), "v".to_string())].into());
    // Decoded as a packed watch of full objects decodes it: its text kept, its metadata parsed.
    let text = serde_json::to_string(&o).expect("serializes");
    let delivered: Delivered = serde_json::from_str(&text).expect("decodes");
    assert!(delivered.text.is_some() && delivered.object.data.is_null());
    let changed = w.apply(Event::Apply(delivered.clone()));
    assert_eq!(
        changed.map(|c| c.metadata.name.clone()),
        Some(Some("x".to_string())),
        "the change is told"
    );
    let objects = w.objects();
    assert!(matches!(
        &objects.inner.read().objects["a"]["x"].held,
        Held::Text { json, no_data: false } if **json == *text
    ));
    assert_eq!(
        objects.get(Some("a"), "x").as_deref(),
        Some(&o),
        "read back whole"
    );
    assert_eq!(
        objects.resource_version_of((Some("a"), "x"), true),
        Some(Some("7".to_string()))
    );
    assert_eq!(objects.labelled("l", "v").len(), 1, "indexed by its label");
    // A relist delivering the same version tells nothing changed; a delete removes it.
    w.apply(Event::<Delivered>::Init);
    w.apply(Event::InitApply(delivered.clone()));
    let relisted = w.finish_listing();
    assert!(relisted.changed.is_empty() && relisted.vanished.is_empty());
    w.apply(Event::Delete(delivered));
    assert_eq!(objects.get(Some("a"), "x"), None);
}

#[test]
fn a_typed_read_is_the_object_converted_packed_or_not() {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    for packed in [false, true] {
        let mut w = ObjectsWriter::new(packed, None);
        let mut o = obj(Some("a"), "x", "1");
        o.data = serde_json::json!({"data": {"k": "v"}});
        w.apply(Event::Apply(o.clone()));
        let mut meta = obj(Some("a"), "m", "2");
        meta.data = serde_json::Value::Null;
        w.apply(Event::Apply(meta));
        let objects = w.objects();
        let typed: ConfigMap = objects
            .get_as((Some("a"), "x"), true)
            .expect("held")
            .expect("a ConfigMap");
        assert_eq!(typed, o.clone().try_parse::<ConfigMap>().expect("parsed"));
        assert!(
            objects
                .get_as::<ConfigMap>((Some("a"), "y"), true)
                .is_none()
        );
        // Held as metadata only: not shown to a mixed store's reader of full objects; else
        // converted as the object held.
        assert!(
            objects
                .get_as::<ConfigMap>((Some("a"), "m"), true)
                .is_none()
        );
        let meta: ConfigMap = objects
            .get_as((Some("a"), "m"), false)
            .expect("held")
            .expect("all of a ConfigMap's fields are optional");
        assert_eq!(meta.metadata.name.as_deref(), Some("m"));
        assert!(meta.data.is_none());
        let other = objects.get_as::<Pod>((Some("a"), "x"), true).expect("held");
        assert!(other.expect_err("another kind").contains("Pod"));
    }
}

#[test]
fn content_is_handed_over_only_at_the_version_held_and_dropped_on_demand() {
    for packed in [false, true] {
        let mut w = ObjectsWriter::new(packed, None);
        let objects = w.objects();
        let mut full = obj(Some("a"), "x", "5");
        full.data = serde_json::json!({"data": {"k": "dg=="}});
        full.metadata.managed_fields = Some(vec![Default::default()]);
        let mut meta = full.clone();
        strip(&mut meta);
        assert!(meta.data.is_null() && meta.metadata.managed_fields.is_none());
        w.apply(Event::Apply(meta.clone()));
        assert!(objects.holds_metadata_of(Some("a"), "x"));
        let mut older = full.clone();
        older.metadata.resource_version = Some("4".into());
        assert!(!objects.hold_in_full(Arc::new(older)), "another version");
        assert!(objects.holds_metadata_of(Some("a"), "x"));
        assert!(
            objects.hold_in_full(Arc::new(full.clone())),
            "the version held"
        );
        assert_eq!(objects.get(Some("a"), "x").as_deref(), Some(&full));
        assert!(
            !objects.hold_in_full(Arc::new(full.clone())),
            "held in full already"
        );
        assert!(
            !objects.hold_in_full(Arc::new(obj(Some("a"), "absent", "5"))),
            "nothing held there"
        );
        objects.hold_as_metadata(Some("a"), "x");
        assert_eq!(objects.get(Some("a"), "x").as_deref(), Some(&meta));
        assert!(objects.holds_metadata_of(Some("a"), "x"));
        assert!(!objects.holds_metadata_of(Some("a"), "absent"));
    }
}

#[test]
fn one_namespace_is_read_alone() {
    let mut w = ObjectsWriter::new(false, None);
    for (ns, name) in [
        (Some("a"), "x"),
        (Some("a"), "y"),
        (Some("b"), "x"),
        (None, "c"),
    ] {
        w.apply(Event::Apply(obj(ns, name, "1")));
    }
    let objects = w.objects();
    assert_eq!(
        names(&objects.in_namespace("a")),
        ["a/x".to_string(), "a/y".to_string()].into()
    );
    assert_eq!(names(&objects.in_namespace("")), ["/c".to_string()].into());
    assert!(objects.in_namespace("z").is_empty());
}

/// Every object's place is listed without reading any object back: an entry whose text
/// could not be read back (never written so; it stands for one costly to parse) is listed
/// all the same, though no reader is shown it.
#[test]
fn places_are_listed_without_reading_objects_back() {
    let mut w = ObjectsWriter::new(true, None);
    for (ns, name) in [(Some("a"), "x"), (Some("a"), "y"), (None, "c")] {
        w.apply(Event::Apply(obj(ns, name, "1")));
    }
    let objects = w.objects();
    if let Some(entry) = objects
        .inner
        .write()
        .objects
        .get_mut("a")
        .and_then(|names| names.get_mut("y"))
    {
        entry.held = Held::Text {
            json: "not an object".into(),
            no_data: false,
        };
    }
    assert_eq!(objects.state().len(), 2, "a/y cannot be read back");
    let mut places = objects.places();
    places.sort();
    assert_eq!(
        places,
        [
            (None, "c".to_string()),
            (Some("a".to_string()), "x".to_string()),
            (Some("a".to_string()), "y".to_string()),
        ]
    );
}

/// A summary that keeps name, namespace and resourceVersion, and counts how often it is
/// built back into an object.
#[derive(Debug)]
struct Counted {
    object: DynamicObject,
    built: Arc<std::sync::atomic::AtomicUsize>,
}

impl Summary for Counted {
    fn object(&self) -> DynamicObject {
        self.built.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.object.clone()
    }

    fn resource_version(&self) -> Option<Cow<'_, str>> {
        self.object
            .metadata
            .resource_version
            .as_deref()
            .map(Cow::Borrowed)
    }
}

/// A writer whose store holds each object as a [`Counted`] summary (`summarized`), its
/// JSON text (`packed`) or the object, and the count of summaries built back.
fn writer(packed: bool, summarized: bool) -> (ObjectsWriter, Arc<std::sync::atomic::AtomicUsize>) {
    let built = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&built);
    let summarize: Summarize = Arc::new(move |o: &DynamicObject| {
        Some(Arc::new(Counted {
            object: o.clone(),
            built: Arc::clone(&counter),
        }) as Arc<dyn Summary>)
    });
    let w = ObjectsWriter::new(packed, None)
        .summarizing(summarized.then(|| super::super::watch::SummarizeFn(summarize)));
    (w, built)
}

fn sorted(places: &[Place]) -> Vec<String> {
    let mut v: Vec<String> = places.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
    v.sort();
    v
}

/// A relist tells what is new, what has another resourceVersion and what vanished, and
/// not what is unchanged, whether the store holds objects, texts or summaries.
#[test]
fn a_relist_tells_new_changed_and_vanished_but_not_unchanged() {
    for (packed, summarized) in [(false, false), (true, false), (false, true)] {
        let (mut w, _) = writer(packed, summarized);
        let first = w.finish_listing();
        assert!(first.changed.is_empty() && first.vanished.is_empty());
        for (ns, name, rv) in [
            (Some("a"), "same", "1"),
            (Some("a"), "edited", "2"),
            (Some("b"), "gone", "3"),
            (None, "cluster", "4"),
        ] {
            w.apply(Event::Apply(obj(ns, name, rv)));
        }
        w.apply(Event::<DynamicObject>::Init);
        for (ns, name, rv) in [
            (Some("a"), "same", "1"),
            (Some("a"), "edited", "7"),
            (Some("c"), "new", "8"),
            (None, "cluster", "4"),
        ] {
            w.apply(Event::InitApply(obj(ns, name, rv)));
        }
        let relisted = w.finish_listing();
        let case = format!("packed {packed}, summarized {summarized}");
        assert_eq!(sorted(&relisted.changed), ["a/edited", "c/new"], "{case}");
        assert_eq!(
            names(&relisted.vanished),
            BTreeSet::from(["b/gone".into()]),
            "{case}"
        );
        assert_eq!(relisted.present, 4, "{case}");
        // The first list of a store tells everything as new.
        let (mut fresh, _) = writer(packed, summarized);
        fresh.apply(Event::<DynamicObject>::Init);
        fresh.apply(Event::InitApply(obj(Some("a"), "x", "1")));
        fresh.apply(Event::InitApply(obj(None, "y", "2")));
        assert_eq!(
            sorted(&fresh.finish_listing().changed),
            ["/y", "a/x"],
            "{case}"
        );
    }
}

/// Telling what a relist changed reads no object back but those that vanished: a store of
/// summaries is never built into objects for it (a restart over ten thousand copies held
/// as prints built all of them, twice).
#[test]
fn a_relist_reads_back_only_what_vanished() {
    let (mut w, built) = writer(false, true);
    for i in 0..100 {
        w.apply(Event::Apply(obj(Some("a"), &format!("o{i}"), "1")));
    }
    w.apply(Event::<DynamicObject>::Init);
    for i in 1..100 {
        let rv = if i % 2 == 0 { "1" } else { "2" };
        w.apply(Event::InitApply(obj(Some("a"), &format!("o{i}"), rv)));
    }
    let relisted = w.finish_listing();
    assert_eq!(relisted.changed.len(), 50);
    assert_eq!(names(&relisted.vanished), BTreeSet::from(["a/o0".into()]));
    assert_eq!(
        built.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "only the vanished object is built"
    );
}

/// A held object's resourceVersion is read without building the object back, and a
/// reader of full objects is not shown one held as metadata only.
#[test]
fn a_resource_version_is_read_without_building_the_object() {
    let (mut w, built) = writer(false, true);
    w.apply(Event::Apply(obj(Some("a"), "x", "5")));
    let objects = w.objects();
    assert_eq!(
        objects.resource_version_of((Some("a"), "x"), true),
        Some(Some("5".into()))
    );
    assert_eq!(objects.resource_version_of((Some("a"), "y"), false), None);
    assert_eq!(built.load(std::sync::atomic::Ordering::SeqCst), 0);
    for packed in [false, true] {
        let mut w = ObjectsWriter::new(packed, None);
        let mut meta = obj(None, "m", "6");
        strip(&mut meta);
        w.apply(Event::Apply(meta));
        let objects = w.objects();
        assert_eq!(objects.resource_version_of((None, "m"), true), None);
        assert_eq!(
            objects.resource_version_of((None, "m"), false),
            Some(Some("6".into()))
        );
    }
}

/// A packed store's resourceVersion is read from its text, escapes included.
#[test]
fn a_texts_resource_version_is_read_without_parsing_the_object() {
    let held = Held::new(
        Arc::new(obj(Some("a"), "x", "12\"\u{e9}")),
        None,
        true,
        None,
    );
    assert!(matches!(held, Held::Text { .. }));
    assert_eq!(held.resource_version().as_deref(), Some("12\"\u{e9}"));
    let text = Held::Text {
        json: r#"{"metadata":{"name":"x"},"data":{"k":"v"}}"#.into(),
        no_data: false,
    };
    assert_eq!(text.resource_version(), None);
}

fn labelled(ns: &str, name: &str, rv: &str, owner: Option<&str>) -> DynamicObject {
    let mut o = obj(Some(ns), name, rv);
    o.metadata.labels = owner.map(|v| [("owner".to_string(), v.to_string())].into());
    o
}

fn names(objects: &[Arc<DynamicObject>]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn the_label_index_follows_changes_deletions_and_relists() {
    for (packed, index) in [(false, Some("owner")), (true, Some("owner")), (true, None)] {
        let mut w = ObjectsWriter::new(packed, index);
        let objects = w.objects();
        let find = |v: &str| names(&objects.labelled("owner", v));
        w.apply(Event::Apply(labelled("a", "x", "1", Some("p"))));
        w.apply(Event::Apply(labelled("b", "x", "2", Some("p"))));
        w.apply(Event::Apply(labelled("a", "y", "3", Some("q"))));
        w.apply(Event::Apply(labelled("a", "z", "4", None)));
        assert_eq!(find("p"), BTreeSet::from(["a/x".into(), "b/x".into()]));
        // The label changes: the object moves to its new value.
        w.apply(Event::Apply(labelled("b", "x", "5", Some("q"))));
        assert_eq!(find("p"), BTreeSet::from(["a/x".into()]));
        assert_eq!(find("q"), BTreeSet::from(["a/y".into(), "b/x".into()]));
        // The label is removed, then the object deleted.
        w.apply(Event::Apply(labelled("a", "x", "6", None)));
        w.apply(Event::Delete(labelled("a", "y", "7", Some("q"))));
        assert!(find("p").is_empty());
        assert_eq!(find("q"), BTreeSet::from(["b/x".into()]));
        // A relist replaces the index with the listed state.
        w.apply(Event::<DynamicObject>::Init);
        w.apply(Event::InitApply(labelled("c", "w", "8", Some("p"))));
        assert_eq!(
            find("q"),
            BTreeSet::from(["b/x".into()]),
            "old state during the list"
        );
        w.apply(Event::<DynamicObject>::InitDone);
        assert_eq!(find("p"), BTreeSet::from(["c/w".into()]));
        assert!(find("q").is_empty());
        if index.is_some() {
            let inner = objects.inner.read();
            assert_eq!(inner.by_label.len(), 1, "no empty values are kept");
        }
    }
}

fn changes_and_relists_when(packed: bool) {
    let mut w = ObjectsWriter::new(packed, None);
    let objects = w.objects();
    let stored = w.apply(Event::Apply(obj(Some("a"), "x", "1")));
    assert_eq!(
        rv(stored),
        Some("1".into()),
        "the change is returned as stored"
    );
    w.apply(Event::Apply(obj(None, "x", "2")));
    assert_eq!(rv(objects.get(Some("a"), "x")), Some("1".into()));
    assert_eq!(
        rv(objects.get(None, "x")),
        Some("2".into()),
        "cluster-scoped apart"
    );
    // A relist replaces everything at once, when it is done.
    w.apply(Event::<DynamicObject>::Init);
    w.apply(Event::InitApply(obj(Some("b"), "y", "3")));
    assert_eq!(
        objects.state().len(),
        2,
        "the old state is served during the list"
    );
    w.apply(Event::<DynamicObject>::InitDone);
    assert_eq!(objects.state().len(), 1);
    assert_eq!(objects.get(Some("a"), "x"), None);
    assert_eq!(rv(objects.get(Some("b"), "y")), Some("3".into()));
    let gone = w.apply(Event::Delete(obj(Some("b"), "y", "4")));
    assert_eq!(rv(gone), Some("4".into()));
    assert!(objects.state().is_empty());
    assert!(
        objects.inner.read().objects.is_empty(),
        "empty namespaces are dropped"
    );
}
