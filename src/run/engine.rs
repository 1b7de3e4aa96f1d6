//! The run engine: one ComfyUI process, N prompts, one record.
//!
//! [`launch`](super::launch) starts ComfyUI; each prompt is submitted here and followed by a
//! [`PromptWatch`], the pure state machine that decides when and how it ended; this module
//! only carries messages between ComfyUI and the watch, does the I/O the watch asks for,
//! tears ComfyUI down and builds the [`RunRecord`] in one place ([`assemble`]).

use super::folder::{self, Mark, write_json};
use super::launch::{self, HOST, Heard, NotReady, Server};
use super::record::{
    Iteration, Overhead, Peaks, RunKind, RunRecord, Shortening, Teardown, overall,
};
use super::watch::{Action, Input, Limits, PromptWatch, Watched};
use super::{Reporter, RunEvent, RunOptions};
use crate::classify::{Classification, ExitStatus};
use crate::comfy::ws;
use crate::comfy::{Client, Submitted, rejection_lines};
use crate::error::Result;
use crate::flags::{argparse, decide};
use crate::outcome::Outcome;
use crate::sampler::{Sampler, SamplerConfig, Summary, rss_at, series};
use crate::signals::{self, Stop};
use crate::startup::StartupFacts;
use crate::workflow::CacheBust;
use crate::workflow::Workflow;
use crate::workflow::quick::{self, Quick};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

/// Below this much available RAM when ComfyUI dies, the kernel's OOM killer is the suspect.
const RAM_EXHAUSTED: i64 = 256 << 20;
/// A gap this long between two wakes of a thread that wakes every tenth of a second means
/// vrambisect itself was stopped or the machine slept.
const PAUSED: Duration = Duration::from_secs(2);

/// Runs the workflow once (N prompts) and returns the record, also written to the run folder.
pub fn execute(opts: &RunOptions, reporter: &mut dyn Reporter) -> Result<RunRecord> {
    let dir = &opts.run_dir;
    // Two sessions on one GPU take turns: each would otherwise measure the other's memory.
    let notices = std::cell::RefCell::new(Vec::new());
    let lock = crate::gpulock::acquire(
        opts.nvml_lib.as_deref(),
        &mut |note| notices.borrow_mut().push(note.to_string()),
        &mut |holder| {
            for note in notices.borrow_mut().drain(..) {
                reporter.event(&RunEvent::Notice(note));
            }
            reporter.event(&RunEvent::WaitingForGpu {
                holder: holder.to_string(),
            })
        },
        &|| signals::requested() != Stop::No,
    )
    .map_err(|e| crate::error::Error::environment(format!("cannot take the GPU lock: {e}")))?;
    for note in notices.into_inner() {
        reporter.event(&RunEvent::Notice(note));
    }
    // The sampler starts before ComfyUI, so its first readings are the pre-run baseline.
    let sampler = Sampler::start(SamplerConfig {
        nvml_lib: opts.nvml_lib.clone(),
        cuda: opts.cuda,
        csv: Some(dir.join(folder::SAMPLES_CSV)),
        jsonl: Some(dir.join(folder::SAMPLES_JSONL)),
        ..SamplerConfig::default()
    })
    .ok();
    // Compile the signature catalogue while ComfyUI starts, not after its last message.
    std::thread::spawn(|| crate::classify::catalogue::match_line("").count());
    let started_at = SystemTime::now();
    let clock = Instant::now();
    let mut parts = match &lock {
        Some(_) => run(opts, reporter, sampler.as_ref(), clock)?,
        None => Parts::early(
            Vec::new(),
            0,
            Classification {
                outcome: Outcome::Interrupted,
                evidence: vec![],
                signatures: vec![],
                explanation: Some(format!(
                    "stopped with {} while waiting for the GPU",
                    crate::signals::cause()
                )),
            },
        ),
    };
    parts.gpu_wait_ms = lock
        .as_ref()
        .map(|l| l.waited.as_millis() as u64)
        .unwrap_or(0);
    let summary = sampler.map(|sampler| {
        settle_gpu(&sampler);
        sampler.stop()
    });
    let record = assemble(opts, started_at, clock, parts, summary.as_ref());
    if let Some(summary) = &summary {
        write_json(&dir.join(folder::SAMPLES_SUMMARY), summary)?;
    }
    write_json(&dir.join(folder::RECORD), &record)?;
    drop(lock);
    Ok(record)
}

/// What a run found, before it becomes a [`RunRecord`].
struct Parts {
    argv: Vec<String>,
    port: u16,
    /// The verdict of a run that never got to its prompts.
    early: Option<Classification>,
    startup_ms: Option<u64>,
    effective: StartupFacts,
    iterations: Vec<Iteration>,
    interrupted: bool,
    teardown: Teardown,
    system_stats: Option<serde_json::Value>,
    overhead: Overhead,
    warnings: Vec<String>,
    gpu_wait_ms: u64,
    run_kind: RunKind,
    quick: Option<Shortening>,
}

impl Parts {
    /// The verdict of a run that never got to its prompts.
    fn early(argv: Vec<String>, port: u16, verdict: Classification) -> Parts {
        Parts {
            early: Some(verdict),
            ..Parts::new(argv, port)
        }
    }

    fn new(argv: Vec<String>, port: u16) -> Parts {
        Parts {
            argv,
            port,
            early: None,
            startup_ms: None,
            effective: StartupFacts::default(),
            iterations: Vec::new(),
            interrupted: false,
            teardown: Teardown {
                killed: false,
                group_empty: true,
                exit: None,
            },
            system_stats: None,
            overhead: Overhead::default(),
            warnings: Vec::new(),
            gpu_wait_ms: 0,
            run_kind: RunKind::Full,
            quick: None,
        }
    }
}

/// The one place a [`RunRecord`] is made.
fn assemble(
    opts: &RunOptions,
    started_at: SystemTime,
    clock: Instant,
    parts: Parts,
    summary: Option<&Summary>,
) -> RunRecord {
    let (outcome, evidence, explanation) = match (&parts.early, overall(&parts.iterations)) {
        (Some(v), _) => (v.outcome, v.evidence.clone(), v.explanation.clone()),
        (None, deciding) => {
            let outcome = match deciding {
                _ if parts.interrupted || parts.iterations.is_empty() => Outcome::Interrupted,
                Some(it) => it.outcome,
                None => Outcome::Pass,
            };
            (
                outcome,
                deciding.map(|d| d.evidence.clone()).unwrap_or_default(),
                deciding.and_then(|d| d.explanation.clone()),
            )
        }
    };
    let mut record = RunRecord {
        outcome,
        evidence,
        explanation,
        argv: parts.argv,
        flags: opts.comfy_flags.clone(),
        effective: parts.effective,
        iterations: parts.iterations,
        peaks: Peaks::default(),
        ram_growth: None,
        run_dir: opts.run_dir.clone(),
        workflow: opts.target.workflow_path.clone(),
        started_at: folder::rfc3339(started_at),
        duration_ms: clock.elapsed().as_millis() as u64,
        startup_ms: parts.startup_ms,
        port: parts.port,
        teardown: parts.teardown,
        warnings: parts.warnings,
        system_stats: parts.system_stats,
        overhead: parts.overhead,
        sampling: Vec::new(),
        gpu_wait_ms: parts.gpu_wait_ms,
        defaults: opts.target.defaults.clone(),
        run_kind: parts.run_kind,
        quick: parts.quick,
        overlay: opts.overlay.clone(),
    };
    if let Some(summary) = summary {
        apply_samples(&mut record, summary);
    }
    record
}

/// The RAM threshold below which the run is stopped, from the option and the machine's RAM.
fn ram_threshold(opts: &RunOptions, sampler: Option<&Sampler>) -> Option<u64> {
    const MIB: u64 = 1 << 20;
    match opts.limits.min_available_ram {
        Some(0) => None,
        Some(bytes) => Some(bytes),
        None => {
            let total = sampler?.snapshot().get(series::RAM_TOTAL)?.max.max(0) as u64;
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
        match snap.get(&series::gpu(0, series::NVML_USED)) {
            Some(s) if s.last > s.min + TOLERANCE => std::thread::sleep(Duration::from_millis(100)),
            _ => return,
        }
    }
}

/// Peaks, other processes' VRAM and RAM not returned, from the samples.
fn apply_samples(record: &mut RunRecord, summary: &Summary) {
    let max = |name: &str| summary.get(name).map(|s| s.max.max(0) as u64);
    record.peaks = Peaks {
        vram_used_bytes: max(&series::gpu(0, series::NVML_USED)),
        vram_comfyui_bytes: max(&series::gpu(0, series::TREE_USED)),
        ram_comfyui_bytes: max(series::TREE_RSS),
        ram_available_min_bytes: summary
            .get(series::RAM_AVAILABLE)
            .map(|s| s.min.max(0) as u64),
        vram_other_processes_bytes: max(&series::gpu(0, series::OTHERS_USED)),
    };
    for it in &mut record.iterations {
        // Only a prompt after which ComfyUI still ran: a stopped or dead process has no RAM
        // to give back, and its "after" reading would make a negative figure.
        if !it.outcome.server_survives() {
            it.ram_retained_bytes = None;
            continue;
        }
        // The level at the end of this prompt against the level before it: the end of the
        // previous prompt (the same kind of reading, so a stale sample at a start mark does
        // not move RAM between prompts), or the start of the first.
        let end = rss_at(&summary.marks, &Mark::PromptEnd(it.iteration).to_string());
        let before = if it.iteration > 1 {
            rss_at(
                &summary.marks,
                &Mark::PromptEnd(it.iteration - 1).to_string(),
            )
        } else {
            rss_at(&summary.marks, &Mark::PromptStart(it.iteration).to_string())
        };
        it.ram_retained_bytes = end.zip(before).map(|(e, b)| e - b);
    }
    let retained: Vec<i64> = record
        .iterations
        .iter()
        .filter_map(|it| it.ram_retained_bytes)
        .collect();
    record.ram_growth = crate::run::record::RamGrowth::from_prompts(&retained);
    record.sampling = summary
        .unavailable
        .iter()
        .map(|u| format!("{}: {}", u.probe, u.reason))
        .collect();
}

/// Launch, the prompts, teardown.
fn run(
    opts: &RunOptions,
    reporter: &mut dyn Reporter,
    sampler: Option<&Sampler>,
    clock: Instant,
) -> Result<Parts> {
    keep_workflow(opts)?;
    let mut server = match launch::launch(opts, reporter, sampler, clock)? {
        Ok(server) => server,
        Err(NotReady {
            argv,
            port,
            verdict,
            teardown,
            effective,
        }) => {
            let mut parts = Parts::early(argv, port, verdict);
            parts.teardown = teardown;
            parts.effective = effective;
            return Ok(parts);
        }
    };
    reporter.event(&RunEvent::Ready {
        startup_ms: server.startup_ms,
    });
    if let Some(s) = sampler {
        s.set_comfy_url(&format!("http://{HOST}:{}", server.port));
        s.mark(&Mark::Ready.to_string());
    }
    let client = Client::new(&HOST.to_string(), server.port);
    let client_id = client_id();
    let stop_ws = Arc::new(AtomicBool::new(false));
    let (ws_thread, mut ws_open) = connect_ws(&server, &client_id, stop_ws.clone());

    let mut parts = Parts::new(server.argv.clone(), server.port);
    parts.startup_ms = Some(server.startup_ms);
    let mut process_exit: Option<ExitStatus> = None;
    let mut problems = Vec::new();
    // A UI-format workflow becomes the prompt the frontend would queue, with the nodes this
    // ComfyUI has; what cannot be converted ends the run as an invalid workflow.
    let installed = server.feed.startup.frontend_version.clone();
    let workflow = match convert_workflow(opts, &client, installed.as_deref()) {
        Ok(w) => Some(w),
        Err(verdict) => {
            parts.iterations.push(Iteration::from_verdict(1, &verdict));
            None
        }
    };
    // What the conversion did that the user should know of: on screen and in the record.
    for line in workflow.iter().flat_map(|w| &w.warnings) {
        reporter.event(&RunEvent::Notice(line.clone()));
        problems.push(line.clone());
    }
    let workflow = workflow.map(|w| shorten(opts, w, &mut parts, &mut problems));
    for n in 1..=opts.limits.iterations.max(1) {
        let Some(workflow) = &workflow else {
            break;
        };
        let mut prompt = Prompt {
            n,
            opts,
            workflow,
            client: &client,
            client_id: &client_id,
            server: &mut server,
            sampler,
            reporter: &mut *reporter,
            clock,
            ws_open: &mut ws_open,
            submitted: None,
            last_event: None,
            problems: &mut problems,
        };
        let (it, watched_exit, stop) = prompt.run();
        let (submitted, last_event) = (prompt.submitted, prompt.last_event);
        if n == 1
            && let Some(t) = submitted
        {
            parts.overhead.ready_to_submitted_ms = ms(t.duration_since(server.ready_at));
        }
        parts.overhead.end_to_verdict_ms = last_event.map(|t| ms(t.elapsed())).unwrap_or(0.0);
        process_exit = process_exit.or(watched_exit);
        reporter.event(&RunEvent::IterationDone {
            iteration: n,
            outcome: it.outcome,
        });
        let failed = it.outcome != Outcome::Pass;
        parts.interrupted |= it.outcome == Outcome::Interrupted;
        parts.iterations.push(it);
        if failed || stop {
            break;
        }
    }

    reporter.event(&RunEvent::Stopping);
    let stopping = Instant::now();
    if process_exit.is_none() && signals::requested() != Stop::Now {
        parts.system_stats = client.system_stats(Duration::from_secs(5)).ok();
    }
    if let Some(stats) = &parts.system_stats
        && let Err(e) = write_json(&opts.run_dir.join(folder::SYSTEM_STATS), stats)
    {
        problems.push(e.message);
    }
    stop_ws.store(true, std::sync::atomic::Ordering::Relaxed);
    let grace = if signals::kill_now() {
        Duration::ZERO
    } else {
        opts.grace
    };
    let Server { child, feed, .. } = server;
    parts.teardown = child.terminate(grace);
    if let Some(t) = ws_thread {
        let _ = t.join();
    }
    parts.overhead.teardown_ms = ms(stopping.elapsed());
    parts.effective = feed.startup.clone();
    parts.warnings = compare_with_prediction(opts, &parts.effective);
    parts.warnings.extend(problems);
    Ok(parts)
}

/// Writes the workflow into the run folder: the API prompt as `workflow.json` (for a UI-format
/// workflow, once it is converted), and the file it was given as beside it when that was not
/// the API prompt itself.
fn keep_workflow(opts: &RunOptions) -> Result<()> {
    let workflow = &opts.target.workflow;
    if workflow.ui.is_none() {
        write_json(
            &opts.run_dir.join(folder::WORKFLOW),
            &serde_json::Value::Object(workflow.prompt.clone()),
        )?;
    }
    if workflow.ui.is_some() || workflow.origin.is_some() {
        let source = &opts.target.workflow_path;
        let ext = source
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_else(|| "json".into());
        let kept = opts
            .run_dir
            .join(format!("{}.{ext}", folder::WORKFLOW_SOURCE));
        std::fs::copy(source, &kept)
            .map_err(|e| crate::error::io_error("copy the workflow to", &kept, &e))?;
    }
    Ok(())
}

/// The workflow to queue: the API prompt as given, or a UI-format workflow converted with the
/// node definitions of the ComfyUI that runs (`GET /object_info`); the verdict of a run whose
/// workflow cannot be converted with certainty.
fn convert_workflow(
    opts: &RunOptions,
    client: &Client,
    installed: Option<&str>,
) -> Result<Workflow, Classification> {
    let workflow = &opts.target.workflow;
    if workflow.ui.is_none() {
        return Ok(workflow.clone());
    }
    let served = served_frontend(&opts.target.flags, &opts.comfy_flags, installed);
    let invalid = |evidence: String, explanation: &str| Classification {
        outcome: Outcome::InvalidWorkflow,
        evidence: vec![evidence],
        signatures: vec![],
        explanation: Some(explanation.to_string()),
    };
    let defs = client
        .object_info()
        .ok()
        .and_then(|body| crate::workflow::nodes::NodeDefs::parse(&body))
        .ok_or_else(|| {
            invalid(
                "ComfyUI did not list its nodes (GET /object_info)".into(),
                "the UI-format workflow could not be converted: give the API format (Workflow → Export (API))",
            )
        })?;
    let converted = workflow.converted(&defs, served.as_deref()).map_err(|r| {
        invalid(
            format!("cannot convert the UI-format workflow: {r}"),
            "the workflow could not be converted as the frontend would: open it in ComfyUI and use Workflow → Export (API), then pass that file",
        )
    })?;
    let _ = write_json(
        &opts.run_dir.join(folder::WORKFLOW),
        &serde_json::Value::Object(converted.prompt.clone()),
    );
    Ok(converted)
}

/// The workflow a run queues: the shortened copy when `--quick` asks for one and it can be
/// made (kept beside the full prompt), else the workflow as it is, with why.
fn shorten(
    opts: &RunOptions,
    w: Workflow,
    parts: &mut Parts,
    problems: &mut Vec<String>,
) -> Workflow {
    if opts.quick == Quick::Off {
        return w;
    }
    match quick::for_mode(&w.prompt, opts.quick) {
        Ok(s) => {
            let kept = opts.run_dir.join(folder::WORKFLOW_QUICK);
            if let Err(e) = write_json(&kept, &serde_json::Value::Object(s.prompt.clone())) {
                problems.push(e.message);
            }
            parts.run_kind = RunKind::Quick;
            parts.quick = Some(Shortening::of(&s));
            Workflow {
                prompt: s.prompt,
                ..w
            }
        }
        Err(why) => {
            parts.quick = Some(Shortening::refused(why));
            w
        }
    }
}

/// The frontend version ComfyUI serves: `--front-end-version OWNER/REPO@1.30.2`'s (read as
/// argparse reads it, abbreviations too), else the installed package's the log reported; not
/// known for `--front-end-root` or `@latest`.
fn served_frontend(
    flags: &crate::flags::help::FlagSet,
    args: &[String],
    installed: Option<&str>,
) -> Option<String> {
    let parsed = argparse::parse(flags, args, None);
    if parsed.has("--front-end-root") {
        return None;
    }
    if let Some(given) = parsed.last("--front-end-version") {
        let v = given.values.last()?;
        let version = v.rsplit('@').next().unwrap_or("").trim_start_matches('v');
        return version
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
            .then(|| version.to_string());
    }
    installed.map(str::to_string)
}

/// Connects the websocket (retrying for a moment right after readiness) and starts the thread
/// that pumps it into the feed. Without it, prompts are followed through `/history`.
fn connect_ws(
    server: &Server,
    client_id: &str,
    stop: Arc<AtomicBool>,
) -> (Option<std::thread::JoinHandle<()>>, bool) {
    let addr = SocketAddr::from((HOST, server.port));
    let mut socket = ws::connect(addr, client_id);
    for _ in 0..4 {
        if socket.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
        socket = ws::connect(addr, client_id);
    }
    match socket {
        Ok(socket) => {
            let tx = server.feed.tx.clone();
            (
                Some(std::thread::spawn(move || ws::pump(socket, tx, stop))),
                true,
            )
        }
        Err(_) => (None, false),
    }
}

/// How posting a prompt went.
enum Submission {
    /// ComfyUI queued it under this id.
    Queued(String),
    /// Nothing of it ran: the verdict, and the id if ComfyUI gave one.
    NothingRan(Box<Watched>, Option<String>),
}

/// One prompt of a run: submitted here, followed by a [`PromptWatch`].
struct Prompt<'a> {
    n: u32,
    opts: &'a RunOptions,
    /// The API prompt (converted, when the workflow was given in the UI format).
    workflow: &'a Workflow,
    client: &'a Client,
    client_id: &'a str,
    server: &'a mut Server,
    sampler: Option<&'a Sampler>,
    reporter: &'a mut dyn Reporter,
    clock: Instant,
    ws_open: &'a mut bool,
    /// When ComfyUI accepted the prompt.
    submitted: Option<Instant>,
    /// The last websocket message about it (the start of the tool's own overhead).
    last_event: Option<Instant>,
    /// Files that could not be written (they become warnings of the record).
    problems: &'a mut Vec<String>,
}

impl Prompt<'_> {
    fn mark(&self, mark: Mark) {
        if let Some(s) = self.sampler {
            s.mark(&mark.to_string());
        }
    }

    fn save(&mut self, name: String, value: &serde_json::Value) {
        if let Err(e) = write_json(&self.opts.run_dir.join(name), value) {
            self.problems.push(e.message);
        }
    }

    /// The iteration's record, ComfyUI's exit if it died, and whether the run must stop.
    fn run(&mut self) -> (Iteration, Option<ExitStatus>, bool) {
        let n = self.n;
        let (prompt, bust) = self.workflow.for_iteration(n);
        if bust == CacheBust::Free {
            // No seed to change: empty ComfyUI's cache so the prompt really executes.
            let _ = self.client.free();
            std::thread::sleep(Duration::from_millis(300));
        }
        self.mark(Mark::PromptStart(n));
        let started_ms = self.clock.elapsed().as_millis() as u64;
        let t0 = Instant::now();
        let (watched, prompt_id) = match self.submit(&prompt) {
            Submission::Queued(prompt_id) => (self.watch(&prompt_id, t0), Some(prompt_id)),
            Submission::NothingRan(watched, prompt_id) => (*watched, prompt_id),
        };
        self.mark(Mark::PromptEnd(n));
        let mut it = Iteration::from_verdict(n, &watched.verdict);
        it.prompt_id = prompt_id;
        it.cache_bust = bust;
        it.started_ms = started_ms;
        it.duration_ms = t0.elapsed().as_millis() as u64;
        it.nodes_executed = watched.nodes;
        it.node = watched.failed_node;
        (it, watched.exit, watched.stop_run)
    }

    /// Posts the prompt; its id, or the verdict of a prompt that never ran.
    fn submit(&mut self, prompt: &serde_json::Map<String, serde_json::Value>) -> Submission {
        let n = self.n;
        let nothing_ran = |v: Classification| {
            Box::new(Watched {
                verdict: v,
                nodes: Vec::new(),
                exit: None,
                stop_run: true,
                failed_node: None,
            })
        };
        match self.client.submit(prompt, self.client_id) {
            Ok(Submitted::Queued {
                prompt_id,
                node_errors,
            }) if node_errors.as_object().is_some_and(|m| !m.is_empty()) => {
                // A 200 with node errors: ComfyUI dropped the outputs that failed validation
                // and runs only the rest. That is not the user's workflow; do not call it a
                // pass or a failure of the flags.
                let _ = self.client.interrupt();
                let body = serde_json::json!({ "node_errors": node_errors });
                self.save(folder::rejected(n), &body);
                let mut watched = PromptWatch::refused(rejection_lines(&body));
                watched.verdict.explanation = Some(format!(
                    "ComfyUI accepted prompt {prompt_id} but dropped the outputs that failed validation: fix the workflow so every output validates"
                ));
                Submission::NothingRan(Box::new(watched), Some(prompt_id))
            }
            Ok(Submitted::Queued { prompt_id, .. }) => {
                self.submitted = Some(Instant::now());
                self.reporter.event(&RunEvent::Submitted {
                    iteration: n,
                    of: self.opts.limits.iterations,
                    prompt_id: prompt_id.clone(),
                });
                Submission::Queued(prompt_id)
            }
            Ok(Submitted::Rejected { body }) => {
                self.save(folder::rejected(n), &body);
                Submission::NothingRan(Box::new(PromptWatch::refused(rejection_lines(&body))), None)
            }
            Ok(Submitted::ServerError { status, body }) => Submission::NothingRan(
                nothing_ran(Classification {
                    outcome: Outcome::InvalidWorkflow,
                    evidence: vec![format!(
                        "HTTP {status} from POST /prompt: {}",
                        body.lines().last().unwrap_or("")
                    )],
                    signatures: vec![],
                    explanation: Some("ComfyUI could not read the request: the workflow is not in API format, or this is a vrambisect bug".into()),
                }),
                None,
            ),
            Err(e) => Submission::NothingRan(
                nothing_ran(Classification {
                    outcome: Outcome::Crash,
                    evidence: vec![format!("POST /prompt failed: {e}")],
                    signatures: vec![],
                    explanation: Some("ComfyUI stopped answering HTTP".into()),
                }),
                None,
            ),
        }
    }

    /// Carries what ComfyUI says to the watch, and does what the watch asks, until it is over.
    fn watch(&mut self, prompt_id: &str, t0: Instant) -> Watched {
        let limits = Limits {
            timeout: self.opts.limits.timeout,
            stall: self.opts.limits.stall_timeout,
            ram_floor: ram_threshold(self.opts, self.sampler),
        };
        // Time vrambisect itself did not run (stopped, a machine asleep) is not ComfyUI's
        // silence: a clock of its own sees a stop wherever the loop was then. Started before
        // the watch's clock, so that no stop falls between the two.
        let mut held = super::pause::PauseWatch::start(PAUSED);
        let mut watch = PromptWatch::new(prompt_id, limits, t0.elapsed(), *self.ws_open);
        let mut inputs: VecDeque<Input> = VecDeque::new();
        let mut alive = Instant::now();
        let mut signs = self.signs_of_life();
        while !watch.is_done() {
            if alive.elapsed() >= Duration::from_secs(1) {
                self.reporter.event(&RunEvent::Alive);
                alive = Instant::now();
                let now = self.signs_of_life();
                if let Some(what) = signs.moved_to(&now) {
                    inputs.push_back(Input::Moving(what));
                }
                signs = signs.highest(&now);
            }
            match self.server.feed.listen() {
                Heard::Line(l) => inputs.push_back(Input::Line(l)),
                Heard::Ws(ev) => {
                    self.last_event = Some(Instant::now());
                    inputs.push_back(Input::Ws(ev));
                }
                Heard::WsClosed(_) => {
                    *self.ws_open = false;
                    inputs.push_back(Input::WsClosed);
                }
                Heard::Nothing => {}
            }
            if let Some(exit) = self.server.child.try_wait() {
                inputs.extend(self.server.feed.drain().into_iter().map(Input::Line));
                // Killed while RAM ran out: the kernel's OOM killer, not a crash of its own.
                let ram_exhausted = self
                    .sampler
                    .and_then(|s| s.snapshot().get(series::RAM_AVAILABLE).map(|r| r.min))
                    .is_some_and(|min| min < RAM_EXHAUSTED);
                inputs.push_back(Input::Exited {
                    exit,
                    ram_exhausted,
                });
            }
            inputs.push_back(Input::Tick {
                stop: signals::requested(),
            });
            while let Some(input) = inputs.pop_front() {
                let at = t0.elapsed();
                if matches!(input, Input::Tick { .. }) {
                    // Read after the clock: a stop before it is seen here, a stop after it
                    // leaves the tick at a time before the stop.
                    let stopped = held.take();
                    if !stopped.is_zero() {
                        watch.feed(at, Input::Paused(stopped));
                    }
                }
                // The answers to this input's actions come next, in the order asked.
                let answers: Vec<Input> = watch
                    .feed(at, input)
                    .into_iter()
                    .filter_map(|action| self.act(action, prompt_id))
                    .collect();
                for answer in answers.into_iter().rev() {
                    inputs.push_front(answer);
                }
            }
        }
        watch.finish()
    }

    /// What ComfyUI's process group is doing besides talking: its resident memory and VRAM
    /// (from the sampler) and what it has read from disk.
    fn signs_of_life(&self) -> SignsOfLife {
        let snap = self.sampler.map(|s| s.snapshot());
        let last = |name: &str| snap.as_ref().and_then(|s| s.get(name)).map(|s| s.last);
        SignsOfLife {
            rss: last(series::TREE_RSS),
            // ComfyUI's own VRAM only: the whole GPU's would count another program's work.
            vram: last(&series::gpu(0, series::TREE_USED)),
            read: crate::process::sys::group_read_bytes(self.server.child.pid),
        }
    }

    /// Does what the watch asked; some actions have an answer for it.
    fn act(&mut self, action: Action, prompt_id: &str) -> Option<Input> {
        match action {
            Action::NodeStarted { node, done } => {
                let class = self.workflow.class_of(&node).map(str::to_string);
                self.mark(Mark::Node {
                    id: node.clone(),
                    class: class.clone().unwrap_or_else(|| "?".into()),
                });
                self.reporter.event(&RunEvent::Node {
                    iteration: self.n,
                    node,
                    class,
                    done,
                    total: self.workflow.node_count(),
                });
                None
            }
            Action::Step { value, max } => {
                self.reporter.event(&RunEvent::Step { value, max });
                None
            }
            Action::CheckRam => self
                .sampler?
                .snapshot()
                .get(series::RAM_AVAILABLE)
                .map(|r| Input::RamAvailable(r.last.max(0) as u64)),
            Action::RamLow { available, floor } => {
                self.reporter.event(&RunEvent::RamGuard {
                    available,
                    threshold: floor,
                });
                None
            }
            Action::KillGroup => {
                self.server.child.kill_group();
                None
            }
            Action::Interrupting => {
                self.reporter.event(&RunEvent::Interrupting);
                None
            }
            Action::SendInterrupt => {
                let _ = self.client.interrupt();
                None
            }
            Action::PollHistory => {
                let end = self
                    .client
                    .history(prompt_id)
                    .ok()
                    .and_then(|h| crate::comfy::end_from_history(&h, prompt_id))?;
                self.last_event = Some(Instant::now());
                Some(Input::History(end))
            }
            Action::SaveHistory => {
                if let Ok(history) = self.client.history(prompt_id) {
                    self.save(folder::history(self.n), &history);
                }
                None
            }
        }
    }
}

/// Readings that show a silent ComfyUI is still working (see [`SignsOfLife::moved_to`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct SignsOfLife {
    rss: Option<i64>,
    vram: Option<i64>,
    read: Option<u64>,
}

impl SignsOfLife {
    /// The highest of each reading (what progress is measured against: memory that only
    /// goes up and down again is not progress).
    fn highest(&self, now: &SignsOfLife) -> SignsOfLife {
        let max_i = |a: Option<i64>, b: Option<i64>| a.max(b);
        SignsOfLife {
            rss: max_i(self.rss, now.rss),
            vram: max_i(self.vram, now.vram),
            read: self.read.max(now.read),
        }
    }

    /// What moved past `self` (the highest readings so far), in words: reads from disk of
    /// 1 MiB or more, resident memory or VRAM 8 MiB or more above their highest. CPU time is
    /// not counted: a driver call spinning at 100% must still end as a hang.
    fn moved_to(&self, now: &SignsOfLife) -> Option<String> {
        const READ: u64 = 1 << 20;
        const MEMORY: i64 = 8 << 20;
        let mut moved = Vec::new();
        if let (Some(a), Some(b)) = (self.read, now.read)
            && b >= a + READ
        {
            moved.push(format!("disk reads ({} MiB/s)", (b - a) >> 20));
        }
        if let (Some(a), Some(b)) = (self.rss, now.rss)
            && b >= a + MEMORY
        {
            moved.push(format!("RAM ({:+} MiB)", (b - a) >> 20));
        }
        if let (Some(a), Some(b)) = (self.vram, now.vram)
            && b >= a + MEMORY
        {
            moved.push(format!("VRAM ({:+} MiB)", (b - a) >> 20));
        }
        (!moved.is_empty()).then(|| moved.join(", "))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Where the log disagrees with what `explain` predicts for these flags.
fn compare_with_prediction(opts: &RunOptions, effective: &StartupFacts) -> Vec<String> {
    let version = effective
        .comfyui_version
        .as_deref()
        .and_then(crate::version::Version::parse)
        .or_else(|| opts.target.install.version.clone());
    let parsed = argparse::parse(&opts.target.flags, &opts.comfy_flags, version.as_ref());
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
    out.extend(disagreements(&predicted, effective));
    out
}

/// Where the startup log says something else was in force than the flags predict (the log
/// wins: it is what ran).
fn disagreements(predicted: &decide::Predicted, effective: &StartupFacts) -> Vec<String> {
    let mut out = Vec::new();
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
    // The log names async offload and pinned memory only when they are on.
    if let Some(streams) = effective.async_offload_streams
        && predicted.async_offload_streams != Some(streams)
    {
        out.push(format!(
            "the log says async offload runs with {streams} streams, the flags predict {}",
            match predicted.async_offload_streams {
                Some(n) => format!("{n} streams"),
                None => "it off".into(),
            }
        ));
    }
    if effective.pinned_memory == Some(true) && !predicted.pinned_memory {
        out.push("the log says pinned memory is on, the flags predict it off".into());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::decide::{Context, Platform};

    fn predicted(args: &[&str]) -> decide::Predicted {
        let p = crate::flags::profile::builtin(None);
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let parsed = argparse::parse(&p.flags, &args, Some(&p.version));
        decide::decide(&parsed, &Context::new(Platform::Linux))
    }

    #[test]
    fn the_served_frontend_is_the_flags_or_the_installed_one() {
        let p = crate::flags::profile::builtin(None);
        let served = |args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            served_frontend(&p.flags, &args, Some("1.27.10"))
        };
        assert_eq!(served(&[]).as_deref(), Some("1.27.10"));
        assert_eq!(
            served(&["--front-end-version", "Comfy-Org/ComfyUI_frontend@v1.58.1"]).as_deref(),
            Some("1.58.1")
        );
        assert_eq!(
            served(&["--front-end-v=Comfy-Org/ComfyUI_frontend@1.30.2"]).as_deref(),
            Some("1.30.2")
        );
        assert_eq!(
            served(&["--front-end-version", "Comfy-Org/ComfyUI_frontend@latest"]),
            None
        );
        assert_eq!(served(&["--front-end-root", "/srv/frontend"]), None);
    }

    #[test]
    fn only_disk_reads_ram_and_vram_are_signs_of_life() {
        let before = SignsOfLife {
            rss: Some(1 << 30),
            vram: Some(2 << 30),
            read: Some(100 << 20),
        };
        assert_eq!(before.moved_to(&before), None, "nothing moved");
        let small = SignsOfLife {
            rss: Some((1 << 30) + (4 << 20)),
            read: Some((100 << 20) + 4096),
            ..before
        };
        assert_eq!(before.moved_to(&small), None, "noise is not progress");
        let loading = SignsOfLife {
            rss: Some((1 << 30) + (300 << 20)),
            read: Some(400 << 20),
            ..before
        };
        assert_eq!(
            before.moved_to(&loading).as_deref(),
            Some("disk reads (300 MiB/s), RAM (+300 MiB)")
        );
        // Memory going down, or back up to where it was, is no progress.
        let freeing = SignsOfLife {
            vram: Some(1 << 30),
            ..before
        };
        assert_eq!(before.moved_to(&freeing), None);
        let highest = before.highest(&freeing);
        assert_eq!(highest.vram, Some(2 << 30));
        let back = SignsOfLife {
            vram: Some(2 << 30),
            ..before
        };
        assert_eq!(highest.moved_to(&back), None);
        let loading_vram = SignsOfLife {
            vram: Some(3 << 30),
            ..before
        };
        assert_eq!(
            highest.moved_to(&loading_vram).as_deref(),
            Some("VRAM (+1024 MiB)")
        );
        // Unknown readings say nothing either way.
        assert_eq!(SignsOfLife::default().moved_to(&loading), None);
    }

    #[test]
    fn the_log_contradicting_the_prediction_is_said() {
        let logged = StartupFacts {
            async_offload_streams: Some(2),
            pinned_memory: Some(true),
            ..StartupFacts::default()
        };
        // --cpu predicts neither (async offload is on only when asked for there).
        let said = disagreements(&predicted(&["--cpu"]), &logged);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("async offload runs with 2 streams"),
            "{said:?}"
        );
        assert!(said[1].contains("pinned memory is on"), "{said:?}");
        // What the flags predict, the log confirming it: nothing to say.
        assert!(
            disagreements(
                &predicted(&["--cpu", "--async-offload"]),
                &StartupFacts {
                    async_offload_streams: Some(2),
                    ..StartupFacts::default()
                }
            )
            .is_empty()
        );
        // A log that says nothing contradicts nothing.
        assert!(disagreements(&predicted(&[]), &StartupFacts::default()).is_empty());
    }
}
