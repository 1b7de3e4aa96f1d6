//! The command line (clap derive lives here and nowhere else).

use crate::flags::decide::Platform;
use crate::output::ColorChoice;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Diagnose ComfyUI memory failures and find the startup flags that fix them.
#[derive(Debug, Parser)]
#[command(name = "vrambisect", version, about, long_about = None)]
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
