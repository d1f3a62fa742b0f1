//! Scenario 7, a seeded campaign of hostile declarations.
//!
//! A generator makes random declarations that pass (or try) the CRD schema: odd names,
//! globs, selectors good and mistyped, patches, renames, prefixes, modes, deletion policies,
//! unknown kinds and clusters; half from the trusted namespace `apps`, half from the tenant
//! namespace `tenant` (and a few ClusterObjectSyncs). They are applied in waves, one wave per
//! seed, beside a healthy ObjectSync, on one real control plane. After each wave:
//!
//! - every declaration has a `Ready` condition, with a message for people (no `Debug` dump),
//!   and none reads `WatchFailed` (every source here is listable: a spec kubesync accepted
//!   that the apiserver refuses would show as one);
//! - the tenant's copies are only where consent exists (its own namespace; ConfigMaps in
//!   `victim`, whose SyncGrant admits them) — each wave holds a positive control, a tenant
//!   ObjectSync whose copies go to exactly those places, so the check always has copies to
//!   judge (and the leftover check below, copies to find gone);
//! - the healthy ObjectSync still follows a change of its source;
//! - once the wave's declarations are deleted, they are gone (no finalizer held), and no
//!   object carries the marks of any of them;
//! - the foreign objects planted at the names declarations aim at are unchanged (uid and
//!   resourceVersion);
//! - the operator neither panicked nor stopped, and its memory stays bounded.
//!
//! The seed is printed; `make chaos SEED=<n>` replays it (`KUBESYNC_SEED`), and
//! `KUBESYNC_CAMPAIGN_SEEDS=<k>` runs `k` seeds from it, one wave each. `make test` runs one
//! fixed seed. `onConflict: adopt` is left out: adoption changes a foreign object by design
//! (its own tests cover it).

use std::collections::BTreeMap;
use std::time::Instant;

use crate::common::*;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use kubesync_testenv::{TestEnv, eventually};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The seed `make test` runs.
const CI_SEED: u64 = 20_261_125;
/// Declarations per wave.
const WAVE: usize = 16;
/// Namespaces of the campaign.
const NAMESPACES: [&str; 6] = ["apps", "tenant", "victim", "team-0", "team-1", "kubesync"];

/// One generated declaration.
struct Declaration {
    kind: &'static str,
    namespace: Option<&'static str>,
    name: String,
    yaml: String,
}

fn pick<T: Copy>(rng: &mut StdRng, from: &[T]) -> T {
    from[rng.random_range(0..from.len())]
}

/// How often a field takes a mistyped or hostile value: about half of the declarations hold
/// at least one.
const ODD: f64 = 0.08;

/// One of `good`, or (with probability [`ODD`]) one of `odd`.
fn mostly<T: Copy>(rng: &mut StdRng, good: &[T], odd: &[T]) -> T {
    if rng.random_bool(ODD) {
        pick(rng, odd)
    } else {
        pick(rng, good)
    }
}

/// A source: kind, group, and how it is chosen (a name, a selector and/or names); whether
/// it is a selection (many sources).
fn source(rng: &mut StdRng, cluster_scoped: bool) -> (String, bool) {
    let (group, kind) = mostly(
        rng,
        &[
            ("", "ConfigMap"),
            ("", "ConfigMap"),
            ("", "Secret"),
            ("rbac.authorization.k8s.io", "Role"),
        ],
        &[
            ("rbac.authorization.k8s.io", "ClusterRole"),
            ("demo.kubesync.io", "Gizmo"),
            ("", "Config Map"),
            ("Apps", "Deployment"),
        ],
    );
    let mut fields = vec![format!("kind: \"{kind}\"")];
    if !group.is_empty() {
        fields.push(format!("group: \"{group}\""));
    }
    let many = rng.random_range(0..4);
    match many {
        0 | 1 => fields.push(format!("name: \"{}\"", source_name(rng))),
        2 => fields.push(format!("selector: {}", selector(rng, "app"))),
        _ => {
            fields.push(format!("selector: {}", selector(rng, "app")));
            let (a, b) = (source_name(rng), source_name(rng));
            fields.push(format!("names: [\"{a}\", \"{b}\"]"));
        }
    }
    if cluster_scoped || rng.random_bool(0.2) {
        let ns = mostly(rng, &["apps", "tenant", ""], &["victim", "Bad_NS"]);
        fields.push(format!("namespace: \"{ns}\""));
    }
    (format!("{{{}}}", fields.join(", ")), many > 1)
}

/// A source name, valid or not.
fn source_name(rng: &mut StdRng) -> &'static str {
    mostly(
        rng,
        &["settings", "other", "registry", "reader", "missing"],
        &["..", "A_B", "a/b", "view"],
    )
}

/// A label selector on `key`, well-formed or mistyped.
fn selector(rng: &mut StdRng, key: &str) -> String {
    mostly(
        rng,
        &[
            "{matchLabels: {KEY: cfg}}",
            "{matchLabels: {KEY: web}}",
            "{matchLabels: {KEY: \"true\"}}",
            "{matchExpressions: [{key: KEY, operator: In, values: [cfg, web, \"true\"]}]}",
            "{matchExpressions: [{key: KEY, operator: Exists}]}",
            "{matchExpressions: [{key: KEY, operator: NotIn, values: [web]}]}",
        ],
        &[
            "{matchLabels: {}}",
            "{matchLabels: {KEY: \"a(b\"}}",
            "{matchLabels: {\"my KEY\": cfg}}",
            "{matchExpressions: [{key: KEY, operator: DoesNotExist, values: [x]}]}",
            "{matchExpressions: [{key: KEY, operator: In}]}",
            "{matchExpressions: [{key: KEY, operator: Near, values: [x]}]}",
            "{matchLabels: {\"example.com/KEY\": \"-x\"}}",
            "{matchLabels: {\"Example.com/KEY\": x}}",
        ],
    )
    .replace("KEY", key)
}

/// One destination entry, for `many` sources or one.
fn destination(rng: &mut StdRng, many: bool) -> String {
    let mut fields = Vec::new();
    match rng.random_range(0..4) {
        0 | 1 => {
            let ns = mostly(
                rng,
                &["team-0", "victim", "tenant", "apps", "*", "kubesync"],
                &["team-*", "Nope", "-x"],
            );
            fields.push(format!("namespace: \"{ns}\""));
        }
        2 => fields.push(format!("namespaceSelector: {}", selector(rng, "team"))),
        _ => {}
    }
    if rng.random_bool(0.15) {
        let glob = mostly(rng, &["team-1", "kube-*", "t?am-0"], &["Team-*", "a/b"]);
        fields.push(format!("excludeNamespaces: [\"{glob}\"]"));
    }
    if rng.random_bool(ODD) {
        let cluster = pick(rng, &["nowhere", "EU West"]);
        fields.push(format!("cluster: \"{cluster}\""));
    }
    match rng.random_range(0..5) {
        // A rename, for one source (and now and then, wrongly, for many).
        0 if !many || rng.random_bool(ODD) => fields.push(format!(
            "name: \"{}\"",
            mostly(rng, &["settings", "foreign", "copy"], &["a/b", ".."])
        )),
        1 => fields.push(format!(
            "namePrefix: \"{}\"",
            mostly(rng, &["copy-", "p"], &["x%"])
        )),
        2 => fields.push(format!(
            "nameSuffix: \"{}\"",
            mostly(rng, &["-copy"], &["/s"])
        )),
        _ => {}
    }
    if rng.random_bool(0.25) {
        let patch = mostly(
            rng,
            &[
                "{merge: {metadata: {labels: {extra: \"yes\"}}}}",
                "{merge: {data: {added: \"1\"}}}",
                "{json: [{op: add, path: /metadata/labels, value: {extra: \"yes\"}}]}",
            ],
            &[
                "{merge: {metadata: {name: elsewhere}}}",
                "{merge: {metadata: {annotations: {kubesync.io/orphan-on-delete: \"true\"}}}}",
                "{json: [{op: jump, path: /x}]}",
                "{json: [{op: remove, path: /nothing/here}]}",
                // Once made the JSON-patch library panic (it could not undo the first move).
                "{json: [{op: move, from: /data/a, path: /data}, {op: move, from: /data/a, path: /metadata/name}]}",
                "{merge: {type: kubernetes.io/service-account-token}}",
            ],
        );
        fields.push(format!("patches: [{patch}]"));
    }
    format!("{{{}}}", fields.join(", "))
}

/// Declaration `i` of the wave of `seed`.
fn declaration(rng: &mut StdRng, seed: u64, i: usize) -> Declaration {
    let cluster = rng.random_bool(0.1);
    let name = format!("c{seed}-{i}");
    let count = if rng.random_bool(ODD) {
        0
    } else {
        rng.random_range(1..=3)
    };
    let (source, many) = source(rng, cluster);
    let destinations: Vec<String> = (0..count).map(|_| destination(rng, many)).collect();
    let mut spec = vec![
        format!("source: {source}"),
        format!("destinations: [{}]", destinations.join(", ")),
    ];
    if rng.random_bool(0.2) {
        spec.push("mode: Report".into());
    }
    if rng.random_bool(0.2) {
        spec.push("deletionPolicy: Orphan".into());
    }
    if rng.random_bool(0.15) {
        let filter = mostly(
            rng,
            &[
                "labels: {exclude: [app]}",
                "labels: {include: [\"example.com/\"]}",
                "data: {include: [a], rename: {a: b}}",
            ],
            &[
                "annotations: {exclude: [\"not ok\"]}",
                "data: {rename: {a: \"b/c\"}}",
            ],
        );
        spec.push(filter.to_string());
    }
    let spec: String = spec.iter().map(|l| format!("  {l}\n")).collect();
    let (kind, namespace) = if cluster {
        ("ClusterObjectSync", None)
    } else {
        ("ObjectSync", Some(pick(rng, &["apps", "tenant"])))
    };
    let meta = match namespace {
        Some(ns) => format!("{{name: {name}, namespace: {ns}}}"),
        None => format!("{{name: {name}}}"),
    };
    Declaration {
        kind,
        namespace,
        name,
        yaml: format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: {kind}\nmetadata: {meta}\nspec:\n{spec}"
        ),
    }
}

/// The wave's positive control: a tenant ObjectSync whose copies go where consent exists (its
/// own namespace, and `victim`, whose SyncGrant admits ConfigMaps) and nowhere else, so that
/// the consent and leftover checks always have copies to judge.
fn positive_control(seed: u64) -> Declaration {
    let name = format!("control-{seed}");
    Declaration {
        kind: "ObjectSync",
        namespace: Some("tenant"),
        yaml: format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: tenant}}\nspec:\n  source: {{kind: ConfigMap, name: settings}}\n  destinations: [{{namespace: \"*\", name: control-copy}}]\n"
        ),
        name,
    }
}

/// The campaign's kubesync kinds, in a namespace or cluster-wide.
fn api(env: &TestEnv, kind: &str, namespace: Option<&str>) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubesync.io", "v1alpha1", kind),
        &format!("{}s", kind.to_lowercase()),
    );
    let client = env.client().expect("client");
    match namespace {
        Some(ns) => Api::namespaced_with(client, ns, &ar),
        None => Api::all_with(client, &ar),
    }
}

/// The kinds copies may have here.
fn copied_types() -> Vec<ApiResource> {
    vec![
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()),
    ]
}

/// Every object of the copied kinds: (kind, namespace, name) → (uid, resourceVersion, the
/// `managed-by` label, the owner annotation).
type Census = BTreeMap<(String, String, String), (String, String, Option<String>, Option<String>)>;

async fn census(env: &TestEnv) -> Census {
    let mut out = Census::new();
    for ar in copied_types() {
        let list = Api::<DynamicObject>::all_with(env.client().expect("client"), &ar)
            .list(&ListParams::default())
            .await
            .expect("list");
        for o in list.items {
            out.insert(
                (
                    ar.kind.clone(),
                    o.namespace().unwrap_or_default(),
                    o.name_any(),
                ),
                (
                    o.uid().unwrap_or_default(),
                    o.resource_version().unwrap_or_default(),
                    o.labels().get("kubesync.io/managed-by").cloned(),
                    o.annotations().get("kubesync.io/owner").cloned(),
                ),
            );
        }
    }
    out
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Scenario 7: waves of seeded random declarations (see the module's documentation).
#[tokio::test]
async fn a_seeded_campaign_of_hostile_declarations_wedges_nothing() {
    let first: u64 = std::env::var("KUBESYNC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(CI_SEED);
    let seeds: u64 = std::env::var("KUBESYNC_CAMPAIGN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    println!(
        "campaign: seeds {first}..{} (replay one: make chaos SEED=<seed>)",
        first + seeds - 1
    );
    let env = operator_cluster("campaign", false, &NAMESPACES).await;
    for ns in ["team-0", "team-1"] {
        env.apply_yaml(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{team: \"true\"}}}}\n"
        ))
        .await
        .expect("label");
    }
    // Sources, in the trusted and the tenant namespace.
    for ns in ["apps", "tenant"] {
        env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}, labels: {{app: cfg}}}}\ndata: {{a: \"1\"}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: other, namespace: {ns}, labels: {{app: web}}}}\ndata: {{b: \"2\"}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: registry, namespace: {ns}, labels: {{app: cfg}}}}\nstringData: {{token: t}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: reader, namespace: {ns}}}\nrules: [{{apiGroups: [\"\"], resources: [configmaps], verbs: [get]}}]\n")).await.expect("sources");
    }
    // Foreign objects where declarations aim: never kubesync's to change.
    for ns in NAMESPACES {
        for name in ["foreign", "copy", "copy-settings", "settings-copy"] {
            env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{mine: \"yes\"}}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: {name}, namespace: {ns}}}\nstringData: {{mine: \"yes\"}}\n")).await.expect("foreign");
        }
        if !matches!(ns, "apps" | "tenant") {
            env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: settings, namespace: {ns}}}\ndata: {{mine: \"yes\"}}\n")).await.expect("foreign");
        }
    }
    // The victim admits the tenant's ConfigMaps, nothing else.
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: tenant-configmaps, namespace: victim}\nspec:\n  from: [{namespace: tenant}]\n  kinds: [{kind: ConfigMap}]\n").await.expect("grant");
    let foreign: Census = census(&env)
        .await
        .into_iter()
        .filter(|(_, (_, _, managed, _))| managed.is_none())
        .collect();
    // The tenant's ObjectSyncs act as its copier, which RBAC lets write ConfigMaps and
    // Secrets everywhere here: where its copies go is kubesync's consent alone (the second
    // wall, which this campaign checks).
    let_copier_write(&env, "tenant", &NAMESPACES).await;
    let running = start_operator(
        kubesync::Cluster::new("local", env.client().expect("client")),
        kubesync_cli::operator::OperatorOptions {
            policy: kubesync_cli::policy::ObjectSyncPolicy {
                trusted_namespaces: vec!["apps".into()],
                default_service_account: Some(COPIER.into()),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: healthy, namespace: apps}\ndata: {tick: \"0\"}\n").await.expect("healthy source");
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {name: healthy, namespace: apps}\nspec:\n  source: {kind: ConfigMap, name: healthy}\n  destinations: [{namespaceSelector: {matchLabels: {team: \"true\"}}}]\n").await.expect("healthy");
    let rss_before = rss_mib();
    let started = Instant::now();
    let (mut applied, mut at_admission, mut by_reason) = (0, 0, BTreeMap::<String, u32>::new());
    let (mut tenant_copies, mut copies_made) = (0usize, 0usize);
    for seed in first..first + seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut wave: Vec<Declaration> =
            (0..WAVE).map(|i| declaration(&mut rng, seed, i)).collect();
        wave.push(positive_control(seed));
        let mut live = Vec::new();
        for d in wave {
            match env.apply_yaml(&d.yaml).await {
                Ok(_) => live.push(d),
                // The schema refused it (CEL rules, bounds): it never reaches kubesync.
                Err(_) => at_admission += 1,
            }
        }
        applied += live.len();
        // Every declaration gets its Ready condition, said for people.
        let mut uids = BTreeMap::new();
        for d in &live {
            let api = api(&env, d.kind, d.namespace);
            let (uid, reason, message) = eventually("a Ready condition", T, || async {
                let o = api.get_opt(&d.name).await.ok()??;
                let c = o.data["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Ready")?
                    .clone();
                let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                // A first "Starting" is not yet a verdict.
                (text("reason") != "Starting")
                    .then(|| (o.uid().unwrap_or_default(), text("reason"), text("message")))
            })
            .await;
            assert!(
                for_people(&message),
                "seed {seed}, {}: {message}\n{}",
                d.name,
                d.yaml
            );
            assert_ne!(
                reason, "WatchFailed",
                "seed {seed}, {}: {message}\n{}",
                d.name, d.yaml
            );
            if std::env::var_os("KUBESYNC_CAMPAIGN_VERBOSE").is_some() {
                println!("  seed {seed} {} {reason}: {message}", d.name);
            }
            *by_reason.entry(reason).or_default() += 1;
            uids.insert(uid, d);
        }
        // The tenant's copies are only where consent exists. The wave's positive control made
        // some (in its own namespace and in `victim`) for this check to judge.
        for ns in ["tenant", "victim"] {
            let copies = Api::<ConfigMap>::namespaced(env.client().expect("client"), ns);
            eventually(
                &format!("the positive control's copy in {ns}"),
                T,
                || async { copies.get_opt("control-copy").await.ok()?.map(|_| ()) },
            )
            .await;
        }
        let before_delete = census(&env).await;
        for ((kind, ns, name), (_, _, managed, owner)) in &before_delete {
            let Some(owner) = owner.as_ref().filter(|_| managed.is_some()) else {
                continue;
            };
            if owner.starts_with("local/tenant/") {
                tenant_copies += 1;
                assert!(
                    ns == "tenant" || (ns == "victim" && kind == "ConfigMap"),
                    "seed {seed}: the tenant's {owner} wrote {kind} {ns}/{name} without consent"
                );
            }
        }
        // The healthy neighbour follows a change.
        let tick = seed.to_string();
        env.apply_yaml(&format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: healthy, namespace: apps}}\ndata: {{tick: \"{tick}\"}}\n")).await.expect("tick");
        eventually("the healthy copies follow", T, || async {
            for ns in ["team-0", "team-1"] {
                let cm = Api::<ConfigMap>::namespaced(env.client().ok()?, ns)
                    .get_opt("healthy")
                    .await
                    .ok()??;
                (cm.data?.get("tick") == Some(&tick)).then_some(())?;
            }
            Some(())
        })
        .await;
        // Deleted, they go, with every mark they left.
        copies_made += before_delete
            .values()
            .filter(|(_, _, managed, _)| managed.as_ref().is_some_and(|m| uids.contains_key(m)))
            .count();
        for d in &live {
            api(&env, d.kind, d.namespace)
                .delete(&d.name, &DeleteParams::default())
                .await
                .expect("delete");
        }
        for d in &live {
            let api = api(&env, d.kind, d.namespace);
            eventually("the declaration is gone", T, || async {
                api.get_opt(&d.name).await.ok()?.is_none().then_some(())
            })
            .await;
        }
        let left: Vec<_> = census(&env)
            .await
            .into_iter()
            .filter(|(_, (_, _, managed, _))| {
                managed.as_ref().is_some_and(|m| uids.contains_key(m))
            })
            .collect();
        assert!(
            left.is_empty(),
            "seed {seed}: marked copies left behind: {left:?}"
        );
        // Foreign objects are untouched.
        let now = census(&env).await;
        for (key, (uid, rv, _, _)) in &foreign {
            let got = now.get(key).map(|(u, r, _, _)| (u, r));
            assert_eq!(got, Some((uid, rv)), "seed {seed}: foreign {key:?} changed");
        }
    }
    running.assert_no_panic();
    let grown = rss_mib() - rss_before;
    println!(
        "campaign: {seeds} seeds, {applied} declarations applied ({at_admission} refused at admission), {:.0} s; Ready reasons {by_reason:?}; {tenant_copies} tenant copies checked for consent, {copies_made} copies checked for leftovers; test process RSS +{grown:.0} MiB",
        started.elapsed().as_secs_f64()
    );
    // Positive controls: the consent and leftover checks above had copies to judge (a
    // campaign whose declarations made no copy would pass both without proving anything).
    assert!(
        tenant_copies > 0,
        "no tenant copy was ever made: the consent check judged nothing"
    );
    assert!(
        copies_made > 0,
        "no copy was ever made: the leftover check judged nothing"
    );
    assert!(grown < 256.0, "memory grew by {grown:.0} MiB");
    running.stop().await;
}
