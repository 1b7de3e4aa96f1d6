//! The tool's own overhead per run, against the fake ComfyUI with known timings:
//! ready → prompt accepted, last websocket message → verdict, and teardown.
//! `cargo bench --bench run_overhead` prints the table recorded in BENCHMARKS.md.

use std::path::{Path, PathBuf};
use std::process::Command;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if matches!(
            name.as_str(),
            "__pycache__" | "tests" | "scenario.json" | "run-counter.txt"
        ) || name.starts_with("gpu-state")
        {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("target/release/vrambisect");
    let status = Command::new("cargo")
        .args(["build", "--release", "--quiet"])
        .current_dir(&root)
        .status()
        .unwrap();
    assert!(status.success());
    let tmp = std::env::temp_dir().join(format!("vrambisect-bench-{}", std::process::id()));
    let install = tmp.join("ComfyUI");
    copy_dir(&root.join("fixtures/fake-comfyui"), &install);
    // Known timings: no start-up delay, 50 ms per node, 10 ms per sampler step.
    std::fs::write(
        install.join("scenario.json"),
        r#"{"timing": {"startup_delay": 0.0, "node_time": 0.05, "step_time": 0.01}}"#,
    )
    .unwrap();
    let workflow = root.join("fixtures/workflows/sd15_txt2img.json");
    let runs = 20;
    let (mut ready, mut verdict, mut teardown, mut total) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let out = tmp.join(format!("run-{i}"));
        let output = Command::new(&bin)
            .args(["run", "--json", "--comfyui"])
            .arg(&install)
            .arg("--workflow")
            .arg(&workflow)
            .arg("--output")
            .arg(&out)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("a run record");
        assert_eq!(doc["outcome"], "pass");
        let o = &doc["overhead"];
        let (r, v, t) = (
            o["ready_to_submitted_ms"].as_f64().unwrap(),
            o["end_to_verdict_ms"].as_f64().unwrap(),
            o["teardown_ms"].as_f64().unwrap(),
        );
        ready.push(r);
        verdict.push(v);
        teardown.push(t);
        total.push(r + v + t);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    println!(
        "Tool overhead per run, {runs} runs of the SD1.5 workflow against the fake ComfyUI (ms):"
    );
    println!();
    println!("| phase | median | p90 | max |");
    println!("|---|---|---|---|");
    for (name, mut v) in [
        ("ready → prompt accepted", ready),
        ("last websocket message → verdict", verdict),
        ("teardown (SIGTERM → group gone)", teardown),
        ("total", total),
    ] {
        v.sort_by(f64::total_cmp);
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} |",
            percentile(&v, 0.5),
            percentile(&v, 0.9),
            v[v.len() - 1]
        );
    }
}
