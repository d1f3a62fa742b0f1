//! Whether the identity a declaration acts as may read its source, asked of the apiserver as
//! that identity (a SelfSubjectAccessReview). The only IO of the policy.

use kubesync::syncers::fan_out::SourceRef;

use super::source_readable;
use crate::status::Refusal;

/// Whether `who`, the identity a declaration acts as, may read its local `source`: `get`
/// the one object, or `list` the kind in the namespace for a selection, asked as `who` (a
/// SelfSubjectAccessReview made as it). kubesync's shared watches hold the source; this
/// is what makes a tenant never copy what her ServiceAccount could not read.
///
/// A source pulled from a hub is asked there (`cluster` is the hub's), as the identity the
/// hub's RemoteCluster maps `who` to (its `identityNamespace`): the hub's RBAC decides what
/// a tenant pulls, as this cluster's decides what she copies here — also where the "hub" is
/// this very cluster under another name.
pub async fn may_read_source(
    cluster: &kubesync::Cluster,
    who: &kubesync::ActAs,
    source: &SourceRef,
) -> Result<(), Refusal> {
    let ar = &source.resource;
    let (verb, name) = match &source.select {
        None => ("get", Some(source.name.as_str())),
        Some(_) => ("list", None),
    };
    let ns = source.namespace();
    let answer = cluster
        .acting_as(who)
        .may_on(verb, &ar.group, &ar.plural, ns, name)
        .await;
    source_readable(who, (verb, ar, ns, name), answer)
}
