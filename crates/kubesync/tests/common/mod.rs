//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, Patch, PatchParams};
use kubesync::Cluster;
use kubesync_testenv::TestEnv;

/// A process-wide cluster shared by this test binary's tests (isolate by namespace).
pub fn shared(name: &str) -> &'static TestEnv {
    TestEnv::shared(name, false).expect("start shared control plane")
}

/// A control plane of one test alone (not shared): for tests that stop its apiserver or
/// need it empty.
pub async fn own_cluster(name: &str) -> TestEnv {
    TestEnv::builder()
        .name(name)
        .start()
        .await
        .unwrap_or_else(|e| panic!("start {name}: {e}"))
}

/// A `Cluster` for an environment, with kubesync's client (bound to the current runtime).
pub fn cluster(env: &TestEnv) -> Cluster {
    Cluster::from_config(env.name(), env.config().expect("config")).expect("client")
}

/// A unique namespace name for one test.
pub fn unique_ns(prefix: &str) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn configmap(
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    data: &[(&str, &str)],
) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Creates or updates a ConfigMap with server-side apply.
pub async fn apply_cm(env: &TestEnv, cm: &ConfigMap) {
    let ns = cm.metadata.namespace.clone().expect("ns");
    let name = cm.metadata.name.clone().expect("name");
    let mut value = serde_json::to_value(cm).expect("json");
    value["apiVersion"] = "v1".into();
    value["kind"] = "ConfigMap".into();
    Api::<ConfigMap>::namespaced(env.client().expect("client"), &ns)
        .patch(
            &name,
            &PatchParams::apply("kubesync-tests").force(),
            &Patch::Apply(&value),
        )
        .await
        .expect("apply configmap");
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A controller running in the background of a test.
pub struct Running {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<kubesync::Result<()>>,
}

/// Runs `controller` with `reconciler` until [`Running::stop`].
pub fn start<R: kubesync::Reconciler>(controller: kubesync::Controller, reconciler: R) -> Running {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(controller.run(reconciler, async {
        let _ = stopped.await;
    }));
    Running { stop, task }
}

impl Running {
    /// Signals shutdown and waits (at most 30 s) for `run` to return successfully.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("run returns after shutdown")
            .expect("join")
            .expect("run ok");
    }
}

/// A reconciler that forwards every key it gets to `tx`.
pub fn forward_keys(
    tx: tokio::sync::mpsc::UnboundedSender<kubesync::ObjectKey>,
) -> impl kubesync::Reconciler {
    kubesync::reconciler_fn(move |key, _ctx| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(key);
            Ok::<_, String>(kubesync::Action::done())
        }
    })
}

/// The next value from `rx`, or a panic naming `what` after `timeout`.
pub async fn next<T>(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>,
    what: &str,
    timeout: Duration,
) -> T {
    tokio::time::timeout(timeout, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out after {timeout:?} waiting for {what}"))
        .expect("channel open")
}

/// Runs a sync engine until [`Running::stop`].
pub async fn start_engine<S: kubesync::syncer::Syncer>(
    engine: kubesync::syncer::SyncEngine<S>,
) -> Running {
    let (controller, reconciler) = engine.into_parts().await.expect("engine parts");
    start(controller, reconciler)
}

/// Runs `inner` and then reports each reconcile (its key, when it started, what its store
/// showed of the objects a test follows, whether it succeeded; a panic is not reported) to a
/// [`Reconciles`]: the witness that a key was reconciled on a store that showed a change, so a
/// test can assert that nothing happened without sleeping and hoping.
pub struct Observed<R> {
    inner: R,
    followed: std::sync::Arc<parking_lot::Mutex<Vec<kubesync::ObjectKey>>>,
    tx: tokio::sync::mpsc::UnboundedSender<Reconciled>,
}

/// One reconcile an [`Observed`] reconciler ran to its end.
struct Reconciled {
    key: kubesync::ObjectKey,
    started: std::time::Instant,
    /// The resourceVersion of each followed object in the store when the reconcile began
    /// (`None`: not in the store).
    shown: Vec<(kubesync::ObjectKey, Option<u64>)>,
}

impl<R: kubesync::Reconciler> kubesync::Reconciler for Observed<R> {
    type Error = R::Error;

    async fn reconcile(
        &self,
        key: &kubesync::ObjectKey,
        ctx: &kubesync::Context,
    ) -> Result<kubesync::Action, R::Error> {
        let started = std::time::Instant::now();
        let shown = self
            .followed
            .lock()
            .iter()
            .map(|k| {
                let version = ctx
                    .get_metadata(k)
                    .and_then(|o| o.metadata.resource_version.as_deref()?.parse().ok());
                (k.clone(), version)
            })
            .collect();
        let result = self.inner.reconcile(key, ctx).await;
        let _ = self.tx.send(Reconciled {
            key: key.clone(),
            started,
            shown,
        });
        result
    }
}

/// The key of the namespaced object `ns/name` of type `resource` in `env`'s cluster.
pub fn key_of(
    env: &TestEnv,
    resource: &kube::core::ApiResource,
    ns: &str,
    name: &str,
) -> kubesync::ObjectKey {
    kubesync::ObjectKey::new(env.name(), resource, Some(ns.to_string()), name)
}

/// A change a test made to an object, as a reconcile's store must show it to have seen it.
#[derive(Clone, Debug)]
pub enum Change {
    /// The object written, with the resourceVersion the apiserver answered: a store that
    /// shows this version or a later one shows the change.
    Written(kubesync::ObjectKey, u64),
    /// The object deleted (or no longer selected by the watch) after the instant given: a
    /// reconcile that began after it on a store without the object saw it go.
    Gone(kubesync::ObjectKey, std::time::Instant),
}

impl Change {
    /// `key`'s object as the write that returned `answer` left it.
    pub fn written(key: kubesync::ObjectKey, answer: &impl kube::Resource) -> Self {
        let version = answer
            .meta()
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .expect("a written object has a numeric resourceVersion");
        Self::Written(key, version)
    }

    /// `key`'s object about to be deleted (or unselected): make this before the request.
    pub fn gone(key: kubesync::ObjectKey) -> Self {
        Self::Gone(key, std::time::Instant::now())
    }

    fn key(&self) -> &kubesync::ObjectKey {
        match self {
            Self::Written(key, _) | Self::Gone(key, _) => key,
        }
    }

    /// Whether `r` began on a store that showed this change.
    fn shown_to(&self, r: &Reconciled) -> bool {
        let shown = r
            .shown
            .iter()
            .find(|(k, _)| k == self.key())
            .map(|(_, v)| *v);
        match (self, shown) {
            (Self::Written(_, version), Some(Some(seen))) => seen >= *version,
            (Self::Gone(_, since), Some(None)) => r.started >= *since,
            _ => false,
        }
    }
}

/// The reconciles an [`Observed`] reconciler reports (all kept, so waits may come in any
/// order).
pub struct Reconciles {
    rx: tokio::sync::mpsc::UnboundedReceiver<Reconciled>,
    followed: std::sync::Arc<parking_lot::Mutex<Vec<kubesync::ObjectKey>>>,
    seen: Vec<Reconciled>,
}

impl Reconciles {
    /// Records, for every reconcile from now on, what its store shows of `key`'s object: call
    /// it before changing that object, then wait with [`Reconciles::saw`].
    pub fn follow(&self, key: kubesync::ObjectKey) -> kubesync::ObjectKey {
        self.followed.lock().push(key.clone());
        key
    }

    /// Waits (at most 30 s) for a reconcile of a key named `name` that began on stores
    /// showing every one of `changes` and ran to its end (successful or not: either way it
    /// decided on them).
    pub async fn saw(&mut self, name: &str, changes: &[&Change]) {
        for change in changes {
            assert!(
                self.followed.lock().contains(change.key()),
                "follow {} before changing it",
                change.key()
            );
        }
        let what = format!("{name} on stores showing {changes:?}");
        self.wait(&what, |r| {
            r.key.name == name && changes.iter().all(|c| c.shown_to(r))
        })
        .await;
    }

    /// Waits (at most 30 s) for a reconcile of a key named `name` by a controller started
    /// after `since`, run to its end: such a reconcile decides on stores that have listed
    /// (the runtime starts none before), so on everything that existed at `since`. Only for a
    /// controller started after `since`; for a change made while it runs, use
    /// [`Reconciles::saw`].
    pub async fn after_start(&mut self, name: &str, since: std::time::Instant) {
        self.wait(name, |r| r.key.name == name && r.started >= since)
            .await;
    }

    async fn wait(&mut self, what: &str, matches: impl Fn(&Reconciled) -> bool) {
        if self.seen.iter().any(&matches) {
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let Ok(Some(r)) = tokio::time::timeout_at(deadline, self.rx.recv()).await else {
                let seen: Vec<String> = self.seen.iter().map(|r| r.key.to_string()).collect();
                panic!("no reconcile of {what} within 30 s; reconciled: {seen:?}");
            };
            let found = matches(&r);
            self.seen.push(r);
            if found {
                return;
            }
        }
    }
}

/// `reconciler`, observed.
pub fn observed<R: kubesync::Reconciler>(reconciler: R) -> (Observed<R>, Reconciles) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let followed = std::sync::Arc::default();
    (
        Observed {
            inner: reconciler,
            followed: std::sync::Arc::clone(&followed),
            tx,
        },
        Reconciles {
            rx,
            followed,
            seen: Vec::new(),
        },
    )
}

/// Runs a sync engine until [`Running::stop`], reporting its reconciles.
pub async fn start_engine_observed<S: kubesync::syncer::Syncer>(
    engine: kubesync::syncer::SyncEngine<S>,
) -> (Running, Reconciles) {
    let (running, reconciles, _) = start_engine_with_context(engine).await;
    (running, reconciles)
}

/// [`start_engine_observed`], also returning the controller's context (its metrics, stores).
pub async fn start_engine_with_context<S: kubesync::syncer::Syncer>(
    engine: kubesync::syncer::SyncEngine<S>,
) -> (Running, Reconciles, kubesync::Context) {
    let (controller, reconciler) = engine.into_parts().await.expect("engine parts");
    let ctx = controller.context();
    let (reconciler, reconciles) = observed(reconciler);
    (start(controller, reconciler), reconciles, ctx)
}
