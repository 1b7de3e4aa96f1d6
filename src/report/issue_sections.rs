//! ISSUE.md section by section, from sources built here (no folder, no run): each section's
//! text is a snapshot, so a change to what a maintainer reads is a reviewed diff.

use super::*;
use crate::machine::{Inputs, Item, Probes, merge};
use crate::report::source::{RunDir, Source, SourceKind};
use serde_json::json;
use std::path::PathBuf;

/// A run's record: `outcome` with `flags`, prompts as `(outcome, evidence)`.
fn record(outcome: &str, flags: &[&str], prompts: &[(&str, &[&str])], extra: Value) -> RunRecord {
    let iterations: Vec<Value> = prompts
        .iter()
        .enumerate()
        .map(|(i, (o, ev))| {
            json!({"iteration": i + 1, "outcome": o, "evidence": ev, "explanation": null,
                   "signatures": [], "prompt_id": format!("p{}", i + 1),
                   "cache_bust": if i == 0 { "none" } else { "seed" },
                   "duration_ms": 41_000, "started_ms": 9_000, "nodes_executed": [],
                   "ram_retained_bytes": null})
        })
        .collect();
    let evidence: Vec<&str> = prompts
        .iter()
        .find(|(o, _)| *o != "pass")
        .map(|(_, ev)| ev.to_vec())
        .unwrap_or_default();
    let mut argv = vec!["main.py".to_string()];
    argv.extend(flags.iter().map(|f| f.to_string()));
    argv.extend(["--listen", "127.0.0.1", "--port", "8190"].map(String::from));
    let mut doc = json!({
        "outcome": outcome, "evidence": evidence, "explanation": null, "argv": argv,
        "flags": flags, "iterations": iterations, "peaks": {}, "run_dir": "/s/runs/001",
        "workflow": "/w/flux_api.json", "started_at": "2026-12-01T10:00:00Z",
        "duration_ms": 52_000, "startup_ms": 9_000, "port": 8190,
        "teardown": {"killed": false, "group_empty": true, "exit": null},
        "warnings": [], "overhead": {"ready_to_submitted_ms": 1.0, "end_to_verdict_ms": 1.0,
        "teardown_ms": 1.0}, "sampling": [], "gpu_wait_ms": 0,
        "effective": {"comfyui_version": "0.38.1", "dynamic_vram": flags.is_empty(),
                      "vram_state": "NORMAL_VRAM", "allocator": "cudaMallocAsync"},
        "system_stats": null
    });
    if let (Value::Object(d), Value::Object(e)) = (&mut doc, extra) {
        d.extend(e);
    }
    serde_json::from_value(doc).unwrap()
}

fn run(label: &str, record: RunRecord) -> RunDir {
    RunDir {
        label: label.into(),
        dir: PathBuf::from("/s/runs").join(label),
        record: Some(record),
    }
}

const OOM: &[&str] = &[
    "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)",
    "Got an OOM, unloading all loaded models.",
];

/// A bisect that found `--disable-dynamic-vram`: run 001 fails with the user's flags, run 002
/// passes with the fix.
fn bisect_source() -> Source {
    let fail = record(
        "oom",
        &[],
        &[("oom", OOM)],
        json!({"peaks": {"vram_used_bytes": 25_161_000_000u64, "ram_comfyui_bytes": 9_000_000_000u64,
                         "vram_other_processes_bytes": 512_000_000u64},
               "sampling": ["cuda: not asked for (--cuda)"]}),
    );
    let pass = record(
        "pass",
        &["--disable-dynamic-vram"],
        &[("pass", &[])],
        json!({}),
    );
    let result = json!({
        "baseline": {"flags": [], "outcome": "oom", "runs": 1, "failures": 1},
        "verdict": {"kind": "fixed_by", "fixing_flags": ["--disable-dynamic-vram"],
                    "culprit_flags": [], "statement": "Fails 1/1 with your flags (CUDA out of memory); passes 1/1 with --disable-dynamic-vram.",
                    "flags": ["--disable-dynamic-vram"], "launcher_line": "python main.py --disable-dynamic-vram",
                    "reason": null, "flaky": false},
        "configs": [
            {"flags": [], "changes": ["(your flags)"], "outcome": "oom", "runs": 1, "passes": 0,
             "failures": 1, "unresolved": 0, "peak_vram_bytes": 25_161_000_000u64,
             "peak_ram_bytes": 9_000_000_000u64, "mean_duration_ms": 52_000, "run_dirs": ["/s/runs/001"]},
            {"flags": ["--disable-dynamic-vram"], "changes": ["--disable-dynamic-vram"], "outcome": "pass",
             "runs": 1, "passes": 1, "failures": 0, "unresolved": 0, "peak_vram_bytes": null,
             "peak_ram_bytes": null, "mean_duration_ms": 48_000, "run_dirs": ["/s/runs/002"]}
        ],
        "runs_total": 2, "session_dir": "/s", "strategy": "adaptive",
        "toggles": ["--disable-dynamic-vram"],
        "skipped_toggles": [{"toggle": "--disable-nvml-pressure", "reason": "this ComfyUI does not have it"}]
    });
    Source {
        kind: SourceKind::Bisect,
        dir: PathBuf::from("/s"),
        runs: vec![
            run("001", fail),
            run("002", pass),
            RunDir {
                label: "003".into(),
                dir: PathBuf::from("/s/runs/003"),
                record: None,
            },
        ],
        spec: None,
        result: Some(serde_json::from_value(result).unwrap()),
        regress: None,
        skipped: Vec::new(),
    }
}

/// The environment of a machine that said little: three custom nodes.
fn environment(custom_nodes: usize) -> crate::machine::Environment {
    let mut env = merge(
        &Inputs::default(),
        Probes {
            host: crate::machine::host::Host {
                os: Item::found("Ubuntu 24.04", "/etc/os-release"),
                kernel: Item::found("6.8.0", "uname"),
                cpu: Item::found("AMD Ryzen 9 7950X", "/proc/cpuinfo"),
                ram_bytes: Item::found(68_719_476_736u64, "sysinfo now"),
                swap_bytes: Item::found(0u64, "sysinfo now"),
            },
            nvml: Err(crate::nvidia::NvmlOpenError::Other(
                "no NVIDIA driver here".into(),
            )),
            install: None,
            git: Err("no folder".into()),
            custom_nodes: Err("no folder".into()),
            python: Err("no folder".into()),
            process_env: Vec::new(),
            comfyui_set_env: None,
        },
    );
    let nodes: Vec<crate::machine::CustomNode> = (0..custom_nodes)
        .map(|i| crate::machine::CustomNode {
            commit: None,
            name: format!("node-{i}"),
        })
        .collect();
    env.custom_nodes = Item::found(nodes, "/c/custom_nodes");
    env.captured_at = "2026-12-01T10:05:00Z".into();
    env
}

/// A section rendered from a source.
fn section(src: &Source, env: &crate::machine::Environment, f: fn(&mut String, &Ctx)) -> String {
    let logs: BTreeMap<String, String> = [(
        "001".to_string(),
        "[INFO] ComfyUI version: 0.38.1\n[INFO] DynamicVRAM support detected and enabled\nTo see the GUI go to: http://127.0.0.1:8190\ngot prompt\n[ERROR] !!! Exception during processing !!! Allocation on device 0 would exceed allowed memory. (out of memory)\ntorch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\nGot an OOM, unloading all loaded models.\nPrompt executed in 41.00 seconds\n"
            .to_string(),
    )]
    .into();
    let wf = json!({"3": {"class_type": "KSampler", "inputs": {}}, "4": {"class_type": "CheckpointLoaderSimple", "inputs": {}}});
    let inp = IssueInput {
        source: src,
        env,
        workflow: Some(&wf),
        logs: &logs,
        timelines: &["001".to_string()],
        has_matrix: true,
        redact: true,
    };
    let ctx = Ctx::of(&inp);
    let mut o = String::new();
    f(&mut o, &ctx);
    o
}

#[test]
fn custom_node_testing() {
    let src = bisect_source();
    insta::assert_snapshot!(
        "custom_nodes_installed",
        section(&src, &environment(3), super::custom_node_testing)
    );
    insta::assert_snapshot!(
        "custom_nodes_none",
        section(&src, &environment(0), super::custom_node_testing)
    );
    // A check run that failed the same way ticks the box and says so.
    let mut checked = bisect_source();
    checked.result.as_mut().unwrap().custom_nodes_check = Some(serde_json::from_value(json!({
        "flags": ["--disable-all-custom-nodes"], "outcome": "oom", "run_dir": "/s/runs/004",
        "custom_nodes": 3,
        "statement": "Without custom nodes (--disable-all-custom-nodes) it still fails (CUDA out of memory): the custom nodes are not needed for this failure."
    })).unwrap());
    let text = section(&checked, &environment(3), super::custom_node_testing);
    assert!(
        text.contains("- [x] I have tried disabling custom nodes"),
        "{text}"
    );
    insta::assert_snapshot!("custom_nodes_checked", text);
}

#[test]
fn expected_and_actual_behavior() {
    let src = bisect_source();
    let env = environment(0);
    insta::assert_snapshot!(
        "expected_fixed_by",
        section(&src, &env, super::expected_behavior)
    );
    let text = section(&src, &env, super::actual_behavior);
    // The failing run, the lines that show it, memory, what was not sampled, the timeline.
    for needle in [
        "Run 001 (no flags): **oom**",
        "Got an OOM, unloading all loaded models.",
        "peak VRAM used",
        "other processes up to",
        "Not sampled: cuda: not asked for (--cuda).",
        "Timeline: `runs/001/timeline.png`.",
    ] {
        assert!(text.contains(needle), "{needle}\n{text}");
    }
    insta::assert_snapshot!("actual_fixed_by", text);
}

#[test]
fn steps_and_logs() {
    let mut src = bisect_source();
    // Two prompts, the second fails; the launcher set an allowlisted and a private variable.
    src.runs[0].record = Some(record(
        "oom",
        &["--reserve-vram", "1"],
        &[("pass", &[]), ("oom", OOM)],
        json!({}),
    ));
    let spec: crate::bisect::session::SessionSpec = serde_json::from_value(json!({
        "comfyui": "/c", "python": null, "workflow": "/w/flux_api.json", "launcher": "/c/run.sh",
        "base_flags": ["--reserve-vram", "1"], "toggles": [], "default_toggles": true,
        "strategy": "adaptive", "repeat": 1, "iterations": 2, "max_runs": 64,
        "timeout_ms": 3_600_000, "stall_timeout_ms": 300_000, "startup_timeout_ms": 600_000,
        "env": [["PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"], ["HF_TOKEN", "hf_secret"]]
    }))
    .unwrap();
    src.spec = Some(spec);
    let text = section(&src, &environment(0), super::steps_to_reproduce);
    assert!(text.contains("prompt 2 fails"), "{text}");
    assert!(
        !text.contains("hf_secret"),
        "a private value of the launcher stays out: {text}"
    );
    insta::assert_snapshot!("steps_two_prompts", text);
    insta::assert_snapshot!(
        "debug_logs",
        section(&src, &environment(0), super::debug_logs)
    );
    // Without a log there is nothing to quote, and it says so.
    src.runs.remove(0);
    let text = section(&src, &environment(0), super::debug_logs);
    assert!(text.contains("No ComfyUI log was recorded."), "{text}");
}

#[test]
fn other() {
    let text = section(&bisect_source(), &environment(0), super::other);
    for needle in [
        "**Verdict** (vrambisect bisect, 2 runs): `fixed_by` `--disable-dynamic-vram`",
        "Skipped `--disable-nvml-pressure`: this ComfyUI does not have it",
        "| 003 | - | (no record: cut short) | - | - | - | - |",
        "The matrix as a picture: `matrix.png`.",
    ] {
        assert!(text.contains(needle), "{needle}\n{text}");
    }
    insta::assert_snapshot!("other", text);
}

#[test]
fn the_commits_a_regress_tested() {
    let mut src = bisect_source();
    src.kind = SourceKind::Regress;
    src.result = None;
    let result: crate::regress::RegressResult = serde_json::from_value(json!({
        "verdict": {"kind": "first_bad_found", "regress": "oom",
                    "statement": "The first bad commit is 85bd36f \"memory: stream weights\" (0.38.1, 2026-11-20): the workflow fails there (CUDA out of memory) and passed at e062095."},
        "first_bad": {"commit": "85bd36f0000000000000000000000000000000ab", "subject": "memory: stream weights", "version": "0.38.1", "date": "2026-11-20"},
        "last_good": {"commit": "e0620950000000000000000000000000000000cd", "subject": "docs", "version": "0.38.1", "date": "2026-11-19"},
        "could_be": [], "runs_total": 4,
        "tested": [
            {"commit": "85bd36f0000000000000000000000000000000ab", "version": "0.38.1", "outcome": "oom", "mark": "bad", "reason": null, "runs": ["/s/runs/001"],
             "packages": {"comfy-aimdo": "0.5.5", "comfy-kitchen": "0.2.7"}},
            {"commit": "e0620950000000000000000000000000000000cd", "version": "0.38.1", "outcome": "pass", "mark": "good", "reason": null, "runs": ["/s/runs/002"],
             "packages": {"comfy-aimdo": "0.5.4", "comfy-kitchen": "0.2.7"},
             "environment": {"site": "/cache/envs/comfy-aimdo-0.5.4-0123456789abcdef/site-packages", "packages": [["comfy-aimdo", "0.5.4"]]}}
        ],
        "skipped": [{"commit": "aaaaaaa000000000000000000000000000000000", "reason": "it does not take these flags: unrecognized arguments: --disable-dynamic-vram"}],
        "commits": 10, "session_dir": "/s",
        "url": "https://github.com/Comfy-Org/ComfyUI/commit/85bd36f0000000000000000000000000000000ab",
        "reproduce": "vrambisect regress --comfyui /c --workflow /w/flux_api.json --good e062095 --bad 85bd36f",
        "continue_with": null
    }))
    .unwrap();
    let mut o = String::new();
    super::regress_commits(&mut o, &result);
    insta::assert_snapshot!("regress_commits", o);
}
