//! The command line (clap derive lives here and nowhere else).

use crate::flags::decide::Platform;
use crate::output::ColorChoice;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Diagnose ComfyUI memory failures and find the startup flags that fix them.
#[derive(Debug, Parser)]
#[command(name = "vrambisect", version, about, long_about = None, args_override_self = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args, Clone)]
pub struct Global {
    /// Print one JSON document on stdout and nothing else there.
    #[arg(long, global = true)]
    pub json: bool,
    /// Colour the output: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Explain what a launch command really does to memory.
    ///
    /// Reads ComfyUI flags (after --) or a launcher (.bat/.sh) and predicts what ComfyUI will
    /// do: Dynamic VRAM on or off and which flag decided, the VRAM state, the reserved VRAM,
    /// flags that do nothing, conflicts and flags the install does not know. Exits 1 when
    /// ComfyUI would refuse to start with these flags.
    Explain(ExplainArgs),
    /// Run a workflow once under the given flags and classify what happened.
    ///
    /// Starts ComfyUI on a free port (its own process group, no browser), submits the
    /// API-format workflow, follows the websocket and the log, classifies the outcome (pass,
    /// oom, hang, crash, ...), stops ComfyUI and keeps everything in a run folder. Exits 0 if
    /// the workflow passed, 1 if it failed, 125 if it could not be tested (as `git bisect run`
    /// expects).
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The ComfyUI folder (holding main.py); its own `main.py --help` gives the flag list.
    #[arg(long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The Python that runs ComfyUI (default: DIR/venv, DIR/.venv, the portable
    /// python_embeded beside DIR, else python3).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// A launcher script (run_nvidia_gpu.bat, a .sh) to read the flags from.
    #[arg(long, value_name = "FILE")]
    pub launcher: Option<PathBuf>,
    /// The platform ComfyUI runs on (default: this machine; a .bat implies windows).
    #[arg(long, value_enum)]
    pub platform: Option<Platform>,
    /// ComfyUI's flags, or a whole `python main.py ...` line (with --launcher: the
    /// launcher's own arguments, which fill its %* or "$@").
    #[arg(last = true, value_name = "COMFYUI_ARGS", allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The ComfyUI folder (holding main.py).
    #[arg(long, value_name = "DIR")]
    pub comfyui: PathBuf,
    /// The workflow, in API format (Workflow → Export (API) in ComfyUI).
    #[arg(long, value_name = "FILE")]
    pub workflow: PathBuf,
    /// The Python that runs ComfyUI (default: DIR/venv, DIR/.venv, the portable
    /// python_embeded beside DIR, else python3).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// Send the prompt this many times to the same ComfyUI (some failures only appear on the
    /// second prompt; RAM that never comes back shows over several).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub iterations: u32,
    /// Give up on a prompt after this long (e.g. 30m).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = crate::duration::parse_duration)]
    pub timeout: std::time::Duration,
    /// Call it a hang after this long without websocket or log activity.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::duration::parse_duration)]
    pub stall_timeout: std::time::Duration,
    /// Give up if ComfyUI is not ready after this long.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::duration::parse_duration)]
    pub startup_timeout: std::time::Duration,
    /// The run folder (default: vrambisect-runs/run-<time>-<id> in the current folder).
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Also sample CUDA from vrambisect's own context (costs 300-500 MB of the VRAM being
    /// measured; off by default).
    #[arg(long)]
    pub cuda: bool,
    /// The NVML library to sample with (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB", hide = true)]
    pub nvml_lib: Option<PathBuf>,
    /// ComfyUI's flags, passed on unchanged.
    #[arg(last = true, value_name = "COMFYUI_FLAGS", allow_hyphen_values = true)]
    pub flags: Vec<String>,
}
