//! A watch on copies from the benchmark process, shared by the benchmarks
//! (`#[path]`-included): it counts the copies that exist with the data expected.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use super::running::Running;

/// What the observer's watch has seen.
#[derive(Clone, Copy, Debug, Default)]
pub struct Seen {
    /// Its first list is complete.
    pub listed: bool,
    /// Copies that exist, in a destination namespace, with the source's data.
    pub done: usize,
}

/// A watch on one side's copies, from the benchmark process: counts the copies that are done.
pub struct Observer {
    seen: watch::Receiver<Seen>,
    task: tokio::task::JoinHandle<()>,
}

impl Observer {
    /// Watches the Secrets labelled `label`; a copy is done when its name is a key of
    /// `expected`, its data that key's value, and its namespace one of `namespaces`.
    pub fn start(
        client: kube::Client,
        label: &str,
        expected: BTreeMap<String, BTreeMap<String, ByteString>>,
        namespaces: HashSet<String>,
    ) -> Self {
        let (tx, seen) = watch::channel(Seen::default());
        // Lists served from the apiserver's watch cache: a list from etcd would read every
        // unrelated Secret.
        let config = watcher::Config::default().labels(label).any_semantic();
        let api: Api<Secret> = Api::all(client);
        let task = tokio::spawn(async move {
            let mut done: HashSet<(String, String)> = HashSet::new();
            let mut listed = false;
            let stream = watcher::watcher(api, config).default_backoff();
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                match event {
                    Event::Init => {
                        done.clear();
                        listed = false;
                    }
                    Event::InitDone => listed = true,
                    Event::Apply(s) | Event::InitApply(s) => {
                        let key = (s.namespace().unwrap_or_default(), s.name_any());
                        let ok = namespaces.contains(&key.0)
                            && expected
                                .get(&key.1)
                                .is_some_and(|d| s.data.as_ref() == Some(d));
                        if ok {
                            done.insert(key);
                        } else {
                            done.remove(&key);
                        }
                    }
                    Event::Delete(s) => {
                        done.remove(&(s.namespace().unwrap_or_default(), s.name_any()));
                    }
                }
                tx.send_replace(Seen {
                    listed,
                    done: done.len(),
                });
            }
        });
        Self { seen, task }
    }

    /// Waits until `until` holds, at most `timeout`; fails early if `process` exits.
    pub async fn wait(
        &mut self,
        timeout: Duration,
        mut process: Option<&mut Running>,
        until: impl Fn(&Seen) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let step = tokio::time::timeout(Duration::from_millis(250), self.seen.wait_for(&until));
            if step.await.is_ok() {
                return Ok(());
            }
            if let Some(p) = process.as_deref_mut()
                && !p.alive()
            {
                anyhow::bail!("the process exited before its copies were done");
            }
            if Instant::now() > deadline {
                anyhow::bail!("timed out waiting for copies: {:?}", *self.seen.borrow());
            }
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
