//! How a process ended: its exit code or the signal that ended it, as one serialisable type
//! used by the classifier, the run record, `sample` and the bisect journal.

use serde::{Deserialize, Serialize};

/// How a process ended: `code` when it exited, `signal` when a signal ended it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// An exit with `code`.
    pub fn code(code: i32) -> ExitStatus {
        ExitStatus {
            code: Some(code),
            signal: None,
        }
    }

    /// An end by `signal`.
    pub fn signal(signal: i32) -> ExitStatus {
        ExitStatus {
            code: None,
            signal: Some(signal),
        }
    }

    /// "exit 2", "SIGKILL".
    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (_, Some(sig)) => signal_name(sig),
            (Some(code), None) => format!("exit {code}"),
            (None, None) => "an unknown status".into(),
        }
    }

    /// The status a shell reports: the code, or 128 + the signal.
    pub fn shell_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => crate::error::exit::FAILED,
        }
    }
}

impl From<&std::process::ExitStatus> for ExitStatus {
    fn from(status: &std::process::ExitStatus) -> ExitStatus {
        ExitStatus {
            code: status.code(),
            signal: super::sys::signal_of(status),
        }
    }
}

/// The POSIX name of a signal number.
pub fn signal_name(sig: i32) -> String {
    match sig {
        2 => "SIGINT".into(),
        6 => "SIGABRT".into(),
        9 => "SIGKILL".into(),
        11 => "SIGSEGV".into(),
        15 => "SIGTERM".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_as_a_person_and_a_shell_see_them() {
        assert_eq!(ExitStatus::code(2).describe(), "exit 2");
        assert_eq!(ExitStatus::signal(9).describe(), "SIGKILL");
        assert_eq!(ExitStatus::signal(64).describe(), "signal 64");
        assert_eq!(ExitStatus::code(3).shell_code(), 3);
        assert_eq!(ExitStatus::signal(15).shell_code(), 143);
        let none = ExitStatus {
            code: None,
            signal: None,
        };
        assert_eq!(none.describe(), "an unknown status");
        assert_eq!(none.shell_code(), 1);
    }

    #[test]
    fn the_serialised_form_is_the_run_records() {
        let json = serde_json::to_string(&ExitStatus::signal(15)).unwrap();
        assert_eq!(json, r#"{"code":null,"signal":15}"#);
    }
}
