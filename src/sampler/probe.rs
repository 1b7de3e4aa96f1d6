//! The probe abstraction: one source of readings (NVML, CUDA, ComfyUI, the system), each
//! opened once, each able to say in one line why it gives nothing.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// What a series is measured in. Names say it too when it is not bytes (`…_kbps`, `…procs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unit {
    #[serde(rename = "bytes")]
    Bytes,
    /// NVML's PCIe counters: kilobytes per second.
    #[serde(rename = "KB/s")]
    KilobytesPerSecond,
    #[serde(rename = "count")]
    Count,
}

impl Unit {
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::KilobytesPerSecond => "KB/s",
            Unit::Count => "count",
        }
    }
}

/// One column of the sample table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeriesDef {
    /// Stable, self-describing name, e.g. `gpu0.nvml.used`, `tree.rss_anon`.
    pub name: String,
    pub unit: Unit,
}

impl SeriesDef {
    pub fn new(name: impl Into<String>, unit: Unit) -> SeriesDef {
        SeriesDef {
            name: name.into(),
            unit,
        }
    }

    pub fn bytes(name: impl Into<String>) -> SeriesDef {
        SeriesDef::new(name, Unit::Bytes)
    }
}

/// Why a probe, or one part of it, gives no readings. Reported once, never fatal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unavailable {
    /// `nvml`, `nvml.pcie`, `nvml.processes`, `cuda`, `comfy`, `system`, `tree`, …
    pub probe: String,
    /// One line a person can act on.
    pub reason: String,
}

impl Unavailable {
    pub fn new(probe: impl Into<String>, reason: impl Into<String>) -> Unavailable {
        Unavailable {
            probe: probe.into(),
            reason: reason.into(),
        }
    }
}

/// What every probe may know about the moment of one sample.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The followed process tree (root first is not guaranteed), sorted; empty when none.
    pub tree: &'a [u32],
    /// The tree's root (ComfyUI's pid), once known.
    pub root_pid: Option<u32>,
    /// This process: its GPU memory is the tool's own footprint, never "other processes".
    pub self_pid: u32,
    /// When this sample was taken.
    pub now: Instant,
}

impl Context<'_> {
    pub fn in_tree(&self, pid: u32) -> bool {
        self.tree.binary_search(&pid).is_ok()
    }
}

/// A source of readings. The sampler thread owns every probe, so probes need not be `Send`.
pub trait Probe {
    /// Short name used in `unavailable` lines: `nvml`, `cuda`, `comfy`, `system`.
    fn name(&self) -> &'static str;

    /// The columns this probe fills, fixed when it opens.
    fn series(&self) -> &[SeriesDef];

    /// Writes one reading per series into `out` (as long as [`Probe::series`]); leaves `None`
    /// where there is nothing this time. Must not block for long: slow sources (PCIe counters,
    /// HTTP) are polled on their own thread and only read here.
    fn sample(&mut self, ctx: &Context<'_>, out: &mut [Option<i64>]);

    /// Problems found since the last call, each reported once.
    fn take_unavailable(&mut self) -> Vec<Unavailable> {
        Vec::new()
    }

    /// Problems that still hold when sampling ends (e.g. "ComfyUI never answered").
    fn final_unavailable(&mut self) -> Vec<Unavailable> {
        Vec::new()
    }

    /// ComfyUI's address became known (only the ComfyUI probe cares).
    fn set_comfy_url(&mut self, _url: &str) {}
}

/// Clamps a byte or counter figure into the `i64` the sample table holds.
pub fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
