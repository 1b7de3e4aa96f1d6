//! ComfyUI's command line: the flag model, argparse's rules, and what the flags do to memory.
//!
//! - [`defs`]: every memory-, offload-, cache- and device-related flag as data.
//! - [`help`]: an install's real flag list, read from `python main.py --help`.
//! - [`argparse`]: how ComfyUI's argparse reads a command line (prefixes, groups, errors).
//! - [`decide`]: what a parsed command line does (Dynamic VRAM, VRAM state, reserve, no-ops).
//! - [`profile`]: built-in flag lists for known versions, for when no install is at hand.
//! - [`history`]: when each recorded flag arrived, and the flags the model leaves out on purpose.
//! - [`hints`]: what to say about a flag an install does not know.

pub mod argparse;
pub mod decide;
pub mod defs;
pub mod help;
pub mod hints;
pub mod history;
pub mod profile;
