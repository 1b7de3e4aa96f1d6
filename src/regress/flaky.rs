//! `regress` for a failure that does not show on every run (`--repeat` 2 or more): a posterior
//! over which commit is the first bad one and how often bad commits fail
//! ([`crate::bayes`]), each test one run of the commit whose outcome is expected to tell most,
//! until one commit reaches `--confidence` (Flake Aware Culprit Finding's own setting).
//!
//! A pass is evidence, not proof: a commit is called first bad only when the posterior says so,
//! after it failed at least once and the commit before it (or every commit between it and the
//! last one that passed, when those could not be tested) passed at least once. A test asked
//! again of the same commit is a new run; a resumed session replays its journal in order
//! ([`super::Session`]), so it goes on where it stopped.

use super::Mark;
use super::search::{Answer, Bisection, CommitTester, Hunt, Stop, stopped};
use crate::bayes::{Posterior, percent};
use crate::error::Error;
use crate::outcome::Outcome;

/// How many times the bad end is run before a flaky failure counts as not showing there.
const BAD_END_TRIES: usize = crate::bayes::TRIES_TO_SHOW;

/// Runs of a commit that could not say (another failure, a start that failed) after which it
/// is skipped.
const ODD_TO_SKIP: usize = crate::bayes::ODD_RUNS_TO_GIVE_UP;

/// Bisects history for a flaky failure, until one commit is first bad with `confidence`.
pub fn bisect(
    tester: &mut dyn CommitTester,
    hunt: Hunt<'_>,
    confidence: f64,
) -> Result<Bisection, Error> {
    let (good, bad, commits) = (hunt.good, hunt.bad, hunt.commits);
    let mut kind = hunt.regress;
    let n = commits.len();
    // What each commit gave, by index (the good end apart): (passes, failures).
    let mut seen = vec![(0usize, 0usize); n];
    // Runs that could not say (a failure of another kind, a start that failed): a commit is
    // skipped after two, as a bisect gives up on a configuration.
    let mut odd = vec![0usize; n];
    let mut skipped = vec![false; n];
    // The bad end first, until the failure shows: it says what "bad" is.
    loop {
        match tester.test(bad, kind) {
            Ok(t) if t.mark == Mark::Bad => {
                kind = kind.or(t.outcome);
                seen[n - 1].1 += 1;
                break;
            }
            Ok(t) if t.mark == Mark::Good => {
                seen[n - 1].0 += 1;
                if seen[n - 1].0 >= BAD_END_TRIES {
                    return Ok(Bisection::ended(Answer::BadPasses, kind));
                }
            }
            Ok(_) => {
                odd[n - 1] += 1;
                if odd[n - 1] >= ODD_TO_SKIP {
                    return Ok(Bisection::ended(Answer::Untestable, kind));
                }
            }
            Err(stop) => return stopped(stop, kind),
        }
    }
    match tester.test(good, kind) {
        Ok(t) if t.mark == Mark::Good => {}
        Ok(t) if t.mark == Mark::Bad => return Ok(Bisection::ended(Answer::GoodFails, kind)),
        Ok(_) => return Ok(Bisection::ended(Answer::Untestable, kind)),
        Err(stop) => return stopped(stop, kind),
    }
    // Answer b: commits[b] is the first bad one (commits before it pass).
    loop {
        let mut post = Posterior::new(&vec![1.0; n]);
        for (i, (passes, fails)) in seen.iter().enumerate() {
            for _ in 0..*passes {
                post.observe(|b| i < b, false);
            }
            for _ in 0..*fails {
                post.observe(|b| i < b, true);
            }
        }
        for (b, s) in skipped.iter().enumerate() {
            if *s {
                post.rule_out(b);
            }
        }
        let belief = post.belief();
        let b = belief.answer;
        // The last commit before b that passed (-1: the good end).
        let last_good = (0..b)
            .rev()
            .find(|i| seen[*i].0 > 0)
            .map_or(-1, |i| i as i64);
        if belief.probability >= confidence {
            // Named only as it ran: b failed, and what lies between it and the last pass
            // could not be tested.
            let gap = ((last_good + 1) as usize..b).find(|i| !skipped[*i]);
            let next = if seen[b].1 == 0 { Some(b) } else { gap };
            if let Some(i) = next {
                match test(
                    tester,
                    commits,
                    i,
                    kind,
                    (&mut seen, &mut odd, &mut skipped),
                ) {
                    Ok(()) => continue,
                    Err(stop) => return stopped(stop, kind),
                }
            }
            return Ok(Bisection {
                answer: Answer::FirstBadFound,
                regress: kind,
                first_bad: Some(commits[b].clone()),
                last_good: Some(if last_good < 0 {
                    good.to_string()
                } else {
                    commits[last_good as usize].clone()
                }),
                between: ((last_good + 1) as usize..b)
                    .map(|i| commits[i].clone())
                    .collect(),
                confidence: Some(belief.probability),
                failure_rate: Some((belief.rate_low, belief.rate_high)),
                best_so_far: None,
                quick: crate::session::quick::QuickState::Off(Some(
                    "regress's flaky search (--repeat 2 or more) runs every commit in full".into(),
                )),
                confirmed_by: Vec::new(),
            });
        }
        let marginals = post.marginals();
        let pick = (0..n)
            .filter(|i| !skipped[*i])
            .map(|i| (Posterior::information(&marginals, |b| i < b).0, i))
            .filter(|(bits, _)| *bits > 1e-6)
            .max_by(|x, y| x.0.total_cmp(&y.0).then(y.1.cmp(&x.1)));
        let Some((_, i)) = pick else {
            let mut ended = Bisection::ended(Answer::Untestable, kind);
            ended.confidence = Some(belief.probability);
            return Ok(ended);
        };
        match test(
            tester,
            commits,
            i,
            kind,
            (&mut seen, &mut odd, &mut skipped),
        ) {
            Ok(()) => {}
            Err(stop) => {
                let mut ended = stopped(stop, kind)?;
                ended.confidence = Some(belief.probability);
                ended.failure_rate = Some((belief.rate_low, belief.rate_high));
                ended.first_bad = None;
                ended.best_so_far = Some(format!(
                    "{} is the first bad commit with {} so far",
                    commits[b],
                    percent(belief.probability)
                ));
                return Ok(ended);
            }
        }
    }
}

/// What the runs of each commit said: (passes, failures), runs that could not say, skipped.
type Counts<'a> = (&'a mut [(usize, usize)], &'a mut [usize], &'a mut [bool]);

/// One run of commit `i`, counted.
fn test(
    tester: &mut dyn CommitTester,
    commits: &[String],
    i: usize,
    kind: Option<Outcome>,
    (seen, odd, skipped): Counts<'_>,
) -> Result<(), Stop> {
    let t = tester.test(&commits[i], kind)?;
    match t.mark {
        Mark::Good => seen[i].0 += 1,
        Mark::Bad => seen[i].1 += 1,
        Mark::Skip => {
            odd[i] += 1;
            skipped[i] |= odd[i] >= ODD_TO_SKIP;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regress::search::FlakyHistory as Flaky;
    use crate::regress::search::hunt;

    #[test]
    fn a_flaky_regression_in_64_commits_is_found_with_its_confidence() {
        let line: Vec<String> = (1..=64).map(|i| format!("c{i}")).collect();
        // Every place of the first bad commit once (7 and 64 share no factor); the benchmark
        // measures 400 seeds (`cargo bench --bench bisect`).
        let (mut right, mut runs, n) = (0, 0, 64);
        for seed in 0..n {
            let first_bad = 1 + (seed as usize * 7) % 64;
            let mut h = Flaky::new(first_bad, 0.7, seed + 1);
            let b = bisect(&mut h, hunt("c64", &line), 0.99).unwrap();
            runs += h.runs;
            if b.first_bad.as_deref() == Some(format!("c{first_bad}").as_str()) {
                right += 1;
                assert!(b.confidence.unwrap() >= 0.99);
            }
        }
        assert!(right * 100 >= n as usize * 98, "{right} of {n} right");
        assert!(
            runs / (n as usize) < 40,
            "{} runs on average",
            runs / n as usize
        );
    }

    #[test]
    fn a_bad_end_that_never_fails_passes_after_its_tries() {
        let line: Vec<String> = (1..=8).map(|i| format!("c{i}")).collect();
        let mut h = Flaky::new(99, 0.7, 1);
        let b = bisect(&mut h, hunt("c8", &line), 0.99).unwrap();
        assert_eq!(b.answer, Answer::BadPasses);
        assert_eq!(h.runs, BAD_END_TRIES);
    }
}
