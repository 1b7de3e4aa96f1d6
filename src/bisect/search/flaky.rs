//! The search for failures that do not show on every run: a posterior over which changes fix
//! it and how often configurations without them fail ([`crate::bayes`]).
//!
//! The answers are those of the deterministic search (sets of up to three changes), and one
//! more: "none of them fixes it". Smaller sets are likelier a priori. Every finished run of a
//! configuration at its changes' strongest values goes into the posterior (a pass, or the
//! hunted failure; other failures say nothing about the question). Each next run is the
//! configuration whose outcome is expected to tell most about the answer per unit of ComfyUI
//! time, from the run times measured so far; the search stops when one answer reaches
//! `--confidence`, after a run of exactly that answer's configuration passed.
//!
//! The journal holds only finished runs and the posterior is rebuilt from them before every
//! choice, so a resumed session goes on exactly where it stopped.

use super::{Found, RunKind, bits};
use super::{OTHERS_TO_GIVE_UP, STARTS_TO_GIVE_UP, Search, Stopped, Tally, VerdictKind};
use crate::bayes::{self, Posterior, percent};
use crate::bisect::hypotheses;
use crate::outcome::Outcome;

/// The prior weight of one answer of each size (1, 2, 3 changes), and of "none of them":
/// one change alone is the common answer (among 8 changes, the 8 singles hold 64% of the
/// prior, the 28 pairs 27%, the 56 triples 9%, "none" 0.1%). Chosen on
/// `cargo bench --bench bisect` (BENCHMARKS.md) so that the stated confidence holds where
/// the answer is a pair or a triple too: lighter pairs and triples (1 : 0.035 : 0.002) took
/// a single culprit at p = 0.7 in 12.8 runs instead of 17.0, but a pair at p = 0.5 was then
/// right 94.2% of the time while the verdicts said 99.2% (a lucky pass of one of its two
/// changes was taken for the answer).
const PRIOR_BY_SIZE: [f64; 3] = [1.0, 0.12, 0.02];
const PRIOR_NONE: f64 = 0.015;

/// The most runs a budget taken from the posterior may add in one session (a resume adds as
/// many again).
const MOST_RUNS: u32 = 1000;

/// What the flaky search says so far: its best answer in flags, how sure, and the failure
/// rate (from [`crate::bayes::Belief`], which knows answers only by index).
#[derive(Debug, Clone, PartialEq)]
pub struct BestAnswer {
    /// The flags of the best answer (empty: none of the changes fixes it).
    pub flags: Vec<String>,
    pub probability: f64,
    pub failure_rate: Option<(f64, f64)>,
    pub runs: u32,
}

impl std::fmt::Display for BestAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.flags.is_empty() {
            "none of the changes fixes it".to_string()
        } else {
            self.flags.join(" ")
        };
        write!(
            f,
            "{what}: {} given {} runs",
            percent(self.probability),
            self.runs
        )?;
        if let Some((lo, hi)) = self.failure_rate {
            write!(f, "; failure rate without it {lo:.2}-{hi:.2}")?;
        }
        Ok(())
    }
}

impl Search<'_> {
    /// The flaky search, from the runs so far to a verdict with its confidence.
    pub(super) fn flaky_search(&mut self) -> Result<Found, Stopped> {
        let target = self.target.expect("baseline ran first");
        let k = self.space.dims.len();
        let valid = |m: u32| self.mask_config(m).is_some();
        let masks = hypotheses::answers(k, &valid);
        let tests: Vec<u32> = (0u32..(1 << k)).filter(|q| valid(*q)).collect();
        let mut prior: Vec<f64> = masks
            .iter()
            .map(|m| PRIOR_BY_SIZE[m.count_ones() as usize - 1])
            .collect();
        prior.push(PRIOR_NONE);
        let none = masks.len();
        let entry_runs = self.runs;
        let mut budget = 0;
        loop {
            let (post, dead, gone) = self.posterior(&masks, &prior, target);
            let b = post.belief();
            let answer = (b.answer != none).then(|| masks[b.answer]);
            let belief = BestAnswer {
                flags: answer.map_or_else(Vec::new, |m| self.mask_flags(m)),
                probability: b.probability,
                failure_rate: Some((b.rate_low, b.rate_high)),
                runs: self.runs,
            };
            self.last_belief = Some(belief.clone());
            // Never below the runs made: what is still needed comes on top of them, and a
            // session gets at most MOST_RUNS more before it asks to be resumed.
            if !self.settings.budget_given {
                let needed = bayes::runs_needed(&post, self.settings.confidence);
                let wanted = self
                    .runs
                    .saturating_add(needed)
                    .min(entry_runs.saturating_add(MOST_RUNS));
                budget = wanted.max(budget);
                self.budget = budget;
            }
            if b.probability >= self.settings.confidence {
                let Some(mask) = answer else {
                    return Ok(self.flaky_verdict(VerdictKind::NoFixFound, None, &belief));
                };
                // The verdict names a configuration that ran and passed, as the user's
                // workflow (a shortened pass is confirmed in full).
                let config = self.mask_config(mask).expect("answers are valid");
                if self.full_pass(&config) {
                    return self.flaky_fix(mask, &belief);
                }
                self.run_kind(&config, RunKind::Full)?;
                continue;
            }
            let Some(q) = self.most_telling(&post, &masks, &tests, (&dead, gone), target) else {
                let why = format!(
                    "no configuration left to run can tell the answers apart; so far: {belief}"
                );
                let mut found = self.flaky_verdict(VerdictKind::NoFixFound, None, &belief);
                found.reason = Some(why);
                found.confidence = None;
                return Ok(found);
            };
            let config = self.mask_config(q).expect("tests are valid");
            self.run_once(&config)?;
        }
    }

    /// The posterior from every finished run; the configurations not to run again (they could
    /// not start here, or failed otherwise twice) and the changes taken to keep ComfyUI from
    /// starting.
    fn posterior(
        &self,
        masks: &[u32],
        prior: &[f64],
        target: Outcome,
    ) -> (Posterior, Vec<u32>, u32) {
        let mut post = Posterior::new(prior);
        let mut dead: Vec<u32> = Vec::new();
        let mut live: Vec<(u32, bool)> = Vec::new();
        let evidence = self.evidence();
        for t in &evidence {
            let Some(q) = self.strong_mask(t) else {
                continue;
            };
            for trial in &t.trials {
                let failed = match trial.outcome {
                    Outcome::Pass => false,
                    o if o == target => true,
                    _ => continue,
                };
                post.observe(|a| a < masks.len() && masks[a] & !q == 0, failed);
                live.push((q, !failed));
            }
            if cannot_run(t, target) {
                dead.push(q);
            }
        }
        // An answer whose own configuration cannot run here can never be shown to fix it;
        // nor one with a change that kept every configuration it was in from starting.
        let gone = hypotheses::cannot_start(&live, &dead);
        for (a, m) in masks.iter().enumerate() {
            let own = self.mask_config(*m).map(|c| c.key);
            let own_dead = evidence
                .iter()
                .any(|t| Some(&t.config.key) == own.as_ref() && cannot_run(t, target));
            if own_dead || m & gone != 0 {
                post.rule_out(a);
            }
        }
        (post, dead, gone)
    }

    /// The mask of a tally's configuration when every change in it is at its strongest value.
    fn strong_mask(&self, t: &Tally) -> Option<u32> {
        let strong = t
            .config
            .choice
            .iter()
            .all(|(d, a)| *a + 1 == self.space.dims[*d].alternatives());
        strong.then(|| t.config.choice.iter().fold(0, |m, (d, _)| m | 1 << d))
    }

    /// The configuration whose outcome is expected to tell most about the answer per unit of
    /// run time; none when no run can tell anything.
    fn most_telling(
        &self,
        post: &Posterior,
        masks: &[u32],
        tests: &[u32],
        (dead, gone): (&[u32], u32),
        target: Outcome,
    ) -> Option<u32> {
        let marginals = post.marginals();
        let (pass_time, fail_time) = self.run_times(target);
        let mut best: Option<((f64, i32, i64), u32)> = None;
        for &q in tests {
            if dead.contains(&q) || q & gone != 0 {
                continue;
            }
            let (bits, pass) =
                Posterior::information(&marginals, |a| a < masks.len() && masks[a] & !q == 0);
            if bits < 1e-6 {
                continue;
            }
            let time = pass * pass_time + (1.0 - pass) * fail_time;
            // Ties go to fewer changes, then the lower mask, so a choice is reproducible.
            let score = (bits / time, -(q.count_ones() as i32), -(q as i64));
            if best.as_ref().is_none_or(|(b, _)| score > *b) {
                best = Some((score, q));
            }
        }
        best.map(|(_, q)| q)
    }

    /// The mean time of a pass and of a hunted failure, from the runs so far of the kind the
    /// search makes now (shortened or full; a pass not yet seen is taken to last as long as
    /// the longest run); equal when nothing was timed.
    fn run_times(&self, target: Outcome) -> (f64, f64) {
        let kind = self.next_kind();
        let mean = |want: &dyn Fn(Outcome) -> bool| {
            let times: Vec<f64> = self
                .tallies
                .iter()
                .flat_map(|t| &t.trials)
                .filter(|r| r.kind == kind && want(r.outcome) && r.duration_ms > 0)
                .map(|r| r.duration_ms as f64)
                .collect();
            (!times.is_empty()).then(|| times.iter().sum::<f64>() / times.len() as f64)
        };
        let longest = self
            .tallies
            .iter()
            .flat_map(|t| &t.trials)
            .filter(|r| r.kind == kind)
            .map(|r| r.duration_ms as f64)
            .fold(0.0, f64::max);
        match (mean(&|o| o == Outcome::Pass), mean(&|o| o == target)) {
            (Some(p), Some(f)) => (p, f),
            (None, Some(f)) => (longest.max(f), f),
            (Some(p), None) => (p, p),
            (None, None) => (1.0, 1.0),
        }
    }

    fn mask_flags(&self, mask: u32) -> Vec<String> {
        self.space.describe(&self.space.strong(&bits(mask)))
    }

    /// The verdict of a flaky search that found its answer: the least value of each flag with
    /// several (as the deterministic search does), then the posterior's figures.
    fn flaky_fix(&mut self, mask: u32, belief: &BestAnswer) -> Result<Found, Stopped> {
        let strong = self.space.strong(&bits(mask));
        let mut choice = self.least_values(strong.clone())?;
        let shortened = self.next_kind() == RunKind::Quick;
        // A lesser value found on shortened runs is confirmed in full too; if it fails,
        // the strongest (confirmed) stands.
        if choice != strong
            && let Some(config) = self.space.config(&choice)
            && !self.full_pass(&config)
            && self.run_kind(&config, RunKind::Full)? != Outcome::Pass
        {
            // The shortened runs misled it: the posterior is made again from full runs.
            if shortened && self.next_kind() == RunKind::Full {
                return self.flaky_search();
            }
            choice = strong;
        }
        Ok(self.flaky_verdict(VerdictKind::FixedBy, Some(&choice), belief))
    }

    /// Whether `config` passed a run of the workflow as it is.
    fn full_pass(&self, config: &super::Config) -> bool {
        self.tallies
            .iter()
            .filter(|t| t.config.key == config.key)
            .flat_map(|t| &t.trials)
            .any(|r| r.kind == RunKind::Full && r.outcome == Outcome::Pass)
    }

    fn flaky_verdict(
        &self,
        kind: VerdictKind,
        choice: Option<&super::Choice>,
        belief: &BestAnswer,
    ) -> Found {
        let mut found = self.verdict(kind, choice, None);
        found.confidence = Some(belief.probability);
        found.failure_rate = belief.failure_rate;
        if kind == VerdictKind::NoFixFound {
            found.reason = Some(format!(
                "no set of up to three of the changes fixes it ({} given {} runs)",
                percent(belief.probability),
                belief.runs
            ));
        }
        found
    }
}

/// Whether a configuration is not to be run again: ComfyUI refused it, it could not start
/// twice, or it failed otherwise twice.
fn cannot_run(t: &Tally, target: Outcome) -> bool {
    t.count(Outcome::FlagRejected) + t.count(Outcome::InvalidWorkflow) > 0
        || t.count(Outcome::StartupFailed) >= STARTS_TO_GIVE_UP
        || t.other_failures(target) >= OTHERS_TO_GIVE_UP
}
