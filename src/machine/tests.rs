//! Machine facts: the parsers, the probes on this machine, a capture.

use super::host::{parse_cpuinfo, parse_os_release};
use super::*;
use serde_json::json;

#[test]
fn os_release_and_cpuinfo() {
    assert_eq!(
        parse_os_release(
            "NAME=\"Debian GNU/Linux\"\nVERSION=\"12 (bookworm)\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"
        )
        .unwrap(),
        "Debian GNU/Linux 12 (bookworm)"
    );
    assert_eq!(
        parse_os_release("NAME=Arch\nVERSION='rolling'\n").unwrap(),
        "Arch rolling"
    );
    assert_eq!(parse_os_release("ID=x\n"), None);
    let cpu = "processor\t: 0\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n\nprocessor\t: 1\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n";
    assert_eq!(
        parse_cpuinfo(cpu).unwrap(),
        "AMD Ryzen 9 7950X 16-Core Processor (2 logical cores)"
    );
    assert_eq!(parse_cpuinfo("processor : 0\n"), None);
}

#[test]
fn torch_builds() {
    for (v, want) in [
        ("2.10.0+cu130", Some("13.0")),
        ("2.8.0+cu128", Some("12.8")),
        ("2.4.1+cu118", Some("11.8")),
        ("2.5.0+rocm6.2", Some("ROCm 6.2")),
        ("2.5.0+cpu", Some("none (CPU-only build)")),
        ("2.5.0", None),
    ] {
        assert_eq!(
            torch_build_from_version(v)
                .map(|b| b.to_string())
                .as_deref(),
            want,
            "{v}"
        );
    }
}

#[test]
fn git_heads_loose_packed_detached_and_worktrees() {
    let tmp = tempfile::tempdir().unwrap();
    let sha = "a125cd84c2f0e5c3b9d1e0f3a4b5c6d7e8f90123";
    let other = "0123456789abcdef0123456789abcdef01234567";
    let repo = tmp.path().join("loose");
    std::fs::create_dir_all(repo.join(".git/refs/heads")).unwrap();
    std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/master\n").unwrap();
    std::fs::write(repo.join(".git/refs/heads/master"), format!("{sha}\n")).unwrap();
    assert_eq!(
        git_info(&repo).unwrap(),
        GitInfo {
            commit: sha.into(),
            branch: Some("master".into())
        }
    );
    let repo = tmp.path().join("packed");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/v0.38\n").unwrap();
    std::fs::write(
        repo.join(".git/packed-refs"),
        format!("# pack-refs with: peeled fully-peeled sorted\n{other} refs/heads/master\n{sha} refs/heads/v0.38\n^{other}\n"),
    )
    .unwrap();
    assert_eq!(git_info(&repo).unwrap().commit, sha);
    let repo = tmp.path().join("detached");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(repo.join(".git/HEAD"), format!("{sha}\n")).unwrap();
    assert_eq!(git_info(&repo).unwrap().branch, None);
    // A worktree: `.git` is a file, refs live in the common folder.
    let wt = tmp.path().join("wt");
    let gd = tmp.path().join("loose/.git/worktrees/wt");
    std::fs::create_dir_all(&gd).unwrap();
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", gd.display())).unwrap();
    std::fs::write(gd.join("HEAD"), "ref: refs/heads/master\n").unwrap();
    std::fs::write(gd.join("commondir"), "../..\n").unwrap();
    assert_eq!(git_info(&wt).unwrap().commit, sha);
    assert!(
        git_info(tmp.path())
            .unwrap_err()
            .contains("not a git checkout")
    );
}

#[test]
fn custom_nodes_with_commits() {
    let tmp = tempfile::tempdir().unwrap();
    let nodes = tmp.path().join("custom_nodes");
    std::fs::create_dir_all(nodes.join("ComfyUI-Manager/.git")).unwrap();
    std::fs::write(
        nodes.join("ComfyUI-Manager/.git/HEAD"),
        "0123456789abcdef0123456789abcdef01234567\n",
    )
    .unwrap();
    std::fs::create_dir_all(nodes.join("__pycache__")).unwrap();
    std::fs::create_dir_all(nodes.join("plain")).unwrap();
    std::fs::write(nodes.join("websocket_image_save.py"), "").unwrap();
    std::fs::write(nodes.join("example_node.py.example"), "").unwrap();
    let list = custom_nodes(tmp.path()).unwrap();
    assert_eq!(
        serde_json::to_value(list).unwrap(),
        json!([
            {"name": "ComfyUI-Manager", "commit": "0123456789ab"},
            {"name": "plain", "commit": null},
            {"name": "websocket_image_save.py", "commit": null}
        ])
    );
}

#[test]
fn probe_answers() {
    let f = parse_probe(
        "noise\n{\"python\": \"3.11.7\", \"executable\": \"/x/python\", \"packages\": {\"torch\": \"2.8.0+cu128\", \"comfy-aimdo\": null}, \"torch_cuda\": \"12.8\", \"aimdo_modules\": null}\n",
    )
    .unwrap();
    assert_eq!(f.python, "3.11.7");
    assert_eq!(f.package("torch"), Some("2.8.0+cu128"));
    assert_eq!(f.package("comfy-aimdo"), None);
    assert_eq!(f.torch_cuda.as_deref(), Some("12.8"));
    assert!(parse_probe("Traceback\n").is_err());
}

// Needs python3 on PATH.
#[cfg(unix)]
#[test]
fn the_probe_runs_on_this_python_without_torch() {
    let tmp = tempfile::tempdir().unwrap();
    let py = Python {
        path: "python3".into(),
        source: "test".into(),
    };
    let f = ask_python(&py, tmp.path()).unwrap();
    assert!(f.python.starts_with('3'), "{f:?}");
    assert!(f.error.is_none(), "{f:?}");
    let missing = Python {
        path: "/no/such/python".into(),
        source: "test".into(),
    };
    assert!(
        ask_python(&missing, tmp.path())
            .unwrap_err()
            .contains("not found")
    );
}

#[test]
fn items_say_where_or_why() {
    let it: Item<String> = Item::first([Item::missing("a"), Item::found("x", "here")]);
    assert_eq!(
        serde_json::to_value(&it).unwrap(),
        json!({"value": "x", "source": "here"})
    );
    let it: Item<String> =
        Item::first([Item::missing("a"), Item::missing("b"), Item::missing("a")]);
    assert_eq!(
        serde_json::to_value(&it).unwrap(),
        json!({"missing": "a; b"})
    );
}

#[test]
fn capture_without_a_run_or_nvml() {
    let env = capture(&Inputs {
        nvml_lib: Some("/no/such/libnvidia-ml.so.1".into()),
        ..Inputs::default()
    });
    assert!(matches!(env.gpus, Item::Missing { .. }));
    assert!(matches!(env.nvidia_driver, Item::Missing { .. }));
    assert!(matches!(env.ram_bytes, Item::Found { .. }));
    let text = serde_json::to_string(&env).unwrap();
    let back: Environment = serde_json::from_str(&text).unwrap();
    assert_eq!(back, env);
    let rows = crate::report::environment::rows(&env);
    assert!(
        rows.iter()
            .any(|r| r.item == "GPU" && r.source.starts_with("missing: cannot load"))
    );
}

/// Probes as a machine without NVML, ComfyUI or Python would give them.
fn bare_probes(process_env: &[(&str, &str)]) -> Probes {
    Probes {
        host: crate::machine::host::Host {
            os: Item::found("Debian GNU/Linux 12", "/etc/os-release"),
            kernel: Item::found("6.1.0", "uname"),
            cpu: Item::found("AMD Ryzen 9 7950X", "/proc/cpuinfo"),
            ram_bytes: Item::found(34_359_738_368u64, "sysinfo now"),
            swap_bytes: Item::found(0u64, "sysinfo now"),
        },
        nvml: Err(crate::nvidia::NvmlOpenError::Other(
            "cannot load libnvidia-ml.so.1".into(),
        )),
        install: None,
        git: Err("no folder".into()),
        custom_nodes: Err("no folder".into()),
        python: Err("no folder".into()),
        process_env: process_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        comfyui_set_env: None,
    }
}

#[test]
fn the_merge_prefers_what_the_run_recorded_to_the_machine_now() {
    let record: RunRecord = serde_json::from_value(json!({
        "outcome": "oom", "evidence": [], "explanation": null, "argv": ["main.py"],
        "flags": [], "iterations": [], "peaks": {}, "run_dir": "/r", "workflow": "/w.json",
        "started_at": "2026-12-01T00:00:00Z", "duration_ms": 1, "startup_ms": 1, "port": 1,
        "teardown": {"killed": false, "group_empty": true, "exit": null},
        "warnings": [], "overhead": {"ready_to_submitted_ms": 0.0, "end_to_verdict_ms": 0.0,
        "teardown_ms": 0.0}, "sampling": [], "gpu_wait_ms": 0,
        "effective": {"comfyui_version": "0.38.1", "dynamic_vram": true},
        "system_stats": {"system": {"ram_total": 68_719_476_736u64}, "devices": []}
    }))
    .unwrap();
    let inp = Inputs {
        run: Some(RunFacts {
            label: "run 001".into(),
            record,
            summary: None,
            log: None,
        }),
        launcher_env: vec![(
            "PYTORCH_CUDA_ALLOC_CONF".into(),
            "expandable_segments:True".into(),
        )],
        ..Inputs::default()
    };
    let env = merge(
        &inp,
        bare_probes(&[
            ("PYTORCH_CUDA_ALLOC_CONF", "ignored: the launcher's wins"),
            ("CUDA_VISIBLE_DEVICES", "0"),
        ]),
    );
    assert_eq!(
        serde_json::to_value(&env.ram_bytes).unwrap(),
        json!({"value": 68_719_476_736u64, "source": "/system_stats of run 001"})
    );
    assert_eq!(
        serde_json::to_value(&env.comfyui_version).unwrap(),
        json!({"value": "0.38.1", "source": "startup log of run 001"})
    );
    assert_eq!(
        serde_json::to_value(env.env.value().unwrap()).unwrap(),
        json!({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_VISIBLE_DEVICES": "0"})
    );
    assert_eq!(env.os.text().as_deref(), Some("Debian GNU/Linux 12"));
    assert!(matches!(env.gpus, Item::Missing { .. }));
    assert!(matches!(env.torch, Item::Missing { .. }));
}

#[test]
fn the_samplers_summary_is_read_typed_and_wins_over_nvml_now() {
    // A summary as `samples-summary.json` keeps it (written by the sampler, read back typed),
    // and a record whose startup log named comfy-kitchen.
    let summary = crate::sampler::Summary {
        driver_version: Some("580.95.05".into()),
        cuda_driver_version: Some("13.0".into()),
        devices: vec![crate::sampler::DeviceInfo {
            index: 0,
            name: Some("NVIDIA GeForce RTX 4090".into()),
            total_bytes: Some(25_757_220_864),
            reserved_bytes: Some(454_033_408),
            ..Default::default()
        }],
        ..Default::default()
    };
    let text = serde_json::to_string(&summary).unwrap();
    let summary: crate::sampler::Summary = serde_json::from_str(&text).unwrap();
    let record: RunRecord = serde_json::from_value(json!({
        "outcome": "pass", "evidence": [], "explanation": null, "argv": ["main.py"],
        "flags": [], "iterations": [], "peaks": {}, "run_dir": "/r", "workflow": "/w.json",
        "started_at": "2026-12-01T00:00:00Z", "duration_ms": 1, "startup_ms": 1, "port": 1,
        "teardown": {"killed": false, "group_empty": true, "exit": null},
        "warnings": [], "overhead": {"ready_to_submitted_ms": 0.0, "end_to_verdict_ms": 0.0,
        "teardown_ms": 0.0}, "sampling": [], "gpu_wait_ms": 0,
        "effective": {"comfy_kitchen_version": "0.2.36"}, "system_stats": null
    }))
    .unwrap();
    let inp = Inputs {
        run: Some(RunFacts {
            label: "run 002".into(),
            record,
            summary: Some(summary),
            log: None,
        }),
        ..Inputs::default()
    };
    let env = merge(&inp, bare_probes(&[]));
    assert_eq!(
        serde_json::to_value(&env.nvidia_driver).unwrap(),
        json!({"value": "580.95.05", "source": "NVML during run 002"})
    );
    assert_eq!(env.cuda_driver.text().as_deref(), Some("13.0"));
    let gpus = env.gpus.value().unwrap();
    assert_eq!(gpus[0].name.as_deref(), Some("NVIDIA GeForce RTX 4090"));
    assert_eq!(gpus[0].vram_total_bytes, Some(25_757_220_864));
    assert_eq!(
        gpus[0].pcie_link,
        Some(Item::missing("cannot load libnvidia-ml.so.1"))
    );
    // The kitchen version comes from the record's startup facts, not from grepping the log.
    assert_eq!(
        serde_json::to_value(&env.comfy_kitchen).unwrap(),
        json!({"value": "0.2.36", "source": "startup log of run 002"})
    );
}

#[test]
fn what_comfyui_set_itself_is_told_apart_from_the_users_environment() {
    let inp = Inputs::default();
    let mut probes = bare_probes(&[("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")]);
    probes.comfyui_set_env = parse_set_env(
        r#"{"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,backend:cudaMallocAsync",
            "HF_HUB_TOKEN": "secret", "CUDA_VISIBLE_DEVICES": null}"#,
    );
    let env = merge(&inp, probes);
    assert_eq!(
        serde_json::to_value(env.env.value().unwrap()).unwrap(),
        json!({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    );
    let set = env.env_set_by_comfyui.expect("told");
    assert_eq!(
        serde_json::to_value(set.value().unwrap()).unwrap(),
        json!({
            "CUDA_VISIBLE_DEVICES": null,
            "HF_HUB_TOKEN": "(set; not on the allowlist)",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,backend:cudaMallocAsync",
        })
    );
    // Not a JSON object of strings: nothing is claimed.
    assert_eq!(parse_set_env("[1]"), None);
    assert_eq!(parse_set_env(r#"{"A": 1}"#), None);
    let plain = merge(&inp, bare_probes(&[]));
    assert!(plain.env_set_by_comfyui.is_none());
    assert!(
        !serde_json::to_string(&plain)
            .unwrap()
            .contains("env_set_by_comfyui")
    );
}

#[test]
fn a_gpu_reading_nobody_had_is_absent_and_one_nvml_did_not_give_is_null() {
    let gpu = |reserved: Option<Option<u64>>| Gpu {
        index: Some(0),
        name: None,
        pcie_link: None,
        vram_free_bytes: None,
        vram_reserved_bytes: reserved,
        vram_total_bytes: Some(1),
    };
    let unknown = serde_json::to_value(gpu(Some(None))).unwrap();
    assert_eq!(unknown["vram_reserved_bytes"], Value::Null);
    assert!(
        unknown
            .as_object()
            .unwrap()
            .contains_key("vram_reserved_bytes")
    );
    let absent = serde_json::to_value(gpu(None)).unwrap();
    assert!(
        !absent
            .as_object()
            .unwrap()
            .contains_key("vram_reserved_bytes")
    );
    assert!(!absent.as_object().unwrap().contains_key("vram_free_bytes"));
    // Read back as written.
    for g in [gpu(Some(None)), gpu(None), gpu(Some(Some(5)))] {
        let back: Gpu = serde_json::from_value(serde_json::to_value(&g).unwrap()).unwrap();
        assert_eq!(back, g);
    }
}
