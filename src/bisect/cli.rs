//! `vrambisect bisect` from parsed arguments: a new or resumed session, run to a verdict.

use super::result::{self, BisectResult};
use super::search::{Search, Strategy, VerdictKind, matrix_size};
use super::session::{self, LiveOracle, SessionEvent, SessionReporter, SessionSpec};
use super::space::{DEFAULT_TOGGLES, Space};
use crate::cli::BisectArgs;
use crate::error::{Error, Result, exit};
use crate::flags::decide::{Context, Platform};
use crate::install::Install;
use crate::launcher::{self, Launch};
use crate::output::StatusLine;
use crate::run::{self, Reporter, RunEvent, RunOptions};
use crate::signals::{self, Stop};
use crate::workflow::Workflow;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The session's settings from the command line (a new session).
fn spec_from_args(args: &BisectArgs) -> Result<SessionSpec> {
    let comfyui = args
        .comfyui
        .clone()
        .expect("clap requires --comfyui without --resume");
    let workflow = args
        .workflow
        .clone()
        .expect("clap requires --workflow without --resume");
    let launch = match &args.launcher {
        Some(path) => launcher::read_file(path, &args.base)?,
        None => Launch::from_command_line(&args.base),
    };
    Ok(SessionSpec {
        comfyui: canonical(&comfyui),
        python: args.python.clone(),
        workflow: canonical(&workflow),
        launcher: args.launcher.as_deref().map(canonical),
        base_flags: launch.args.clone(),
        toggles: args.toggle.clone(),
        default_toggles: args.toggle.is_empty(),
        strategy: args.strategy,
        repeat: args.repeat,
        iterations: args.iterations,
        max_runs: args.max_runs.unwrap_or(64),
        timeout_ms: args.timeout.as_millis() as u64,
        stall_timeout_ms: args.stall_timeout.as_millis() as u64,
        startup_timeout_ms: args.startup_timeout.as_millis() as u64,
        env: launch.env,
    })
}

/// The toggles tried when none are given. The cache modes are left out by default: every
/// run starts a fresh ComfyUI, so with one prompt per run the cache holds nothing that
/// matters; with --iterations 2 or more it does, and --cache-none joins. --disable-smart-memory
/// is left out too: in v0.38 it no longer touches Dynamic VRAM, made no difference in the
/// RAM fill-up reports (#12332), and makes every prompt reload its models.
pub fn default_toggles(iterations: u32) -> Vec<String> {
    let mut out: Vec<String> = DEFAULT_TOGGLES.iter().map(|s| s.to_string()).collect();
    if iterations >= 2 {
        out.push("--cache-none".into());
    }
    out
}

/// Runs `bisect`; returns the result (also written to the session folder) and the exit code.
pub fn run(args: &BisectArgs, progress_visible: bool) -> Result<(BisectResult, i32)> {
    let (dir, spec, entries) = match &args.resume {
        Some(dir) => {
            let (dir, mut spec, entries) = session::open(dir)?;
            // Everything else is the session's own; a new run budget may be given.
            if let Some(max) = args.max_runs {
                spec.max_runs = max;
            }
            (dir, spec, entries)
        }
        None => {
            let spec = spec_from_args(args)?;
            // Check the inputs before making a session folder.
            Workflow::load(&spec.workflow)?;
            Install::open(&spec.comfyui)?;
            let dir = args
                .output
                .clone()
                .unwrap_or_else(|| run::folder::fresh(Path::new("vrambisect-sessions"), "bisect"));
            let dir = session::create(&dir, &spec)?;
            (dir, spec, Vec::new())
        }
    };
    let workflow = Workflow::load(&spec.workflow)?;
    let install = Install::open(&spec.comfyui)?;
    let python = install.python(spec.python.as_deref());
    let flags = install.flags(&python).map_err(|e| Error {
        kind: crate::error::ErrorKind::Untestable,
        ..e
    })?;
    let toggles = if spec.default_toggles {
        default_toggles(spec.iterations)
    } else {
        spec.toggles.clone()
    };
    let ctx = Context {
        env: spec.env.clone(),
        ..Context::new(Platform::host())
    };
    let space = Space::new(
        &flags,
        install.version.clone(),
        ctx,
        &spec.base_flags,
        &toggles,
    );
    if spec.strategy == Strategy::Matrix && matrix_size(&space) > 1024 {
        return Err(Error::usage(format!(
            "--strategy matrix would need up to {} runs for these toggles",
            matrix_size(&space)
        ))
        .hint("use the adaptive strategy, or fewer toggles"));
    }
    let opts = RunOptions {
        install: install.clone(),
        python: python.clone(),
        flags: flags.clone(),
        workflow,
        workflow_path: spec.workflow.clone(),
        comfy_flags: Vec::new(),
        env: spec.env.clone(),
        iterations: spec.iterations,
        timeout: Duration::from_millis(spec.timeout_ms),
        stall_timeout: Duration::from_millis(spec.stall_timeout_ms),
        startup_timeout: Duration::from_millis(spec.startup_timeout_ms),
        grace: Duration::from_secs(10),
        run_dir: dir.clone(),
        nvml_lib: args.nvml_lib.clone(),
        cuda: false,
        min_available_ram: args.min_available_ram,
    };
    signals::install();
    let planned = planned_runs(&space, spec.strategy, spec.repeat);
    let mut progress = BisectProgress::new(progress_visible, planned, entries.len() as u64);
    let launcher_line = launcher_line(&spec, &python);
    let (found, tallies, runs) = {
        let space_ref = &space;
        let mut oracle = LiveOracle {
            dir: dir.clone(),
            base: opts,
            reporter: &mut progress,
            next: entries.iter().map(|e| e.n).max().unwrap_or(0) + 1,
            describe: Box::new(move |c| {
                if c.choice.is_empty() {
                    "your flags".to_string()
                } else {
                    space_ref.describe(&c.choice).join(", ")
                }
            }),
        };
        let mut search = Search::new(
            &space,
            &mut oracle,
            spec.settings(),
            session::tallies(&entries),
        );
        let found = search.run();
        (found, search.tallies.clone(), search.runs)
    };
    drop(progress);
    let info = result::SessionInfo {
        session_dir: dir.clone(),
        strategy: spec.strategy,
        toggles,
        launcher: &launcher_line,
    };
    let result = result::build(&space, &found, &tallies, runs, info);
    let text = serde_json::to_string_pretty(&result).expect("result serialises");
    let _ = std::fs::write(dir.join(session::RESULT_FILE), text + "\n");
    let code = match found.kind {
        VerdictKind::FixedBy | VerdictKind::CausedBy => exit::OK,
        VerdictKind::Untestable => exit::UNTESTABLE,
        VerdictKind::Incomplete if signals::requested() != Stop::No => exit::INTERRUPTED,
        _ => exit::FAILED,
    };
    Ok((result, code))
}

/// How many runs the strategy is expected to take (the progress bar grows if it takes more).
fn planned_runs(space: &Space, strategy: Strategy, repeat: u32) -> u64 {
    let k = space.dims.len().max(1) as f64;
    let per = repeat.max(1) as u64;
    let configs = match strategy {
        Strategy::Adaptive => 1 + k.log2().ceil() as u64 + 1,
        Strategy::Each => {
            1 + space
                .dims
                .iter()
                .map(|d| d.alternatives() as u64)
                .sum::<u64>()
                + 1
        }
        Strategy::Matrix => matrix_size(space) as u64 + 1,
    };
    configs * per
}

/// The line to start ComfyUI with: the launcher's own line when there was one.
fn launcher_line(
    spec: &SessionSpec,
    python: &crate::install::Python,
) -> impl Fn(&[String]) -> String + use<> {
    let launch = spec
        .launcher
        .as_ref()
        .and_then(|p| launcher::read_file(p, &[]).ok());
    let python = python.path.display().to_string();
    move |flags: &[String]| {
        let mut parts: Vec<String> = match &launch {
            Some(l) => l
                .python
                .iter()
                .chain(&l.python_args)
                .chain(&l.script)
                .cloned()
                .collect(),
            None => vec![python.clone(), "main.py".into()],
        };
        parts.extend(flags.iter().cloned());
        crate::text::command_line(&parts)
    }
}

/// The bisect's progress: runs done of planned, the current configuration, ETA.
struct BisectProgress {
    line: StatusLine,
    current: String,
}

impl BisectProgress {
    fn new(visible: bool, planned: u64, done: u64) -> BisectProgress {
        let line = StatusLine::new(
            visible,
            "{bar:20} run {pos}/{len} · {elapsed_precise} (ETA {eta}) {msg}",
            Some(planned.max(done + 1)),
        );
        line.bar.set_position(done);
        BisectProgress {
            line,
            current: String::new(),
        }
    }
}

impl Reporter for BisectProgress {
    fn event(&mut self, event: &RunEvent) {
        if let Some(phase) = event.phase() {
            self.line
                .bar
                .set_message(format!("{} · {phase}", self.current));
            return;
        }
        match event {
            RunEvent::WaitingForGpu { holder } => self.line.say(format!(
                "waiting for the GPU: {holder} is running a workflow on it"
            )),
            RunEvent::RamGuard { available, .. } => self.line.say(format!(
                "available RAM is down to {} MiB: stopping ComfyUI before the OOM killer does",
                available >> 20
            )),
            RunEvent::Interrupting => self.line.say(
                "interrupting: the current run ends cleanly; resume later with --resume".into(),
            ),
            _ => {}
        }
    }
}

impl SessionReporter for BisectProgress {
    fn session(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::RunStarting { n, describe, .. } => {
                self.current = describe.clone();
                if u64::from(*n) > self.line.bar.length().unwrap_or(0) {
                    self.line.bar.set_length(u64::from(*n));
                }
            }
            SessionEvent::RunFinished {
                n,
                outcome,
                duration_ms,
            } => {
                self.line.say(format!(
                    "run {n}: {:<40} {} ({:.1} s)",
                    self.current,
                    outcome,
                    *duration_ms as f64 / 1000.0
                ));
                self.line.bar.inc(1);
            }
        }
    }
}
