//! `vrambisect explain` end to end: launcher files, installs, JSON contract, bad input.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn launcher(name: &str) -> PathBuf {
    root().join("fixtures/launchers").join(name)
}

fn vrambisect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vrambisect"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("run vrambisect")
}

fn json(args: &[&str]) -> (i32, Value) {
    let mut all = vec!["explain", "--json"];
    all.extend_from_slice(args);
    let out = vrambisect(&all);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap(), doc)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn json_contract_fields() {
    let (code, doc) = json(&["--", "--highvram"]);
    assert_eq!(code, 0);
    assert_eq!(doc["dynamic_vram"]["enabled"], false);
    assert_eq!(doc["dynamic_vram"]["decided_by"], "--highvram");
    assert_eq!(doc["vram_state"], "HIGH_VRAM");
    assert!(doc["reserved_vram_mb"].is_u64());
    assert!(doc["no_op_flags"].is_array());
    assert!(doc["conflicts"].is_array());
    assert!(doc["unknown_flags"].is_array());
}

#[test]
fn a_launch_line_pasted_in_quotes_is_read_word_by_word() {
    let (code, doc) = json(&[
        "--",
        "python main.py --disable-dynamic-vram --reserve-vram 2",
    ]);
    assert_eq!(code, 0);
    assert_eq!(doc["dynamic_vram"]["enabled"], false);
    assert_eq!(doc["dynamic_vram"]["decided_by"], "--disable-dynamic-vram");
    assert_eq!(doc["reserved_vram_mb"], 2048);
    assert_eq!(doc["unknown_flags"], serde_json::json!([]));
    // The portable build's own line: Windows, as its .bat would say.
    let (_, doc) = json(&[
        "--",
        r".\python_embeded\python.exe -s ComfyUI\main.py --windows-standalone-build --lowvram",
    ]);
    assert_eq!(doc["platform"], "windows");
    assert_eq!(doc["no_op_flags"][0]["flag"], "--lowvram");
}

#[test]
fn lowvram_alone_is_a_no_op_under_dynamic_vram() {
    let (code, doc) = json(&["--platform", "linux", "--", "--lowvram"]);
    assert_eq!(code, 0);
    assert_eq!(doc["dynamic_vram"]["enabled"], true);
    assert_eq!(doc["dynamic_vram"]["decided_by"], Value::Null);
    assert_eq!(doc["no_op_flags"][0]["flag"], "--lowvram");
    assert_eq!(doc["reserved_vram_mb"], 400);
}

#[test]
fn bat_with_highvram_and_lowvram_is_refused() {
    let path = launcher("run_highvram_lowvram.bat");
    let (code, doc) = json(&["--launcher", path.to_str().unwrap()]);
    assert_eq!(code, 1, "ComfyUI would exit 2, so explain answers 1");
    assert_eq!(doc["platform"], "windows");
    assert_eq!(doc["reserved_vram_mb"], 600);
    assert_eq!(
        doc["conflicts"][0]["flags"],
        serde_json::json!(["--highvram", "--lowvram"])
    );
    assert_eq!(
        doc["startup_error"],
        "main.py: error: argument --lowvram: not allowed with argument --highvram"
    );
    assert_eq!(doc["launcher"]["line"], 3);
}

#[test]
fn portable_launcher_as_shipped() {
    let path = launcher("run_nvidia_gpu.bat");
    let (code, doc) = json(&["--launcher", path.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(
        doc["argv"],
        serde_json::json!(["--windows-standalone-build", "--enable-manager"])
    );
    assert_eq!(doc["dynamic_vram"]["enabled"], true);
    assert_eq!(doc["single_gpu_forced"], true);
    let advice = doc["advice"].to_string();
    assert!(advice.contains("opens a browser"), "{advice}");
}

#[test]
fn tuned_launcher_with_env_continuations_and_extra_args() {
    let path = launcher("run_tuned.bat");
    let (code, doc) = json(&["--launcher", path.to_str().unwrap(), "--", "--cache-none"]);
    assert_eq!(code, 0);
    assert_eq!(
        doc["argv"],
        serde_json::json!([
            "--windows-standalone-build",
            "--disable-auto-launch",
            "--reserve-vram",
            "1.5",
            "--lowvram",
            "--disable-dyn",
            "--cache-none"
        ])
    );
    assert_eq!(doc["dynamic_vram"]["decided_by"], "--disable-dynamic-vram");
    assert_eq!(doc["reserved_vram_mb"], 1536);
    assert_eq!(
        doc["single_gpu_forced"], false,
        "CUDA_VISIBLE_DEVICES is set"
    );
    assert_eq!(
        doc["no_op_flags"],
        serde_json::json!([]),
        "--lowvram acts without Dynamic VRAM"
    );
    let env = doc["environment"].to_string();
    assert!(env.contains("expandable_segments:True"));
    assert!(
        doc["advice"]
            .to_string()
            .contains("strips expandable_segments")
    );
}

#[test]
fn shell_launcher() {
    let path = launcher("comfyui.sh");
    let (code, doc) = json(&["--launcher", path.to_str().unwrap(), "--platform", "linux"]);
    assert_eq!(code, 0);
    assert_eq!(doc["dynamic_vram"]["decided_by"], "--highvram");
    assert_eq!(doc["no_op_flags"][0]["flag"], "--vram-headroom");
}

#[test]
fn amd_launcher_forces_dynamic_vram() {
    let path = launcher("run_amd_gpu_enable_dynamic_vram.bat");
    let (_, doc) = json(&["--launcher", path.to_str().unwrap()]);
    assert_eq!(doc["dynamic_vram"]["decided_by"], "--enable-dynamic-vram");
}

#[test]
fn human_output_explains_highvram() {
    let out = vrambisect(&["explain", "--platform", "linux", "--", "--highvram"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Dynamic VRAM   off: --highvram turns it off"),
        "{text}"
    );
    assert!(text.contains("ComfyUI logs nothing about it"), "{text}");
    assert!(!text.contains('\x1b'), "NO_COLOR is honoured");
}

#[test]
fn missing_launcher_is_one_clear_line() {
    let out = vrambisect(&["explain", "--launcher", "/no/such/run.bat"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot read launcher /no/such/run.bat: no such file"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn launcher_without_main_py() {
    let out = vrambisect(&[
        "explain",
        "--launcher",
        launcher("no_main.bat").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no main.py call found"));
}

#[test]
fn unreadable_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let out = vrambisect(&["explain", "--launcher", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out).lines().count(), 1);
}

#[test]
fn binary_launcher() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.bat");
    std::fs::write(&file, [0u8, 1, 2, 3]).unwrap();
    let out = vrambisect(&["explain", "--launcher", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("binary"));
}

#[test]
fn missing_comfyui_folder() {
    let out = vrambisect(&["explain", "--comfyui", "/no/such/ComfyUI"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("does not exist"));
}

#[test]
fn folder_without_main_py() {
    let dir = tempfile::tempdir().unwrap();
    let out = vrambisect(&["explain", "--comfyui", dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("has no main.py"));
}

#[test]
fn python_that_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("main.py"), "").unwrap();
    let out = vrambisect(&[
        "explain",
        "--comfyui",
        dir.path().to_str().unwrap(),
        "--python",
        "/no/such/python3",
    ]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot run Python"), "{err}");
}

#[test]
fn errors_are_json_too_with_json() {
    let (code, doc) = json(&["--launcher", "/no/such/run.bat"]);
    assert_eq!(code, 2);
    assert_eq!(doc["error"]["exit_code"], 2);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The fake ComfyUI, with its version file set to `version`.
fn fake_install(version: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&root().join("fixtures/fake-comfyui"), dir.path());
    std::fs::write(
        dir.path().join("comfyui_version.py"),
        format!("__version__ = \"{version}\"\n"),
    )
    .unwrap();
    dir
}

#[test]
fn install_flags_come_from_its_own_help() {
    let install = fake_install("0.38.1");
    let (code, doc) = json(&[
        "--comfyui",
        install.path().to_str().unwrap(),
        "--",
        "--disable-dyn",
    ]);
    assert_eq!(code, 0);
    assert_eq!(doc["flags_source"]["kind"], "install");
    assert_eq!(doc["comfyui_version"], "0.38.1");
    assert_eq!(doc["dynamic_vram"]["decided_by"], "--disable-dynamic-vram");
}

#[test]
fn old_install_does_not_know_dynamic_vram_flags() {
    let install = fake_install("0.3.64");
    let (code, doc) = json(&[
        "--comfyui",
        install.path().to_str().unwrap(),
        "--",
        "--disable-dynamic-vram",
    ]);
    assert_eq!(code, 1);
    assert_eq!(doc["unknown_flags"][0]["flag"], "--disable-dynamic-vram");
    assert_eq!(
        doc["unknown_flags"][0]["hint"],
        "--disable-dynamic-vram arrived in 0.15.0; this install is 0.3.64, which has no Dynamic VRAM: update ComfyUI or drop the flag"
    );
    assert_eq!(
        doc["startup_error"],
        "main.py: error: unrecognized arguments: --disable-dynamic-vram"
    );
}

#[test]
fn prediction_matches_the_fake_comfyui_argparse() {
    // What explain predicts must be what (real) argparse in the stand-in prints.
    let install = fake_install("0.38.1");
    let cases: &[&[&str]] = &[
        &["--highvram", "--lowvram"],
        &["--cpu", "--highvram", "--lowvram"],
        &["--disable-cuda"],
        &["--reserve-vram", "abc"],
        &["--no-such-flag", "2"],
        &["--fast", "dynamic_vram"],
        &["--cache-ram", "1", "2", "3"],
        &["--reserve-vram"],
    ];
    for args in cases {
        let mut all = vec!["--comfyui", install.path().to_str().unwrap(), "--"];
        all.extend_from_slice(args);
        let (_, doc) = json(&all);
        let real = Command::new("python3")
            .arg("main.py")
            .args(*args)
            .current_dir(install.path())
            .output()
            .unwrap();
        assert_eq!(real.status.code(), Some(2), "{args:?}");
        let last = String::from_utf8_lossy(&real.stderr)
            .lines()
            .last()
            .unwrap()
            .to_string();
        assert_eq!(doc["startup_error"], last, "{args:?}");
    }
}
