//! One prompt, watched: a pure state machine fed what happens while the prompt runs
//! (websocket events, ComfyUI's log lines, its exit, the clock, the user's Ctrl-C, the RAM
//! guard's readings). It answers with what the engine must do (show a node, send
//! `/interrupt`, kill the group, ask `/history`) and, once done, with the prompt's verdict.
//!
//! It owns no process, socket or clock: every input carries the time since the prompt was
//! submitted, so its tests replay a prompt in microseconds, with no ComfyUI.

use crate::classify::{self, Classification, ExitStatus, PromptEnd, PromptObservation};
use crate::comfy::events::WsEvent;
use crate::signals::Stop;
use std::time::Duration;

/// After the end event, how long to wait for the final `executing` (history is written
/// before it; a server that never sends it must not hold the run).
const END_GRACE: Duration = Duration::from_secs(5);
/// After the end, how long to wait for ComfyUI's own `Prompt executed in …` line: the
/// websocket can be ahead of stderr, where the traceback and `Got an OOM…` still are.
const LOG_GRACE: Duration = Duration::from_millis(1500);
/// After `/interrupt`, how long ComfyUI gets to end the prompt itself.
const INTERRUPT_GRACE: Duration = Duration::from_secs(10);
/// How often `/history` is asked once the websocket is gone.
const HISTORY_POLL: Duration = Duration::from_millis(500);
/// How often the RAM guard reads available memory.
const RAM_CHECK: Duration = Duration::from_millis(200);
/// The most log lines kept for classifying one prompt (a tqdm-heavy log is long).
const WINDOW_LINES: usize = 20_000;

/// The limits one prompt runs under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// The whole prompt (`--timeout`).
    pub timeout: Duration,
    /// Silence of the prompt's websocket events and of the log (`--stall-timeout`).
    pub stall: Duration,
    /// Stop ComfyUI when available RAM falls below this many bytes.
    pub ram_floor: Option<u64>,
}

/// What happened, as the engine saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    /// A websocket message (about this prompt or not: the watcher decides).
    Ws(WsEvent),
    /// The websocket is gone; from now on the prompt is followed through `/history`.
    WsClosed,
    /// A log line, normalised (see `classify::normalize`).
    Line(String),
    /// `/history` says how the prompt ended.
    History(PromptEnd),
    /// Available system RAM, in answer to [`Action::CheckRam`].
    RamAvailable(u64),
    /// ComfyUI's process ended; `ram_exhausted` when system RAM was nearly gone then.
    Exited {
        exit: ExitStatus,
        ram_exhausted: bool,
    },
    /// Time passed; `stop` is what the user's signals ask for now.
    Tick { stop: Stop },
    /// vrambisect itself did not run for this long (stopped with SIGSTOP or Ctrl-Z, the
    /// machine suspended): nothing was watched then, so that time is not ComfyUI's silence.
    /// What ComfyUI said meanwhile is still to be read.
    Paused(Duration),
    /// Something of ComfyUI's still moves though it says nothing: disk reads, RAM or VRAM
    /// changing (a model loading from a slow disk). A busy CPU alone is not sent: a driver
    /// call stuck at 100% must still end as a hang.
    Moving(String),
}

/// What the engine must do.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Action {
    /// The prompt reached a node for the first time (`done` nodes so far).
    NodeStarted { node: String, done: usize },
    /// A sampler step.
    Step { value: f64, max: f64 },
    /// Read available RAM and answer with [`Input::RamAvailable`].
    CheckRam,
    /// Available RAM is below the floor: tell the user; [`Action::KillGroup`] follows.
    RamLow { available: u64, floor: u64 },
    /// Kill ComfyUI's whole process group now.
    KillGroup,
    /// Tell the user that the run is ending cleanly (a first Ctrl-C).
    Interrupting,
    /// `POST /interrupt`.
    SendInterrupt,
    /// `GET /history/{id}` and answer with [`Input::History`] if it knows the end.
    PollHistory,
    /// The prompt has ended with ComfyUI alive: keep its `/history` entry.
    SaveHistory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The prompt runs.
    Running,
    /// It has ended; the log's last lines about it are still coming (since `at`).
    Trailing {
        since: Duration,
    },
    Done,
}

/// One prompt's watch.
#[derive(Debug)]
pub(crate) struct PromptWatch {
    prompt_id: String,
    limits: Limits,
    phase: Phase,
    obs: PromptObservation,
    /// The log lines written since the prompt was submitted (at most [`WINDOW_LINES`]).
    window: std::collections::VecDeque<String>,
    nodes: Vec<String>,
    last_activity: Duration,
    /// When the websocket said the prompt ended (success, error, interrupted).
    ended_at: Option<Duration>,
    interrupt_sent: Option<Duration>,
    ws_open: bool,
    /// ComfyUI died after the prompt had ended (the verdict stands; the run cannot go on).
    died_after: Option<ExitStatus>,
    /// The last sign of life that was not a message (disk reads, RAM, VRAM).
    last_moving: Option<String>,
    next_history_poll: Duration,
    next_ram_check: Duration,
    /// When the prompt was submitted, and how its sampling went (progress events).
    submitted: Duration,
    steps: StepClock,
    /// The node of the last progress event.
    progress_node: Option<String>,
}

/// The sampling's pace, from the progress events: when the first step was reported, and the
/// time and count of the steps that followed one another within one sampler.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StepClock {
    /// Time from the prompt's submission to its first progress event (loading the models,
    /// encoding, the first step).
    pub first_step: Option<Duration>,
    /// Seconds spent in the steps after each sampler's first, and how many they were.
    stepped: f64,
    count: f64,
    last: Option<(Duration, f64, f64)>,
}

impl StepClock {
    fn progress(&mut self, at: Duration, since: Duration, value: f64, max: f64) {
        if self.first_step.is_none() {
            self.first_step = Some(at.saturating_sub(since));
        }
        if let Some((t0, v0, m0)) = self.last
            && m0 == max
            && value > v0
            && value - v0 <= max
        {
            self.stepped += at.saturating_sub(t0).as_secs_f64();
            self.count += value - v0;
        }
        self.last = Some((at, value, max));
    }

    /// The last step reported (the progress event's value: steps done of its sampler).
    pub(crate) fn last_step(&self) -> Option<u64> {
        self.last.map(|(_, value, _)| value.max(0.0) as u64)
    }

    /// Mean seconds per sampling step, when two steps of one sampler were seen.
    pub(crate) fn seconds_per_step(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.stepped / self.count)
    }
}

/// The watch's result.
#[derive(Debug, Clone)]
pub(crate) struct Watched {
    pub verdict: Classification,
    /// Nodes that started executing, in order.
    pub nodes: Vec<String>,
    /// ComfyUI's exit, when it died during the prompt.
    pub exit: Option<ExitStatus>,
    /// Whether the run must stop after this prompt (Ctrl-C, ComfyUI dead, hang, timeout).
    pub stop_run: bool,
    /// The node it failed in: the error's or the interrupted one, else the last that started.
    pub failed_node: Option<String>,
    /// The sampling's pace.
    pub steps: StepClock,
    /// The node of the last progress event.
    pub progress_node: Option<String>,
}

impl PromptWatch {
    /// Starts watching `prompt_id`, submitted at `at`; `ws_open` is false when the
    /// websocket is already gone.
    pub(crate) fn new(prompt_id: &str, limits: Limits, at: Duration, ws_open: bool) -> PromptWatch {
        PromptWatch {
            prompt_id: prompt_id.to_string(),
            limits,
            phase: Phase::Running,
            obs: PromptObservation::default(),
            window: Default::default(),
            nodes: Vec::new(),
            last_activity: at,
            ended_at: None,
            interrupt_sent: None,
            ws_open,
            died_after: None,
            last_moving: None,
            next_history_poll: at,
            next_ram_check: at,
            submitted: at,
            steps: StepClock::default(),
            progress_node: None,
        }
    }

    /// The verdict on a prompt ComfyUI refused (HTTP 400, or node errors on a 200): nothing
    /// of it ran. `lines` summarise the answer.
    pub(crate) fn refused(lines: Vec<String>) -> Watched {
        let obs = PromptObservation {
            rejected: Some(lines),
            ..Default::default()
        };
        Watched {
            verdict: classify::classify_prompt(&obs),
            nodes: Vec::new(),
            exit: None,
            stop_run: true,
            failed_node: None,
            steps: StepClock::default(),
            progress_node: None,
        }
    }

    /// Whether the watch is over (call [`PromptWatch::finish`]).
    pub(crate) fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Takes in what happened at `at` (time since submission); returns what to do.
    pub(crate) fn feed(&mut self, at: Duration, input: Input) -> Vec<Action> {
        let mut actions = Vec::new();
        match input {
            Input::Line(line) => self.line(at, line),
            Input::Ws(ev) => self.ws(at, ev, &mut actions),
            Input::WsClosed => self.ws_open = false,
            Input::History(end) => {
                if self.obs.end.is_none() && self.phase == Phase::Running {
                    self.obs.end = Some(end);
                    self.end_running(at, &mut actions);
                }
            }
            Input::RamAvailable(available) => self.ram(available, &mut actions),
            Input::Exited {
                exit,
                ram_exhausted,
            } => {
                if self.phase == Phase::Running {
                    self.obs.exit = Some(exit);
                    self.obs.ram_exhausted = ram_exhausted;
                } else {
                    self.died_after = Some(exit);
                }
                // Dead: no more log is coming.
                self.phase = Phase::Done;
            }
            Input::Tick { stop } => self.tick(at, stop, &mut actions),
            // Silence is counted again from now, not from before the pause.
            Input::Paused(_) => self.last_activity = self.last_activity.max(at),
            Input::Moving(what) => {
                if self.phase == Phase::Running {
                    self.last_activity = at;
                    self.last_moving = Some(what);
                }
            }
        }
        actions
    }

    fn line(&mut self, at: Duration, line: String) {
        if self.phase == Phase::Done {
            return;
        }
        let executed = line.starts_with("Prompt executed in");
        if self.window.len() == WINDOW_LINES {
            self.window.pop_front();
        }
        self.window.push_back(line);
        self.last_activity = at;
        if executed && matches!(self.phase, Phase::Trailing { .. }) {
            self.phase = Phase::Done;
        }
    }

    fn ws(&mut self, at: Duration, ev: WsEvent, actions: &mut Vec<Action>) {
        if self.phase != Phase::Running {
            return;
        }
        if self.about_prompt(&ev) {
            self.last_activity = at;
        }
        let ours = |p: &Option<String>| p.as_deref().is_none_or(|p| p == self.prompt_id);
        match ev {
            WsEvent::Executing {
                prompt_id: Some(p),
                node: None,
            } if p == self.prompt_id => self.end_running(at, actions),
            WsEvent::Executing {
                prompt_id,
                node: Some(node),
            } if ours(&prompt_id) && !self.nodes.contains(&node) => {
                self.nodes.push(node.clone());
                actions.push(Action::NodeStarted {
                    node,
                    done: self.nodes.len(),
                });
            }
            WsEvent::Progress {
                prompt_id,
                node,
                value,
                max,
            } if ours(&prompt_id) => {
                self.steps.progress(at, self.submitted, value, max);
                self.progress_node = node;
                actions.push(Action::Step { value, max })
            }
            WsEvent::ExecutionSuccess { prompt_id } if prompt_id == self.prompt_id => {
                self.ended(at, PromptEnd::Success)
            }
            WsEvent::ExecutionError {
                prompt_id,
                node_id,
                node_type,
                exception_type,
                exception_message,
            } if prompt_id == self.prompt_id => self.ended(
                at,
                PromptEnd::Error {
                    node_id,
                    node_type,
                    exception_type,
                    exception_message,
                },
            ),
            WsEvent::ExecutionInterrupted { prompt_id, node_id } if prompt_id == self.prompt_id => {
                self.ended(at, PromptEnd::Interrupted { node_id })
            }
            _ => {}
        }
    }

    /// Whether a websocket event says something about this prompt's progress (extensions
    /// broadcast status frames every second: they are no sign of life of the prompt).
    fn about_prompt(&self, ev: &WsEvent) -> bool {
        let ours = |p: &Option<String>| p.as_deref().is_none_or(|p| p == self.prompt_id);
        match ev {
            WsEvent::Status { .. } | WsEvent::Other { .. } => false,
            WsEvent::Executing { prompt_id: p, .. }
            | WsEvent::Progress { prompt_id: p, .. }
            | WsEvent::ProgressState { prompt_id: p }
            | WsEvent::Executed { prompt_id: p, .. } => ours(p),
            WsEvent::ExecutionStart { prompt_id: p }
            | WsEvent::ExecutionCached { prompt_id: p, .. }
            | WsEvent::ExecutionSuccess { prompt_id: p }
            | WsEvent::ExecutionError { prompt_id: p, .. }
            | WsEvent::ExecutionInterrupted { prompt_id: p, .. } => *p == self.prompt_id,
        }
    }

    /// The websocket's end event; the final `executing` (or [`END_GRACE`]) ends the watch.
    fn ended(&mut self, at: Duration, end: PromptEnd) {
        self.obs.end = Some(end);
        self.ended_at = Some(at);
    }

    fn ram(&mut self, available: u64, actions: &mut Vec<Action>) {
        let Some(floor) = self.limits.ram_floor else {
            return;
        };
        if available >= floor || self.obs.stopped_for_ram.is_some() || self.obs.end.is_some() {
            return;
        }
        actions.push(Action::RamLow { available, floor });
        self.obs.stopped_for_ram = Some(format!(
            "available RAM fell to {} MiB, below the {} MiB threshold (--min-available-ram)",
            available >> 20,
            floor >> 20
        ));
        actions.push(Action::KillGroup);
    }

    fn tick(&mut self, at: Duration, stop: Stop, actions: &mut Vec<Action>) {
        match self.phase {
            Phase::Done => return,
            Phase::Trailing { since } => {
                if at.saturating_sub(since) >= LOG_GRACE {
                    self.phase = Phase::Done;
                }
                return;
            }
            Phase::Running => {}
        }
        // Host memory pressure: stop ComfyUI before the kernel's OOM killer picks a process
        // (perhaps the desktop, perhaps this tool).
        if self.limits.ram_floor.is_some()
            && at >= self.next_ram_check
            && self.obs.stopped_for_ram.is_none()
            && self.obs.end.is_none()
        {
            self.next_ram_check = at + RAM_CHECK;
            actions.push(Action::CheckRam);
        }
        // The websocket is gone but ComfyUI is not: history tells how the prompt ended.
        if !self.ws_open && self.obs.end.is_none() && at >= self.next_history_poll {
            self.next_history_poll = at + HISTORY_POLL;
            actions.push(Action::PollHistory);
        }
        if self
            .ended_at
            .is_some_and(|t| at.saturating_sub(t) > END_GRACE)
        {
            self.end_running(at, actions);
            return;
        }
        match stop {
            Stop::Now => {
                self.obs.interrupted_by_user = true;
                if self.obs.end.is_some() {
                    // It had ended: keep its history, but read no more log (kill at once).
                    actions.push(Action::SaveHistory);
                }
                self.phase = Phase::Done;
                return;
            }
            Stop::Graceful => {
                if self.interrupt_sent.is_none() {
                    actions.push(Action::Interrupting);
                    actions.push(Action::SendInterrupt);
                    self.interrupt_sent = Some(at);
                }
                self.obs.interrupted_by_user = true;
                if self
                    .interrupt_sent
                    .is_some_and(|t| at.saturating_sub(t) > INTERRUPT_GRACE)
                {
                    match self.obs.end {
                        Some(_) => self.end_running(at, actions),
                        None => self.phase = Phase::Done,
                    }
                    return;
                }
            }
            Stop::No => {}
        }
        if self.obs.end.is_none() {
            if at.saturating_sub(self.last_activity) > self.limits.stall {
                self.obs.stalled = true;
                self.phase = Phase::Done;
            } else if at > self.limits.timeout {
                self.obs.timed_out = true;
                self.phase = Phase::Done;
            }
        }
    }

    /// The prompt is over while ComfyUI lives: keep its history, then read the log's last
    /// lines about it.
    fn end_running(&mut self, at: Duration, actions: &mut Vec<Action>) {
        if self.phase != Phase::Running {
            return;
        }
        if self.obs.end.is_none() {
            // `executing` with node null but no end event: the history knows how it ended.
            self.phase = Phase::Done;
            return;
        }
        actions.push(Action::SaveHistory);
        self.phase = if self
            .window
            .iter()
            .any(|l| l.starts_with("Prompt executed in"))
        {
            Phase::Done
        } else {
            Phase::Trailing { since: at }
        };
    }

    /// The verdict, from everything seen.
    pub(crate) fn finish(mut self) -> Watched {
        self.obs.log = self.window.into_iter().collect();
        let exit = self.obs.exit.or(self.died_after);
        let stop_run = self.obs.interrupted_by_user
            || exit.is_some()
            || self.obs.stalled
            || self.obs.timed_out;
        let mut verdict = classify::classify_prompt(&self.obs);
        if self.obs.stalled {
            verdict.evidence.push(format!(
                "nothing moved for {}: no log line, no websocket message about the prompt, no disk reads, no RAM or VRAM change{}",
                crate::duration::format_duration(self.limits.stall),
                match &self.last_moving {
                    Some(what) => format!(" (the last sign of life was {what})"),
                    None => String::new(),
                }
            ));
        }
        let failed_node = match &self.obs.end {
            _ if verdict.outcome == crate::outcome::Outcome::Pass => None,
            Some(PromptEnd::Error { node_id, .. } | PromptEnd::Interrupted { node_id }) => {
                node_id.clone().or_else(|| self.nodes.last().cloned())
            }
            _ => self.nodes.last().cloned(),
        };
        Watched {
            verdict,
            nodes: self.nodes,
            exit,
            stop_run,
            failed_node,
            steps: self.steps,
            progress_node: self.progress_node,
        }
    }
}

#[cfg(test)]
mod tests;
