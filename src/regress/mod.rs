//! `vrambisect regress`: which ComfyUI commit broke a workflow.
//!
//! The user's checkout is only read ([`git`]): each commit is exported into the session folder
//! with the user's models, custom nodes and inputs linked in ([`tree`]) and run with the same
//! Python and flags by the run engine. Both ends are confirmed first (the bad end fails, the
//! good end passes), then first-parent history between them is bisected. A commit that cannot
//! be tested (it does not start, lacks one of the flags, pins other package versions, or fails
//! some other way) is skipped, never called bad. Every tested commit is journaled, so
//! `--resume` repeats nothing.
//!
//! Here: the session's settings, starting or resuming it, and the search over its commits.
//! `tester` runs a commit (export, environment, run, journal), `result` makes the answer,
//! `search` and `flaky` decide which commit is next, `then` runs `--then-bisect`.

pub(crate) mod env;
mod flaky;
pub(crate) mod git;
pub use flaky::bisect as bisect_flaky;
pub use result::{Culprit, EnvironmentUse, PinChange, RegressResult, Verdict};
pub use search::Hunt;
mod result;
pub mod search;
mod tester;
mod then;
pub(crate) mod tree;

use crate::error::{Error, Result, exit};
use crate::outcome::Outcome;
use crate::run::record::RunKind;
use crate::run::{self, Limits};
use crate::session::SessionDir;
use crate::session::failure::FailedAt;
use crate::session::journal::Journal;
use crate::workflow::quick::Quick;
use git::Repo;
use result::{continue_line, finish};
use search::Answer;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tester::Session;

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
