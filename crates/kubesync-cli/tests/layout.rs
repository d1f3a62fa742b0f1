//! The layout (docs/src/design/architecture.md), checked for all three crates:
//!
//! - within each crate no module imports one that imports it back, directly or through others
//!   (references are `crate::…` paths and `super::…` paths outside comments and test modules;
//!   a module's own submodules and parents do not count);
//! - the architecture map has a row for every module of each crate (as the files under `src/`
//!   lay them out, files named `tests.rs` aside), and names no module that does not exist;
//! - no source file is over 800 lines, but the two pure plan modules;
//! - no function is over 80 lines (test modules aside); [`STILL_LONG`], the list of
//!   exceptions, is empty, and an entry that is no longer over 80 lines fails too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose sources are checked, under `crates/`.
const CRATES: [&str; 3] = ["kubesync", "kubesync-cli", "kubesync-testenv"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a::b` for `src/a/b.rs` or `src/a/b/mod.rs`; `None` for the crate root.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    let name = parts.join("::");
    (!matches!(name.as_str(), "lib" | "main" | "")).then_some(name)
}

/// The code of a file without comments and without its `#[cfg(test)]` module (by convention
/// the file's last item).
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after `prefix` in `code`: `prefix a::b::C` gives `a::b::C`.
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    code.match_indices(prefix)
        .filter(|(i, _)| {
            *i == 0
                || !code[..*i]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
        .map(|(i, _)| {
            let rest = &code[i + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end].trim_end_matches(':')
        })
        .collect()
}

/// The longest known module that `path` names.
fn resolve(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains(m))
}

fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let texts: BTreeMap<String, String> = files
        .iter()
        .filter_map(|f| Some((module_of(src, f)?, code(&std::fs::read_to_string(f).ok()?))))
        .collect();
    let modules: BTreeSet<String> = texts.keys().cloned().collect();
    let related = |a: &str, b: &str| {
        a == b || a.starts_with(&format!("{b}::")) || b.starts_with(&format!("{a}::"))
    };
    let mut edges = BTreeMap::new();
    for (module, code) in &texts {
        let parent = module.rsplit_once("::").map(|(p, _)| p.to_string());
        let mut to = BTreeSet::new();
        for path in paths_after(code, "crate::") {
            if let Some(m) = resolve(path, &modules) {
                to.insert(m);
            }
        }
        for path in paths_after(code, "super::") {
            let full = match &parent {
                Some(p) => format!("{p}::{path}"),
                None => path.to_string(),
            };
            if let Some(m) = resolve(&full, &modules) {
                to.insert(m);
            }
        }
        to.retain(|m| !related(module, m));
        edges.insert(module.clone(), to);
    }
    edges
}

/// A cycle through the graph, if there is one.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        at: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut found = path[i..].to_vec();
            found.push(at.to_string());
            return Some(found);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for next in edges.get(at).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|m| visit(m, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for krate in CRATES {
        let edges = graph(&root.join("crates").join(krate).join("src"));
        assert!(edges.len() > 3, "{krate}: too few modules found");
        if let Some(c) = cycle(&edges) {
            panic!("{krate}: an import circle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_check_finds_a_circle() {
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        cycle(&edges).expect("a circle"),
        ["a", "b", "c", "a"].map(String::from)
    );
    assert_eq!(
        paths_after("use crate::x::Y; my_crate::z; crate::w", "crate::"),
        ["x::Y", "w"]
    );
}

/// A file a newcomer can read in one sitting: no source file over 800 lines, but the two
/// pure plan modules (whose unit tests sit beside the decisions they test).
#[test]
fn no_source_file_is_over_800_lines_but_the_plans() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let exempt = [
        "kubesync/src/syncers/fan_out/plan.rs",
        "kubesync/src/syncers/spec_status/plan.rs",
    ];
    let mut long = Vec::new();
    for krate in CRATES {
        let mut files = Vec::new();
        sources(&root.join("crates").join(krate).join("src"), &mut files);
        for file in files {
            let name = file
                .strip_prefix(root.join("crates"))
                .expect("under crates")
                .to_string_lossy()
                .into_owned();
            let lines = std::fs::read_to_string(&file)
                .expect("read")
                .lines()
                .count();
            if lines > 800 && !exempt.contains(&name.as_str()) {
                long.push(format!("{name}: {lines} lines"));
            }
        }
    }
    assert!(long.is_empty(), "split these along their seams: {long:?}");
}

/// The modules of a crate, as its files under `src` lay them out; `tests.rs` files are test
/// modules and do not count.
fn crate_modules(src: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    sources(src, &mut files);
    files
        .iter()
        .filter(|f| f.file_name().is_none_or(|n| n != "tests.rs"))
        .filter_map(|f| module_of(src, f))
        .collect()
}

/// `a, b::{c, d}, e` split at its commas outside braces; each part trimmed, empty ones dropped.
fn split_top(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut from) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[from..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

/// The modules the first cell of a row of the map names: backticks dropped, a comma list
/// split, `a::{b, c::d}` expanded to `a::b` and `a::c::d` (braces may nest), and `mod` in
/// braces standing for `a` itself.
fn expand(cell: &str) -> Vec<String> {
    let cell = cell.replace('`', "");
    let mut out = Vec::new();
    for item in split_top(&cell) {
        match (item.find('{'), item.rfind('}')) {
            (Some(open), Some(close)) if open < close => {
                let prefix = item[..open].trim().trim_end_matches("::");
                for inner in expand(&item[open + 1..close]) {
                    out.push(if inner == "mod" {
                        prefix.to_string()
                    } else if prefix.is_empty() {
                        inner
                    } else {
                        format!("{prefix}::{inner}")
                    });
                }
            }
            _ => out.push(item.to_string()),
        }
    }
    out
}

/// The modules the map's rows name, by crate: the rows after a crate's bold
/// `**`crates/<name>`**` row, until the next crate's or the first row whose first cell names a
/// path (`config/`, `.ci/run`, …). A first cell in parentheses is a remark, not a module.
fn map_rows(map: &str) -> BTreeMap<String, Vec<String>> {
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut krate: Option<String> = None;
    for line in map.lines().filter(|l| l.starts_with('|')) {
        let first = line.split('|').nth(1).unwrap_or_default().trim();
        if let Some(rest) = first.strip_prefix("**`crates/") {
            let name = rest.split('`').next().unwrap_or_default().to_string();
            rows.entry(name.clone()).or_default();
            krate = Some(name);
        } else if first.contains('/') {
            krate = None;
        } else if let Some(k) = &krate
            && !first.starts_with('(')
        {
            rows.entry(k.clone()).or_default().extend(expand(first));
        }
    }
    rows
}

/// What is wrong with the map's rows of one crate: each module with no row, then each module
/// a row names that does not exist.
fn map_problems(krate: &str, modules: &BTreeSet<String>, named: &[String]) -> Vec<String> {
    let named: BTreeSet<&String> = named.iter().collect();
    let mut problems: Vec<String> = modules
        .iter()
        .filter(|m| !named.contains(m))
        .map(|m| format!("{krate}: module `{m}` has no row"))
        .collect();
    problems.extend(
        named
            .iter()
            .filter(|m| !modules.contains(**m))
            .map(|m| format!("{krate}: a row names `{m}`, which does not exist")),
    );
    problems
}

#[test]
fn the_map_has_a_row_for_every_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = "docs/src/design/architecture.md";
    let map = std::fs::read_to_string(root.join(path)).expect("read the map");
    let rows = map_rows(&map);
    let mut problems = Vec::new();
    for krate in CRATES {
        let modules = crate_modules(&root.join("crates").join(krate).join("src"));
        assert!(modules.len() > 3, "{krate}: too few modules found");
        let named = rows
            .get(krate)
            .unwrap_or_else(|| panic!("{path}: no **`crates/{krate}`** row"));
        problems.extend(map_problems(krate, &modules, named));
    }
    assert!(
        problems.is_empty(),
        "{path}: the table does not match the modules (a row's first cell names them: \
         `a::{{b, c::d}}`, `mod` for `a` itself):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_map_check_finds_a_missing_row_and_a_row_too_many() {
    let map = "\
| module | owns | must never |
| --- | --- | --- |
| **`crates/a`** (the first) | | |
| `b::{mod, c, d::{e, f}}`, `g` | | |
| (every module) | | |
| `gone` | | |
| **`crates/z`** | | |
| `y` | | |
| `config/` | | |
| `x` | | |
";
    let rows = map_rows(map);
    assert_eq!(rows["a"], ["b", "b::c", "b::d::e", "b::d::f", "g", "gone"]);
    assert_eq!(rows["z"], ["y"]);
    let modules =
        BTreeSet::from(["b", "b::c", "b::d", "b::d::e", "b::d::f", "g"].map(String::from));
    let problems = map_problems("a", &modules, &rows["a"]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].contains("`b::d` has no row"), "{problems:?}");
    assert!(
        problems[1].contains("`gone`, which does not exist"),
        "{problems:?}"
    );
    assert!(map_problems("z", &BTreeSet::from(["y".to_string()]), &rows["z"]).is_empty());
}

/// The functions allowed over 80 lines: (file under `crates/`, name). None: a long function is
/// split along its seams, never listed here.
const STILL_LONG: &[(&str, &str)] = &[];

/// `text` (Rust source) with comments, string literals and char literals blanked out: each of
/// their characters a space, but newlines kept, so lines and columns stay where they were.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let after_ident = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let end = if c == '/' && next == Some('/') {
            chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p)
        } else if c == '/' && next == Some('*') {
            block_comment_end(&chars, i)
        } else if !after_ident && let Some(end) = raw_string_end(&chars, i) {
            end
        } else if c == '"' {
            string_end(&chars, i)
        } else if c == 'b' && next == Some('"') && !after_ident {
            string_end(&chars, i + 1)
        } else if c == '\''
            && let Some(end) = char_literal_end(&chars, i)
        {
            end
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        out.extend(
            chars[i..end]
                .iter()
                .map(|&c| if c == '\n' { '\n' } else { ' ' }),
        );
        i = end;
    }
    out
}

/// Where the (nested) block comment that starts at `start` ends.
fn block_comment_end(chars: &[char], start: usize) -> usize {
    let (mut depth, mut i) = (0, start);
    while i < chars.len() {
        if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    chars.len()
}

/// Where the raw string (`r"…"`, `r#"…"#`, `br"…"`) that starts at `start` ends; `None` when
/// none starts there.
fn raw_string_end(chars: &[char], start: usize) -> Option<usize> {
    let mut i = start + usize::from(chars.get(start) == Some(&'b'));
    if chars.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
    i += hashes;
    if chars.get(i) != Some(&'"') {
        return None;
    }
    i += 1;
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(chars.len())
}

/// Where the string whose opening quote is at `quote` ends.
fn string_end(chars: &[char], quote: usize) -> usize {
    let mut i = quote + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    chars.len()
}

/// Where the char literal (`'x'`, `'\n'`, `'\''`, `'\u{7f}'`) that starts at `start` ends;
/// `None` for a lifetime or a label.
fn char_literal_end(chars: &[char], start: usize) -> Option<usize> {
    if *chars.get(start + 1)? == '\\' {
        let rest = chars.get(start + 3..)?;
        return rest
            .iter()
            .position(|&c| c == '\'')
            .map(|p| start + 3 + p + 1);
    }
    (chars.get(start + 2) == Some(&'\'')).then_some(start + 3)
}

/// The name of the function a line of code starts, after any of `pub`, `pub(…)`, `const`,
/// `async`, `unsafe`, `default`, `extern` (its ABI string blanked).
fn fn_name(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    if words
        .peek()
        .is_some_and(|w| *w == "pub" || w.starts_with("pub("))
    {
        let first = words.next()?;
        if first.starts_with("pub(") && !first.contains(')') {
            words.find(|w| w.contains(')'))?;
        }
    }
    let word =
        words.find(|w| !matches!(*w, "const" | "async" | "unsafe" | "default" | "extern"))?;
    if word != "fn" {
        return None;
    }
    let next = words.next()?;
    let name = &next[..next
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(next.len())];
    name.starts_with(|c: char| c.is_alphabetic() || c == '_')
        .then_some(name)
}

/// Whether a line declares a module (`mod x;`, `pub(crate) mod x {`).
fn is_mod_line(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["mod", ..] => true,
        [vis, "mod", ..] => *vis == "pub" || vis.starts_with("pub("),
        _ => false,
    }
}

/// Each function of a source file with a body: (line of its `fn`, name, length in lines from
/// that line to the line of its closing brace). Braces in comments, strings and char literals
/// do not count; a declaration that ends in `;` has no body. The test module (from a
/// `#[cfg(test)]` line followed, after any attributes, by a `mod` line, to the end of the
/// file) is left out.
fn function_lengths(text: &str) -> Vec<(usize, String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let tests = (0..lines.len()).find(|&i| {
        lines[i].trim() == "#[cfg(test)]"
            && lines[i + 1..]
                .iter()
                .find(|l| !l.trim_start().starts_with("#["))
                .is_some_and(|l| is_mod_line(l))
    });
    let code = blank_literals(&lines[..tests.unwrap_or(lines.len())].join("\n"));
    let chars: Vec<char> = code.chars().collect();
    let mut starts = vec![0];
    starts.extend(
        chars
            .iter()
            .enumerate()
            .filter(|(_, c)| **c == '\n')
            .map(|(i, _)| i + 1),
    );
    let line_of = |at: usize| starts.partition_point(|&s| s <= at) - 1;
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let Some(name) = fn_name(line) else {
            continue;
        };
        // The body: the first `{` outside parentheses and brackets, unless a `;` comes first.
        let mut depth = 0i32;
        let mut body = None;
        for (i, c) in chars.iter().enumerate().skip(starts[n]) {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '{' if depth == 0 => {
                    body = Some(i);
                    break;
                }
                ';' if depth == 0 => break,
                _ => {}
            }
        }
        let Some(body) = body else {
            continue;
        };
        let mut depth = 0;
        let mut end = chars.len().saturating_sub(1);
        for (i, c) in chars.iter().enumerate().skip(body) {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        found.push((n + 1, name.to_string(), line_of(end) - n + 1));
    }
    found
}

/// What is wrong with the functions over 80 lines, (file, line, name, length), given the list
/// of those still allowed: each one not listed, then each listed one no longer over 80 lines.
fn long_function_problems(
    over: &[(String, usize, String, usize)],
    still_long: &[(&str, &str)],
) -> Vec<String> {
    let mut problems: Vec<String> = over
        .iter()
        .filter(|(file, _, name, _)| {
            !still_long
                .iter()
                .any(|&(f, n)| f == file.as_str() && n == name.as_str())
        })
        .map(|(file, line, name, length)| {
            format!("{file}:{line}: fn {name} is {length} lines (over 80): split it")
        })
        .collect();
    problems.extend(
        still_long
            .iter()
            .filter(|(file, name)| {
                !over
                    .iter()
                    .any(|(f, _, n, _)| f.as_str() == *file && n.as_str() == *name)
            })
            .map(|(file, name)| {
                format!(
                    "{file}: fn {name} is no longer over 80 lines: remove its entry from STILL_LONG"
                )
            }),
    );
    problems
}

/// A function a reader can follow in one screen: none over 80 lines ([`STILL_LONG`] is empty).
#[test]
fn no_function_is_over_80_lines() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut over = Vec::new();
    for krate in CRATES {
        let mut files = Vec::new();
        sources(&crates.join(krate).join("src"), &mut files);
        files.sort();
        for file in files
            .iter()
            .filter(|f| f.file_name().is_none_or(|n| n != "tests.rs"))
        {
            let name = file
                .strip_prefix(&crates)
                .expect("under crates")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(file).expect("read");
            for (line, function, length) in function_lengths(&text) {
                if length > 80 {
                    over.push((name.clone(), line, function, length));
                }
            }
        }
    }
    let problems = long_function_problems(&over, STILL_LONG);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_length_check_counts_code_braces_only() {
    let text = r#"
pub(crate) async fn first(x: [u8; 2]) -> String {
    let open = "{ {"; // a brace in a string {
    // } a brace in a comment
    let (c, q) = ('}', '\'');
    let r = r"}}";
    let l: &'static str = "\"}";
    format!("{open}{c}{q}{r}{l}{x:?}")
}

fn declared_only(&self) -> Result<(), String>;

impl A {
    const fn second() {}
}

#[cfg(test)]
mod tests {
    fn not_counted() {
    }
}
"#;
    let expected: Vec<(usize, String, usize)> =
        vec![(2, "first".to_string(), 8), (14, "second".to_string(), 1)];
    assert_eq!(function_lengths(text), expected);
    let over: [(String, usize, String, usize); 2] = [
        ("a/src/x.rs".to_string(), 3, "long".to_string(), 90),
        ("a/src/x.rs".to_string(), 200, "listed".to_string(), 85),
    ];
    let problems =
        long_function_problems(&over, &[("a/src/x.rs", "listed"), ("a/src/y.rs", "split")]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].starts_with("a/src/x.rs:3: fn long is 90 lines"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("fn split is no longer over 80 lines"),
        "{problems:?}"
    );
}
