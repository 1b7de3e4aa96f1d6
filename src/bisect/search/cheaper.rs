//! After the first fix: the search for a cheaper one. Users want to keep Dynamic VRAM (its off
//! switch is to be removed), and a fix that costs much of their speed is not the answer they
//! asked for. So the fixes that passed are ranked — one that keeps Dynamic VRAM on first,
//! then the faster per sampling step, the fewer flags, the smaller value, and a flag ComfyUI
//! warns will be removed after an equal one — and single changes that could beat the first
//! fix are tried, within a budget stated before the first run. Only runs that happened are
//! ranked; the recommendation is confirmed on the workflow as it is.

use super::*;
use crate::bisect::space::Dim;

/// Seconds per step within this fraction of each other are taken as equal: the spread of one
/// run against the next (the measured spread where a configuration ran more than once).
pub(super) const NOISE: f64 = 0.10;

/// What a fix that passed cost, from its passing runs of one kind (full runs where there are
/// any, shortened ones otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FixCost {
    /// The kind of runs the figures come from.
    pub kind: Option<RunKind>,
    /// Passing runs of that kind.
    pub runs: usize,
    pub seconds_per_step: Option<f64>,
    /// Seconds from the first prompt's submission to its first sampling step.
    pub load_s: Option<f64>,
    /// Seconds of the prompts.
    pub prompt_s: Option<f64>,
    pub peak_vram_bytes: Option<u64>,
    pub peak_ram_bytes: Option<u64>,
    /// How far apart the seconds per step of its runs of that kind were (max/min − 1),
    /// where it ran more than once.
    pub step_spread: Option<f64>,
    /// Mean seconds per step of its passing full runs and of its shortened ones, for
    /// comparing with a fix on runs of the same kind.
    #[serde(skip)]
    pub by_kind: [Option<f64>; 2],
}

/// A fix that passed: its flags, what it cost, and how it compares with the recommendation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fix {
    /// The change, as the verdict words it (`--vram-headroom 1.5`, `without --highvram`).
    pub fixing_flags: Vec<String>,
    /// ComfyUI's flags of the configuration.
    pub flags: Vec<String>,
    /// Whether Dynamic VRAM stayed on (the startup log's word, else the flag model's).
    pub keeps_dynamic_vram: Option<bool>,
    /// Whether a run of the workflow as it is passed with it.
    pub confirmed_full: bool,
    /// ComfyUI warned that one of its flags will be removed.
    pub flag_removal_warned: bool,
    pub cost: FixCost,
    /// Its seconds per step over the recommendation's, on runs of the same kind (null where
    /// the two have no runs of one kind to compare, and for the recommendation itself).
    pub step_ratio: Option<f64>,
    /// The comparison in words: `1.7x slower per step`, `as fast (within 10%)`.
    pub compared: Option<String>,
    /// The run that first passed with it (for ties: the earlier found).
    #[serde(skip)]
    pub first_pass: u32,
    #[serde(skip)]
    pub choice: Choice,
}

/// What the search for a cheaper fix did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cheaper {
    /// `--first-fix`: it stopped at the first fix.
    pub first_fix: bool,
    /// The most runs it could take (said before the first run).
    pub budget: u32,
    /// The runs it took.
    pub runs: u32,
    /// Why it stopped early, where it did (the run budget, a flaky failure).
    pub cut_short: Option<String>,
    /// Of its runs, those that confirmed the recommendation on the workflow as it is.
    #[serde(default)]
    pub confirmations: u32,
}

/// How the confirmation of the recommendation on the workflow as it is ended.
pub(super) enum Confirmed {
    /// This fix passed it (or a full pass of it was on record).
    Fix(Choice),
    /// A shortened pass failed in full: shortened runs are set aside and the search starts
    /// over on full runs.
    SearchAgain,
    /// Every fix that passed failed its confirmation (the flags of the first fix).
    Failed(Vec<String>),
}

impl<'a> Search<'a> {
    /// The most runs the search for a cheaper fix may take on this space: one run of each
    /// single change, the bisection of each searched value, and the recommendation's
    /// confirmation.
    pub fn cheaper_budget(space: &Space) -> u32 {
        space
            .dims
            .iter()
            .map(|d| 1 + (d.alternatives() as f64).log2().ceil() as u32)
            .sum::<u32>()
            + 1
    }

    /// From the first fix, the cheapest that passes: single changes that could beat it are
    /// tried, then the fixes that passed are ranked and the best is confirmed on the workflow
    /// as it is (the first fix too: only the recommendation needs a full run). Never worse
    /// than `first`.
    pub(super) fn cheaper(&mut self, first: Choice) -> Result<Confirmed, Stopped> {
        let start = self.runs;
        let budget = Self::cheaper_budget(self.space);
        let saved = self.budget;
        // One run is kept back for the recommendation's confirmation.
        self.budget = saved.saturating_sub(1).min(start + budget - 1);
        let mut cut_short = None;
        let result = self.try_single_changes(&first);
        match result {
            Ok(()) => {}
            Err(Stopped::Budget) => {
                cut_short = Some(if self.budget < start + budget - 1 {
                    format!("the run budget ({saved} runs) was spent")
                } else {
                    format!("its {budget} runs were spent")
                })
            }
            Err(e) => {
                self.budget = saved;
                return Err(e);
            }
        }
        // The best that passed, confirmed in full; one whose confirmation fails is dropped.
        self.budget = saved;
        let confirming = self.runs;
        let shortened = self.next_kind() == RunKind::Quick;
        let mut dropped: Vec<String> = Vec::new();
        let chosen = loop {
            let fixes = self.fixes(&dropped);
            let Some(best) = fixes.first() else {
                let config = self.space.config(&first).expect("a fix ran");
                break Confirmed::Failed(config.flags);
            };
            if best.confirmed_full {
                break Confirmed::Fix(best.choice.clone());
            }
            let config = self.space.config(&best.choice).expect("a fix ran");
            match self.run_kind(&config, RunKind::Full)? {
                Outcome::Pass => break Confirmed::Fix(best.choice.clone()),
                // The shortened runs misled the search: it goes on in full.
                _ if shortened && self.next_kind() == RunKind::Full => {
                    break Confirmed::SearchAgain;
                }
                _ => dropped.push(config.key.clone()),
            }
        };
        self.cheaper_done = Some(Cheaper {
            first_fix: false,
            budget,
            runs: self.runs - start,
            cut_short,
            confirmations: self.runs - confirming,
        });
        Ok(chosen)
    }

    /// Runs each single change that could beat the best fix so far: at its strongest, then,
    /// for a searched value that passed, the least value that passes.
    fn try_single_changes(&mut self, first: &Choice) -> Result<(), Stopped> {
        // Each change alone at its strongest, unless it is the first fix or known to fail
        // (alone, or with more changes that failed together).
        let mut order: Vec<(bool, usize)> = (0..self.space.dims.len())
            .filter(|d| !(first.len() == 1 && first[0].0 == *d))
            .filter_map(|d| {
                let strong = self.space.strong(&[d]);
                let c = self.space.config(&strong)?;
                let failed = self.settled(&self.evidence_of(&c)) == Some(Eval::Fail)
                    || self.failed_with_more(&strong).is_some();
                (!failed).then(|| (self.space.keeps_dynamic_vram(&c) != Some(true), d))
            })
            .collect();
        // Those that keep Dynamic VRAM on first.
        order.sort();
        // Two or more switches that keep it on are tried together first: if all of them at
        // once do not fix it, none alone does (the answer is taken to be monotone), and one
        // run says so. (Most switches fix nothing, so for two this is cheaper on average:
        // one run where both fail, three where they pass, against two.)
        let switches: Vec<usize> = order
            .iter()
            .filter(|(off, d)| {
                !*off
                    && self.space.dims[*d].alternatives() == 1
                    && !self
                        .space
                        .value_searches
                        .iter()
                        .any(|v| v.flag == self.space.dims[*d].flag())
            })
            .map(|(_, d)| *d)
            .collect();
        if switches.len() >= 2
            && let Some(config) = self.space.config(&self.space.strong(&switches))
            && self.could_beat(&config)
            && self.evaluate(&self.space.strong(&switches))? == Eval::Fail
        {
            order.retain(|(_, d)| !switches.contains(d));
        }
        for (_, d) in order {
            if self.flaky {
                return Ok(());
            }
            let choice = self.space.strong(&[d]);
            let Some(config) = self.space.config(&choice) else {
                continue;
            };
            if !self.could_beat(&config) {
                continue;
            }
            if self.evaluate(&choice)? == Eval::Pass && choice[0].1 > 0 {
                self.least_value(&choice, 0)?;
            }
        }
        Ok(())
    }

    /// A configuration that failed as hunted with every change of `choice` at least as
    /// strong, and more besides: `choice` fails too (the answer is taken to be monotone), so
    /// it need not run.
    /// (Not where the flag model says another change there may undo one of `choice`.)
    pub(super) fn failed_with_more(&self, choice: &[(usize, usize)]) -> Option<Config> {
        let target = self.target?;
        self.evidence()
            .into_iter()
            .find(|t| {
                t.count(target) > 0
                    && t.config.choice.len() > choice.len()
                    && !choice
                        .iter()
                        .any(|(d, _)| self.space.undone(*d, &t.config.choice))
                    && choice
                        .iter()
                        .all(|(d, a)| t.config.choice.iter().any(|(td, ta)| td == d && ta >= a))
            })
            .map(|t| t.config)
    }

    /// The least value of dimension `d` that passes, given that `known_pass` does: from where
    /// the evidence points (the room the baseline's failure says was missing: the allocation
    /// that failed plus other processes' VRAM, on top of what the baseline reserved already
    /// where the flag replaces that reserve), else from 1 GB (the headroom ComfyUI's
    /// maintainers suggest first). From there up in growing steps (0.25 GB, then 0.5, 1, 2,
    /// ...: the answer usually lies just above the evidence) until one passes, or, where the
    /// start passes, down in growing steps until one fails; then the gap is halved. More
    /// reserve never needs more memory, so the answer is taken to be monotone in the value;
    /// a run that says otherwise is named in the verdict.
    pub(super) fn least_value(&mut self, choice: &Choice, i: usize) -> Result<usize, Stopped> {
        let (d, known_pass) = choice[i];
        let at = |v: usize| {
            let mut c = choice.clone();
            c[i] = (d, v);
            c
        };
        let step = crate::bisect::space::VALUE_STEP_GB;
        let start = match self.evidence_start() {
            Some(gb) => {
                let kept = if self.space.dims[d].flag() == "--reserve-vram" {
                    self.space
                        .reserved_vram_gb(&self.space.baseline())
                        .unwrap_or(0.0)
                } else {
                    0.0
                };
                (((gb + kept) / step - 1e-9).ceil() as usize).max(1) - 1
            }
            None => (1.0 / step) as usize - 1,
        };
        let (mut lo, mut hi) = (None::<usize>, known_pass);
        let mut probe = start.min(known_pass);
        let mut stride = 1;
        while probe < hi {
            if self.evaluate(&at(probe))? == Eval::Pass {
                hi = probe;
                break;
            }
            lo = Some(probe);
            probe = (probe + stride).min(hi);
            stride *= 2;
        }
        // The start passed: down in growing steps (the step below first: where the evidence
        // was right, one run says so).
        if lo.is_none() && hi == start {
            let mut stride = 1;
            while hi > 0 {
                let probe = hi.saturating_sub(stride);
                if self.evaluate(&at(probe))? != Eval::Pass {
                    lo = Some(probe);
                    break;
                }
                hi = probe;
                stride *= 2;
            }
        }
        // The least passing value lies in (lo, hi].
        let mut low = lo.map(|l| l + 1).unwrap_or(0);
        while low < hi {
            let mid = (low + hi) / 2;
            if self.evaluate(&at(mid))? == Eval::Pass {
                hi = mid;
            } else {
                low = mid + 1;
            }
        }
        Ok(hi)
    }

    /// The room, in GB, the baseline's failure says was missing (its largest).
    pub(super) fn evidence_start(&self) -> Option<f64> {
        let base = self.space.baseline().key;
        self.tallies
            .iter()
            .filter(|t| t.config.key == base)
            .flat_map(|t| &t.trials)
            .filter_map(|r| r.cost.wanted_bytes)
            .max()
            .map(|b| b as f64 / (1u64 << 30) as f64)
    }

    /// Values of one flag that passed below one that failed: the answer is not monotone in
    /// the value, as the search assumes.
    pub(super) fn not_monotone(&self) -> Vec<String> {
        let Some(target) = self.target else {
            return Vec::new();
        };
        let evidence = self.evidence();
        let mut out = Vec::new();
        for (d, dim) in self.space.dims.iter().enumerate() {
            if !self
                .space
                .value_searches
                .iter()
                .any(|v| v.flag == dim.flag())
            {
                continue;
            }
            let single = |pass: bool| {
                evidence
                    .iter()
                    .filter(|t| t.config.choice.len() == 1 && t.config.choice[0].0 == d)
                    .filter(|t| {
                        if pass {
                            t.count(target) == 0 && t.passes() > 0
                        } else {
                            t.count(target) > 0
                        }
                    })
                    .map(|t| t.config.choice[0].1)
                    .collect::<Vec<_>>()
            };
            let (passed, failed) = (single(true), single(false));
            if let (Some(p), Some(f)) = (passed.iter().min(), failed.iter().max())
                && p < f
            {
                out.push(format!(
                    "{} passed but {} failed: the failure is not monotone in the value, so the least passing value may be lower",
                    dim.describe(*p),
                    dim.describe(*f)
                ));
            }
        }
        out
    }

    /// Whether a configuration could be recommended over the best fix so far: it keeps
    /// Dynamic VRAM on, or the best does not either.
    fn could_beat(&self, config: &Config) -> bool {
        let best_keeps = self
            .fixes(&[])
            .first()
            .and_then(|f| f.keeps_dynamic_vram)
            .unwrap_or(false);
        !best_keeps || self.space.keeps_dynamic_vram(config) == Some(true)
    }

    /// Every configuration that passed (enough times, never failing as hunted), best first;
    /// `dropped` are left out. (The verdict compares each with the recommendation.)
    pub(super) fn fixes(&self, dropped: &[String]) -> Vec<Fix> {
        if self.target.is_none() {
            return Vec::new();
        }
        let base_key = self.space.baseline().key;
        let evidence = self.evidence();
        let mut out: Vec<Fix> = evidence
            .iter()
            .filter(|t| {
                t.config.key != base_key
                    && !dropped.contains(&t.config.key)
                    && self.settled(t) == Some(Eval::Pass)
            })
            .map(|t| self.fix_of(t))
            .collect();
        // A fix that adds to another (more flags, or a larger value of the same flag) is no
        // alternative of its own.
        let dims = |f: &Fix| f.choice.iter().map(|(d, _)| *d).collect::<Vec<_>>();
        let covers = |g: &Fix, f: &Fix| {
            let (dg, df) = (dims(g), dims(f));
            if dg.len() < df.len() {
                dg.iter().all(|d| df.contains(d))
            } else {
                dg == df
                    && g.choice != f.choice
                    && g.choice.iter().zip(&f.choice).all(|(a, b)| a.1 <= b.1)
            }
        };
        let all = out.clone();
        out.retain(|f| !all.iter().any(|g| covers(g, f)));
        // The best first: a stable pick by `better`, then the rest by their sort key.
        let mut ranked = Vec::new();
        while !out.is_empty() {
            let mut best = 0;
            for i in 1..out.len() {
                if better(&out[i], &out[best]) {
                    best = i;
                }
            }
            ranked.push(out.remove(best));
        }
        ranked
    }

    fn fix_of(&self, t: &Tally) -> Fix {
        let passed: Vec<&Trial> = self
            .tallies
            .iter()
            .filter(|x| x.config.key == t.config.key)
            .flat_map(|x| &x.trials)
            .filter(|r| r.outcome == Outcome::Pass)
            .collect();
        let full = passed.iter().any(|r| r.kind == RunKind::Full);
        let kind = if full { RunKind::Full } else { RunKind::Quick };
        let of_kind: Vec<&&Trial> = passed.iter().filter(|r| r.kind == kind).collect();
        let mean = |f: &dyn Fn(&Trial) -> Option<f64>| {
            let v: Vec<f64> = of_kind.iter().filter_map(|r| f(r)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let steps: Vec<f64> = of_kind
            .iter()
            .filter_map(|r| r.cost.seconds_per_step)
            .collect();
        let spread = (steps.len() > 1).then(|| {
            let (lo, hi) = steps
                .iter()
                .fold((f64::MAX, 0f64), |(lo, hi), s| (lo.min(*s), hi.max(*s)));
            if lo > 0.0 { hi / lo - 1.0 } else { 0.0 }
        });
        let step_of = |k: RunKind| {
            let v: Vec<f64> = passed
                .iter()
                .filter(|r| r.kind == k)
                .filter_map(|r| r.cost.seconds_per_step)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let by_kind = [step_of(RunKind::Full), step_of(RunKind::Quick)];
        let observed = passed.iter().find_map(|r| r.cost.dynamic_vram);
        let found = self.verdict(VerdictKind::FixedBy, Some(&t.config.choice), None);
        Fix {
            fixing_flags: found
                .fixing_flags
                .iter()
                .cloned()
                .chain(found.culprit_flags.iter().map(|c| format!("without {c}")))
                .collect(),
            flags: t.config.flags.clone(),
            keeps_dynamic_vram: observed.or_else(|| self.space.keeps_dynamic_vram(&t.config)),
            confirmed_full: full,
            flag_removal_warned: passed.iter().any(|r| r.cost.flag_removal_warned),
            cost: FixCost {
                kind: Some(kind),
                runs: of_kind.len(),
                seconds_per_step: mean(&|r| r.cost.seconds_per_step),
                load_s: mean(&|r| r.cost.load_ms.map(|m| m as f64 / 1000.0)),
                prompt_s: mean(&|r| r.cost.prompt_ms.map(|m| m as f64 / 1000.0)),
                peak_vram_bytes: of_kind.iter().filter_map(|r| r.peak_vram_bytes).max(),
                peak_ram_bytes: of_kind.iter().filter_map(|r| r.peak_ram_bytes).max(),
                step_spread: spread,
                by_kind,
            },
            step_ratio: None,
            compared: None,
            first_pass: passed.iter().map(|r| r.n).min().unwrap_or(u32::MAX),
            choice: t.config.choice.clone(),
        }
    }

    /// The flags whose value was searched and that did not fix it even at the most tried.
    pub(super) fn not_helped(&self) -> Vec<String> {
        let Some(target) = self.target else {
            return Vec::new();
        };
        self.space
            .dims
            .iter()
            .enumerate()
            .filter_map(|(d, dim)| {
                let Dim::Add { flag, .. } = dim else {
                    return None;
                };
                let search = self.space.value_searches.iter().find(|v| &v.flag == flag)?;
                let strong = self.space.strong(&[d]);
                let config = self.space.config(&strong)?;
                let up_to = crate::bisect::space::format_gb(search.max_gb);
                if self.evidence_of(&config).count(target) > 0 {
                    return Some(format!("{flag} up to {up_to} GB did not help"));
                }
                // A value of it that passed alone did help.
                let passed_alone = self.evidence().iter().any(|t| {
                    t.config.choice.len() == 1
                        && t.config.choice[0].0 == d
                        && self.settled(t) == Some(Eval::Pass)
                });
                if passed_alone {
                    return None;
                }
                // Tried at its most only together with other changes, which failed too.
                let with = self.failed_with_more(&strong)?;
                let others: Vec<String> = self
                    .space
                    .describe(&with.choice)
                    .into_iter()
                    .filter(|c| !c.starts_with(flag.as_str()))
                    .collect();
                Some(format!(
                    "{flag} up to {up_to} GB did not help (tried with {})",
                    others.join(", ")
                ))
            })
            .collect()
    }
}

/// Seconds per step on runs of the same kind, a's over b's: full runs where both have them,
/// else shortened ones.
fn step_ratio(a: &Fix, b: &Fix) -> Option<(f64, RunKind)> {
    [RunKind::Full, RunKind::Quick]
        .into_iter()
        .enumerate()
        .find_map(|(i, kind)| {
            let (sa, sb) = (a.cost.by_kind[i]?, b.cost.by_kind[i]?);
            (sb > 0.0).then_some((sa / sb, kind))
        })
}

/// The noise two fixes' speeds are compared within: the larger measured spread, at least
/// [`NOISE`].
fn noise(a: &Fix, b: &Fix) -> f64 {
    NOISE
        .max(a.cost.step_spread.unwrap_or(0.0))
        .max(b.cost.step_spread.unwrap_or(0.0))
}

/// Whether `a` is the better recommendation than `b`.
fn better(a: &Fix, b: &Fix) -> bool {
    let keeps = |f: &Fix| f.keeps_dynamic_vram == Some(true);
    if keeps(a) != keeps(b) {
        return keeps(a);
    }
    if let Some((r, _)) = step_ratio(a, b) {
        let n = noise(a, b);
        if r < 1.0 / (1.0 + n) {
            return true;
        }
        if r > 1.0 + n {
            return false;
        }
    }
    if a.choice.len() != b.choice.len() {
        return a.choice.len() < b.choice.len();
    }
    let value = |f: &Fix| -> f64 {
        f.fixing_flags
            .iter()
            .filter_map(|s| s.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    };
    let (va, vb) = (value(a), value(b));
    if (va - vb).abs() > 1e-9 {
        return va < vb;
    }
    if a.flag_removal_warned != b.flag_removal_warned {
        return !a.flag_removal_warned;
    }
    a.first_pass < b.first_pass
}

/// How `f` compares with the recommendation `best`, as a ratio and in words.
pub(super) fn compare(f: &Fix, best: &Fix) -> (Option<f64>, Option<String>) {
    match step_ratio(f, best) {
        Some((r, kind)) => {
            let n = noise(f, best);
            let runs = if kind == RunKind::Quick {
                " (shortened runs)"
            } else {
                ""
            };
            let words = if r > 1.0 + n {
                format!("{r:.1}x slower per step{runs}")
            } else if r < 1.0 / (1.0 + n) {
                format!("{:.1}x faster per step{runs}", 1.0 / r)
            } else {
                format!("as fast per step (within {:.0}%){runs}", n * 100.0)
            };
            (Some(r), Some(words))
        }
        None => (
            None,
            Some("speed not compared (no runs of the same kind with sampling steps)".into()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::allocation_bytes;
    use super::{Fix, FixCost, RunKind, better};

    fn fix(flags: &[&str], keeps: bool, step: f64) -> Fix {
        Fix {
            fixing_flags: flags.iter().map(|f| f.to_string()).collect(),
            flags: Vec::new(),
            keeps_dynamic_vram: Some(keeps),
            confirmed_full: true,
            flag_removal_warned: false,
            cost: FixCost {
                kind: Some(RunKind::Full),
                seconds_per_step: Some(step),
                by_kind: [Some(step), None],
                ..FixCost::default()
            },
            step_ratio: None,
            compared: None,
            first_pass: 1,
            choice: (0..flags.len()).map(|d| (d, 0)).collect(),
        }
    }

    #[test]
    fn the_ranking_of_fixes() {
        // Dynamic VRAM kept on beats speed.
        assert!(better(
            &fix(&["--vram-headroom 2"], true, 1.5),
            &fix(&["--disable-dynamic-vram"], false, 1.0)
        ));
        // Then the faster, beyond the noise; within it, the fewer flags.
        assert!(better(
            &fix(&["a", "b"], true, 1.0),
            &fix(&["c"], true, 1.2)
        ));
        assert!(better(
            &fix(&["c"], true, 1.05),
            &fix(&["a", "b"], true, 1.0)
        ));
        // Then the smaller value.
        assert!(better(
            &fix(&["--vram-headroom 1"], true, 1.0),
            &fix(&["--reserve-vram 2"], true, 1.0)
        ));
        // A flag ComfyUI warns will be removed never before an equal one, even found first.
        let mut warned = fix(&["--x"], false, 1.0);
        warned.flag_removal_warned = true;
        let mut plain = fix(&["--y"], false, 1.0);
        plain.first_pass = 9;
        assert!(better(&plain, &warned));
        assert!(!better(&warned, &plain));
        // Speeds measured on different kinds of runs are not compared.
        let mut quick = fix(&["--z"], true, 5.0);
        quick.cost.by_kind = [None, Some(5.0)];
        quick.first_pass = 0;
        assert!(better(&quick, &fix(&["--w"], true, 1.0)));
    }

    #[test]
    fn the_allocation_an_oom_names() {
        for (line, bytes) in [
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 has a total capacity of 7.96 GiB",
                Some((1.14 * (1u64 << 30) as f64) as u64),
            ),
            ("Tried to allocate 20.00 MiB", Some(20 << 20)),
            (
                "VBAR allocation failed (Requested size was 4194304000 bytes.)",
                Some(4_194_304_000),
            ),
            ("Requested               : 32.00 GiB", Some(32 << 30)),
            ("Requested to load SDXL", None),
            ("Tried to allocate lots", None),
        ] {
            assert_eq!(allocation_bytes(line), bytes, "{line}");
        }
    }
}
