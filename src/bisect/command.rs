//! `vrambisect bisect` from its request: a new or resumed session, run to a verdict.

use super::result::{self, BisectResult};
use super::search::{RunKind, Search, Strategy, VerdictKind, matrix_size};
use super::session::{self, LiveOracle, SessionEvent, SessionReporter, SessionSpec};
use super::space::{DEFAULT_TOGGLES, Space};
use crate::error::{Error, Result, exit};
use crate::flags::decide::{Context, Platform};
use crate::launcher;
use crate::locate::{Chosen, Defaults};
use crate::outcome::Outcome;
use crate::output::StatusLine;
use crate::run::{self, Limits, Reporter, RunEvent, RunOptions, Target};
use crate::session::SessionDir;
use crate::session::quick::{self as shortening, Recorded};
use crate::signals::{self, Stop};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The first lines of a bisect: which ComfyUI folder and Python, and why.
fn say_defaults(defaults: &Defaults, err: &mut dyn Write) {
    for line in defaults.lines() {
        let _ = writeln!(err, "{line}");
    }
}

fn canonical(p: &Path) -> PathBuf {
    crate::paths::canonical(p)
}

/// What `bisect` was asked to do, resolved from the command line.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub session: Session,
    /// A run budget (`--max-runs`); for a resumed session, a new one.
    pub max_runs: Option<u32>,
    /// `--confidence` for a new session.
    pub confidence: f64,
    /// Overrides the session's RAM guard (it is the machine's, not the session's).
    pub min_available_ram: Option<u64>,
    pub nvml_lib: Option<PathBuf>,
}

/// A new session, or one to resume.
#[derive(Debug, Clone)]
pub(crate) enum Session {
    New(Box<NewSession>),
    /// The session folder.
    Resume(PathBuf),
}

/// The settings of a new session.
#[derive(Debug, Clone)]
pub(crate) struct NewSession {
    /// The ComfyUI folder, and where it came from.
    pub comfyui: crate::locate::Chosen,
    pub workflow: PathBuf,
    pub python: Option<PathBuf>,
    pub launcher: Option<PathBuf>,
    /// The user's flags (from the launcher, or after `--`).
    pub base_flags: Vec<String>,
    /// Variables the launcher sets.
    pub env: Vec<(String, String)>,
    /// `--toggle`s; empty for the default set.
    pub toggles: Vec<String>,
    pub strategy: Strategy,
    pub repeat: u32,
    pub limits: crate::run::Limits,
    pub output: Option<PathBuf>,
    /// Run the failing configuration once more without custom nodes (`--no-custom-nodes-check`
    /// turns it off).
    pub custom_nodes_check: bool,
    /// `--quick`.
    pub quick: crate::workflow::quick::Quick,
    /// Packages put in front of the Python's own (see [`SessionSpec::overlay`]).
    pub overlay: Option<crate::run::Overlay>,
    /// `--first-fix`.
    pub first_fix: bool,
    /// `--failed-log`: a log of ComfyUI in which the workflow failed with these flags.
    pub failed_log: Option<PathBuf>,
}

impl NewSession {
    /// The session's settings as its folder keeps them.
    fn spec(&self, max_runs: Option<u32>, confidence: f64) -> SessionSpec {
        SessionSpec {
            comfyui: canonical(&self.comfyui.path),
            python: self.python.clone(),
            python_source: None,
            workflow: canonical(&self.workflow),
            launcher: self.launcher.as_deref().map(canonical),
            base_flags: self.base_flags.clone(),
            toggles: self.toggles.clone(),
            default_toggles: self.toggles.is_empty(),
            strategy: self.strategy,
            repeat: self.repeat,
            max_runs,
            confidence,
            limits: self.limits,
            env: self.env.clone(),
            custom_nodes_check: self.custom_nodes_check,
            quick: self.quick,
            overlay: self.overlay.clone(),
            value_ceiling: None,
            first_fix: self.first_fix,
            failure_on_record: None,
        }
    }
}

/// The toggles tried when none are given, chosen for this install, and why (one sentence).
///
/// With Dynamic VRAM (0.15 and later): its own switches. The cache modes are left out: every
/// run starts a fresh ComfyUI, so with one prompt per run the cache holds nothing that
/// matters; with --iterations 2 or more it does, and --cache-none joins. --disable-smart-memory
/// is left out too: in v0.38 it no longer touches Dynamic VRAM, made no difference in the
/// RAM fill-up reports (#12332), and makes every prompt reload its models.
///
/// Older installs: the memory flags they have — offloading more eagerly
/// (--disable-smart-memory, --lowvram), reserving VRAM for others (--reserve-vram 1, then 2:
/// the least that works is searched), PyTorch's own allocator (--disable-cuda-malloc), async
/// offload, and --cache-none with --iterations 2 or more.
pub(crate) fn default_toggles(
    iterations: u32,
    flags: &crate::flags::help::FlagSet,
) -> (Vec<String>, String) {
    let mut out: Vec<String>;
    let why;
    if flags.has("--disable-dynamic-vram") {
        out = DEFAULT_TOGGLES.iter().map(|s| s.to_string()).collect();
        // The headroom Dynamic VRAM keeps free: its least passing value is searched.
        if flags.has("--vram-headroom") {
            out.push("--vram-headroom".into());
        }
        why = "the default set for an install with Dynamic VRAM".to_string();
    } else {
        out = [
            "--disable-smart-memory",
            "--lowvram",
            "--reserve-vram=1",
            "--reserve-vram=2",
            "--disable-cuda-malloc",
            "--async-offload",
            "--disable-pinned-memory",
        ]
        .iter()
        .filter(|t| flags.has(t.split('=').next().unwrap_or(t)))
        .map(|s| s.to_string())
        .collect();
        why = "the default set for an install without Dynamic VRAM: the memory flags it has"
            .to_string();
    }
    if iterations >= 2 && flags.has("--cache-none") {
        out.push("--cache-none".into());
    }
    (out, why)
}

/// Runs `bisect`; returns the result (also written to the session folder) and the exit code.
pub(crate) fn run(
    req: &Request,
    progress_visible: bool,
    err: &mut dyn std::io::Write,
) -> Result<(BisectResult, i32)> {
    let opened = match &req.session {
        Session::Resume(dir) => match resume(dir, req, err)? {
            Opening::Done(done) => {
                let code = exit_code(done.verdict.kind);
                return Ok((*done, code));
            }
            Opening::Open(o) => o,
        },
        Session::New(new) => start(new, req, err)?,
    };
    // Its owner's lock is held until the session is written.
    let o = *opened;
    if o.spec.strategy == Strategy::Matrix && matrix_size(&o.space) > 1024 {
        return Err(Error::usage(format!(
            "--strategy matrix would need up to {} runs for these toggles",
            matrix_size(&o.space)
        ))
        .hint("use the adaptive strategy, or fewer toggles"));
    }
    let cheaper_budget = (!o.spec.first_fix && o.spec.strategy == Strategy::Adaptive)
        .then(|| Search::cheaper_budget(&o.space));
    if let Some(n) = cheaper_budget
        && o.entries.is_empty()
        && !o.space.dims.is_empty()
    {
        // On an install that predates Dynamic VRAM no fix keeps it on: faster is cheaper.
        let cheaper = match o.space.has_dynamic_vram() {
            true => "one that keeps Dynamic VRAM on, or faster",
            false => "a faster one",
        };
        let _ = writeln!(
            err,
            "after a first fix, up to {n} more runs look for a cheaper one ({cheaper}); --first-fix stops at the first"
        );
    }
    let launcher_line = launcher_line(&o.spec, &o.target.python);
    let defaults = o.target.defaults.clone();
    // The RAM guard is the machine's, not the session's: it comes with the request.
    let limits = Limits {
        min_available_ram: req.min_available_ram,
        ..o.spec.limits
    };
    let target_workflow = o.target.workflow.clone();
    let opts = RunOptions {
        env: o.spec.env.clone(),
        nvml_lib: req.nvml_lib.clone(),
        overlay: o.spec.overlay.clone(),
        ..RunOptions::new(o.target, limits, o.dir.clone())
    };
    let mut progress = BisectProgress::new(
        progress_visible,
        planned_runs(&o.space, o.spec.strategy, o.spec.repeat)
            + u64::from(cheaper_budget.unwrap_or(0)),
        o.entries.len() as u64,
    )
    .with_file(SessionDir::bisect(&o.dir).progress());
    let mut oracle = LiveOracle {
        dir: o.dir.clone(),
        base: opts.clone(),
        reporter: &mut progress,
        next: o.entries.iter().map(|e| e.n).max().unwrap_or(0) + 1,
        describe: Box::new(|c| {
            if c.choice.is_empty() {
                "your flags".to_string()
            } else {
                o.space.describe(&c.choice).join(", ")
            }
        }),
        quick: o.spec.quick,
        unshortenable: shortening::known_shortening(
            &target_workflow,
            o.spec.quick,
            o.entries.iter().filter_map(|e| e.trial.run_dir.as_deref()),
        ),
    };
    let mut search = Search::new(
        &o.space,
        &mut oracle,
        o.spec.settings(),
        session::tallies(&o.entries),
    )
    .with_recorded(o.spec.failure_on_record.clone());
    let found = search.run().map_err(|e| stopped_by(e, &o.dir))?;
    let (tallies, runs) = (search.tallies.clone(), search.runs);
    drop(search);
    let next = oracle.next;
    drop(oracle);
    drop(progress);
    let info = result::SessionInfo {
        session_dir: o.dir.clone(),
        strategy: o.spec.strategy,
        toggles: o.toggles,
        launcher: &launcher_line,
        quick: o.spec.quick,
        quick_steps: quick_steps(&tallies),
    };
    let mut result = result::build(&o.space, &found, &tallies, runs, info);
    result.toggle_set = o.toggle_set;
    result.defaults = defaults;
    if o.spec.custom_nodes_check
        && o.spec.max_runs.is_none_or(|max| runs < max)
        && let Some(target) = found.target
        && found.kind != VerdictKind::Incomplete
    {
        let check = CheckRun {
            opts,
            dir: &o.dir,
            next,
            visible: progress_visible,
        };
        if let Some(c) = custom_nodes_check(check, &o.spec, &o.space, target) {
            result.runs_total += 1;
            result.custom_nodes_check = Some(c);
        }
    }
    if found.kind == VerdictKind::Incomplete {
        result.continue_with = Some(continue_line(&o.dir, &o.spec, runs, found.flaky));
    }
    run::folder::write_json(&SessionDir::bisect(&o.dir).result(), &result)?;
    let code = exit_code(found.kind);
    Ok((result, code))
}

/// The sampling steps of the first shortened run, from its record.
fn quick_steps(tallies: &[super::search::Tally]) -> Option<u64> {
    tallies
        .iter()
        .flat_map(|t| &t.trials)
        .filter(|t| t.kind == RunKind::Quick)
        .min_by_key(|t| t.n)
        .and_then(|t| t.run_dir.as_deref())
        .and_then(|d| run::RunRecord::load(d).ok())
        .and_then(|r| r.quick)
        .map(|q| q.steps)
        .filter(|s| *s > 0)
}

/// A session ready to search: its folder, settings, finished runs, install and space.
struct Opened {
    dir: PathBuf,
    spec: SessionSpec,
    entries: Vec<session::Entry>,
    target: Target,
    space: Space,
    toggles: Vec<String>,
    toggle_set: Option<String>,
    /// This process writes the session (and no other does) while this lives.
    _owner: crate::session::owner::Owner,
}

/// A session opened to go on, or one that already has its verdict.
enum Opening {
    Open(Box<Opened>),
    Done(Box<BisectResult>),
}

/// Opens a session folder for `--resume`: everything is the session's own but a new run
/// budget. A session with its verdict is done: resuming shows the verdict and runs nothing.
fn resume(dir: &Path, req: &Request, err: &mut dyn std::io::Write) -> Result<Opening> {
    // Taken before the journal is read: what is read stays what is there. A folder that is
    // no session gets no lock file (`open` says what it lacks).
    let owner = match SessionDir::bisect(dir).spec().is_file() {
        true => Some(crate::session::owner::take(dir)?),
        false => None,
    };
    let (dir, mut spec, entries) = session::open(dir)?;
    let owner = owner.expect("a session that opened has its settings file");
    if let Some(done) = finished(&dir) {
        return Ok(Opening::Done(Box::new(done)));
    }
    for warning in session::unreadable_lines(&SessionDir::bisect(&dir).journal()) {
        let _ = writeln!(err, "warning: {warning}");
    }
    if let Some(max) = req.max_runs {
        spec.max_runs = Some(max);
    }
    let kept = format!("kept by the session in {}", dir.display());
    let comfyui = Chosen {
        path: spec.comfyui.clone(),
        source: kept.clone(),
    };
    let mut target = Target::load(&comfyui, spec.python.as_deref(), &spec.workflow)?;
    if let (Some(source), Some(python)) = (&spec.python_source, &mut target.defaults.python) {
        python.source = format!("{source}; {kept}");
    }
    say_defaults(&target.defaults, err);
    let (space, toggles, toggle_set) = space_of(&spec, &target)?;
    Ok(Opening::Open(Box::new(Opened {
        dir,
        spec,
        entries,
        target,
        space,
        toggles,
        toggle_set,
        _owner: owner,
    })))
}

/// Checks a new session's inputs and flags, then makes its folder.
fn start(new: &NewSession, req: &Request, err: &mut dyn std::io::Write) -> Result<Box<Opened>> {
    let mut spec = new.spec(req.max_runs, req.confidence);
    // The inputs and the flags are checked before a session folder is made.
    let target = Target::load(&new.comfyui, spec.python.as_deref(), &spec.workflow)?;
    say_defaults(&target.defaults, err);
    // A Python found from how vrambisect was started is kept, so that a resume (which may be
    // started otherwise) runs the same one.
    if spec.python.is_none()
        && let Some(python) = &target.defaults.python
        && crate::locate::Origin::current()
            .interpreter
            .as_ref()
            .is_some_and(|i| i.path == python.path)
    {
        spec.python = Some(python.path.clone());
        spec.python_source = Some(python.source.clone());
    }
    spec.value_ceiling = value_ceiling(req.nvml_lib.as_deref());
    if let Some(log) = &new.failed_log {
        spec.failure_on_record = failure_on_record(log, spec.quick, err)?;
    }
    let (space, toggles, toggle_set) = space_of(&spec, &target)?;
    say_value_searches(&space, err);
    // The default set is kept as chosen, so a resume searches the same space even if ComfyUI
    // was updated in between.
    if spec.default_toggles {
        spec.toggles = toggles.clone();
    }
    let dir = new
        .output
        .clone()
        .unwrap_or_else(|| run::folder::fresh(Path::new("vrambisect-sessions"), "bisect"));
    let dir = session::create(&dir, &spec)?;
    let owner = crate::session::owner::take(&dir)?;
    Ok(Box::new(Opened {
        dir,
        spec,
        entries: Vec::new(),
        target,
        space,
        toggles,
        toggle_set,
        _owner: owner,
    }))
}

/// The failure `--failed-log` shows: its last prompt that failed as the bisect can hunt it
/// (not a start that failed, a workflow ComfyUI refused or an interrupted prompt), said in
/// one line. A log that shows none, or that is no ComfyUI log, is said too, and the search
/// starts as without it; a file that cannot be opened is refused.
fn failure_on_record(
    log: &Path,
    quick: crate::workflow::quick::Quick,
    err: &mut dyn Write,
) -> Result<Option<Recorded>> {
    // (Read before the first run: standard input would hold the session up unseen.)
    if log == Path::new("-") {
        return Err(
            Error::usage("--failed-log takes a file, not standard input")
                .hint("save the log to a file and give its path"),
        );
    }
    let input = crate::logscan::input::open(log)?;
    let log = canonical(log);
    let shown = log.display();
    let full = "the search starts from a full run of your flags";
    if quick == crate::workflow::quick::Quick::Off {
        let _ = writeln!(
            err,
            "--failed-log {shown}: not used with --quick off; {full}"
        );
        return Ok(None);
    }
    // A file that opens but is no ComfyUI log the scan can read loses nothing: the search
    // starts as without it, and says why.
    let report = match crate::logscan::scan(input, crate::logscan::Mode::Prefilter) {
        Ok(report) => report,
        Err(e) => {
            let _ = writeln!(err, "--failed-log: {}; {full}", e.message);
            return Ok(None);
        }
    };
    let hunted = |o: &Outcome| {
        !matches!(
            o,
            Outcome::Pass
                | Outcome::StartupFailed
                | Outcome::FlagRejected
                | Outcome::InvalidWorkflow
                | Outcome::Interrupted
        )
    };
    let failed = report
        .prompts
        .iter()
        .rev()
        .find(|p| p.outcome.as_ref().is_some_and(hunted));
    let Some(prompt) = failed else {
        let _ = writeln!(
            err,
            "--failed-log {shown}: it shows no failed prompt; {full}"
        );
        return Ok(None);
    };
    let outcome = prompt.outcome.expect("found with one");
    let recorded = Recorded {
        outcome,
        signatures: prompt.signatures.iter().map(|s| s.to_string()).collect(),
        file: shown.to_string(),
        line: prompt.line,
        failed_step: prompt.failed_step,
    };
    let past = match (prompt.failed_step, quick.steps()) {
        (Some(step), Some(q)) if super::search::past_shortening(step, q) => Some(step),
        _ => None,
    };
    let _ = match past {
        Some(step) => writeln!(
            err,
            "failure on record: {} in {shown} (the prompt at line {}), after step {step} of its sampling, past what a shortened run keeps: {full}",
            outcome.describe(),
            prompt.line
        ),
        None => writeln!(
            err,
            "failure on record: {} in {shown} (the prompt at line {}): where a shortened run of your flags fails the same way, it stands in for the full run of them",
            outcome.describe(),
            prompt.line
        ),
    };
    Ok(Some(recorded))
}

/// The most a value search tries: the memory of the largest NVIDIA GPU (NVML), else the
/// system's RAM (what ComfyUI counts as VRAM on the CPU and on unified memory).
fn value_ceiling(nvml_lib: Option<&Path>) -> Option<super::space::Ceiling> {
    const GB: f64 = (1u64 << 30) as f64;
    // Set by the test bed, whose stand-in card is not the machine's.
    if let Some(gb) = std::env::var("VRAMBISECT_VALUE_CEILING_GB")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|g| g.is_finite() && *g > 0.0)
    {
        return Some(super::space::Ceiling {
            gb,
            from: "VRAMBISECT_VALUE_CEILING_GB".into(),
        });
    }
    if let Ok(now) = crate::machine::nvml_now(crate::nvidia::nvml_lib(nvml_lib).as_deref())
        && let Some((g, total)) = now
            .gpus
            .iter()
            .filter_map(|g| g.total_bytes.map(|t| (g, t)))
            .max_by_key(|(_, t)| *t)
    {
        return Some(super::space::Ceiling {
            gb: total as f64 / GB,
            from: format!("the memory of {}", g.name.as_deref().unwrap_or("the GPU")),
        });
    }
    let mut sys = sysinfo::System::new().ok()?;
    sys.refresh_memory();
    (sys.total_memory() > 0).then(|| super::space::Ceiling {
        gb: sys.total_memory() as f64 / GB,
        from: "this machine's RAM (no NVIDIA GPU was seen)".into(),
    })
}

/// One line per flag whose value is searched: the range and where its end comes from.
fn say_value_searches(space: &Space, err: &mut dyn std::io::Write) {
    for v in &space.value_searches {
        let _ = writeln!(
            err,
            "{}: the least value that passes is searched, {} to {} GB in steps of {} GB (the upper end: {})",
            v.flag,
            super::space::format_gb(super::space::VALUE_STEP_GB),
            super::space::format_gb(v.max_gb),
            super::space::format_gb(super::space::VALUE_STEP_GB),
            v.from
        );
    }
}

/// The command that resumes the session in `dir`, started as vrambisect was.
fn resume_line(dir: &Path) -> String {
    crate::locate::Origin::current().command_line(&[
        "bisect".into(),
        "--resume".into(),
        dir.display().to_string(),
    ])
}

/// A session that could not go on (a write failed): the error, with how to continue.
fn stopped_by(e: Error, dir: &Path) -> Error {
    // Removed (or moved) under it: there is nothing left to continue from.
    if std::fs::symlink_metadata(SessionDir::bisect(dir).spec()).is_err() {
        return Error::environment(format!(
            "the session folder {} was removed or moved while the bisect ran",
            dir.display()
        ))
        .hint("the runs it held went with it: start the bisect again with another --output");
    }
    let resume = resume_line(dir);
    let hint = if e.io == Some(std::io::ErrorKind::StorageFull) {
        format!("every finished run is kept; free some space and continue with {resume}")
    } else {
        format!("every finished run is kept; continue with {resume}")
    };
    e.hint(hint)
}

/// The command that continues a session stopped before its verdict (with a larger budget when
/// a fixed budget, not Ctrl-C, stopped it; a flaky search without `--max-runs` takes a new
/// budget from its posterior when resumed).
fn continue_line(dir: &Path, spec: &SessionSpec, runs: u32, flaky: bool) -> String {
    let mut line = resume_line(dir);
    let max = match spec.max_runs {
        None if flaky => return line,
        max => max.unwrap_or(session::DEFAULT_MAX_RUNS),
    };
    if runs >= max {
        line.push_str(&format!(
            " --max-runs {}",
            max.saturating_mul(2).max(runs + 16)
        ));
    }
    line
}

/// Where the custom-nodes check run goes: the session's run options, folder and next number.
struct CheckRun<'a> {
    opts: RunOptions,
    dir: &'a Path,
    next: u32,
    visible: bool,
}

/// The bug template's first question, answered by a run: does the failing configuration fail
/// without custom nodes? One extra run, apart from the search, when the install has custom
/// nodes and the user's flags do not already leave them out.
fn custom_nodes_check(
    check: CheckRun,
    spec: &SessionSpec,
    space: &Space,
    target: crate::outcome::Outcome,
) -> Option<result::CustomNodesCheck> {
    if spec
        .base_flags
        .iter()
        .any(|f| f == "--disable-all-custom-nodes")
    {
        return None;
    }
    let nodes = user_custom_nodes(&spec.comfyui);
    if nodes == 0 {
        return None;
    }
    let mut progress = BisectProgress::new(check.visible, 1, 0);
    let mut oracle = LiveOracle {
        dir: check.dir.to_path_buf(),
        base: check.opts,
        reporter: &mut progress,
        next: check.next,
        describe: Box::new(|_| "your flags, without custom nodes".to_string()),
        quick: crate::workflow::quick::Quick::Off,
        unshortenable: Some(None),
    };
    let mut flags = space.baseline().flags.clone();
    flags.push("--disable-all-custom-nodes".into());
    let config = crate::bisect::space::Config {
        key: format!("custom-nodes-check {}", flags.join(" ")),
        flags,
        choice: Vec::new(),
    };
    let trial = crate::bisect::search::Oracle::run(
        &mut oracle,
        &config,
        crate::bisect::search::RunKind::Full,
    )
    .ok()?;
    Some(result::CustomNodesCheck::new(
        config.flags,
        trial.outcome,
        trial.run_dir,
        nodes,
        target,
    ))
}

/// How many custom nodes the install has, besides the example ComfyUI ships.
fn user_custom_nodes(comfyui: &Path) -> usize {
    crate::machine::comfyui::custom_nodes(comfyui)
        .map(|nodes| {
            nodes
                .iter()
                .filter(|n| n.name != "websocket_image_save.py")
                .count()
        })
        .unwrap_or(0)
}

/// The result of a session that reached its verdict (not one stopped before it).
fn finished(dir: &Path) -> Option<BisectResult> {
    let text = std::fs::read_to_string(SessionDir::bisect(dir).result()).ok()?;
    let result: BisectResult = serde_json::from_str(&text).ok()?;
    (result.verdict.kind != VerdictKind::Incomplete).then_some(result)
}

/// The exit status of a bisect with this verdict.
fn exit_code(kind: VerdictKind) -> i32 {
    match kind {
        VerdictKind::FixedBy | VerdictKind::CausedBy => exit::OK,
        VerdictKind::Untestable => exit::UNTESTABLE,
        VerdictKind::Incomplete if signals::requested() != Stop::No => exit::INTERRUPTED,
        _ => exit::FAILED,
    }
}

/// The search space of a session on this install, and the toggles it tries. Refuses, before
/// any run, base flags this ComfyUI rejects (argparse's own words) and toggles the user named
/// that it does not take; default toggles this version lacks are only skipped (with a note).
fn space_of(spec: &SessionSpec, target: &Target) -> Result<(Space, Vec<String>, Option<String>)> {
    let version = target.install.version.clone();
    let base = crate::flags::argparse::parse(&target.flags, &spec.base_flags, version.as_ref());
    if let Some(error) = &base.error {
        let shown = version
            .as_ref()
            .map(|v| format!("ComfyUI {v}"))
            .unwrap_or_else(|| "this ComfyUI".into());
        return Err(Error::usage(format!(
            "{shown} refuses your flags: {error}"
        ))
        .hint("fix the flags after -- (or in the launcher); vrambisect explain shows what this install accepts"));
    }
    let (toggles, toggle_set) = if spec.default_toggles {
        let (chosen, why) = default_toggles(spec.limits.iterations, &target.flags);
        // A session keeps the set it started with (sessions from before it kept one have none).
        let t = if spec.toggles.is_empty() {
            chosen
        } else {
            spec.toggles.clone()
        };
        (t, Some(why))
    } else {
        (spec.toggles.clone(), None)
    };
    let ctx = Context {
        env: spec.env.clone(),
        ..Context::new(Platform::host())
    };
    let space = Space::new(&target.flags, version, ctx, &spec.base_flags, &toggles)
        .with_ceiling(spec.value_ceiling.as_ref());
    if !spec.default_toggles
        && let Some(s) = space.skipped.iter().find(|s| s.refused)
    {
        return Err(Error::usage(format!("--toggle {}: {}", s.toggle, s.reason))
            .hint("give toggles this install accepts (vrambisect doctor lists its memory flags)"));
    }
    Ok((space, toggles, toggle_set))
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
    // The whole path: the line works from whatever folder it is pasted in.
    let main_py = spec.comfyui.join("main.py").display().to_string();
    move |flags: &[String]| {
        let mut parts: Vec<String> = match &launch {
            Some(l) => l
                .python
                .iter()
                .chain(&l.python_args)
                .chain(&l.script)
                .cloned()
                .collect(),
            None => vec![python.clone(), main_py.clone()],
        };
        parts.extend(flags.iter().cloned());
        crate::text::command_line(&parts)
    }
}

/// What `progress.json` holds: the run under way (or the last one), how many are planned
/// (the plan grows when the search needs more), the configuration and its phase, the time left.
#[derive(Debug, serde::Serialize)]
struct ProgressFile<'a> {
    run: Option<u32>,
    runs_done: u64,
    runs_planned: u64,
    current: &'a str,
    phase: &'a str,
    /// `quick` while the run in progress is a shortened one, else `full`.
    kind: &'static str,
    /// Seconds left at the mean measured run time; null before the first run of this
    /// invocation ends.
    eta_s: Option<u64>,
    /// The mean measured seconds of a run of each kind (null: none measured yet).
    seconds_per_run: PerKind,
}

/// A figure for full and for shortened runs.
#[derive(Debug, serde::Serialize)]
struct PerKind {
    full: Option<f64>,
    quick: Option<f64>,
}

/// The bisect's progress: runs done of planned, the current configuration and its phase,
/// the ETA from the runs measured so far.
struct BisectProgress {
    /// Where the progress is also written as JSON (`progress.json`).
    file: Option<std::path::PathBuf>,
    line: StatusLine,
    current: String,
    phase: String,
    /// The run in progress and when it started.
    run: Option<(u32, std::time::Instant)>,
    /// Durations of the runs finished in this invocation, with their kind.
    measured: Vec<(RunKind, std::time::Duration)>,
    /// The kind of the run in progress, or of the last one.
    kind: RunKind,
}

impl BisectProgress {
    fn new(visible: bool, planned: u64, done: u64) -> BisectProgress {
        let line = StatusLine::new(
            visible,
            "{bar:20} run {pos}/{len} · {elapsed_precise} ({prefix}) {msg}",
            Some(planned.max(done + 1)),
        );
        line.bar.set_position(done);
        line.bar.set_prefix("ETA ?");
        BisectProgress {
            file: None,
            line,
            current: String::new(),
            phase: String::new(),
            run: None,
            measured: Vec::new(),
            kind: RunKind::Full,
        }
    }

    /// The mean measured time of a run of `kind`.
    fn mean(&self, kind: RunKind) -> Option<std::time::Duration> {
        let times: Vec<_> = self
            .measured
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, d)| *d)
            .collect();
        (!times.is_empty()).then(|| times.iter().sum::<std::time::Duration>() / times.len() as u32)
    }

    fn with_file(mut self, path: std::path::PathBuf) -> BisectProgress {
        self.file = Some(path);
        self
    }

    /// The time left for the runs planned and not done, at the mean measured time of the
    /// kind of run the search makes now (any run's, before one of that kind is measured).
    fn eta_left(&self) -> Option<std::time::Duration> {
        let any = || {
            (!self.measured.is_empty()).then(|| {
                self.measured
                    .iter()
                    .map(|(_, d)| *d)
                    .sum::<std::time::Duration>()
                    / self.measured.len() as u32
            })
        };
        let mean = self.mean(self.kind).or_else(any)?;
        let left = self
            .line
            .bar
            .length()
            .unwrap_or(0)
            .saturating_sub(self.line.bar.position());
        Some(mean * left.min(u64::from(u32::MAX)) as u32)
    }

    /// "ETA 1m 10s", with each kind's time per run once shortened runs are measured
    /// ("ETA 40s · full 7.1 s, shortened 1.6 s a run").
    fn eta(&self) -> String {
        let mut out = match self.eta_left() {
            Some(left) => format!("ETA {}", crate::duration::format_duration(left)),
            None => "ETA ?".into(),
        };
        if let Some(quick) = self.mean(RunKind::Quick) {
            let secs = |d: std::time::Duration| format!("{:.1} s", d.as_secs_f64());
            let full = self
                .mean(RunKind::Full)
                .map(secs)
                .unwrap_or_else(|| "?".into());
            out.push_str(&format!(" · full {full}, shortened {} a run", secs(quick)));
        }
        out
    }

    /// Rewrites `progress.json`; a failed write only loses this update (the journal is what
    /// the session is resumed from).
    fn write_file(&self) {
        let Some(path) = &self.file else { return };
        let progress = ProgressFile {
            run: self.run.map(|(n, _)| n),
            runs_done: self.line.bar.position(),
            runs_planned: self.line.bar.length().unwrap_or(0),
            current: &self.current,
            phase: &self.phase,
            kind: self.kind.as_str(),
            eta_s: self.eta_left().map(|d| d.as_secs()),
            seconds_per_run: PerKind {
                full: self.mean(RunKind::Full).map(|d| d.as_secs_f64()),
                quick: self.mean(RunKind::Quick).map(|d| d.as_secs_f64()),
            },
        };
        let Ok(text) = serde_json::to_string_pretty(&progress) else {
            return;
        };
        let tmp = path.with_extension("json.tmp");
        if crate::private::write(&tmp, text + "\n").is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

impl Reporter for BisectProgress {
    fn event(&mut self, event: &RunEvent) {
        if let Some(phase) = event.phase() {
            self.line
                .bar
                .set_message(format!("{} · {phase}", self.current));
            self.phase = phase;
            self.write_file();
            return;
        }
        match event {
            RunEvent::Alive => {
                if let Some((n, started)) = self.run {
                    let (current, phase) = (&self.current, &self.phase);
                    self.line.heartbeat(|| {
                        format!(
                            "run {n}: still running after {} ({current}): {phase}",
                            crate::duration::format_duration(started.elapsed())
                        )
                    });
                }
            }
            RunEvent::WaitingForGpu { holder } => self.line.say(format!(
                "waiting for the GPU: {holder} is running a workflow on it"
            )),
            RunEvent::RamGuard { available, .. } => self.line.say(format!(
                "available RAM is down to {} MiB: stopping ComfyUI before the OOM killer does",
                available >> 20
            )),
            RunEvent::Interrupting => self.line.say(
                "interrupting: the current run is stopped and made again on --resume; every finished run is kept (press Ctrl-C again to kill ComfyUI now)".into(),
            ),
            RunEvent::Notice(text) => self.line.say(format!("note: {text}")),
            _ => {}
        }
    }
}

impl SessionReporter for BisectProgress {
    fn session(&mut self, event: &SessionEvent) {
        match event {
            SessionEvent::RunStarting {
                n, describe, kind, ..
            } => {
                self.kind = *kind;
                self.current = match kind {
                    RunKind::Quick => format!("{describe} (shortened)"),
                    RunKind::Full => describe.clone(),
                };
                self.run = Some((*n, std::time::Instant::now()));
                if u64::from(*n) > self.line.bar.length().unwrap_or(0) {
                    self.line.bar.set_length(u64::from(*n));
                }
                self.phase.clear();
                self.write_file();
            }
            SessionEvent::RunFinished {
                n,
                outcome,
                duration_ms,
                kind,
            } => {
                // Asked to be shortened, it ran in full (the workflow could not be).
                if *kind == RunKind::Full
                    && let Some(plain) = self.current.strip_suffix(" (shortened)")
                {
                    self.current = plain.to_string();
                }
                // The configuration goes last, so the columns stay put whatever its length.
                self.line.say(format!(
                    "run {n:>3}  {:<18} {:>7}  {}",
                    outcome.as_str(),
                    format!("{:.1} s", *duration_ms as f64 / 1000.0),
                    self.current,
                ));
                self.run = None;
                self.measured
                    .push((*kind, std::time::Duration::from_millis(*duration_ms)));
                self.line.bar.inc(1);
                let eta = self.eta();
                self.line.bar.set_prefix(eta);
                self.write_file();
            }
        }
    }
}
