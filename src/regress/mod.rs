//! `vrambisect regress`: which ComfyUI commit broke a workflow.
//!
//! The user's checkout is only read ([`git`]): each commit is exported into the session folder
//! with the user's models, custom nodes and inputs linked in ([`tree`]) and run with the same
//! Python and flags by the run engine. Both ends are confirmed first (the bad end fails, the
//! good end passes), then first-parent history between them is bisected. A commit that cannot
//! be tested (it does not start, lacks one of the flags, pins other package versions, or fails
//! some other way) is skipped, never called bad. Every tested commit is journaled, so
//! `--resume` repeats nothing.

pub mod env;
mod flaky;
pub mod git;
pub use flaky::bisect as bisect_flaky;
pub use search::Hunt;
pub mod search;
mod then;
pub mod tree;

use crate::error::{Error, ErrorKind, Result, exit};
use crate::outcome::Outcome;
use crate::run::record::RunKind;
use crate::run::{self, Limits, RunOptions, Target};
use crate::session::SessionDir;
use crate::session::failure::{FailedAt, FailureRate};
use crate::session::journal::Journal;
use crate::session::quick::{QuickState, QuickSummary, RunSummary, summarize_quick};
use crate::signals::{self, Stop};
use crate::workflow::quick::Quick;
use git::{CommitInfo, Repo};
use search::Answer;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The session's settings, as its folder keeps them (`regress.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    pub comfyui: PathBuf,
    pub python: PathBuf,
    /// Where the checkout and the Python came from (sessions made before: not known).
    #[serde(default)]
    pub defaults: crate::locate::Defaults,
    pub workflow: PathBuf,
    pub launcher: Option<PathBuf>,
    pub flags: Vec<String>,
    pub env: Vec<(String, String)>,
    pub good: String,
    pub bad: String,
    /// What counts as bad; `None`: the bad end's own failure.
    pub regress: Option<Outcome>,
    pub repeat: u32,
    pub max_runs: u32,
    /// `--confidence`: with `--repeat` 2 or more, the posterior a commit needs to be called
    /// first bad.
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    /// Kept as `iterations`, `timeout_ms`, `stall_timeout_ms` and `startup_timeout_ms`.
    #[serde(flatten)]
    pub limits: Limits,
    /// `--quick` (sessions made before it existed: off).
    #[serde(default = "quick_off")]
    pub quick: Quick,
    /// Whether a commit that pins other package versions gets an environment with them
    /// (sessions made before environments existed: no, they skipped such commits).
    #[serde(default)]
    pub install: bool,
    /// `--then-bisect`: bisect the flags on the first bad commit once it is known.
    #[serde(default)]
    pub then_bisect: bool,
}

fn quick_off() -> Quick {
    Quick::Off
}

fn default_confidence() -> f64 {
    crate::bayes::DEFAULT_CONFIDENCE
}

impl Spec {
    /// A flaky failure: each test is one run, and the posterior decides (see [`flaky`]).
    fn flaky(&self) -> bool {
        self.repeat > 1
    }
}

/// A new session: the checkout, the workflow and the ends, and how to run.
pub struct NewSession {
    pub comfyui: crate::locate::Chosen,
    pub workflow: PathBuf,
    pub python: Option<PathBuf>,
    pub launcher: Option<PathBuf>,
    pub flags: Vec<String>,
    pub env: Vec<(String, String)>,
    pub good: String,
    pub bad: Option<String>,
    pub regress: Option<Outcome>,
    pub repeat: u32,
    pub limits: Limits,
    pub max_runs: u32,
    pub confidence: f64,
    pub output: Option<PathBuf>,
    pub quick: Quick,
    pub install: bool,
    pub then_bisect: bool,
}

/// A new session or one to resume (made once per command: its size does not matter).
#[allow(clippy::large_enum_variant)]
pub enum Request {
    New(NewSession),
    Resume { dir: PathBuf, max_runs: Option<u32> },
}

/// How one commit behaved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    Good,
    Bad,
    Skip,
}

/// One commit tested (or skipped).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tested {
    pub commit: String,
    pub version: Option<String>,
    /// The outcome of its last run (null when it was skipped before any run).
    pub outcome: Option<Outcome>,
    pub mark: Mark,
    /// Why it was skipped.
    pub reason: Option<String>,
    pub runs: Vec<PathBuf>,
    /// Whether it ran the workflow as it is (`full`) or its shortened copy (`quick`).
    #[serde(default)]
    pub kind: RunKind,
    /// Where its failing run failed (the prompt of the iterations and the node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_at: Option<FailedAt>,
    /// The versions its runs had of the packages that move with ComfyUI (comfy-aimdo,
    /// comfy-kitchen): the Python's own, or those installed for it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub packages: std::collections::BTreeMap<String, String>,
    /// The environment its pins were installed into, when the Python's own differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<crate::run::Overlay>,
}

impl Tested {
    /// `commit` not tested yet (skipped until its runs say otherwise), asked as `kind`.
    pub fn of(commit: &str, kind: RunKind) -> Tested {
        Tested {
            commit: commit.to_string(),
            version: None,
            outcome: None,
            mark: Mark::Skip,
            reason: None,
            runs: Vec::new(),
            kind,
            failed_at: None,
            packages: Default::default(),
            environment: None,
        }
    }
}

/// A commit skipped, and why (`regress --json` `skipped`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Skipped {
    pub commit: String,
    pub reason: String,
}

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

/// The session in progress.
struct Session<'a> {
    spec: Spec,
    dir: PathBuf,
    repo: Repo,
    journal: Vec<Tested>,
    runs: u32,
    progress: &'a mut dyn FnMut(&str),
    stopped: bool,
    /// How often each commit was asked about in this process (a flaky search asks again).
    asked: std::collections::HashMap<String, usize>,
    /// The environments had in this process, by their pins (or why one cannot be had).
    envs: std::collections::BTreeMap<
        Vec<(String, String)>,
        std::result::Result<EnvironmentUse, String>,
    >,
}

impl Session<'_> {
    /// What the journal says of `commit`: its last test; in a flaky search, the test that
    /// answered the same ask before (the n-th ask of a commit is its n-th test), so a resumed
    /// session replays its journal in order and runs only what it had not.
    fn known(&mut self, commit: &str, run_kind: RunKind) -> Option<Tested> {
        if !self.spec.flaky() {
            return self
                .journal
                .iter()
                .rev()
                .find(|t| t.commit == commit && t.kind == run_kind)
                .cloned();
        }
        let asked = self.asked.entry(commit.to_string()).or_insert(0);
        let n = *asked;
        *asked += 1;
        self.journal
            .iter()
            .filter(|t| t.commit == commit)
            .nth(n)
            .cloned()
    }

    /// Tests `commit` (or recalls it from the journal).
    fn test(&mut self, commit: &str, kind: Option<Outcome>, run_kind: RunKind) -> Result<Tested> {
        if let Some(t) = self.known(commit, run_kind) {
            return Ok(t);
        }
        let info = self.repo.info(commit)?;
        // What is asked for (also for a commit skipped before it ran), unless the run says
        // the workflow ran in full.
        let mut tested = Tested {
            version: info.version.clone(),
            ..Tested::of(commit, run_kind)
        };
        (self.progress)(&format!(
            "testing {}{} ({}, {}) {}",
            info.short(),
            if run_kind == RunKind::Quick {
                " shortened"
            } else {
                ""
            },
            info.version.as_deref().unwrap_or("version unknown"),
            info.date,
            info.subject
        ));
        let tree = tree::dir_of(&self.dir, commit);
        let outcome = self.run_commit(commit, &tree, (kind, run_kind), &mut tested);
        let _ = std::fs::remove_dir_all(&tree);
        if let Err(e) = outcome {
            // A Ctrl-C while git, tar or `main.py --help` ran makes them fail: that is a stop,
            // not a property of the commit. So is a machine problem (the GPU lock, a full
            // disk, a link Windows refuses): the session ends with it and can be resumed.
            if e.kind == ErrorKind::Interrupted
                || e.kind == ErrorKind::Environment
                || self.stopped
                || signals::requested() != Stop::No
            {
                self.stopped = true;
                return Err(e);
            }
            tested.mark = Mark::Skip;
            tested.reason = Some(e.message.clone());
        }
        if !self.stopped {
            let journal = journal(&self.dir);
            journal
                .append(&tested)
                .map_err(|e| crate::error::io_error("write", journal.path(), &e))?;
            self.journal.push(tested.clone());
        }
        Ok(tested)
    }

    /// A commit's export, as the folder a run starts ComfyUI in.
    pub(super) fn export(&self, tree: &Path, commit: &str) -> crate::locate::Chosen {
        crate::locate::Chosen {
            path: tree.to_path_buf(),
            source: format!(
                "commit {} of {}, exported",
                git::abbrev(commit, 12),
                self.spec.comfyui.display()
            ),
        }
    }

    fn run_commit(
        &mut self,
        commit: &str,
        tree: &Path,
        (kind, run_kind): (Option<Outcome>, RunKind),
        tested: &mut Tested,
    ) -> Result<()> {
        let requirements = self.repo.show(commit, "requirements.txt");
        let (mut packages, differing) = tree::held(requirements.as_deref(), &self.spec.python);
        let overlay = if differing.is_empty() {
            None
        } else {
            let used = self.environment(&differing)?;
            packages.extend(used.packages.iter().cloned());
            let overlay = crate::run::Overlay {
                site: used.site,
                packages: used.packages,
            };
            tested.environment = Some(overlay.clone());
            Some(overlay)
        };
        tested.packages = packages;
        tree::prepare(&self.repo, commit, &self.spec.comfyui, tree)?;
        let target = Target::load(
            &self.export(tree, commit),
            Some(&self.spec.python),
            &self.spec.workflow,
        )
        .map_err(|e| Error::untestable(format!("it does not start: {}", e.message)))?;
        let parsed = crate::flags::argparse::parse(&target.flags, &self.spec.flags, None);
        if let Some(err) = &parsed.error {
            return Err(Error::untestable(format!(
                "it does not take these flags: {err}"
            )));
        }
        let limits = self.spec.limits;
        let mut passes = 0;
        // A flaky search runs a commit once per test; the posterior asks for more.
        let repeat = if self.spec.flaky() {
            1
        } else {
            self.spec.repeat.max(1)
        };
        for _ in 0..repeat {
            if signals::requested() != Stop::No || self.runs >= self.spec.max_runs {
                self.stopped = true;
                return Err(Error {
                    kind: ErrorKind::Interrupted,
                    ..Error::usage("stopped")
                });
            }
            self.runs += 1;
            // Numbered after every folder there (a run stopped before it was journaled keeps
            // its number and its log).
            let layout = SessionDir::regress(&self.dir);
            let run_dir = layout.run(next_run_number(&layout.runs()));
            let run_dir = run::folder::create(&run_dir)?;
            tested.runs.push(run_dir.clone());
            let target = Target::load(
                &self.export(tree, commit),
                Some(&self.spec.python),
                &self.spec.workflow,
            )?;
            let mut opts = RunOptions::new(target, limits, run_dir.clone());
            opts.comfy_flags = self.spec.flags.clone();
            opts.env = self.spec.env.clone();
            if run_kind == RunKind::Quick {
                opts.quick = self.spec.quick;
            }
            opts.overlay = overlay.clone();
            let record = run::execute(&opts, &mut run::Silent)?;
            tested.outcome = Some(record.outcome);
            // What was asked for, unless the workflow ran in full (and says why).
            tested.kind = match record.quick.as_ref().and_then(|q| q.unshortened.as_ref()) {
                Some(_) => RunKind::Full,
                None => run_kind,
            };
            tested.failed_at = (record.outcome != Outcome::Pass)
                .then(|| run::record::overall(&record.iterations))
                .flatten()
                .map(|i| FailedAt {
                    iteration: i.iteration,
                    node: i.node.clone(),
                });
            if record.outcome == Outcome::Interrupted && signals::requested() != Stop::No {
                self.stopped = true;
                return Err(Error {
                    kind: ErrorKind::Interrupted,
                    ..Error::usage("stopped")
                });
            }
            match record.outcome {
                o if Some(o) == kind || (kind.is_none() && o != Outcome::Pass) => {
                    if matches!(
                        o,
                        Outcome::FlagRejected
                            | Outcome::StartupFailed
                            | Outcome::InvalidWorkflow
                            | Outcome::Interrupted
                    ) {
                        return Err(Error::untestable(format!(
                            "it did not start ({})",
                            o.describe()
                        )));
                    }
                    tested.mark = Mark::Bad;
                    return Ok(());
                }
                Outcome::Pass => passes += 1,
                Outcome::FlagRejected | Outcome::StartupFailed | Outcome::InvalidWorkflow => {
                    return Err(Error::untestable(format!(
                        "it could not run the workflow ({})",
                        record.outcome.describe()
                    )));
                }
                other => {
                    return Err(Error::untestable(format!(
                        "it fails otherwise ({}), not with the failure hunted",
                        other.describe()
                    )));
                }
            }
        }
        if passes == repeat {
            tested.mark = Mark::Good;
        }
        Ok(())
    }
}

impl Session<'_> {
    /// The environment with the pins this Python does not satisfy: made once per session
    /// (from the cache when an earlier session made it). Untestable when it cannot be had.
    pub(super) fn environment(&mut self, differing: &[env::Differing]) -> Result<EnvironmentUse> {
        let listed = differing
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        if !self.spec.install {
            return Err(Error::untestable(format!(
                "its requirements.txt pins {listed}: not installed (--no-install)"
            )));
        }
        let pins: Vec<(String, String)> = differing
            .iter()
            .map(|d| (d.name.clone(), d.want.clone()))
            .collect();
        if let Some(known) = self.envs.get(&pins) {
            return known.clone().map_err(Error::untestable);
        }
        let wanted = pins
            .iter()
            .map(|(n, v)| format!("{n}=={v}"))
            .collect::<Vec<_>>()
            .join(" ");
        let progress = &mut *self.progress;
        let mut installing = || {
            progress(&format!(
                "installing {wanted} into an environment of its own (your Python is not changed)"
            ))
        };
        let made = env::prepare(&self.spec.python, &pins, &mut installing);
        if signals::requested() != Stop::No {
            self.stopped = true;
            return Err(Error {
                kind: ErrorKind::Interrupted,
                ..Error::usage("stopped")
            });
        }
        let used = made
            .map(|(overlay, how)| EnvironmentUse {
                packages: overlay.packages,
                site: overlay.site,
                installed: how == env::Made::Installed,
            })
            .map_err(|why| {
                format!("its requirements.txt pins {listed}, which could not be installed: {why}")
            });
        if let Ok(u) = &used
            && !u.installed
        {
            (self.progress)(&format!("{wanted}: from the cache, {}", u.site.display()));
        }
        self.envs.insert(pins, used.clone());
        used.map_err(Error::untestable)
    }
}

/// `--good` as given, or the ComfyUI commit a ComfyUI-Manager snapshot recorded (its
/// `user/default/ComfyUI-Manager/snapshots/*.json` holds `"comfyui": "<commit>"`).
fn snapshot_rev(good: &str) -> Result<String> {
    let path = Path::new(good);
    if !(good.ends_with(".json") && path.is_file()) {
        return Ok(good.to_string());
    }
    let bytes = crate::input_file::read(path, "snapshot", crate::input_file::MAX_WORKFLOW)?;
    let doc: serde_json::Value = serde_json::from_str(&crate::input_file::decode(&bytes))
        .map_err(|e| Error::usage(format!("{good} is not a snapshot: {e}")))?;
    doc.get("comfyui")
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().to_string())
        .ok_or_else(|| {
            Error::usage(format!("{good} records no ComfyUI commit (no \"comfyui\" field)"))
                .hint("give --good a commit or tag, or a ComfyUI-Manager snapshot (Manager > Snapshot Manager)")
        })
}

/// One more than the highest numbered run folder in `runs`.
fn next_run_number(runs: &Path) -> u32 {
    std::fs::read_dir(runs)
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
        + 1
}

/// The session's journal: one line per tested (or skipped) commit.
pub fn journal(dir: &Path) -> Journal<Tested> {
    Journal::at(SessionDir::regress(dir).journal())
}

/// The commits a session tested, in order (a line torn by a crash is left out).
pub fn read_journal(path: &Path) -> Vec<Tested> {
    Journal::at(path).read()
}

/// A session folder to resume: its settings (with a new run budget), its journal (a line
/// torn by a crash said and left out), and the claim on it.
fn resumed(
    dir: PathBuf,
    max_runs: Option<u32>,
    progress: &mut dyn FnMut(&str),
) -> Result<(Spec, PathBuf, Vec<Tested>, crate::session::owner::Owner)> {
    let not_a_session = || {
        Error::usage(format!("{} is not a regress session", dir.display()))
            .hint("give the folder that vrambisect regress --output wrote")
    };
    let layout = SessionDir::regress(&dir);
    if !layout.spec().is_file() {
        return Err(not_a_session());
    }
    // Taken before anything is read or written: one process writes a session.
    let owner = crate::session::owner::take(&dir)?;
    let text = std::fs::read_to_string(layout.spec()).map_err(|_| not_a_session())?;
    let mut spec: Spec = serde_json::from_str(&text)
        .map_err(|e| Error::usage(format!("{} is damaged: {e}", layout.spec().display())))?;
    if let Some(m) = max_runs {
        spec.max_runs = m;
        run::folder::write_json(&layout.spec(), &spec)?;
    }
    let (journal, torn) = journal(&dir).read_all();
    for t in torn {
        let after = t
            .after
            .checked_sub(1)
            .map(|i| {
                format!(
                    "the commit tested after {}",
                    git::abbrev(&journal[i].commit, 7)
                )
            })
            .unwrap_or_else(|| "the first commit".into());
        progress(&format!(
            "warning: line {} of {} cannot be read (cut short by a crash?): {after} will be tested again",
            t.line,
            layout.journal().display()
        ));
    }
    Ok((spec, dir, journal, owner))
}

/// A new session: the ends resolved and checked, its folder made outside the checkout and
/// claimed, its settings written.
fn started(
    new: NewSession,
    progress: &mut dyn FnMut(&str),
) -> Result<(Spec, PathBuf, Vec<Tested>, crate::session::owner::Owner)> {
    let repo = Repo::open(&new.comfyui.path)?;
    let install = crate::install::Install::open(&new.comfyui.path)?;
    crate::workflow::Workflow::load(&new.workflow)?;
    let chosen = install.python(new.python.as_deref());
    let python = chosen.path.clone();
    let defaults = crate::locate::Defaults {
        comfyui: Some(new.comfyui),
        python: Some(chosen),
    };
    for line in defaults.lines() {
        progress(&line);
    }
    let good = repo.resolve(&snapshot_rev(&new.good)?)?;
    let bad = repo.resolve(new.bad.as_deref().unwrap_or("HEAD"))?;
    if good == bad
        || !repo.is_ancestor(&good, &bad)
        || !repo.first_parent_line(&bad)?.contains(&good)
    {
        return Err(Error::usage(format!(
            "--good {} is not on the first-parent line before --bad {}",
            git::abbrev(&good, 7),
            git::abbrev(&bad, 7)
        ))
        .hint("--good is an older commit on the main line (a merge, not a commit inside a merged branch) where it worked; --bad the newer one that fails (default: the checkout's HEAD)"));
    }
    let dir = new
        .output
        .unwrap_or_else(|| run::folder::fresh(Path::new("vrambisect-sessions"), "regress"));
    // Inside the checkout it would show as untracked files there.
    let abs = std::env::current_dir()
        .map(|c| c.join(&dir))
        .unwrap_or_else(|_| dir.clone());
    let top = crate::paths::canonical(&repo.dir);
    let parent = abs.parent().and_then(crate::paths::canonical_opt);
    if parent.is_some_and(|p| p.starts_with(&top)) {
        return Err(Error::usage(format!(
            "the session folder {} would be inside your checkout {}",
            dir.display(),
            top.display()
        ))
        .hint("run vrambisect from another folder, or give --output outside the checkout"));
    }
    let dir = run::folder::create(&dir)?;
    let owner = crate::session::owner::take(&dir)?;
    let spec = Spec {
        comfyui: crate::paths::canonical(&repo.dir),
        python,
        defaults,
        workflow: crate::paths::canonical(&new.workflow),
        launcher: new.launcher,
        flags: new.flags,
        env: new.env,
        good,
        bad,
        regress: new.regress,
        repeat: new.repeat,
        max_runs: new.max_runs,
        confidence: new.confidence,
        limits: new.limits,
        quick: new.quick,
        install: new.install,
        then_bisect: new.then_bisect,
    };
    let layout = SessionDir::regress(&dir);
    run::folder::write_json(&layout.spec(), &spec)?;
    crate::private::create_dir_all(&layout.runs())
        .map_err(|e| crate::error::io_error("create", &layout.runs(), &e))?;
    Ok((spec, dir, Vec::new(), owner))
}

/// Runs (or resumes) a regress session; returns the result and the exit status.
pub fn run(req: Request, progress: &mut dyn FnMut(&str)) -> Result<(RegressResult, i32)> {
    let (spec, dir, journal, _owner) = match req {
        Request::Resume { dir, max_runs } => resumed(dir, max_runs, progress)?,
        Request::New(new) => started(new, progress)?,
    };
    let repo = Repo::open(&spec.comfyui)?;
    let commits = repo.first_parent(&spec.good, &spec.bad)?;
    let runs = journal.iter().map(|t| t.runs.len() as u32).sum();
    let mut s = Session {
        spec,
        dir,
        repo,
        journal,
        runs,
        progress,
        stopped: false,
        asked: Default::default(),
        envs: Default::default(),
    };
    let result = search(&mut s, &commits);
    let layout = SessionDir::regress(&s.dir);
    let _ = std::fs::remove_dir_all(layout.trees());
    let mut result = result?;
    // Kept before a bisect of the flags begins: the commit is the answer whatever it does.
    run::folder::write_json(&layout.result(), &result)?;
    let mut code = match result.verdict.kind {
        Answer::FirstBadFound => exit::OK,
        Answer::Untestable => exit::UNTESTABLE,
        Answer::Incomplete => exit::INTERRUPTED,
        Answer::BadPasses | Answer::GoodFails => exit::FAILED,
    };
    if s.spec.then_bisect && result.verdict.kind == Answer::FirstBadFound {
        if then::follow(&mut s, &mut result)? {
            code = exit::INTERRUPTED;
        }
        run::folder::write_json(&layout.result(), &result)?;
    }
    Ok((result, code))
}

impl search::CommitTester for Session<'_> {
    fn test(
        &mut self,
        commit: &str,
        regress: Option<Outcome>,
    ) -> std::result::Result<Tested, search::Stop> {
        Session::test(self, commit, regress, RunKind::Full).map_err(stop_of)
    }

    fn test_quick(
        &mut self,
        commit: &str,
        regress: Option<Outcome>,
    ) -> std::result::Result<Tested, search::Stop> {
        Session::test(self, commit, regress, RunKind::Quick).map_err(stop_of)
    }

    /// From the workflow given (an API prompt), or else the prompt the bad end's run
    /// converted and kept.
    fn shortenable(&mut self) -> std::result::Result<(), Option<String>> {
        if self.spec.quick == Quick::Off {
            return Err(None);
        }
        if self.spec.flaky() {
            return Err(Some(
                "regress's flaky search (--repeat 2 or more) runs every commit in full".into(),
            ));
        }
        let workflow =
            crate::workflow::Workflow::load(&self.spec.workflow).map_err(|e| Some(e.message))?;
        let runs = self
            .journal
            .iter()
            .flat_map(|t| &t.runs)
            .map(PathBuf::as_path);
        match crate::session::quick::known_shortening(&workflow, self.spec.quick, runs) {
            Some(None) => Ok(()),
            Some(Some(why)) => Err(Some(why)),
            None => Err(Some("the converted workflow was not kept".into())),
        }
    }
}

/// A commit's test that ended the session: a stop (resumable), or the machine's error.
fn stop_of(e: Error) -> search::Stop {
    if e.kind == ErrorKind::Environment {
        search::Stop::Failed(e)
    } else {
        search::Stop::Incomplete
    }
}

/// Confirms the ends, then bisects first-parent history.
fn search(s: &mut Session<'_>, commits: &[String]) -> Result<RegressResult> {
    let (good, bad) = (s.spec.good.clone(), s.spec.bad.clone());
    let hunt = search::Hunt {
        good: &good,
        bad: &bad,
        commits,
        regress: s.spec.regress,
    };
    let found = if s.spec.flaky() {
        let confidence = s.spec.confidence;
        flaky::bisect(s, hunt, confidence)?
    } else {
        search::bisect(s, hunt)?
    };
    finish(s, commits, found)
}

/// The result of a search: the commits it names, in words and links.
fn finish(
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
fn continue_line(s: &Session<'_>, origin: &crate::locate::Origin) -> String {
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
