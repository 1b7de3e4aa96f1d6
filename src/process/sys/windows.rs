//! Process control on Windows.
//!
//! A child starts in a console process group of its own (`CREATE_NEW_PROCESS_GROUP`: its pid
//! is the group id, and the user's Ctrl-C does not reach it, so vrambisect decides), and is
//! put at once into a Job Object made with `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`. Everything
//! the child starts joins the job, and when vrambisect's handle to it closes (its own end,
//! a crash, Task Manager's "End task") Windows ends every process in it: no guardian process
//! is needed. A polite stop is `CTRL_BREAK_EVENT` to the group; the order is
//! `TerminateJobObject`. The job's accounting says whether any process is left and how many
//! bytes they read.
//!
//! Between the start and the assignment to the job the child runs outside it for a moment;
//! a Python interpreter starts nothing in that time.

use super::Signal;
use std::collections::HashMap;
use std::sync::Mutex;
use windows_sys::Win32::Foundation::{CloseHandle, HANDLE, STILL_ACTIVE};
use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, GenerateConsoleCtrlEvent};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION,
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION, JobObjectBasicAccountingInformation,
    JobObjectBasicAndIoAccountingInformation, JobObjectExtendedLimitInformation,
    QueryInformationJobObject, SetInformationJobObject, TerminateJobObject,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NEW_PROCESS_GROUP, GetExitCodeProcess, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    PROCESS_SET_QUOTA, PROCESS_TERMINATE, TerminateProcess,
};

/// The jobs of the groups started here, by group id (the handles as integers: a HANDLE is a
/// pointer, which a static may not hold).
static JOBS: Mutex<Option<HashMap<u32, isize>>> = Mutex::new(None);

fn job_of(pgid: u32) -> Option<HANDLE> {
    let jobs = JOBS.lock().ok()?;
    jobs.as_ref()?.get(&pgid).map(|h| *h as HANDLE)
}

/// Makes `cmd` start a new console process group. The job comes after the start
/// ([`adopt`]).
pub(crate) fn new_group(cmd: &mut std::process::Command, _die_with_parent: bool) {
    use std::os::windows::process::CommandExt;
    cmd.creation_flags(CREATE_NEW_PROCESS_GROUP);
}

/// Puts the process `pid` (just started by [`new_group`]) into a job, which ends it with
/// this tool when `die_with_parent`. When that fails (the process already in a job that
/// forbids it, on old Windows), the group is still stopped by its pid, only not when this
/// tool is killed.
pub(crate) fn adopt(pid: u32, die_with_parent: bool) {
    // SAFETY: plain Win32 calls on handles this function owns; every handle is closed or
    // kept in JOBS.
    unsafe {
        let job = CreateJobObjectW(std::ptr::null(), std::ptr::null());
        if job.is_null() {
            return;
        }
        let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = std::mem::zeroed();
        if die_with_parent {
            limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        }
        let set = SetInformationJobObject(
            job,
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        );
        let process = OpenProcess(PROCESS_SET_QUOTA | PROCESS_TERMINATE, 0, pid);
        let assigned =
            !process.is_null() && set != 0 && AssignProcessToJobObject(job, process) != 0;
        if !process.is_null() {
            CloseHandle(process);
        }
        if !assigned {
            CloseHandle(job);
            return;
        }
        if let Ok(mut jobs) = JOBS.lock() {
            jobs.get_or_insert_with(HashMap::new)
                .insert(pid, job as isize);
        }
    }
}

/// Closes the job of group `pgid` (which ends what is left in it, when it was made to).
pub(crate) fn release(pgid: u32) {
    let job = JOBS
        .lock()
        .ok()
        .and_then(|mut jobs| jobs.as_mut()?.remove(&pgid));
    if let Some(job) = job {
        // SAFETY: the handle came from CreateJobObjectW and is closed once.
        unsafe {
            CloseHandle(job as HANDLE);
        }
    }
}

/// Asks group `pgid` to stop (`CTRL_BREAK_EVENT`), or ends every process in its job.
/// Whether the request itself went out: without a console shared with the group there is no
/// polite way, and the group is ended at once (`false`).
pub(crate) fn signal_group(pgid: u32, sig: Signal) -> bool {
    if pgid == 0 {
        return false;
    }
    // SAFETY: Win32 calls with a job handle kept in JOBS or a process handle closed here.
    unsafe {
        if sig == Signal::Terminate && GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, pgid) != 0 {
            return true;
        }
        let ended = match job_of(pgid) {
            Some(job) => TerminateJobObject(job, 1) != 0,
            None => {
                let p = OpenProcess(PROCESS_TERMINATE, 0, pgid);
                let ended = !p.is_null() && TerminateProcess(p, 1) != 0;
                if !p.is_null() {
                    CloseHandle(p);
                }
                ended
            }
        };
        sig == Signal::Kill && ended
    }
}

/// Reads one of the job's information classes into `T` (a plain C structure).
fn query<T>(job: HANDLE, class: i32) -> Option<T> {
    // SAFETY: the buffer is a zeroed T of the size given; the job handle is kept in JOBS.
    unsafe {
        let mut info: T = std::mem::zeroed();
        let ok = QueryInformationJobObject(
            job,
            class,
            (&mut info as *mut T).cast(),
            std::mem::size_of::<T>() as u32,
            std::ptr::null_mut(),
        );
        (ok != 0).then_some(info)
    }
}

/// Whether any process of group `pgid` is left: its job's active processes, or the group's
/// first process where there is no job.
pub(crate) fn group_alive(pgid: u32) -> bool {
    let basic = job_of(pgid).and_then(|job| {
        query::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>(job, JobObjectBasicAccountingInformation)
    });
    match basic {
        Some(info) => info.ActiveProcesses > 0,
        None => pid_alive(pgid),
    }
}

/// Whether `pid` is a running process.
pub(crate) fn pid_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: the handle is checked and closed here.
    unsafe {
        let p = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
        if p.is_null() {
            return false;
        }
        let mut code = 0u32;
        let ok = GetExitCodeProcess(p, &mut code);
        CloseHandle(p);
        ok != 0 && code == STILL_ACTIVE as u32
    }
}

/// Bytes the processes of group `pgid` have read so far (the job's I/O accounting: files
/// and devices), or `None` without a job.
pub(crate) fn group_read_bytes(pgid: u32) -> Option<u64> {
    job_of(pgid)
        .and_then(|job| {
            query::<JOBOBJECT_BASIC_AND_IO_ACCOUNTING_INFORMATION>(
                job,
                JobObjectBasicAndIoAccountingInformation,
            )
        })
        .map(|info| info.IoInfo.ReadTransferCount)
}

/// No signals on Windows.
pub(crate) fn signal_of(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

/// The job ends the group when this tool dies: no guardian.
pub(crate) const NEEDS_GUARDIAN: bool = false;

pub(crate) fn self_exe() -> Option<std::path::PathBuf> {
    std::env::current_exe().ok()
}

pub(crate) fn guardian_group(cmd: &mut std::process::Command) {
    new_group(cmd, false);
}

pub(crate) fn own_group() -> u32 {
    std::process::id()
}

pub(crate) fn ignore_stop_signals() {}
