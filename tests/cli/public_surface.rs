//! The library's public surface is what something outside it uses: the binary, the benches,
//! the fuzz targets, the examples and these tests. `#![warn(unreachable_pub)]` (an error
//! under clippy in CI) keeps every item of a private module `pub(crate)`; this test keeps the
//! public modules themselves to that list, and each of them used from outside.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The public modules, by path, and who uses each.
const PUBLIC: &[(&str, &str)] = &[
    ("app", "the binary"),
    ("bisect", "benches, tests"),
    ("bisect::scripted", "benches, tests: the scripted oracle"),
    ("bisect::search", "benches, tests"),
    ("bisect::session", "fuzz: the journal"),
    ("bisect::space", "benches, tests"),
    ("classify", "fuzz, tests"),
    ("classify::normalize", "fuzz"),
    ("cli", "tests: the parser"),
    ("comfy", "fuzz"),
    ("comfy::events", "fuzz"),
    ("duration", "tests"),
    ("flags", "benches, fuzz, tests"),
    ("flags::argparse", "fuzz, tests"),
    ("flags::decide", "tests"),
    ("flags::help", "fuzz, tests"),
    ("flags::profile", "tests"),
    ("launcher", "fuzz"),
    ("logscan", "benches, fuzz"),
    ("logscan::prefilter", "benches"),
    ("logscan::reader", "benches, fuzz"),
    ("outcome", "tests"),
    ("output", "tests"),
    ("process", "tests: the guardian"),
    ("regress", "benches"),
    ("regress::search", "benches"),
    ("report", "tests"),
    ("report::plot", "tests, examples"),
    ("report::plot::colors", "tests"),
    ("report::redact", "tests"),
    ("run", "tests"),
    ("sampler", "tests"),
    ("sampler::comfy", "tests"),
    ("sampler::cuda", "tests, examples"),
    ("sampler::nvml", "tests"),
    ("sampler::probe", "tests"),
    ("sampler::proctree", "tests"),
    ("sampler::system", "tests"),
    ("sampler::writer", "tests"),
    ("session", "tests"),
    ("size", "tests"),
    ("startup", "fuzz"),
    ("workflow", "fuzz"),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a source file (`src/bisect/search.rs` → `bisect::search`).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(root().join("src")).unwrap();
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts.join("::")
}

/// Every `pub mod NAME` of the library (not `pub(crate)`), by path. A public module inside a
/// private one is not public: only chains of public modules from the root count.
fn public_modules() -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    let mut declared: BTreeSet<String> = BTreeSet::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let parent = module_of(f);
        for line in text.lines() {
            // Top level, or one level in (an inline module such as `plot::colors`).
            let Some(rest) = line
                .strip_prefix("pub mod ")
                .or_else(|| line.strip_prefix("    pub mod "))
            else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let path = match (parent.as_str(), line.starts_with(' ')) {
                ("", _) => name,
                // An inline module one level in belongs to the file's module.
                (p, _) => format!("{p}::{name}"),
            };
            declared.insert(path);
        }
    }
    // Only the chains that start at the root.
    declared
        .iter()
        .filter(|m| {
            let parts: Vec<&str> = m.split("::").collect();
            (1..parts.len()).all(|n| declared.contains(&parts[..n].join("::")))
        })
        .cloned()
        .collect()
}

/// What is outside the library: the binary, the benches, the fuzz targets, the examples,
/// the tests.
fn outside() -> String {
    let mut files = vec![root().join("src/main.rs")];
    for dir in ["benches", "fuzz/fuzz_targets", "examples", "tests"] {
        rust_files(&root().join(dir), &mut files);
    }
    files
        .iter()
        // This file names every module.
        .filter(|f| !f.ends_with("public_surface.rs"))
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_public_modules_are_the_listed_ones() {
    let listed: BTreeSet<String> = PUBLIC.iter().map(|(m, _)| m.to_string()).collect();
    let declared = public_modules();
    let extra: Vec<&String> = declared.difference(&listed).collect();
    let gone: Vec<&String> = listed.difference(&declared).collect();
    assert!(
        extra.is_empty(),
        "public modules nothing outside the library was said to use: {extra:?} (make them pub(crate), or list them here with their users)"
    );
    assert!(gone.is_empty(), "listed but not public: {gone:?}");
}

#[test]
fn every_public_module_is_used_from_outside_the_library() {
    let text = outside();
    for (module, _) in PUBLIC {
        let last = module.rsplit("::").next().unwrap();
        let parent = module.rsplit_once("::").map(|(p, _)| p);
        let named = text.contains(&format!("vrambisect::{module}"))
            || parent.is_some_and(|p| {
                // `use vrambisect::flags::{argparse, help}` names argparse and help.
                text.match_indices(&format!("vrambisect::{p}::{{"))
                    .any(|(i, _)| {
                        let list = &text[i..];
                        let list = &list[..list.find('}').unwrap_or(list.len())];
                        list.split([',', '{', ' ', '\n'])
                            .any(|w| w == last || w.starts_with(&format!("{last}::")))
                    })
            });
        assert!(
            named,
            "{module} is public, but nothing outside the library uses it"
        );
    }
}
