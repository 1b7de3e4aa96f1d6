//! Showing a run to a person: a live progress line and the final summary.

use super::record::RunRecord;
use super::{Reporter, RunEvent};
use crate::output::{Answer, StatusLine, Style};
use std::io::{self, Write};

/// A one-line progress display on stderr (hidden when stderr is not a terminal).
pub(crate) struct Progress {
    line: StatusLine,
    /// The run's phase in words, for the heartbeat.
    phase: String,
    started: std::time::Instant,
}

impl Progress {
    pub(crate) fn new(visible: bool) -> Progress {
        Progress {
            line: StatusLine::new(visible, "{spinner} {elapsed_precise} {msg}", None),
            phase: String::new(),
            started: std::time::Instant::now(),
        }
    }
}

impl Reporter for Progress {
    fn event(&mut self, event: &RunEvent) {
        if let Some(phase) = event.phase() {
            self.line.bar.set_message(phase.clone());
            self.phase = phase;
        }
        match event {
            RunEvent::Alive => {
                let (phase, started) = (&self.phase, self.started);
                self.line.heartbeat(|| {
                    format!(
                        "still running after {}: {phase}",
                        crate::duration::format_duration(started.elapsed())
                    )
                })
            }
            RunEvent::IterationDone { iteration, outcome } => self
                .line
                .bar
                .println(format!("prompt {iteration}: {}", outcome.describe())),
            RunEvent::WaitingForGpu { holder } => self.line.say(format!(
                "waiting for the GPU: {holder} is running a workflow on it"
            )),
            RunEvent::RamGuard { available, threshold } => self.line.say(format!(
                "available RAM is down to {} MiB (threshold {} MiB): stopping ComfyUI before the OOM killer does",
                available >> 20,
                threshold >> 20
            )),
            RunEvent::Interrupting => self.line.say(
                "interrupting: finishing cleanly (press Ctrl-C again to kill ComfyUI now)".into(),
            ),
            RunEvent::Notice(text) => self.line.say(format!("note: {text}")),
            _ => {}
        }
    }
}

impl Answer for RunRecord {
    /// The end-of-run summary.
    fn render(&self, style: &Style, out: &mut dyn Write) -> io::Result<()> {
        let verdict = if self.outcome == crate::outcome::Outcome::Pass {
            style.good("PASS")
        } else {
            style.bad(&self.outcome.as_str().to_uppercase())
        };
        writeln!(out, "{verdict}  {}", self.outcome.describe())?;
        if let Some(why) = &self.explanation {
            writeln!(out, "  {why}")?;
        }
        for line in &self.evidence {
            writeln!(out, "  {} {}", style.dim("|"), clip(line, 160))?;
        }
        writeln!(out)?;
        let e = &self.effective;
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".into());
        let dynamic = match e.dynamic_vram {
            Some(true) => "on",
            Some(false) => "off",
            None => "?",
        };
        writeln!(
            out,
            "{:<14} {}",
            style.bold("ComfyUI"),
            opt(&e.comfyui_version)
        )?;
        writeln!(
            out,
            "{:<14} {}",
            style.bold("Flags"),
            if self.flags.is_empty() {
                "(none)".into()
            } else {
                self.flags.join(" ")
            }
        )?;
        if let Some(q) = &self.quick {
            let what = match &q.unshortened {
                Some(why) => format!("no, the workflow ran in full: {why}"),
                None => format!(
                    "yes, {} (workflow.quick.json)",
                    q.changes
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            writeln!(out, "{:<14} {what}", style.bold("Shortened"))?;
        }
        writeln!(
            out,
            "{:<14} {dynamic} (from the log)",
            style.bold("Dynamic VRAM")
        )?;
        writeln!(
            out,
            "{:<14} {}",
            style.bold("VRAM state"),
            opt(&e.vram_state)
        )?;
        writeln!(out, "{:<14} {}", style.bold("Allocator"), opt(&e.allocator))?;
        for it in &self.iterations {
            writeln!(
                out,
                "{:<14} {} in {:.1} s{}",
                style.bold(&format!("Prompt {}", it.iteration)),
                it.outcome,
                it.duration_ms as f64 / 1000.0,
                match it.cache_bust {
                    crate::workflow::CacheBust::Seed => " (seed changed)",
                    crate::workflow::CacheBust::Free => " (cache freed first)",
                    crate::workflow::CacheBust::None => "",
                }
            )?;
            if let Some(r) = it.ram_retained_bytes
                && self.ram_growth.is_some()
            {
                writeln!(
                    out,
                    "{:<14} RAM kept after it: {}",
                    "",
                    crate::text::bytes(r)
                )?;
            }
        }
        if let Some(g) = &self.ram_growth {
            writeln!(
                out,
                "{:<14} {}",
                style.bold("RAM"),
                style.warn(&g.statement)
            )?;
        }
        // A probe that could not sample (no driver, no CUDA device, ...): one line each, in the
        // probe's own words, so a missing VRAM timeline is explained where it is missed.
        for s in &self.sampling {
            writeln!(out, "{:<14} {s}", style.bold("Not sampled"))?;
        }
        for w in &self.warnings {
            writeln!(out, "{} {w}", style.warn("warning:"))?;
        }
        writeln!(
            out,
            "{:<14} {}",
            style.bold("Run folder"),
            self.run_dir.display()
        )?;
        Ok(())
    }
}

/// Shortens a line for the terminal (the record keeps it whole).
fn clip(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_string();
    }
    let mut out: String = line.chars().take(max - 1).collect();
    out.push('…');
    out
}
