//! The run engine: one ComfyUI process, N prompts, one record.
//!
//! [`launch`](super::launch) starts ComfyUI; each prompt is posted and followed by
//! `run/prompt.rs` (the watch that decides when and how it ended, and the I/O it asks for); this module samples, compares the startup log with the flags' prediction, tears
//! ComfyUI down and builds the [`RunRecord`] in one place ([`assemble`]).

use super::folder::{self, Mark, write_json};
use super::launch::{self, HOST, NotReady, Server};
use super::prompt::Prompt;
use super::record::{
    Iteration, Overhead, Peaks, RunKind, RunRecord, Shortening, Teardown, overall,
};
use super::{Reporter, RunEvent, RunOptions};
use crate::classify::{Classification, ExitStatus};
use crate::comfy::Client;
use crate::comfy::ws;
use crate::error::Result;
use crate::flags::{argparse, decide};
use crate::outcome::Outcome;
use crate::sampler::{Sampler, SamplerConfig, Summary, rss_at, series};
use crate::signals::{self, Stop};
use crate::startup::StartupFacts;
use crate::workflow::Workflow;
use crate::workflow::quick::{self, Quick};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

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

    // A Ctrl-C that interrupted a prompt was answered there; one pressed after its prompt
    // ended is answered once ComfyUI is given its grace.
    let mut interrupt_said = parts.interrupted;
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
    parts.teardown = child.terminate_telling(grace, &mut || {
        if !std::mem::replace(&mut interrupt_said, true) {
            reporter.event(&RunEvent::Interrupting);
        }
    });
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
    out.extend(predicted.disagreements(effective));
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
}
