//! One prompt of a run: posted to ComfyUI, followed by a [`PromptWatch`] until it ends, and
//! turned into its [`Iteration`]. The watch decides; this carries its messages and does the
//! I/O it asks for (the websocket, `/history`, `/free`, the sampler's marks).

use super::folder::{self, Mark, write_json};
use super::launch::{Heard, Server};
use super::record::Iteration;
use super::watch::{Action, Input, Limits, PromptWatch, Watched};
use super::{Reporter, RunEvent, RunOptions};
use crate::classify::{Classification, ExitStatus};
use crate::comfy::{Client, Submitted, rejection_lines};
use crate::outcome::Outcome;
use crate::sampler::{Sampler, series};
use crate::signals;
use crate::workflow::{CacheBust, Workflow};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Below this much available RAM when ComfyUI dies, the kernel's OOM killer is the suspect.
const RAM_EXHAUSTED: i64 = 256 << 20;
/// A gap this long between two wakes of a thread that wakes every tenth of a second means
/// vrambisect itself was stopped or the machine slept.
const PAUSED: Duration = Duration::from_secs(2);

/// How posting a prompt went.
enum Submission {
    /// ComfyUI queued it under this id.
    Queued(String),
    /// Nothing of it ran: the verdict, and the id if ComfyUI gave one.
    NothingRan(Box<Watched>, Option<String>),
}

/// One prompt of a run: submitted here, followed by a [`PromptWatch`].
pub(super) struct Prompt<'a> {
    pub(super) n: u32,
    pub(super) opts: &'a RunOptions,
    /// The API prompt (converted, when the workflow was given in the UI format).
    pub(super) workflow: &'a Workflow,
    pub(super) client: &'a Client,
    pub(super) client_id: &'a str,
    pub(super) server: &'a mut Server,
    pub(super) sampler: Option<&'a Sampler>,
    pub(super) reporter: &'a mut dyn Reporter,
    pub(super) clock: Instant,
    pub(super) ws_open: &'a mut bool,
    /// When ComfyUI accepted the prompt.
    pub(super) submitted: Option<Instant>,
    /// The last websocket message about it (the start of the tool's own overhead).
    pub(super) last_event: Option<Instant>,
    /// Files that could not be written (they become warnings of the record).
    pub(super) problems: &'a mut Vec<String>,
}

impl Prompt<'_> {
    fn mark(&self, mark: Mark) {
        if let Some(s) = self.sampler {
            s.mark(&mark.to_string());
        }
    }

    fn save(&mut self, name: String, value: &serde_json::Value) {
        if let Err(e) = write_json(&self.opts.run_dir.join(name), value) {
            self.problems.push(e.message);
        }
    }

    /// The iteration's record, ComfyUI's exit if it died, and whether the run must stop.
    pub(super) fn run(&mut self) -> (Iteration, Option<ExitStatus>, bool) {
        let n = self.n;
        let (prompt, bust) = self.workflow.for_iteration(n);
        if bust == CacheBust::Free {
            // No seed to change: empty ComfyUI's cache so the prompt really executes.
            let _ = self.client.free();
            std::thread::sleep(Duration::from_millis(300));
        }
        self.mark(Mark::PromptStart(n));
        let started_ms = self.clock.elapsed().as_millis() as u64;
        let t0 = Instant::now();
        let (watched, prompt_id) = match self.submit(&prompt) {
            Submission::Queued(prompt_id) => (self.watch(&prompt_id, t0), Some(prompt_id)),
            Submission::NothingRan(watched, prompt_id) => (*watched, prompt_id),
        };
        self.mark(Mark::PromptEnd(n));
        let mut it = Iteration::from_verdict(n, &watched.verdict);
        it.prompt_id = prompt_id;
        it.cache_bust = bust;
        it.started_ms = started_ms;
        it.duration_ms = t0.elapsed().as_millis() as u64;
        it.nodes_executed = watched.nodes;
        it.node = watched.failed_node;
        it.first_step_ms = watched.steps.first_step.map(|d| d.as_millis() as u64);
        it.seconds_per_step = watched.steps.seconds_per_step();
        // Of the node it failed in (a failure in a later node says nothing of its steps).
        it.last_step = watched
            .steps
            .last_step()
            .filter(|_| it.node.is_none() || watched.progress_node == it.node);
        (it, watched.exit, watched.stop_run)
    }

    /// Posts the prompt; its id, or the verdict of a prompt that never ran.
    fn submit(&mut self, prompt: &serde_json::Map<String, serde_json::Value>) -> Submission {
        let n = self.n;
        let nothing_ran = |v: Classification| {
            Box::new(Watched {
                verdict: v,
                nodes: Vec::new(),
                exit: None,
                stop_run: true,
                failed_node: None,
                steps: Default::default(),
                progress_node: None,
            })
        };
        match self.client.submit(prompt, self.client_id) {
            Ok(Submitted::Queued {
                prompt_id,
                node_errors,
            }) if node_errors.as_object().is_some_and(|m| !m.is_empty()) => {
                // A 200 with node errors: ComfyUI dropped the outputs that failed validation
                // and runs only the rest. That is not the user's workflow; do not call it a
                // pass or a failure of the flags.
                let _ = self.client.interrupt();
                let body = serde_json::json!({ "node_errors": node_errors });
                self.save(folder::rejected(n), &body);
                let mut watched = PromptWatch::refused(rejection_lines(&body));
                watched.verdict.explanation = Some(format!(
                    "ComfyUI accepted prompt {prompt_id} but dropped the outputs that failed validation: fix the workflow so every output validates"
                ));
                Submission::NothingRan(Box::new(watched), Some(prompt_id))
            }
            Ok(Submitted::Queued { prompt_id, .. }) => {
                self.submitted = Some(Instant::now());
                self.reporter.event(&RunEvent::Submitted {
                    iteration: n,
                    of: self.opts.limits.iterations,
                    prompt_id: prompt_id.clone(),
                });
                Submission::Queued(prompt_id)
            }
            Ok(Submitted::Rejected { body }) => {
                self.save(folder::rejected(n), &body);
                Submission::NothingRan(Box::new(PromptWatch::refused(rejection_lines(&body))), None)
            }
            Ok(Submitted::ServerError { status, body }) => Submission::NothingRan(
                nothing_ran(Classification {
                    outcome: Outcome::InvalidWorkflow,
                    evidence: vec![format!(
                        "HTTP {status} from POST /prompt: {}",
                        body.lines().last().unwrap_or("")
                    )],
                    signatures: vec![],
                    explanation: Some("ComfyUI could not read the request: the workflow is not in API format, or this is a vrambisect bug".into()),
                }),
                None,
            ),
            Err(e) => Submission::NothingRan(
                nothing_ran(Classification {
                    outcome: Outcome::Crash,
                    evidence: vec![format!("POST /prompt failed: {e}")],
                    signatures: vec![],
                    explanation: Some("ComfyUI stopped answering HTTP".into()),
                }),
                None,
            ),
        }
    }

    /// Carries what ComfyUI says to the watch, and does what the watch asks, until it is over.
    fn watch(&mut self, prompt_id: &str, t0: Instant) -> Watched {
        let limits = Limits {
            timeout: self.opts.limits.timeout,
            stall: self.opts.limits.stall_timeout,
            ram_floor: ram_threshold(self.opts, self.sampler),
        };
        // Time vrambisect itself did not run (stopped, a machine asleep) is not ComfyUI's
        // silence: a clock of its own sees a stop wherever the loop was then. Started before
        // the watch's clock, so that no stop falls between the two.
        let mut held = super::pause::PauseWatch::start(PAUSED);
        let mut watch = PromptWatch::new(prompt_id, limits, t0.elapsed(), *self.ws_open);
        let mut inputs: VecDeque<Input> = VecDeque::new();
        let mut alive = Instant::now();
        let mut signs = self.signs_of_life();
        while !watch.is_done() {
            if alive.elapsed() >= Duration::from_secs(1) {
                self.reporter.event(&RunEvent::Alive);
                alive = Instant::now();
                let now = self.signs_of_life();
                if let Some(what) = signs.moved_to(&now) {
                    inputs.push_back(Input::Moving(what));
                }
                signs = signs.highest(&now);
            }
            match self.server.feed.listen() {
                Heard::Line(l) => inputs.push_back(Input::Line(l)),
                Heard::Ws(ev) => {
                    self.last_event = Some(Instant::now());
                    inputs.push_back(Input::Ws(ev));
                }
                Heard::WsClosed => {
                    *self.ws_open = false;
                    inputs.push_back(Input::WsClosed);
                }
                Heard::Nothing => {}
            }
            if let Some(exit) = self.server.child.try_wait() {
                inputs.extend(self.server.feed.drain().into_iter().map(Input::Line));
                // Killed while RAM ran out: the kernel's OOM killer, not a crash of its own.
                let ram_exhausted = self
                    .sampler
                    .and_then(|s| s.snapshot().get(series::RAM_AVAILABLE).map(|r| r.min))
                    .is_some_and(|min| min < RAM_EXHAUSTED);
                inputs.push_back(Input::Exited {
                    exit,
                    ram_exhausted,
                });
            }
            inputs.push_back(Input::Tick {
                stop: signals::requested(),
            });
            while let Some(input) = inputs.pop_front() {
                let at = t0.elapsed();
                if matches!(input, Input::Tick { .. }) {
                    // Read after the clock: a stop before it is seen here, a stop after it
                    // leaves the tick at a time before the stop.
                    let stopped = held.take();
                    if !stopped.is_zero() {
                        watch.feed(at, Input::Paused(stopped));
                    }
                }
                // The answers to this input's actions come next, in the order asked.
                let answers: Vec<Input> = watch
                    .feed(at, input)
                    .into_iter()
                    .filter_map(|action| self.act(action, prompt_id))
                    .collect();
                for answer in answers.into_iter().rev() {
                    inputs.push_front(answer);
                }
            }
        }
        watch.finish()
    }

    /// What ComfyUI's process group is doing besides talking: its resident memory and VRAM
    /// (from the sampler) and what it has read from disk.
    fn signs_of_life(&self) -> SignsOfLife {
        let snap = self.sampler.map(|s| s.snapshot());
        let last = |name: &str| snap.as_ref().and_then(|s| s.get(name)).map(|s| s.last);
        SignsOfLife {
            rss: last(series::TREE_RSS),
            // ComfyUI's own VRAM only: the whole GPU's would count another program's work.
            vram: last(&series::gpu(0, series::TREE_USED)),
            read: crate::process::sys::group_read_bytes(self.server.child.pid),
        }
    }

    /// Does what the watch asked; some actions have an answer for it.
    fn act(&mut self, action: Action, prompt_id: &str) -> Option<Input> {
        match action {
            Action::NodeStarted { node, done } => {
                let class = self.workflow.class_of(&node).map(str::to_string);
                self.mark(Mark::Node {
                    id: node.clone(),
                    class: class.clone().unwrap_or_else(|| "?".into()),
                });
                self.reporter.event(&RunEvent::Node {
                    iteration: self.n,
                    node,
                    class,
                    done,
                    total: self.workflow.node_count(),
                });
                None
            }
            Action::Step { value, max } => {
                self.reporter.event(&RunEvent::Step { value, max });
                None
            }
            Action::CheckRam => self
                .sampler?
                .snapshot()
                .get(series::RAM_AVAILABLE)
                .map(|r| Input::RamAvailable(r.last.max(0) as u64)),
            Action::RamLow { available, floor } => {
                self.reporter.event(&RunEvent::RamGuard {
                    available,
                    threshold: floor,
                });
                None
            }
            Action::KillGroup => {
                self.server.child.kill_group();
                None
            }
            Action::Interrupting => {
                self.reporter.event(&RunEvent::Interrupting);
                None
            }
            Action::SendInterrupt => {
                let _ = self.client.interrupt();
                None
            }
            Action::PollHistory => {
                let end = self
                    .client
                    .history(prompt_id)
                    .ok()
                    .and_then(|h| crate::comfy::end_from_history(&h, prompt_id))?;
                self.last_event = Some(Instant::now());
                Some(Input::History(end))
            }
            Action::SaveHistory => {
                if let Ok(history) = self.client.history(prompt_id) {
                    self.save(folder::history(self.n), &history);
                }
                None
            }
        }
    }
}

/// Readings that show a silent ComfyUI is still working (see [`SignsOfLife::moved_to`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct SignsOfLife {
    rss: Option<i64>,
    vram: Option<i64>,
    read: Option<u64>,
}

impl SignsOfLife {
    /// The highest of each reading (what progress is measured against: memory that only
    /// goes up and down again is not progress).
    fn highest(&self, now: &SignsOfLife) -> SignsOfLife {
        let max_i = |a: Option<i64>, b: Option<i64>| a.max(b);
        SignsOfLife {
            rss: max_i(self.rss, now.rss),
            vram: max_i(self.vram, now.vram),
            read: self.read.max(now.read),
        }
    }

    /// What moved past `self` (the highest readings so far), in words: reads from disk of
    /// 1 MiB or more, resident memory or VRAM 8 MiB or more above their highest. CPU time is
    /// not counted: a driver call spinning at 100% must still end as a hang.
    fn moved_to(&self, now: &SignsOfLife) -> Option<String> {
        const READ: u64 = 1 << 20;
        const MEMORY: i64 = 8 << 20;
        let mut moved = Vec::new();
        if let (Some(a), Some(b)) = (self.read, now.read)
            && b >= a + READ
        {
            moved.push(format!("disk reads ({} MiB/s)", (b - a) >> 20));
        }
        if let (Some(a), Some(b)) = (self.rss, now.rss)
            && b >= a + MEMORY
        {
            moved.push(format!("RAM ({:+} MiB)", (b - a) >> 20));
        }
        if let (Some(a), Some(b)) = (self.vram, now.vram)
            && b >= a + MEMORY
        {
            moved.push(format!("VRAM ({:+} MiB)", (b - a) >> 20));
        }
        (!moved.is_empty()).then(|| moved.join(", "))
    }
}

/// The RAM threshold below which the run is stopped, from the option and the machine's RAM.
fn ram_threshold(opts: &RunOptions, sampler: Option<&Sampler>) -> Option<u64> {
    const MIB: u64 = 1 << 20;
    match opts.limits.min_available_ram {
        Some(0) => None,
        Some(bytes) => Some(bytes),
        None => {
            let total = sampler?.snapshot().get(series::RAM_TOTAL)?.max.max(0) as u64;
            Some((total / 50).clamp(256 * MIB, 1024 * MIB))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_disk_reads_ram_and_vram_are_signs_of_life() {
        let before = SignsOfLife {
            rss: Some(1 << 30),
            vram: Some(2 << 30),
            read: Some(100 << 20),
        };
        assert_eq!(before.moved_to(&before), None, "nothing moved");
        let small = SignsOfLife {
            rss: Some((1 << 30) + (4 << 20)),
            read: Some((100 << 20) + 4096),
            ..before
        };
        assert_eq!(before.moved_to(&small), None, "noise is not progress");
        let loading = SignsOfLife {
            rss: Some((1 << 30) + (300 << 20)),
            read: Some(400 << 20),
            ..before
        };
        assert_eq!(
            before.moved_to(&loading).as_deref(),
            Some("disk reads (300 MiB/s), RAM (+300 MiB)")
        );
        // Memory going down, or back up to where it was, is no progress.
        let freeing = SignsOfLife {
            vram: Some(1 << 30),
            ..before
        };
        assert_eq!(before.moved_to(&freeing), None);
        let highest = before.highest(&freeing);
        assert_eq!(highest.vram, Some(2 << 30));
        let back = SignsOfLife {
            vram: Some(2 << 30),
            ..before
        };
        assert_eq!(highest.moved_to(&back), None);
        let loading_vram = SignsOfLife {
            vram: Some(3 << 30),
            ..before
        };
        assert_eq!(
            highest.moved_to(&loading_vram).as_deref(),
            Some("VRAM (+1024 MiB)")
        );
        // Unknown readings say nothing either way.
        assert_eq!(SignsOfLife::default().moved_to(&loading), None);
    }
}
