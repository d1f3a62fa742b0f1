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

/// Runs `inner` and then reports each reconcile (its key, when it started, whether it
/// succeeded; a panic is not reported) to a [`Reconciles`]: the witness that a key was reconciled after a change, so a
/// test can assert that nothing happened without sleeping and hoping.
pub struct Observed<R> {
    inner: R,
    tx: tokio::sync::mpsc::UnboundedSender<(kubesync::ObjectKey, std::time::Instant, bool)>,
}

impl<R: kubesync::Reconciler> kubesync::Reconciler for Observed<R> {
    type Error = R::Error;

    async fn reconcile(
        &self,
        key: &kubesync::ObjectKey,
        ctx: &kubesync::Context,
    ) -> Result<kubesync::Action, R::Error> {
        let started = std::time::Instant::now();
        let result = self.inner.reconcile(key, ctx).await;
        let _ = self.tx.send((key.clone(), started, result.is_ok()));
        result
    }
}

/// The reconciles an [`Observed`] reconciler reports (all kept, so waits may come in any
/// order).
pub struct Reconciles {
    rx: tokio::sync::mpsc::UnboundedReceiver<(kubesync::ObjectKey, std::time::Instant, bool)>,
    seen: Vec<(kubesync::ObjectKey, std::time::Instant, bool)>,
}

impl Reconciles {
    /// Waits (at most 30 s) for a reconcile of a key named `name` that started after `since`
    /// and ran to its end (successful or not: either way it decided on what it saw).
    pub async fn of(&mut self, name: &str, since: std::time::Instant) {
        let matches = |(key, started, _): &(kubesync::ObjectKey, std::time::Instant, bool)| {
            key.name == name && *started >= since
        };
        if self.seen.iter().any(matches) {
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let Ok(Some(r)) = tokio::time::timeout_at(deadline, self.rx.recv()).await else {
                let seen: Vec<String> = self.seen.iter().map(|r| r.0.to_string()).collect();
                panic!("no reconcile of {name} within 30 s; reconciled: {seen:?}");
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
    (
        Observed {
            inner: reconciler,
            tx,
        },
        Reconciles {
            rx,
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
