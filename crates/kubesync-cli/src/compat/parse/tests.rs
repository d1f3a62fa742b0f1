//! The tests of [`parse`](super): each tool's reading, and its bounds.
use super::*;
use kube::core::SelectorExt;
use std::collections::BTreeMap;

fn reflector(value: &str) -> PatternList {
    PatternList::parse(Dialect::Reflector, value)
}

fn replicator(value: &str) -> PatternList {
    PatternList::parse(Dialect::Replicator, value)
}

fn invalid_entries(list: &PatternList) -> Vec<&str> {
    list.invalid().iter().map(|(e, _)| e.as_str()).collect()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// --- reflector pattern lists ---

#[test]
fn reflector_first_leftmost_match_must_span_the_namespace() {
    // `b|bb` finds `b` first (leftmost-first), which does not cover `bb`.
    let list = reflector("b|bb");
    assert!(!list.matches("bb"));
    assert!(list.matches("b"));
    // The longer alternative first does cover it.
    assert!(reflector("bb|b").matches("bb"));
}

#[test]
fn reflector_dot_star_matches_all() {
    let list = reflector(".*");
    for ns in ["default", "kube-system", "a", "team-a-b-c"] {
        assert!(list.matches(ns), "{ns}");
    }
    assert!(!list.is_empty());
}

#[test]
fn reflector_is_anchored_in_practice() {
    let list = reflector("team-.*");
    assert!(list.matches("team-a"));
    assert!(!list.matches("x-team-a"));
    assert!(!list.matches("team"));
    let list = reflector("^target-.*");
    assert!(list.matches("target-1"));
    assert!(!list.matches("my-target-1"));
    let list = reflector("team-a");
    assert!(list.matches("team-a"));
    assert!(!list.matches("team-ab"));
    assert!(!list.matches("xteam-a"));
}

#[test]
fn reflector_empty_values_name_no_entry() {
    for value in ["", "   ", ",", ",, ,", " , ,\t,"] {
        let list = reflector(value);
        assert!(list.invalid().is_empty(), "{value:?}");
        assert!(list.entries().is_empty(), "{value:?}");
        assert!(!list.matches("default"), "{value:?}");
    }
    // Only a blank value is "no list" (which reflector reads as every namespace); a list of
    // empty entries matches none.
    for value in ["", "   "] {
        assert!(reflector(value).is_empty(), "{value:?}");
    }
    for value in [",", ",, ,", " , ,\t,"] {
        assert!(!reflector(value).is_empty(), "{value:?}");
    }
}

#[test]
fn reflector_entries_are_trimmed_and_empty_ones_dropped() {
    let list = reflector(" team-a , ,team-b,, ");
    assert_eq!(list.entries(), vec!["team-a", "team-b"]);
    assert!(list.matches("team-a"));
    assert!(list.matches("team-b"));
    assert!(!list.matches("team-c"));
    assert!(!list.matches(" team-a"));
}

#[test]
fn reflector_invalid_entry_matches_nothing_and_is_reported() {
    let list = reflector("team-a,*");
    assert!(list.matches("team-a"));
    assert!(!list.matches("team-b"));
    assert!(!list.is_empty());
    assert_eq!(list.entries(), vec!["team-a"]);
    assert_eq!(invalid_entries(&list), vec!["*"]);
    let why = &list.invalid()[0].1;
    assert!(why.starts_with("regex parse error: "), "{why}");
    assert!(!why.contains('\n'), "{why}");
    assert!(why.chars().count() <= MAX_MESSAGE, "{why}");

    // Only invalid entries: not empty (it is not "all namespaces"), matches nothing.
    let list = reflector("*");
    assert!(!list.is_empty());
    assert!(!list.matches("default"));
}

#[test]
fn reflector_lookaround_and_backreferences_via_fancy_regex() {
    let list = reflector("(?!kube-).*");
    assert!(list.invalid().is_empty(), "{:?}", list.invalid());
    assert!(list.matches("default"));
    assert!(list.matches("team-a"));
    assert!(!list.matches("kube-system"));
    assert!(!list.matches("kube-public"));

    let list = reflector(r"(a+)-\1");
    assert!(list.invalid().is_empty(), "{:?}", list.invalid());
    assert!(list.matches("aa-aa"));
    assert!(!list.matches("aa-a"));

    // The same full-span rule: the first match of `b(?=b)|bb` in `bb` is `b`.
    assert!(!reflector("b(?=b)|bb").matches("bb"));
    assert!(reflector("b(?=b)|bb").invalid().is_empty());
    assert!(reflector("b(?=c)|bb").matches("bb"));
}

#[test]
fn reflector_invalid_for_both_engines_reports_the_regex_message() {
    let list = reflector("(?!kube-");
    assert_eq!(invalid_entries(&list), vec!["(?!kube-"]);
    let why = &list.invalid()[0].1;
    assert!(why.starts_with("regex error: "), "{why}");
    assert!(!why.contains('\n'), "{why}");
    let list = reflector("team-(");
    assert!(list.invalid()[0].1.starts_with("regex parse error: "));
}

#[test]
fn reflector_catastrophic_backtracking_gives_up_as_no_match() {
    // Needs backtracking (the backreference) and would take exponential time.
    let list = reflector(r"(a|aa)+\1b");
    assert!(list.invalid().is_empty(), "{:?}", list.invalid());
    let ns = "a".repeat(60);
    let started = std::time::Instant::now();
    assert!(!list.matches(&ns));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    assert!(list.matches("aab"));
}

/// A tenant's list of 99 patterns that each backtrack exponentially (a lookahead inside a
/// repetition) costs at most [`MAX_BACKTRACKING_PATTERNS`] bounded searches per namespace: the
/// others are invalid, reported, and match nothing; patterns the linear-time engine reads are
/// not counted.
#[test]
fn a_list_holds_at_most_a_few_patterns_that_backtrack() {
    let evil = r"((?=a)a|a)+\1b";
    let mut entries: Vec<String> = (0..99).map(|i| format!("{evil}{i}")).collect();
    entries.push("team-.*".into());
    let list = reflector(&entries.join(","));
    assert_eq!(list.entries().len(), MAX_BACKTRACKING_PATTERNS + 1);
    assert_eq!(list.invalid().len(), 99 - MAX_BACKTRACKING_PATTERNS);
    assert!(
        list.invalid()[0].1.contains("at most 8 such patterns"),
        "{:?}",
        list.invalid()[0]
    );
    assert!(list.matches("team-a"), "the linear-time entry still counts");
    assert!(!list.matches(&"a".repeat(60)));
    // Lookarounds people write still work.
    let list = reflector(r"(?!kube-).*-prod");
    assert!(list.matches("shop-prod") && !list.matches("kube-prod"));
}

#[test]
fn bounded_quantifier_is_cut_by_the_comma_split() {
    // Both tools split on every ',': `a{1,3}` is read as `a{1` and `3}`, and admits
    // neither `a` nor `aaa`.
    let list = reflector("a{1,3}");
    assert!(!list.matches("a"));
    assert!(!list.matches("aaa"));
    // Like .NET, fancy-regex reads a `{` that starts no quantifier as a literal.
    assert_eq!(list.entries(), vec!["a{1", "3}"]);
    assert!(list.invalid().is_empty());
    assert!(list.matches("a{1"));
    assert!(list.matches("3}"));

    let list = replicator("a{1,3}");
    assert!(!list.matches("a"));
    assert!(!list.matches("aaa"));
    // Go reads `a{1` as a literal too; the `regex` crate refuses it. No namespace can
    // hold a `{`, so either way it admits none.
    assert_eq!(list.entries(), vec!["3}"]);
    assert_eq!(invalid_entries(&list), vec!["a{1"]);
    assert!(list.matches("3}"));

    // Without a comma a quantifier works.
    assert!(reflector("a{3}").matches("aaa"));
    assert!(replicator("a{3}").matches("aaa"));
}

#[test]
fn long_patterns_are_invalid() {
    let long = format!("a{}", ".".repeat(MAX_PATTERN_CHARS));
    for list in [reflector(&long), replicator(&long)] {
        assert_eq!(list.invalid().len(), 1);
        assert_eq!(list.invalid()[0].1, "pattern longer than 512 characters");
        assert!(!list.matches(&"a".repeat(MAX_PATTERN_CHARS + 1)));
    }
    let just = "a".repeat(MAX_PATTERN_CHARS);
    assert!(reflector(&just).matches(&just));
}

#[test]
fn huge_compiled_patterns_are_invalid() {
    // Short, but far beyond the compiled-size limit.
    for value in [r"(\w{500}){500}", r"(?=x)(\w{500}){500}"] {
        for list in [reflector(value), replicator(value)] {
            assert_eq!(list.invalid().len(), 1, "{value}: {:?}", list.entries());
            assert!(!list.matches("x"));
        }
    }
}

#[test]
fn word_classes_fit_the_size_limit() {
    // A Unicode `\w{63}` would exceed the limit; on namespaces (ASCII) ASCII classes mean
    // the same and are small.
    let name = format!("{}-x", "a".repeat(30));
    for value in [r"\w{63}", r"(\w+-){5}\w+", r"[\w-]{4}", r"(?!kube-)\w{4}"] {
        let list = reflector(value);
        assert!(list.invalid().is_empty(), "{value}: {:?}", list.invalid());
        if !value.contains("?!") {
            assert!(replicator(value).invalid().is_empty(), "{value}");
        }
    }
    assert!(reflector(r"\w{63}").matches(&"a".repeat(63)));
    assert!(replicator(r"[\w-]+").matches(&name));
    assert!(reflector(r"(?!kube-)\w{4}").matches("team"));
    assert!(!reflector(r"(?!kube)\w{4}").matches("kube"));
    assert!(reflector(r"(?!kube-)[\w-]+").matches("kube"));
    assert!(!reflector(r"(?!kube-)[\w-]+").matches("kube-system"));
    // Case-insensitive ASCII letters, Unicode classes and non-ASCII patterns still work.
    for list in [reflector("(?i)TEAM-.*"), replicator("(?i)TEAM-.*")] {
        assert!(list.matches("team-a"));
    }
    for list in [
        reflector(r"\p{Ll}+(-\p{Ll}+)*"),
        replicator(r"\p{Ll}+(-\p{Ll}+)*"),
    ] {
        assert!(list.invalid().is_empty(), "{:?}", list.invalid());
        assert!(list.matches("team-a"));
        assert!(!list.matches("team-1"));
    }
    for list in [reflector("[é]|team-.*"), replicator("[é]|team-.*")] {
        assert!(list.invalid().is_empty(), "{:?}", list.invalid());
        assert!(list.matches("team-a"));
        assert!(list.matches("é"));
    }
    assert!(reflector(r"(?!kube-)\p{Ll}+").matches("default"));
}

#[test]
fn at_most_100_entries() {
    let value = (0..150)
        .map(|i| format!("ns-{i}"))
        .collect::<Vec<_>>()
        .join(",");
    for list in [reflector(&value), replicator(&value)] {
        assert_eq!(list.entries().len(), MAX_PATTERNS);
        assert!(list.matches("ns-0"));
        assert!(list.matches("ns-99"));
        assert!(!list.matches("ns-100"));
        assert!(!list.matches("ns-149"));
        assert_eq!(list.invalid().len(), 1);
        let (rest, why) = &list.invalid()[0];
        assert!(rest.starts_with("ns-100,ns-101,"), "{rest}");
        assert!(rest.ends_with(",ns-149"), "{rest}");
        assert!(why.contains("50 more patterns"), "{why}");
        assert!(why.contains("100"), "{why}");
    }
}

// --- replicator pattern lists ---

#[test]
fn replicator_empty_value_matches_nothing() {
    let list = replicator("");
    assert!(!list.is_empty());
    assert!(list.invalid().is_empty());
    assert_eq!(list.entries(), vec![""]);
    for ns in ["default", "kube-system", "a"] {
        assert!(!list.matches(ns), "{ns}");
    }
    // Blank entries are kept (and match nothing); the others still work.
    let list = replicator("team-a, ,");
    assert_eq!(list.entries(), vec!["team-a", "", ""]);
    assert!(list.matches("team-a"));
    assert!(!list.matches("team-b"));
    assert!(!replicator(",, ,").is_empty());
}

#[test]
fn replicator_alternation_is_anchored_as_a_whole() {
    let list = replicator("a|b");
    assert!(list.matches("a"));
    assert!(list.matches("b"));
    assert!(!list.matches("ab"));
    assert!(!list.matches("ax"));
    assert!(!list.matches("xb"));
    // Unlike reflector's leftmost-first rule, any full match counts.
    assert!(replicator("b|bb").matches("bb"));
}

#[test]
fn replicator_anchors_and_explicit_anchors() {
    let list = replicator("team-.*");
    assert!(list.matches("team-a"));
    assert!(!list.matches("x-team-a"));
    let list = replicator("^team-.*$, ^other, last$");
    assert!(list.matches("team-a"));
    assert!(list.matches("other"));
    assert!(!list.matches("other-1"));
    assert!(list.matches("last"));
    assert!(!list.matches("the-last"));
    assert!(replicator(".*").matches("anything"));
}

#[test]
fn replicator_star_and_lookaround_are_invalid() {
    let list = replicator("team-a,*");
    assert!(list.matches("team-a"));
    assert_eq!(invalid_entries(&list), vec!["*"]);
    assert!(list.invalid()[0].1.starts_with("regex parse error: "));

    let list = replicator("(?!kube-).*");
    assert!(!list.matches("default"));
    assert!(!list.matches("kube-system"));
    assert_eq!(invalid_entries(&list), vec!["(?!kube-).*"]);
    let why = &list.invalid()[0].1;
    assert!(why.contains("look-around"), "{why}");
    assert!(!why.contains('\n'), "{why}");
}

#[test]
fn replicator_entry_cannot_escape_the_anchoring_group() {
    // `^(?:a)|(b)$` would admit `a…` and `…b`; the entry alone does not compile.
    let list = replicator("a)|(b");
    assert_eq!(invalid_entries(&list), vec!["a)|(b"]);
    assert!(!list.matches("ax"));
    assert!(!list.matches("xb"));
}

// --- booleans ---

#[test]
fn reflector_booleans() {
    for v in ["true", "True", "TRUE", " true ", "tRuE\n"] {
        assert!(reflector_bool(Some(v)), "{v:?}");
    }
    for v in ["false", "False", "", "yes", "1", "on", "t", "truee"] {
        assert!(!reflector_bool(Some(v)), "{v:?}");
    }
    assert!(!reflector_bool(None));
}

#[test]
fn replicator_booleans() {
    for v in ["1", "t", "T", "TRUE", "true", "True"] {
        assert_eq!(replicator_bool(v), Some(true), "{v:?}");
    }
    for v in ["0", "f", "F", "FALSE", "false", "False"] {
        assert_eq!(replicator_bool(v), Some(false), "{v:?}");
    }
    for v in ["", " true", "true ", "tRUE", "yes", "on", "2", "tru"] {
        assert_eq!(replicator_bool(v), None, "{v:?}");
    }
}

// --- namespaced names ---

#[test]
fn namespaced_names() {
    let some = |a: &str, b: &str| Some((a.to_string(), b.to_string()));
    assert_eq!(namespaced_name("a/b"), some("a", "b"));
    assert_eq!(namespaced_name(" a / b "), some("a", "b"));
    assert_eq!(namespaced_name("b"), None);
    assert_eq!(namespaced_name("a/b/c"), None);
    assert_eq!(namespaced_name("/b"), None);
    assert_eq!(namespaced_name("a/"), None);
    assert_eq!(namespaced_name(" / "), None);
    assert_eq!(namespaced_name(""), None);
}

// --- label selectors ---

fn selector(value: &str) -> Selector {
    label_selector(value).unwrap_or_else(|e| panic!("{value:?}: {e}"))
}

fn set(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| v.to_string()).collect()
}

#[test]
fn selector_empty_selects_all() {
    for value in ["", "   ", "\t"] {
        let s = selector(value);
        assert!(s.selects_all(), "{value:?}");
        assert!(s.matches(&labels(&[])));
    }
}

#[test]
fn selector_each_operator() {
    let cases = [
        ("env=prod", Expression::Equal("env".into(), "prod".into())),
        ("env==prod", Expression::Equal("env".into(), "prod".into())),
        (
            "env!=prod",
            Expression::NotEqual("env".into(), "prod".into()),
        ),
        ("env=", Expression::Equal("env".into(), String::new())),
        (
            "env in (a,b)",
            Expression::In("env".into(), set(&["a", "b"])),
        ),
        (
            "env notin (a,b)",
            Expression::NotIn("env".into(), set(&["a", "b"])),
        ),
        ("env", Expression::Exists("env".into())),
        ("!env", Expression::DoesNotExist("env".into())),
        (
            "example.com/team=a",
            Expression::Equal("example.com/team".into(), "a".into()),
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(selector(value), Selector::from(expected), "{value:?}");
    }
}

#[test]
fn selector_requirements_are_anded_and_whitespace_is_allowed() {
    let s = selector(" env = prod , tier in ( web , api ) ,!legacy, team ,x!=y ");
    let expected: Selector = [
        Expression::Equal("env".into(), "prod".into()),
        Expression::In("tier".into(), set(&["web", "api"])),
        Expression::DoesNotExist("legacy".into()),
        Expression::Exists("team".into()),
        Expression::NotEqual("x".into(), "y".into()),
    ]
    .into_iter()
    .collect();
    assert_eq!(s, expected);
    assert!(s.matches(&labels(&[("env", "prod"), ("tier", "web"), ("team", "t")])));
    assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "db"), ("team", "t")])));
    assert!(!s.matches(&labels(&[
        ("env", "prod"),
        ("tier", "web"),
        ("team", "t"),
        ("legacy", "1"),
    ])));
    assert!(!s.matches(&labels(&[("env", "prod"), ("tier", "web")])));
    assert!(!s.matches(&labels(&[
        ("env", "prod"),
        ("tier", "web"),
        ("team", "t"),
        ("x", "y")
    ])));
    // Commas inside parentheses separate values, not requirements.
    assert_eq!(
        selector("a in (x,y),b"),
        [
            Expression::In("a".into(), set(&["x", "y"])),
            Expression::Exists("b".into()),
        ]
        .into_iter()
        .collect::<Selector>()
    );
    // The words `in`/`notin` are values where a value is expected.
    assert_eq!(
        selector("a=in"),
        Selector::from(Expression::Equal("a".into(), "in".into()))
    );
}

#[test]
fn selector_errors_name_the_bad_part() {
    let err = |value: &str| match label_selector(value) {
        Ok(s) => panic!("{value:?} parsed as {s:?}"),
        Err(e) => e,
    };
    let e = err("Bad Key=x");
    assert!(e.contains("label selector"), "{e}");
    let e = err("bad key=x");
    assert!(e.contains("\"key\""), "{e}");
    let e = err("-bad=x");
    assert!(e.contains("\"-bad\" is not a label key"), "{e}");
    let e = err("Example.com/a=x");
    assert!(e.contains("not a label key"), "{e}");
    let e = err(&format!("{}=x", "k".repeat(64)));
    assert!(e.contains("not a label key"), "{e}");
    let e = err("a=-bad");
    assert!(e.contains("\"-bad\" is not a label value"), "{e}");
    let e = err(&format!("a={}", "v".repeat(64)));
    assert!(e.contains("not a label value"), "{e}");
    let e = err("a in (x,-y)");
    assert!(e.contains("\"-y\" is not a label value"), "{e}");

    // Parentheses.
    let e = err("a in (x,y");
    assert!(e.contains("no closing ')'"), "{e}");
    let e = err("a in x,y)");
    assert!(e.contains("'(' was expected"), "{e}");
    let e = err("a in (x))");
    assert!(e.contains("')'"), "{e}");
    let e = err("a in (x");
    assert!(e.contains("\"a\" in"), "{e}");
    // Empty lists and empty values in lists.
    let e = err("a in ()");
    assert!(e.contains("empty"), "{e}");
    let e = err("a notin ( )");
    assert!(e.contains("empty"), "{e}");
    let e = err("a in (x,)");
    assert!(e.contains("empty value"), "{e}");
    let e = err("a in (,x)");
    assert!(e.contains("empty value"), "{e}");
    let e = err("a in");
    assert!(e.contains("missing"), "{e}");

    // Commas and operators.
    for value in [
        "a=b,",
        ",a=b",
        "a=b,,c",
        "a b",
        "=b",
        "!",
        "!a=b",
        "!a in (x)",
        "a>1",
        "a<1",
        "a=b=c",
        "(a)",
        "a!",
        "a in (x) b",
    ] {
        let e = err(value);
        assert!(e.starts_with("label selector "), "{value:?}: {e}");
        assert!(!e.contains('\n'), "{value:?}: {e}");
    }
    assert!(err("a>1").contains("not supported"));
    assert!(err("a=b,").contains("after the last ','"));
}

#[test]
fn selector_empty_exact_value() {
    // `k=` and `k!=` take the empty value, as Kubernetes reads them.
    assert_eq!(
        selector("a=,b!="),
        [
            Expression::Equal("a".into(), String::new()),
            Expression::NotEqual("b".into(), String::new()),
        ]
        .into_iter()
        .collect::<Selector>()
    );
}
