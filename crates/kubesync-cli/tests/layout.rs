//! The layout's rule, checked: within each crate no module imports one that imports it back,
//! directly or through others (docs/src/design/architecture.md). References are `crate::…`
//! paths and `super::…` paths outside comments and test modules; a module's own submodules
//! and parents do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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
    for krate in ["kubesync", "kubesync-cli", "kubesync-testenv"] {
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
    for krate in ["kubesync", "kubesync-cli", "kubesync-testenv"] {
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
