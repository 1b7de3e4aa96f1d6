//! `vrambisect logscan FILE|-`: what a ComfyUI log says, without rerunning anything.
//!
//! Reads a console log or `user/comfyui.log` in any of the formats ComfyUI and its launchers
//! write (plain; `[LEVEL]` + ANSI; ComfyUI-Manager timestamps; CRLF; tqdm's `\r` bars; UTF-16
//! from PowerShell; several prompts and several server starts in one file), in one pass and in
//! bounded memory, and says: the startup facts of the last server start, each prompt's outcome
//! with its evidence, and the known issues it matches, each with the `vrambisect bisect`
//! command that tests its fixes on this install. The classification is `run`'s own
//! (`classify::classify_prompt` / `classify_startup`, signatures from the catalogue).
//!
//! The parts: [`input`] opens and checks the file, [`reader`] streams it through the
//! [`prefilter`] into the [`state`] machine (which knows the structural [`lines`]), and
//! [`report`] puts the answer together, with [`advice`] for the bisect commands and
//! [`render`] for people.

pub(crate) mod advice;
pub(crate) mod input;
pub(crate) mod joins;
pub(crate) mod lines;
pub mod prefilter;
pub mod reader;
pub(crate) mod relay;
pub(crate) mod render;
pub(crate) mod report;
pub(crate) mod state;

#[cfg(test)]
mod corpus_tests;

pub use reader::Mode;
pub use report::LogReport;

use crate::error::{Error, Result};
use std::io::{IsTerminal, Read, Write};

/// Scans an opened log.
pub fn scan(input: input::Input, mode: Mode) -> Result<LogReport> {
    let input::Input {
        name,
        mut reader,
        encoding,
        looks_like,
        mentions_comfy,
    } = input;
    let shown = if name == "-" {
        "standard input".to_string()
    } else {
        name.clone()
    };
    // A log relayed by something else: its per-line prefix, found from its head, goes first.
    let mut head = Vec::with_capacity(relay::HEAD);
    (&mut reader)
        .take(relay::HEAD as u64)
        .read_to_end(&mut head)
        .map_err(|e| Error::usage(format!("cannot read {shown}: {e}")))?;
    let prefix = relay::detect(&head);
    // A log printed by a command typed at a shell (`tail -n 50 comfyui.log`) says so at its top.
    let viewed_by_a_command = head
        .split(|b| *b == b'\n')
        .take(20)
        .any(|l| lines::is_view_command(&String::from_utf8_lossy(l)));
    let joined = std::io::Cursor::new(head).chain(reader);
    let mut reader: Box<dyn Read> = if prefix.is_empty() {
        Box::new(joined)
    } else {
        Box::new(relay::Stripper::new(joined, prefix))
    };
    let mut state = state::State::default();
    state.viewed_by_a_command = viewed_by_a_command;
    let (stats, tail) = reader::scan(&mut reader, prefilter::prefilter(), mode, &mut state)
        .map_err(|e| Error::usage(format!("cannot read {shown}: {e}")))?;
    let scanned = state.finish(&tail, stats.lines);
    // Refuse only text with nothing of ComfyUI or PyTorch in it: a fragment is read for what
    // it shows, and the report says what it could not see.
    if scanned.recognized == 0 && !mentions_comfy {
        // What a shell prints where something killed the program it ran (`Killed`, `zsh:
        // killed`, `exited with code 137`): the catalogue's `killed`, and nothing of ComfyUI.
        let killed = scanned.tallies.iter().any(|t| t.signature.id == "killed");
        let hint = match looks_like {
            _ if killed => "a shell prints 'Killed' when something killed the program it ran; for ComfyUI on Linux that is most often the kernel's OOM killer, once RAM and swap ran out: look for 'Out of memory: Killed process' in dmesg or journalctl -k, and give the whole console output to see more".to_string(),
            Some(kind) => format!(
                "it looks like {kind}; give ComfyUI's console output saved to a file, or its user/comfyui.log"
            ),
            None => {
                "give ComfyUI's console output saved to a file, or its user/comfyui.log".to_string()
            }
        };
        let lines = match stats.lines {
            1 => "its only line is not".to_string(),
            n => format!("none of its {n} lines is"),
        };
        return Err(Error::usage(format!(
            "{shown} does not look like a ComfyUI log: {lines} a ComfyUI startup, prompt or error line"
        ))
        .hint(hint));
    }
    Ok(LogReport::build(
        name,
        encoding,
        stats.bytes,
        stats.lines,
        scanned,
    ))
}

/// Scans a log held in memory (tests, and callers that already have the text).
pub fn scan_bytes(name: &str, bytes: &[u8], mode: Mode) -> Result<LogReport> {
    let input = input::sniff(
        name.to_string(),
        Box::new(std::io::Cursor::new(bytes.to_vec())),
    )?;
    scan(input, mode)
}

/// The command: reads `FILE` or `-` (saying on `err` that it waits when standard input is a
/// terminal).
pub fn command(file: &std::path::Path, err: &mut dyn Write) -> Result<LogReport> {
    if file == std::path::Path::new("-") && std::io::stdin().is_terminal() {
        let _ = writeln!(
            err,
            "reading a ComfyUI log from standard input (paste it, then Ctrl-D; Ctrl-Z Enter on Windows)"
        );
    }
    scan(input::open(file)?, Mode::Prefilter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use std::path::PathBuf;

    fn fixture(name: &str) -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/logs")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// `fixtures/logs/expected.json`: file → outcome, known issue ids, exit code.
    fn expected() -> Vec<(String, Option<String>, Vec<String>, i32)> {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../fixtures/logs/expected.json")).unwrap();
        doc.as_object()
            .unwrap()
            .iter()
            .map(|(name, e)| {
                let issues = e["known_issues"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                (
                    name.clone(),
                    e["outcome"].as_str().map(String::from),
                    issues,
                    e["exit"].as_i64().unwrap() as i32,
                )
            })
            .collect()
    }

    fn ids(r: &LogReport) -> Vec<String> {
        let mut v: Vec<String> = r.known_issues.iter().map(|k| k.id.to_string()).collect();
        v.sort();
        v
    }

    fn json(r: &LogReport) -> String {
        serde_json::to_string(r).unwrap()
    }

    #[test]
    fn every_fixture_classifies_as_expected_and_the_prefilter_misses_nothing() {
        for (name, outcome, issues, code) in expected() {
            let bytes = fixture(&name);
            let fast = scan_bytes(&name, &bytes, Mode::Prefilter);
            let slow = scan_bytes(&name, &bytes, Mode::EveryLine);
            match (fast, slow) {
                (Ok(fast), Ok(slow)) => {
                    assert_eq!(
                        fast.outcome.map(|o| o.as_str().to_string()),
                        outcome,
                        "{name}: {}",
                        fast.summary
                    );
                    assert_eq!(ids(&fast), issues, "{name}");
                    assert_eq!(fast.exit_code(), code, "{name}");
                    assert_eq!(json(&fast), json(&slow), "{name}: pre-filter vs every line");
                }
                (Err(e), Err(_)) => assert_eq!(e.exit_code(), code, "{name}: {e}"),
                (a, b) => panic!("{name}: {:?} vs {:?}", a.err(), b.err()),
            }
        }
    }

    #[test]
    fn a_failure_in_the_middle_of_a_progress_bar_keeps_its_step() {
        // (Skipped in the JSON: for the bisect's failure on record.)
        let last_failed = |name: &str| {
            let bytes = fixture(name);
            let fast = scan_bytes(name, &bytes, Mode::Prefilter).unwrap();
            let slow = scan_bytes(name, &bytes, Mode::EveryLine).unwrap();
            let step = |r: &LogReport| {
                r.prompts
                    .iter()
                    .rev()
                    .find(|p| p.outcome.is_some_and(|o| o != Outcome::Pass))
                    .map(|p| p.failed_step)
            };
            assert_eq!(step(&fast), step(&slow), "{name}");
            step(&fast).unwrap()
        };
        assert_eq!(last_failed("sig-cuda-oom-native.log"), Some(7));
        assert_eq!(last_failed("sig-cuda-oom-async.log"), Some(5));
        assert_eq!(last_failed("format-tqdm-progress.log"), Some(11));
        assert_eq!(
            lines::bar_count(" 60%|██████    | 12/20 [00:07<00:05,  1.50it/s]"),
            Some((12, 20))
        );
        assert_eq!(lines::bar_count("got prompt"), None);
    }

    #[test]
    fn every_signature_has_a_fixture() {
        let real: serde_json::Value =
            serde_json::from_str(include_str!("../../fixtures/logs/real/expected.json")).unwrap();
        let covered: Vec<String> = expected()
            .into_iter()
            .flat_map(|e| e.2)
            .chain(real.as_object().unwrap().values().flat_map(|e| {
                e["known_issues_include"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect::<Vec<_>>()
            }))
            .collect();
        for sig in crate::classify::catalogue::SIGNATURES {
            assert!(
                covered.iter().any(|c| c == sig.id),
                "no fixture in fixtures/logs shows {}",
                sig.id
            );
        }
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/logs");
        let listed: Vec<String> = expected().into_iter().map(|e| e.0).collect();
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            // `real/` is the corpus of real pastes, with its own expectations.
            if entry.path().is_file() && name != "expected.json" && name != "README.md" {
                assert!(listed.contains(&name), "{name} is not in expected.json");
            }
        }
    }

    #[test]
    fn line_endings_encodings_and_read_sizes_do_not_change_the_answer() {
        for (name, _, _, code) in expected() {
            if code == 2 {
                continue;
            }
            let bytes = fixture(&name);
            let base = scan_bytes(&name, &bytes, Mode::Prefilter).unwrap();
            let text = String::from_utf8(bytes.clone()).unwrap();
            let lf = text.replace("\r\n", "\n");
            let crlf = lf.replace('\n', "\r\n");
            let mut utf16 = vec![0xFF, 0xFE];
            utf16.extend(lf.encode_utf16().flat_map(|u| u.to_le_bytes()));
            let mut bom = vec![0xEF, 0xBB, 0xBF];
            bom.extend_from_slice(lf.as_bytes());
            for (how, variant) in [
                ("lf", lf.clone().into_bytes()),
                ("crlf", crlf.into_bytes()),
                ("utf-16le", utf16),
                ("bom", bom),
            ] {
                let r = scan_bytes(&name, &variant, Mode::Prefilter).unwrap();
                assert_eq!(r.outcome, base.outcome, "{name} as {how}");
                assert_eq!(ids(&r), ids(&base), "{name} as {how}");
                assert_eq!(r.prompts_total, base.prompts_total, "{name} as {how}");
                assert_eq!(r.lines, base.lines, "{name} as {how}");
            }
            // A pipe that hands out a few bytes at a time.
            struct Drip(std::io::Cursor<Vec<u8>>);
            impl std::io::Read for Drip {
                fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                    let n = buf.len().min(7);
                    self.0.read(&mut buf[..n])
                }
            }
            let input = input::sniff(
                name.clone(),
                Box::new(Drip(std::io::Cursor::new(bytes.clone()))),
            )
            .unwrap();
            let r = scan(input, Mode::Prefilter).unwrap();
            assert_eq!(json(&r), json(&base), "{name} read 7 bytes at a time");
        }
    }

    #[test]
    fn a_log_longer_than_the_read_buffer() {
        // Many starts and prompts across several 1 MiB buffers: same answer both ways, and
        // the counts add up.
        let one = fixture("format-multi-start.log");
        let copies = 300;
        let big: Vec<u8> = one
            .iter()
            .copied()
            .cycle()
            .take(one.len() * copies)
            .collect();
        assert!(big.len() > 2 << 20);
        let fast = scan_bytes("big.log", &big, Mode::Prefilter).unwrap();
        let slow = scan_bytes("big.log", &big, Mode::EveryLine).unwrap();
        assert_eq!(json(&fast), json(&slow));
        assert_eq!(fast.starts_total, 2 * copies as u64);
        assert_eq!(fast.prompts_total, 3 * copies as u64);
        assert_eq!(fast.prompt_counts["oom"], copies as u64);
        assert_eq!(fast.outcome, Some(Outcome::Pass));
        assert_eq!(fast.starts.len(), 100, "the last starts are kept");
    }

    #[test]
    fn many_prompts_are_summarised() {
        // Bounded: the first failures and the last prompts are kept in full, the rest counted.
        let mut log = String::from(
            "Total VRAM 24106 MB, total RAM 24106 MB
To see the GUI go to: http://127.0.0.1:8188
",
        );
        for i in 0..3000 {
            log.push_str(
                "got prompt
",
            );
            if i % 1000 == 7 {
                log.push_str("!!! Exception during processing !!! CUDA out of memory. Tried to allocate 1.00 GiB.
");
            }
            log.push_str(
                "Prompt executed in 0.01 seconds
",
            );
        }
        let r = scan_bytes("many.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.prompts_total, 3000);
        assert_eq!(r.prompt_counts["pass"], 2997);
        assert_eq!(r.prompt_counts["oom"], 3);
        assert_eq!(r.prompts.len(), 503);
        assert_eq!(r.prompts_omitted, 2497);
        let kept_oom: Vec<u64> = r
            .prompts
            .iter()
            .filter(|p| p.outcome == Some(Outcome::Oom))
            .map(|p| p.index)
            .collect();
        assert_eq!(kept_oom, [8, 1008, 2008]);
        assert_eq!(r.prompts.last().unwrap().index, 3000);
    }

    #[test]
    fn odd_bytes_and_interruptions() {
        // Latin-1 in a Windows path, a NUL-free control character, no final newline.
        let log = b"Total VRAM 8151 MB, total RAM 16088 MB\nComfyUI version: 0.38.1\nTo see the GUI go to: http://127.0.0.1:8188\ngot prompt\n  File \"C:\\Users\\J\xf6rg\\ComfyUI\\nodes.py\", line 1\x07\n!!! Exception during processing !!! CUDA out of memory. Tried to allocate 2.00 GiB\nPrompt executed in 1.00 seconds";
        let r = scan_bytes("odd.log", log, Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Oom));
        assert_eq!(r.lines, 7);

        // Ctrl-C during startup, then a clean start: the first is not a failure.
        let log = "Total VRAM 8151 MB, total RAM 16088 MB\n\nStopped server\nTotal VRAM 8151 MB, total RAM 16088 MB\nComfyUI version: 0.38.1\nTo see the GUI go to: http://127.0.0.1:8188\n";
        let r = scan_bytes("ctrl-c.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.starts.len(), 2);
        assert_eq!(r.starts[0].outcome, None);
        assert_eq!(r.exit_code(), 0);
        assert_eq!(r.outcome, None);
        assert_eq!(r.summary, "ComfyUI started; no prompt ran in this log.");
    }

    #[test]
    fn only_a_stamped_stop_after_minutes_makes_a_hang() {
        // Closed while loading, and opened again hours later: the restart's time says nothing
        // about how long it sat there.
        let log = "2026-09-14T21:02:00.0 - To see the GUI go to: http://127.0.0.1:8188\n2026-09-14T21:02:01.0 - got prompt\n2026-09-14T21:02:02.0 - Requested to load Krea2\n2026-09-15T08:00:00.0 - Total VRAM 8151 MB, total RAM 16088 MB\n2026-09-15T08:00:01.0 - To see the GUI go to: http://127.0.0.1:8188\n";
        let r = scan_bytes("reopened.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_ne!(
            r.prompts[0].outcome,
            Some(Outcome::Hang),
            "{:?}",
            r.prompts[0]
        );
        // An idle kill (`docker compose stop`) is no prompt's death.
        let log = "comfyui  | To see the GUI go to: http://127.0.0.1:8188\ncomfyui  | got prompt\ncomfyui  | Prompt executed in 2.00 seconds\ncomfyui exited with code 137\n";
        let r = scan_bytes("compose.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Pass));
        assert_eq!(r.exit_code(), 0);
        // comfy-aimdo logs an error and carries on: the prompt that then finishes is not a
        // host-memory failure.
        let log = "To see the GUI go to: http://127.0.0.1:8188\ngot prompt\naimdo: src/hostbuf.c:120:ERROR:hostbuf_grow: could not grow\nPrompt executed in 2.00 seconds\n";
        let r = scan_bytes("aimdo.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_ne!(r.outcome, Some(Outcome::HostOom));
    }

    #[test]
    fn a_refused_post_in_the_real_server_log_is_no_prompt_error() {
        // Recorded from the real server: a 400 (`got prompt` alone) and a 500 whose traceback
        // runs through `execution.py`'s validation, not a node.
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/captures/logs/server-run2.log");
        let r = scan_bytes(
            "server-run2.log",
            &std::fs::read(path).unwrap(),
            Mode::Prefilter,
        )
        .unwrap();
        assert!(
            r.prompts
                .iter()
                .all(|p| p.outcome == Some(Outcome::InvalidWorkflow)),
            "{:?}",
            r.prompts
        );
    }

    #[test]
    fn what_only_a_running_prompt_or_a_start_prints() {
        let read = |log: &str| scan_bytes("part.log", log.as_bytes(), Mode::Prefilter).unwrap();
        // A sampler's bar after the last prompt ended: the next prompt at work, cut off.
        let r = read(
            "got prompt\nPrompt executed in 9.00 seconds\n 85%|#####  | 17/20 [01:21<00:14,  4.92s/it]\n",
        );
        assert_eq!(r.outcome, None);
        assert!(r.ends_mid_prompt);
        assert_eq!(r.prompts_total, 2);
        // A traceback through the executor with no `!!!` line: the prompt's error.
        let r = read(
            "Traceback (most recent call last):\n  File \"C:\\ComfyUI\\execution.py\", line 151, in recursive_execute\n    output_data = get_output_data(obj)\n  File \"C:\\ComfyUI\\custom_nodes\\x\\node.py\", line 9, in run\n    y = d['offload']\nKeyError: 'offload'\n",
        );
        assert_eq!(r.outcome, Some(Outcome::NodeError));
        assert!(!r.ends_mid_prompt);
        // A stack's exception line right above `Prompt executed` (the `!!!` line above the
        // excerpt): the prompt failed. A node that printed a traceback and went on did not.
        let r = read(
            "  File \"C:\\venv\\torch\\nn\\modules\\linear.py\", line 134, in forward\n    return F.linear(input, self.weight)\nRuntimeError: CUDA error: HIPBLAS_STATUS_INVALID_VALUE\nPrompt executed in 93.84 seconds\n",
        );
        assert_eq!(r.outcome, Some(Outcome::NodeError));
        let r = read(
            "got prompt\nTraceback (most recent call last):\n  File \"C:\\n\\x.py\", line 1, in f\nValueError: retrying without it\n100%|#####| 20/20 [00:05<00:00,  3.71it/s]\nPrompt executed in 9.00 seconds\n",
        );
        assert_eq!(r.outcome, Some(Outcome::Pass));
        // With its `got prompt` in the log, a traceback with no `!!!` line is not its error
        // (asyncio's connection-reset noise on Windows).
        let r = read(
            "got prompt\nException in callback _ProactorBasePipeTransport._call_connection_lost(None)\nTraceback (most recent call last):\n  File \"asyncio\\events.py\", line 88, in _run\nConnectionResetError: [WinError 10054] An existing connection was forcibly closed by the remote host\nPrompt executed in 12.34 seconds\n",
        );
        assert_eq!(r.outcome, Some(Outcome::Pass));
        // A POST's validation traceback (HTTP 500) is no prompt's error, and a download bar
        // before the start is no prompt.
        let r = read(
            "Fetching 3 files: 100%|#####| 3/3 [00:12<00:00,  4.10s/it]\nTotal VRAM 8151 MB, total RAM 16088 MB\nTo see the GUI go to: http://127.0.0.1:8188\nError handling request from 127.0.0.1\nTraceback (most recent call last):\n  File \"/c/server.py\", line 700, in post_prompt\n  File \"/c/execution.py\", line 969, in validate_prompt\nTypeError: argument of type 'int' is not iterable\ngot prompt\nPrompt executed in 2.00 seconds\n",
        );
        assert_eq!(r.outcome, Some(Outcome::Pass));
        assert!(
            r.prompts
                .iter()
                .all(|p| p.outcome != Some(Outcome::NodeError) && p.outcome != Some(Outcome::Crash)),
            "{:?}",
            r.prompts
        );
        // The 2024 form of the exception line.
        let r = read(
            "got prompt\n!!! Exception during processing!!! shape mismatch\nPrompt executed in 1.00 seconds\n",
        );
        assert_eq!(r.outcome, Some(Outcome::NodeError));
        // faulthandler's fatal error, its stack heading, and frames of a custom node's import:
        // ComfyUI never came up (no prompt ran).
        let r = read(
            "Windows fatal exception: access violation\n\nStack (most recent call first):\n  File \"C:\\ComfyUI\\custom_nodes\\n\\probe.py\", line 688 in _probe\n  File \"C:\\ComfyUI\\custom_nodes\\n\\__init__.py\", line 6 in <module>\n  File \"C:\\ComfyUI\\nodes.py\", line 2263 in load_custom_node\n",
        );
        assert_eq!(r.outcome, Some(Outcome::StartupFailed));
        assert_eq!(r.prompts_total, 0);
        // The import-time executor frame is the start's, not a prompt's.
        let r = read(
            "Traceback (most recent call last):\n  File \"C:\\ComfyUI\\main.py\", line 9, in <module>\n  File \"C:\\ComfyUI\\execution.py\", line 15, in <module>\n    import comfy.model_management\nAssertionError: Torch not compiled with CUDA enabled\n",
        );
        assert_eq!(r.outcome, Some(Outcome::StartupFailed));
        assert!(!r.ends_mid_prompt);
        // The newest startups' import-time lines: the log ends while ComfyUI starts.
        let r = read(
            "[INFO] setup plugin alembic.autogenerate.schemas\n[INFO] Found comfy_kitchen backend eager: {'available': True}\n",
        );
        assert_eq!(r.starts_total, 1);
        assert_eq!(r.outcome, None);
        assert!(!r.ends_mid_prompt);
    }

    #[test]
    fn version_lines_before_the_startup_block_belong_to_the_start() {
        let log = "pytorch version: 2.7.0+cu128\nComfyUI version: 0.3.40\nTotal VRAM 8151 MB, total RAM 16088 MB\nDevice: cuda:0 NVIDIA GeForce RTX 3070 : cudaMallocAsync\nTo see the GUI go to: http://127.0.0.1:8188\ngot prompt\nPrompt executed in 2.00 seconds\n";
        let r = scan_bytes("early.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.starts_total, 1);
        let f = &r.startup.facts;
        assert_eq!(f.comfyui_version.as_deref(), Some("0.3.40"));
        assert_eq!(f.pytorch_version.as_deref(), Some("2.7.0+cu128"));
        assert_eq!(f.dynamic_vram, Some(false));
        assert_eq!(r.outcome, Some(Outcome::Pass));
    }

    #[test]
    fn a_load_followed_by_sampling_is_not_a_hang() {
        // The `prepared for dynamic VRAM` line can drop to DEBUG; a progress bar after the
        // load request shows the model did load.
        let head = "Total VRAM 8151 MB, total RAM 16088 MB\nTo see the GUI go to: http://127.0.0.1:8188\ngot prompt\nRequested to load Krea2\n";
        let stuck = scan_bytes("stuck.log", head.as_bytes(), Mode::Prefilter).unwrap();
        // A log that ends there is not a hang by itself: it is unfinished, and says why.
        assert_eq!(stuck.outcome, None);
        assert_eq!(stuck.exit_code(), 0);
        assert!(stuck.ends_mid_prompt);
        let why = stuck.prompts[0].explanation.as_deref().unwrap();
        assert!(why.contains("known hang"), "{why}");
        // The log's own clock can show one: minutes of silence, then Ctrl-C.
        let stamped = "2026-09-14T21:02:00.0 - To see the GUI go to: http://127.0.0.1:8188\n2026-09-14T21:02:01.0 - got prompt\n2026-09-14T21:02:02.0 - Requested to load Krea2\n2026-09-14T21:12:02.0 - Stopped server\n";
        let r = scan_bytes("stamped.log", stamped.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Hang));
        assert!(r.prompts[0].evidence.iter().any(|e| e.contains("600 s")));
        // A minute is a slow disk, not a hang.
        let quick = stamped.replace("21:12:02", "21:03:02");
        let r = scan_bytes("quick.log", quick.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Interrupted));
        let sampling = format!(
            "{head}  5%|▌         | 1/20 [00:01<00:19,  1.02s/it]\r 10%|█         | 2/20 [00:02<00:18,  1.02s/it]"
        );
        let r = scan_bytes("sampling.log", sampling.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, None);
        assert_eq!(
            r.prompts[0].evidence.last().unwrap(),
            " 10%|█         | 2/20 [00:02<00:18,  1.02s/it]"
        );
        // A coloured bar is a bar too (its closing code is no record glued after it).
        let coloured =
            format!("{head}\x1b[32m 10%|█         | 2/20 [00:02<00:18,  1.02s/it]\x1b[0m\n");
        let r = scan_bytes("coloured.log", coloured.as_bytes(), Mode::Prefilter).unwrap();
        let why = r.prompts[0].explanation.as_deref().unwrap_or("");
        assert!(!why.contains("known hang"), "{why}");
    }

    #[test]
    fn words_of_a_crash_inside_a_sentence_are_no_crash() {
        let log = "To see the GUI go to: http://127.0.0.1:8188\ngot prompt\nRequested to load SD1\nloaded completely 9000.0 1639.41 True\nPrompt executed in 3.10 seconds\n[WARN] set X=1 to avoid a Segmentation fault on macOS; a Fatal Python error: is rare\n";
        let r = scan_bytes("warn.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Pass));
        assert_eq!(r.prompts_total, 1);
        assert_eq!(r.exit_code(), 0);
        // Glued after a bar, or behind a shell's line number, they are.
        let glued = "got prompt\n  0%|          | 0/8 [00:00<?, ?it/s,   Model Initializing ...  ]Fatal Python error: Aborted\n";
        let r = scan_bytes("glued.log", glued.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Crash));
        let shell = "got prompt\nRequested to load SD1\n/init.bash: line 637:   289 Segmentation fault      python main.py\n";
        let r = scan_bytes("shell.log", shell.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Crash));
        // A log shows no exit status: the crash is told as the log shows it (a segfault is
        // not called a SIGABRT), with the crash line as its evidence.
        let p = r.prompts.last().unwrap();
        let why = p.explanation.as_deref().unwrap_or_default();
        assert!(why.contains("died in native code"), "{why}");
        assert!(!why.contains("SIG"), "{why}");
        assert!(
            p.evidence.iter().any(|e| e.contains("Segmentation fault")),
            "{:?}",
            p.evidence
        );
        // zsh says it in lower case, with or without its name.
        for line in [
            "zsh: segmentation fault (core dumped)  python main.py",
            "segmentation fault (core dumped)  python main.py",
        ] {
            let zsh = format!("got prompt\nRequested to load SD1\n{line}\n");
            let r = scan_bytes("zsh.log", zsh.as_bytes(), Mode::Prefilter).unwrap();
            assert_eq!(r.outcome, Some(Outcome::Crash), "{line}");
        }
        // Prose that names one is not one.
        let prose = "got prompt\nPrompt executed in 3.10 seconds\nthe segmentation fault (core dumped) went away\n";
        let r = scan_bytes("prose.log", prose.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Pass));
    }

    #[test]
    fn intel_xpus_own_out_of_device_memory_is_an_oom() {
        let log = "got prompt\nRequested to load Flux\n!!! Exception during processing !!! Native API failed. Native API returns: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)\nTraceback (most recent call last):\n  File \"/ai/ComfyUI/execution.py\", line 496, in execute\nRuntimeError: Native API failed. Native API returns: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)\nPrompt executed in 4.02 seconds\n";
        let r = scan_bytes("xpu.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Oom));
    }

    #[test]
    fn the_shell_prompt_back_under_a_running_prompt_is_an_exit() {
        let run = "To see the GUI go to: http://127.0.0.1:8188\ngot prompt\nRequested to load WanVAE\nloaded completely; 4852.69 MB usable, 242.03 MB loaded, full load: True\n\n";
        // cmd's prompt, cut mid-path by the copy; PowerShell's; a POSIX shell's.
        for back in [
            "D:\\ComfyUI_windows_portabl",
            "PS C:\\ComfyUI>",
            "(venv) me@box:~/ComfyUI$ ",
        ] {
            let log = format!("{run}{back}\n");
            let r = scan_bytes("back.log", log.as_bytes(), Mode::Prefilter).unwrap();
            assert_eq!(r.outcome, Some(Outcome::Crash), "{back}");
            assert!(!r.ends_mid_prompt, "{back}");
            assert!(
                r.known_issues.iter().any(|k| k.id == "process_exited"),
                "{back}"
            );
        }
        // After a prompt that finished, or as a command typed after it, it says nothing.
        let done = "got prompt\nPrompt executed in 3.10 seconds\n\nD:\\ComfyUI>\n";
        let r = scan_bytes("done.log", done.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Pass));
        let typed = format!("{run}D:\\ComfyUI>nvidia-smi\n");
        let r = scan_bytes("typed.log", typed.as_bytes(), Mode::Prefilter).unwrap();
        assert!(r.ends_mid_prompt);
        assert_ne!(r.outcome, Some(Outcome::Crash));
        // Not an exit: the prompt of the shell that printed a log still being written, the
        // user's Ctrl-C, a file a node wrote.
        let tail = format!(
            "root@c7b1:/workspace/ComfyUI# tail -n 8 /workspace/comfyui.log\n{run}root@c7b1:/workspace/ComfyUI#\n"
        );
        let stop =
            format!("{run}^C\nTerminate batch job (Y/N)? y\n\nD:\\ComfyUI_windows_portable>\n");
        let file = format!("{run}C:\\ComfyUI\\output\\video\\ComfyUI_00001.mp4\n");
        for (name, log) in [("tail", tail), ("stop", stop), ("file", file)] {
            let r = scan_bytes(name, log.as_bytes(), Mode::Prefilter).unwrap();
            assert_ne!(r.outcome, Some(Outcome::Crash), "{name}");
            assert!(r.known_issues.is_empty(), "{name}");
        }
    }

    #[test]
    fn lines_that_only_look_like_new_markers_change_nothing() {
        let base = "To see the GUI go to: http://127.0.0.1:8188\ngot prompt\nRequested to load SD1\nloaded completely 9000.0 1639.41 True\n";
        // A sentence that begins like docker compose's line is no new start.
        let attach =
            format!("{base}Attaching to existing session cache\nPrompt executed in 3.10 seconds\n");
        let r = scan_bytes("attach.log", attach.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!((r.starts_total, r.outcome), (1, Some(Outcome::Pass)));
        // The server's interrupt racing the end of a prompt makes no phantom one.
        let late = format!("{base}Prompt executed in 3.10 seconds\nInterrupting prompt 6c521dff\n");
        let r = scan_bytes("late.log", late.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!((r.prompts_total, r.outcome), (1, Some(Outcome::Pass)));
        // The console's refusal and the popup pasted under it are one refused prompt.
        let both = "To see the GUI go to: http://127.0.0.1:8188\ngot prompt\nFailed to validate prompt for output 9:\n* CLIPLoader 3:\n  - Value not in list: clip_name: 'x' not in []\nOutput will be ignored\ninvalid prompt: {'type': 'prompt_outputs_failed_validation', 'message': 'Prompt outputs failed validation', 'details': '', 'extra_info': {}}\nPrompt execution failed\nPrompt outputs failed validation:\nCLIPLoader:\n- Value not in list: clip_name: 'x' not in []\n";
        let r = scan_bytes("both.log", both.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(
            (r.prompts_total, r.outcome),
            (1, Some(Outcome::InvalidWorkflow))
        );
        // lowvram's module lines come while the load runs: the log still ends at the load.
        let lowvram = "got prompt\nRequested to load WAN21\nlowvram: loaded module regularly blocks.0.norm RMSNorm()\nlowvram: loaded module regularly blocks.1.norm RMSNorm()\n";
        let r = scan_bytes("lowvram.log", lowvram.as_bytes(), Mode::Prefilter).unwrap();
        let why = r.prompts[0].explanation.as_deref().unwrap_or("");
        assert!(why.contains("before it loaded"), "{why}");
    }

    #[test]
    fn a_traceback_through_the_executor_cut_before_its_exception_is_a_failure_of_unknown_kind() {
        let log = "got prompt\nTraceback (most recent call last):\n  File \"/c/execution.py\", line 496, in execute\n    output_data, output_ui, has_subgraph, has_pending_tasks = await get_output_data(prompt_id, unique_id, obj, input_data_all)\n                                                               ^^^^^^^^^^^^^^^^^^^^^^^\n  File \"/c/execution.py\", line 333, in get_output_data\n";
        let r = scan_bytes("cut.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, None);
        assert!(!r.ends_mid_prompt);
        assert!(r.summary.contains("failed"), "{}", r.summary);
        assert!(r.not_seen.contains(&"what the last prompt failed with"));
        assert_eq!(r.exit_code(), 1);
        // Python's carets are no evidence.
        let p = r.prompts.last().unwrap();
        assert!(
            p.evidence.iter().all(|e| !e.trim().starts_with('^')),
            "{:?}",
            p.evidence
        );
        // With its exception line, it is the node error it names.
        let whole = format!("{log}RuntimeError: shape mismatch\n");
        let r = scan_bytes("whole.log", whole.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::NodeError));
    }

    #[test]
    fn an_exception_out_of_the_executors_own_loop_ends_its_prompt() {
        // The RAM-release step of `execute_async` raised (no node's `!!!` line): the prompt
        // failed with it, a user's interrupt after it changes nothing.
        let log = "  File \"/c/ComfyUI/execution.py\", line 795, in execute_async\n    ram_release_callback(ram_inactive_headroom)\n  File \"/c/ComfyUI/comfy_execution/caching.py\", line 528, in ram_release\n    if psutil.virtual_memory().available >= target:\nRuntimeError: host_statistics64(HOST_VM_INFO64) syscall failed: (ipc/mig) array not large enough\n[INFO] Interrupting prompt 16f26504-a526-481d-adca-5f523f7920b3\n";
        let r = scan_bytes("ram.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::NodeError));
        // The prompt worker thread killed through the executor: a prompt failed.
        let worker = "Exception in thread Thread-2 (prompt_worker):\nTraceback (most recent call last):\n  File \"/c/ComfyUI/main.py\", line 203, in prompt_worker\n    e.execute(item[2], prompt_id, extra_data, item[4])\n  File \"/c/ComfyUI/execution.py\", line 648, in execute\n    asyncio.run(self.execute_async(prompt, prompt_id, extra_data, execute_outputs))\n";
        let r = scan_bytes("worker.log", worker.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.prompts_total, 1);
        assert!(!r.ends_mid_prompt);
        assert_eq!(r.exit_code(), 1);
        // Killed after its prompt, at `q.task_done`: no prompt's error, still a failure.
        let done = "Exception in thread Thread-22 (prompt_worker):\nTraceback (most recent call last):\n  File \"/c/ComfyUI/main.py\", line 213, in prompt_worker\n    q.task_done(item_id,\nTypeError: new_task_done() got an unexpected keyword argument 'process_item'\n";
        let r = scan_bytes("done.log", done.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.prompts_total, 0);
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    fn a_pasted_traceback_tail_through_a_nodes_code_is_a_failed_prompt() {
        // Its outermost frame is a node's function: only a prompt runs it.
        let tail = "  File \"/u/ComfyUI/custom_nodes/facetools/nodes.py\", line 225, in run\n    mask = mask_crop(face, M, crop, mask_type)\n  File \"/u/ComfyUI/.venv/lib/python3.12/site-packages/torch/cuda/__init__.py\", line 403, in _lazy_init\n    raise AssertionError(\"Torch not compiled with CUDA enabled\")\nAssertionError: Torch not compiled with CUDA enabled\n";
        let r = scan_bytes("tail.log", tail.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::NodeError));
        assert_eq!(r.prompts_total, 1);
        // The model's code, an OOM at its end: the prompt's OOM.
        let model = "  File \"D:\\ComfyUI\\comfy\\ldm\\flux\\math.py\", line 20, in attention\n    x = optimized_attention(q, k, v, heads)\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
        let r = scan_bytes("model.log", model.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Oom));
        // Run at import (a module's top level first), or a faulthandler dump (innermost
        // first): no prompt.
        let import = tail.replacen(", in run\n", ", in <module>\n", 1);
        let r = scan_bytes("import.log", import.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.prompts_total, 0);
        let dump = "Windows fatal exception: access violation\nStack (most recent call first):\n  File \"W:\\ComfyUI\\custom_nodes\\seedvr2\\compat.py\", line 688 in _probe\n  File \"W:\\ComfyUI\\custom_nodes\\seedvr2\\compat.py\", line 697 in <module>\n";
        let r = scan_bytes("dump.log", dump.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.prompts_total, 0);
        // ComfyUI-Manager's own code runs in its threads and routes, not in prompts.
        let manager = tail.replace("custom_nodes/facetools", "custom_nodes/ComfyUI-Manager");
        let r = scan_bytes("manager.log", manager.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.prompts_total, 0);
    }

    #[test]
    fn the_old_error_dialog_names_the_exception_above_its_frames() {
        let log = "Error occurred when executing DualCLIPLoaderGGUF:\n\nmodule 'comfy.sd' has no attribute 'load_text_encoder_state_dicts'\n\n  File \"E:\\ComfyUI\\execution.py\", line 316, in execute\n    output_data = get_output_data(obj, input_data_all)\n  File \"E:\\ComfyUI\\custom_nodes\\ComfyUI-GGUF\\nodes.py\", line 224, in load_cl\n";
        let r = scan_bytes("dialog.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::NodeError));
        assert!(!r.ends_mid_prompt);
        // Its message an OOM: the prompt's OOM.
        let oom = log.replace(
            "module 'comfy.sd' has no attribute 'load_text_encoder_state_dicts'",
            "Allocation on device 0 would exceed allowed memory. (out of memory)",
        );
        let r = scan_bytes("oom.log", oom.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Oom));
    }

    #[test]
    fn the_frontends_refusal_copied_flat_from_its_dialog_is_a_refusal() {
        let log = "Prompt execution failed Prompt outputs failed validation:\nCheckpointLoaderSimple:\n- Required input is missing: ckpt_name\n";
        let r = scan_bytes("flat.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::InvalidWorkflow));
    }

    #[test]
    fn an_excerpt_that_begins_inside_a_start_keeps_the_facts_above_its_first_start_line() {
        let log = "Device: cuda:0 NVIDIA GeForce RTX 3060 : cudaMallocAsync\nUsing pytorch attention\nComfyUI version: 0.3.51\nStarting server\n\nTo see the GUI go to: http://127.0.0.1:8188\n";
        let r = scan_bytes("head.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.starts_total, 1);
        let f = &r.startup.facts;
        assert_eq!(f.comfyui_version.as_deref(), Some("0.3.51"));
        assert!(
            f.device.as_deref().is_some_and(|d| d.contains("RTX 3060")),
            "{f:?}"
        );
        // Above a second start they are the first one's, not its.
        let two = format!(
            "{log}Total VRAM 8188 MB, total RAM 16177 MB\nComfyUI version: 0.3.52\nStarting server\n"
        );
        let r = scan_bytes("two.log", two.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.starts_total, 2);
        assert_eq!(r.startup.facts.device, None);
    }

    #[test]
    fn the_device_block_printed_again_after_the_web_root_is_the_same_start() {
        let log = "Total VRAM 8188 MB, total RAM 16177 MB\npytorch version: 2.9.1+cu130\nSet vram state to: NORMAL_VRAM\nDevice: cuda:0 NVIDIA GeForce RTX 4060 : cudaMallocAsync\nComfyUI version: 0.3.76\n[Prompt Server] web root: C:\\p\\static\nTotal VRAM 8188 MB, total RAM 16177 MB\npytorch version: 2.9.1+cu130\nSet vram state to: NORMAL_VRAM\nStarting server\n\nTo see the GUI go to: http://127.0.0.1:8188\n";
        let r = scan_bytes("twice.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.starts_total, 1);
        assert_eq!(r.startup.facts.comfyui_version.as_deref(), Some("0.3.76"));
        // Anywhere else, `Total VRAM` again is a new start.
        let again = log.replace("[Prompt Server] web root: C:\\p\\static\n", "");
        let r = scan_bytes("again.log", again.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.starts_total, 2);
    }

    #[test]
    fn an_exit_reported_above_a_launch_command_that_nothing_follows_ended_that_start() {
        let log = "Process exited with code 3221225477 / 0xC0000005 (memory access violation)\n\n> C:\\CI\\.venv\\Scripts\\python.exe -s ComfyUI\\main.py --enable-manager\n";
        let r = scan_bytes("desk.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::StartupFailed));
        assert_eq!(r.prompts_total, 0);
        // The command inside the exit line itself (a shell's `Killed` line) is no start.
        let shell = "model_type FLOW\n/comfy/user_script.bash: line 21:   116 Killed                  python3 ./main.py --listen 0.0.0.0\n";
        let r = scan_bytes("shell.log", shell.as_bytes(), Mode::Prefilter).unwrap();
        assert_ne!(r.outcome, Some(Outcome::StartupFailed));
    }

    #[test]
    fn the_frontends_popup_of_a_refused_prompt_is_a_refused_prompt() {
        let popup = "Prompt execution failed\nPrompt outputs failed validation:\nCLIPLoader:\n- Value not in list: clip_name: 'qwen_3_4b.safetensors' not in ['clip_l.safetensors']\nUNETLoader:\n- Value not in list: unet_name: 'z_image_turbo_bf16.safetensors' not in []\n";
        let r = scan_bytes("popup.log", popup.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::InvalidWorkflow));
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    fn the_servers_word_that_it_interrupts_the_running_prompt_is_an_interrupt() {
        let log = "got prompt\nRequested to load MiniMaxH3\nloaded partially; 18906.12 MB usable, 18716.83 MB loaded, 1279.32 MB offloaded\n  5%|4         | 1/20 [00:04<01:25,  4.50s/it][INFO] Interrupting prompt 6c521dff-f802-49ff-aaab-eee7230c647b\n";
        let r = scan_bytes("int.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Interrupted));
        assert_eq!(r.exit_code(), 0);
    }

    #[test]
    fn a_container_that_exits_right_after_compose_attaches_to_it_failed_to_start() {
        let log = "[+] Running 1/0\nAttaching to comfyui-1\ncomfyui-1 exited with code 139\n";
        let r = scan_bytes("compose.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::StartupFailed));
        assert_eq!(r.prompts_total, 0);
    }

    #[test]
    fn a_crash_line_that_prompt_executed_follows_was_a_child_process() {
        // No start and no `got prompt`: the crash line is held as if reported above the log,
        // until `Prompt executed` says ComfyUI outlived it.
        let log = "Initial seed: 1054\nAffine transforming 509 faces...\n  0%|          | 0/509 [00:00<?, ?it/s]Segmentation fault (core dumped)\nPrompt executed in 10.66 seconds\n";
        let r = scan_bytes("child.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Pass));
        assert_eq!(r.prompts_total, 1);
        assert!(r.known_issues.iter().any(|k| k.id == "fatal_python_error"));
        assert_eq!(r.exit_code(), 1);
    }

    #[test]
    fn an_exception_then_the_exit_with_no_prompt_is_a_failed_start() {
        // A front end relays a traceback ComfyUI raised while starting, then reports the exit.
        let log = "[ComfyUI-6/STDERR]   File \"D:\\S\\comfy\\model_management.py\", line 186, in get_torch_device\n[ComfyUI-6/STDERR]     return torch.device(torch.cuda.current_device())\n[ComfyUI-6/STDERR] RuntimeError: No CUDA GPUs are available\n2025-08-22 10:58:25.415 [Error] Self-Start ComfyUI-6 on port 7821 failed. AutoRestart ignored as this was an initial launch failure.\n";
        let r = scan_bytes("start.log", log.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::StartupFailed));
        assert_eq!(r.prompts_total, 0);
        // A node's own printed traceback, work after it, then the exit: the prompt died.
        let work = "Traceback (most recent call last):\n  File \"n.py\", line 3, in f\nValueError: cached\nRequested to load WAN21\nloaded partially 5000.0 4999.2 0\n 10%|#         | 2/20 [00:10<01:30,  5.00s/it]\nProcess exited with code 3221225477\n";
        let r = scan_bytes("work.log", work.as_bytes(), Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Crash));
    }

    /// Every input the fuzzer found (`fuzz/regressions/`) and lines whose needle is joined
    /// only when the line is normalised: the fast path must see them as reading every line does.
    #[test]
    fn needles_joined_by_normalising_are_not_missed() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
        let mut logs: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
            .collect();
        assert!(
            !logs.is_empty(),
            "no regression inputs in {}",
            dir.display()
        );
        let head = "Total VRAM 8151 MB, total RAM 16088 MB\nTo see the GUI go to: http://127.0.0.1:8188\ngot prompt\n";
        let long_bar = " 5%|▌ | 1/20\r".repeat(200_000);
        for (name, body) in [
            ("escape", "Request\x1bed to load WAN21\n".to_string()),
            ("csi", "Reque\x1b[1msted to load WAN21\x1b[0m\n".to_string()),
            (
                "glued",
                "Reque2025-01-16T20:49:52.176503 - sted to load WAN21\n".to_string(),
            ),
            // A timestamp in other digits is not removed, so nothing is joined.
            (
                "not-a-stamp",
                "Reque2025-01-16T20:49:52.\u{661} - sted to load WAN21\n".to_string(),
            ),
            // An over-long line takes the other path through the reader.
            ("long", format!("{long_bar}Request\x1bed to load WAN21\n")),
            ("last", "Request\x1bed to load WAN21".to_string()),
        ] {
            let text = format!("{head}{body}");
            let r = scan_bytes(name, text.as_bytes(), Mode::Prefilter).unwrap();
            let want: &[&str] = if name == "not-a-stamp" {
                &[]
            } else {
                &["WAN21"]
            };
            assert_eq!(r.prompts[0].models, want, "{name}");
            logs.push((name.to_string(), text.into_bytes()));
        }
        for (name, bytes) in logs {
            let fast = json(&scan_bytes(&name, &bytes, Mode::Prefilter).unwrap());
            let slow = json(&scan_bytes(&name, &bytes, Mode::EveryLine).unwrap());
            assert_eq!(fast, slow, "{name}");
        }
    }

    #[test]
    fn the_real_0_3_64_server_log() {
        let bytes = std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("fixtures/captures/logs/server-run1.log"),
        )
        .unwrap();
        let r = scan_bytes("server-run1.log", &bytes, Mode::Prefilter).unwrap();
        assert_eq!(r.outcome, Some(Outcome::Pass));
        assert_eq!(r.startup.facts.comfyui_version.as_deref(), Some("0.3.64"));
        assert_eq!(r.startup.facts.dynamic_vram, Some(false));
        let outcomes: Vec<&str> = r
            .prompts
            .iter()
            .map(|p| p.outcome.map_or("unknown", Outcome::as_str))
            .collect();
        // Two cached passes; three refused POSTs; the save-outside-output node error; the 4 TiB
        // EmptyImage; three more refusals; the blur; the interrupted blur; the quick prompt.
        assert_eq!(
            outcomes,
            [
                "pass",
                "pass",
                "invalid_workflow",
                "invalid_workflow",
                "invalid_workflow",
                "node_error",
                "host_oom",
                "invalid_workflow",
                "invalid_workflow",
                "invalid_workflow",
                "pass",
                "interrupted",
                "pass"
            ]
        );
        assert_eq!(ids(&r), ["cpu_allocator"]);
    }
}
