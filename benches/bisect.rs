//! Runs to a verdict: adaptive, each and matrix on scripted cases, next to the
//! information-theoretic bound. `cargo bench --bench bisect` prints the table recorded in
//! BENCHMARKS.md.

use std::collections::BTreeSet;
use vrambisect::bisect::scripted::{SWITCHES, Scripted};
use vrambisect::bisect::search::{RunKind, Search, Settings, Strategy, VerdictKind};
use vrambisect::bisect::space::Space;
use vrambisect::flags::decide::{Context, Platform};
use vrambisect::flags::profile;
use vrambisect::regress::search::FlakyHistory;
use vrambisect::regress::{Hunt, bisect_flaky};

struct Case {
    name: String,
    toggles: Vec<&'static str>,
    /// Flags that must all be present to fix it (the answer); only their number matters,
    /// the bench puts them at every position.
    answer: Vec<&'static str>,
    hypotheses: f64,
}

fn space(toggles: &[&str]) -> Space {
    let p = profile::builtin(None);
    let t: Vec<String> = toggles.iter().map(|s| s.to_string()).collect();
    Space::new(
        &p.flags,
        Some(p.version),
        Context::new(Platform::Linux),
        &[],
        &t,
    )
}

/// Mean runs and share correct over every position of the answer and `seeds` seeds.
fn measure(
    case: &Case,
    strategy: Strategy,
    p_fail: f64,
    repeat: u32,
    seeds: u64,
) -> (f64, u32, f64) {
    let m = measure_all(case, strategy, p_fail, repeat, seeds, None);
    (m.mean_runs, m.worst, m.correct)
}

/// What a set of seeded searches came to.
struct Measured {
    mean_runs: f64,
    worst: u32,
    correct: f64,
    /// Share that reached a verdict (not `incomplete`).
    decided: f64,
    /// Mean stated confidence of the verdicts.
    confidence: f64,
}

fn measure_all(
    case: &Case,
    strategy: Strategy,
    p_fail: f64,
    repeat: u32,
    seeds: u64,
    max_runs: Option<u32>,
) -> Measured {
    let (mut runs, mut worst, mut correct, mut n) = (0u64, 0u32, 0u64, 0u64);
    let (mut decided, mut confidence) = (0u64, 0.0f64);
    let placements = placements(case.toggles.len(), case.answer.len());
    for seed in 0..seeds {
        // Deterministic: every placement of the answer among the toggles in turn; flaky:
        // placements cycle with the seeds.
        let at = &placements[seed as usize % placements.len()];
        let sp = space(&case.toggles);
        let answer: BTreeSet<String> = at.iter().map(|i| case.toggles[*i].to_string()).collect();
        let a2 = answer.clone();
        let mut oracle = Scripted::new(
            Box::new(move |s| a2.iter().all(|f| s.contains(f))),
            p_fail,
            seed + 1,
        );
        let mut search = Search::new(
            &sp,
            &mut oracle,
            Settings {
                strategy,
                repeat,
                max_runs: max_runs.unwrap_or(4096),
                budget_given: max_runs.is_some() || p_fail >= 1.0,
                // The search for the first fix: what these rows have always measured.
                first_fix: true,
                ..Settings::default()
            },
            Vec::new(),
        );
        let found = search.run().expect("the scripted oracle cannot fail");
        let got: BTreeSet<String> = found.fixing_flags.iter().cloned().collect();
        if found.kind == VerdictKind::FixedBy && got == answer {
            correct += 1;
        }
        if found.kind != VerdictKind::Incomplete {
            decided += 1;
            confidence += found.confidence.unwrap_or(0.0);
        }
        runs += search.runs as u64;
        worst = worst.max(search.runs);
        n += 1;
    }
    Measured {
        mean_runs: runs as f64 / n as f64,
        worst,
        correct: correct as f64 / n as f64,
        decided: decided as f64 / n as f64,
        confidence: confidence / decided.max(1) as f64,
    }
}

/// Every set of `size` positions among `k`, in order.
fn placements(k: usize, size: usize) -> Vec<Vec<usize>> {
    (0u32..(1 << k))
        .filter(|m| m.count_ones() as usize == size)
        .map(|m| (0..k).filter(|i| m & (1 << i) != 0).collect())
        .collect()
}

fn main() {
    let mut cases = Vec::new();
    for k in [2usize, 4, 8, 12] {
        cases.push(Case {
            name: format!("1 culprit among {k}"),
            toggles: SWITCHES[..k].to_vec(),
            answer: vec![SWITCHES[0]],
            hypotheses: k as f64,
        });
    }
    cases.push(Case {
        name: "pair among 8".into(),
        toggles: SWITCHES[..8].to_vec(),
        answer: vec![SWITCHES[0], SWITCHES[5]],
        hypotheses: 8.0 * 7.0 / 2.0,
    });
    cases.push(Case {
        name: "triple among 8 (#13730 hang)".into(),
        toggles: SWITCHES[..8].to_vec(),
        answer: vec![SWITCHES[0], SWITCHES[1], SWITCHES[2]],
        hypotheses: 8.0 * 7.0 * 6.0 / 6.0,
    });
    println!(
        "Deterministic oracle (failing configurations always fail), every position of the answer:"
    );
    println!();
    println!(
        "| case | bound ⌈log2 H⌉ (+2) | adaptive runs mean / worst | adaptive correct | each runs / correct | matrix runs / correct |"
    );
    println!("|---|---|---|---|---|---|");
    for case in &cases {
        let seeds = placements(case.toggles.len(), case.answer.len()).len() as u64;
        let (a_mean, a_worst, a_ok) = measure(case, Strategy::Adaptive, 1.0, 1, seeds);
        let (e_mean, _, e_ok) = measure(case, Strategy::Each, 1.0, 1, seeds);
        let matrix = if case.toggles.len() <= 8 {
            let (m_mean, _, m_ok) = measure(case, Strategy::Matrix, 1.0, 1, seeds.min(4));
            format!("{m_mean:.1} / {:.0}%", m_ok * 100.0)
        } else {
            "2^k: not run".to_string()
        };
        let bound = case.hypotheses.log2().ceil();
        println!(
            "| {} | {} ({}) | {a_mean:.1} / {a_worst} | {:.0}% | {e_mean:.1} / {:.0}% | {matrix} |",
            case.name,
            bound,
            bound + 2.0,
            a_ok * 100.0,
            e_ok * 100.0
        );
    }
    println!();
    println!(
        "Flaky oracle (failing configurations fail with probability p), 400 seeds, the answer at every position in turn, the default budget:"
    );
    println!();
    println!(
        "| case | p | --repeat | correct | verdict reached | mean runs | worst | stated confidence |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let rows: [(usize, f64, u32); 9] = [
        (2, 0.9, 1),
        (2, 0.7, 1),
        (2, 0.7, 2),
        (2, 0.7, 3),
        (2, 0.5, 3),
        (2, 0.3, 3),
        (4, 0.7, 3),
        (4, 0.5, 3),
        (5, 0.7, 3),
    ];
    for (c, p, repeat) in rows {
        let case = &cases[c];
        let m = measure_all(case, Strategy::Adaptive, p, repeat, 400, None);
        println!(
            "| {} | {p} | {repeat} | {:.1}% | {:.1}% | {:.1} | {} | {:.1}% |",
            case.name,
            m.correct * 100.0,
            m.decided * 100.0,
            m.mean_runs,
            m.worst,
            m.confidence * 100.0
        );
    }
    println!();
    println!(
        "Flaky regression (commits from the first bad one fail with probability p), 64 commits, 400 seeds, the first bad commit at every position in turn:"
    );
    println!();
    println!("| p | correct | mean runs | worst | stated confidence |");
    println!("|---|---|---|---|---|");
    let line: Vec<String> = (1..=64).map(|i| format!("c{i}")).collect();
    for p in [0.9, 0.7, 0.5] {
        let (mut right, mut runs, mut worst, mut conf) = (0, 0usize, 0usize, 0.0);
        for seed in 0..400u64 {
            let first_bad = 1 + (seed as usize) % 64;
            let mut h = FlakyHistory::new(first_bad, p, seed + 1);
            let b = bisect_flaky(
                &mut h,
                Hunt {
                    good: "good",
                    bad: "c64",
                    commits: &line,
                    regress: None,
                },
                0.99,
            )
            .unwrap();
            if b.first_bad.as_deref() == Some(format!("c{first_bad}").as_str()) {
                right += 1;
            }
            conf += b.confidence.unwrap_or(0.0);
            runs += h.runs;
            worst = worst.max(h.runs);
        }
        println!(
            "| {p} | {:.1}% | {:.1} | {worst} | {:.1}% |",
            right as f64 / 4.0,
            runs as f64 / 400.0,
            conf / 4.0
        );
    }
    println!();
    println!(
        "Flaky failures (p = 0.7, --repeat 3) searched on shortened runs, failures after sampling (the shortened checks of the user's flags run), 1 culprit among 6, 400 seeds; ComfyUI time at the stand-in's time shape (a full pass 8 s, a shortened pass 2.6 s, a failure 2 s):"
    );
    println!();
    println!(
        "| correct | mean runs | of them full | shortened runs set aside | mean ComfyUI time |"
    );
    println!("|---|---|---|---|---|");
    let sp = space(&SWITCHES[..6]);
    let settings = Settings {
        repeat: 3,
        first_fix: true,
        ..Settings::default()
    };
    let (mut right, mut runs, mut full, mut set_aside, mut secs) = (0, 0, 0, 0, 0.0);
    for seed in 1..=400u64 {
        let fix = SWITCHES[(seed % 6) as usize].to_string();
        let want = fix.clone();
        let mut oracle = Scripted::new(
            Box::new(move |s: &BTreeSet<String>| s.contains(&fix)),
            0.7,
            seed,
        );
        oracle.quick = Some(true);
        let mut search = Search::new(&sp, &mut oracle, settings, Vec::new());
        let found = search.run().unwrap();
        if found.kind == VerdictKind::FixedBy && found.fixing_flags == [want.as_str()] {
            right += 1;
        }
        if format!("{:?}", found.quick).starts_with("SetAside") {
            set_aside += 1;
        }
        runs += search.runs;
        for t in search.tallies.iter().flat_map(|t| &t.trials) {
            let passed = t.outcome == vrambisect::outcome::Outcome::Pass;
            full += usize::from(t.kind == RunKind::Full);
            secs += match (t.kind, passed) {
                (RunKind::Full, true) => 8.0,
                (RunKind::Quick, true) => 2.6,
                _ => 2.0,
            };
        }
    }
    println!(
        "| {:.1}% | {:.1} | {:.1} | {set_aside} of 400 | {:.1} s |",
        right as f64 / 4.0,
        runs as f64 / 400.0,
        full as f64 / 400.0,
        secs / 400.0
    );
    shortened_checks();
}

/// Deterministic failures after sampling (an OOM at VAE decode): how often the shortened run
/// of the user's flags is still made (before 2026-12-06 every session made it), over every
/// position of one culprit, with the cheaper-fix search.
fn shortened_checks() {
    println!();
    println!(
        "Deterministic failures after sampling searched on shortened runs, every position of one culprit; ComfyUI time at the stand-in's time shape with the failure at VAE decode (a full run 8 s, a shortened pass 2.4 s, a shortened failure 2.6 s):"
    );
    println!();
    println!("| case | correct | mean runs | shortened runs of your flags | mean ComfyUI time |");
    println!("|---|---|---|---|---|");
    for k in [4, 6, 8] {
        let toggles = &SWITCHES[..k];
        let sp = space(toggles);
        let (mut right, mut runs, mut own, mut secs) = (0, 0, 0, 0.0);
        for fix in toggles {
            let want = fix.to_string();
            let mut oracle =
                Scripted::deterministic(Box::new(move |s: &BTreeSet<String>| s.contains(&want)));
            oracle.quick = Some(true);
            let mut search = Search::new(&sp, &mut oracle, Settings::default(), Vec::new());
            let found = search.run().unwrap();
            right += usize::from(found.fixing_flags == [*fix]);
            runs += search.runs;
            for t in &search.tallies {
                for r in &t.trials {
                    let quick = r.kind == RunKind::Quick;
                    own += usize::from(quick && t.config.choice.is_empty());
                    let passed = r.outcome == vrambisect::outcome::Outcome::Pass;
                    secs += match (quick, passed) {
                        (false, _) => 8.0,
                        (true, true) => 2.4,
                        (true, false) => 2.6,
                    };
                }
            }
        }
        let n = k as f64;
        println!(
            "| 1 culprit among {k} | {:.0}% | {:.2} | {own} of {k} | {:.1} s |",
            right as f64 * 100.0 / n,
            runs as f64 / n,
            secs / n
        );
    }
}
