//! One watch task: list+watch a resource type in one cluster, keep its store, turn events into
//! keys.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::{Context, Msg, WatchSpec, write};
use crate::key::ObjectKey;

pub(super) async fn run(spec: WatchSpec, ctx: Context) {
    let WatchSpec {
        id,
        cluster,
        watch,
        mapper,
        mut writer,
    } = spec;
    let client = cluster.client().clone();
    let api: Api<DynamicObject> = match &watch.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &watch.resource),
        None => Api::all_with(client, &watch.resource),
    };
    let emit = |objs: &[&DynamicObject]| {
        let mut keys = Vec::with_capacity(objs.len());
        for obj in objs {
            let key = ObjectKey::for_object(cluster.name(), &watch.resource, obj);
            match &mapper {
                Some(map) => keys.extend(map(&key, obj)),
                None => keys.push(key),
            }
        }
        if !keys.is_empty() {
            let _ = ctx.shared.trigger.send(Msg::Trigger(keys, None));
        }
    };
    let set_state = |error: Option<String>, listed: bool| {
        let mut states = write(&ctx.shared.watches);
        if let Some(s) = states.get_mut(id) {
            s.error = error;
            s.listed |= listed;
        }
    };

    let stream = watcher::watcher(api, watch.config.clone()).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut listing: Vec<DynamicObject> = Vec::new();
    let mut listed_once = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                match &event {
                    Event::Init => listing.clear(),
                    Event::InitApply(obj) => {
                        set_state(None, false);
                        listing.push(obj.clone());
                    }
                    Event::InitDone => {
                        // Level-based: after a (re)list, queue what is new or changed, and what
                        // vanished while we were not watching (no Delete event arrives for it).
                        let before: HashMap<(Option<String>, Option<String>), Arc<DynamicObject>> =
                            writer
                                .as_reader()
                                .state()
                                .into_iter()
                                .map(|o| {
                                    ((o.metadata.namespace.clone(), o.metadata.name.clone()), o)
                                })
                                .collect();
                        let mut changed: Vec<&DynamicObject> = Vec::new();
                        let mut present = std::collections::HashSet::new();
                        for obj in &listing {
                            let id = (obj.metadata.namespace.clone(), obj.metadata.name.clone());
                            let same = before.get(&id).is_some_and(|old| {
                                old.metadata.resource_version == obj.metadata.resource_version
                            });
                            if !same {
                                changed.push(obj);
                            }
                            present.insert(id);
                        }
                        let vanished: Vec<Arc<DynamicObject>> = before
                            .iter()
                            .filter(|(id, _)| !present.contains(*id))
                            .map(|(_, o)| o.clone())
                            .collect();
                        writer.apply_watcher_event(&event);
                        set_state(None, true);
                        let mut all: Vec<&DynamicObject> = changed;
                        all.extend(vanished.iter().map(|o| o.as_ref()));
                        emit(&all);
                        listing.clear();
                        if !listed_once {
                            listed_once = true;
                            tracing::debug!(objects = present.len(), "listed");
                        }
                        let _ = ctx.shared.trigger.send(Msg::Listed(id));
                        continue;
                    }
                    Event::Apply(obj) | Event::Delete(obj) => {
                        set_state(None, false);
                        emit(&[obj]);
                    }
                }
                writer.apply_watcher_event(&event);
            }
            Err(e) => {
                tracing::warn!(error = %e, "watch failed; retrying with backoff");
                set_state(Some(describe(&e)), false);
            }
        }
    }
}

fn describe(e: &watcher::Error) -> String {
    match e {
        watcher::Error::InitialListFailed(k)
        | watcher::Error::WatchStartFailed(k)
        | watcher::Error::WatchFailed(k) => {
            format!("{e}: {k}")
        }
        other => other.to_string(),
    }
}
