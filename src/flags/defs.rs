//! The flag model: every memory-, offload-, cache- and device-related ComfyUI flag as data.
//!
//! One `const` per flag with the test for that flag right under it, so a wrong entry fails
//! next to where it is written. Each test holds the entry against the real 0.3.64 `--help`
//! and the v0.38 one (does the flag exist there, does it take the values the entry says,
//! is it in the mutually exclusive group the entry says) and checks the rule the flag feeds.
//! Sources: ComfyUI's `comfy/cli_args.py` (checked against the `--help` of 0.3.64 and 0.38.1 in `fixtures/help/`), with
//! the issue or PR that introduced each behaviour where known.

#[cfg(test)]
use super::help::Nargs;
use crate::version::Version;
use serde::Serialize;

/// What values a flag takes and how ComfyUI converts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub(crate) enum ValueKind {
    /// `store_true`: no value.
    Switch,
    /// One float, in `unit`.
    Float { unit: &'static str },
    /// One integer.
    Int,
    /// One string.
    Str,
    /// An optional integer (`nargs='?'`), `constant` when given bare.
    OptionalInt { constant: i64 },
    /// Zero or more floats, at most `max` (`--cache-ram`).
    Floats { unit: &'static str, max: usize },
    /// Zero or more values of a Python enum; argparse names `type_name` in its errors.
    Enum {
        type_name: &'static str,
        values: &'static [&'static str],
    },
}

impl ValueKind {
    /// How many values argparse lets this flag consume.
    #[cfg(test)]
    pub(crate) fn nargs(self) -> Nargs {
        match self {
            ValueKind::Switch => Nargs::Zero,
            ValueKind::Float { .. } | ValueKind::Int | ValueKind::Str => Nargs::One,
            ValueKind::OptionalInt { .. } => Nargs::Optional,
            ValueKind::Floats { .. } | ValueKind::Enum { .. } => Nargs::ZeroOrMore,
        }
    }

    /// The name argparse prints for a value it could not convert (`invalid float value`).
    pub(crate) fn type_name(self) -> Option<&'static str> {
        match self {
            ValueKind::Float { .. } | ValueKind::Floats { .. } => Some("float"),
            ValueKind::Int | ValueKind::OptionalInt { .. } => Some("int"),
            ValueKind::Enum { type_name, .. } => Some(type_name),
            ValueKind::Switch | ValueKind::Str => None,
        }
    }
}

/// A mutually exclusive group: argparse exits 2 when two of its members are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Group {
    /// `--gpu-only | --highvram | --normalvram | --lowvram | --novram | --cpu`
    VramMode,
    /// `--cuda-malloc | --disable-cuda-malloc`
    CudaMalloc,
    /// `--cache-ram | --cache-classic | --cache-lru | --cache-none | --high-ram`
    Cache,
    /// The diffusion model's weight dtype.
    UnetDtype,
    /// The text encoders' weight dtype.
    TextEncoderDtype,
    /// The VAE's dtype.
    VaeDtype,
    /// `--force-fp32 | --force-fp16`
    ForceDtype,
    /// `--use-split-cross-attention | --use-quad-cross-attention | … | --use-ck-attention`
    Attention,
}

impl Group {
    /// A short human name ("VRAM mode").
    pub(crate) fn label(self) -> &'static str {
        match self {
            Group::VramMode => "VRAM mode",
            Group::CudaMalloc => "CUDA allocator",
            Group::Cache => "cache mode",
            Group::UnetDtype => "diffusion model dtype",
            Group::TextEncoderDtype => "text encoder dtype",
            Group::VaeDtype => "VAE dtype",
            Group::ForceDtype => "forced precision",
            Group::Attention => "attention implementation",
        }
    }
}

/// What part of memory behaviour a flag is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Category {
    /// How much of the GPU ComfyUI uses and how it loads models.
    Vram,
    /// Moving weights between RAM, VRAM and disk.
    Offload,
    /// Keeping node results between prompts.
    Cache,
    /// Which devices are used.
    Device,
    /// Which CUDA allocator backs PyTorch.
    Allocator,
    /// The dtype weights are stored in (their size in memory).
    Precision,
    /// Which attention implementation runs (its peak memory while sampling).
    Attention,
    /// Help for diagnosing hangs.
    Diagnostics,
}

/// When a flag first appeared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "versions")]
pub(crate) enum Since {
    /// Already in 0.3.64 (the oldest release on record); the exact start is not tracked.
    Old,
    /// First in exactly this release.
    Release(&'static str),
    /// Absent in the first release, present in the second; exactly when is unknown.
    Between(&'static str, &'static str),
}

/// When a flag was removed: present in the first release, gone in the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Removed(pub &'static str, pub &'static str);

/// One ComfyUI flag and what it does to memory.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct FlagDef {
    pub name: &'static str,
    /// Values in the v0.38 line.
    pub value: ValueKind,
    /// Values in 0.3.64 where they differ (`--async-offload` took none, `--cuda-device` an int).
    pub legacy_value: Option<ValueKind>,
    /// The default, in words.
    pub default: &'static str,
    pub group: Option<Group>,
    pub since: Since,
    pub removed: Option<Removed>,
    pub category: Category,
    /// What it does to memory behaviour, in one or two sentences.
    pub effect: &'static str,
}

/// The oldest release the model has observations for.
pub(crate) const OLDEST: &str = "0.3.64";

impl FlagDef {
    /// Whether the flag exists in `version`: `Some(true/false)` where known, `None` where the
    /// version falls in a span where the exact change is not known.
    pub(crate) fn exists_in(&self, version: &Version) -> Option<bool> {
        let v = |s: &str| Version::lit(s);
        let born = match self.since {
            Since::Old => (*version >= v(OLDEST)).then_some(true),
            Since::Release(r) => Some(*version >= v(r)),
            Since::Between(a, b) => {
                if *version <= v(a) {
                    Some(false)
                } else if *version >= v(b) {
                    Some(true)
                } else {
                    None
                }
            }
        };
        match (born, self.removed) {
            (Some(false), _) => Some(false),
            (born, None) => born,
            (born, Some(Removed(present, gone))) => {
                if *version >= v(gone) {
                    Some(false)
                } else if *version <= v(present) {
                    born
                } else {
                    None
                }
            }
        }
    }

    /// The value kind in `version` (the legacy one up to 0.3.64).
    pub(crate) fn value_in(&self, version: Option<&Version>) -> ValueKind {
        match (version, self.legacy_value) {
            (Some(v), Some(legacy)) if *v <= Version::lit(OLDEST) => legacy,
            _ => self.value,
        }
    }

    /// "arrived in 0.15.0" / "arrived between 0.3.64 and 0.38.1" / "is in 0.3.64 and later".
    pub(crate) fn since_text(&self) -> String {
        match self.since {
            Since::Old => super::history::arrival_text(self.name)
                .unwrap_or_else(|| format!("is in {OLDEST} and later")),
            Since::Release(r) => format!("arrived in {r}"),
            Since::Between(a, b) => format!("arrived after {a} (it is in {b})"),
        }
    }
}

use Category::*;
use ValueKind::*;

const SWITCH_OFF: &str = "off";

// ---------------------------------------------------------------------------------------
// VRAM mode group. Every member but --lowvram also turns Dynamic VRAM off (`enables_dynamic_vram()`).

/// `--gpu-only`
pub(crate) const GPU_ONLY: FlagDef = FlagDef {
    name: "--gpu-only",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::VramMode),
    since: Since::Old,
    removed: None,
    category: Vram,
    effect: "Stores and runs everything, text encoders included, on the GPU (VRAM state HIGH_VRAM). Also turns Dynamic VRAM off.",
};
#[test]
fn gpu_only() {
    tests::check(&GPU_ONLY);
    tests::turns_dynamic_vram_off(&GPU_ONLY, "HIGH_VRAM");
}

/// `--highvram`
pub(crate) const HIGHVRAM: FlagDef = FlagDef {
    name: "--highvram",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::VramMode),
    since: Since::Old,
    removed: None,
    category: Vram,
    effect: "Keeps models in VRAM after use instead of unloading them to RAM (VRAM state HIGH_VRAM). Also turns Dynamic VRAM off, silently.",
};
#[test]
fn highvram() {
    tests::check(&HIGHVRAM);
    tests::turns_dynamic_vram_off(&HIGHVRAM, "HIGH_VRAM");
}

/// `--normalvram` (removed in 2026, #13922)
pub(crate) const NORMALVRAM: FlagDef = FlagDef {
    name: "--normalvram",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::VramMode),
    since: Since::Old,
    removed: Some(Removed("0.3.64", "0.38.1")),
    category: Vram,
    effect: "Forces NORMAL_VRAM where low-VRAM mode would be picked automatically. Removed in 2026 (#13922): newer ComfyUI refuses it.",
};
#[test]
fn normalvram() {
    tests::check(&NORMALVRAM);
    assert_eq!(NORMALVRAM.exists_in(&Version::lit("0.20.0")), None);
}

/// `--lowvram`
pub(crate) const LOWVRAM: FlagDef = FlagDef {
    name: "--lowvram",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::VramMode),
    since: Since::Old,
    removed: None,
    category: Vram,
    effect: "Legacy loader: splits the model to use less VRAM and runs text encoders on the CPU (VRAM state LOW_VRAM). Does nothing while Dynamic VRAM is on.",
};
#[test]
fn lowvram() {
    tests::check(&LOWVRAM);
    let e = tests::decide(&["--lowvram"]);
    assert!(e.dynamic_vram.enabled);
    assert_eq!(e.vram_state, "LOW_VRAM");
    assert!(e.no_op.iter().any(|n| n.flag == "--lowvram"));
}

/// `--novram`
pub(crate) const NOVRAM: FlagDef = FlagDef {
    name: "--novram",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::VramMode),
    since: Since::Old,
    removed: None,
    category: Vram,
    effect: "\"When lowvram isn't enough\": keeps as little as possible in VRAM (VRAM state NO_VRAM). Also turns Dynamic VRAM off.",
};
#[test]
fn novram() {
    tests::check(&NOVRAM);
    tests::turns_dynamic_vram_off(&NOVRAM, "NO_VRAM");
}

/// `--cpu`
pub(crate) const CPU: FlagDef = FlagDef {
    name: "--cpu",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::VramMode),
    since: Since::Old,
    removed: None,
    category: Device,
    effect: "Runs everything on the CPU: no GPU memory is used (VRAM state DISABLED). Turns Dynamic VRAM off; GPU memory flags do nothing.",
};
#[test]
fn cpu() {
    tests::check(&CPU);
    tests::turns_dynamic_vram_off(&CPU, "DISABLED");
}

// ---------------------------------------------------------------------------------------
// Reserve and headroom (`EXTRA_RESERVED_VRAM`, `comfy/model_management.py`).

/// `--reserve-vram GB`
pub(crate) const RESERVE_VRAM: FlagDef = FlagDef {
    name: "--reserve-vram",
    value: Float { unit: "GB" },
    legacy_value: None,
    default: "the OS default: 400 MiB on Linux, 600 MiB on Windows (700 MiB on cards over 15 GiB)",
    group: None,
    since: Since::Old,
    removed: None,
    category: Vram,
    effect: "VRAM kept back for the OS and other apps. Replaces the OS default, it does not add to it. With Dynamic VRAM it is also handed to comfy-aimdo as its simple headroom (#15666: legacy semantics; --vram-headroom keeps VRAM truly free).",
};
#[test]
fn reserve_vram() {
    tests::check(&RESERVE_VRAM);
    assert_eq!(
        tests::decide(&["--reserve-vram", "2"]).reserved_vram_mb,
        2048
    );
}

/// `--vram-headroom GB` (comfy-aimdo 0.4.10, #14480)
pub(crate) const VRAM_HEADROOM: FlagDef = FlagDef {
    name: "--vram-headroom",
    value: Float { unit: "GB" },
    legacy_value: None,
    default: "0",
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Vram,
    effect: "VRAM that Dynamic VRAM keeps completely free, counting other apps' usage too. Only used with Dynamic VRAM.",
};
#[test]
fn vram_headroom() {
    tests::check(&VRAM_HEADROOM);
    tests::no_op_without_dynamic_vram(&["--vram-headroom", "1"], "--vram-headroom");
}

/// `--disable-nvml-pressure` (comfy-aimdo 0.4.11, #15215)
pub(crate) const DISABLE_NVML_PRESSURE: FlagDef = FlagDef {
    name: "--disable-nvml-pressure",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Vram,
    effect: "Dynamic VRAM measures memory pressure with CUDA instead of NVML (they disagree by the driver's reserve and other processes). Only used with Dynamic VRAM.",
};
#[test]
fn disable_nvml_pressure() {
    tests::check(&DISABLE_NVML_PRESSURE);
    tests::no_op_without_dynamic_vram(&["--disable-nvml-pressure"], "--disable-nvml-pressure");
}

// ---------------------------------------------------------------------------------------
// Dynamic VRAM (`enables_dynamic_vram()`, `comfy/cli_args.py`).

/// `--disable-dynamic-vram` (v0.15.0, #12658)
pub(crate) const DISABLE_DYNAMIC_VRAM: FlagDef = FlagDef {
    name: "--disable-dynamic-vram",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Release("0.15.0"),
    removed: None,
    category: Vram,
    effect: "Turns Dynamic VRAM off: back to estimate-based model loading (the legacy ModelPatcher). Loses to --enable-dynamic-vram.",
};
#[test]
fn disable_dynamic_vram() {
    tests::check(&DISABLE_DYNAMIC_VRAM);
    tests::turns_dynamic_vram_off(&DISABLE_DYNAMIC_VRAM, "NORMAL_VRAM");
    assert_eq!(
        DISABLE_DYNAMIC_VRAM.exists_in(&Version::lit("0.14.9")),
        Some(false)
    );
}

/// `--enable-dynamic-vram` (#13002)
pub(crate) const ENABLE_DYNAMIC_VRAM: FlagDef = FlagDef {
    name: "--enable-dynamic-vram",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.15.0", "0.38.1"),
    removed: None,
    category: Vram,
    effect: "Forces Dynamic VRAM on, over every flag that turns it off (--disable-dynamic-vram included) and where it is not the default (AMD below ROCm 7.14, PyTorch below 2.8).",
};
#[test]
fn enable_dynamic_vram() {
    tests::check(&ENABLE_DYNAMIC_VRAM);
    let e = tests::decide(&["--highvram", "--enable-dynamic-vram"]);
    assert!(e.dynamic_vram.enabled);
    assert_eq!(
        e.dynamic_vram.decided_by.as_deref(),
        Some("--enable-dynamic-vram")
    );
}

// ---------------------------------------------------------------------------------------
// Offload: async streams, pinned memory, disk, mmap, smart memory.

/// `--async-offload [NUM_STREAMS]`
pub(crate) const ASYNC_OFFLOAD: FlagDef = FlagDef {
    name: "--async-offload",
    value: OptionalInt { constant: 2 },
    legacy_value: Some(Switch),
    default: "on with 2 streams on NVIDIA and AMD (v0.38); off in 0.3.64",
    group: None,
    since: Since::Old,
    removed: None,
    category: Offload,
    effect: "Copies weights to the GPU on N side streams while computing. In 0.3.64 it took no value and was off by default.",
};
#[test]
fn async_offload() {
    tests::check(&ASYNC_OFFLOAD);
    assert_eq!(
        tests::decide(&["--async-offload", "4"]).async_offload_streams,
        Some(4)
    );
}

/// `--disable-async-offload`
pub(crate) const DISABLE_ASYNC_OFFLOAD: FlagDef = FlagDef {
    name: "--disable-async-offload",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Offload,
    effect: "Turns async weight offloading off: weights are copied on the compute stream.",
};
#[test]
fn disable_async_offload() {
    tests::check(&DISABLE_ASYNC_OFFLOAD);
    assert_eq!(
        tests::decide(&["--disable-async-offload"]).async_offload_streams,
        None
    );
}

/// `--disable-pinned-memory`
pub(crate) const DISABLE_PINNED_MEMORY: FlagDef = FlagDef {
    name: "--disable-pinned-memory",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Offload,
    effect: "Stops pinning (page-locking) offloaded weights in RAM: less locked RAM, slower transfers. Pinned memory is capped at 40% of RAM on Windows.",
};
#[test]
fn disable_pinned_memory() {
    tests::check(&DISABLE_PINNED_MEMORY);
    assert!(!tests::decide(&["--disable-pinned-memory"]).pinned_memory);
    assert!(tests::decide(&[]).pinned_memory);
}

/// `--fast-disk`
pub(crate) const FAST_DISK: FlagDef = FlagDef {
    name: "--fast-disk",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Offload,
    effect: "Dynamic loading and offload read from disk instead of keeping unpinned copies in RAM (for fast NVMe). --disable-fast-disk overrides it.",
};
#[test]
fn fast_disk() {
    tests::check(&FAST_DISK);
    let e = tests::decide(&["--fast-disk", "--disable-fast-disk"]);
    assert!(e.no_op.iter().any(|n| n.flag == "--fast-disk"));
}

/// `--disable-fast-disk`
pub(crate) const DISABLE_FAST_DISK: FlagDef = FlagDef {
    name: "--disable-fast-disk",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Offload,
    effect: "Turns --fast-disk off (wins over it).",
};
#[test]
fn disable_fast_disk() {
    tests::check(&DISABLE_FAST_DISK);
}

/// `--disable-smart-memory`
pub(crate) const DISABLE_SMART_MEMORY: FlagDef = FlagDef {
    name: "--disable-smart-memory",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Old,
    removed: None,
    category: Offload,
    effect: "Offloads models to RAM aggressively instead of keeping them in VRAM, and unloads all models after every prompt (slower, less VRAM). Does not turn Dynamic VRAM off in v0.38.",
};
#[test]
fn disable_smart_memory() {
    tests::check(&DISABLE_SMART_MEMORY);
    assert!(
        tests::decide(&["--disable-smart-memory"])
            .dynamic_vram
            .enabled
    );
}

/// `--force-non-blocking`
pub(crate) const FORCE_NON_BLOCKING: FlagDef = FlagDef {
    name: "--force-non-blocking",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Old,
    removed: None,
    category: Offload,
    effect: "Uses non-blocking copies for all tensors; may help non-NVIDIA systems, can break some workflows.",
};
#[test]
fn force_non_blocking() {
    tests::check(&FORCE_NON_BLOCKING);
}

/// `--mmap-torch-files`
pub(crate) const MMAP_TORCH_FILES: FlagDef = FlagDef {
    name: "--mmap-torch-files",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Old,
    removed: None,
    category: Offload,
    effect: "Memory-maps .ckpt/.pt files instead of reading them into RAM (page cache instead of anonymous RAM).",
};
#[test]
fn mmap_torch_files() {
    tests::check(&MMAP_TORCH_FILES);
}

/// `--disable-mmap`
pub(crate) const DISABLE_MMAP: FlagDef = FlagDef {
    name: "--disable-mmap",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Old,
    removed: None,
    category: Offload,
    effect: "Reads .safetensors into RAM instead of memory-mapping them: RAM use is no longer reclaimable page cache.",
};
#[test]
fn disable_mmap() {
    tests::check(&DISABLE_MMAP);
}

/// `--disable-cuda-graphs`
pub(crate) const DISABLE_CUDA_GRAPHS: FlagDef = FlagDef {
    name: "--disable-cuda-graphs",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Allocator,
    effect: "Disables CUDA graphs, which keep private memory pools of their own.",
};
#[test]
fn disable_cuda_graphs() {
    tests::check(&DISABLE_CUDA_GRAPHS);
}

/// `--disable-comfy-compiler`
pub(crate) const DISABLE_COMFY_COMPILER: FlagDef = FlagDef {
    name: "--disable-comfy-compiler",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Allocator,
    effect: "Disables the Comfy model compiler, and with it CUDA graphs (implies --disable-cuda-graphs).",
};
#[test]
fn disable_comfy_compiler() {
    tests::check(&DISABLE_COMFY_COMPILER);
    assert!(tests::advises(
        &["--disable-comfy-compiler"],
        "--disable-comfy-compiler"
    ));
}

// ---------------------------------------------------------------------------------------
// CUDA allocator (`cuda_malloc.py`).

/// `--cuda-malloc`
pub(crate) const CUDA_MALLOC: FlagDef = FlagDef {
    name: "--cuda-malloc",
    value: Switch,
    legacy_value: None,
    default: "cudaMallocAsync is already on for CUDA builds of PyTorch 2 and later",
    group: Some(Group::CudaMalloc),
    since: Since::Old,
    removed: None,
    category: Allocator,
    effect: "Backs PyTorch with cudaMallocAsync; ComfyUI rewrites PYTORCH_CUDA_ALLOC_CONF (drops expandable_segments, adds backend:cudaMallocAsync). OOM text reads \"Allocation on device\".",
};
#[test]
fn cuda_malloc() {
    tests::check(&CUDA_MALLOC);
    assert_eq!(tests::decide(&[]).allocator, "cudaMallocAsync");
}

/// `--disable-cuda-malloc`
pub(crate) const DISABLE_CUDA_MALLOC: FlagDef = FlagDef {
    name: "--disable-cuda-malloc",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::CudaMalloc),
    since: Since::Old,
    removed: None,
    category: Allocator,
    effect: "Uses PyTorch's native caching allocator and leaves PYTORCH_CUDA_ALLOC_CONF as given (expandable_segments works). OOM text reads \"CUDA out of memory. Tried to allocate\".",
};
#[test]
fn disable_cuda_malloc() {
    tests::check(&DISABLE_CUDA_MALLOC);
    assert_eq!(
        tests::decide(&["--disable-cuda-malloc"]).allocator,
        "native"
    );
}

// ---------------------------------------------------------------------------------------
// Cache modes (#14396: caching, not Dynamic VRAM, was the cause of one "regression").

/// `--cache-ram [GB ...]` (#10454)
pub(crate) const CACHE_RAM: FlagDef = FlagDef {
    name: "--cache-ram",
    value: Floats { unit: "GB", max: 2 },
    legacy_value: None,
    default: "the default mode in v0.38: active headroom 10% of RAM (2–10 GB), inactive 100% of RAM (at most 128 GB)",
    group: Some(Group::Cache),
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Cache,
    effect: "RAM-pressure cache: node results are dropped when free RAM falls below the headroom. Values: active GB, then optional inactive/pin GB.",
};
#[test]
fn cache_ram() {
    tests::check(&CACHE_RAM);
    assert_eq!(tests::decide(&[]).cache, "ram_pressure");
}

/// `--cache-classic`
pub(crate) const CACHE_CLASSIC: FlagDef = FlagDef {
    name: "--cache-classic",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::Cache),
    since: Since::Old,
    removed: None,
    category: Cache,
    effect: "Old aggressive caching: every node output is kept until the graph changes (the 0.3.64 default).",
};
#[test]
fn cache_classic() {
    tests::check(&CACHE_CLASSIC);
    assert_eq!(tests::decide(&["--cache-classic"]).cache, "classic");
}

/// `--cache-lru N`
pub(crate) const CACHE_LRU: FlagDef = FlagDef {
    name: "--cache-lru",
    value: Int,
    legacy_value: None,
    default: "0 (off)",
    group: Some(Group::Cache),
    since: Since::Old,
    removed: None,
    category: Cache,
    effect: "Keeps the results of the N most recently used nodes; may use more RAM and VRAM.",
};
#[test]
fn cache_lru() {
    tests::check(&CACHE_LRU);
    assert_eq!(tests::decide(&["--cache-lru", "10"]).cache, "lru");
}

/// `--cache-none` (#7509)
pub(crate) const CACHE_NONE: FlagDef = FlagDef {
    name: "--cache-none",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::Cache),
    since: Since::Old,
    removed: None,
    category: Cache,
    effect: "No cache: every node runs on every prompt. Least RAM and VRAM, most time.",
};
#[test]
fn cache_none() {
    tests::check(&CACHE_NONE);
    assert_eq!(tests::decide(&["--cache-none"]).cache, "none");
}

/// `--high-ram`
pub(crate) const HIGH_RAM: FlagDef = FlagDef {
    name: "--high-ram",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::Cache),
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Cache,
    effect: "Switches to classic caching and lets pinned memory grow (it sets cache_classic after parsing). In the cache group: it cannot be combined with another cache flag.",
};
#[test]
fn high_ram() {
    tests::check(&HIGH_RAM);
    assert_eq!(tests::decide(&["--high-ram"]).cache, "classic");
}

// ---------------------------------------------------------------------------------------
// Devices.

/// `--cuda-device DEVICE_ID`
pub(crate) const CUDA_DEVICE: FlagDef = FlagDef {
    name: "--cuda-device",
    value: Str,
    legacy_value: Some(Int),
    default: "all GPUs (Windows: only GPU 0 unless this or CUDA_VISIBLE_DEVICES is set)",
    group: None,
    since: Since::Old,
    removed: None,
    category: Device,
    effect: "Only these GPUs are visible (sets CUDA_VISIBLE_DEVICES): '0', '0,1' or 'all'. An int in 0.3.64. #15255: '--cuda-device 0' works around a multi-GPU pinned-memory failure.",
};
#[test]
fn cuda_device() {
    tests::check(&CUDA_DEVICE);
    let win = tests::decide_on(&[], crate::flags::decide::Platform::Windows);
    assert!(win.single_gpu_forced);
    let win = tests::decide_on(
        &["--cuda-device", "all"],
        crate::flags::decide::Platform::Windows,
    );
    assert!(!win.single_gpu_forced);
}

/// `--default-device DEFAULT_DEVICE_ID`
pub(crate) const DEFAULT_DEVICE: FlagDef = FlagDef {
    name: "--default-device",
    value: Int,
    legacy_value: None,
    default: "the first visible GPU",
    group: None,
    since: Since::Old,
    removed: None,
    category: Device,
    effect: "Picks the default GPU; the others stay visible.",
};
#[test]
fn default_device() {
    tests::check(&DEFAULT_DEVICE);
}

/// `--directml [DIRECTML_DEVICE]`
pub(crate) const DIRECTML: FlagDef = FlagDef {
    name: "--directml",
    value: OptionalInt { constant: -1 },
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Old,
    removed: None,
    category: Device,
    effect: "Uses torch-directml instead of CUDA; NVML and CUDA figures do not apply.",
};
#[test]
fn directml() {
    tests::check(&DIRECTML);
}

/// `--oneapi-device-selector SELECTOR_STRING`
pub(crate) const ONEAPI_DEVICE_SELECTOR: FlagDef = FlagDef {
    name: "--oneapi-device-selector",
    value: Str,
    legacy_value: None,
    default: "unset",
    group: None,
    since: Since::Old,
    removed: None,
    category: Device,
    effect: "Sets ONEAPI_DEVICE_SELECTOR for Intel GPUs.",
};
#[test]
fn oneapi_device_selector() {
    tests::check(&ONEAPI_DEVICE_SELECTOR);
}

/// `--cpu-vae`
pub(crate) const CPU_VAE: FlagDef = FlagDef {
    name: "--cpu-vae",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Old,
    removed: None,
    category: Device,
    effect: "Runs the VAE on the CPU: less VRAM while decoding, much slower.",
};
#[test]
fn cpu_vae() {
    tests::check(&CPU_VAE);
}

/// `--fast [FAST ...]`
pub(crate) const FAST: FlagDef = FlagDef {
    name: "--fast",
    value: Enum {
        type_name: "PerformanceFeature",
        values: &[
            "fp16_accumulation",
            "fp8_matrix_mult",
            "cublas_ops",
            "autotune",
        ],
    },
    legacy_value: None,
    default: "none of the features",
    group: None,
    since: Since::Old,
    removed: None,
    category: Allocator,
    effect: "Untested optimizations; bare --fast enables all of them. 'autotune' turns cudaMallocAsync off. 'dynamic_vram' was a value only in early 2026 and is rejected now.",
};
#[test]
fn fast() {
    tests::check(&FAST);
    assert_eq!(tests::decide(&["--fast"]).allocator, "native");
    assert_eq!(
        tests::decide(&["--fast", "fp16_accumulation"]).allocator,
        "cudaMallocAsync"
    );
}

// ---------------------------------------------------------------------------------------
// Diagnostics.

/// `--debug-hang`
pub(crate) const DEBUG_HANG: FlagDef = FlagDef {
    name: "--debug-hang",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Diagnostics,
    effect: "Ctrl-C (SIGINT) dumps every thread's stack before stopping: how to see where a hang at 'Requested to load' sits.",
};
#[test]
fn debug_hang() {
    tests::check(&DEBUG_HANG);
}

// ---------------------------------------------------------------------------------------
// Weight dtypes: the size of every loaded weight.

macro_rules! dtype_flag {
    ($(#[$doc:meta])* $const:ident, $test:ident, $name:literal, $group:ident, $effect:literal) => {
        $(#[$doc])*
        pub(crate) const $const: FlagDef = FlagDef {
            name: $name,
            value: Switch,
            legacy_value: None,
            default: "the model's own dtype",
            group: Some(Group::$group),
            since: Since::Old,
            removed: None,
            category: Precision,
            effect: $effect,
        };
        #[test]
        fn $test() {
            tests::check(&$const);
        }
    };
}

dtype_flag!(
    FP32_UNET,
    fp32_unet,
    "--fp32-unet",
    UnetDtype,
    "Diffusion model in fp32: twice the memory of fp16."
);
dtype_flag!(
    FP64_UNET,
    fp64_unet,
    "--fp64-unet",
    UnetDtype,
    "Diffusion model in fp64: four times the memory of fp16."
);
dtype_flag!(
    BF16_UNET,
    bf16_unet,
    "--bf16-unet",
    UnetDtype,
    "Diffusion model in bf16."
);
dtype_flag!(
    FP16_UNET,
    fp16_unet,
    "--fp16-unet",
    UnetDtype,
    "Diffusion model in fp16."
);
dtype_flag!(
    FP8_E4M3FN_UNET,
    fp8_e4m3fn_unet,
    "--fp8_e4m3fn-unet",
    UnetDtype,
    "Diffusion model weights stored in fp8 (e4m3fn): half the memory of fp16."
);
dtype_flag!(
    FP8_E5M2_UNET,
    fp8_e5m2_unet,
    "--fp8_e5m2-unet",
    UnetDtype,
    "Diffusion model weights stored in fp8 (e5m2): half the memory of fp16."
);
dtype_flag!(
    FP8_E8M0FNU_UNET,
    fp8_e8m0fnu_unet,
    "--fp8_e8m0fnu-unet",
    UnetDtype,
    "Diffusion model weights stored in fp8 (e8m0fnu)."
);
dtype_flag!(
    FP8_E4M3FN_TEXT_ENC,
    fp8_e4m3fn_text_enc,
    "--fp8_e4m3fn-text-enc",
    TextEncoderDtype,
    "Text encoder weights in fp8 (e4m3fn): half the memory of fp16."
);
dtype_flag!(
    FP8_E5M2_TEXT_ENC,
    fp8_e5m2_text_enc,
    "--fp8_e5m2-text-enc",
    TextEncoderDtype,
    "Text encoder weights in fp8 (e5m2): half the memory of fp16."
);
dtype_flag!(
    FP16_TEXT_ENC,
    fp16_text_enc,
    "--fp16-text-enc",
    TextEncoderDtype,
    "Text encoder weights in fp16."
);
dtype_flag!(
    FP32_TEXT_ENC,
    fp32_text_enc,
    "--fp32-text-enc",
    TextEncoderDtype,
    "Text encoder weights in fp32: twice the memory of fp16."
);
dtype_flag!(
    BF16_TEXT_ENC,
    bf16_text_enc,
    "--bf16-text-enc",
    TextEncoderDtype,
    "Text encoder weights in bf16."
);
dtype_flag!(
    FP16_VAE,
    fp16_vae,
    "--fp16-vae",
    VaeDtype,
    "VAE in fp16 (may give black images)."
);
dtype_flag!(
    FP32_VAE,
    fp32_vae,
    "--fp32-vae",
    VaeDtype,
    "VAE in fp32: more VRAM while decoding."
);
dtype_flag!(BF16_VAE, bf16_vae, "--bf16-vae", VaeDtype, "VAE in bf16.");

// ---------------------------------------------------------------------------------------
// Forced precision and intermediates.

/// `--force-fp32`
pub(crate) const FORCE_FP32: FlagDef = FlagDef {
    name: "--force-fp32",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::ForceDtype),
    since: Since::Old,
    removed: None,
    category: Precision,
    effect: "Computes in fp32 where ComfyUI would use fp16 or bf16: models that are cast for compute take about twice the memory.",
};
#[test]
fn force_fp32() {
    tests::check(&FORCE_FP32);
}

/// `--force-fp16` (also sets `fp16_unet` in `cli_args.py`)
pub(crate) const FORCE_FP16: FlagDef = FlagDef {
    name: "--force-fp16",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: Some(Group::ForceDtype),
    since: Since::Old,
    removed: None,
    category: Precision,
    effect: "Forces fp16 compute, and also sets --fp16-unet: the diffusion model is stored in fp16 even when its file is fp8 (twice the memory), unless --fp32-unet, --fp64-unet or --bf16-unet is given.",
};
#[test]
fn force_fp16() {
    tests::check(&FORCE_FP16);
    // `fp16_unet` is tested before the fp8 flags in `unet_dtype()`.
    assert!(
        tests::decide(&["--force-fp16", "--fp8_e4m3fn-unet"])
            .no_op
            .iter()
            .any(|n| n.flag == "--fp8_e4m3fn-unet")
    );
    assert!(tests::advises(&["--force-fp16"], "--force-fp16"));
}

/// `--fp16-intermediates`
pub(crate) const FP16_INTERMEDIATES: FlagDef = FlagDef {
    name: "--fp16-intermediates",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Between("0.3.64", "0.38.1"),
    removed: None,
    category: Precision,
    effect: "Experimental: the tensors passed between nodes (latents, images) are kept in fp16 instead of fp32, about half their memory.",
};
#[test]
fn fp16_intermediates() {
    tests::check(&FP16_INTERMEDIATES);
    assert!(tests::advises(
        &["--fp16-intermediates"],
        "--fp16-intermediates"
    ));
}

// ---------------------------------------------------------------------------------------
// Attention: the largest transient allocations while sampling.

macro_rules! attention_flag {
    ($(#[$doc:meta])* $const:ident, $test:ident, $name:literal, $since:expr, $effect:literal) => {
        $(#[$doc])*
        pub(crate) const $const: FlagDef = FlagDef {
            name: $name,
            value: Switch,
            legacy_value: None,
            default: "chosen by ComfyUI for the device",
            group: Some(Group::Attention),
            since: $since,
            removed: None,
            category: Attention,
            effect: $effect,
        };
        #[test]
        fn $test() {
            tests::check(&$const);
            assert!(tests::advises(&[$name], $name));
        }
    };
}

attention_flag!(
    USE_SPLIT_CROSS_ATTENTION,
    use_split_cross_attention,
    "--use-split-cross-attention",
    Since::Old,
    "Computes cross attention in slices sized to free VRAM: lower peaks, slower. Ignored when xformers is used."
);
attention_flag!(
    USE_QUAD_CROSS_ATTENTION,
    use_quad_cross_attention,
    "--use-quad-cross-attention",
    Since::Old,
    "Sub-quadratic attention in chunks: lower peaks than plain attention at large sizes, slower. Ignored when xformers is used."
);
attention_flag!(
    USE_PYTORCH_CROSS_ATTENTION,
    use_pytorch_cross_attention,
    "--use-pytorch-cross-attention",
    Since::Old,
    "PyTorch's scaled_dot_product_attention (memory-efficient kernels where the GPU has them)."
);
attention_flag!(
    USE_SAGE_ATTENTION,
    use_sage_attention,
    "--use-sage-attention",
    Since::Old,
    "SageAttention kernels (the sageattention package must be installed)."
);
attention_flag!(
    USE_FLASH_ATTENTION,
    use_flash_attention,
    "--use-flash-attention",
    Since::Old,
    "FlashAttention kernels (the flash-attn package must be installed)."
);
attention_flag!(
    USE_CK_ATTENTION,
    use_ck_attention,
    "--use-ck-attention",
    Since::Between("0.3.64", "0.38.1"),
    "comfy-kitchen's attention kernels."
);

/// `--disable-xformers`
pub(crate) const DISABLE_XFORMERS: FlagDef = FlagDef {
    name: "--disable-xformers",
    value: Switch,
    legacy_value: None,
    default: SWITCH_OFF,
    group: None,
    since: Since::Old,
    removed: None,
    category: Attention,
    effect: "Does not use xformers even when it is installed; attention falls back to PyTorch's or to the split/quad paths.",
};
#[test]
fn disable_xformers() {
    tests::check(&DISABLE_XFORMERS);
}

/// Every flag in the model, in ComfyUI's definition order within each part.
pub(crate) const ALL: &[&FlagDef] = &[
    &GPU_ONLY,
    &HIGHVRAM,
    &NORMALVRAM,
    &LOWVRAM,
    &NOVRAM,
    &CPU,
    &RESERVE_VRAM,
    &VRAM_HEADROOM,
    &DISABLE_NVML_PRESSURE,
    &DISABLE_DYNAMIC_VRAM,
    &ENABLE_DYNAMIC_VRAM,
    &ASYNC_OFFLOAD,
    &DISABLE_ASYNC_OFFLOAD,
    &DISABLE_PINNED_MEMORY,
    &FAST_DISK,
    &DISABLE_FAST_DISK,
    &DISABLE_SMART_MEMORY,
    &FORCE_NON_BLOCKING,
    &MMAP_TORCH_FILES,
    &DISABLE_MMAP,
    &DISABLE_CUDA_GRAPHS,
    &DISABLE_COMFY_COMPILER,
    &CUDA_MALLOC,
    &DISABLE_CUDA_MALLOC,
    &CACHE_RAM,
    &CACHE_CLASSIC,
    &CACHE_LRU,
    &CACHE_NONE,
    &HIGH_RAM,
    &CUDA_DEVICE,
    &DEFAULT_DEVICE,
    &DIRECTML,
    &ONEAPI_DEVICE_SELECTOR,
    &CPU_VAE,
    &FAST,
    &DEBUG_HANG,
    &FP32_UNET,
    &FP64_UNET,
    &BF16_UNET,
    &FP16_UNET,
    &FP8_E4M3FN_UNET,
    &FP8_E5M2_UNET,
    &FP8_E8M0FNU_UNET,
    &FP8_E4M3FN_TEXT_ENC,
    &FP8_E5M2_TEXT_ENC,
    &FP16_TEXT_ENC,
    &FP32_TEXT_ENC,
    &BF16_TEXT_ENC,
    &FP16_VAE,
    &FP32_VAE,
    &BF16_VAE,
    &FORCE_FP32,
    &FORCE_FP16,
    &FP16_INTERMEDIATES,
    &USE_SPLIT_CROSS_ATTENTION,
    &USE_QUAD_CROSS_ATTENTION,
    &USE_PYTORCH_CROSS_ATTENTION,
    &USE_SAGE_ATTENTION,
    &USE_FLASH_ATTENTION,
    &USE_CK_ATTENTION,
    &DISABLE_XFORMERS,
];

/// The model's entry for `name` (an exact long flag name).
pub(crate) fn lookup(name: &str) -> Option<&'static FlagDef> {
    ALL.iter().copied().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::decide::{self, Platform, Predicted};
    use crate::flags::profile;
    use std::collections::BTreeSet;

    /// Holds an entry against the real help texts of 0.3.64 and the v0.38 line.
    pub(super) fn check(def: &FlagDef) {
        for text in [profile::HELP_0_3_64, profile::HELP_0_38_1] {
            let set = crate::flags::help::parse(text).unwrap();
            let version = if set.has("--normalvram") {
                Version::lit("0.3.64")
            } else {
                Version::lit("0.38.1")
            };
            let expected = def
                .exists_in(&version)
                .unwrap_or_else(|| panic!("{}: existence in {version} must be known", def.name));
            let spec = set.get(def.name);
            assert_eq!(
                spec.is_some(),
                expected,
                "{} in the {version} help: expected present={expected}",
                def.name
            );
            let Some(spec) = spec else { continue };
            assert_eq!(
                spec.nargs,
                def.value_in(Some(&version)).nargs(),
                "{}: values taken in {version}",
                def.name
            );
            let help_group: Option<BTreeSet<&str>> = set
                .group_of(def.name)
                .map(|g| g.iter().map(String::as_str).collect());
            let model_group: Option<BTreeSet<&str>> = def.group.map(|g| {
                ALL.iter()
                    .filter(|d| d.group == Some(g) && d.exists_in(&version) == Some(true))
                    .map(|d| d.name)
                    .collect()
            });
            assert_eq!(help_group, model_group, "{}: group in {version}", def.name);
            assert!(!def.effect.is_empty());
        }
        assert_eq!(
            lookup(def.name).map(|d| d.name),
            Some(def.name),
            "listed in ALL"
        );
    }

    pub(super) fn decide_on(args: &[&str], platform: Platform) -> Predicted {
        let set = profile::builtin(None).flags;
        let parsed = crate::flags::argparse::parse(&set, args, None);
        decide::decide(&parsed, &decide::Context::new(platform))
    }

    pub(super) fn decide(args: &[&str]) -> Predicted {
        decide_on(args, Platform::Linux)
    }

    pub(super) fn turns_dynamic_vram_off(def: &FlagDef, vram_state: &str) {
        let e = decide(&[def.name]);
        assert!(
            !e.dynamic_vram.enabled,
            "{} turns Dynamic VRAM off",
            def.name
        );
        assert_eq!(e.dynamic_vram.decided_by.as_deref(), Some(def.name));
        assert_eq!(e.vram_state, vram_state);
    }

    pub(super) fn no_op_without_dynamic_vram(args: &[&str], flag: &str) {
        let mut with_off = vec!["--disable-dynamic-vram"];
        with_off.extend_from_slice(args);
        assert!(decide(&with_off).no_op.iter().any(|n| n.flag == flag));
        assert!(!decide(args).no_op.iter().any(|n| n.flag == flag));
    }

    pub(super) fn advises(args: &[&str], flag: &str) -> bool {
        decide(args)
            .advice
            .iter()
            .any(|a| a.flag.as_deref() == Some(flag))
    }

    #[test]
    fn names_are_unique() {
        let names: BTreeSet<_> = ALL.iter().map(|d| d.name).collect();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn every_memory_flag_of_both_helps_is_modelled() {
        // Any help option whose name speaks of memory must have an entry.
        let memory_words = [
            "vram", "memory", "offload", "cache", "malloc", "mmap", "device", "ram",
        ];
        for text in [profile::HELP_0_3_64, profile::HELP_0_38_1] {
            let set = crate::flags::help::parse(text).unwrap();
            for opt in &set.options {
                let name = opt.name();
                if memory_words.iter().any(|w| name.contains(w)) && name != "--disable-metadata" {
                    assert!(
                        lookup(name).is_some(),
                        "{name} has no entry in the flag model"
                    );
                }
            }
        }
    }
}
