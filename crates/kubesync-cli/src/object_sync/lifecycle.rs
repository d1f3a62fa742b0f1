//! An ObjectSync's lifecycle as a pure step, in the shape of kube-runtime's `finalizer`
//! (apply while it lives, clean up when it goes, its finalizer held in between): what is
//! known of it in, the next thing to do out. The controller gathers what a step asks for
//! ([`Next::Judge`], [`Next::FindCopies`]: the requests) and carries out the rest; nothing
//! here does IO.

use kubesync::syncers::fan_out::{FanOutSpec, Mode};

use crate::status::{Reason, Refusal};

/// What is known of one ObjectSync (or ClusterObjectSync).
#[derive(Debug)]
pub(super) struct Known {
    /// It carries kubesync's copy mark: a copy, never a declaration.
    pub is_copy: bool,
    /// It is being deleted.
    pub deleting: bool,
    /// It holds kubesync's finalizer.
    pub has_finalizer: bool,
    /// It is declared outside the trusted namespaces.
    pub untrusted: bool,
    /// Its spec as judged: the fan-out spec, or why it is refused (`None`: not judged yet).
    pub judged: Option<Result<FanOutSpec, Refusal>>,
    /// Going with a refused spec: what finding its copies needs (`None`: not looked for yet;
    /// `Some(None)`: its kind is not served, so no copy of it can exist).
    pub copies: Option<Option<FanOutSpec>>,
}

/// What to do next.
#[derive(Debug)]
pub(super) enum Next {
    /// Judge the spec (checks, then the facts read with requests) and ask again.
    Judge(Known),
    /// Going with a refused spec: find what removing its copies needs (the kind it names, the
    /// clusters it names) and ask again.
    FindCopies(Known),
    /// A copy kubesync made: forgotten, and never acted on as a declaration. Its finalizer
    /// (if `release`: a declaration labelled as a copy since, none of whose copies can exist)
    /// is removed; one that is not going is told why (`refuse`).
    NotADeclaration {
        /// It holds kubesync's finalizer.
        release: bool,
        /// Its status says why nothing is done.
        refuse: bool,
    },
    /// It holds kubesync's finalizer from now on: its copies go before it does.
    HoldFinalizer,
    /// Nothing to do: it goes, and holds no finalizer of kubesync's.
    Nothing,
    /// Its spec is refused: its status says why; copies whose consent was withdrawn are still
    /// removed when `sweep`.
    Refuse {
        /// Why.
        refusal: Refusal,
        /// Whether to sweep.
        sweep: bool,
    },
    /// It goes and nothing of it is to be removed: forgotten, and its finalizer released.
    Release {
        /// Why (for the log).
        why: &'static str,
    },
    /// Its copies made as `spec` says, and its status reported.
    Apply(FanOutSpec),
    /// It goes: its copies (found by their marks) removed or released as `spec` says; its
    /// finalizer released once none is left.
    CleanUp(FanOutSpec),
}

/// The next step of the ObjectSync `known` describes.
pub(super) fn next(mut known: Known) -> Next {
    if known.is_copy {
        if !known.has_finalizer {
            return Next::NotADeclaration {
                release: false,
                refuse: !known.deleting,
            };
        }
        // Only a declaration kubesync acted on holds its finalizer: labelled as a copy since
        // (a label anyone who may write it can add), it is one no more, and what it made goes
        // first, as when it goes — never kept for good by a label.
        return match known.copies.take() {
            None => Next::FindCopies(known),
            Some(Some(mut spec)) => {
                spec.mode = Mode::Enforce;
                Next::CleanUp(spec)
            }
            Some(None) => Next::NotADeclaration {
                release: true,
                refuse: false,
            },
        };
    }
    match (known.deleting, known.has_finalizer) {
        (false, false) => return Next::HoldFinalizer,
        (true, false) => return Next::Nothing,
        _ => {}
    }
    let judged = match known.judged.take() {
        None => return Next::Judge(known),
        Some(judged) => judged,
    };
    match (judged, known.deleting) {
        (Ok(spec), false) => Next::Apply(spec),
        (Ok(spec), true) => going(spec, known.untrusted),
        (Err(refusal), false) => Next::Refuse {
            sweep: sweeps_after(&refusal),
            refusal,
        },
        // Going with a spec that is refused now: its copies (made under an earlier, valid
        // spec) are still found by their marks, for the kind it names.
        (Err(refusal), true) => match known.copies.take() {
            None => Next::FindCopies(Known {
                judged: Some(Err(refusal)),
                ..known
            }),
            Some(Some(spec)) => going(spec, known.untrusted),
            Some(None) => Next::Release {
                why: "released: its kind is not served, so no copy of it can exist",
            },
        },
    }
}

/// A going declaration with `spec`: its copies cleaned up, but in Report mode, which writes
/// nothing to destinations, also not when it goes — for a trusted declaration. Outside the
/// trusted namespaces, consent ends with the declaration: the copies it made (in Enforce
/// mode, before) go with it, whatever its mode now.
fn going(mut spec: FanOutSpec, untrusted: bool) -> Next {
    if spec.mode == Mode::Report && !untrusted {
        return Next::Release {
            why: "released: in Report mode its copies stay as they are",
        };
    }
    spec.mode = Mode::Enforce;
    Next::CleanUp(spec)
}

/// Whether a refused ObjectSync still sweeps the copies whose consent was withdrawn: not when
/// its kind is not served, or not one the operator may sync at all (its RBAC may not even let
/// it watch that kind; copies of it cannot have been made under this policy).
pub(super) fn sweeps_after(refusal: &Refusal) -> bool {
    !matches!(
        refusal.reason,
        Reason::ResourceNotAllowed | Reason::ResourceNotFound | Reason::CopyNotADeclaration
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ApiResource;
    use kubesync::syncers::fan_out::SourceRef;

    fn spec(mode: Mode) -> FanOutSpec {
        let ar = ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk("", "v1", "Secret"));
        FanOutSpec {
            mode,
            ..FanOutSpec::new(SourceRef::one(ar, "src", "ca"))
        }
    }

    fn known(deleting: bool, has_finalizer: bool) -> Known {
        Known {
            is_copy: false,
            deleting,
            has_finalizer,
            untrusted: false,
            judged: None,
            copies: None,
        }
    }

    fn judged(mut k: Known, judged: Result<FanOutSpec, Refusal>) -> Known {
        k.judged = Some(judged);
        k
    }

    fn refused(reason: Reason) -> Result<FanOutSpec, Refusal> {
        Err(Refusal::new(reason, "no"))
    }

    #[test]
    fn a_copy_is_never_a_declaration_and_never_keeps_a_finalizer() {
        for (deleting, refuse) in [(false, true), (true, false)] {
            let mut k = known(deleting, false);
            k.is_copy = true;
            // Whatever its spec says: it is not even judged.
            k.judged = Some(Ok(spec(Mode::Enforce)));
            assert!(
                matches!(next(k), Next::NotADeclaration { release: false, refuse: f } if f == refuse),
                "deleting {deleting}"
            );
        }
    }

    /// A declaration labelled as a copy after kubesync acted on it (it holds the finalizer)
    /// keeps nothing by it: its copies are found and removed, in Enforce mode, before its
    /// finalizer goes; it is never judged again.
    #[test]
    fn a_declaration_labelled_as_a_copy_removes_its_copies_before_its_finalizer() {
        for deleting in [false, true] {
            let mut k = known(deleting, true);
            k.is_copy = true;
            k.judged = Some(Ok(spec(Mode::Enforce)));
            let Next::FindCopies(mut k) = next(k) else {
                panic!("its copies are looked for first");
            };
            k.copies = Some(Some(spec(Mode::Report)));
            assert!(
                matches!(next(k), Next::CleanUp(s) if s.mode == Mode::Enforce),
                "deleting {deleting}"
            );
            let mut k = known(deleting, true);
            k.is_copy = true;
            k.copies = Some(None);
            assert!(matches!(
                next(k),
                Next::NotADeclaration {
                    release: true,
                    refuse: false
                }
            ));
        }
    }

    #[test]
    fn the_finalizer_comes_first_and_a_declaration_is_judged_before_anything_is_done() {
        assert!(matches!(next(known(false, false)), Next::HoldFinalizer));
        assert!(matches!(next(known(true, false)), Next::Nothing));
        assert!(matches!(next(known(false, true)), Next::Judge(_)));
        assert!(matches!(next(known(true, true)), Next::Judge(_)));
        let k = judged(known(false, true), Ok(spec(Mode::Enforce)));
        assert!(matches!(next(k), Next::Apply(s) if s.mode == Mode::Enforce));
    }

    #[test]
    fn a_refused_spec_sweeps_unless_its_kind_cannot_be_synced_at_all() {
        for reason in [
            Reason::InvalidSpec,
            Reason::SourceNamespaceNotAllowed,
            Reason::RemoteClusterNotAllowed,
            Reason::DestinationNotAllowed,
        ] {
            let k = judged(known(false, true), refused(reason));
            assert!(
                matches!(next(k), Next::Refuse { sweep: true, .. }),
                "{reason}"
            );
        }
        for reason in [Reason::ResourceNotAllowed, Reason::ResourceNotFound] {
            let k = judged(known(false, true), refused(reason));
            assert!(
                matches!(next(k), Next::Refuse { sweep: false, .. }),
                "{reason}"
            );
        }
    }

    #[test]
    fn a_going_declaration_cleans_up_unless_trusted_and_reporting() {
        let k = judged(known(true, true), Ok(spec(Mode::Enforce)));
        assert!(matches!(next(k), Next::CleanUp(s) if s.mode == Mode::Enforce));
        // Report mode, trusted: its copies stay; the finalizer is released.
        let k = judged(known(true, true), Ok(spec(Mode::Report)));
        assert!(matches!(next(k), Next::Release { .. }));
        // Report mode, untrusted: consent ends with it; its copies go.
        let mut k = judged(known(true, true), Ok(spec(Mode::Report)));
        k.untrusted = true;
        assert!(matches!(next(k), Next::CleanUp(s) if s.mode == Mode::Enforce));
    }

    #[test]
    fn a_going_declaration_whose_spec_is_refused_finds_its_copies_by_their_marks() {
        let k = judged(known(true, true), refused(Reason::InvalidSpec));
        let Next::FindCopies(mut k) = next(k) else {
            panic!("its copies are looked for");
        };
        k.copies = Some(Some(spec(Mode::Enforce)));
        assert!(matches!(next(k), Next::CleanUp(_)));
        // Its kind is not served: no copy can exist; released at once.
        let mut k = judged(known(true, true), refused(Reason::ResourceNotFound));
        k.copies = Some(None);
        assert!(matches!(next(k), Next::Release { .. }));
    }
}
