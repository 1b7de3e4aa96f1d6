//! Shortened runs in the search: whether the next run may be shortened, when the shortened run of
//! the user's flags stands in for the full one (it fails the same way, or a failure on record
//! does), when shortened runs are set aside, and when they cannot pay.

use super::*;

/// Shortened passes in a row, none failing, beside a full failure, after which a failure said
/// to be flaky (`--repeat`) no longer explains them and shortened runs are set aside: a
/// failure that shows 7 times in 10 lets 3 through 2.7% of the time. (A fixed number, so a
/// resumed session decides as the first did.)
const LUCKY_PASSES: usize = 3;

impl Search<'_> {
    /// Makes the shortened run of the user's flags where it is due: shortened runs are
    /// presumed to show the failure (see [`QuickState::Presumed`]) and one ended otherwise
    /// before any failed as their full run did; the check says whether that run counts.
    /// Whether it ran.
    pub(super) fn check_if_due(&mut self) -> Result<bool, Stopped> {
        let shortened = self.tallies.iter().flat_map(|t| &t.trials);
        let due = matches!(self.quick, QuickState::Presumed { .. })
            && shortened.clone().any(|t| t.kind == RunKind::Quick);
        if !due {
            return Ok(false);
        }
        self.run_kind(&self.space.baseline(), RunKind::Quick)?;
        Ok(true)
    }

    /// Whether the failing full run of the user's flags failed before its first sampling
    /// step, where a shortened failure is that same run.
    pub(super) fn failure_before_sampling(&self) -> bool {
        let base = self.space.baseline().key;
        let target = self.target;
        self.tallies
            .iter()
            .filter(|t| t.config.key == base)
            .flat_map(|t| &t.trials)
            .find(|r| r.kind == RunKind::Full && Some(r.outcome) == target)
            .is_some_and(|r| r.before_sampling())
    }

    /// Whether the failure on record struck well past the steps a shortened run keeps (its
    /// log's progress bar stopped there): a shortened check could not show it.
    pub(super) fn recorded_past_shortening(&self) -> bool {
        let step = self.recorded.as_ref().and_then(|r| r.failed_step);
        matches!((step, self.oracle.quick_steps()), (Some(s), Some(q)) if past_shortening(s, q))
    }

    /// Whether the failure on record stands in for the full baseline: a shortened run of the
    /// user's flags failed as it did, and no full run of them failed.
    pub(super) fn recorded_stands_in(&self) -> bool {
        matches!(self.quick, QuickState::Reproduces { reference: 0, .. })
    }

    /// A run whose pass would be the verdict is made in full when that is expected to take
    /// less ComfyUI time than a shortened run and then its confirmation: with the measured
    /// mean times, when (1 − p)·(full failure − shortened failure) < p·(shortened pass), for
    /// the chance p that it passes. A failure that strikes before sampling costs the same
    /// either way, so such a run goes full; one late in the workflow stays shortened unless
    /// the run is likely to pass.
    pub(super) fn final_run_kind(
        &self,
        q: u32,
        answers: &[u32],
        known: &[(u32, bool)],
    ) -> Option<RunKind> {
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
        // Before any shortened run counts (see [`QuickState::Presumed`]): a shortened
        // failure as the full one less the steps it cuts, and a shortened pass calls the
        // shortened run of the user's flags as well.
        let presumed = match self.quick {
            QuickState::Presumed { reference } => self
                .tallies
                .iter()
                .flat_map(|t| &t.trials)
                .find(|t| t.n == reference)
                .and_then(|r| self.shortened_costs(r))
                .map(|(_, _, check)| check * 1000.0),
            _ => None,
        };
        let quick_fail = mean(RunKind::Quick, false)
            .or(same_run.then_some(full_fail))
            .or(presumed)?;
        // A shortened pass not measured yet lasts at least as long as a shortened failure.
        let quick_pass = mean(RunKind::Quick, true).unwrap_or(quick_fail) + presumed.unwrap_or(0.0);
        ((1.0 - p) * (full_fail - quick_fail).max(0.0) < p * quick_pass).then_some(RunKind::Full)
    }

    /// The kind of run the search makes now.
    pub(super) fn next_kind(&self) -> RunKind {
        match self.quick {
            QuickState::Reproduces { .. } | QuickState::Presumed { .. } => RunKind::Quick,
            _ => RunKind::Full,
        }
    }

    /// Decides [`QuickState`] from the runs so far: the shortened run of the baseline (or,
    /// where none was needed, the first shortened run that failed as it did) against its
    /// first full failure, then every configuration's shortened runs against its full ones.
    /// Set aside, shortened runs stay set aside.
    pub(super) fn refresh_quick(&mut self) {
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
        // Failures said to be flaky (`--repeat`): a lucky pass of the shortened check is no
        // reason to set shortened runs aside; checks go on until one fails as the workflow
        // did, or `LUCKY_PASSES` have passed.
        if self.settings.repeat > 1
            && let Some(r) = reference
        {
            match checks.iter().find(|c| c.fails_as(r)) {
                Some(c) => check = Some(c),
                None if !checks.is_empty() && checks.len() < LUCKY_PASSES => check = None,
                None => {}
            }
        }
        // A deterministic failure that struck once sampling had begun: no shortened run of
        // the user's flags first. The first shortened run that fails as they did shows what
        // that check would (see [`QuickState::Presumed`]).
        // (Not where a full run of the user's flags passed before the one that failed: that
        // failure is flaky, and the flaky search needs their shortened run.)
        if check.is_none()
            && checks.is_empty()
            && self.settings.repeat <= 1
            && let Some(r) = reference
            && !trials
                .iter()
                .any(|t| t.kind == RunKind::Full && t.outcome == Outcome::Pass && t.n < r.n)
        {
            let shown = all()
                .filter(|t| t.kind == RunKind::Quick && t.fails_as(r))
                .min_by_key(|t| t.n)
                .map(|t| t.n);
            match shown {
                Some(check) => self.settle_quick(target, r.n, check),
                None => self.quick = QuickState::Presumed { reference: r.n },
            }
            return;
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
    pub(super) fn settle_quick(&mut self, target: Outcome, reference: u32, check: u32) {
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
            // A failure said to be flaky: a configuration without the fix passes now and
            // then, so its shortened passes beside a full failure say the shortened copy
            // hides the failure only past `LUCKY_PASSES`, with no shortened run of it failing.
            let disagrees = !flaky || {
                let quick = t.trials.iter().filter(|r| r.kind == RunKind::Quick);
                quick.clone().all(|r| r.outcome == Outcome::Pass) && quick.count() >= LUCKY_PASSES
            };
            if disagrees
                && let (Some(q), Some(f)) = (find(RunKind::Quick, false), find(RunKind::Full, true))
            {
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

    /// From the failing full run of the user's flags (`r`), where it measured its steps, in
    /// seconds: what a shortened pass saves (the steps it cuts, at the seconds per step
    /// measured), what a shortened failure saves (the steps it got past that a shortened one
    /// cuts), and what their shortened failure costs (their failing run less that).
    pub(super) fn shortened_costs(&self, r: &Trial) -> Option<(f64, f64, f64)> {
        let (full, quick) = r.sampling_steps?;
        let per_step = r.cost.seconds_per_step?;
        let pass_saves = full.saturating_sub(quick) as f64 * per_step;
        let done = r.failed_step.unwrap_or(full).min(full);
        let fail_saves = done.saturating_sub(quick) as f64 * per_step;
        let check = (r.duration_ms as f64 / 1000.0 - fail_saves).max(0.0);
        Some((pass_saves, fail_saves, check))
    }

    /// Why shortened runs would not pay, from the failing full run of the user's flags
    /// (`r`): the seconds a shortened run saves (the steps it cuts, at the seconds per step
    /// measured; a failure saves only the steps it got past) over the runs a search takes
    /// (2 + log2 of the changes, half of them passes) against what the shortened check of
    /// the user's flags costs (their failing run, less what it saves). Where loading and
    /// the rest of the workflow dwarf its sampling, the check costs more than the search
    /// saves: full runs at once.
    pub(super) fn shortening_does_not_pay(&self, r: &Trial) -> Option<String> {
        let (full, quick) = r.sampling_steps?;
        let per_step = r.cost.seconds_per_step?;
        let (pass_saves, fail_saves, check) = self.shortened_costs(r)?;
        if full <= quick {
            return None;
        }
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
}
