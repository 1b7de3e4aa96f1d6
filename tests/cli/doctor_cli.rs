//! `vrambisect doctor`: a clear report on a machine without NVIDIA libraries, every check
//! against the fake GPU and the fake ComfyUI, and exit 0 / 1 by whether a check failed.

use crate::support;
use crate::support::bundle;

use serde_json::Value;
use support::comfy::FakeComfy;
use support::vrambisect;

fn check<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no check {id}: {doc:#}"))
}

#[test]
fn without_nvidia_libraries_it_reports_and_does_not_fail() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("libnvidia-ml.so.1");
    let out = vrambisect()
        .arg("doctor")
        .env("VRAMBISECT_NVML_LIB", &missing)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(!stderr.contains("error"), "{stderr}");
    let nvml = stdout
        .lines()
        .find(|l| l.contains("NVIDIA driver (NVML)"))
        .unwrap();
    assert!(nvml.starts_with("! "), "{nvml}");
    assert!(nvml.contains("cannot load"), "{nvml}");
    assert!(stdout.contains("hint: without NVML vrambisect cannot record GPU memory"));
    assert!(stdout.contains("! GPUs and free VRAM"));
    assert!(stdout.contains("! ComfyUI folder"));
    assert!(stdout.contains("pass --comfyui DIR"), "{stdout}");
    assert!(stdout.trim_end().ends_with("warnings"), "{stdout}");

    let (code, doc, _) = support::json(&["doctor"]);
    assert!(code == 0 || code == 1, "{doc:#}");
    for c in doc["checks"].as_array().unwrap() {
        for key in ["id", "title", "status", "summary"] {
            assert!(c[key].is_string(), "{c}");
        }
    }
    assert!(doc["ok"].is_u64() && doc["warnings"].is_u64() && doc["failures"].is_u64());
}

#[test]
fn every_check_against_the_fake_gpu_and_comfyui() {
    let gpu = support::sampling::fake_gpu();
    let install = FakeComfy::new("0.38.1", Value::Null);
    // An idle card with a browser holding 1200 MiB.
    install.write_idle_gpu_state(&[(999999, 1200)]);
    let run = |pythonpath: Option<&std::path::Path>| {
        let mut cmd = vrambisect();
        cmd.args(["doctor", "--json", "--comfyui", install.path_str()])
            .env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
            .env("VRAMBISECT_FAKE_GPU_STATE", install.gpu_state())
            .env("LD_LIBRARY_PATH", gpu.path());
        if let Some(p) = pythonpath {
            cmd.env("PYTHONPATH", p);
        }
        let out = cmd.output().unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        (out.status.code().unwrap(), doc)
    };

    // A bare Python: no torch, no comfy-aimdo: two failures, exit 1.
    let (code, doc) = run(None);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(check(&doc, "nvml")["status"], "ok");
    assert!(
        check(&doc, "nvml")["summary"]
            .as_str()
            .unwrap()
            .contains("driver 580.82.07, supports CUDA 13.0, 1 GPU")
    );
    let cuda = check(&doc, "cuda");
    assert_eq!(cuda["status"], "ok", "{cuda}");
    assert!(
        cuda["summary"]
            .as_str()
            .unwrap()
            .contains("no CUDA context")
    );
    let gpus = check(&doc, "gpus");
    assert!(
        gpus["summary"]
            .as_str()
            .unwrap()
            .contains("NVIDIA GeForce RTX 4090, 22.4 GiB free of 24.0 GiB"),
        "{gpus}"
    );
    let procs = check(&doc, "gpu_processes");
    assert_eq!(procs["status"], "warn");
    assert!(procs["details"][0].as_str().unwrap().contains("pid 999999"));
    assert!(procs["hint"].as_str().unwrap().contains("--reserve-vram"));
    assert_eq!(check(&doc, "comfyui")["summary"], "ComfyUI 0.38.1");
    assert_eq!(check(&doc, "python")["status"], "ok");
    assert_eq!(check(&doc, "torch")["status"], "fail");
    assert!(
        check(&doc, "torch")["hint"]
            .as_str()
            .unwrap()
            .contains("requirements.txt")
    );
    assert_eq!(check(&doc, "comfy_aimdo")["status"], "fail");
    let flags = check(&doc, "flags");
    assert_eq!(flags["status"], "ok");
    assert!(
        flags["details"][0]
            .as_str()
            .unwrap()
            .contains("--disable-dynamic-vram")
    );
    assert_eq!(doc["failures"], 2);

    // torch (a CUDA 12.8 build) and comfy-aimdo installed, found without importing them
    // (their __init__ raises): nothing fails, exit 0.
    let site = tempfile::tempdir().unwrap();
    bundle::fake_site_packages(site.path());
    let (code, doc) = run(Some(site.path()));
    let torch = check(&doc, "torch");
    assert_eq!(torch["status"], "ok", "{torch}");
    assert_eq!(torch["summary"], "2.8.0+cu128 (built for CUDA 12.8)");
    let aimdo = check(&doc, "comfy_aimdo");
    assert_eq!(aimdo["status"], "ok", "{aimdo}");
    assert!(aimdo["summary"].as_str().unwrap().starts_with("0.5.5"));
    assert_eq!(doc["failures"], 0, "{doc:#}");
    assert_eq!(code, 0);
    install.assert_nothing_left();
}

#[test]
fn a_folder_that_is_not_comfyui_fails_its_check() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, doc, _) = support::json(&["doctor", "--comfyui", tmp.path().to_str().unwrap()]);
    assert_eq!(code, 1);
    let c = check(&doc, "comfyui");
    assert_eq!(c["status"], "fail");
    assert!(c["summary"].as_str().unwrap().contains("has no main.py"));
    assert!(c["hint"].is_string());
}

#[test]
fn a_driver_update_before_the_reboot_is_named_with_its_remedy() {
    // NVML_ERROR_LIB_RM_VERSION_MISMATCH: the kernel module is still the old driver's.
    let gpu = support::sampling::fake_gpu();
    gpu.write_state("nvml_init=lib_rm_version_mismatch\n");
    let out = vrambisect()
        .args(["doctor", "--json"])
        .env("VRAMBISECT_NVML_LIB", gpu.nvml_path())
        .env_remove("VRAMBISECT_FAKE_GPU_STATE")
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{doc:#}");
    let nvml = check(&doc, "nvml");
    assert_eq!(nvml["status"], "fail", "{nvml}");
    assert_eq!(
        nvml["summary"],
        "the NVIDIA kernel module and its libraries are different versions (NVML: Driver/library version mismatch)"
    );
    assert!(
        nvml["hint"]
            .as_str()
            .unwrap()
            .contains("reboot, or reload the nvidia kernel module, after a driver update"),
        "{nvml}"
    );
}
