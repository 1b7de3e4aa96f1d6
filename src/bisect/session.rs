//! A bisect session on disk: its settings, an append-only journal of finished runs, one run
//! folder per run, and the result. `--resume` continues from the journal without repeating a
//! finished run; a run cut short by Ctrl-C is not journaled, so it is the one redone.

use super::search::{Oracle, RunKind, Settings, Stopped, Strategy, Tally, Trial};
use super::space::Config;
use crate::error::{Error, Result, io_error};
use crate::outcome::Outcome;
use crate::run::{self, Reporter, RunOptions};
use crate::session::SessionDir;
use crate::session::failure::FailedAt;
use crate::session::journal::Journal;
use crate::session::quick::{Recorded, kept_prompt, unshortenable};
use crate::signals::{self, Stop};
use crate::workflow::quick::Quick;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// What a session was started with (saved once, read back by `--resume`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSpec {
    pub comfyui: PathBuf,
    pub python: Option<PathBuf>,
    /// Where `python` came from when it was not given (`None`: `--python`, or not kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_source: Option<String>,
    pub workflow: PathBuf,
    pub launcher: Option<PathBuf>,
    pub base_flags: Vec<String>,
    pub toggles: Vec<String>,
    /// The toggles came from the built-in default list.
    pub default_toggles: bool,
    pub strategy: Strategy,
    pub repeat: u32,
    /// `--max-runs`; null: 64 for a deterministic search, what the posterior calls for in a
    /// flaky one. (Sessions made before it could be null hold a number.)
    pub max_runs: Option<u32>,
    /// `--confidence`: the posterior a flaky search stops at.
    #[serde(default = "default_confidence")]
    pub confidence: f64,
    /// Kept as `iterations`, `timeout_ms`, `stall_timeout_ms` and `startup_timeout_ms`.
    #[serde(flatten)]
    pub limits: crate::run::Limits,
    pub env: Vec<(String, String)>,
    /// Whether to run the failing configuration once more with `--disable-all-custom-nodes`
    /// (sessions made before it existed: no).
    #[serde(default)]
    pub custom_nodes_check: bool,
    /// `--quick` (sessions made before it existed: off).
    #[serde(default = "quick_off")]
    pub quick: Quick,
    /// Packages put in front of the Python's own (`regress --then-bisect` on a commit that
    /// pins other versions than the Python has).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<crate::run::Overlay>,
    /// The most a value search tries (the card's memory when the session started), kept so
    /// that a resume searches the same values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_ceiling: Option<crate::bisect::space::Ceiling>,
    /// `--first-fix`: stop at the first fix found, without looking for a cheaper one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_fix: bool,
    /// The workflow's failure as `--failed-log` showed it (see [`Recorded`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_on_record: Option<Recorded>,
}

fn quick_off() -> Quick {
    Quick::Off
}

/// One finished run, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub n: u32,
    pub config: Config,
    pub trial: Trial,
}

/// Writes the session's settings into a new session folder.
pub fn create(dir: &Path, spec: &SessionSpec) -> Result<PathBuf> {
    let dir = run::folder::create(dir)?;
    let layout = SessionDir::bisect(&dir);
    let text = serde_json::to_string_pretty(spec).expect("spec serialises");
    crate::private::write(&layout.spec(), text + "\n")
        .map_err(|e| io_error("write", &layout.spec(), &e))?;
    crate::private::create_dir_all(&layout.runs())
        .map_err(|e| io_error("create", &layout.runs(), &e))?;
    Ok(dir)
}

/// Reads a session folder for `--resume`.
pub fn open(dir: &Path) -> Result<(PathBuf, SessionSpec, Vec<Entry>)> {
    let path = SessionDir::bisect(dir).spec();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        io_error("read", &path, &e)
            .hint("give the folder of a bisect session (it holds session.json)")
    })?;
    let spec: SessionSpec = serde_json::from_str(&text)
        .map_err(|e| Error::usage(format!("{} is damaged: {e}", path.display())))?;
    let entries = journal(dir).read();
    let dir = crate::paths::canonical(dir);
    Ok((dir, spec, entries))
}

/// The session's journal: one line per finished run.
pub fn journal(dir: &Path) -> Journal<Entry> {
    Journal::at(SessionDir::bisect(dir).journal())
}

/// Every complete journal entry; a line cut short by a crash mid-write is left out.
pub fn read_journal(path: &Path) -> Vec<Entry> {
    Journal::at(path).read()
}

/// What cannot be read back from a journal: one sentence per unreadable line, naming the
/// run that will be redone.
pub fn unreadable_lines(path: &Path) -> Vec<String> {
    let journal = Journal::<Entry>::at(path);
    let (entries, torn) = journal.read_all();
    torn.iter()
        .map(|t| {
            let last_run = t.after.checked_sub(1).map(|i| entries[i].n).unwrap_or(0);
            format!(
                "line {} of {} cannot be read (cut short by a crash?): the run after run {last_run} will be redone",
                t.line,
                path.display()
            )
        })
        .collect()
}

/// Groups journal entries into tallies, in the order configurations were first run.
pub fn tallies(entries: &[Entry]) -> Vec<Tally> {
    let mut out: Vec<Tally> = Vec::new();
    for e in entries {
        let trial = Trial {
            n: e.n,
            ..e.trial.clone()
        };
        match out.iter_mut().find(|t| t.config.key == e.config.key) {
            Some(t) => t.trials.push(trial),
            None => out.push(Tally {
                config: e.config.clone(),
                trials: vec![trial],
            }),
        }
    }
    out
}

/// What the session's display is told, besides each run's own events.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent<'a> {
    RunStarting {
        n: u32,
        config: &'a Config,
        describe: String,
        kind: RunKind,
    },
    RunFinished {
        n: u32,
        outcome: Outcome,
        duration_ms: u64,
        kind: RunKind,
    },
}

/// A display for a whole session.
pub trait SessionReporter: Reporter {
    fn session(&mut self, event: &SessionEvent);
}

/// The oracle that really runs ComfyUI, journaling each finished run.
pub struct LiveOracle<'a> {
    pub dir: PathBuf,
    pub base: RunOptions,
    pub reporter: &'a mut dyn SessionReporter,
    pub next: u32,
    pub describe: Box<dyn Fn(&Config) -> String + 'a>,
    /// `--quick`: what a shortened run is (`Off`: runs are full).
    pub quick: Quick,
    /// Whether the workflow can be shortened: `None` until its API prompt is known (a
    /// UI-format workflow is converted by the first run), then why not, or `Some(None)`.
    pub unshortenable: Option<Option<String>>,
}

/// For a failure inside a node whose steps a shortened run cuts: the last sampling step the
/// progress events reported before it.
fn failed_step(
    record: &run::RunRecord,
    prompt: Option<&serde_json::Map<String, serde_json::Value>>,
    quick: Quick,
) -> Option<u64> {
    let it = run::record::overall(&record.iterations)?;
    let node = it.node.as_ref()?;
    let shortened = crate::workflow::quick::for_mode(prompt?, quick).ok()?;
    if !shortened.changes.iter().any(|c| &c.node == node) {
        return None;
    }
    it.last_step
}

impl Oracle for LiveOracle<'_> {
    fn can_shorten(&self) -> bool {
        self.quick != Quick::Off && !matches!(self.unshortenable, Some(Some(_)))
    }

    fn unshortenable(&self) -> Option<String> {
        self.unshortenable.clone().flatten()
    }

    fn quick_steps(&self) -> Option<u32> {
        self.quick.steps()
    }

    fn run(&mut self, config: &Config, kind: RunKind) -> std::result::Result<Trial, Stopped> {
        if signals::requested() != Stop::No {
            return Err(Stopped::Interrupted);
        }
        let n = self.next;
        let run_dir = SessionDir::bisect(&self.dir).run(n);
        // A folder left by an interrupted run of the same number is replaced: it was never
        // journaled, so nothing refers to it.
        if run_dir.exists() {
            let _ = std::fs::remove_dir_all(&run_dir);
        }
        let run_dir = run::folder::create(&run_dir).map_err(Stopped::Failed)?;
        let mut opts = self.base.clone();
        opts.comfy_flags = config.flags.clone();
        opts.run_dir = run_dir.clone();
        opts.quick = match kind {
            RunKind::Quick => self.quick,
            RunKind::Full => Quick::Off,
        };
        // The session's first run is of the user's flags: logged at DEBUG, it is the log a
        // bug report needs (the level changes what is logged, not what memory does).
        opts.debug_log = n == 1 && config.choice.is_empty();
        self.reporter.session(&SessionEvent::RunStarting {
            n,
            config,
            describe: (self.describe)(config),
            kind,
        });
        let record = run::execute(&opts, &mut *self.reporter).map_err(Stopped::Failed)?;
        if self.unshortenable.is_none()
            && let Some(prompt) = kept_prompt(&run_dir)
        {
            self.unshortenable = Some(unshortenable(&prompt, self.quick));
        }
        if record.outcome == Outcome::Interrupted && signals::requested() != Stop::No {
            return Err(Stopped::Interrupted);
        }
        let prompt = kept_prompt(&run_dir);
        let failed_step = failed_step(&record, prompt.as_ref(), self.quick);
        // What shortening it would cut (for deciding whether shortened runs pay).
        let sampling_steps = prompt
            .filter(|_| kind == RunKind::Full && self.quick != Quick::Off)
            .and_then(|p| crate::workflow::quick::for_mode(&p, self.quick).ok())
            .map(|s| (s.full_steps, s.quick_steps));
        let trial = Trial {
            outcome: record.outcome,
            run_dir: Some(run_dir),
            duration_ms: record.duration_ms,
            peak_vram_bytes: record.peaks.vram_used_bytes,
            peak_ram_bytes: record.peaks.ram_comfyui_bytes,
            ram_growth_bytes: record.ram_growth.as_ref().map(|g| g.per_prompt_bytes),
            // What was asked for, unless the workflow ran in full (and says why).
            kind: match record.quick.as_ref().and_then(|q| q.unshortened.as_ref()) {
                Some(_) => RunKind::Full,
                None => kind,
            },
            failed_at: (record.outcome != Outcome::Pass)
                .then(|| run::record::overall(&record.iterations))
                .flatten()
                .map(|i| FailedAt {
                    iteration: i.iteration,
                    node: i.node.clone(),
                }),
            unshortened: record.quick.as_ref().and_then(|q| q.unshortened.clone()),
            n,
            signatures: run::record::overall(&record.iterations)
                .map(|i| i.signatures.clone())
                .unwrap_or_default(),
            failed_step,
            sampling_steps,
            cost: crate::bisect::search::Cost::of(&record),
        };
        self.reporter.session(&SessionEvent::RunFinished {
            n,
            outcome: record.outcome,
            duration_ms: record.duration_ms,
            kind: trial.kind,
        });
        let journal = journal(&self.dir);
        let entry = Entry {
            n,
            config: config.clone(),
            trial: trial.clone(),
        };
        journal.append(&entry).map_err(|e| {
            Stopped::Failed(crate::error::Error {
                kind: crate::error::ErrorKind::Environment,
                ..io_error("write", journal.path(), &e)
            })
        })?;
        self.next += 1;
        Ok(trial)
    }
}

/// The run budget of a deterministic search when none is given.
pub const DEFAULT_MAX_RUNS: u32 = 64;

fn default_confidence() -> f64 {
    crate::bayes::DEFAULT_CONFIDENCE
}

impl SessionSpec {
    pub fn settings(&self) -> Settings {
        Settings {
            strategy: self.strategy,
            repeat: self.repeat,
            max_runs: self.max_runs.unwrap_or(DEFAULT_MAX_RUNS),
            budget_given: self.max_runs.is_some(),
            confidence: self.confidence,
            first_fix: self.first_fix,
            ..Settings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn entry(n: u32, key: &str, outcome: Outcome) -> Entry {
        Entry {
            n,
            config: Config {
                flags: vec![key.into()],
                choice: vec![],
                key: key.into(),
            },
            trial: Trial::of(outcome),
        }
    }

    #[test]
    fn a_torn_journal_line_is_named_and_its_run_redone() {
        let tmp = tempfile::tempdir().unwrap();
        let j = journal(tmp.path());
        j.append(&entry(1, "a", Outcome::Oom)).unwrap();
        j.append(&entry(2, "b", Outcome::Pass)).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(j.path())
            .unwrap();
        f.write_all(b"{\"n\":3,\"config\":{\"fla").unwrap();
        assert_eq!(read_journal(j.path()).len(), 2);
        let said = unreadable_lines(j.path());
        assert_eq!(said.len(), 1);
        assert!(
            said[0].starts_with("line 3 of ")
                && said[0].ends_with("the run after run 2 will be redone"),
            "{said:?}"
        );
        let t = tallies(&[
            entry(1, "a", Outcome::Oom),
            entry(2, "b", Outcome::Pass),
            entry(3, "a", Outcome::Oom),
        ]);
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].runs(), 2);
    }
}
