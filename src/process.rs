//! Child process control: ComfyUI in its own process group, its output read line by line,
//! and a teardown that leaves nothing behind (SIGTERM to the group, a grace period, SIGKILL).

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

/// A reader thread reached the end of its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamClosed(pub Stream);

/// A child running in its own process group.
pub struct Child {
    handle: duct::Handle,
    /// The child's pid, which is also its process group id.
    pub pid: u32,
    pub started: Instant,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// How the child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Exit {
    fn from_status(status: &std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        Exit {
            code: status.code(),
            signal: status.signal(),
        }
    }
}

/// What to start.
pub struct Spec<'a> {
    pub program: &'a std::ffi::OsStr,
    pub args: &'a [String],
    pub dir: &'a Path,
    pub env: &'a [(String, String)],
    /// Both streams, merged, as printed.
    pub log: &'a Path,
}

/// Starts the child in a new process group; every output line goes to `log` and to `tx`.
///
/// On Linux the child also gets SIGKILL if this tool dies without cleaning up
/// (`PR_SET_PDEATHSIG`), so a killed vrambisect cannot leave ComfyUI holding the GPU.
pub fn spawn<M>(spec: &Spec, tx: Sender<M>) -> std::io::Result<Child>
where
    M: From<OutputLine> + From<StreamClosed> + Send + 'static,
{
    let (out_r, out_w) = os_pipe::pipe()?;
    let (err_r, err_w) = os_pipe::pipe()?;
    let log = Arc::new(Mutex::new(File::create(spec.log)?));
    let mut expr = duct::cmd(spec.program, spec.args)
        .dir(spec.dir)
        .stdin_null()
        .stdout_file(out_w)
        .stderr_file(err_w)
        .unchecked()
        .before_spawn(|cmd| {
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
            #[cfg(target_os = "linux")]
            unsafe {
                let parent = libc::getpid();
                cmd.pre_exec(move || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    // The parent may have died between fork and prctl.
                    if libc::getppid() != parent {
                        libc::_exit(1);
                    }
                    Ok(())
                });
            }
            Ok(())
        });
    for (k, v) in spec.env {
        expr = expr.env(k, v);
    }
    let handle = expr.start()?;
    // The expression held the pipes' write ends; dropping it lets readers see EOF.
    drop(expr);
    let pid = handle.pids().first().copied().unwrap_or(0);
    let started = Instant::now();
    let readers = vec![
        reader(out_r, Stream::Stdout, started, log.clone(), tx.clone()),
        reader(err_r, Stream::Stderr, started, log, tx),
    ];
    Ok(Child {
        handle,
        pid,
        started,
        readers,
    })
}

fn reader<M>(
    pipe: os_pipe::PipeReader,
    stream: Stream,
    started: Instant,
    log: Arc<Mutex<File>>,
    tx: Sender<M>,
) -> std::thread::JoinHandle<()>
where
    M: From<OutputLine> + From<StreamClosed> + Send + 'static,
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
                    let _ = tx.send(line.into());
                }
            }
        }
        let _ = tx.send(StreamClosed(stream).into());
    })
}

impl Child {
    /// The exit status, if the child has ended.
    pub fn try_wait(&self) -> Option<Exit> {
        match self.handle.try_wait() {
            Ok(Some(out)) => Some(Exit::from_status(&out.status)),
            _ => None,
        }
    }

    /// Polls for the leader's exit until `deadline`.
    fn wait_until(&self, deadline: Instant) -> Option<Exit> {
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

    /// Sends `sig` to the whole group.
    pub fn signal_group(&self, sig: i32) {
        if self.pid > 0 {
            unsafe {
                libc::killpg(self.pid as libc::pid_t, sig);
            }
        }
    }

    /// Whether any process of the group is still alive.
    pub fn group_alive(&self) -> bool {
        group_alive(self.pid)
    }

    /// SIGTERM to the group, up to `grace` for it to exit, then SIGKILL; waits until the
    /// whole group is gone (bounded). Returns how the leader ended and whether SIGKILL was
    /// needed.
    pub fn terminate(mut self, grace: Duration) -> (Option<Exit>, bool) {
        let mut killed = false;
        let mut exit = self.try_wait();
        if exit.is_none() || self.group_alive() {
            self.signal_group(libc::SIGTERM);
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                exit = exit.or_else(|| self.try_wait());
                if exit.is_some() && !self.group_alive() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if exit.is_none() || self.group_alive() {
                self.signal_group(libc::SIGKILL);
                killed = true;
                // Bounded: a process stuck in the GPU driver (uninterruptible sleep) may not
                // die at once, and the tool must not hang with it.
                exit = exit.or_else(|| self.wait_until(Instant::now() + Duration::from_secs(10)));
                let deadline = Instant::now() + Duration::from_secs(5);
                while self.group_alive() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
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
        (exit, killed)
    }

    /// Kills the group at once (a second Ctrl-C).
    pub fn kill_now(self) -> Option<Exit> {
        self.signal_group(libc::SIGKILL);
        self.terminate(Duration::from_millis(0)).0
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        // Whatever path dropped us (a panic included), the group must not outlive the run.
        if self.group_alive() {
            self.signal_group(libc::SIGKILL);
            let _ = self.wait_until(Instant::now() + Duration::from_secs(5));
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.group_alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

/// Whether any process with process group id `pgid` exists (zombies not yet reaped count).
pub fn group_alive(pgid: u32) -> bool {
    if pgid == 0 {
        return false;
    }
    let r = unsafe { libc::killpg(pgid as libc::pid_t, 0) };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[derive(Debug)]
    enum Msg {
        Line(OutputLine),
        Closed,
    }
    impl From<OutputLine> for Msg {
        fn from(l: OutputLine) -> Self {
            Msg::Line(l)
        }
    }
    impl From<StreamClosed> for Msg {
        fn from(_: StreamClosed) -> Self {
            Msg::Closed
        }
    }

    fn sh(script: &str, dir: &Path) -> (Child, mpsc::Receiver<Msg>) {
        let (tx, rx) = mpsc::channel();
        let args = vec!["-c".to_string(), script.to_string()];
        let log = dir.join("out.log");
        let spec = Spec {
            program: std::ffi::OsStr::new("sh"),
            args: &args,
            dir,
            env: &[("VB_TEST".into(), "yes".into())],
            log: &log,
        };
        (spawn(&spec, tx).unwrap(), rx)
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
                Msg::Closed => closed += 1,
            }
        }
        assert!(lines.contains(&(Stream::Stdout, "one".into())));
        assert!(lines.contains(&(Stream::Stderr, "two".into())));
        assert!(lines.contains(&(Stream::Stdout, "yes".into())));
        let (exit, killed) = child.terminate(Duration::from_secs(1));
        assert_eq!(exit.unwrap().code, Some(0));
        assert!(!killed);
        let log = std::fs::read_to_string(tmp.path().join("out.log")).unwrap();
        assert_eq!(log.lines().count(), 3);
    }

    #[test]
    fn terminate_reaches_grandchildren() {
        let tmp = tempfile::tempdir().unwrap();
        // A grandchild that ignores nothing and sleeps; the shell waits for it.
        let (child, _rx) = sh("sleep 30 & echo $! > grandchild.pid; wait", tmp.path());
        let pid_file = tmp.path().join("grandchild.pid");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !pid_file.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let grandchild: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let pgid = child.pid;
        let (_exit, _) = child.terminate(Duration::from_secs(2));
        assert!(!group_alive(pgid));
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
        let (exit, killed) = child.terminate(Duration::from_millis(300));
        assert!(killed);
        assert_eq!(exit.unwrap().signal, Some(libc::SIGKILL));
        assert!(!group_alive(pgid));
    }

    #[test]
    fn teardown_is_bounded_when_an_escaped_process_holds_the_output() {
        let tmp = tempfile::tempdir().unwrap();
        // `setsid` leaves the group but keeps stdout: the readers would wait for it forever.
        let (child, _rx) = sh(
            "setsid sleep 30 & echo $! > escaped.pid; sleep 30",
            tmp.path(),
        );
        let pid_file = tmp.path().join("escaped.pid");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !pid_file.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = Instant::now();
        let _ = child.terminate(Duration::from_millis(500));
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "teardown took {:?}",
            started.elapsed()
        );
        // Clean up the escaped sleeper.
        if let Ok(pid) = std::fs::read_to_string(&pid_file)
            .unwrap_or_default()
            .trim()
            .parse::<i32>()
        {
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
        assert!(!group_alive(pgid));
    }
}
