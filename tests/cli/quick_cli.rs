//! Shortened runs (`--quick`) end to end against the stand-in: the reproduce check, the
//! confirmation on the workflow as it is, the fallback to full runs, and what a run folder
//! keeps.

use crate::support;

use serde_json::{Value, json};
use support::comfy::FakeComfy;

const TWENTY: &str = "workflows/sd15_txt2img_20_steps.json";

fn bisect(install: &FakeComfy, extra: &[&str]) -> (i32, Value, tempfile::TempDir) {
    // The shortened runs of the search for the first fix (the search for a cheaper one after
    // it runs shortened too, and has tests of its own).
    let mut args = vec!["--stall-timeout", "5s", "--first-fix"];
    args.extend_from_slice(extra);
    support::on_install("bisect", install, TWENTY, "session", &args)
}

/// The last lines of every run's ComfyUI log under `dir`, named by run.
fn run_log_tails(dir: &std::path::Path) -> String {
    let mut logs: Vec<std::path::PathBuf> = walk(dir)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == "comfyui.log"))
        .collect();
    logs.sort();
    logs.iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(12)..].join("\n");
            format!("--- {}\n{tail}", p.display())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Every run of the result, in order: (n, kind, outcome).
fn runs(doc: &Value) -> Vec<(u64, String, String)> {
    let mut out: Vec<(u64, String, String)> = doc["configs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["each_run"].as_array().unwrap().clone())
        .map(|r| {
            (
                r["n"].as_u64().unwrap(),
                r["kind"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn dynamic_vram_oom(extra: Value) -> Value {
    let mut rule =
        json!({"when": {"state": {"dynamic_vram": true}}, "effect": "oom", "node": "KSampler"});
    rule.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"rules": [rule]})
}

#[test]
fn a_shortened_run_that_fails_as_the_workflow_did_stands_for_the_check() {
    // An OOM at VAE decode, after sampling: the first shortened run (the known failure's
    // usual fix, pinned memory off) fails there as the workflow did, which shows what the
    // shortened run of the user's flags would: it is never made.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"timing": {"step_time": 0.1}, "rules": [
            {"when": {"flags": {"--disable-smart-memory": true}}, "effect": "pass"},
            {"effect": "oom", "node": "VAEDecode"}
        ]}),
    );
    let toggles = [
        "--toggle",
        "--disable-pinned-memory",
        "--toggle",
        "--disable-async-offload",
        "--toggle",
        "--disable-mmap",
        "--toggle",
        "--disable-smart-memory",
    ];
    let (code, doc, _tmp) = bisect(&install, &toggles);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-smart-memory"])
    );
    let runs = runs(&doc);
    assert_eq!(
        runs[..2],
        [
            (1, "full".into(), "oom".into()),
            (2, "quick".into(), "oom".into())
        ],
        "{runs:?}"
    );
    assert_eq!(
        doc["configs"][1]["changes"],
        json!(["--disable-pinned-memory"])
    );
    let own = doc["configs"][0]["each_run"].as_array().unwrap();
    assert_eq!(own.len(), 1, "{own:?}");
    assert_eq!(doc["quick"]["state"], "used");
    assert_eq!(doc["quick"]["reproduced_by_run"], 2);
    assert_eq!(doc["quick"]["reference_run"], 1);

    // One toggle, which fixes it: its run would be the verdict, and a shortened pass would
    // call the shortened run of the user's flags and then the confirmation. In full at once:
    // the failure and the pass, as an expert who guessed right.
    let (code, doc, _tmp) = bisect(&install, &toggles[6..]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        self::runs(&doc),
        [
            (1, "full".into(), "oom".into()),
            (2, "full".into(), "pass".into()),
        ]
    );
}

#[test]
fn the_search_runs_shortened_once_one_fails_as_the_workflow_does() {
    // The failure strikes at the first sampling step, so the shortened copy is checked.
    let install = FakeComfy::new("0.38.1", dynamic_vram_oom(json!({"at_step": 1})));
    let (code, doc, tmp) = bisect(&install, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    let runs = runs(&doc);
    // Run 1 is the workflow as it is. Run 2, the first shortened one, passes (without
    // Dynamic VRAM), so before it counts run 3 is the shortened copy of the user's flags,
    // which fails the same way.
    assert_eq!(runs[0], (1, "full".into(), "oom".into()));
    assert_eq!(runs[1], (2, "quick".into(), "pass".into()), "{runs:?}");
    assert_eq!(runs[2], (3, "quick".into(), "oom".into()), "{runs:?}");
    assert_eq!(doc["configs"][0]["changes"], json!(["(your flags)"]));
    assert_eq!(doc["configs"][0]["each_run"][1]["n"], 3);
    // The verdict's run is the last, in full, and passes.
    let last = runs.last().unwrap();
    assert_eq!((last.1.as_str(), last.2.as_str()), ("full", "pass"));
    assert!(
        runs[2..runs.len() - 1].iter().all(|r| r.1 == "quick"),
        "{runs:?}"
    );
    let quick = &doc["quick"];
    assert_eq!(quick["state"], "used");
    assert_eq!(quick["steps"], 2);
    assert_eq!(quick["reproduced_by_run"], 3);
    assert_eq!(quick["reference_run"], 1);
    assert_eq!(quick["confirmed_by_run"], last.0);
    assert_eq!(quick["runs_full"], 2);
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains(&format!(
            "Searched on 2-step runs, which fail as your workflow does (run 3); confirmed on your workflow (run {})",
            last.0
        )),
        "{statement}"
    );
    // The run folder keeps both prompts, and its record says what changed.
    let run2 = tmp.path().join("session/runs/002");
    let full: Value =
        serde_json::from_str(&std::fs::read_to_string(run2.join("workflow.json")).unwrap())
            .unwrap();
    let short: Value =
        serde_json::from_str(&std::fs::read_to_string(run2.join("workflow.quick.json")).unwrap())
            .unwrap();
    assert_eq!(full["3"]["inputs"]["steps"], 20);
    assert_eq!(short["3"]["inputs"]["steps"], 2);
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(run2.join("record.json")).unwrap()).unwrap();
    assert_eq!(record["run_kind"], "quick");
    assert_eq!(
        record["quick"]["changes"],
        json!([{"node": "3", "class": "KSampler", "input": "steps", "from": 20, "to": 2}])
    );
    // The stand-in's log shows the 2 steps it sampled.
    let log = std::fs::read_to_string(
        tmp.path()
            .join(format!("session/runs/{:03}/comfyui.log", runs[1].0)),
    )
    .unwrap();
    assert!(log.contains("2/2"), "{log}");
    // The progress file gives the time per run of each kind as measured.
    let progress: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("session/progress.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        progress["kind"], "full",
        "the last run was the full confirmation"
    );
    assert!(
        progress["seconds_per_run"]["full"].as_f64().unwrap() > 0.0,
        "{progress}"
    );
    assert!(
        progress["seconds_per_run"]["quick"].as_f64().unwrap() > 0.0,
        "{progress}"
    );
    // Resumed, the finished session says the same.
    let session = tmp.path().join("session");
    let (code, again, _) = support::json(&["bisect", "--resume", session.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(again["quick"], doc["quick"]);
}

#[test]
fn a_failure_past_step_10_is_searched_in_full_at_once() {
    let install = FakeComfy::new("0.38.1", dynamic_vram_oom(json!({"at_step": 12})));
    let (code, doc, _tmp) = bisect(&install, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    // The run of your flags failed about 12 steps in: a shortened run could not show it.
    let runs = runs(&doc);
    assert!(runs.iter().all(|r| r.1 == "full"), "{runs:?}");
    assert_eq!(doc["quick"]["state"], "not_used");
    let reason = doc["quick"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("your workflow failed after step ")
            && reason.ends_with(" of its sampling (run 1), past the 2 steps of a shortened run"),
        "{reason}"
    );
    let step: u64 = reason
        .trim_start_matches("your workflow failed after step ")
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((10..=14).contains(&step), "{reason}");
    // As many runs as --quick off takes.
    let off_install = FakeComfy::new("0.38.1", dynamic_vram_oom(json!({"at_step": 12})));
    let (_, off, _tmp2) = bisect(&off_install, &["--quick", "off"]);
    assert_eq!(
        off["verdict"]["fixing_flags"],
        doc["verdict"]["fixing_flags"]
    );
    assert_eq!(
        doc["runs_total"].as_u64().unwrap(),
        off["runs_total"].as_u64().unwrap()
    );
    assert_eq!(off["quick"]["state"], "not_used");
    assert!(
        off["configs"][0]["each_run"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["kind"] == "full")
    );
}

#[test]
fn a_failure_at_vae_decode_reproduces_shortened() {
    // Sampling long enough against the rest of a run that shortened runs pay.
    let scenario = json!({"timing": {"step_time": 0.1}, "rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom", "node": "VAEDecode"}]});
    let install = FakeComfy::new("0.38.1", scenario);
    let (code, doc, _tmp) = bisect(&install, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["quick"]["state"], "used");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
}

#[test]
fn a_load_that_dwarfs_the_sampling_runs_in_full_and_says_why() {
    // The stand-in's default time shape: a run is mostly ComfyUI starting and loading, its
    // 20 steps a fraction of a second.
    let scenario = json!({"rules": [{"when": {"state": {"dynamic_vram": true}}, "effect": "oom", "node": "VAEDecode"}]});
    let install = FakeComfy::new("0.38.1", scenario);
    let (code, doc, _tmp) = bisect(&install, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["quick"]["state"], "not_used");
    let reason = doc["quick"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("your workflow's run (run 1) took ")
            && reason.contains("for its 20 sampling steps: a shortened run would save about ")
            && reason.ends_with(")"),
        "{reason}"
    );
    assert!(runs(&doc).iter().all(|r| r.1 == "full"), "{:?}", runs(&doc));
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
}

#[test]
fn a_workflow_with_few_steps_runs_in_full_and_says_why() {
    let install = FakeComfy::new("0.38.1", dynamic_vram_oom(json!({})));
    let (code, doc, _tmp) =
        support::on_install("bisect", &install, "workflows/sd15_txt2img.json", "s", &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["quick"]["state"], "not_used");
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement
            .contains("All runs were full: its sampling has only 4 steps, too few to shorten."),
        "{statement}"
    );
}

#[test]
fn run_queues_a_shortened_copy_when_given_steps() {
    let install = FakeComfy::new("0.38.1", json!({"rules": []}));
    let (code, doc, tmp) = support::on_install("run", &install, TWENTY, "run", &["--quick", "3"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["run_kind"], "quick");
    assert_eq!(doc["quick"]["steps"], 3);
    assert!(tmp.path().join("run/workflow.quick.json").is_file());
    // auto: a single run is of the workflow as it is.
    let (code, doc, tmp) = support::on_install("run", &install, TWENTY, "run", &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["run_kind"], "full");
    assert!(doc.get("quick").is_none());
    assert!(!tmp.path().join("run/workflow.quick.json").exists());
}

#[test]
fn a_bad_quick_value_is_one_line() {
    let out = support::vrambisect()
        .args(["bisect", "--workflow", "x.json", "--quick", "fast"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'fast' is not auto, off or a number of steps (1 or more)"),
        "{err}"
    );
}

#[test]
fn a_failure_before_the_first_sampling_step_needs_no_shortened_check() {
    let install = FakeComfy::new("0.38.1", dynamic_vram_oom(json!({})));
    let (code, doc, _tmp) = bisect(&install, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    let runs = runs(&doc);
    // No run 2 of the shortened copy with your flags: it would be the same run.
    assert_eq!(runs[0], (1, "full".into(), "oom".into()));
    assert_ne!(runs[1].1, "quick", "{runs:?}");
    let quick = &doc["quick"];
    assert_eq!(quick["state"], "used");
    assert_eq!(quick["reproduced_by_run"], 1);
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains("your workflow failed before its first sampling step (run 1), where a shortened copy is the same run"),
        "{statement}"
    );
}

#[test]
fn a_full_run_that_disagrees_sends_the_search_back_to_full_runs() {
    // --disable-pinned-memory only moves the failure past step 10: shortened runs pass with
    // it, the workflow does not. Without it the failure strikes late (at VAE decode, after
    // 20 steps of 0.5 s), so the run of --disable-pinned-memory alone (the CUDA OOM's usual
    // fix among the toggles, so tried first) is made shortened (a full run that fails would
    // cost more than a shortened one and its confirmation); its confirmation fails, and the
    // search goes on in full. (At 0.2 s a step, a loaded machine's slower start-up tipped
    // that choice to a full run: the sampling must dwarf the start-up by a margin.)
    let scenario = json!({"timing": {"step_time": 0.5}, "rules": [
        {"when": {"flags": {"--disable-async-offload": true}}, "effect": "pass"},
        {"when": {"all": [{"state": {"dynamic_vram": true}}, {"flags": {"--disable-pinned-memory": true}}]},
         "effect": "oom", "node": "KSampler", "at_step": 12},
        {"when": {"state": {"dynamic_vram": true}}, "effect": "oom", "node": "VAEDecode"}
    ]});
    let install = FakeComfy::new("0.38.1", scenario);
    let (code, doc, tmp) = bisect(
        &install,
        &[
            "--toggle",
            "--disable-pinned-memory",
            "--toggle",
            "--disable-async-offload",
        ],
    );
    // What each run's ComfyUI said last, for a failure here to be read.
    let logs = run_log_tails(tmp.path());
    assert_eq!(code, 0, "{doc:#}\n{logs}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-async-offload"]),
        "{logs}"
    );
    assert_eq!(doc["quick"]["state"], "set_aside", "{logs}");
    let reason = doc["quick"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("--disable-pinned-memory passed shortened (run "),
        "{reason}\n{logs}"
    );
    // The verdict rests on a full pass.
    let fix = doc["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["flags"] == json!(["--disable-async-offload"]))
        .unwrap();
    assert!(
        fix["each_run"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "full" && r["outcome"] == "pass")
    );
}

#[test]
fn no_fix_with_the_default_toggles_costs_about_the_toggles_and_no_full_rerun() {
    // Nothing fixes it, and every failure strikes before sampling: the configuration with
    // every change fails shortened, which is the same run as in full.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "oom", "node": "KSampler"}]}),
    );
    let (code, doc, _tmp) = support::on_install(
        "bisect",
        &install,
        TWENTY,
        "session",
        &["--stall-timeout", "5s"],
    );
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "no_fix_found");
    let toggles = doc["toggles"].as_array().unwrap().len() as u64;
    let total = doc["runs_total"].as_u64().unwrap();
    assert!(total <= toggles + 2, "{total} runs for {toggles} toggles");
    let runs = runs(&doc);
    let last = runs.last().unwrap();
    assert_eq!(last.1, "quick", "{runs:?}");
    assert_eq!(doc["quick"]["confirmed_by_run"], last.0);
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.contains(&format!(
            "confirmed on your workflow (run {}, which failed before sampling: the same run in full)",
            last.0
        )),
        "{statement}"
    );
}

#[test]
fn a_failure_on_record_starts_from_the_shortened_check() {
    // The failure as the user met it: a run of the workflow on this install, its log kept.
    let install = FakeComfy::new("0.38.1", dynamic_vram_oom(json!({"at_step": 1})));
    let (code, _, run_tmp) = support::on_install("run", &install, TWENTY, "run", &[]);
    assert_eq!(code, 1);
    let log = run_tmp.path().join("run/comfyui.log");
    assert!(log.is_file());
    let log_arg = log.to_str().unwrap();
    let (code, doc, tmp) = bisect(&install, &["--failed-log", log_arg]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    let runs = runs(&doc);
    // Run 1 is the shortened copy, which fails as the log says; the only full run is the
    // confirmation.
    assert_eq!(runs[0], (1, "quick".into(), "oom".into()));
    assert_eq!(runs.iter().filter(|r| r.1 == "full").count(), 1, "{runs:?}");
    let last = runs.last().unwrap();
    assert_eq!((last.1.as_str(), last.2.as_str()), ("full", "pass"));
    assert_eq!(doc["quick"]["reproduced_by_run"], 1);
    assert_eq!(doc["quick"]["reference_run"], Value::Null);
    let on_record = &doc["verdict"]["failure_on_record"];
    assert_eq!(on_record["outcome"], "oom");
    assert_eq!(on_record["file"], log_arg);
    let statement = doc["verdict"]["statement"].as_str().unwrap();
    assert!(
        statement.starts_with(&format!(
            "Failed with your flags (CUDA out of memory) in the log you gave ({log_arg}, the prompt at line "
        )),
        "{statement}"
    );
    assert!(
        statement.contains("which fail as your workflow did in the log you gave (run 1)"),
        "{statement}"
    );
    // One full run fewer than without the log, for no more runs.
    let (_, without, _tmp2) = bisect(&install, &[]);
    let full = |r: &[(u64, String, String)]| r.iter().filter(|r| r.1 == "full").count();
    assert_eq!(full(&self::runs(&without)), 2, "{without:#}");
    assert!(
        doc["runs_total"].as_u64().unwrap() <= without["runs_total"].as_u64().unwrap(),
        "{runs:?}"
    );
    // Resumed, the finished session says the same (the record is the session's).
    let session = tmp.path().join("session");
    let (code, again, _) = support::json(&["bisect", "--resume", session.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert_eq!(again["verdict"], doc["verdict"]);
}

#[test]
fn a_failed_log_that_shows_no_failure_is_said_and_a_missing_one_refused() {
    let install = FakeComfy::new("0.38.1", dynamic_vram_oom(json!({"at_step": 1})));
    let passed = support::fixture("logs/format-level-ansi.log");
    let tmp = tempfile::tempdir().unwrap();
    let wf = support::fixture(TWENTY);
    // A bisect of the stand-in given `log`, its session in `<temp>/OUT`.
    let with_log = |out: &str, log: &std::path::Path| {
        support::json(&[
            "bisect",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            &support::out_dir(tmp.path(), out),
            "--first-fix",
            "--failed-log",
            log.to_str().unwrap(),
        ])
    };
    let (code, doc, output) = with_log("s", &passed);
    assert_eq!(code, 0, "{doc:#}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("it shows no failed prompt")
            && stderr.contains("the search starts from a full run of your flags"),
        "{stderr}"
    );
    assert_eq!(runs(&doc)[0], (1, "full".into(), "oom".into()));
    assert!(doc["verdict"].get("failure_on_record").is_none());
    // A file that is no ComfyUI log: said, and the search starts as without it.
    let not_a_log = tmp.path().join("notes.txt");
    std::fs::write(&not_a_log, "remember to buy milk\n").unwrap();
    let (code, doc, output) = with_log("s3", &not_a_log);
    assert_eq!(code, 0, "{doc:#}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("notes.txt does not look like a ComfyUI log")
            && stderr.contains("the search starts from a full run of your flags"),
        "{stderr}"
    );
    assert_eq!(runs(&doc)[0], (1, "full".into(), "oom".into()));
    // A file that is not there: one line, exit 2, no session folder.
    let out2 = support::out_dir(tmp.path(), "s2");
    let out = support::vrambisect()
        .args([
            "bisect",
            "--comfyui",
            install.path_str(),
            "--workflow",
            wf.to_str().unwrap(),
            "--output",
            &out2,
            "--failed-log",
            "no-such.log",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr
            .trim()
            .lines()
            .last()
            .unwrap()
            .matches("no-such.log")
            .count(),
        1,
        "{stderr}"
    );
    assert!(!std::path::Path::new(&out2).exists());
    // Standard input is not read for it: refused before anything runs.
    let (code, _, output) = with_log("s2", std::path::Path::new("-"));
    assert_eq!(code, 2);
    assert!(
        String::from_utf8_lossy(&output.stderr)
            .contains("--failed-log takes a file, not standard input"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!std::path::Path::new(&out2).exists());
    install.assert_nothing_left();
}

#[test]
fn no_fix_after_sampling_runs_every_change_together_in_full_once() {
    // An OOM at VAE decode that nothing fixes: the run of every change together would be
    // run again in full to confirm NO FIX FOUND, so it is made in full at once.
    let install = FakeComfy::new(
        "0.38.1",
        json!({"timing": {"step_time": 0.1}, "rules": [{"effect": "oom", "node": "VAEDecode"}]}),
    );
    let toggles = [
        "--toggle",
        "--disable-pinned-memory",
        "--toggle",
        "--disable-smart-memory",
        "--toggle",
        "--disable-mmap",
    ];
    let (code, doc, _tmp) = support::on_install("bisect", &install, TWENTY, "session", &toggles);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["verdict"]["kind"], "no_fix_found");
    let runs = runs(&doc);
    let everything = doc["configs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["changes"].as_array().unwrap().len() == 3)
        .expect("every change together ran");
    let each = everything["each_run"].as_array().unwrap();
    assert_eq!(each.len(), 1, "{runs:?}");
    assert_eq!(each[0]["kind"], "full");
    // The toggles plus two: the user's flags and every change together.
    assert_eq!(runs.len(), 5, "{runs:?}");
}
