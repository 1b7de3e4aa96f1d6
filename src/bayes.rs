//! A posterior over (answer, failure rate) for failures that do not show on every run.
//!
//! The model (Henderson et al., *Flake Aware Culprit Finding*, ICST 2023, for this problem):
//! one of a set of answers is true (a set of flags that fixes it, or the first bad commit);
//! a test either holds the answer (it is "fixed": it passes, but for a stray failure with
//! chance [`STRAY`]) or it does not, and then it fails with the unknown rate θ, the same for
//! every test that lacks the fix. θ lives on a grid with a flat prior; the answers have a
//! prior of their own (smaller sets first). Each finished run multiplies in its likelihood.
//!
//! The next test is the one whose outcome is expected to tell most about the answer (the
//! mutual information between the answer and the test's outcome, θ summed out), per unit of
//! what it costs; the search stops when one answer's posterior reaches the confidence asked
//! for. This module only computes: what is run, and when, is its callers' (`bisect::search`,
//! `regress::search`).

/// The next number in [0, 1) of a seeded generator (xorshift64*: small, good enough for a
/// simulation; the scripted oracle and the scripted flaky history share it).
pub(crate) fn unit(state: &mut u64) -> f64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}

/// The chance that a test holding the answer still fails with the hunted failure (a stray
/// failure): small, but not zero, so that one odd run cannot rule the true answer out forever.
pub(crate) const STRAY: f64 = 1e-3;

/// How many runs a flaky search gives a failure to show before it counts as not showing (the
/// bisect's baseline, regress's bad end): a failure that shows one run in three stays hidden
/// through 13 runs less than 1% of the time.
pub(crate) const TRIES_TO_SHOW: usize = 13;

/// Runs that fail some other way (a start that failed, another failure) after which a
/// configuration or commit is given up: one may be chance, two are not.
pub(crate) const ODD_RUNS_TO_GIVE_UP: usize = 2;

/// The confidence a flaky search stops at unless told otherwise (`--confidence`).
pub(crate) const DEFAULT_CONFIDENCE: f64 = 0.99;

/// The failure rates considered: 0.10 to 0.98 in steps of 0.02, and 0.995 (all but always).
fn grid() -> Vec<f64> {
    let mut g: Vec<f64> = (5..=49).map(|i| i as f64 * 0.02).collect();
    g.push(0.995);
    g
}

/// The posterior: one row of log weights over the rate grid per answer.
#[derive(Debug, Clone)]
pub(crate) struct Posterior {
    rates: Vec<f64>,
    /// `answers × rates`, natural logs, unnormalised.
    log_w: Vec<f64>,
    answers: usize,
    /// Finished runs multiplied in.
    pub runs: usize,
}

/// What the posterior says of its best answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Belief {
    /// Index of the most probable answer.
    pub answer: usize,
    /// Its posterior probability.
    pub probability: f64,
    /// The failure rate of tests without the fix: a 90% credible interval.
    pub rate_low: f64,
    pub rate_high: f64,
}

impl Posterior {
    /// A posterior at its prior: `prior[a]` is answer a's weight (any scale; zero rules it
    /// out); the rate is flat over the grid.
    pub(crate) fn new(prior: &[f64]) -> Posterior {
        let rates = grid();
        let mut log_w = Vec::with_capacity(prior.len() * rates.len());
        for p in prior {
            let l = if *p > 0.0 { p.ln() } else { f64::NEG_INFINITY };
            log_w.extend(std::iter::repeat_n(l, rates.len()));
        }
        Posterior {
            rates,
            log_w,
            answers: prior.len(),
            runs: 0,
        }
    }

    /// Multiplies in one finished run: `fixed(a)` says whether the test held answer a;
    /// `failed` whether it failed with the hunted failure.
    pub(crate) fn observe(&mut self, fixed: impl Fn(usize) -> bool, failed: bool) {
        let n = self.rates.len();
        let (fixed_fail, fixed_pass) = (STRAY.ln(), (1.0 - STRAY).ln());
        let unfixed: Vec<f64> = self
            .rates
            .iter()
            .map(|r| if failed { r.ln() } else { (1.0 - r).ln() })
            .collect();
        for a in 0..self.answers {
            let row = &mut self.log_w[a * n..(a + 1) * n];
            if fixed(a) {
                let l = if failed { fixed_fail } else { fixed_pass };
                row.iter_mut().for_each(|w| *w += l);
            } else {
                row.iter_mut().zip(&unfixed).for_each(|(w, l)| *w += l);
            }
        }
        self.runs += 1;
    }

    /// Rules answer a out (its own test cannot run here, so it can never be shown).
    pub(crate) fn rule_out(&mut self, a: usize) {
        let n = self.rates.len();
        self.log_w[a * n..(a + 1) * n].fill(f64::NEG_INFINITY);
    }

    /// The normalised weights, `answers × rates`.
    fn weights(&self) -> Vec<f64> {
        let max = self.log_w.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if max == f64::NEG_INFINITY {
            return vec![0.0; self.log_w.len()];
        }
        let mut w: Vec<f64> = self.log_w.iter().map(|l| (l - max).exp()).collect();
        let total: f64 = w.iter().sum();
        w.iter_mut().for_each(|x| *x /= total);
        w
    }

    /// Each answer's probability and its expected failure rate.
    pub(crate) fn marginals(&self) -> Vec<(f64, f64)> {
        let n = self.rates.len();
        let w = self.weights();
        (0..self.answers)
            .map(|a| {
                let row = &w[a * n..(a + 1) * n];
                let p: f64 = row.iter().sum();
                let rate = if p > 0.0 {
                    row.iter().zip(&self.rates).map(|(w, r)| w * r).sum::<f64>() / p
                } else {
                    0.5
                };
                (p, rate)
            })
            .collect()
    }

    /// The most probable answer, how probable, and the rate's 90% interval given it.
    pub(crate) fn belief(&self) -> Belief {
        let n = self.rates.len();
        let w = self.weights();
        let (answer, probability) = (0..self.answers)
            .map(|a| (a, w[a * n..(a + 1) * n].iter().sum::<f64>()))
            .fold((0, -1.0), |best, x| if x.1 > best.1 { x } else { best });
        let row = &w[answer * n..(answer + 1) * n];
        let (rate_low, rate_high) = interval(&self.rates, row, 0.90);
        Belief {
            answer,
            probability: probability.max(0.0),
            rate_low,
            rate_high,
        }
    }

    /// The lower end of the rate's 90% interval, all answers together.
    pub(crate) fn rate_low(&self) -> f64 {
        let n = self.rates.len();
        let w = self.weights();
        let mut col = vec![0.0; n];
        for a in 0..self.answers {
            for (c, x) in col.iter_mut().zip(&w[a * n..(a + 1) * n]) {
                *c += x;
            }
        }
        interval(&self.rates, &col, 0.90).0
    }

    /// What a test is expected to tell about the answer, in bits, and its chance of passing,
    /// from the marginals ([`Self::marginals`]) and which answers it holds.
    pub(crate) fn information(
        marginals: &[(f64, f64)],
        fixed: impl Fn(usize) -> bool,
    ) -> (f64, f64) {
        let mut pass = 0.0;
        let mut conditional = 0.0;
        for (a, (p, rate)) in marginals.iter().enumerate() {
            if *p <= 0.0 {
                continue;
            }
            let q = if fixed(a) { 1.0 - STRAY } else { 1.0 - rate };
            pass += p * q;
            conditional += p * entropy(q);
        }
        ((entropy(pass) - conditional).max(0.0), pass)
    }

    /// The entropy of the answer, in bits.
    pub(crate) fn entropy(&self) -> f64 {
        self.marginals()
            .iter()
            .filter(|(p, _)| *p > 0.0)
            .map(|(p, _)| -p * p.log2())
            .sum()
    }
}

/// A probability as a person reads it: 99.4%, never a rounded-up 100% short of certainty.
pub(crate) fn percent(p: f64) -> String {
    let shown = (p * 1000.0).floor() / 10.0;
    format!("{shown:.1}%")
}

/// The binary entropy of `p`, in bits.
fn entropy(p: f64) -> f64 {
    let h = |x: f64| if x <= 0.0 { 0.0 } else { -x * x.log2() };
    h(p) + h(1.0 - p)
}

/// The central `mass` interval of a distribution over `values` (weights need not sum to 1).
fn interval(values: &[f64], weights: &[f64], mass: f64) -> (f64, f64) {
    let total: f64 = weights.iter().sum();
    if total <= 0.0 {
        return (values[0], values[values.len() - 1]);
    }
    let tail = (1.0 - mass) / 2.0 * total;
    let mut acc = 0.0;
    let mut low = values[0];
    for (v, w) in values.iter().zip(weights) {
        acc += w;
        if acc > tail {
            low = *v;
            break;
        }
    }
    acc = 0.0;
    let mut high = values[values.len() - 1];
    for (v, w) in values.iter().zip(weights).rev() {
        acc += w;
        if acc > tail {
            high = *v;
            break;
        }
    }
    (low, high)
}

/// How many bits one run tells at failure rate `rate` at best: the capacity of the channel
/// "a test without the fix fails with chance rate, one with it passes" (a Z-channel whose
/// pass leaks with chance 1 - rate).
pub(crate) fn bits_per_run(rate: f64) -> f64 {
    let e = (1.0 - rate).clamp(1e-9, 1.0 - 1e-9);
    (1.0 + (1.0 - e) * e.powf(e / (1.0 - e))).log2()
}

/// The runs a search should be given to reach `confidence` from where it is: what is left
/// to learn (the answer's entropy, and the evidence the confidence asks for) at what a run
/// tells at the lowest rate the runs so far allow, with half as much again for bad luck.
pub(crate) fn runs_needed(posterior: &Posterior, confidence: f64) -> u32 {
    let left = posterior.entropy() + (1.0 / (1.0 - confidence)).log2();
    let per_run = bits_per_run(posterior.rate_low()).max(0.01);
    (1.5 * left / per_run).ceil().min(100_000.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_moves_the_answer_and_the_rate() {
        // Two answers: test 0 holds answer 0 only.
        let mut p = Posterior::new(&[1.0, 1.0]);
        assert!((p.belief().probability - 0.5).abs() < 1e-9);
        for _ in 0..8 {
            p.observe(|a| a == 0, false);
        }
        // Eight passes of the test that holds answer 0: answer 1 would have failed some.
        let b = p.belief();
        assert_eq!(b.answer, 0);
        assert!(b.probability > 0.9, "{b:?}");
        // A failure of the test that holds answer 0 all but rules it out.
        p.observe(|a| a == 0, true);
        assert_eq!(p.belief().answer, 1);
    }

    #[test]
    fn the_rate_interval_follows_the_failures_seen() {
        let mut p = Posterior::new(&[1.0]);
        for i in 0..40 {
            p.observe(|_| false, i % 10 < 7);
        }
        let b = p.belief();
        assert!(b.rate_low > 0.5 && b.rate_low < 0.7, "{b:?}");
        assert!(b.rate_high > 0.72 && b.rate_high < 0.9, "{b:?}");
    }

    #[test]
    fn a_test_that_splits_the_answers_tells_more_than_one_that_does_not() {
        let p = Posterior::new(&[1.0, 1.0, 1.0, 1.0]);
        let m = p.marginals();
        let (half, _) = Posterior::information(&m, |a| a < 2);
        let (none, _) = Posterior::information(&m, |_| false);
        let (quarter, _) = Posterior::information(&m, |a| a == 0);
        assert!(none < 1e-9);
        assert!(half > quarter && quarter > 0.0);
        // Never more than one bit from one pass or fail.
        assert!(half <= 1.0);
    }

    #[test]
    fn a_ruled_out_answer_gets_nothing() {
        let mut p = Posterior::new(&[1.0, 1.0]);
        p.rule_out(0);
        assert_eq!(p.belief().answer, 1);
        assert!((p.belief().probability - 1.0).abs() < 1e-9);
    }

    #[test]
    fn the_budget_grows_as_failures_get_rarer() {
        let mut often = Posterior::new(&[1.0; 9]);
        let mut rarely = Posterior::new(&[1.0; 9]);
        for i in 0..12 {
            often.observe(|_| false, i % 10 < 9);
            rarely.observe(|_| false, i % 3 == 0);
        }
        assert!(runs_needed(&rarely, 0.99) > 2 * runs_needed(&often, 0.99));
        assert!(bits_per_run(0.995) > 0.9 && bits_per_run(0.3) < 0.2);
    }
}
