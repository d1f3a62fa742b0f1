//! The executor against canned answers and a real apiserver.
use parking_lot::Mutex;
use std::collections::VecDeque;

use super::*;
use crate::syncers::fan_out::plan::PlannedCopy;
use crate::syncers::fan_out::rules::{CopyRules, MANAGED_BY, OnConflict, Owner};
use crate::syncers::fan_out::spec::{Declaration, FanOutSpec, SourceRef, UpdatePolicy};
use crate::{Cluster, Controller};

type Seen = Arc<Mutex<Vec<String>>>;

/// A client that answers each request with the next canned `(status, body)` and records
/// each request's method and path (the error paths below cannot be timed on a real
/// apiserver).
fn canned(answers: Vec<(u16, serde_json::Value)>) -> (kube::Client, Seen) {
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let next = answers.lock().pop_front();
        log.lock()
            .push(format!("{} {}", req.method(), req.uri().path()));
        async move {
            let (code, body) = next.expect("an answer for every request");
            http::Response::builder()
                .status(code)
                .body(kube::client::Body::from(
                    serde_json::to_vec(&body).expect("json"),
                ))
        }
    });
    (kube::Client::new(service, "default"), seen)
}

fn status(code: u16, reason: &str) -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("secrets \"copy\" {reason}"), "reason": reason, "code": code})
}

fn secret(labels: serde_json::Value, token: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "copy", "namespace": "ns", "uid": "u1", "resourceVersion": "5",
            "labels": labels, "annotations": {crate::syncers::fan_out::rules::OWNER: "local/ctl/d"}},
        "type": "Opaque", "data": {"token": token}})
}

fn declaration(ar: ApiResource) -> Declaration {
    Declaration {
        key: ObjectKey::new("local", &ar, Some("ctl".into()), "d"),
        owner: Owner {
            reference: "local/ctl/d".into(),
            uid: "decl-uid".into(),
            shard: None,
        },
        spec: FanOutSpec {
            source: SourceRef::one(ar, "src", "copy"),
            destinations: vec![],
            on_conflict: OnConflict::Skip,
            rules: CopyRules::default(),
            consent: None,
            deletion_policy: Default::default(),
            mode: Default::default(),
            update_policy: Default::default(),
            adoptable: None,
            acting_as: None,
            acting_as_in: Default::default(),
            take_over: Vec::new(),
        },
        deleting: false,
        refused: false,
        record: None,
    }
}

/// Settles a `Create` at `ns/copy` in `ctx`'s cluster `local`, the store having shown
/// nothing there.
async fn settle_create(fan: &Executor, ctx: &Context, ns: &str) -> DestinationStatus {
    settle_create_under(fan, ctx, ns, UpdatePolicy::Sync, false).await
}

/// [`settle_create`] under an update policy, its write confirmed live first or not.
async fn settle_create_under(
    fan: &Executor,
    ctx: &Context,
    ns: &str,
    policy: UpdatePolicy,
    confirm: bool,
) -> DestinationStatus {
    let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    let mut decl = declaration(ar);
    decl.spec.update_policy = policy;
    let mut desired: DynamicObject =
        serde_json::from_value(secret(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE="))
            .expect("desired");
    desired.metadata.namespace = Some(ns.into());
    desired.metadata.uid = None;
    desired.metadata.resource_version = None;
    let at = DestinationRef::new("local", ns, "copy");
    let write = Write {
        at,
        desired: PlannedCopy::new(desired.clone(), &mut Default::default()),
        existing: None,
        ignore: Default::default(),
        strategy: Strategy::Apply,
        decision: Decision::Create,
        source: "source".into(),
        source_resource_version: "7".into(),
        drift: None,
        changed: Vec::new(),
        adoption_refused: None,
        behind: None,
        printed: false,
    };
    fan.settle(
        ctx,
        &Job::of(&decl, Default::default()),
        (&write, &desired),
        confirm,
    )
    .await
    .0
}

/// A create whose name turns out to be taken reads the object and decides once more.
async fn create_finds(found: (u16, serde_json::Value)) -> (DestinationStatus, Vec<String>) {
    let (client, seen) = canned(vec![(409, status(409, "AlreadyExists")), found]);
    let ctx = Controller::new()
        .cluster(Cluster::new("local", client))
        .context();
    let st = settle_create(&Executor::new(), &ctx, "ns").await;
    let seen = seen.lock().clone();
    (st, seen)
}

/// The same on a real apiserver: the object at the destination (carrying `labels` and
/// `token`) exists before the create. Returns the outcome, whether the object is unchanged
/// (uid and resourceVersion), and the writes sent.
async fn create_finds_on_a_real_apiserver(
    labels: serde_json::Value,
    token: &str,
) -> (DestinationStatus, bool, u64) {
    use k8s_openapi::api::core::v1::Secret;
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let env = kubesync_testenv::TestEnv::shared("engine-unit", false).expect("env");
    let ns = format!(
        "taken-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    env.create_namespace(&ns).await.expect("ns");
    let api: kube::Api<Secret> = kube::Api::namespaced(env.client().expect("client"), &ns);
    let mut there: Secret = serde_json::from_value(secret(labels, token)).expect("secret");
    there.metadata.namespace = Some(ns.clone());
    there.metadata.uid = None;
    there.metadata.resource_version = None;
    let before = api
        .create(&Default::default(), &there)
        .await
        .expect("create");
    let local = Cluster::from_config("local", env.config().expect("config")).expect("client");
    let ctx = Controller::new().cluster(local).context();
    let fan = Executor::new();
    let st = settle_create(&fan, &ctx, &ns).await;
    let after = api.get("copy").await.expect("still there");
    let unchanged = after.metadata.uid == before.metadata.uid
        && after.metadata.resource_version == before.metadata.resource_version;
    (st, unchanged, fan.writer().writes())
}

#[tokio::test]
async fn on_a_real_apiserver_a_create_that_finds_its_own_copy_is_in_sync() {
    // Its own copy, already as it must be (the store had not shown it yet).
    let (st, unchanged, writes) =
        create_finds_on_a_real_apiserver(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE=").await;
    assert_eq!(st.state, DestinationState::Synced, "{}", st.message);
    assert!(unchanged, "the copy was written again");
    assert_eq!(writes, 1, "only the refused create");
}

#[tokio::test]
async fn on_a_real_apiserver_a_create_that_finds_someone_elses_object_leaves_it_alone() {
    let (st, unchanged, writes) =
        create_finds_on_a_real_apiserver(serde_json::json!({}), "dGhlaXJz").await;
    assert_eq!(st.state, DestinationState::Conflict, "{}", st.message);
    assert!(
        st.message.contains("not created by kubesync"),
        "{}",
        st.message
    );
    assert!(unchanged, "someone else's object was written");
    assert_eq!(writes, 1, "only the refused create");
}

const POST_THEN_GET: [&str; 2] = [
    "POST /api/v1/namespaces/ns/secrets",
    "GET /api/v1/namespaces/ns/secrets/copy",
];

#[tokio::test]
async fn a_create_that_finds_its_own_copy_is_in_sync() {
    // The store had not shown this declaration's copy yet: nothing more is written.
    let ours = secret(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE=");
    let (st, seen) = create_finds((200, ours)).await;
    assert_eq!(st.state, DestinationState::Synced, "{}", st.message);
    assert_eq!(st.source_resource_version, "7");
    assert_eq!(seen, POST_THEN_GET);
}

#[tokio::test]
async fn a_create_that_finds_someone_elses_object_leaves_it_alone() {
    let theirs = secret(serde_json::json!({}), "dGhlaXJz");
    let (st, seen) = create_finds((200, theirs)).await;
    assert_eq!(st.state, DestinationState::Conflict);
    assert!(
        st.message.contains("not created by kubesync"),
        "{}",
        st.message
    );
    assert_eq!(seen, POST_THEN_GET, "no write after the read");
}

/// A create (or a write confirmed live first) that finds this declaration's copy there with
/// other content does not update it past the update policy: CreateOnly never updates, the
/// version gate holds a copy of the current source version.
#[tokio::test]
async fn a_create_that_finds_its_copy_changed_keeps_to_the_update_policy() {
    let mut changed = secret(serde_json::json!({MANAGED_BY: "decl-uid"}), "bWluZQ==");
    changed["metadata"]["annotations"][rules::SOURCE_VERSION] = serde_json::json!("7");
    for (policy, confirm, requests) in [
        (UpdatePolicy::CreateOnly, false, POST_THEN_GET.to_vec()),
        (UpdatePolicy::OnSourceChange, false, POST_THEN_GET.to_vec()),
        (
            UpdatePolicy::CreateOnly,
            true,
            vec!["GET /api/v1/namespaces/ns/secrets/copy"],
        ),
    ] {
        let answers = match confirm {
            true => vec![(200, changed.clone())],
            false => vec![(409, status(409, "AlreadyExists")), (200, changed.clone())],
        };
        let (client, seen) = canned(answers);
        let ctx = Controller::new()
            .cluster(Cluster::new("local", client))
            .context();
        let st = settle_create_under(&Executor::new(), &ctx, "ns", policy, confirm).await;
        assert_eq!(
            st.state,
            DestinationState::Synced,
            "{policy:?}: {}",
            st.message
        );
        assert_eq!(
            *seen.lock(),
            requests,
            "{policy:?}: no write after the read"
        );
    }
}

/// An update decided on this declaration's copy as a metadata-only store held it (another
/// watch showed the new copy before the copies' watch did: no fields to compare) reads the
/// copy first, and writes only if the live copy asks for it.
#[tokio::test]
async fn an_update_decided_on_a_copy_seen_only_as_metadata_reads_it_first() {
    let ar = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    let decl = declaration(ar);
    let ours = secret(serde_json::json!({MANAGED_BY: "decl-uid"}), "djE=");
    let mut desired: DynamicObject = serde_json::from_value(ours.clone()).expect("desired");
    desired.metadata.uid = None;
    desired.metadata.resource_version = None;
    let mut metadata_only: DynamicObject = serde_json::from_value(ours.clone()).expect("meta");
    metadata_only.data = serde_json::Value::Null;
    let write = Write {
        at: DestinationRef::new("local", "ns", "copy"),
        desired: PlannedCopy::new(desired.clone(), &mut Default::default()),
        existing: Some(Arc::new(metadata_only)),
        ignore: Default::default(),
        strategy: Strategy::Apply,
        decision: Decision::Update,
        source: "source".into(),
        source_resource_version: "7".into(),
        drift: None,
        changed: Vec::new(),
        adoption_refused: None,
        behind: None,
        printed: false,
    };
    let (client, seen) = canned(vec![(200, ours)]);
    let ctx = Controller::new()
        .cluster(Cluster::new("local", client))
        .context();
    let (st, sent, _) = Executor::new()
        .settle(
            &ctx,
            &Job::of(&decl, Default::default()),
            (&write, &desired),
            false,
        )
        .await;
    assert_eq!(st.state, DestinationState::Synced, "{}", st.message);
    assert!(!sent, "nothing sent");
    assert_eq!(
        *seen.lock(),
        ["GET /api/v1/namespaces/ns/secrets/copy"],
        "a read, no write"
    );
}

#[tokio::test]
async fn a_create_whose_name_is_free_again_is_looked_at_again() {
    let (st, seen) = create_finds((404, status(404, "NotFound"))).await;
    assert_eq!(st.state, DestinationState::Error);
    assert!(st.message.contains("looked at again"), "{}", st.message);
    assert_eq!(seen, POST_THEN_GET);
}

/// Plans too large to be sent at once are carried out a few at a time: enough to fill the
/// slots, and one more; a plan of what one reconcile sends at once never waits for a place.
#[tokio::test]
async fn large_plans_are_carried_out_a_few_at_a_time() {
    let mut executor = Executor::new();
    executor.slots(32);
    executor.concurrency(16);
    let plan = |n: usize| Plan {
        deletes: (0..n)
            .map(|i| Delete {
                at: DestinationRef::new("local", format!("ns-{i}"), "copy"),
                uid: None,
                orphan: false,
            })
            .collect(),
        ..Default::default()
    };
    assert!(!executor.is_wave(&plan(16)) && executor.is_wave(&plan(17)));
    let places: Vec<_> = (0..3).map(|_| executor.try_wave()).collect();
    assert!(
        places.iter().all(Option::is_some),
        "two waves fill 32 slots, one more is planned"
    );
    assert!(executor.try_wave().is_none(), "a fourth waits");
    {
        let waiting = executor.wave();
        tokio::pin!(waiting);
        assert!(futures::poll!(&mut waiting).is_pending());
        drop(places);
        assert!(waiting.await.is_some(), "a place, once one is free");
    }
    executor.slots(8);
    let held: Vec<_> = (0..3).filter_map(|_| executor.try_wave()).collect();
    assert_eq!(
        held.len(),
        2,
        "8 slots: one wave fills them, one more is planned"
    );
}
