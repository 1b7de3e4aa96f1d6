//! A ComfyUI install on disk: its folder, version, Python, and the flags it accepts.

use crate::error::{Error, Result};
use crate::flags::help::{self, FlagSet};
use crate::version::{self, Version};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The interpreter chosen for an install, and where it came from.
pub(crate) use crate::locate::Chosen as Python;

/// Why a folder is not a ComfyUI install.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("ComfyUI folder {} does not exist", .0.display())]
    Missing(PathBuf),
    #[error("{} is not a folder", .0.display())]
    NotAFolder(PathBuf),
    /// No `main.py`; `inside`: the ComfyUI folder inside it that has one.
    #[error("{} is not a ComfyUI folder: it has no main.py", dir.display())]
    NoMainPy {
        dir: PathBuf,
        inside: Option<PathBuf>,
    },
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Error {
        let hint = match &e {
            OpenError::NoMainPy {
                inside: Some(inside),
                ..
            } => format!("did you mean {}?", inside.display()),
            _ => "pass --comfyui with the folder that holds ComfyUI's main.py".to_string(),
        };
        Error::usage(e.to_string()).hint(hint)
    }
}

/// Why an install's flag list could not be asked for.
#[derive(Debug, thiserror::Error)]
pub enum FlagsError {
    /// The Python could not be started (`why`: not found, or what the system said).
    #[error("cannot run Python '{}' ({chosen_by}): {why}", python.display())]
    CannotRun {
        python: PathBuf,
        chosen_by: String,
        why: String,
        #[source]
        source: std::io::Error,
    },
    #[error("'{shown}' did not finish in {secs} s")]
    TooLong { shown: String, secs: u64 },
    /// `main.py --help` failed: its exit, its last line, and what to do about it.
    #[error("'{shown}' failed ({code}): {last}")]
    Failed {
        shown: String,
        code: String,
        last: String,
        hint: String,
    },
    /// What it printed is no flag list.
    #[error("could not read the flag list printed by '{} main.py --help': {why}", python.display())]
    Unreadable { python: PathBuf, why: String },
}

impl From<FlagsError> for Error {
    fn from(e: FlagsError) -> Error {
        let message = e.to_string();
        match e {
            FlagsError::CannotRun { .. } => {
                Error::environment(message).hint("pass --python with the Python that runs ComfyUI")
            }
            FlagsError::TooLong { .. } => {
                Error::environment(message).hint("check that this Python and ComfyUI folder work")
            }
            FlagsError::Failed { hint, .. } => Error::environment(message).hint(hint),
            FlagsError::Unreadable { .. } => Error::environment(message),
        }
    }
}

/// A ComfyUI folder (the one holding `main.py`).
#[derive(Debug, Clone, Serialize)]
pub struct Install {
    pub dir: PathBuf,
    /// From `comfyui_version.py`; `None` when the file is missing or unreadable.
    pub version: Option<Version>,
}

impl Install {
    /// Checks that `dir` is a ComfyUI folder and reads its version.
    pub fn open(dir: &Path) -> Result<Install, OpenError> {
        if !dir.exists() {
            return Err(OpenError::Missing(dir.to_path_buf()));
        }
        if !dir.is_dir() {
            return Err(OpenError::NotAFolder(dir.to_path_buf()));
        }
        if !dir.join("main.py").is_file() {
            let inside = dir.join("ComfyUI");
            return Err(OpenError::NoMainPy {
                dir: dir.to_path_buf(),
                inside: inside.join("main.py").is_file().then_some(inside),
            });
        }
        let dir = crate::paths::canonical(dir);
        let version = std::fs::read_to_string(dir.join("comfyui_version.py"))
            .ok()
            .and_then(|t| version::from_version_py(&t));
        Ok(Install { dir, version })
    }

    /// Whether this is vrambisect's stand-in for ComfyUI (`fixtures/fake-comfyui`), which
    /// needs neither torch nor a GPU.
    pub fn is_stand_in(&self) -> bool {
        self.dir.join("fake_comfy").join("app.py").is_file()
    }

    /// Whether this is the repository's own copy of the stand-in, which keeps state of a run
    /// (its run counter, its simulated GPU, what ComfyUI writes to `user/` and `output/`) in
    /// its folder and so is never run in place.
    pub fn is_bundled_stand_in(&self) -> bool {
        self.is_stand_in() && self.dir.file_name().is_some_and(|n| n == "fake-comfyui")
    }

    /// A fresh copy of the stand-in in `to`, without the state a previous run left in it.
    pub fn copy_stand_in(&self, to: &Path) -> Result<Install> {
        copy_tree(&self.dir, to, true)
            .map_err(|e| crate::error::io_error("copy the stand-in to", to, &e))?;
        Ok(Install::open(to)?)
    }

    /// The Python that runs this install, and why (see [`crate::locate::python_for`]).
    pub fn python(&self, explicit: Option<&Path>) -> Python {
        crate::locate::python_for(&self.dir, explicit, crate::locate::Origin::current())
    }

    /// Asks the install for its flags by running `PYTHON main.py --help` (no torch import).
    pub fn flags(&self, python: &Python) -> Result<FlagSet, FlagsError> {
        let text = self.help_text(python)?;
        help::parse(&text).map_err(|e| FlagsError::Unreadable {
            python: python.path.clone(),
            why: e.0,
        })
    }

    fn help_text(&self, python: &Python) -> Result<String, FlagsError> {
        const TIMEOUT: Duration = Duration::from_secs(60);
        let shown = format!("{} main.py --help", python.path.display());
        // A bare name (`python3`) is looked up on PATH; duct would read a Path as `./python3`.
        let program = python.path.as_os_str().to_owned();
        let mut args = crate::boot::boot_for(&python.path, None);
        args.extend(["main.py".to_string(), "--help".to_string()]);
        let expr = duct::cmd(program, args)
            .dir(&self.dir)
            .env("COLUMNS", "100")
            .env("PYTHONIOENCODING", "utf-8");
        let output = crate::process::output_with_timeout(expr, TIMEOUT)
            .map_err(|source| FlagsError::CannotRun {
                python: python.path.clone(),
                chosen_by: python.source.clone(),
                why: if source.kind() == std::io::ErrorKind::NotFound {
                    "not found".to_string()
                } else {
                    source.to_string()
                },
                source,
            })?
            .ok_or_else(|| FlagsError::TooLong {
                shown: shown.clone(),
                secs: TIMEOUT.as_secs(),
            })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let last = crate::process::last_line(&output.stderr);
            let code = crate::process::ExitStatus::from(&output.status).describe();
            return Err(FlagsError::Failed {
                shown,
                code,
                last,
                hint: startup_hint(&stderr),
            });
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// Copies a folder, leaving out what a run of the stand-in writes into it.
fn copy_tree(from: &Path, to: &Path, top: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let state = matches!(
            name.as_ref(),
            "__pycache__" | "run-counter.txt" | "gpu-state.txt"
        ) || name.ends_with(".lock")
            || name.ends_with(".db")
            || (top && matches!(name.as_ref(), "user" | "output" | "temp" | "tests"));
        if state {
            continue;
        }
        let target = to.join(&*name);
        let kind = entry.file_type()?;
        if kind.is_symlink() {
            symlink_like(&entry.path(), &target)?;
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target, false)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// What to do about a Python that fails before ComfyUI could even print its help.
pub(crate) fn startup_hint(stderr: &str) -> String {
    if stderr.contains("No module named 'comfy_aimdo") {
        "comfy-aimdo is missing or too old: run 'pip install -r requirements.txt' with ComfyUI's Python".into()
    } else if stderr.contains("ModuleNotFoundError") {
        "a Python package is missing: run 'pip install -r requirements.txt' with ComfyUI's Python, or pass --python with the right one".into()
    } else if stderr.contains("SyntaxError") {
        "this Python is too old for this ComfyUI: pass --python with the one that runs it".into()
    } else {
        "check that this Python runs ComfyUI, or pass --python with the one that does".into()
    }
}

/// Copies a link as a link (Unix), or as a link of the same kind (Windows: to a folder or a
/// file).
fn symlink_like(link: &Path, at: &Path) -> std::io::Result<()> {
    let to = std::fs::read_link(link)?;
    #[cfg(unix)]
    return std::os::unix::fs::symlink(to, at);
    #[cfg(windows)]
    return if std::fs::metadata(link).is_ok_and(|m| m.is_dir()) {
        std::os::windows::fs::symlink_dir(to, at)
    } else {
        std::os::windows::fs::symlink_file(to, at)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_wrong_folders() {
        let tmp = tempfile::tempdir().unwrap();
        let nope = tmp.path().join("nope");
        assert_eq!(Install::open(&nope).unwrap_err(), OpenError::Missing(nope));
        let err = Install::open(tmp.path()).unwrap_err();
        assert_eq!(
            err,
            OpenError::NoMainPy {
                dir: tmp.path().to_path_buf(),
                inside: None
            }
        );
        std::fs::create_dir(tmp.path().join("ComfyUI")).unwrap();
        std::fs::write(tmp.path().join("ComfyUI/main.py"), "").unwrap();
        let err = Install::open(tmp.path()).unwrap_err();
        assert_eq!(
            Error::from(err).to_string(),
            format!(
                "{} is not a ComfyUI folder: it has no main.py (did you mean {}?)",
                tmp.path().display(),
                tmp.path().join("ComfyUI").display()
            )
        );
    }

    #[test]
    fn version_and_python_discovery() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ComfyUI");
        std::fs::create_dir_all(dir.join("venv/bin")).unwrap();
        std::fs::write(dir.join("main.py"), "").unwrap();
        std::fs::write(dir.join("comfyui_version.py"), "__version__ = \"0.3.64\"\n").unwrap();
        let install = Install::open(&dir).unwrap();
        assert_eq!(install.version, Some(Version::lit("0.3.64")));
        let on_path = if cfg!(windows) { "python" } else { "python3" };
        assert_eq!(install.python(None).source, format!("{on_path} on PATH"));
        std::fs::write(dir.join("venv/bin/python"), "").unwrap();
        assert_eq!(install.python(None).source, "the install's venv");
        std::fs::create_dir_all(tmp.path().join("python_embeded")).unwrap();
        std::fs::remove_file(dir.join("venv/bin/python")).unwrap();
        std::fs::write(tmp.path().join("python_embeded/python.exe"), "").unwrap();
        assert_eq!(
            install.python(None).source,
            "the portable build's python_embeded"
        );
        assert_eq!(install.python(Some(Path::new("/x/py"))).source, "--python");
    }

    #[test]
    fn python_that_cannot_run() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("main.py"), "").unwrap();
        let install = Install::open(tmp.path()).unwrap();
        let py = install.python(Some(Path::new("/no/such/python")));
        let err = install.flags(&py).unwrap_err();
        assert!(
            matches!(&err, FlagsError::CannotRun { why, .. } if why == "not found"),
            "{err}"
        );
        let err = Error::from(err);
        assert_eq!(err.exit_code(), crate::error::exit::ENVIRONMENT);
        // (Windows shows the path with its drive: 'C:/no/such/python'.)
        assert!(
            err.message.contains("cannot run Python '") && err.message.contains("/no/such/python'"),
            "{err}"
        );
    }

    // Needs python3 on PATH.
    #[cfg(unix)]
    #[test]
    fn python_that_fails() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("main.py"),
            "import comfy_aimdo_missing_for_test\n",
        )
        .unwrap();
        let install = Install::open(tmp.path()).unwrap();
        let err: Error = install
            .flags(&install.python(Some(Path::new("python3"))))
            .unwrap_err()
            .into();
        assert!(
            err.message.contains("failed (exit 1): ModuleNotFoundError"),
            "{err}"
        );
        assert!(
            err.hint
                .unwrap()
                .contains("pip install -r requirements.txt")
        );
    }

    // Needs python3 on PATH.
    #[cfg(unix)]
    #[test]
    fn reads_flags_from_a_real_argparse() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("main.py"),
            "import argparse\np = argparse.ArgumentParser()\ng = p.add_mutually_exclusive_group()\ng.add_argument('--highvram', action='store_true')\ng.add_argument('--lowvram', action='store_true')\np.add_argument('--reserve-vram', type=float)\np.parse_args()\n",
        )
        .unwrap();
        let install = Install::open(tmp.path()).unwrap();
        let set = install
            .flags(&install.python(Some(Path::new("python3"))))
            .unwrap();
        assert!(set.has("--reserve-vram"));
        assert_eq!(
            set.group_of("--lowvram").unwrap(),
            ["--highvram", "--lowvram"]
        );
    }
}
