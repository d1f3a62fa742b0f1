//! The generated reference pages are the generators' output: `make reference` writes them
//! (`KUBESYNC_UPDATE_REFERENCE=1`), and this test fails when a committed page differs.

use std::path::PathBuf;

fn page(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/src/reference")
        .join(name)
}

/// Checks (or, under `make reference`, writes) the generated page `name`.
fn check_page(name: &str, generated: &str, what: &str) {
    let path = page(name);
    if std::env::var("KUBESYNC_UPDATE_REFERENCE").as_deref() == Ok("1") {
        std::fs::write(&path, generated).expect("write the page");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from {what}: run `make reference`",
        path.display()
    );
}

#[test]
fn the_crd_fields_page_is_generated_from_the_schemas() {
    let generated = kubesync_cli::crd::fields_reference();
    check_page("crd-fields.md", &generated, "the CRDs' schemas");
}

#[test]
fn the_flags_page_is_generated_from_the_command_line() {
    let generated = kubesync_cli::cli::flags_reference();
    check_page("flags.md", &generated, "the command line's definitions");
    // Every flag of `kubesync run` is there.
    for flag in [
        "--metrics-address",
        "--trusted-namespace",
        "--leader-elect",
        "--log-format",
    ] {
        assert!(generated.contains(flag), "{flag} missing");
    }
}

/// Replaces the part of `page` between its `begin generated` and `end generated` markers with
/// `generated`.
fn with_generated(page: &str, generated: &str) -> String {
    let (begin, end) = ("<!-- begin generated -->\n", "<!-- end generated -->");
    let a = page.find(begin).expect("the page has a begin marker") + begin.len();
    let b = page.find(end).expect("the page has an end marker");
    format!("{}{generated}{}", &page[..a], &page[b..])
}

/// Checks (or, under `make reference`, writes) the page `name` whose generated part is
/// `generated`.
fn check_part(name: &str, generated: &str, what: &str) {
    let path = page(name);
    let committed = std::fs::read_to_string(&path).expect("the page exists");
    let expected = with_generated(&committed, generated);
    if std::env::var("KUBESYNC_UPDATE_REFERENCE").as_deref() == Ok("1") {
        std::fs::write(&path, &expected).expect("write the page");
        return;
    }
    assert!(
        committed == expected,
        "{} differs from {what}: run `make reference`",
        path.display()
    );
}

#[test]
fn the_metrics_page_is_generated_from_the_catalog_the_registry_uses() {
    let generated = kubesync_cli::telemetry::catalog::reference();
    for e in kubesync_cli::telemetry::catalog::ALL {
        assert!(
            generated.contains(&format!("| `{}` |", e.name)),
            "{}",
            e.name
        );
    }
    check_part("metrics.md", &generated, "the metrics catalog");
}

#[test]
fn the_table_of_fields_never_copied_is_the_rules() {
    use kubesync::syncers::fan_out::rules::allocated::RULES;
    let mut generated =
        String::from("| kind | field | why | a patch may set it |\n| --- | --- | --- | --- |\n");
    for r in RULES {
        let kind = match r.group {
            "" => r.kind.to_string(),
            group => format!("{}.{group}", r.kind),
        };
        let field = match r.path {
            ["metadata", map, key] => format!("{} `{key}`", map.trim_end_matches('s')),
            path => {
                let mut out = String::new();
                for (i, p) in path.iter().enumerate() {
                    match *p {
                        "*" => out.push_str("[]"),
                        p if p.contains(['.', '/']) => out.push_str(&format!("[\"{p}\"]")),
                        p if i == 0 => out.push_str(p),
                        p => out.push_str(&format!(".{p}")),
                    }
                }
                format!("`{out}`")
            }
        };
        generated.push_str(&format!(
            "| {kind} | {field} | {} | {} |\n",
            r.why,
            if r.pinnable { "yes" } else { "no" }
        ));
    }
    check_part(
        "../guide/objectsync.md",
        &generated,
        "the allocated-field rules",
    );
}
