//! Search strategies: adaptive (group testing, then delta debugging), matrix and each.
//!
//! They talk to ComfyUI only through [`Oracle`], so a scripted oracle tests them without
//! launching anything. Every run is expensive (minutes of GPU time), so the adaptive search
//! spends runs only where they carry information: one run per configuration while outcomes
//! agree, more where they disagree.

use super::hypotheses;
mod cheaper;
mod flaky;
use super::space::{Choice, Config, Space};
use crate::outcome::Outcome;
pub use crate::run::record::RunKind;
use crate::session::failure::{FailedAt, failed_with};
use crate::session::quick::{QuickState, Recorded};
use cheaper::Confirmed;
pub use cheaper::{Cheaper, Fix, FixCost};
pub use flaky::BestAnswer;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One run of one configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub outcome: Outcome,
    pub run_dir: Option<PathBuf>,
    pub duration_ms: u64,
    pub peak_vram_bytes: Option<u64>,
    pub peak_ram_bytes: Option<u64>,
    /// RAM kept per prompt when it grew (`RamGrowth`), for old journals null.
    #[serde(default)]
    pub ram_growth_bytes: Option<i64>,
    /// The user's workflow as it is (`full`), or its shortened copy (`quick`).
    #[serde(default)]
    pub kind: RunKind,
    /// Where it failed: the prompt of the iterations and the node (null for a pass).
    #[serde(default)]
    pub failed_at: Option<FailedAt>,
    /// A shortened run was asked for and the workflow ran in full: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unshortened: Option<String>,
    /// The session's run number (0 until the run is numbered).
    #[serde(default)]
    pub n: u32,
    /// The known failure signatures its failing prompt matched (`cuda_oom_native`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signatures: Vec<String>,
    /// For a failure inside a node whose steps a shortened run cuts: the last sampling step
    /// reported before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<u64>,
    /// For a run of the workflow as it is: its most sampling steps of one sampler, and a
    /// shortened copy's (null where it cannot be shortened).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling_steps: Option<(u64, u64)>,
    /// What the run cost, for comparing fixes that pass (null where not measured).
    #[serde(default, flatten)]
    pub cost: Cost,
}

/// What one run cost, and what it ran with, as the run's record says.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    /// Mean seconds per sampling step over its prompts (the progress events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_per_step: Option<f64>,
    /// Milliseconds from the first prompt's submission to its first sampling step: loading
    /// the models (and encoding).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_ms: Option<u64>,
    /// Milliseconds of its prompts, from submission to their end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ms: Option<u64>,
    /// Whether Dynamic VRAM was on, as the startup log says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamic_vram: Option<bool>,
    /// ComfyUI warned that a flag of this run will be removed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flag_removal_warned: bool,
    /// For a failure: the room its evidence says was missing, the allocation that failed
    /// ("Tried to allocate", "Requested") plus the VRAM other processes held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted_bytes: Option<u64>,
    /// The most VRAM other processes held during the run (the sampler's reading).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others_vram_bytes: Option<u64>,
}

impl Cost {
    /// The cost of a run, from its record.
    pub fn of(record: &crate::run::RunRecord) -> Cost {
        let its = &record.iterations;
        let steps: Vec<f64> = its.iter().filter_map(|i| i.seconds_per_step).collect();
        Cost {
            seconds_per_step: (!steps.is_empty())
                .then(|| steps.iter().sum::<f64>() / steps.len() as f64),
            load_ms: its.first().and_then(|i| i.first_step_ms),
            prompt_ms: (!its.is_empty()).then(|| its.iter().map(|i| i.duration_ms).sum()),
            dynamic_vram: record.effective.dynamic_vram,
            flag_removal_warned: record.effective.flag_removal_warned,
            wanted_bytes: (record.outcome != Outcome::Pass)
                .then(|| {
                    let lines = record
                        .evidence
                        .iter()
                        .chain(its.iter().flat_map(|i| &i.evidence));
                    lines.filter_map(|l| allocation_bytes(l)).max()
                })
                .flatten()
                .map(|a| a + record.peaks.vram_other_processes_bytes.unwrap_or(0)),
            others_vram_bytes: record.peaks.vram_other_processes_bytes,
        }
    }
}

/// The size of the allocation an OOM names: `Tried to allocate 1.14 GiB`, `Requested size
/// was 4194304000 bytes`, `Requested : 40.00 MiB` (the asynchronous allocator's details).
pub fn allocation_bytes(line: &str) -> Option<u64> {
    let after = ["Tried to allocate ", "Requested size was ", "Requested "]
        .iter()
        .find_map(|k| line.find(k).map(|i| &line[i + k.len()..]))?;
    let after = after.trim_start_matches([' ', ':']).trim_start();
    let end = after
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(after.len());
    let n: f64 = after[..end].parse().ok()?;
    let unit = after[end..].trim_start();
    let scale = [
        ("GiB", 1u64 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
        ("GB", 1 << 30),
        ("MB", 1 << 20),
        ("bytes", 1),
    ]
    .iter()
    .find(|(u, _)| unit.starts_with(u))
    .map(|(_, s)| *s)?;
    let bytes = n * scale as f64;
    (bytes.is_finite() && bytes > 0.0).then_some(bytes as u64)
}

impl Trial {
    pub fn of(outcome: Outcome) -> Trial {
        Trial {
            outcome,
            run_dir: None,
            duration_ms: 0,
            peak_vram_bytes: None,
            peak_ram_bytes: None,
            ram_growth_bytes: None,
            kind: RunKind::Full,
            failed_at: None,
            unshortened: None,
            n: 0,
            signatures: Vec::new(),
            failed_step: None,
            sampling_steps: None,
            cost: Cost::default(),
        }
    }

    /// It failed in its first prompt before any sampling step was reported (loading,
    /// encoding, the sampler's start).
    pub fn before_sampling(&self) -> bool {
        self.outcome != Outcome::Pass
            && self.cost.load_ms.is_none()
            && self.cost.prompt_ms.is_some()
            && self.failed_at.as_ref().is_some_and(|f| f.iteration == 1)
    }

    /// Whether it ended in `target` as `reference` did: the same kind, prompt and node.
    fn fails_as(&self, reference: &Trial) -> bool {
        self.outcome == reference.outcome && self.failed_at == reference.failed_at
    }
}

/// Why a search stopped before its verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// Ctrl-C: the session can be resumed.
    Interrupted,
    /// `--max-runs` was reached.
    Budget,
    /// The session cannot go on (a run folder, a record or the journal could not be
    /// written): the search ends with this error and no verdict; what finished is kept.
    Failed(crate::error::Error),
}

/// Whether a failure after sampling step `step` lies well past the `quick` steps a shortened
/// run keeps, so that a shortened run could not show it.
pub fn past_shortening(step: u64, quick: u32) -> bool {
    step > 2 * u64::from(quick) + 1
}

/// VRAM other processes held as the baseline failed from which the room left for them is
/// tried first (ComfyUI's answer to such OOMs: "try `--vram-headroom 1`", #14396).
const OTHERS_VRAM_PRIOR: u64 = 1 << 30;

/// Failed starts after which a configuration counts as one that cannot start here.
const STARTS_TO_GIVE_UP: usize = 2;

/// Runs of one configuration that failed some other way than the failure hunted (a crash, a
/// kill from outside: the OOM killer, a closed window) after which it counts as failing. One
/// may be chance, and is neither a pass nor the failure: the configuration runs again.
const OTHERS_TO_GIVE_UP: usize = crate::bayes::ODD_RUNS_TO_GIVE_UP;

/// The least runs of a passing baseline before a flaky bisect (`--repeat` 2 or more) calls
/// the failure not reproduced.
const FLAKY_BASELINE_TRIES: usize = crate::bayes::TRIES_TO_SHOW;

/// Runs ComfyUI with a configuration.
pub trait Oracle {
    /// Runs `config`: the user's workflow as it is, or its shortened copy (a run that cannot
    /// be shortened runs in full and says why in [`Trial::unshortened`]).
    fn run(&mut self, config: &Config, kind: RunKind) -> Result<Trial, Stopped>;
    /// Whether shortened runs may be asked for (`--quick` is not `off`, and the workflow is
    /// not known to be one that cannot be shortened).
    fn can_shorten(&self) -> bool {
        false
    }
    /// Why the workflow cannot be shortened, once that is known.
    fn unshortenable(&self) -> Option<String> {
        None
    }
    /// The steps of a shortened run, for what the verdict says.
    fn quick_steps(&self) -> Option<u32> {
        None
    }
}

/// `--strategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Adaptive,
    Matrix,
    Each,
}

/// How a search is run.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub strategy: Strategy,
    /// Runs per configuration (`--repeat`).
    pub repeat: u32,
    /// The most runs the whole bisect may take.
    pub max_runs: u32,
    /// The chance of calling a failing configuration "fixed" that the adaptive search accepts
    /// once it knows failures are flaky (for the values of a flag with several).
    pub alpha: f64,
    /// The posterior an answer needs before a flaky search calls it (`--confidence`).
    pub confidence: f64,
    /// Whether `max_runs` was given (`--max-runs`); if not, a flaky search takes the budget
    /// its posterior calls for.
    pub budget_given: bool,
    /// Stop at the first fix found (`--first-fix`) instead of looking for a cheaper one.
    pub first_fix: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            strategy: Strategy::Adaptive,
            repeat: 1,
            max_runs: 64,
            alpha: 0.01,
            confidence: crate::bayes::DEFAULT_CONFIDENCE,
            budget_given: false,
            first_fix: false,
        }
    }
}

/// Every configuration tried, with its runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub config: Config,
    pub trials: Vec<Trial>,
}

impl Tally {
    pub fn runs(&self) -> usize {
        self.trials.len()
    }
    pub fn passes(&self) -> usize {
        self.trials
            .iter()
            .filter(|t| t.outcome == Outcome::Pass)
            .count()
    }
    pub fn count(&self, outcome: Outcome) -> usize {
        self.trials.iter().filter(|t| t.outcome == outcome).count()
    }
    /// Failures of another kind than the one hunted: unresolved, not passes.
    pub fn others(&self, target: Outcome) -> usize {
        self.trials
            .iter()
            .filter(|t| t.outcome != Outcome::Pass && t.outcome != target)
            .count()
    }

    /// Runs that ended in another failure than `target` once ComfyUI was up (a crash, a kill
    /// from outside): not a start that failed, not flags or a workflow ComfyUI refused.
    pub fn other_failures(&self, target: Outcome) -> usize {
        let not_running = [
            Outcome::StartupFailed,
            Outcome::FlagRejected,
            Outcome::InvalidWorkflow,
        ];
        self.trials
            .iter()
            .filter(|t| {
                t.outcome != Outcome::Pass
                    && t.outcome != target
                    && !not_running.contains(&t.outcome)
            })
            .count()
    }
}

/// The lower end of a one-sided 80% Wilson score interval for `hits` of `n` (1.0 for none).
pub(crate) fn wilson_lower(hits: usize, n: usize) -> f64 {
    if n == 0 {
        return 1.0;
    }
    const Z: f64 = 0.842;
    let (n, p) = (n as f64, hits as f64 / n as f64);
    let centre = p + Z * Z / (2.0 * n);
    let spread = Z * (p * (1.0 - p) / n + Z * Z / (4.0 * n * n)).sqrt();
    (centre - spread) / (1.0 + Z * Z / n)
}

/// The answer of a bisect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    FixedBy,
    CausedBy,
    NotReproduced,
    NoFixFound,
    Untestable,
    /// Stopped before a verdict (Ctrl-C or the run budget); resumable.
    Incomplete,
}

impl VerdictKind {
    /// The name in JSON (`fixed_by`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictKind::FixedBy => "fixed_by",
            VerdictKind::CausedBy => "caused_by",
            VerdictKind::NotReproduced => "not_reproduced",
            VerdictKind::NoFixFound => "no_fix_found",
            VerdictKind::Untestable => "untestable",
            VerdictKind::Incomplete => "incomplete",
        }
    }
}

/// What a search found.
/// Why a search found no fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoFix {
    /// No toggle this install supports and no memory flag of the user's own.
    NothingToTry,
    /// No configuration tried passed.
    NonePassed,
    /// The configuration that passed during the search failed its confirmation run.
    ConfirmationFailed,
    /// The best candidate did not pass reliably.
    NotReliable,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Found {
    pub kind: VerdictKind,
    /// The failure hunted (the baseline's outcome).
    pub target: Option<Outcome>,
    /// The configuration the verdict is about (confirmed by a final run).
    pub config: Option<Config>,
    pub fixing_flags: Vec<String>,
    pub culprit_flags: Vec<String>,
    /// Why, when the kind alone does not say (untestable, incomplete, no fix).
    pub reason: Option<String>,
    /// Why no fix was found, as data (the reason words it).
    #[serde(default)]
    pub no_fix: Option<NoFix>,
    /// The failures were flaky: some configurations both passed and failed.
    pub flaky: bool,
    /// What the baseline runs ended in first (also when untestable).
    pub baseline_outcome: Option<Outcome>,
    /// How sure the verdict is, given the runs that happened: the posterior of the answer for
    /// a flaky search, 1.0 for a deterministic one (every run agreed); null without a verdict
    /// about flags.
    pub confidence: Option<f64>,
    /// A flaky search's failure rate of configurations without the fix (90% interval).
    pub failure_rate: Option<(f64, f64)>,
    /// Whether the search ran shortened runs, and why (or why not).
    #[serde(skip)]
    pub quick: QuickState,
    /// The recommended fix, with what it cost (a `fixed_by` or `caused_by` verdict).
    #[serde(default)]
    pub fix: Option<Fix>,
    /// The other fixes that passed, best first, each compared with the recommendation.
    #[serde(default)]
    pub alternatives: Vec<Fix>,
    /// Searched values that did not help even at the most tried.
    #[serde(default)]
    pub not_helped: Vec<String>,
    /// What the search for a cheaper fix did.
    #[serde(default)]
    pub cheaper: Option<Cheaper>,
    /// What the baseline's failure said to try first.
    #[serde(default)]
    pub prior: Option<Prior>,
    /// The failure on record the session was given (`--failed-log`), where a shortened run
    /// of the user's flags failed as it did and no full run of them was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_on_record: Option<Recorded>,
}

/// What the search tried first, and why: the usual fixes of the known failure the
/// baseline's failing run matched, where they are among the toggles. The runs decide the
/// verdict, not this; a wrong prior costs runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prior {
    /// The run whose failure it comes from.
    pub run: u32,
    /// The known failures that run matched (`cuda_oom_native`).
    pub signatures: Vec<String>,
    /// The toggles those failures' usual fixes name, likeliest first.
    pub flags: Vec<String>,
    /// The change that ran first because of it (null where none of them could).
    pub tried_first: Option<String>,
    /// Why none ran first, where none did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_tried: Option<String>,
    /// The VRAM other processes held when that run failed, where it was enough to put the
    /// headroom left for them first (`--vram-headroom`, `--reserve-vram`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others_vram_bytes: Option<u64>,
}

/// The state of one search.
pub struct Search<'a> {
    space: &'a Space,
    oracle: &'a mut dyn Oracle,
    settings: Settings,
    pub tallies: Vec<Tally>,
    pub target: Option<Outcome>,
    pub flaky: bool,
    pub runs: u32,
    /// The last run: its configuration's key and kind.
    last_run: Option<(String, RunKind)>,
    /// Whether runs are shortened (see [`QuickState`]); rebuilt from the runs.
    pub quick: QuickState,
    /// The kind the next run is made as, when the search chose it for that run.
    prefer: Option<RunKind>,
    /// The run budget as it stands (`max_runs`, or what a flaky search's posterior set).
    budget: u32,
    /// What a flaky search believed when it last chose a run (for a verdict cut short).
    last_belief: Option<BestAnswer>,
    /// What the search for a cheaper fix did, once it ran.
    cheaper_done: Option<Cheaper>,
    /// What the baseline's failure said to try first, once read.
    prior_done: Option<Prior>,
    /// The failure on record (`--failed-log`), see [`Search::with_recorded`].
    recorded: Option<Recorded>,
}

/// How a configuration did, as far as the search is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eval {
    Pass,
    Fail,
    /// ComfyUI would refuse the combination: never run.
    Invalid,
}

impl<'a> Search<'a> {
    /// A search that starts from `prior` (the tallies of a session being resumed).
    pub fn new(
        space: &'a Space,
        oracle: &'a mut dyn Oracle,
        settings: Settings,
        prior: Vec<Tally>,
    ) -> Search<'a> {
        let runs = prior.iter().map(|t| t.runs() as u32).sum();
        // The last run of a resumed session, so a verdict it confirmed is not run again.
        let last_run = prior
            .iter()
            .flat_map(|t| t.trials.iter().map(move |r| (r.n, &t.config.key, r.kind)))
            .max_by_key(|(n, _, _)| *n)
            .filter(|(n, _, _)| *n > 0)
            .map(|(_, key, kind)| (key.clone(), kind));
        let mut s = Search {
            space,
            oracle,
            settings,
            tallies: prior,
            target: None,
            flaky: false,
            runs,
            last_run,
            quick: QuickState::Untried,
            prefer: None,
            budget: settings.max_runs,
            last_belief: None,
            cheaper_done: None,
            prior_done: None,
            recorded: None,
        };
        s.refresh_quick();
        s.refresh_flaky();
        s
    }

    /// The workflow's failure on record from before the session ([`Recorded`]): the search
    /// starts from a shortened run of the user's flags, and makes the full one only where
    /// that run does not fail the same way.
    pub fn with_recorded(mut self, recorded: Option<Recorded>) -> Self {
        self.recorded = recorded;
        self.refresh_quick();
        self
    }

    /// Whether the failure on record struck well past the steps a shortened run keeps (its
    /// log's progress bar stopped there): a shortened check could not show it.
    fn recorded_past_shortening(&self) -> bool {
        let step = self.recorded.as_ref().and_then(|r| r.failed_step);
        matches!((step, self.oracle.quick_steps()), (Some(s), Some(q)) if past_shortening(s, q))
    }

    /// Whether the failure on record stands in for the full baseline: a shortened run of the
    /// user's flags failed as it did, and no full run of them failed.
    fn recorded_stands_in(&self) -> bool {
        matches!(self.quick, QuickState::Reproduces { reference: 0, .. })
    }

    fn tally_index(&mut self, config: &Config) -> usize {
        match self.tallies.iter().position(|t| t.config.key == config.key) {
            Some(i) => i,
            None => {
                self.tallies.push(Tally {
                    config: config.clone(),
                    trials: Vec::new(),
                });
                self.tallies.len() - 1
            }
        }
    }

    /// Runs `config` once more: shortened while shortened runs reproduce the failure (unless
    /// the search prefers a full run for this one).
    fn run_once(&mut self, config: &Config) -> Result<Outcome, Stopped> {
        let kind = self.prefer.unwrap_or_else(|| self.next_kind());
        self.run_kind(config, kind)
    }

    /// A run whose pass would be the verdict is made in full when that is expected to take
    /// less ComfyUI time than a shortened run and then its confirmation: with the measured
    /// mean times, when (1 − p)·(full failure − shortened failure) < p·(shortened pass), for
    /// the chance p that it passes. A failure that strikes before sampling costs the same
    /// either way, so such a run goes full; one late in the workflow stays shortened unless
    /// the run is likely to pass.
    fn final_run_kind(&self, q: u32, answers: &[u32], known: &[(u32, bool)]) -> Option<RunKind> {
        if self.next_kind() != RunKind::Quick {
            return None;
        }
        // A searched value that passes at its most is searched on (shortened) before any
        // verdict, so its pass is never the verdict.
        let searched = |d: usize| {
            let flag = self.space.dims[d].flag();
            self.space.value_searches.iter().any(|v| v.flag == flag)
        };
        if !self.settings.first_fix && bits(q).into_iter().any(searched) {
            return None;
        }
        let (p, ends) = hypotheses::pass_outlook(q, answers, known);
        if !ends {
            return None;
        }
        let target = self.target?;
        let mean = |kind: RunKind, passed: bool| {
            let times: Vec<f64> = self
                .tallies
                .iter()
                .flat_map(|t| &t.trials)
                .filter(|r| {
                    r.kind == kind
                        && r.duration_ms > 0
                        && if passed {
                            r.outcome == Outcome::Pass
                        } else {
                            r.outcome == target
                        }
                })
                .map(|r| r.duration_ms as f64)
                .collect();
            (!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64)
        };
        // Where the failure on record stands in for the full run of the user's flags and
        // their shortened run failed before sampling, a full failure is that same run.
        let base = self.space.baseline().key;
        let check_before_sampling = self.recorded_stands_in()
            && self
                .tallies
                .iter()
                .filter(|t| t.config.key == base)
                .flat_map(|t| &t.trials)
                .any(|r| r.kind == RunKind::Quick && r.outcome == target && r.before_sampling());
        let full_fail = mean(RunKind::Full, false).or_else(|| {
            check_before_sampling
                .then(|| mean(RunKind::Quick, false))
                .flatten()
        })?;
        // Where the failure struck before sampling, a shortened failure is the same run.
        let same_run = check_before_sampling
            || matches!(self.quick, QuickState::Reproduces { reference, check } if reference == check);
        let quick_fail = mean(RunKind::Quick, false).or(same_run.then_some(full_fail))?;
        // A shortened pass not measured yet lasts at least as long as a shortened failure.
        let quick_pass = mean(RunKind::Quick, true).unwrap_or(quick_fail);
        ((1.0 - p) * (full_fail - quick_fail).max(0.0) < p * quick_pass).then_some(RunKind::Full)
    }

    /// The kind of run the search makes now.
    fn next_kind(&self) -> RunKind {
        match self.quick {
            QuickState::Reproduces { .. } => RunKind::Quick,
            _ => RunKind::Full,
        }
    }

    /// Runs `config` once more, as `kind`.
    fn run_kind(&mut self, config: &Config, kind: RunKind) -> Result<Outcome, Stopped> {
        if self.runs >= self.budget {
            return Err(Stopped::Budget);
        }
        let mut trial = self.oracle.run(config, kind)?;
        self.runs += 1;
        if trial.n == 0 {
            trial.n = self.runs;
        }
        let outcome = trial.outcome;
        let i = self.tally_index(config);
        self.tallies[i].trials.push(trial.clone());
        self.last_run = Some((config.key.clone(), trial.kind));
        self.refresh_quick();
        self.refresh_flaky();
        Ok(outcome)
    }

    /// Whether a run counts as evidence now: full runs always; shortened ones while they
    /// reproduce the failure.
    fn counts(&self, t: &Trial) -> bool {
        t.kind == RunKind::Full || matches!(self.quick, QuickState::Reproduces { .. })
    }

    /// The runs as the search reads them: shortened ones left out unless they reproduce.
    fn evidence(&self) -> Vec<Tally> {
        self.tallies
            .iter()
            .map(|t| Tally {
                config: t.config.clone(),
                trials: t
                    .trials
                    .iter()
                    .filter(|r| self.counts(r))
                    .cloned()
                    .collect(),
            })
            .collect()
    }

    /// The evidence of one configuration.
    fn evidence_of(&self, config: &Config) -> Tally {
        let trials = self
            .tallies
            .iter()
            .find(|t| t.config.key == config.key)
            .map(|t| {
                t.trials
                    .iter()
                    .filter(|r| self.counts(r))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Tally {
            config: config.clone(),
            trials,
        }
    }

    /// Decides [`QuickState`] from the runs so far: the shortened run of the baseline against
    /// its first full failure, then every configuration's shortened runs against its full
    /// ones. Set aside, shortened runs stay set aside.
    fn refresh_quick(&mut self) {
        if matches!(self.quick, QuickState::SetAside(_)) {
            return;
        }
        if !self.oracle.can_shorten() {
            self.quick = QuickState::Off(self.oracle.unshortenable());
            return;
        }
        let all = || self.tallies.iter().flat_map(|t| &t.trials);
        if let Some(why) = all().find_map(|t| t.unshortened.clone()) {
            self.quick = QuickState::Off(Some(why));
            return;
        }
        let Some(target) = self.target else {
            self.quick = QuickState::Untried;
            return;
        };
        let base_key = self.space.baseline().key;
        let base = self.tallies.iter().find(|t| t.config.key == base_key);
        let trials = base.map(|t| t.trials.as_slice()).unwrap_or_default();
        let reference = trials
            .iter()
            .find(|t| t.kind == RunKind::Full && t.outcome == target);
        // A failure well past the steps a shortened run keeps cannot show in one: full runs
        // at once, rather than a check that would pass.
        let checks: Vec<&Trial> = trials.iter().filter(|t| t.kind == RunKind::Quick).collect();
        // No full run of the user's flags failed yet: a failure on record stands in for one
        // once a shortened run failed the same way (reference run 0).
        if reference.is_none() {
            let check = checks.first().map(|c| c.n);
            let recorded = self.recorded.as_ref().map(|r| r.outcome);
            match (check, recorded) {
                (Some(check), Some(outcome))
                    if outcome == target && checks[0].outcome == target =>
                {
                    self.settle_quick(target, 0, check);
                }
                _ => self.quick = QuickState::Untried,
            }
            return;
        }
        if checks.is_empty()
            && let Some(r) = reference
            && let (Some(step), Some(q)) = (r.failed_step, self.oracle.quick_steps())
            && past_shortening(step, q)
        {
            self.quick = QuickState::Off(Some(format!(
                "your workflow failed after step {step} of its sampling (run {}), past the {q} steps of a shortened run",
                r.n
            )));
            return;
        }
        // A load that dwarfs the steps: shortened runs would save less than their check costs.
        if checks.is_empty()
            && let Some(r) = reference
            && !r.before_sampling()
            && let Some(why) = self.shortening_does_not_pay(r)
        {
            self.quick = QuickState::Off(Some(why));
            return;
        }
        // A failure before the first sampling step of the first prompt needs no shortened
        // check: the shortened copy is the same run up to there.
        let mut check = checks
            .first()
            .copied()
            .or(reference.filter(|r| r.before_sampling()));
        // Failures said to be flaky (`--repeat`): one lucky pass of the shortened check is
        // no reason to set shortened runs aside; a second check decides.
        if self.settings.repeat > 1
            && let Some(r) = reference
        {
            match checks.iter().find(|c| c.fails_as(r)) {
                Some(c) => check = Some(c),
                None if checks.len() == 1 => check = None,
                None => {}
            }
        }
        let (Some(reference), Some(check)) = (reference, check) else {
            self.quick = QuickState::Untried;
            return;
        };
        if !check.fails_as(reference) {
            self.quick = QuickState::SetAside(format!(
                "the shortened run of your flags (run {}) {}, where your workflow {} (run {})",
                check.n,
                ending(check),
                ending(reference),
                reference.n
            ));
            return;
        }
        let (reference, check) = (reference.n, check.n);
        self.settle_quick(target, reference, check);
    }

    /// Shortened runs reproduce the failure (run `check` failed as run `reference`, 0: the
    /// failure on record), unless a configuration's shortened and full runs disagree.
    fn settle_quick(&mut self, target: Outcome, reference: u32, check: u32) {
        let base_key = self.space.baseline().key;
        // Fixed for the session (not `self.flaky`, which a resumed session learns only later),
        // so a resume rebuilds the same state.
        let flaky = self.settings.repeat > 1;
        for t in &self.tallies {
            let find = |kind: RunKind, failed: bool| {
                t.trials.iter().find(|r| {
                    r.kind == kind
                        && if failed {
                            r.outcome == target
                        } else {
                            r.outcome == Outcome::Pass
                        }
                })
            };
            let flags = self.describe_config(&t.config);
            // (The baseline's shortened checks of a failure said to be flaky are read above.)
            if flaky && t.config.key == base_key {
                continue;
            }
            if let (Some(q), Some(f)) = (find(RunKind::Quick, false), find(RunKind::Full, true)) {
                self.quick = QuickState::SetAside(format!(
                    "{flags} passed shortened (run {}) but your workflow failed with it (run {})",
                    q.n, f.n
                ));
                return;
            }
            if !flaky
                && let (Some(q), Some(f)) = (find(RunKind::Quick, true), find(RunKind::Full, false))
            {
                self.quick = QuickState::SetAside(format!(
                    "{flags} failed shortened (run {}) but your workflow passed with it (run {})",
                    q.n, f.n
                ));
                return;
            }
        }
        self.quick = QuickState::Reproduces { reference, check };
    }

    /// Why shortened runs would not pay, from the failing full run of the user's flags
    /// (`r`): the seconds a shortened run saves (the steps it cuts, at the seconds per step
    /// measured; a failure saves only the steps it got past) over the runs a search takes
    /// (2 + log2 of the changes, half of them passes) against what the shortened check of
    /// the user's flags costs (their failing run, less what it saves). Where loading and
    /// the rest of the workflow dwarf its sampling, the check costs more than the search
    /// saves: full runs at once.
    fn shortening_does_not_pay(&self, r: &Trial) -> Option<String> {
        let (full, quick) = r.sampling_steps?;
        let per_step = r.cost.seconds_per_step?;
        let cut = full.saturating_sub(quick);
        if cut == 0 {
            return None;
        }
        let pass_saves = cut as f64 * per_step;
        let done = r.failed_step.unwrap_or(full).min(full);
        let fail_saves = done.saturating_sub(quick) as f64 * per_step;
        let check = (r.duration_ms as f64 / 1000.0 - fail_saves).max(0.0);
        let k = self.space.dims.len().max(1) as f64;
        let runs = 2.0 + k.log2().ceil();
        let saved = runs * (pass_saves + fail_saves) / 2.0;
        if check <= saved {
            return None;
        }
        let secs = |s: f64| crate::duration::format_duration(std::time::Duration::from_secs_f64(s));
        let sampling = secs(full as f64 * per_step);
        let split = match r.cost.load_ms {
            Some(ms) => format!(
                "{} of it before its first sampling step and {sampling} for its {full} sampling steps",
                secs(ms as f64 / 1000.0)
            ),
            None => format!("{sampling} of it for its {full} sampling steps"),
        };
        Some(format!(
            "your workflow's run (run {}) took {}, {split}: a shortened run would save about {} a run, less over the search than its check would cost ({})",
            r.n,
            secs(r.duration_ms as f64 / 1000.0),
            secs(pass_saves),
            secs(check)
        ))
    }

    /// A configuration in words: "your flags", or the changes made.
    fn describe_config(&self, c: &Config) -> String {
        if c.choice.is_empty() {
            "your flags".into()
        } else {
            self.space.describe(&c.choice).join(" ")
        }
    }

    fn refresh_flaky(&mut self) {
        if let Some(target) = self.target {
            self.flaky = self
                .evidence()
                .iter()
                .any(|t| t.passes() > 0 && t.count(target) > 0);
        }
    }

    /// The failure rate of configurations known to fail, for deciding how many passes make
    /// a configuration "fixed" once failures are flaky: the lower end of a one-sided 80%
    /// Wilson interval, so that a few failures in a row do not make a rare pass look
    /// impossible (3 failures of 3 say "at least 0.81", not 1.0). The level was chosen on
    /// the flaky rows of `cargo bench --bench bisect` (BENCHMARKS.md): 95% doubled the runs
    /// for little more accuracy; the bare rate missed 99% at p = 0.7.
    fn failure_rate(&self) -> f64 {
        let Some(target) = self.target else {
            return 1.0;
        };
        let (fails, runs) = self
            .evidence()
            .iter()
            .filter(|t| t.count(target) > 0)
            .fold((0, 0), |(f, r), t| (f + t.count(target), r + t.runs()));
        wilson_lower(fails, runs)
    }

    /// Passes needed before a configuration counts as fixed: `--repeat` while failures look
    /// deterministic; once they are known to be flaky (a configuration both passed and
    /// failed, or the user asked for repeats, which says so), enough passes that a
    /// configuration failing at the measured rate would pass them all with a chance under
    /// `alpha`.
    fn passes_needed(&self) -> usize {
        let repeat = self.settings.repeat.max(1) as usize;
        if !self.flaky && repeat == 1 {
            return repeat;
        }
        let p = self.failure_rate().clamp(0.2, 0.95);
        let k = (self.settings.alpha.ln() / (1.0 - p).ln()).ceil() as usize;
        k.max(repeat)
    }

    /// Whether `choice` fixes the failure: any failure of the hunted kind says no at once; a
    /// pass counts once there are enough of them.
    fn evaluate(&mut self, choice: &[(usize, usize)]) -> Result<Eval, Stopped> {
        let Some(config) = self.space.config(choice) else {
            return Ok(Eval::Invalid);
        };
        loop {
            if let Some(settled) = self.settled(&self.evidence_of(&config)) {
                return Ok(settled);
            }
            self.run_once(&config)?;
        }
    }

    /// What a configuration's runs already say, or None while it needs more: any failure of
    /// the hunted kind, a refusal or enough other failures fail it; a start that failed once
    /// may have been chance (a port taken at that moment) and is tried again before the
    /// configuration counts as one that cannot start; enough passes pass it.
    fn settled(&self, t: &Tally) -> Option<Eval> {
        let target = self.target.expect("baseline ran first");
        let refused = t.count(Outcome::FlagRejected) + t.count(Outcome::InvalidWorkflow);
        if t.count(target) > 0
            || refused > 0
            || t.other_failures(target) >= OTHERS_TO_GIVE_UP
            || t.count(Outcome::StartupFailed) >= STARTS_TO_GIVE_UP
        {
            return Some(Eval::Fail);
        }
        (t.passes() >= self.passes_needed()).then_some(Eval::Pass)
    }

    /// Runs the baseline; decides the hunted failure, or that there is none.
    fn baseline(&mut self) -> Result<Option<Found>, Stopped> {
        let base = self.space.baseline();
        let repeat = self.settings.repeat.max(1) as usize;
        // A passing baseline gets a few tries: flaky failures need a chance to show. With
        // --repeat the user says failures are flaky: 2·repeat + 1 tries (a failure that
        // shows half the time stays hidden through 7 of them less than 1% of the time).
        let tries = if repeat > 1 {
            (2 * repeat + 1).max(FLAKY_BASELINE_TRIES)
        } else {
            3
        };
        loop {
            let i = self.tally_index(&base);
            let full: Vec<Outcome> = self.tallies[i]
                .trials
                .iter()
                .filter(|t| t.kind == RunKind::Full)
                .map(|t| t.outcome)
                .collect();
            if let Some(first) = full.iter().copied().find(|o| *o != Outcome::Pass) {
                if matches!(
                    first,
                    Outcome::StartupFailed
                        | Outcome::InvalidWorkflow
                        | Outcome::FlagRejected
                        | Outcome::Interrupted
                ) {
                    return Ok(Some(self.verdict(
                        VerdictKind::Untestable,
                        None,
                        Some(format!(
                            "the baseline run ended in {first} ({})",
                            first.describe()
                        )),
                    )));
                }
                self.target = Some(first);
                self.refresh_quick();
                // Shortened runs are used only once one has failed as the workflow does.
                if self.quick == QuickState::Untried {
                    self.run_kind(&base, RunKind::Quick)?;
                    continue;
                }
                if self.baseline_is_enough(&base, repeat) {
                    return Ok(None);
                }
            } else if self.recorded_stands_in() {
                // The failure on record, and a shortened run of these flags that failed as
                // it did: the search goes on without a full run of them.
                self.target = self.recorded.as_ref().map(|r| r.outcome);
                if self.baseline_is_enough(&base, repeat) {
                    return Ok(None);
                }
            } else if let Some(outcome) = self.recorded.as_ref().map(|r| r.outcome)
                && full.is_empty()
                && self.oracle.can_shorten()
                && !self.recorded_past_shortening()
            {
                // A failure on record: the shortened check first (or, resumed, read again).
                // Where it does not fail as the record says, the full run of the user's
                // flags is made as without one.
                let checked = self.tallies[i]
                    .trials
                    .iter()
                    .any(|t| t.kind == RunKind::Quick);
                self.target = Some(outcome);
                if checked {
                    self.refresh_quick();
                } else {
                    self.run_kind(&base, RunKind::Quick)?;
                }
                if self.recorded_stands_in() {
                    continue;
                }
                self.target = None;
            } else if full.len() >= tries {
                return Ok(Some(self.verdict(
                    VerdictKind::NotReproduced,
                    None,
                    Some(format!("the baseline passed {0}/{0} runs", full.len())),
                )));
            }
            self.run_once(&base)?;
        }
    }

    /// Whether the failing baseline has run enough for the search to begin: `--repeat`
    /// times, or once for the flaky search, which runs it again only when that tells it more
    /// than any other run would.
    fn baseline_is_enough(&mut self, base: &Config, repeat: usize) -> bool {
        let flaky_search = repeat > 1
            && self.settings.strategy == Strategy::Adaptive
            && self.space.dims.len() <= hypotheses::MAX_DIMS;
        let enough = self.evidence_of(base).runs() >= repeat || flaky_search;
        if enough {
            self.refresh_flaky();
        }
        enough
    }

    /// A no-fix verdict, why as data and in words.
    fn no_fix(&self, why: NoFix, reason: String) -> Found {
        Found {
            no_fix: Some(why),
            ..self.verdict(VerdictKind::NoFixFound, None, Some(reason))
        }
    }

    fn verdict(&self, kind: VerdictKind, choice: Option<&Choice>, reason: Option<String>) -> Found {
        let config = choice.and_then(|c| self.space.config(c));
        let (mut fixing, mut culprits) = (Vec::new(), Vec::new());
        if let Some(c) = choice {
            for (d, a) in c {
                match &self.space.dims[*d] {
                    super::space::Dim::Add { .. } => fixing.push(self.space.dims[*d].describe(*a)),
                    super::space::Dim::Remove { flag, .. } => culprits.push(flag.clone()),
                }
            }
        }
        let kind = match kind {
            VerdictKind::FixedBy if fixing.is_empty() && !culprits.is_empty() => {
                VerdictKind::CausedBy
            }
            k => k,
        };
        let base_key = self.space.baseline().key;
        let baseline_outcome = self
            .tallies
            .iter()
            .find(|t| t.config.key == base_key)
            .and_then(|t| {
                let full = || t.trials.iter().filter(|r| r.kind == RunKind::Full);
                let failed = full().map(|r| r.outcome).find(|o| *o != Outcome::Pass);
                failed.or(full().next().map(|r| r.outcome))
            });
        Found {
            kind,
            target: self.target,
            config,
            fixing_flags: fixing,
            culprit_flags: culprits,
            reason,
            no_fix: None,
            flaky: self.flaky,
            baseline_outcome,
            confidence: matches!(
                kind,
                VerdictKind::FixedBy | VerdictKind::CausedBy | VerdictKind::NoFixFound
            )
            .then_some(1.0),
            failure_rate: None,
            quick: self.quick.clone(),
            fix: None,
            alternatives: Vec::new(),
            not_helped: Vec::new(),
            cheaper: None,
            prior: self.prior_done.clone(),
            failure_on_record: self.recorded.clone().filter(|_| self.recorded_stands_in()),
        }
    }

    /// A fix's verdict: the recommendation with its cost, the other fixes that passed, the
    /// searched values that did not help, what the search for a cheaper one did.
    fn fixed(&self, chosen: &Choice) -> Found {
        let mut found = self.verdict(VerdictKind::FixedBy, Some(chosen), None);
        let fixes = self.fixes(&[]);
        if let Some(best) = fixes.iter().find(|f| &f.choice == chosen).cloned() {
            found.alternatives = fixes
                .into_iter()
                .filter(|f| &f.choice != chosen)
                .map(|mut f| {
                    (f.step_ratio, f.compared) = cheaper::compare(&f, &best);
                    f
                })
                .collect();
            found.fix = Some(best);
        }
        found.not_helped = self.not_helped();
        found.not_helped.extend(self.not_monotone());
        found.cheaper = self.cheaper_done.clone().or(Some(Cheaper {
            first_fix: self.settings.first_fix,
            budget: 0,
            runs: 0,
            cut_short: (!self.settings.first_fix && self.flaky)
                .then(|| "failures are flaky: the first fix is kept".into()),
            confirmations: 0,
        }));
        found
    }

    /// Runs the search to a verdict, or to where it had to stop (an incomplete verdict); an
    /// error when the session itself could not go on.
    pub fn run(&mut self) -> Result<Found, crate::error::Error> {
        match self.search() {
            Ok(v) => Ok(v),
            Err(Stopped::Failed(e)) => Err(e),
            Err(stop) => {
                let mut why = match stop {
                    Stopped::Budget => format!(
                        "the run budget ({} runs) was spent before a verdict",
                        self.budget
                    ),
                    _ => "interrupted: continue with --resume".to_string(),
                };
                let mut found = self.verdict(VerdictKind::Incomplete, None, None);
                if let Some(belief) = self.last_belief.take() {
                    why.push_str(&format!("; so far: {belief}"));
                    found.failure_rate = belief.failure_rate;
                }
                found.reason = Some(why);
                Ok(found)
            }
        }
    }

    fn search(&mut self) -> Result<Found, Stopped> {
        if let Some(v) = self.baseline()? {
            return Ok(v);
        }
        if self.space.dims.is_empty() {
            return Ok(self.no_fix(
                NoFix::NothingToTry,
                "there was nothing to try: no toggles this install supports and no memory flags of your own".into(),
            ));
        }
        let flaky_search = self.settings.strategy == Strategy::Adaptive
            && self.space.dims.len() <= hypotheses::MAX_DIMS;
        if flaky_search && (self.flaky || self.settings.repeat > 1) {
            return self.flaky_search();
        }
        let found = match self.settings.strategy {
            Strategy::Adaptive => {
                let found = self.adaptive()?;
                // Failures turned out flaky on the way: the runs so far go into the posterior.
                if flaky_search && self.flaky {
                    return self.flaky_search();
                }
                found
            }
            Strategy::Each => self.each()?,
            Strategy::Matrix => self.matrix()?,
        };
        let Some(choice) = found else {
            // Confirmed on the workflow as it is: the configuration with the most changes.
            if self.next_kind() == RunKind::Quick && !self.flaky {
                let all: Vec<usize> = (0..self.space.dims.len()).collect();
                let everything = self.largest_valid(&all);
                // (A shortened failure before any sampling step is that run already.)
                let same_run = |c: &Config| {
                    self.evidence_of(c)
                        .trials
                        .iter()
                        .any(|t| t.kind == RunKind::Quick && t.before_sampling())
                };
                if let Some(config) = self.space.config(&self.space.strong(&everything))
                    && !same_run(&config)
                {
                    let outcome = self.run_kind(&config, RunKind::Full)?;
                    // It passes as the user's workflow: the shortened runs that found no fix
                    // are set aside (also when that configuration never ran shortened).
                    if outcome == Outcome::Pass && self.next_kind() == RunKind::Quick {
                        self.quick = QuickState::SetAside(format!(
                            "{} passed as your workflow (run {}) where the shortened runs found no fix",
                            self.describe_config(&config),
                            self.runs
                        ));
                    }
                    if self.next_kind() == RunKind::Full {
                        return self.search();
                    }
                }
            }
            return Ok(self.no_fix(NoFix::NonePassed, "no configuration tried passed".into()));
        };
        // Every verdict is confirmed by a run of exactly that configuration, after the search.
        let config = self
            .space
            .config(&choice)
            .expect("a found configuration is valid");
        // Always on the user's workflow as it is: a shortened pass is confirmed in full.
        // Deterministic failures: a full pass of it on record is that confirmation (also on
        // a resumed session, whose later runs follow it); flaky ones: only the last run.
        let full_pass = || {
            self.evidence_of(&config)
                .trials
                .iter()
                .any(|t| t.kind == RunKind::Full && t.outcome == Outcome::Pass)
        };
        // Where a cheaper fix is looked for, only the recommendation is confirmed (there).
        let cheaper_follows =
            !self.settings.first_fix && !self.flaky && self.settings.strategy == Strategy::Adaptive;
        let already = cheaper_follows
            || self.settings.strategy == Strategy::Adaptive
                && if self.flaky || self.settings.repeat > 1 {
                    self.last_run.as_ref() == Some(&(config.key.clone(), RunKind::Full))
                } else {
                    full_pass()
                };
        let shortened = self.next_kind() == RunKind::Quick;
        if !already && self.run_kind(&config, RunKind::Full)? != Outcome::Pass {
            // The shortened runs misled the search: it goes on in full.
            if shortened && self.next_kind() == RunKind::Full {
                return self.search();
            }
            return Ok(self.no_fix(
                NoFix::ConfirmationFailed,
                format!(
                    "{} passed during the search but failed its confirmation run",
                    config.flags.join(" ")
                ),
            ));
        }
        match self.evaluate(&choice)? {
            Eval::Pass if cheaper_follows => match self.cheaper(choice)? {
                Confirmed::Fix(best) => Ok(self.fixed(&best)),
                Confirmed::SearchAgain => self.search(),
                Confirmed::Failed(flags) => Ok(self.no_fix(
                    NoFix::ConfirmationFailed,
                    format!(
                        "{} passed during the search but failed its confirmation run",
                        flags.join(" ")
                    ),
                )),
            },
            Eval::Pass => Ok(self.fixed(&choice)),
            _ => Ok(self.no_fix(
                NoFix::NotReliable,
                "the best candidate did not pass reliably".into(),
            )),
        }
    }

    /// The changes that fix it (see [`hypotheses`]); then the least value of each
    /// multi-valued flag.
    fn adaptive(&mut self) -> Result<Option<Choice>, Stopped> {
        let found = if self.space.dims.len() <= hypotheses::MAX_DIMS {
            self.hypothesis_search()?
        } else {
            self.split_search()?
        };
        let Some(dims) = found else { return Ok(None) };
        self.least_values(self.space.strong(&dims)).map(Some)
    }

    /// For flags with several values, the least that still fixes it (values are ordered, so
    /// they are bisected).
    fn least_values(&mut self, mut choice: Choice) -> Result<Choice, Stopped> {
        for i in 0..choice.len() {
            let (d, strongest) = choice[i];
            if strongest == 0 {
                continue;
            }
            // A searched value: from where the evidence points (see `least_value`).
            if self
                .space
                .value_searches
                .iter()
                .any(|v| v.flag == self.space.dims[d].flag())
            {
                choice[i] = (d, self.least_value(&choice, i)?);
                continue;
            }
            let (mut lo, mut hi) = (0usize, strongest);
            while lo < hi {
                let mid = (lo + hi) / 2;
                let mut trial = choice.clone();
                trial[i] = (d, mid);
                if self.evaluate(&trial)? == Eval::Pass {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            choice[i] = (d, hi);
        }
        Ok(choice)
    }

    /// The configuration of a set of dimensions (bit d: dimension d at its strongest).
    fn mask_config(&self, mask: u32) -> Option<Config> {
        self.space.config(&self.space.strong(&bits(mask)))
    }

    /// What the finished configurations say, as masks: passed (enough times) or failed;
    /// and those that could not start here (`dead`), which say nothing about the question.
    /// Configurations still short of the passes they need say nothing yet.
    fn known_masks(&self, asked: &[u32]) -> (Vec<(u32, bool)>, Vec<u32>) {
        let target = self.target.expect("baseline ran first");
        let needed = self.passes_needed();
        // Some(Some(passed)); Some(None): cannot run here; None: not enough runs yet.
        let status = |t: &Tally| {
            let failed_start = t.count(Outcome::StartupFailed);
            let refused = t.count(Outcome::FlagRejected) + t.count(Outcome::InvalidWorkflow);
            if t.count(target) > 0 || t.other_failures(target) >= OTHERS_TO_GIVE_UP {
                Some(Some(false))
            } else if t.passes() >= needed {
                Some(Some(true))
            } else if refused > 0 || failed_start >= STARTS_TO_GIVE_UP {
                Some(None)
            } else {
                None
            }
        };
        let mut known: Vec<(u32, bool)> = Vec::new();
        let mut dead: Vec<u32> = Vec::new();
        let mut add = |mask: u32, st: Option<Option<bool>>| match st {
            Some(Some(passed)) if !known.iter().any(|(m, _)| *m == mask) => {
                known.push((mask, passed))
            }
            Some(None) if !dead.contains(&mask) => dead.push(mask),
            _ => {}
        };
        let evidence = self.evidence();
        for t in &evidence {
            let strong = t
                .config
                .choice
                .iter()
                .all(|(d, a)| *a + 1 == self.space.dims[*d].alternatives());
            if strong {
                add(
                    t.config.choice.iter().fold(0, |m, (d, _)| m | 1 << d),
                    status(t),
                );
            }
        }
        // A mask may share its run with another (ComfyUI parses both the same way).
        for q in asked {
            if let Some(c) = self.mask_config(*q) {
                add(
                    *q,
                    evidence
                        .iter()
                        .find(|t| t.config.key == c.key)
                        .and_then(status),
                );
            }
        }
        (known, dead)
    }

    /// Runs the configurations [`hypotheses::next`] chooses until one answer of up to three
    /// changes is left, then falls back to delta debugging when none fits.
    fn hypothesis_search(&mut self) -> Result<Option<Vec<usize>>, Stopped> {
        let k = self.space.dims.len();
        let valid = |m: u32| self.mask_config(m).is_some();
        let mut answers = hypotheses::answers(k, &valid);
        if !self.likely_first(&answers)?
            && let Some(keep) = self.keep_first()?
        {
            answers.retain(|a| a & !keep == 0);
        }
        let mut asked: Vec<u32> = Vec::new();
        let mut rechecked = false;
        let mut everything_tried = false;
        loop {
            // Failures turned out flaky: the flaky search takes over from the runs so far.
            if self.flaky {
                return Ok(None);
            }
            let (known, dead) = self.known_masks(&asked);
            // No single change left: before pairs and triples are split, one run of every
            // change says whether any fix is left at all (if it fails, none is).
            if !everything_tried && hypotheses::singles_left(&answers, &known) == 0 {
                everything_tried = true;
                let gone = hypotheses::cannot_start(&known, &dead);
                let open = answers.iter().fold(0, |m, a| m | a) & !gone;
                let all = self.largest_valid(&bits(open));
                let mask = all.iter().fold(0, |m, d| m | 1 << d);
                if mask != 0 && !known.iter().any(|(q, _)| *q == mask) {
                    self.evaluate(&self.space.strong(&all))?;
                    asked.push(mask);
                    continue;
                }
            }
            let valid = |m: u32| self.mask_config(m).is_some();
            let next = hypotheses::next(k, &answers, &known, &dead, &valid);
            match next {
                hypotheses::Next::Run(q) => {
                    let before = self.runs;
                    self.prefer = self.final_run_kind(q, &answers, &known);
                    let evaluated = self.evaluate(&self.space.strong(&bits(q)));
                    self.prefer = None;
                    evaluated?;
                    if self.runs == before && asked.contains(&q) {
                        // Nothing new came of it: stop choosing.
                        break;
                    }
                    asked.push(q);
                }
                hypotheses::Next::Accept(a) => return Ok(Some(bits(a))),
                hypotheses::Next::NoneLeft => {}
            }
            // When no single change is left, a pass on the way may have been luck: run
            // what passed once more, newest first, before looking for changes that act
            // together.
            let (now, _) = self.known_masks(&asked);
            let none_single = hypotheses::singles_left(&answers, &now) == 0;
            if (none_single || next == hypotheses::Next::NoneLeft) && !rechecked && !self.flaky {
                rechecked = true;
                let passed: Vec<u32> = now.iter().filter(|(_, p)| *p).map(|(m, _)| *m).collect();
                for m in passed.iter().rev() {
                    let config = self.mask_config(*m).expect("ran before");
                    self.run_once(&config)?;
                    if self.flaky {
                        break;
                    }
                }
                continue;
            }
            if next == hypotheses::Next::NoneLeft {
                break;
            }
        }
        // Changes that cannot start here would make "everything" fail for nothing.
        let (known, dead) = self.known_masks(&asked);
        let gone = hypotheses::cannot_start(&known, &dead);
        let all: Vec<usize> = (0..k).filter(|d| gone & (1 << d) == 0).collect();
        self.together(&all)
    }

    /// Likely answers first: of the toggles the baseline's failure names as its usual fixes
    /// (the known failure its failing run matched, [`crate::classify::catalogue`]), the first
    /// that is still a possible answer runs alone before anything else (where a cheaper fix
    /// is looked for and Dynamic VRAM is on, the first that keeps it on). Whether it passed:
    /// a pass is then the answer the search confirms, a failure rules out that change alone.
    fn likely_first(&mut self, answers: &[u32]) -> Result<bool, Stopped> {
        let Some(mut prior) = self.prior() else {
            return Ok(false);
        };
        let keep_wanted = !self.settings.first_fix
            && self.space.keeps_dynamic_vram(&self.space.baseline()) == Some(true);
        // (Adding the flag: taking away a flag of the user's is not what fixed it upstream.)
        let dims: Vec<usize> = (0..self.space.dims.len())
            .filter(|d| matches!(self.space.dims[*d], super::space::Dim::Add { .. }))
            .filter(|d| prior.flags.iter().any(|f| f == self.space.dims[*d].flag()))
            .collect();
        let rank = |d: &usize| {
            let flag = self.space.dims[*d].flag();
            prior.flags.iter().position(|f| f == flag)
        };
        let mut ordered = dims.clone();
        ordered.sort_by_key(rank);
        // (Chosen from the answers alone, not from what has run: a resumed session picks the
        // same, and finds its run on record.)
        let pick = ordered.into_iter().find(|d| {
            let strong = self.space.strong(&[*d]);
            answers.contains(&(1 << d))
                && (!keep_wanted
                    || self
                        .space
                        .config(&strong)
                        .and_then(|c| self.space.keeps_dynamic_vram(&c))
                        == Some(true))
        });
        prior
            .flags
            .retain(|f| dims.iter().any(|d| self.space.dims[*d].flag() == f));
        prior.tried_first = pick.map(|d| {
            self.describe_config(&self.space.config(&self.space.strong(&[d])).expect("valid"))
        });
        if pick.is_none() && !prior.flags.is_empty() {
            prior.not_tried = Some(if keep_wanted {
                "none of them keeps Dynamic VRAM on, which is looked for first".into()
            } else {
                "none of them can run alone here".into()
            });
        }
        self.prior_done = Some(prior);
        let Some(d) = pick else {
            return Ok(false);
        };
        // Full at once where a pass of it shortened would cost more than it saves (a failure
        // before sampling costs the same either way).
        let (known, _) = self.known_masks(&[]);
        self.prefer = self.final_run_kind(1 << d, answers, &known);
        let evaluated = self.evaluate(&self.space.strong(&[d]));
        self.prefer = None;
        Ok(evaluated? == Eval::Pass)
    }

    /// The usual fixes of the known failures the baseline's failing full run matched (its
    /// shortened run, where a failure on record stands in for the full one); first, where the
    /// sampler saw other processes hold a gigabyte or more of VRAM as it failed, the room
    /// ComfyUI leaves them (`--vram-headroom`; `--reserve-vram` before Dynamic VRAM).
    fn prior(&self) -> Option<Prior> {
        let target = self.target?;
        let base = self.space.baseline().key;
        let others = |r: &Trial| r.cost.others_vram_bytes.filter(|b| *b >= OTHERS_VRAM_PRIOR);
        let failed = self
            .tallies
            .iter()
            .filter(|t| t.config.key == base)
            .flat_map(|t| &t.trials)
            .find(|r| {
                // (A shortened one where the failure on record stands in for the full run.)
                (r.kind == RunKind::Full || self.recorded_stands_in())
                    && r.outcome == target
                    && (!r.signatures.is_empty() || others(r).is_some())
            })?;
        let mut flags: Vec<String> = Vec::new();
        let others_vram_bytes = others(failed);
        if others_vram_bytes.is_some() {
            flags.extend(["--vram-headroom".to_string(), "--reserve-vram".to_string()]);
        }
        for id in &failed.signatures {
            let Some(sig) = crate::classify::catalogue::by_id(id) else {
                continue;
            };
            for f in sig.flags_to_try {
                let name = f.split('=').next().unwrap_or(f).to_string();
                if !flags.contains(&name) {
                    flags.push(name);
                }
            }
        }
        (!flags.is_empty()).then(|| Prior {
            run: failed.n,
            signatures: failed.signatures.clone(),
            flags,
            tried_first: None,
            not_tried: None,
            others_vram_bytes,
        })
    }

    /// Where the search goes on to a cheaper fix and Dynamic VRAM is on, the changes that keep
    /// it on are tried together first. If they pass, the answer is looked for among them
    /// alone (the mask returned): one that turns Dynamic VRAM off could not be recommended
    /// over them, so it need not run. If they fail, none of them fixes it alone (the answer is
    /// taken to be monotone) and the search goes on over every change, that run one of its
    /// answers.
    fn keep_first(&mut self) -> Result<Option<u32>, Stopped> {
        if self.settings.first_fix || self.flaky || self.settings.repeat > 1 {
            return Ok(None);
        }
        if self.space.keeps_dynamic_vram(&self.space.baseline()) != Some(true) {
            return Ok(None);
        }
        let (mut keep, mut off) = (Vec::new(), false);
        for d in 0..self.space.dims.len() {
            let config = self.space.config(&self.space.strong(&[d]));
            match config.and_then(|c| self.space.keeps_dynamic_vram(&c)) {
                Some(true) => keep.push(d),
                Some(false) => off = true,
                None => {}
            }
        }
        if keep.is_empty() || !off {
            return Ok(None);
        }
        let together = self.largest_valid(&keep);
        Ok(
            (self.evaluate(&self.space.strong(&together))? == Eval::Pass)
                .then(|| together.iter().fold(0, |m, d| m | 1 << d)),
        )
    }

    /// Group testing for one change that fixes it, then [`Self::together`]: the search for
    /// spaces too large to enumerate.
    fn split_search(&mut self) -> Result<Option<Vec<usize>>, Stopped> {
        let all: Vec<usize> = (0..self.space.dims.len()).collect();
        for _attempt in 0..3 {
            let flaky_before = self.flaky;
            let mut candidates = all.clone();
            let mut passed_sets: Vec<Vec<usize>> = Vec::new();
            while candidates.len() > 1 {
                let half: Vec<usize> = candidates[..candidates.len().div_ceil(2)].to_vec();
                match self.evaluate(&self.space.strong(&half))? {
                    Eval::Pass => {
                        passed_sets.push(half.clone());
                        candidates = half;
                    }
                    Eval::Fail | Eval::Invalid => candidates = candidates[half.len()..].to_vec(),
                }
            }
            if self.evaluate(&self.space.strong(&candidates))? == Eval::Pass {
                return Ok(Some(candidates));
            }
            // The search led to a configuration that fails. Either changes must act together,
            // or a pass on the way was luck: look again at what passed.
            if !self.flaky {
                for set in passed_sets.iter().rev() {
                    let config = self
                        .space
                        .config(&self.space.strong(set))
                        .expect("ran before");
                    self.run_once(&config)?;
                    if self.flaky {
                        break;
                    }
                }
            }
            if self.flaky && !flaky_before {
                continue;
            }
            break;
        }
        self.together(&all)
    }

    /// Changes that only work together: is there a fix at all, and which is minimal?
    fn together(&mut self, all: &[usize]) -> Result<Option<Vec<usize>>, Stopped> {
        let everything = self.largest_valid(all);
        if self.evaluate(&self.space.strong(&everything))? != Eval::Pass {
            // One change may undo another (`--highvram` turns Dynamic VRAM back off for a
            // `--disable-dynamic-vram` that fixes it): each that ComfyUI's flag model says is
            // undone with every change is tried on its own.
            // (Not one that failed elsewhere with more changes that did not undo it.)
            for d in all {
                if self.space.undone(*d, &self.space.strong(&everything))
                    && self.failed_with_more(&self.space.strong(&[*d])).is_none()
                    && self.evaluate(&self.space.strong(&[*d]))? == Eval::Pass
                {
                    return Ok(Some(vec![*d]));
                }
            }
            return Ok(None);
        }
        let mut minimal = self.minimize(&[], &everything)?;
        minimal.sort_unstable();
        Ok(Some(minimal))
    }

    /// The dimensions of `dims` that can be applied together (greedy, in order).
    fn largest_valid(&self, dims: &[usize]) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for d in dims {
            let mut with = out.clone();
            with.push(*d);
            if self.space.config(&self.space.strong(&with)).is_some() {
                out = with;
            }
        }
        out
    }

    /// The minimal subset of `candidates` that, added to `base`, makes the run pass, given
    /// that `base` plus all of `candidates` passes (Junker's QuickXplain: about
    /// d·log2(k/d) runs for d changes that must act together among k).
    fn minimize(&mut self, base: &[usize], candidates: &[usize]) -> Result<Vec<usize>, Stopped> {
        if candidates.len() <= 1 {
            // The baseline fails, so with nothing added the candidate is needed.
            let base_alone_passes = !base.is_empty() && self.passes_with(base, &[])?;
            return Ok(if base_alone_passes {
                Vec::new()
            } else {
                candidates.to_vec()
            });
        }
        let (c1, c2) = candidates.split_at(candidates.len().div_ceil(2));
        if self.passes_with(base, c1)? {
            return self.minimize(base, c1);
        }
        if self.passes_with(base, c2)? {
            return self.minimize(base, c2);
        }
        // Both halves hold something needed.
        let with_c1: Vec<usize> = base.iter().chain(c1).copied().collect();
        let m2 = self.minimize(&with_c1, c2)?;
        let with_m2: Vec<usize> = base.iter().chain(&m2).copied().collect();
        let m1 = self.minimize(&with_m2, c1)?;
        Ok(m1.into_iter().chain(m2).collect())
    }

    fn passes_with(&mut self, base: &[usize], extra: &[usize]) -> Result<bool, Stopped> {
        let mut dims: Vec<usize> = base.iter().chain(extra).copied().collect();
        dims.sort_unstable();
        dims.dedup();
        Ok(self.evaluate(&self.space.strong(&dims))? == Eval::Pass)
    }

    /// One change at a time; the first (in the order given) that fixes it.
    fn each(&mut self) -> Result<Option<Choice>, Stopped> {
        let mut first: Option<Choice> = None;
        for d in 0..self.space.dims.len() {
            for a in 0..self.space.dims[d].alternatives() {
                let choice = vec![(d, a)];
                if self.evaluate(&choice)? == Eval::Pass && first.is_none() {
                    first = Some(choice);
                }
            }
        }
        Ok(first)
    }

    /// Every valid combination; the passing one with the fewest changes (then least values).
    fn matrix(&mut self) -> Result<Option<Choice>, Stopped> {
        let mut best: Option<Choice> = None;
        for choice in all_choices(self.space) {
            if self.evaluate(&choice)? == Eval::Pass {
                let better = match &best {
                    None => true,
                    Some(b) => (choice.len(), weight(&choice)) < (b.len(), weight(b)),
                };
                if better {
                    best = Some(choice);
                }
            }
        }
        Ok(best)
    }
}

/// How a run ended, in words: "passed", "failed with oom in node 3", "... on prompt 2".
fn ending(t: &Trial) -> String {
    if t.outcome == Outcome::Pass {
        return "passed".into();
    }
    failed_with(t.outcome, t.failed_at.as_ref())
}

/// The dimensions of a mask, in order.
fn bits(mask: u32) -> Vec<usize> {
    (0..32).filter(|d| mask & (1 << d) != 0).collect()
}

fn weight(choice: &Choice) -> usize {
    choice.iter().map(|(_, a)| a).sum()
}

/// Every combination of alternatives (each dimension off, or one of its values).
pub fn all_choices(space: &Space) -> Vec<Choice> {
    let mut out: Vec<Choice> = vec![Vec::new()];
    for (d, dim) in space.dims.iter().enumerate() {
        let mut next = Vec::new();
        for c in &out {
            next.push(c.clone());
            for a in 0..dim.alternatives() {
                let mut with = c.clone();
                with.push((d, a));
                next.push(with);
            }
        }
        out = next;
    }
    out
}

/// How many runs `matrix` would need (before removing invalid and equivalent ones).
pub fn matrix_size(space: &Space) -> usize {
    space.dims.iter().map(|d| d.alternatives() + 1).product()
}
