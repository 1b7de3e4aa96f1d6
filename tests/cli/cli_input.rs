//! Input a person may type that must be refused with one line (exit 2) and never panic; the
//! command line's own output (help, usage errors) as the contract promises: colours that
//! follow `--color`, `NO_COLOR` and `TERM=dumb`, JSON errors with `--json`; completions and
//! the man page; a closed output pipe.

use crate::support;

use std::process::{Command, Output, Stdio};
use support::vrambisect;

const SD15: &str = "workflows/sd15_txt2img.json";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `args` and checks the refusal: exit 2, one `error:` line naming `why`, no panic.
fn refused(args: &[&str], why: &str) {
    let out = vrambisect().args(args).output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {all}");
    assert!(all.contains(why), "{args:?} should say {why:?}: {all}");
    assert!(!all.contains("panicked"), "{args:?}: {all}");
    assert!(
        !all.contains("use '-- "),
        "{args:?}: a tip to put the value after -- would hand it to ComfyUI: {all}"
    );
}

fn run_args<'a>(flag: &'a str, value: &'a str, wf: &'a str) -> Vec<&'a str> {
    vec![
        "run",
        "--comfyui",
        "/nowhere",
        "--workflow",
        wf,
        flag,
        value,
    ]
}

#[test]
fn time_limits_of_zero_negative_or_absurd_length_are_refused() {
    let wf = support::fixture(SD15);
    let wf = wf.to_str().unwrap();
    for flag in ["--timeout", "--stall-timeout", "--startup-timeout"] {
        refused(&run_args(flag, "0s", wf), "would end it at once");
        refused(&run_args(flag, "-5s", wf), "is negative");
        refused(&run_args(flag, "200h", wf), "longer than a week");
        refused(
            &["bisect", "--comfyui", "/x", "--workflow", wf, flag, "0ms"],
            "would end it at once",
        );
    }
    refused(
        &run_args("--min-available-ram", "99999999999999T", wf),
        "more memory than any machine has",
    );
}

#[test]
fn sample_refuses_intervals_and_durations_that_would_overflow_the_clock() {
    refused(
        &[
            "sample",
            "--interval",
            "5000000000000000h",
            "--duration",
            "300ms",
        ],
        "too long",
    );
    refused(&["sample", "--interval", "2h"], "too long an interval");
    refused(&["sample", "--interval", "0s"], "too short an interval");
    refused(&["sample", "--duration", "0s"], "would end it at once");
    refused(&["sample", "--duration", "-1s"], "is negative");
}

#[test]
fn with_json_a_usage_error_is_a_json_error_on_stdout() {
    for args in [
        vec![
            "run",
            "--json",
            "--timeout",
            "0s",
            "--comfyui",
            "x",
            "--workflow",
            "y",
        ],
        vec!["--json", "bisect", "--no-such-option"],
        vec!["explain", "--json", "--platform", "amiga"],
    ] {
        let out = vrambisect().args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}): {}", text(&out)));
        assert_eq!(doc["error"]["exit_code"], 2, "{doc}");
        assert!(
            doc["error"]["message"].as_str().unwrap().len() > 10,
            "{doc}"
        );
        assert!(doc["error"]["hint"].is_string(), "{doc}");
    }
    // After `--` a `--json` is ComfyUI's, not ours.
    let out = vrambisect()
        .args(["explain", "--platform", "amiga", "--", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{}", text(&out));
}

#[test]
fn clap_output_follows_the_colour_choice() {
    let bad = ["bisect", "--no-such-option"];
    let coloured = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stderr).contains('\x1b')
    };
    let mut base = vrambisect();
    base.env_remove("NO_COLOR").env("TERM", "xterm");
    assert!(coloured(
        vrambisect()
            .env_remove("NO_COLOR")
            .args(["--color", "always"])
            .args(bad)
    ));
    assert!(!coloured(
        vrambisect()
            .env_remove("NO_COLOR")
            .args(["--color", "never"])
            .args(bad)
    ));
    assert!(!coloured(vrambisect().arg("--color=never").args(bad)));
    // auto: never into a pipe, never with NO_COLOR or TERM=dumb.
    assert!(!coloured(base.args(bad)));
    assert!(!coloured(vrambisect().env("NO_COLOR", "1").args(bad)));
    assert!(!coloured(
        vrambisect()
            .env_remove("NO_COLOR")
            .env("TERM", "dumb")
            .args(bad)
    ));
    // Help goes to stdout, exit 0, coloured only when asked.
    let out = vrambisect()
        .args(["--color", "never", "bisect", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(!help.contains('\x1b'));
    for heading in ["Inputs:", "Search:", "Limits:", "Output:", "Examples:"] {
        assert!(
            help.contains(heading),
            "bisect --help lacks {heading}\n{help}"
        );
    }
    assert!(help.lines().all(|l| l.chars().count() <= 100), "{help}");
}

#[test]
fn help_about_help_is_help() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["help", "--help"],
            "Print this message or the help of the given subcommand",
        ),
        (
            &["--color", "never", "help", "-h"],
            "Print this message or the help",
        ),
        (&["help", "bisect"], "Find the minimal set of flags"),
        (&["help", "run", "--help"], "Run a workflow once"),
    ];
    for (args, want) in cases {
        let out = vrambisect().args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out));
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains(want), "{args:?}: {shown}");
    }
    let out = vrambisect().arg("--json").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every command, in the order of --help (the list once lacked regress).
    assert_eq!(
        doc["error"]["message"],
        "no command given: one of explain, run, bisect, regress, sample, logscan, report, doctor, extension, completions, man"
    );
}

#[test]
fn the_bash_completion_script_loads() {
    let exe = env!("CARGO_BIN_EXE_vrambisect");
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source <('{exe}' completions bash) && complete -p vrambisect"
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("-F _vrambisect vrambisect"));
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = vrambisect().args(["completions", shell]).output().unwrap();
        assert!(out.status.success() && out.stdout.len() > 500, "{shell}");
        // The guardian's internal command is nothing to complete.
        assert!(!text(&out).contains("__guard"), "{shell}");
    }
    let out = vrambisect().args(["--color", "never"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("requires a subcommand"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("__guard"), "{}", text(&out));
}

#[test]
fn every_page_the_man_page_names_is_printed_by_man_command() {
    // The pages a page names (`vrambisect\-bisect(1)`), as `man` takes them (`bisect`).
    let named = |roff: &str| -> Vec<String> {
        roff.split("vrambisect\\-")
            .skip(1)
            .filter_map(|rest| {
                rest.split_once("(1)")
                    .map(|(name, _)| name.replace("\\-", "-"))
            })
            .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            .collect()
    };
    let out = vrambisect().arg("man").output().unwrap();
    let mut to_print = named(&String::from_utf8(out.stdout).unwrap());
    assert!(
        to_print.iter().any(|n| n == "bisect") && to_print.len() >= 11,
        "{to_print:?}"
    );
    let mut printed = 0;
    while let Some(name) = to_print.pop() {
        let out = vrambisect().args(["man", &name]).output().unwrap();
        assert!(out.status.success(), "man {name}: {}", text(&out));
        let page = String::from_utf8(out.stdout).unwrap();
        assert!(page.contains(&format!(".TH vrambisect-{name} 1")), "{page}");
        // A command's own commands (extension's install and remove) name their pages too.
        to_print.extend(named(&page).into_iter().filter(|n| n.len() > name.len()));
        printed += 1;
    }
    assert!(printed >= 13, "{printed}");
    let page = vrambisect().args(["man", "bisect"]).output().unwrap();
    assert!(String::from_utf8_lossy(&page.stdout).contains("\\-\\-toggle"));
    let out = vrambisect().args(["man", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("no command named \"nope\""),
        "{}",
        text(&out)
    );
}

#[test]
fn the_man_page_renders() {
    let out = vrambisect().arg("man").output().unwrap();
    assert!(out.status.success());
    let roff = String::from_utf8(out.stdout).unwrap();
    assert!(roff.contains(".TH vrambisect 1"), "{roff}");
    for command in [
        "explain", "run", "bisect", "sample", "logscan", "report", "doctor",
    ] {
        assert!(roff.contains(command), "the man page lacks {command}");
    }
    // Rendered the way `man -l` does, where a formatter is installed.
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("vrambisect.1");
    std::fs::write(&page, &roff).unwrap();
    if let Ok(out) = Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(&page)
        .env("MANWIDTH", "80")
        .output()
        && out.status.success()
    {
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            shown.contains("NAME") && shown.contains("vrambisect"),
            "{shown}"
        );
    }
}

#[test]
fn a_closed_output_pipe_ends_the_bisect_quietly() {
    let install =
        support::comfy::FakeComfy::new("0.38.1", serde_json::json!({"timing": {"node_time": 0.2}}));
    let tmp = tempfile::tempdir().unwrap();
    let wf = support::fixture(SD15);
    let mut child = vrambisect()
        .args(["bisect", "--comfyui", install.path_str(), "--workflow"])
        .arg(&wf)
        .arg("--output")
        .arg(tmp.path().join("s"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away (as `| head` or a closed terminal does), then Ctrl-C.
    drop(child.stdout.take());
    drop(child.stderr.take());
    support::wait_for_text(&tmp.path().join("s/runs/001/comfyui.log"), "got prompt");
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let status = child.wait().unwrap();
    assert_ne!(status.code(), Some(101), "it panicked");
    assert!(
        matches!(status.code(), Some(0) | Some(1) | Some(130)),
        "{status:?}"
    );
    install.assert_nothing_left();
}

#[test]
fn the_bundled_stand_in_is_never_run_in_place() {
    let stand_in = support::fixture("fake-comfyui");
    let listing = || {
        let mut files: Vec<String> = walk(&stand_in)
            .into_iter()
            .filter(|p| !p.contains("__pycache__"))
            .collect();
        files.sort();
        files
    };
    let before = listing();
    let tmp = tempfile::tempdir().unwrap();
    let (code, doc, _) = support::json(&[
        "run",
        "--comfyui",
        stand_in.to_str().unwrap(),
        "--workflow",
        support::fixture(SD15).to_str().unwrap(),
        "--output",
        tmp.path().join("run").to_str().unwrap(),
        "--",
        "--disable-dynamic-vram",
    ]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["outcome"], "pass");
    assert_eq!(
        listing(),
        before,
        "the run wrote into fixtures/fake-comfyui"
    );
}

fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

#[test]
fn doctor_checks_the_current_folder_and_honours_python() {
    // The bundled stand-in, as the README's main job uses it (doctor only reads it).
    let out = vrambisect()
        .args(["doctor", "--json"])
        .current_dir(support::fixture("fake-comfyui"))
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = |id: &str| {
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no {id} check: {doc:#}"))
    };
    let comfyui = check("comfyui");
    assert_eq!(comfyui["status"], "ok", "{comfyui}");
    assert!(
        comfyui["details"][0]
            .as_str()
            .unwrap()
            .contains("the current folder")
    );
    assert!(comfyui.to_string().contains("stand-in"), "{comfyui}");
    // Torch missing is expected with the stand-in: a warning that says so, not a failure.
    assert_eq!(check("torch")["status"], "warn");
    assert_eq!(out.status.code(), Some(0), "{doc:#}");

    let out = vrambisect()
        .args(["doctor", "--json", "--python", "/bin/false"])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let python = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "python")
        .cloned()
        .expect("--python is checked without an install");
    assert_eq!(python["status"], "fail", "{python}");
    assert!(python["summary"].as_str().unwrap().contains("/bin/false"));
    assert_eq!(out.status.code(), Some(1));
}

/// Runs `args` with a deadline: an input that blocks (a FIFO nobody writes) must not hold the
/// tool.
fn output_within(args: &[&std::ffi::OsStr], secs: u64) -> Output {
    let mut child = vrambisect()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed().as_secs() >= secs {
            let _ = child.kill();
            panic!("{args:?} still runs after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A workflow or launcher that is a device (`/dev/zero`), a FIFO with no writer or a file of
/// 1.5 GiB: refused in one line before it is read (nothing blocks, nothing fills memory).
#[test]
fn inputs_that_never_end_or_are_no_files_are_refused_unread() {
    let install = support::comfy::FakeComfy::new("0.38.1", serde_json::Value::Null);
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("workflow.json");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = tmp.path().join("big.json");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1536 << 20)
        .unwrap();
    let wf = support::fixture(SD15);
    let cases = [
        (
            std::path::PathBuf::from("/dev/zero"),
            "is a device, not a file",
        ),
        (fifo, "is a named pipe (FIFO), not a file"),
        (big, "is 1.50 GiB, more than a"),
    ];
    for (path, why) in &cases {
        // A workflow of a run, a launcher of a bisect and of explain.
        let runs: [Vec<&std::ffi::OsStr>; 3] = [
            vec!["run".as_ref(), "--workflow".as_ref(), path.as_os_str()],
            vec![
                "bisect".as_ref(),
                "--workflow".as_ref(),
                wf.as_os_str(),
                "--launcher".as_ref(),
                path.as_os_str(),
            ],
            vec!["explain".as_ref(), "--launcher".as_ref(), path.as_os_str()],
        ];
        for mut args in runs {
            args.push("--json".as_ref());
            if args[0] != "explain" {
                args.extend(["--comfyui".as_ref(), install.path().as_os_str()]);
            }
            let out = output_within(&args, 20);
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", text(&out)));
            assert_eq!(out.status.code(), Some(2), "{args:?}: {doc}");
            let message = doc["error"]["message"].as_str().unwrap();
            assert!(message.contains(why), "{args:?}: {message}");
        }
    }
    install.assert_nothing_left();
}

/// With `--json`, a missing required argument is named in the message; a negative size is
/// called negative, with `=` or without.
#[test]
fn json_usage_errors_say_all_and_negative_sizes_are_named() {
    let out = vrambisect()
        .args(["run", "--json", "--comfyui", "x"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["error"]["message"],
        "the following required arguments were not provided: --workflow <FILE>"
    );
    let wf = support::fixture(SD15);
    let wf = wf.to_str().unwrap();
    refused(
        &run_args("--min-available-ram", "-1G", wf),
        "'-1G' is negative",
    );
    refused(
        &[
            "run",
            "--comfyui",
            "/x",
            "--workflow",
            wf,
            "--min-available-ram=-1G",
        ],
        "'-1G' is negative",
    );
    refused(
        &[
            "bisect",
            "--comfyui",
            "/x",
            "--workflow",
            wf,
            "--min-available-ram",
            "-512M",
        ],
        "'-512M' is negative",
    );
}

/// A path or value holding a newline or an escape sequence is shown escaped: the error stays
/// one line on the terminal and in the JSON message, and no byte of it can act on the
/// terminal (clear it, recolour it).
#[test]
fn control_bytes_in_paths_and_values_are_shown_escaped() {
    let nasty = "work\nflow\u{1b}[2J.json";
    let shown = "work\\nflow\\u{1b}[2J.json";
    let cases: [Vec<&str>; 2] = [
        vec!["run", "--comfyui", "/tmp", "--workflow", nasty],
        vec![
            "run",
            "--comfyui",
            "/tmp",
            "--workflow",
            "w.json",
            "--timeout",
            nasty,
        ],
    ];
    for args in cases {
        let out = vrambisect().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
        let first = stderr.lines().next().unwrap();
        assert!(
            first.starts_with("error: ") && first.contains(shown),
            "{stderr:?}"
        );

        let mut json = args.clone();
        json.insert(1, "--json");
        let out = vrambisect().args(&json).output().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(!message.contains(['\n', '\u{1b}']), "{message:?}");
        assert!(message.contains(shown), "{message:?}");
    }
}

#[test]
fn report_without_a_source_names_both_forms() {
    let out = vrambisect().arg("report").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("<DIR|--log <FILE>>"), "{}", text(&out));
    // A log that is not ComfyUI's: the hint does not send the user to another command.
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, "hello\nworld\n").unwrap();
    let out = vrambisect()
        .args(["report", "--log"])
        .arg(&plain)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("does not look like a ComfyUI log"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("logscan"), "{}", text(&out));
}

#[test]
fn report_reads_a_log_piped_in_as_dash() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let log = std::fs::read(support::fixture(
        "logs/real/05-vbar-oom-traceback-tail-portable.log",
    ))
    .unwrap();
    let mut child = vrambisect()
        .args(["report", "--json", "--log", "-"])
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&log).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["source_kind"], "failure");
    // Named after standard input, in the current folder; no temporary path in the bundle.
    let zip = dir.path().join("vrambisect-report-stdin.zip");
    assert!(zip.is_file(), "{doc:#}");
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&zip).unwrap()).unwrap();
    let tmp = std::env::temp_dir().to_string_lossy().into_owned();
    for i in 0..archive.len() {
        let mut file = archive.by_index(i).unwrap();
        let name = file.name().unwrap().to_string();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut file, &mut body).unwrap();
        assert!(!body.contains(&tmp), "{name} names {tmp}");
        if name == "comfyui.log" {
            assert!(body.contains("in partially_load"), "{body}");
        }
    }
}
