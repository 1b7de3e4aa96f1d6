//! Starting ComfyUI for a run: a free port, the command line, the process with its output
//! followed, and the wait until it answers HTTP, with the startup classified when it dies
//! first, hangs, or the user stops it.

use super::{Reporter, RunEvent, RunOptions};
use crate::classify::normalize::normalize;
use crate::classify::{self, Classification, ExitStatus};
use crate::comfy::Client;
use crate::comfy::events::WsEvent;
use crate::comfy::ws::WsMessage;
use crate::outcome::Outcome;
use crate::process::{self, Teardown};
use crate::sampler::Sampler;
use crate::signals::{self, Stop};
use crate::startup::StartupFacts;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Where ComfyUI listens: loopback only.
pub(crate) const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// How long one wait for ComfyUI's next message lasts.
pub(crate) const TICK: Duration = Duration::from_millis(50);
/// The most startup lines kept for classifying a failed start.
const STARTUP_LINES: usize = 20_000;
/// How many times a port that another program took in the meantime is tried again.
const PORT_ATTEMPTS: u32 = 3;

/// A free TCP port on loopback (the OS picks; a race with another program is handled by
/// retrying when ComfyUI reports the port in use).
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((HOST, 0))?.local_addr()?.port())
}

/// Everything ComfyUI's reader threads and the websocket thread send.
pub(crate) enum Msg {
    Output(process::Output),
    Ws(WsMessage),
}

impl From<process::Output> for Msg {
    fn from(o: process::Output) -> Self {
        Msg::Output(o)
    }
}
impl From<WsMessage> for Msg {
    fn from(m: WsMessage) -> Self {
        Msg::Ws(m)
    }
}

/// One thing that came from ComfyUI.
pub(crate) enum Heard {
    /// A log line, normalised.
    Line(String),
    Ws(WsEvent),
    WsClosed,
    /// Nothing within [`TICK`] (or a stream ended).
    Nothing,
}

/// What ComfyUI says, as it comes: its log lines (both streams) and websocket messages.
pub(crate) struct Feed {
    rx: Receiver<Msg>,
    /// Kept so the websocket thread can join the same channel.
    pub tx: Sender<Msg>,
    /// What the startup log said (facts taken until its own ready line, which may come after
    /// the server already answered).
    pub startup: StartupFacts,
    /// Lines before the server was ready (for classifying a failed start).
    pub startup_lines: Vec<String>,
    /// The server answered.
    ready: bool,
    /// The log printed its ready line (`To see the GUI go to:`): the startup block is over.
    logged_ready: bool,
    streams_closed: u8,
}

impl Feed {
    fn new() -> Feed {
        let (tx, rx) = mpsc::channel();
        Feed {
            rx,
            tx,
            startup: StartupFacts::default(),
            startup_lines: Vec::new(),
            ready: false,
            logged_ready: false,
            streams_closed: 0,
        }
    }

    /// Waits up to [`TICK`] for the next thing ComfyUI says.
    pub(crate) fn listen(&mut self) -> Heard {
        match self.rx.recv_timeout(TICK) {
            Ok(msg) => self.take(msg),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => Heard::Nothing,
        }
    }

    /// Reads everything already said, without waiting: when the server answers before the
    /// lines it printed were read, the startup facts still see them.
    fn catch_up(&mut self) {
        while let Ok(msg) = self.rx.try_recv() {
            self.take(msg);
        }
    }

    fn take(&mut self, msg: Msg) -> Heard {
        match msg {
            Msg::Output(process::Output::Line(l)) => {
                let text = normalize(&l.raw).text;
                if !self.logged_ready {
                    self.startup.observe(&text);
                    // Its ready line may come after the server answered: the facts are
                    // completed then.
                    if self.startup.url.is_some() {
                        self.logged_ready = true;
                        if self.ready {
                            self.startup.finish();
                        }
                    }
                }
                if !self.ready && self.startup_lines.len() < STARTUP_LINES {
                    self.startup_lines.push(text.clone());
                }
                Heard::Line(text)
            }
            Msg::Output(process::Output::Closed(_)) => {
                self.streams_closed += 1;
                Heard::Nothing
            }
            Msg::Ws(WsMessage::Event(e)) => Heard::Ws(e),
            Msg::Ws(WsMessage::Closed(_)) => Heard::WsClosed,
        }
    }

    /// After the process died: the log lines still in the pipes (bounded).
    pub(crate) fn drain(&mut self) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut lines = Vec::new();
        while self.streams_closed < 2 && Instant::now() < deadline {
            if let Heard::Line(l) = self.listen() {
                lines.push(l);
            }
        }
        lines
    }

    fn set_ready(&mut self) {
        self.startup.finish();
        self.ready = true;
    }
}

/// A ComfyUI that answers HTTP.
pub(crate) struct Server {
    pub child: process::Child,
    pub feed: Feed,
    pub port: u16,
    pub argv: Vec<String>,
    /// From the run's start to ready.
    pub startup_ms: u64,
    pub ready_at: Instant,
}

/// A ComfyUI that never became ready, and how that ended.
pub(crate) struct NotReady {
    pub argv: Vec<String>,
    pub port: u16,
    pub verdict: Classification,
    pub teardown: Teardown,
    pub effective: StartupFacts,
}

/// Starts ComfyUI with the run's flags and waits until it is ready. `clock` is the run's
/// start.
pub(crate) fn launch(
    opts: &RunOptions,
    reporter: &mut dyn Reporter,
    sampler: Option<&Sampler>,
    clock: Instant,
) -> crate::error::Result<Result<Server, NotReady>> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = free_port().map_err(|e| {
            crate::error::Error::environment(format!("no free port on 127.0.0.1: {e}"))
        })?;
        let argv = argv(opts, port);
        reporter.event(&RunEvent::Launching { argv: argv.clone() });
        let mut feed = Feed::new();
        let mut env: Vec<(String, String)> = vec![
            ("PYTHONUNBUFFERED".into(), "1".into()),
            ("PYTHONIOENCODING".into(), "utf-8".into()),
        ];
        env.extend(opts.env.iter().cloned());
        let args: Vec<String> = super::boot_for(&opts.target.python.path, opts.overlay.as_ref())
            .into_iter()
            .chain(argv.clone())
            .collect();
        let spec = process::Spec {
            program: opts.target.python.path.as_os_str(),
            args: &args,
            dir: &opts.target.install.dir,
            env: &env,
        };
        let log = opts.run_dir.join(super::folder::COMFYUI_LOG);
        let child = match process::Child::spawn_captured(&spec, &log, feed.tx.clone()) {
            Ok(c) => c,
            Err(e) => {
                let why = if e.kind() == std::io::ErrorKind::NotFound {
                    "not found".to_string()
                } else {
                    e.to_string()
                };
                let verdict = Classification {
                    outcome: Outcome::StartupFailed,
                    evidence: vec![format!(
                        "cannot run Python '{}' ({}): {why}",
                        opts.target.python.path.display(),
                        opts.target.python.source
                    )],
                    signatures: vec![],
                    explanation: Some("pass --python with the Python that runs ComfyUI".into()),
                };
                return Ok(Err(NotReady {
                    argv,
                    port,
                    verdict,
                    teardown: Teardown {
                        killed: false,
                        group_empty: true,
                        exit: None,
                    },
                    effective: StartupFacts::default(),
                }));
            }
        };
        if let Some(s) = sampler {
            s.set_root_pid(child.pid);
            s.mark(&super::folder::Mark::Launch.to_string());
        }
        let (verdict, teardown) = match wait_ready(&mut feed, &child, port, opts, reporter) {
            Ready::Yes => {
                feed.set_ready();
                let startup_ms = clock.elapsed().as_millis() as u64;
                return Ok(Ok(Server {
                    child,
                    feed,
                    port,
                    argv,
                    startup_ms,
                    ready_at: Instant::now(),
                }));
            }
            Ready::Died(exit) => {
                feed.drain();
                let verdict = classify::classify_startup(exit, &feed.startup_lines);
                let teardown = child.terminate(opts.grace);
                let port_taken = verdict.signatures.contains(&"port_in_use");
                if port_taken && attempt < PORT_ATTEMPTS {
                    // The next attempt writes comfyui.log; keep this one beside it.
                    let _ = std::fs::rename(
                        &log,
                        opts.run_dir.join(format!("comfyui.attempt{attempt}.log")),
                    );
                    continue;
                }
                (verdict, teardown)
            }
            Ready::TimedOut => {
                let verdict = Classification {
                    outcome: Outcome::StartupFailed,
                    evidence: crate::text::last_lines(&feed.startup_lines, 5),
                    signatures: vec![],
                    explanation: Some(format!(
                        "ComfyUI did not become ready within {} s (raise --startup-timeout for slow disks)",
                        opts.limits.startup_timeout.as_secs()
                    )),
                };
                (verdict, child.terminate(opts.grace))
            }
            Ready::Interrupted => {
                let verdict = Classification {
                    outcome: Outcome::Interrupted,
                    evidence: vec![],
                    signatures: vec![],
                    explanation: Some(format!(
                        "stopped with {} while ComfyUI was starting",
                        crate::signals::cause()
                    )),
                };
                (verdict, child.terminate(opts.grace))
            }
        };
        return Ok(Err(NotReady {
            argv,
            port,
            verdict,
            teardown,
            effective: feed.startup.clone(),
        }));
    }
}

/// ComfyUI's command line: the user's flags first, the tool's last. argparse keeps the last
/// value, so a `--port` or `--listen` from a launcher cannot send ComfyUI somewhere the tool
/// does not look, and `--disable-auto-launch` beats `--windows-standalone-build`.
fn argv(opts: &RunOptions, port: u16) -> Vec<String> {
    let mut argv: Vec<String> = vec!["main.py".into()];
    argv.extend(opts.comfy_flags.iter().cloned());
    argv.extend([
        "--listen".to_string(),
        HOST.to_string(),
        "--port".into(),
        port.to_string(),
        "--disable-auto-launch".into(),
    ]);
    // Where the install supports it, keep the asset database out of the way: a second
    // instance on one install otherwise dies with `ASSETS_STARTUP_FAILED: in_use`.
    if opts.target.flags.has("--disable-assets")
        && !opts.comfy_flags.iter().any(|f| f == "--disable-assets")
    {
        argv.push("--disable-assets".into());
    }
    if opts.debug_log
        && opts.target.flags.has("--verbose")
        && !opts.comfy_flags.iter().any(|f| f.starts_with("--verbose"))
    {
        argv.extend(["--verbose".to_string(), "DEBUG".to_string()]);
    }
    argv
}

enum Ready {
    Yes,
    Died(ExitStatus),
    TimedOut,
    Interrupted,
}

fn wait_ready(
    feed: &mut Feed,
    child: &process::Child,
    port: u16,
    opts: &RunOptions,
    reporter: &mut dyn Reporter,
) -> Ready {
    let client = Client::new(&HOST.to_string(), port);
    let started = Instant::now();
    let mut next_poll = started + Duration::from_millis(300);
    let mut alive = started;
    loop {
        feed.listen();
        if alive.elapsed() >= Duration::from_secs(1) {
            reporter.event(&RunEvent::Alive);
            alive = Instant::now();
        }
        if let Some(exit) = child.try_wait() {
            return Ready::Died(exit);
        }
        if signals::requested() != Stop::No {
            reporter.event(&RunEvent::Interrupting);
            return Ready::Interrupted;
        }
        let now = Instant::now();
        if feed.startup.ready || now >= next_poll {
            if client.system_stats(Duration::from_millis(500)).is_ok() {
                feed.catch_up();
                return Ready::Yes;
            }
            next_poll = now + Duration::from_millis(250);
        }
        if now.duration_since(started) > opts.limits.startup_timeout {
            return Ready::TimedOut;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn say(feed: &Feed, raw: &str) {
        feed.tx
            .send(Msg::Output(process::Output::Line(process::OutputLine {
                stream: process::Stream::Stderr,
                t_ms: 0,
                raw: raw.into(),
            })))
            .unwrap();
    }

    /// The server can answer before its startup lines were read, and before it printed its
    /// ready line: the facts still hold every line, and the ready line when it comes.
    #[test]
    fn the_startup_facts_hold_what_was_printed_before_and_after_the_server_answered() {
        let mut feed = Feed::new();
        say(&feed, "ComfyUI version: 0.38.1");
        say(&feed, "DynamicVRAM support detected and enabled");
        say(&feed, "Set vram state to: NORMAL_VRAM");
        // The poll wins: nothing was read yet.
        feed.catch_up();
        feed.set_ready();
        assert_eq!(feed.startup.dynamic_vram, Some(true), "{:?}", feed.startup);
        assert_eq!(feed.startup.vram_state.as_deref(), Some("NORMAL_VRAM"));
        assert_eq!(feed.startup.url, None);
        say(&feed, "To see the GUI go to: http://127.0.0.1:8190");
        say(&feed, "got prompt");
        assert!(matches!(feed.listen(), Heard::Line(_)));
        assert_eq!(feed.startup.url.as_deref(), Some("http://127.0.0.1:8190"));
        assert!(matches!(feed.listen(), Heard::Line(_)));
        assert_eq!(feed.startup.dynamic_vram, Some(true));
    }
}
