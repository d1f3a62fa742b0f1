//! What to watch: a resource type, narrowed on the server, and how its events map to keys.

use std::sync::Arc;

use kube::Resource;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::watcher;

use crate::key::ObjectKey;

/// Changes each object a watch receives before it is stored and its event mapped (e.g.
/// [`object::compact_managed_fields`](crate::object::compact_managed_fields)), as client-go's
/// informer transforms do: a store holds what the reconciler needs, not more.
pub type Transform = Arc<dyn Fn(&mut DynamicObject) + Send + Sync>;

/// Says which objects of a watch made with [`Watch::full_only_for`] are held in full, by key;
/// asked for every object as it arrives.
pub type KeepFull = Arc<dyn Fn(&ObjectKey) -> bool + Send + Sync>;

/// Makes, of an object a watch made with [`Watch::summarized`] receives, what its store keeps
/// instead of the object (`None`: the object itself, as the watch otherwise would).
pub type Summarize = Arc<dyn Fn(&DynamicObject) -> Option<Arc<dyn Summary>> + Send + Sync>;

/// What a store keeps of an object instead of the object ([`Watch::summarized`]): whatever its
/// maker's decisions need, usually a fraction of the object. Readers that know its type get
/// it back with [`Context::list_labelled_held`](super::Context::list_labelled_held) (and
/// [`Holding::summary`]); every other reader sees [`Summary::object`].
pub trait Summary: std::any::Any + Send + Sync + std::fmt::Debug {
    /// The object as readers of objects see it: its metadata as far as the summary keeps it
    /// (at least name, namespace, uid, resourceVersion, labels), with `data` null, as a
    /// metadata-only watch would have shown it.
    fn object(&self) -> DynamicObject;

    /// The object's resourceVersion: what tells, after a (re)list, whether the object changed
    /// while it was not watched. Asked of every object held at each (re)list; a summary that
    /// keeps it answers without building [`Summary::object`] (the default does build it).
    fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.object()
            .metadata
            .resource_version
            .map(std::borrow::Cow::Owned)
    }
}

/// One object as a store holds it: the object, or what a [`Summarize`] made of it.
#[derive(Clone, Debug)]
pub enum Holding {
    /// The object (parsed again if the store holds it packed).
    Object(Arc<DynamicObject>),
    /// Its summary.
    Summary(Arc<dyn Summary>),
}

impl Holding {
    /// The summary, if it is one of type `T`.
    pub fn summary<T: Summary>(&self) -> Option<Arc<T>> {
        match self {
            Self::Summary(s) => {
                let any: Arc<dyn std::any::Any + Send + Sync> = s.clone();
                any.downcast::<T>().ok()
            }
            Self::Object(_) => None,
        }
    }
}

/// Maps an event on a secondary watch to keys of the primary objects it affects. Receives the
/// key and the object of the event (for a deletion, the last known state).
pub type Mapper = Arc<dyn Fn(&ObjectKey, &DynamicObject) -> Vec<ObjectKey> + Send + Sync>;

/// One watch: a resource type, optionally narrowed on the server by namespace and selectors,
/// holding full objects or (with [`Watch::metadata_only`]) only their metadata.
///
/// A watch keeps every object it sees in memory, so choose what it holds by what the
/// reconciler reads:
/// - **Full** (the default): objects whose content is compared or copied.
/// - **Metadata only**: objects whose name, labels, annotations, owners, uid and
///   resourceVersion are all a decision needs, or that are watched only to map events to keys.
///   The apiserver sends only `metadata` (`PartialObjectMetadata`), so a 256 KiB Secret costs
///   about as much as an empty one. Such objects are read with [`Context::get_metadata`] and
///   [`Context::list_metadata`]; [`Context::get`] and [`Context::list`] never return them.
///
/// Either kind may also be **packed** ([`Watch::packed`]): held as JSON text and parsed on
/// each read, for many objects read a few at a time.
///
/// [`Context::get`]: super::Context::get
/// [`Context::list`]: super::Context::list
/// [`Context::get_metadata`]: super::Context::get_metadata
/// [`Context::list_metadata`]: super::Context::list_metadata
#[derive(Clone, Debug)]
#[must_use]
pub struct Watch {
    pub(super) resource: ApiResource,
    pub(super) namespace: Option<String>,
    pub(super) config: watcher::Config,
    pub(super) metadata_only: bool,
    pub(super) packed: bool,
    pub(super) index_label: Option<String>,
    pub(super) transform: Option<TransformFn>,
    pub(super) without_managed_fields: bool,
    pub(super) keep_full: Option<KeepFullFn>,
    pub(super) summarize: Option<SummarizeFn>,
}

/// A [`Transform`] in a [`Watch`] (which is `Debug`).
#[derive(Clone)]
pub(super) struct TransformFn(pub(super) Transform);

impl std::fmt::Debug for TransformFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Transform")
    }
}

/// A [`Summarize`] in a [`Watch`].
#[derive(Clone)]
pub(super) struct SummarizeFn(pub(super) Summarize);

impl std::fmt::Debug for SummarizeFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Summarize")
    }
}

/// A [`KeepFull`] in a [`Watch`].
#[derive(Clone)]
pub(super) struct KeepFullFn(pub(super) KeepFull);

impl std::fmt::Debug for KeepFullFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepFull")
    }
}

impl Watch {
    /// A watch of a typed resource (`ConfigMap`, a `#[derive(CustomResource)]` type, …).
    pub fn of<K: Resource<DynamicType = ()>>() -> Self {
        Self::dynamic(ApiResource::erase::<K>(&()))
    }

    /// A watch of any resource type described by an [`ApiResource`] (e.g. from discovery).
    ///
    /// Where the apiserver serves streaming lists, the initial state is streamed from its
    /// watch cache, one object at a time. Elsewhere, and for a watch of
    /// [metadata only](Self::metadata_only) always (unless the cluster's
    /// [`ListStrategy`](crate::cluster::ListStrategy) insists on streaming), the watch lists
    /// first, in pages of 100 objects read from etcd (the apiserver serves
    /// a list from its watch cache only whole, and a whole list of ten thousand objects is
    /// held whole while it is decoded). The watch that follows starts at the list's
    /// resourceVersion, so every later change still arrives.
    /// Decisions to delete are never taken from a store's absence alone (see
    /// [`Context::confirm_absent`](crate::runtime::Context::confirm_absent)).
    pub fn dynamic(resource: ApiResource) -> Self {
        let mut config = watcher::Config::default().any_semantic();
        config.page_size = None;
        Self {
            resource,
            namespace: None,
            config,
            metadata_only: false,
            packed: false,
            index_label: None,
            transform: None,
            without_managed_fields: false,
            keep_full: None,
            summarize: None,
        }
    }

    /// Stores each object without its `metadata.managedFields` (often the larger part of an
    /// object whose status lists many entries: each has its own there). Unlike a
    /// [`Watch::transform`] doing the same, it leaves a packed watch free to keep each
    /// object's text as it arrived, with only that field cut out of it, instead of decoding
    /// the object into a tree first (see [`Watch::packed`]).
    pub fn without_managed_fields(mut self) -> Self {
        self.without_managed_fields = true;
        self
    }

    /// Applies `transform` to each object before it is stored (and before its event is
    /// mapped). For watches that hold full objects.
    pub fn transform(
        mut self,
        transform: impl Fn(&mut DynamicObject) + Send + Sync + 'static,
    ) -> Self {
        self.transform = Some(TransformFn(Arc::new(transform)));
        self
    }

    /// Holds in full only the objects `keep` names; the others as metadata only, their content
    /// dropped (with their `managedFields`) as they arrive, before they are stored. `keep` is
    /// asked for every object at each of its events, so an object it starts to name is held
    /// in full from its next event on; until then (an object that does not change), read it
    /// live and hand it over with [`Context::hold_in_full`].
    ///
    /// For a watch of which only a few objects, known by name, are read in full — the sources
    /// of many declarations in one namespace, where one watch serves them all and a tenant's
    /// other objects cost only their metadata. A watch of full objects receives every object
    /// in full (no selector can name a set of names); with [`Watch::metadata_only`] as well,
    /// the apiserver sends metadata only and every object arrives as metadata: those `keep`
    /// names are held in full only once read live and handed over with
    /// [`Context::hold_in_full`], until their next event. [`Context::get`] and
    /// [`Context::list`] do not return the objects held as metadata;
    /// [`Context::get_metadata`] does. A [`Watch::transform`] applies to the objects held
    /// in full.
    ///
    /// [`Context::hold_in_full`]: super::Context::hold_in_full
    /// [`Context::get`]: super::Context::get
    /// [`Context::list`]: super::Context::list
    /// [`Context::get_metadata`]: super::Context::get_metadata
    pub fn full_only_for(
        mut self,
        keep: impl Fn(&ObjectKey) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.keep_full = Some(KeepFullFn(Arc::new(keep)));
        self
    }

    /// Holds only the objects' metadata (`PartialObjectMetadata`; `data` is `null`), without
    /// `managedFields`. Events and keys are the same as with full objects.
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// Keeps, of each object `summarize` makes something of, that instead of the object (after
    /// the watch's [`transform`](Watch::transform)): a syncer's own copies held as what judging
    /// them needs — a few hundred bytes whatever their size — instead of a kilobyte or more of
    /// text. Readers that know the summary's type read it with
    /// [`Context::list_labelled_held`](super::Context::list_labelled_held); every other reader
    /// sees [`Summary::object`] (metadata). An object `summarize` leaves (`None`) is held as
    /// the watch otherwise would.
    pub fn summarized(
        mut self,
        summarize: impl Fn(&DynamicObject) -> Option<Arc<dyn Summary>> + Send + Sync + 'static,
    ) -> Self {
        self.summarize = Some(SummarizeFn(Arc::new(summarize)));
        self
    }

    /// Holds each object as its JSON text instead of a tree of maps and strings, and parses it
    /// on every read ([`Context::get`] and the others return a fresh object each time).
    ///
    /// A small object costs about a fifth of the memory this way (a copied Secret: 4.0 KiB
    /// parsed, 0.9 KiB as text), and a read about 3 µs per KiB. For watches that hold many
    /// objects read a few at a time — a syncer's own copies across thousands of namespaces —
    /// not for ones whose every object is read on every reconcile. Combines with
    /// [`Watch::metadata_only`] and [`Watch::transform`] (applied before the object is packed).
    ///
    /// [`Context::get`]: super::Context::get
    pub fn packed(mut self) -> Self {
        self.packed = true;
        self
    }

    /// Keeps an index of the values of the label `key`, so that
    /// [`Context::list_labelled`](super::Context::list_labelled) finds the objects carrying
    /// one value without reading the others (as a client-go informer's indexer does). For a
    /// watch whose objects are looked up by an owner's mark — a syncer's copies, by the
    /// declaration they belong to.
    pub fn index_label(mut self, key: impl Into<String>) -> Self {
        self.index_label = Some(key.into());
        self
    }

    /// Whether this watch holds its objects as text (see [`Watch::packed`]).
    pub fn is_packed(&self) -> bool {
        self.packed
    }

    /// Whether its store can keep each object as the very text it arrived as, without
    /// decoding it into a tree first: packed, of full objects, with nothing that reads or
    /// changes the object before it is stored (a transform, a summary, metadata kept for
    /// some objects). Its events' objects then carry only their type and metadata, so a
    /// mapper (which may read the rest) is given the whole object instead.
    pub(super) fn keeps_text(&self) -> bool {
        self.packed
            && !self.metadata_only
            && self.transform.is_none()
            && self.keep_full.is_none()
            && self.summarize.is_none()
    }

    /// Whether this watch holds some objects in full and others as metadata only (see
    /// [`Watch::full_only_for`]).
    pub fn is_mixed(&self) -> bool {
        self.keep_full.is_some()
    }

    /// Whether this watch holds only metadata (see [`Watch::metadata_only`]).
    pub fn is_metadata_only(&self) -> bool {
        self.metadata_only
    }

    /// Watches only this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Watches only objects matching this label selector (server-side).
    pub fn labels(mut self, selector: &str) -> Self {
        self.config = self.config.labels(selector);
        self
    }

    /// Watches only objects matching this field selector (server-side).
    pub fn fields(mut self, selector: &str) -> Self {
        self.config = self.config.fields(selector);
        self
    }

    /// The watched resource type.
    pub fn resource(&self) -> &ApiResource {
        &self.resource
    }

    /// The watcher configuration (list semantics, selectors) this watch runs with.
    pub fn config(&self) -> &watcher::Config {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watches_stream_from_the_watch_cache() {
        let w = Watch::dynamic(ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("demo.kubesync.io", "v1", "Widget"),
            "widgets",
        ))
        .labels("a=b");
        // resourceVersion=0: a streaming list is served from the apiserver's watch cache
        // (a plain list is paged instead: `reflect::paged`).
        assert_eq!(w.config.list_semantic, watcher::ListSemantic::Any);
        assert_eq!(w.config.page_size, None);
        assert_eq!(w.config.label_selector.as_deref(), Some("a=b"));
    }
}
