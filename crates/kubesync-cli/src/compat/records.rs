//! Where the records of the copies the compat tools' annotations made are kept: one ConfigMap
//! per annotated object, in the operator's own namespace, which tenants do not write.
//!
//! An ObjectSync keeps its record in its status; an annotated object is a tenant's, so its
//! record cannot live on it. Without a kept record, a restart would take every object carrying
//! a deleted source's marks — marks anyone who may patch an object can write — as a copy to
//! remove. With it, a source deleted while the operator was down still has its copies removed
//! (those the record holds, with kubesync's rights), and a forged mark makes nothing kubesync's.
//!
//! The ConfigMap `kubesync-record-<digest of the object's kind and name>` holds, per uid of the
//! object (a source deleted and made again is another declaration), `made.<uid>` and
//! `seeded.<uid>` (the record's texts, [`Record::encode`]) and, while copies are being created,
//! `openSince`. An object without one was never acted on by a kubesync that kept records: its
//! marks are taken once, as seeded copies (removed only as the identity its namespace acts as).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kubesync::ObjectKey;
use kubesync::syncers::fan_out::record::{Ledger, Record};
use parking_lot::Mutex;
use sha2::{Digest as _, Sha256};

use crate::own_writes::{FIELD_MANAGER, OwnWrites};

/// Label on every record ConfigMap (value [`RECORD_OF_ANNOTATIONS`]).
pub const RECORD_LABEL: &str = "kubesync.io/record";
/// The value of [`RECORD_LABEL`].
pub const RECORD_OF_ANNOTATIONS: &str = "annotations";
/// Annotation on a record ConfigMap naming the object whose record it is (for people).
pub const RECORD_OF: &str = "kubesync.io/record-of";

/// The record ConfigMap's name for the annotated object `key`.
pub fn config_map_name(key: &ObjectKey) -> String {
    let hash = Sha256::digest(described(key).as_bytes());
    let hex: String = hash[..10].iter().map(|b| format!("{b:02x}")).collect();
    format!("kubesync-record-{hex}")
}

/// `group/Kind/namespace/name` of `key`.
fn described(key: &ObjectKey) -> String {
    format!(
        "{}/{}/{}/{}",
        if key.group.is_empty() {
            "core"
        } else {
            &key.group
        },
        key.kind,
        key.namespace.as_deref().unwrap_or_default(),
        key.name
    )
}

/// What one record ConfigMap holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Kept {
    /// Per uid of the annotated object: its record's `made` and `seeded` texts.
    records: BTreeMap<String, (String, String)>,
    /// Since when copies are being created (RFC 3339).
    open_since: Option<String>,
}

impl Kept {
    /// What the ConfigMap's `data` says.
    fn read(data: &BTreeMap<String, String>) -> Self {
        let mut kept = Kept {
            open_since: data.get("openSince").cloned(),
            ..Kept::default()
        };
        for (k, v) in data {
            if let Some(uid) = k.strip_prefix("made.") {
                kept.records.entry(uid.to_string()).or_default().0 = v.clone();
            } else if let Some(uid) = k.strip_prefix("seeded.") {
                kept.records.entry(uid.to_string()).or_default().1 = v.clone();
            }
        }
        kept
    }

    /// Its `data`.
    fn data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::new();
        for (uid, (made, seeded)) in &self.records {
            data.insert(format!("made.{uid}"), made.clone());
            data.insert(format!("seeded.{uid}"), seeded.clone());
        }
        if let Some(since) = &self.open_since {
            data.insert("openSince".into(), since.clone());
        }
        data
    }

    /// The record of the object of `uid` (empty if it holds none; unreadable: empty too, so
    /// that nothing is taken as a copy until it is mended).
    fn record(&self, uid: &str) -> Record {
        let open_since = self
            .open_since
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        let Some((made, seeded)) = self.records.get(uid) else {
            return Record::decode("", open_since).unwrap_or_default();
        };
        Record::decode(made, open_since)
            .and_then(|r| r.with_seeded(seeded))
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, uid, "a record of the copies annotations made cannot be read; its marked objects are taken as someone else's");
                Record::decode("", open_since).unwrap_or_default()
            })
    }
}

/// The records of the copies annotations made, kept in ConfigMaps of `namespace` and held in
/// memory as last read or written (one reconcile of an object at a time reads and writes its
/// record).
pub struct CompatRecords {
    writes: OwnWrites,
    namespace: String,
    /// Per annotated object: its ConfigMap as last read or written (`None`: there is none).
    held: Mutex<HashMap<ObjectKey, Option<Kept>>>,
}

impl std::fmt::Debug for CompatRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompatRecords")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl CompatRecords {
    /// Records kept in ConfigMaps of `namespace` (the operator's own), written through
    /// `writes`.
    pub fn new(writes: OwnWrites, namespace: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            writes,
            namespace: namespace.into(),
            held: Mutex::default(),
        })
    }

    /// The namespace the records are kept in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Forgets (in memory only) the records of the objects for which `keep` is false: a
    /// replica of `--sharded` that no longer works on them reads them again if it does once
    /// more (another replica may have written them meanwhile).
    pub fn release(&self, keep: impl Fn(&ObjectKey) -> bool) {
        self.held.lock().retain(|k, _| keep(k));
    }

    /// What the ConfigMap of `key` holds (read once, then as held).
    async fn load(&self, key: &ObjectKey) -> kubesync::Result<Option<Kept>> {
        if let Some(held) = self.held.lock().get(key) {
            return Ok(held.clone());
        }
        let api: Api<ConfigMap> =
            Api::namespaced(self.writes.local().client().clone(), &self.namespace);
        let kept = api
            .get_opt(&config_map_name(key))
            .await?
            .map(|cm| Kept::read(&cm.data.unwrap_or_default()));
        self.held.lock().insert(key.clone(), kept.clone());
        Ok(kept)
    }

    /// The record of the declaration of the annotated object `key` whose uid is `uid`, for
    /// [`Declaration::record`](kubesync::syncers::fan_out::Declaration::record): `None` when
    /// none is kept for `key` (its marks are taken once, as seeded copies), else the one kept
    /// (empty if it holds none for `uid`).
    pub async fn record_of(&self, key: &ObjectKey, uid: &str) -> kubesync::Result<Option<Record>> {
        Ok(self.load(key).await?.map(|kept| kept.record(uid)))
    }

    /// Keeps `record` as the record of `key`'s declaration of `uid` (an empty one is
    /// forgotten; with none left, the ConfigMap goes). Closes the record's opening if
    /// `record` is closed. Writes only what changed.
    pub async fn keep(&self, key: &ObjectKey, uid: &str, record: &Record) -> kubesync::Result<()> {
        let old = self.load(key).await?;
        let mut kept = old.clone().unwrap_or_default();
        if record.is_empty() {
            kept.records.remove(uid);
        } else {
            kept.records
                .insert(uid.to_string(), (record.encode(), record.encode_seeded()));
        }
        if record.open_since().is_none() {
            kept.open_since = None;
        }
        self.store(key, old, kept).await
    }

    /// Forgets the record of `key`'s declaration of `uid` (its copies are gone).
    pub async fn forget(&self, key: &ObjectKey, uid: &str) -> kubesync::Result<()> {
        let old = self.load(key).await?;
        let mut kept = old.clone().unwrap_or_default();
        kept.records.remove(uid);
        if kept.records.is_empty() {
            kept.open_since = None;
        }
        self.store(key, old, kept).await
    }

    /// Writes `kept` as `key`'s ConfigMap (was `old`): applied, or deleted when it holds
    /// nothing; nothing when it did not change.
    async fn store(&self, key: &ObjectKey, old: Option<Kept>, kept: Kept) -> kubesync::Result<()> {
        let empty = kept == Kept::default();
        if old.as_ref() == Some(&kept) || (old.is_none() && empty) {
            return Ok(());
        }
        let ar = ApiResource::erase::<ConfigMap>(&());
        let name = config_map_name(key);
        if empty {
            let deleted = self
                .writes
                .writer()
                .delete(
                    self.writes.local(),
                    &ar,
                    Some(&self.namespace),
                    &name,
                    None,
                    None,
                )
                .await;
            match deleted {
                Ok(_) => {}
                Err(kubesync::Error::Kube(kube::Error::Api(s))) if s.is_not_found() => {}
                Err(e) => return Err(e),
            }
            self.held.lock().insert(key.clone(), None);
            return Ok(());
        }
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {
                    RECORD_LABEL: RECORD_OF_ANNOTATIONS,
                    "app.kubernetes.io/managed-by": "kubesync",
                },
                "annotations": {RECORD_OF: described(key)},
            },
            "data": kept.data(),
        }))?;
        self.writes
            .writer()
            .apply(self.writes.local(), &ar, &object, FIELD_MANAGER)
            .await?;
        self.held.lock().insert(key.clone(), Some(kept));
        Ok(())
    }
}

/// Opens the record of an annotated object where it is kept, before its copies are created.
impl Ledger for CompatRecords {
    fn open<'a>(
        &'a self,
        decl: &'a ObjectKey,
        since: jiff::Timestamp,
    ) -> BoxFuture<'a, kubesync::Result<()>> {
        Box::pin(async move {
            let old = self.load(decl).await?;
            let mut kept = old.clone().unwrap_or_default();
            if kept.open_since.is_some() {
                return Ok(());
            }
            kept.open_since = Some(since.to_string());
            self.store(decl, old, kept).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, name: &str) -> ObjectKey {
        ObjectKey {
            cluster: "local".into(),
            group: String::new(),
            kind: "Secret".into(),
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    #[test]
    fn each_object_has_a_configmap_of_its_own_named_within_bounds() {
        let a = config_map_name(&key("t1", "db"));
        assert_eq!(a, config_map_name(&key("t1", "db")));
        assert_ne!(a, config_map_name(&key("t1", "db2")));
        assert_ne!(a, config_map_name(&key("t2", "db")));
        assert!(a.len() <= 63 && a.starts_with("kubesync-record-"), "{a}");
        assert_eq!(described(&key("t1", "db")), "core/Secret/t1/db");
    }

    #[test]
    fn a_kept_record_reads_back_per_uid_with_its_opening() {
        let mut r = Record::new();
        r.insert("u-made");
        r.seed("u-seeded");
        let mut kept = Kept::default();
        kept.records
            .insert("uid-1".into(), (r.encode(), r.encode_seeded()));
        kept.open_since = Some("2026-12-03T10:00:00Z".into());
        let back = Kept::read(&kept.data());
        assert_eq!(back, kept);
        let record = back.record("uid-1");
        assert!(record.made_by_kubesync("u-made") && !record.made_by_kubesync("u-seeded"));
        assert!(record.contains("u-seeded"));
        assert!(record.open_since().is_some());
        let other = back.record("uid-2");
        assert!(
            other.is_empty() && other.open_since().is_some(),
            "another uid's: empty"
        );
        let mut broken = kept.data();
        broken.insert("made.uid-1".into(), "not base64!".into());
        assert!(
            Kept::read(&broken).record("uid-1").is_empty(),
            "unreadable: nothing vouched"
        );
    }
}
