//! The index's tests.

use super::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};

fn ar<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// A watch in `cluster` (events of most kinds depend only on its cluster).
fn in_cluster(cluster: &str) -> WatchKey {
    WatchKey::of(cluster, &ar::<Namespace>())
}

fn decl(name: &str) -> ObjectKey {
    ObjectKey::new("local", &ar::<Secret>(), Some("ctl".into()), name)
}

fn source(kind: &ApiResource, name: &str) -> ObjectKey {
    ObjectKey::new("local", kind, Some("src".into()), name)
}

fn object(labels: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "x", "namespace": "ns", "labels": labels}}))
    .expect("object")
}

/// An index where the declaration `d` (uid `uid-d`) copies the Secret `s` to the cluster
/// `east`.
fn d_copies_s_to_east() -> (Index, ApiResource) {
    let mut idx = Index::default();
    let secret = ar::<Secret>();
    idx.register(
        &decl("d"),
        "uid-d",
        Copying::One(source(&secret, "s")),
        ["east".into()],
    );
    (idx, secret)
}

/// Starts watches with ids 0, 1, 2, … and counts the starts.
struct Starter(usize);

impl Starter {
    fn start(&mut self) -> Result<WatchId> {
        self.0 += 1;
        Ok(WatchId::from_raw(self.0 - 1))
    }
}

#[test]
fn register_returns_new_and_previous_clusters() {
    let mut idx = Index::default();
    let (d, secret) = (decl("d"), ar::<Secret>());
    let mut s = Starter(0);
    let clusters = idx.register(
        &d,
        "u",
        Copying::One(source(&secret, "a")),
        ["b".into(), "a".into()],
    );
    assert_eq!(clusters, ["a", "b"]);
    idx.watch_for(WatchKey::of("old", &secret), &d, || s.start())
        .expect("watch");
    let clusters = idx.register(&d, "u", Copying::One(source(&secret, "a")), ["a".into()]);
    assert_eq!(clusters, ["a", "old"], "a cluster used before stays");
}

#[test]
fn one_watch_serves_many_declarations_and_stops_with_the_last() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let key = WatchKey::of("local", &ar::<Secret>());
    let a = idx
        .watch_for(key.clone(), &decl("a"), || s.start())
        .expect("a");
    let b = idx
        .watch_for(key.clone(), &decl("b"), || s.start())
        .expect("b");
    assert_eq!((a, s.0), (b, 1), "started once");
    assert!(idx.forget(&decl("a")).is_empty(), "b still uses it");
    assert_eq!(idx.forget(&decl("b")), [a]);
    assert_eq!(idx.watch_count(), 0);
}

#[test]
fn a_restarted_watch_keeps_its_users_and_stops_with_the_last() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let secret = ar::<Secret>();
    let copies = WatchKey::scoped("local", &secret, Scope::Copies);
    let old = idx
        .watch_for(copies.clone(), &decl("a"), || s.start())
        .expect("a");
    idx.watch_for(copies.clone(), &decl("b"), || s.start())
        .expect("b");
    idx.watch_for(WatchKey::of("local", &secret), &decl("a"), || s.start())
        .expect("all");
    let picked = idx.watches_where(|k| k.scope == Scope::Copies);
    assert_eq!(picked.len(), 1);
    assert_eq!(
        (&picked[0].0, picked[0].1, picked[0].2.len()),
        (&copies, old, 2)
    );
    let new = s.start().expect("new");
    assert_eq!(idx.replace_watch(&copies, new), Some(old));
    assert!(idx.is_running(new) && !idx.is_running(old));
    let c = idx
        .watch_for(copies.clone(), &decl("c"), || s.start())
        .expect("c");
    assert_eq!(c, new, "later users get the new one");
    assert_eq!(
        idx.replace_watch(&WatchKey::of("other", &secret), old),
        None
    );
    idx.forget(&decl("a"));
    idx.forget(&decl("b"));
    assert_eq!(
        idx.forget(&decl("c")),
        [new],
        "the new one stops with its last user"
    );
}

#[test]
fn a_failed_start_records_nothing() {
    let mut idx = Index::default();
    let key = WatchKey::of("local", &ar::<Secret>());
    let err = idx.watch_for(key, &decl("a"), || Err(crate::Error::NotRunning));
    assert!(err.is_err());
    assert_eq!(idx.watch_count(), 0);
    assert!(idx.forget(&decl("a")).is_empty());
}

#[test]
fn events_map_to_sources_copies_and_namespaces() {
    let (idx, secret) = d_copies_s_to_east();
    let none = object(serde_json::json!({}));
    // The source itself, in its cluster only.
    let src = source(&secret, "s");
    let found = idx.declarations_for(EventOf::Source, &in_cluster("local"), &src, &none);
    assert_eq!(found, [decl("d")]);
    let elsewhere = src.in_cluster("east");
    let found = idx.declarations_for(EventOf::Source, &in_cluster("east"), &elsewhere, &none);
    assert!(found.is_empty(), "an object of the same name elsewhere");
    // A copy, by its managed-by label.
    let copy = object(serde_json::json!({MANAGED_BY: "uid-d"}));
    let k = ObjectKey::new("east", &secret, Some("ns".into()), "x");
    let found = idx.declarations_for(EventOf::Copy, &in_cluster("east"), &k, &copy);
    assert_eq!(found, [decl("d")]);
    let foreign = object(serde_json::json!({MANAGED_BY: "other"}));
    assert!(
        idx.declarations_for(EventOf::Copy, &in_cluster("east"), &k, &foreign)
            .is_empty()
    );
    // A namespace of a cluster with destinations.
    let ns = ObjectKey::new("east", &ar::<Namespace>(), None, "team");
    let found = idx.declarations_for(EventOf::Cluster, &in_cluster("east"), &ns, &none);
    assert_eq!(found, [decl("d")]);
    let found = idx.declarations_for(EventOf::Cluster, &in_cluster("west"), &ns, &none);
    assert!(found.is_empty());
    // Unrelated objects wake nothing, not even at the source's or a copy's name.
    for (k, obj) in [(&src, &none), (&k, &copy)] {
        assert!(
            idx.declarations_for(EventOf::Other, &in_cluster("local"), k, obj)
                .is_empty()
        );
    }
}

#[test]
fn an_object_in_the_way_wakes_the_declarations_it_blocks() {
    let (mut idx, secret) = d_copies_s_to_east();
    let at = ObjectKey::new("east", &secret, Some("ns".into()), "x");
    let elsewhere = ObjectKey::new("east", &secret, Some("ns".into()), "y");
    let theirs = object(serde_json::json!({}));
    let others_copy = object(serde_json::json!({MANAGED_BY: "uid-e"}));
    idx.set_blocked(&decl("d"), [at.clone()]);
    for (event, obj) in [(EventOf::Other, &theirs), (EventOf::Copy, &others_copy)] {
        let found = idx.declarations_for(event, &in_cluster("east"), &at, obj);
        assert_eq!(found, [decl("d")], "{event:?}");
        assert!(
            idx.declarations_for(event, &in_cluster("east"), &elsewhere, obj)
                .is_empty()
        );
    }
    // The next report replaces the set; forgetting clears it.
    idx.set_blocked(&decl("d"), [elsewhere.clone()]);
    assert!(
        idx.declarations_for(EventOf::Other, &in_cluster("east"), &at, &theirs)
            .is_empty()
    );
    idx.forget(&decl("d"));
    assert!(
        idx.declarations_for(EventOf::Other, &in_cluster("east"), &elsewhere, &theirs)
            .is_empty()
    );
}

#[test]
fn single_sources_of_one_namespace_share_a_watch_and_a_changed_source_releases_the_old() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let secret = ar::<Secret>();
    let (d, e) = (decl("d"), decl("e"));
    let (old, new) = (source(&secret, "old"), source(&secret, "new"));
    let elsewhere = ObjectKey::new("local", &secret, Some("other".into()), "x");
    let watch_of = |src: &ObjectKey| {
        let namespace = src.namespace.clone();
        WatchKey::scoped("local", &secret, Scope::Sources { namespace })
    };
    let keeps = |idx: &Index, scope: &WatchKey| {
        let sources = [&old, &new, &elsewhere];
        sources
            .into_iter()
            .filter(|k| watch_of(k) == *scope && idx.is_source(k))
            .map(|k| k.name.clone())
            .collect::<Vec<_>>()
    };
    idx.register(&d, "uid-d", Copying::One(old.clone()), ["local".into()]);
    idx.register(&e, "uid-e", Copying::One(old.clone()), ["local".into()]);
    let w_src = idx
        .watch_for(watch_of(&old), &d, || s.start())
        .expect("old");
    idx.watch_for(watch_of(&old), &e, || s.start())
        .expect("shared");
    let copies = WatchKey::scoped("local", &secret, Scope::Copies);
    let w_copies = idx.watch_for(copies, &d, || s.start()).expect("copies");
    assert!(
        idx.retain_source(&d, "local", &watch_of(&old).scope, |s| *s == old)
            .is_empty(),
        "nothing changed"
    );
    // d now copies `new` of the same namespace: the same watch, which now keeps both.
    idx.register(&d, "uid-d", Copying::One(new.clone()), ["local".into()]);
    let again = idx
        .watch_for(watch_of(&new), &d, || s.start())
        .expect("new");
    assert_eq!(again, w_src, "one watch per namespace, not per source");
    assert!(
        idx.retain_source(&d, "local", &watch_of(&new).scope, |s| *s == new)
            .is_empty()
    );
    assert_eq!(keeps(&idx, &watch_of(&old)), ["old", "new"]);
    assert!(idx.unnamed_sources().is_empty(), "e still copies old");
    let none = object(serde_json::json!({}));
    let found = idx.declarations_for(EventOf::Source, &in_cluster("local"), &old, &none);
    assert_eq!(
        found,
        std::slice::from_ref(&e),
        "the old source no longer wakes d"
    );
    // e moves to another namespace: its own watch; `old` is copied by no one, so the
    // namespace's watch may drop its content; the watch stays for d.
    idx.register(
        &e,
        "uid-e",
        Copying::One(elsewhere.clone()),
        ["local".into()],
    );
    let w_other = idx
        .watch_for(watch_of(&elsewhere), &e, || s.start())
        .expect("other");
    assert_ne!(w_other, w_src);
    assert!(
        idx.retain_source(&e, "local", &watch_of(&elsewhere).scope, |s| *s
            == elsewhere)
            .is_empty()
    );
    assert_eq!(keeps(&idx, &watch_of(&old)), ["new"]);
    assert_eq!(idx.unnamed_sources(), [(w_src, old.clone())]);
    assert!(idx.unnamed_sources().is_empty(), "said once");
    // d goes: the namespace's watch stops (nothing is left to drop from it).
    let mut stopped = idx.forget(&d);
    stopped.sort();
    assert_eq!(stopped, [w_src, w_copies]);
    assert!(idx.unnamed_sources().is_empty());
    assert_eq!(idx.watch_count(), 1, "e's namespace watch");
}

fn selecting(labels: &[(&str, &str)], names: &[&str]) -> Selection {
    let map: std::collections::BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Selection {
        selector: (!map.is_empty()).then(|| kube::core::Selector::from_iter(map)),
        names: names.iter().map(|n| n.to_string()).collect(),
    }
}

fn labelled(name: &str, labels: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "src", "labels": labels}}))
    .expect("object")
}

#[test]
fn selections_share_their_namespace_watch_and_wake_only_for_what_they_select_or_selected() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let secret = ar::<Secret>();
    let (d, e, f, g) = (decl("d"), decl("e"), decl("f"), decl("g"));
    let namespace = Some("src".to_string());
    let watch = WatchKey::scoped("local", &secret, Scope::Sources { namespace });
    let tls = selecting(&[("app", "tls")], &[]);
    let ca = selecting(&[("app", "ca")], &[]);
    let one = selecting(&[], &["cert"]);
    for (decl, uid, selection) in [(&d, "uid-d", &tls), (&e, "uid-e", &tls), (&f, "uid-f", &ca)] {
        idx.register(
            decl,
            uid,
            Copying::Selection(selection.clone()),
            ["local".into()],
        );
        idx.watch_for(watch.clone(), decl, || s.start())
            .expect("watch");
    }
    idx.register(&g, "uid-g", Copying::Selection(one), ["local".into()]);
    idx.watch_for(watch.clone(), &g, || s.start())
        .expect("watch");
    assert_eq!(s.0, 1, "one watch for every selector of the namespace");
    let k = source(&secret, "cert");
    let tls_cert = labelled("cert", serde_json::json!({"app": "tls"}));
    let mut found = idx.declarations_for(EventOf::Source, &watch, &k, &tls_cert);
    found.sort();
    assert_eq!(
        found,
        [d.clone(), e.clone(), g.clone()],
        "those that select it (by labels, by name), not f"
    );
    let copy = labelled(
        "cert",
        serde_json::json!({"app": "tls", MANAGED_BY: "uid-x"}),
    );
    assert!(
        idx.declarations_for(EventOf::Source, &watch, &k, &copy)
            .is_empty(),
        "a copy is nobody's source"
    );
    // d's members are known: the object leaving d's selection (relabelled) still wakes d.
    idx.select_members(&d, &HashSet::from([k.clone()]));
    assert!(idx.is_source(&k));
    let ca_cert = labelled("cert", serde_json::json!({"app": "ca"}));
    let mut found = idx.declarations_for(EventOf::Source, &watch, &k, &ca_cert);
    found.sort();
    assert_eq!(found, [d.clone(), f.clone(), g.clone()]);
    // No longer a member: its content may be dropped; it wakes d no more.
    idx.select_members(&d, &HashSet::new());
    assert!(!idx.is_source(&k));
    assert_eq!(idx.unnamed_sources(), [(WatchId::from_raw(0), k.clone())]);
    let found = idx.declarations_for(EventOf::Source, &watch, &k, &ca_cert);
    assert!(!found.contains(&d));
    // e goes back to a single source: it wakes for that one only; forgotten, for none.
    idx.register(&e, "uid-e", Copying::One(k.clone()), ["local".into()]);
    let other = labelled("other", serde_json::json!({"app": "tls"}));
    let other_key = source(&secret, "other");
    let found = idx.declarations_for(EventOf::Source, &watch, &other_key, &other);
    assert_eq!(found, std::slice::from_ref(&d));
    idx.forget(&d);
    assert!(
        idx.declarations_for(EventOf::Source, &watch, &other_key, &other)
            .is_empty()
    );
}

#[test]
fn a_source_read_from_another_cluster_adds_no_cluster_to_look_at_and_moves_cleanly() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let secret = ar::<Secret>();
    let d = decl("d");
    let selected = Scope::Sources {
        namespace: Some("src".into()),
    };
    let tls = || Copying::Selection(selecting(&[("app", "tls")], &[]));
    let on = |cluster: &str| WatchKey::scoped(cluster, &secret, selected.clone());
    idx.register(&d, "uid-d", tls(), ["local".into()]);
    let hub = idx.watch_for(on("hub"), &d, || s.start()).expect("hub");
    // The sources' cluster is only read: no copies are looked for there.
    assert_eq!(
        idx.register(&d, "uid-d", tls(), ["local".into()]),
        ["local"]
    );
    assert!(idx.retain_source(&d, "hub", &selected, |_| true).is_empty());
    // The same selection from another cluster: the first cluster's watch stops.
    idx.watch_for(on("hub-2"), &d, || s.start()).expect("hub-2");
    assert_eq!(
        idx.retain_source(&d, "hub-2", &selected, |s| s.cluster == "hub-2"),
        [hub]
    );
    // Its events reach the declaration; a source key names its cluster.
    let none = object(serde_json::json!({}));
    let k = ObjectKey::new("hub-2", &secret, Some("src".into()), "cert");
    let cert = labelled("cert", serde_json::json!({"app": "tls"}));
    assert_eq!(
        idx.declarations_for(EventOf::Source, &on("hub-2"), &k, &cert),
        std::slice::from_ref(&d)
    );
    let one = ObjectKey::new("hub", &secret, Some("src".into()), "ca");
    idx.register(&d, "uid-d", Copying::One(one.clone()), ["local".into()]);
    let in_src = Scope::Sources {
        namespace: Some("src".into()),
    };
    let in_hub = WatchKey::scoped("hub", &secret, in_src);
    assert_eq!(
        idx.declarations_for(EventOf::Source, &in_hub, &one, &none),
        std::slice::from_ref(&d)
    );
    let same_name_here = ObjectKey::new("local", &secret, Some("src".into()), "ca");
    assert!(
        idx.declarations_for(
            EventOf::Source,
            &in_cluster("local"),
            &same_name_here,
            &none
        )
        .is_empty()
    );
}

#[test]
fn forget_removes_every_trace() {
    let (mut idx, secret) = d_copies_s_to_east();
    assert_eq!(idx.declarations(), vec![decl("d")]);
    idx.forget(&decl("d"));
    assert!(idx.declarations().is_empty());
    let copy = object(serde_json::json!({MANAGED_BY: "uid-d"}));
    let k = ObjectKey::new("east", &secret, Some("ns".into()), "x");
    assert!(
        idx.declarations_for(EventOf::Copy, &in_cluster("east"), &k, &copy)
            .is_empty()
    );
    let src = source(&secret, "s");
    assert!(
        idx.declarations_for(EventOf::Source, &in_cluster("local"), &src, &copy)
            .is_empty()
    );
    assert!(
        idx.declarations_for(EventOf::Cluster, &in_cluster("east"), &k, &copy)
            .is_empty()
    );
    assert!(idx.begin_type(&decl("d"), &ar::<ConfigMap>()).is_none());
}

#[test]
fn a_type_change_is_retired_only_when_finished() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let (secret, cm, ns) = (ar::<Secret>(), ar::<ConfigMap>(), ar::<Namespace>());
    let d = decl("d");
    assert_eq!(idx.begin_type(&d, &secret), None, "first type");
    idx.register(
        &d,
        "u",
        Copying::One(source(&secret, "s")),
        ["local".into()],
    );
    let old = idx
        .watch_for(WatchKey::of("local", &secret), &d, || s.start())
        .expect("secrets");
    idx.watch_for(WatchKey::of("local", &ns), &d, || s.start())
        .expect("namespaces");
    assert_eq!(idx.begin_type(&d, &secret), None, "same type");
    assert!(!idx.copies_another_type(&d, &secret));
    assert!(
        idx.copies_another_type(&d, &cm),
        "a refused spec naming it changes nothing"
    );
    let retire = idx.begin_type(&d, &cm).expect("type changed");
    assert_eq!(retire.old, secret);
    assert_eq!(retire.watches, [WatchKey::of("local", &secret)]);
    // Not finished (e.g. its copies could not be deleted yet): asked again, same answer.
    assert_eq!(idx.begin_type(&d, &cm), Some(retire.clone()));
    assert_eq!(idx.finish_retire(&d, &retire, &cm), [old]);
    assert_eq!(idx.begin_type(&d, &cm), None);
    assert!(!idx.copies_another_type(&d, &cm));
    assert_eq!(idx.watch_count(), 1, "the namespace watch stays");
    let src = source(&secret, "s");
    let none = object(serde_json::json!({}));
    assert!(
        idx.declarations_for(EventOf::Source, &in_cluster("local"), &src, &none)
            .is_empty(),
        "the old source no longer maps to the declaration"
    );
}

#[test]
fn the_watch_of_unlabelled_copies_settles_for_all_and_a_copy_without_a_shard_unsettles_it() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let secret = ar::<Secret>();
    let (d, e) = (decl("d"), decl("e"));
    idx.register(
        &d,
        "uid-d",
        Copying::Selection(Selection::default()),
        ["local".into()],
    );
    idx.register(
        &e,
        "uid-e",
        Copying::Selection(Selection::default()),
        ["local".into()],
    );
    let unlabelled = WatchKey::scoped("local", &secret, Scope::Unlabelled);
    let others = WatchKey::scoped("local", &secret, Scope::Others);
    let id = idx
        .watch_for(unlabelled.clone(), &d, || s.start())
        .expect("watch");
    idx.watch_for(unlabelled.clone(), &e, || s.start())
        .expect("shared");
    assert!(!idx.unlabelled_settled(&unlabelled), "unknown at first");
    assert_eq!(idx.settle_unlabelled(&unlabelled), Some(id));
    assert!(idx.unlabelled_settled(&unlabelled));
    assert!(idx.forget(&d).is_empty(), "no user holds it any more");
    assert_eq!(idx.watch_count(), 0);
    // Settled per cluster and type.
    let elsewhere = WatchKey::scoped("east", &secret, Scope::Unlabelled);
    assert!(!idx.unlabelled_settled(&elsewhere));
    // Copies with a shard label, and objects that are not copies, change nothing.
    let with_shard = object(serde_json::json!({MANAGED_BY: "uid-e", SHARD: "00a1"}));
    let theirs = object(serde_json::json!({"app": "x"}));
    assert_eq!(idx.note_unlabelled(&others, &with_shard), None);
    assert_eq!(idx.note_unlabelled(&others, &theirs), None);
    assert!(idx.unlabelled_settled(&unlabelled));
    // A copy without one: the watch is needed again, and its owner is woken.
    let copy = object(serde_json::json!({MANAGED_BY: "uid-e"}));
    assert_eq!(idx.note_unlabelled(&others, &copy), Some(e.clone()));
    assert!(!idx.unlabelled_settled(&unlabelled));
    let again = idx
        .watch_for(unlabelled.clone(), &e, || s.start())
        .expect("started again");
    assert_ne!(again, id);
    // An unknown owner's (another engine's) still needs it; nobody to wake here.
    idx.settle_unlabelled(&unlabelled);
    let foreign = object(serde_json::json!({MANAGED_BY: "uid-gone"}));
    assert_eq!(idx.note_unlabelled(&others, &foreign), None);
    assert!(!idx.unlabelled_settled(&unlabelled));
}

#[test]
fn the_declarations_in_a_cluster_are_those_writing_or_reading_there() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let secret = ar::<Secret>();
    let (d, e, f) = (decl("d"), decl("e"), decl("f"));
    idx.register(
        &d,
        "uid-d",
        Copying::Selection(Selection::default()),
        ["east".into()],
    );
    idx.register(
        &e,
        "uid-e",
        Copying::Selection(Selection::default()),
        ["local".into()],
    );
    idx.register(
        &f,
        "uid-f",
        Copying::Selection(Selection::default()),
        ["local".into()],
    );
    // e reads its sources from east (a pull): it uses east too; f does not.
    let selected = Scope::Sources {
        namespace: Some("src".into()),
    };
    idx.watch_for(WatchKey::scoped("east", &secret, selected), &e, || {
        s.start()
    })
    .expect("watch");
    let mut found = idx.declarations_in("east");
    found.sort();
    assert_eq!(found, [d.clone(), e.clone()]);
    assert!(idx.declarations_in("west").is_empty());
    idx.forget(&d);
    assert_eq!(idx.declarations_in("east"), [e]);
}

#[test]
fn a_watch_knows_its_type_from_its_users() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let (secret, cm) = (ar::<Secret>(), ar::<ConfigMap>());
    let d = decl("d");
    let copies = WatchKey::scoped("local", &secret, Scope::Copies);
    assert_eq!(idx.resource_of(&copies), None, "not running");
    idx.register(
        &d,
        "uid-d",
        Copying::Selection(Selection::default()),
        ["local".into()],
    );
    assert_eq!(idx.begin_type(&d, &secret), None);
    idx.watch_for(copies.clone(), &d, || s.start())
        .expect("watch");
    assert_eq!(idx.resource_of(&copies), Some(secret.clone()));
    // d moves to ConfigMaps: until the Secrets are retired, the old watch keeps its type.
    let retire = idx.begin_type(&d, &cm).expect("a type change");
    assert_eq!(idx.resource_of(&copies), Some(secret.clone()));
    idx.finish_retire(&d, &retire, &cm);
    assert_eq!(idx.resource_of(&copies), None, "released");
}

#[test]
fn a_watch_is_used_by_the_declarations_it_was_started_or_joined_for() {
    let mut idx = Index::default();
    let mut s = Starter(0);
    let key = in_cluster("east");
    assert_eq!(idx.used_by(&key, &decl("d")), None, "not running");
    let id = idx
        .watch_for(key.clone(), &decl("d"), || s.start())
        .expect("start");
    assert_eq!(idx.running(&key), Some(id));
    assert_eq!(idx.used_by(&key, &decl("d")), Some(id));
    assert_eq!(idx.used_by(&key, &decl("e")), None, "running, not e's");
    assert_eq!(
        idx.watch_for(key.clone(), &decl("e"), || s.start())
            .expect("join"),
        id
    );
    assert_eq!(idx.used_by(&key, &decl("e")), Some(id));
    assert_eq!(s.0, 1, "started once");
}
