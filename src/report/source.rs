//! What a report is made from: a run folder (`record.json` and the files beside it) or a
//! bisect session folder (`session.json`, `result.json`, `runs/NNN/`).

use super::inside::{self, LeftOut, Skipped};
use crate::bisect::result::BisectResult;
use crate::bisect::session::SessionSpec;
use crate::error::{Error, Result};
use crate::outcome::Outcome;
use crate::run::RunRecord;
use crate::run::folder;
use crate::session::SessionDir;
use std::path::{Path, PathBuf};

/// A run folder or a bisect session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    Run,
    Bisect,
    Regress,
    /// A failure as it happened (`report --log`): no run folder, nothing rerun.
    Failure,
}

/// One run folder.
#[derive(Debug, Clone)]
pub(crate) struct RunDir {
    /// `001` (a bisect's run number; a lone run is `001` too).
    pub label: String,
    pub dir: PathBuf,
    /// `None` when the run was cut short before its record was written.
    pub record: Option<RunRecord>,
}

impl RunDir {
    pub(crate) fn outcome(&self) -> Option<Outcome> {
        self.record.as_ref().map(|r| r.outcome)
    }

    /// The files of the folder that go into the bundle, sorted, with their names there; and
    /// those of them left out (a link, not a plain file), named. The per-run `workflow.json`
    /// is the same as the bundle's own and `samples.jsonl` repeats `samples.csv`, so both
    /// stay out.
    pub(crate) fn files(&self) -> (Vec<(String, PathBuf)>, LeftOut) {
        let (mut out, mut skipped) = (Vec::new(), Vec::new());
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return (out, skipped);
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let keep = name == folder::RECORD
                || name == folder::SAMPLES_CSV
                || name == folder::SAMPLES_SUMMARY
                || name == folder::SYSTEM_STATS
                || (name.starts_with("comfyui") && name.ends_with(".log"))
                || name == format!("{}.json", folder::WORKFLOW_SOURCE)
                || ((name.starts_with("history-") || name.starts_with("rejected-"))
                    && name.ends_with(".json"));
            if !keep {
                continue;
            }
            // The entry's own type: a link is not followed to see what it points at.
            match e.file_type() {
                Ok(t) if t.is_file() => out.push((name, e.path())),
                Ok(t) if t.is_symlink() => skipped.push((name, Skipped::Link)),
                Ok(_) => skipped.push((name, Skipped::NotAFile)),
                Err(_) => {}
            }
        }
        out.sort();
        skipped.sort_by(|a, b| a.0.cmp(&b.0));
        (out, skipped)
    }
}

/// A folder to report on.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub kind: SourceKind,
    pub dir: PathBuf,
    pub runs: Vec<RunDir>,
    pub spec: Option<SessionSpec>,
    /// `None` for a bisect stopped before its result was written.
    pub result: Option<BisectResult>,
    /// A regress session's answer and the commits it tested (with their runs).
    pub regress: Option<Regress>,
    /// Files and folders of the session left out of the bundle (links, not plain files): the
    /// path inside the folder, and why.
    pub skipped: LeftOut,
}

/// What a regress session holds besides its runs.
#[derive(Debug, Clone)]
pub(crate) struct Regress {
    pub result: Option<crate::regress::RegressResult>,
    pub journal: Vec<crate::regress::Tested>,
    /// What the session was started with (its checkout and Python), where readable.
    pub spec: Option<crate::regress::Spec>,
}

impl Regress {
    /// The runs of `commit` (full id), from the journal.
    pub(crate) fn runs_of(&self, commit: &str) -> Vec<PathBuf> {
        self.journal
            .iter()
            .filter(|t| t.commit == commit)
            .flat_map(|t| t.runs.clone())
            .collect()
    }
}

/// A JSON file of the session folder `root` as `T`; a link or anything but a plain file is
/// left out (and named in `skipped`), as a missing or damaged file is `None`.
fn load_json<T: serde::de::DeserializeOwned>(
    root: &Path,
    path: &Path,
    skipped: &mut LeftOut,
) -> Option<T> {
    match inside::check(root, path) {
        Ok(()) => inside::json(root, path),
        Err(why) => {
            if why.worth_saying() {
                skipped.push((relative(root, path), why));
            }
            None
        }
    }
}

/// `path` as named inside `root`, with `/` on every system (`runs/001/record.json`).
fn relative(root: &Path, path: &Path) -> String {
    let inside = path.strip_prefix(root).unwrap_or(path);
    let parts: Vec<String> = inside
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// Whether a file of that name is there at all (a link counts: it is named, not followed).
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

impl Source {
    /// Why this folder is not a finished answer, in one sentence (`None` when it is): no run
    /// finished, or a bisect stopped before its verdict.
    pub(crate) fn incomplete(&self) -> Option<String> {
        let finished = self.runs.iter().filter(|r| r.record.is_some()).count();
        if finished == 0 {
            return Some(format!(
                "no run finished ({} started): the bundle holds their logs, not a result",
                self.runs.len()
            ));
        }
        if let Some(r) = &self.regress {
            return match &r.result {
                Some(res) if res.verdict.kind != crate::regress::search::Answer::Incomplete => None,
                _ => Some(
                    "the regress session stopped before its answer; only what ran is listed"
                        .to_string(),
                ),
            };
        }
        if self.kind != SourceKind::Bisect {
            return None;
        }
        match &self.result {
            None => Some(format!(
                "the bisect was stopped before its verdict, after {}; only what ran is listed",
                crate::text::plural(finished, "finished run")
            )),
            Some(r) if r.continue_with.is_some() => Some(format!(
                "the bisect reached its run budget ({}) before a verdict; only what ran is listed",
                crate::text::plural(r.runs_total as usize, "run")
            )),
            Some(_) => None,
        }
    }
}

/// The numbered run folders under `dir/runs`, in order; a link among them (or `runs` itself
/// a link) is named in `skipped`, not followed.
fn run_dirs(dir: &Path, skipped: &mut LeftOut) -> Vec<RunDir> {
    let mut runs = Vec::new();
    // (The folder of a regress's runs and of a bisect's is named alike.)
    let runs_dir = SessionDir::bisect(dir).runs();
    if !inside::is_dir(dir, &runs_dir) {
        if std::fs::symlink_metadata(&runs_dir).is_ok_and(|m| m.file_type().is_symlink()) {
            skipped.push((relative(dir, &runs_dir), Skipped::Link));
        }
        return runs;
    }
    if let Ok(entries) = std::fs::read_dir(&runs_dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_dir() => {
                    let mut ignored = Vec::new();
                    let record = load_json(dir, &e.path().join(folder::RECORD), &mut ignored);
                    skipped.extend(ignored);
                    runs.push(RunDir {
                        label: name,
                        record,
                        dir: e.path(),
                    });
                }
                Ok(t) if t.is_symlink() => skipped.push((relative(dir, &e.path()), Skipped::Link)),
                _ => {}
            }
        }
    }
    runs.sort_by(|a, b| a.label.cmp(&b.label));
    skipped.sort_by(|a, b| a.0.cmp(&b.0));
    runs
}

/// Why a folder cannot be reported on.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{} is not a folder", .0.display())]
    NotAFolder(PathBuf),
    #[error(
        "{} is neither a run folder (record.json) nor a bisect or regress session",
        .0.display()
    )]
    Neither(PathBuf),
    /// A session's settings that do not read.
    #[error("{} is damaged", .0.display())]
    DamagedSpec(PathBuf),
    /// The session's runs are links to another place.
    #[error(
        "the runs of {} are symbolic links to elsewhere, which a bundle never follows",
        .0.display()
    )]
    RunsElsewhere(PathBuf),
    /// A `command` (bisect, regress) session that has not finished a run.
    #[error("the {command} session {} has no runs yet", dir.display())]
    NoRunsYet { command: &'static str, dir: PathBuf },
    /// A run's record that does not read.
    #[error(transparent)]
    Record(#[from] Error),
}

impl From<SourceError> for Error {
    fn from(e: SourceError) -> Error {
        let message = e.to_string();
        let hint = match e {
            SourceError::Record(e) => return e,
            SourceError::DamagedSpec(_) => return Error::usage(message),
            SourceError::NotAFolder(_) => {
                "give the folder of a run (vrambisect run --output) or of a bisect session".into()
            }
            SourceError::Neither(_) => {
                "give the folder that vrambisect run --output or vrambisect bisect --output made"
                    .into()
            }
            SourceError::RunsElsewhere(_) => {
                "report on the session folder itself, with its runs/ inside it".into()
            }
            SourceError::NoRunsYet { command, .. } => {
                format!("continue it with vrambisect {command} --resume, then report")
            }
        };
        Error::usage(message).hint(hint)
    }
}

/// A session's runs, or the error that it has none yet.
fn no_runs_yet(
    runs: Vec<RunDir>,
    dir: &Path,
    command: &'static str,
    skipped: &[(String, Skipped)],
) -> Result<Vec<RunDir>, SourceError> {
    if runs.is_empty() && skipped.iter().any(|(name, _)| name.starts_with("runs")) {
        return Err(SourceError::RunsElsewhere(dir.to_path_buf()));
    }
    if runs.is_empty() {
        return Err(SourceError::NoRunsYet {
            command,
            dir: dir.to_path_buf(),
        });
    }
    Ok(runs)
}

/// Opens a run folder or a session folder.
pub(crate) fn open(dir: &Path) -> Result<Source, SourceError> {
    if !dir.is_dir() {
        return Err(SourceError::NotAFolder(dir.to_path_buf()));
    }
    let dir = crate::paths::canonical(dir);
    let mut skipped = Vec::new();
    let (bisect, regress) = (SessionDir::bisect(&dir), SessionDir::regress(&dir));
    if present(&bisect.spec()) {
        let spec: Option<SessionSpec> = load_json(&dir, &bisect.spec(), &mut skipped);
        if spec.is_none() && skipped.is_empty() {
            return Err(SourceError::DamagedSpec(bisect.spec()));
        }
        let runs = {
            let runs = run_dirs(&dir, &mut skipped);
            no_runs_yet(runs, &dir, "bisect", &skipped)?
        };
        return Ok(Source {
            kind: SourceKind::Bisect,
            result: load_json(&dir, &bisect.result(), &mut skipped),
            regress: None,
            spec,
            runs,
            dir,
            skipped,
        });
    }
    if present(&regress.spec()) {
        let mut runs = {
            let runs = run_dirs(&dir, &mut skipped);
            no_runs_yet(runs, &dir, "regress", &skipped)?
        };
        // `--then-bisect`: the bisect of the flags on the first bad commit, in `bisect/`.
        let bisect = regress.then_bisect();
        let name = relative(&dir, bisect.root());
        if inside::is_dir(&dir, bisect.root()) {
            let mut inner = LeftOut::new();
            for mut r in run_dirs(bisect.root(), &mut inner) {
                r.label = format!("{name}-{}", r.label);
                runs.push(r);
            }
            skipped.extend(
                inner
                    .into_iter()
                    .map(|(inner_name, why)| (format!("{name}/{inner_name}"), why)),
            );
        }
        let journal_path = regress.journal();
        let journal = match inside::check(&dir, &journal_path) {
            Ok(()) => crate::regress::read_journal(&journal_path),
            Err(why) => {
                if why.worth_saying() {
                    skipped.push((relative(&dir, &journal_path), why));
                }
                Vec::new()
            }
        };
        return Ok(Source {
            kind: SourceKind::Regress,
            regress: Some(Regress {
                result: load_json(&dir, &regress.result(), &mut skipped),
                journal,
                spec: load_json(&dir, &regress.spec(), &mut skipped),
            }),
            result: None,
            spec: None,
            runs,
            dir,
            skipped,
        });
    }
    if present(&dir.join(folder::RECORD)) {
        let record = match inside::check(&dir, &dir.join(folder::RECORD)) {
            // A damaged record is an error of its own.
            Ok(()) => Some(RunRecord::load(&dir)?),
            Err(why) => {
                skipped.push((folder::RECORD.into(), why));
                None
            }
        };
        return Ok(Source {
            kind: SourceKind::Run,
            runs: vec![RunDir {
                label: "001".into(),
                record,
                dir: dir.clone(),
            }],
            spec: None,
            result: None,
            regress: None,
            dir,
            skipped,
        });
    }
    Err(SourceError::Neither(dir))
}

impl Source {
    /// The run that shows the failure: the baseline's first failing run for a bisect (or the
    /// first failing run), the run itself otherwise.
    pub(crate) fn failing(&self) -> Option<&RunDir> {
        let by_dirs = |dirs: &[PathBuf], want: &dyn Fn(Outcome) -> bool| {
            dirs.iter().find_map(|d| {
                let name = d.file_name()?.to_string_lossy().into_owned();
                self.runs
                    .iter()
                    .find(|r| r.label == name && r.outcome().is_some_and(want))
            })
        };
        if let Some(r) = &self.regress
            && let Some(res) = &r.result
            && let Some(fb) = &res.first_bad
            && let Some(run) = by_dirs(&r.runs_of(&fb.commit), &|o| o != Outcome::Pass)
        {
            return Some(run);
        }
        if let Some(res) = &self.result {
            let target = res.baseline.outcome;
            if let Some(c) = res.configs.iter().find(|c| c.flags == res.baseline.flags)
                && let Some(r) = by_dirs(&c.run_dirs, &|o| o == target && o != Outcome::Pass)
            {
                return Some(r);
            }
        }
        self.runs
            .iter()
            .find(|r| r.outcome().is_some_and(|o| o != Outcome::Pass))
            .or_else(|| self.runs.iter().find(|r| r.record.is_some()))
    }

    /// A run that passed: the verdict's configuration for a bisect, else any passing run.
    pub(crate) fn passing(&self) -> Option<&RunDir> {
        if self.kind == SourceKind::Run {
            return None;
        }
        if let Some(r) = &self.regress {
            let lg = r.result.as_ref().and_then(|res| res.last_good.as_ref())?;
            return r.runs_of(&lg.commit).iter().find_map(|d| {
                let name = d.file_name()?.to_string_lossy().into_owned();
                self.runs
                    .iter()
                    .find(|x| x.label == name && x.outcome() == Some(Outcome::Pass))
            });
        }
        if let Some(res) = &self.result
            && let Some(flags) = &res.verdict.flags
            && let Some(c) = res.configs.iter().find(|c| &c.flags == flags)
        {
            let found = c.run_dirs.iter().find_map(|d| {
                let name = d.file_name()?.to_string_lossy().into_owned();
                self.runs
                    .iter()
                    .find(|r| r.label == name && r.outcome() == Some(Outcome::Pass))
            });
            if found.is_some() {
                return found;
            }
        }
        self.runs
            .iter()
            .rev()
            .find(|r| r.outcome() == Some(Outcome::Pass))
    }

    /// The run a bundle's environment facts come from: the failing one.
    pub(crate) fn primary(&self) -> Option<&RunDir> {
        self.failing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neither_run_nor_session() {
        let tmp = tempfile::tempdir().unwrap();
        let e = open(tmp.path()).unwrap_err();
        assert!(
            matches!(&e, SourceError::Neither(d) if *d == crate::paths::canonical(tmp.path())),
            "{e}"
        );
        let nope = tmp.path().join("nope");
        let e = open(&nope).unwrap_err();
        assert!(
            matches!(&e, SourceError::NotAFolder(d) if *d == nope),
            "{e}"
        );
        // As the user reads it.
        assert_eq!(
            Error::from(e).to_string(),
            format!(
                "{} is not a folder (give the folder of a run (vrambisect run --output) or of a bisect session)",
                nope.display()
            )
        );
    }
}
