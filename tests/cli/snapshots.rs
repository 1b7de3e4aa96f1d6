//! What every command shows a person (stdout and stderr) and prints with `--json`, locked in
//! reviewed snapshots (`tests/snapshots/`), run against the stand-in and the fake GPU.
//!
//! Times, temporary paths, ports, pids, ids and the sizes this machine's RAM decides are
//! replaced by placeholders; everything else must stay as it is, so a change of what a user
//! sees shows up as a snapshot diff. Update with `INSTA_UPDATE=always cargo test --test
//! snapshots` and review the diff.

use crate::support;

use regex::Regex;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;
use std::sync::{LazyLock, OnceLock};
use support::comfy::FakeComfy;
use support::gpu::FakeGpu;

const SD15: &str = "workflows/sd15_txt2img.json";

/// How much of an output this machine decides.
#[derive(Clone, Copy, PartialEq)]
enum Volatile {
    /// Only paths, times, ports, ids.
    Little,
    /// Also sizes and durations (RAM, disk, run times).
    Sizes,
}

struct Replace(&'static LazyLock<Regex>, &'static str);

macro_rules! re {
    ($name:ident, $pat:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| Regex::new($pat).unwrap());
    };
}
re!(
    UUID,
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
);
re!(
    TIME,
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?"
);
re!(PORT_ARG, r#"("--port",\s*)"\d+""#);
re!(PORT_TEXT, r"(--port |127\.0\.0\.1:|localhost:)\d+");
re!(PID, r"(process|pid) \d+");
re!(DURATION, r"\b\d+(\.\d+)? ?(ms|s|µs)\b");
re!(SIZE, r"\b\d+(\.\d+)? ?(GiB|MiB|KiB|KB|MB|GB|B)\b");
re!(RULE, r"[-=]{3,}");
re!(SPACES, r" {2,}");

static ALWAYS: &[Replace] = &[
    Replace(&UUID, "[uuid]"),
    Replace(&TIME, "[time]"),
    Replace(&PORT_ARG, "$1\"[port]\""),
    Replace(&PORT_TEXT, "$1[port]"),
    Replace(&PID, "$1 [pid]"),
];
static SIZES: &[Replace] = &[Replace(&DURATION, "[dur]"), Replace(&SIZE, "[size]")];
/// Column widths follow the sizes and durations replaced (human output only).
static COLUMNS: &[Replace] = &[Replace(&RULE, "---"), Replace(&SPACES, " ")];

/// Replaces what this machine and this moment decide in `text`.
fn normalise(text: &str, paths: &[(&Path, &str)], volatile: Volatile, columns: bool) -> String {
    let mut text = text.to_string();
    let mut paths: Vec<(String, &str)> = paths
        .iter()
        .map(|(p, label)| (p.display().to_string(), *label))
        .collect();
    paths.push((support::root().display().to_string(), "[repo]"));
    paths.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    for (p, label) in paths {
        text = text.replace(&p, label);
    }
    let sizes = volatile == Volatile::Sizes;
    let rules = ALWAYS
        .iter()
        .chain(if sizes { SIZES } else { &[] })
        .chain(if sizes && columns { COLUMNS } else { &[] });
    for Replace(re, with) in rules {
        text = re.replace_all(&text, *with).into_owned();
    }
    text
}

/// Whether a JSON number under `key` is decided by the machine or the moment.
fn volatile_key(key: &str, volatile: Volatile) -> bool {
    let timing = key.ends_with("_ms")
        || key.ends_with("_at")
        || key.ends_with("_s")
        || matches!(
            key,
            "port" | "pid" | "seconds_per_step" | "step_ratio" | "step_spread"
        );
    let sized = key.contains("ram")
        || key.contains("bytes")
        || key.contains("free")
        || key.contains("used")
        || key.contains("swap")
        || matches!(
            key,
            "min" | "max" | "last" | "mean" | "count" | "samples" | "bytes"
        );
    timing || (volatile == Volatile::Sizes && sized)
}

fn normalise_json(v: &mut Value, key: &str, volatile: Volatile) {
    match v {
        Value::Number(_) if volatile_key(key, volatile) => *v = json!("[n]"),
        Value::Array(items) => items
            .iter_mut()
            .for_each(|i| normalise_json(i, key, volatile)),
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                normalise_json(item, k, volatile);
            }
        }
        _ => {}
    }
}

/// The exit code, then stdout and stderr, normalised: what a person sees.
fn human(out: &Output, paths: &[(&Path, &str)], volatile: Volatile) -> String {
    let text = format!(
        "exit {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    normalise(&text, paths, volatile, true)
}

/// The exit code and the `--json` document, normalised.
fn machine(out: &Output, paths: &[(&Path, &str)], volatile: Volatile) -> String {
    let mut doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    normalise_json(&mut doc, "", volatile);
    let text = format!(
        "exit {}\n{}\n",
        out.status.code().unwrap_or(-1),
        serde_json::to_string_pretty(&doc).unwrap()
    );
    normalise(&text, paths, volatile, false)
}

fn vrambisect(args: &[&str]) -> Output {
    support::vrambisect().args(args).output().unwrap()
}

/// `args` with `--json` after the subcommand.
fn vrambisect_json(args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.insert(1, "--json");
    vrambisect(&all)
}

/// One bisect of the README's case (Dynamic VRAM runs out of memory), shared by the bisect
/// and report snapshots: its install, its folder, and what it printed.
struct Session {
    install: FakeComfy,
    tmp: tempfile::TempDir,
    human: Output,
}

fn session() -> &'static Session {
    static SESSION: OnceLock<Session> = OnceLock::new();
    SESSION.get_or_init(|| {
        let install = FakeComfy::readme();
        let tmp = tempfile::tempdir().unwrap();
        let wf = support::fixture(SD15);
        let session = tmp.path().join("session");
        let human = vrambisect(&[
            "bisect",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            session.to_str().unwrap(),
        ]);
        install.assert_nothing_left();
        Session {
            install,
            tmp,
            human,
        }
    })
}

fn paths_of<'a>(install: &'a FakeComfy, tmp: &'a Path) -> [(&'a Path, &'a str); 2] {
    [(install.path(), "[comfyui]"), (tmp, "[tmp]")]
}

// ---------------------------------------------------------------- explain

#[test]
fn explain_conflicting_flags() {
    let args = [
        "explain",
        "--platform",
        "linux",
        "--",
        "--highvram",
        "--lowvram",
    ];
    insta::assert_snapshot!(human(&vrambisect(&args), &[], Volatile::Little));
    insta::assert_snapshot!(machine(&vrambisect_json(&args), &[], Volatile::Little));
}

#[test]
fn explain_a_windows_launcher() {
    let bat = support::fixture("launchers/run_nvidia_gpu.bat");
    let args = ["explain", "--launcher", bat.to_str().unwrap()];
    insta::assert_snapshot!(human(&vrambisect(&args), &[], Volatile::Little));
    insta::assert_snapshot!(machine(&vrambisect_json(&args), &[], Volatile::Little));
}

#[test]
fn explain_against_an_old_install() {
    let install = FakeComfy::new("0.3.64", Value::Null);
    let args = [
        "explain",
        "--comfyui",
        install.path_str(),
        "--platform",
        "linux",
        "--",
        "--disable-dynamic-vram",
        "--lowvram",
    ];
    let paths = [(install.path(), "[comfyui]")];
    insta::assert_snapshot!(human(&vrambisect(&args), &paths, Volatile::Little));
    insta::assert_snapshot!(machine(&vrambisect_json(&args), &paths, Volatile::Little));
}

// ---------------------------------------------------------------- run

fn run_on(install: &FakeComfy, gpu: &FakeGpu, json: bool, flags: &[&str]) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let wf = support::fixture(SD15);
    let out = tmp.path().join("run");
    let mut cmd = support::vrambisect();
    cmd.arg("run");
    if json {
        cmd.arg("--json");
    }
    cmd.args(["--comfyui", install.path_str(), "--workflow"])
        .arg(&wf)
        .arg("--output")
        .arg(&out)
        .arg("--")
        .args(flags)
        .env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
        .env("VRAMBISECT_FAKE_GPU_STATE", install.gpu_state());
    install.write_idle_gpu_state(&[]);
    let output = cmd.output().unwrap();
    install.assert_nothing_left();
    let paths = paths_of(install, tmp.path());
    if json {
        machine(&output, &paths, Volatile::Sizes)
    } else {
        human(&output, &paths, Volatile::Sizes)
    }
}

#[test]
fn run_that_runs_out_of_memory() {
    let install = FakeComfy::readme();
    let gpu = FakeGpu::build();
    insta::assert_snapshot!(run_on(&install, &gpu, false, &[]));
    insta::assert_snapshot!(run_on(&install, &gpu, true, &[]));
}

#[test]
fn run_that_passes() {
    let install = FakeComfy::readme();
    let gpu = FakeGpu::build();
    let flags = ["--disable-dynamic-vram"];
    insta::assert_snapshot!(run_on(&install, &gpu, false, &flags));
    insta::assert_snapshot!(run_on(&install, &gpu, true, &flags));
}

#[test]
fn run_with_a_flag_the_install_rejects() {
    let install = FakeComfy::new("0.3.64", Value::Null);
    let gpu = FakeGpu::build();
    let flags = ["--disable-dynamic-vram"];
    insta::assert_snapshot!(run_on(&install, &gpu, false, &flags));
    insta::assert_snapshot!(run_on(&install, &gpu, true, &flags));
}

#[test]
fn run_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nowhere");
    let wf = support::fixture(SD15);
    let args = [
        "run",
        "--comfyui",
        missing.to_str().unwrap(),
        "--workflow",
        wf.to_str().unwrap(),
    ];
    let paths = [(tmp.path(), "[tmp]")];
    insta::assert_snapshot!(human(&vrambisect(&args), &paths, Volatile::Little));
    insta::assert_snapshot!(machine(&vrambisect_json(&args), &paths, Volatile::Little));
}

// ---------------------------------------------------------------- bisect

#[test]
fn bisect_the_readme_case() {
    let s = session();
    let paths = paths_of(&s.install, s.tmp.path());
    insta::assert_snapshot!(human(&s.human, &paths, Volatile::Sizes));
    let wf = support::fixture(SD15);
    let again = vrambisect_json(&[
        "bisect",
        "--comfyui",
        s.install.path_str(),
        "--workflow",
        wf.to_str().unwrap(),
        "--output",
        s.tmp.path().join("json-session").to_str().unwrap(),
    ]);
    s.install.assert_nothing_left();
    insta::assert_snapshot!(machine(&again, &paths, Volatile::Sizes));
}

// ---------------------------------------------------------------- report

#[test]
fn report_of_the_bisect() {
    let s = session();
    let paths = paths_of(&s.install, s.tmp.path());
    let dir = s.tmp.path().join("session");
    let zip = |name: &str| s.tmp.path().join(name);
    let h = vrambisect(&[
        "report",
        dir.to_str().unwrap(),
        "--output",
        zip("human.zip").to_str().unwrap(),
    ]);
    let j = vrambisect_json(&[
        "report",
        dir.to_str().unwrap(),
        "--output",
        zip("json.zip").to_str().unwrap(),
    ]);
    insta::assert_snapshot!(human(&h, &paths, Volatile::Sizes));
    insta::assert_snapshot!(machine(&j, &paths, Volatile::Sizes));
}

// ---------------------------------------------------------------- logscan

fn logscan(name: &str) -> (String, String) {
    let log = support::fixture(&format!("logs/{name}"));
    let args = ["logscan", log.to_str().unwrap()];
    (
        human(&vrambisect(&args), &[], Volatile::Little),
        machine(&vrambisect_json(&args), &[], Volatile::Little),
    )
}

#[test]
fn logscan_an_oom_under_dynamic_vram() {
    let (h, j) = logscan("sig-cuda-oom-async.log");
    insta::assert_snapshot!(h);
    insta::assert_snapshot!(j);
}

#[test]
fn logscan_a_tensorrt_allocator_error() {
    let (h, j) = logscan("sig-tensorrt.log");
    insta::assert_snapshot!(h);
    insta::assert_snapshot!(j);
}

#[test]
fn logscan_a_windows_console_log() {
    let (h, j) = logscan("format-crlf-windows.log");
    insta::assert_snapshot!(h);
    insta::assert_snapshot!(j);
}

#[test]
fn logscan_a_file_that_is_no_comfyui_log() {
    let (h, j) = logscan("bad-not-comfyui.log");
    insta::assert_snapshot!(h);
    insta::assert_snapshot!(j);
}

// ---------------------------------------------------------------- doctor

#[test]
fn doctor_on_the_stand_in_with_the_fake_gpu() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    install.write_idle_gpu_state(&[(4242, 1200)]);
    let gpu = FakeGpu::build();
    let run = |json: bool| {
        let mut cmd = support::vrambisect();
        cmd.arg("doctor");
        if json {
            cmd.arg("--json");
        }
        cmd.args(["--comfyui", install.path_str()])
            .env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
            .env("VRAMBISECT_FAKE_GPU_STATE", install.gpu_state())
            .env("LD_LIBRARY_PATH", gpu.path());
        cmd.output().unwrap()
    };
    let python = String::from_utf8(
        std::process::Command::new("python3")
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let python = Path::new(python.trim());
    let paths = [
        (install.path(), "[comfyui]"),
        (gpu.path(), "[fake-gpu]"),
        (python, "[python]"),
    ];
    let text = |s: String| {
        PYTHON_VERSION
            .replace_all(&s, "Python [version]")
            .into_owned()
    };
    insta::assert_snapshot!(text(human(&run(false), &paths, Volatile::Sizes)));
    insta::assert_snapshot!(text(machine(&run(true), &paths, Volatile::Sizes)));
}
re!(PYTHON_VERSION, r"Python 3\.\d+\.\d+");

// ---------------------------------------------------------------- sample

#[test]
fn sample_a_command() {
    let args = [
        "sample",
        "--interval",
        "50ms",
        "--",
        "sh",
        "-c",
        "sleep 0.3",
    ];
    // Which series have a value at all depends on the machine (swap, the tree's size), so
    // the numbers go; the shape and the wording stay. A busy machine misses ticks (said in
    // the first line): that goes too.
    let all_numbers = |s: String| {
        let (exit, rest) = s.split_once('\n').unwrap();
        let rest = NUMBER
            .replace_all(rest, "[n]")
            .replace(", [n] ticks missed", "");
        format!("{exit}\n{rest}")
    };
    insta::assert_snapshot!(all_numbers(human(&vrambisect(&args), &[], Volatile::Sizes)));
    insta::assert_snapshot!(all_numbers(machine(
        &vrambisect_json(&args),
        &[],
        Volatile::Sizes
    )));
}
re!(NUMBER, r"\b\d+(\.\d+)?\b");
