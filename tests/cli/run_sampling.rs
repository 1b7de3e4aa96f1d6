//! `run` samples GPU and RAM while ComfyUI works: through the fake NVML that reads what the
//! fake ComfyUI writes, and never with a CUDA context of its own unless asked.

use crate::support;

use serde_json::{Value, json};
use support::comfy::FakeComfy;
use support::gpu::FakeGpu;
use support::{fixture, out_dir};

const MIB: u64 = 1 << 20;

#[test]
fn peaks_come_from_the_simulated_gpu() {
    let gpu = FakeGpu::build();
    // A browser holding 1200 MiB, as maintainers keep asking about (#3278).
    let install = FakeComfy::new(
        "0.38.1",
        json!({"gpu": {"other_processes": [{"pid": 999999, "mb": 1200}]}}),
    );
    install.write_idle_gpu_state(&[(999999, 1200)]);
    let tmp = tempfile::tempdir().unwrap();
    let out = out_dir(tmp.path(), "run");
    let wf = fixture("workflows/sd15_txt2img.json");
    let output = support::vrambisect()
        .args([
            "run",
            "--json",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            &out,
            "--iterations",
            "2",
        ])
        .env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
        .env("VRAMBISECT_FAKE_GPU_STATE", install.gpu_state())
        .output()
        .unwrap();
    install.assert_nothing_left();
    let doc: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(doc["outcome"], "pass", "{doc:#}");
    assert_eq!(doc["sampling"], json!([]), "every probe sampled");
    let peaks = &doc["peaks"];
    let comfy = peaks["vram_comfyui_bytes"].as_u64().unwrap();
    // The stand-in's CUDA context (342 MiB) plus the SD1 model it loads (1640 MiB).
    assert!(comfy >= 342 * MIB, "ComfyUI's VRAM {comfy}");
    assert_eq!(
        peaks["vram_other_processes_bytes"].as_u64().unwrap(),
        1200 * MIB
    );
    assert!(peaks["vram_used_bytes"].as_u64().unwrap() >= comfy + 1200 * MIB);
    assert!(peaks["ram_comfyui_bytes"].as_u64().unwrap() > 0);
    assert!(doc["iterations"][1]["ram_retained_bytes"].is_i64());
    let csv = std::fs::read_to_string(tmp.path().join("run/samples.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains("gpu0.nvml.used"));
    assert!(csv.contains("prompt 1 start") && csv.contains("prompt 2 end"));
}

/// Whether the process `pid` has a libcuda mapped.
fn maps_libcuda(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .map(|m| m.contains("libcuda"))
        .unwrap_or(false)
}

/// Runs a hanging prompt with the fake libcuda on the library path; reports whether the
/// tool ever mapped it.
fn loads_cuda(extra: &[&str]) -> bool {
    let gpu = FakeGpu::build();
    let install = FakeComfy::new("0.38.1", json!({"rules": [{"effect": "hang"}]}));
    install.write_idle_gpu_state(&[]);
    let tmp = tempfile::tempdir().unwrap();
    let out = out_dir(tmp.path(), "run");
    let wf = fixture("workflows/sd15_txt2img.json");
    let mut child = support::vrambisect()
        .args([
            "run",
            "--json",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            &out,
            "--stall-timeout",
            "2s",
        ])
        .args(extra)
        .env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
        .env("VRAMBISECT_FAKE_GPU_STATE", install.gpu_state())
        .env("LD_LIBRARY_PATH", gpu.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut seen = false;
    while child.try_wait().unwrap().is_none() {
        seen |= maps_libcuda(child.id());
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    install.assert_nothing_left();
    seen
}

#[test]
fn run_opens_no_cuda_context_unless_asked() {
    assert!(
        !loads_cuda(&[]),
        "the default run must not load libcuda (a context costs VRAM)"
    );
    assert!(
        loads_cuda(&["--cuda"]),
        "--cuda does load it: the check above can see it"
    );
}
