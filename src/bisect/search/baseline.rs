//! The run of the user's flags: whether it fails as the search needs (in full, shortened, or on
//! record), how many runs a flaky failure needs to show.

use super::*;

impl Search<'_> {
    /// Runs the baseline; decides the hunted failure, or that there is none.
    pub(super) fn baseline(&mut self) -> Result<Option<Found>, Stopped> {
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
                // Shortened runs count only once one has failed as the workflow does: the
                // shortened run of these flags now, unless none is needed first.
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
    pub(super) fn baseline_is_enough(&mut self, base: &Config, repeat: usize) -> bool {
        let flaky_search = repeat > 1
            && self.settings.strategy == Strategy::Adaptive
            && self.space.dims.len() <= hypotheses::MAX_DIMS;
        let enough = self.evidence_of(base).runs() >= repeat || flaky_search;
        if enough {
            self.refresh_flaky();
        }
        enough
    }
}
