//! The result of a bisect: the contract's JSON, the statement a person can paste, the table.

use super::search::{
    Cheaper, Fix, Found, NoFix, Prior, RunKind, Strategy, Tally, Trial, VerdictKind,
};
use super::space::{Skipped, Space};
use crate::outcome::Outcome;
use crate::output::{Answer, Style};
use crate::session::failure::FailureRate;
use crate::session::quick::{QuickSummary, Recorded, RunSummary, summarize_quick};
use comfy_table::Cell;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::PathBuf;

/// The baseline: the user's flags unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub flags: Vec<String>,
    /// The failure hunted, or `pass` when it did not reproduce.
    pub outcome: Outcome,
    pub runs: usize,
    pub failures: usize,
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub kind: VerdictKind,
    pub fixing_flags: Vec<String>,
    pub culprit_flags: Vec<String>,
    /// One sentence a person can paste.
    pub statement: String,
    /// The flags to start ComfyUI with (the confirmed configuration).
    pub flags: Option<Vec<String>>,
    /// The command line (or launcher line) to use.
    pub launcher_line: Option<String>,
    pub reason: Option<String>,
    pub flaky: bool,
    /// How sure the verdict is given the runs that happened: the posterior of the answer for
    /// flaky failures, 1.0 when every run agreed; null without a verdict about flags.
    #[serde(default)]
    pub confidence: Option<f64>,
    /// For flaky failures: how often configurations without the fix failed (90% interval).
    #[serde(default)]
    pub failure_rate: Option<FailureRate>,
    /// The recommended fix (`fixing_flags`), with what it cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<Fix>,
    /// The other fixes that passed, best first: each with its flags, its cost relative to the
    /// recommendation, whether it keeps Dynamic VRAM on and whether a full run confirmed it.
    #[serde(default)]
    pub alternatives: Vec<Fix>,
    /// Searched values that did not help even at the most tried.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_helped: Vec<String>,
    /// What the search for a cheaper fix did (`--first-fix`: nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cheaper_search: Option<Cheaper>,
    /// What the baseline's failure said to try first (the known failure it matched and its
    /// usual fixes among the toggles); null where it matched none with fixes among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prior: Option<Prior>,
    /// The failure `--failed-log` showed, where it stood in for a full run of the user's
    /// flags (a shortened run of them failed the same way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_on_record: Option<Recorded>,
}

impl Verdict {
    /// The flags the verdict names: the fix, or the culprit.
    pub fn named_flags(&self) -> Vec<&String> {
        self.fixing_flags
            .iter()
            .chain(&self.culprit_flags)
            .collect()
    }
}

/// The failing configuration without custom nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomNodesCheck {
    pub flags: Vec<String>,
    pub outcome: Outcome,
    pub run_dir: Option<PathBuf>,
    /// How many custom nodes the install has (besides ComfyUI's own example).
    pub custom_nodes: usize,
    /// One sentence: what the run says about the custom nodes.
    pub statement: String,
}

impl CustomNodesCheck {
    /// What the run says, given the failure the bisect hunts.
    pub fn new(
        flags: Vec<String>,
        outcome: Outcome,
        run_dir: Option<PathBuf>,
        custom_nodes: usize,
        target: Outcome,
    ) -> CustomNodesCheck {
        let (not_needed, involved) = if custom_nodes == 1 {
            (
                "the custom node is not needed for the failure".to_string(),
                "the custom node is involved".to_string(),
            )
        } else {
            (
                format!("the {custom_nodes} custom nodes are not needed for the failure"),
                format!("one of the {custom_nodes} custom nodes is involved"),
            )
        };
        let statement = if outcome == target {
            format!(
                "Without custom nodes (--disable-all-custom-nodes) it still fails ({}): {not_needed}.",
                outcome.describe()
            )
        } else if outcome == Outcome::Pass {
            format!("Without custom nodes (--disable-all-custom-nodes) it passes: {involved}.")
        } else if outcome == Outcome::InvalidWorkflow {
            "Without custom nodes the workflow cannot run (it uses their nodes), so this could not be tested.".to_string()
        } else {
            format!(
                "Without custom nodes (--disable-all-custom-nodes) it ended otherwise: {}.",
                outcome.describe()
            )
        };
        CustomNodesCheck {
            flags,
            outcome,
            run_dir,
            custom_nodes,
            statement,
        }
    }
}

/// One configuration tried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    /// It could not start on this machine (every run ended at start-up): untestable here,
    /// not a failure of the flags.
    #[serde(default)]
    pub untestable_here: bool,
    pub flags: Vec<String>,
    /// What differs from the baseline, in words.
    pub changes: Vec<String>,
    /// `pass` if every run passed, else the most frequent failure.
    pub outcome: Outcome,
    pub runs: usize,
    pub passes: usize,
    pub failures: usize,
    /// Runs that failed some other way than the failure hunted (unresolved, not passes).
    pub unresolved: usize,
    pub peak_vram_bytes: Option<u64>,
    pub peak_ram_bytes: Option<u64>,
    /// The most RAM kept per prompt in a run of it, when RAM grew (null otherwise).
    #[serde(default)]
    pub ram_growth_per_prompt_bytes: Option<i64>,
    /// The mean time of every run of it, shortened and full together (`each_run` has each).
    pub mean_duration_ms: u64,
    pub run_dirs: Vec<PathBuf>,
    /// Every run of it, in order: its number, `quick` or `full`, outcome and time.
    #[serde(default)]
    pub each_run: Vec<RunSummary>,
}

impl ConfigResult {
    /// The mean time of a run, full and shortened apart: `12.3 s`, `4.1 s shortened`, or
    /// `12.3 s, 4.1 s shortened` (a result without each run's kind gives the mean of all).
    pub fn time_text(&self) -> String {
        let secs = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
        let mean = |kind: RunKind| {
            let ms: Vec<u64> = self
                .each_run
                .iter()
                .filter(|r| r.kind == kind)
                .map(|r| r.duration_ms)
                .collect();
            (!ms.is_empty()).then(|| ms.iter().sum::<u64>() / ms.len() as u64)
        };
        match (mean(RunKind::Full), mean(RunKind::Quick)) {
            (Some(full), Some(quick)) => format!("{}, {} shortened", secs(full), secs(quick)),
            (None, Some(quick)) => format!("{} shortened", secs(quick)),
            (Some(full), None) => secs(full),
            (None, None) => secs(self.mean_duration_ms),
        }
    }
}

/// The whole result (`bisect --json`, `result.json` in the session folder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BisectResult {
    pub baseline: Baseline,
    pub verdict: Verdict,
    pub configs: Vec<ConfigResult>,
    pub runs_total: u32,
    pub session_dir: PathBuf,
    pub strategy: Strategy,
    pub toggles: Vec<String>,
    pub skipped_toggles: Vec<Skipped>,
    /// For a bisect stopped before its verdict: the command that continues it (with a larger
    /// `--max-runs` when the budget was spent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_with: Option<String>,
    /// The failing configuration run once more with `--disable-all-custom-nodes` (the bug
    /// template's first question), when the install has custom nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_nodes_check: Option<CustomNodesCheck>,
    /// Which toggles were tried and why, when the user named none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toggle_set: Option<String>,
    /// The ComfyUI folder and the Python the runs used, and where each came from.
    #[serde(default)]
    pub defaults: crate::locate::Defaults,
    /// Shortened runs: whether the search used them, which runs were full, the time.
    #[serde(default)]
    pub quick: QuickSummary,
}

fn most_frequent_failure(t: &Tally) -> Option<Outcome> {
    let mut counts: Vec<(Outcome, usize)> = Vec::new();
    for trial in t.trials.iter().filter(|t| t.outcome != Outcome::Pass) {
        match counts.iter_mut().find(|(o, _)| *o == trial.outcome) {
            Some((_, n)) => *n += 1,
            None => counts.push((trial.outcome, 1)),
        }
    }
    counts.into_iter().max_by_key(|(_, n)| *n).map(|(o, _)| o)
}

/// What a result says about its session besides the search itself.
pub(crate) struct SessionInfo<'a> {
    pub session_dir: PathBuf,
    pub strategy: Strategy,
    pub toggles: Vec<String>,
    /// Turns a configuration's flags into the line to start ComfyUI with.
    pub launcher: &'a dyn Fn(&[String]) -> String,
    /// `--quick` as given, and the steps a shortened run sampled (when one ran).
    pub quick: crate::workflow::quick::Quick,
    pub quick_steps: Option<u64>,
}

/// Builds the result from a finished (or stopped) search.
pub(crate) fn build(
    space: &Space,
    found: &Found,
    tallies: &[Tally],
    runs_total: u32,
    info: SessionInfo,
) -> BisectResult {
    let SessionInfo {
        session_dir,
        strategy,
        toggles,
        launcher,
        quick,
        quick_steps,
    } = info;
    let base_cfg = space.baseline();
    let base = tallies.iter().find(|t| t.config.key == base_cfg.key);
    let target = found.target;
    let baseline = Baseline {
        flags: base_cfg.flags.clone(),
        outcome: target.or(found.baseline_outcome).unwrap_or(Outcome::Pass),
        runs: base.map(Tally::runs).unwrap_or(0),
        failures: base.map(|t| t.runs() - t.passes()).unwrap_or(0),
    };
    // Only configurations that ran (a journal may list one whose runs were all cut short).
    let configs: Vec<ConfigResult> = tallies
        .iter()
        .filter(|t| t.runs() > 0)
        .map(|t| ConfigResult {
            untestable_here: could_not_start(t, space),
            flags: t.config.flags.clone(),
            changes: if t.config.choice.is_empty() {
                vec!["(your flags)".into()]
            } else {
                space.describe(&t.config.choice)
            },
            outcome: most_frequent_failure(t).unwrap_or(Outcome::Pass),
            runs: t.runs(),
            passes: t.passes(),
            failures: target.map(|o| t.count(o)).unwrap_or(0),
            unresolved: target.map(|o| t.others(o)).unwrap_or(0),
            peak_vram_bytes: t.trials.iter().filter_map(|r| r.peak_vram_bytes).max(),
            peak_ram_bytes: t.trials.iter().filter_map(|r| r.peak_ram_bytes).max(),
            ram_growth_per_prompt_bytes: t.trials.iter().filter_map(|r| r.ram_growth_bytes).max(),
            mean_duration_ms: if t.trials.is_empty() {
                0
            } else {
                t.trials.iter().map(|r| r.duration_ms).sum::<u64>() / t.trials.len() as u64
            },
            run_dirs: t.trials.iter().filter_map(|r| r.run_dir.clone()).collect(),
            each_run: t
                .trials
                .iter()
                .map(|r| RunSummary {
                    n: r.n,
                    kind: r.kind,
                    outcome: r.outcome,
                    duration_ms: r.duration_ms,
                })
                .collect(),
        })
        .collect();
    let quick = quick_summary(found, tallies, quick, quick_steps);
    let verdict_tally = found
        .config
        .as_ref()
        .and_then(|c| tallies.iter().find(|t| t.config.key == c.key));
    let ran: Vec<&Tally> = tallies.iter().filter(|t| t.runs() > 0).collect();
    let untestable = ran.iter().filter(|t| could_not_start(t, space)).count();
    let mut statement = statement(
        found,
        &baseline,
        verdict_tally,
        base,
        ran.len() - untestable,
        untestable,
        runs_total,
    );
    // How the runs were made says nothing where none finished.
    if !quick.statement.is_empty() && runs_total > 0 {
        statement.push(' ');
        statement.push_str(&quick.statement);
    }
    statement.push_str(&fixes_statement(found));
    // RAM that is not given back is a finding whatever the verdict.
    if let Some(g) = base.and_then(|t| t.trials.iter().filter_map(|r| r.ram_growth_bytes).max()) {
        statement.push_str(&format!(
            " With your flags RAM grew by {} per prompt and was not returned.",
            crate::text::bytes(g)
        ));
    }
    BisectResult {
        baseline,
        verdict: Verdict {
            kind: found.kind,
            fixing_flags: found.fixing_flags.clone(),
            culprit_flags: found.culprit_flags.clone(),
            statement,
            flags: found.config.as_ref().map(|c| c.flags.clone()),
            launcher_line: found.config.as_ref().map(|c| launcher(&c.flags)),
            reason: found.reason.clone(),
            flaky: found.flaky,
            confidence: found.confidence,
            failure_rate: found
                .failure_rate
                .map(|(low, high)| FailureRate { low, high }),
            fix: found.fix.clone(),
            alternatives: found.alternatives.clone(),
            not_helped: found.not_helped.clone(),
            cheaper_search: found.cheaper.clone(),
            prior: found.prior.clone().filter(|p| !p.flags.is_empty()),
            failure_on_record: found.failure_on_record.clone(),
        },
        configs,
        runs_total,
        session_dir,
        strategy,
        toggles,
        skipped_toggles: space.skipped.clone(),
        continue_with: None,
        custom_nodes_check: None,
        toggle_set: None,
        defaults: Default::default(),
        quick,
    }
}

/// What shortened runs did: from the search's state and the runs.
fn quick_summary(
    found: &Found,
    tallies: &[Tally],
    asked: crate::workflow::quick::Quick,
    steps: Option<u64>,
) -> QuickSummary {
    let all: Vec<&Trial> = tallies.iter().flat_map(|t| &t.trials).collect();
    // The full run that confirmed the verdict: the last full run of its configuration (for
    // no fix, the last full run after the shortened runs began).
    let confirmed_by_run = match &found.config {
        Some(c) => tallies
            .iter()
            .filter(|t| t.config.key == c.key)
            .flat_map(|t| &t.trials)
            .filter(|t| t.kind == RunKind::Full && t.outcome == Outcome::Pass)
            .map(|t| t.n)
            .max(),
        // The configuration with every change, where its shortened run failed before any
        // sampling step: the same run as in full, so none was made.
        None if found.kind == VerdictKind::NoFixFound
            && !found.flaky
            && everything_failed_before_sampling(tallies).is_some() =>
        {
            everything_failed_before_sampling(tallies)
        }
        None if found.kind == VerdictKind::NoFixFound && !found.flaky => {
            let first_quick = all
                .iter()
                .filter(|t| t.kind == RunKind::Quick)
                .map(|t| t.n)
                .min();
            first_quick.and_then(|q| {
                all.iter()
                    .filter(|t| t.kind == RunKind::Full && t.n > q)
                    .map(|t| t.n)
                    .max()
            })
        }
        None => None,
    };
    let runs: Vec<RunSummary> = all
        .iter()
        .map(|t| RunSummary {
            n: t.n,
            kind: t.kind,
            outcome: t.outcome,
            duration_ms: t.duration_ms,
        })
        .collect();
    summarize_quick(
        &found.quick,
        &runs,
        asked,
        steps,
        confirmed_by_run,
        found.failure_on_record.as_ref(),
    )
}

/// The shortened run of a configuration with the most changes that failed before any
/// sampling step and has no full run (the search makes none: it is the same run in full).
fn everything_failed_before_sampling(tallies: &[Tally]) -> Option<u32> {
    let most = tallies.iter().map(|t| t.config.choice.len()).max()?;
    tallies
        .iter()
        .filter(|t| t.config.choice.len() == most)
        .filter(|t| t.trials.iter().all(|r| r.kind == RunKind::Quick))
        .flat_map(|t| &t.trials)
        .filter(|r| r.before_sampling())
        .map(|r| r.n)
        .max()
}

/// "hits/runs" of the full runs of a configuration, and of its shortened ones when it has
/// any ("2/2 shortened").
fn split_counts(t: &Tally, hit: &dyn Fn(&Trial) -> bool) -> (String, Option<String>) {
    let count = |kind: RunKind| {
        let runs: Vec<&Trial> = t.trials.iter().filter(|r| r.kind == kind).collect();
        (runs.iter().filter(|r| hit(r)).count(), runs.len())
    };
    let (fh, fr) = count(RunKind::Full);
    let (qh, qr) = count(RunKind::Quick);
    let short = (qr > 0).then(|| format!("{qh}/{qr} shortened"));
    (format!("{fh}/{fr}"), short)
}

/// The one sentence: "Fails 3/3 with your flags (CUDA out of memory); passes 5/5 with
/// --disable-async-offload."
pub(crate) fn statement(
    found: &Found,
    baseline: &Baseline,
    verdict: Option<&Tally>,
    base: Option<&Tally>,
    configs_tried: usize,
    untestable: usize,
    runs: u32,
) -> String {
    let apart = match untestable {
        0 => String::new(),
        1 => " (1 more could not start on this machine: untestable here, not a failure)".into(),
        n => format!(" ({n} more could not start on this machine: untestable here, not failures)"),
    };
    let what = found.target.map(|o| o.describe()).unwrap_or("failure");
    // Runs of the workflow as it is, and shortened ones apart ("1/1 (2/2 shortened)").
    let fails = match base.map(|t| split_counts(t, &|r| r.outcome != Outcome::Pass)) {
        // No full run of the user's flags: the failure on record stood in for it.
        Some((full, Some(short))) if full == "0/0" && found.failure_on_record.is_some() => {
            let r = found.failure_on_record.as_ref().expect("checked");
            format!(
                "failed with your flags ({what}) in {}, and fails {short} with them",
                r.source()
            )
        }
        Some((full, Some(short))) => {
            format!("fails {full} in full with your flags ({what}; {short})")
        }
        Some((full, None)) => format!("fails {full} with your flags ({what})"),
        None => format!(
            "fails {}/{} with your flags ({what})",
            baseline.failures, baseline.runs
        ),
    };
    let passes = verdict
        .map(|t| match split_counts(t, &|r| r.outcome == Outcome::Pass) {
            (full, Some(short)) => format!("{full} in full ({short})"),
            (full, None) => full,
        })
        .unwrap_or_default();
    let with: Vec<String> = found
        .fixing_flags
        .iter()
        .cloned()
        .chain(found.culprit_flags.iter().map(|c| format!("without {c}")))
        .collect();
    // A flaky search says how sure it is, from the runs that happened.
    let sure = match (found.confidence, found.failure_rate) {
        (Some(p), Some((lo, hi))) => format!(
            ": {} given {runs} runs; failure rate without it {lo:.2}-{hi:.2}",
            crate::bayes::percent(p)
        ),
        _ => String::new(),
    };
    match found.kind {
        VerdictKind::FixedBy => format!(
            "{}; passes {passes} with {}{sure}.",
            capitalise(&fails),
            with.join(" and ")
        ),
        VerdictKind::CausedBy => format!(
            "{} causes it: the workflow {fails}, and passes {passes} without {}.",
            found.culprit_flags.join(" and "),
            if found.culprit_flags.len() > 1 {
                "them"
            } else {
                "it"
            }
        ),
        VerdictKind::NotReproduced => format!(
            "The failure did not reproduce: the workflow passed {0}/{0} with your flags. Try more --iterations, or your real launcher with --launcher.",
            baseline.runs
        ),
        VerdictKind::NoFixFound => match (&found.reason, configs_tried.saturating_sub(1)) {
            (Some(reason), _) if found.failure_rate.is_some() => {
                format!("{}; {reason}.", capitalise(&fails))
            }
            (Some(reason), _)
                if matches!(
                    found.no_fix,
                    Some(NoFix::NothingToTry | NoFix::ConfirmationFailed | NoFix::NotReliable)
                ) =>
            {
                format!("{}; no fix was confirmed: {reason}.", capitalise(&fails))
            }
            (_, 0) if untestable > 0 => format!(
                "{}; the other configurations could not start on this machine (untestable here).",
                capitalise(&fails)
            ),
            (_, 0) => format!("{}; there was nothing else to try.", capitalise(&fails)),
            (_, n) => format!(
                "{}; none of the {n} other configurations tried passed{apart}.",
                capitalise(&fails)
            ),
        },
        VerdictKind::Untestable => format!(
            "Could not test the workflow: {}.",
            found.reason.as_deref().unwrap_or("unknown reason")
        ),
        VerdictKind::Incomplete => format!(
            "Stopped before a verdict: {}.",
            found.reason.as_deref().unwrap_or("")
        ),
    }
}

/// Whether a configuration that leaves out one of the user's own flags could not start at
/// all (every run ended at start-up): the machine needs that flag (`--cpu` without a GPU), a
/// question it cannot answer, not a failure. A configuration that adds a toggle and then
/// cannot start failed because of that toggle, since the baseline started: that counts.
fn could_not_start(t: &Tally, space: &Space) -> bool {
    let removes_own_flag = t
        .config
        .choice
        .iter()
        .any(|(d, _)| matches!(space.dims[*d], crate::bisect::space::Dim::Remove { .. }));
    removes_own_flag
        && t.runs() > 0
        && t.trials
            .iter()
            .all(|r| matches!(r.outcome, Outcome::StartupFailed | Outcome::FlagRejected))
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

use crate::text::gib_or_dash as gib;

impl Answer for BisectResult {
    /// Prints the matrix, the verdict and the line to use.
    fn render(&self, style: &Style, out: &mut dyn Write) -> io::Result<()> {
        if !self.configs.is_empty() {
            writeln!(out, "{}", self.matrix())?;
            writeln!(out)?;
        }
        if let Some(why) = &self.toggle_set {
            writeln!(
                out,
                "{} toggles to choose from ({why}): {}",
                style.dim("note:"),
                self.toggles.join(" ")
            )?;
        }
        for s in &self.skipped_toggles {
            writeln!(
                out,
                "{} skipped {}: {}",
                style.warn("note:"),
                s.toggle,
                s.reason
            )?;
        }
        let label = match self.verdict.kind {
            VerdictKind::FixedBy => style.good("FIXED BY"),
            VerdictKind::CausedBy => style.good("CAUSED BY"),
            VerdictKind::NotReproduced => style.warn("NOT REPRODUCED"),
            VerdictKind::NoFixFound => style.bad("NO FIX FOUND"),
            VerdictKind::Untestable => style.bad("UNTESTABLE"),
            VerdictKind::Incomplete => style.warn("INCOMPLETE"),
        };
        let flags: Vec<&str> = self
            .verdict
            .named_flags()
            .into_iter()
            .map(String::as_str)
            .collect();
        if flags.is_empty() {
            writeln!(out, "{label}")?;
        } else {
            writeln!(out, "{label} {}", flags.join(" "))?;
        }
        writeln!(out, "  {}", self.verdict.statement)?;
        if let Some(c) = &self.custom_nodes_check {
            writeln!(out, "  {}", c.statement)?;
        }
        if self.verdict.flaky {
            writeln!(
                out,
                "  {} outcomes were flaky: some configurations both passed and failed",
                style.warn("note:")
            )?;
        }
        write_fixes(out, &self.verdict, style)?;
        if let Some(p) = &self.verdict.prior {
            writeln!(
                out,
                "  {} {} ({})",
                style.dim("tried first:"),
                p.tried_first.clone().unwrap_or_else(|| format!(
                    "none ({})",
                    p.not_tried.as_deref().unwrap_or("none could run alone")
                )),
                prior_reason(p)
            )?;
        }
        if let Some(line) = &self.verdict.launcher_line {
            writeln!(out, "  start ComfyUI with: {}", style.bold(line))?;
        }
        writeln!(
            out,
            "  {} runs; session folder {}",
            self.runs_total,
            self.session_dir.display()
        )?;
        if let Some(line) = &self.continue_with {
            writeln!(out, "  continue with: {line}")?;
            if line.contains(" --max-runs ") {
                writeln!(
                    out,
                    "  {} its --max-runs raises the run budget, which this session spent",
                    style.dim("note:")
                )?;
            }
        }
        Ok(())
    }
}

impl BisectResult {
    /// The table of every configuration that ran. On a terminal too narrow for it, each change
    /// of a configuration gets a line of its own, and the column is never narrower than the
    /// longest change: a flag (or a flag and its value) is never split, or it is copied wrong.
    fn matrix(&self) -> comfy_table::Table {
        let build = |joiner: &str| {
            let mut table = crate::output::table();
            table.set_header(vec![
                "configuration",
                "outcome",
                "passes/runs",
                "peak VRAM",
                "peak RAM",
                "time",
            ]);
            for c in &self.configs {
                let mut outcome = c.outcome.to_string();
                if c.untestable_here {
                    outcome = format!("untestable here ({outcome})");
                }
                if c.unresolved > 0 {
                    outcome.push_str(&format!(" ({} unresolved)", c.unresolved));
                }
                table.add_row(vec![
                    Cell::new(c.changes.join(joiner)),
                    Cell::new(outcome),
                    Cell::new(format!("{}/{}", c.passes, c.runs)),
                    Cell::new(gib(c.peak_vram_bytes)),
                    Cell::new(match c.ram_growth_per_prompt_bytes {
                        Some(g) => format!(
                            "{} (+{}/prompt kept)",
                            gib(c.peak_ram_bytes),
                            crate::text::bytes(g)
                        ),
                        None => gib(c.peak_ram_bytes),
                    }),
                    Cell::new(c.time_text()),
                ]);
            }
            table
        };
        let table = build(", ");
        // Its width unwrapped: every column's widest content, its padding and the borders.
        let widths = table.column_max_content_widths();
        let natural = widths.iter().map(|w| usize::from(*w) + 3).sum::<usize>() + 1;
        if table.width().is_none_or(|w| usize::from(w) >= natural) {
            return table;
        }
        let mut table = build(",\n");
        let longest = self
            .configs
            .iter()
            .flat_map(|c| c.changes.iter())
            .map(|change| change.chars().count() + 3) // its comma and the cell's padding
            .max()
            .unwrap_or(0);
        if let Some(col) = table.column_mut(0) {
            col.set_constraint(comfy_table::ColumnConstraint::LowerBoundary(
                comfy_table::Width::Fixed(longest.min(usize::from(u16::MAX)) as u16),
            ));
        }
        table
    }
}

/// The search for a cheaper fix in words, its tries and the confirmation in full apart: "took
/// 3 of up to 13 more runs: 2 looked for a cheaper fix, 1 confirmed the recommendation in full"
/// ("looked for a cheaper fix in 2 of up to 13 more runs" where no confirmation was needed).
fn cheaper_text(c: &Cheaper) -> String {
    let (runs, budget) = (c.runs, c.budget);
    let tried = runs.saturating_sub(c.confirmations);
    let mut text = match c.confirmations {
        0 => format!("looked for a cheaper fix in {tried} of up to {budget} more runs"),
        1 => format!(
            "took {runs} of up to {budget} more runs: {tried} looked for a cheaper fix, 1 confirmed the recommendation in full"
        ),
        n => format!(
            "took {runs} of up to {budget} more runs: {tried} looked for a cheaper fix, {n} confirmation runs in full (a fix that fails its confirmation is dropped)"
        ),
    };
    if let Some(why) = &c.cut_short {
        text.push_str(&format!(" (cut short: {why})"));
    }
    text
}

/// Why the prior chose what it tried first: the failure, what other processes held, the
/// user's own flags that keep more in memory and the failure's usual fixes.
fn prior_reason(p: &crate::bisect::search::Prior) -> String {
    let mut failed = format!("run {} failed", p.run);
    if !p.signatures.is_empty() {
        failed.push_str(&format!(" as {}", p.signatures.join(", ")));
    }
    if let Some(b) = p.others_vram_bytes {
        failed.push_str(&format!(
            " while other processes held {} of VRAM",
            crate::text::bytes(b as i64)
        ));
    }
    if !p.own_flags.is_empty() {
        failed.push_str(&format!(
            " with your own {}, which keep{} more of what ran out in memory",
            p.own_flags.join(", "),
            if p.own_flags.len() == 1 { "s" } else { "" }
        ));
    }
    if !p.flags.is_empty() {
        failed.push_str(&format!(
            ", whose usual fixes among the toggles are {}",
            p.flags.join(", ")
        ));
    }
    failed
}

/// What the statement adds about the fixes: the alternatives that passed and how they
/// compare, the searched values that did not help.
pub(crate) fn fixes_statement(found: &Found) -> String {
    let mut out = String::new();
    if found.kind != VerdictKind::FixedBy && found.kind != VerdictKind::CausedBy {
        return out;
    }
    if found
        .fix
        .as_ref()
        .is_some_and(|f| f.keeps_dynamic_vram == Some(true))
        && found
            .alternatives
            .iter()
            .any(|a| a.keeps_dynamic_vram == Some(false))
    {
        out.push_str(" It keeps Dynamic VRAM on.");
    }
    for a in found.alternatives.iter().take(3) {
        out.push_str(&format!(
            " {} also passes{}.",
            a.fixing_flags.join(" and "),
            a.compared
                .as_deref()
                .map(|c| format!(", {c}"))
                .unwrap_or_default()
        ));
    }
    if found.alternatives.len() > 3 {
        out.push_str(&format!(
            " {} more fixes passed.",
            found.alternatives.len() - 3
        ));
    }
    for n in &found.not_helped {
        out.push(' ');
        out.push_str(&capitalise(n));
        out.push('.');
    }
    out
}

/// The recommendation's cost and each alternative, one line each.
fn write_fixes(out: &mut dyn Write, v: &Verdict, style: &Style) -> io::Result<()> {
    let cost = |f: &Fix| {
        let mut parts = Vec::new();
        if let Some(s) = f.cost.seconds_per_step {
            parts.push(format!("{s:.2} s per step"));
        }
        if let Some(l) = f.cost.load_s {
            parts.push(format!("{l:.1} s to the first step"));
        }
        if let Some(b) = f.cost.peak_vram_bytes {
            parts.push(format!("VRAM peak {}", crate::text::bytes(b as i64)));
        }
        match f.keeps_dynamic_vram {
            Some(true) => parts.push("Dynamic VRAM on".into()),
            Some(false) => parts.push("Dynamic VRAM off".into()),
            None => {}
        }
        if f.cost.kind == Some(RunKind::Quick) {
            parts.push("shortened runs only".into());
        }
        if f.flag_removal_warned {
            parts.push("ComfyUI warns its flag will be removed".into());
        }
        parts.join(", ")
    };
    if let Some(f) = &v.fix
        && !cost(f).is_empty()
    {
        writeln!(out, "  cost: {}", cost(f))?;
    }
    for a in &v.alternatives {
        writeln!(
            out,
            "  {} {}: {}{}",
            style.dim("also passes:"),
            a.fixing_flags.join(" "),
            a.compared.as_deref().unwrap_or("not compared"),
            if cost(a).is_empty() {
                String::new()
            } else {
                format!(" ({})", cost(a))
            }
        )?;
    }
    if let Some(c) = &v.cheaper_search
        && !c.first_fix
        && c.budget > 0
        && c.runs == c.confirmations
        && c.cut_short.is_none()
    {
        writeln!(
            out,
            "  {} no cheaper fix was left to try",
            style.dim("search:")
        )?;
    } else if let Some(c) = &v.cheaper_search
        && !c.first_fix
        && c.budget > 0
    {
        writeln!(out, "  {} {}", style.dim("search:"), cheaper_text(c))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(runs: &[(RunKind, u64)]) -> ConfigResult {
        ConfigResult {
            untestable_here: false,
            flags: vec![],
            changes: vec!["(your flags)".into()],
            outcome: Outcome::Pass,
            runs: runs.len(),
            passes: runs.len(),
            failures: 0,
            unresolved: 0,
            peak_vram_bytes: None,
            peak_ram_bytes: None,
            ram_growth_per_prompt_bytes: None,
            mean_duration_ms: 7_000,
            run_dirs: vec![],
            each_run: runs
                .iter()
                .enumerate()
                .map(|(i, (kind, ms))| RunSummary {
                    n: i as u32 + 1,
                    kind: *kind,
                    outcome: Outcome::Pass,
                    duration_ms: *ms,
                })
                .collect(),
        }
    }

    #[test]
    fn the_time_column_keeps_shortened_and_full_runs_apart() {
        use RunKind::{Full, Quick};
        assert_eq!(
            config(&[(Full, 12_000), (Full, 14_000)]).time_text(),
            "13.0 s"
        );
        assert_eq!(config(&[(Quick, 4_100)]).time_text(), "4.1 s shortened");
        assert_eq!(
            config(&[(Quick, 4_000), (Full, 12_300), (Quick, 4_200)]).time_text(),
            "12.3 s, 4.1 s shortened"
        );
        // A result written before each run's kind was kept: the mean of all.
        assert_eq!(config(&[]).time_text(), "7.0 s");
    }

    #[test]
    fn the_cheaper_search_says_its_tries_and_its_confirmation_apart() {
        let c = |runs, confirmations, cut_short: Option<&str>| Cheaper {
            first_fix: false,
            budget: 13,
            runs,
            cut_short: cut_short.map(str::to_string),
            confirmations,
        };
        assert_eq!(
            cheaper_text(&c(3, 1, None)),
            "took 3 of up to 13 more runs: 2 looked for a cheaper fix, 1 confirmed the recommendation in full"
        );
        assert_eq!(
            cheaper_text(&c(4, 0, Some("its 13 runs were spent"))),
            "looked for a cheaper fix in 4 of up to 13 more runs (cut short: its 13 runs were spent)"
        );
        assert_eq!(
            cheaper_text(&c(5, 2, None)),
            "took 5 of up to 13 more runs: 3 looked for a cheaper fix, 2 confirmation runs in full (a fix that fails its confirmation is dropped)"
        );
    }
}
