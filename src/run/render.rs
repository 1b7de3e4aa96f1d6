//! Showing a run to a person: a live progress line and the final summary.

use super::record::RunRecord;
use super::{Reporter, RunEvent};
use crate::output::Style;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{self, Write};
use std::time::Duration;

/// A one-line progress display on stderr (hidden when stderr is not a terminal).
pub struct Progress {
    bar: ProgressBar,
    iteration: (u32, u32),
    visible: bool,
}

impl Progress {
    pub fn new(visible: bool) -> Progress {
        let bar = if visible {
            ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        Progress {
            bar,
            iteration: (0, 0),
            visible,
        }
    }

    /// A line that must reach the user even without a terminal (waiting, stopping).
    fn say(&self, msg: String) {
        if self.visible {
            self.bar.println(msg);
        } else {
            eprintln!("{msg}");
        }
    }
}

impl Reporter for Progress {
    fn event(&mut self, event: &RunEvent) {
        match event {
            RunEvent::Launching { .. } => self.bar.set_message("starting ComfyUI"),
            RunEvent::Ready { startup_ms } => self.bar.set_message(format!(
                "ComfyUI ready after {:.1} s",
                *startup_ms as f64 / 1000.0
            )),
            RunEvent::Submitted { iteration, of, .. } => {
                self.iteration = (*iteration, *of);
                self.bar
                    .set_message(format!("prompt {iteration}/{of}: queued"));
            }
            RunEvent::Node {
                class,
                node,
                done,
                total,
                ..
            } => {
                let class = class.as_deref().unwrap_or("?");
                self.bar.set_message(format!(
                    "prompt {}/{}: node {done}/{total} {class} (#{node})",
                    self.iteration.0, self.iteration.1
                ));
            }
            RunEvent::Step { value, max } => {
                self.bar.set_message(format!(
                    "prompt {}/{}: step {}/{}",
                    self.iteration.0, self.iteration.1, *value as u64, *max as u64
                ));
            }
            RunEvent::IterationDone { iteration, outcome } => {
                self.bar
                    .println(format!("prompt {iteration}: {}", outcome.describe()));
            }
            RunEvent::Stopping => self.bar.set_message("stopping ComfyUI"),
            RunEvent::WaitingForGpu { holder } => {
                self.say(format!("waiting for the GPU: {holder} is running a workflow on it"))
            }
            RunEvent::RamGuard { available, threshold } => self.say(format!(
                "available RAM is down to {} MiB (threshold {} MiB): stopping ComfyUI before the OOM killer does",
                available >> 20,
                threshold >> 20
            )),
            RunEvent::Interrupting => self.say(
                "interrupting: finishing cleanly (press Ctrl-C again to kill ComfyUI now)".into(),
            ),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

/// The end-of-run summary.
pub fn summary(rec: &RunRecord, style: &Style, out: &mut dyn Write) -> io::Result<()> {
    let verdict = if rec.outcome == crate::outcome::Outcome::Pass {
        style.good("PASS")
    } else {
        style.bad(&rec.outcome.as_str().to_uppercase())
    };
    writeln!(out, "{verdict}  {}", rec.outcome.describe())?;
    if let Some(why) = &rec.explanation {
        writeln!(out, "  {why}")?;
    }
    for line in &rec.evidence {
        writeln!(out, "  {} {}", style.dim("|"), clip(line, 160))?;
    }
    writeln!(out)?;
    let e = &rec.effective;
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
        if rec.flags.is_empty() {
            "(none)".into()
        } else {
            rec.flags.join(" ")
        }
    )?;
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
    for it in &rec.iterations {
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
    }
    for w in &rec.warnings {
        writeln!(out, "{} {w}", style.warn("warning:"))?;
    }
    writeln!(
        out,
        "{:<14} {}",
        style.bold("Run folder"),
        rec.run_dir.display()
    )?;
    Ok(())
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
