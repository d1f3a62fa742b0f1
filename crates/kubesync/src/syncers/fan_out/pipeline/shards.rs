//! The shards whose copies this process holds, when copies are sharded
//! ([`FanOut::shard_copies`](super::FanOut::shard_copies)): each copy carries its
//! declaration's shard ([`rules::SHARD`]), and the watches of copies and of the other objects
//! select, on the server, the shards held and the rest. Pure, but for the lock of the shards
//! held.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::key::ObjectKey;
use crate::syncers::fan_out::rules;
use crate::syncers::fan_out::spec::Declaration;

/// A declaration's shard: the [`rules::SHARD`] label of its copies.
pub type ShardOf = Arc<dyn Fn(&ObjectKey) -> String + Send + Sync>;

/// How copies are sharded: each carries its declaration's shard, and this process holds only
/// the copies of the shards it was given last ([`Shards::hold`]).
pub(super) struct Shards {
    shard_of: ShardOf,
    /// Every shard there is.
    all: BTreeSet<String>,
    /// The shards held now (the others are derived from `all` where a selector needs them).
    held: parking_lot::Mutex<Arc<BTreeSet<String>>>,
}

impl Shards {
    /// Copies sharded by `shard_of` among `all`; none held yet.
    pub(super) fn new(shard_of: ShardOf, all: BTreeSet<String>) -> Self {
        Self {
            shard_of,
            all,
            held: parking_lot::Mutex::default(),
        }
    }

    /// Holds the copies of `shards` from now on (those that are not among all the shards are
    /// ignored); whether that changes what is held.
    pub(super) fn hold(&self, shards: &BTreeSet<String>) -> bool {
        let new: BTreeSet<String> = shards.intersection(&self.all).cloned().collect();
        let mut held = self.held.lock();
        if **held == new {
            return false;
        }
        *held = Arc::new(new);
        true
    }

    /// `decl` marked with its shard (its copies carry it), or `None` when its shard's copies
    /// are not held here.
    pub(super) fn marked(&self, decl: &Declaration) -> Option<Declaration> {
        let shard = (self.shard_of)(&decl.key);
        if !self.held.lock().contains(&shard) {
            tracing::debug!(declaration = %decl.key, %shard, "its shard's copies are not held here: nothing decided");
            return None;
        }
        let mut owner = decl.owner.clone();
        owner.shard = Some(shard);
        Some(Declaration {
            owner,
            ..decl.clone()
        })
    }

    /// The shards held, and every shard there is.
    fn held(&self) -> (Arc<BTreeSet<String>>, &BTreeSet<String>) {
        (self.held.lock().clone(), &self.all)
    }
}

/// The label selector of kubesync's copies (`shards`: of the shards held).
pub(super) fn copies_selector(shards: Option<&Shards>) -> String {
    match shards.map(Shards::held) {
        None => rules::MANAGED_BY.to_string(),
        Some((mine, all)) => format!("{},{}", rules::MANAGED_BY, among(&mine, all)),
    }
}

/// The label selector of the other objects: those without the `managed-by` label, or,
/// sharded, those not of a shard held (other replicas' copies, and copies not labelled yet,
/// are others too).
pub(super) fn others_selector(shards: Option<&Shards>) -> String {
    let shard = rules::SHARD;
    match shards.map(Shards::held) {
        None => format!("!{}", rules::MANAGED_BY),
        Some((mine, _)) if mine.is_empty() => format!("{shard} notin (none)"),
        Some((mine, all)) if mine.len() == all.len() => format!("!{shard}"),
        Some((mine, _)) => format!("{shard} notin ({})", list(&mine)),
    }
}

/// A selector of the objects whose shard is one of `these` (of `all`, which holds them): `in`
/// them, or, when they are more than the rest, labelled and `notin` the rest — a selector names
/// at most half of the shards. None: a value no shard has (the apiserver refuses an empty
/// list).
fn among(these: &BTreeSet<String>, all: &BTreeSet<String>) -> String {
    let shard = rules::SHARD;
    let rest = all.len().saturating_sub(these.len());
    if these.len() <= rest {
        if these.is_empty() {
            return format!("{shard} in (none)");
        }
        format!("{shard} in ({})", list(these))
    } else if rest == 0 {
        shard.to_string()
    } else {
        let rest: BTreeSet<String> = all.difference(these).cloned().collect();
        format!("{shard},{shard} notin ({})", list(&rest))
    }
}

/// Shards as a selector's list of values.
fn list(set: &BTreeSet<String>) -> String {
    set.iter().map(String::as_str).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(values: &[&str]) -> BTreeSet<String> {
        values.iter().map(|v| v.to_string()).collect()
    }

    #[test]
    fn a_shard_selector_names_the_smaller_side() {
        let s = rules::SHARD;
        assert_eq!(
            among(&set(&["a"]), &set(&["a", "b", "c"])),
            format!("{s} in (a)")
        );
        assert_eq!(
            among(&set(&["a", "b"]), &set(&["a", "b", "c"])),
            format!("{s},{s} notin (c)"),
            "labelled (not a copy written before shards), and not another's"
        );
        assert_eq!(among(&set(&["a", "b"]), &set(&["a", "b"])), s);
        assert_eq!(among(&set(&[]), &set(&["a"])), format!("{s} in (none)"));
        assert_eq!(
            among(&set(&["a"]), &set(&["a", "b"])),
            format!("{s} in (a)")
        );
    }
}
