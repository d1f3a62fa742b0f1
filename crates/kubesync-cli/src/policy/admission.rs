//! Who may make a declaration act as a ServiceAccount: its declarer, where she may use it.
//!
//! kubesync sees an ObjectSync, never who wrote it, so it cannot itself ask whether the
//! declarer may use the ServiceAccount the spec names. The apiserver can, when the object is
//! written: the ValidatingAdmissionPolicy [`POLICY`] (`config/admission`, the chart's
//! `serviceAccountPolicy`) lets a user create an ObjectSync, or change its spec, acting as a
//! ServiceAccount only where she may `impersonate` that ServiceAccount or `create` its
//! `serviceaccounts/token` — the rights that already let her act as it in Kubernetes. (Whoever
//! may create Pods in a namespace may run them as any of its ServiceAccounts too; kubesync does
//! not widen that path.)
//!
//! What kubesync checks itself ([`judge`], pure; read by [`AdmissionCheck`]): that the policy
//! exists with `failurePolicy: Fail` and that a binding of it denies (`validationActions:
//! [Deny]`) in every namespace. Where it does not, an ObjectSync that names a ServiceAccount
//! is refused ([`Reason::ServiceAccountUseUnchecked`]); the operator's default ServiceAccount
//! stays usable as the admin configured it. And whichever ServiceAccount a declaration acts as
//! must exist ([`Reason::ServiceAccountNotFound`]): impersonating a user name never checks it.

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ListParams};
use parking_lot::Mutex;

use crate::status::{Reason, Refusal};

/// The name of the ValidatingAdmissionPolicy (and of the binding kubesync ships) that checks
/// a declarer may use the ServiceAccount her ObjectSync acts as.
pub const POLICY: &str = "kubesync-service-account-use";

/// How long one answer about the policy is used before it is read again.
const FRESH_FOR: Duration = Duration::from_secs(10);

/// Whether the admission policy is installed, read from the apiserver at most every
/// [`FRESH_FOR`] (a declaration's reconcile asks; the answer is shared).
pub struct AdmissionCheck {
    client: kube::Client,
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl AdmissionCheck {
    /// A check that reads the policy and its bindings through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            last: Mutex::new(None),
        }
    }

    /// `Ok` when the policy and a binding that denies everywhere are installed; else why not,
    /// in words for the admin.
    pub async fn installed(&self) -> Result<(), String> {
        if let Some((at, answer)) = &*self.last.lock()
            && at.elapsed() < FRESH_FOR
        {
            return answer.clone();
        }
        let answer = self.read().await;
        *self.last.lock() = Some((Instant::now(), answer.clone()));
        answer
    }

    async fn read(&self) -> Result<(), String> {
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(self.client.clone());
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(self.client.clone());
        let unreadable = |what: &str, e: kube::Error| {
            format!(
                "the {what} could not be read ({}); the operator needs get and list on validatingadmissionpolicies and validatingadmissionpolicybindings (group admissionregistration.k8s.io)",
                kubesync::error::describe_kube(&e)
            )
        };
        let policy = policies
            .get_opt(POLICY)
            .await
            .map_err(|e| unreadable("ValidatingAdmissionPolicy", e))?;
        let bindings = bindings
            .list(&ListParams::default())
            .await
            .map_err(|e| unreadable("ValidatingAdmissionPolicyBindings", e))?;
        judge(policy.as_ref(), &bindings.items)
    }
}

/// Whether `policy` (the one named [`POLICY`], if it exists) and one of `bindings` check every
/// ObjectSync's declarer (pure): the policy fails closed, and a binding of it denies in every
/// namespace (no namespace or object selector, nothing excluded).
pub fn judge(
    policy: Option<&ValidatingAdmissionPolicy>,
    bindings: &[ValidatingAdmissionPolicyBinding],
) -> Result<(), String> {
    let Some(policy) = policy else {
        return Err(format!(
            "the ValidatingAdmissionPolicy {POLICY} does not exist"
        ));
    };
    let fails_closed = policy
        .spec
        .as_ref()
        .and_then(|s| s.failure_policy.as_deref())
        .is_none_or(|f| f == "Fail");
    if !fails_closed {
        return Err(format!(
            "the ValidatingAdmissionPolicy {POLICY} has failurePolicy Ignore: a check that cannot be made would let any declaration through"
        ));
    }
    let ours: Vec<_> = bindings
        .iter()
        .map(|b| &b.spec)
        .filter(|s| s.policy_name == POLICY)
        .collect();
    if ours.is_empty() {
        return Err(format!(
            "no ValidatingAdmissionPolicyBinding binds the policy {POLICY}, so it checks nothing"
        ));
    }
    let everywhere =
        |s: &&k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBindingSpec| {
            let denies = s.validation_actions.iter().any(|a| a == "Deny");
            let unrestricted = s.match_resources.as_ref().is_none_or(|m| {
                let selects = |sel: &Option<
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
                >| {
                    sel.as_ref().is_some_and(|l| {
                        l.match_labels.as_ref().is_some_and(|m| !m.is_empty())
                            || l.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
                    })
                };
                !selects(&m.namespace_selector)
                    && !selects(&m.object_selector)
                    && m.exclude_resource_rules
                        .as_ref()
                        .is_none_or(|rules| rules.is_empty())
            });
            denies && unrestricted && s.param_ref.is_none()
        };
    if ours.iter().any(everywhere) {
        Ok(())
    } else {
        Err(format!(
            "no binding of the policy {POLICY} denies in every namespace (validationActions must include Deny, with no namespace or object selector and nothing excluded), so kubesync cannot tell which declarations it checked"
        ))
    }
}

/// Whether a declaration in `namespace` may act as `who`: where its spec `names` the
/// ServiceAccount, only with the admission policy installed (`installed`, the answer of
/// [`AdmissionCheck::installed`]); and the ServiceAccount exists (`exists`: the operator's read
/// of it). Pure.
pub fn may_act_as(
    who: &kubesync::ActAs,
    names: bool,
    installed: Result<(), String>,
    exists: Result<bool, String>,
) -> Result<(), Refusal> {
    if names && let Err(why) = installed {
        return Err(Refusal::new(
            Reason::ServiceAccountUseUnchecked,
            format!(
                "spec.serviceAccountName names {who}, but nothing checks that whoever writes this ObjectSync may use it: {why}. An ObjectSync acts as a ServiceAccount only where the admission policy {POLICY} lets only those who may impersonate it (or create its token) name it; the operator's admin installs it (the chart's serviceAccountPolicy, or config/admission). Until then, remove spec.serviceAccountName to act as the operator's default ServiceAccount, if it sets one"
            ),
        ));
    }
    match exists {
        Ok(true) => Ok(()),
        Ok(false) => Err(Refusal::new(
            Reason::ServiceAccountNotFound,
            format!(
                "{who}, which this ObjectSync acts as, does not exist: kubesync acts only as an existing ServiceAccount of the ObjectSync's namespace; create it (with the rights its copies need) or name another in spec.serviceAccountName"
            ),
        )),
        Err(e) => Err(Refusal::new(
            Reason::ServiceAccountNotFound,
            format!(
                "whether {who}, which this ObjectSync acts as, exists could not be read: {e} (the operator needs get on serviceaccounts)"
            ),
        )),
    }
}

/// Whether the ServiceAccount `who` names exists, read with the operator's own rights.
pub async fn service_account_exists(
    local: &kubesync::Cluster,
    who: &kubesync::ActAs,
) -> Result<bool, String> {
    let Some((namespace, name)) = who.service_account_of() else {
        return Ok(true);
    };
    Api::<ServiceAccount>::namespaced(local.client().clone(), namespace)
        .get_metadata_opt(name)
        .await
        .map(|sa| sa.is_some())
        .map_err(|e| kubesync::error::describe_kube(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(failure: &str) -> ValidatingAdmissionPolicy {
        serde_json::from_value(json!({
            "metadata": {"name": POLICY},
            "spec": {"failurePolicy": failure}
        }))
        .expect("policy")
    }

    fn binding(spec: serde_json::Value) -> ValidatingAdmissionPolicyBinding {
        serde_json::from_value(json!({"metadata": {"name": "b"}, "spec": spec})).expect("binding")
    }

    #[test]
    fn the_policy_counts_only_when_it_fails_closed_and_a_binding_denies_everywhere() {
        let deny = binding(json!({"policyName": POLICY, "validationActions": ["Deny"]}));
        assert_eq!(
            judge(Some(&policy("Fail")), std::slice::from_ref(&deny)),
            Ok(())
        );
        let missing = judge(None, std::slice::from_ref(&deny)).expect_err("no policy");
        assert!(missing.contains("does not exist"), "{missing}");
        let ignore =
            judge(Some(&policy("Ignore")), std::slice::from_ref(&deny)).expect_err("ignore");
        assert!(ignore.contains("failurePolicy Ignore"), "{ignore}");
        let unbound = judge(Some(&policy("Fail")), &[]).expect_err("no binding");
        assert!(
            unbound.contains("no ValidatingAdmissionPolicyBinding"),
            "{unbound}"
        );
        let other = binding(json!({"policyName": "other", "validationActions": ["Deny"]}));
        assert!(
            judge(Some(&policy("Fail")), &[other]).is_err(),
            "another policy's binding"
        );
        for narrowed in [
            json!({"policyName": POLICY, "validationActions": ["Warn", "Audit"]}),
            json!({"policyName": POLICY, "validationActions": ["Deny"],
                   "matchResources": {"namespaceSelector": {"matchLabels": {"team": "a"}}}}),
            json!({"policyName": POLICY, "validationActions": ["Deny"],
                   "matchResources": {"objectSelector": {"matchExpressions": [
                       {"key": "x", "operator": "DoesNotExist"}]}}}),
            json!({"policyName": POLICY, "validationActions": ["Deny"],
                   "matchResources": {"excludeResourceRules": [
                       {"apiGroups": ["kubesync.io"], "apiVersions": ["*"],
                        "operations": ["CREATE"], "resources": ["objectsyncs"]}]}}),
        ] {
            let why =
                judge(Some(&policy("Fail")), &[binding(narrowed.clone())]).expect_err("narrowed");
            assert!(why.contains("every namespace"), "{narrowed}: {why}");
        }
        // An empty selector selects everything; a second, narrowed binding beside a full one
        // takes nothing away.
        let empty = binding(json!({"policyName": POLICY, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {}}}));
        let warn = binding(json!({"policyName": POLICY, "validationActions": ["Warn"]}));
        assert_eq!(judge(Some(&policy("Fail")), &[warn, empty]), Ok(()));
    }

    #[test]
    fn a_named_service_account_needs_the_policy_and_every_one_must_exist() {
        let who = kubesync::ActAs::service_account("t1", "ci").expect("identity");
        let missing = || Err("the ValidatingAdmissionPolicy x does not exist".to_string());
        let refused = may_act_as(&who, true, missing(), Ok(true)).expect_err("unchecked");
        assert_eq!(refused.reason, Reason::ServiceAccountUseUnchecked);
        assert!(
            refused.message.contains("ServiceAccount t1/ci")
                && refused.message.contains("does not exist")
                && refused.message.contains(POLICY),
            "{}",
            refused.message
        );
        // The default, configured by the admin, needs no policy.
        assert_eq!(may_act_as(&who, false, missing(), Ok(true)), Ok(()));
        assert_eq!(may_act_as(&who, true, Ok(()), Ok(true)), Ok(()));
        for names in [true, false] {
            let gone = may_act_as(&who, names, Ok(()), Ok(false)).expect_err("gone");
            assert_eq!(gone.reason, Reason::ServiceAccountNotFound);
            assert!(gone.message.contains("does not exist"), "{}", gone.message);
        }
        let unread = may_act_as(&who, false, Ok(()), Err("forbidden".into())).expect_err("unread");
        assert_eq!(unread.reason, Reason::ServiceAccountNotFound);
        assert!(
            unread.message.contains("get on serviceaccounts"),
            "{}",
            unread.message
        );
    }
}
