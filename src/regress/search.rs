//! The search of `regress`, apart from git and ComfyUI: both ends first (the bad end says what
//! "bad" is, the good end must pass), then first-parent history is bisected, always testing the
//! commit nearest the middle of what is left. A commit that cannot be tested is skipped, never
//! called bad; when skipped commits sit next to the boundary, the answer is the list of
//! commits the first bad one could be. It sees commits only through a [`CommitTester`], so a
//! scripted history tests it without a repository.

use super::{Mark, Tested};
use crate::error::Error;
use crate::outcome::Outcome;
use crate::run::record::RunKind;
use crate::session::quick::QuickState;

/// What a session's search can tell (`verdict.kind` in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    FirstBadFound,
    /// The bad end passed: nothing to bisect.
    BadPasses,
    /// The good end fails too: the regression is older.
    GoodFails,
    /// An end could not be tested.
    Untestable,
    /// Stopped before an answer (Ctrl-C, the run budget); resumable.
    Incomplete,
}

impl Answer {
    /// The name in JSON (`verdict.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::FirstBadFound => "first_bad_found",
            Answer::BadPasses => "bad_passes",
            Answer::GoodFails => "good_fails",
            Answer::Untestable => "untestable",
            Answer::Incomplete => "incomplete",
        }
    }
}

/// Why testing a commit did not give a mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Ctrl-C or the run budget: the session ends without an answer, resumable.
    Incomplete,
    /// The machine cannot go on (the GPU lock, a full disk): the session ends with this error.
    Failed(Error),
}

/// Tests commits: the live one runs ComfyUI at each, a scripted one reads a made-up history.
pub trait CommitTester {
    /// Tests `commit` (or recalls it) with `regress` as what counts as bad (`None`: any
    /// failure). A commit that cannot be tested comes back marked [`Mark::Skip`].
    fn test(&mut self, commit: &str, regress: Option<Outcome>) -> Result<Tested, Stop>;
    /// Tests `commit` on the shortened copy of the workflow (`--quick`); a tester that cannot
    /// shorten tests it in full.
    fn test_quick(&mut self, commit: &str, regress: Option<Outcome>) -> Result<Tested, Stop> {
        self.test(commit, regress)
    }
    /// Whether shortened runs may be used, once the ends are known: why not, otherwise
    /// (`None`: `--quick off`).
    fn shortenable(&mut self) -> Result<(), Option<String>> {
        Err(None)
    }
}

/// The search's result: the answer, what counted as bad, and the boundary.
#[derive(Debug, Clone, PartialEq)]
pub struct Bisection {
    pub answer: Answer,
    /// What counted as bad: `--regress`, else the bad end's own failure.
    pub regress: Option<Outcome>,
    pub first_bad: Option<String>,
    pub last_good: Option<String>,
    /// Skipped commits between the last good and the first bad one.
    pub between: Vec<String>,
    /// A flaky search's posterior of its answer (of the best answer, when stopped early).
    pub confidence: Option<f64>,
    /// A flaky search's failure rate of bad commits (90% interval).
    pub failure_rate: Option<(f64, f64)>,
    /// A flaky search stopped early: its best answer so far, in words.
    pub best_so_far: Option<String>,
    /// Whether the search ran on shortened runs, and why (or why not).
    pub quick: QuickState,
    /// The full runs that confirmed the first bad and the last good commit (a shortened
    /// search's answer), in order.
    pub confirmed_by: Vec<String>,
}

impl Bisection {
    pub(super) fn ended(answer: Answer, regress: Option<Outcome>) -> Bisection {
        Bisection {
            answer,
            regress,
            first_bad: None,
            last_good: None,
            between: Vec::new(),
            confidence: None,
            failure_rate: None,
            best_so_far: None,
            quick: QuickState::default(),
            confirmed_by: Vec::new(),
        }
    }
}

/// What a bisect of history looks for, and where.
#[derive(Debug, Clone, Copy)]
pub struct Hunt<'a> {
    /// A commit where the workflow passes.
    pub good: &'a str,
    /// A commit where it fails.
    pub bad: &'a str,
    /// First-parent history after `good`, oldest first, ending with `bad`.
    pub commits: &'a [String],
    /// The failure looked for (`--regress`); `None`: whatever the bad end fails with.
    pub regress: Option<Outcome>,
}

/// Bisects history for a failure that shows on every run.
pub fn bisect(tester: &mut dyn CommitTester, hunt: Hunt<'_>) -> Result<Bisection, Error> {
    let (good, bad, commits) = (hunt.good, hunt.bad, hunt.commits);
    let mut kind = hunt.regress;
    // The bad end first: it says what "bad" is.
    let bad_end = match tester.test(bad, kind) {
        Ok(t) => t,
        Err(stop) => return stopped(stop, kind),
    };
    match bad_end.mark {
        Mark::Bad => kind = kind.or(bad_end.outcome),
        Mark::Good => return Ok(Bisection::ended(Answer::BadPasses, kind)),
        Mark::Skip => return Ok(Bisection::ended(Answer::Untestable, kind)),
    }
    match tester.test(good, kind) {
        Ok(t) if t.mark == Mark::Good => {}
        Ok(t) if t.mark == Mark::Bad => return Ok(Bisection::ended(Answer::GoodFails, kind)),
        Ok(_) => return Ok(Bisection::ended(Answer::Untestable, kind)),
        Err(stop) => return stopped(stop, kind),
    }
    // Shortened runs, only once the shortened bad end fails as the bad end did.
    let mut quick = match tester.shortenable() {
        Err(why) => QuickState::Off(why),
        Ok(()) => match tester.test_quick(bad, kind) {
            Ok(check) if check.kind == RunKind::Quick => {
                if check.mark == Mark::Bad
                    && check.outcome == bad_end.outcome
                    && check.failed_at == bad_end.failed_at
                {
                    QuickState::Reproduces {
                        reference: last_run(&bad_end),
                        check: last_run(&check),
                    }
                } else {
                    QuickState::SetAside(format!(
                        "the shortened run of the bad end (run {}) {}, where the workflow {} (run {})",
                        last_run(&check),
                        ending(&check),
                        ending(&bad_end),
                        last_run(&bad_end)
                    ))
                }
            }
            Ok(_) => QuickState::Off(Some("the workflow could not be shortened".into())),
            Err(stop) => return stopped(stop, kind),
        },
    };
    loop {
        let shortened = matches!(quick, QuickState::Reproduces { .. });
        let mut found = match split(tester, good, commits, kind, shortened) {
            Ok(found) => found,
            Err(stop) => return stopped(stop, kind),
        };
        // The answer is about the workflow as it is: a boundary found on shortened runs is
        // confirmed in full (the ends already ran in full).
        if shortened {
            let first_bad = found.first_bad.clone().expect("a boundary");
            let last_good = found.last_good.clone().expect("a boundary");
            let mut disagrees = None;
            for (commit, want) in [(first_bad, Mark::Bad), (last_good, Mark::Good)] {
                if commit == bad || commit == good {
                    continue;
                }
                let t = match tester.test(&commit, kind) {
                    Ok(t) => t,
                    Err(stop) => return stopped(stop, kind),
                };
                found.confirmed_by.push(format!("{}", last_run(&t)));
                if t.mark != want {
                    disagrees = Some(format!(
                        "commit {} {} shortened but its full run (run {}) {}",
                        super::git::abbrev(&commit, 7),
                        if want == Mark::Bad {
                            "failed"
                        } else {
                            "passed"
                        },
                        last_run(&t),
                        ending(&t)
                    ));
                    break;
                }
            }
            if let Some(why) = disagrees {
                quick = QuickState::SetAside(why);
                continue;
            }
        }
        found.regress = kind;
        found.quick = quick;
        return Ok(found);
    }
}

/// The number of a tested commit's last run (its folder's name), 0 when it has none.
fn last_run(t: &Tested) -> u32 {
    t.runs
        .last()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// How a tested commit ended, in words.
fn ending(t: &Tested) -> String {
    match (t.mark.clone(), t.outcome) {
        (Mark::Good, _) => "passed".into(),
        (_, Some(o)) => crate::session::failure::failed_with(o, t.failed_at.as_ref()),
        (_, None) => "could not be tested".into(),
    }
}

/// Bisects first-parent history between ends known to pass and fail: the commit nearest the
/// middle of what is left, shortened or in full.
fn split(
    tester: &mut dyn CommitTester,
    good: &str,
    commits: &[String],
    kind: Option<Outcome>,
    shortened: bool,
) -> Result<Bisection, Stop> {
    // `lo` passed (-1: the good end), `hi` failed (n - 1: the bad end).
    let (mut lo, mut hi) = (-1i64, commits.len() as i64 - 1);
    let mut skipped: Vec<i64> = Vec::new();
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let Some(pick) = ((lo + 1)..hi)
            .filter(|i| !skipped.contains(i))
            .min_by_key(|i| (i - mid).abs())
        else {
            break;
        };
        let commit = &commits[pick as usize];
        let t = if shortened {
            tester.test_quick(commit, kind)?
        } else {
            tester.test(commit, kind)?
        };
        match t.mark {
            Mark::Bad => hi = pick,
            Mark::Good => lo = pick,
            Mark::Skip => skipped.push(pick),
        }
    }
    Ok(Bisection {
        answer: Answer::FirstBadFound,
        regress: kind,
        first_bad: Some(commits[hi as usize].clone()),
        last_good: Some(if lo < 0 {
            good.to_string()
        } else {
            commits[lo as usize].clone()
        }),
        between: ((lo + 1)..hi)
            .map(|i| commits[i as usize].clone())
            .collect(),
        confidence: Some(1.0),
        failure_rate: None,
        best_so_far: None,
        quick: QuickState::default(),
        confirmed_by: Vec::new(),
    })
}

/// A search that could not go on: incomplete after a stop, the error after a failure.
pub(super) fn stopped(stop: Stop, regress: Option<Outcome>) -> Result<Bisection, Error> {
    match stop {
        Stop::Incomplete => Ok(Bisection::ended(Answer::Incomplete, regress)),
        Stop::Failed(e) => Err(e),
    }
}

/// From `good` to `bad` over `commits`, for whatever the bad end fails with (tests).
#[cfg(test)]
pub(super) fn hunt<'a>(bad: &'a str, commits: &'a [String]) -> Hunt<'a> {
    Hunt {
        good: "good",
        bad,
        commits,
        regress: None,
    }
}

/// A made-up history for the tests and the benchmark: commits `c1`, `c2`, … after `good`;
/// those from `first_bad` on fail (out of memory) with chance `rate`.
pub struct FlakyHistory {
    pub first_bad: usize,
    pub rate: f64,
    rng: u64,
    pub runs: usize,
}

impl FlakyHistory {
    pub fn new(first_bad: usize, rate: f64, seed: u64) -> FlakyHistory {
        FlakyHistory {
            first_bad,
            rate,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            runs: 0,
        }
    }
    fn next(&mut self) -> f64 {
        crate::bayes::unit(&mut self.rng)
    }
}

impl CommitTester for FlakyHistory {
    fn test(&mut self, commit: &str, _: Option<Outcome>) -> Result<Tested, Stop> {
        self.runs += 1;
        let i: usize = commit.trim_start_matches('c').parse().unwrap_or(0);
        let fails = i >= self.first_bad && self.next() < self.rate;
        Ok(Tested {
            outcome: Some(if fails { Outcome::Oom } else { Outcome::Pass }),
            mark: if fails { Mark::Bad } else { Mark::Good },
            ..Tested::of(commit, RunKind::Full)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up history: what each commit does, and every commit asked about.
    struct History {
        /// `(commit, what a run of it gives)`; `None`: it cannot be tested.
        commits: Vec<(String, Option<Outcome>)>,
        asked: Vec<String>,
        /// Stop (Ctrl-C) at this test, counting from 1.
        stop_at: Option<usize>,
    }

    impl History {
        /// `good` passes; commits `c1..=cN` pass before `first_bad` and run out of memory
        /// from it on; `skips` cannot be tested.
        fn new(n: usize, first_bad: usize, skips: &[usize]) -> History {
            let mut commits = vec![("good".to_string(), Some(Outcome::Pass))];
            for i in 1..=n {
                let outcome = if skips.contains(&i) {
                    None
                } else if i >= first_bad {
                    Some(Outcome::Oom)
                } else {
                    Some(Outcome::Pass)
                };
                commits.push((format!("c{i}"), outcome));
            }
            History {
                commits,
                asked: Vec::new(),
                stop_at: None,
            }
        }

        /// The first-parent line after the good end.
        fn line(&self) -> Vec<String> {
            self.commits[1..].iter().map(|(c, _)| c.clone()).collect()
        }

        fn run(&mut self, good: &str, regress: Option<Outcome>) -> Bisection {
            let line = self.line();
            let bad = line.last().unwrap().clone();
            let hunt = Hunt {
                good,
                bad: &bad,
                commits: &line,
                regress,
            };
            bisect(self, hunt).unwrap()
        }
    }

    impl CommitTester for History {
        fn test(&mut self, commit: &str, regress: Option<Outcome>) -> Result<Tested, Stop> {
            self.asked.push(commit.to_string());
            if self.stop_at == Some(self.asked.len()) {
                return Err(Stop::Incomplete);
            }
            let outcome = self.commits.iter().find(|(c, _)| c == commit).unwrap().1;
            let mark = match outcome {
                None => Mark::Skip,
                Some(Outcome::Pass) => Mark::Good,
                Some(o) if regress.is_none_or(|r| r == o) => Mark::Bad,
                Some(_) => Mark::Good,
            };
            Ok(Tested {
                outcome,
                mark,
                ..Tested::of(commit, RunKind::Full)
            })
        }
    }

    #[test]
    fn the_first_bad_commit_in_at_most_log2_n_plus_2_tests() {
        for n in [1usize, 2, 3, 7, 10, 16, 33, 100] {
            for first_bad in 1..=n {
                let mut h = History::new(n, first_bad, &[]);
                let b = h.run("good", None);
                assert_eq!(b.answer, Answer::FirstBadFound);
                assert_eq!(
                    b.first_bad.as_deref(),
                    Some(format!("c{first_bad}").as_str())
                );
                let last_good = if first_bad == 1 {
                    "good".to_string()
                } else {
                    format!("c{}", first_bad - 1)
                };
                assert_eq!(b.last_good, Some(last_good));
                assert_eq!(b.regress, Some(Outcome::Oom), "the bad end's own failure");
                let bound = (n as f64).log2().ceil() as usize + 2;
                assert!(
                    h.asked.len() <= bound,
                    "n={n} first bad {first_bad}: {:?}",
                    h.asked
                );
                // Both ends first, the bad one first of all.
                assert_eq!(h.asked[0], format!("c{n}"));
                assert_eq!(h.asked[1], "good");
            }
        }
    }

    #[test]
    fn skipped_commits_are_never_called_bad() {
        // c5 cannot be tested; the regression is at c6: the answer is c6, found around c5.
        let mut h = History::new(10, 6, &[5]);
        let b = h.run("good", None);
        assert_eq!(b.first_bad.as_deref(), Some("c6"));
        assert_eq!(b.last_good.as_deref(), Some("c4"));
        assert_eq!(
            b.between,
            ["c5"],
            "c5 could be it: it is listed, not blamed"
        );
        // Skipped commits away from the boundary leave no doubt.
        let mut h = History::new(10, 8, &[2, 3]);
        let b = h.run("good", None);
        assert_eq!(b.first_bad.as_deref(), Some("c8"));
        assert!(b.between.is_empty(), "{b:?}");
    }

    #[test]
    fn ends_that_do_not_behave() {
        // The bad end passes.
        let mut h = History::new(5, 99, &[]);
        assert_eq!(h.run("good", None).answer, Answer::BadPasses);
        assert_eq!(h.asked, ["c5"], "nothing else is run");
        // The good end fails too.
        let mut h = History::new(5, 1, &[]);
        h.commits[0].1 = Some(Outcome::Oom);
        assert_eq!(h.run("good", None).answer, Answer::GoodFails);
        // An end that cannot be tested.
        let mut h = History::new(5, 3, &[5]);
        assert_eq!(h.run("good", None).answer, Answer::Untestable);
        // --regress: a different failure at the bad end is not the one asked about.
        let mut h = History::new(5, 3, &[]);
        assert_eq!(h.run("good", Some(Outcome::Hang)).answer, Answer::BadPasses);
    }

    /// A history whose shortened runs fail from `quick_first_bad` on, its full runs from
    /// `first_bad` on.
    struct Shortened {
        inner: History,
        quick_first_bad: usize,
        asked: Vec<(String, RunKind)>,
    }

    impl CommitTester for Shortened {
        fn test(&mut self, commit: &str, regress: Option<Outcome>) -> Result<Tested, Stop> {
            self.asked.push((commit.to_string(), RunKind::Full));
            self.inner.test(commit, regress)
        }
        fn test_quick(&mut self, commit: &str, _: Option<Outcome>) -> Result<Tested, Stop> {
            self.asked.push((commit.to_string(), RunKind::Quick));
            let i: usize = commit.trim_start_matches('c').parse().unwrap_or(0);
            let bad = commit != "good" && i >= self.quick_first_bad;
            Ok(Tested {
                outcome: Some(if bad { Outcome::Oom } else { Outcome::Pass }),
                mark: if bad { Mark::Bad } else { Mark::Good },
                ..Tested::of(commit, RunKind::Quick)
            })
        }
        fn shortenable(&mut self) -> Result<(), Option<String>> {
            Ok(())
        }
    }

    #[test]
    fn a_boundary_found_shortened_is_confirmed_in_full() {
        let mut h = Shortened {
            inner: History::new(16, 9, &[]),
            quick_first_bad: 9,
            asked: Vec::new(),
        };
        let line = h.inner.line();
        let b = bisect(&mut h, hunt("c16", &line)).unwrap();
        assert_eq!(b.first_bad.as_deref(), Some("c9"));
        assert!(
            matches!(b.quick, QuickState::Reproduces { .. }),
            "{:?}",
            b.quick
        );
        let full: Vec<&str> = h
            .asked
            .iter()
            .filter(|(_, k)| *k == RunKind::Full)
            .map(|(c, _)| c.as_str())
            .collect();
        assert_eq!(full, ["c16", "good", "c9", "c8"]);
    }

    #[test]
    fn a_full_run_that_disagrees_sends_the_search_back_to_full_runs() {
        // Shortened runs fail from c3 on (say, a node that errors with few steps), the
        // workflow from c6: the shortened boundary c3 passes in full, and the search goes on
        // in full.
        let mut h = Shortened {
            inner: History::new(10, 6, &[]),
            quick_first_bad: 3,
            asked: Vec::new(),
        };
        let line = h.inner.line();
        let b = bisect(&mut h, hunt("c10", &line)).unwrap();
        assert_eq!(b.first_bad.as_deref(), Some("c6"));
        assert_eq!(b.last_good.as_deref(), Some("c5"));
        let QuickState::SetAside(why) = &b.quick else {
            panic!("{:?}", b.quick)
        };
        assert!(
            why.starts_with("commit c3 failed shortened but its full run"),
            "{why}"
        );
    }

    #[test]
    fn a_stop_is_incomplete_and_a_machine_failure_is_an_error() {
        let mut h = History::new(10, 4, &[]);
        h.stop_at = Some(3);
        let b = h.run("good", None);
        assert_eq!(b.answer, Answer::Incomplete);
        assert_eq!(b.first_bad, None);

        struct Full;
        impl CommitTester for Full {
            fn test(&mut self, _: &str, _: Option<Outcome>) -> Result<Tested, Stop> {
                Err(Stop::Failed(Error::environment("cannot write the journal")))
            }
        }
        let err = bisect(&mut Full, hunt("c1", &["c1".to_string()])).unwrap_err();
        assert_eq!(err.message, "cannot write the journal");
    }
}
