//! `regress` across commits that pin another comfy-aimdo than the user's Python has: a local
//! package index (wheels built here, no network) with two made-up comfy-aimdo versions, the
//! stand-in failing with one of them, a history whose commit 7 bumps the pin. The pins are
//! installed into an environment of their own; the user's Python stays as it was.

use crate::regress_cli::Repo;
use crate::support::{self, fixture, root};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The stand-in fails (oom) with comfy-aimdo 0.5.5 and passes with 0.5.4.
const SCENARIO: &str = r#"{"rules": [{"when": {"state": {"aimdo_version": "0.5.5"}}, "effect": "oom"}]}
"#;

/// The package index and a venv with comfy-aimdo 0.5.5 installed from it (the user's Python
/// after an update), made once for every test here: nothing may change them.
struct World {
    _tmp: tempfile::TempDir,
    index: PathBuf,
    venv_python: PathBuf,
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let index = tmp.path().join("index");
        let make = root().join("tests/support/make_wheel.py");
        for (version, kind) in [("0.5.4", ""), ("0.5.5", ""), ("0.5.6", "--sdist")] {
            let mut cmd = Command::new("python3");
            cmd.arg(&make).arg(&index).args(["comfy-aimdo", version]);
            if !kind.is_empty() {
                cmd.arg(kind);
            }
            assert!(cmd.output().unwrap().status.success());
        }
        let venv = tmp.path().join("venv");
        assert!(
            Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .unwrap()
                .success()
        );
        let venv_python = venv.join("bin/python");
        pip(
            &venv_python,
            &index,
            &["install", "-q", "comfy-aimdo==0.5.5"],
        );
        World {
            _tmp: tmp,
            index,
            venv_python,
        }
    })
}

fn pip(python: &Path, index: &Path, args: &[&str]) -> String {
    let out = Command::new(python)
        .args(["-m", "pip", "--disable-pip-version-check"])
        .args(args)
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", index)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a Python has: its packages as pip lists them, and every file under its prefix.
fn python_state(python: &Path) -> (String, Vec<PathBuf>) {
    let w = world();
    let freeze = pip(python, &w.index, &["list", "--format=freeze"]);
    let prefix = python.parent().unwrap().parent().unwrap();
    (freeze, python_state_files(prefix))
}

/// A history of 12 commits: commit 0 pins comfy-aimdo 0.5.4, commit 7 only bumps it to
/// `bump`; `extra(i)` adds changes to other commits.
fn history(bump: &'static str, extra: impl Fn(usize) -> Vec<(&'static str, String)>) -> Repo {
    Repo::new_from(
        12,
        &[
            ("scenario.json", SCENARIO.to_string()),
            (
                "requirements.txt",
                "torch\ncomfy-aimdo==0.5.4\n".to_string(),
            ),
        ],
        &[7],
        move |i| {
            if i == 7 {
                vec![("requirements.txt", format!("torch\ncomfy-aimdo=={bump}\n"))]
            } else {
                extra(i)
            }
        },
    )
}

/// Runs `regress --json` with the venv's Python, the local index and `cache`.
fn regress(
    repo: &Repo,
    python: &Path,
    cache: &Path,
    extra: &[&str],
) -> (i32, Value, String, tempfile::TempDir) {
    let w = world();
    let before = repo.state();
    let out = tempfile::tempdir().unwrap();
    let wf = fixture("workflows/sd15_txt2img.json");
    let session = out.path().join("session");
    let output = support::vrambisect()
        .args(["regress", "--json", "--comfyui"])
        .arg(&repo.dir)
        .arg("--python")
        .arg(python)
        .arg("--workflow")
        .arg(&wf)
        .arg("--output")
        .arg(&session)
        .args(["--good", "good", "--stall-timeout", "5s"])
        .args(extra)
        .env("PIP_NO_INDEX", "1")
        .env("PIP_FIND_LINKS", &w.index)
        .env("VRAMBISECT_CACHE_DIR", cache)
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(repo.state(), before, "the user's checkout changed");
    (
        output.status.code().unwrap_or(-1),
        doc,
        String::from_utf8_lossy(&output.stderr).into_owned(),
        out,
    )
}

fn subject(doc: &Value, which: &str) -> String {
    doc[which]["subject"].as_str().unwrap_or("").to_string()
}

#[test]
fn a_pin_bump_is_found_in_an_environment_of_its_own_and_the_python_is_unchanged() {
    let w = world();
    let repo = history("0.5.5", |_| vec![]);
    let cache = tempfile::tempdir().unwrap();

    // Skipping such commits, as before: the good end pins 0.5.4, which this Python lacks.
    let (code, doc, _, _s0) = regress(&repo, &w.venv_python, cache.path(), &["--no-install"]);
    assert_eq!(code, 125, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "untestable");
    assert!(
        doc["verdict"]["statement"].as_str().unwrap().contains(
            "pins comfy-aimdo==0.5.4 (this Python has 0.5.5): not installed (--no-install)"
        ),
        "{doc:#}"
    );

    let before = python_state(&w.venv_python);
    let (code, doc, stderr, _s1) = regress(&repo, &w.venv_python, cache.path(), &[]);
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(doc["verdict"]["kind"], "first_bad_found");
    assert_eq!(subject(&doc, "first_bad"), "commit 7");
    assert_eq!(subject(&doc, "last_good"), "commit 6");
    assert_eq!(
        doc["pin_changes"],
        serde_json::json!([{"name": "comfy-aimdo", "from": "0.5.4", "to": "0.5.5"}])
    );
    assert_eq!(doc["culprit_package"]["name"], "comfy-aimdo");
    assert_eq!(doc["culprit_package"]["version"], "0.5.5");
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains(
            "It changes only the pin of comfy-aimdo: the regression is in comfy-aimdo 0.5.5 (https://github.com/Comfy-Org/comfy-aimdo)."
        ),
        "{statement}"
    );
    // Every commit before the bump ran with 0.5.4 from the environment, the others with the
    // Python's own 0.5.5; the run records say so.
    for t in doc["tested"].as_array().unwrap() {
        let before_bump = t["environment"].is_object();
        let want = if before_bump { "0.5.4" } else { "0.5.5" };
        assert_eq!(t["packages"]["comfy-aimdo"], want, "{t:#}");
        let record: Value = serde_json::from_str(
            &std::fs::read_to_string(Path::new(t["runs"][0].as_str().unwrap()).join("record.json"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            record["overlay"].is_object(),
            before_bump,
            "{:#}",
            record["overlay"]
        );
        let log =
            std::fs::read_to_string(Path::new(t["runs"][0].as_str().unwrap()).join("comfyui.log"))
                .unwrap();
        assert!(
            log.contains(&format!("comfy-aimdo version: {want}")),
            "{log}"
        );
    }
    let envs = doc["environments"].as_array().unwrap();
    assert_eq!(envs.len(), 1, "{doc:#}");
    assert_eq!(envs[0]["installed"], true);
    assert_eq!(
        python_state(&w.venv_python),
        before,
        "the user's Python changed"
    );

    // A second session takes the environment from the cache: nothing is installed.
    let (code, doc, _, _s2) = regress(&repo, &w.venv_python, cache.path(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 7");
    assert_eq!(doc["environments"][0]["installed"], false, "{doc:#}");

    // The bundle names the packages of each commit.
    let session = PathBuf::from(doc["session_dir"].as_str().unwrap());
    let (_, files) = crate::support::bundle::report_to(&session, &session.join("bundle.zip"));
    let issue = String::from_utf8_lossy(&files["ISSUE.md"]).into_owned();
    assert!(
        issue.contains("comfy-aimdo 0.5.4 (installed for it)"),
        "{issue}"
    );
    assert!(
        issue.contains("the regression is in comfy-aimdo 0.5.5"),
        "{issue}"
    );

    // --clean-cache removes it.
    let out = support::vrambisect()
        .args(["regress", "--clean-cache"])
        .env("VRAMBISECT_CACHE_DIR", cache.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("removed 1 environment"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_dir(cache.path().join("envs"))
            .unwrap()
            .count(),
        0
    );
    assert_eq!(
        python_state(&w.venv_python),
        before,
        "the user's Python changed"
    );
}

#[test]
fn a_pin_that_cannot_be_installed_is_skipped_with_pips_reason() {
    // Commits 3 and 4 pin 0.5.6, of which the index has only a source archive (it would need
    // building); the bump to 0.5.5 at 7 is still found.
    let w = world();
    let repo = history("0.5.5", |i| match i {
        3 => vec![("requirements.txt", "torch\ncomfy-aimdo==0.5.6\n".into())],
        5 => vec![("requirements.txt", "torch\ncomfy-aimdo==0.5.4\n".into())],
        _ => vec![],
    });
    let cache = tempfile::tempdir().unwrap();
    let (code, doc, _, _s) = regress(&repo, &w.venv_python, cache.path(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(subject(&doc, "first_bad"), "commit 7");
    let reasons: Vec<&str> = doc["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap())
        .collect();
    for r in &reasons {
        assert!(
            r.starts_with(
                "its requirements.txt pins comfy-aimdo==0.5.6 (this Python has 0.5.5), which could not be installed: pip: No matching distribution found for comfy-aimdo==0.5.6"
            ),
            "{r}"
        );
    }
}

/// The portable build's Python: the interpreter beside a `._pth` file, which fixes
/// `sys.path` (PYTHONPATH is ignored, the script's folder is not added) and lists the
/// ComfyUI folder, as the portable build's `python3xx._pth` lists `../ComfyUI`.
fn embeddable(checkout: &Path, at: &Path) -> Option<PathBuf> {
    let paths = Command::new("python3")
        .args([
            "-c",
            "import sys, sysconfig; print(sys.executable); print(sys.version_info >= (3, 11)); print(sysconfig.get_path('stdlib')); print(sysconfig.get_path('platstdlib') + '/lib-dynload'); print(sysconfig.get_path('purelib'))",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&paths.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    if lines.get(1) != Some(&"True") {
        eprintln!("skipped: ._pth files are read on this platform from Python 3.11");
        return None;
    }
    let real = std::fs::canonicalize(lines[0]).unwrap();
    std::fs::create_dir_all(at).unwrap();
    let python = at.join(real.file_name().unwrap());
    std::fs::copy(&real, &python).unwrap();
    let own = at.join("Lib/site-packages");
    std::fs::create_dir_all(&own).unwrap();
    // Its own site-packages first (comfy-aimdo 0.5.5 goes there), then the system's for pip.
    let pth = format!(
        "{}\n{}\n{}\n{}\n{}\nimport site\n",
        lines[2],
        lines[3],
        own.display(),
        lines[4],
        checkout.display()
    );
    std::fs::write(
        at.join(format!(
            "{}._pth",
            real.file_name().unwrap().to_string_lossy()
        )),
        pth,
    )
    .unwrap();
    let own = own.display().to_string();
    pip(
        &python,
        &world().index,
        &[
            "install",
            "-q",
            "--no-deps",
            "--target",
            &own,
            "comfy-aimdo==0.5.5",
        ],
    );
    // PYTHONPATH is ignored there: the reason environments are not put on it.
    let ignored = Command::new(&python)
        .args(["-c", "import sys; print('/nowhere' in sys.path)"])
        .env("PYTHONPATH", "/nowhere")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&ignored.stdout).trim(), "False");
    Some(python)
}

#[test]
fn the_portable_layout_whose_python_ignores_pythonpath() {
    let repo = history("0.5.5", |_| vec![]);
    let tmp = tempfile::tempdir().unwrap();
    let Some(python) = embeddable(&repo.dir, &tmp.path().join("python_embeded")) else {
        return;
    };
    let before = python_state_files(tmp.path().join("python_embeded").as_path());
    let cache = tempfile::tempdir().unwrap();
    let (code, doc, stderr, _s) = regress(&repo, &python, cache.path(), &[]);
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(subject(&doc, "first_bad"), "commit 7");
    assert_eq!(doc["culprit_package"]["name"], "comfy-aimdo");
    assert_eq!(
        python_state_files(tmp.path().join("python_embeded").as_path()),
        before
    );
}

/// Every file under a folder but bytecode caches.
fn python_state_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            if !p.to_string_lossy().contains("__pycache__") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn the_portable_python_runs_each_commits_own_code_not_the_checkouts() {
    // Commit 4 changes the stand-in's code (not its scenario): from it on, every prompt runs
    // out of memory. The embeddable Python's `._pth` lists the checkout (HEAD: the broken
    // code), as the portable build's lists `../ComfyUI`; each commit must still run its own.
    let patch = "\n_load = load\n\n\ndef load(root_dir):\n    s = _load(root_dir)\n    s[\"rules\"].insert(0, {\"effect\": \"oom\"})\n    return s\n";
    let scenario_py =
        std::fs::read_to_string(root().join("fixtures/fake-comfyui/fake_comfy/scenario.py"))
            .unwrap();
    let repo = Repo::new(8, move |i| {
        if i == 4 {
            vec![("fake_comfy/scenario.py", format!("{scenario_py}{patch}"))]
        } else {
            vec![]
        }
    });
    let tmp = tempfile::tempdir().unwrap();
    let Some(python) = embeddable(&repo.dir, &tmp.path().join("python_embeded")) else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let (code, doc, stderr, _s) = regress(&repo, &python, cache.path(), &[]);
    assert_eq!(code, 0, "{doc:#}\n{stderr}");
    assert_eq!(subject(&doc, "first_bad"), "commit 4");
    assert_eq!(subject(&doc, "last_good"), "commit 3");
}
