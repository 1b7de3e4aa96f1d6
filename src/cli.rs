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
    /// Find the minimal set of flags that fixes a failing workflow (or your flag that causes
    /// it).
    ///
    /// Runs the workflow with your flags (the baseline), then under flag permutations,
    /// classifying each run; adaptive by default (group testing, then the minimal
    /// combination), with a confirmation run of the verdict. Resumable with --resume.
    Bisect(BisectArgs),
    /// Record GPU, RAM and process memory over time.
    ///
    /// Samples NVML (used/free/reserved per GPU, GPU memory per process, PCIe traffic), the
    /// system (RAM available, swap) and a process tree (resident memory, split into anonymous
    /// and file-backed on Linux) at a fixed interval. Follows --pid, or starts the COMMAND
    /// after -- in its own process group and passes its exit status through. Prints a
    /// summary table of minima and peaks; --output streams every sample to CSV and JSON lines.
    Sample(SampleArgs),
    /// Say what a ComfyUI log shows, and which experiment to run.
    ///
    /// Reads a console log or user/comfyui.log (- for standard input) in one pass, in any of
    /// ComfyUI's formats: the startup facts (versions, device, allocator, VRAM state, Dynamic
    /// VRAM, pinned memory, async offload, launch flags), every prompt with its outcome and
    /// evidence, and the known failure signatures it matches, each with its upstream issues
    /// and the vrambisect bisect command that tests the flags people try. Exits 1 when the
    /// log shows a failure, 0 when it shows none, 2 when the file is not a ComfyUI log.
    Logscan(LogscanArgs),
    /// Build a zip bundle for a ComfyUI bug report from a run or bisect folder.
    ///
    /// Writes ISSUE.md in the shape of ComfyUI's bug template (expected and actual behaviour,
    /// steps with the exact commands, the startup log and the failure, the verdict, the run
    /// matrix, the environment), environment.json, workflow.json, every run's logs, record and
    /// samples, and a memory timeline PNG per run. Home folders, user and host names, e-mail
    /// and IP addresses, tokens, secret-named values and environment variables outside an
    /// allowlist are redacted in every file, and the tool says what it removed.
    Report(ReportArgs),
    /// Check the machine and a ComfyUI install: NVIDIA driver, CUDA, GPUs and free VRAM,
    /// other processes holding VRAM, ComfyUI, its Python, torch and comfy-aimdo, flags, disk,
    /// swap.
    ///
    /// Each check is shown as ✓ (fine), ! (a warning) or ✗ (a problem), with a hint. Exits 1
    /// when any check fails, 0 otherwise (warnings do not count). No CUDA context is created.
    Doctor(DoctorArgs),
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
    /// Stop ComfyUI when available system RAM falls below this (e.g. 1G; 0: never), before
    /// the kernel's OOM killer picks a process. Default: 2% of RAM, 256 MiB to 1 GiB.
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    pub min_available_ram: Option<u64>,
    /// The NVML library to sample with (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB", hide = true)]
    pub nvml_lib: Option<PathBuf>,
    /// ComfyUI's flags, passed on unchanged.
    #[arg(last = true, value_name = "COMFYUI_FLAGS", allow_hyphen_values = true)]
    pub flags: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Time between samples (e.g. 100ms, 1s; 1ms works).
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = crate::duration::parse_duration)]
    pub interval: std::time::Duration,
    /// Stop after this long (default: at Ctrl-C, or when the process or command ends). A
    /// command still running then is stopped (SIGTERM to its group, SIGKILL after 5s).
    #[arg(long, value_name = "DURATION", value_parser = crate::duration::parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// Stream every sample to FILE as CSV, and as JSON lines beside it (FILE with .jsonl).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Follow this process and its children (e.g. a running ComfyUI); stop when it exits.
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Also poll a running ComfyUI's /system_stats (CUDA's view from inside ComfyUI), e.g.
    /// http://127.0.0.1:8188.
    #[arg(long, value_name = "URL")]
    pub comfyui_url: Option<String>,
    /// Also read cuMemGetInfo from vrambisect's own CUDA context (costs 300-500 MB of the
    /// VRAM being measured; the cost is measured and reported).
    #[arg(long)]
    pub cuda: bool,
    /// The NVML library to load (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
    /// A command to start and follow, e.g. -- python main.py --lowvram. Its exit status
    /// becomes vrambisect's.
    #[arg(last = true, value_name = "COMMAND", allow_hyphen_values = true)]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct BisectArgs {
    /// The ComfyUI folder (holding main.py).
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "resume",
        conflicts_with = "resume"
    )]
    pub comfyui: Option<PathBuf>,
    /// The workflow, in API format (Workflow → Export (API) in ComfyUI).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "resume",
        conflicts_with = "resume"
    )]
    pub workflow: Option<PathBuf>,
    /// A flag to try, or a flag with a value (`--toggle --reserve-vram=2`); repeat it. Several
    /// values of one flag are alternatives, searched for the least that works. Default:
    /// --disable-dynamic-vram, --disable-pinned-memory, --disable-async-offload,
    /// --disable-nvml-pressure (those this install has), and --cache-none with --iterations 2+.
    #[arg(
        long,
        value_name = "FLAG[=VALUE]",
        allow_hyphen_values = true,
        conflicts_with = "resume"
    )]
    pub toggle: Vec<String>,
    /// adaptive: as few runs as the information allows; matrix: every valid combination;
    /// each: one toggle at a time.
    #[arg(
        long,
        value_enum,
        default_value = "adaptive",
        conflicts_with = "resume"
    )]
    pub strategy: StrategyArg,
    /// Run each configuration this many times (use 3 for flaky failures).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100), conflicts_with = "resume")]
    pub repeat: u32,
    /// Prompts per run (failures that only appear on the second prompt need 2).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000), conflicts_with = "resume")]
    pub iterations: u32,
    /// The session folder (default: vrambisect-sessions/bisect-<time>-<id>).
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub output: Option<PathBuf>,
    /// Continue an interrupted bisect from its session folder (no finished run is repeated).
    /// The session keeps its own install, workflow, flags, toggles, repeats and timeouts; only
    /// --max-runs and --min-available-ram may be given with it.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Read the base flags (and environment) from this launcher (.bat or .sh).
    #[arg(long, value_name = "FILE", conflicts_with = "resume")]
    pub launcher: Option<PathBuf>,
    /// The Python that runs ComfyUI.
    #[arg(long, value_name = "PY", conflicts_with = "resume")]
    pub python: Option<PathBuf>,
    /// Give up on a prompt after this long.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = crate::duration::parse_duration, conflicts_with = "resume")]
    pub timeout: std::time::Duration,
    /// Call it a hang after this long without websocket or log activity.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::duration::parse_duration, conflicts_with = "resume")]
    pub stall_timeout: std::time::Duration,
    /// Give up if ComfyUI is not ready after this long.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::duration::parse_duration, conflicts_with = "resume")]
    pub startup_timeout: std::time::Duration,
    /// The most ComfyUI runs the bisect may take (default 64; with --resume, raises the
    /// budget of a session that ran out of it).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub max_runs: Option<u32>,
    /// Stop ComfyUI when available system RAM falls below this (e.g. 1G; 0: never), before
    /// the kernel's OOM killer picks a process. Default: 2% of RAM, 256 MiB to 1 GiB.
    #[arg(long, value_name = "SIZE", value_parser = crate::size::parse_size)]
    pub min_available_ram: Option<u64>,
    /// The NVML library to sample with (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB", hide = true)]
    pub nvml_lib: Option<PathBuf>,
    /// Your ComfyUI flags: part of the question (removing one may be the fix).
    #[arg(
        last = true,
        value_name = "BASE_FLAGS",
        allow_hyphen_values = true,
        conflicts_with = "resume"
    )]
    pub base: Vec<String>,
}

/// `--strategy` (the search's own type is `bisect::search::Strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    Adaptive,
    Matrix,
    Each,
}

impl From<StrategyArg> for crate::bisect::search::Strategy {
    fn from(s: StrategyArg) -> Self {
        use crate::bisect::search::Strategy;
        match s {
            StrategyArg::Adaptive => Strategy::Adaptive,
            StrategyArg::Matrix => Strategy::Matrix,
            StrategyArg::Each => Strategy::Each,
        }
    }
}

#[derive(Debug, Args)]
pub struct LogscanArgs {
    /// The log: ComfyUI's console output saved to a file, or ComfyUI/user/comfyui.log; - reads
    /// standard input.
    #[arg(value_name = "FILE|-")]
    pub file: String,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A run folder (vrambisect run --output) or a bisect session folder.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// The zip to write (default: vrambisect-report-<folder name>.zip in the current folder).
    #[arg(long, short = 'o', value_name = "FILE.zip")]
    pub output: Option<PathBuf>,
    /// Leave paths, names, tokens and keys as recorded (a warning is printed).
    #[arg(long)]
    pub no_redact: bool,
    /// The ComfyUI folder, for the environment facts, when the run folder does not say.
    #[arg(long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The Python that runs ComfyUI (default: found as for run).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// The NVML library (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB", hide = true)]
    pub nvml_lib: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The ComfyUI folder to check (holding main.py).
    #[arg(long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The Python that runs ComfyUI (default: DIR/venv, DIR/.venv, the portable
    /// python_embeded beside DIR, else python3).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// The NVML library to load (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
}
