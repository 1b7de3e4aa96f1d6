//! vrambisect: diagnose ComfyUI memory failures and find the startup flags that fix them.
//!
//! The binary (`src/main.rs`) only parses the command line and calls [`app::run`]; each
//! command lives in its own module and writes through `&mut dyn Write`.

// No function outside tests over 150 lines of code (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]
#![warn(unreachable_pub)]

pub mod app;
mod bayes;
pub mod bisect;
mod boot;
pub mod classify;
pub mod cli;
pub mod comfy;
mod doctor;
pub mod duration;
mod error;
mod explain;
mod extension;
pub mod flags;
mod gpulock;
mod input_file;
mod install;
pub mod launcher;
mod locate;
pub mod logscan;
mod machine;
mod nvidia;
pub mod outcome;
pub mod output;
mod paths;
mod private;
pub mod process;
pub mod regress;
pub mod report;
pub mod run;
pub mod sampler;
pub mod session;
mod signals;
pub mod size;
pub mod startup;
mod text;
mod version;
pub mod workflow;
