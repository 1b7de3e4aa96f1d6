//! The tool's error type and its exit codes, documented in one place.

use std::fmt;

/// Exit codes of every command (the table in README.md). `run` follows `git bisect run`
/// (0 / 1 / 125).
pub(crate) mod exit {
    /// Success: the command did what was asked (`run`: the workflow passed; `bisect`: a fix
    /// or a cause was found; `doctor`: no check failed; `logscan`: the log shows no failure).
    pub(crate) const OK: i32 = 0;
    /// The question got a negative answer: `run` saw the workflow fail; `bisect` found no fix
    /// or could not reproduce the failure; `explain` predicts that ComfyUI refuses the flags;
    /// `doctor` has a failing check; `logscan` found a failure.
    pub(crate) const FAILED: i32 = 1;
    /// Bad command line or bad input the user can fix (a missing file, a malformed workflow).
    pub(crate) const USAGE: i32 = 2;
    /// The environment is unusable: the ComfyUI install or its Python cannot be run.
    pub(crate) const ENVIRONMENT: i32 = 3;
    /// `run`/`bisect`: the workflow could not be tested (invalid workflow, ComfyUI would not start).
    pub(crate) const UNTESTABLE: i32 = 125;
    /// Interrupted by Ctrl-C; everything finished so far was kept.
    pub(crate) const INTERRUPTED: i32 = 130;
}

/// What kind of failure an [`Error`] is; decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad arguments or input files ([`exit::USAGE`]).
    Usage,
    /// The install or machine cannot be used ([`exit::ENVIRONMENT`]).
    Environment,
    /// The workflow cannot be tested ([`exit::UNTESTABLE`]).
    Untestable,
    /// Stopped by the user ([`exit::INTERRUPTED`]).
    Interrupted,
}

/// An error with a one-line message and, where there is one, what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub hint: Option<String>,
    /// What the operating system said, when a file could not be read or written (a full
    /// disk is [`std::io::ErrorKind::StorageFull`]): for the caller to decide, not the words.
    pub io: Option<std::io::ErrorKind>,
}

impl Error {
    pub fn usage(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Usage,
            message: message.into(),
            hint: None,
            io: None,
        }
    }

    pub fn environment(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Environment,
            message: message.into(),
            hint: None,
            io: None,
        }
    }

    pub fn untestable(message: impl Into<String>) -> Error {
        Error {
            kind: ErrorKind::Untestable,
            message: message.into(),
            hint: None,
            io: None,
        }
    }

    /// Adds the "what to do" half of the line.
    pub fn hint(mut self, hint: impl Into<String>) -> Error {
        self.hint = Some(hint.into());
        self
    }

    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Usage => exit::USAGE,
            ErrorKind::Environment => exit::ENVIRONMENT,
            ErrorKind::Untestable => exit::UNTESTABLE,
            ErrorKind::Interrupted => exit::INTERRUPTED,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, " ({hint})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

/// What the operating system said, in a few words ("no such file or folder").
pub(crate) fn io_reason(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "no such file or folder".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        std::io::ErrorKind::StorageFull => "the disk is full".to_string(),
        _ => err.to_string(),
    }
}

impl Error {
    /// The error a failed read or write renders to: `message`, the machine's fault for a full
    /// disk (with what to do), else the user's input; either way what the system said.
    pub(crate) fn from_io(message: String, err: &std::io::Error) -> Error {
        match err.kind() {
            // The machine's state, not the user's input.
            std::io::ErrorKind::StorageFull => Error {
                io: Some(err.kind()),
                ..Error::environment(message).hint("free some space on that disk, then try again")
            },
            kind => Error {
                io: Some(kind),
                ..Error::usage(message)
            },
        }
    }
}

/// Shortens a path-bearing I/O error to one line: "cannot read FILE: reason".
pub(crate) fn io_error(action: &str, path: &std::path::Path, err: &std::io::Error) -> Error {
    Error::from_io(
        format!("cannot {action} {}: {}", path.display(), io_reason(err)),
        err,
    )
}
