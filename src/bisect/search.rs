//! Search strategies: adaptive (group testing, then delta debugging), matrix and each.
//!
//! They talk to ComfyUI only through [`Oracle`], so a scripted oracle tests them without
//! launching anything. Every run is expensive (minutes of GPU time), so the adaptive search
//! spends runs only where they carry information: one run per configuration while outcomes
//! agree, more where they disagree.
//!
//! Here: the search's state, its runs and what they tell, and the verdict. `baseline` runs the
//! user's flags, `quick` decides shortened runs, `strategies` holds the adaptive search, each
//! and matrix, `flaky` the search from the posterior, `cheaper` the search for a cheaper fix.

use super::hypotheses;
mod baseline;
mod cheaper;
mod flaky;
mod quick;
mod strategies;
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

/// The user's own flags that raise what a failure of each kind ran out of, taken away first
/// where the search starts from one (the install's flags as a prior): what their help and
/// ComfyUI's model management say each keeps in memory.
const OWN_FLAGS: &[(&str, &[Outcome])] = &[
    // Models kept in VRAM after use (HIGH_VRAM; Dynamic VRAM's gate is off with it).
    ("--highvram", &[Outcome::Oom, Outcome::AcceleratorOom]),
    // Everything, text encoders included, stored and run on the GPU.
    ("--gpu-only", &[Outcome::Oom, Outcome::AcceleratorOom]),
    // Every node's outputs kept in RAM (the classic cache; `--high-ram` sets it).
    ("--cache-classic", &[Outcome::HostOom]),
    ("--high-ram", &[Outcome::HostOom]),
];

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
    /// The user's own flags that keep more of what that run ran out of in memory
    /// (`--highvram` where the GPU did), whose removal is tried before the usual fixes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub own_flags: Vec<String>,
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
        self.check_if_due()?;
        let kind = self.prefer.unwrap_or_else(|| self.next_kind());
        self.run_kind(config, kind)
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
            // (A check made here may settle this configuration's shortened run.)
            if self.check_if_due()? {
                continue;
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
                    Stopped::Budget => format!("the run budget ({} runs) was spent", self.budget),
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
            // Confirmed on the workflow as it is: the configuration with the most changes
            // (where shortened runs counted).
            if matches!(self.quick, QuickState::Reproduces { .. }) && !self.flaky {
                let all: Vec<usize> = (0..self.space.dims.len()).collect();
                let everything = self.largest_valid(&all);
                // (A shortened failure before any sampling step is that run already; a full
                // one, made so at once, is it.)
                let same_run = |c: &Config| {
                    self.evidence_of(c).trials.iter().any(|t| {
                        t.kind == RunKind::Full || t.kind == RunKind::Quick && t.before_sampling()
                    })
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
