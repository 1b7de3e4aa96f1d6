//! Classification: from what a run left behind (exit status, websocket events, log lines)
//! to an [`Outcome`] with the evidence lines that show it. Pure functions; the signatures
//! themselves are data in [`catalogue`].

pub(crate) mod catalogue;
pub mod normalize;

use crate::outcome::Outcome;
use catalogue::{Phase, first_match, match_line};
use serde::Serialize;

pub use crate::process::ExitStatus;

/// How the websocket said a prompt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PromptEnd {
    Success,
    Error {
        node_id: Option<String>,
        node_type: Option<String>,
        exception_type: String,
        exception_message: String,
    },
    Interrupted {
        node_id: Option<String>,
    },
}

/// Everything observed about one prompt.
#[derive(Debug, Clone, Default)]
pub struct PromptObservation {
    pub end: Option<PromptEnd>,
    /// Normalised log lines written while the prompt ran.
    pub log: Vec<String>,
    /// The stall watchdog fired (no websocket or log activity for too long).
    pub stalled: bool,
    pub timed_out: bool,
    /// ComfyUI died while the prompt ran.
    pub exit: Option<ExitStatus>,
    /// A log's line says how ComfyUI's process ended while the prompt ran (a log has no exit
    /// status).
    pub died: Option<LoggedDeath>,
    /// The user pressed Ctrl-C.
    pub interrupted_by_user: bool,
    /// The HTTP 400 answer to the prompt, summarised as lines.
    pub rejected: Option<Vec<String>>,
    /// System RAM was nearly exhausted when the process died (from the sampler).
    pub ram_exhausted: bool,
    /// vrambisect itself stopped ComfyUI because available RAM fell below its threshold;
    /// the text says how low it was.
    pub stopped_for_ram: Option<String>,
}

/// How a log says ComfyUI's process ended during a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggedDeath {
    /// `Killed`, or a shell's report of it: SIGKILL.
    Killed,
    /// The kernel's OOM killer's own line.
    OomKiller,
    /// A native crash: `Fatal Python error`, a segfault, an abort, an access violation.
    NativeCrash,
    /// A launcher says the process exited (its pause or exit line), with no word of why.
    Exited,
    /// ComfyUI started again before the prompt finished.
    Restarted,
}

impl LoggedDeath {
    fn outcome(self) -> Outcome {
        match self {
            LoggedDeath::OomKiller => Outcome::HostOom,
            _ => Outcome::Crash,
        }
    }

    fn meaning(self) -> &'static str {
        match self {
            LoggedDeath::Killed => {
                "ComfyUI was killed with SIGKILL: most likely the kernel's OOM killer (check 'dmesg' for 'Out of memory: Killed process')"
            }
            LoggedDeath::OomKiller => {
                "the kernel's OOM killer ended ComfyUI during this prompt: system RAM and swap ran out"
            }
            LoggedDeath::NativeCrash => {
                "ComfyUI's process died in native code during this prompt (the crash lines above)"
            }
            LoggedDeath::Exited => {
                "ComfyUI's process ended during this prompt without an error message (the launcher's pause or exit line follows): a native crash, or the system ending it for memory"
            }
            LoggedDeath::Restarted => {
                "ComfyUI started again before this prompt finished: it died (or was restarted) without a message"
            }
        }
    }
}

/// An outcome and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Classification {
    pub outcome: Outcome,
    /// The lines that show it (log lines, the exception, an argparse error).
    pub evidence: Vec<String>,
    /// The catalogue signatures that matched.
    pub signatures: Vec<&'static str>,
    /// A sentence for people, where the evidence alone is not enough.
    pub explanation: Option<String>,
}

impl Classification {
    fn new(outcome: Outcome) -> Classification {
        Classification {
            outcome,
            evidence: Vec::new(),
            signatures: Vec::new(),
            explanation: None,
        }
    }

    fn explain(mut self, text: impl Into<String>) -> Classification {
        self.explanation = Some(text.into());
        self
    }

    fn with_hits(mut self, hits: &[(&'static str, String)]) -> Classification {
        for (id, line) in hits {
            let shown = self.signatures.contains(id);
            if !shown {
                self.signatures.push(id);
            }
            if says_little(line) && !self.evidence.is_empty() {
                continue;
            }
            // The exception line and the log's copy of it say the same thing once.
            let known = self
                .evidence
                .iter()
                .any(|e| e.contains(line.as_str()) || line.contains(e.as_str()));
            if !known && self.evidence.len() < MAX_EVIDENCE {
                self.evidence.push(line.clone());
            }
        }
        self
    }
}

const MAX_EVIDENCE: usize = 8;

/// A heading that says nothing by itself (`Memory summary:` and the table after it, a
/// faulthandler stack's `… (most recent call first):`): evidence or an example only when
/// there is nothing better.
pub fn says_little(line: &str) -> bool {
    let t = line.trim_end();
    t.ends_with(':') || t.ends_with("===|")
}

/// Prompt-phase signature hits in `lines`, in order.
fn prompt_hits(lines: &[String]) -> Vec<(&'static str, Outcome, String)> {
    lines
        .iter()
        .filter_map(|l| first_match(l, Phase::Prompt).map(|s| (s.id, s.outcome, l.clone())))
        .collect()
}

fn hits_of(
    hits: &[(&'static str, Outcome, String)],
    pred: impl Fn(Outcome) -> bool,
) -> Vec<(&'static str, String)> {
    hits.iter()
        .filter(|(_, o, _)| pred(*o))
        .map(|(id, _, l)| (*id, l.clone()))
        .collect()
}

/// A prompt the process died in: by its exit status (a live run), or as a log's line says.
fn process_ended(
    obs: &PromptObservation,
    hits: &[(&'static str, Outcome, String)],
) -> Option<Classification> {
    if let Some(exit) = obs.exit {
        let all = hits_of(hits, |_| true);
        if exit.signal == Some(9) || exit.code == Some(137) {
            let (outcome, why) = if obs.ram_exhausted {
                (
                    Outcome::HostOom,
                    "ComfyUI was killed (SIGKILL) while system RAM was exhausted: the kernel's OOM killer",
                )
            } else {
                (Outcome::Crash, LoggedDeath::Killed.meaning())
            };
            let mut v = Classification::new(outcome).explain(why).with_hits(&all);
            v.evidence
                .push(format!("process ended by {}", exit.describe()));
            return Some(v);
        }
        let mut v = Classification::new(Outcome::Crash)
            .explain(format!(
                "ComfyUI died during the prompt ({})",
                exit.describe()
            ))
            .with_hits(&all);
        if v.evidence.is_empty() {
            v.evidence = tail(&obs.log, 5);
        }
        return Some(v);
    }
    if let Some(death) = obs.died {
        let mut v = Classification::new(death.outcome())
            .explain(death.meaning())
            .with_hits(&hits_of(hits, |_| true));
        if v.evidence.is_empty() {
            v.evidence = tail(&obs.log, 5);
        }
        return Some(v);
    }
    None
}

/// Classifies one prompt.
pub fn classify_prompt(obs: &PromptObservation) -> Classification {
    if obs.interrupted_by_user {
        return Classification::new(Outcome::Interrupted)
            .explain("stopped by the user (Ctrl-C or SIGTERM)");
    }
    if let Some(why) = &obs.stopped_for_ram {
        let mut v = Classification::new(Outcome::HostOom).explain(format!(
            "vrambisect stopped ComfyUI before the kernel's OOM killer could pick a process: {why}"
        ));
        v.evidence = tail(&obs.log, 3);
        return v;
    }
    if let Some(lines) = &obs.rejected {
        let mut v = Classification::new(Outcome::InvalidWorkflow);
        v.evidence = lines.iter().take(MAX_EVIDENCE).cloned().collect();
        return v.explain("ComfyUI refused the workflow (HTTP 400); nothing ran");
    }
    let hits = prompt_hits(&obs.log);
    let memory = hits_of(&hits, Outcome::is_memory);

    if let Some(PromptEnd::Error {
        exception_type,
        exception_message,
        node_type,
        node_id,
    }) = &obs.end
    {
        let first = exception_message.lines().next().unwrap_or("").trim();
        let exception = if first.is_empty() {
            exception_type.clone()
        } else {
            format!("{exception_type}: {first}")
        };
        let node = match (node_type, node_id) {
            (Some(t), Some(id)) => format!(" in node {id} ({t})"),
            _ => String::new(),
        };
        let from_exception = match_line(&exception)
            .find(|s| s.phase == Phase::Prompt && s.outcome.is_memory())
            .or_else(|| {
                exception_message
                    .lines()
                    .find_map(|l| first_match(l, Phase::Prompt).filter(|s| s.outcome.is_memory()))
            });
        let mut v = match from_exception {
            Some(sig) => {
                let mut v = Classification::new(sig.outcome);
                v.signatures.push(sig.id);
                v
            }
            // The exception says nothing, but the log does (e.g. an aimdo error, then a
            // generic RuntimeError): the log's first memory signature decides.
            None => match memory.first() {
                Some((id, _)) => {
                    let sig = catalogue::by_id(id).expect("catalogue id");
                    Classification::new(sig.outcome)
                }
                // Not a memory failure: a node error, named when it is one the catalogue
                // knows (a CUDA error a memory feature causes, a full disk).
                None => {
                    let mut v = Classification::new(Outcome::NodeError);
                    let named = std::iter::once(exception.as_str())
                        .chain(exception_message.lines())
                        .find_map(|l| first_match(l, Phase::Prompt))
                        .map(|sig| sig.id)
                        .or_else(|| hits.first().map(|(id, _, _)| *id));
                    v.signatures.extend(named);
                    v
                }
            },
        };
        v.evidence.push(format!("{exception}{node}"));
        return v.with_hits(&memory);
    }

    if let Some(v) = process_ended(obs, &hits) {
        return v;
    }
    if obs.stalled {
        let mut v = Classification::new(Outcome::Hang)
            .explain("no websocket or log activity for longer than the stall timeout while the prompt was running");
        v.evidence = tail(&obs.log, 3);
        return v.with_hits(&memory);
    }
    if obs.timed_out {
        let mut v = Classification::new(Outcome::Timeout)
            .explain("the prompt did not finish within the timeout");
        v.evidence = tail(&obs.log, 3);
        return v;
    }
    match &obs.end {
        Some(PromptEnd::Success) => {
            // TensorRT and aimdo errors can leave a "successful" prompt with garbage output.
            let trt = hits_of(&hits, |o| o == Outcome::TensorrtAllocator);
            if !trt.is_empty() {
                return Classification::new(Outcome::TensorrtAllocator)
                    .explain("the prompt reported success, but TensorRT's allocator failed during it: its output is not to be trusted")
                    .with_hits(&trt);
            }
            let aimdo = hits_of(&hits, |o| o == Outcome::AimdoFault);
            if !aimdo.is_empty() {
                return Classification::new(Outcome::AimdoFault)
                    .explain("the prompt reported success, but comfy-aimdo logged errors during it")
                    .with_hits(&aimdo);
            }
            Classification::new(Outcome::Pass)
        }
        Some(PromptEnd::Interrupted { node_id }) => {
            let mut v = Classification::new(Outcome::Interrupted)
                .explain("ComfyUI reported the prompt as interrupted");
            if let Some(id) = node_id {
                v.evidence
                    .push(format!("execution_interrupted at node {id}"));
            }
            v
        }
        Some(PromptEnd::Error { .. }) => unreachable!("handled above"),
        None => {
            let mut v = Classification::new(Outcome::Crash)
                .explain("the prompt never finished and ComfyUI stopped answering");
            v.evidence = tail(&obs.log, 5);
            v.with_hits(&memory)
        }
    }
}

/// Classifies a ComfyUI that exited before it was ready.
pub fn classify_startup(exit: ExitStatus, log: &[String]) -> Classification {
    let startup: Vec<(&'static str, Outcome, String)> = log
        .iter()
        .filter_map(|l| first_match(l, Phase::Startup).map(|s| (s.id, s.outcome, l.clone())))
        .collect();
    if exit.code == Some(2)
        && let Some((id, _, line)) = startup.iter().find(|(_, o, _)| *o == Outcome::FlagRejected)
    {
        let mut v = Classification::new(Outcome::FlagRejected)
            .explain("ComfyUI's argparse refused the flags (exit 2)");
        v.signatures.push(id);
        v.evidence.push(line.clone());
        return v;
    }
    let mut v = Classification::new(Outcome::StartupFailed).explain(format!(
        "ComfyUI exited before it was ready ({})",
        exit.describe()
    ));
    // The last signature is the one closest to the death: an early, harmless
    // ModuleNotFoundError from a custom node must not explain a later crash.
    if let Some((id, _, line)) = startup
        .iter()
        .rev()
        .find(|(_, o, _)| *o == Outcome::StartupFailed)
    {
        v.signatures.push(id);
        v.evidence.push(line.clone());
        if let Some(sig) = catalogue::by_id(id) {
            v.explanation = Some(format!("{}: {}", sig.title, sig.meaning));
        }
    }
    for line in tail_traceback(log) {
        if !v.evidence.contains(&line) {
            v.evidence.push(line);
        }
    }
    v
}

use crate::text::last_lines as tail;

/// The last lines of the last traceback (or of the log, when there is none).
fn tail_traceback(log: &[String]) -> Vec<String> {
    match log
        .iter()
        .rposition(|l| l.starts_with("Traceback (most recent call last)"))
    {
        Some(start) => tail(&log[start..], 4),
        None => tail(log, 4),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn error(ty: &str, msg: &str) -> Option<PromptEnd> {
        Some(PromptEnd::Error {
            node_id: Some("3".into()),
            node_type: Some("KSampler".into()),
            exception_type: ty.into(),
            exception_message: msg.into(),
        })
    }

    #[test]
    fn execution_errors_table() {
        let cases: &[(&str, &str, &[&str], Outcome)] = &[
            (
                "torch.OutOfMemoryError",
                "CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 has a total capacity of 7.96 GiB of which 33.64 MiB is free.\nThis error means you ran out of memory on your GPU.\n",
                &["Got an OOM, unloading all loaded models."],
                Outcome::Oom,
            ),
            (
                "torch.OutOfMemoryError",
                "Allocation on device \n",
                &[],
                Outcome::Oom,
            ),
            (
                "torch.cuda.OutOfMemoryError",
                "CUDA out of memory.",
                &[],
                Outcome::Oom,
            ),
            (
                "torch.AcceleratorError",
                "CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation'\n",
                &[],
                Outcome::AcceleratorOom,
            ),
            (
                "MemoryError",
                "VBAR allocation failed\n",
                &["Could not reseve Virtual Address space for VBAR"],
                Outcome::Vbar,
            ),
            (
                "RuntimeError",
                "Fault failed: 2\n",
                &["aimdo: src/model-vbar.c:307:ERROR:VRAM Allocation failed (non OOM)"],
                Outcome::AimdoFault,
            ),
            (
                "RuntimeError",
                "[enforce fail at alloc_cpu.cpp:124] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 4398046511104 bytes. Error code 12 (Cannot allocate memory)\n",
                &[],
                Outcome::HostOom,
            ),
            (
                "RuntimeError",
                "HostBuffer.read_file_slice failed\n",
                &[],
                Outcome::HostOom,
            ),
            (
                "RuntimeError",
                "something generic\n",
                &["aimdo: src/model-vbar.c:307:ERROR:VRAM Allocation failed (non OOM)"],
                Outcome::AimdoFault,
            ),
            (
                "Exception",
                "**** ERROR: Saving image outside the output folder is not allowed.\n",
                &[],
                Outcome::NodeError,
            ),
        ];
        for (ty, msg, log, expected) in cases {
            let obs = PromptObservation {
                end: error(ty, msg),
                log: lines(log),
                ..Default::default()
            };
            let v = classify_prompt(&obs);
            assert_eq!(v.outcome, *expected, "{ty}: {msg}");
            assert!(v.evidence[0].starts_with(ty), "{:?}", v.evidence);
            assert!(v.evidence[0].ends_with("in node 3 (KSampler)"));
        }
    }

    #[test]
    fn success_with_tensorrt_errors_is_not_a_pass() {
        let obs = PromptObservation {
            end: Some(PromptEnd::Success),
            log: lines(&[
                "Requested to load SDXL",
                "[defaultAllocator.cpp::allocate::19] Error code 1: Cuda Runtime (out of memory)",
                "Prompt executed in 3.00 seconds",
            ]),
            ..Default::default()
        };
        let v = classify_prompt(&obs);
        assert_eq!(v.outcome, Outcome::TensorrtAllocator);
        assert_eq!(
            v.evidence,
            ["[defaultAllocator.cpp::allocate::19] Error code 1: Cuda Runtime (out of memory)"]
        );
        let clean = PromptObservation {
            end: Some(PromptEnd::Success),
            log: lines(&["Prompt executed in 3.00 seconds"]),
            ..Default::default()
        };
        assert_eq!(classify_prompt(&clean).outcome, Outcome::Pass);
    }

    #[test]
    fn deaths_hangs_and_timeouts() {
        let killed = PromptObservation {
            exit: Some(ExitStatus {
                code: None,
                signal: Some(9),
            }),
            ..Default::default()
        };
        let v = classify_prompt(&killed);
        assert_eq!(v.outcome, Outcome::Crash);
        assert!(v.explanation.unwrap().contains("OOM killer"));
        let oom_killed = PromptObservation {
            ram_exhausted: true,
            ..killed
        };
        assert_eq!(classify_prompt(&oom_killed).outcome, Outcome::HostOom);

        let aborted = PromptObservation {
            exit: Some(ExitStatus {
                code: None,
                signal: Some(6),
            }),
            log: lines(&[
                "Requested to load SD1",
                "Fatal Python error: Aborted",
                "",
                "Current thread 0x00007f (most recent call first):",
            ]),
            ..Default::default()
        };
        let v = classify_prompt(&aborted);
        assert_eq!(v.outcome, Outcome::Crash);
        assert_eq!(v.evidence, ["Fatal Python error: Aborted"]);

        let hang = PromptObservation {
            stalled: true,
            log: lines(&["got prompt", "Requested to load LTXAV"]),
            ..Default::default()
        };
        let v = classify_prompt(&hang);
        assert_eq!(v.outcome, Outcome::Hang);
        assert_eq!(v.evidence.last().unwrap(), "Requested to load LTXAV");

        let slow = PromptObservation {
            timed_out: true,
            ..Default::default()
        };
        assert_eq!(classify_prompt(&slow).outcome, Outcome::Timeout);
    }

    #[test]
    fn interrupts_and_rejections() {
        let user = PromptObservation {
            interrupted_by_user: true,
            end: Some(PromptEnd::Success),
            ..Default::default()
        };
        assert_eq!(classify_prompt(&user).outcome, Outcome::Interrupted);
        let server = PromptObservation {
            end: Some(PromptEnd::Interrupted {
                node_id: Some("3".into()),
            }),
            ..Default::default()
        };
        assert_eq!(classify_prompt(&server).outcome, Outcome::Interrupted);
        let bad = PromptObservation {
            rejected: Some(lines(&[
                "prompt_outputs_failed_validation: Prompt outputs failed validation",
            ])),
            ..Default::default()
        };
        assert_eq!(classify_prompt(&bad).outcome, Outcome::InvalidWorkflow);
    }

    #[test]
    fn startup_failures() {
        let log = lines(&[
            "usage: main.py [-h] [--listen [IP]]",
            "main.py: error: unrecognized arguments: --disable-dynamic-vram",
        ]);
        let v = classify_startup(
            ExitStatus {
                code: Some(2),
                signal: None,
            },
            &log,
        );
        assert_eq!(v.outcome, Outcome::FlagRejected);
        assert_eq!(
            v.evidence,
            ["main.py: error: unrecognized arguments: --disable-dynamic-vram"]
        );

        let log = lines(&[
            "Checkpoint files will always be loaded safely.",
            "Traceback (most recent call last):",
            "  File \"/home/user/ComfyUI/main.py\", line 12, in <module>",
            "    import comfy_aimdo.control",
            "ModuleNotFoundError: No module named 'comfy_aimdo'",
        ]);
        let v = classify_startup(
            ExitStatus {
                code: Some(1),
                signal: None,
            },
            &log,
        );
        assert_eq!(v.outcome, Outcome::StartupFailed);
        assert_eq!(v.signatures, ["missing_comfy_aimdo"]);
        assert!(
            v.explanation
                .unwrap()
                .contains("pip install -r requirements.txt")
        );
        assert_eq!(
            v.evidence[0],
            "ModuleNotFoundError: No module named 'comfy_aimdo'"
        );

        let v = classify_startup(
            ExitStatus {
                code: Some(1),
                signal: None,
            },
            &lines(&["something odd"]),
        );
        assert_eq!(v.outcome, Outcome::StartupFailed);
        assert_eq!(v.evidence, ["something odd"]);
    }
}
