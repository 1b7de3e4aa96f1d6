//! The ComfyUI extension (`extension/`) asks the program for what the program owns
//! (`vrambisect extension facts`): the outcomes and their headlines, the files of a session
//! folder, the flags a diagnosis leaves out, the line that starts the install. These tests
//! fail when the two sides disagree: a key the Python reads that the program does not answer,
//! or a name the extension spells itself.

use std::collections::BTreeSet;
use std::path::Path;
use vrambisect::outcome::Outcome;

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `vrambisect extension facts --json` for the stand-in, with these server flags.
fn facts(argv: &[&str]) -> serde_json::Value {
    let out = crate::support::vrambisect()
        .args(["extension", "facts", "--json", "--comfyui"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-comfyui"))
        .arg("--")
        .args(argv)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The string literals of a source file (double-quoted, no escapes inside), its docstrings and
/// comment lines left out.
fn literals(text: &str) -> BTreeSet<String> {
    let code: String = text
        .split("\"\"\"")
        .step_by(2)
        .flat_map(str::lines)
        .filter(|l| {
            let l = l.trim_start();
            !l.starts_with('#') && !l.starts_with("//")
        })
        .collect::<Vec<_>>()
        .join("\n");
    code.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// The key chains `["a"]["b"]` that follow `facts()` or `facts(...)` in the Python.
fn facts_reads(py: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in py.match_indices("facts(") {
        let rest = &py[i + "facts(".len()..];
        // The call's own parentheses, then the subscripts right after them.
        let mut depth = 1;
        let Some(close) = rest.char_indices().find_map(|(j, c)| {
            depth += match c {
                '(' => 1,
                ')' => -1,
                _ => 0,
            };
            (depth == 0).then_some(j)
        }) else {
            continue;
        };
        let mut after = &rest[close + 1..];
        let mut keys = Vec::new();
        while let Some(r) = after.strip_prefix("[\"") {
            let Some(end) = r.find("\"]") else { break };
            keys.push(r[..end].to_string());
            after = &r[end + 2..];
        }
        if !keys.is_empty() {
            out.push(keys);
        }
    }
    out
}

#[test]
fn the_extension_reads_what_the_program_answers() {
    let py = read("extension/core.py");
    let answer = facts(&["--listen", "0.0.0.0", "--highvram"]);
    let reads = facts_reads(&py);
    // flags/tested, flags/left_out, session_files/bisect, outcomes, launch at least.
    assert!(reads.len() >= 5, "{reads:?}");
    for keys in &reads {
        let mut at = &answer;
        for k in keys {
            at = at
                .get(k)
                .unwrap_or_else(|| panic!("core.py reads facts{keys:?}; the program has no {k:?}"));
        }
    }
    // The outcome entries and the session files it asks for by name.
    let outcome = &answer["outcomes"][0];
    for key in ["name", "title", "flags_may_fix"] {
        assert!(
            py.contains(&format!("o[\"{key}\"]")),
            "core.py does not read {key}"
        );
        assert!(
            outcome.get(key).is_some(),
            "the program's outcomes lack {key}"
        );
    }
    for (name, used) in [
        ("spec", "session_file(\"spec\""),
        ("progress", "session_file(\"progress\""),
    ] {
        assert!(py.contains(used), "core.py no longer asks for {name}");
        assert!(answer["session_files"]["bisect"][name].is_string());
    }
    assert_eq!(answer["flags"]["tested"], serde_json::json!(["--highvram"]));
    assert_eq!(
        answer["flags"]["left_out"],
        serde_json::json!(["--listen", "0.0.0.0"])
    );
    assert_eq!(answer["session_files"], vrambisect::session::file_names());
}

#[test]
fn the_extension_repeats_no_name_the_program_owns() {
    let js = read("extension/web/vrambisect.js");
    let answer = facts(&[]);
    let outcomes: BTreeSet<String> = Outcome::ALL.iter().map(|o| o.as_str().into()).collect();
    let listed = answer["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["name"].as_str().unwrap().to_string())
        .collect::<BTreeSet<_>>();
    assert_eq!(listed, outcomes);
    // The panel asks for a few outcomes by name; each must be one the program has, and it
    // keeps no list of them.
    let named: BTreeSet<String> = literals(&js).intersection(&outcomes).cloned().collect();
    let asked: BTreeSet<String> = ["pass", "hang", "interrupted"].map(String::from).into();
    assert_eq!(
        named, asked,
        "the panel names outcomes beyond those it asks the program's headline of"
    );
    for title in answer["outcomes"].as_array().unwrap() {
        let title = title["title"].as_str().unwrap();
        assert!(
            !js.contains(title),
            "the panel writes the headline {title:?} itself"
        );
    }
    // The Python spells no session file, no flag a diagnosis leaves out, no install layout.
    let names = vrambisect::session::file_names();
    let mut owned: Vec<String> = Vec::new();
    for kind in ["bisect", "regress"] {
        owned.extend(
            names[kind]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_str().unwrap().to_string())
                // Files; a folder's bare name (`runs`, `bisect`) is a common word too.
                .filter(|v| v.contains('.')),
        );
    }
    // (`--listen` is read by the routes' own guard, which must hold without the program.)
    owned.extend(
        vrambisect::flags::SERVER_ONLY
            .iter()
            .filter(|f| **f != "--listen")
            .map(|f| f.to_string()),
    );
    owned.extend(["python_embeded", "run_nvidia_gpu.bat", "Server-Config"].map(String::from));
    for f in [
        "extension/core.py",
        "extension/routes.py",
        "extension/web/vrambisect.js",
    ] {
        let text = read(f);
        for name in &owned {
            let spelled = literals(&text).iter().any(|l| l.contains(name.as_str()));
            assert!(!spelled, "{f} spells {name:?}, which the program owns");
        }
    }
    let py = read("extension/core.py");
    let guard = &py[py.find("def listens_on_loopback_only").unwrap()..];
    let guard = &guard[..guard.find("\ndef ").unwrap()];
    assert_eq!(
        py.matches("\"--listen").count(),
        guard.matches("\"--listen").count(),
        "core.py reads --listen outside the routes' guard"
    );
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
