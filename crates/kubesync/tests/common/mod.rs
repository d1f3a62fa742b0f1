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
