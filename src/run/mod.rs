//! `vrambisect run`: one run end to end — launch ComfyUI, submit the workflow, watch it,
//! classify the outcome, tear ComfyUI down, and keep everything in a run folder.

pub(crate) mod engine;
pub(crate) mod folder;
pub(crate) mod launch;
pub(crate) mod pause;
mod prompt;
pub(crate) mod record;
pub(crate) mod render;
pub(crate) mod watch;

pub use engine::execute;
pub use record::RunRecord;

pub use crate::boot::{Overlay, boot_args, boot_for, fixed_path};
use crate::error::{Error, ErrorKind, Result};
use crate::flags::help::FlagSet;
use crate::install::{Install, Python};
use crate::locate::{Chosen, Defaults};
use crate::outcome::Outcome;
use crate::workflow::Workflow;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a run or a bisect works on, loaded and checked once: the install, its Python and
/// flags, the workflow.
#[derive(Debug, Clone)]
pub struct Target {
    pub install: Install,
    pub python: Python,
    /// The install's flags, from its own `main.py --help`.
    pub flags: FlagSet,
    pub workflow: Workflow,
    pub workflow_path: PathBuf,
    /// The copy of the bundled stand-in this command runs, removed when it ends.
    pub stand_in_copy: Option<std::sync::Arc<tempfile::TempDir>>,
    /// The ComfyUI folder and the Python as chosen, with where each came from.
    pub defaults: Defaults,
}

impl Target {
    /// Loads the workflow (first: a bad workflow is the user's to fix before any Python
    /// runs), opens the install, finds its Python and asks it for the install's flags. A
    /// Python that cannot run makes the workflow untestable (exit 125).
    pub fn load(comfyui: &Chosen, python: Option<&Path>, workflow: &Path) -> Result<Target> {
        let loaded = Workflow::load(workflow)?;
        let mut install = Install::open(&comfyui.path)?;
        // Chosen for the folder the user has, not for a copy of it.
        let python = install.python(python);
        // The repository's stand-in keeps a run's state in its folder: run a fresh copy.
        let mut stand_in_copy = None;
        if install.is_bundled_stand_in() {
            let tmp = tempfile::Builder::new()
                .prefix("vrambisect-stand-in-")
                .tempdir()
                .map_err(|e| Error::environment(format!("cannot make a temporary folder: {e}")))?;
            install = install.copy_stand_in(&tmp.path().join("ComfyUI"))?;
            stand_in_copy = Some(std::sync::Arc::new(tmp));
        }
        // The install's Python cannot say its flags: the workflow cannot be tested.
        let flags = install.flags(&python).map_err(|e| Error {
            kind: ErrorKind::Untestable,
            ..Error::from(e)
        })?;
        Ok(Target {
            install,
            python: python.clone(),
            flags,
            workflow: loaded,
            workflow_path: workflow.to_path_buf(),
            stand_in_copy,
            defaults: Defaults {
                comfyui: Some(comfyui.clone()),
                python: Some(python),
            },
        })
    }
}

/// The limits a run works within (`--iterations`, `--timeout`, `--stall-timeout`,
/// `--startup-timeout`, `--min-available-ram`). Sessions keep them in their spec, in the keys
/// they always had (`iterations`, `timeout_ms`, ...), except the RAM guard, which belongs to
/// the machine a run is on, not to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub iterations: u32,
    /// Per prompt.
    #[serde(rename = "timeout_ms", with = "crate::duration::millis")]
    pub timeout: Duration,
    #[serde(rename = "stall_timeout_ms", with = "crate::duration::millis")]
    pub stall_timeout: Duration,
    #[serde(rename = "startup_timeout_ms", with = "crate::duration::millis")]
    pub startup_timeout: Duration,
    /// Stop ComfyUI when available RAM falls below this many bytes (`None`: 2% of RAM,
    /// between 256 MiB and 1 GiB; `Some(0)`: never).
    #[serde(skip)]
    pub min_available_ram: Option<u64>,
}

impl RunOptions {
    /// The options of runs on `target` within `limits`, kept in `run_dir`; ComfyUI gets no
    /// flags of the user's yet (a bisect sets them per run).
    pub fn new(target: Target, limits: Limits, run_dir: PathBuf) -> RunOptions {
        RunOptions {
            target,
            limits,
            comfy_flags: Vec::new(),
            env: Vec::new(),
            grace: Duration::from_secs(10),
            run_dir,
            nvml_lib: None,
            cuda: false,
            debug_log: false,
            quick: crate::workflow::quick::Quick::Off,
            overlay: None,
        }
    }
}

/// Everything one run needs, validated.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The install, its Python and flags, the workflow.
    pub target: Target,
    /// Prompts and time limits; [`Limits::min_available_ram`] stops ComfyUI when available RAM
    /// falls below that many bytes (`None`: 2% of RAM, between 256 MiB and 1 GiB; `Some(0)`:
    /// never).
    pub limits: Limits,
    /// ComfyUI's flags as the user gave them; passed on unchanged.
    pub comfy_flags: Vec<String>,
    /// Extra environment for ComfyUI (from a launcher).
    pub env: Vec<(String, String)>,
    /// Teardown: how long ComfyUI gets after SIGTERM before SIGKILL.
    pub grace: Duration,
    pub run_dir: PathBuf,
    /// Sample with NVML from this library (tests point at the fake).
    pub nvml_lib: Option<PathBuf>,
    /// Also sample CUDA from the tool's own context (costs VRAM; off by default).
    pub cuda: bool,
    /// Log at DEBUG (`--verbose DEBUG`, which also raises comfy-aimdo's level) when the
    /// install takes it and the user's flags set no level: the log a bug report wants.
    pub debug_log: bool,
    /// Queue a shortened copy of the workflow (`--quick`); `Off` for the workflow as it is.
    pub quick: crate::workflow::quick::Quick,
    /// Packages put in front of the Python's own (regress's environment for a commit that
    /// pins other versions).
    pub overlay: Option<Overlay>,
}

/// What the engine tells its displays as the run goes.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    Launching {
        argv: Vec<String>,
    },
    Ready {
        startup_ms: u64,
    },
    Submitted {
        iteration: u32,
        of: u32,
        prompt_id: String,
    },
    Node {
        iteration: u32,
        node: String,
        class: Option<String>,
        done: usize,
        total: usize,
    },
    Step {
        value: f64,
        max: f64,
    },
    IterationDone {
        iteration: u32,
        outcome: Outcome,
    },
    Stopping,
    /// Another session is running on this GPU; this one waits its turn.
    WaitingForGpu {
        holder: String,
    },
    /// Available RAM fell below the threshold; ComfyUI is being stopped.
    RamGuard {
        available: u64,
        threshold: u64,
    },
    /// A first Ctrl-C: finishing cleanly (a second one kills ComfyUI at once).
    Interrupting,
    /// Something the user should know that is not about the run itself.
    Notice(String),
    /// The run goes on (sent about once a second, so a display without a terminal can say
    /// so during long silent phases).
    Alive,
}

impl RunEvent {
    /// The run's phase in words (`starting ComfyUI`, `node 3/7 KSampler`, `step 4/20`), for
    /// a status line; `None` for events that are messages of their own.
    pub fn phase(&self) -> Option<String> {
        Some(match self {
            RunEvent::Launching { .. } => "starting ComfyUI".into(),
            RunEvent::Ready { startup_ms } => {
                format!("ComfyUI ready after {:.1} s", *startup_ms as f64 / 1000.0)
            }
            RunEvent::Submitted { iteration, of, .. } => format!("prompt {iteration}/{of}: queued"),
            RunEvent::Node {
                iteration,
                class,
                node,
                done,
                total,
            } => format!(
                "prompt {iteration}: node {done}/{total} {} (#{node})",
                class.as_deref().unwrap_or("?")
            ),
            RunEvent::Step { value, max } => format!("step {}/{}", *value as u64, *max as u64),
            RunEvent::IterationDone { .. } | RunEvent::Stopping => "stopping ComfyUI".into(),
            RunEvent::WaitingForGpu { .. }
            | RunEvent::RamGuard { .. }
            | RunEvent::Interrupting
            | RunEvent::Notice(_)
            | RunEvent::Alive => {
                return None;
            }
        })
    }
}

/// A consumer of [`RunEvent`]s (the progress display; a bisect's session log).
pub trait Reporter {
    fn event(&mut self, event: &RunEvent);
}

/// A reporter that shows nothing.
pub struct Silent;

impl Reporter for Silent {
    fn event(&mut self, _: &RunEvent) {}
}
