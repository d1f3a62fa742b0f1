//! Who may make an ObjectSync act as a ServiceAccount, on real control planes with real users
//! and RBAC: only a declarer who may use it in Kubernetes already (`impersonate` it, or create
//! its token), checked by the admission policy of `config/admission` for the ServiceAccount a
//! spec names and for the operator's default; kubesync acts on a named ServiceAccount only
//! while that policy is installed, and never as a ServiceAccount that does not exist.

mod common;

use common::*;
use kubesync_testenv::eventually;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams};
use kubesync::Cluster;
use kubesync_cli::crd::ObjectSync;
use kubesync_cli::operator::OperatorOptions;
use kubesync_cli::policy::ObjectSyncPolicy;
use kubesync_testenv::TestEnv;

/// The operator as installed with `--default-service-account copier`, trusting only its own
/// namespace.
fn start(env: &TestEnv) -> RunningOperator {
    start_with(env, vec![])
}

/// The same, honouring the annotations of `compat`.
fn start_with(env: &TestEnv, compat: Vec<kubesync_cli::compat::Tool>) -> RunningOperator {
    start_operator(
        Cluster::new("local", env.client().expect("client")),
        OperatorOptions {
            policy: ObjectSyncPolicy {
                trusted_namespaces: vec!["kubesync-system".into()],
                default_service_account: Some(COPIER.into()),
                ..Default::default()
            },
            compat,
            ..Default::default()
        },
    )
}

/// An ObjectSync in `t1` copying the `kind` `source` to `t1/<copy>`, acting as `sa` (`None`:
/// the operator's default).
fn object_sync(name: &str, sa: Option<&str>, kind: &str, source: &str, copy: &str) -> String {
    let sa = sa
        .map(|sa| format!("  serviceAccountName: {sa}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: t1}}\nspec:\n{sa}  source: {{kind: {kind}, name: {source}}}\n  destinations: [{{namespace: t1, name: {copy}}}]\n"
    )
}

/// The apiserver's answer to `user` applying `yaml`: `Ok` or its message.
async fn apply_as(env: &TestEnv, user: &str, yaml: &str) -> Result<(), String> {
    env.apply_yaml_as(user, yaml)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Lets `tina` use the ServiceAccount `copier` of `t1` as Kubernetes asks for it: `impersonate`
/// on that name.
async fn let_tina_use_copier(env: &TestEnv) {
    let use_it = rule(&[""], &["serviceaccounts"], &["impersonate"], &[COPIER]);
    env.grant("tina", Some("t1"), "use-copier", vec![use_it])
        .await
        .expect("grant");
}

/// The apiserver's first refusal of `user` applying `yaml` (the `K` named `name` in `t1`): an
/// admission policy takes effect once the apiserver has read it, so each write admitted before
/// that is undone and tried again.
async fn first_refusal<K>(env: &TestEnv, user: &str, yaml: &str, name: &str) -> String
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    eventually(&format!("the policy refuses {user} {name}"), T, || async {
        match apply_as(env, user, yaml).await {
            Err(message) => Some(message),
            Ok(()) => {
                let api: Api<K> = Api::namespaced(env.client().ok()?, "t1");
                let _ = api.delete(name, &DeleteParams::default()).await;
                None
            }
        }
    })
    .await
}

/// The tenant `tina` may manage ConfigMaps and ObjectSyncs in `t1`, not read its Secrets.
/// `t1` holds the Secret `db`, the ConfigMap `settings`, the ServiceAccount `ci` (which may
/// read and write Secrets and ConfigMaps there) and `copier` (ConfigMaps and Secrets, the
/// operator's default). Attack: as `ci`, or as the default, she copies `db` into a ConfigMap-free
/// name she can then read through another copy, or any object `ci` may write. The admission
/// policy refuses both ObjectSyncs, with words that say which right she lacks; granted the
/// right to use each ServiceAccount (impersonate on `copier`, create on `ci`'s token), she
/// declares and kubesync copies as it.
#[tokio::test]
async fn only_a_declarer_who_may_use_a_service_account_makes_an_objectsync_act_as_it() {
    let env = operator_cluster_from(
        TestEnv::builder().name("sa-use").user("tina", &[]),
        &["kubesync-system", "t1"],
    )
    .await;
    install_service_account_policy(&env, COPIER).await;
    env.grant(
        "tina",
        Some("t1"),
        "tenant",
        vec![
            rule(&[""], &["configmaps"], &["*"], &[]),
            rule(&["kubesync.io"], &["objectsyncs"], &["*"], &[]),
        ],
    )
    .await
    .expect("grant");
    let everything = ["get", "list", "watch", "create", "update", "patch"];
    env.grant(
        "system:serviceaccount:t1:ci",
        Some("t1"),
        "ci",
        vec![rule(&[""], &["configmaps", "secrets"], &everything, &[])],
    )
    .await
    .expect("grant ci");
    let_copier_write(&env, "t1", &["t1"]).await;
    env.apply_yaml("apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: t1}\nstringData: {password: hunter2}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await.expect("sources");

    // The policy takes effect once the apiserver has read it: until her first refusal.
    let steal = object_sync("steal", Some("ci"), "Secret", "db", "db-copy");
    let refused = first_refusal::<ObjectSync>(&env, "tina", &steal, "steal").await;
    assert!(
        refused.contains("tina may not use ServiceAccount t1/ci")
            && refused.contains("impersonate")
            && refused.contains("serviceaccounts/token"),
        "in words she can act on: {refused}"
    );
    // The default is a ServiceAccount too: she may not use it either.
    let by_default = object_sync("by-default", None, "ConfigMap", "settings", "by-default");
    let refused = apply_as(&env, "tina", &by_default)
        .await
        .expect_err("the default needs the same right");
    assert!(
        refused.contains("tina may not use ServiceAccount t1/copier")
            && refused.contains("the operator's default"),
        "{refused}"
    );
    let running = start(&env);

    // The positive controls: the rights Kubernetes already asks for using a ServiceAccount.
    let_tina_use_copier(&env).await;
    env.grant(
        "tina",
        Some("t1"),
        "use-ci",
        vec![rule(
            &[""],
            &["serviceaccounts/token"],
            &["create"],
            &["ci"],
        )],
    )
    .await
    .expect("grant");
    let named = object_sync("named", Some("ci"), "ConfigMap", "settings", "named");
    for yaml in [&by_default, &named] {
        eventually("her ObjectSync admitted", T, || async {
            apply_as(&env, "tina", yaml).await.ok()
        })
        .await;
    }
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "t1");
    for copy in ["by-default", "named"] {
        eventually(&format!("{copy} copied"), T, || async {
            cms.get_opt(copy).await.ok()?
        })
        .await;
    }
    // Allowed to use `ci` by its token, she may also change the spec to copy what `ci` may
    // read: RBAC decides as before (here it may). What she may not is name another.
    let other = object_sync("named", Some("reader"), "ConfigMap", "settings", "named");
    let refused = apply_as(&env, "tina", &other)
        .await
        .expect_err("a spec changed to another ServiceAccount is checked again");
    assert!(refused.contains("ServiceAccount t1/reader"), "{refused}");
    let secrets: Api<Secret> = Api::namespaced(env.client().expect("client"), "t1");
    assert!(secrets.get_opt("db-copy").await.expect("get").is_none());
    running.assert_no_panic();
    running.stop().await;
}

/// kubesync acts on an ObjectSync that names a ServiceAccount only while the admission policy
/// checks its declarer: without the policy, `ServiceAccountUseUnchecked` (nothing copied),
/// while one that names none still acts as the operator's default; once the policy and its
/// binding are installed, the same ObjectSync copies. A ServiceAccount that does not exist (a
/// RoleBinding naming it is all there is) is never acted as: `ServiceAccountNotFound`, and the
/// refused ObjectSync's deletion is not held up.
#[tokio::test]
async fn a_named_service_account_needs_the_policy_and_one_that_does_not_exist_is_refused() {
    let env = TestEnv::builder()
        .name("sa-unchecked")
        .start()
        .await
        .expect("start");
    env.install_crds(&kubesync_cli::crd::crds_yaml().expect("crds"))
        .await
        .expect("crds");
    for ns in ["kubesync-system", "t1"] {
        env.create_namespace(ns).await.expect("ns");
    }
    let write = ["get", "list", "watch", "create", "update", "patch"];
    env.grant(
        "system:serviceaccount:t1:ci",
        Some("t1"),
        "ci",
        vec![rule(&[""], &["configmaps"], &write, &[])],
    )
    .await
    .expect("grant ci");
    let_copier_write(&env, "t1", &["t1"]).await;
    // `ghost` has rights (its RoleBinding) but no ServiceAccount: impersonating its user name
    // would work all the same.
    env.apply_yaml("apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: ghost, namespace: t1}\nrules: [{apiGroups: [\"\"], resources: [configmaps], verbs: [get, list, watch, create, update, patch]}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: ghost, namespace: t1}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: ghost}\nsubjects: [{kind: ServiceAccount, name: ghost, namespace: t1}]\n").await.expect("ghost's rights");
    env.apply_yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: t1}\ndata: {a: \"1\"}\n").await.expect("source");
    for yaml in [
        object_sync("named", Some("ci"), "ConfigMap", "settings", "named"),
        object_sync("by-default", None, "ConfigMap", "settings", "by-default"),
        object_sync("ghost", Some("ghost"), "ConfigMap", "settings", "ghost"),
    ] {
        env.apply_yaml(&yaml).await.expect("objectsync");
    }
    let running = start(&env);
    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let (status, reason, message) = verdict(&syncs, "named").await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "ServiceAccountUseUnchecked"),
        "{message}"
    );
    assert!(
        message.contains("ServiceAccount t1/ci")
            && message.contains("kubesync-service-account-use does not exist")
            && message.contains("config/admission"),
        "{message}"
    );
    assert!(for_people(&message), "{message}");
    let cms: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "t1");
    // The default, as the admin configured it, stays usable.
    eventually("by-default copied", T, || async {
        cms.get_opt("by-default").await.ok()?
    })
    .await;
    assert!(cms.get_opt("named").await.expect("get").is_none());

    // Installed: the same ObjectSync is acted on (after its refusal's requeue).
    install_service_account_policy(&env, COPIER).await;
    eventually("named copied once the policy is installed", T, || async {
        cms.get_opt("named").await.ok()?
    })
    .await;

    let syncs: Api<ObjectSync> = Api::namespaced(env.client().expect("client"), "t1");
    let message = eventually(
        "ghost refused: its ServiceAccount does not exist",
        T,
        || async {
            let os = syncs.get_opt("ghost").await.ok()??;
            let c = os
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (c.status == "False" && c.reason == "ServiceAccountNotFound").then_some(c.message)
        },
    )
    .await;
    assert!(
        message.contains("ServiceAccount t1/ghost") && message.contains("does not exist"),
        "{message}"
    );
    assert!(cms.get_opt("ghost").await.expect("get").is_none());
    // Bad input never holds its deletion up.
    syncs
        .delete("ghost", &DeleteParams::default())
        .await
        .expect("delete");
    eventually("the refused ObjectSync gone", T, || async {
        syncs.get_opt("ghost").await.ok()?.is_none().then_some(())
    })
    .await;
    running.assert_no_panic();
    running.stop().await;
}

/// Under `--compat`, a copier's annotations outside the trusted namespaces act as the
/// operator's default ServiceAccount, so writing one that declares copies is using it. The
/// admission policy of `config/compat` refuses `tina` (who may manage ConfigMaps in `t1`, not
/// use `copier`) a ConfigMap declaring a push with replicator's annotation, and an update that
/// adds one, in words that say which right she lacks; her other writes pass — an object
/// without such an annotation, the data of one an admin annotated. Granted `impersonate` on
/// `copier`, her declaration is admitted and kubesync pushes it as `copier` (consent in `t2`).
#[tokio::test]
async fn under_compat_only_a_declarer_who_may_use_the_default_declares_by_annotation() {
    let env = operator_cluster_from(
        TestEnv::builder().name("compat-use").user("tina", &[]),
        &["kubesync-system", "t1", "t2"],
    )
    .await;
    install_compat_policy(&env, COPIER).await;
    env.grant(
        "tina",
        Some("t1"),
        "tenant",
        vec![rule(&[""], &["configmaps"], &["*"], &[])],
    )
    .await
    .expect("grant");
    let_copier_write(&env, "t1", &["t1", "t2"]).await;
    env.apply_yaml("apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {name: from-t1, namespace: t2}\nspec:\n  from: [{namespace: t1}]\n").await.expect("consent");
    let cm = |name: &str, annotations: &str, data: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: t1\n  annotations: {{{annotations}}}\ndata: {{v: \"{data}\"}}\n"
        )
    };
    let push = "replicator.v1.mittwald.de/replicate-to: t2";
    let shared = cm("shared", push, "1");
    let refused = first_refusal::<ConfigMap>(&env, "tina", &shared, "shared").await;
    assert!(
        refused.contains("tina may not use ServiceAccount t1/copier")
            && refused.contains("impersonate")
            && refused.contains("remove the reflector.v1.k8s.emberstack.com/"),
        "in words she can act on: {refused}"
    );
    // Her other writes pass: no declaring annotation (bookkeeping-like ones included), then
    // adding one is refused; an admin's declaration's data she may change.
    let plain = cm(
        "plain",
        "note: mine, replicator.v1.mittwald.de/strip-labels: \"true\"",
        "1",
    );
    apply_as(&env, "tina", &plain)
        .await
        .expect("no declaring annotation");
    let adding = cm("plain", &format!("note: mine, {push}"), "1");
    let refused = apply_as(&env, "tina", &adding)
        .await
        .expect_err("adding a declaring annotation is using the default");
    assert!(refused.contains("t1/copier"), "{refused}");
    env.apply_yaml(&cm("admins", push, "1"))
        .await
        .expect("the admin's declaration");
    apply_as(&env, "tina", &cm("admins", push, "2"))
        .await
        .expect("the data beside an unchanged declaration");
    // The positive control: the right Kubernetes already asks for using a ServiceAccount.
    let_tina_use_copier(&env).await;
    eventually("her declaration admitted", T, || async {
        apply_as(&env, "tina", &shared).await.ok()
    })
    .await;
    let running = start_with(&env, vec![kubesync_cli::compat::Tool::Replicator]);
    let t2: Api<ConfigMap> = Api::namespaced(env.client().expect("client"), "t2");
    eventually("her push copied into t2", T, || async {
        t2.get_opt("shared").await.ok()?
    })
    .await;
    running.assert_no_panic();
    running.stop().await;
}
