//! The answer of `logscan`: what the log says, as printed and as `--json`.

use super::advice::{self, Bisect, Setup};
use super::lines::LaunchArgs;
use super::state::{PromptSummary, Scanned, SignatureHits, StartSummary};
use crate::error::exit;
use crate::outcome::Outcome;
use crate::startup::StartupFacts;
use serde::Serialize;
use std::collections::BTreeMap;

/// The effective configuration of the last server start.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Startup {
    #[serde(flatten)]
    pub facts: StartupFacts,
    /// ComfyUI's flags, when the log shows them (null: not shown).
    pub launch_args: Option<Vec<String>>,
    /// The line they were read from.
    pub launch_args_source: Option<String>,
    pub comfyui_dir: Option<String>,
    /// The line the start begins on (null: the log begins after it).
    pub line: Option<u64>,
}

/// A known failure signature the log shows, and the experiment that tests it.
#[derive(Debug, Clone, Serialize)]
pub struct KnownIssue {
    pub id: &'static str,
    pub title: &'static str,
    pub outcome: Outcome,
    pub meaning: &'static str,
    pub flags_to_try: &'static [&'static str],
    pub issues: &'static [u32],
    pub issue_urls: Vec<String>,
    /// How many lines showed it, and in how many prompts.
    pub lines: u64,
    pub prompts: u64,
    pub first_line: u64,
    pub last_line: u64,
    pub example: String,
    pub bisect: Bisect,
}

/// Two server starts in the log with different flags and different results: the log's own
/// experiment ("works with --disable-dynamic-vram, fails without", #13598, #16225).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub failed_start: u64,
    pub failed_flags: Vec<String>,
    pub passed_start: u64,
    pub passed_flags: Vec<String>,
    /// Flags the passing start has and the failing one had not, and the other way round.
    pub added: Vec<String>,
    pub removed: Vec<String>,
    pub statement: String,
    /// The bisect that finds which of the added flags is needed (it also tries removing the
    /// failing start's own flags).
    pub bisect: Bisect,
}

/// Everything `logscan` says about a log.
#[derive(Debug, Clone, Serialize)]
pub struct LogReport {
    /// The file as given (`-` for standard input).
    pub file: String,
    pub encoding: &'static str,
    pub bytes: u64,
    pub lines: u64,
    /// The last prompt's outcome (of those that ran), or `startup_failed` / `flag_rejected`
    /// when the last server start never came up; null when nothing can be said (no prompt,
    /// or the log ends while the last one runs).
    pub outcome: Option<Outcome>,
    /// One sentence saying so.
    pub summary: String,
    /// The log ends while its last prompt runs (cut, or still running when copied): its
    /// outcome is unknown, which is not a hang.
    pub ends_mid_prompt: bool,
    /// What the log does not show, so cannot be said: `the server start` (it begins after
    /// ComfyUI started), `how the last prompt ended`.
    pub not_seen: Vec<&'static str>,
    pub startup: Startup,
    pub starts: Vec<StartSummary>,
    pub starts_total: u64,
    pub prompts: Vec<PromptSummary>,
    pub prompts_total: u64,
    /// Prompts left out of `prompts` (a long log keeps its first failures and last prompts).
    pub prompts_omitted: u64,
    /// Prompts per outcome (`unknown`: did not finish in the log).
    pub prompt_counts: BTreeMap<String, u64>,
    pub known_issues: Vec<KnownIssue>,
    /// Set when two starts in the log already compare flags.
    pub comparison: Option<Comparison>,
    /// The log shows a traceback outside a server start (an exception was raised), whether or
    /// not the excerpt shows where it ended.
    pub exception_raised: bool,
}

/// Where the answer comes from.
enum Basis<'a> {
    StartFailed(&'a StartSummary),
    Starting,
    Prompt(&'a PromptSummary),
    NoPrompt,
}

impl LogReport {
    /// Puts the scan together.
    pub fn build(
        file: String,
        encoding: &'static str,
        bytes: u64,
        lines: u64,
        scanned: Scanned,
    ) -> LogReport {
        let Scanned {
            starts,
            starts_total,
            prompts,
            prompts_total,
            prompt_counts,
            tallies,
            dynamic_loads,
            frames_outside_startup,
            ..
        } = scanned;
        let startup = starts.last().map_or_else(Startup::default, |s| Startup {
            facts: s.facts.clone(),
            launch_args: s.launch_args.as_ref().map(|l| l.args.clone()),
            launch_args_source: s
                .launch_args
                .as_ref()
                .map(|l: &LaunchArgs| l.source.clone()),
            comfyui_dir: s.comfyui_dir.clone(),
            line: Some(s.line),
        });
        // No startup block says it, but a model `prepared for dynamic VRAM loading` does.
        let mut startup = startup;
        if startup.facts.dynamic_vram.is_none() && dynamic_loads {
            startup.facts.dynamic_vram = Some(true);
            startup.facts.dynamic_vram_note =
                Some("from 'prepared for dynamic VRAM loading' lines".into());
        }
        let mut report = LogReport {
            file,
            encoding,
            bytes,
            lines,
            outcome: None,
            summary: String::new(),
            ends_mid_prompt: false,
            not_seen: Vec::new(),
            startup,
            prompts_omitted: prompts_total - prompts.len() as u64,
            starts,
            starts_total,
            prompts,
            prompts_total,
            prompt_counts,
            known_issues: Vec::new(),
            comparison: None,
            exception_raised: frames_outside_startup,
        };
        let (outcome, summary, decisive) = {
            let basis = report.basis();
            let decisive: Vec<&'static str> = match &basis {
                Basis::StartFailed(s) => s.signatures.clone(),
                Basis::Prompt(p) => p.signatures.clone(),
                _ => Vec::new(),
            };
            (
                report.outcome_of(&basis),
                report.summary_of(&basis),
                decisive,
            )
        };
        report.outcome = outcome;
        report.summary = summary;
        report.ends_mid_prompt = report
            .prompts
            .last()
            .is_some_and(|p| p.outcome.is_none() && !p.error_cut)
            && report.outcome.is_none();
        if report.starts_total == 0 {
            report.not_seen.push("the server start");
        }
        if report.ends_mid_prompt {
            report.not_seen.push("how the last prompt ended");
        } else if report.prompts.last().is_some_and(|p| p.error_cut) {
            report.not_seen.push("what the last prompt failed with");
        }
        if report.prompts_total == 0 {
            report.not_seen.push("a prompt");
        }
        report.known_issues = known_issues(tallies, &decisive);
        report.comparison = comparison(&report.starts);
        report
    }

    fn basis(&self) -> Basis<'_> {
        if let Some(s) = self.starts.last()
            && !s.up
            && self.prompts.last().is_none_or(|p| p.line < s.line)
        {
            match s.outcome {
                Some(_) => return Basis::StartFailed(s),
                // Ending during a restart says nothing of the prompts before it: they are
                // the answer (the summary adds the restart).
                None if self.prompts.is_empty() => return Basis::Starting,
                None => {}
            }
        }
        let ran = self
            .prompts
            .iter()
            .rev()
            .find(|p| p.outcome != Some(Outcome::InvalidWorkflow));
        match ran.or(self.prompts.last()) {
            Some(p) => Basis::Prompt(p),
            None => Basis::NoPrompt,
        }
    }

    fn outcome_of(&self, basis: &Basis<'_>) -> Option<Outcome> {
        match basis {
            Basis::StartFailed(s) => s.outcome,
            Basis::Prompt(p) => p.outcome,
            Basis::Starting | Basis::NoPrompt => None,
        }
    }

    fn summary_of(&self, basis: &Basis<'_>) -> String {
        let mut text = match basis {
            Basis::StartFailed(s) => {
                let o = s.outcome.unwrap_or(Outcome::StartupFailed);
                format!(
                    "ComfyUI never came up (start at line {}): {}.",
                    s.line,
                    o.describe()
                )
            }
            Basis::Starting => "The log ends while ComfyUI starts.".to_string(),
            Basis::NoPrompt if self.starts_total > 0 => {
                "ComfyUI started; no prompt ran in this log.".to_string()
            }
            Basis::NoPrompt => "The log shows no server start and no prompt.".to_string(),
            Basis::Prompt(p) => {
                let which = format!("The last prompt (#{}, line {})", p.index, p.line);
                match p.outcome {
                    Some(Outcome::Pass) => format!("{which} passed."),
                    Some(Outcome::Interrupted) => format!("{which} was interrupted."),
                    Some(Outcome::InvalidWorkflow) => {
                        format!("{which} was refused by ComfyUI: invalid workflow.")
                    }
                    Some(o) => format!("{which} failed: {}.", o.describe()),
                    None if p.error_cut => format!(
                        "{which} failed, but the log ends inside its traceback, before the exception line that says what with (outcome unknown)."
                    ),
                    None => format!(
                        "{which} did not finish in the log: it ends while the prompt runs (outcome unknown, not a hang)."
                    ),
                }
            }
        };
        if let (Basis::Prompt(_), Some(s)) = (basis, self.starts.last())
            && !s.up
            && s.outcome.is_none()
            && self.prompts.last().is_some_and(|p| p.line < s.line)
        {
            text.push_str(&format!(
                " ComfyUI then started again (line {}); the log ends before it was ready.",
                s.line
            ));
        }
        let failed: u64 = self
            .prompt_counts
            .iter()
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "pass" | "unknown" | "interrupted" | "invalid_workflow"
                )
            })
            .map(|(_, n)| n)
            .sum();
        if self.prompts_total > 1 {
            text.push_str(&format!(
                " {failed} of {} prompts failed.",
                self.prompts_total
            ));
        }
        text
    }

    /// 0: the log shows no failure; 1: it shows one (a failed or refused prompt, a failed
    /// start, a known failure signature anywhere, or an exception raised).
    pub fn exit_code(&self) -> i32 {
        // A workflow ComfyUI refused is a failure too: nothing the user asked for ran.
        let failed_prompt = self
            .prompt_counts
            .iter()
            .any(|(k, n)| *n > 0 && !matches!(k.as_str(), "pass" | "unknown" | "interrupted"));
        let failed_start = self.starts.iter().any(|s| s.outcome.is_some());
        if failed_prompt || failed_start || !self.known_issues.is_empty() || self.exception_raised {
            exit::FAILED
        } else {
            exit::OK
        }
    }
}

/// The tallies as known issues: those behind the answer first, then in order of appearance.
fn known_issues(mut tallies: Vec<SignatureHits>, decisive: &[&'static str]) -> Vec<KnownIssue> {
    tallies.sort_by_key(|t| {
        let rank = decisive
            .iter()
            .position(|d| *d == t.signature.id)
            .unwrap_or(usize::MAX);
        (rank, t.first_line)
    });
    tallies
        .into_iter()
        .map(|t| {
            let sig = t.signature;
            let setup = Setup {
                launch_args: t.launch_args.clone(),
                comfyui_dir: t.comfyui_dir.clone(),
                comfyui_version: t.comfyui_version.clone(),
                dynamic_vram: t.dynamic_vram,
                first_failing_prompt: t.min_ordinal,
            };
            KnownIssue {
                id: sig.id,
                title: sig.title,
                outcome: sig.outcome,
                meaning: sig.meaning,
                flags_to_try: sig.flags_to_try,
                issues: sig.issues,
                issue_urls: sig
                    .issues
                    .iter()
                    .map(|n| format!("https://github.com/Comfy-Org/ComfyUI/issues/{n}"))
                    .collect(),
                lines: t.lines,
                prompts: t.prompts,
                first_line: t.first_line,
                last_line: t.last_line,
                example: t.example,
                bisect: advice::bisect(sig, &setup),
            }
        })
        .collect()
}

/// Splits arguments into flags with their values: `--reserve-vram 2` is one.
fn flag_groups(args: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in args {
        match out.last_mut() {
            Some(last) if !a.starts_with("--") => {
                last.push(' ');
                last.push_str(a);
            }
            _ => out.push(a.clone()),
        }
    }
    out
}

/// The last start whose prompts all passed, against the last earlier one with failures.
fn comparison(starts: &[StartSummary]) -> Option<Comparison> {
    let (bi, b) = starts
        .iter()
        .enumerate()
        .rev()
        .find(|(_, s)| s.passed > 0 && s.failed == 0 && s.launch_args.is_some())?;
    let b_args = &b.launch_args.as_ref()?.args;
    let a = starts[..bi]
        .iter()
        .rev()
        .find(|s| s.failed > 0 && s.launch_args.as_ref().is_some_and(|l| &l.args != b_args))?;
    let a_args = &a.launch_args.as_ref()?.args;
    let (ga, gb) = (flag_groups(a_args), flag_groups(b_args));
    let added: Vec<String> = gb.iter().filter(|f| !ga.contains(f)).cloned().collect();
    let removed: Vec<String> = ga.iter().filter(|f| !gb.contains(f)).cloned().collect();
    let show = |g: &[String]| {
        if g.is_empty() {
            "no flags".to_string()
        } else {
            g.join(" ")
        }
    };
    let mut change = Vec::new();
    if !added.is_empty() {
        change.push(format!("adding {}", added.join(", ")));
    }
    if !removed.is_empty() {
        change.push(format!("removing {}", removed.join(", ")));
    }
    let statement = format!(
        "Start #{} ({}) had failing prompts; start #{} ({}) passed: {} made the difference in this log.",
        a.index,
        show(&ga),
        b.index,
        show(&gb),
        change.join(" and ")
    );
    let toggles: Vec<String> = added.iter().map(|g| g.replacen(' ', "=", 1)).collect();
    let setup = Setup {
        launch_args: Some(a_args.clone()),
        comfyui_dir: a.comfyui_dir.clone().or_else(|| b.comfyui_dir.clone()),
        comfyui_version: a.facts.comfyui_version.clone(),
        dynamic_vram: a.facts.dynamic_vram,
        first_failing_prompt: None,
    };
    let bisect = if toggles.is_empty() {
        // Only removals: the failing start's own flags are the question.
        advice::with_toggles(Vec::new(), &setup)
    } else {
        advice::with_toggles(toggles, &setup)
    };
    Some(Comparison {
        failed_start: a.index,
        failed_flags: ga,
        passed_start: b.index,
        passed_flags: gb,
        added,
        removed,
        statement,
        bisect,
    })
}
