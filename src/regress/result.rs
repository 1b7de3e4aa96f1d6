//! A regress session's answer: the first bad commit (or why there is none), the pins that
//! changed there, the statement in words and links, and how sure it is.

use super::git::{CommitInfo, Repo};
use super::search::{self, Answer};
use super::tester::Session;
use super::{Mark, Skipped, Tested, git, tree};
use crate::error::Result;
use crate::outcome::Outcome;
use crate::run;
use crate::run::record::RunKind;
use crate::session::failure::FailureRate;
use crate::session::quick::{QuickState, QuickSummary, RunSummary, summarize_quick};
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::PathBuf;

/// The answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RegressResult {
    pub verdict: Verdict,
    pub first_bad: Option<CommitInfo>,
    pub last_good: Option<CommitInfo>,
    /// When skipped commits sit next to the boundary: every commit the first bad one could be.
    pub could_be: Vec<CommitInfo>,
    pub runs_total: u32,
    /// The commits that were run and marked good or bad (skipped ones are in `skipped`).
    pub tested: Vec<Tested>,
    pub skipped: Vec<Skipped>,
    /// Commits between the ends on first-parent history (the bad end included).
    pub commits: usize,
    pub session_dir: PathBuf,
    /// The commit's page, when the checkout's origin is ComfyUI's repository.
    pub url: Option<String>,
    /// The command that shows the regression again in two runs.
    pub reproduce: Option<String>,
    /// For a session stopped early.
    pub continue_with: Option<String>,
    /// The checkout and the Python, and where each came from.
    #[serde(default)]
    pub defaults: crate::locate::Defaults,
    /// Shortened runs: whether the search used them, which runs were full, the time.
    #[serde(default)]
    pub quick: QuickSummary,
    /// The exact pins that differ between the last good and the first bad commit.
    #[serde(default)]
    pub pin_changes: Vec<PinChange>,
    /// When the first bad commit changes nothing but pins: the package the regression is in.
    #[serde(default)]
    pub culprit_package: Option<Culprit>,
    /// The environments this session ran commits in (their pins, folder, and whether this
    /// session installed them or found them in the cache).
    #[serde(default)]
    pub environments: Vec<EnvironmentUse>,
    /// `--then-bisect`: the bisect of the flags on the first bad commit (its session folder
    /// is `bisect/` in this one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then_bisect: Option<Box<crate::bisect::result::BisectResult>>,
}

/// A pinned package whose version differs between two commits (`None`: not pinned there).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinChange {
    pub name: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

impl std::fmt::Display for PinChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let side = |v: &Option<String>| v.clone().unwrap_or_else(|| "unpinned".into());
        write!(
            f,
            "{} {} -> {}",
            self.name,
            side(&self.from),
            side(&self.to)
        )
    }
}

/// The package a pin-only commit moved to, and where its code lives.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Culprit {
    pub name: String,
    pub version: String,
    pub repository: Option<String>,
}

/// An environment a session used.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EnvironmentUse {
    pub packages: Vec<(String, String)>,
    pub site: PathBuf,
    /// Installed by this session (false: found in the cache).
    pub installed: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    /// `first_bad_found`, `bad_passes`, `good_fails`, `untestable`, `incomplete`.
    pub kind: Answer,
    /// What counted as bad.
    pub regress: Option<Outcome>,
    pub statement: String,
    /// How sure the answer is given the runs that happened: the posterior of the first bad
    /// commit with `--repeat` 2 or more, 1.0 when every run agreed; null without an answer.
    #[serde(default)]
    pub confidence: Option<f64>,
    /// With `--repeat` 2 or more: how often bad commits failed (90% interval).
    #[serde(default)]
    pub failure_rate: Option<FailureRate>,
}

/// The result of a search: the commits it names, in words and links.
pub(super) fn finish(
    s: &mut Session<'_>,
    commits: &[String],
    found: search::Bisection,
) -> Result<RegressResult> {
    let search::Bisection {
        answer,
        regress: kind,
        first_bad,
        last_good,
        between,
        confidence,
        failure_rate,
        best_so_far,
        quick,
        confirmed_by,
    } = found;
    let found_flaky = (confidence, failure_rate, best_so_far);
    let info = |c: &Option<String>| c.as_ref().and_then(|c| s.repo.info(c).ok());
    let first_bad = info(&first_bad);
    let last_good = info(&last_good);
    let mut could_be: Vec<CommitInfo> =
        between.iter().filter_map(|c| s.repo.info(c).ok()).collect();
    if !could_be.is_empty()
        && let Some(fb) = &first_bad
    {
        could_be.push(fb.clone());
    }
    let url = s.repo.github();
    let what = kind.map(|o| o.describe()).unwrap_or("the failure");
    let statement = plain_statement(s, answer, &first_bad, &last_good, &could_be, what);
    let spec = &s.spec;
    let origin = crate::locate::Origin::current();
    let reproduce = match (&first_bad, &last_good) {
        (Some(fb), Some(lg)) => {
            let mut args: Vec<String> = vec![
                "regress".into(),
                "--comfyui".into(),
                spec.comfyui.display().to_string(),
                "--workflow".into(),
                spec.workflow.display().to_string(),
                "--good".into(),
                lg.short().to_string(),
                "--bad".into(),
                fb.short().to_string(),
            ];
            if !spec.flags.is_empty() {
                args.push("--".into());
                args.extend(spec.flags.iter().cloned());
            }
            Some(origin.command_line(&args))
        }
        _ => None,
    };
    let (pin_changes, culprit_package) = match (&last_good, &first_bad) {
        (Some(lg), Some(fb)) => pins_between(&s.repo, &lg.commit, &fb.commit),
        _ => (Vec::new(), None),
    };
    // Which commit is first bad is not known when some could not be tested.
    let culprit_package = culprit_package.filter(|_| could_be.is_empty());
    let statement = with_pins(statement, &pin_changes, culprit_package.as_ref());
    let mut statement = how_sure(statement, answer, &found_flaky, s.runs);
    let quick = quick_summary(s, &quick, &confirmed_by);
    if !quick.statement.is_empty() && answer == Answer::FirstBadFound {
        statement.push(' ');
        statement.push_str(&quick.statement);
    }
    let continue_with = (answer == Answer::Incomplete).then(|| continue_line(s, origin));
    Ok(RegressResult {
        defaults: spec.defaults.clone(),
        verdict: Verdict {
            kind: answer,
            regress: kind,
            statement,
            confidence: confidence.filter(|_| answer == Answer::FirstBadFound),
            failure_rate: failure_rate.map(|(low, high)| FailureRate { low, high }),
        },
        url: url
            .zip(first_bad.as_ref())
            .map(|(base, fb)| format!("{base}/commit/{}", fb.commit)),
        first_bad,
        last_good,
        could_be,
        runs_total: s.runs,
        tested: s
            .journal
            .iter()
            .filter(|t| t.mark != Mark::Skip)
            .cloned()
            .collect(),
        skipped: s
            .journal
            .iter()
            .filter(|t| t.mark == Mark::Skip)
            .map(|t| Skipped {
                commit: t.commit.clone(),
                reason: t.reason.clone().unwrap_or_default(),
            })
            .collect(),
        commits: commits.len(),
        session_dir: s.dir.clone(),
        reproduce,
        continue_with,
        quick,
        pin_changes,
        culprit_package,
        environments: s.envs.values().filter_map(|e| e.clone().ok()).collect(),
        then_bisect: None,
    })
}

/// The statement, with the pins that changed or the package the regression is in.
fn with_pins(statement: String, changes: &[PinChange], culprit: Option<&Culprit>) -> String {
    match culprit {
        Some(c) => format!(
            "{statement} It changes only the pin of {}: the regression is in {} {}{}.",
            c.name,
            c.name,
            c.version,
            c.repository
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        None if !changes.is_empty() => format!(
            "{statement} Pins changed between them: {}.",
            changes
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => statement,
    }
}

/// Where the code of a pinned package lives.
fn repository_of(package: &str) -> Option<&'static str> {
    Some(match package {
        "comfy-aimdo" => "https://github.com/Comfy-Org/comfy-aimdo",
        "comfy-kitchen" => "https://github.com/Comfy-Org/comfy-kitchen",
        "comfyui-frontend-package" => "https://github.com/Comfy-Org/ComfyUI_frontend",
        "comfyui-workflow-templates" => "https://github.com/Comfy-Org/workflow_templates",
        "comfyui-embedded-docs" => "https://github.com/Comfy-Org/embedded-docs",
        _ => return None,
    })
}

/// The exact pins of `requirements.txt` that differ from `a` to `b`.
fn pin_changes(repo: &Repo, a: &str, b: &str) -> Vec<PinChange> {
    let read = |c: &str| -> std::collections::BTreeMap<String, String> {
        repo.show(c, "requirements.txt")
            .map(|r| tree::pins(&r).into_iter().collect())
            .unwrap_or_default()
    };
    let (before, after) = (read(a), read(b));
    let names: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    names
        .into_iter()
        .filter(|n| before.get(*n) != after.get(*n))
        .map(|n| PinChange {
            name: n.clone(),
            from: before.get(n).cloned(),
            to: after.get(n).cloned(),
        })
        .collect()
}

/// The pins that changed from the last good to the first bad commit, and the package the
/// regression is in when the first bad commit changes only `requirements.txt` and in it the
/// pin of one package.
fn pins_between(
    repo: &Repo,
    last_good: &str,
    first_bad: &str,
) -> (Vec<PinChange>, Option<Culprit>) {
    let changes = pin_changes(repo, last_good, first_bad);
    if changes.is_empty() {
        return (changes, None);
    }
    let parent = format!("{first_bad}^");
    let files = repo
        .git(&["diff", "--name-only", &parent, first_bad])
        .unwrap_or_default();
    let own = pin_changes(repo, &parent, first_bad);
    let culprit = match (files.trim(), own.as_slice()) {
        ("requirements.txt", [one]) => one.to.as_ref().map(|v| Culprit {
            name: one.name.clone(),
            version: v.clone(),
            repository: repository_of(&one.name).map(str::to_string),
        }),
        _ => None,
    };
    (changes, culprit)
}

/// The command that continues a session stopped early (with a larger budget when the
/// budget stopped it).
pub(super) fn continue_line(s: &Session<'_>, origin: &crate::locate::Origin) -> String {
    let spec = &s.spec;
    format!(
        "{}{}",
        origin.command_line(&[
            "regress".into(),
            "--resume".into(),
            s.dir.display().to_string()
        ]),
        if s.runs >= spec.max_runs {
            format!(" --max-runs {}", (spec.max_runs * 2).max(s.runs + 16))
        } else {
            String::new()
        }
    )
}

/// What shortened runs did for a regress session, from its journal and run records.
fn quick_summary(s: &Session<'_>, state: &QuickState, confirmed_by: &[String]) -> QuickSummary {
    let mut runs: Vec<RunSummary> = Vec::new();
    let mut steps = None;
    for t in &s.journal {
        for dir in &t.runs {
            let Ok(record) = run::RunRecord::load(dir) else {
                continue;
            };
            if steps.is_none() && t.kind == RunKind::Quick {
                steps = record.quick.as_ref().map(|q| q.steps).filter(|s| *s > 0);
            }
            runs.push(RunSummary {
                n: dir
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0),
                kind: t.kind,
                outcome: record.outcome,
                duration_ms: record.duration_ms,
            });
        }
    }
    let confirmed = confirmed_by.iter().filter_map(|n| n.parse().ok()).max();
    summarize_quick(state, &runs, s.spec.quick, steps, confirmed, None)
}

/// What the answer says, before the pins, the confidence and the shortened runs are added.
fn plain_statement(
    s: &Session<'_>,
    answer: Answer,
    first_bad: &Option<CommitInfo>,
    last_good: &Option<CommitInfo>,
    could_be: &[CommitInfo],
    what: &str,
) -> String {
    let short = |c: &CommitInfo| {
        format!(
            "{} \"{}\" ({}, {})",
            c.short(),
            c.subject,
            c.version.as_deref().unwrap_or("version unknown"),
            c.date
        )
    };
    let spec = &s.spec;
    match (answer, first_bad) {
        (Answer::FirstBadFound, Some(fb)) if could_be.is_empty() => format!(
            "The first bad commit is {}: the workflow fails there ({what}) and passed at {}.",
            short(fb),
            last_good
                .as_ref()
                .map(|c| c.short().to_string())
                .unwrap_or_default()
        ),
        (Answer::FirstBadFound, Some(_)) => format!(
            "The first bad commit is one of {} commits that could not all be tested: {}.",
            could_be.len(),
            could_be
                .iter()
                .map(|c| c.short().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        (Answer::BadPasses, _) => format!(
            "The bad end {} passed here: the failure did not reproduce, so there is nothing to bisect. Check the flags and workflow, or try --repeat.",
            git::abbrev(&spec.bad, 7)
        ),
        (Answer::GoodFails, _) => format!(
            "The good end {} fails too ({what}): the regression is older. Give an older --good.",
            git::abbrev(&spec.good, 7)
        ),
        (Answer::Untestable, _) => {
            let reason = s
                .journal
                .iter()
                .rev()
                .find_map(|t| t.reason.clone())
                .unwrap_or_else(|| "it could not be tested".into());
            format!("An end of the range could not be tested: {reason}.")
        }
        (Answer::Incomplete | Answer::FirstBadFound, _) => {
            "The session stopped before an answer; every finished run is kept.".into()
        }
    }
}

/// The statement with what a flaky search says of how sure it is, from the runs that
/// happened (`flaky`: its confidence, failure rate and best answer so far).
fn how_sure(
    statement: String,
    answer: Answer,
    flaky: &(Option<f64>, Option<(f64, f64)>, Option<String>),
    runs: u32,
) -> String {
    match (flaky, answer) {
        ((Some(p), Some((lo, hi)), _), Answer::FirstBadFound) => format!(
            "{}: {} given {runs} runs; bad commits failed at a rate of {lo:.2}-{hi:.2}.",
            statement.trim_end_matches('.'),
            crate::bayes::percent(*p),
        ),
        ((_, _, Some(best)), Answer::Incomplete) => format!("{statement} Best so far: {best}."),
        _ => statement,
    }
}

impl crate::output::Answer for RegressResult {
    /// Prints the tested commits and the answer.
    fn render(&self, style: &crate::output::Style, out: &mut dyn Write) -> io::Result<()> {
        let mut table = crate::output::table();
        table.set_header(vec!["commit", "version", "outcome", "mark"]);
        for t in &self.tested {
            table.add_row(vec![
                git::abbrev(&t.commit, 7).to_string(),
                t.version.clone().unwrap_or_else(|| "?".into()),
                t.outcome
                    .map(|o| o.to_string())
                    .unwrap_or_else(|| "-".into()),
                format!("{:?}", t.mark).to_lowercase()
                    + &t.environment
                        .as_ref()
                        .map(|e| {
                            let pins: Vec<String> =
                                e.packages.iter().map(|(n, v)| format!("{n} {v}")).collect();
                            format!(" ({} installed for it)", pins.join(", "))
                        })
                        .unwrap_or_default(),
            ]);
        }
        for sk in &self.skipped {
            table.add_row(vec![
                git::abbrev(&sk.commit, 7).to_string(),
                String::new(),
                "skipped".into(),
                sk.reason.clone(),
            ]);
        }
        if !self.tested.is_empty() || !self.skipped.is_empty() {
            writeln!(out, "{table}")?;
            writeln!(out)?;
        }
        let head = match self.verdict.kind {
            Answer::FirstBadFound => style.good("FIRST BAD COMMIT"),
            Answer::Incomplete => style.warn("STOPPED"),
            other => style.bad(&other.as_str().replace('_', " ").to_uppercase()),
        };
        writeln!(out, "{head}")?;
        writeln!(out, "  {}", self.verdict.statement)?;
        if let Some(u) = &self.url {
            writeln!(out, "  {u}")?;
        }
        if let Some(line) = &self.reproduce {
            writeln!(out, "  reproduce with: {line}")?;
        }
        if let Some(line) = &self.continue_with {
            writeln!(out, "  continue with: {line}")?;
        }
        writeln!(
            out,
            "  {} over {} commits; session folder {}",
            crate::text::plural(self.runs_total as usize, "run"),
            self.commits,
            self.session_dir.display()
        )?;
        if let Some(b) = &self.then_bisect {
            writeln!(out)?;
            writeln!(out, "The flags on the first bad commit:")?;
            writeln!(out)?;
            crate::output::Answer::render(b.as_ref(), style, out)?;
        }
        Ok(())
    }
}
