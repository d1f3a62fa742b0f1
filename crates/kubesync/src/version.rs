//! The Kubernetes releases kubesync supports, and where a cluster's version stands (pure).
//!
//! The range is the one the client crates describe (k8s-openapi's `earliest` and `latest`), and
//! both ends are tested: every real-cluster suite runs on the newest ([`NEWEST`]) and on the
//! oldest ([`OLDEST`]). A cluster outside it is still served; callers warn about it
//! (`kubesync check`, a RemoteCluster's `VersionSupported` condition).
//!
//! ```
//! use kubesync::version::{Support, support};
//!
//! assert_eq!(support("v1.37.2"), Support::Supported);
//! assert_eq!(support("v1.34.1-gke.1000"), Support::Supported);
//! assert!(matches!(support("v1.29.4"), Support::Older(_)));
//! assert!(support("v1.29.4").warning().is_some_and(|w| w.contains("v1.33")));
//! ```

use std::fmt;

/// A Kubernetes release line, `major.minor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    /// The major version (1).
    pub major: u32,
    /// The minor version.
    pub minor: u32,
}

/// The oldest release line kubesync supports (and tests on).
pub const OLDEST: Release = Release {
    major: 1,
    minor: 33,
};

/// The newest release line kubesync supports (and tests on).
pub const NEWEST: Release = Release {
    major: 1,
    minor: 37,
};

impl Release {
    /// The release line of an apiserver's `gitVersion`: `v1.37.2`, `v1.30.0+k3s1` and
    /// `v1.29.4-gke.100` read as 1.37, 1.30 and 1.29. `None` when it does not start with
    /// `v<major>.<minor>`.
    pub fn parse(git_version: &str) -> Option<Release> {
        let rest = git_version.trim().strip_prefix('v')?;
        let mut parts = rest.splitn(3, '.');
        let major = parts.next()?.parse().ok()?;
        let minor_text = parts.next()?;
        let digits = minor_text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(minor_text.len());
        let minor = minor_text[..digits].parse().ok()?;
        Some(Release { major, minor })
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}.{}", self.major, self.minor)
    }
}

/// Where a cluster's version stands against the supported range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// Within [`OLDEST`]..=[`NEWEST`].
    Supported,
    /// Older than [`OLDEST`]: kinds and fields kubesync relies on may be missing.
    Older(Release),
    /// Newer than [`NEWEST`]: likely to work, not tested.
    Newer(Release),
    /// Not a version kubesync can read (the text it was).
    Unknown(String),
}

/// Where `git_version` (an apiserver's `/version` `gitVersion`) stands.
pub fn support(git_version: &str) -> Support {
    match Release::parse(git_version) {
        None => Support::Unknown(git_version.to_string()),
        Some(r) if r < OLDEST => Support::Older(r),
        Some(r) if r > NEWEST => Support::Newer(r),
        Some(_) => Support::Supported,
    }
}

impl Support {
    /// Whether the version is within the supported range.
    pub fn is_supported(&self) -> bool {
        matches!(self, Support::Supported)
    }

    /// A short PascalCase reason, for conditions.
    pub fn reason(&self) -> &'static str {
        match self {
            Support::Supported => "Supported",
            Support::Older(_) => "OlderThanSupported",
            Support::Newer(_) => "NewerThanTested",
            Support::Unknown(_) => "UnknownVersion",
        }
    }

    /// What a person should know, when the version is not within the range.
    pub fn warning(&self) -> Option<String> {
        match self {
            Support::Supported => None,
            Support::Older(r) => Some(format!(
                "Kubernetes {r} is older than the oldest release kubesync supports ({OLDEST}); \
                 kinds and fields kubesync relies on may be missing: upgrade the cluster"
            )),
            Support::Newer(r) => Some(format!(
                "Kubernetes {r} is newer than the newest release kubesync is tested on \
                 ({NEWEST}); it is expected to work, but is not tested"
            )),
            Support::Unknown(text) => Some(format!(
                "the apiserver reports version {text:?}, which is not a Kubernetes release \
                 kubesync can read; supported: {OLDEST} to {NEWEST}"
            )),
        }
    }

    /// A sentence for a status message, whether or not the version is supported.
    pub fn message(&self) -> String {
        self.warning()
            .unwrap_or_else(|| format!("within the supported range, {OLDEST} to {NEWEST}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_release_lines_of_vendor_versions() {
        let r = |major, minor| Some(Release { major, minor });
        assert_eq!(Release::parse("v1.37.2"), r(1, 37));
        assert_eq!(Release::parse("v1.30.0+k3s1"), r(1, 30));
        assert_eq!(Release::parse("v1.29.4-gke.100"), r(1, 29));
        assert_eq!(Release::parse("v1.28+"), r(1, 28));
        assert_eq!(Release::parse("  v1.33.13\n"), r(1, 33));
        for bad in ["", "1.33.1", "v", "vx.y", "v1", "v1.", "banana"] {
            assert_eq!(Release::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_range_is_inclusive_at_both_ends() {
        assert_eq!(support("v1.33.0"), Support::Supported);
        assert_eq!(support("v1.37.99"), Support::Supported);
        assert_eq!(
            support("v1.32.9"),
            Support::Older(Release {
                major: 1,
                minor: 32
            })
        );
        assert_eq!(
            support("v1.38.0"),
            Support::Newer(Release {
                major: 1,
                minor: 38
            })
        );
        assert_eq!(support("v2.0.0").reason(), "NewerThanTested");
        assert_eq!(support("v1.20.2").reason(), "OlderThanSupported");
        assert_eq!(support("dev").reason(), "UnknownVersion");
        assert!(OLDEST < NEWEST);
    }

    #[test]
    fn warnings_name_the_version_and_the_range() {
        assert_eq!(support("v1.35.1").warning(), None);
        let old = support("v1.20.2").warning().expect("warning");
        assert!(old.contains("v1.20") && old.contains("v1.33"), "{old}");
        let new = support("v1.40.0").warning().expect("warning");
        assert!(new.contains("v1.40") && new.contains("v1.37"), "{new}");
        let odd = support("dev").warning().expect("warning");
        assert!(odd.contains("\"dev\""), "{odd}");
        assert!(support("v1.34.0").message().contains("v1.33 to v1.37"));
    }
}
