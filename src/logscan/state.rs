//! The structure of a log, built one line at a time: server starts, the prompts each one ran,
//! and what each shows. Memory stays bounded: a prompt keeps only its matched lines (capped),
//! the last model load and its exception; finished prompts and starts are summarised, and only
//! the last ones (and the first failures) are kept in full.
//!
//! Prompt boundaries follow ComfyUI's own lines (`server.py`, `execution.py`; see `fixtures/captures/logs/server-run*.log`): `got prompt` is
//! logged when a prompt is POSTed (so several may queue up while one runs), `invalid prompt:`
//! or `Error handling request` refuses the last one, and `Prompt executed in …` ends the
//! running one whatever happened to it (`execution.py` prints it after failures too).

use super::lines::{self, Kind, LaunchArgs};
use super::reader::{Before, Sink, visible};
use crate::classify::catalogue::{self, Phase, Signature};
use crate::classify::normalize::normalize;
use crate::classify::{
    self, Classification, ExitStatus, LoggedDeath, PromptEnd, PromptObservation,
};
use crate::outcome::Outcome;
use crate::startup::StartupFacts;
use regex::Regex;
use serde::Serialize;
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::sync::OnceLock;

/// The most characters of one line kept as evidence.
const MAX_TEXT: usize = 400;
/// The most matched lines one prompt or start keeps.
const MAX_MATCHED: usize = 24;
/// Prompts kept in full: the last ones, and the first ones that did not pass.
const KEEP_LAST: usize = 500;
const KEEP_FAILED: usize = 500;
/// Server starts kept in full (the last ones).
const KEEP_STARTS: usize = 100;
/// How many lines after `Traceback` may pass before its exception line.
const TRACEBACK_LINES: u32 = 400;
/// Lines after each frame of a stack seen without its `Traceback` header within which its
/// exception line is looked for.
const HEADLESS_TRACEBACK_LINES: u32 = 8;
/// A start that is still not ready after this many lines is read with the pre-filter only.
const STARTUP_LINES: u32 = 100_000;
/// Lines read for startup facts above the first start (see [`State::in_head`]).
const HEAD_LINES: u32 = 200;
/// General signatures that a more specific one on the same line already says.
const SUBSUMED: &[(&str, &[&str])] = &[
    (
        "cuda_oom_native",
        &["cuda_oom_async", "gpu_oom_other_backend"],
    ),
    ("missing_module", &["missing_comfy_aimdo"]),
];

/// Silence after `Requested to load`, by the log's own timestamps, that makes a stop or
/// restart a hang (a slow disk takes tens of seconds for a large model; the reported hangs
/// last until someone gives up).
const HANG_SECONDS: f64 = 180.0;
/// Lines of context kept when a prompt or start ends without saying how.
const TAIL: usize = 5;
/// Signatures too generic to show that a file is a ComfyUI log at all.
const GENERIC: &[&str] = &[
    "killed",
    "missing_module",
    "fatal_python_error",
    "port_in_use",
    "process_exited",
];

/// One prompt, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PromptSummary {
    /// 1-based, in the order the prompts ended.
    pub index: u64,
    /// The server start it ran in (1-based; null when the log starts after it).
    pub start: Option<u64>,
    /// Its place among the prompts of that start (1 = the first after startup).
    pub ordinal: Option<u32>,
    /// The line of its `got prompt` (or the first line seen of it).
    pub line: u64,
    pub end_line: u64,
    /// Null when the log ends before the prompt does.
    pub outcome: Option<Outcome>,
    pub evidence: Vec<String>,
    pub signatures: Vec<&'static str>,
    pub explanation: Option<String>,
    /// The models it asked to load (`Requested to load X`), the last few.
    pub models: Vec<String>,
    /// From `Prompt executed in …`.
    pub executed_in: Option<String>,
    /// The log begins after the prompt did (no `got prompt`).
    pub started_before_log: bool,
    /// It failed (ComfyUI's executor printed a traceback), but the log ends before the
    /// exception line that says with what: no outcome, yet not a prompt still running.
    #[serde(skip)]
    pub error_cut: bool,
}

/// One server start, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StartSummary {
    pub index: u64,
    pub line: u64,
    /// Whether it came up (the `To see the GUI` line, or prompts ran).
    pub up: bool,
    /// `startup_failed` or `flag_rejected` when it never came up; null otherwise.
    pub outcome: Option<Outcome>,
    pub evidence: Vec<String>,
    pub signatures: Vec<&'static str>,
    pub explanation: Option<String>,
    pub facts: StartupFacts,
    pub launch_args: Option<LaunchArgs>,
    pub comfyui_dir: Option<String>,
    pub prompts: u32,
    /// Its prompts that passed, and that failed (not counting refused or interrupted ones).
    pub passed: u32,
    pub failed: u32,
}

/// Where a known failure signature showed, and the setup it showed in.
#[derive(Debug, Clone)]
pub struct SignatureHits {
    pub signature: &'static Signature,
    pub lines: u64,
    pub prompts: u64,
    pub first_line: u64,
    pub last_line: u64,
    pub example: String,
    /// The lowest place after a server start at which a prompt showed it.
    pub min_ordinal: Option<u32>,
    /// The setup of the last start it showed in.
    pub launch_args: Option<Vec<String>>,
    pub comfyui_dir: Option<String>,
    pub comfyui_version: Option<String>,
    pub dynamic_vram: Option<bool>,
    last_prompt: Option<u64>,
}

/// Everything a scan found.
#[derive(Debug, Clone, Default)]
pub struct Scanned {
    pub starts: Vec<StartSummary>,
    pub starts_total: u64,
    pub prompts: Vec<PromptSummary>,
    pub prompts_total: u64,
    pub prompt_counts: BTreeMap<String, u64>,
    pub tallies: Vec<SignatureHits>,
    /// Lines that only a ComfyUI log has.
    pub recognized: u64,
    /// A model was `prepared for dynamic VRAM loading` somewhere in the log.
    pub dynamic_loads: bool,
    /// Traceback frames outside a start: an exception was raised, even if the excerpt does
    /// not show which.
    pub frames_outside_startup: bool,
}

struct StartState {
    index: u64,
    line: u64,
    max_rank: u8,
    /// The start markers seen (bit per rank): a repeated one is the next start.
    seen: u32,
    facts: StartupFacts,
    ready: bool,
    closed: bool,
    prompts: u32,
    matched: Vec<String>,
    hits: Vec<&'static str>,
    argparse: bool,
    traceback: bool,
    dead: bool,
    launch: Option<LaunchArgs>,
    dir: Option<String>,
    startup_lines: u32,
    /// Every prompt so far passed.
    clean: bool,
    passed: u32,
    failed: u32,
}

impl StartState {
    fn new(index: u64, line: u64, rank: u8) -> Self {
        StartState {
            index,
            line,
            max_rank: rank,
            seen: rank_bit(rank),
            facts: StartupFacts::default(),
            ready: false,
            closed: false,
            prompts: 0,
            matched: Vec::new(),
            hits: Vec::new(),
            argparse: false,
            traceback: false,
            dead: false,
            launch: None,
            dir: None,
            startup_lines: 0,
            clean: true,
            passed: 0,
            failed: 0,
        }
    }

    fn up(&self) -> bool {
        self.ready || self.prompts > 0
    }

    /// Still starting: every line may be a startup fact.
    fn starting(&self) -> bool {
        !self.up() && !self.closed
    }
}

#[derive(Default)]
struct PromptState {
    /// A number for this prompt alone (rejected POSTs are recorded while it runs).
    serial: u64,
    /// Opened because the previous prompt ended with this one queued.
    from_queue: bool,
    /// Another POST arrived while it had logged nothing: it may have been refused silently
    /// (a 400 `no_prompt` logs only `got prompt`, `fixtures/captures/logs/server-run2.log`).
    later_posts: bool,
    start: Option<u64>,
    ordinal: Option<u32>,
    /// Every earlier prompt of its start passed (a failure on a later prompt then points at
    /// repetition, #15269).
    after_passes: bool,
    line: u64,
    implicit: bool,
    matched: Vec<(u64, String)>,
    hits: Vec<&'static str>,
    /// The first line of a signature that ends a prompt (a memory failure, or a CUDA error a
    /// memory feature causes): it stands for the exception when the log lost that.
    memory_hit: Option<String>,
    models: Vec<String>,
    /// The last `Requested to load` with nothing loaded after it: line, text, model, and the
    /// time the log stamped on it (when it has timestamps).
    pending_load: Option<(u64, String, String, Option<f64>)>,
    exception_during: Option<String>,
    exception: Option<(String, String)>,
    interrupted: bool,
    dead: Option<LoggedDeath>,
    content: bool,
    /// A traceback through ComfyUI's executor (`execution.py`) showed in it: its exception
    /// line is the prompt's error even when the `!!!` line is not in the excerpt.
    executor_traceback: bool,
}

impl PromptState {
    /// The exception it failed with, when the excerpt lost the `!!!` line that says it.
    fn failed_with(&mut self, ty: &str, msg: &str) {
        let msg = if msg.is_empty() { ty } else { msg };
        self.exception_during = Some(msg.to_string());
        self.exception = Some((ty.to_string(), msg.to_string()));
    }

    fn keep(&mut self, number: u64, text: &str) {
        if self.matched.len() < MAX_MATCHED && !self.matched.iter().any(|(n, _)| *n == number) {
            self.matched.push((number, clip(text)));
        }
    }
}

/// How a prompt or start came to an end.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    Executed(String),
    /// A new server start follows.
    Restart,
    /// `Stopped server` (Ctrl-C).
    Stopped,
    /// The log ends.
    Eof,
}

/// The line-by-line state machine.
#[derive(Default)]
pub struct State {
    current: Option<StartState>,
    starts: VecDeque<StartSummary>,
    starts_total: u64,
    open: Option<PromptState>,
    /// `got prompt` lines of prompts queued behind the running one.
    queue: VecDeque<u64>,
    recent: VecDeque<PromptSummary>,
    failed: Vec<PromptSummary>,
    prompts_total: u64,
    counts: BTreeMap<String, u64>,
    pending_launch: Option<LaunchArgs>,
    pending_dir: Option<String>,
    validation: Vec<String>,
    collecting_validation: bool,
    awaiting_exception: Option<u32>,
    tallies: Vec<SignatureHits>,
    recognized: u64,
    /// The last traceback's exception line (type, message, the line).
    raised: Option<(String, String, String)>,
    /// A refused prompt was recorded since the last `got prompt`.
    refused_since_post: bool,
    /// The log was printed by a command typed at a shell (`tail`, `Get-Content`…), found in
    /// its head: a shell prompt at its end is that command's, not ComfyUI's exit.
    pub viewed_by_a_command: bool,
    /// An exit reported before anything else of the log (the Desktop app's panel puts the
    /// exit code above the log it explains): it belongs to whatever the log then shows, a
    /// start or a prompt.
    exit_first: Option<(&'static Signature, String, u64)>,
    exit_first_seen: bool,
    /// Outputs failed validation: a finding once the prompt runs what is left (or the log
    /// ends), nothing more when ComfyUI then refuses the whole prompt (`invalid prompt`).
    ignored_outputs: Option<(&'static Signature, String, u64)>,
    /// A traceback's frames outside a start (where custom nodes that fail to import print
    /// theirs and ComfyUI goes on): an exception was raised.
    frames_outside_startup: bool,
    /// Frames read since the last `Traceback` header or exception line: 0 before a stack's
    /// outermost visible frame.
    frames_in_stack: u32,
    /// The old error dialog's header was read: its next line with text is the exception's
    /// message.
    popup_message_next: bool,
    /// Startup facts stated above the log's first start (an excerpt that begins inside
    /// one, below its start lines: `Device: …`, then `ComfyUI version`): that start's.
    head_facts: StartupFacts,
    head_lines: u32,
    opened: u64,
    /// The time stamped on the last line that had one (seconds, on the log's own clock).
    now: Option<f64>,
    /// A model was `prepared for dynamic VRAM loading`: Dynamic VRAM was on.
    dynamic_loads: bool,
    /// The line being read carries a time of its own.
    stamped: bool,
}

impl Sink for State {
    fn every_line(&self) -> bool {
        self.awaiting_exception.is_some()
            || self.collecting_validation
            || self.popup_message_next
            || self.in_head()
            || self
                .current
                .as_ref()
                .is_some_and(|s| s.starting() && s.startup_lines < STARTUP_LINES)
    }

    fn wants_bars(&self) -> bool {
        match &self.open {
            Some(p) => !p.content,
            None => self.bars_open_a_prompt(),
        }
    }

    fn line(&mut self, raw: &[u8], number: u64, before: &Before<'_>) {
        // A bar redrawn inside a running prompt (most of a log's bar lines) says only that the
        // prompt is at work: no need to decode it.
        if let Some(p) = self.open.as_mut()
            && only_a_bar(visible(raw))
        {
            p.content = true;
            return;
        }
        let t = crate::classify::normalize::timestamp_secs(raw);
        self.stamped = t.is_some();
        if t.is_some() {
            self.now = t;
        }
        let text = self.text(raw);
        self.observe(&text, number, before);
    }

    fn text<'r>(&self, raw: &'r [u8]) -> Cow<'r, str> {
        // Only the last segment of a tqdm bar is what a terminal shows (and what `normalize`
        // keeps): decode just that.
        let decoded = String::from_utf8_lossy(visible(raw));
        let normalized = normalize(&decoded);
        let unglued = match unglue(&normalized.text) {
            Cow::Owned(s) => Some(s),
            Cow::Borrowed(_) => None,
        };
        Cow::Owned(unglued.unwrap_or(normalized.text))
    }
}

/// Removes the timestamps some ComfyUI-Manager versions glue into the middle and end of lines
/// (`Prompt executed in 3.21 seconds2025-01-16T20:49:52.176503 - `): they time-stamp every
/// write, and `print` writes its parts separately.
fn unglue(text: &str) -> Cow<'_, str> {
    static RE: OnceLock<Regex> = OnceLock::new();
    if !text.contains(" - ") {
        return Cow::Borrowed(text);
    }
    let re = RE.get_or_init(|| Regex::new(super::joins::GLUED).expect("timestamp regex"));
    let out = re.replace_all(text, "");
    match out {
        Cow::Borrowed(_) => Cow::Borrowed(text),
        Cow::Owned(s) => Cow::Owned(s.trim_end().to_string()),
    }
}

/// Memory errors that a prompt can log and still finish (TensorRT's allocator, comfy-aimdo's
/// error lines): the classifier weighs those against the success.
fn succeeds_despite(hit: &str) -> bool {
    // comfy-aimdo logs its errors and carries on (`aimdo: …:ERROR: hostbuf_grow …`).
    if hit.starts_with("aimdo: ") {
        return true;
    }
    catalogue::match_line(hit)
        .all(|s| matches!(s.outcome, Outcome::TensorrtAllocator | Outcome::AimdoFault))
}

/// A start marker's bit in [`StartState::seen`] (`u8::MAX` is the ready line, not a marker).
fn rank_bit(rank: u8) -> u32 {
    if rank < 32 { 1 << rank } else { 0 }
}

/// A traceback frame in ComfyUI's or PyTorch's code: enough to read a pasted fragment.
fn comfy_or_torch_frame(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("File \"")
        && t.contains("\", line ")
        && ["comfy", "ComfyUI", "torch", "execution.py", "nodes.py"]
            .iter()
            .any(|w| t.contains(w))
}

/// A tqdm bar and nothing after it (trailing blanks and colour codes aside), from its raw bytes.
fn only_a_bar(raw: &[u8]) -> bool {
    let mut end = raw;
    loop {
        end = end.trim_ascii_end();
        // A closing colour code: `ESC [ digits/; m`.
        match end.iter().rposition(|&b| b == 0x1b) {
            Some(i)
                if end.len() - i >= 3
                    && end[i + 1] == b'['
                    && end[end.len() - 1] == b'm'
                    && end[i + 2..end.len() - 1]
                        .iter()
                        .all(|b| b.is_ascii_digit() || *b == b';') =>
            {
                end = &end[..i];
            }
            _ => break,
        }
    }
    end.ends_with(b"it/s]") || end.ends_with(b"s/it]")
}

/// A frame of ComfyUI's executor running a prompt (not its import, nor the validation of a
/// POST whose traceback an `Error handling request` line heads): its node frames, the
/// executor's own loop (`execute_async`, whose uncaught exception kills the prompt worker
/// thread). `main.py`'s `prompt_worker` alone is not: it also runs after a prompt ended
/// (`q.task_done(…)`).
fn executor_frame(text: &str) -> bool {
    let t = text.trim_end();
    t.contains("execution.py\", line ")
        && [
            " in execute",
            " in execute_async",
            " in recursive_execute",
            " in get_output_data",
            " in map_node_over_list",
            " in _map_node_over_list",
            " in _async_map_node_over_list",
            " in process_inputs",
        ]
        .iter()
        .any(|f| t.ends_with(f))
}

/// A frame of code that runs only in a prompt, outside an import: a node's function (in
/// `custom_nodes`, ComfyUI-Manager's aside: it runs its own threads and routes) or the
/// model's and sampler's code.
fn prompt_code_frame(text: &str) -> bool {
    let t = text.trim();
    if !t.starts_with("File \"") || import_time_frame(t) {
        return false;
    }
    // A traceback's frame (`line 20, in f`), outermost first; not a faulthandler dump's
    // (`line 20 in f`), innermost first.
    let Some((path, rest)) = t["File \"".len()..].split_once('"') else {
        return false;
    };
    if !rest.split_once(", in ").is_some_and(|(line, _)| {
        line.trim_start_matches(", line ")
            .bytes()
            .all(|b| b.is_ascii_digit())
    }) {
        return false;
    }
    let path = path.replace('\\', "/");
    let lower = path.to_ascii_lowercase();
    if lower.contains("/custom_nodes/") {
        return !lower.contains("manager") && !lower.ends_with("/__init__.py");
    }
    [
        "/comfy/ldm/",
        "/comfy/k_diffusion/",
        "/comfy/samplers.py",
        "/comfy/sample.py",
        "/comfy/model_base.py",
        "/comfy/sd.py",
        "/comfy/sd1_clip.py",
        "/comfy/text_encoders/",
        "/comfy_extras/",
    ]
    .iter()
    .any(|w| path.contains(w))
}

/// A frame of code run while ComfyUI starts: a module's top level (`in <module>`; after a
/// `,` in a traceback, without one in a faulthandler stack) or ComfyUI's custom-node loader
/// (`nodes.py`).
fn import_time_frame(text: &str) -> bool {
    let t = text.trim_end();
    [
        " in <module>",
        " in load_custom_node",
        " in init_external_custom_nodes",
        " in init_extra_nodes",
        " in init_builtin_extra_nodes",
    ]
    .iter()
    .any(|f| t.ends_with(f))
}

/// `Total VRAM …` again right after the `[Prompt Server] web root` line of a start that has
/// not failed: ComfyUI 0.3.7x and 0.4 print the device block a second time there (its memory
/// module imported twice), in the same start.
fn repeated_device_block(s: &StartState, before: &Before<'_>) -> bool {
    s.starting()
        && !(s.traceback || s.dead || s.argparse)
        && before
            .last(1)
            .first()
            .is_some_and(|prev| normalize(prev).text.contains("[Prompt Server] web root: "))
}

/// Shortens a line for keeping (at a character boundary).
fn clip(text: &str) -> String {
    let t = text.trim_end();
    match t.char_indices().nth(MAX_TEXT) {
        Some((i, _)) => format!("{}…", &t[..i]),
        None => t.to_string(),
    }
}

/// How a prompt that did not reach `Prompt executed` ended, as far as the log shows.
#[derive(Debug, Default)]
struct Ended {
    /// Stopped after minutes of silence at a load: the known hang.
    hang: bool,
    /// The log ends during a load.
    loading_at_end: bool,
    /// The log ends before the prompt did: no outcome.
    unended: Unended,
    explanation: Option<String>,
}

/// Whether a prompt has no outcome: the log ends before it did.
#[derive(Debug, Default, Clone, Copy)]
struct Unended {
    incomplete: bool,
    /// Inside the traceback of the prompt's failure, before its exception line.
    error_cut: bool,
}

/// What decides how an unfinished prompt ended: the line that ended it and what came before.
struct Unfinished<'a, 'b> {
    end: &'a End,
    tail: &'a [String],
    before: &'a Before<'b>,
    stalled_for: Option<f64>,
}

/// The `!!!` line is the exception that ended the prompt; a traceback's first exception line
/// may be a chained cause (`During handling of the above exception…`), so a memory error on
/// the `!!!` line wins.
fn error_end(p: &PromptState) -> Option<PromptEnd> {
    let during = p.exception_during.as_ref()?;
    let is_memory = |t: &str| catalogue::match_line(t).any(|s| s.outcome.is_memory());
    let (ty, msg) = match &p.exception {
        Some((ty, msg)) if !is_memory(during) || msg.trim() == during.trim() => {
            (ty.clone(), msg.clone())
        }
        _ => ("Exception during processing".to_string(), during.clone()),
    };
    Some(PromptEnd::Error {
        node_id: None,
        node_type: None,
        exception_type: ty,
        exception_message: msg,
    })
}

/// A memory error line with no `!!! Exception` around it (a pasted part, or a log format that
/// lost it): the error line stands for the exception.
fn memory_end(p: &PromptState) -> Option<PromptEnd> {
    p.memory_hit.as_ref().map(|hit| PromptEnd::Error {
        node_id: None,
        node_type: None,
        exception_type: hit.clone(),
        exception_message: String::new(),
    })
}

/// How a prompt followed by `Prompt executed in …` ended.
fn executed_end(p: &PromptState) -> PromptEnd {
    match error_end(p) {
        Some(e) => e,
        None if p.interrupted => PromptEnd::Interrupted { node_id: None },
        None => match &p.memory_hit {
            Some(hit) if !succeeds_despite(hit) => memory_end(p).expect("a hit"),
            _ => PromptEnd::Success,
        },
    }
}

/// How a prompt ended that was cut off: by an error, a kill or crash line, a stop, a restart,
/// or the end of the log (while loading: maybe the known hang). Fills `obs` for the
/// classifier.
fn unfinished(p: &PromptState, how: &Unfinished, obs: &mut PromptObservation) -> Ended {
    let mut ended = Ended::default();
    if let Some(e) = error_end(p) {
        obs.end = Some(e);
    } else if let Some(death) = p.dead {
        // The log cannot show an exit status; the kill or crash line says how it ended.
        obs.died = Some(death);
        obs.log.extend(how.tail.iter().cloned());
    } else if let Some(e) = memory_end(p) {
        // A pasted error, or a log cut right after it: the error line speaks for it.
        obs.end = Some(e);
    } else if p.executor_traceback && *how.end == End::Eof {
        // The executor's frames say the prompt failed; what with is past the end.
        ended.unended.incomplete = true;
        ended.unended.error_cut = true;
        ended.explanation = Some("this prompt failed: ComfyUI's executor printed a traceback, but the log ends before the exception line that says what failed".into());
    } else if let Some((_, line, _, _)) = &p.pending_load
        && !sampled_after(how.before, line)
        && (*how.end == End::Eof || how.stalled_for.is_some_and(|s| s >= HANG_SECONDS))
    {
        // A log that ends here ends where the known hang stops, and where any paste copied
        // during a load ends: only a clock can tell them apart. Stopped or restarted after
        // minutes of silence by the log's own timestamps, it hung.
        ended.hang = *how.end != End::Eof;
        obs.stalled = ended.hang;
        obs.log.push(line.clone());
        obs.log.extend(how.tail.iter().cloned());
        if !ended.hang {
            ended.unended.incomplete = true;
            ended.loading_at_end = true;
        }
    } else if p.interrupted {
        obs.end = Some(PromptEnd::Interrupted { node_id: None });
    } else {
        match how.end {
            End::Restart => {
                obs.died = Some(LoggedDeath::Restarted);
                obs.log.extend(how.tail.iter().cloned());
            }
            End::Stopped => {
                obs.interrupted_by_user = true;
                ended.explanation = Some(match (&p.pending_load, how.stalled_for) {
                    (Some((_, _, model, _)), None) => format!(
                        "ComfyUI was stopped (Ctrl-C) while it was loading {model}; the log has no timestamps to say for how long (minutes of silence after 'Requested to load' would be the known hang at load, #13730)"
                    ),
                    (Some((_, _, model, _)), Some(s)) => format!(
                        "ComfyUI was stopped (Ctrl-C) {s:.0} s after 'Requested to load {model}': too soon to call it a hang"
                    ),
                    _ => "ComfyUI was stopped (Ctrl-C) while this prompt ran".into(),
                });
            }
            _ => ended.unended.incomplete = true,
        }
    }
    ended
}

/// What logscan says of one prompt: how it ended, `None` when the log ends before it did,
/// and what shows it.
struct Reading {
    outcome: Option<Outcome>,
    evidence: Vec<String>,
    signatures: Vec<&'static str>,
    explanation: Option<String>,
    /// The log ends inside the traceback of the prompt's failure, before its exception line.
    error_cut: bool,
}

impl From<Classification> for Reading {
    fn from(v: Classification) -> Reading {
        Reading {
            outcome: Some(v.outcome),
            evidence: v.evidence,
            signatures: v.signatures,
            explanation: v.explanation,
            error_cut: false,
        }
    }
}

/// A prompt the log ends in: no outcome, and why.
fn incomplete_reading(
    model: Option<&str>,
    loading_at_end: bool,
    error_cut: bool,
    tail: &[String],
) -> Reading {
    let explanation = match (model, loading_at_end) {
        (Some(model), true) => format!(
            "the log ends after 'Requested to load {model}', before it loaded. The known hang at load (#13730) stops here too, but so does any log copied while a model loads: it is a hang if ComfyUI was still running minutes later with nothing more in its log and the prompt still in the queue, or if timestamps show minutes of silence after this line"
        ),
        _ => "the log ends while this prompt runs: it was still running when the log was copied, or ComfyUI stopped without a word".into(),
    };
    Reading {
        outcome: None,
        evidence: tail.iter().rev().take(3).rev().cloned().collect(),
        signatures: Vec::new(),
        explanation: Some(explanation),
        error_cut,
    }
}

impl State {
    fn observe(&mut self, text: &str, number: u64, before: &Before<'_>) {
        if let Some(s) = self.current.as_mut()
            && s.starting()
        {
            s.startup_lines += 1;
        }
        self.awaiting_exception_line(text, number);
        if self.collecting_validation {
            if self.validation.len() < 8 {
                self.validation.push(clip(text.trim()));
            }
            if text.starts_with("Output will be ignored") || text.starts_with("invalid prompt") {
                self.collecting_validation = false;
            }
        }
        let kind = lines::marker(text).map(|m| m.kind);
        if self.popup_message_next && !text.trim().is_empty() {
            self.popup_message_next = false;
            if kind.is_none() {
                self.exception_during(text.trim(), number);
            }
        }
        if let Some(kind) = kind {
            self.on_marker(kind, text, number, before);
        }
        self.signatures_of(kind, text, number, before);
        if comfy_or_torch_frame(text) {
            self.recognized += 1;
        }
        if self.in_head() {
            self.head_facts.observe(text);
            self.head_lines += 1;
        }
        // Startup facts, while the server starts (and its ready line).
        if let Some(s) = self.current.as_mut()
            && (s.starting() || kind == Some(Kind::Ready))
            && !s.ready
        {
            s.facts.observe(text);
            if s.facts.ready {
                s.ready = true;
            }
        }
    }

    /// A traceback's exception line: the first unindented line that looks like one, within
    /// a few lines of the `Traceback` header.
    fn awaiting_exception_line(&mut self, text: &str, number: u64) {
        let Some(left) = self.awaiting_exception else {
            return;
        };
        let Some((ty, msg)) =
            lines::exception_line(text).filter(|_| !text.starts_with("Traceback"))
        else {
            self.awaiting_exception = left.checked_sub(1);
            return;
        };
        self.awaiting_exception = None;
        self.frames_in_stack = 0;
        // With chained exceptions (`During handling of the above exception, another exception
        // occurred:`) the first traceback is the cause; the one raised is the one the `!!!`
        // line names, else the last.
        if let Some(p) = self.open.as_mut()
            && let Some(during) = &p.exception_during
            && p.exception.as_ref().is_none_or(|(_, m)| m != during)
        {
            p.exception = Some((ty.to_string(), msg.to_string()));
            p.keep(number, text);
        }
        self.raised = Some((ty.to_string(), msg.to_string(), clip(text)));
        if let Some(p) = self.open.as_mut()
            && p.executor_traceback
            && p.exception_during.is_none()
        {
            p.failed_with(ty, msg);
            p.keep(number, text);
        }
        if let Some(s) = self.current.as_mut()
            && s.starting()
            && s.matched.len() < MAX_MATCHED
        {
            s.matched.push(clip(text));
        }
    }

    /// What one of ComfyUI's structural lines changes: server starts, prompts, loads,
    /// tracebacks, the launch flags and the install folder.
    fn on_marker(&mut self, kind: Kind, text: &str, number: u64, before: &Before<'_>) {
        match kind {
            Kind::Start { rank } => {
                self.recognized += 1;
                self.start_marker(rank, number, before);
                // argparse prints its usage only when it refuses the flags (or for --help):
                // the start ends there, even when the `error:` line is cut off.
                if rank == 0
                    && let Some(s) = self.current.as_mut()
                {
                    s.dead = true;
                }
                self.exit_explains_the_start(before);
            }
            Kind::Announce => self.announce(text, number, before),
            Kind::Ready => {
                self.recognized += 1;
                if self.current.as_ref().is_none_or(|s| s.closed) {
                    self.new_start(number, u8::MAX, before);
                }
            }
            Kind::Stopped => {
                self.end_prompt(End::Stopped, number, before);
                if let Some(s) = self.current.as_mut() {
                    s.closed = true;
                }
            }
            Kind::GotPrompt => self.got_prompt(number),
            Kind::Executed => {
                // Every output it was asked for was refused and nothing ran: the prompt was
                // refused in all but name.
                if self.ignored_outputs.is_some() && self.open.as_ref().is_none_or(|p| !p.content) {
                    self.recognized += 1;
                    self.rejected(true, "Output will be ignored", number);
                    return;
                }
                self.outputs_were_ignored();
                self.executed(text, number, before)
            }
            Kind::InvalidPrompt | Kind::RequestError => {
                if kind == Kind::InvalidPrompt {
                    self.recognized += 1;
                }
                // The frontend's popup of a refusal the console already showed (pasted together).
                if text.starts_with("Prompt outputs failed validation") && self.refused_since_post {
                    return;
                }
                self.rejected(kind == Kind::InvalidPrompt, text, number);
            }
            Kind::FailedValidation => {
                self.recognized += 1;
                self.validation = vec![clip(text)];
                self.collecting_validation = true;
            }
            Kind::RequestedToLoad => self.requested_to_load(text, number),
            Kind::Loaded => {
                self.recognized += 1;
                if text.contains("prepared for dynamic VRAM loading") {
                    self.dynamic_loads = true;
                }
                // A model loads only for a prompt: after `Prompt executed` it is the next
                // one's (queued earlier, so its `got prompt` came before).
                if self.open.is_some() || self.current.as_ref().is_none_or(|s| s.up()) {
                    let p = self.prompt_for_line(number);
                    // lowvram's per-module lines come while the load runs, before its end.
                    if !text.starts_with("lowvram: loaded module regularly ") {
                        p.pending_load = None;
                    }
                    p.content = true;
                }
            }
            Kind::Traceback => {
                self.awaiting_exception = Some(TRACEBACK_LINES);
                self.frames_in_stack = 0;
                if let Some(s) = self.current.as_mut()
                    && s.starting()
                {
                    s.traceback = true;
                    if s.matched.len() < MAX_MATCHED {
                        s.matched.push(clip(text));
                    }
                }
            }
            Kind::Frame => self.frame(text, number, before),
            Kind::ExceptionDuring => self.exception_during(text, number),
            Kind::ReportException => {
                let msg = text
                    .split_once("Exception Message:")
                    .map_or(text, |(_, m)| m.trim_start_matches("**").trim());
                // The frontend's own report of a prompt ComfyUI refused.
                if msg.starts_with("Prompt outputs failed validation") {
                    self.recognized += 1;
                    self.rejected(true, msg, number);
                } else {
                    self.exception_during(msg, number);
                }
            }
            // A sampler's bar runs only inside a prompt: once the server is up, or after a
            // prompt in an excerpt with no start, it is a prompt at work (its `got prompt` may
            // be elsewhere: a front end that hides it, a paste that begins later). Not while
            // ComfyUI starts or before it: downloads draw bars too (an excerpt of bars alone
            // is read at its end, as a node at work).
            Kind::Progress => {
                if self.open.is_some() || self.bars_open_a_prompt() {
                    self.prompt_for_line(number).content = true;
                }
            }
            Kind::PopupNode => {
                self.recognized += 1;
                let p = self.prompt_for_line(number);
                p.content = true;
                p.keep(number, text);
                self.popup_message_next = true;
            }
            Kind::Interrupted => self.interrupted(text, number),
            Kind::LaunchArgs => self.launch_args(text, number),
            Kind::InstallPath => {
                if let Some(dir) = lines::install_dir(text) {
                    match self.current.as_mut() {
                        Some(s) if s.starting() => {
                            s.dir.get_or_insert(dir);
                        }
                        _ => self.pending_dir = Some(dir),
                    }
                }
            }
        }
    }

    /// Above the log's first start and prompt, within a start's length of its top.
    fn in_head(&self) -> bool {
        self.starts_total == 0
            && self.open.is_none()
            && self.prompts_total == 0
            && self.head_lines < HEAD_LINES
    }

    /// A traceback frame (`File "…", line N, in f`, or a faulthandler dump's): a prompt
    /// failing when it is the executor's or a prompt's code, a start failing when it is code
    /// run at import with nothing before it.
    fn frame(&mut self, text: &str, number: u64, before: &Before<'_>) {
        // A stack without its header (an excerpt that starts inside it) still ends in
        // its exception line, close below its last frame.
        self.awaiting_exception = Some(
            self.awaiting_exception
                .map_or(HEADLESS_TRACEBACK_LINES, |l| {
                    l.max(HEADLESS_TRACEBACK_LINES)
                }),
        );
        let starting = self.current.as_ref().is_some_and(|s| s.starting());
        if !starting {
            self.frames_outside_startup = true;
        }
        let outermost = self.frames_in_stack == 0;
        self.frames_in_stack = self.frames_in_stack.saturating_add(1);
        // A stack whose outermost visible frame is a node's or the model's code (a
        // pasted tail, its executor frames cut off): only a prompt runs that code
        // outside an import, so a prompt was running and failed with the exception
        // at the stack's end.
        if !starting
            && outermost
            && self.open.is_none()
            && self.current.as_ref().is_none_or(|s| s.up())
            && prompt_code_frame(text)
        {
            let p = self.prompt_for_line(number);
            p.content = true;
            p.executor_traceback = true;
        }
        // ComfyUI's executor in the stack (not its import): a prompt was running, and
        // the exception at the stack's end is what it failed with.
        if !starting && executor_frame(text) {
            let p = self.prompt_for_line(number);
            p.content = true;
            p.executor_traceback = true;
        }
        // Code run at import (`in <module>`, `,` before `in` in a traceback, none in
        // a faulthandler dump) with no start and no prompt before it: ComfyUI was
        // starting.
        if import_time_frame(text)
            && self.current.is_none()
            && self.open.is_none()
            && self.prompts_total == 0
        {
            self.new_start(number, 0, before);
            if let Some(s) = self.current.as_mut() {
                s.traceback = true;
                s.matched.push(clip(text));
            }
            // A fatal error whose stack this is (faulthandler prints the error, then
            // the stack): the start is what died.
            self.exit_explains_the_start(before);
        }
    }

    /// Whether a bar, with no prompt open, is one: once the server is up, or after a prompt
    /// in an excerpt with no start.
    fn bars_open_a_prompt(&self) -> bool {
        match &self.current {
            Some(s) => s.up(),
            None => self.prompts_total > 0,
        }
    }

    /// `got prompt`: a prompt starts, or waits its turn behind the one running.
    /// A line only a start prints.
    fn announce(&mut self, text: &str, number: u64, before: &Before<'_>) {
        // `docker compose up`'s `Attaching to comfyui-1, db-1`, not any sentence.
        if let Some(names) = text.strip_prefix("Attaching to ")
            && !lines::container_names(names)
        {
            return;
        }
        self.recognized += 1;
        if self.current.as_ref().is_none_or(|s| !s.starting()) {
            self.new_start(number, 0, before);
        }
        self.exit_explains_the_start(before);
    }

    /// `Processing interrupted`, or the server's `Interrupting prompt` (which, with no prompt
    /// running, raced the end of one: nothing to interrupt).
    fn interrupted(&mut self, text: &str, number: u64) {
        if text.starts_with("Interrupting prompt") && self.open.is_none() {
            self.recognized += 1;
            return;
        }
        let p = self.prompt_for_line(number);
        p.content = true;
        p.interrupted = true;
        p.keep(number, text);
    }

    fn got_prompt(&mut self, number: u64) {
        self.recognized += 1;
        self.raised = None;
        self.refused_since_post = false;
        self.validation.clear();
        self.server_is_up();
        if let Some(p) = self.open.as_mut() {
            if !p.content {
                p.later_posts = true;
            }
            if self.queue.len() >= 10_000 {
                self.queue.pop_front();
            }
            self.queue.push_back(number);
        } else {
            self.open_prompt(number, false);
        }
    }

    /// `Prompt executed in …`: the prompt ends (ComfyUI prints it after failed and interrupted
    /// prompts too), and a queued one starts.
    fn executed(&mut self, text: &str, number: u64, before: &Before<'_>) {
        self.recognized += 1;
        // A crash line held as if it were reported above the log, then `Prompt executed`:
        // ComfyUI outlived it (a child process crashed), so it is that prompt's finding.
        if let Some((sig, line, at)) = self.exit_first.take() {
            if self.open.is_none() {
                self.open_prompt(at, true);
            }
            self.signature(sig, &line, at, before);
        }
        if self.open.is_none() {
            self.open_prompt(number, true);
        }
        // A traceback's exception line right above `Prompt executed`, in a prompt whose start
        // the excerpt lost (with it, the `!!!` line would be there): what the prompt failed
        // with. A node that caught its error and went on would have logged more after it.
        let just_above = self.raised_just_before(before, 1);
        if let Some((ty, msg, _)) = self.raised.take()
            && just_above
            && let Some(p) = self.open.as_mut()
            && p.implicit
            && p.exception_during.is_none()
        {
            p.failed_with(&ty, &msg);
        }
        let took = lines::executed_in(text).unwrap_or("").to_string();
        self.end_prompt(End::Executed(took), number, before);
        if let Some(next) = self.queue.pop_front() {
            self.open_prompt(next, false);
            if let Some(p) = self.open.as_mut() {
                p.from_queue = true;
            }
        }
    }

    /// `Requested to load X`: the prompt's models, and the load a hang would stop at.
    fn requested_to_load(&mut self, text: &str, number: u64) {
        self.recognized += 1;
        let now = self.now;
        let p = self.prompt_for_line(number);
        p.content = true;
        if let Some(model) = lines::requested_model(text) {
            if p.models.last().map(String::as_str) != Some(model) {
                if p.models.len() == 4 {
                    p.models.remove(0);
                }
                p.models.push(model.to_string());
            }
            p.pending_load = Some((number, clip(text), model.to_string(), now));
        }
    }

    /// `!!! Exception during processing !!!`: the exception the prompt failed with.
    fn exception_during(&mut self, text: &str, number: u64) {
        self.recognized += 1;
        let p = self.prompt_for_line(number);
        p.content = true;
        let msg = text
            .trim_start_matches("!!! Exception during processing !!!")
            .trim_start_matches("!!! Exception during processing!!!")
            .trim()
            .to_string();
        // Kept without the banner: it is the exception's own text, which the traceback's last
        // line repeats (and the evidence then shows once).
        p.keep(number, &msg);
        if p.exception_during.is_none() {
            p.exception_during = Some(msg);
        }
    }

    /// A line that shows the launch flags (an echoed command line, `** Launch args:`).
    fn launch_args(&mut self, text: &str, number: u64) {
        let Some(args) = lines::launch_args(text) else {
            return;
        };
        let found = LaunchArgs {
            args,
            source: clip(text),
            line: number,
        };
        match self.current.as_mut() {
            Some(s) if s.starting() => {
                if s.launch.is_none() {
                    s.launch = Some(found);
                }
            }
            _ => self.pending_launch = Some(found),
        }
    }

    /// Failure signatures, on every line that is not purely structural.
    fn signatures_of(&mut self, kind: Option<Kind>, text: &str, number: u64, before: &Before<'_>) {
        let structural = matches!(
            kind,
            Some(
                Kind::Start { .. }
                    | Kind::Announce
                    | Kind::Ready
                    | Kind::Stopped
                    | Kind::GotPrompt
                    | Kind::Executed
                    | Kind::RequestedToLoad
                    | Kind::Loaded
                    | Kind::Traceback
                    | Kind::Interrupted
            )
        );
        // A traceback's frames quote source code (`raise MemoryError("VBAR allocation
        // failed")`): not what happened, only where.
        let frame = self.awaiting_exception.is_some() && text.starts_with(char::is_whitespace);
        if structural || frame {
            return;
        }
        // Every signature a line shows, but one per outcome: the catalogue lists the specific
        // form first (`Allocation on device` before any `OutOfMemoryError`).
        let mut seen: Vec<&'static str> = Vec::new();
        for sig in catalogue::match_line(text) {
            let covered = SUBSUMED.iter().any(|(general, specific)| {
                *general == sig.id && specific.iter().any(|s| seen.contains(s))
            });
            if !covered {
                seen.push(sig.id);
                self.signature(sig, text, number, before);
            }
        }
    }

    fn signature(&mut self, sig: &'static Signature, text: &str, number: u64, before: &Before<'_>) {
        if !GENERIC.contains(&sig.id) {
            self.recognized += 1;
        }
        // A startup error with no start before it (a pasted excerpt): it is one.
        if sig.phase == Phase::Startup && self.current.is_none() && self.open.is_none() {
            self.new_start(number, 0, before);
        }
        // Outputs that failed validation are the session's finding, not a prompt's end: the
        // prompt runs what is left (or is refused by an `invalid prompt` line of its own).
        if sig.id == "outputs_ignored" {
            self.ignored_outputs = Some((sig, clip(text), number));
            return;
        }
        // An exception no prompt caught, then the process ended: the executor catches what a
        // node raises, so an exception that ends the process was raised while it started
        // (`RuntimeError: No CUDA GPUs are available` relayed by a front end that then reports
        // the backend's exit).
        if matches!(sig.id, "process_exited" | "killed")
            && self.current.is_none()
            && self.open.is_none()
            && self.prompts_total == 0
            && self.raised_just_before(before, 3)
        {
            self.new_start(number, 0, before);
            if let Some(s) = self.current.as_mut() {
                s.traceback = true;
                if let Some((_, _, line)) = &self.raised {
                    s.matched.push(line.clone());
                }
            }
        }
        let starting = self.current.as_ref().is_some_and(|s| s.starting());
        // The launcher's pause or exit line after a clean stop, or between prompts, is no
        // prompt's end. In a fragment with neither a start nor a prompt before it, the lines
        // before it were a node at work (a custom node building a TensorRT engine).
        let fragment = self.current.is_none() && self.prompts_total == 0;
        // faulthandler's stack heading under the fatal error already held: one event, whose
        // frames say what was running.
        if fragment
            && self.open.is_none()
            && sig.id == "fatal_python_error"
            && self
                .exit_first
                .as_ref()
                .is_some_and(|(s, _, _)| s.id == sig.id)
        {
            return;
        }
        if fragment
            && self.open.is_none()
            && self.recognized == 0
            && !self.exit_first_seen
            && matches!(sig.id, "process_exited" | "killed" | "fatal_python_error")
        {
            self.exit_first = Some((sig, text.to_string(), number));
            self.exit_first_seen = true;
            return;
        }
        // The same for a kill while ComfyUI was idle (`docker compose stop` ends a Python
        // that ignores SIGTERM with `exited with code 137`): no prompt died.
        if matches!(sig.id, "process_exited" | "killed")
            && self.open.is_none()
            && !starting
            && !fragment
        {
            return;
        }
        if starting || (sig.phase == Phase::Startup && self.open.is_none()) {
            if let Some(s) = self.current.as_mut() {
                if !s.hits.contains(&sig.id) {
                    s.hits.push(sig.id);
                }
                s.argparse |= sig.outcome == Outcome::FlagRejected;
                s.dead |= matches!(
                    sig.id,
                    "killed" | "oom_killer" | "fatal_python_error" | "process_exited"
                );
                if s.matched.len() < MAX_MATCHED {
                    s.matched.push(clip(text));
                }
            }
            self.tally(sig, text, number, None);
            return;
        }
        let p = self.prompt_for_line(number);
        p.content = true;
        p.keep(number, text);
        if !p.hits.contains(&sig.id) {
            p.hits.push(sig.id);
        }
        if sig.ends_a_prompt() && p.memory_hit.is_none() {
            p.memory_hit = Some(clip(text));
        }
        match sig.id {
            "oom_killer" => p.dead = Some(LoggedDeath::OomKiller),
            "killed" if p.dead.is_none() => p.dead = Some(LoggedDeath::Killed),
            "fatal_python_error" if p.dead.is_none() => p.dead = Some(LoggedDeath::NativeCrash),
            "process_exited" if p.dead.is_none() => p.dead = Some(LoggedDeath::Exited),
            _ => {}
        }
        let at = (
            p.ordinal.map(|o| if p.after_passes { o } else { 1 }),
            p.serial,
        );
        self.tally(sig, text, number, Some(at));
    }

    /// Counts a signature where it showed (in which prompt, at which place after its server
    /// start), with the setup it showed in.
    fn tally(
        &mut self,
        sig: &'static Signature,
        text: &str,
        number: u64,
        prompt: Option<(Option<u32>, u64)>,
    ) {
        let (launch, dir, version, dynamic) = match &self.current {
            Some(s) => (
                s.launch.as_ref().map(|l| l.args.clone()),
                s.dir.clone(),
                s.facts.comfyui_version.clone(),
                s.facts.dynamic_vram,
            ),
            None => (None, None, None, None),
        };
        let i = match self.tallies.iter().position(|t| t.signature.id == sig.id) {
            Some(i) => i,
            None => {
                self.tallies.push(SignatureHits {
                    signature: sig,
                    lines: 0,
                    prompts: 0,
                    first_line: number,
                    last_line: number,
                    example: clip(text),
                    min_ordinal: None,
                    launch_args: None,
                    comfyui_dir: None,
                    comfyui_version: None,
                    dynamic_vram: None,
                    last_prompt: None,
                });
                self.tallies.len() - 1
            }
        };
        let t = &mut self.tallies[i];
        t.lines += 1;
        t.last_line = number;
        // The example says what happened, not a heading before it.
        if classify::says_little(&t.example) && !classify::says_little(text) {
            t.example = clip(text);
        }
        if let Some((ordinal, serial)) = prompt {
            if t.last_prompt != Some(serial) {
                t.prompts += 1;
                t.last_prompt = Some(serial);
            }
            if let Some(o) = ordinal {
                t.min_ordinal = Some(t.min_ordinal.map_or(o, |m| m.min(o)));
            }
        }
        if launch.is_some() {
            t.launch_args = launch;
        }
        if dir.is_some() {
            t.comfyui_dir = dir;
        }
        if version.is_some() {
            t.comfyui_version = version;
        }
        if dynamic.is_some() {
            t.dynamic_vram = dynamic;
        }
    }

    /// The prompt a prompt-time line belongs to (one that began before the log, if none is
    /// open).
    fn prompt_for_line(&mut self, number: u64) -> &mut PromptState {
        if self.open.is_none() {
            self.open_prompt(number, true);
        }
        self.open.as_mut().expect("a prompt is open")
    }

    fn open_prompt(&mut self, line: u64, implicit: bool) {
        if !implicit {
            self.server_is_up();
        }
        let (start, ordinal, after_passes) = match self.current.as_mut() {
            Some(s) if !s.closed => {
                s.prompts += 1;
                (Some(s.index), Some(s.prompts), s.clean)
            }
            _ => (None, None, false),
        };
        self.opened += 1;
        self.open = Some(PromptState {
            serial: self.opened,
            start,
            ordinal,
            after_passes,
            line,
            implicit,
            ..Default::default()
        });
    }

    /// A prompt arrived: the server is up even if its ready line is missing
    /// (`--dont-print-server`).
    fn server_is_up(&mut self) {
        if let Some(s) = self.current.as_mut()
            && !s.ready
            && !s.closed
        {
            s.facts.finish();
            s.ready = true;
        }
    }

    fn start_marker(&mut self, rank: u8, number: u64, before: &Before<'_>) {
        // Launchers print the startup block in different orders (the portable build with
        // ComfyUI-Manager logs `Total VRAM` before `[START] Security scan`): an earlier marker
        // starts a new server only when this start already showed it, or when this start
        // had already failed.
        let new = match &self.current {
            None => true,
            Some(s) => {
                s.up()
                    || s.closed
                    || (s.seen & rank_bit(rank) != 0 && !repeated_device_block(s, before))
                    || (rank < s.max_rank && (s.traceback || s.dead || s.argparse))
            }
        };
        if new {
            self.new_start(number, rank, before);
        } else if let Some(s) = self.current.as_mut() {
            s.max_rank = s.max_rank.max(rank);
            s.seen |= rank_bit(rank);
        }
    }

    fn new_start(&mut self, number: u64, rank: u8, before: &Before<'_>) {
        self.end_start(End::Restart, number, before);
        let head = self.in_head();
        self.starts_total += 1;
        let mut s = StartState::new(self.starts_total, number, rank);
        if head {
            s.facts = std::mem::take(&mut self.head_facts);
        }
        s.launch = self.pending_launch.take();
        s.dir = self.pending_dir.take();
        self.current = Some(s);
        self.queue.clear();
    }

    /// A POST was refused: the last `got prompt` never ran.
    fn rejected(&mut self, bad_request: bool, text: &str, number: u64) {
        self.refused_since_post = true;
        let line = if let Some(line) = self.queue.pop_back() {
            line
        } else if self
            .open
            .as_ref()
            .is_some_and(|p| !p.content && !p.implicit)
        {
            let p = self.open.take().expect("open prompt");
            if let Some(s) = self.current.as_mut()
                && p.start == Some(s.index)
            {
                s.prompts = s.prompts.saturating_sub(1);
            }
            p.line
        } else {
            number
        };
        let mut lines: Vec<String> = self
            .validation
            .iter()
            .filter(|l| l.starts_with("- "))
            .cloned()
            .collect();
        lines.push(clip(text));
        self.validation.clear();
        self.collecting_validation = false;
        self.ignored_outputs = None;
        let obs = PromptObservation {
            rejected: Some(lines),
            ..Default::default()
        };
        let mut v = classify::classify_prompt(&obs);
        if !bad_request {
            v.explanation = Some(
                "ComfyUI could not read the request (HTTP 500): malformed JSON, or a UI-format workflow sent as {\"prompt\": …}; nothing ran".into(),
            );
        }
        let start = self.current.as_ref().map(|s| s.index);
        self.record(PromptSummary {
            index: 0,
            start,
            ordinal: None,
            line,
            end_line: number,
            outcome: Some(v.outcome),
            evidence: v.evidence,
            signatures: v.signatures,
            explanation: v.explanation,
            models: Vec::new(),
            executed_in: None,
            started_before_log: false,
            error_cut: false,
        });
    }

    /// Ends the running prompt, classifying it from what it logged.
    fn end_prompt(&mut self, end: End, number: u64, before: &Before<'_>) {
        let Some(p) = self.open.take() else {
            return;
        };
        if !matches!(end, End::Executed(_)) && !p.content && (p.from_queue || p.later_posts) {
            // It logged nothing, and others were handled meanwhile: it never ran, or was
            // refused without a word. Not a prompt the log can say anything about.
            if let Some(s) = self.current.as_mut()
                && p.start == Some(s.index)
            {
                s.prompts = s.prompts.saturating_sub(1);
            }
            return;
        }
        let tail: Vec<String> = if matches!(end, End::Executed(_)) {
            Vec::new()
        } else {
            tail_lines(before)
        };
        let mut obs = PromptObservation {
            log: p.matched.iter().map(|(_, t)| t.clone()).collect(),
            ..Default::default()
        };
        let model = p.pending_load.as_ref().map(|(_, _, m, _)| m.clone());
        // How long the log shows nothing after the pending load, by its own clock: only up
        // to a stop line that carries its own time (a restart may come hours later, after
        // the machine was off; an unstamped line has no time of its own).
        let stalled_for = match (&p.pending_load, self.now, &end) {
            (Some((_, _, _, Some(at))), Some(now), End::Stopped) if self.stamped => Some(now - at),
            _ => None,
        };
        let (executed_in, ended) = match &end {
            End::Executed(took) => {
                // `Prompt executed in …` follows failed prompts too (`execution.py`), so it
                // is not a success when the prompt showed an error.
                obs.end = Some(executed_end(&p));
                (
                    Some(took.clone()).filter(|t| !t.is_empty()),
                    Ended::default(),
                )
            }
            _ => {
                let how = Unfinished {
                    end: &end,
                    tail: &tail,
                    before,
                    stalled_for,
                };
                (None, unfinished(&p, &how, &mut obs))
            }
        };
        if ended.hang {
            let v = classify::classify_prompt(&obs);
            return self.hung(p, v, model.unwrap_or_default(), stalled_for, number);
        }
        let mut reading = if ended.unended.incomplete {
            incomplete_reading(
                model.as_deref(),
                ended.loading_at_end,
                ended.unended.error_cut,
                &tail,
            )
        } else {
            classify::classify_prompt(&obs).into()
        };
        if let Some(e) = ended.explanation {
            reading.explanation = Some(e);
        }
        self.finish_prompt(p, reading, executed_in, number);
    }

    /// A prompt stopped after minutes of silence following `Requested to load` (by the log's
    /// own timestamps): the known hang at load.
    fn hung(
        &mut self,
        p: PromptState,
        mut v: Classification,
        model: String,
        stalled_for: Option<f64>,
        number: u64,
    ) {
        let hang_sig = catalogue::by_id("hang_at_load").expect("hang signature");
        v.signatures.retain(|s| *s != hang_sig.id);
        v.signatures.insert(0, hang_sig.id);
        v.explanation = Some(format!(
            "ComfyUI was stopped (Ctrl-C) after its log had been silent for minutes while loading {model}: it hung after 'Requested to load {model}'"
        ));
        if let Some(s) = stalled_for {
            v.evidence
                .push(format!("nothing in the log for {s:.0} s after this line"));
        }
        let (line, text) = p
            .pending_load
            .as_ref()
            .map_or((number, String::new()), |(n, t, _, _)| (*n, t.clone()));
        let ordinal = p.ordinal.map(|o| if p.after_passes { o } else { 1 });
        self.tally(hang_sig, &text, line, Some((ordinal, p.serial)));
        self.finish_prompt(p, v.into(), None, number);
    }

    fn finish_prompt(
        &mut self,
        p: PromptState,
        v: Reading,
        executed_in: Option<String>,
        number: u64,
    ) {
        if let Some(s) = self.current.as_mut()
            && p.start == Some(s.index)
        {
            match v.outcome {
                Some(Outcome::Pass) => s.passed += 1,
                None | Some(Outcome::InvalidWorkflow | Outcome::Interrupted) => {}
                Some(_) => {
                    s.failed += 1;
                    s.clean = false;
                }
            }
        }
        let mut signatures = v.signatures;
        for h in &p.hits {
            if !signatures.contains(h) {
                signatures.push(h);
            }
        }
        self.record(PromptSummary {
            index: 0,
            start: p.start,
            ordinal: p.ordinal,
            line: p.line,
            end_line: number,
            outcome: v.outcome,
            evidence: v.evidence,
            signatures,
            explanation: v.explanation,
            models: p.models,
            executed_in,
            started_before_log: p.implicit,
            error_cut: v.error_cut,
        });
    }

    fn record(&mut self, mut summary: PromptSummary) {
        self.prompts_total += 1;
        summary.index = self.prompts_total;
        let key = summary.outcome.map_or("unknown", Outcome::as_str);
        *self.counts.entry(key.to_string()).or_default() += 1;
        let failed = summary.outcome != Some(Outcome::Pass);
        if failed && self.failed.len() < KEEP_FAILED {
            self.failed.push(summary.clone());
        }
        if self.recent.len() == KEEP_LAST {
            self.recent.pop_front();
        }
        self.recent.push_back(summary);
    }

    /// Ends the current server start (and its running prompt).
    fn end_start(&mut self, end: End, number: u64, before: &Before<'_>) {
        self.end_prompt(end.clone(), number, before);
        let Some(s) = self.current.take() else {
            return;
        };
        let mut summary = StartSummary {
            index: s.index,
            line: s.line,
            up: s.up(),
            outcome: None,
            evidence: Vec::new(),
            signatures: s.hits.clone(),
            explanation: None,
            facts: s.facts.clone(),
            launch_args: s.launch.clone(),
            comfyui_dir: s.dir.clone(),
            prompts: s.prompts,
            passed: s.passed,
            failed: s.failed,
        };
        if !s.up() {
            let evidence = !s.hits.is_empty() || s.traceback || s.dead;
            let stopped = end == End::Stopped || s.closed;
            if stopped || (end == End::Eof && !evidence) {
                summary.explanation = Some(if stopped {
                    "ComfyUI was stopped (Ctrl-C) before it was ready".into()
                } else {
                    "the log ends while ComfyUI starts".into()
                });
            } else {
                let mut log = s.matched.clone();
                for t in tail_lines(before) {
                    if !log.contains(&t) {
                        log.push(t);
                    }
                }
                let exit = ExitStatus {
                    code: s.argparse.then_some(2),
                    signal: None,
                };
                let v = classify::classify_startup(exit, &log);
                summary.outcome = Some(v.outcome);
                summary.evidence = v.evidence;
                // The exception a traceback just before the end raised says what failed.
                if let Some((_, _, line)) = &self.raised
                    && !summary.evidence.contains(line)
                    && self.raised_just_before(before, TAIL)
                {
                    let at = summary.evidence.len().min(1);
                    summary.evidence.insert(at, line.clone());
                }
                for id in v.signatures {
                    if !summary.signatures.contains(&id) {
                        summary.signatures.insert(0, id);
                    }
                }
                summary.explanation =
                    if summary.signatures.iter().any(|id| {
                        catalogue::by_id(id).is_some_and(|sig| sig.phase == Phase::Startup)
                    }) {
                        v.explanation
                    } else if end == End::Restart {
                        Some("ComfyUI stopped before it was ready and was started again".into())
                    } else {
                        Some("ComfyUI stopped before it was ready".into())
                    };
            }
        }
        if self.starts.len() == KEEP_STARTS {
            self.starts.pop_front();
        }
        self.starts.push_back(summary);
    }

    /// Outputs refused at validation, now that the prompt ran the rest (or the log ended).
    fn outputs_were_ignored(&mut self) {
        if let Some((sig, text, number)) = self.ignored_outputs.take() {
            self.tally(sig, &text, number, None);
        }
    }

    /// Whether the last traceback's exception line is among the last `n` lines before this
    /// point.
    fn raised_just_before(&self, before: &Before<'_>, n: usize) -> bool {
        self.raised.as_ref().is_some_and(|(_, _, line)| {
            before
                .last(n)
                .iter()
                .any(|prev| &clip(&unglue(&normalize(prev).text)) == line)
        })
    }

    /// An exit reported above the log, followed by a start: the start is what died.
    fn exit_explains_the_start(&mut self, before: &Before<'_>) {
        if self.current.as_ref().is_some_and(|s| s.starting())
            && let Some((sig, text, number)) = self.exit_first.take()
        {
            self.signature(sig, &text, number, before);
        }
    }

    /// An excerpt with no start, no prompt and nothing failing, whose last lines are a node's
    /// own output at work (loading, sampling, the memory it uses): it was cut while a prompt
    /// ran.
    fn node_at_work(&mut self, tail: &[String], last: u64) {
        if self.current.is_some()
            || self.open.is_some()
            || self.prompts_total > 0
            || !self.tallies.is_empty()
            || self.frames_outside_startup
        {
            return;
        }
        let work = tail
            .iter()
            .rev()
            .take(6)
            .map(|raw| normalize(raw).text)
            .filter(|t| lines::is_work(t) || lines::is_progress(t))
            .count();
        if work >= 2 {
            self.prompt_for_line(last).content = true;
        }
    }

    /// The shell's prompt as the excerpt's last line, under a prompt that never ended: the
    /// process it ran had exited (the copy often cuts that prompt mid-path).
    fn shell_came_back(&mut self, tail: &[String], last: u64, before: &Before<'_>) {
        let Some(line) = tail.last() else { return };
        let text = normalize(line).text;
        if self.open.is_none() || self.viewed_by_a_command || !lines::is_shell_prompt(&text) {
            return;
        }
        // The user stopped it (Ctrl-C, and cmd's `Terminate batch job (Y/N)?`): no crash.
        if tail.iter().rev().take(4).any(|l| lines::is_user_stop(l)) {
            return;
        }
        if let Some(sig) = catalogue::by_id("process_exited") {
            self.signature(sig, text.trim(), last, before);
        }
    }

    /// The end of the log.
    pub fn finish(mut self, tail: &[String], lines: u64) -> Scanned {
        let carry: VecDeque<Vec<u8>> = tail.iter().map(|t| t.as_bytes().to_vec()).collect();
        let before = Before::from_carry(&carry);
        let last = lines;
        // An exit above the log that no start followed: as if it came last (the prompt it
        // ended, or the node at work before it).
        if let Some((sig, text, at)) = self.exit_first.take() {
            // A launch command below the exit and nothing after it: the exit ended that start.
            if self.current.is_none()
                && self.open.is_none()
                && self.pending_launch.as_ref().is_some_and(|l| l.line > at)
            {
                self.new_start(last, 0, &before);
            }
            self.signature(sig, &text, last, &before);
        }
        self.outputs_were_ignored();
        self.node_at_work(tail, last);
        self.shell_came_back(tail, last, &before);
        if self.current.is_some() {
            self.end_start(End::Eof, last, &before);
        } else {
            self.end_prompt(End::Eof, last, &before);
        }
        let mut prompts: Vec<PromptSummary> = self.failed;
        for p in self.recent {
            if !prompts.iter().any(|q| q.index == p.index) {
                prompts.push(p);
            }
        }
        prompts.sort_by_key(|p| p.index);
        Scanned {
            starts: self.starts.into(),
            starts_total: self.starts_total,
            prompts,
            prompts_total: self.prompts_total,
            prompt_counts: self.counts,
            tallies: self.tallies,
            recognized: self.recognized,
            dynamic_loads: self.dynamic_loads,
            frames_outside_startup: self.frames_outside_startup,
        }
    }
}

/// The last lines before a point, normalised, without launcher command lines.
fn tail_lines(before: &Before<'_>) -> Vec<String> {
    before
        .last(TAIL + 2)
        .iter()
        .map(|raw| clip(&unglue(&normalize(raw).text)))
        .filter(|t| {
            // Python's carets under a traceback's code line point at nothing in an excerpt.
            let marks = t.trim().trim_matches(|c| matches!(c, '^' | '~' | ' '));
            !t.trim().is_empty() && !marks.is_empty() && lines::launch_args(t).is_none()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .take(TAIL)
        .rev()
        .collect()
}

/// Whether a progress bar follows the load request in the lines before this point: sampling
/// ran, so the model was loaded even though its `prepared for dynamic VRAM` line is missing
/// (it drops to DEBUG when it repeats, `comfy/model_management.py`).
fn sampled_after(before: &Before<'_>, load: &str) -> bool {
    let recent: Vec<String> = before
        .last(8)
        .iter()
        .map(|raw| clip(&unglue(&normalize(raw).text)))
        .collect();
    let after = recent.iter().rposition(|l| l == load).map_or(0, |i| i + 1);
    recent[after..].iter().any(|l| lines::is_progress(l))
}
