//! Failure signatures on a line: kept by the prompt or start they show in, and tallied.

use super::line_tests::clip;
use super::summary::SignatureHits;
use super::{GENERIC, MAX_MATCHED, SUBSUMED, State};
use crate::classify::catalogue::Phase;
use crate::classify::catalogue::{self, Signature};
use crate::classify::{self, LoggedDeath};
use crate::logscan::lines::Kind;
use crate::logscan::reader::Before;
use crate::outcome::Outcome;

impl State {
    /// Failure signatures, on every line that is not purely structural.
    pub(super) fn signatures_of(
        &mut self,
        kind: Option<Kind>,
        text: &str,
        number: u64,
        before: &Before<'_>,
    ) {
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

    pub(super) fn signature(
        &mut self,
        sig: &'static Signature,
        text: &str,
        number: u64,
        before: &Before<'_>,
    ) {
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
    pub(super) fn tally(
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
}
