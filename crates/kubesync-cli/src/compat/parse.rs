//! Annotation values of emberstack's reflector and mittwald's kubernetes-replicator, read as
//! those tools read them, but safely (pure).
//!
//! Reflector (`reflector.v1.k8s.emberstack.com/`, C#/.NET) and kubernetes-replicator
//! (`replicator.v1.mittwald.de/`, Go) each read booleans, namespace pattern lists, label
//! selectors and `namespace/name` references in their own way; compat mode has to read the
//! same annotations the same way, or a migration silently changes where copies go. Where a
//! tool's reading is unsafe, this module is safe instead, and says so:
//!
//! - A pattern that does not compile matches nothing and is reported ([`PatternList::invalid`]);
//!   reflector throws on it and stalls, replicator logs and skips it.
//! - Replicator anchors an entry `p` as `^p$`, so `a|b` admits `a…` and `…b`; here it is
//!   `^(?:p)$`, so `a|b` admits exactly `a` and `b`.
//! - Sizes are bounded: at most [`MAX_PATTERNS`] entries of at most [`MAX_PATTERN_CHARS`]
//!   characters, compiled programs of at most [`REGEX_SIZE_LIMIT`] bytes, and patterns that
//!   need backtracking (lookaround, backreferences) give up after [`BACKTRACK_LIMIT`] steps
//!   (counted as no match).
//!
//! Both tools split a pattern list on every `,`, so a bounded quantifier such as `a{1,3}`
//! is cut into `a{1` and `3}`; this module reads it the same way. Neither part admits a real
//! namespace: `3}` and (for reflector, which like .NET reads a `{` that starts no quantifier
//! as a literal) `a{1` are literals with characters no namespace has; for replicator `a{1` is
//! an invalid pattern (Go would read it as a literal, the `regex` crate refuses it).
//!
//! Regex dialects: replicator uses Go's RE2, read here with the `regex` crate, whose syntax is
//! RE2's for everything people write in namespace patterns. Reflector uses .NET regexes, read
//! with the `regex` crate and, for what only a backtracking engine has (lookaround,
//! backreferences), with `fancy-regex`.

use kube::core::{Expression, Selector};
use kubesync::validate::{label_key, label_value, quoted};
use std::collections::BTreeSet;

/// Most entries read from one pattern list; the rest are reported invalid.
pub const MAX_PATTERNS: usize = 100;
/// Longest pattern entry, in characters; a longer one is invalid.
pub const MAX_PATTERN_CHARS: usize = 512;
/// Largest compiled program of one pattern, in bytes (`regex::RegexBuilder::size_limit`).
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Most backtracking steps of one search with a pattern that needs backtracking; beyond it
/// the search counts as no match.
pub const BACKTRACK_LIMIT: usize = 100_000;
/// Most instructions of a compiled backtracking program.
const MAX_PROGRAM: usize = 10_000;
/// Longest reason given for an invalid entry, in characters.
const MAX_MESSAGE: usize = 200;

/// Which tool's reading of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// emberstack's reflector (`reflector.v1.k8s.emberstack.com/`): .NET regexes whose first
    /// leftmost match must span the whole namespace; empty entries dropped.
    Reflector,
    /// mittwald's kubernetes-replicator (`replicator.v1.mittwald.de/`): RE2 regexes, anchored
    /// (correctly, as `^(?:p)$`); empty entries kept.
    Replicator,
}

/// A compiled entry.
#[derive(Clone, Debug)]
enum Matcher {
    /// Reflector, `regex` crate: the first leftmost match must span the namespace.
    Spanning(regex::bytes::Regex),
    /// Reflector, `fancy-regex` (lookaround, backreferences): the same rule.
    SpanningFancy(fancy_regex::Regex),
    /// Replicator: the entry compiled as `^(?:entry)$`.
    Anchored(regex::bytes::Regex),
}

impl Matcher {
    fn matches(&self, namespace: &str) -> bool {
        let spans = |start: usize, end: usize| start == 0 && end == namespace.len();
        match self {
            Matcher::Spanning(re) => re
                .find(namespace.as_bytes())
                .is_some_and(|m| spans(m.start(), m.end())),
            // An error while searching (the backtracking limit) is no match.
            Matcher::SpanningFancy(re) => {
                matches!(re.find(namespace), Ok(Some(m)) if spans(m.start(), m.end()))
            }
            Matcher::Anchored(re) => re.is_match(namespace.as_bytes()),
        }
    }
}

/// A comma-separated list of namespace patterns, read as one tool reads it.
#[derive(Clone, Debug)]
pub struct PatternList {
    /// The valid entries as written (trimmed), each with its compiled form.
    valid: Vec<(String, Matcher)>,
    /// The entries that could not be read, each with why.
    invalid: Vec<(String, String)>,
}

impl PatternList {
    /// Parses `value` as `dialect` reads it; entries that do not compile are kept in
    /// [`invalid`](Self::invalid) and match nothing.
    ///
    /// Both dialects split on `,` and trim each entry. Reflector drops entries that are then
    /// empty; replicator keeps them (an empty entry matches only the empty string, so no
    /// namespace). Entries beyond the first [`MAX_PATTERNS`] are reported together as one
    /// invalid item (the rest of the list as written, trimmed).
    pub fn parse(dialect: Dialect, value: &str) -> Self {
        let entries: Vec<&str> = match dialect {
            Dialect::Reflector => value
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .collect(),
            Dialect::Replicator => value.split(',').map(str::trim).collect(),
        };
        let mut list = PatternList {
            valid: Vec::new(),
            invalid: Vec::new(),
        };
        for entry in entries.iter().take(MAX_PATTERNS) {
            match compile(dialect, entry) {
                Ok(matcher) => list.valid.push(((*entry).to_string(), matcher)),
                Err(why) => list.invalid.push(((*entry).to_string(), why)),
            }
        }
        if entries.len() > MAX_PATTERNS {
            let rest = &entries[MAX_PATTERNS..];
            list.invalid.push((
                rest.join(","),
                format!(
                    "{} more patterns beyond the first {MAX_PATTERNS} are ignored",
                    rest.len()
                ),
            ));
        }
        list
    }

    /// Whether the value names no entry at all: for reflector, a value that is empty or only
    /// commas and blanks, which reflector reads as "all namespaces" (the caller decides). For
    /// replicator always false: its empty value is one empty entry, which matches nothing.
    pub fn is_empty(&self) -> bool {
        self.valid.is_empty() && self.invalid.is_empty()
    }

    /// Whether `namespace` matches one of the valid entries.
    pub fn matches(&self, namespace: &str) -> bool {
        self.valid.iter().any(|(_, m)| m.matches(namespace))
    }

    /// The entries that could not be read, each with why, e.g. `("*", "regex parse error:
    /// repetition operator missing expression")`; the reason is one line of at most about 200
    /// characters. The entry is as written (trimmed) and may be long: shorten it for display
    /// (e.g. with `kubesync::validate::quoted`).
    pub fn invalid(&self) -> &[(String, String)] {
        &self.invalid
    }

    /// The valid entries as written (trimmed), for display.
    pub fn entries(&self) -> Vec<String> {
        self.valid.iter().map(|(e, _)| e.clone()).collect()
    }
}

/// Compiles one trimmed entry as `dialect` reads it, or says why not.
fn compile(dialect: Dialect, entry: &str) -> Result<Matcher, String> {
    if entry.chars().count() > MAX_PATTERN_CHARS {
        return Err(format!(
            "pattern longer than {MAX_PATTERN_CHARS} characters"
        ));
    }
    match dialect {
        Dialect::Reflector => match plain(entry) {
            Ok(re) => Ok(Matcher::Spanning(re)),
            Err(plain_err) => match fancy(entry) {
                Ok(re) => Ok(Matcher::SpanningFancy(re)),
                // The `regex` crate's message is the clearer one, unless it only says that a
                // feature is missing there, which `fancy-regex` has: then why that failed.
                Err(fancy_err) if plain_err.to_string().contains("not supported") => {
                    Err(one_line(&format!("regex error: {fancy_err}")))
                }
                Err(_) => Err(regex_message(&plain_err)),
            },
        },
        Dialect::Replicator => {
            // Compiled alone first, so that an entry cannot close the anchoring group
            // (`a)|(b`) and escape the anchors.
            plain(entry).map_err(|e| regex_message(&e))?;
            plain(&format!("^(?:{entry})$"))
                .map(Matcher::Anchored)
                .map_err(|e| regex_message(&e))
        }
    }
}

/// `pattern` compiled with the `regex` crate, bounded: an ASCII-only pattern first with
/// ASCII classes (see [`ascii_first`]), else (or if that fails) with Unicode classes.
fn plain(pattern: &str) -> Result<regex::bytes::Regex, regex::Error> {
    let build = |unicode: bool| {
        regex::bytes::RegexBuilder::new(pattern)
            .unicode(unicode)
            .size_limit(REGEX_SIZE_LIMIT)
            .build()
    };
    ascii_first(pattern, build)
}

/// `pattern` compiled with `fancy-regex`, bounded, in the modes of [`ascii_first`].
fn fancy(pattern: &str) -> Result<fancy_regex::Regex, fancy_regex::Error> {
    let build = |unicode: bool| {
        fancy_regex::RegexBuilder::new(pattern)
            .unicode_mode(unicode)
            .backtrack_limit(BACKTRACK_LIMIT)
            .delegate_size_limit(REGEX_SIZE_LIMIT)
            .max_prog_size(MAX_PROGRAM)
            .build()
    };
    ascii_first(pattern, build)
}

/// `build(unicode)` for `pattern`: ASCII classes (`false`) first, then Unicode classes.
///
/// Namespace names are ASCII, and on ASCII text `\w`, `\d`, `\s`, `\b`, negated classes and
/// case-insensitive ASCII letters mean the same in both modes; but a Unicode `\w` compiles to
/// a program hundreds of times larger, so `\w{63}` would exceed [`REGEX_SIZE_LIMIT`]. ASCII
/// classes are also what Go (replicator) means by `\w`, `\d` and `\s`. A pattern that is
/// not ASCII (`[é]`, `(?i)ſ`) is compiled with Unicode classes only, and one that ASCII mode
/// refuses (`\p{L}`; `.` for `fancy-regex`) falls back to them. The error is Unicode mode's.
fn ascii_first<T, E>(pattern: &str, build: impl Fn(bool) -> Result<T, E>) -> Result<T, E> {
    if pattern.is_ascii() {
        build(false).or_else(|_| build(true))
    } else {
        build(true)
    }
}

/// A `regex` crate error as one short line.
fn regex_message(err: &regex::Error) -> String {
    match err {
        regex::Error::Syntax(text) => {
            // "regex parse error:\n    *\n    ^\nerror: repetition operator missing expression"
            let why = text
                .lines()
                .rev()
                .find_map(|l| l.trim().strip_prefix("error:"))
                .unwrap_or(text);
            one_line(&format!("regex parse error: {}", why.trim()))
        }
        regex::Error::CompiledTooBig(limit) => {
            format!("regex too large once compiled (more than {limit} bytes)")
        }
        other => one_line(&other.to_string()),
    }
}

/// `text` on one line (runs of whitespace made one space), at most [`MAX_MESSAGE`] characters.
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= MAX_MESSAGE {
        line
    } else {
        let mut short: String = line.chars().take(MAX_MESSAGE - 3).collect();
        short.push_str("...");
        short
    }
}

/// reflector's boolean: the value trimmed, `true`/`false` case-insensitively; anything else
/// (and absent) is false.
pub fn reflector_bool(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// replicator's boolean (Go `strconv.ParseBool`): `1`, `t`, `T`, `TRUE`, `true`, `True` →
/// `Some(true)`; `0`, `f`, `F`, `FALSE`, `false`, `False` → `Some(false)`; anything else →
/// `None` (invalid). No trimming (Go does not trim).
pub fn replicator_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// `namespace/name` (each part trimmed, both non-empty, exactly one `/`) →
/// `Some((namespace, name))`; anything else `None`.
///
/// Reflector also parses a bare `name` (as namespace `""`), which never resolves; here it is
/// `None`.
pub fn namespaced_name(value: &str) -> Option<(String, String)> {
    let (namespace, name) = value.split_once('/')?;
    let (namespace, name) = (namespace.trim(), name.trim());
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        return None;
    }
    Some((namespace.to_string(), name.to_string()))
}

/// A label selector written as a string, as a kube [`Selector`].
///
/// Requirements: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k`
/// (does not exist); separated by commas outside parentheses and ANDed; whitespace around
/// tokens allowed. `""` (or only blanks) is a selector that matches everything. Keys and
/// values are checked as Kubernetes checks label keys and values (a value may be empty, as
/// in `k=`). `in` and `notin` need a parenthesised list of at least one value, none of them
/// empty (Kubernetes would read `()` and `(a,)` as holding the empty value; here they are
/// refused). `>` and `<` are refused. Any error is a message for people naming the bad part.
pub fn label_selector(value: &str) -> Result<Selector, String> {
    let fail = |why: String| format!("label selector {}: {why}", quoted(value));
    let tokens = lex(value);
    let mut parser = Parser { tokens, at: 0 };
    let mut selector = Selector::default();
    if parser.peek().is_none() {
        return Ok(selector);
    }
    loop {
        let expression = parser.requirement().map_err(fail)?;
        selector.extend(expression);
        match parser.next() {
            None => return Ok(selector),
            Some(Token::Comma) => {
                if parser.peek().is_none() {
                    return Err(fail("a requirement is missing after the last ','".into()));
                }
            }
            Some(token) => {
                return Err(fail(format!(
                    "found {} where ',' or the end was expected",
                    token.describe()
                )));
            }
        }
    }
}

/// A token of a label selector string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    /// A run of characters that are neither blanks nor one of `!=(),<>`.
    Word(&'a str),
    /// `!`
    Not,
    /// `=`
    Equal,
    /// `==`
    DoubleEqual,
    /// `!=`
    NotEqual,
    /// `(`
    Open,
    /// `)`
    Close,
    /// `,`
    Comma,
    /// `<` or `>`
    Compare(char),
}

impl Token<'_> {
    /// The token for a message.
    fn describe(&self) -> String {
        match self {
            Token::Word(w) => quoted(w),
            Token::Not => "'!'".into(),
            Token::Equal => "'='".into(),
            Token::DoubleEqual => "'=='".into(),
            Token::NotEqual => "'!='".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Comma => "','".into(),
            Token::Compare(c) => format!("'{c}'"),
        }
    }
}

/// Whether `c` ends a word (as in Kubernetes' selector lexer).
fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>')
}

/// The tokens of `s`, blanks dropped.
fn lex(s: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        let Some(c) = rest.chars().next() else {
            return tokens;
        };
        let (token, len) = match c {
            '!' if rest.starts_with("!=") => (Token::NotEqual, 2),
            '!' => (Token::Not, 1),
            '=' if rest.starts_with("==") => (Token::DoubleEqual, 2),
            '=' => (Token::Equal, 1),
            '(' => (Token::Open, 1),
            ')' => (Token::Close, 1),
            ',' => (Token::Comma, 1),
            '<' | '>' => (Token::Compare(c), 1),
            _ => {
                let len = rest
                    .find(|c: char| c.is_whitespace() || is_special(c))
                    .unwrap_or(rest.len());
                (Token::Word(&rest[..len]), len)
            }
        };
        tokens.push(token);
        rest = &rest[len..];
    }
}

/// A recursive-descent reader of selector tokens.
struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    at: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Token<'a>> {
        self.tokens.get(self.at).copied()
    }

    fn next(&mut self) -> Option<Token<'a>> {
        let token = self.peek();
        if token.is_some() {
            self.at += 1;
        }
        token
    }

    /// One requirement, up to (not including) the `,` or the end that follows it.
    fn requirement(&mut self) -> Result<Expression, String> {
        match self.next() {
            Some(Token::Not) => {
                let key = match self.next() {
                    Some(Token::Word(key)) => key,
                    Some(token) => {
                        return Err(format!(
                            "found {} where a key was expected after '!'",
                            token.describe()
                        ));
                    }
                    None => return Err("a key is missing after '!'".into()),
                };
                label_key(key)?;
                match self.peek() {
                    None | Some(Token::Comma) => Ok(Expression::DoesNotExist(key.to_string())),
                    Some(token) => Err(format!(
                        "'!{key}' takes no operator or value, found {}",
                        token.describe()
                    )),
                }
            }
            Some(Token::Word(key)) => {
                label_key(key)?;
                match self.peek() {
                    None | Some(Token::Comma) => Ok(Expression::Exists(key.to_string())),
                    Some(Token::Equal | Token::DoubleEqual) => {
                        self.at += 1;
                        Ok(Expression::Equal(key.to_string(), self.exact_value(key)?))
                    }
                    Some(Token::NotEqual) => {
                        self.at += 1;
                        Ok(Expression::NotEqual(
                            key.to_string(),
                            self.exact_value(key)?,
                        ))
                    }
                    Some(Token::Word("in")) => {
                        self.at += 1;
                        Ok(Expression::In(key.to_string(), self.value_list(key, "in")?))
                    }
                    Some(Token::Word("notin")) => {
                        self.at += 1;
                        Ok(Expression::NotIn(
                            key.to_string(),
                            self.value_list(key, "notin")?,
                        ))
                    }
                    Some(Token::Compare(c)) => Err(format!(
                        "the operator '{c}' (after {}) is not supported",
                        quoted(key)
                    )),
                    Some(token) => Err(format!(
                        "found {} after the key {} where an operator ('=', '==', '!=', 'in', 'notin'), ',' or the end was expected",
                        token.describe(),
                        quoted(key)
                    )),
                }
            }
            Some(token) => Err(format!(
                "found {} where a key or '!' was expected",
                token.describe()
            )),
            None => Err("a requirement is missing".into()),
        }
    }

    /// The value after `=`, `==` or `!=`: a word, or empty before a `,` or the end.
    fn exact_value(&mut self, key: &str) -> Result<String, String> {
        match self.peek() {
            None | Some(Token::Comma) => Ok(String::new()),
            Some(Token::Word(value)) => {
                self.at += 1;
                label_value(value)?;
                Ok(value.to_string())
            }
            Some(token) => Err(format!(
                "found {} where the value of {} was expected",
                token.describe(),
                quoted(key)
            )),
        }
    }

    /// `( v1, v2, ... )` after `in` or `notin`: at least one value, none empty.
    fn value_list(&mut self, key: &str, operator: &str) -> Result<BTreeSet<String>, String> {
        let what = format!("{} {operator}", quoted(key));
        match self.next() {
            Some(Token::Open) => {}
            Some(token) => {
                return Err(format!(
                    "found {} after {what} where '(' was expected",
                    token.describe()
                ));
            }
            None => {
                return Err(format!(
                    "a parenthesised list of values is missing after {what}"
                ));
            }
        }
        let mut values = BTreeSet::new();
        if self.peek() == Some(Token::Close) {
            return Err(format!("the list of values after {what} is empty"));
        }
        loop {
            match self.next() {
                Some(Token::Word(value)) => {
                    label_value(value)?;
                    values.insert(value.to_string());
                }
                Some(Token::Comma | Token::Close) => {
                    return Err(format!("an empty value in the list after {what}"));
                }
                Some(token) => {
                    return Err(format!(
                        "found {} in the list after {what} where a value was expected",
                        token.describe()
                    ));
                }
                None => return Err(format!("the list after {what} has no closing ')'")),
            }
            match self.next() {
                Some(Token::Comma) => {}
                Some(Token::Close) => return Ok(values),
                Some(token) => {
                    return Err(format!(
                        "found {} in the list after {what} where ',' or ')' was expected",
                        token.describe()
                    ));
                }
                None => return Err(format!("the list after {what} has no closing ')'")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        for value in ["", "   ", ",, ,", " , ,\t,"] {
            let list = reflector(value);
            assert!(list.is_empty(), "{value:?}");
            assert!(list.invalid().is_empty(), "{value:?}");
            assert!(list.entries().is_empty(), "{value:?}");
            assert!(!list.matches("default"), "{value:?}");
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
}
