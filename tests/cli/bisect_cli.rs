//! `vrambisect bisect` end to end against the fake ComfyUI.

use crate::support;

use serde_json::{Value, json};
use support::comfy::FakeComfy;
use support::fixture;

const SD15: &str = "workflows/sd15_txt2img.json";

fn bisect(install: &FakeComfy, workflow: &str, extra: &[&str]) -> (i32, Value, tempfile::TempDir) {
    let mut args = vec!["--stall-timeout", "2s"];
    args.extend_from_slice(extra);
    support::on_install("bisect", install, workflow, "session", &args)
}

/// `vrambisect bisect` on `install` and the SD1.5 workflow, then `extra`, to be run as the
/// test likes (its own output, a session folder of its choosing).
fn bisect_command(install: &FakeComfy, extra: &[&str]) -> std::process::Command {
    let mut cmd = support::vrambisect();
    cmd.args(["bisect", "--comfyui", install.path_str(), "--workflow"])
        .arg(fixture(SD15))
        .args(extra);
    cmd
}

fn when_dynamic(effect: &str) -> Value {
    json!({"rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": effect}]})
}

#[test]
fn one_culprit_among_the_default_toggles() {
    let install = FakeComfy::new("0.38.1", when_dynamic("oom"));
    let (code, doc, tmp) = bisect(&install, SD15, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "fixed_by");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    assert_eq!(doc["baseline"]["outcome"], "oom");
    assert_eq!(doc["baseline"]["runs"], 1);
    assert_eq!(doc["baseline"]["failures"], 1);
    // The first fix among the 5 default toggles, then the search for a cheaper one within
    // the budget it states.
    let runs = doc["runs_total"].as_u64().unwrap();
    let cheaper = doc["verdict"]["cheaper_search"]["runs"].as_u64().unwrap();
    assert!(runs - cheaper <= 1 + 3 + 1, "{runs} runs for 5 toggles");
    assert!(cheaper <= doc["verdict"]["cheaper_search"]["budget"].as_u64().unwrap());
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains("Fails 1/1 with your flags (CUDA out of memory)"),
        "{statement}"
    );
    assert!(
        statement.contains("passes 1/1 with --disable-dynamic-vram"),
        "{statement}"
    );
    assert!(
        doc["verdict"]["launcher_line"]
            .as_str()
            .unwrap()
            .ends_with("main.py --disable-dynamic-vram")
    );
    let session = tmp.path().join("session");
    for f in ["session.json", "journal.jsonl", "result.json"] {
        assert!(session.join(f).is_file(), "{f}");
    }
    let journal = std::fs::read_to_string(session.join("journal.jsonl")).unwrap();
    assert_eq!(journal.lines().count() as u64, runs);
    assert!(session.join("runs/001/record.json").is_file());
}

#[test]
fn three_flags_needed_together_for_a_hang() {
    // #13730: only disabling Dynamic VRAM, pinned memory and async offload together helps.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{
            "when": {"not": {"flags": {"--disable-dynamic-vram": true, "--disable-pinned-memory": true, "--disable-async-offload": true}}},
            "effect": "hang"
        }]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &["--stall-timeout", "1s"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["baseline"]["outcome"], "hang");
    let mut flags: Vec<String> =
        serde_json::from_value(doc["verdict"]["fixing_flags"].clone()).unwrap();
    flags.sort();
    assert_eq!(
        flags,
        [
            "--disable-async-offload",
            "--disable-dynamic-vram",
            "--disable-pinned-memory"
        ]
    );
}

#[test]
fn tensorrt_errors_fixed_by_the_least_headroom() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"when": {"not": {"flags": {"--vram-headroom": {">=": 2}}}}, "effect": "tensorrt"}]}),
    );
    let (code, doc, _) = bisect(
        &install,
        SD15,
        &[
            "--toggle",
            "--vram-headroom=4",
            "--toggle=--vram-headroom=1",
            "--toggle",
            "--vram-headroom=2",
        ],
    );
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["baseline"]["outcome"], "tensorrt_allocator");
    assert_eq!(doc["verdict"]["fixing_flags"], json!(["--vram-headroom 2"]));
}

#[test]
fn failure_only_on_the_second_prompt() {
    let scenario = json!({"rules": [{"when": {"iteration": 2, "state": {"dynamic_vram": true}}, "effect": "aimdo_fault"}]});
    let install = FakeComfy::new("0.38.1", scenario.clone());
    let (code, doc, _) = bisect(&install, SD15, &["--iterations", "2"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["baseline"]["outcome"], "aimdo_fault");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );

    // One prompt per run never shows it.
    let install = FakeComfy::new("0.38.1", scenario);
    let (code, doc, _) = bisect(&install, SD15, &[]);
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"]["kind"], "not_reproduced");
    assert!(
        doc["verdict"]["statement"]
            .as_str()
            .unwrap()
            .contains("--iterations")
    );
}

#[test]
fn flaky_oom_with_repeats() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"seed": 7, "rules": [{"when": {"state": {"dynamic_vram": true}, "probability": 0.7}, "effect": "oom"}]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &["--repeat", "3"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    let baseline = &doc["baseline"];
    assert!(baseline["failures"].as_u64().unwrap() >= 1);
    // Every run of the fix passed, and the verdict says how sure it is from the runs.
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    let (passes, runs) = statement
        .split("passes ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.split_once('/'))
        .map(|(p, r)| (p.parse::<u32>().unwrap(), r.parse::<u32>().unwrap()))
        .unwrap_or_else(|| panic!("{statement}"));
    assert_eq!(passes, runs, "{statement}");
    let confidence = doc["verdict"]["confidence"].as_f64().unwrap();
    assert!((0.99..1.0).contains(&confidence), "{doc:#}");
    let rate = &doc["verdict"]["failure_rate"];
    let (low, high) = (
        rate["low"].as_f64().unwrap(),
        rate["high"].as_f64().unwrap(),
    );
    assert!(0.1 <= low && low < high && high <= 1.0, "{rate}");
    let total = doc["runs_total"].as_u64().unwrap();
    assert!(
        statement.contains(&format!("% given {total} runs; failure rate without it")),
        "{statement}"
    );
}

#[test]
fn not_reproduced_after_the_repeats() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, doc, _) = bisect(&install, SD15, &[]);
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"]["kind"], "not_reproduced");
    assert_eq!(doc["baseline"]["runs"], 3);
    assert_eq!(doc["runs_total"], 3);
}

#[test]
fn ram_that_is_not_returned_is_said_even_when_nothing_fails() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "pass", "ram_growth_mb": 300}]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &["--iterations", "2"]);
    assert_eq!(code, 1);
    assert_eq!(doc["verdict"]["kind"], "not_reproduced");
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains("RAM grew by") && statement.contains("per prompt and was not returned"),
        "{statement}"
    );
    let base = &doc["configs"][0];
    assert!(
        base["ram_growth_per_prompt_bytes"].as_i64().unwrap() > 200 << 20,
        "{base}"
    );
}

#[test]
fn a_failure_that_needs_the_custom_nodes_is_said() {
    // The failure comes only with the custom nodes loaded: the extra run without them passes.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"when": {"flags": {"--disable-all-custom-nodes": false}}, "effect": "oom"}]}),
    );
    let nodes = install.path().join("custom_nodes/ComfyUI-SomeNodes");
    std::fs::create_dir_all(&nodes).unwrap();
    std::fs::write(nodes.join("__init__.py"), "NODE_CLASS_MAPPINGS = {}\n").unwrap();
    let (_, doc, _) = bisect(&install, SD15, &["--toggle", "--disable-dynamic-vram"]);
    let check = &doc["custom_nodes_check"];
    assert_eq!(check["outcome"], "pass", "{doc:#}");
    assert_eq!(check["custom_nodes"], 1);
    assert_eq!(
        check["statement"],
        "Without custom nodes (--disable-all-custom-nodes) it passes: the custom node is involved."
    );
    assert_eq!(check["flags"], json!(["--disable-all-custom-nodes"]));
    // Not a configuration of the search, and skipped when asked.
    assert!(doc["configs"].as_array().unwrap().iter().all(|c| {
        !c["flags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "--disable-all-custom-nodes")
    }));
    let (_, doc, _) = bisect(
        &install,
        SD15,
        &[
            "--toggle",
            "--disable-dynamic-vram",
            "--no-custom-nodes-check",
        ],
    );
    assert!(doc["custom_nodes_check"].is_null(), "{doc:#}");
}

#[test]
fn invalid_workflow_is_untestable_at_once() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let (code, doc, _) = bisect(
        &install,
        "captures/workflows/api/sd15_txt2img_missing_checkpoint.json",
        &[],
    );
    assert_eq!(code, 125);
    assert_eq!(doc["verdict"]["kind"], "untestable");
    assert_eq!(doc["runs_total"], 1);
}

#[test]
fn a_base_flag_that_causes_it() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"when": {"flags": {"--highvram": true}}, "effect": "oom"}]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &["--", "--highvram"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "caused_by");
    assert_eq!(doc["verdict"]["culprit_flags"], json!(["--highvram"]));
    assert_eq!(doc["baseline"]["flags"], json!(["--highvram"]));
    // The install's flags as a prior: --highvram keeps models in VRAM and the GPU ran out,
    // so taking it away ran first, right after the failure.
    let prior = &doc["verdict"]["prior"];
    assert_eq!(prior["own_flags"], json!(["--highvram"]), "{prior:#}");
    assert_eq!(prior["tried_first"], "without --highvram");
    // The failure and that pass are the whole bisect.
    assert_eq!(doc["runs_total"], 2, "{:#}", doc["configs"]);
}

#[test]
fn an_install_without_dynamic_vram_gets_the_memory_flags_it_has() {
    // 0.3.64 predates Dynamic VRAM; its failure here goes away with --disable-smart-memory.
    let install = FakeComfy::new(
        "0.3.64",
        json!({"rules": [{"when": {"state": {"smart_memory": true}}, "effect": "oom"}]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &["--", "--cpu"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "fixed_by", "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-smart-memory"])
    );
    let set = doc["toggle_set"].as_str().unwrap();
    assert!(set.contains("without Dynamic VRAM"), "{set}");
    let toggles = doc["toggles"].to_string();
    assert!(!toggles.contains("--disable-dynamic-vram"), "{toggles}");
    assert!(toggles.contains("--reserve-vram=1"), "{toggles}");
    // No fix here keeps Dynamic VRAM on: the search for a cheaper one says it looks for a
    // faster one.
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("s");
    let out = bisect_command(&install, &["--max-runs", "1", "--output"])
        .arg(&session)
        .args(["--", "--cpu"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("up to 8 more runs look for a cheaper one (a faster one)"),
        "{err}"
    );
    // A Dynamic VRAM toggle named on this install is refused before any run.
    let out = bisect_command(&install, &["--toggle", "--disable-dynamic-vram"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("arrived in 0.15.0"));
}

#[test]
fn resume_after_an_interruption_repeats_no_finished_run() {
    let scenario = json!({"timing": {"node_time": 0.4}, "rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom"}]});
    let install = FakeComfy::new("0.38.1", scenario);
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");
    let wf = fixture(SD15);
    let child = support::vrambisect()
        .args([
            "bisect",
            "--json",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            session.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt during the second run: the first journaled, the second's ComfyUI started.
    let journal = session.join("journal.jsonl");
    let second = session.join("runs/002/comfyui.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::fs::read_to_string(&journal)
        .map(|j| j.lines().count())
        .unwrap_or(0)
        < 1
        || !second.exists()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the second run never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let output = child.wait_with_output().unwrap();
    assert_eq!(
        output.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    install.assert_nothing_left();
    let interrupted: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(interrupted["verdict"]["kind"], "incomplete");
    let finished_before = std::fs::read_to_string(&journal).unwrap().lines().count();

    let (code, doc, _) = support::json(&["bisect", "--resume", session.to_str().unwrap()]);
    install.assert_nothing_left();
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    let entries: Vec<Value> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(entries.len() > finished_before);
    assert_eq!(doc["runs_total"].as_u64().unwrap() as usize, entries.len());
    // The baseline ran once in all: the resumed session did not repeat it.
    let baseline_runs = entries
        .iter()
        .filter(|e| e["config"]["choice"].as_array().unwrap().is_empty())
        .count();
    assert_eq!(baseline_runs, 1);
}

#[test]
fn bad_input_before_any_run() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let wf = fixture("workflows/malformed.json");
    let tmp = tempfile::tempdir().unwrap();
    let out = support::vrambisect()
        .args([
            "bisect",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            tmp.path().join("s").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !tmp.path().join("s").exists(),
        "no session folder for input that cannot work"
    );
    let out = support::vrambisect()
        .args(["bisect", "--resume", "/no/such/session"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("session.json"));

    // A resumed session keeps its own settings: one given with --resume is refused, not
    // silently ignored. A new run budget is allowed.
    for extra in [
        &["--repeat", "3"][..],
        &["--toggle", "--lowvram"],
        &["--workflow", "w.json"],
        &["--stall-timeout", "1m"],
        &["--", "--lowvram"],
    ] {
        let out = support::vrambisect()
            .args(["bisect", "--resume", "/no/such/session"])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains("cannot be used with"), "{extra:?}: {err}");
    }
    let out = support::vrambisect()
        .args(["bisect", "--resume", "/no/such/session", "--max-runs", "80"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("session.json"));
}

#[test]
fn flags_this_install_rejects_are_refused_before_any_run() {
    let install = FakeComfy::new("0.38.1", when_dynamic("oom"));
    let cases: &[(&[&str], &str)] = &[
        // A base flag ComfyUI does not know: never dropped silently.
        (
            &["--", "--no-such-flag"],
            "ComfyUI 0.38.1 refuses your flags: unrecognized arguments: --no-such-flag",
        ),
        // Mutually exclusive base flags.
        (
            &["--", "--highvram", "--lowvram"],
            "not allowed with argument --highvram",
        ),
        // Toggles the user named that this ComfyUI does not take.
        (&["--toggle", "--not-a-flag"], "--toggle --not-a-flag"),
        (&["--toggle", "--reserve-vram=lots"], "invalid float value"),
    ];
    for (extra, want) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let session = tmp.path().join("s");
        let out = bisect_command(&install, &["--output", session.to_str().unwrap()])
            .args(*extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!session.exists(), "{extra:?}: a session folder was made");
        assert!(
            !install.path().join("run-counter.txt").exists(),
            "{extra:?}: ComfyUI was started"
        );
    }
}

#[test]
fn a_flag_the_model_once_called_a_no_op_is_run_not_assumed() {
    // ComfyUI 0.3.64 acts on --async-offload under --cpu (it logs 2 streams there); here
    // that is what fails. The configuration without it must run, not be merged with the
    // baseline as "no GPU is used with --cpu".
    let install = FakeComfy::new(
        "0.3.64",
        json!({"rules": [{"when": {"state": {"async_offload": 2}}, "effect": "oom"}]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &["--", "--cpu", "--async-offload"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "caused_by", "{doc:#}");
    assert_eq!(doc["verdict"]["culprit_flags"], json!(["--async-offload"]));
    // Every configuration named is one that ran, with its own runs.
    for c in doc["configs"].as_array().unwrap() {
        assert!(c["runs"].as_u64().unwrap() >= 1, "{c}");
    }
}

#[test]
fn resuming_a_finished_session_shows_its_verdict_and_runs_nothing() {
    let install = FakeComfy::new("0.38.1", when_dynamic("oom"));
    let (code, first, tmp) = bisect(&install, SD15, &[]);
    assert_eq!(code, 0, "{first:#}");
    let session = tmp.path().join("session");
    let journal = || std::fs::read_to_string(session.join("journal.jsonl")).unwrap();
    let before = journal();
    for _ in 0..2 {
        let (code, again, _) = support::json(&["bisect", "--resume", session.to_str().unwrap()]);
        assert_eq!(code, 0);
        assert_eq!(again, first, "the same result, as it was");
        assert_eq!(journal(), before, "no run was added");
    }
    install.assert_nothing_left();
}

#[test]
fn a_spent_budget_names_max_runs_in_the_advice() {
    let install = FakeComfy::new("0.38.1", when_dynamic("oom"));
    let (code, doc, tmp) = bisect(&install, SD15, &["--max-runs", "1"]);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "incomplete");
    let session = tmp.path().join("session");
    let advice = doc["continue_with"].as_str().unwrap();
    assert_eq!(
        advice,
        format!(
            "vrambisect bisect --resume {} --max-runs 17",
            session.display()
        )
    );
    // Every configuration listed ran.
    for c in doc["configs"].as_array().unwrap() {
        assert!(c["runs"].as_u64().unwrap() >= 1, "{c}");
    }
    // Resumed as it is, the budget is still spent: the text says why the advice raises it.
    let again = support::vrambisect()
        .args(["bisect", "--resume"])
        .arg(&session)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("continue with: {advice}\n"))
            && text
                .contains("note: its --max-runs raises the run budget, which this session spent"),
        "{text}"
    );
    // Taking the advice finishes the bisect.
    let args: Vec<&str> = advice.split(' ').skip(1).collect();
    let (code, done, _) = support::json(&args);
    assert_eq!(code, 0, "{done:#}");
    assert_eq!(done["verdict"]["kind"], "fixed_by");
    assert!(done.get("continue_with").is_none());
    install.assert_nothing_left();
}

#[test]
fn a_base_flag_this_machine_cannot_drop_is_untestable_here_not_a_failure() {
    // No GPU without --cpu on this (simulated) machine; with --cpu the workflow fails.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [
            {"when": {"state": {"cpu": false}}, "effect": "startup_crash", "kind": "no_nvidia_driver"},
            {"when": {"state": {"cpu": true}}, "effect": "oom"}
        ]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &["--", "--cpu"]);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "no_fix_found", "{doc:#}");
    let without_cpu = doc["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["changes"] == json!(["without --cpu"]))
        .expect("removing --cpu was tried");
    assert_eq!(without_cpu["untestable_here"], true, "{without_cpu}");
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains("more could not start on this machine: untestable here"),
        "{statement}"
    );
}

#[test]
fn a_disk_that_fills_mid_session_stops_it_without_a_verdict_and_resume_finishes_it() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"timing": {"node_time": 0.3}, "rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom"}]}),
    );
    let tmp = tempfile::tempdir().unwrap();
    let session = tmp.path().join("session");
    let child = support::vrambisect()
        .args([
            "bisect",
            "--json",
            "--comfyui",
            install.path_str(),
            "--workflow",
        ])
        .arg(fixture(SD15))
        .arg("--output")
        .arg(&session)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The first run is under way; from now on the journal's disk is full.
    support::wait_for_text(&session.join("runs/001/comfyui.log"), "got prompt");
    std::os::unix::fs::symlink("/dev/full", session.join("journal.jsonl")).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("journal.jsonl"), "{stderr}");
    assert!(stderr.contains("--resume"), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["error"].is_object(), "an error, not a verdict: {doc:#}");
    assert!(
        !session.join("result.json").exists(),
        "no verdict was written"
    );
    install.assert_nothing_left();

    // Room again: --resume finishes it, redoing the run that was never journaled.
    std::fs::remove_file(session.join("journal.jsonl")).unwrap();
    let (code, done, _) = support::json(&["bisect", "--resume", session.to_str().unwrap()]);
    assert_eq!(code, 0, "{done:#}");
    assert_eq!(done["verdict"]["kind"], "fixed_by");
    install.assert_nothing_left();
}

/// The API prompt of a run folder without `_meta`.
fn queued(dir: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(dir.join("workflow.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    for node in v.as_object_mut().unwrap().values_mut() {
        node.as_object_mut().unwrap().remove("_meta");
    }
    v
}

/// A bisect started from a PNG ComfyUI saved (the prompt inside it) and from a UI-format save
/// reaches the verdict the API export reaches; each run folder keeps the API prompt that was
/// queued (for the UI save: the frontend's own conversion, recorded) and the file given
/// beside it.
#[test]
fn a_bisect_from_a_png_or_a_ui_save_reaches_the_api_verdict() {
    let install = FakeComfy::new("0.38.1", when_dynamic("oom"));
    let cases = [
        ("media/comfyui_png_small.api.json", None, None),
        (
            "media/comfyui_png_small.png",
            Some("media/comfyui_png_small.api.json"),
            Some("workflow-source.png"),
        ),
        (
            "ui-workflows/pairs/template_default.ui.json",
            Some("ui-workflows/pairs/template_default.api.json"),
            Some("workflow-source.json"),
        ),
    ];
    for (workflow, api, source) in cases {
        let (code, doc, tmp) = bisect(&install, workflow, &[]);
        assert_eq!(code, 0, "{workflow}: {doc:#}");
        assert_eq!(doc["verdict"]["kind"], "fixed_by", "{workflow}");
        assert_eq!(
            doc["verdict"]["fixing_flags"],
            json!(["--disable-dynamic-vram"]),
            "{workflow}"
        );
        let run = support::out_dir(tmp.path(), "session");
        let run = std::path::Path::new(&run).join("runs/001");
        if let Some(api) = api {
            let mut expected: Value =
                serde_json::from_str(&std::fs::read_to_string(fixture(api)).unwrap()).unwrap();
            for node in expected.as_object_mut().unwrap().values_mut() {
                node.as_object_mut().unwrap().remove("_meta");
            }
            let got = queued(&run);
            // ComfyUI saves an fps of 4 as 4.0: compare as JSON text of the same numbers.
            assert_eq!(got, expected, "{workflow}");
        }
        if let Some(source) = source {
            assert_eq!(
                std::fs::read(run.join(source)).unwrap(),
                std::fs::read(fixture(workflow)).unwrap(),
                "{workflow}: the file given is kept beside the prompt"
            );
        }
    }
    install.assert_nothing_left();
}

/// What cannot give a prompt is refused in one line before any run (an image without a
/// prompt, a cut PNG, JSON of neither format); a UI workflow naming a node this ComfyUI lacks
/// ends its run as an invalid workflow naming the node, with no ComfyUI left running.
#[test]
fn inputs_without_a_prompt_are_refused_and_unknown_nodes_named() {
    let install = FakeComfy::new("0.38.1", Value::Null);
    let tmp = tempfile::tempdir().unwrap();
    let neither = tmp.path().join("neither.json");
    std::fs::write(&neither, r#"{"name": "my workflow", "version": 3}"#).unwrap();
    for (path, why) in [
        (
            fixture("media/plain_no_metadata.png"),
            "holds no ComfyUI prompt",
        ),
        (
            fixture("media/truncated_40pct_png_large_prompt.png"),
            "the PNG image is cut short",
        ),
        (neither.clone(), "not an API-format workflow"),
    ] {
        let (code, doc, _) = support::json(&[
            "bisect",
            "--comfyui",
            install.path_str(),
            "--workflow",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{path:?}: {doc:#}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{path:?}: {message}");
    }
    // A node class the install lacks: the run starts ComfyUI, cannot convert, and says which.
    let mut ui: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("ui-workflows/pairs/template_default.ui.json")).unwrap(),
    )
    .unwrap();
    ui["nodes"][0]["type"] = json!("SuperUpscaler");
    let custom = tmp.path().join("custom.json");
    std::fs::write(&custom, ui.to_string()).unwrap();
    let (code, doc, _) = support::json(&[
        "run",
        "--comfyui",
        install.path_str(),
        "--workflow",
        custom.to_str().unwrap(),
        "--output",
        tmp.path().join("run").to_str().unwrap(),
    ]);
    assert_eq!(code, 125, "{doc:#}");
    assert_eq!(doc["outcome"], "invalid_workflow");
    let evidence = doc["evidence"].to_string();
    assert!(
        evidence.contains("this ComfyUI has no node class SuperUpscaler"),
        "{evidence}"
    );
    install.assert_nothing_left();
}

#[test]
fn a_cuda_error_of_pinned_memory_is_bisected_to_its_flag() {
    // Not an OOM: a node error ComfyUI reports like any other, which pinned memory causes.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"when": {"state": {"pinned_memory": true}}, "effect": "cuda_invalid_argument"}]}),
    );
    let (code, doc, _) = bisect(&install, SD15, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["baseline"]["outcome"], "node_error");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-pinned-memory"])
    );
}
