//! Test support shared by the integration tests: the fake GPU libraries, the fake ComfyUI,
//! and running the vrambisect binary.
#![allow(dead_code)]

pub mod bundle;
pub mod comfy;
pub mod gpu;
pub mod pty;
pub mod sampling;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fixture file by path relative to `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// The vrambisect binary, without colours, with a GPU lock of its own (so parallel tests
/// do not take turns; the test of two sessions sets a shared one).
pub fn vrambisect() -> Command {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let locks = std::env::temp_dir()
        .join("vrambisect-test-locks")
        .join(format!(
            "{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_vrambisect"));
    cmd.env("NO_COLOR", "1")
        .env_remove("VRAMBISECT_NVML_LIB")
        // The stand-in's card (an RTX 4090), not this machine's RAM, ends a value search.
        .env("VRAMBISECT_VALUE_CEILING_GB", "24")
        .env("VRAMBISECT_LOCK_DIR", locks);
    cmd
}

/// Runs vrambisect with `args` and `--json`, returning the exit code and the JSON document.
pub fn json(args: &[&str]) -> (i32, serde_json::Value, Output) {
    // `--json` goes right after the subcommand: after `--` it would be ComfyUI's flag.
    let mut all: Vec<&str> = args.to_vec();
    all.insert(1.min(all.len()), "--json");
    let out = vrambisect().args(&all).output().expect("run vrambisect");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), doc, out)
}

/// A temporary folder that will hold a run (which must not exist yet).
pub fn out_dir(tmp: &Path, name: &str) -> String {
    tmp.join(name).to_str().unwrap().to_string()
}

/// Waits (at most 30 s) until the file at `path` contains `needle`.
pub fn wait_for_text(path: &Path, needle: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_to_string(path)
        .unwrap_or_default()
        .contains(needle)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{} never said {needle:?}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Runs `vrambisect COMMAND` with `--json` on `install` and the fixture `workflow`, its
/// output in `<temp>/OUT`, then `args`; checks that no ComfyUI process is left.
pub fn on_install(
    command: &str,
    install: &comfy::FakeComfy,
    workflow: &str,
    out: &str,
    args: &[&str],
) -> (i32, serde_json::Value, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let out = out_dir(tmp.path(), out);
    let wf = fixture(workflow);
    let mut all = vec![
        command,
        "--comfyui",
        install.path_str(),
        "--workflow",
        wf.to_str().unwrap(),
        "--output",
        &out,
    ];
    all.extend_from_slice(args);
    let (code, doc, _) = json(&all);
    install.assert_nothing_left();
    (code, doc, tmp)
}

/// A bisect journal's runs are numbered 1, 2, 3, ... with none twice and none missing (a run
/// that Ctrl-C cut short is redone under its own number).
pub fn assert_runs_numbered_once(journal: &Path) {
    let numbers: Vec<u64> = std::fs::read_to_string(journal)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
}
