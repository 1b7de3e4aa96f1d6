//! The run record: what `run --json` prints and what `bisect` and `report` read back.

use crate::classify::Classification;
use crate::outcome::Outcome;
use crate::startup::StartupFacts;
use crate::workflow::CacheBust;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One prompt sent to ComfyUI.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Iteration {
    /// 1-based.
    pub iteration: u32,
    pub outcome: Outcome,
    pub evidence: Vec<String>,
    pub explanation: Option<String>,
    pub signatures: Vec<String>,
    pub prompt_id: Option<String>,
    /// How this iteration avoided ComfyUI's cache.
    pub cache_bust: CacheBust,
    pub duration_ms: u64,
    /// Milliseconds from the run's start to the prompt being posted.
    pub started_ms: u64,
    /// Nodes that executed (per the websocket), in order.
    pub nodes_executed: Vec<String>,
    /// ComfyUI's resident memory after the prompt minus before it: RAM not returned.
    pub ram_retained_bytes: Option<i64>,
    /// The node the prompt failed in (the error's, the interrupted one, or the last that
    /// started when ComfyUI died or hung); null for a pass.
    #[serde(default)]
    pub node: Option<String>,
    /// Milliseconds from the prompt's submission to its first sampling step (loading,
    /// encoding): null when no step was reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step_ms: Option<u64>,
    /// Mean seconds per sampling step, from the progress events (null with fewer than two).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seconds_per_step: Option<f64>,
    /// The last sampling step reported (steps done of its sampler), for a failure only by
    /// the node it failed in; null when none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step: Option<u64>,
}

/// Whether a run queued the user's workflow as it is or a shortened copy (`--quick`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    #[default]
    Full,
    Quick,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Full => "full",
            RunKind::Quick => "quick",
        }
    }
}

/// How a run asked to be shortened was shortened, or why it ran in full.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Shortening {
    /// The most sampling steps of the shortened prompt (0 when it ran in full).
    pub steps: u64,
    /// The most sampling steps of the user's workflow.
    pub full_steps: u64,
    /// Every input changed (node, class, input, from, to): nothing else differs.
    pub changes: Vec<crate::workflow::quick::Change>,
    /// Nodes with steps left as they are, and why.
    pub left: Vec<String>,
    /// Why the workflow ran in full although a shortened run was asked for.
    pub unshortened: Option<String>,
}

impl Shortening {
    pub fn of(s: &crate::workflow::quick::Shortened) -> Shortening {
        Shortening {
            steps: s.quick_steps,
            full_steps: s.full_steps,
            changes: s.changes.clone(),
            left: s.left.clone(),
            unshortened: None,
        }
    }

    pub fn refused(why: String) -> Shortening {
        Shortening {
            unshortened: Some(why),
            ..Shortening::default()
        }
    }
}

/// Peak readings of the run (from the sampler when it ran).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Peaks {
    /// Highest NVML "used" of the first GPU, bytes.
    pub vram_used_bytes: Option<u64>,
    /// Highest VRAM held by ComfyUI's process tree, bytes.
    pub vram_comfyui_bytes: Option<u64>,
    /// Highest resident memory of ComfyUI's process tree, bytes.
    pub ram_comfyui_bytes: Option<u64>,
    /// Lowest available system RAM, bytes.
    pub ram_available_min_bytes: Option<u64>,
    /// Highest VRAM held by processes other than ComfyUI's (what `--vram-headroom` counts).
    pub vram_other_processes_bytes: Option<u64>,
}

/// The tool's own time per run, besides ComfyUI's startup and execution.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// From ComfyUI being ready to the first prompt being accepted (websocket connect and
    /// POST /prompt included).
    pub ready_to_submitted_ms: f64,
    /// From the last websocket message of the last prompt to its verdict (history fetched).
    pub end_to_verdict_ms: f64,
    /// From deciding to stop to ComfyUI's process group being gone.
    pub teardown_ms: f64,
}

/// How ComfyUI was stopped (the process layer's own record of a teardown).
pub(crate) use crate::process::Teardown;

/// Everything about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub outcome: Outcome,
    pub evidence: Vec<String>,
    pub explanation: Option<String>,
    /// The full command line ComfyUI was started with.
    pub argv: Vec<String>,
    /// The user's own flags (what a bisect toggles).
    pub flags: Vec<String>,
    pub effective: StartupFacts,
    pub iterations: Vec<Iteration>,
    pub peaks: Peaks,
    pub run_dir: PathBuf,
    pub workflow: PathBuf,
    pub started_at: String,
    pub duration_ms: u64,
    /// From launch to ready.
    pub startup_ms: Option<u64>,
    pub port: u16,
    pub teardown: Teardown,
    /// Where the log disagrees with what `explain` predicts, and other things to know.
    pub warnings: Vec<String>,
    /// `GET /system_stats` fetched before stopping.
    pub system_stats: Option<serde_json::Value>,
    pub overhead: Overhead,
    /// Probes that could not sample, and why (e.g. no NVIDIA driver).
    pub sampling: Vec<String>,
    /// How long this run waited for another session to finish with the GPU.
    pub gpu_wait_ms: u64,
    /// RAM that ComfyUI kept after its prompts, when it grew (null: it did not, or it could
    /// not be measured).
    #[serde(default)]
    pub ram_growth: Option<RamGrowth>,
    /// The ComfyUI folder and the Python this run used, and where each came from.
    #[serde(default)]
    pub defaults: crate::locate::Defaults,
    /// `full`, or `quick` when a shortened copy of the workflow was queued.
    #[serde(default)]
    pub run_kind: RunKind,
    /// What a shortened run changed, or why it ran in full (only when one was asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick: Option<Shortening>,
    /// Packages installed for this run in front of the Python's own (regress's environment
    /// for a commit that pins other versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<super::Overlay>,
}

/// RAM not given back after prompts: a finding of its own, whatever the outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RamGrowth {
    /// The mean, over the prompts measured after the first, of ComfyUI's resident memory
    /// after a prompt minus before it.
    pub per_prompt_bytes: i64,
    /// The sum over those prompts.
    pub total_bytes: i64,
    /// How many prompts were measured (after the first, and with ComfyUI still running).
    pub prompts: u32,
    /// "RAM +300 MiB per prompt, not returned (+600 MiB over 2 prompts after the first)".
    pub statement: String,
}

/// Growth below this per prompt is noise (allocator caches, Python's own heap).
pub(crate) const RAM_GROWTH_MIN_BYTES: i64 = 128 << 20;

impl RamGrowth {
    /// The finding, from each measured prompt's retained RAM in order; `None` when RAM did
    /// not grow by at least [`RAM_GROWTH_MIN_BYTES`] per prompt on average, every prompt
    /// adding. The first prompt loads the models into RAM, which is no leak: only the
    /// prompts after it count, so it takes two prompts (`--iterations 2`) to see growth.
    pub fn from_prompts(retained: &[i64]) -> Option<RamGrowth> {
        let retained = retained.get(1..).unwrap_or_default();
        if retained.is_empty() || retained.iter().any(|r| *r <= 0) {
            return None;
        }
        let total: i64 = retained.iter().sum();
        let per = total / retained.len() as i64;
        if per < RAM_GROWTH_MIN_BYTES {
            return None;
        }
        let n = retained.len();
        let over = if n > 1 {
            format!(
                " (+{} over {n} prompts after the first)",
                crate::text::bytes(total)
            )
        } else {
            String::new()
        };
        Some(RamGrowth {
            per_prompt_bytes: per,
            total_bytes: total,
            prompts: n as u32,
            statement: format!(
                "RAM +{} per prompt, not returned{over}",
                crate::text::bytes(per)
            ),
        })
    }
}

impl RunRecord {
    /// The probes that could not sample and why, from `sampling`'s `probe: reason` lines.
    pub fn not_sampled(&self) -> impl Iterator<Item = (&str, &str)> {
        self.sampling
            .iter()
            .filter_map(|line| line.split_once(": "))
    }

    /// Reads a record back from a run folder.
    pub fn load(dir: &std::path::Path) -> crate::error::Result<RunRecord> {
        let path = dir.join(super::folder::RECORD);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| crate::error::io_error("read run record", &path, &e))?;
        serde_json::from_str(&text).map_err(|e| {
            crate::error::Error::usage(format!("{} is not a run record: {e}", path.display()))
        })
    }
}

/// The verdict of a whole run from its iterations (the first that did not pass).
pub(crate) fn overall(iterations: &[Iteration]) -> Option<&Iteration> {
    iterations.iter().find(|i| i.outcome != Outcome::Pass)
}

impl Iteration {
    pub fn from_verdict(iteration: u32, v: &Classification) -> Iteration {
        Iteration {
            iteration,
            outcome: v.outcome,
            evidence: v.evidence.clone(),
            explanation: v.explanation.clone(),
            signatures: v.signatures.iter().map(|s| s.to_string()).collect(),
            prompt_id: None,
            cache_bust: CacheBust::None,
            duration_ms: 0,
            started_ms: 0,
            nodes_executed: Vec::new(),
            ram_retained_bytes: None,
            node: None,
            first_step_ms: None,
            seconds_per_step: None,
            last_step: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    #[test]
    fn ram_growth_counts_the_prompts_after_the_first() {
        // The first prompt loads models into RAM: no finding from it alone.
        assert_eq!(RamGrowth::from_prompts(&[900 * MIB]), None);
        let g = RamGrowth::from_prompts(&[900 * MIB, 300 * MIB, 300 * MIB]).unwrap();
        assert_eq!(g.per_prompt_bytes, 300 * MIB);
        assert_eq!(g.prompts, 2);
        assert_eq!(
            g.statement,
            "RAM +300 MiB per prompt, not returned (+600 MiB over 2 prompts after the first)"
        );
        // Noise, or a prompt that gave memory back, is no finding.
        assert_eq!(RamGrowth::from_prompts(&[900 * MIB, 20 * MIB]), None);
        assert_eq!(RamGrowth::from_prompts(&[0, 300 * MIB, -5 * MIB]), None);
    }
}
