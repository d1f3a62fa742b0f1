//! The generated reference pages are the generators' output: `make reference` writes them
//! (`KUBESYNC_UPDATE_REFERENCE=1`), and this test fails when a committed page differs.

use std::path::PathBuf;

fn page(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs/src/reference")
        .join(name)
}

#[test]
fn the_flags_page_is_generated_from_the_command_line() {
    let generated = kubesync_cli::cli::flags_reference();
    let path = page("flags.md");
    if std::env::var("KUBESYNC_UPDATE_REFERENCE").as_deref() == Ok("1") {
        std::fs::write(&path, &generated).expect("write the page");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} differs from the command line's definitions: run `make reference`",
        path.display()
    );
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
