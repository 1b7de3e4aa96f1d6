//! The ComfyUI extension (`extension/`) repeats a few names the program owns: the outcome
//! kinds the panel titles, the files of a session folder it reads, the form a bundle is filed
//! at. These tests fail when the two sides disagree.

use std::collections::BTreeSet;
use std::path::Path;
use vrambisect::outcome::Outcome;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The keys of a JavaScript object literal `const NAME = { key: "...", ... };` in the panel.
fn object_keys(js: &str, name: &str) -> BTreeSet<String> {
    let start = js
        .find(&format!("const {name} = {{"))
        .unwrap_or_else(|| panic!("no `const {name}` in the panel"));
    let body = &js[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("};").unwrap()];
    body.lines()
        .filter_map(|l| l.trim().split_once(':').map(|(k, _)| k.trim().to_string()))
        .filter(|k| !k.is_empty())
        .collect()
}

/// The strings of `const NAME = new Set([...]);` in the panel.
fn set_items(js: &str, name: &str) -> BTreeSet<String> {
    let start = js
        .find(&format!("const {name} = new Set(["))
        .unwrap_or_else(|| panic!("no `const {name}` in the panel"));
    let body = &js[start..];
    let body = &body[body.find('[').unwrap() + 1..body.find("])").unwrap()];
    body.split(',')
        .map(|s| s.trim().trim_matches('"').to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[test]
fn the_panel_titles_every_outcome_and_names_no_other() {
    let js = read("extension/web/vrambisect.js");
    let outcomes: BTreeSet<String> = Outcome::ALL.iter().map(|o| o.as_str().into()).collect();
    let titled = object_keys(&js, "KINDS");
    assert_eq!(
        titled, outcomes,
        "the panel's KINDS and src/outcome.rs differ"
    );
    let memory = set_items(&js, "MEMORY");
    assert!(!memory.is_empty());
    for m in &memory {
        assert!(
            outcomes.contains(m),
            "MEMORY names {m:?}, which is no outcome"
        );
        let o = Outcome::ALL.iter().find(|o| o.as_str() == m).unwrap();
        assert!(o.is_failure(), "MEMORY names {m:?}, which is no failure");
    }
}

#[test]
fn the_extension_reads_the_session_files_by_the_programs_names() {
    let py = read("extension/core.py");
    let names = vrambisect::session::file_names();
    let bisect = |what: &str| names["bisect"][what].as_str().unwrap().to_string();
    for (constant, value) in [
        ("SPEC_FILE", bisect("spec")),
        ("PROGRESS_FILE", bisect("progress")),
    ] {
        let line = format!("{constant} = \"{value}\"");
        assert!(py.contains(&line), "extension/core.py lacks `{line}`");
    }
    // No other spelling of those names elsewhere in the extension's Python.
    for f in ["extension/core.py", "extension/routes.py"] {
        let text = read(f);
        for value in [bisect("spec"), bisect("progress"), bisect("journal")] {
            let value = value.as_str();
            let uses = text.matches(&format!("\"{value}\"")).count();
            let allowed = usize::from(f.ends_with("core.py") && value != "journal.jsonl");
            assert_eq!(uses, allowed, "{f} spells {value:?} {uses} times");
        }
    }
}

#[test]
fn the_panel_links_the_form_the_bundle_names() {
    let js = read("extension/web/vrambisect.js");
    let py = read("extension/core.py");
    // The form comes from `report --json` (issue_form); neither side writes an address of it.
    for (f, text) in [("vrambisect.js", &js), ("core.py", &py)] {
        assert!(
            !text.contains("/issues/new"),
            "{f} writes the bug form's address itself"
        );
    }
    assert!(vrambisect::report::ISSUE_FORM.starts_with("https://github.com/Comfy-Org/ComfyUI/"));
}
