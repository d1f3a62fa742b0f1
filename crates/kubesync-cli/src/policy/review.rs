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
/// A source pulled from a hub is not asked there: the hub is another cluster, whose
/// ServiceAccounts are not the tenant's, and spokes read it with read rights only (they
/// may not impersonate there). What a pull may read stays the RemoteCluster's admission
/// and the namespace of the ObjectSync's own name on the hub.
pub async fn may_read_source(
    local: &kubesync::Cluster,
    who: &kubesync::ActAs,
    source: &SourceRef,
) -> Result<(), Refusal> {
    if source.cluster.is_some() {
        return Ok(());
    }
    let cluster = local;
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
