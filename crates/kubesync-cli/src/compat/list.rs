//! `kubesync compat list`: every sync an annotation declares in a cluster, with its state, and
//! (`--as-objectsync`) the ObjectSyncs that declare the same pushes, for a team that wants
//! to move from annotations to declarations.
//!
//! Gather (one metadata list per kind, and the namespaces) → the pure [`rows`] and
//! [`objectsyncs`]. It reads; it never writes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;

use super::Tool;
use super::declared::{self, Declared, made_by};
use super::mirror::{self, Mirror, declared_mirror};
use kubesync::syncers::fan_out::rules::MANAGED_BY;

/// What a listing reads: every object of the tools' kinds (metadata), and every namespace.
#[derive(Clone, Debug, Default)]
pub struct Listed {
    /// Per kind, its objects (metadata only).
    pub objects: Vec<(ApiResource, Vec<DynamicObject>)>,
    /// Every namespace: name, labels, and whether it is being deleted.
    pub namespaces: Vec<(String, BTreeMap<String, String>, bool)>,
}

/// One annotation-declared sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// `Kind namespace/name` of the declaring object.
    pub object: String,
    /// The tools whose annotations declare it.
    pub tools: String,
    /// `push` or `pull`.
    pub direction: &'static str,
    /// What holds now, for people.
    pub state: String,
}

/// Reads the facts of a listing (metadata lists only).
pub async fn gather(client: &kube::Client, tools: &[Tool]) -> kube::Result<Listed> {
    let mut facts = Listed::default();
    for ar in declared::resources(tools) {
        let list = Api::<DynamicObject>::all_with(client.clone(), &ar)
            .list_metadata(&ListParams::default())
            .await?;
        let objects = list
            .items
            .into_iter()
            .map(|m| DynamicObject {
                types: None,
                metadata: m.metadata,
                data: serde_json::Value::Null,
            })
            .collect();
        facts.objects.push((ar, objects));
    }
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?;
    facts.namespaces = namespaces
        .items
        .into_iter()
        .map(|n| {
            (
                n.metadata.name.unwrap_or_default(),
                n.metadata.labels.unwrap_or_default(),
                n.metadata.deletion_timestamp.is_some(),
            )
        })
        .collect();
    Ok(facts)
}

fn annotations(o: &DynamicObject) -> BTreeMap<String, String> {
    o.metadata.annotations.clone().unwrap_or_default()
}

fn labels(o: &DynamicObject) -> BTreeMap<String, String> {
    o.metadata.labels.clone().unwrap_or_default()
}

fn id(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// The namespaces a push admits now (not its source's, not terminating).
fn admitted<'a>(facts: &'a Listed, declared: &Declared, own: &str) -> Vec<&'a str> {
    facts
        .namespaces
        .iter()
        .filter(|(n, l, terminating)| !terminating && n != own && declared.admits(n, l))
        .map(|(n, ..)| n.as_str())
        .collect()
}

/// Every annotation-declared sync in `facts`, for the `tools` turned on, with its state
/// (pure): for a push, how many of the namespaces it selects hold its copy, and where a
/// same-named object it did not make stands; for a pull, whether its source exists and
/// consents, and whether it has been pulled.
pub fn rows(facts: &Listed, tools: &[Tool]) -> Vec<Row> {
    let mut out = Vec::new();
    for (ar, objects) in &facts.objects {
        let by_id: BTreeMap<(String, String), &DynamicObject> =
            objects.iter().map(|o| (id(o), o)).collect();
        for o in objects
            .iter()
            .filter(|o| !labels(o).contains_key(MANAGED_BY))
        {
            let (ns, name) = id(o);
            let object = format!("{} {ns}/{name}", ar.kind);
            let declared = Declared::read(tools, ar, &annotations(o));
            if declared.pushes() {
                let uid = o.metadata.uid.clone().unwrap_or_default();
                let wanted = admitted(facts, &declared, &ns);
                let mut copies = 0;
                let mut conflicts = Vec::new();
                for at in &wanted {
                    match by_id.get(&(at.to_string(), name.clone())) {
                        Some(there) if labels(there).get(MANAGED_BY) == Some(&uid) => copies += 1,
                        Some(there) if !made_by(tools, there, &(ns.clone(), name.clone())) => {
                            conflicts.push(*at)
                        }
                        _ => {}
                    }
                }
                let mut state = format!("copies {copies}/{}", wanted.len());
                if !conflicts.is_empty() {
                    let _ = write!(state, "; someone else's object in {}", conflicts.join(", "));
                }
                for p in &declared.problems {
                    let _ = write!(state, "; {p}");
                }
                out.push(Row {
                    object: object.clone(),
                    tools: join(&declared.tools()),
                    direction: "push",
                    state,
                });
            }
            match declared_mirror(tools, ar, &annotations(o)) {
                Ok(Some(p)) => out.push(Row {
                    object,
                    tools: p.tool.to_string(),
                    direction: "pull",
                    state: mirror_state(facts, &by_id, o, &ns, &p),
                }),
                Ok(None) => {}
                Err(why) => out.push(Row {
                    object,
                    tools: String::new(),
                    direction: "pull",
                    state: why,
                }),
            }
        }
    }
    out
}

fn mirror_state(
    facts: &Listed,
    by_id: &BTreeMap<(String, String), &DynamicObject>,
    target: &DynamicObject,
    ns: &str,
    p: &Mirror,
) -> String {
    let from = format!("from {}/{}", p.namespace, p.name);
    let Some(source) = by_id.get(&(p.namespace.clone(), p.name.clone())) else {
        return format!("{from}: the source does not exist");
    };
    let labels = facts
        .namespaces
        .iter()
        .find(|(n, ..)| n == ns)
        .map(|(_, l, _)| l.clone());
    if let Err(why) = mirror::consents(p.tool, &annotations(source), ns, labels.as_ref()) {
        return format!("{from}: refused: {why}");
    }
    let pulled = target
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|e| e.manager.as_deref() == Some(mirror::MIRROR_MANAGER));
    match pulled {
        true => format!("{from}: pulled"),
        false => format!("{from}: consented, not pulled yet"),
    }
}

fn join(tools: &[Tool]) -> String {
    tools
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The rows as a table (pure).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from("OBJECT\tTOOLS\tDIRECTION\tSTATE\n");
    for r in rows {
        let _ = writeln!(
            out,
            "{}\t{}\t{}\t{}",
            r.object, r.tools, r.direction, r.state
        );
    }
    out
}

/// The ObjectSyncs that declare the same pushes as the annotations in `facts` (pure), as
/// YAML documents: each with the namespaces the annotations select now as destinations (a
/// pattern or a selector cannot always be said in an ObjectSync; the comment above each says
/// what the annotations said), copying what the tool copies. Mirrors have no ObjectSync
/// equivalent (an ObjectSync writes whole objects it owns): each is listed as a comment.
pub fn objectsyncs(facts: &Listed, tools: &[Tool]) -> String {
    let mut out = String::new();
    for (ar, objects) in &facts.objects {
        for o in objects
            .iter()
            .filter(|o| !labels(o).contains_key(MANAGED_BY))
        {
            let (ns, name) = id(o);
            let a = annotations(o);
            if let Ok(Some(p)) = declared_mirror(tools, ar, &a) {
                let _ = writeln!(
                    out,
                    "# {} {ns}/{name} pulls from {}/{} ({}): no ObjectSync equivalent; keep its annotation.",
                    ar.kind, p.namespace, p.name, p.tool
                );
            }
            let declared = Declared::read(tools, ar, &a);
            if !declared.pushes() {
                continue;
            }
            let said: Vec<String> = a
                .iter()
                .filter(|(k, _)| {
                    k.starts_with(declared::REFLECTOR) || k.starts_with(declared::REPLICATOR)
                })
                .map(|(k, v)| format!("#   {k}: {v}"))
                .collect();
            let destinations: Vec<serde_json::Value> = admitted(facts, &declared, &ns)
                .into_iter()
                .map(|n| serde_json::json!({"namespace": n}))
                .collect();
            let mut spec = serde_json::json!({
                "source": {"group": ar.group, "kind": ar.kind, "name": name},
                "destinations": destinations,
                "annotations": {"exclude": ["*"]},
            });
            if !declared.copies_labels() {
                spec["labels"] = serde_json::json!({"exclude": ["*"]});
            }
            let doc = serde_json::json!({
                "apiVersion": "kubesync.io/v1alpha1",
                "kind": "ObjectSync",
                "metadata": {"name": name, "namespace": ns},
                "spec": spec,
            });
            let _ = writeln!(
                out,
                "---\n# {} {ns}/{name}: destinations are the namespaces its annotations select now:\n{}",
                ar.kind,
                said.join("\n")
            );
            out.push_str(&serde_saphyr::to_string(&doc).unwrap_or_default());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: serde_json::Value) -> DynamicObject {
        serde_json::from_value(v).expect("object")
    }

    fn facts() -> Listed {
        let secret = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
        let ns = |n: &str, l: &[(&str, &str)]| {
            (
                n.to_string(),
                l.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                false,
            )
        };
        Listed {
            objects: vec![(
                secret,
                vec![
                    object(
                        json!({"metadata": {"name": "db", "namespace": "ops", "uid": "u1",
                        "annotations": {declared::REPLICATE_TO: "team-.*"}}}),
                    ),
                    object(json!({"metadata": {"name": "db", "namespace": "team-a",
                        "labels": {MANAGED_BY: "u1"}}})),
                    object(json!({"metadata": {"name": "db", "namespace": "team-b"}})),
                    object(json!({"metadata": {"name": "creds", "namespace": "team-a",
                        "annotations": {declared::REPLICATE_FROM: "ops/creds"}}})),
                    object(json!({"metadata": {"name": "creds", "namespace": "ops",
                        "annotations": {mirror::REPLICATION_ALLOWED: "true",
                            mirror::REPLICATION_ALLOWED_NAMESPACES: "team-b"}}})),
                ],
            )],
            namespaces: vec![
                ns("ops", &[]),
                ns("team-a", &[]),
                ns("team-b", &[]),
                ns("team-c", &[]),
            ],
        }
    }

    #[test]
    fn each_declared_sync_is_listed_with_its_state() {
        let rows = rows(&facts(), &[Tool::Replicator]);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].object, "Secret ops/db");
        assert_eq!(rows[0].direction, "push");
        assert_eq!(rows[0].state, "copies 1/3; someone else's object in team-b");
        assert_eq!(rows[1].direction, "pull");
        assert!(
            rows[1].state.contains("refused") && rows[1].state.contains("team-a"),
            "{}",
            rows[1].state
        );
        assert!(table(&rows).starts_with("OBJECT\tTOOLS"));
    }

    #[test]
    fn a_push_becomes_an_objectsync_into_the_namespaces_selected_now() {
        let yaml = objectsyncs(&facts(), &[Tool::Replicator]);
        assert!(yaml.contains("kind: ObjectSync"), "{yaml}");
        assert!(yaml.contains("replicate-to: team-.*"), "{yaml}");
        for ns in ["team-a", "team-b", "team-c"] {
            assert!(yaml.contains(&format!("namespace: {ns}")), "{ns}: {yaml}");
        }
        assert!(yaml.contains("pulls from ops/creds"), "{yaml}");
        let docs: Vec<serde_json::Value> = yaml
            .split("\n---\n")
            .filter_map(|d| serde_saphyr::from_str::<serde_json::Value>(d).ok())
            .filter(|v| v.get("kind").is_some())
            .collect();
        assert_eq!(docs.len(), 1, "{yaml}");
        let spec: crate::crd::ObjectSyncSpec =
            serde_json::from_value(docs[0]["spec"].clone()).expect("a valid ObjectSync spec");
        assert_eq!(spec.destinations.len(), 3);
    }
}
