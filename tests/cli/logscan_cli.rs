//! `vrambisect logscan` end to end: every fixture log, standard input, the JSON contract, and
//! input that is not a ComfyUI log.

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn log(name: &str) -> String {
    root()
        .join("fixtures/logs")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn vrambisect(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vrambisect"))
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run vrambisect");
    if let Some(bytes) = stdin {
        child.stdin.take().unwrap().write_all(bytes).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn json(args: &[&str], stdin: Option<&[u8]>) -> (i32, Value, Output) {
    let mut all = vec!["logscan", "--json"];
    all.extend_from_slice(args);
    let out = vrambisect(&all, stdin);
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), doc, out)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn every_fixture_gives_its_expected_outcome_and_exit_code() {
    let expected: Value =
        serde_json::from_str(include_str!("../../fixtures/logs/expected.json")).unwrap();
    for (name, e) in expected.as_object().unwrap() {
        let (code, doc, out) = json(&[&log(name)], None);
        assert_eq!(
            code,
            e["exit"].as_i64().unwrap() as i32,
            "{name}: {}",
            stderr(&out)
        );
        if code == 2 {
            assert!(doc["error"]["message"].is_string(), "{name}");
            continue;
        }
        assert_eq!(doc["outcome"], e["outcome"], "{name}: {}", doc["summary"]);
        let mut ids: Vec<&str> = doc["known_issues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["id"].as_str().unwrap())
            .collect();
        ids.sort();
        let want: Vec<&str> = e["known_issues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(ids, want, "{name}");
        assert!(out.stderr.is_empty(), "{name}: {}", stderr(&out));
    }
}

#[test]
fn json_contract_fields() {
    let (code, doc, _) = json(&[&log("format-manager-brackets.log")], None);
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "oom");
    assert_eq!(doc["startup"]["comfyui_version"], "0.38.1");
    assert_eq!(doc["startup"]["dynamic_vram"], true);
    assert_eq!(doc["startup"]["vram_state"], "NORMAL_VRAM");
    assert_eq!(doc["startup"]["allocator"], "cudaMallocAsync");
    assert_eq!(doc["startup"]["pinned_memory"], true);
    assert_eq!(doc["startup"]["async_offload_streams"], 2);
    assert_eq!(doc["startup"]["comfy_aimdo_version"], "0.5.5");
    assert_eq!(doc["startup"]["comfyui_dir"], "/srv/ComfyUI");
    assert_eq!(
        doc["startup"]["launch_args"],
        serde_json::json!([
            "--listen",
            "0.0.0.0",
            "--port",
            "8188",
            "--preview-method",
            "auto"
        ])
    );
    let prompts = doc["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[0]["outcome"], "pass");
    assert_eq!(prompts[0]["evidence"], serde_json::json!([]));
    assert_eq!(prompts[1]["outcome"], "oom");
    assert_eq!(
        prompts[1]["evidence"][0],
        "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)"
    );
    assert_eq!(prompts[1]["ordinal"], 2);
    let issue = &doc["known_issues"][0];
    assert_eq!(issue["id"], "cuda_oom_async");
    assert_eq!(issue["issues"], serde_json::json!([13598, 13210]));
    assert_eq!(
        issue["issue_urls"][0],
        "https://github.com/Comfy-Org/ComfyUI/issues/13598"
    );
    assert_eq!(
        issue["bisect"]["command"],
        "vrambisect bisect --comfyui /srv/ComfyUI --workflow WORKFLOW.json --toggle --disable-dynamic-vram --toggle --reserve-vram=1 --toggle --vram-headroom=1 --toggle --disable-cuda-malloc --iterations 2 -- --listen 0.0.0.0 --port 8188 --preview-method auto"
    );
    assert_eq!(issue["bisect"]["argv"][0], "vrambisect");
    assert!(doc["prompt_counts"].is_object());
    assert_eq!(doc["prompts_total"], 2);
    assert_eq!(doc["prompts_omitted"], 0);
}

#[test]
fn startup_failures_and_dynamic_vram_unknown() {
    let (code, doc, _) = json(&[&log("sig-missing-comfy-aimdo.log")], None);
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "startup_failed");
    assert_eq!(doc["startup"]["dynamic_vram"], Value::Null);
    assert_eq!(doc["prompts"], serde_json::json!([]));
    assert_eq!(
        doc["starts"][0]["evidence"][0],
        "ModuleNotFoundError: No module named 'comfy_aimdo'"
    );
    let (_, doc, _) = json(&[&log("sig-argparse-rejected.log")], None);
    assert_eq!(doc["outcome"], "flag_rejected");
    assert_eq!(
        doc["known_issues"][0]["bisect"]["notes"][0],
        "see what ComfyUI makes of the flags: vrambisect explain --comfyui DIR -- --windows-standalone-build --normalvram"
    );
}

#[test]
fn standard_input() {
    let bytes = std::fs::read(log("sig-hang-at-load.log")).unwrap();
    let (code, doc, _) = json(&["-"], Some(&bytes));
    assert_eq!(code, 1);
    assert_eq!(doc["file"], "-");
    assert_eq!(doc["outcome"], "hang");
    let evidence = doc["prompts"][0]["evidence"].as_array().unwrap();
    let n = evidence.len();
    assert_eq!(evidence[n - 2], "Requested to load LTXAV");
    // The log's own timestamps are what make it a hang.
    assert_eq!(
        evidence[n - 1],
        "nothing in the log for 849 s after this line"
    );
    // PowerShell's `>` writes UTF-16 with a byte-order mark.
    let mut utf16 = vec![0xFF, 0xFE];
    let text = String::from_utf8(bytes).unwrap();
    utf16.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
    let (code, doc, _) = json(&["-"], Some(&utf16));
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "hang");
    assert_eq!(doc["encoding"], "utf-16le");
}

#[test]
fn text_output_leads_with_the_answer_and_the_command() {
    let out = vrambisect(&["logscan", &log("format-multi-start.log")], None);
    assert_eq!(out.status.code(), Some(1), "an OOM in the first start");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[2].starts_with("Outcome pass  The last prompt (#3, line 98) passed."),
        "{text}"
    );
    assert!(text.contains("Compare Start #1 (no flags) had failing prompts; start #2 (--disable-dynamic-vram --reserve-vram 2) passed"), "{text}");
    assert!(text.contains("test it: vrambisect bisect --comfyui DIR --workflow WORKFLOW.json --toggle --disable-dynamic-vram"), "{text}");
    assert!(
        text.contains("test it: the command above covers it"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "NO_COLOR");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let binary = dir.path().join("model.safetensors");
    std::fs::write(
        &binary,
        b"\x08\x00\x00\x00\x00\x00\x00\x00{\"__metadata__\":{}}\0\0",
    )
    .unwrap();
    let gz = dir.path().join("comfyui.log.gz");
    std::fs::write(&gz, b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03").unwrap();
    // What a terminal shows where ComfyUI was killed, pasted alone.
    let killed = dir.path().join("killed.txt");
    std::fs::write(&killed, "Killed\n").unwrap();
    let zsh = dir.path().join("zsh.txt");
    std::fs::write(&zsh, "zsh: killed     python main.py\n").unwrap();
    let workflow = root().join("fixtures/workflows/empty_invert_save.json");
    let cases: &[(String, &str)] = &[
        (
            binary.to_str().unwrap().into(),
            "is a binary file, not a text log",
        ),
        (
            gz.to_str().unwrap().into(),
            "is gzip-compressed, not a text log (decompress it first: gzip -dc",
        ),
        (log("bad-empty.log"), "bad-empty.log is empty"),
        (
            log("bad-not-comfyui.log"),
            "does not look like a ComfyUI log: none of its 20 lines",
        ),
        (
            workflow.to_str().unwrap().into(),
            "(it looks like JSON (a workflow?);",
        ),
        (
            dir.path().join("missing.log").to_str().unwrap().into(),
            "cannot read",
        ),
        (
            dir.path().to_str().unwrap().into(),
            "is a folder, not a log file",
        ),
        (
            zsh.to_str().unwrap().into(),
            "(a shell prints 'Killed' when something killed the program it ran;",
        ),
        (
            killed.to_str().unwrap().into(),
            "its only line is not a ComfyUI startup, prompt or error line (a shell prints 'Killed' when something killed the program it ran; for ComfyUI on Linux that is most often the kernel's OOM killer",
        ),
    ];
    for (path, message) in cases {
        let out = vrambisect(&["logscan", path], None);
        assert_eq!(out.status.code(), Some(2), "{path}");
        assert!(out.stdout.is_empty(), "{path}");
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{path}: {err}");
        assert!(err.starts_with("error: "), "{err}");
        assert!(err.contains(message), "{path}: {err}");
    }
    let (code, doc, _) = json(&[&log("bad-empty.log")], None);
    assert_eq!(code, 2);
    assert_eq!(doc["error"]["exit_code"], 2);
    let (code, _, out) = json(&["-"], Some(b""));
    assert_eq!(code, 2);
    assert!(stderr(&out).contains("standard input is empty"));
}

/// A reader that went away (`vrambisect logscan LOG | true`) does not turn a failure's exit
/// status into success: the status is the answer's, the output just has nowhere to go.
#[cfg(unix)]
#[test]
fn a_closed_stdout_keeps_the_answers_exit_status() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    for (file, code) in [
        ("sig-cuda-oom-native.log", 1),
        ("format-plain-0.3.64.log", 0),
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_vrambisect"))
            .args(["logscan", &log(file)])
            .stdin(Stdio::null())
            .stdout(writer.try_clone().unwrap())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "{file}");
    }
}

/// One OOM line printed again and again (a retry loop), 3 lines to 100 MB: an OOM, exit 1.
#[test]
fn a_log_of_one_oom_line_repeated_is_an_oom() {
    let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 has a total capacity of 23.99 GiB of which 0 bytes is free.\n";
    let tmp = tempfile::tempdir().unwrap();
    for (name, count) in [
        ("3-lines", 3usize),
        ("20-mb", (20 << 20) / line.len()),
        ("100-mb", (100 << 20) / line.len()),
    ] {
        let path = tmp.path().join(format!("{name}.log"));
        std::fs::write(&path, line.repeat(count)).unwrap();
        let out = vrambisect(&["logscan", "--json", path.to_str().unwrap()], None);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["outcome"], "oom", "{name}: {doc:#}");
        assert_eq!(out.status.code(), Some(1), "{name}");
    }
}

#[test]
fn the_example_in_the_logscan_docs_is_what_logscan_prints() {
    let doc = std::fs::read_to_string(root().join("docs/logscan.md")).unwrap();
    let command = "$ vrambisect logscan fixtures/logs/format-multi-start.log\n";
    let shown = doc
        .split(command)
        .nth(1)
        .expect("the example in docs/logscan.md");
    let shown = &shown[..shown.find("```").expect("the example's end")];
    let out = Command::new(env!("CARGO_BIN_EXE_vrambisect"))
        .args(["logscan", "fixtures/logs/format-multi-start.log"])
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), shown);
}

/// A file name that is not UTF-8 (legal on Linux; APFS refuses one) is read, and shown with
/// U+FFFD.
#[cfg(target_os = "linux")]
#[test]
fn a_file_name_that_is_not_utf8_is_read() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir
        .path()
        .join(std::ffi::OsStr::from_bytes(b"comfyui-\xff.log"));
    std::fs::copy(log("sig-cuda-oom-native.log"), &path).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_vrambisect"))
        .args(["logscan", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["outcome"], "oom");
    assert!(
        doc["file"]
            .as_str()
            .unwrap()
            .ends_with("comfyui-\u{fffd}.log")
    );
}
