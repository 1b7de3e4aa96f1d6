//! The operating system's side of process control (Unix): process groups, signals, the
//! parent-death signal, whether a pid or a group is alive.

use std::time::{Duration, Instant};

/// Makes `cmd` start a new process group (its pid becomes the group id) and, on Linux, die
/// with SIGKILL if this tool dies without cleaning up (`PR_SET_PDEATHSIG`), so a killed
/// vrambisect cannot leave ComfyUI holding the GPU.
pub fn new_group(cmd: &mut std::process::Command, die_with_parent: bool) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    #[cfg(target_os = "linux")]
    if die_with_parent {
        let parent = unsafe { libc::getpid() };
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The parent may have died between fork and prctl.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = die_with_parent;
}

/// A polite request to stop, or an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Terminate,
    Kill,
}

/// Sends `sig` to every process of group `pgid`.
pub fn signal_group(pgid: u32, sig: Signal) {
    let Some(pgid) = libc::pid_t::try_from(pgid).ok().filter(|&p| p > 0) else {
        return;
    };
    let sig = match sig {
        Signal::Terminate => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    unsafe {
        libc::killpg(pgid, sig);
    }
}

/// Whether any process with process group id `pgid` exists (zombies not yet reaped count).
pub fn group_alive(pgid: u32) -> bool {
    let Some(pgid) = libc::pid_t::try_from(pgid).ok().filter(|&p| p > 0) else {
        return false;
    };
    unsafe { libc::killpg(pgid, 0) == 0 }
}

/// Waits (at most `limit`) until group `pgid` is gone; whether it is.
pub fn wait_group_gone(pgid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while group_alive(pgid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Whether `pid` is a live process (a zombie waiting for its parent is not).
pub fn pid_alive(pid: u32) -> bool {
    // 0 and negative pids mean process groups to kill(2).
    let Some(p) = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0) else {
        return false;
    };
    let r = unsafe { libc::kill(p, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_ascii_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        // No /proc (not Linux): kill(0) said it exists.
        Err(_) => !std::path::Path::new("/proc/self").exists(),
    }
}

/// Bytes the processes of group `pgid` have read from storage so far (`/proc/PID/io`,
/// `read_bytes`), or `None` where that cannot be read.
pub fn group_read_bytes(pgid: u32) -> Option<u64> {
    let mut total = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Field 5, after the parenthesised command name: the process group.
        let in_group = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_ascii_whitespace().nth(2))
            .and_then(|g| g.parse::<u32>().ok())
            == Some(pgid);
        if !in_group {
            continue;
        }
        let Ok(io) = std::fs::read_to_string(format!("/proc/{pid}/io")) else {
            continue;
        };
        if let Some(bytes) = io
            .lines()
            .find_map(|l| l.strip_prefix("read_bytes:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            total = Some(total.unwrap_or(0) + bytes);
        }
    }
    total
}

/// The signal that ended a process, if one did.
pub fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}
