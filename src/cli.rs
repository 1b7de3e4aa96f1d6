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
    #[arg(help_heading = "Output", long, global = true)]
    pub json: bool,
    /// Colour the output: auto (on a terminal, unless NO_COLOR is set), always, never.
    #[arg(help_heading = "Output", long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
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
    #[command(after_long_help = EXAMPLES_EXPLAIN)]
    Explain(ExplainArgs),
    /// Run a workflow once under the given flags and classify what happened.
    ///
    /// Starts ComfyUI on a free port (its own process group, no browser), submits the
    /// workflow (API or UI format, or the prompt inside an output of ComfyUI), follows the
    /// websocket and the log, classifies the outcome (pass, oom, hang, crash, ...), stops
    /// ComfyUI and keeps everything in a run folder. Exits 0 if
    /// the workflow passed, 1 if it failed, 125 if it could not be tested (as `git bisect run`
    /// expects).
    #[command(after_long_help = EXAMPLES_RUN)]
    Run(RunArgs),
    /// Find the minimal set of flags that fixes a failing workflow (or your flag that causes
    /// it).
    ///
    /// Runs the workflow with your flags (the baseline), then under flag permutations,
    /// classifying each run; adaptive by default (group testing, then the minimal
    /// combination), with a confirmation run of the verdict. Resumable with --resume.
    #[command(after_long_help = EXAMPLES_BISECT)]
    Bisect(BisectArgs),
    /// Find the ComfyUI commit that broke a workflow, without touching your checkout.
    ///
    /// Reads your ComfyUI checkout's git history only: each commit is exported into the
    /// session folder, with your models, custom nodes and inputs linked in, and run with the
    /// same Python and flags. Confirms both ends (the bad end fails, the good end passes),
    /// then bisects first-parent history. A commit that does not start, lacks one of your
    /// flags, pins other package versions or fails some other way is skipped, not called bad.
    /// Exits 0 when the first bad commit is found, 1 when it is not, 125 when nothing could
    /// be tested.
    #[command(after_long_help = EXAMPLES_REGRESS)]
    Regress(RegressArgs),
    /// Record GPU, RAM and process memory over time.
    ///
    /// Samples NVML (used/free/reserved per GPU, GPU memory per process, PCIe traffic), the
    /// system (RAM available, swap) and a process tree (resident memory, split into anonymous
    /// and file-backed on Linux) at a fixed interval. Follows --pid, or starts the COMMAND
    /// after -- in its own process group and passes its exit status through. Prints a
    /// summary table of minima and peaks; --output streams every sample to CSV and JSON lines.
    #[command(after_long_help = EXAMPLES_SAMPLE)]
    Sample(SampleArgs),
    /// Say what a ComfyUI log shows, and which experiment to run.
    ///
    /// Reads a console log or user/comfyui.log (- for standard input) in one pass, in any of
    /// ComfyUI's formats: the startup facts (versions, device, allocator, VRAM state, Dynamic
    /// VRAM, pinned memory, async offload, launch flags), every prompt with its outcome and
    /// evidence, and the known failure signatures it matches, each with its upstream issues
    /// and the vrambisect bisect command that tests the flags people try. Exits 1 when the
    /// log shows a failure, 0 when it shows none, 2 when the file is not a ComfyUI log.
    #[command(after_long_help = EXAMPLES_LOGSCAN)]
    Logscan(LogscanArgs),
    /// Build a zip bundle for a ComfyUI bug report from a run or bisect folder.
    ///
    /// Writes ISSUE.md in the shape of ComfyUI's bug template (expected and actual behaviour,
    /// steps with the exact commands, the startup log and the failure, the verdict, the run
    /// matrix, the environment), environment.json, workflow.json, every run's logs, record and
    /// samples, and a memory timeline PNG per run. Home folders, user and host names, e-mail
    /// and IP addresses, tokens, secret-named values and environment variables outside an
    /// allowlist are redacted in every file, and the tool says what it removed.
    #[command(after_long_help = EXAMPLES_REPORT)]
    Report(ReportArgs),
    /// Check the machine and a ComfyUI install: NVIDIA driver, CUDA, GPUs and free VRAM,
    /// other processes holding VRAM, ComfyUI, its Python, torch and comfy-aimdo, flags, disk,
    /// swap.
    ///
    /// Each check is shown as ✓ (fine), ! (a warning) or ✗ (a problem), with a hint. Exits 1
    /// when any check fails, 0 otherwise (warnings do not count). No CUDA context is created.
    #[command(after_long_help = EXAMPLES_DOCTOR)]
    Doctor(DoctorArgs),
    /// Install or remove the ComfyUI extension (a panel in ComfyUI's page that reads a
    /// failed prompt's log, runs the diagnosis and writes the report).
    ///
    /// `install` writes it into the ComfyUI folder's custom_nodes (comfyui-vrambisect),
    /// replacing an older copy of it; `remove` deletes it, leaving the diagnoses it kept in
    /// user/vrambisect. Restart ComfyUI afterwards. ComfyUI-Manager installs the same pack
    /// from the registry. `facts` answers what the extension asks of this program for a
    /// server: the install's kind, the flags a diagnosis tests, the launch line.
    #[command(after_long_help = EXAMPLES_EXTENSION)]
    Extension(ExtensionArgs),
    /// Print a completion script for a shell.
    ///
    /// bash: source <(vrambisect completions bash); zsh: vrambisect completions zsh >
    /// ~/.zfunc/_vrambisect; fish: vrambisect completions fish >
    /// ~/.config/fish/completions/vrambisect.fish; PowerShell: vrambisect completions
    /// powershell | Out-String | Invoke-Expression.
    Completions(CompletionsArgs),
    /// Print the manual page (roff; man -l <(vrambisect man) shows it).
    ///
    /// `vrambisect man COMMAND` prints the page of one command, vrambisect-COMMAND(1), which
    /// the main page refers to: man -l <(vrambisect man bisect).
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ExtensionArgs {
    #[command(subcommand)]
    pub action: ExtensionAction,
}

#[derive(Debug, Subcommand, Clone)]
pub enum ExtensionAction {
    /// Put the extension into ComfyUI's custom_nodes (or update it there).
    Install(ExtensionTarget),
    /// Take the extension out of ComfyUI's custom_nodes.
    Remove(ExtensionTarget),
    /// What the extension asks of this program for a server: the install's kind, the
    /// server's flags as a diagnosis tests them (networking and user-folder flags left out),
    /// the line that starts the install with the flags given, and the names of outcomes and
    /// session files (--json).
    Facts(FactsArgs),
}

#[derive(Debug, Args, Clone)]
pub struct FactsArgs {
    /// The ComfyUI folder the server runs (holding main.py).
    #[arg(help_heading = "Inputs", long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The Python that runs the server: named in the launch line, and its folder found from
    /// it when --comfyui is left out.
    #[arg(help_heading = "Inputs", long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// The server's launch flags (its `sys.argv[1:]`).
    #[arg(last = true, value_name = "COMFYUI_ARGS", allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Which ComfyUI: found as for run when left out (the folder of the Python that ran
/// `python -m vrambisect`, or the current folder).
#[derive(Debug, Args, Clone)]
pub struct ExtensionTarget {
    /// The ComfyUI folder (holding main.py).
    #[arg(help_heading = "Inputs", long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The Python that runs ComfyUI, to find its folder from.
    #[arg(help_heading = "Inputs", long, value_name = "PY")]
    pub python: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The command whose page to print (default: vrambisect's own).
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The limits of a run (`run`, `bisect`, `regress`); a resumed session keeps its own.
#[derive(Debug, Args, Clone, Copy)]
pub struct LimitArgs {
    /// Prompts per run: the prompt is sent this many times to the same ComfyUI (some failures
    /// only appear on the second prompt; RAM that never comes back shows over several).
    #[arg(help_heading = "Limits", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub iterations: u32,
    /// Give up on a prompt after this long (e.g. 30m).
    #[arg(help_heading = "Limits", long, value_name = "DURATION", default_value = "1h", value_parser = crate::duration::parse_limit, allow_hyphen_values = true)]
    pub timeout: std::time::Duration,
    /// Call it a hang after this long without websocket or log activity.
    #[arg(help_heading = "Limits", long, value_name = "DURATION", default_value = "5m", value_parser = crate::duration::parse_limit, allow_hyphen_values = true)]
    pub stall_timeout: std::time::Duration,
    /// Give up if ComfyUI is not ready after this long.
    #[arg(help_heading = "Limits", long, value_name = "DURATION", default_value = "10m", value_parser = crate::duration::parse_limit, allow_hyphen_values = true)]
    pub startup_timeout: std::time::Duration,
}

impl LimitArgs {
    /// The run's limits, with the RAM guard (the machine's, given apart).
    pub fn limits(self, min_available_ram: Option<u64>) -> crate::run::Limits {
        crate::run::Limits {
            iterations: self.iterations,
            timeout: self.timeout,
            stall_timeout: self.stall_timeout,
            startup_timeout: self.startup_timeout,
            min_available_ram,
        }
    }
}

/// `--python` where the ComfyUI folder may be found from the Python that ran vrambisect.
const PYTHON_HELP: &str = "The Python that runs ComfyUI (default: the one that ran `python -m \
    vrambisect` when the folder was found from it; else DIR/venv, DIR/.venv, the portable \
    python_embeded beside DIR, Desktop's venv; else the one that ran `python -m vrambisect`; \
    else python3)";

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The ComfyUI folder (holding main.py); its own `main.py --help` gives the flag list.
    #[arg(help_heading = "Inputs", long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    #[arg(help_heading = "Inputs", long, value_name = "PY", help = PYTHON_HELP)]
    pub python: Option<PathBuf>,
    /// A launcher script (run_nvidia_gpu.bat, a .sh) to read the flags from.
    #[arg(help_heading = "Inputs", long, value_name = "FILE")]
    pub launcher: Option<PathBuf>,
    /// The platform ComfyUI runs on (default: this machine; a .bat implies windows).
    #[arg(help_heading = "Inputs", long, value_enum)]
    pub platform: Option<Platform>,
    /// ComfyUI's flags, or a whole `python main.py ...` line (with --launcher: the
    /// launcher's own arguments, which fill its %* or "$@").
    #[arg(last = true, value_name = "COMFYUI_ARGS", allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The ComfyUI folder (holding main.py). Default: found from the Python that ran
    /// `python -m vrambisect` (the portable build, a venv inside or beside the folder,
    /// ComfyUI Desktop) and from the current folder.
    #[arg(help_heading = "Inputs", long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The workflow: the .json ComfyUI saved (UI format), its API export, or a PNG, WebP,
    /// audio or video file ComfyUI made (the prompt inside it).
    #[arg(help_heading = "Inputs", long, value_name = "FILE")]
    pub workflow: PathBuf,
    #[arg(help_heading = "Inputs", long, value_name = "PY", help = PYTHON_HELP)]
    pub python: Option<PathBuf>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// The run folder (default: vrambisect-runs/run-<time>-<id> in the current folder).
    #[arg(help_heading = "Output", long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Also sample CUDA from vrambisect's own context (costs 300-500 MB of the VRAM being
    /// measured; off by default).
    #[arg(help_heading = "Sampling", long)]
    pub cuda: bool,
    /// Stop ComfyUI when available system RAM falls below this (e.g. 1G; 0: never), before
    /// the kernel's OOM killer picks a process. Default: 2% of RAM, 256 MiB to 1 GiB.
    #[arg(help_heading = "Limits", long, value_name = "SIZE", value_parser = crate::size::parse_size, allow_hyphen_values = true)]
    pub min_available_ram: Option<u64>,
    /// The NVML library to sample with (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB", hide = true)]
    pub nvml_lib: Option<PathBuf>,
    /// Queue a shortened copy of the workflow: a number of sampling steps (every sampler
    /// stage cut to about that many, everything else as it is). auto and off run the
    /// workflow as it is: a single run has nothing to confirm a shortened one against.
    #[arg(long, value_name = "auto|off|STEPS", default_value = "auto", value_parser = crate::workflow::quick::Quick::parse)]
    pub quick: crate::workflow::quick::Quick,
    /// ComfyUI's flags, passed on unchanged.
    #[arg(last = true, value_name = "COMFYUI_FLAGS", allow_hyphen_values = true)]
    pub flags: Vec<String>,
}

#[derive(Debug, Args)]
pub struct SampleArgs {
    /// Time between samples (e.g. 100ms, 1s; 1ms works).
    #[arg(help_heading = "Sampling", long, value_name = "DURATION", default_value = "100ms", value_parser = crate::duration::parse_interval, allow_hyphen_values = true)]
    pub interval: std::time::Duration,
    /// Stop after this long (default: at Ctrl-C, or when the process or command ends). A
    /// command still running then is stopped (SIGTERM to its group, SIGKILL after 5s).
    #[arg(help_heading = "Sampling", long, value_name = "DURATION", value_parser = crate::duration::parse_limit, allow_hyphen_values = true)]
    pub duration: Option<std::time::Duration>,
    /// Stream every sample to FILE as CSV, and as JSON lines beside it (FILE with .jsonl).
    #[arg(help_heading = "Output", long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Follow this process and its children (e.g. a running ComfyUI); stop when it exits.
    #[arg(help_heading = "Inputs", long, value_name = "PID")]
    #[arg(conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Also poll a running ComfyUI's /system_stats (CUDA's view from inside ComfyUI), e.g.
    /// http://127.0.0.1:8188.
    #[arg(help_heading = "Inputs", long, value_name = "URL")]
    pub comfyui_url: Option<String>,
    /// Also read cuMemGetInfo from vrambisect's own CUDA context (costs 300-500 MB of the
    /// VRAM being measured; the cost is measured and reported).
    #[arg(help_heading = "Sampling", long)]
    pub cuda: bool,
    /// The NVML library to load (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
    /// A command to start and follow, e.g. -- python main.py --lowvram. Its exit status
    /// becomes vrambisect's.
    #[arg(last = true, value_name = "COMMAND", allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// What a new bisect is given and a resumed one keeps from its session: `--resume` refuses
/// them ([`LimitArgs`] last).
#[rustfmt::skip]
const BISECT_NEW_ONLY: [&str; 18] = [
    "comfyui", "workflow", "toggle", "strategy", "repeat", "output", "launcher", "python",
    "confidence", "quick", "no_custom_nodes_check", "first_fix", "failed_log", "base",
    "iterations", "timeout", "stall_timeout", "startup_timeout",
];

#[derive(Debug, Args)]
pub struct BisectArgs {
    /// The ComfyUI folder (holding main.py). Default: found from the Python that ran
    /// `python -m vrambisect` and from the current folder, as for run.
    #[arg(help_heading = "Inputs", long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The workflow: the .json ComfyUI saved (UI format), its API export, or a PNG, WebP,
    /// audio or video file ComfyUI made (the prompt inside it).
    #[arg(help_heading = "Inputs", long, value_name = "FILE")]
    #[arg(required_unless_present = "resume")]
    pub workflow: Option<PathBuf>,
    /// A flag to try, or a flag with a value (`--toggle --reserve-vram=2`); repeat it. Several
    /// values of one flag are alternatives, searched for the least that works. Default:
    /// --disable-dynamic-vram, --disable-pinned-memory, --disable-async-offload,
    /// --disable-nvml-pressure (those this install has), and --cache-none with --iterations 2+.
    #[arg(help_heading = "Search", long, value_name = "FLAG[=VALUE]")]
    #[arg(allow_hyphen_values = true)]
    pub toggle: Vec<String>,
    /// adaptive: as few runs as the information allows; matrix: every valid combination;
    /// each: one toggle at a time.
    #[arg(help_heading = "Search", long, value_enum, default_value = "adaptive")]
    pub strategy: StrategyArg,
    /// 1: failures are taken to show every time. 2 or more (use 3 for flaky failures): the
    /// flaky search runs what tells most until --confidence, and a passing baseline gets
    /// max(2N + 1, 13) runs before "not reproduced".
    #[arg(help_heading = "Search", long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// The session folder (default: vrambisect-sessions/bisect-<time>-<id>).
    #[arg(help_heading = "Output", long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Continue an interrupted bisect from its session folder (no finished run is repeated).
    /// The session keeps its own install, workflow, flags, toggles, repeats and timeouts; only
    /// --max-runs and --min-available-ram may be given with it.
    #[arg(help_heading = "Search", long, value_name = "DIR", conflicts_with_all = BISECT_NEW_ONLY)]
    pub resume: Option<PathBuf>,
    /// Read the base flags (and environment) from this launcher (.bat or .sh).
    #[arg(help_heading = "Inputs", long, value_name = "FILE")]
    pub launcher: Option<PathBuf>,
    /// The Python that runs ComfyUI.
    #[arg(help_heading = "Inputs", long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// The most ComfyUI runs the bisect may take (default 64, or for flaky failures what
    /// --confidence calls for at the failure rate seen; with --resume, a new budget).
    #[arg(help_heading = "Search", long, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub max_runs: Option<u32>,
    /// For flaky failures: stop when one answer is this probable given the runs (0.5 to
    /// 0.9999).
    #[arg(help_heading = "Search", long, value_name = "P", default_value_t = crate::bayes::DEFAULT_CONFIDENCE, value_parser = parse_confidence)]
    pub confidence: f64,
    /// Stop ComfyUI when available system RAM falls below this (e.g. 1G; 0: never), before
    /// the kernel's OOM killer picks a process. Default: 2% of RAM, 256 MiB to 1 GiB.
    #[arg(help_heading = "Limits", long, value_name = "SIZE", value_parser = crate::size::parse_size, allow_hyphen_values = true)]
    pub min_available_ram: Option<u64>,
    /// The NVML library to sample with (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB", hide = true)]
    pub nvml_lib: Option<PathBuf>,
    /// Search on shortened runs: auto (2 sampling steps, when the workflow has 6 or more),
    /// off, or a number of steps. Used only once a shortened run has failed as the workflow
    /// does; every verdict is confirmed on the workflow as it is.
    #[arg(help_heading = "Search", long, value_name = "auto|off|STEPS", default_value = "auto", value_parser = crate::workflow::quick::Quick::parse)]
    pub quick: crate::workflow::quick::Quick,
    /// Skip the one extra run of the failing configuration with --disable-all-custom-nodes
    /// (made when the install has custom nodes: maintainers ask for it first).
    #[arg(help_heading = "Search", long)]
    pub no_custom_nodes_check: bool,
    /// Stop at the first fix found. By default the search goes on, within a bounded number
    /// of runs it states first, for a cheaper one: one that keeps Dynamic VRAM on, then the
    /// faster, the fewer flags, the smaller value.
    #[arg(help_heading = "Search", long)]
    pub first_fix: bool,
    /// A ComfyUI log in which this workflow failed with these flags on this install (its
    /// console output, or user/comfyui.log): the search starts from a shortened run of your
    /// flags and runs them in full only if that does not fail the same way.
    #[arg(help_heading = "Inputs", long, value_name = "FILE")]
    pub failed_log: Option<PathBuf>,
    /// Your ComfyUI flags: part of the question (removing one may be the fix).
    #[arg(last = true, value_name = "BASE_FLAGS", allow_hyphen_values = true)]
    pub base: Vec<String>,
}

/// What a new regress is given and a resumed one keeps from its session: `--resume` refuses
/// them ([`LimitArgs`] last).
#[rustfmt::skip]
const REGRESS_NEW_ONLY: [&str; 16] = [
    "comfyui", "bad", "regress", "repeat", "output", "launcher", "python", "confidence",
    "quick", "no_install", "then_bisect", "flags", "iterations", "timeout", "stall_timeout",
    "startup_timeout",
];

/// `vrambisect regress`.
#[derive(Debug, Args)]
pub struct RegressArgs {
    /// Your ComfyUI checkout (a git clone; it is only read). Default: found as for run.
    #[arg(long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The workflow: the .json ComfyUI saved, its API export, or a file ComfyUI made with it.
    #[arg(long, value_name = "FILE", required_unless_present_any = ["resume", "clean_cache"])]
    pub workflow: Option<PathBuf>,
    /// A commit or tag where the workflow worked, or a ComfyUI-Manager snapshot (.json) taken
    /// then.
    #[arg(long, value_name = "REV", required_unless_present_any = ["resume", "clean_cache"])]
    pub good: Option<String>,
    /// A commit or tag where it fails (default: the checkout's HEAD).
    #[arg(long, value_name = "REV")]
    pub bad: Option<String>,
    /// What counts as bad (default: the bad end's own failure, e.g. oom).
    #[arg(long, value_name = "KIND", value_parser = parse_outcome)]
    pub regress: Option<crate::outcome::Outcome>,
    /// 1: a commit is bad if its run fails, good if it passes. 2 or more (any value: the
    /// failure is flaky): each run is chosen by what it tells until --confidence, and the bad
    /// end gets up to 13 runs to show the failure.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// The session folder (default: a new one under vrambisect-sessions/).
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Continue a session stopped early.
    #[arg(long, value_name = "DIR", conflicts_with_all = REGRESS_NEW_ONLY)]
    pub resume: Option<PathBuf>,
    /// Read ComfyUI's flags (and environment) from a .bat or .sh launcher.
    #[arg(long, value_name = "FILE")]
    pub launcher: Option<PathBuf>,
    /// The Python that runs ComfyUI (default: the checkout's venv, as for run).
    #[arg(long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// The most ComfyUI runs (default 64; with --resume, a new budget).
    #[arg(help_heading = "Limits", long, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub max_runs: Option<u32>,
    /// With --repeat 2 or more (a flaky failure): call a commit first bad only when it is
    /// this probable given the runs (0.5 to 0.9999).
    #[arg(long, value_name = "P", default_value_t = crate::bayes::DEFAULT_CONFIDENCE, value_parser = parse_confidence)]
    pub confidence: f64,
    /// Search on shortened runs: auto (2 sampling steps, when the workflow has 6 or more),
    /// off, or a number of steps. Used only once the bad end's shortened run fails as the bad
    /// end does; the first bad and last good commits are confirmed in full.
    #[arg(long, value_name = "auto|off|STEPS", default_value = "auto", value_parser = crate::workflow::quick::Quick::parse)]
    pub quick: crate::workflow::quick::Quick,
    /// Skip a commit whose requirements.txt pins another comfy-aimdo or comfy-kitchen than
    /// your Python has, instead of installing those pins into an environment of their own.
    #[arg(long)]
    pub no_install: bool,
    /// Remove the environments made for pinned packages (kept for later sessions in the
    /// cache folder; docs/regress.md) and stop, unless a session is asked for too.
    #[arg(long)]
    pub clean_cache: bool,
    /// Once the first bad commit is found, bisect the flags on it (the same workflow, flags,
    /// repeats and shortened runs), in the same session folder: which flags make that
    /// version work.
    #[arg(long)]
    pub then_bisect: bool,
    /// Your ComfyUI flags, used at every commit.
    #[arg(last = true, value_name = "FLAGS", allow_hyphen_values = true)]
    pub flags: Vec<String>,
}

/// `--confidence`: a probability from 0.5 to 0.9999.
fn parse_confidence(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if (0.5..=0.9999).contains(&p) => Ok(p),
        Ok(_) => Err(format!("{s} is not between 0.5 and 0.9999 (e.g. 0.99)")),
        Err(_) => Err(format!("{s} is not a probability (e.g. 0.99)")),
    }
}

fn parse_outcome(s: &str) -> Result<crate::outcome::Outcome, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        let names: Vec<&str> = crate::outcome::Outcome::ALL
            .iter()
            .map(|o| o.as_str())
            .collect();
        format!("expected one of {}", names.join(", "))
    })
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
    #[arg(help_heading = "Inputs", value_name = "FILE|-")]
    pub file: PathBuf,
}

#[derive(Debug, Args)]
// A folder, or a log the user has: both forms in the usage line when neither is given.
#[command(group(clap::ArgGroup::new("source").required(true).args(["dir", "log"])))]
pub struct ReportArgs {
    /// A run folder (vrambisect run --output), or a bisect or regress session folder.
    #[arg(help_heading = "Inputs", value_name = "DIR")]
    #[arg(conflicts_with = "log")]
    pub dir: Option<PathBuf>,
    /// Instead of a folder: a bundle of the failure as it happened, nothing rerun, from
    /// ComfyUI's log (its console output or user/comfyui.log).
    #[arg(help_heading = "Inputs", long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// With --log: the workflow that failed (API or UI format), put in the bundle.
    #[arg(help_heading = "Inputs", long, value_name = "FILE", requires = "log")]
    pub workflow: Option<PathBuf>,
    /// With --log: the failed prompt's /history entry (its error), put in the bundle.
    #[arg(help_heading = "Inputs", long, value_name = "FILE", requires = "log")]
    pub history: Option<PathBuf>,
    /// The zip to write (default: vrambisect-report-<folder name>.zip in the current folder).
    #[arg(help_heading = "Output", long, short = 'o', value_name = "FILE.zip")]
    pub output: Option<PathBuf>,
    /// Leave paths, names, tokens and keys as recorded (a warning is printed).
    #[arg(help_heading = "Output", long)]
    pub no_redact: bool,
    /// The ComfyUI folder, for the environment facts, when the run folder does not say.
    #[arg(help_heading = "Inputs", long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    /// The Python that runs ComfyUI (default: found as for run).
    #[arg(help_heading = "Inputs", long, value_name = "PY")]
    pub python: Option<PathBuf>,
    /// The NVML library (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB", hide = true)]
    pub nvml_lib: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The ComfyUI folder to check (holding main.py).
    #[arg(help_heading = "Inputs", long, value_name = "DIR")]
    pub comfyui: Option<PathBuf>,
    #[arg(help_heading = "Inputs", long, value_name = "PY", help = PYTHON_HELP)]
    pub python: Option<PathBuf>,
    /// The NVML library to load (default: the system's libnvidia-ml.so.1).
    #[arg(long, value_name = "PATH", env = "VRAMBISECT_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,
}

const EXAMPLES_EXTENSION: &str = "Examples:
  python -m vrambisect extension install
  vrambisect extension install --comfyui ~/ComfyUI
  vrambisect extension remove --comfyui ~/ComfyUI";

const EXAMPLES_EXPLAIN: &str = "Examples:
  vrambisect explain -- --highvram --reserve-vram 2
  vrambisect explain --launcher run_nvidia_gpu.bat
  vrambisect explain --comfyui ~/ComfyUI -- --lowvram";

const EXAMPLES_RUN: &str = "Examples:
  ~/ComfyUI/venv/bin/python -m vrambisect run --workflow flux_api.json
  vrambisect run --comfyui ~/ComfyUI --workflow flux_api.json
  vrambisect run --comfyui ~/ComfyUI --workflow flux_api.json -- --disable-dynamic-vram
  vrambisect run --comfyui ~/ComfyUI --workflow wan_api.json --iterations 3 --timeout 30m
  git bisect run vrambisect run --comfyui . --workflow ../wan_api.json";

const EXAMPLES_BISECT: &str = "Examples:
  python_embeded\\python.exe -m vrambisect bisect --workflow flux_api.json
  vrambisect bisect --comfyui ~/ComfyUI --workflow flux_api.json
  vrambisect bisect --comfyui ~/ComfyUI --workflow flux_api.json -- --reserve-vram 1
  vrambisect bisect --comfyui ~/ComfyUI --workflow flux_api.json --launcher ~/ComfyUI/run.sh
  vrambisect bisect --comfyui ~/ComfyUI --workflow wan_api.json --repeat 3
  vrambisect bisect --comfyui ~/ComfyUI --workflow wan_api.json --toggle --reserve-vram=2
  vrambisect bisect --resume vrambisect-sessions/bisect-20261129-160002-a76c";

const EXAMPLES_REGRESS: &str = "Examples:
  vrambisect regress --comfyui ~/ComfyUI --workflow flux_api.json --good v0.3.64
  vrambisect regress --workflow wan_api.json --good v0.3.60 --bad v0.3.64 -- --reserve-vram 1
  vrambisect regress --workflow flux_api.json --good v0.3.64 --regress oom --repeat 3
  vrambisect regress --resume vrambisect-sessions/regress-20261201-101500-b3c1";

const EXAMPLES_SAMPLE: &str = "Examples:
  vrambisect sample --pid 12345 --duration 5m --output comfy.csv
  vrambisect sample --interval 10ms -- python main.py --disable-dynamic-vram
  vrambisect sample --comfyui-url http://127.0.0.1:8188 --duration 1m";

const EXAMPLES_LOGSCAN: &str = "Examples:
  vrambisect logscan ComfyUI/user/comfyui.log
  vrambisect logscan - < console.txt";

const EXAMPLES_REPORT: &str = "Examples:
  vrambisect report vrambisect-sessions/bisect-20261129-160002-a76c
  vrambisect report vrambisect-runs/run-20261129-145700-1a2b --output issue.zip
  vrambisect report --log ComfyUI/user/comfyui.log --workflow workflow.json   (nothing rerun)";

const EXAMPLES_DOCTOR: &str = "Examples:
  python -m vrambisect doctor
  vrambisect doctor
  vrambisect doctor --comfyui ~/ComfyUI --python ~/ComfyUI/venv/bin/python";

/// Parses the command line: clap's own output (help, usage errors) follows `--color`,
/// `NO_COLOR` and `TERM=dumb`, and with `--json` a usage error is a JSON error object on
/// stdout. `Err` holds the exit code once clap has printed what it had to say.
pub fn parse(args: &[std::ffi::OsString]) -> Result<Cli, i32> {
    use clap::{CommandFactory, FromArgMatches};
    let ours = before_separator(args);
    // clap decides per stream (help goes to stdout, errors to stderr) whether it is a
    // terminal; NO_COLOR and TERM=dumb are ours to apply.
    let color = match color_choice(&ours) {
        ColorChoice::Always => clap::ColorChoice::Always,
        ColorChoice::Never => clap::ColorChoice::Never,
        ColorChoice::Auto if crate::output::color_allowed() => clap::ColorChoice::Auto,
        ColorChoice::Auto => clap::ColorChoice::Never,
    };
    let args = help_with_help(args);
    let parsed = Cli::command()
        .color(color)
        .try_get_matches_from(&args)
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => Ok(cli),
        Err(e) if e.use_stderr() && ours.iter().any(|a| a == "--json") => {
            let doc = serde_json::json!({"error": usage_error(&e, &ours)});
            let mut out = std::io::stdout();
            let _ = crate::output::write_json(&mut out, &doc);
            print_error(&e, &ours, color);
            Err(crate::error::exit::USAGE)
        }
        Err(e) if e.use_stderr() => {
            print_error(&e, &ours, color);
            Err(crate::error::exit::USAGE)
        }
        Err(e) => {
            let _ = e.print();
            Err(if e.use_stderr() {
                crate::error::exit::USAGE
            } else {
                crate::error::exit::OK
            })
        }
    }
}

/// clap's `help` subcommand takes `--help` for a command name: `help --help` becomes
/// `help help`, and `help run --help` becomes `help run`.
fn help_with_help(args: &[std::ffi::OsString]) -> Vec<std::ffi::OsString> {
    let text: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    // The first word that is not a global option or its value.
    let mut i = 1;
    while i < text.len() {
        match text[i].as_str() {
            "--json" => i += 1,
            "--color" => i += 2,
            a if a.starts_with("--color=") => i += 1,
            _ => break,
        }
    }
    if text.get(i).map(String::as_str) != Some("help") {
        return args.to_vec();
    }
    let end = text.iter().position(|a| a == "--").unwrap_or(text.len());
    let is_help = |a: &String| a == "--help" || a == "-h";
    if !text[i + 1..end].iter().any(is_help) {
        return args.to_vec();
    }
    let mut out: Vec<std::ffi::OsString> = args[..=i].to_vec();
    out.extend(
        args[i + 1..end]
            .iter()
            .zip(&text[i + 1..end])
            .filter(|(_, t)| !is_help(t))
            .map(|(a, _)| a.clone()),
    );
    if out.len() == i + 1 {
        out.push("help".into());
    }
    out
}

/// The arguments before `--` (after it they are ComfyUI's or a command's), as text.
fn before_separator(args: &[std::ffi::OsString]) -> Vec<String> {
    args.iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .take_while(|a| a != "--")
        .collect()
}

/// `--color` as typed (clap has not parsed yet when it prints a usage error).
fn color_choice(args: &[String]) -> ColorChoice {
    let mut choice = ColorChoice::Auto;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.strip_prefix("--color=") {
            Some(v) => Some(v.to_string()),
            None if a == "--color" => it.next().cloned(),
            None => None,
        };
        match value.as_deref() {
            Some("always") => choice = ColorChoice::Always,
            Some("never") => choice = ColorChoice::Never,
            Some("auto") => choice = ColorChoice::Auto,
            _ => {}
        }
    }
    choice
}

/// `text` (clap's rendering of an error) with every argument in it that holds control
/// characters shown escaped; clap may already have dropped its escape sequences.
fn escape_args(mut text: String, args: &[String]) -> String {
    for a in args {
        let escaped = crate::text::escape_controls(a);
        if escaped == a.as_str() {
            continue;
        }
        for quoted in [
            a.clone(),
            crate::classify::normalize::strip_ansi(a).into_owned(),
        ] {
            if text.contains(&quoted) {
                text = text.replace(&quoted, &escaped);
                break;
            }
        }
    }
    text
}

/// Prints a clap usage error on stderr as clap would, except that the arguments it quotes
/// show their control characters escaped (a newline or an escape sequence typed into a value
/// would otherwise break the line or act on the terminal).
fn print_error(e: &clap::Error, args: &[String], color: clap::ColorChoice) {
    use std::io::{IsTerminal, Write};
    if !args.iter().any(|a| a.chars().any(char::is_control)) {
        let _ = e.print();
        return;
    }
    let styled = match color {
        clap::ColorChoice::Always => true,
        clap::ColorChoice::Never => false,
        clap::ColorChoice::Auto => std::io::stderr().is_terminal(),
    };
    let rendered = e.render();
    let text = match styled {
        true => rendered.ansi().to_string(),
        false => rendered.to_string(),
    };
    let _ = std::io::stderr().write_all(escape_args(text, args).as_bytes());
}

/// A clap error as the `error` object of `--json` output: its first line, with what clap lists
/// under it when that line ends in a colon (the required arguments not given), the arguments
/// it quotes escaped as on the terminal.
fn usage_error(e: &clap::Error, args: &[String]) -> serde_json::Value {
    let text = escape_args(e.render().to_string(), args);
    let mut lines = text.lines().filter(|l| !l.trim().is_empty()).peekable();
    use clap::error::ErrorKind;
    let message = if matches!(
        e.kind(),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand
    ) {
        {
            use clap::CommandFactory;
            let names: Vec<String> = Cli::command()
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .map(|c| c.get_name().to_string())
                .collect();
            format!("no command given: one of {}", names.join(", "))
        }
    } else {
        let first = lines
            .next()
            .unwrap_or("bad command line")
            .trim_start_matches("error: ")
            .to_string();
        let mut listed = Vec::new();
        if first.ends_with(':') {
            while let Some(l) = lines.next_if(|l| l.starts_with("  ")) {
                listed.push(l.trim().to_string());
            }
        }
        match listed.is_empty() {
            true => first,
            false => format!("{} {}", first, listed.join(", ")),
        }
    };
    let hint = lines
        .find_map(|l| l.trim().strip_prefix("tip: "))
        .map(str::to_string)
        .unwrap_or_else(|| "see vrambisect --help".into());
    serde_json::json!({
        "message": message,
        "hint": hint,
        "exit_code": crate::error::exit::USAGE,
    })
}

#[cfg(test)]
mod tests {
    /// clap's own checks: every id an argument names (conflicts, requirements) exists, no two
    /// arguments share a name.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }

    /// Every example of the help parses as it is written, and fits one line of help shown
    /// without a terminal (clap wraps there, and a wrapped example reads as two commands).
    #[test]
    fn every_example_parses_and_fits_a_line() {
        use clap::Parser;
        let all = [
            super::EXAMPLES_EXTENSION,
            super::EXAMPLES_EXPLAIN,
            super::EXAMPLES_RUN,
            super::EXAMPLES_BISECT,
            super::EXAMPLES_REGRESS,
            super::EXAMPLES_SAMPLE,
            super::EXAMPLES_LOGSCAN,
            super::EXAMPLES_REPORT,
            super::EXAMPLES_DOCTOR,
        ];
        let mut checked = 0;
        for line in all.iter().flat_map(|e| e.lines().skip(1)) {
            assert!(line.chars().count() <= 96, "too long for a line: {line}");
            // What follows the command: a note in brackets, a redirection.
            let command = line
                .split("   (")
                .next()
                .unwrap()
                .split(" < ")
                .next()
                .unwrap();
            let words: Vec<&str> = command.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| *w == "vrambisect") else {
                continue; // `git bisect run vrambisect …` starts elsewhere
            };
            let argv = &words[at..];
            if let Err(e) = super::Cli::try_parse_from(argv) {
                panic!("{line}: {e}");
            }
            checked += 1;
        }
        assert!(checked >= 25, "{checked}");
    }
}
