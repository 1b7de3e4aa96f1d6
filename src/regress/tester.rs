//! The live tester of a regress session: each commit exported into the session, its
//! requirement pins against the Python (an environment of its own where they differ), run
//! as `bisect` would run a configuration, and journaled; shortened runs where they hold.

use super::git::Repo;
use super::result::EnvironmentUse;
use super::{Mark, Spec, Tested, env, git, journal, search, tree};
use crate::error::{Error, ErrorKind, Result};
use crate::outcome::Outcome;
use crate::run::record::RunKind;
use crate::run::{self, RunOptions, Target};
use crate::session::SessionDir;
use crate::session::failure::FailedAt;
use crate::signals::{self, Stop};
use crate::workflow::quick::Quick;
use std::path::{Path, PathBuf};

/// The session in progress.
pub(super) struct Session<'a> {
    pub(super) spec: Spec,
    pub(super) dir: PathBuf,
    pub(super) repo: Repo,
    pub(super) journal: Vec<Tested>,
    pub(super) runs: u32,
    pub(super) progress: &'a mut dyn FnMut(&str),
    pub(super) stopped: bool,
    /// How often each commit was asked about in this process (a flaky search asks again).
    pub(super) asked: std::collections::HashMap<String, usize>,
    /// The environments had in this process, by their pins (or why one cannot be had).
    pub(super) envs: std::collections::BTreeMap<
        Vec<(String, String)>,
        std::result::Result<EnvironmentUse, String>,
    >,
}

impl Session<'_> {
    /// What the journal says of `commit`: its last test; in a flaky search, the test that
    /// answered the same ask before (the n-th ask of a commit is its n-th test), so a resumed
    /// session replays its journal in order and runs only what it had not.
    pub(super) fn known(&mut self, commit: &str, run_kind: RunKind) -> Option<Tested> {
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
    pub(super) fn test(
        &mut self,
        commit: &str,
        kind: Option<Outcome>,
        run_kind: RunKind,
    ) -> Result<Tested> {
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

    pub(super) fn run_commit(
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

/// One more than the highest numbered run folder in `runs`.
pub(super) fn next_run_number(runs: &Path) -> u32 {
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
pub(super) fn stop_of(e: Error) -> search::Stop {
    if e.kind == ErrorKind::Environment {
        search::Stop::Failed(e)
    } else {
        search::Stop::Incomplete
    }
}
