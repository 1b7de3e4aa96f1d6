//! Process control on Unix: process groups, signals, the parent-death signal and a
//! guardian process, `/proc`.

use super::Signal;

/// Makes `cmd` start a new process group (its pid becomes the group id) and, on Linux, die
/// with SIGKILL if this tool dies without cleaning up (`PR_SET_PDEATHSIG`), so a killed
/// vrambisect cannot leave ComfyUI holding the GPU.
pub(crate) fn new_group(cmd: &mut std::process::Command, die_with_parent: bool) {
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

/// Sends `sig` to every process of group `pgid`. `false` only when it could not be sent to a
/// group that is there (a group already gone needs no signal).
pub(crate) fn signal_group(pgid: u32, sig: Signal) -> bool {
    let Some(pgid) = libc::pid_t::try_from(pgid).ok().filter(|&p| p > 0) else {
        return false;
    };
    let sig = match sig {
        Signal::Terminate => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    let sent = unsafe { libc::killpg(pgid, sig) } == 0;
    sent || std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Whether any process with process group id `pgid` exists (zombies not yet reaped count).
pub(crate) fn group_alive(pgid: u32) -> bool {
    let Some(pgid) = libc::pid_t::try_from(pgid).ok().filter(|&p| p > 0) else {
        return false;
    };
    unsafe { libc::killpg(pgid, 0) == 0 }
}

/// Whether `pid` is a live process (a zombie waiting for its parent is not).
pub(crate) fn pid_alive(pid: u32) -> bool {
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
pub(crate) fn group_read_bytes(pgid: u32) -> Option<u64> {
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
pub(crate) fn signal_of(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

/// After the start: nothing to do on Unix (the group and the parent-death signal were set
/// before it).
pub(crate) fn adopt(_pid: u32, _die_with_parent: bool) {}

/// When the child is done with: nothing to release on Unix.
pub(crate) fn release(_pgid: u32) {}

/// Whether a launch needs a guardian process to end its group if this tool is killed: on
/// Unix yes, since the parent-death signal only reaches the direct child (a wrapper script
/// that does not `exec` keeps ComfyUI out of its reach).
pub(crate) const NEEDS_GUARDIAN: bool = true;

/// This very binary, even if the file was replaced or removed since it started.
pub(crate) fn self_exe() -> Option<std::path::PathBuf> {
    let self_exe = std::path::PathBuf::from("/proc/self/exe");
    if self_exe.exists() {
        Some(self_exe)
    } else {
        std::env::current_exe().ok()
    }
}

/// Puts the guardian in a group of its own.
pub(crate) fn guardian_group(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
}

/// This process's own group.
pub(crate) fn own_group() -> u32 {
    unsafe { libc::getpgrp() as u32 }
}

/// Makes the guardian deaf to Ctrl-C, SIGTERM and a closed terminal.
pub(crate) fn ignore_stop_signals() {
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}
