//! `vrambisect sample` end to end: the CUDA backend through the fake libcuda (one per
//! process, so in a subprocess), the fake ComfyUI, commands and signals, bad input.

use crate::support;

use serde_json::Value;
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use support::comfy::FakeComfy;
use support::gpu::FakeGpu;
use support::sampling::{fake_gpu, temp_file, wait_until};
use support::vrambisect;

const STATE: &str = "# vrambisect fake GPU state v1
gpu0.name=NVIDIA GeForce RTX 4090
gpu0.total=25757220864
gpu0.reserved=397410304
gpu0.used=9663676416
gpu0.cuda_free=15200000000
gpu0.cuda_context_bytes=300000000
";

fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The series `name` of a JSON summary.
fn series<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no series {name} in {doc:#}"))
}

fn has_series(doc: &Value, name: &str) -> bool {
    doc["series"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == name)
}

/// `vrambisect sample` pointed at the fake libraries (libcuda through the loader's path).
fn sample_cmd(gpu: &FakeGpu, args: &[&str]) -> Command {
    let mut cmd = vrambisect();
    cmd.arg("sample")
        .args(["--nvml-lib", gpu.nvml_path().to_str().unwrap()])
        .args(args)
        .env("LD_LIBRARY_PATH", gpu.path())
        .env_remove("VRAMBISECT_FAKE_GPU_STATE");
    cmd
}

fn spawn_piped(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(mut child: Child) -> Output {
    let mut out = Vec::new();
    let mut err = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_end(&mut err).unwrap();
    let status = child.wait().unwrap();
    Output {
        status,
        stdout: out,
        stderr: err,
    }
}

fn maps_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

#[test]
fn cuda_backend_reads_the_fake_and_measures_its_own_context() {
    let gpu = fake_gpu();
    gpu.write_state(STATE);
    let child = spawn_piped(sample_cmd(
        &gpu,
        &[
            "--json",
            "--cuda",
            "--interval",
            "10ms",
            "--duration",
            "1500ms",
        ],
    ));
    // NVML lists the tool's own process once its context exists, as a real driver does.
    let pid = child.id();
    assert!(wait_until(Duration::from_secs(5), || maps_of(pid).contains("libcuda")));
    gpu.write_state(&format!("{STATE}gpu0.procs={pid}:300000000\n"));
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = stdout_json(&out);
    let cuda_total = 25757220864u64 - 397410304;
    assert_eq!(doc["devices"][0]["cuda_total_bytes"], cuda_total);
    // The fake subtracts the context's own cost from what cuMemGetInfo reports free.
    let cuda_free = 15200000000u64 - 300000000;
    assert_eq!(series(&doc, "gpu0.cuda.free")["last"], cuda_free);
    assert_eq!(
        series(&doc, "gpu0.cuda.used")["last"],
        cuda_total - cuda_free
    );
    let nvml_free = 25757220864u64 - 397410304 - 9663676416;
    assert_eq!(
        series(&doc, "gpu0.nvml_minus_cuda")["last"],
        cuda_free as i64 - nvml_free as i64
    );
    assert_eq!(series(&doc, "gpu0.self.used")["max"], 300000000);
    assert_eq!(doc["cuda_context_bytes"], 300000000);
    assert_eq!(doc["unavailable"], Value::Array(vec![]), "{doc:#}");
}

#[test]
fn without_cuda_no_context_and_libcuda_is_never_loaded() {
    let gpu = fake_gpu();
    gpu.write_state(STATE);
    let child = spawn_piped(sample_cmd(
        &gpu,
        &["--json", "--interval", "10ms", "--duration", "600ms"],
    ));
    let pid = child.id();
    // Sampling is under way (NVML loaded) and libcuda is not there.
    assert!(wait_until(Duration::from_secs(5), || maps_of(pid)
        .contains("libnvidia-ml")));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!maps_of(pid).contains("libcuda"));
    let out = finish(child);
    let doc = stdout_json(&out);
    assert!(!has_series(&doc, "gpu0.cuda.free"));
    assert_eq!(doc["cuda_context_bytes"], Value::Null);
    assert!(has_series(&doc, "gpu0.nvml.used"));
}

#[test]
fn cuda_that_fails_to_start_is_one_line() {
    let gpu = fake_gpu();
    gpu.write_state(&format!("{STATE}cuda_init=no_device\n"));
    let out = sample_cmd(&gpu, &["--cuda", "--duration", "100ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    let notes: Vec<&str> = err.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].starts_with("note: cuda: CUDA failed to start"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn missing_nvml_is_one_line_on_stderr() {
    let out = vrambisect()
        .args([
            "sample",
            "--duration",
            "100ms",
            "--nvml-lib",
            "/no/such/libnvidia-ml.so.1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("note: nvml: cannot load /no/such/libnvidia-ml.so.1"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("| series"), "{text}");
    assert!(text.contains("ram.available"), "{text}");
}

#[test]
fn the_environment_variable_points_at_nvml() {
    let gpu = fake_gpu();
    gpu.write_state(STATE);
    let out = vrambisect()
        .args([
            "sample",
            "--json",
            "--duration",
            "100ms",
            "--interval",
            "10ms",
        ])
        .env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
        .output()
        .unwrap();
    let doc = stdout_json(&out);
    assert_eq!(series(&doc, "gpu0.nvml.used")["last"], 9663676416u64);
}

#[test]
fn the_fake_comfyui_is_followed_through_nvml_and_its_own_view() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let state = install.gpu_state();
    // A port chosen free can be taken by another test's ComfyUI before the stand-in binds it:
    // the stand-in then exits, and another port is tried.
    let (mut comfy, port) = (0..5)
        .find_map(|_| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let mut comfy = Command::new("python3")
                .args([
                    "main.py",
                    "--port",
                    &port.to_string(),
                    "--disable-auto-launch",
                ])
                .current_dir(install.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let up = wait_until(Duration::from_secs(20), || {
                matches!(comfy.try_wait(), Ok(Some(_)))
                    || (std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && state.exists())
            });
            // A stand-in that lost its port writes its state, then exits: another's answer
            // on that port is not its own.
            std::thread::sleep(Duration::from_millis(300));
            if up && matches!(comfy.try_wait(), Ok(None)) {
                return Some((comfy, port));
            }
            let _ = comfy.kill();
            let _ = comfy.wait();
            None
        })
        .expect("the fake ComfyUI did not come up");
    let url = format!("http://127.0.0.1:{port}");
    let gpu = fake_gpu();
    let out = sample_cmd(
        &gpu,
        &[
            "--json",
            "--interval",
            "20ms",
            "--duration",
            "700ms",
            "--pid",
            &comfy.id().to_string(),
            "--comfyui-url",
            &url,
        ],
    )
    .env("VRAMBISECT_FAKE_GPU_STATE", &state)
    .output()
    .unwrap();
    let _ = comfy.kill();
    let _ = comfy.wait();
    let doc = stdout_json(&out);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // What the stand-in published for its own pid is the tree's VRAM.
    let text = std::fs::read_to_string(&state).unwrap();
    let own: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("gpu0.procs="))
        .and_then(|v| {
            v.split(',').find_map(|e| {
                let (pid, bytes) = e.split_once(':')?;
                (pid == comfy.id().to_string()).then(|| bytes.parse().ok())?
            })
        })
        .expect("the stand-in lists itself");
    assert_eq!(series(&doc, "gpu0.tree.used")["last"], own);
    assert_eq!(series(&doc, "gpu0.nvml.used")["last"], own);
    assert_eq!(series(&doc, "gpu0.others.used")["last"], 0);
    assert!(
        series(&doc, "gpu0.comfy.vram_free")["last"]
            .as_u64()
            .unwrap()
            > 0
    );
    // Its CUDA free and NVML free come from one model: no disagreement.
    assert_eq!(series(&doc, "gpu0.nvml_minus_cuda")["last"], 0);
    assert!(series(&doc, "tree.rss")["last"].as_u64().unwrap() > 0);
    assert_eq!(doc["root_pid"], comfy.id());
    assert_eq!(doc["stopped_by"], "duration");
}

#[test]
fn a_command_is_followed_and_its_exit_status_passed_through() {
    let out = vrambisect()
        .args([
            "sample",
            "--json",
            "--interval",
            "10ms",
            "--nvml-lib",
            "/none",
        ])
        .args(["--", "sh", "-c", "echo from-the-command; sleep 0.2; exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let doc = stdout_json(&out);
    assert_eq!(doc["stopped_by"], "command_exited");
    assert_eq!(doc["command"]["exit_code"], 7);
    assert_eq!(doc["command"]["stopped_by_us"], false);
    assert_eq!(doc["command"]["argv"][0], "sh");
    assert_eq!(doc["root_pid"], doc["command"]["pid"]);
    assert!(
        stderr(&out).contains("from-the-command"),
        "the command's stdout went to stderr"
    );
}

#[test]
fn duration_ends_a_command_that_runs_on() {
    let t = Instant::now();
    let out = vrambisect()
        .args([
            "sample",
            "--json",
            "--duration",
            "300ms",
            "--nvml-lib",
            "/none",
        ])
        .args(["--", "sleep", "30"])
        .output()
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(10));
    let doc = stdout_json(&out);
    assert_eq!(doc["stopped_by"], "duration");
    assert_eq!(doc["command"]["signal"], libc::SIGTERM);
    assert_eq!(doc["command"]["stopped_by_us"], true);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
}

#[test]
fn ctrl_c_stops_the_command_group_and_keeps_the_summary() {
    let (_dir, pid_file) = temp_file("grandchild.pid");
    let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
    let mut cmd = vrambisect();
    cmd.args([
        "sample",
        "--json",
        "--interval",
        "10ms",
        "--nvml-lib",
        "/none",
    ])
    .args(["--", "sh", "-c", &script]);
    let child = spawn_piped(cmd);
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n'))
    }));
    let grandchild: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = finish(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["stopped_by"], "interrupted");
    assert_eq!(doc["command"]["stopped_by_us"], true);
    assert!(doc["samples"].as_u64().unwrap() > 0);
    assert!(
        wait_until(Duration::from_secs(2), || unsafe {
            libc::kill(grandchild, 0)
        } != 0),
        "the command's whole group is gone"
    );
}

#[test]
fn killed_mid_run_the_files_end_on_whole_lines() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("samples.csv");
    let mut child = vrambisect()
        .args(["sample", "--interval", "1ms", "--nvml-lib", "/none", "-o"])
        .arg(&csv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let jsonl = dir.path().join("samples.jsonl");
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&jsonl).is_ok_and(|t| t.lines().count() > 50)
    }));
    child.kill().unwrap();
    child.wait().unwrap();
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.ends_with('\n'));
    let mut lines = text.lines();
    let width = lines.next().unwrap().split(',').count();
    for l in lines {
        assert_eq!(l.split(',').count(), width, "{l}");
    }
    let text = std::fs::read_to_string(&jsonl).unwrap();
    assert!(text.ends_with('\n'));
    for l in text.lines() {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
}

#[test]
fn output_writes_csv_and_jsonl_beside_it() {
    let (_dir, csv) = temp_file("run.csv");
    let out = vrambisect()
        .args([
            "sample",
            "--duration",
            "100ms",
            "--interval",
            "10ms",
            "--nvml-lib",
            "/none",
            "--output",
        ])
        .arg(&csv)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let jsonl = csv.with_extension("jsonl");
    assert!(std::fs::read_to_string(&csv).unwrap().starts_with("t_ms,"));
    assert!(
        std::fs::read_to_string(&jsonl)
            .unwrap()
            .contains("\"type\":\"end\"")
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("wrote {}", csv.display())), "{text}");
    assert!(
        text.contains(&format!("wrote {}", jsonl.display())),
        "{text}"
    );
}

#[test]
fn bad_arguments_exit_2_with_one_clear_line() {
    let cases: &[(&[&str], &str)] = &[
        (&["sample", "--interval", "100"], "has no unit"),
        (&["sample", "--interval", "fast"], "not a duration"),
        (&["sample", "--duration", "1x"], "unknown unit"),
        (&["sample", "--interval", "0s"], "too short"),
        (&["sample", "--interval", "100us"], "too short"),
        (
            &["sample", "--pid", "1", "--", "true"],
            "cannot be used with",
        ),
        (
            &["sample", "--pid", "999999999"],
            "no process with pid 999999999",
        ),
        (&["sample", "--pid", "0"], "no process with pid 0"),
        (
            &["sample", "--nvml-lib", "/none", "--", "/no/such/program"],
            "cannot run /no/such/program",
        ),
        (
            &["sample", "--nvml-lib", "/none", "-o", "/no/such/dir/x.csv"],
            "/no/such/dir/x.csv",
        ),
    ];
    for (args, want) in cases {
        let out = vrambisect().args(*args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
}

/// `vrambisect run` on the fake ComfyUI with a fake libcuda on the loader's path; returns
/// the run's sampler summary.
fn run_summary(cuda: bool) -> Value {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let gpu = fake_gpu();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let wf = support::fixture("workflows/empty_invert_save.json");
    // The sampler opens NVML before ComfyUI starts, as on a real machine where the driver is
    // there first: the stand-in's state file must exist by then (it keeps what it finds).
    std::fs::write(install.gpu_state(), "# vrambisect fake GPU state v1\n").unwrap();
    let mut cmd = vrambisect();
    cmd.args([
        "run",
        "--json",
        "--comfyui",
        install.path_str(),
        "--workflow",
    ])
    .arg(&wf)
    .arg("--output")
    .arg(&out)
    .args(["--timeout", "60s", "--startup-timeout", "30s"])
    .args(["--nvml-lib", gpu.nvml_path().to_str().unwrap()])
    .env("LD_LIBRARY_PATH", gpu.path())
    .env("VRAMBISECT_FAKE_GPU_STATE", install.gpu_state());
    if cuda {
        cmd.arg("--cuda");
    }
    let result = cmd.output().unwrap();
    install.assert_nothing_left();
    let text = std::fs::read_to_string(out.join("samples-summary.json")).unwrap_or_else(|e| {
        panic!("no samples-summary.json ({e}): {}", stderr(&result));
    });
    serde_json::from_str(&text).unwrap()
}

#[test]
fn run_opens_no_cuda_context_unless_asked() {
    let default = run_summary(false);
    assert!(has_series(&default, "gpu0.nvml.used"), "{default:#}");
    assert!(!has_series(&default, "gpu0.cuda.free"), "{default:#}");
    assert_eq!(default["cuda_context_bytes"], Value::Null);
    // The control: the same run with --cuda does open one through the same fake libcuda.
    let asked = run_summary(true);
    assert!(has_series(&asked, "gpu0.cuda.free"), "{asked:#}");
}

#[test]
fn ctrl_c_ends_open_ended_sampling_normally() {
    let (_dir, csv) = temp_file("s.csv");
    let mut cmd = vrambisect();
    cmd.args([
        "sample",
        "--json",
        "--interval",
        "10ms",
        "--nvml-lib",
        "/none",
        "-o",
    ])
    .arg(&csv);
    let child = spawn_piped(cmd);
    // Samples on disk: the handler is in place.
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(&csv).is_ok_and(|t| t.lines().count() > 2)
    }));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = finish(child);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let doc = stdout_json(&out);
    assert_eq!(doc["stopped_by"], "interrupted");
    assert!(doc["samples"].as_u64().unwrap() > 0);
}
