//! `vrambisect report` end to end: a bisect of the fake ComfyUI (installed in a fake home
//! folder, with secrets planted in its workflow, log, launcher, history and environment),
//! bundled, unzipped and checked — no secret left, the evidence still there, ISSUE.md as in
//! its snapshot, the timelines real plots — and a single run with a huge log.

use crate::support;
use crate::support::bundle;

use bundle::{Installed, unzip};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;
use support::comfy::FakeComfy;
use support::vrambisect;
use vrambisect::report::plot::{self, colors};

/// The secrets planted, each a kind of its own; none may reach the bundle.
const SECRETS: &[&str] = &[
    // paths and names
    "alice.smith",
    "Alice Smith",
    "carol.mac",
    // e-mail, IP addresses
    "alice.smith@example.com",
    "203.0.113.7",
    "fe80::1ff:fe23:4567:890a",
    // tokens
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456",
    "hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210",
    "sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQrSt",
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "eyJhbGciOiJIUzI1NiJ9",
    // credentials in a URL, secret-named values, a variable outside the allowlist
    "hunter2pass",
    "Tr0ub4dor",
    "ck-live-9f8e7d6c5b4a39281706",
    "comfyui-abcdef0123456789abcdef",
    "correct-horse-battery-staple",
    // in the environment of `vrambisect report` itself
    "sk-ant-api03-ReportProcessSecretValue0000",
    "ghs_ReportProcessTokenValue0123456789abc",
];

/// What a maintainer needs, which redaction must leave alone.
const EVIDENCE: &[&str] = &[
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB",
    "Got an OOM, unloading all loaded models.",
    "DynamicVRAM support detected and enabled",
    "ComfyUI version: 0.38.1",
    "comfy-aimdo version: 0.5.5",
    "Requested to load SD1",
    "To see the GUI go to: http://127.0.0.1:",
    "Device: cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync",
    "File \"~/ComfyUI/execution.py\"",
    "--disable-dynamic-vram",
];

/// A bisect of the fake ComfyUI, made once for all tests of this file.
struct Fixture {
    root: PathBuf,
    home: PathBuf,
    session: PathBuf,
    nvml: PathBuf,
    state: PathBuf,
}

/// A place under the build folder's temporary directory (static fixtures are never
/// dropped; folders of earlier test processes are removed).
fn fixture_root() -> PathBuf {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if let Ok(entries) = std::fs::read_dir(&base) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("report_cli-")
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let root = base.join(format!("report_cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    root
}

/// The report process's environment: the fake home and GPU, no allowlisted variable from
/// the machine (so the snapshot is the same everywhere), and secrets that must stay out.
fn command(f: &Fixture) -> std::process::Command {
    let mut cmd = vrambisect();
    cmd.current_dir(&f.root)
        .env("HOME", &f.home)
        .env("USER", "alice.smith")
        .env("LOGNAME", "alice.smith")
        .env("HOSTNAME", "alice-workstation")
        .env("VRAMBISECT_NVML_LIB", &f.nvml)
        .env("VRAMBISECT_FAKE_GPU_STATE", &f.state)
        .env(
            "ANTHROPIC_API_KEY",
            "sk-ant-api03-ReportProcessSecretValue0000",
        )
        .env("GH_TOKEN", "ghs_ReportProcessTokenValue0123456789abc");
    for k in vrambisect::report::redact::ENV_ALLOWLIST {
        cmd.env_remove(k);
    }
    cmd
}

fn shared() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let root = fixture_root();
        // Where the tests write their zips (report makes no folder).
        std::fs::create_dir_all(root.join("out")).unwrap();
        let home = root.join("home/alice.smith");
        let message = "CUDA out of memory. Tried to allocate 1.14 GiB. While loading C:\\Users\\Alice Smith\\models\\x.safetensors from https://bob:hunter2pass@models.example.com/x with token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456 (peer 203.0.113.7)";
        let install = Installed::new(
            &home.join("ComfyUI"),
            "0.38.1",
            json!({
                "gpu": {"other_processes": [{"pid": 999999, "mb": 1200}]},
                "rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom", "message": message}]
            }),
        );
        install.write_idle_gpu_state(&[(999999, 1200)]);
        // The fake GPU libraries, kept beside the fixture.
        let gpu = support::gpu::FakeGpu::build();
        let nvml = root.join("libnvidia-ml.so.1");
        std::fs::copy(gpu.nvml_path(), &nvml).unwrap();
        // A workflow with an API key in a node's inputs and an e-mail in a prompt.
        let mut wf: Value = serde_json::from_str(
            &std::fs::read_to_string(support::fixture("workflows/sd15_txt2img.json")).unwrap(),
        )
        .unwrap();
        wf["4"]["inputs"]["api_key"] = json!("ck-live-9f8e7d6c5b4a39281706");
        let text = wf["6"]["inputs"]["text"].as_str().unwrap().to_string();
        wf["6"]["inputs"]["text"] = json!(format!("{text}, by alice.smith@example.com"));
        std::fs::write(home.join("workflow.json"), serde_json::to_string_pretty(&wf).unwrap()).unwrap();
        // A launcher that sets an allowlisted variable, a token and a private setting.
        std::fs::write(
            home.join("run_comfyui.sh"),
            "#!/bin/sh\nexport CUDA_VISIBLE_DEVICES=0\nexport HF_TOKEN=hf_ZyXwVuTsRqPoNmLkJiHgFeDcBa9876543210\nexport MY_PRIVATE_NOTE=correct-horse-battery-staple\npython3 main.py \"$@\"\n",
        )
        .unwrap();
        let f = Fixture {
            session: home.join("sessions/oom"),
            state: install.gpu_state(),
            home,
            nvml,
            root,
        };
        let out = command(&f)
            .args(["bisect", "--json", "--comfyui"])
            .arg(&install.dir)
            .arg("--workflow")
            .arg(f.home.join("workflow.json"))
            .arg("--launcher")
            .arg(f.home.join("run_comfyui.sh"))
            .args(["--toggle", "--disable-dynamic-vram", "--stall-timeout", "3s", "--output"])
            .arg(&f.session)
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("bisect: {e}\n{}", String::from_utf8_lossy(&out.stderr))
        });
        assert_eq!(doc["verdict"]["kind"], "fixed_by", "{doc:#}");
        // What the recording does not show by itself: secrets that travel in logs (a custom
        // node printing its request, a macOS or Windows path, a password) and in extra_data.
        let log = f.session.join("runs/001/comfyui.log");
        let mut body = std::fs::read_to_string(&log).unwrap();
        body.push_str(concat!(
            "[ComfyUI-RemoteNode] POST https://api.example.com/v1 Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U\n",
            "[ComfyUI-RemoteNode] using github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF and ghp_0123456789abcdefghijABCDEFGHIJ012345\n",
            "[ComfyUI-RemoteNode] AWS AKIAIOSFODNN7EXAMPLE aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n",
            "[ComfyUI-RemoteNode] OPENAI key sk-proj-Ab12Cd34Ef56Gh78Ij90KlMnOpQrSt password=Tr0ub4dor&3\n",
            "[ComfyUI-RemoteNode] cache at /Users/carol.mac/ComfyUI/models, peer fe80::1ff:fe23:4567:890a\n",
            "[ComfyUI-RemoteNode] signed in as alice.smith\n",
            "  File \"C:\\Users\\Alice Smith\\ComfyUI_windows_portable\\ComfyUI\\main.py\", line 1\n",
        ));
        std::fs::write(&log, body).unwrap();
        let hist = f.session.join("runs/001/history-1.json");
        let mut h: Value = serde_json::from_str(&std::fs::read_to_string(&hist).unwrap()).unwrap();
        h["extra_data"] = json!({"api_key_comfy_org": "comfyui-abcdef0123456789abcdef"});
        std::fs::write(&hist, serde_json::to_string_pretty(&h).unwrap()).unwrap();
        // Every kind of secret of the redaction corpus, in every file of the session.
        plant_everywhere(&f.session);
        // The GPU as a report made later finds it: idle again.
        install.write_idle_gpu_state(&[(999999, 1200)]);
        drop(install);
        f
    })
}

/// The redaction corpus, with this fixture's names filled in: (what, text, secret).
fn planted() -> Vec<(String, String, String)> {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(support::fixture("redaction/planted.json")).unwrap(),
    )
    .unwrap();
    let fill = |v: &Value| {
        v.as_str()
            .unwrap()
            .replace("{user}", "alice.smith")
            .replace("{full_name}", "Alice Smith")
            .replace("{host}", "alice-workstation")
    };
    doc.as_array()
        .unwrap()
        .iter()
        .map(|e| (fill(&e["what"]), fill(&e["text"]), fill(&e["secret"])))
        .collect()
}

/// Appends the corpus to every log and adds it to every JSON object of the session folder
/// (as a list under `planted`, and as the text of the workflow's prompt node).
fn plant_everywhere(dir: &Path) {
    let texts: Vec<String> = planted().into_iter().map(|(_, t, _)| t).collect();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            plant_everywhere(&path);
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".log") {
            let mut body = std::fs::read_to_string(&path).unwrap();
            for t in &texts {
                body.push_str(t);
                body.push('\n');
            }
            std::fs::write(&path, body).unwrap();
        } else if name.ends_with(".json") {
            let mut v: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            if let Some(map) = v.as_object_mut() {
                // A workflow's top-level keys are its nodes: there, the prompt node's text.
                if name == "workflow.json" {
                    if let Some(inputs) = map.get_mut("6").and_then(|n| n.get_mut("inputs")) {
                        inputs["text"] = json!(texts.join("\n"));
                    }
                } else {
                    map.insert("planted".into(), json!(texts));
                }
            }
            std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        }
    }
}

/// Builds a bundle of `dir` (extra arguments after it), returns the process output.
fn report(f: &Fixture, dir: &Path, extra: &[&str]) -> Output {
    command(f)
        .arg("report")
        .arg(dir)
        .args(extra)
        .output()
        .unwrap()
}

/// The bundle of the shared session, made once.
fn bundle() -> &'static (Value, BTreeMap<String, Vec<u8>>) {
    static B: OnceLock<(Value, BTreeMap<String, Vec<u8>>)> = OnceLock::new();
    B.get_or_init(|| {
        let f = shared();
        let zip = f.root.join("out/bundle.zip");
        let out = report(
            f,
            &f.session,
            &["--json", "--output", zip.to_str().unwrap()],
        );
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        (doc, unzip(&zip))
    })
}

fn text(files: &BTreeMap<String, Vec<u8>>, name: &str) -> String {
    String::from_utf8(
        files
            .get(name)
            .unwrap_or_else(|| panic!("{name} not in {:?}", files.keys()))
            .clone(),
    )
    .unwrap()
}

#[test]
fn the_bundle_has_the_contract_layout() {
    let (doc, files) = bundle();
    for name in [
        "ISSUE.md",
        "README.md",
        "environment.json",
        "workflow.json",
        "result.json",
        "session.json",
        "matrix.png",
        "runs/001/comfyui.log",
        "runs/001/record.json",
        "runs/001/samples.csv",
        "runs/001/history-1.json",
        "runs/001/system_stats.json",
        "runs/001/timeline.png",
        "runs/002/comfyui.log",
        "runs/002/timeline.png",
    ] {
        assert!(
            files.contains_key(name),
            "{name} missing: {:?}",
            files.keys()
        );
    }
    let names: Vec<&String> = files.keys().collect();
    assert!(!names.iter().any(|n| n.ends_with("samples.jsonl")));
    // The README names every file.
    let readme = text(files, "README.md");
    for name in files.keys() {
        assert!(
            readme.contains(&format!("`{name}`")),
            "{name} not in README.md"
        );
    }
    // The JSON document says what was built and redacted.
    assert_eq!(doc["source_kind"], "bisect");
    assert_eq!(doc["runs"], 2);
    assert!(doc["bytes"].as_u64().unwrap() < 10_000_000);
    assert_eq!(doc["redaction"]["enabled"], true);
    let kinds: Vec<&str> = doc["redaction"]["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kind"].as_str().unwrap())
        .collect();
    for k in [
        "home_path",
        "user_name",
        "email",
        "ip_address",
        "token",
        "bearer",
        "url_credentials",
        "secret_value",
        "env_var",
        "error_inputs",
    ] {
        assert!(kinds.contains(&k), "{k} not in {kinds:?}");
    }
    let env: Value = serde_json::from_slice(&files["environment.json"]).unwrap();
    assert_eq!(env["format"], "vrambisect environment v1");
    assert_eq!(env["comfyui_version"]["value"], "0.38.1");
    assert_eq!(env["nvidia_driver"]["value"], "580.82.07");
    assert_eq!(env["gpus"]["value"][0]["name"], "NVIDIA GeForce RTX 4090");
    assert_eq!(env["comfy_aimdo"]["value"], "0.5.5");
    assert_eq!(env["env"]["value"], json!({"CUDA_VISIBLE_DEVICES": "0"}));
    assert!(env["comfyui_git"]["missing"].is_string());
    assert_eq!(
        env["custom_nodes"]["value"],
        json!([{"name": "websocket_image_save.py", "commit": null}])
    );
}

#[test]
fn no_planted_secret_survives_and_the_evidence_does() {
    let (_, files) = bundle();
    for (name, bytes) in files {
        if name.ends_with(".png") {
            continue;
        }
        let text = String::from_utf8_lossy(bytes);
        let lower = text.to_lowercase();
        for s in SECRETS {
            assert!(
                !lower.contains(&s.to_lowercase()),
                "{s} found in {name}:\n{}",
                text.lines()
                    .filter(|l| l.to_lowercase().contains(&s.to_lowercase()))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    // The redaction corpus, planted in every file of the session.
    for (what, _, secret) in planted() {
        for (name, bytes) in files {
            if name.ends_with(".png") {
                continue;
            }
            let text = String::from_utf8_lossy(bytes);
            assert!(
                !text.contains(&secret),
                "{what} ({secret}) survived in {name}:\n{}",
                text.lines()
                    .filter(|l| l.contains(&secret))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
    let log = text(files, "runs/001/comfyui.log");
    let issue = text(files, "ISSUE.md");
    for e in EVIDENCE {
        assert!(log.contains(e) || issue.contains(e), "{e} lost");
    }
    for e in [
        "torch.OutOfMemoryError: CUDA out of memory",
        "DynamicVRAM support detected and enabled",
        "ComfyUI version: 0.38.1",
        "--disable-dynamic-vram",
    ] {
        assert!(issue.contains(e), "{e} not in ISSUE.md");
    }
    // The placeholders say what was there.
    assert!(
        log.contains(r"C:\Users\[user]\ComfyUI_windows_portable"),
        "{log}"
    );
    assert!(log.contains("/Users/[user]/ComfyUI/models"));
    assert!(log.contains("https://[credentials]@models.example.com/x"));
    assert!(log.contains("Authorization: Bearer [token]"));
    assert!(log.contains("password=[redacted]"));
    let wf: Value = serde_json::from_slice(&files["workflow.json"]).unwrap();
    assert_eq!(wf["4"]["inputs"]["api_key"], "[redacted]");
    assert_eq!(
        wf["4"]["inputs"]["ckpt_name"],
        "v1-5-pruned-emaonly-fp16.safetensors"
    );
    let session: Value = serde_json::from_slice(&files["session.json"]).unwrap();
    assert_eq!(
        session["env"],
        json!([
            ["CUDA_VISIBLE_DEVICES", "0"],
            ["HF_TOKEN", "[redacted]"],
            ["MY_PRIVATE_NOTE", "[redacted]"]
        ])
    );
    assert_eq!(session["comfyui"], "~/ComfyUI");
    let hist: Value = serde_json::from_slice(&files["runs/001/history-1.json"]).unwrap();
    assert_eq!(hist["extra_data"]["api_key_comfy_org"], "[redacted]");
}

#[test]
fn redaction_is_reported_per_kind_and_file() {
    let f = shared();
    let zip = f.root.join("out/human.zip");
    let out = report(f, &f.session, &["-o", zip.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("wrote "), "{stdout}");
    assert!(stdout.contains("from a bisect session of 2 runs"));
    let line = stdout
        .lines()
        .find(|l| l.contains("tokens (hf_, sk-"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("runs/001/comfyui.log"), "{line}");
    assert!(stdout.contains("values of secret-named keys"));
    // Long file lists are cut to a few names and a count.
    assert!(stdout.contains(" more"), "{stdout}");
    assert!(stdout.contains("environment variables outside the allowlist"));
    assert!(stdout.contains("issues/new?template=bug-report.yml"));
    // No secret on the terminal either.
    for s in SECRETS {
        assert!(!stdout.contains(s), "{s} printed");
    }
}

/// Replaces what changes from machine to machine and run to run.
fn filtered(issue: &str) -> String {
    let rules: &[(&str, &str)] = &[
        (r"vrambisect \d+\.\d+\.\d+", "vrambisect [version]"),
        (r"--port \d+", "--port [port]"),
        (r"127\.0\.0\.1:\d+", "127.0.0.1:[port]"),
        (r"\d+\.\d+ (s|seconds)\b", "[t] $1"),
        (r"\d+\.\d+ GiB", "[n] GiB"),
        (r"\d+ MiB memory in use", "[n] MiB memory in use"),
        (r"Python version: .*", "Python version: [python]"),
        // Which of these the run's evidence caught depends on when its verdict was taken
        // (ComfyUI prints them around its websocket error message); in the Debug Logs they
        // carry their `[ERROR]` tag and stay.
        (r"(?m)^Got an OOM, unloading all loaded models\.\n", ""),
        (r"(?m)^!!! Exception during processing !!!.*\n", ""),
        (
            r"(?m)^\| (OS|Kernel|CPU|Swap|Python|Python executable|PyTorch CUDA build) \|.*$",
            "| $1 | [this machine] |",
        ),
        // The memory summary's figures follow the sampler's timing.
        (
            r"(?m)^(\|[ A-Za-z-]+\|)(?: +\d+(?: MiB)? +\|){4}$",
            "$1 [figures] |",
        ),
    ];
    let mut s = issue.to_string();
    for (re, with) in rules {
        s = regex::Regex::new(re)
            .unwrap()
            .replace_all(&s, *with)
            .into_owned();
    }
    s
}

#[test]
fn issue_md_of_a_bisect() {
    let (_, files) = bundle();
    let issue = text(files, "ISSUE.md");
    // The bug template's sections, in its order.
    let sections = [
        "### Custom Node Testing",
        "### Expected Behavior",
        "### Actual Behavior",
        "### Steps to Reproduce",
        "### Debug Logs",
        "### Other",
    ];
    let mut at = 0;
    for s in sections {
        let i = issue[at..]
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing or out of order"));
        at += i;
    }
    assert!(issue.len() < 60_000, "GitHub's issue body limit");
    insta::assert_snapshot!("issue_md_bisect", filtered(&issue));
}

fn decode(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

fn pixels(rgb: &[u8], c: plotters::style::RGBColor) -> usize {
    rgb.chunks(3).filter(|p| p == &[c.0, c.1, c.2]).count()
}

#[test]
fn timelines_are_plots_of_the_recorded_samples() {
    let (_, files) = bundle();
    let (w, h, failing) = decode(&files["runs/001/timeline.png"]);
    assert_eq!((w, h), (plot::WIDTH, plot::TIMELINE_HEIGHT));
    assert!(w >= 1000, "readable when GitHub scales it to its column");
    // NVML used, ComfyUI's own VRAM, other processes, ComfyUI's CUDA view, RAM: all drawn
    // from the samples; the failure is marked.
    for c in [
        colors::NVML_USED,
        colors::COMFY_VRAM,
        colors::OTHERS,
        colors::CUDA_VIEW,
        colors::RAM_USED,
        colors::FAILURE,
    ] {
        assert!(pixels(&failing, c) > 40, "{c:?}: {}", pixels(&failing, c));
    }
    let (_, _, passing) = decode(&files["runs/002/timeline.png"]);
    assert_eq!(
        pixels(&passing, colors::FAILURE),
        0,
        "no failure marked in a pass"
    );
    assert!(pixels(&passing, colors::NVML_USED) > 40);
    let (w, _, matrix) = decode(&files["matrix.png"]);
    assert_eq!(w, plot::WIDTH);
    assert!(pixels(&matrix, colors::PASS) > 1000 && pixels(&matrix, colors::FAILURE) > 1000);
}

#[test]
fn a_run_folder_with_a_huge_log_stays_under_the_limit() {
    let install = FakeComfy::new("0.38.1", json!({"rules": [{"effect": "oom"}]}));
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let wf = support::fixture("workflows/sd15_txt2img.json");
    let out = vrambisect()
        .args([
            "run",
            "--json",
            "--comfyui",
            install.path_str(),
            "--workflow",
        ])
        .arg(&wf)
        .arg("--output")
        .arg(&run)
        .args(["--stall-timeout", "3s"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    install.assert_nothing_left();
    // 60,000 progress lines after the failure: ~3.8 MB of log, over what is kept.
    let log = run.join("comfyui.log");
    let mut body = std::fs::read_to_string(&log).unwrap();
    let head_marker = body.lines().next().unwrap().to_string();
    for i in 0..60_000 {
        body.push_str(&format!(
            "step {i:06}: sampling a long video, nothing to see here\n"
        ));
    }
    body.push_str("the very last line\n");
    std::fs::write(&log, body).unwrap();

    let zip = tmp.path().join("r.zip");
    let out = vrambisect()
        .arg("report")
        .arg(&run)
        .arg("--json")
        .arg("--output")
        .arg(&zip)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["source_kind"], "run");
    let size = std::fs::metadata(&zip).unwrap().len();
    assert!(size < 10_000_000, "{size} bytes");
    let files = unzip(&zip);
    assert!(files.contains_key("runs/001/timeline.png"));
    assert!(!files.contains_key("matrix.png") && !files.contains_key("result.json"));
    let kept = text(&files, "runs/001/comfyui.log");
    assert!(kept.contains(&head_marker.replace("\x1b[32m", "").replace("\x1b[0m", "")));
    assert!(kept.ends_with("the very last line\n"));
    assert!(kept.contains("lines trimmed by vrambisect report"));
    let note = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "runs/001/comfyui.log")
        .unwrap()["note"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(note.starts_with("trimmed"), "{note}");
    assert!(text(&files, "README.md").contains("trimmed"));
    // The ComfyUI folder came from the log; the failure is in ISSUE.md.
    let env: Value = serde_json::from_slice(&files["environment.json"]).unwrap();
    assert_eq!(
        env["comfyui_folder"]["source"],
        "the run's log (custom node paths)"
    );
    assert!(text(&files, "ISSUE.md").contains("torch.OutOfMemoryError"));
}

#[test]
fn no_redact_keeps_paths_and_warns() {
    let f = shared();
    let zip = f.root.join("out/raw.zip");
    let out = report(
        f,
        &f.session,
        &["--no-redact", "--output", zip.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("warning: --no-redact"), "{stderr}");
    let files = unzip(&zip);
    let log = text(&files, "runs/001/comfyui.log");
    assert!(log.contains("hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456"));
    assert!(log.contains("home/alice.smith/ComfyUI"));
    assert!(text(&files, "README.md").contains("Not redacted"));
}

#[test]
fn ram_not_returned_is_in_issue_md() {
    let install = support::comfy::FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "pass", "ram_growth_mb": 300}]}),
    );
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("run");
    let wf = support::fixture("workflows/sd15_txt2img.json");
    let out = vrambisect()
        .args([
            "run",
            "--json",
            "--iterations",
            "2",
            "--comfyui",
            install.path_str(),
        ])
        .arg("--workflow")
        .arg(&wf)
        .arg("--output")
        .arg(&run_dir)
        .output()
        .unwrap();
    install.assert_nothing_left();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, files) = bundle::report_to(&run_dir, &tmp.path().join("bundle.zip"));
    let issue = text(&files, "ISSUE.md");
    assert!(issue.contains("**RAM not returned.**"), "{issue}");
    assert!(
        issue.contains("RAM +300 MiB per prompt, not returned"),
        "{issue}"
    );
}

#[test]
fn an_incomplete_session_is_said_plainly() {
    // A bisect stopped by its run budget before a verdict.
    let install = support::comfy::FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom"}]}),
    );
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");
    let wf = support::fixture("workflows/sd15_txt2img.json");
    let out = vrambisect()
        .args([
            "bisect",
            "--json",
            "--max-runs",
            "1",
            "--comfyui",
            install.path_str(),
        ])
        .arg("--workflow")
        .arg(&wf)
        .arg("--output")
        .arg(&session)
        .output()
        .unwrap();
    install.assert_nothing_left();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["continue_with"].is_string(), "{doc:#}");
    let (out, files) = bundle::report_to(&session, &tmp.path().join("bundle.zip"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("warning: incomplete session: the bisect reached its run budget (1 run)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("from a bisect session of 1 run\n"),
        "{stdout}"
    );
    let issue = text(&files, "ISSUE.md");
    assert!(
        issue.contains("> **Incomplete session:** the bisect reached its run budget"),
        "{issue}"
    );
    assert!(issue.contains("(vrambisect bisect, 1 run)"), "{issue}");
    // Python's caret lines are not quoted.
    assert!(!issue.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && t.chars().all(|c| c == '^')
    }));
}

#[test]
fn bad_folders_and_outputs_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, doc, _) = support::json(&["report", tmp.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("neither a run folder")
    );
    let f = shared();
    let out = report(f, &f.session, &["--output", "bundle.tar"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not end in .zip"));
    // A mistyped folder is said, not made.
    let missing = tmp.path().join("no-such-folder");
    let target = missing.join("bundle.zip");
    let out = report(f, &f.session, &["--output", target.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("the folder {} does not exist", missing.display())),
        "{err}"
    );
    assert!(!missing.exists());
}

/// Copies a folder (links as links).
fn copy_tree(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Replaces `path` in the session by a link to `target`.
fn link(path: &Path, target: &Path) {
    if path.is_dir() {
        std::fs::remove_dir_all(path).unwrap();
    } else {
        let _ = std::fs::remove_file(path);
    }
    std::os::unix::fs::symlink(target, path).unwrap();
}

/// A session folder whose files link out of it (to a password file, to another session's
/// runs): every link is named, left out, and nothing it points at reaches the bundle.
#[test]
fn symbolic_links_out_of_the_folder_are_named_and_left_out() {
    let f = shared();
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");
    copy_tree(&f.session, &session);
    let outside = tmp.path().join("elsewhere");
    copy_tree(&f.session, &outside);
    let shadow = tmp.path().join("shadow");
    std::fs::write(
        &shadow,
        "root:$6$LinkedShadowHash$abcdefghijklmnop:19000:0:99999:7:::\n",
    )
    .unwrap();
    let marked = |name: &str| {
        let path = tmp.path().join(name);
        std::fs::write(&path, format!("{{\"planted\": \"linked-{name}\"}}\n")).unwrap();
        path
    };
    let shapes = [
        ("runs/001/comfyui.log", shadow.clone()),
        ("runs/001/history-1.json", marked("history.json")),
        ("runs/001/record.json", marked("record.json")),
        ("runs/001/workflow.json", marked("workflow.json")),
        ("runs/002", outside.join("runs/002")),
        ("session.json", marked("session.json")),
        ("result.json", marked("result.json")),
    ];
    // The linked run says so in its log, which must not come along.
    let linked_log = outside.join("runs/002/comfyui.log");
    let mut log = std::fs::read_to_string(&linked_log).unwrap();
    log.push_str("linked-run-log-line\n");
    std::fs::write(&linked_log, log).unwrap();
    for (name, target) in &shapes {
        link(&session.join(name), target);
    }
    let zip = tmp.path().join("bundle.zip");
    let out = report(f, &session, &["--output", zip.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (name, _) in &shapes {
        assert!(
            stdout.contains(&format!(
                "warning: left out of the bundle: {name} is a symbolic link"
            )),
            "{name} is not named: {stdout}"
        );
    }
    let files = unzip(&zip);
    for (name, bytes) in &files {
        let text = String::from_utf8_lossy(bytes);
        for marker in [
            "LinkedShadowHash",
            "root:",
            "linked-",
            "linked-run-log-line",
        ] {
            assert!(!text.contains(marker), "{marker} reached {name}");
        }
    }
    assert!(!files.keys().any(|k| k.starts_with("runs/002/")));

    // The runs folder itself a link: nothing to report on, said plainly.
    let session = tmp.path().join("runs-linked");
    copy_tree(&f.session, &session);
    link(&session.join("runs"), &outside.join("runs"));
    let out = report(f, &session, &["--json", "--output", zip.to_str().unwrap()]);
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(2), "{doc:#}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with("are symbolic links to elsewhere, which a bundle never follows"),
        "{doc:#}"
    );
}

/// A full disk under `--output`: one line saying so (exit 3 with the hint to free space), and
/// no `bundle.zip.part` left behind. A small file system is mounted in a namespace of the test's
/// own (`unshare -rm`): `.ci/run` runs it where the machine allows one and says in a line where
/// not (`cargo test --test cli -- --ignored report_cli::a_full_disk`).
#[test]
#[ignore = "needs unshare -rm to mount a small file system"]
fn a_full_disk_under_the_output_leaves_no_part_file() {
    let f = shared();
    let tmp = tempfile::tempdir().unwrap();
    let small = tmp.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=32k none '{dir}' && \"$0\" report \"$1\" --json --output '{dir}/bundle.zip'; code=$?; ls -A '{dir}'; exit $code",
        dir = small.display()
    );
    let exe = env!("CARGO_BIN_EXE_vrambisect");
    // The fixture's environment, for another program (unshare runs vrambisect).
    let cmd = command(f);
    let out = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", &script, exe])
        .arg(&f.session)
        .envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    let (json, listing) = stdout.split_at(stdout.rfind('}').unwrap() + 1);
    let doc: Value = serde_json::from_str(json).unwrap();
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bundle.zip"),
        "{doc:#}"
    );
    assert_eq!(listing.trim(), "", "left behind: {listing}");
}
