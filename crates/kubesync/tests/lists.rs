//! How watches fetch their initial state: a streaming list where the apiserver serves one, a
//! list from the watch cache where it does not, on real control planes. The witness is the
//! apiserver's own request counter (`apiserver_request_total`), not what kubesync says.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kubesync::cluster::ListStrategy;
use kubesync::{Action, Controller, Watch, reconciler_fn};
use kubesync_testenv::{TestEnv, eventually};

const OBJECTS: usize = 30;

/// The apiserver's count of `verb` requests (`LIST`, `WATCH`) for configmaps.
async fn requests(env: &TestEnv, verb: &str) -> f64 {
    let mut req = http::Request::new(Vec::new());
    *req.uri_mut() = "/metrics".parse().expect("uri");
    let text = env
        .client()
        .expect("client")
        .request_text(req)
        .await
        .expect("GET /metrics");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains(&format!("verb=\"{verb}\""))
                && l.contains("resource=\"configmaps\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Creates `count` ConfigMaps (16 at a time) in a new namespace and returns its name.
async fn objects(env: &TestEnv, count: usize) -> String {
    use futures::{StreamExt, TryStreamExt};
    let ns = unique_ns("lists");
    env.create_namespace(&ns).await.expect("ns");
    let api = Api::<ConfigMap>::namespaced(env.client().expect("client"), &ns);
    futures::stream::iter(0..count)
        .map(|i| {
            let (api, ns) = (&api, &ns);
            async move {
                api.create(
                    &PostParams::default(),
                    &configmap(ns, &format!("cm-{i}"), &[], &[("i", &i.to_string())]),
                )
                .await
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("create");
    ns
}

/// Watches the namespace's `count` ConfigMaps through `cluster` until every one was
/// reconciled, and returns how many LIST requests for configmaps the apiserver answered
/// meanwhile.
async fn lists_to_reconcile_all(
    env: &TestEnv,
    cluster: kubesync::Cluster,
    ns: &str,
    count: usize,
) -> f64 {
    let watch = Watch::of::<ConfigMap>().namespace(ns);
    lists_to_reconcile_all_of(env, cluster, watch, count).await
}

/// [`lists_to_reconcile_all`] through `watch` (of one namespace's ConfigMaps).
async fn lists_to_reconcile_all_of(
    env: &TestEnv,
    cluster: kubesync::Cluster,
    watch: Watch,
    count: usize,
) -> f64 {
    let before = requests(env, "LIST").await;
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let controller = Controller::new()
        .cluster(cluster)
        .watch(env.name(), watch)
        .expect("watch");
    let seen_by = seen.clone();
    let reconciler = reconciler_fn(move |key, ctx| {
        let seen = seen_by.clone();
        async move {
            // The store holds the object the key names (its metadata, for a watch of that).
            if ctx.get_metadata(&key).is_some() {
                seen.lock().expect("lock").insert(key.name.clone());
            }
            Ok::<_, kubesync::Error>(Action::done())
        }
    });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(controller.run(reconciler, async {
        let _ = stopped.await;
    }));
    eventually(
        "every object reconciled from the store",
        Duration::from_secs(30),
        || async { (seen.lock().expect("lock").len() == count).then_some(()) },
    )
    .await;
    let after = requests(env, "LIST").await;
    let _ = stop.send(());
    running.await.expect("join").expect("run");
    after - before
}

/// Whether this release serves streaming lists without being asked: Kubernetes turned its
/// `WatchList` feature on by default in v1.34.
fn served_by_default(version: &str) -> bool {
    kubesync::version::Release::parse(version).is_some_and(|r| (r.major, r.minor) >= (1, 34))
}

#[tokio::test]
async fn watches_stream_their_initial_list_where_the_apiserver_serves_it() {
    init_tracing();
    let env = own_cluster("lists-auto").await;
    let version = env.server_version().await.expect("version");
    let ns = objects(&env, OBJECTS).await;

    let auto = cluster(&env);
    assert_eq!(auto.list_strategy(), ListStrategy::Auto);
    let lists = lists_to_reconcile_all(&env, auto.clone(), &ns, OBJECTS).await;
    let streaming = auto
        .streaming_lists(&kube::core::ApiResource::erase::<ConfigMap>(&()), Some(&ns))
        .await;
    assert_eq!(
        streaming,
        served_by_default(&version),
        "Kubernetes {version} serves streaming lists by default from v1.34"
    );
    if streaming {
        assert_eq!(lists, 0.0, "a streaming list, no LIST request");
    } else {
        assert!(lists >= 1.0, "a LIST request where streaming is not served");
    }

    // Asked to list: it lists, whatever the apiserver serves.
    let listing = cluster(&env).with_list_strategy(ListStrategy::ListWatch);
    let lists = lists_to_reconcile_all(&env, listing, &ns, OBJECTS).await;
    assert!(lists >= 1.0, "list+watch sends a LIST ({lists})");
}

/// An apiserver whose `WatchList` feature is off refuses streaming lists: the probe notices,
/// and every watch lists instead.
#[tokio::test]
async fn watches_list_where_the_apiserver_refuses_streaming() {
    init_tracing();
    let env = TestEnv::builder()
        .name("lists-off")
        .apiserver_arg("--feature-gates=WatchList=false")
        .audit(true)
        .start()
        .await
        .expect("start");
    let ns = objects(&env, OBJECTS).await;
    let auto = cluster(&env);
    let lists = lists_to_reconcile_all(&env, auto.clone(), &ns, OBJECTS).await;
    assert!(lists >= 1.0, "fell back to a LIST ({lists})");
    // Paged, so that no more than a page of objects is decoded at once: every LIST of the
    // namespace's ConfigMaps in the audit log asks for a page, read from etcd (the watch
    // cache would serve a list at resourceVersion=0 whole, whatever the limit).
    let list_uris = list_uris(&env, &ns, 1).await;
    assert!(!list_uris.is_empty(), "the audit log shows the LIST");
    assert_pages_from_etcd(&list_uris, 100);
    assert!(
        !auto
            .streaming_lists(&kube::core::ApiResource::erase::<ConfigMap>(&()), Some(&ns))
            .await,
        "the probe found streaming lists refused"
    );
}

/// Asserts that every LIST in `uris` asks for a page of `limit` objects, read from etcd (the
/// watch cache would serve a list at resourceVersion=0 whole, whatever the limit).
fn assert_pages_from_etcd(uris: &[String], limit: u32) {
    for uri in uris {
        assert!(
            uri.contains(&format!("limit={limit}")) && !uri.contains("resourceVersion=0"),
            "a LIST not paged by {limit}: {uri}"
        );
    }
}

/// A control plane of its own whose apiserver writes an audit log.
async fn audited(name: &str) -> TestEnv {
    TestEnv::builder()
        .name(name)
        .audit(true)
        .start()
        .await
        .expect("start")
}

/// The request URIs of the LISTs of `ns`'s ConfigMaps in the audit log, once there are at
/// least `at_least` (a LIST's line is written when its handler returns: a page of objects
/// may reach the client first).
async fn list_uris(env: &TestEnv, ns: &str, at_least: usize) -> Vec<String> {
    eventually(
        "the LISTs in the audit log",
        Duration::from_secs(30),
        || async {
            let uris: Vec<String> = env
                .audit()
                .expect("audit")
                .into_iter()
                .filter(|e| e.verb == "list" && e.resource() == "configmaps" && e.namespace() == ns)
                .map(|e| e.request_uri)
                .collect();
            (uris.len() >= at_least).then_some(uris)
        },
    )
    .await
}

/// A plain list of more objects than a page holds is read page by page (each request
/// continuing the last), and the store ends up with every object: a list of 10 000 copies
/// never sits in memory whole.
#[tokio::test]
async fn a_plain_list_is_read_page_by_page_and_misses_nothing() {
    init_tracing();
    const MANY: usize = 250;
    let env = audited("lists-paged").await;
    let ns = objects(&env, MANY).await;
    // Every object held (each reconcile reads it from the store).
    let listing = cluster(&env).with_list_strategy(ListStrategy::ListWatch);
    let lists = lists_to_reconcile_all(&env, listing, &ns, MANY).await;
    let pages = MANY.div_ceil(100);
    assert_eq!(lists, pages as f64, "one LIST per page of 100");
    let uris = list_uris(&env, &ns, pages).await;
    assert_eq!(uris.len(), pages, "one LIST per page of 100: {uris:?}");
    assert_eq!(
        uris.iter().filter(|u| u.contains("continue=")).count(),
        uris.len() - 1,
        "each page after the first continues the one before: {uris:?}"
    );
}

/// A watch of metadata only lists in pages even where the apiserver streams lists (it sends
/// a page of metadata for a fraction of what streaming the same objects costs it), unless the
/// cluster's strategy insists on streaming lists.
#[tokio::test]
async fn a_watch_of_metadata_only_lists_in_pages_unless_told_to_stream() {
    init_tracing();
    let env = audited("lists-metadata").await;
    let version = env.server_version().await.expect("version");
    let ns = objects(&env, OBJECTS).await;
    let metadata = || Watch::of::<ConfigMap>().namespace(&ns).metadata_only();

    let auto = cluster(&env);
    let lists = lists_to_reconcile_all_of(&env, auto, metadata(), OBJECTS).await;
    assert_eq!(lists, 1.0, "one LIST, of one page");
    let uris = list_uris(&env, &ns, 1).await;
    assert_eq!(uris.len(), 1, "{uris:?}");
    assert_pages_from_etcd(&uris, 100);

    // The same cluster's watch of full objects still streams where the apiserver serves it.
    let auto = cluster(&env);
    let lists = lists_to_reconcile_all(&env, auto, &ns, OBJECTS).await;
    if served_by_default(&version) {
        assert_eq!(lists, 0.0, "a streaming list of full objects on {version}");
        // Told to stream, a watch of metadata only streams too.
        let streaming = cluster(&env).with_list_strategy(ListStrategy::StreamingList);
        let lists = lists_to_reconcile_all_of(&env, streaming, metadata(), OBJECTS).await;
        assert_eq!(lists, 0.0, "told to stream, it streams");
    }
}
