//! A traceback frame read: which prompt or start it says was failing.

use super::HEADLESS_TRACEBACK_LINES;
use super::State;
use super::line_tests::{clip, executor_frame, import_time_frame, prompt_code_frame};
use crate::logscan::reader::Before;

impl State {
    /// A traceback frame (`File "…", line N, in f`, or a faulthandler dump's): a prompt
    /// failing when it is the executor's or a prompt's code, a start failing when it is code
    /// run at import with nothing before it.
    pub(super) fn frame(&mut self, text: &str, number: u64, before: &Before<'_>) {
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
}
