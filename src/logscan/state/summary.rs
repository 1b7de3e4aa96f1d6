//! What a scan reports: its starts, prompts and signature tallies.

use crate::classify::catalogue::Signature;
use crate::logscan::lines::LaunchArgs;
use crate::outcome::Outcome;
use crate::startup::StartupFacts;
use serde::Serialize;
use std::collections::BTreeMap;

/// One prompt, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct PromptSummary {
    /// 1-based, in the order the prompts ended.
    pub index: u64,
    /// The server start it ran in (1-based; null when the log starts after it).
    pub start: Option<u64>,
    /// Its place among the prompts of that start (1 = the first after startup).
    pub ordinal: Option<u32>,
    /// The line of its `got prompt` (or the first line seen of it).
    pub line: u64,
    pub end_line: u64,
    /// Null when the log ends before the prompt does.
    pub outcome: Option<Outcome>,
    pub evidence: Vec<String>,
    pub signatures: Vec<&'static str>,
    pub explanation: Option<String>,
    /// The models it asked to load (`Requested to load X`), the last few.
    pub models: Vec<String>,
    /// From `Prompt executed in …`.
    pub executed_in: Option<String>,
    /// The log begins after the prompt did (no `got prompt`).
    pub started_before_log: bool,
    /// It failed (ComfyUI's executor printed a traceback), but the log ends before the
    /// exception line that says with what: no outcome, yet not a prompt still running.
    #[serde(skip)]
    pub error_cut: bool,
    /// For a failure in the middle of a progress bar (its last one stopped short of its
    /// total): the steps it had done, as the bar counted them.
    #[serde(skip)]
    pub failed_step: Option<u64>,
}

/// One server start, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StartSummary {
    pub index: u64,
    pub line: u64,
    /// Whether it came up (the `To see the GUI` line, or prompts ran).
    pub up: bool,
    /// `startup_failed` or `flag_rejected` when it never came up; null otherwise.
    pub outcome: Option<Outcome>,
    pub evidence: Vec<String>,
    pub signatures: Vec<&'static str>,
    pub explanation: Option<String>,
    pub facts: StartupFacts,
    pub launch_args: Option<LaunchArgs>,
    pub comfyui_dir: Option<String>,
    pub prompts: u32,
    /// Its prompts that passed, and that failed (not counting refused or interrupted ones).
    pub passed: u32,
    pub failed: u32,
}

/// Where a known failure signature showed, and the setup it showed in.
#[derive(Debug, Clone)]
pub struct SignatureHits {
    pub signature: &'static Signature,
    pub lines: u64,
    pub prompts: u64,
    pub first_line: u64,
    pub last_line: u64,
    pub example: String,
    /// The lowest place after a server start at which a prompt showed it.
    pub min_ordinal: Option<u32>,
    /// The setup of the last start it showed in.
    pub launch_args: Option<Vec<String>>,
    pub comfyui_dir: Option<String>,
    pub comfyui_version: Option<String>,
    pub dynamic_vram: Option<bool>,
    pub(super) last_prompt: Option<u64>,
}

/// Everything a scan found.
#[derive(Debug, Clone, Default)]
pub struct Scanned {
    pub starts: Vec<StartSummary>,
    pub starts_total: u64,
    pub prompts: Vec<PromptSummary>,
    pub prompts_total: u64,
    pub prompt_counts: BTreeMap<String, u64>,
    pub tallies: Vec<SignatureHits>,
    /// Lines that only a ComfyUI log has.
    pub recognized: u64,
    /// A model was `prepared for dynamic VRAM loading` somewhere in the log.
    pub dynamic_loads: bool,
    /// Traceback frames outside a start: an exception was raised, even if the excerpt does
    /// not show which.
    pub frames_outside_startup: bool,
}
