//! Child processes, in one place: one exit status ([`ExitStatus`]), one way to start a child
//! in its own process group and stop it with nothing left behind ([`Child`]), and one way to
//! run a short command with a time limit ([`output_with_timeout`]).
//!
//! ComfyUI, the command `sample` follows and the Python probes all start here. What depends
//! on the operating system (process groups, signals, the parent-death signal, `/proc`) is in
//! [`sys`]; a Windows implementation goes beside it, behind the same functions.

mod child;
mod status;
pub(crate) mod sys;

pub use child::{
    Child, Output, OutputLine, Spec, Stream, Teardown, enable_guardian, guardian, guardian_command,
};
pub use status::{ExitStatus, signal_name};

use std::time::{Duration, Instant};

/// Runs `expr` with stdin closed and both streams captured, for at most `timeout`.
/// `Ok(None)`: it did not finish in time and was killed.
pub fn output_with_timeout(
    expr: duct::Expression,
    timeout: Duration,
) -> std::io::Result<Option<std::process::Output>> {
    let handle = expr
        .stdin_null()
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .start()?;
    let started = Instant::now();
    loop {
        if let Some(output) = handle.try_wait()? {
            return Ok(Some(output.clone()));
        }
        if started.elapsed() > timeout {
            let _ = handle.kill();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last non-empty line of a child's stderr (what a one-line error should quote).
pub fn last_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Needs sh and sleep.
    #[cfg(unix)]
    #[test]
    fn a_command_that_finishes_gives_its_output() {
        let out = output_with_timeout(
            duct::cmd!("sh", "-c", "echo hi; echo oops >&2; exit 3"),
            Duration::from_secs(10),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.stdout, b"hi\n");
        assert_eq!(last_line(&out.stderr), "oops");
        assert_eq!(ExitStatus::from(&out.status).code, Some(3));
    }

    // Needs sh and sleep.
    #[cfg(unix)]
    #[test]
    fn a_command_past_its_time_is_killed() {
        let started = Instant::now();
        let out =
            output_with_timeout(duct::cmd!("sleep", "30"), Duration::from_millis(200)).unwrap();
        assert!(out.is_none());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_missing_program_is_an_error_not_a_timeout() {
        let err = output_with_timeout(duct::cmd!("/nonexistent/prog"), Duration::from_secs(1))
            .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
