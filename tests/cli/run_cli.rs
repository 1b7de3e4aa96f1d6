//! `vrambisect run` against the fake ComfyUI: every outcome kind, both log formats, bad
//! input, and no process left behind.

use crate::support;

use serde_json::{Value, json};
use support::comfy::FakeComfy;
use support::{fixture, out_dir};

const SD15: &str = "workflows/sd15_txt2img.json";
const EMPTY: &str = "workflows/empty_invert_save.json";

/// Runs `vrambisect run` on `install` with `workflow`, short test timeouts, and `extra`.
fn run(install: &FakeComfy, workflow: &str, extra: &[&str]) -> (i32, Value, tempfile::TempDir) {
    let mut args = vec![
        "--stall-timeout",
        "3s",
        "--timeout",
        "60s",
        "--startup-timeout",
        "30s",
    ];
    args.extend_from_slice(extra);
    support::on_install("run", install, workflow, "run", &args)
}

fn rule(effect: &str) -> Value {
    json!({ "rules": [{ "effect": effect }] })
}

fn evidence(doc: &Value) -> String {
    doc["evidence"].to_string()
}

#[test]
fn pass_with_two_iterations_keeps_everything() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, doc, tmp) = run(&install, SD15, &["--iterations", "2"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["outcome"], "pass");
    assert_eq!(doc["iterations"].as_array().unwrap().len(), 2);
    assert_eq!(doc["iterations"][1]["cache_bust"], "seed");
    assert_eq!(doc["effective"]["dynamic_vram"], true);
    assert_eq!(doc["effective"]["vram_state"], "NORMAL_VRAM");
    assert_eq!(doc["effective"]["pinned_memory"], true);
    assert_eq!(doc["effective"]["async_offload_streams"], 2);
    assert_eq!(doc["effective"]["allocator"], "cudaMallocAsync");
    assert_eq!(doc["effective"]["comfyui_version"], "0.38.1");
    assert_eq!(doc["teardown"]["group_empty"], true);
    let argv: Vec<&str> = doc["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(argv.contains(&"--disable-auto-launch") && argv.contains(&"--disable-assets"));
    let dir = tmp.path().join("run");
    for file in [
        "record.json",
        "comfyui.log",
        "workflow.json",
        "history-1.json",
        "history-2.json",
        "system_stats.json",
    ] {
        assert!(dir.join(file).is_file(), "{file} kept");
    }
    // The run folder holds raw logs and the workflow: only its owner may read it.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                assert_eq!(mode(&path), 0o600, "{}", path.display());
            }
        }
    }
    assert!(
        std::fs::read_to_string(dir.join("comfyui.log"))
            .unwrap()
            .contains("To see the GUI go to")
    );
}

#[test]
fn iterations_without_a_seed_free_the_cache() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, doc, _) = run(&install, EMPTY, &["--iterations", "2"]);
    assert_eq!(code, 0);
    assert_eq!(doc["iterations"][1]["cache_bust"], "free");
    // The second prompt really executed its nodes: not served from the cache.
    assert_eq!(
        doc["iterations"][1]["nodes_executed"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

#[test]
fn cuda_oom_native_and_async() {
    for (effect, needle) in [
        ("oom", "CUDA out of memory. Tried to allocate"),
        ("oom_async", "Allocation on device"),
    ] {
        let install = FakeComfy::new("0.38.1", rule(effect));
        let (code, doc, _) = run(&install, SD15, &[]);
        assert_eq!(code, 1, "{effect}");
        assert_eq!(doc["outcome"], "oom", "{effect}");
        assert!(
            evidence(&doc).contains(needle),
            "{effect}: {}",
            evidence(&doc)
        );
        assert_eq!(doc["iterations"][0]["outcome"], "oom");
    }
}

#[test]
fn memory_failures_table() {
    let cases = [
        (
            "accelerator_oom",
            "accelerator_oom",
            "CUDA error: out of memory",
        ),
        ("host_oom", "host_oom", "DefaultCPUAllocator"),
        ("vbar", "vbar", "VBAR allocation failed"),
        ("aimdo_fault", "aimdo_fault", "Fault failed"),
    ];
    for (effect, outcome, needle) in cases {
        let install = FakeComfy::new("0.38.1", rule(effect));
        let (code, doc, _) = run(&install, SD15, &[]);
        assert_eq!(code, 1, "{effect}");
        assert_eq!(doc["outcome"], outcome, "{effect}: {doc:#}");
        assert!(
            evidence(&doc).contains(needle),
            "{effect}: {}",
            evidence(&doc)
        );
    }
}

#[test]
fn tensorrt_errors_on_a_successful_prompt() {
    let install = FakeComfy::new("0.38.1", rule("tensorrt"));
    let (code, doc, tmp) = run(&install, SD15, &[]);
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "tensorrt_allocator");
    assert!(
        evidence(&doc).contains("defaultAllocator.cpp"),
        "{}",
        evidence(&doc)
    );
    let history = std::fs::read_to_string(tmp.path().join("run/history-1.json")).unwrap();
    assert!(
        history.contains("\"success\""),
        "ComfyUI itself called it a success"
    );
}

#[test]
fn failure_only_on_the_second_prompt() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"when": {"iteration": 2}, "effect": "aimdo_fault"}]}),
    );
    let (code, doc, _) = run(&install, SD15, &["--iterations", "3"]);
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "aimdo_fault");
    let its = doc["iterations"].as_array().unwrap();
    assert_eq!(its.len(), 2, "stops at the first failure");
    assert_eq!(its[0]["outcome"], "pass");
    assert_eq!(its[1]["outcome"], "aimdo_fault");
}

#[test]
fn hang_after_requested_to_load() {
    let install = FakeComfy::new("0.38.1", rule("hang"));
    let (code, doc, _) = run(&install, SD15, &["--stall-timeout", "1s"]);
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "hang");
    assert!(
        evidence(&doc).contains("Requested to load"),
        "{}",
        evidence(&doc)
    );
}

#[test]
fn crash_by_abort_and_by_sigkill() {
    let install = FakeComfy::new("0.38.1", rule("abort"));
    let (code, doc, _) = run(&install, SD15, &[]);
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "crash");
    assert!(
        evidence(&doc).contains("Fatal Python error: Aborted"),
        "{}",
        evidence(&doc)
    );

    let install = FakeComfy::new("0.38.1", rule("oom_kill"));
    let (code, doc, _) = run(&install, SD15, &[]);
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "crash");
    assert!(doc["explanation"].as_str().unwrap().contains("OOM killer"));
    assert!(evidence(&doc).contains("SIGKILL"));
}

#[test]
fn timeout_of_a_slow_prompt() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "pass", "slow": 30}], "timing": {"step_time": 0.2}}),
    );
    let (code, doc, _) = run(
        &install,
        SD15,
        &["--timeout", "2s", "--stall-timeout", "1m"],
    );
    assert_eq!(code, 1);
    assert_eq!(doc["outcome"], "timeout");
}

#[test]
fn flag_rejected_by_argparse() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, doc, _) = run(&install, SD15, &["--", "--no-such-flag"]);
    assert_eq!(
        code, 125,
        "untestable: git bisect run skips a version that lacks the flag"
    );
    assert_eq!(doc["outcome"], "flag_rejected");
    assert_eq!(
        doc["evidence"][0],
        "main.py: error: unrecognized arguments: --no-such-flag"
    );
}

#[test]
fn old_install_rejects_dynamic_vram_flags() {
    let install = FakeComfy::new("0.3.64", Value::Null);
    let (code, doc, _) = run(&install, SD15, &["--", "--cpu", "--disable-dynamic-vram"]);
    assert_eq!(code, 125);
    assert_eq!(doc["outcome"], "flag_rejected");
    assert_eq!(
        doc["evidence"][0],
        "main.py: error: unrecognized arguments: --disable-dynamic-vram"
    );
}

#[test]
fn startup_failure_is_untestable() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "startup_crash", "kind": "missing_aimdo"}]}),
    );
    let (code, doc, _) = run(&install, SD15, &[]);
    assert_eq!(code, 125);
    assert_eq!(doc["outcome"], "startup_failed");
    assert!(evidence(&doc).contains("No module named 'comfy_aimdo'"));
    assert!(
        doc["explanation"]
            .as_str()
            .unwrap()
            .contains("pip install -r requirements.txt")
    );
}

#[test]
fn invalid_workflow_is_untestable() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, doc, tmp) = run(
        &install,
        "captures/workflows/api/sd15_txt2img_missing_checkpoint.json",
        &[],
    );
    assert_eq!(code, 125);
    assert_eq!(doc["outcome"], "invalid_workflow");
    assert!(
        evidence(&doc).contains("ckpt_name: 'missing.safetensors' not in"),
        "{}",
        evidence(&doc)
    );
    assert!(tmp.path().join("run/rejected-1.json").is_file());
}

#[test]
fn plain_log_format_of_0_3_64() {
    let install = FakeComfy::new("0.3.64", Value::Null);
    let (code, doc, _) = run(&install, EMPTY, &["--", "--cpu"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["effective"]["comfyui_version"], "0.3.64");
    assert_eq!(doc["effective"]["dynamic_vram"], false);
    assert_eq!(doc["effective"]["vram_state"], "DISABLED");
    assert_eq!(doc["effective"]["allocator"], "none");
}

#[test]
fn log_disagreeing_with_the_prediction_is_a_warning() {
    let install = FakeComfy::new("0.38.1", json!({"machine": {"aimdo": "no_native"}}));
    let (code, doc, _) = run(&install, EMPTY, &[]);
    assert_eq!(code, 0);
    assert_eq!(doc["effective"]["dynamic_vram"], false);
    assert!(
        doc["warnings"][0]
            .as_str()
            .unwrap()
            .contains("Dynamic VRAM is off according to the log")
    );
}

// --- bad input: one line, documented exit code, nothing started ------------------------

fn bad(args: &[&str]) -> (i32, String) {
    let out = support::vrambisect().args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A UI-format save runs: converted, once ComfyUI is up, as its frontend would queue it.
#[test]
fn ui_format_workflow() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, doc, tmp) = run(&install, "workflows/ui_default.json", &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["outcome"], "pass");
    let dir = std::path::PathBuf::from(out_dir(tmp.path(), "run"));
    let queued: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("workflow.json")).unwrap()).unwrap();
    assert_eq!(queued["3"]["class_type"], "KSampler");
    assert!(dir.join("workflow-source.json").is_file());
}

/// A node saved by a newer version of it (one widget value more): queued as the frontend
/// would, with a warning naming it, kept in the record.
#[test]
fn a_node_saved_by_another_version_runs_with_a_warning() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let mut ui: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("workflows/ui_default.json")).unwrap(),
    )
    .unwrap();
    let ksampler = ui["nodes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|n| n["type"] == "KSampler")
        .unwrap();
    ksampler["widgets_values"]
        .as_array_mut()
        .unwrap()
        .push(Value::from("a newer widget"));
    let tmp = tempfile::tempdir().unwrap();
    let wf = tmp.path().join("newer.json");
    std::fs::write(&wf, ui.to_string()).unwrap();
    let (code, doc, _out) = run(&install, wf.to_str().unwrap(), &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["outcome"], "pass");
    let warnings: Vec<&str> = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        warnings.iter().any(|w| w.contains(
            "(KSampler): 8 saved widget values where this ComfyUI's definition makes 7 widgets"
        ) && w.ends_with("the last 1 dropped")),
        "{warnings:?}"
    );
}

#[test]
fn malformed_workflow() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let wf = fixture("workflows/malformed.json");
    let (code, err) = bad(&[
        "run",
        "--comfyui",
        install.path_str(),
        "--workflow",
        wf.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("line 2, column"), "{err}");
}

#[test]
fn missing_comfyui_folder_and_workflow() {
    let wf = fixture(SD15);
    let (code, err) = bad(&[
        "run",
        "--comfyui",
        "/no/such/ComfyUI",
        "--workflow",
        wf.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("does not exist"), "{err}");
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, err) = bad(&[
        "run",
        "--comfyui",
        install.path_str(),
        "--workflow",
        "/no/such.json",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read workflow"), "{err}");
}

#[test]
fn python_that_does_not_run_is_untestable() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let wf = fixture(SD15);
    let (code, err) = bad(&[
        "run",
        "--comfyui",
        install.path_str(),
        "--workflow",
        wf.to_str().unwrap(),
        "--python",
        "/no/such/python",
    ]);
    assert_eq!(code, 125);
    assert!(err.contains("cannot run Python"), "{err}");
}

#[test]
fn bad_durations_are_usage_errors() {
    let (code, err) = bad(&[
        "run",
        "--comfyui",
        ".",
        "--workflow",
        "x",
        "--timeout",
        "soon",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--timeout"), "{err}");
}

#[test]
fn an_existing_run_folder_is_never_overwritten() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("record.json"), "{}").unwrap();
    let wf = fixture(SD15);
    let (code, err) = bad(&[
        "run",
        "--comfyui",
        install.path_str(),
        "--workflow",
        wf.to_str().unwrap(),
        "--output",
        tmp.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("not empty"));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("record.json")).unwrap(),
        "{}"
    );
}

// --- signals: Ctrl-C and SIGTERM end cleanly and leave nothing -------------------------

/// Starts `run` on a prompt that hangs after `Requested to load`, and waits until it does.
fn start_hanging_run() -> (FakeComfy, tempfile::TempDir, std::process::Child) {
    start_hanging_run_with(&[])
}

/// A run whose prompt hangs, started with `extra` arguments, once ComfyUI is loading.
fn start_hanging_run_with(extra: &[&str]) -> (FakeComfy, tempfile::TempDir, std::process::Child) {
    let install = FakeComfy::new("0.38.1", rule("hang"));
    let tmp = tempfile::tempdir().unwrap();
    let out = out_dir(tmp.path(), "run");
    let wf = fixture(SD15);
    let child = support::vrambisect()
        .args([
            "run",
            "--json",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
        ])
        .args(["--output", &out, "--stall-timeout", "1m"])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    support::wait_for_text(&tmp.path().join("run/comfyui.log"), "Requested to load");
    (install, tmp, child)
}

fn signal_during_hang(signal: i32, presses: u32) -> (i32, Value) {
    let (install, tmp, child) = start_hanging_run();
    for _ in 0..presses {
        unsafe {
            libc::kill(child.id() as i32, signal);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let output = child.wait_with_output().unwrap();
    install.assert_nothing_left();
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("run/record.json")).unwrap())
            .unwrap();
    assert_eq!(doc, record, "what was printed is what was kept");
    (output.status.code().unwrap_or(-1), record)
}

#[test]
fn ctrl_c_ends_the_run_cleanly() {
    let (code, record) = signal_during_hang(libc::SIGINT, 1);
    assert_eq!(code, 130);
    assert_eq!(record["outcome"], "interrupted");
    assert_eq!(record["iterations"][0]["outcome"], "interrupted");
}

#[test]
fn second_ctrl_c_kills_at_once() {
    let (code, record) = signal_during_hang(libc::SIGINT, 2);
    assert_eq!(code, 130);
    assert_eq!(record["outcome"], "interrupted");
}

#[test]
fn sigterm_to_the_tool_tears_comfyui_down() {
    let (code, record) = signal_during_hang(libc::SIGTERM, 1);
    assert_eq!(code, 130);
    assert_eq!(record["teardown"]["group_empty"], true);
}

#[test]
fn sigkill_of_the_tool_takes_comfyui_with_it() {
    let (install, _tmp, mut child) = start_hanging_run();
    assert!(!install.processes().is_empty(), "ComfyUI is running");
    child.kill().unwrap(); // SIGKILL: no cleanup code of the tool runs
    child.wait().unwrap();
    // The parent-death signal takes ComfyUI down with the tool.
    install.assert_nothing_left();
}

#[test]
fn low_host_memory_stops_the_run_as_host_oom() {
    let install = FakeComfy::new("0.38.1", json!({"timing": {"node_time": 0.5}}));
    // A threshold above what any machine has available triggers at the first check.
    let (code, doc, _) = run(&install, SD15, &["--min-available-ram", "100000G"]);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["outcome"], "host_oom");
    assert!(
        doc["explanation"]
            .as_str()
            .unwrap()
            .contains("before the kernel's OOM killer")
    );
}

#[test]
fn ram_kept_after_each_prompt_is_a_finding() {
    // Every prompt keeps 300 MiB (a node caching tensors): the prompts pass, RAM grows.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "pass", "ram_growth_mb": 300}]}),
    );
    let (code, doc, tmp) = run(&install, SD15, &["--iterations", "3"]);
    assert_eq!(code, 0, "{doc:#}");
    let g = &doc["ram_growth"];
    assert_eq!(g["prompts"], 2, "{doc:#}");
    let per = g["per_prompt_bytes"].as_i64().unwrap();
    assert!((250 << 20..400 << 20).contains(&per), "{per}");
    let statement = g["statement"].as_str().unwrap();
    assert!(
        statement.starts_with("RAM +") && statement.contains("per prompt, not returned"),
        "{statement}"
    );
    for it in doc["iterations"].as_array().unwrap() {
        assert!(
            it["ram_retained_bytes"].as_i64().unwrap() > 200 << 20,
            "{it}"
        );
    }
    // The human summary says it too.
    let record = tmp.path().join("run/record.json");
    let rec: vrambisect::run::RunRecord =
        serde_json::from_str(&std::fs::read_to_string(record).unwrap()).unwrap();
    let mut out = Vec::new();
    vrambisect::output::Answer::render(&rec, &vrambisect::output::Style::plain(), &mut out)
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(statement), "{text}");
}

#[test]
fn a_stopped_prompt_has_no_ram_figure() {
    // The RAM guard stops the prompt: no "after" reading of a live process, so no figure
    // (it was -928 MiB before), and no growth finding.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"timing": {"node_time": 0.5}, "rules": [{"effect": "pass", "ram_growth_mb": 100}]}),
    );
    let (code, doc, _) = run(&install, SD15, &["--min-available-ram", "100000G"]);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["outcome"], "host_oom");
    for it in doc["iterations"].as_array().unwrap() {
        assert!(it["ram_retained_bytes"].is_null(), "{it}");
    }
    assert!(doc["ram_growth"].is_null());
}

/// Starts `vrambisect run --json` on `install` with its output in `tmp/name`, its locks in
/// `locks`, and (with `gpu`) the fake NVIDIA GPU the stand-in simulates.
fn spawn_session(
    install: &FakeComfy,
    tmp: &std::path::Path,
    name: &str,
    locks: &std::path::Path,
    gpu: Option<&support::gpu::FakeGpu>,
) -> std::process::Child {
    let wf = fixture(SD15);
    let mut cmd = support::vrambisect();
    cmd.args([
        "run",
        "--json",
        "--comfyui",
        install.path_str(),
        "--workflow",
    ])
    .arg(&wf)
    .args(["--output", &out_dir(tmp, name)])
    .env("VRAMBISECT_LOCK_DIR", locks)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    if let Some(gpu) = gpu {
        cmd.env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
            .env("VRAMBISECT_FAKE_GPU_STATE", install.gpu_state());
    }
    cmd.spawn().unwrap()
}

/// Whether a process holds the `flock` on `path`, read from `/proc/locks` (looking, not
/// trying the lock, which could make the holder wait).
fn lock_is_held(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let inode = format!(":{}", meta.ino());
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF`
        f.len() >= 6 && f[1] == "FLOCK" && f[5].ends_with(&inode)
    })
}

#[test]
fn two_sessions_on_one_gpu_take_turns() {
    let install = FakeComfy::new("0.38.1", json!({"timing": {"node_time": 0.3}}));
    install.write_idle_gpu_state(&[]);
    let gpu = support::sampling::fake_gpu();
    let locks = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // One lock file per GPU, named by its UUID.
    let lock = locks
        .path()
        .join("gpu-GPU-3f2c9a4e-0000-4000-8000-000000000001.lock");
    let a = spawn_session(&install, tmp.path(), "a", locks.path(), Some(&gpu));
    // b starts once a holds the GPU (seen by the lock, not guessed by a sleep); a's prompt
    // takes seconds more, so b has to wait its turn.
    let held = std::time::Instant::now();
    while !lock_is_held(&lock) {
        assert!(
            held.elapsed() < std::time::Duration::from_secs(30),
            "the first session never took the GPU"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let b = spawn_session(&install, tmp.path(), "b", locks.path(), Some(&gpu));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    install.assert_nothing_left();
    let da: Value = serde_json::from_slice(&a.stdout).unwrap();
    let db: Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(da["outcome"], "pass", "{da:#}");
    assert_eq!(db["outcome"], "pass", "{db:#}");
    assert_ne!(da["port"], db["port"]);
    assert_eq!(da["gpu_wait_ms"], 0, "the first got the GPU at once");
    assert!(
        db["gpu_wait_ms"].as_u64().unwrap() > 0,
        "the second waited its turn"
    );
    assert!(
        String::from_utf8_lossy(&b.stderr).contains("waiting for the GPU: vrambisect pid"),
        "and said who it waited for: {}",
        String::from_utf8_lossy(&b.stderr)
    );
    assert_eq!(
        std::fs::metadata(&lock).unwrap().len(),
        0,
        "the lock file stays empty"
    );
}

#[test]
fn without_a_gpu_sessions_do_not_wait_for_each_other() {
    let install = FakeComfy::new("0.38.1", json!({"timing": {"node_time": 0.3}}));
    let locks = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let a = spawn_session(&install, tmp.path(), "a", locks.path(), None);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let b = spawn_session(&install, tmp.path(), "b", locks.path(), None);
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    install.assert_nothing_left();
    for out in [&a, &b] {
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["outcome"], "pass", "{doc:#}");
        assert_eq!(doc["gpu_wait_ms"], 0, "{doc:#}");
    }
    assert_eq!(std::fs::read_dir(locks.path()).unwrap().count(), 0);
}

/// Run as root (`.ci/run` does where it can): `cargo test --test cli -- --ignored
/// run_cli::a_session_of_another_user`.
#[test]
#[ignore = "needs root to act as a second user"]
fn a_session_of_another_user_on_the_gpu_is_waited_for() {
    assert_eq!(
        unsafe { libc::getuid() },
        0,
        "needs root to act as a second user"
    );
    let install = FakeComfy::new("0.38.1", Value::Null);
    install.write_idle_gpu_state(&[]);
    let gpu = support::sampling::fake_gpu();
    let locks = tempfile::tempdir().unwrap();
    // A shared folder as vrambisect makes it (like /tmp), where user nobody's session holds
    // the GPU's lock (a file it created itself).
    let shared = locks.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(locks.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let lock = shared.join("gpu-GPU-3f2c9a4e-0000-4000-8000-000000000001.lock");
    let mut theirs = std::process::Command::new("python3")
        .args([
            "-c",
            "import fcntl, os, sys, time\n\
os.setgid(65534); os.setuid(65534)\n\
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o444)\n\
fcntl.flock(fd, fcntl.LOCK_EX)\n\
print('held', flush=True)\n\
time.sleep(float(sys.argv[2]))\n",
        ])
        .arg(&lock)
        .arg("2")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut held = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(theirs.stdout.as_mut().unwrap()),
        &mut held,
    )
    .unwrap();
    assert_eq!(held.trim(), "held");
    let tmp = tempfile::tempdir().unwrap();
    let ours = spawn_session(&install, tmp.path(), "ours", &shared, Some(&gpu));
    let out = ours.wait_with_output().unwrap();
    theirs.wait().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["outcome"], "pass", "{doc:#}");
    assert!(doc["gpu_wait_ms"].as_u64().unwrap() > 500, "{doc:#}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("(another user, uid 65534)"), "{stderr}");
    // Their file, untouched.
    let meta = std::fs::metadata(&lock).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534);
    assert_eq!(meta.len(), 0);
    install.assert_nothing_left();
}

#[test]
fn a_long_silent_load_that_fills_ram_is_not_a_hang() {
    // 12 s without a log line or a websocket message about the prompt, the process's RAM
    // growing all along (a model read from a slow disk): with a 5 s stall timeout it passes.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "slow_load", "load_seconds": 12, "node": "CheckpointLoaderSimple"}]}),
    );
    let (code, doc, _) = run(&install, SD15, &["--stall-timeout", "5s"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["outcome"], "pass");
    assert!(doc["iterations"][0]["duration_ms"].as_u64().unwrap() >= 12_000);
}

#[test]
fn sigkill_of_the_tool_takes_comfyui_with_it_behind_a_wrapper_that_does_not_exec() {
    // A launcher-style wrapper: ComfyUI is its child, not the process vrambisect started, so
    // the parent-death signal reaches only the wrapper.
    let bin = tempfile::tempdir().unwrap();
    let wrapper = bin.path().join("python-wrapper.sh");
    std::fs::write(&wrapper, "#!/bin/sh\npython3 \"$@\"\necho wrapper done\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (install, _tmp, mut child) =
        start_hanging_run_with(&["--python", wrapper.to_str().unwrap()]);
    assert!(
        install.processes().len() >= 2,
        "the wrapper and ComfyUI run"
    );
    child.kill().unwrap(); // SIGKILL: no cleanup code of the tool runs
    child.wait().unwrap();
    install.assert_nothing_left();
}

/// A proxy in the environment (a corporate network; a hub reached through one) must not be
/// asked for ComfyUI on the loopback address: here every proxy variable points at a closed
/// port, and the run and the bisect go on as without them.
#[test]
fn a_proxy_in_the_environment_is_not_used_for_comfyui() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let tmp = tempfile::tempdir().unwrap();
    let proxy = "http://127.0.0.1:9";
    let with_proxy = |cmd: &mut std::process::Command| {
        for var in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            cmd.env(var, proxy);
        }
        cmd.env_remove("NO_PROXY").env_remove("no_proxy");
    };
    let wf = fixture(SD15);
    let mut cmd = support::vrambisect();
    cmd.args([
        "run",
        "--json",
        "--comfyui",
        install.path_str(),
        "--workflow",
    ])
    .arg(&wf)
    .args([
        "--output",
        &out_dir(tmp.path(), "run"),
        "--startup-timeout",
        "30s",
    ]);
    with_proxy(&mut cmd);
    let out = cmd.output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{doc:#}");
    assert_eq!(doc["outcome"], "pass");

    std::fs::write(
        install.path().join("scenario.json"),
        json!({"rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom_async", "node": "KSampler"}]})
            .to_string(),
    )
    .unwrap();
    let mut cmd = support::vrambisect();
    cmd.args([
        "bisect",
        "--json",
        "--comfyui",
        install.path_str(),
        "--workflow",
    ])
    .arg(&wf)
    .args([
        "--output",
        &out_dir(tmp.path(), "session"),
        "--startup-timeout",
        "30s",
    ]);
    with_proxy(&mut cmd);
    let out = cmd.output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    install.assert_nothing_left();
}

/// vrambisect stopped (SIGSTOP, a suspended laptop) for longer than `--stall-timeout` while
/// ComfyUI ran out of memory: the time the tool did not run is not ComfyUI's silence, so the
/// run is the OOM it was, not a hang.
#[test]
fn the_tool_stopped_past_the_stall_timeout_does_not_make_a_hang() {
    let scenario = json!({
        "timing": {"node_time": 0.4},
        "rules": [{"effect": "oom"}]
    });
    let install = FakeComfy::new("0.38.1", scenario);
    let wf = fixture(SD15);
    for attempt in 0..2 {
        let tmp = tempfile::tempdir().unwrap();
        let out = std::path::PathBuf::from(out_dir(tmp.path(), "run"));
        let child = support::vrambisect()
            .args([
                "run",
                "--json",
                "--comfyui",
                install.path_str(),
                "--workflow",
            ])
            .arg(&wf)
            .arg("--output")
            .arg(&out)
            .args(["--stall-timeout", "2s", "--startup-timeout", "30s"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        support::wait_for_text(&out.join("comfyui.log"), "got prompt");
        let pid = child.id() as i32;
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        // The OOM comes (about 1.5 s in) and ComfyUI falls silent while the tool is stopped.
        std::thread::sleep(std::time::Duration::from_secs(5));
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let output = child.wait_with_output().unwrap();
        let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(
            doc["outcome"], "oom",
            "attempt {attempt}: {}",
            doc["iterations"]
        );
        install.assert_nothing_left();
    }
}

/// A workflow saved by Notepad (UTF-8 with a byte-order mark) or by PowerShell's `>` (UTF-16LE
/// with one) runs as the same workflow saved plainly.
#[test]
fn workflows_in_the_encodings_windows_editors_write_run() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let text = std::fs::read_to_string(fixture(SD15)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut bom = vec![0xEF, 0xBB, 0xBF];
    bom.extend(text.as_bytes());
    let mut utf16 = vec![0xFF, 0xFE];
    utf16.extend(text.encode_utf16().flat_map(u16::to_le_bytes));
    for (name, bytes) in [("notepad.json", bom), ("powershell.json", utf16)] {
        let path = tmp.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let (code, doc, _) = run(&install, path.to_str().unwrap(), &[]);
        assert_eq!(code, 0, "{name}: {doc:#}");
        assert_eq!(doc["outcome"], "pass", "{name}");
    }
}

/// Flags that argparse accumulates (`--extra-model-paths-config` appends) start the stand-in
/// as they start ComfyUI (its flag probe once failed on them, ending every run
/// `startup_failed`).
#[test]
fn an_appending_flag_starts_the_stand_in() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let tmp = tempfile::tempdir().unwrap();
    let yaml = tmp.path().join("extra_model_paths.yaml");
    std::fs::write(&yaml, "comfyui:\n  base_path: /tmp\n").unwrap();
    let (code, doc, _) = run(
        &install,
        SD15,
        &[
            "--",
            "--extra-model-paths-config",
            yaml.to_str().unwrap(),
            "--extra-model-paths-config",
            yaml.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["outcome"], "pass");
}

#[test]
fn cuda_errors_that_memory_features_cause_are_named_node_errors() {
    let cases = [
        ("cuda_invalid_argument", "CUDA error: invalid argument"),
        ("cuda_not_supported", "CUDA error: operation not supported"),
        (
            "cuda_illegal_address",
            "CUDA error: an illegal memory access was encountered",
        ),
    ];
    for (effect, needle) in cases {
        let install = FakeComfy::new("0.38.1", rule(effect));
        let (code, doc, _) = run(&install, SD15, &[]);
        assert_eq!(code, 1, "{effect}");
        assert_eq!(doc["outcome"], "node_error", "{effect}: {doc:#}");
        assert!(
            evidence(&doc).contains(needle),
            "{effect}: {}",
            evidence(&doc)
        );
        let named = doc["iterations"][0]["signatures"].to_string();
        assert!(named.contains(effect), "{effect}: {doc:#}");
    }
}
