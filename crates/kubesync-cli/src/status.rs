//! Shared status helpers of the operator's controllers: the condition types and reasons
//! kubesync writes, refusals, conditions and their transition times.
//!
//! Two enums give every reason a condition carries: [`Reason`], why a resource is refused
//! (the reason of a [`Refusal`], always on `Ready=False`), and [`State`], how a resource
//! stands otherwise (progress, reachability, copies in sync, the version a cluster runs).
//!
//! Owns no controller logic, writes nothing and imports no controller.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::crd::Condition;

/// The type of a condition kubesync writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// Whether the resource is valid and working (every kind of kubesync's).
    Ready,
    /// Whether an ObjectSync's copies are all current.
    Synced,
    /// Whether an ObjectSync's source, read from a RemoteCluster, can be read.
    SourceReachable,
    /// Whether a RemoteCluster's apiserver version is within the supported range.
    VersionSupported,
}

impl ConditionType {
    /// Every condition type.
    pub const ALL: [ConditionType; 4] = [
        ConditionType::Ready,
        ConditionType::Synced,
        ConditionType::SourceReachable,
        ConditionType::VersionSupported,
    ];

    /// The PascalCase type as conditions carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Synced => "Synced",
            ConditionType::SourceReachable => "SourceReachable",
            ConditionType::VersionSupported => "VersionSupported",
        }
    }
}

impl std::fmt::Display for ConditionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ConditionType {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What kubesync reads of a [`Condition`] (k8s-openapi's type: its helpers are a trait).
pub trait ConditionExt {
    /// Whether it is of type `t`.
    fn is(&self, t: ConditionType) -> bool;
    /// Whether its status is `True`.
    fn is_true(&self) -> bool;
    /// Whether its status is `False` (not `Unknown`).
    fn is_false(&self) -> bool;
}

impl ConditionExt for Condition {
    fn is(&self, t: ConditionType) -> bool {
        self.type_ == t.as_str()
    }

    fn is_true(&self) -> bool {
        self.status == TRUE
    }

    fn is_false(&self) -> bool {
        self.status == FALSE
    }
}

/// The first condition of type `t`.
pub fn find(conditions: &[Condition], t: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.is(t))
}

/// Whether a condition of type `t` is `True`.
pub fn holds(conditions: &[Condition], t: ConditionType) -> bool {
    conditions.iter().any(|c| c.is(t) && c.is_true())
}

/// A condition's status when it holds.
const TRUE: &str = "True";
/// A condition's status when it does not.
const FALSE: &str = "False";

/// Why a declaration is refused: the `reason` of its `Ready=False` condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A field is invalid (the message names it).
    InvalidSpec,
    /// A destination's patch is invalid or changes what the copy is.
    InvalidPatch,
    /// The object is a copy kubesync made, never a declaration.
    CopyNotADeclaration,
    /// The kind is not served by the cluster.
    ResourceNotFound,
    /// The kind may not be synced (operator flags, tenancy allow-list, kubesync's own kinds).
    ResourceNotAllowed,
    /// The source namespace is not the declaration's own (nor one allowed by a flag).
    SourceNamespaceNotAllowed,
    /// A named destination namespace is not allowed by the operator's flags.
    DestinationNotAllowed,
    /// The named RemoteCluster does not exist.
    RemoteClusterNotFound,
    /// The RemoteCluster does not admit the declaration's namespace.
    RemoteClusterNotAllowed,
    /// The RemoteCluster's kubeconfig Secret cannot be read or lacks its key.
    KubeconfigSecretInvalid,
    /// The RemoteCluster's kubeconfig does not parse or connect.
    KubeconfigInvalid,
    /// A declaration's destinations name two RemoteClusters of one apiserver.
    DuplicateCluster,
    /// An untrusted ObjectSync names no ServiceAccount to act as, and the operator sets no
    /// default.
    ServiceAccountRequired,
    /// The ServiceAccount a declaration acts as may not read its source.
    SourceForbidden,
    /// The ServiceAccount a declaration would act as does not exist.
    ServiceAccountNotFound,
    /// A declaration that acts as a ServiceAccount names a RemoteCluster that maps no
    /// identity for it there (`spec.identityNamespace`).
    RemoteIdentityRequired,
    /// A declaration names a ServiceAccount, and nothing checks that its declarer may use it:
    /// the admission policy [`SERVICE_ACCOUNT_POLICY`](crate::policy::admission::POLICY) or
    /// its binding is not installed.
    ServiceAccountUseUnchecked,
    /// A ResourceSync's kind has no status subresource.
    NoStatusSubresource,
    /// A going ResourceSync's copies could not be released.
    FinalizersNotReleased,
    /// `spec.takeOver` names a declaration this one may not take copies from.
    TakeOverNotAllowed,
}

impl Reason {
    /// Every refusal reason.
    pub const ALL: [Reason; 20] = [
        Reason::InvalidSpec,
        Reason::InvalidPatch,
        Reason::CopyNotADeclaration,
        Reason::ResourceNotFound,
        Reason::ResourceNotAllowed,
        Reason::SourceNamespaceNotAllowed,
        Reason::DestinationNotAllowed,
        Reason::RemoteClusterNotFound,
        Reason::RemoteClusterNotAllowed,
        Reason::KubeconfigSecretInvalid,
        Reason::KubeconfigInvalid,
        Reason::DuplicateCluster,
        Reason::ServiceAccountRequired,
        Reason::SourceForbidden,
        Reason::ServiceAccountNotFound,
        Reason::RemoteIdentityRequired,
        Reason::ServiceAccountUseUnchecked,
        Reason::NoStatusSubresource,
        Reason::FinalizersNotReleased,
        Reason::TakeOverNotAllowed,
    ];

    /// The PascalCase reason as conditions carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::InvalidPatch => "InvalidPatch",
            Reason::CopyNotADeclaration => "CopyNotADeclaration",
            Reason::ResourceNotFound => "ResourceNotFound",
            Reason::ResourceNotAllowed => "ResourceNotAllowed",
            Reason::SourceNamespaceNotAllowed => "SourceNamespaceNotAllowed",
            Reason::DestinationNotAllowed => "DestinationNotAllowed",
            Reason::RemoteClusterNotFound => "RemoteClusterNotFound",
            Reason::RemoteClusterNotAllowed => "RemoteClusterNotAllowed",
            Reason::KubeconfigSecretInvalid => "KubeconfigSecretInvalid",
            Reason::KubeconfigInvalid => "KubeconfigInvalid",
            Reason::DuplicateCluster => "DuplicateCluster",
            Reason::ServiceAccountRequired => "ServiceAccountRequired",
            Reason::SourceForbidden => "SourceForbidden",
            Reason::ServiceAccountNotFound => "ServiceAccountNotFound",
            Reason::RemoteIdentityRequired => "RemoteIdentityRequired",
            Reason::ServiceAccountUseUnchecked => "ServiceAccountUseUnchecked",
            Reason::NoStatusSubresource => "NoStatusSubresource",
            Reason::FinalizersNotReleased => "FinalizersNotReleased",
            Reason::TakeOverNotAllowed => "TakeOverNotAllowed",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// How a resource stands: the reason of every condition but a refusal's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// `Ready=False`: waiting for the first list of the watched types or clusters.
    Starting,
    /// `Ready=False` (ObjectSync): a watch cannot list (the message names its cluster).
    WatchFailed,
    /// `Ready=True`: copying (ObjectSync) or syncing (ResourceSync).
    Syncing,
    /// `Ready=True` (ObjectSync, `mode: Report`): comparing, nothing written.
    Reporting,
    /// `Ready=False`, `Synced=False` (ObjectSync): the source does not exist.
    SourceNotFound,
    /// `Ready=False`, `Synced=False` (ObjectSync): the source's cluster cannot be read.
    SourceUnreachable,
    /// `Synced=True`: every copy is current.
    AllSynced,
    /// `Synced=False`: a destination refuses its copy.
    DestinationRefused,
    /// `Synced=False` (`mode: Report`): copies differ from what would be written.
    OutOfSync,
    /// `Synced=False`: some copies are not current.
    NotAllSynced,
    /// `SourceReachable=True`: the source is read from its RemoteCluster.
    Read,
    /// `SourceReachable=False`: the source's RemoteCluster cannot be read.
    SourceClusterUnreachable,
    /// `Ready=False` (ResourceSync): its sync does not run.
    NotRunning,
    /// `Ready=False` (ResourceSync): the remote cluster cannot be reached.
    RemoteUnreachable,
    /// `Ready=False` (ResourceSync): the local cluster cannot be reached.
    LocalUnreachable,
    /// `Ready=True` (RemoteCluster): its apiserver answered.
    Connected,
    /// `Ready=False` (RemoteCluster): its apiserver did not answer.
    Unreachable,
    /// `VersionSupported=True`: within the supported range.
    Supported,
    /// `VersionSupported=False`: older than the oldest supported release.
    OlderThanSupported,
    /// `VersionSupported=False`: newer than the newest tested release.
    NewerThanTested,
    /// `VersionSupported=False`: not a version kubesync can read.
    UnknownVersion,
}

impl State {
    /// Every state reason.
    pub const ALL: [State; 21] = [
        State::Starting,
        State::WatchFailed,
        State::Syncing,
        State::Reporting,
        State::SourceNotFound,
        State::SourceUnreachable,
        State::AllSynced,
        State::DestinationRefused,
        State::OutOfSync,
        State::NotAllSynced,
        State::Read,
        State::SourceClusterUnreachable,
        State::NotRunning,
        State::RemoteUnreachable,
        State::LocalUnreachable,
        State::Connected,
        State::Unreachable,
        State::Supported,
        State::OlderThanSupported,
        State::NewerThanTested,
        State::UnknownVersion,
    ];

    /// The PascalCase reason as conditions carry it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Starting => "Starting",
            State::WatchFailed => "WatchFailed",
            State::Syncing => "Syncing",
            State::Reporting => "Reporting",
            State::SourceNotFound => "SourceNotFound",
            State::SourceUnreachable => "SourceUnreachable",
            State::AllSynced => "AllSynced",
            State::DestinationRefused => "DestinationRefused",
            State::OutOfSync => "OutOfSync",
            State::NotAllSynced => "NotAllSynced",
            State::Read => "Read",
            State::SourceClusterUnreachable => "SourceClusterUnreachable",
            State::NotRunning => "NotRunning",
            State::RemoteUnreachable => "RemoteUnreachable",
            State::LocalUnreachable => "LocalUnreachable",
            State::Connected => "Connected",
            State::Unreachable => "Unreachable",
            State::Supported => "Supported",
            State::OlderThanSupported => "OlderThanSupported",
            State::NewerThanTested => "NewerThanTested",
            State::UnknownVersion => "UnknownVersion",
        }
    }
}

impl From<&kubesync::version::Support> for State {
    /// The `VersionSupported` reason of where a cluster's version stands.
    fn from(support: &kubesync::version::Support) -> Self {
        use kubesync::version::Support;
        match support {
            Support::Supported => State::Supported,
            Support::Older(_) => State::OlderThanSupported,
            Support::Newer(_) => State::NewerThanTested,
            Support::Unknown(_) => State::UnknownVersion,
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for State {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A reason and message for a `Ready=False` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Why.
    pub reason: Reason,
    /// What is wrong, for a person.
    pub message: String,
}

impl Refusal {
    /// A refusal with this reason and message.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// Now, rounded to the second (the precision of conditions' and destinations' times).
pub fn now() -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    now.round(jiff::Unit::Second).unwrap_or(now)
}

/// Longest message of a condition kubesync writes, in bytes (longer ones end in `...`).
pub const MAX_CONDITION_MESSAGE: usize = 1024;

/// A condition of type `type_`, `True` when `ok`, for the reason `reason`. Its transition
/// time is a placeholder (the epoch) until [`with_transition`] sets it; every status is
/// assembled through it. The message is cut to [`MAX_CONDITION_MESSAGE`] bytes.
pub fn condition(
    type_: ConditionType,
    ok: bool,
    reason: State,
    message: impl Into<String>,
) -> Condition {
    build(type_, ok, reason.as_str(), message.into())
}

/// A `Ready` condition.
pub fn ready(ok: bool, reason: State, message: impl Into<String>) -> Condition {
    condition(ConditionType::Ready, ok, reason, message)
}

/// A `Ready=False` condition saying why a resource was refused.
pub fn refused(refusal: &Refusal) -> Condition {
    build(
        ConditionType::Ready,
        false,
        refusal.reason.as_str(),
        refusal.message.clone(),
    )
}

/// The condition [`condition`] and [`refused`] make, of a reason one of the enums gave.
fn build(type_: ConditionType, ok: bool, reason: &'static str, message: String) -> Condition {
    Condition {
        type_: type_.as_str().into(),
        status: if ok { TRUE } else { FALSE }.into(),
        reason: reason.into(),
        message: kubesync::error::truncated(message, MAX_CONDITION_MESSAGE),
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: None,
    }
}

/// Sets the condition's generation and transition time (pure): the previous transition time
/// is kept while the condition's status does not change, `now` otherwise.
pub fn with_transition(
    mut c: Condition,
    old: &[Condition],
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Condition {
    c.observed_generation = generation;
    c.last_transition_time = match old.iter().find(|o| o.type_ == c.type_) {
        Some(o) if o.status == c.status => o.last_transition_time.clone(),
        _ => Time(now),
    };
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_is_kept_while_the_status_does_not_change() {
        let t0: jiff::Timestamp = "2024-01-01T00:00:00Z".parse().expect("time");
        let t1: jiff::Timestamp = "2024-01-01T00:01:00Z".parse().expect("time");
        let first = with_transition(ready(true, State::Syncing, "a"), &[], Some(1), t0);
        assert_eq!(first.last_transition_time, Time(t0));
        assert_eq!(first.observed_generation, Some(1));
        // Same status, other reason and message: the time stays.
        let same = with_transition(
            ready(true, State::Reporting, "b"),
            std::slice::from_ref(&first),
            Some(2),
            t1,
        );
        assert_eq!(same.last_transition_time, Time(t0));
        // Status flips: now.
        let flipped = with_transition(ready(false, State::Starting, "c"), &[first], Some(2), t1);
        assert_eq!(flipped.last_transition_time, Time(t1));
    }

    #[test]
    fn now_is_whole_seconds() {
        assert_eq!(now().subsec_nanosecond(), 0);
    }
}

#[cfg(test)]
mod reason_tests {
    use super::*;

    /// The types and reasons conditions carry are PascalCase names of their variants, all
    /// different, refusals and states alike.
    #[test]
    fn reasons_are_their_variants_names() {
        let names: Vec<(String, &str)> = Reason::ALL
            .iter()
            .map(|r| (format!("{r:?}"), r.as_str()))
            .chain(State::ALL.iter().map(|r| (format!("{r:?}"), r.as_str())))
            .chain(
                ConditionType::ALL
                    .iter()
                    .map(|t| (format!("{t:?}"), t.as_str())),
            )
            .collect();
        let distinct: std::collections::BTreeSet<&str> = names.iter().map(|n| n.1).collect();
        assert_eq!(distinct.len(), names.len());
        for (variant, name) in &names {
            assert_eq!(variant, name);
        }
        for r in Reason::ALL {
            assert_eq!(r.to_string(), r.as_str());
        }
        for r in State::ALL {
            assert_eq!(r.to_string(), r.as_str());
        }
        for t in ConditionType::ALL {
            assert_eq!(t.to_string(), t.as_str());
        }
    }

    /// A cluster's version gives the reason the library names for it.
    #[test]
    fn version_reasons_are_the_library_s() {
        for v in ["v1.35.0", "v1.29.4-gke.100", "v1.99.0", "nonsense"] {
            let support = kubesync::version::support(v);
            assert_eq!(State::from(&support).as_str(), support.reason(), "{v}");
        }
    }

    #[test]
    fn conditions_are_read_by_type_and_status() {
        let conditions = [
            ready(false, State::Starting, "waiting"),
            condition(ConditionType::Synced, true, State::AllSynced, "1 of 1"),
        ];
        assert!(conditions[0].is(ConditionType::Ready));
        assert!(conditions[0].is_false() && !conditions[0].is_true());
        assert!(conditions[1].is_true() && !conditions[1].is_false());
        assert_eq!(
            find(&conditions, ConditionType::Synced).map(|c| c.reason.as_str()),
            Some("AllSynced")
        );
        assert!(find(&conditions, ConditionType::SourceReachable).is_none());
        assert!(holds(&conditions, ConditionType::Synced));
        assert!(!holds(&conditions, ConditionType::Ready));
        let refusal = Refusal::new(Reason::InvalidSpec, "spec.x: bad");
        let c = refused(&refusal);
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Ready", "False", "InvalidSpec")
        );
    }
}
