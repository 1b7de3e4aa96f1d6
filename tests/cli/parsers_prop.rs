//! Property tests: every parser of outside input takes arbitrary input without panicking, and
//! the ones with a round trip keep it. (Outside input: workflows, launchers, `--help` texts,
//! log lines, websocket frames, `/history` bodies, the resume journal, logs for logscan.)

use proptest::prelude::*;
use vrambisect::bisect::session::read_journal;
use vrambisect::classify::{self, ExitStatus, PromptEnd, PromptObservation, normalize::normalize};
use vrambisect::comfy::{end_from_history, events::decode};
use vrambisect::flags::{argparse, help, profile};
use vrambisect::launcher::{parse_bat, parse_sh};
use vrambisect::startup::StartupFacts;
use vrambisect::workflow::Workflow;

/// Text that looks a little like what each parser expects: ComfyUI's own words mixed with
/// noise, control characters, quotes and separators.
fn texty() -> impl Strategy<Value = String> {
    let words = prop::sample::select(vec![
        "--highvram",
        "--lowvram",
        "--reserve-vram",
        "=",
        "2",
        "main.py",
        "python",
        "%*",
        "\"$@\"",
        "^",
        "\r\n",
        "\n",
        "\r",
        "\x1b[32m",
        "[INFO]",
        " ",
        "usage:",
        "[--a | --b]",
        "{",
        "}",
        "[",
        "]",
        "\"",
        "'",
        "\\",
        "set ",
        "export ",
        "REM ",
        "::",
        "class_type",
        "inputs",
        "nodes",
        "links",
        "Requested to load SD1",
        "got prompt",
        "Prompt executed in 1.00 seconds",
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
        "aimdo: x.c:1:ERROR:",
        "ü",
        "\u{0}",
        "💥",
        "To see the GUI go to: http://127.0.0.1:1",
        "ComfyUI version: 0.38.1",
        "Total VRAM 1 MB, total RAM 2 MB",
    ]);
    prop::collection::vec(
        prop_oneof![words.prop_map(str::to_string), any::<String>()],
        0..40,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn workflow_loader_never_panics(text in texty()) {
        let _ = Workflow::parse(&text);
    }

    #[test]
    fn workflow_json_values_never_panic(v in arb_json(3)) {
        if let Ok(w) = Workflow::parse(&v.to_string()) {
            // Whatever loads can be sent for any iteration.
            let _ = w.for_iteration(1);
            let _ = w.for_iteration(3);
        }
    }

    #[test]
    fn launchers_never_panic(text in texty(), extra in prop::collection::vec("[-a-z=0-9]{0,12}", 0..3)) {
        let _ = parse_bat(&text, &extra);
        let _ = parse_sh(&text, &extra);
    }

    #[test]
    fn help_parser_never_panics(text in texty()) {
        if let Ok(set) = help::parse(&text) {
            let _ = argparse::parse(&set, &["--highvram", "--x=1", "-", "--"], None);
        }
    }

    #[test]
    fn argparse_emulation_never_panics(args in prop::collection::vec(texty(), 0..8)) {
        let set = profile::builtin(None).flags;
        let parsed = argparse::parse(&set, &args, None);
        // ComfyUI either starts or prints exactly one error.
        prop_assert_eq!(parsed.accepted(), parsed.error.is_none());
    }

    #[test]
    fn log_lines_never_panic(line in texty()) {
        let n = normalize(&line);
        let mut facts = StartupFacts::default();
        facts.observe(&n.text);
        facts.finish();
        let lines = vec![n.text.clone(), line.clone()];
        let _ = classify::classify_startup(ExitStatus { code: Some(1), signal: None }, &lines);
        let obs = PromptObservation { end: Some(PromptEnd::Success), log: lines, ..Default::default() };
        let _ = classify::classify_prompt(&obs);
    }

    #[test]
    fn normalising_again_only_strips_a_prefix(line in texty()) {
        let once = normalize(&line).text;
        // A second pass may only strip what the first uncovered (nested prefixes, a level
        // tag behind a timestamp): what is left is the end of what the first pass gave.
        let twice = normalize(&once).text;
        prop_assert!(
            once.ends_with(twice.as_str()),
            "{line:?} -> {once:?} -> {twice:?}"
        );
    }

    #[test]
    fn websocket_frames_never_panic(text in texty(), v in arb_json(3)) {
        let _ = decode(&text);
        let _ = decode(&v.to_string());
        let frame = serde_json::json!({"type": "execution_error", "data": v});
        let _ = decode(&frame.to_string());
    }

    #[test]
    fn history_bodies_never_panic(v in arb_json(4), id in "[a-z0-9-]{0,8}") {
        let _ = end_from_history(&v, &id);
        let wrapped = serde_json::json!({ id.clone(): {"status": v} });
        let _ = end_from_history(&wrapped, &id);
    }

    #[test]
    fn journal_reader_never_panics(text in texty()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        std::fs::write(&path, text).unwrap();
        let _ = read_journal(&path);
    }

    #[test]
    fn logscan_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..2048), text in texty()) {
        let _ = vrambisect::logscan::scan_bytes("fuzz.log", &bytes, vrambisect::logscan::reader::Mode::Prefilter);
        let a = vrambisect::logscan::scan_bytes("fuzz.log", text.as_bytes(), vrambisect::logscan::reader::Mode::Prefilter);
        let b = vrambisect::logscan::scan_bytes("fuzz.log", text.as_bytes(), vrambisect::logscan::reader::Mode::EveryLine);
        // The fast path and looking at every line agree.
        prop_assert_eq!(a.map(|r| serde_json::to_value(r).unwrap()).ok(), b.map(|r| serde_json::to_value(r).unwrap()).ok());
    }
}

/// Arbitrary JSON, a few levels deep, with ComfyUI's key names among the keys.
fn arb_json(depth: u32) -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-z_]{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(depth, 32, 6, |inner| {
        let key = prop::sample::select(vec![
            "class_type",
            "inputs",
            "seed",
            "status",
            "messages",
            "status_str",
            "nodes",
            "links",
            "prompt",
            "type",
            "data",
            "node",
            "prompt_id",
            "exception_type",
            "exception_message",
            "1",
            "2",
        ]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(key.prop_map(str::to_string), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}
