//! The integration tests, in one binary: one build and one link instead of one per file, and
//! the tests of every file run side by side. (`tests/sampler.rs` stays apart: it samples its
//! own process, which the other tests' children would join.)

#[path = "../support/mod.rs"]
mod support;

mod bisect_cli;
mod cheaper_cli;
mod cli_input;
mod doctor_cli;
mod explain_cli;
mod extension_contract;
mod fake_comfyui;
mod fake_gpu;
mod gpu_check;
mod interrupt_bisect;
mod logscan_cli;
mod parsers_prop;
mod public_surface;
mod quick_cli;
mod real_nvidia;
mod regress_cli;
mod regress_pins;
mod report_cli;
mod run_cli;
mod run_sampling;
mod sampler_cli;
mod snapshots;
mod terminal;
