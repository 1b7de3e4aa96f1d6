//! The cheapest fix that passes, not the first one met: against the stand-in, whose fixes
//! pass at different speeds (a rule's `slow` spreads seconds over the sampling steps).

use crate::support;
use serde_json::{Value, json};
use support::comfy::FakeComfy;

const WORKFLOW: &str = "workflows/sd15_txt2img.json";

fn bisect(install: &FakeComfy, extra: &[&str]) -> (i32, Value, tempfile::TempDir) {
    let mut args = vec!["--stall-timeout", "10s", "--quick", "off"];
    args.extend_from_slice(extra);
    support::on_install("bisect", install, WORKFLOW, "session", &args)
}

/// An OOM under Dynamic VRAM that `fixes` make pass; with Dynamic VRAM off it passes
/// `slow_off` seconds slower over the sampler's steps.
fn scenario(fixes: Value, slow_off: f64) -> Value {
    let mut rules: Vec<Value> = fixes.as_array().unwrap().clone();
    rules.push(
        json!({"when": {"state": {"dynamic_vram": true}}, "effect": "oom", "node": "KSampler"}),
    );
    rules.push(
        json!({"when": {"state": {"dynamic_vram": false}}, "effect": "pass", "slow": slow_off}),
    );
    json!({"timing": {"step_time": 0.05}, "rules": rules})
}

fn alternatives(doc: &Value) -> Vec<String> {
    doc["verdict"]["alternatives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            a["fixing_flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// The configurations that ran with `flag` among their flags, each as its flags.
fn configs_with(doc: &Value, flag: &str) -> Vec<Vec<String>> {
    doc["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c["flags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|flags| flags.iter().any(|f| f == flag))
        .collect()
}

fn statement(doc: &Value) -> &str {
    doc["verdict"]["statement"].as_str().unwrap()
}

#[test]
fn a_headroom_that_keeps_dynamic_vram_beats_turning_it_off() {
    let install = FakeComfy::new(
        "0.38.1",
        scenario(
            json!([{"when": {"flags": {"--vram-headroom": {">=": 1.5}}}, "effect": "pass"}]),
            1.0,
        ),
    );
    let (code, doc, _tmp) = bisect(&install, &[]);
    assert_eq!(code, 0, "{doc:#}");
    // The least value that passes, to 0.25 GB.
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--vram-headroom 1.5"])
    );
    assert_eq!(doc["verdict"]["flags"], json!(["--vram-headroom", "1.5"]));
    let fix = &doc["verdict"]["fix"];
    assert_eq!(fix["keeps_dynamic_vram"], true, "{fix:#}");
    assert_eq!(fix["confirmed_full"], true);
    assert!(fix["cost"]["seconds_per_step"].as_f64().unwrap() > 0.0);
    // The changes that keep Dynamic VRAM on passed together before anything else, so
    // turning it off (which could not be recommended over them) never ran.
    assert!(alternatives(&doc).is_empty(), "{:#}", doc["verdict"]);
    assert_eq!(
        configs_with(&doc, "--disable-dynamic-vram"),
        Vec::<Vec<String>>::new()
    );
    let cheaper = &doc["verdict"]["cheaper_search"];
    assert!(
        cheaper["runs"].as_u64().unwrap() <= cheaper["budget"].as_u64().unwrap(),
        "{cheaper:#}"
    );
}

#[test]
fn first_fix_stops_at_the_first_fix_as_before() {
    let install = FakeComfy::new(
        "0.38.1",
        scenario(
            json!([{"when": {"flags": {"--vram-headroom": {">=": 1.5}}}, "effect": "pass"}]),
            1.0,
        ),
    );
    let (code, doc, _tmp) = bisect(&install, &["--first-fix"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["verdict"]["cheaper_search"]["first_fix"], true);
    assert_eq!(doc["verdict"]["cheaper_search"]["runs"], 0);
    let (_, default, _tmp2) = bisect(&install, &[]);
    assert!(
        doc["runs_total"].as_u64().unwrap() < default["runs_total"].as_u64().unwrap(),
        "{} against {}",
        doc["runs_total"],
        default["runs_total"]
    );
}

#[test]
fn of_two_single_fixes_that_keep_dynamic_vram_the_faster_wins() {
    // Both keep Dynamic VRAM on: --disable-pinned-memory passes 3 s slower over the steps,
    // --disable-async-offload at full speed.
    let install = FakeComfy::new(
        "0.38.1",
        scenario(
            json!([
                {"when": {"flags": {"--disable-pinned-memory": true}}, "effect": "pass", "slow": 3.0},
                {"when": {"flags": {"--disable-async-offload": true}}, "effect": "pass"}
            ]),
            1.0,
        ),
    );
    let (code, doc, _tmp) = bisect(
        &install,
        &[
            "--toggle",
            "--disable-pinned-memory",
            "--toggle",
            "--disable-async-offload",
            "--toggle",
            "--disable-dynamic-vram",
        ],
    );
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-async-offload"]),
        "{:#}",
        doc["verdict"]
    );
    let alts = alternatives(&doc);
    assert!(
        alts.contains(&"--disable-pinned-memory".to_string()),
        "{alts:?}"
    );
    let pinned = doc["verdict"]["alternatives"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["fixing_flags"] == json!(["--disable-pinned-memory"]))
        .unwrap();
    assert!(
        pinned["compared"]
            .as_str()
            .unwrap()
            .contains("slower per step")
    );
    assert!(
        statement(&doc).contains("--disable-pinned-memory also passes, "),
        "{}",
        statement(&doc)
    );
}

#[test]
fn only_turning_dynamic_vram_off_fixes_it_and_the_numbers_that_did_not_help_are_said() {
    let install = FakeComfy::new("0.38.1", scenario(json!([]), 0.0));
    let (code, doc, _tmp) = bisect(&install, &[]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--disable-dynamic-vram"])
    );
    let not_helped = doc["verdict"]["not_helped"].as_array().unwrap();
    assert_eq!(not_helped.len(), 1, "{not_helped:?}");
    let said = not_helped[0].as_str().unwrap();
    assert!(
        said.starts_with("--vram-headroom up to ") && said.contains(" GB did not help"),
        "{said}"
    );
    assert!(
        statement(&doc).contains("did not help"),
        "{}",
        statement(&doc)
    );
    let cheaper = &doc["verdict"]["cheaper_search"];
    assert!(cheaper["runs"].as_u64().unwrap() <= cheaper["budget"].as_u64().unwrap());
    // No value search ran once the most tried had failed.
    let headroom_runs = configs_with(&doc, "--vram-headroom").len();
    assert!(
        headroom_runs <= 2,
        "{headroom_runs} configurations with a headroom ran"
    );
}

#[test]
fn a_value_toggled_without_one_is_searched_to_the_least_that_passes() {
    let install = FakeComfy::new(
        "0.38.1",
        scenario(
            json!([{"when": {"flags": {"--reserve-vram": {">=": 2.75}}}, "effect": "pass"}]),
            1.0,
        ),
    );
    let (code, doc, _tmp) = bisect(&install, &["--toggle", "--reserve-vram"]);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(
        doc["verdict"]["fixing_flags"],
        json!(["--reserve-vram 2.75"])
    );
    // Every value tried is one this ComfyUI takes: a multiple of 0.25 GB, none refused.
    for c in doc["configs"].as_array().unwrap() {
        assert_ne!(c["outcome"], "flag_rejected", "{c:#}");
        let flags: Vec<&str> = c["flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        if let Some(i) = flags.iter().position(|f| *f == "--reserve-vram") {
            let v: f64 = flags[i + 1].parse().unwrap();
            assert!(v > 0.0 && (v * 4.0).fract() == 0.0, "{v}");
        }
    }
}

#[test]
fn no_flag_fixes_it_and_no_value_search_runs_away() {
    let install = FakeComfy::new(
        "0.38.1",
        json!({"rules": [{"effect": "oom", "node": "KSampler"}]}),
    );
    let (code, doc, _tmp) = bisect(&install, &[]);
    assert_eq!(doc["verdict"]["kind"], "no_fix_found", "{doc:#}");
    assert_eq!(code, 1);
    // The headroom failed at its most: no value of it ran below that.
    let headroom_runs = configs_with(&doc, "--vram-headroom")
        .iter()
        .filter(|flags| flags.len() == 2)
        .count();
    assert!(
        headroom_runs <= 1,
        "{headroom_runs} single headroom values ran"
    );
    assert!(
        doc["verdict"]["cheaper_search"].is_null(),
        "{:#}",
        doc["verdict"]
    );
}
