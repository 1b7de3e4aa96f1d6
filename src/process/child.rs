//! A child in its own process group: started with its output read line by line (ComfyUI)
//! or passed through (the command `sample` follows), and a teardown that leaves nothing
//! behind (SIGTERM to the group, a grace period, SIGKILL, every wait bounded).

use super::ExitStatus;
use super::sys::{self, Signal};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Which output stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line of output, stamped on the run's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputLine {
    pub stream: Stream,
    /// Milliseconds since the process was started.
    pub t_ms: u64,
    /// The line as printed (without its newline).
    pub raw: String,
}

/// What a captured child's reader threads send: a line, or the end of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Line(OutputLine),
    Closed(Stream),
}

/// A child running in its own process group.
pub struct Child {
    handle: duct::Handle,
    /// The child's pid, which is also its process group id.
    pub pid: u32,
    pub started: Instant,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// Whether dropping the child kills what is left of its group (see [`Child::release`]).
    kill_on_drop: bool,
    /// The guardian's end of the pipe (see [`guard`]): closing it without a word makes the
    /// guardian kill the group.
    guardian: Option<(std::process::Child, std::process::ChildStdin)>,
}

/// How a child was stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Teardown {
    /// SIGKILL was needed after the grace period.
    pub killed: bool,
    /// No process of the child's group was left.
    pub group_empty: bool,
    /// How the child itself ended (unknown when it outlived every wait).
    pub exit: Option<ExitStatus>,
}

/// What to start.
pub struct Spec<'a> {
    pub program: &'a std::ffi::OsStr,
    pub args: &'a [String],
    pub dir: &'a Path,
    pub env: &'a [(String, String)],
}

impl Spec<'_> {
    fn expression(&self, die_with_parent: bool) -> duct::Expression {
        let mut expr = duct::cmd(self.program, self.args)
            .dir(self.dir)
            .unchecked()
            .before_spawn(move |cmd| {
                sys::new_group(cmd, die_with_parent);
                Ok(())
            });
        for (k, v) in self.env {
            expr = expr.env(k, v);
        }
        expr
    }
}

impl Child {
    /// Starts the child in a new process group; every output line goes to `log` (both
    /// streams, merged, as printed) and to `tx`. The child dies with this tool.
    pub fn spawn_captured<M>(spec: &Spec, log: &Path, tx: Sender<M>) -> std::io::Result<Child>
    where
        M: From<Output> + Send + 'static,
    {
        let (out_r, out_w) = os_pipe::pipe()?;
        let (err_r, err_w) = os_pipe::pipe()?;
        let log = Arc::new(Mutex::new(crate::private::create(log)?));
        let expr = spec
            .expression(true)
            .stdin_null()
            .stdout_file(out_w)
            .stderr_file(err_w);
        let handle = expr.start()?;
        // The expression held the pipes' write ends; dropping it lets readers see EOF.
        drop(expr);
        let mut child = Child::from_handle(handle);
        sys::adopt(child.pid, true);
        child.guardian = guard(child.pid);
        child.readers = vec![
            reader(
                out_r,
                Stream::Stdout,
                child.started,
                log.clone(),
                tx.clone(),
            ),
            reader(err_r, Stream::Stderr, child.started, log, tx),
        ];
        Ok(child)
    }

    /// Starts the child in a new process group with this tool's terminal; its stdout goes to
    /// this tool's stderr when `stdout_to_stderr` (so stdout keeps one JSON document).
    pub fn spawn_inherited(spec: &Spec, stdout_to_stderr: bool) -> std::io::Result<Child> {
        let mut expr = spec.expression(false);
        if stdout_to_stderr {
            expr = expr.stdout_to_stderr();
        }
        let child = Child::from_handle(expr.start()?);
        sys::adopt(child.pid, false);
        Ok(child)
    }

    fn from_handle(handle: duct::Handle) -> Child {
        let pid = handle.pids().first().copied().unwrap_or(0);
        Child {
            handle,
            pid,
            started: Instant::now(),
            readers: Vec::new(),
            kill_on_drop: true,
            guardian: None,
        }
    }

    /// Tells the guardian that the group was taken care of, and lets it go.
    fn dismiss_guardian(&mut self) {
        if let Some((mut process, mut pipe)) = self.guardian.take() {
            use std::io::Write;
            let _ = pipe.write_all(b"d");
            drop(pipe);
            // It exits at once; reap it (bounded, it is not worth a hang).
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = process.try_wait() {
                    return;
                }
                // It takes a millisecond or two: poll finely, teardown time is measured.
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }

    /// Lets go of a child that has exited by itself, leaving alone what it started in its
    /// group (a command `sample` followed may leave a daemon behind on purpose).
    pub fn release(mut self) {
        self.kill_on_drop = false;
    }

    /// The exit status, if the child has ended.
    pub fn try_wait(&self) -> Option<ExitStatus> {
        match self.handle.try_wait() {
            Ok(Some(out)) => Some(ExitStatus::from(&out.status)),
            _ => None,
        }
    }

    /// Polls for the leader's exit until `deadline`.
    fn wait_until(&self, deadline: Instant) -> Option<ExitStatus> {
        loop {
            if let Some(e) = self.try_wait() {
                return Some(e);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends SIGKILL to the whole group (ComfyUI is about to exhaust the machine's RAM).
    pub fn kill_group(&self) {
        sys::signal_group(self.pid, Signal::Kill);
    }

    /// Whether any process of the group is still alive.
    pub fn group_alive(&self) -> bool {
        sys::group_alive(self.pid)
    }

    /// SIGTERM to the group, up to `grace` for it to exit (cut short by a second Ctrl-C),
    /// then SIGKILL; waits until the whole group is gone (bounded).
    pub fn terminate(self, grace: Duration) -> Teardown {
        self.terminate_telling(grace, &mut || {})
    }

    /// [`terminate`](Self::terminate), calling `first_interrupt` once when the group is
    /// given its grace after a first Ctrl-C (or SIGTERM), pressed before or during it: the one
    /// who pressed it can be told that a second press ends the wait.
    pub fn terminate_telling(
        mut self,
        grace: Duration,
        first_interrupt: &mut dyn FnMut(),
    ) -> Teardown {
        let mut killed = false;
        let mut told = false;
        let mut exit = self.try_wait();
        if exit.is_none() || self.group_alive() {
            // Where no polite request can be sent, it was an order (Windows without a
            // console shared with ComfyUI's group).
            killed = !sys::signal_group(self.pid, Signal::Terminate);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline && !crate::signals::kill_now() {
                exit = exit.or_else(|| self.try_wait());
                if exit.is_some() && !self.group_alive() {
                    break;
                }
                if !told && crate::signals::requested() != crate::signals::Stop::No {
                    told = true;
                    first_interrupt();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if exit.is_none() || self.group_alive() {
                sys::signal_group(self.pid, Signal::Kill);
                killed = true;
                // Bounded: a process stuck in the GPU driver (uninterruptible sleep) may not
                // die at once, and the tool must not hang with it.
                exit = exit.or_else(|| self.wait_until(Instant::now() + Duration::from_secs(10)));
                sys::wait_group_gone(self.pid, Duration::from_secs(5));
            }
        }
        // A helper that escaped the group can keep the output pipes open; the readers then
        // never see the end. Wait for them briefly, then leave them behind (they end with
        // the pipes, or with the tool).
        let deadline = Instant::now() + Duration::from_secs(2);
        for r in self.readers.drain(..) {
            while !r.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
        let group_empty = !self.group_alive();
        if group_empty {
            self.dismiss_guardian();
        }
        Teardown {
            killed,
            group_empty,
            exit,
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Whatever path dropped us (a panic included), the group must not outlive the run.
        if self.kill_on_drop && self.group_alive() {
            sys::signal_group(self.pid, Signal::Kill);
            let _ = self.wait_until(Instant::now() + Duration::from_secs(5));
            sys::wait_group_gone(self.pid, Duration::from_secs(5));
        }
        if !self.group_alive() {
            self.dismiss_guardian();
        }
        // Windows: the job is let go of (closing it ends what is left only in a job made to
        // die with this tool, which a released child's is not).
        sys::release(self.pid);
    }
}

/// Starts this tool's guardian for group `pgid` (`vrambisect __guard PGID`), in a group of
/// its own and deaf to Ctrl-C. It waits on a pipe from this process; if the pipe closes with
/// no word (this tool was killed, SIGKILL included), it kills the group. That reaches what
/// the parent-death signal cannot: ComfyUI started by a wrapper script that does not `exec`
/// (the signal only reaches the wrapper). Only the vrambisect binary has a guardian; `None`
/// elsewhere (tests of this module run under the test harness).
fn guard(pgid: u32) -> Option<(std::process::Child, std::process::ChildStdin)> {
    if !sys::NEEDS_GUARDIAN || !GUARDIAN.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let mut cmd = std::process::Command::new(sys::self_exe()?);
    cmd.args(["__guard", &pgid.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    sys::guardian_group(&mut cmd);
    let mut process = cmd.spawn().ok()?;
    let pipe = process.stdin.take()?;
    Some((process, pipe))
}

/// Whether ComfyUI launches get a guardian: switched on by the vrambisect binary (`main`),
/// off in tests of this crate's modules, which run under the test harness.
static GUARDIAN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Gives every ComfyUI launched from now on a guardian (see [`guard`]).
pub fn enable_guardian() {
    GUARDIAN.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The guardian's command line, `vrambisect __guard PGID`, run to its end: `Some` with the
/// exit code for that command line, `None` for any other. The binary asks before it parses its
/// command line, so `__guard` is in no help, usage error or completion script.
pub fn guardian_command(args: &[std::ffi::OsString]) -> Option<i32> {
    match args {
        [_, command, pgid] if command == "__guard" => {
            let pgid = pgid.to_str()?.parse().ok()?;
            guardian(pgid);
            Some(0)
        }
        _ => None,
    }
}

/// The guardian's side (`vrambisect __guard PGID`): waits until the tool's end of the pipe
/// closes; unless the tool said the group was taken care of, kills the group. Never group 1,
/// nor its own.
pub fn guardian(pgid: u32) {
    use std::io::Read;
    if pgid <= 1 || pgid == sys::own_group() {
        return;
    }
    sys::ignore_stop_signals();
    let mut word = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut word);
    if word.first() != Some(&b'd') {
        sys::signal_group(pgid, Signal::Kill);
    }
}

fn reader<M>(
    pipe: os_pipe::PipeReader,
    stream: Stream,
    started: Instant,
    log: Arc<Mutex<File>>,
    tx: Sender<M>,
) -> std::thread::JoinHandle<()>
where
    M: From<Output> + Send + 'static,
{
    std::thread::spawn(move || {
        let mut reader = BufReader::new(pipe);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Ok(mut f) = log.lock() {
                        let _ = f.write_all(&buf);
                        if buf.last() != Some(&b'\n') {
                            let _ = f.write_all(b"\n");
                        }
                    }
                    let text = String::from_utf8_lossy(&buf);
                    let raw = text.trim_end_matches('\n').to_string();
                    let line = OutputLine {
                        stream,
                        t_ms: started.elapsed().as_millis() as u64,
                        raw,
                    };
                    let _ = tx.send(Output::Line(line).into());
                }
            }
        }
        let _ = tx.send(Output::Closed(stream).into());
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::sync::mpsc;

    use Output as Msg;

    fn sh(script: &str, dir: &Path) -> (Child, mpsc::Receiver<Output>) {
        let (tx, rx) = mpsc::channel();
        let args = vec!["-c".to_string(), script.to_string()];
        let log = dir.join("out.log");
        let spec = Spec {
            program: std::ffi::OsStr::new("sh"),
            args: &args,
            dir,
            env: &[("VB_TEST".into(), "yes".into())],
        };
        (Child::spawn_captured(&spec, &log, tx).unwrap(), rx)
    }

    #[test]
    fn lines_from_both_streams_reach_the_channel_and_the_log() {
        let tmp = tempfile::tempdir().unwrap();
        let (child, rx) = sh("echo one; echo two >&2; echo $VB_TEST", tmp.path());
        let mut lines = Vec::new();
        let mut closed = 0;
        while closed < 2 {
            match rx.recv_timeout(Duration::from_secs(5)).unwrap() {
                Msg::Line(l) => lines.push((l.stream, l.raw)),
                Msg::Closed(_) => closed += 1,
            }
        }
        assert!(lines.contains(&(Stream::Stdout, "one".into())));
        assert!(lines.contains(&(Stream::Stderr, "two".into())));
        assert!(lines.contains(&(Stream::Stdout, "yes".into())));
        let stopped = child.terminate(Duration::from_secs(1));
        assert_eq!(stopped.exit.unwrap().code, Some(0));
        assert!(!stopped.killed);
        assert!(stopped.group_empty);
        let log = std::fs::read_to_string(tmp.path().join("out.log")).unwrap();
        assert_eq!(log.lines().count(), 3);
    }

    /// The pid a shell wrote to `path`, waited for up to 5 s (the shell creates the file
    /// before it writes the number: read until it parses).
    fn pid_written(path: &std::path::Path) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let pid = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.trim().parse().ok());
            if pid.is_some() || Instant::now() >= deadline {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn terminate_reaches_grandchildren() {
        let tmp = tempfile::tempdir().unwrap();
        // A grandchild that ignores nothing and sleeps; the shell waits for it.
        let (child, _rx) = sh("sleep 30 & echo $! > grandchild.pid; wait", tmp.path());
        let grandchild =
            pid_written(&tmp.path().join("grandchild.pid")).expect("the shell wrote the pid");
        let pgid = child.pid;
        let stopped = child.terminate(Duration::from_secs(2));
        assert!(stopped.group_empty);
        assert!(!sys::group_alive(pgid));
        assert_ne!(
            unsafe { libc::kill(grandchild, 0) },
            0,
            "grandchild is gone"
        );
    }

    #[test]
    fn sigterm_ignoring_child_is_killed_after_the_grace_period() {
        let tmp = tempfile::tempdir().unwrap();
        let (child, rx) = sh(
            "trap '' TERM; echo ready; while true; do sleep 0.05; done",
            tmp.path(),
        );
        // Wait until the trap is installed.
        loop {
            if let Msg::Line(l) = rx.recv_timeout(Duration::from_secs(5)).unwrap()
                && l.raw == "ready"
            {
                break;
            }
        }
        let pgid = child.pid;
        let stopped = child.terminate(Duration::from_millis(300));
        assert!(stopped.killed);
        assert_eq!(stopped.exit.unwrap().signal, Some(libc::SIGKILL));
        assert!(!sys::group_alive(pgid));
    }

    #[test]
    fn teardown_is_bounded_when_an_escaped_process_holds_the_output() {
        let tmp = tempfile::tempdir().unwrap();
        // `setsid` leaves the group but keeps stdout: the readers would wait for it forever.
        let (child, _rx) = sh(
            "setsid sleep 30 & echo $! > escaped.pid; sleep 30",
            tmp.path(),
        );
        let escaped = pid_written(&tmp.path().join("escaped.pid"));
        let started = Instant::now();
        let _ = child.terminate(Duration::from_millis(500));
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "teardown took {:?}",
            started.elapsed()
        );
        // Clean up the escaped sleeper.
        if let Some(pid) = escaped {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }

    #[test]
    fn dropping_a_child_kills_its_group() {
        let tmp = tempfile::tempdir().unwrap();
        let (child, _rx) = sh("sleep 30", tmp.path());
        let pgid = child.pid;
        drop(child);
        assert!(!sys::group_alive(pgid));
    }
}

/// The Windows side, with `cmd.exe` as the child (what the test bed has under wine; the
/// portable build starts ComfyUI from a `.bat` the same way). `ping -n N 127.0.0.1` waits
/// about N - 1 seconds.
#[cfg(all(test, windows))]
mod windows_tests {
    use super::*;
    use std::sync::mpsc;

    fn cmd(script: &str, dir: &Path) -> (Child, mpsc::Receiver<Output>) {
        let (tx, rx) = mpsc::channel();
        let args = vec!["/c".to_string(), script.to_string()];
        let spec = Spec {
            program: std::ffi::OsStr::new("cmd.exe"),
            args: &args,
            dir,
            env: &[("VB_TEST".into(), "yes".into())],
        };
        (
            Child::spawn_captured(&spec, &dir.join("out.log"), tx).unwrap(),
            rx,
        )
    }

    fn line(rx: &mpsc::Receiver<Output>, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Output::Line(l)) = rx.recv_timeout(Duration::from_secs(1))
                && l.raw.trim() == want
            {
                return;
            }
        }
        panic!("no line {want:?}");
    }

    #[test]
    fn output_and_exit_of_a_child() {
        let tmp = tempfile::tempdir().unwrap();
        let (child, rx) = cmd("echo %VB_TEST% & exit /b 3", tmp.path());
        line(&rx, "yes");
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let stopped = child.terminate(Duration::from_secs(5));
        assert_eq!(stopped.exit.unwrap().code, Some(3));
        assert!(stopped.group_empty);
    }

    #[test]
    fn the_job_ends_the_child_and_what_it_started() {
        let tmp = tempfile::tempdir().unwrap();
        // A grandchild (another cmd.exe) that would wait half a minute.
        let (child, rx) = cmd("echo ready & cmd.exe /c ping -n 30 127.0.0.1", tmp.path());
        line(&rx, "ready");
        let pgid = child.pid;
        assert!(sys::group_alive(pgid));
        let started = Instant::now();
        child.kill_group();
        assert!(
            sys::wait_group_gone(pgid, Duration::from_secs(10)),
            "group left"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
        drop(child);
        assert!(!sys::pid_alive(pgid));
    }

    #[test]
    fn dropping_the_child_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (child, rx) = cmd("echo ready & ping -n 30 127.0.0.1", tmp.path());
        line(&rx, "ready");
        let pgid = child.pid;
        drop(child);
        assert!(!sys::group_alive(pgid));
        assert!(!sys::pid_alive(pgid));
    }

    #[test]
    fn a_grandchild_keeps_the_group_alive() {
        let tmp = tempfile::tempdir().unwrap();
        // The child starts a grandchild in the background and exits at once: the group is
        // the job, so it is alive while the grandchild is.
        let (child, rx) = cmd(
            "start /b ping -n 30 127.0.0.1 & ping -n 2 127.0.0.1 > nul & echo ready",
            tmp.path(),
        );
        line(&rx, "ready");
        let pgid = child.pid;
        let deadline = Instant::now() + Duration::from_secs(10);
        while sys::pid_alive(pgid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!sys::pid_alive(pgid), "the child itself ended");
        assert!(sys::group_alive(pgid), "the grandchild is still in the job");
        child.kill_group();
        assert!(sys::wait_group_gone(pgid, Duration::from_secs(10)));
    }
}
