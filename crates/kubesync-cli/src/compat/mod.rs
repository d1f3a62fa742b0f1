//! Compatibility with the annotations of two other copiers, emberstack's reflector and
//! mittwald's kubernetes-replicator (`kubesync run --compat reflector --compat replicator`):
//! an annotated object is an implicit declaration on the fan-out engine, with the safety of
//! an ObjectSync.
//!
//! - [`parse`]: annotation values as each tool reads them (booleans, pattern lists, label
//!   selectors, `namespace/name`), pure;
//! - [`declared`]: what an object's annotations declare, what its copies carry and which
//!   objects were that tool's copies of it, pure;
//! - [`mirror`]: what a mirror declares (an object that names its source: reflector's
//!   `reflects`, replicator's `replicate-from`; the book calls it a pull), whether its source
//!   consents, and what it writes, pure;
//! - [`list`]: `kubesync compat list`, every declared sync with its state, or as ObjectSyncs;
//! - [`records`]: the records of the copies annotations made, kept in ConfigMaps of the
//!   operator's own namespace;
//! - [`controller`]: gathers the annotated objects and their copies, lets the fan-out
//!   reconcile them, and says what it could not do in Events on the source.

pub mod controller;
pub mod declared;
pub mod list;
pub mod mirror;
pub mod parse;
pub mod records;

pub use controller::CompatController;

/// A tool whose annotations kubesync honours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Tool {
    /// emberstack's reflector (`reflector.v1.k8s.emberstack.com/`).
    Reflector,
    /// mittwald's kubernetes-replicator (`replicator.v1.mittwald.de/`).
    Replicator,
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Reflector => "reflector",
            Self::Replicator => "replicator",
        })
    }
}

/// Label on every copy an annotation declared (value [`DECLARED_BY_ANNOTATIONS`]): how its
/// declaration is found again when its source is gone, also after a restart.
pub const DECLARED_BY: &str = "kubesync.io/declared-by";
/// The value of [`DECLARED_BY`].
pub const DECLARED_BY_ANNOTATIONS: &str = "annotations";
