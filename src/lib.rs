//! vrambisect: diagnose ComfyUI memory failures and find the startup flags that fix them.
//!
//! The binary (`src/main.rs`) only parses the command line and calls [`app::run`]; each
//! command lives in its own module and writes through `&mut dyn Write`.

// No function outside tests over 150 lines of code (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

pub mod app;
pub mod bayes;
pub mod bisect;
pub mod boot;
pub mod classify;
pub mod cli;
pub mod comfy;
pub mod doctor;
pub mod duration;
pub mod error;
pub mod explain;
pub mod extension;
pub mod flags;
pub mod gpulock;
pub mod input_file;
pub mod install;
pub mod journal;
pub mod launcher;
pub mod locate;
pub mod logscan;
pub mod machine;
pub mod nvidia;
pub mod outcome;
pub mod output;
pub mod paths;
pub mod private;
pub mod process;
pub mod regress;
pub mod report;
pub mod run;
pub mod sampler;
pub mod session;
pub mod signals;
pub mod size;
pub mod startup;
pub mod text;
pub mod version;
pub mod workflow;
