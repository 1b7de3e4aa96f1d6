//! How a prompt or a start ended: executed, failed, died, hung, stopped, or cut off by the log's end.

use super::line_tests::unglue;
use super::line_tests::{clip, sampled_after, succeeds_despite, tail_lines};
use super::summary::{PromptSummary, Scanned, StartSummary};
use super::{End, HANG_SECONDS, KEEP_FAILED, KEEP_LAST, KEEP_STARTS, PromptState, State, TAIL};
use crate::classify::ExitStatus;
use crate::classify::catalogue::{self, Phase};
use crate::classify::normalize::normalize;
use crate::classify::{self, Classification, LoggedDeath, PromptEnd, PromptObservation};
use crate::logscan::lines;
use crate::logscan::reader::Before;
use crate::outcome::Outcome;
use std::collections::VecDeque;

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
    /// Ends the running prompt, classifying it from what it logged.
    pub(super) fn end_prompt(&mut self, end: End, number: u64, before: &Before<'_>) {
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
        let failed_step = p
            .bar
            .filter(|(done, total)| done < total)
            .filter(|_| v.outcome.is_some_and(|o| o != Outcome::Pass))
            .map(|(done, _)| done);
        self.record(PromptSummary {
            index: 0,
            start: p.start,
            ordinal: p.ordinal,
            line: p.line,
            end_line: number,
            failed_step,
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

    pub(super) fn record(&mut self, mut summary: PromptSummary) {
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
    pub(super) fn end_start(&mut self, end: End, number: u64, before: &Before<'_>) {
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
    pub(super) fn outputs_were_ignored(&mut self) {
        if let Some((sig, text, number)) = self.ignored_outputs.take() {
            self.tally(sig, &text, number, None);
        }
    }

    /// Whether the last traceback's exception line is among the last `n` lines before this
    /// point.
    pub(super) fn raised_just_before(&self, before: &Before<'_>, n: usize) -> bool {
        self.raised.as_ref().is_some_and(|(_, _, line)| {
            before
                .last(n)
                .iter()
                .any(|prev| &clip(&unglue(&normalize(prev).text)) == line)
        })
    }

    /// An exit reported above the log, followed by a start: the start is what died.
    pub(super) fn exit_explains_the_start(&mut self, before: &Before<'_>) {
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
    pub(crate) fn finish(mut self, tail: &[String], lines: u64) -> Scanned {
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
