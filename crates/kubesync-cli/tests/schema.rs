//! The CRDs' schemas refuse bad input at admission, before kubesync sees it: CEL rules
//! (`x-kubernetes-validations`) for what must come in pairs or alone, and `maxItems` /
//! `maxLength` for how much a declaration may make the operator hold. On a real apiserver, so
//! the rules are proven to compile and to be within its CEL cost budget.

mod common;

use common::operator_cluster;

/// An ObjectSync in `apps` with this `source` and `destinations` (YAML flow text).
fn object_sync(name: &str, source: &str, destinations: &str) -> String {
    format!(
        "apiVersion: kubesync.io/v1alpha1\nkind: ObjectSync\nmetadata: {{name: {name}, namespace: apps}}\nspec:\n  source: {source}\n  destinations: {destinations}\n"
    )
}

#[tokio::test]
async fn the_apiserver_refuses_what_the_schema_rules_out() {
    let env = operator_cluster("schema", false, &["apps"]).await;
    let refused = |yaml: String, why: &'static str| {
        let env = &env;
        async move {
            let err = env
                .apply_yaml(&yaml)
                .await
                .expect_err("the apiserver refuses it");
            let text = err.to_string();
            assert!(text.contains(why), "refused, saying {why:?}: {text}");
        }
    };

    // Accepted: one name; a selector and names; a name at the destination; one kind of patch.
    for (name, source, destinations) in [
        (
            "one",
            "{kind: ConfigMap, name: a}",
            "[{namespace: b, name: c}]",
        ),
        (
            "many",
            "{kind: ConfigMap, selector: {matchLabels: {app: cfg}}, names: [a, b]}",
            "[{namespace: b, namePrefix: p-}]",
        ),
        (
            "patched",
            "{kind: ConfigMap, name: a}",
            "[{namespace: b, patches: [{merge: {data: {k: v}}}, {json: [{op: add, path: /data/x, value: y}]}]}]",
        ),
    ] {
        env.apply_yaml(&object_sync(name, source, destinations))
            .await
            .unwrap_or_else(|e| panic!("{name} is valid: {e}"));
    }

    // A source with a name and a selection, or with neither.
    let either = "give one object's name, or a selector and/or names";
    refused(
        object_sync(
            "both",
            "{kind: ConfigMap, name: a, names: [b]}",
            "[{namespace: b}]",
        ),
        either,
    )
    .await;
    refused(
        object_sync("neither", "{kind: ConfigMap}", "[{namespace: b}]"),
        either,
    )
    .await;
    // A destination name with a prefix.
    refused(
        object_sync(
            "renamed",
            "{kind: ConfigMap, name: a}",
            "[{namespace: b, name: c, nameSuffix: -s}]",
        ),
        "give a name, or a namePrefix and/or nameSuffix, not both",
    )
    .await;
    // A patch with both kinds, or neither.
    let one_patch = "a patch gives exactly one of merge and json";
    refused(
        object_sync(
            "two-patches",
            "{kind: ConfigMap, name: a}",
            "[{namespace: b, patches: [{merge: {}, json: []}]}]",
        ),
        one_patch,
    )
    .await;
    refused(
        object_sync(
            "no-patch",
            "{kind: ConfigMap, name: a}",
            "[{namespace: b, patches: [{}]}]",
        ),
        one_patch,
    )
    .await;

    // Bounds: 101 destinations, 1001 names, a 254-character name.
    let destinations: Vec<String> = (0..101).map(|i| format!("{{namespace: n{i}}}")).collect();
    refused(
        object_sync(
            "wide",
            "{kind: ConfigMap, name: a}",
            &format!("[{}]", destinations.join(", ")),
        ),
        "must have at most 100 items",
    )
    .await;
    let names: Vec<String> = (0..1001).map(|i| format!("n{i}")).collect();
    refused(
        object_sync(
            "long-list",
            &format!("{{kind: ConfigMap, names: [{}]}}", names.join(", ")),
            "[{namespace: b}]",
        ),
        "must have at most 1000 items",
    )
    .await;
    refused(
        object_sync(
            "long-name",
            &format!("{{kind: ConfigMap, name: {}}}", "a".repeat(254)),
            "[{namespace: b}]",
        ),
        "may not be more than 253 bytes",
    )
    .await;
    // Fields left to others: 51 pointers, a 513-character one, 21 managers, an empty name;
    // an update policy that is not one.
    let pointers: Vec<String> = (0..51).map(|i| format!("/data/k{i}")).collect();
    refused(
        object_sync(
            "many-pointers",
            "{kind: ConfigMap, name: a}",
            &format!(
                "[{{namespace: b, ignoreFields: [{}]}}]",
                pointers.join(", ")
            ),
        ),
        "must have at most 50 items",
    )
    .await;
    refused(
        object_sync(
            "long-pointer",
            "{kind: ConfigMap, name: a}",
            &format!(
                "[{{namespace: b, ignoreFields: [/data/{}]}}]",
                "k".repeat(508)
            ),
        ),
        "may not be more than 512 bytes",
    )
    .await;
    let managers: Vec<String> = (0..21).map(|i| format!("m{i}")).collect();
    refused(
        object_sync(
            "many-managers",
            "{kind: ConfigMap, name: a}",
            &format!(
                "[{{namespace: b, ignoreManagers: [{}]}}]",
                managers.join(", ")
            ),
        ),
        "must have at most 20 items",
    )
    .await;
    refused(
        object_sync(
            "empty-manager",
            "{kind: ConfigMap, name: a}",
            "[{namespace: b, ignoreManagers: ['']}]",
        ),
        "should be at least 1 chars long",
    )
    .await;
    refused(
        format!(
            "{}  updatePolicy: Sometimes\n",
            object_sync("policy", "{kind: ConfigMap, name: a}", "[{namespace: b}]")
        ),
        "Unsupported value: \"Sometimes\"",
    )
    .await;
    // A SyncGrant admitting from 101 namespaces.
    let from: Vec<String> = (0..101).map(|i| format!("{{namespace: n{i}}}")).collect();
    refused(
        format!(
            "apiVersion: kubesync.io/v1alpha1\nkind: SyncGrant\nmetadata: {{name: wide, namespace: apps}}\nspec:\n  from: [{}]\n",
            from.join(", ")
        ),
        "must have at most 100 items",
    )
    .await;
}
