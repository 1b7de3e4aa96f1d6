//! The run engine: one ComfyUI process, N prompts, one record.

use super::record::{Effective, Iteration, Overhead, Peaks, RunRecord, Teardown, overall};
use super::{Reporter, RunEvent, RunOptions};
use crate::classify::normalize::normalize;
use crate::classify::{self, ExitStatus, PromptEnd, PromptObservation, Verdict};
use crate::comfy::events::WsEvent;
use crate::comfy::ws::{self, WsMessage};
use crate::comfy::{Client, Submitted, rejection_lines};
use crate::error::Result;
use crate::flags::{argparse, decide};
use crate::outcome::Outcome;
use crate::process::{self, OutputLine, StreamClosed};
use crate::sampler::{Sampler, SamplerConfig, Summary, ram_not_returned};
use crate::signals::{self, Stop};
use crate::startup::StartupFacts;
use crate::workflow::CacheBust;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

/// Everything the engine's threads send it.
enum Msg {
    Line(OutputLine),
    Closed,
    Ws(WsMessage),
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
impl From<WsMessage> for Msg {
    fn from(m: WsMessage) -> Self {
        Msg::Ws(m)
    }
}

/// How long one poll of the event channel waits.
const TICK: Duration = Duration::from_millis(50);
/// The most log lines kept for classifying one prompt (a tqdm-heavy log is long).
const WINDOW_LINES: usize = 20_000;
const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// A free TCP port on loopback (the OS picks; a race with another program is handled by
/// retrying when ComfyUI reports the port in use).
pub fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((HOST, 0))?.local_addr()?.port())
}

/// State shared across the phases of one run.
struct Live {
    rx: Receiver<Msg>,
    /// Kept so the websocket thread can join the same channel.
    tx: mpsc::Sender<Msg>,
    startup: StartupFacts,
    /// Normalised lines since the current window began.
    window: VecDeque<String>,
    /// Lines before the server was ready (for startup classification).
    startup_lines: Vec<String>,
    ready: bool,
    streams_closed: u8,
    last_activity: Instant,
    ws_closed: Option<String>,
}

impl Live {
    fn take_line(&mut self, line: &OutputLine) {
        let text = normalize(&line.raw).text;
        if !self.ready {
            self.startup.observe(&text);
            if self.startup_lines.len() < WINDOW_LINES {
                self.startup_lines.push(text.clone());
            }
        }
        if self.window.len() == WINDOW_LINES {
            self.window.pop_front();
        }
        self.window.push_back(text);
        self.last_activity = Instant::now();
    }

    /// Receives for up to `TICK`; returns a websocket event when one came.
    fn pump(&mut self) -> Option<WsEvent> {
        match self.rx.recv_timeout(TICK) {
            Ok(Msg::Line(l)) => {
                self.take_line(&l);
                None
            }
            Ok(Msg::Closed) => {
                self.streams_closed += 1;
                None
            }
            // Websocket activity counts for the stall watchdog only when it is about the
            // prompt (the caller decides): extensions broadcast status frames every second.
            Ok(Msg::Ws(WsMessage::Event(e))) => Some(e),
            Ok(Msg::Ws(WsMessage::Closed(why))) => {
                self.ws_closed = Some(why);
                None
            }
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// After the process died: read what is left of its output (bounded).
    fn drain(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.streams_closed < 2 && Instant::now() < deadline {
            self.pump();
        }
    }
}

/// Runs the workflow once (N prompts) and returns the record, also written to the run folder.
pub fn execute(opts: &RunOptions, reporter: &mut dyn Reporter) -> Result<RunRecord> {
    let dir = &opts.run_dir;
    // Two sessions on one GPU take turns: each would otherwise measure the other's memory.
    let lock = crate::gpulock::acquire(
        &mut |holder| {
            reporter.event(&RunEvent::WaitingForGpu {
                holder: holder.to_string(),
            })
        },
        &|| signals::requested() != Stop::No,
    )
    .map_err(|e| crate::error::Error::environment(format!("cannot take the GPU lock: {e}")))?;
    // The sampler starts before ComfyUI, so its first readings are the pre-run baseline.
    let sampler = Sampler::start(SamplerConfig {
        nvml_lib: opts.nvml_lib.clone(),
        cuda: opts.cuda,
        csv: Some(dir.join("samples.csv")),
        jsonl: Some(dir.join("samples.jsonl")),
        ..SamplerConfig::default()
    })
    .ok();
    // Compile the signature catalogue while ComfyUI starts, not after its last message.
    std::thread::spawn(|| crate::classify::catalogue::match_line("").count());
    let mut record = match &lock {
        Some(_) => execute_inner(opts, reporter, sampler.as_ref())?,
        None => {
            let v = Verdict {
                outcome: Outcome::Interrupted,
                evidence: vec![],
                signatures: vec![],
                explanation: Some("stopped with Ctrl-C while waiting for the GPU".into()),
            };
            finish_early(
                opts,
                SystemTime::now(),
                Instant::now(),
                Vec::new(),
                0,
                v,
                None,
            )
        }
    };
    record.gpu_wait_ms = lock
        .as_ref()
        .map(|l| l.waited.as_millis() as u64)
        .unwrap_or(0);
    if let Some(sampler) = sampler {
        settle_gpu(&sampler);
        let summary = sampler.stop();
        apply_samples(&mut record, &summary);
        write_json(&dir.join("samples-summary.json"), &summary);
    }
    write_json(&dir.join(RunRecord::FILE), &record);
    drop(lock);
    Ok(record)
}

/// The RAM threshold below which the run is stopped, from the option and the machine's RAM.
fn ram_threshold(opts: &RunOptions, sampler: Option<&Sampler>) -> Option<u64> {
    const MIB: u64 = 1 << 20;
    match opts.min_available_ram {
        Some(0) => None,
        Some(bytes) => Some(bytes),
        None => {
            let total = sampler?.snapshot().get("ram.total")?.max.max(0) as u64;
            Some((total / 50).clamp(256 * MIB, 1024 * MIB))
        }
    }
}

/// Waits (bounded) until the GPU's used memory is back near where it was before the run, so
/// the next run does not start on a card still holding this one's memory.
fn settle_gpu(sampler: &Sampler) {
    const TOLERANCE: i64 = 256 << 20;
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        let snap = sampler.snapshot();
        match snap.get("gpu0.nvml.used") {
            Some(s) if s.last > s.min + TOLERANCE => std::thread::sleep(Duration::from_millis(100)),
            _ => return,
        }
    }
}

/// Peaks, other processes' VRAM and RAM not returned, from the samples.
fn apply_samples(record: &mut RunRecord, summary: &Summary) {
    let max = |name: &str| summary.get(name).map(|s| s.max.max(0) as u64);
    record.peaks = Peaks {
        vram_used_bytes: max("gpu0.nvml.used"),
        vram_comfyui_bytes: max("gpu0.tree.used"),
        ram_comfyui_bytes: max("tree.rss"),
        ram_available_min_bytes: summary.get("ram.available").map(|s| s.min.max(0) as u64),
        vram_other_processes_bytes: max("gpu0.others.used"),
    };
    for it in &mut record.iterations {
        let start = format!("prompt {} start", it.iteration);
        let end = format!("prompt {} end", it.iteration);
        it.ram_retained_bytes =
            ram_not_returned(&summary.marks, &start, &end).map(|r| r.retained_bytes);
    }
    record.sampling = summary
        .unavailable
        .iter()
        .map(|u| format!("{}: {}", u.probe, u.reason))
        .collect();
}

fn execute_inner(
    opts: &RunOptions,
    reporter: &mut dyn Reporter,
    sampler: Option<&Sampler>,
) -> Result<RunRecord> {
    let started_at = SystemTime::now();
    let clock = Instant::now();
    let dir = &opts.run_dir;
    write_json(
        &dir.join("workflow.json"),
        &serde_json::Value::Object(opts.workflow.prompt.clone()),
    );

    let mut argv_extra: Vec<String> = Vec::new();
    // Where the install supports it, keep the asset database out of the way: a second
    // instance on one install otherwise dies with ASSETS_STARTUP_FAILED: in_use (§3.1).
    if opts.flags.has("--disable-assets")
        && !opts.comfy_flags.iter().any(|f| f == "--disable-assets")
    {
        argv_extra.push("--disable-assets".into());
    }

    let mut attempt = 0;
    let (mut live, child, port, argv) = loop {
        attempt += 1;
        let port = free_port().map_err(|e| {
            crate::error::Error::environment(format!("no free port on 127.0.0.1: {e}"))
        })?;
        // The user's flags first, the tool's last: argparse keeps the last value, so a
        // `--port` or `--listen` from a launcher cannot send ComfyUI somewhere the tool does
        // not look, and `--disable-auto-launch` beats `--windows-standalone-build`.
        let mut argv: Vec<String> = vec!["main.py".into()];
        argv.extend(opts.comfy_flags.iter().cloned());
        argv.extend([
            "--listen".to_string(),
            HOST.to_string(),
            "--port".into(),
            port.to_string(),
            "--disable-auto-launch".into(),
        ]);
        argv.extend(argv_extra.iter().cloned());
        reporter.event(&RunEvent::Launching { argv: argv.clone() });
        let (tx, rx) = mpsc::channel::<Msg>();
        let mut env: Vec<(String, String)> = vec![
            ("PYTHONUNBUFFERED".into(), "1".into()),
            ("PYTHONIOENCODING".into(), "utf-8".into()),
        ];
        env.extend(opts.env.iter().cloned());
        let spec = process::Spec {
            program: opts.python.path.as_os_str(),
            args: &argv,
            dir: &opts.install.dir,
            env: &env,
        };
        let child =
            match process::Child::spawn_captured(&spec, &dir.join("comfyui.log"), tx.clone()) {
                Ok(c) => {
                    if let Some(s) = sampler {
                        s.set_root_pid(c.pid);
                        s.mark("launch");
                    }
                    c
                }
                Err(e) => {
                    let why = if e.kind() == std::io::ErrorKind::NotFound {
                        "not found".to_string()
                    } else {
                        e.to_string()
                    };
                    let v = Verdict {
                        outcome: Outcome::StartupFailed,
                        evidence: vec![format!(
                            "cannot run Python '{}' ({}): {why}",
                            opts.python.path.display(),
                            opts.python.how
                        )],
                        signatures: vec![],
                        explanation: Some("pass --python with the Python that runs ComfyUI".into()),
                    };
                    return Ok(finish_early(opts, started_at, clock, argv, port, v, None));
                }
            };
        let mut live = Live {
            rx,
            tx,
            startup: StartupFacts::default(),
            window: VecDeque::new(),
            startup_lines: Vec::new(),
            ready: false,
            streams_closed: 0,
            last_activity: Instant::now(),
            ws_closed: None,
        };
        match wait_ready(&mut live, &child, port, opts, reporter) {
            Ready::Yes => break (live, child, port, argv),
            Ready::Died(exit) => {
                live.drain();
                let v = classify::classify_startup(exit, &live.startup_lines);
                let port_taken = v.signatures.contains(&"port_in_use");
                let stopped = child.terminate(opts.grace);
                if port_taken && attempt < 3 {
                    // The next attempt writes comfyui.log; keep this one beside it.
                    let _ = std::fs::rename(
                        dir.join("comfyui.log"),
                        dir.join(format!("comfyui.attempt{attempt}.log")),
                    );
                    continue;
                }
                let mut rec = finish_early(opts, started_at, clock, argv, port, v, stopped.exit);
                rec.effective = Effective::from(&live.startup);
                return Ok(rec);
            }
            Ready::TimedOut => {
                let stopped = child.terminate(opts.grace);
                let v = Verdict {
                    outcome: Outcome::StartupFailed,
                    evidence: tail(&live.startup_lines, 5),
                    signatures: vec![],
                    explanation: Some(format!(
                        "ComfyUI did not become ready within {} s (raise --startup-timeout for slow disks)",
                        opts.startup_timeout.as_secs()
                    )),
                };
                let mut rec = finish_early(opts, started_at, clock, argv, port, v, None);
                rec.teardown = stopped;
                return Ok(rec);
            }
            Ready::Interrupted => {
                let stopped = child.terminate(opts.grace);
                let v = Verdict {
                    outcome: Outcome::Interrupted,
                    evidence: vec![],
                    signatures: vec![],
                    explanation: Some("stopped with Ctrl-C while ComfyUI was starting".into()),
                };
                let mut rec = finish_early(opts, started_at, clock, argv, port, v, None);
                rec.teardown = stopped;
                return Ok(rec);
            }
        }
    };
    let startup_ms = clock.elapsed().as_millis() as u64;
    let ready_at = Instant::now();
    live.startup.finish();
    live.ready = true;
    live.window.clear();
    reporter.event(&RunEvent::Ready { startup_ms });
    if let Some(s) = sampler {
        s.set_comfy_url(&format!("http://{HOST}:{port}"));
        s.mark("ready");
    }

    let client = Client::new(&HOST.to_string(), port);
    let client_id = client_id();
    let stop_ws = Arc::new(AtomicBool::new(false));
    let ws_tx = live.tx.clone();
    // The websocket may refuse a connection for a moment right after readiness: retry.
    let mut socket = ws::connect(SocketAddr::from((HOST, port)), &client_id);
    for _ in 0..4 {
        if socket.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        socket = ws::connect(SocketAddr::from((HOST, port)), &client_id);
    }
    let ws_thread = match socket {
        Ok(socket) => {
            let stop = stop_ws.clone();
            Some(std::thread::spawn(move || ws::pump(socket, ws_tx, stop)))
        }
        // Without the websocket, prompts are followed through /history (slower, coarser).
        Err(e) => {
            live.ws_closed = Some(e);
            None
        }
    };

    let mut iterations: Vec<Iteration> = Vec::new();
    let mut interrupted = false;
    let mut process_exit: Option<ExitStatus> = None;
    let mut overhead = Overhead::default();
    for n in 1..=opts.iterations.max(1) {
        let mut timing = PromptTiming::default();
        let ctx = PromptCtx {
            opts,
            client: &client,
            client_id: &client_id,
            child: &child,
            clock,
            sampler,
        };
        let PromptResult {
            iteration: it,
            exit,
            stop: stop_after,
        } = run_prompt(n, &ctx, &mut live, reporter, &mut timing);
        if n == 1
            && let Some(t) = timing.submitted
        {
            overhead.ready_to_submitted_ms = ms(t.duration_since(ready_at));
        }
        overhead.end_to_verdict_ms = timing.last_event.map(|t| ms(t.elapsed())).unwrap_or(0.0);
        if exit.is_some() {
            process_exit = exit;
        }
        reporter.event(&RunEvent::IterationDone {
            iteration: n,
            outcome: it.outcome,
        });
        let failed = it.outcome != Outcome::Pass;
        interrupted |= it.outcome == Outcome::Interrupted;
        iterations.push(it);
        if failed || stop_after {
            break;
        }
    }

    reporter.event(&RunEvent::Stopping);
    let stopping = Instant::now();
    let system_stats = if process_exit.is_none() && signals::requested() != Stop::Now {
        client.system_stats(Duration::from_secs(5)).ok()
    } else {
        None
    };
    if let Some(stats) = &system_stats {
        write_json(&dir.join("system_stats.json"), stats);
    }
    stop_ws.store(true, std::sync::atomic::Ordering::Relaxed);
    let grace = if signals::requested() == Stop::Now {
        Duration::ZERO
    } else {
        opts.grace
    };
    let teardown = child.terminate(grace);
    if let Some(t) = ws_thread {
        let _ = t.join();
    }
    overhead.teardown_ms = ms(stopping.elapsed());

    let deciding = overall(&iterations).cloned();
    let outcome = match (&deciding, interrupted) {
        (_, true) => Outcome::Interrupted,
        (Some(it), _) => it.outcome,
        (None, _) if iterations.is_empty() => Outcome::Interrupted,
        (None, _) => Outcome::Pass,
    };
    let effective = Effective::from(&live.startup);
    let warnings = compare_with_prediction(opts, &effective);
    let record = RunRecord {
        outcome,
        evidence: deciding
            .as_ref()
            .map(|d| d.evidence.clone())
            .unwrap_or_default(),
        explanation: deciding.as_ref().and_then(|d| d.explanation.clone()),
        argv,
        flags: opts.comfy_flags.clone(),
        effective,
        iterations,
        peaks: Peaks::default(),
        run_dir: dir.clone(),
        workflow: opts.workflow_path.clone(),
        started_at: super::folder::rfc3339(started_at),
        duration_ms: clock.elapsed().as_millis() as u64,
        startup_ms: Some(startup_ms),
        port,
        teardown,
        warnings,
        system_stats,
        overhead,
        sampling: Vec::new(),
        gpu_wait_ms: 0,
    };
    Ok(record)
}

/// Whether a websocket event says something about this prompt's progress.
fn about_prompt(ev: &WsEvent, prompt_id: &str) -> bool {
    let ours = |p: &Option<String>| p.as_deref().is_none_or(|p| p == prompt_id);
    match ev {
        WsEvent::Status { .. } | WsEvent::Other { .. } => false,
        WsEvent::Executing { prompt_id: p, .. }
        | WsEvent::Progress { prompt_id: p, .. }
        | WsEvent::ProgressState { prompt_id: p }
        | WsEvent::Executed { prompt_id: p, .. } => ours(p),
        WsEvent::ExecutionStart { prompt_id: p }
        | WsEvent::ExecutionCached { prompt_id: p, .. }
        | WsEvent::ExecutionSuccess { prompt_id: p }
        | WsEvent::ExecutionError { prompt_id: p, .. }
        | WsEvent::ExecutionInterrupted { prompt_id: p, .. } => p == prompt_id,
    }
}

/// One prompt's iteration record, ComfyUI's exit if it died, and whether the run must stop.
struct PromptResult {
    iteration: Iteration,
    exit: Option<ExitStatus>,
    stop: bool,
}

/// What every prompt of a run shares.
#[derive(Clone, Copy)]
struct PromptCtx<'a> {
    opts: &'a RunOptions,
    client: &'a Client,
    client_id: &'a str,
    child: &'a process::Child,
    clock: Instant,
    sampler: Option<&'a Sampler>,
}

/// When the moments that bound the tool's own overhead happened in one prompt.
#[derive(Default)]
struct PromptTiming {
    submitted: Option<Instant>,
    /// The last websocket message of the prompt (`executing` with node null, or the end event).
    last_event: Option<Instant>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

enum Ready {
    Yes,
    Died(ExitStatus),
    TimedOut,
    Interrupted,
}

fn wait_ready(
    live: &mut Live,
    child: &process::Child,
    port: u16,
    opts: &RunOptions,
    reporter: &mut dyn Reporter,
) -> Ready {
    let client = Client::new(&HOST.to_string(), port);
    let started = Instant::now();
    let mut next_poll = started + Duration::from_millis(300);
    loop {
        live.pump();
        if let Some(exit) = child.try_wait() {
            return Ready::Died(exit);
        }
        match signals::requested() {
            Stop::No => {}
            _ => {
                reporter.event(&RunEvent::Interrupting);
                return Ready::Interrupted;
            }
        }
        let now = Instant::now();
        if live.startup.ready || now >= next_poll {
            if client.system_stats(Duration::from_millis(500)).is_ok() {
                return Ready::Yes;
            }
            next_poll = now + Duration::from_millis(250);
        }
        if now.duration_since(started) > opts.startup_timeout {
            return Ready::TimedOut;
        }
    }
}

/// One prompt: submit, watch, classify. Returns the iteration, ComfyUI's exit if it died,
/// and whether the run must stop after it.
#[allow(clippy::too_many_arguments)]
fn run_prompt(
    n: u32,
    ctx: &PromptCtx,
    live: &mut Live,
    reporter: &mut dyn Reporter,
    timing: &mut PromptTiming,
) -> PromptResult {
    let PromptCtx {
        opts,
        client,
        client_id,
        child,
        clock,
        sampler,
    } = *ctx;
    let mark = |label: String| {
        if let Some(s) = sampler {
            s.mark(&label);
        }
    };
    let (prompt, bust) = opts.workflow.for_iteration(n);
    if bust == CacheBust::Free {
        // No seed to change: empty ComfyUI's cache so the prompt really executes.
        let _ = client.free();
        std::thread::sleep(Duration::from_millis(300));
    }
    live.window.clear();
    mark(format!("prompt {n} start"));
    let started_ms = clock.elapsed().as_millis() as u64;
    let t0 = Instant::now();
    let mut obs = PromptObservation::default();
    let it_base = |v: &Verdict, prompt_id: Option<String>, nodes: Vec<String>| {
        let mut it = Iteration::from_verdict(n, v);
        it.prompt_id = prompt_id;
        it.cache_bust = bust;
        it.started_ms = started_ms;
        it.duration_ms = t0.elapsed().as_millis() as u64;
        it.nodes_executed = nodes;
        it
    };
    let prompt_id = match client.submit(&prompt, client_id) {
        Ok(Submitted::Queued {
            prompt_id,
            node_errors,
        }) if node_errors.as_object().is_some_and(|m| !m.is_empty()) => {
            // A 200 with node errors: ComfyUI dropped the outputs that failed validation and
            // runs only the rest (§12.11). That is not the user's workflow; do not call it a
            // pass or a failure of the flags.
            let _ = client.interrupt();
            let body = serde_json::json!({ "node_errors": node_errors });
            write_json(&opts.run_dir.join(format!("rejected-{n}.json")), &body);
            obs.rejected = Some(rejection_lines(&body));
            let mut v = classify::classify_prompt(&obs);
            v.explanation = Some(format!(
                "ComfyUI accepted prompt {prompt_id} but dropped the outputs that failed validation: fix the workflow so every output validates"
            ));
            return PromptResult {
                iteration: it_base(&v, Some(prompt_id), vec![]),
                exit: None,
                stop: true,
            };
        }
        Ok(Submitted::Queued { prompt_id, .. }) => prompt_id,
        Ok(Submitted::Rejected { body }) => {
            write_json(&opts.run_dir.join(format!("rejected-{n}.json")), &body);
            obs.rejected = Some(rejection_lines(&body));
            let v = classify::classify_prompt(&obs);
            return PromptResult {
                iteration: it_base(&v, None, vec![]),
                exit: None,
                stop: true,
            };
        }
        Ok(Submitted::ServerError { status, body }) => {
            let v = Verdict {
                outcome: Outcome::InvalidWorkflow,
                evidence: vec![format!("HTTP {status} from POST /prompt: {}", body.lines().last().unwrap_or(""))],
                signatures: vec![],
                explanation: Some("ComfyUI could not read the request: the workflow is not in API format, or this is a vrambisect bug".into()),
            };
            return PromptResult {
                iteration: it_base(&v, None, vec![]),
                exit: None,
                stop: true,
            };
        }
        Err(e) => {
            let v = Verdict {
                outcome: Outcome::Crash,
                evidence: vec![format!("POST /prompt failed: {e}")],
                signatures: vec![],
                explanation: Some("ComfyUI stopped answering HTTP".into()),
            };
            return PromptResult {
                iteration: it_base(&v, None, vec![]),
                exit: None,
                stop: true,
            };
        }
    };
    timing.submitted = Some(Instant::now());
    reporter.event(&RunEvent::Submitted {
        iteration: n,
        of: opts.iterations,
        prompt_id: prompt_id.clone(),
    });
    live.last_activity = Instant::now();
    let total = opts.workflow.node_count();
    let mut nodes: Vec<String> = Vec::new();
    let mut done_at: Option<Instant> = None;
    let mut finished = false;
    let mut interrupt_sent: Option<Instant> = None;
    let mut exit: Option<ExitStatus> = None;
    let ram_floor = ram_threshold(opts, sampler);
    let mut next_history_poll = Instant::now();
    let mut next_ram_check = Instant::now();
    loop {
        // Host memory pressure: stop ComfyUI ourselves before the kernel's OOM killer picks
        // a process (perhaps the desktop, perhaps this tool).
        if let (Some(floor), Some(s)) = (ram_floor, sampler)
            && Instant::now() >= next_ram_check
            && obs.stopped_for_ram.is_none()
            && obs.end.is_none()
        {
            next_ram_check = Instant::now() + Duration::from_millis(200);
            if let Some(available) = s
                .snapshot()
                .get("ram.available")
                .map(|r| r.last.max(0) as u64)
                && available < floor
            {
                reporter.event(&RunEvent::RamGuard {
                    available,
                    threshold: floor,
                });
                obs.stopped_for_ram = Some(format!(
                    "available RAM fell to {} MiB, below the {} MiB threshold (--min-available-ram)",
                    available >> 20,
                    floor >> 20
                ));
                child.kill_group();
            }
        }
        if let Some(ev) = live.pump() {
            timing.last_event = Some(Instant::now());
            if about_prompt(&ev, &prompt_id) {
                live.last_activity = Instant::now();
            }
            match ev {
                WsEvent::Executing {
                    prompt_id: Some(p),
                    node: None,
                } if p == prompt_id => finished = true,
                WsEvent::Executing {
                    prompt_id: p,
                    node: Some(node),
                } if p.as_deref().is_none_or(|p| p == prompt_id) => {
                    if !nodes.contains(&node) {
                        nodes.push(node.clone());
                        mark(format!(
                            "node {node} {}",
                            opts.workflow.class_of(&node).unwrap_or("?")
                        ));
                    }
                    reporter.event(&RunEvent::Node {
                        iteration: n,
                        class: opts.workflow.class_of(&node).map(str::to_string),
                        node,
                        done: nodes.len(),
                        total,
                    });
                }
                WsEvent::Progress {
                    prompt_id: p,
                    value,
                    max,
                    ..
                } if p.as_deref().is_none_or(|p| p == prompt_id) => {
                    reporter.event(&RunEvent::Step { value, max });
                }
                WsEvent::ExecutionSuccess { prompt_id: p } if p == prompt_id => {
                    obs.end = Some(PromptEnd::Success);
                    done_at = Some(Instant::now());
                }
                WsEvent::ExecutionError {
                    prompt_id: p,
                    node_id,
                    node_type,
                    exception_type,
                    exception_message,
                } if p == prompt_id => {
                    obs.end = Some(PromptEnd::Error {
                        node_id,
                        node_type,
                        exception_type,
                        exception_message,
                    });
                    done_at = Some(Instant::now());
                }
                WsEvent::ExecutionInterrupted {
                    prompt_id: p,
                    node_id,
                } if p == prompt_id => {
                    obs.end = Some(PromptEnd::Interrupted { node_id });
                    done_at = Some(Instant::now());
                }
                _ => {}
            }
        }
        // The websocket is gone but ComfyUI is not: history tells how the prompt ended.
        if live.ws_closed.is_some() && obs.end.is_none() && Instant::now() >= next_history_poll {
            next_history_poll = Instant::now() + Duration::from_millis(500);
            if let Some(end) = client
                .history(&prompt_id)
                .ok()
                .and_then(|h| crate::comfy::end_from_history(&h, &prompt_id))
            {
                obs.end = Some(end);
                finished = true;
                timing.last_event = Some(Instant::now());
            }
        }
        if finished {
            break;
        }
        // History is written before the final `executing`; do not wait forever for it.
        if done_at.is_some_and(|t| t.elapsed() > Duration::from_secs(5)) {
            break;
        }
        if let Some(e) = child.try_wait() {
            live.drain();
            let info = e;
            // Killed while RAM ran out: the kernel's OOM killer, not a crash of its own.
            obs.ram_exhausted = sampler
                .and_then(|s| s.snapshot().get("ram.available").map(|r| r.min))
                .is_some_and(|min| min < 256 << 20);
            obs.exit = Some(info);
            exit = Some(info);
            break;
        }
        match signals::requested() {
            Stop::Now => {
                obs.interrupted_by_user = true;
                break;
            }
            Stop::Graceful => {
                if interrupt_sent.is_none() {
                    reporter.event(&RunEvent::Interrupting);
                    let _ = client.interrupt();
                    interrupt_sent = Some(Instant::now());
                }
                obs.interrupted_by_user = true;
                if interrupt_sent.is_some_and(|t| t.elapsed() > Duration::from_secs(10)) {
                    break;
                }
            }
            Stop::No => {}
        }
        if obs.end.is_none() {
            if live.last_activity.elapsed() > opts.stall_timeout {
                obs.stalled = true;
                break;
            }
            if t0.elapsed() > opts.timeout {
                obs.timed_out = true;
                break;
            }
        }
    }
    if obs.end.is_some()
        && exit.is_none()
        && let Ok(history) = client.history(&prompt_id)
    {
        write_json(&opts.run_dir.join(format!("history-{n}.json")), &history);
    }
    if obs.end.is_some() && exit.is_none() {
        // The websocket can be ahead of stderr: ComfyUI's own lines about this prompt (the
        // traceback, `Got an OOM…`) may still be in the pipe. It always ends a prompt with
        // `Prompt executed in …`, so read until that line (bounded).
        let deadline = Instant::now() + Duration::from_millis(1500);
        while !live
            .window
            .iter()
            .any(|l| l.starts_with("Prompt executed in"))
            && Instant::now() < deadline
        {
            live.pump();
        }
    }
    mark(format!("prompt {n} end"));
    obs.log = live.window.iter().cloned().collect();
    let v = classify::classify_prompt(&obs);
    let stop = obs.interrupted_by_user || exit.is_some() || obs.stalled || obs.timed_out;
    PromptResult {
        iteration: it_base(&v, Some(prompt_id), nodes),
        exit,
        stop,
    }
}

/// The record of a run that never got to its prompts.
fn finish_early(
    opts: &RunOptions,
    started_at: SystemTime,
    clock: Instant,
    argv: Vec<String>,
    port: u16,
    v: Verdict,
    exit: Option<ExitStatus>,
) -> RunRecord {
    RunRecord {
        outcome: v.outcome,
        evidence: v.evidence,
        explanation: v.explanation,
        argv,
        flags: opts.comfy_flags.clone(),
        effective: Effective::default(),
        iterations: Vec::new(),
        peaks: Peaks::default(),
        run_dir: opts.run_dir.clone(),
        workflow: opts.workflow_path.clone(),
        started_at: super::folder::rfc3339(started_at),
        duration_ms: clock.elapsed().as_millis() as u64,
        startup_ms: None,
        port,
        teardown: Teardown {
            killed: false,
            group_empty: true,
            exit,
        },
        warnings: Vec::new(),
        system_stats: None,
        overhead: Overhead::default(),
        sampling: Vec::new(),
        gpu_wait_ms: 0,
    }
}

/// Where the log disagrees with what `explain` predicts for these flags.
fn compare_with_prediction(opts: &RunOptions, effective: &Effective) -> Vec<String> {
    let version = effective
        .comfyui_version
        .as_deref()
        .and_then(crate::version::Version::parse)
        .or_else(|| opts.install.version.clone());
    let parsed = argparse::parse(&opts.flags, &opts.comfy_flags, version.as_ref());
    let ctx = decide::Context {
        platform: decide::Platform::host(),
        version,
        total_vram_mb: None,
        env: opts.env.clone(),
    };
    let predicted = decide::decide(&parsed, &ctx);
    let mut out = Vec::new();
    for flag in ["--listen", "--port"] {
        if parsed.has(flag) {
            out.push(format!(
                "your {flag} was overridden: vrambisect runs ComfyUI on 127.0.0.1 and a free port"
            ));
        }
    }
    if let Some(actual) = effective.dynamic_vram
        && actual != predicted.dynamic_vram.enabled
    {
        let on_off = |b: bool| if b { "on" } else { "off" };
        out.push(format!(
            "Dynamic VRAM is {} according to the log, but the flags predict {} ({}): the hardware, PyTorch or comfy-aimdo decided",
            on_off(actual),
            on_off(predicted.dynamic_vram.enabled),
            predicted.dynamic_vram.reason
        ));
    }
    if let Some(state) = &effective.vram_state
        && state != predicted.vram_state
        && state != "DISABLED"
    {
        out.push(format!(
            "the log says 'Set vram state to: {state}', the flags predict {}",
            predicted.vram_state
        ));
    }
    out
}

fn client_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("vrambisect-{:x}-{:x}", std::process::id(), nanos)
}

fn tail(lines: &[String], n: usize) -> Vec<String> {
    let non_empty: Vec<&String> = lines.iter().filter(|l| !l.trim().is_empty()).collect();
    non_empty[non_empty.len().saturating_sub(n)..]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

fn write_json(path: &std::path::Path, value: &impl serde::Serialize) {
    if let Ok(text) = serde_json::to_string_pretty(value) {
        let _ = std::fs::write(path, text + "\n");
    }
}
