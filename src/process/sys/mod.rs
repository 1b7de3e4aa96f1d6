//! The operating system's side of process control, one interface with a Unix and a Windows
//! side: start a child in a group of its own that cannot outlive this tool, ask the group to
//! stop or kill it, tell whether it is alive, read what it read from disk.
//!
//! - Unix ([`unix`]): a process group, the parent-death signal and a guardian process,
//!   SIGTERM then SIGKILL to the group, `/proc`.
//! - Windows ([`windows`]): a new console process group inside a Job Object that kills
//!   everything in it when its last handle closes (also when this tool is killed),
//!   `CTRL_BREAK_EVENT` to the group then the job's termination, the job's accounting.

use std::time::{Duration, Instant};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub(crate) use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub(crate) use windows::*;

/// A polite request to stop, or an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Terminate,
    Kill,
}

/// Waits (at most `limit`) until group `pgid` is gone; whether it is.
pub(crate) fn wait_group_gone(pgid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while group_alive(pgid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}
