//! One watch task: list+watch (or a streaming list, then watch) a resource type in one
//! cluster, keep its store, turn events into keys.

use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::DynamicObject;
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::{self, Event};

use super::context::Context;
use super::delivered::Delivered;
use super::metadata::MetadataOnly;
use super::objects::{ObjectsWriter, Relisted, strip};
use super::shared::{Msg, WatchSpec};
use super::watch::{Mapper, Watch};
use crate::cluster::{Cluster, ListStrategy};
use crate::key::ObjectKey;

pub(super) async fn run(spec: WatchSpec, ctx: Context) {
    let WatchSpec {
        id,
        cluster,
        watch,
        mapper,
        mut writer,
    } = spec;
    let contact = ctx.shared.metrics.cluster(cluster.name());
    // List items of built-in kinds carry no apiVersion/kind; give every stored object its
    // type, so reconcilers never have to patch it in.
    let types = kube::core::TypeMeta {
        api_version: watch.resource.api_version.clone(),
        kind: watch.resource.kind.clone(),
    };
    let task = Task {
        id,
        cluster,
        watch,
        mapper,
        ctx,
        types,
    };
    let mut listed_once = false;
    let mut backoff = watch_backoff();
    // Each pass lists (or streams a list) and then watches, until the watch fails. A failed
    // watch is started again from a new list, never resumed from its resourceVersion: a
    // resumed watch that sees no event would never say it works again, and its cluster
    // would read as unreachable for as long as nothing changes there.
    loop {
        let stream = task.stream().await;
        let mut stream = std::pin::pin!(stream);
        let failure = loop {
            let Some(event) = stream.next().await else {
                return;
            };
            if event.is_ok() {
                contact.contacted();
            }
            match event.map(|event| task.typed(event)) {
                Ok(Event::InitDone) => task.relisted(&mut writer, &mut listed_once),
                Ok(event @ (Event::Apply(_) | Event::Delete(_))) => {
                    task.set_state(None, false);
                    store_then_emit(&mut writer, event, |obj| task.emit([obj]));
                }
                // The store buffers a (re)list until it is complete.
                Ok(event @ (Event::Init | Event::InitApply(_))) => {
                    writer.apply(event);
                }
                Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                    // The resourceVersion expired (common right after a CRD is installed, or
                    // after a long disconnect): the watcher re-lists. Normal, not an outage.
                    tracing::debug!(reason = %status.reason, "watch expired; re-listing");
                    contact.restarted();
                }
                Err(e) => break e,
            }
        };
        tracing::warn!(error = %failure, "watch failed; retrying with backoff");
        contact.restarted();
        task.set_state(Some(describe(&failure)), false);
        let delay = backoff.next().unwrap_or(WATCH_RETRY_MAX);
        tokio::time::sleep(delay).await;
    }
}

/// One watch task's fixed parts: its watch in its cluster, and the controller it tells.
struct Task {
    id: usize,
    cluster: Cluster,
    watch: Watch,
    mapper: Option<Mapper>,
    ctx: Context,
    /// The type every stored object is given.
    types: kube::core::TypeMeta,
}

impl Task {
    /// A new list-then-watch of the watched type: a streaming list where the cluster serves
    /// them (a watch of metadata only: where the cluster's strategy insists on them), of
    /// metadata only if the watch asks for that.
    async fn stream(&self) -> BoxStream<'static, watcher::Result<Event<Delivered>>> {
        let client = self.cluster.client().clone();
        let watch = &self.watch;
        let namespace = watch.namespace.as_deref();
        // Streaming lists where the cluster serves them (asked once per cluster): the initial
        // objects arrive one at a time instead of as one response held whole while it is
        // decoded.
        let mut config = watch.config.clone();
        if may_stream(watch.metadata_only, self.cluster.list_strategy())
            && self
                .cluster
                .streaming_lists(&watch.resource, namespace)
                .await
        {
            config = config.streaming_lists();
        } else {
            config = paged(config);
        }
        if watch.metadata_only {
            let api = crate::cluster::api_of::<MetadataOnly>(client, namespace, &watch.resource);
            let resource = watch.resource.clone();
            watcher::watcher(api, config)
                .map(move |event| event.map(|e| delivered(e, |m| m.into_object(&resource))))
                .boxed()
        } else if watch.keeps_text() && self.mapper.is_none() {
            // Decoded straight to the text the store keeps: no tree of the object is built.
            let api = crate::cluster::api_of::<Delivered>(client, namespace, &watch.resource);
            watcher::watcher(api, config).boxed()
        } else {
            let api = crate::cluster::api(client, namespace, &watch.resource);
            watcher::watcher(api, config)
                .map(|event| event.map(|e| delivered(e, |o| o)))
                .boxed()
        }
    }

    /// `event` with its objects typed, without managedFields if the watch says so, and each
    /// either stripped (when the watch keeps it only as metadata) or transformed as the
    /// watch says.
    fn typed(&self, event: Event<Delivered>) -> Event<Delivered> {
        let watch = &self.watch;
        // A deletion's object only says where it was: its text is not kept, nor cut.
        let deleted = matches!(event, Event::Delete(_));
        event.modify(|delivered| {
            if deleted {
                delivered.text = None;
            } else if watch.without_managed_fields {
                delivered.without_managed_fields();
            }
            let obj = &mut delivered.object;
            if obj.types.is_none() {
                obj.types = Some(self.types.clone());
            }
            if let Some(keep) = &watch.keep_full
                && !(keep.0)(&ObjectKey::for_object(
                    self.cluster.name(),
                    &watch.resource,
                    obj,
                ))
            {
                strip(obj);
            } else if let Some(t) = &watch.transform {
                (t.0)(obj);
            }
        })
    }

    /// Queues the keys of `objs` (mapped by the watch's mapper, if it has one), each once, in
    /// one message; each object is dropped once its keys are made. (A relist of ten thousand
    /// copies maps them to the few declarations they belong to.)
    fn emit<O: Borrow<DynamicObject>>(&self, objs: impl IntoIterator<Item = O>) {
        let mut keys = BTreeSet::new();
        for obj in objs {
            let obj = obj.borrow();
            let key = ObjectKey::for_object(self.cluster.name(), &self.watch.resource, obj);
            match &self.mapper {
                Some(map) => keys.extend(map(&key, obj)),
                None => {
                    keys.insert(key);
                }
            }
        }
        if !keys.is_empty() {
            let keys = keys.into_iter().collect();
            let _ = self.ctx.shared.trigger.send(Msg::Trigger(keys, None));
        }
    }

    /// Records the watch's state (`error`: failing now; `listed`: a list completed) and
    /// queues the keys waiting for it to list, or to start failing.
    fn set_state(&self, error: Option<String>, listed: bool) {
        let waiters = {
            let mut states = self.ctx.shared.watches.write();
            let Some(s) = states.get_mut(&self.id) else {
                return;
            };
            s.failing_since = match (&error, s.failing_since) {
                (None, _) => None,
                (Some(_), Some(since)) => Some(since),
                (Some(_), None) => Some(std::time::SystemTime::now()),
            };
            let fails_now = error.is_some() && s.error.is_none();
            s.error = error;
            s.listed |= listed;
            if listed {
                std::mem::take(&mut s.waiters)
            } else if fails_now {
                std::mem::take(&mut s.fail_waiters).into_iter().collect()
            } else {
                Vec::new()
            }
        };
        if !waiters.is_empty() {
            let _ = self.ctx.shared.trigger.send(Msg::Trigger(waiters, None));
        }
    }

    /// At the end of a (re)list: stores it, records the watch as listed, queues what is new,
    /// changed or vanished, and tells the controller's loop.
    fn relisted(&self, writer: &mut ObjectsWriter, listed_once: &mut bool) {
        // Level-based: after a (re)list, queue what is new or changed, and what vanished
        // while we were not watching (no Delete event arrives for it). The store tells which
        // without reading its objects back; each changed one is read back only to be mapped
        // to its keys, one at a time (a restart over ten thousand copies held as prints would
        // otherwise build ten thousand objects at once).
        let Relisted {
            changed,
            vanished,
            present,
        } = writer.finish_listing();
        self.set_state(None, true);
        let objects = writer.objects();
        let read_back = changed.iter().filter_map(|(namespace, name)| {
            objects.get((!namespace.is_empty()).then_some(&**namespace), name)
        });
        self.emit(read_back.chain(vanished));
        if !*listed_once {
            *listed_once = true;
            tracing::debug!(objects = present, "listed");
        }
        let _ = self.ctx.shared.trigger.send(Msg::Listed(self.id));
    }
}

/// How a failed watch reconnects: after 0.8 s, doubling (with jitter) up to 5 s, and from
/// 0.8 s again once it has not failed for 2 minutes.
///
/// kube's default, client-go's, doubles up to 30 s. The fault suite's flapping-remote scenario
/// (a RemoteCluster's apiserver down and up five times) found that after the last return the
/// watches of that cluster waited up to 30 s more before they tried again: convergence took
/// 22–36 s. kubesync holds a few watches per cluster, so that a try every 5 s at most costs an
/// apiserver that is down or struggling next to nothing.
fn watch_backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    ResetTimerBackoff::new(
        backon::ExponentialBuilder::default()
            .with_min_delay(WATCH_RETRY_MIN)
            .with_max_delay(WATCH_RETRY_MAX)
            .with_factor(2.0)
            .without_max_times()
            .with_jitter()
            .into(),
        Duration::from_secs(120),
    )
}

/// Objects per page of a plain list of full objects. Each is a tree until the store has made
/// what it keeps of it: at client-go's and kube's page (500) a restart over 10 000 copies
/// peaked 5 MiB above one that streamed them (v1.37.2: 33.1–33.5 against 27.7–28.1 MiB); at
/// 100, 28.0 MiB (v1.33.13: 28.4 against 34.1). The price is 100 requests instead of 20:
/// holding every copy again took 0.44 s against 0.43–0.56 s on v1.37.2, 0.52 s against
/// 0.42 s on v1.33.13 (one run each).
const LIST_PAGE: u32 = 100;

/// `config` for a plain list (where the apiserver serves no streaming lists, or of metadata
/// only: [`may_stream`]): paged, so that no more than [`LIST_PAGE`] objects are decoded at
/// once. A page is a response held whole while it is decoded: an unpaged list of 10 000
/// copies held them all at once (a restart over them peaked at 110 MiB). Watches of metadata
/// only page by the same count: an object's metadata alone may be 256 KiB of annotations,
/// and the objects a watch of the others sees are anyone's. The apiserver pages only reads
/// from etcd (it serves a list at `resourceVersion=0` from its watch cache whole, whatever
/// the limit), so a paged list reads the most recent state, as kube's and client-go's do.
fn paged(mut config: watcher::Config) -> watcher::Config {
    config.list_semantic = watcher::ListSemantic::MostRecent;
    config.page_size = Some(LIST_PAGE);
    config
}

/// Whether a watch may take its initial state as a streaming list (where the cluster serves
/// them): a watch of full objects may; a watch of metadata only lists in pages unless the
/// cluster's strategy is [`ListStrategy::StreamingList`]. A page of metadata is small, and
/// the apiserver sends a page of it for a fraction of what it spends streaming the same
/// objects one event at a time, each turned into its metadata on its own (2 000 Secrets of
/// 256 KiB, v1.37.2: about 20 ms of control-plane CPU against 60–80 ms; 10 000 small ones
/// 50–70 ms against 90–210 ms): a watch of the objects a declaration does not own would
/// otherwise slow the apiserver's answers to its first writes.
fn may_stream(metadata_only: bool, strategy: ListStrategy) -> bool {
    !metadata_only || strategy == ListStrategy::StreamingList
}

/// The first wait before a failed watch tries again.
const WATCH_RETRY_MIN: Duration = Duration::from_millis(800);
/// The longest (before jitter).
const WATCH_RETRY_MAX: Duration = Duration::from_secs(5);

/// An event of a watch whose objects were decoded as `K` (a full object, or
/// [`MetadataOnly`]), its objects made into what the store is handed.
fn delivered<K>(event: Event<K>, into: impl Fn(K) -> DynamicObject) -> Event<Delivered> {
    let object = |o: K| Delivered::from(into(o));
    match event {
        Event::Apply(o) => Event::Apply(object(o)),
        Event::Delete(o) => Event::Delete(object(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(object(o)),
        Event::InitDone => Event::InitDone,
    }
}

/// Applies a change event to the store, then hands its object to `emit`: a reconcile started
/// by the emitted keys (possibly on another thread, at once) reads the object as the event
/// left it, never the state before. The other order loses changes: a reconcile that reads
/// the old object is the last one this change triggers.
fn store_then_emit(
    writer: &mut ObjectsWriter,
    event: Event<Delivered>,
    emit: impl FnOnce(&DynamicObject),
) {
    if let Some(obj) = writer.apply(event) {
        emit(&obj);
    }
}

/// A watch's failure, for people: what failed, then the apiserver's message and code (or the
/// client's error with its causes), said once.
fn describe(e: &watcher::Error) -> String {
    let kube = crate::error::describe_kube;
    match e {
        watcher::Error::InitialListFailed(k) => format!("the list failed: {}", kube(k)),
        watcher::Error::WatchStartFailed(k) => format!("the watch could not start: {}", kube(k)),
        watcher::Error::WatchFailed(k) => format!("the watch failed: {}", kube(k)),
        watcher::Error::WatchError(status) => format!(
            "the apiserver ended the watch: {}",
            crate::error::api_message(status)
        ),
        other => crate::error::chain(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn obj(name: &str, rv: &str) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}
            }))
            .expect("object"),
        )
    }

    #[test]
    fn plain_lists_are_read_in_pages_from_etcd() {
        let config = paged(watcher::Config::default().any_semantic().labels("a=b"));
        // A limit is honoured only by reads from etcd (resourceVersion unset).
        assert_eq!(config.list_semantic, watcher::ListSemantic::MostRecent);
        assert_eq!(config.page_size, Some(LIST_PAGE));
        assert_eq!(
            config.label_selector.as_deref(),
            Some("a=b"),
            "the rest kept"
        );
    }

    #[test]
    fn only_watches_of_full_objects_stream_unless_the_strategy_insists() {
        use ListStrategy::*;
        for strategy in [Auto, ListWatch, StreamingList] {
            assert!(may_stream(false, strategy), "{strategy:?}: full objects");
        }
        assert!(!may_stream(true, Auto), "metadata lists in pages");
        assert!(!may_stream(true, ListWatch));
        assert!(may_stream(true, StreamingList), "the strategy insists");
    }

    #[test]
    fn keys_are_emitted_after_the_store_has_the_change() {
        let mut writer = ObjectsWriter::new(false, None);
        let objects = writer.objects();
        let stored_rv = || {
            objects
                .get(Some("ns"), "a")
                .and_then(|o| o.metadata.resource_version.clone())
        };
        writer.apply(Event::Apply((*obj("a", "1")).clone()));
        let mut seen = Vec::new();
        store_then_emit(
            &mut writer,
            Event::Apply((*obj("a", "2")).clone().into()),
            |_| {
                seen.push(stored_rv());
            },
        );
        store_then_emit(
            &mut writer,
            Event::Delete((*obj("a", "3")).clone().into()),
            |_| {
                seen.push(stored_rv());
            },
        );
        assert_eq!(seen, [Some("2".to_string()), None]);
    }

    #[test]
    fn a_failing_watch_tries_again_at_least_every_ten_seconds() {
        let delays: Vec<Duration> = watch_backoff().take(12).collect();
        assert!(delays[0] >= WATCH_RETRY_MIN, "{delays:?}");
        // The cap, plus at most as much jitter.
        assert!(
            delays.iter().all(|d| *d <= WATCH_RETRY_MAX * 2),
            "{delays:?}"
        );
        assert!(delays[11] >= WATCH_RETRY_MAX, "{delays:?}");
    }
}
