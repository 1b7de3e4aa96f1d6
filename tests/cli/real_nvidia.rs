//! The real NVIDIA user-space libraries (Debian's 535 `libnvidia-ml1` and `libcuda1`) on a
//! machine without the driver: `nvmlInit` fails with "Driver Not Loaded" and `cuInit` with
//! `CUDA_ERROR_NO_DEVICE`, as in a container without the GPU. Each command says so in one
//! line in the libraries' words and records what it can. Ignored unless the libraries are
//! installed: `scripts/install-nvidia-userspace.sh` puts them under the target folder, and
//! `.ci/run` runs this where it could.
//!
//! Run as root, the real libraries create `/dev/nvidiactl`; the commands run without the
//! capability to do so (`setpriv`), which changes nothing else.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const NVML_LINE: &str = "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)";
const CUDA_LINE: &str = "no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE)";

/// `DEST/lib` of the install script's default, beside the binaries under test.
fn lib_dir() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_vrambisect"));
    let target = bin.parent().unwrap().parent().unwrap();
    let dir = target.join("nvidia-userspace/lib");
    assert!(
        dir.join("libnvidia-ml.so.1").exists() && dir.join("libcuda.so").exists(),
        "no real NVIDIA libraries in {}: run scripts/install-nvidia-userspace.sh",
        dir.display()
    );
    dir
}

/// `program args` with the real libraries, unable to create device nodes when root.
fn real(program: &Path, lib: &Path) -> Command {
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = Command::new("setpriv");
        c.args(["--bounding-set=-mknod", "--inh-caps=-mknod"])
            .arg(program);
        c
    } else {
        Command::new(program)
    };
    cmd.env("LD_LIBRARY_PATH", lib)
        .env("VRAMBISECT_NVML_LIB", lib.join("libnvidia-ml.so.1"))
        .env("NO_COLOR", "1")
        .env_remove("VRAMBISECT_FAKE_GPU_STATE");
    cmd
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// No Rust debug forms of the crates' errors.
fn assert_plain(all: &str) {
    for debug in [
        "DriverError(",
        "DriverNotLoaded",
        "LibRmVersionMismatch",
        "CUDA_ERROR_NO_DEVICE,",
    ] {
        assert!(!all.contains(debug), "{debug} in:\n{all}");
    }
    assert!(!all.contains("panicked"), "{all}");
}

#[test]
#[ignore = "needs the real NVIDIA user-space libraries: scripts/install-nvidia-userspace.sh"]
fn real_libraries_without_a_driver_say_so_in_one_line() {
    let lib = lib_dir();
    let vrambisect = Path::new(env!("CARGO_BIN_EXE_vrambisect"));
    let node_before = Path::new("/dev/nvidiactl").exists();
    let tmp = tempfile::tempdir().unwrap();
    let locks = tmp.path().join("locks");

    // doctor: one line each for NVML and CUDA, warnings (no driver is not a broken install).
    let out = real(vrambisect, &lib).arg("doctor").output().unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("! NVIDIA driver (NVML)") && l.ends_with(NVML_LINE)),
        "{stdout}"
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("! CUDA driver library")
                && l.ends_with(&format!("CUDA: {CUDA_LINE}"))),
        "{stdout}"
    );
    assert_plain(&(stdout + &stderr));

    // sample --cuda: a note for each, and RAM is still recorded.
    let out = real(vrambisect, &lib)
        .args(["sample", "--json", "--cuda", "--duration", "300ms"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(notes.len(), 2, "{stderr}");
    assert!(
        notes[0].starts_with(&format!("note: nvml: {NVML_LINE}")),
        "{stderr}"
    );
    assert_eq!(
        notes[1],
        format!("note: cuda: CUDA failed to start: {CUDA_LINE}")
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let names: Vec<&str> = doc["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"ram.available"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("gpu")), "{names:?}");
    assert_plain(&(stdout + &stderr));

    // run --cuda of the stand-in: the run goes on (the demo scenario's OOM) and says what it
    // could not sample.
    let run_dir = tmp.path().join("run");
    let out = real(vrambisect, &lib)
        .arg("run")
        .arg("--comfyui")
        .arg(support::fixture("fake-comfyui"))
        .arg("--workflow")
        .arg(support::fixture("workflows/sd15_txt2img.json"))
        .arg("--cuda")
        .arg("--output")
        .arg(&run_dir)
        .env("VRAMBISECT_LOCK_DIR", &locks)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stdout.starts_with("OOM"), "{stdout}");
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("Not sampled") && l.contains(&format!("nvml: {NVML_LINE}"))),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("Not sampled")
            && l.ends_with(&format!("cuda: CUDA failed to start: {CUDA_LINE}"))),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(run_dir.join("samples.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("tree.rss"), "{csv}");
    assert_plain(&(stdout + &stderr));

    // report: the bundle says it in ISSUE.md and environment.json.
    let zip_path = tmp.path().join("bundle.zip");
    let out = real(vrambisect, &lib)
        .arg("report")
        .arg(&run_dir)
        .arg("--output")
        .arg(&zip_path)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let files = support::bundle::unzip(&zip_path);
    let entry = |name: &str| String::from_utf8_lossy(&files[name]).into_owned();
    let issue = entry("ISSUE.md");
    let line = issue
        .lines()
        .find(|l| l.starts_with("Not sampled: "))
        .unwrap_or_else(|| panic!("{issue}"));
    assert!(
        line.contains(NVML_LINE) && line.contains(CUDA_LINE),
        "{line}"
    );
    let env = entry("environment.json");
    assert!(env.contains(NVML_LINE), "{env}");
    assert_plain(&(issue + &env + &stdout + &stderr));

    // The check meant for a GPU machine fails here, one line per check, in the same words.
    let out = real(Path::new("bash"), &lib)
        .arg(support::root().join("scripts/gpu-check.sh"))
        .arg("--bin")
        .arg(vrambisect)
        .arg("--alloc")
        .arg(support::gpu::cuda_alloc_example())
        .args(["--size", "64MiB", "--hold", "1s", "--cpu-seconds", "1"])
        .arg("--out")
        .arg(tmp.path().join("gpu-check.json"))
        .arg("--work")
        .arg(tmp.path().join("work"))
        .env("VRAMBISECT_LOCK_DIR", &locks)
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    let checks: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with("gpu-check:"))
        .collect();
    assert_eq!(checks.len(), 10, "{stdout}");
    // Every check fails but the return to the starting level, which has nothing to check.
    for (i, l) in checks.iter().enumerate() {
        let want = if i == 2 { "skip: release: " } else { "FAIL: " };
        assert!(l.starts_with(want), "{stdout}");
    }
    assert!(
        checks[0].contains(NVML_LINE) && checks[0].contains(CUDA_LINE),
        "{stdout}"
    );
    for l in [&checks[1..2], &checks[3..]].concat() {
        assert!(l.contains(NVML_LINE), "{stdout}");
    }
    assert_plain(&(stdout + &stderr));

    // The allocating example says it too.
    let out = real(&support::gpu::cuda_alloc_example(), &lib)
        .args(["64MiB", "1s"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr.trim_end(), format!("cuda_alloc: CUDA: {CUDA_LINE}"));

    if !node_before {
        assert!(
            !Path::new("/dev/nvidiactl").exists(),
            "a device node was left behind"
        );
    }
}
