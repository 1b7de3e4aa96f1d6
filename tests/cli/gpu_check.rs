//! `scripts/gpu-check.sh`, the check meant for a machine with a GPU, end to end against the
//! fake NVML and CUDA libraries: every check passes and the figures add up.

use crate::support;

use serde_json::Value;
use std::process::Command;
use support::gpu::{FakeGpu, cuda_alloc_example};

const MIB: u64 = 1 << 20;
const CONTEXT: u64 = 300_000_000;

#[test]
fn gpu_check_passes_on_the_fakes_with_its_figures() {
    let gpu = FakeGpu::build();
    gpu.write_state(&format!(
        "gpu0.used=1000000000\ngpu0.procs=\ngpu0.cuda_context_bytes={CONTEXT}\n"
    ));
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("figures.json");
    let out = Command::new("bash")
        .arg(support::root().join("scripts/gpu-check.sh"))
        .arg("--bin")
        .arg(env!("CARGO_BIN_EXE_vrambisect"))
        .arg("--alloc")
        .arg(cuda_alloc_example())
        .args(["--size", "64MiB", "--hold", "1s", "--cpu-seconds", "1"])
        .arg("--out")
        .arg(&json)
        .arg("--work")
        .arg(tmp.path().join("work"))
        .arg("--nvml-lib")
        .arg(gpu.nvml_path())
        .arg("--lib-dir")
        .arg(gpu.path())
        .env("NO_COLOR", "1")
        .env("VRAMBISECT_LOCK_DIR", tmp.path().join("locks"))
        .env_remove("VRAMBISECT_FAKE_GPU_STATE")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let checks: Vec<&str> = stdout
        .lines()
        .filter(|l| !l.starts_with("gpu-check:"))
        .collect();
    let names = [
        "doctor",
        "allocation",
        "release",
        "cpu_10hz",
        "cpu_100hz",
        "cpu_1000hz",
        "own_vram_default",
        "own_vram_cuda",
        "run",
        "bisect",
    ];
    assert_eq!(checks.len(), names.len(), "{stdout}");
    for (line, name) in checks.iter().zip(names) {
        assert!(line.starts_with(&format!("ok: {name}: ")), "{stdout}");
    }

    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(doc["failed"], false);
    let a = &doc["allocation"];
    // 64 MiB is a whole number of the fake's 2 MiB pages: NVML rises by it plus one context.
    assert_eq!(a["size_bytes"], 64 * MIB);
    assert_eq!(a["nvml_used_before_bytes"], 1_000_000_000u64);
    assert_eq!(a["rise_bytes"], 64 * MIB + CONTEXT, "{a:#}");
    assert_eq!(a["context_bytes"], CONTEXT);
    assert_eq!(a["child_peak_bytes"], 64 * MIB + CONTEXT);
    assert_eq!(a["nvml_used_after_bytes"], 1_000_000_000u64);
    assert!(a["child_pid"].as_u64().unwrap() > 0);
    for hz in ["10hz", "100hz", "1000hz"] {
        let c = &doc["cpu"][format!("cpu_{hz}")];
        assert!(c["cpu_percent"].as_f64().unwrap() > 0.0, "{c:#}");
        assert!(c["nvml_samples"].as_u64().unwrap() > 0, "{c:#}");
    }
    assert_eq!(doc["own_vram"]["default_bytes"], 0);
    assert_eq!(doc["own_vram"]["cuda_bytes"], CONTEXT);
    assert_eq!(doc["own_vram"]["cuda_context_bytes_reported"], CONTEXT);
    let series = doc["run"]["series"].as_array().unwrap();
    assert!(series.iter().any(|s| s == "gpu0.cuda.used"), "{doc:#}");
    assert!(series.iter().any(|s| s == "gpu0.nvml.used"), "{doc:#}");
    assert!(!doc["run"]["bundle"]["plots"].as_array().unwrap().is_empty());
    assert_eq!(doc["bisect"]["result"], "fixed_by");
    assert!(
        !doc["bisect"]["bundle"]["plots"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
