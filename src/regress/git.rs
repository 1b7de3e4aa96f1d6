//! The user's ComfyUI checkout, read only: every command here reads history (`rev-parse`,
//! `rev-list`, `show`, `log`, `archive`) and none writes to the repository, its index, its
//! working tree, its stash or its bisect state.

use crate::error::Error;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What went wrong with git.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git could not be started.
    #[error("cannot run git: {0}")]
    NoGit(#[source] std::io::Error),
    #[error("git {args} took too long")]
    TooLong { args: String },
    /// git ran and failed: the last line it said.
    #[error("git {args}: {said}")]
    Failed { args: String, said: String },
    #[error("{} is not a git checkout: {source}", dir.display())]
    NotACheckout {
        dir: PathBuf,
        #[source]
        source: Box<GitError>,
    },
    #[error("{rev} is not a commit of {}", dir.display())]
    NotACommit {
        rev: String,
        dir: PathBuf,
        #[source]
        source: Box<GitError>,
    },
    /// `git archive | tar` could not be started.
    #[error("cannot run git archive | tar: {0}")]
    NoArchive(#[source] std::io::Error),
    #[error("git archive took too long")]
    ArchiveTooLong,
    #[error("cannot export {commit}: {said}")]
    Export { commit: String, said: String },
}

impl From<GitError> for Error {
    fn from(e: GitError) -> Error {
        let message = e.to_string();
        match e {
            GitError::NoGit(_) => Error::environment(message).hint("install git"),
            GitError::TooLong { .. }
            | GitError::NoArchive(_)
            | GitError::ArchiveTooLong
            | GitError::Export { .. } => Error::environment(message),
            GitError::Failed { .. } => Error::usage(message),
            GitError::NotACheckout { .. } => Error::usage(message).hint(
                "regress needs ComfyUI's git history: a clone of https://github.com/Comfy-Org/ComfyUI (the portable build's ComfyUI folder is one when it was updated with git)",
            ),
            GitError::NotACommit { .. } => Error::usage(message).hint(
                "give a tag (v0.3.64), a branch or a commit id; `git -C DIR log --oneline --first-parent` lists them",
            ),
        }
    }
}

type Result<T> = std::result::Result<T, GitError>;

/// A git checkout of ComfyUI.
#[derive(Debug, Clone)]
pub(crate) struct Repo {
    pub dir: PathBuf,
}

/// What a commit is, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    pub commit: String,
    pub subject: String,
    /// `comfyui_version.py` (or `pyproject.toml`) at that commit.
    pub version: Option<String>,
    /// The committer date, `2026-05-02`.
    pub date: String,
}

impl CommitInfo {
    /// `abc1234`.
    pub fn short(&self) -> &str {
        abbrev(&self.commit, 7)
    }
}

pub(crate) use crate::text::abbrev;

const GIT_TIMEOUT: Duration = Duration::from_secs(120);

impl Repo {
    /// The checkout at `dir` (its top level); an error that says what to do when it is not one.
    pub(crate) fn open(dir: &Path) -> Result<Repo> {
        let repo = Repo {
            dir: dir.to_path_buf(),
        };
        match repo.git(&["rev-parse", "--show-toplevel"]) {
            Ok(top) => Ok(Repo {
                dir: PathBuf::from(top.trim()),
            }),
            Err(e) => Err(GitError::NotACheckout {
                dir: dir.to_path_buf(),
                source: Box::new(e),
            }),
        }
    }

    /// Runs `git -C DIR ARGS`, returning its standard output.
    pub(crate) fn git(&self, args: &[&str]) -> Result<String> {
        let mut all: Vec<std::ffi::OsString> = vec!["-C".into(), self.dir.clone().into()];
        all.extend(args.iter().map(|a| std::ffi::OsString::from(*a)));
        // A pager or a credential prompt would wait for a person.
        let expr = duct::cmd("git", all)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PAGER", "cat");
        let out = crate::process::output_with_timeout(expr, GIT_TIMEOUT)
            .map_err(GitError::NoGit)?
            .ok_or_else(|| GitError::TooLong {
                args: args.join(" "),
            })?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr
                .lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("failed");
            return Err(GitError::Failed {
                args: args.join(" "),
                said: last.trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The full commit id of `rev` (a tag, a branch, a sha, `HEAD`).
    pub(crate) fn resolve(&self, rev: &str) -> Result<String> {
        let spec = format!("{rev}^{{commit}}");
        self.git(&["rev-parse", "--verify", "--quiet", &spec])
            .map(|s| s.trim().to_string())
            .map_err(|e| GitError::NotACommit {
                rev: rev.to_string(),
                dir: self.dir.clone(),
                source: Box::new(e),
            })
    }

    /// Whether `a` is an ancestor of `b`.
    pub(crate) fn is_ancestor(&self, a: &str, b: &str) -> bool {
        self.git(&["merge-base", "--is-ancestor", a, b]).is_ok()
    }

    /// The first-parent commits after `good` up to `bad`, oldest first (`bad` last): the
    /// merges of pull requests, not the commits inside them.
    pub(crate) fn first_parent(&self, good: &str, bad: &str) -> Result<Vec<String>> {
        let range = format!("{good}..{bad}");
        Ok(self
            .git(&["rev-list", "--first-parent", "--reverse", &range])?
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// Every commit on `rev`'s first-parent line.
    pub(crate) fn first_parent_line(&self, rev: &str) -> Result<Vec<String>> {
        Ok(self
            .git(&["rev-list", "--first-parent", rev])?
            .lines()
            .map(|l| l.trim().to_string())
            .collect())
    }

    /// A file at a commit, when it exists there.
    pub(crate) fn show(&self, commit: &str, path: &str) -> Option<String> {
        self.git(&["show", &format!("{commit}:{path}")]).ok()
    }

    /// Subject, date and version of a commit.
    pub(crate) fn info(&self, commit: &str) -> Result<CommitInfo> {
        let line = self.git(&["log", "-1", "--format=%H%x09%cs%x09%s", commit])?;
        let mut parts = line.trim_end().splitn(3, '\t');
        let full = parts.next().unwrap_or(commit).to_string();
        let date = parts.next().unwrap_or("").to_string();
        let subject = parts.next().unwrap_or("").to_string();
        let version = self
            .show(commit, "comfyui_version.py")
            .and_then(|t| version_in(&t, "__version__"))
            .or_else(|| {
                self.show(commit, "pyproject.toml")
                    .and_then(|t| version_in(&t, "version"))
            });
        Ok(CommitInfo {
            commit: full,
            subject,
            version,
            date,
        })
    }

    /// Writes the tree of `commit` into `dest` (which must exist), without touching the
    /// checkout: `git archive`, unpacked by `tar`.
    pub(crate) fn export(&self, commit: &str, dest: &Path) -> Result<()> {
        let archive = duct::cmd(
            "git",
            [
                "-C".into(),
                self.dir.clone().into_os_string(),
                "archive".into(),
                "--format=tar".into(),
                std::ffi::OsString::from(commit),
            ],
        );
        let untar = duct::cmd(
            "tar",
            [
                std::ffi::OsString::from("-x"),
                "-C".into(),
                dest.as_os_str().to_owned(),
            ],
        );
        let out = crate::process::output_with_timeout(archive.pipe(untar), GIT_TIMEOUT)
            .map_err(GitError::NoArchive)?
            .ok_or(GitError::ArchiveTooLong)?;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(GitError::Export {
                commit: commit.to_string(),
                said: stderr
                    .lines()
                    .last()
                    .unwrap_or("git archive failed")
                    .to_string(),
            });
        }
        Ok(())
    }

    /// ComfyUI's page on GitHub when `origin` is it.
    pub(crate) fn github(&self) -> Option<String> {
        let url = self.git(&["remote", "get-url", "origin"]).ok()?;
        let lower = url.to_ascii_lowercase();
        (lower.contains("comfy-org/comfyui") || lower.contains("comfyanonymous/comfyui"))
            .then(|| "https://github.com/Comfy-Org/ComfyUI".to_string())
    }
}

/// `KEY = "X"` in a Python or TOML file.
fn version_in(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(key)?.trim_start().strip_prefix('=')?;
        let v = rest.trim().trim_matches(|c| c == '"' || c == '\'');
        (!v.is_empty()).then(|| v.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abbreviated_id_never_panics() {
        assert_eq!(abbrev("85bd36f0000000000000000", 7), "85bd36f");
        assert_eq!(abbrev("85b", 7), "85b");
        assert_eq!(abbrev("", 7), "");
        assert_eq!(abbrev("éééééééééé", 7), "ééééééé");
    }

    #[test]
    fn versions_from_files() {
        let py = "# generated\n__version__ = \"0.38.1\"\n";
        assert_eq!(version_in(py, "__version__").as_deref(), Some("0.38.1"));
        let toml = "[project]\nname = \"ComfyUI\"\nversion = \"0.3.64\"\n";
        assert_eq!(version_in(toml, "version").as_deref(), Some("0.3.64"));
        assert_eq!(version_in("x = 1", "version"), None);
    }
}
