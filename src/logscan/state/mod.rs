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
use crate::classify::catalogue::Signature;
use crate::classify::normalize::normalize;
use crate::classify::{self, LoggedDeath, PromptObservation};
use crate::startup::StartupFacts;
use memchr::memmem::Finder;
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::sync::LazyLock;

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

mod endings;
mod frames;
mod line_tests;
mod signatures;
mod summary;

use line_tests::{clip, comfy_or_torch_frame, only_a_bar, rank_bit, repeated_device_block, unglue};

pub(crate) use summary::{PromptSummary, Scanned, SignatureHits, StartSummary};

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
    /// The last progress bar it drew: (done, total).
    bar: Option<(u64, u64)>,
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
pub(crate) struct State {
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
                // One searcher for every load line (`str::contains` builds one per call).
                static DYNAMIC: LazyLock<Finder<'static>> =
                    LazyLock::new(|| Finder::new("prepared for dynamic VRAM loading"));
                if DYNAMIC.find(text.as_bytes()).is_some() {
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
            Kind::ExceptionDuring => {
                // The sampler's bar it broke off, where it was drawing one (its redraws inside
                // a running prompt are not decoded: read back from here).
                if let Some(p) = self.open.as_mut() {
                    p.bar = line_tests::last_bar(before).or(p.bar);
                }
                self.exception_during(text, number)
            }
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
            failed_step: None,
        });
    }
}
