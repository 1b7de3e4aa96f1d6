//! Shortened runs (`--quick`) as both searches use them: whether the workflow can be
//! shortened, whether the search runs shortened, the failure on record that stands in for a
//! full run, and what shortened runs did for the session.

use crate::outcome::Outcome;
use crate::run::folder;
use crate::run::record::RunKind;
use crate::workflow::quick::Quick;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Whether the search runs shortened copies of the workflow, and why (or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuickState {
    /// Full runs only: `--quick off`, or the workflow cannot be shortened (why).
    Off(Option<String>),
    /// Not tried yet: the baseline has not failed in full, or its shortened run is next.
    Untried,
    /// A shortened run (run `check`: of the user's flags, or the first of any configuration
    /// that failed as they did) failed as their full one did (run `reference`): the search
    /// runs shortened.
    Reproduces { reference: u32, check: u32 },
    /// The user's flags failed in full once sampling had begun (run `reference`), and no
    /// shortened run failed as they did yet: the search runs shortened, the first shortened
    /// run that fails so is the check (a failing run of theirs shortened would say no more),
    /// and a shortened run that ends otherwise first calls the shortened run of their flags
    /// before it counts. (Without `--repeat`, and only where no full run of their flags
    /// passed before: a failure said or seen to be flaky checks their flags first.)
    Presumed { reference: u32 },
    /// Shortened runs were set aside (why); the search goes on in full.
    SetAside(String),
}

impl Default for QuickState {
    fn default() -> Self {
        QuickState::Off(None)
    }
}

/// The workflow's failure as it is on record from before the session (`--failed-log`: a log
/// of ComfyUI in which it failed with these flags). Once a shortened run of the user's flags
/// fails the same way, it stands in for the full run of them: the search starts from the
/// shortened check, and spends the full baseline only where that check does not fail so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// How the prompt ended there (`oom`).
    pub outcome: Outcome,
    /// The known failures it matched (`cuda_oom_native`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<String>,
    /// The log, as given.
    pub file: String,
    /// The line where the failed prompt began there.
    pub line: u64,
    /// The sampling step it failed after, where the log's progress bar stopped short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<u64>,
}

impl Recorded {
    /// "the log you gave (comfyui.log, the prompt at line 26)".
    pub fn source(&self) -> String {
        format!(
            "the log you gave ({}, the prompt at line {})",
            self.file, self.line
        )
    }
}

/// One run of a configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub n: u32,
    pub kind: RunKind,
    pub outcome: Outcome,
    pub duration_ms: u64,
}

/// What shortened runs did for the search (`--quick`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QuickSummary {
    /// `--quick` as given: `auto`, `off` or a number of steps.
    pub asked: String,
    /// `used` (the search ran shortened), `set_aside` (it did, then went on in full),
    /// `not_used` (every run was full), `unchecked` (stopped after shortened runs, none of
    /// which failed as the workflow did, before the shortened run of your flags).
    pub state: String,
    /// The sampling steps of a shortened run.
    pub steps: Option<u64>,
    /// The shortened run that failed as your workflow does (of your flags, or the first of
    /// any configuration), and that full run.
    pub reproduced_by_run: Option<u32>,
    pub reference_run: Option<u32>,
    /// The full run the verdict was confirmed by.
    pub confirmed_by_run: Option<u32>,
    /// Why shortened runs were not used, or were set aside.
    pub reason: Option<String>,
    pub runs_quick: usize,
    pub runs_full: usize,
    /// ComfyUI time of every run.
    pub time_spent_ms: u64,
    /// What the same runs would have cost in full (each shortened run priced at the mean
    /// full run that ended the same way); null when no such full run was measured.
    pub full_runs_estimate_ms: Option<u64>,
    /// The sentence for people: what was shortened and which runs were full.
    pub statement: String,
}

/// What shortened runs did, from the search's state and every run (a bisect's or a
/// regress's): the counts, the time, and the sentence.
pub(crate) fn summarize_quick(
    state: &QuickState,
    runs: &[RunSummary],
    asked: Quick,
    steps: Option<u64>,
    confirmed_by_run: Option<u32>,
    recorded: Option<&Recorded>,
) -> QuickSummary {
    let runs_quick = runs.iter().filter(|t| t.kind == RunKind::Quick).count();
    let time_spent_ms = runs.iter().map(|t| t.duration_ms).sum();
    let steps = steps.or(asked.steps().map(u64::from));
    let mean_full = |ended: &dyn Fn(Outcome) -> bool| {
        let times: Vec<u64> = runs
            .iter()
            .filter(|t| t.kind == RunKind::Full && ended(t.outcome))
            .map(|t| t.duration_ms)
            .collect();
        (!times.is_empty()).then(|| times.iter().sum::<u64>() / times.len() as u64)
    };
    let full_runs_estimate_ms = runs.iter().try_fold(0u64, |sum, t| {
        let cost = match t.kind {
            RunKind::Full => Some(t.duration_ms),
            RunKind::Quick if t.outcome == Outcome::Pass => mean_full(&|o| o == Outcome::Pass),
            RunKind::Quick => mean_full(&|o| o == t.outcome),
        };
        cost.map(|c| sum + c)
    });
    let mut out = QuickSummary {
        asked: asked.to_string(),
        runs_quick,
        runs_full: runs.len() - runs_quick,
        time_spent_ms,
        full_runs_estimate_ms,
        ..QuickSummary::default()
    };
    let secs = |ms: u64| crate::duration::format_duration(std::time::Duration::from_millis(ms));
    let cost = match full_runs_estimate_ms {
        Some(full) if runs_quick > 0 => format!(
            " ComfyUI time {}; the same runs in full about {}.",
            secs(time_spent_ms),
            secs(full)
        ),
        _ => String::new(),
    };
    match state {
        QuickState::Reproduces { reference, check } => {
            out.state = "used".into();
            out.steps = steps;
            out.reproduced_by_run = Some(*check);
            // (0: the failure on record, no run of this session.)
            out.reference_run = (*reference > 0).then_some(*reference);
            out.confirmed_by_run = confirmed_by_run;
            let steps = steps
                .map(|s| format!("{s}-step"))
                .unwrap_or("shortened".into());
            let why = if let (0, Some(_)) = (*reference, recorded) {
                format!("which fail as your workflow did in the log you gave (run {check})")
            } else if check == reference {
                format!(
                    "your workflow failed before its first sampling step (run {check}), where a shortened copy is the same run"
                )
            } else {
                format!("which fail as your workflow does (run {check})")
            };
            let shortened = |n: u32| runs.iter().any(|t| t.n == n && t.kind == RunKind::Quick);
            out.statement = match confirmed_by_run {
                Some(c) if shortened(c) => format!(
                    "Searched on {steps} runs, {why}; confirmed on your workflow (run {c}, which failed before sampling: the same run in full)."
                ),
                Some(c) => format!(
                    "Searched on {steps} runs, {why}; confirmed on your workflow (run {c})."
                ),
                None => {
                    format!("Searched on {steps} runs, {why}; not confirmed on your workflow yet.")
                }
            } + &cost;
        }
        QuickState::SetAside(why) => {
            out.state = "set_aside".into();
            out.steps = steps;
            out.reason = Some(why.clone());
            out.confirmed_by_run = confirmed_by_run;
            out.statement = format!(
                "Shortened runs were set aside ({why}): the search went on with your workflow in full."
            ) + &cost;
        }
        QuickState::Off(why) => {
            out.state = "not_used".into();
            out.reason = why.clone();
            if let Some(why) = why {
                out.statement = format!("All runs were full: {why}.");
            }
        }
        QuickState::Presumed { .. } if runs_quick > 0 => {
            out.state = "unchecked".into();
            out.steps = steps;
            out.statement = "Shortened runs were made, but none failed as your workflow did yet and the shortened run of your flags was not made: they do not count."
                .into();
        }
        QuickState::Untried | QuickState::Presumed { .. } => out.state = "not_used".into(),
    }
    out
}

/// Whether `prompt` can be shortened as `quick` asks: `None` when it can, else why not.
pub(crate) fn unshortenable(
    prompt: &serde_json::Map<String, serde_json::Value>,
    quick: Quick,
) -> Option<String> {
    crate::workflow::quick::for_mode(prompt, quick).err()
}

/// What is known of the workflow's shortening before a run: from the API prompt given, or
/// from the prompt a finished run converted and kept.
pub(crate) fn known_shortening<'a>(
    workflow: &crate::workflow::Workflow,
    quick: Quick,
    run_dirs: impl IntoIterator<Item = &'a Path>,
) -> Option<Option<String>> {
    if quick == Quick::Off {
        return Some(None);
    }
    if workflow.ui.is_none() {
        return Some(unshortenable(&workflow.prompt, quick));
    }
    run_dirs
        .into_iter()
        .find_map(kept_prompt)
        .map(|p| unshortenable(&p, quick))
}

/// The API prompt a run folder kept (`workflow.json`).
pub(crate) fn kept_prompt(dir: &Path) -> Option<serde_json::Map<String, serde_json::Value>> {
    let text = std::fs::read_to_string(dir.join(folder::WORKFLOW)).ok()?;
    serde_json::from_str(&text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u32, kind: RunKind, outcome: Outcome) -> RunSummary {
        RunSummary {
            n,
            kind,
            outcome,
            duration_ms: 1000,
        }
    }

    #[test]
    fn a_session_stopped_before_its_shortened_runs_counted_says_so() {
        let state = QuickState::Presumed { reference: 1 };
        let runs = [
            run(1, RunKind::Full, Outcome::Oom),
            run(2, RunKind::Quick, Outcome::Pass),
        ];
        let out = summarize_quick(&state, &runs, Quick::Auto, Some(2), None, None);
        assert_eq!(out.state, "unchecked");
        assert_eq!(out.reproduced_by_run, None);
        assert!(
            out.statement.contains("they do not count"),
            "{}",
            out.statement
        );
        // Stopped before any shortened run: nothing shortened was used.
        let out = summarize_quick(&state, &runs[..1], Quick::Auto, Some(2), None, None);
        assert_eq!(
            (out.state.as_str(), out.statement.as_str()),
            ("not_used", "")
        );
    }
}
