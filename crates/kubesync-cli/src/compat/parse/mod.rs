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
//!   (counted as no match), at most [`MAX_BACKTRACKING_PATTERNS`] of them per list: a tenant's
//!   list of 100 exponential patterns costs the operator 8 bounded searches per namespace.
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
pub const BACKTRACK_LIMIT: usize = 10_000;
/// Most entries of one pattern list that need backtracking (lookaround, backreferences); the
/// rest are invalid. With [`BACKTRACK_LIMIT`], one namespace's check against a list costs at
/// most this many bounded searches: what a tenant's annotation can spend of the operator's CPU
/// per namespace, whatever its patterns (the others run in linear time).
pub const MAX_BACKTRACKING_PATTERNS: usize = 8;
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
            // An error while searching (the backtracking limit) is no match; nor is a name
            // longer than any namespace's (a DNS label: 63 characters), which is not searched.
            Matcher::SpanningFancy(re) => {
                namespace.len() <= 63
                    && matches!(re.find(namespace), Ok(Some(m)) if spans(m.start(), m.end()))
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
    /// Whether the value as written is blank (empty or white space only).
    blank: bool,
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
            blank: dialect == Dialect::Reflector && value.trim().is_empty(),
        };
        let mut backtracking = 0;
        for entry in entries.iter().take(MAX_PATTERNS) {
            match compile(dialect, entry) {
                Ok(Matcher::SpanningFancy(_)) if backtracking == MAX_BACKTRACKING_PATTERNS => {
                    list.invalid.push((
                        (*entry).to_string(),
                        format!(
                            "needs backtracking (lookaround or a backreference), and a list may have at most {MAX_BACKTRACKING_PATTERNS} such patterns"
                        ),
                    ));
                }
                Ok(matcher) => {
                    backtracking += usize::from(matches!(matcher, Matcher::SpanningFancy(_)));
                    list.valid.push(((*entry).to_string(), matcher));
                }
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

    /// Whether the value is blank: for reflector, an empty (or white-space) value, which
    /// reflector reads as "all namespaces" (the caller decides). A value of only commas (`,`,
    /// `, ,`) is not blank: its entries, dropped as empty, leave a list that matches no
    /// namespace — as reflector, which tests the value before it splits it, reads it — never
    /// every namespace. For replicator always false: its empty value is one empty entry, which
    /// matches nothing.
    pub fn is_empty(&self) -> bool {
        self.blank
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
mod tests;
