//! What a command line really does to memory: ComfyUI's decisions as pure functions.
//!
//! The rules mirror ComfyUI's code: the Dynamic-VRAM
//! request test `enables_dynamic_vram()` in `comfy/cli_args.py`, the VRAM state
//! selection in `comfy/model_management.py`, `EXTRA_RESERVED_VRAM` (same file), the allocator
//! choice in `cuda_malloc.py` and the Windows single-GPU rule in `main.py`. They predict;
//! only the startup log says what really happened (hardware and comfy-aimdo also gate
//! Dynamic VRAM), and `run` reads it.

use super::argparse::Parsed;
use crate::startup::StartupFacts;
use crate::version::{self, Version};
use serde::Serialize;

/// The operating system ComfyUI runs on; it changes the reserve and the GPU visibility.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    Linux,
    Windows,
}

impl Platform {
    /// The platform this tool runs on.
    pub fn host() -> Platform {
        if cfg!(windows) {
            Platform::Windows
        } else {
            Platform::Linux
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Platform::Linux => "Linux",
            Platform::Windows => "Windows",
        }
    }
}

/// Everything besides the flags that the decisions depend on.
#[derive(Debug, Clone)]
pub struct Context {
    pub platform: Platform,
    /// The install's version, when known; `None` means "assume the newest behaviour".
    pub version: Option<Version>,
    /// Total VRAM of the card in MiB, when known (Windows reserves 100 MiB more above 15 GiB).
    pub total_vram_mb: Option<u64>,
    /// Environment variables that ComfyUI reads (`CUDA_VISIBLE_DEVICES`, …).
    pub env: Vec<(String, String)>,
}

impl Context {
    pub fn new(platform: Platform) -> Context {
        Context {
            platform,
            version: None,
            total_vram_mb: None,
            env: Vec::new(),
        }
    }

    fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether this version has Dynamic VRAM at all (0.15.0 and later; unknown = yes).
    pub(crate) fn has_dynamic_vram(&self) -> bool {
        self.version
            .as_ref()
            .is_none_or(|v| *v >= version::dynamic_vram_release())
    }

    /// Whether this version predates pinned memory and default async offload (0.3.64 and older).
    fn is_legacy(&self) -> bool {
        self.version
            .as_ref()
            .is_some_and(|v| *v <= Version::lit(super::defs::OLDEST))
    }
}

/// Dynamic VRAM on or off, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DynamicVram {
    pub enabled: bool,
    /// The flag that decided, or `None` when the default did.
    pub decided_by: Option<String>,
    /// One sentence: why.
    pub reason: String,
}

/// A flag that changes nothing in this command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoOp {
    pub flag: String,
    pub reason: String,
}

/// A flag (or the platform) doing more than its name says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    /// The flag it is about; `None` for advice about the platform or environment.
    pub flag: Option<String>,
    pub text: String,
}

/// What ComfyUI will do with memory under a command line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Predicted {
    pub dynamic_vram: DynamicVram,
    /// As ComfyUI logs it in `Set vram state to:`.
    pub vram_state: &'static str,
    pub reserved_vram_mb: u64,
    /// Where the reserve comes from, in words.
    pub reserved_vram_source: String,
    pub pinned_memory: bool,
    /// Async offload streams, `None` when off.
    pub async_offload_streams: Option<u32>,
    /// `cudaMallocAsync`, `native`, or `none` on the CPU.
    pub allocator: &'static str,
    /// `ram_pressure`, `classic`, `lru` or `none`.
    pub cache: &'static str,
    /// Windows hides every GPU but the first unless told otherwise (`main.py`).
    pub single_gpu_forced: bool,
    /// Precisions the flags set (empty: the model files and ComfyUI decide).
    pub precision: Vec<Precision>,
    /// The attention flag given, if any (otherwise ComfyUI picks one for the device).
    pub attention: Option<String>,
    #[serde(rename = "no_op_flags")]
    pub no_op: Vec<NoOp>,
    pub advice: Vec<Advice>,
}

impl Predicted {
    /// Where a startup log says something else was in force than these flags predict (the log
    /// wins: it is what ran).
    pub fn disagreements(&self, logged: &StartupFacts) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(actual) = logged.dynamic_vram
            && actual != self.dynamic_vram.enabled
        {
            let on_off = |b: bool| if b { "on" } else { "off" };
            out.push(format!(
                "Dynamic VRAM is {} according to the log, but the flags predict {} ({}): the hardware, PyTorch or comfy-aimdo decided",
                on_off(actual),
                on_off(self.dynamic_vram.enabled),
                self.dynamic_vram.reason
            ));
        }
        if let Some(state) = &logged.vram_state
            && state != self.vram_state
            && state != "DISABLED"
        {
            out.push(format!(
                "the log says 'Set vram state to: {state}', the flags predict {}",
                self.vram_state
            ));
        }
        // The log names async offload and pinned memory only when they are on: 0 streams is
        // a log without the line, which is off, as the flags may well predict.
        let predicted = self.async_offload_streams.filter(|&n| n > 0);
        match logged.async_offload_streams {
            Some(0) => {
                if let Some(n) = predicted {
                    out.push(format!(
                        "the log has no 'Using async weight offloading' line (off), the flags predict {n} streams"
                    ));
                }
            }
            Some(streams) if predicted != Some(streams) => out.push(format!(
                "the log says async offload runs with {streams} streams, the flags predict {}",
                match predicted {
                    Some(n) => format!("{n} streams"),
                    None => "it off".into(),
                }
            )),
            _ => {}
        }
        if logged.pinned_memory == Some(true) && !self.pinned_memory {
            out.push("the log says pinned memory is on, the flags predict it off".into());
        }
        out
    }
}

/// The flags that turn Dynamic VRAM off, in the order of ComfyUI's test.
pub const DYNAMIC_VRAM_OFF_FLAGS: &[&str] = &[
    "--disable-dynamic-vram",
    "--highvram",
    "--gpu-only",
    "--novram",
    "--cpu",
];

/// Flags that only matter when a GPU is used.
/// Flags that change nothing under `--cpu`. Not listed, because a real ComfyUI acts on them
/// there: `--async-offload` (0.3.64 logs "Using async weight offloading with 2 streams" under
/// `--cpu --async-offload`), `--reserve-vram` (`EXTRA_RESERVED_VRAM` is set from the flag
/// whatever the device) and `--disable-cuda-malloc` (`cuda_malloc.py` runs before torch,
/// whatever the device).
const GPU_ONLY_FLAGS: &[&str] = &[
    "--disable-pinned-memory",
    "--disable-async-offload",
    "--vram-headroom",
    "--disable-nvml-pressure",
    "--cuda-malloc",
    "--fast-disk",
];

/// ComfyUI's Dynamic-VRAM request test (`enables_dynamic_vram()` in `comfy/cli_args.py`).
pub fn dynamic_vram(parsed: &Parsed, ctx: &Context) -> DynamicVram {
    if !ctx.has_dynamic_vram() {
        let v = ctx
            .version
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        return DynamicVram {
            enabled: false,
            decided_by: None,
            reason: format!(
                "ComfyUI {v} predates Dynamic VRAM (on by default since {})",
                version::dynamic_vram_release()
            ),
        };
    }
    if parsed.has("--enable-dynamic-vram") {
        return DynamicVram {
            enabled: true,
            decided_by: Some("--enable-dynamic-vram".into()),
            reason: "--enable-dynamic-vram forces it on, over every flag that would turn it off"
                .into(),
        };
    }
    let offs: Vec<&str> = parsed
        .given
        .iter()
        .map(|g| g.flag.as_str())
        .filter(|f| DYNAMIC_VRAM_OFF_FLAGS.contains(f))
        .collect();
    // The explicit switch is the natural answer to "what turned it off"; else the first.
    let decider = offs
        .iter()
        .find(|f| **f == "--disable-dynamic-vram")
        .or(offs.first());
    match decider {
        Some(flag) => {
            let silently = if *flag == "--disable-dynamic-vram" {
                ""
            } else {
                " (silently: ComfyUI logs nothing about it)"
            };
            let mut reason = format!("{flag} turns it off{silently}");
            let others: Vec<&str> = offs.iter().copied().filter(|f| f != flag).collect();
            if !others.is_empty() {
                reason.push_str(&format!("; {} would too", others.join(", ")));
            }
            DynamicVram {
                enabled: false,
                decided_by: Some(flag.to_string()),
                reason,
            }
        }
        None => DynamicVram {
            enabled: true,
            decided_by: None,
            reason: "on by default (NVIDIA; AMD needs ROCm 7.14+, PyTorch 2.8+ and a working \
                     comfy-aimdo); the log line 'DynamicVRAM support detected and enabled' confirms it"
                .into(),
        },
    }
}

/// The VRAM state ComfyUI logs as `Set vram state to:` (`comfy/model_management.py`).
pub fn vram_state(parsed: &Parsed) -> &'static str {
    if parsed.has("--cpu") {
        "DISABLED"
    } else if parsed.has("--lowvram") {
        "LOW_VRAM"
    } else if parsed.has("--novram") {
        "NO_VRAM"
    } else if parsed.has("--highvram") || parsed.has("--gpu-only") {
        "HIGH_VRAM"
    } else {
        "NORMAL_VRAM"
    }
}

/// The last `--reserve-vram` value, when it is a number (argparse's `float` refuses the rest).
fn reserve_gb(parsed: &Parsed) -> Option<f64> {
    parsed
        .last("--reserve-vram")
        .and_then(|g| g.values.first())
        .and_then(|v| v.trim().parse::<f64>().ok())
}

/// `EXTRA_RESERVED_VRAM` in MiB and where it comes from (`comfy/model_management.py`).
pub fn reserved_vram(parsed: &Parsed, ctx: &Context) -> (u64, String) {
    if let Some(gb) = reserve_gb(parsed) {
        if !gb.is_finite() {
            return (0, format!("--reserve-vram {gb}: not an amount of memory"));
        }
        let mb = (gb.max(0.0) * 1024.0).round() as u64;
        let source = if gb < 0.0 {
            // ComfyUI takes it as given: its working margin (0.8 GiB plus the reserve) shrinks.
            format!(
                "--reserve-vram {gb}, which replaces the OS default; below zero it reserves nothing and takes {} MiB off ComfyUI's 0.8 GiB working margin",
                (-gb * 1024.0).round() as u64
            )
        } else {
            format!("--reserve-vram {gb}, which replaces the OS default")
        };
        return (mb, source);
    }
    match ctx.platform {
        Platform::Linux => (400, "Linux default".into()),
        Platform::Windows => match ctx.total_vram_mb {
            Some(total) if total > 15 * 1024 => {
                (700, "Windows default for cards over 15 GiB".into())
            }
            Some(_) => (600, "Windows default".into()),
            None => (
                600,
                "Windows default (700 MiB on cards over 15 GiB; card size unknown)".into(),
            ),
        },
    }
}

/// Every decision at once.
pub fn decide(parsed: &Parsed, ctx: &Context) -> Predicted {
    let dynamic = dynamic_vram(parsed, ctx);
    let cpu = parsed.has("--cpu");
    let (reserved_vram_mb, reserved_vram_source) = reserved_vram(parsed, ctx);
    let pinned_memory = !cpu && !ctx.is_legacy() && !parsed.has("--disable-pinned-memory");
    let async_offload_streams = async_streams(parsed, ctx, cpu);
    let allocator = allocator(parsed, cpu);
    let cache = cache_mode(parsed, ctx);
    let single_gpu_forced = ctx.platform == Platform::Windows
        && !cpu
        && !parsed.has("--cuda-device")
        && !parsed.has("--default-device")
        && ctx.env("CUDA_VISIBLE_DEVICES").is_none();
    let no_op = no_ops(parsed, ctx, &dynamic);
    let advice = advice(
        parsed,
        ctx,
        &dynamic,
        reserved_vram_mb,
        allocator,
        single_gpu_forced,
    );
    Predicted {
        dynamic_vram: dynamic,
        vram_state: vram_state(parsed),
        reserved_vram_mb,
        reserved_vram_source,
        pinned_memory,
        async_offload_streams,
        allocator,
        cache,
        single_gpu_forced,
        precision: precision(parsed),
        attention: attention(parsed),
        no_op,
        advice,
    }
}

fn async_streams(parsed: &Parsed, ctx: &Context, cpu: bool) -> Option<u32> {
    if parsed.has("--disable-async-offload") {
        return None;
    }
    // Asked for, it is on even with --cpu (observed on 0.3.64); by default only on NVIDIA.
    match parsed.last("--async-offload") {
        Some(g) => Some(g.values.first().and_then(|v| v.parse().ok()).unwrap_or(2)),
        None if ctx.is_legacy() || cpu => None,
        None => Some(2),
    }
}

fn allocator(parsed: &Parsed, cpu: bool) -> &'static str {
    if cpu {
        return "none";
    }
    if parsed.has("--disable-cuda-malloc") {
        return "native";
    }
    // `--fast` alone enables every feature, autotune included, which skips cudaMallocAsync.
    let autotune = parsed
        .last("--fast")
        .is_some_and(|g| g.values.is_empty() || g.values.iter().any(|v| v == "autotune"));
    if autotune && !parsed.has("--cuda-malloc") {
        "native"
    } else {
        "cudaMallocAsync"
    }
}

fn cache_mode(parsed: &Parsed, ctx: &Context) -> &'static str {
    if parsed.has("--cache-none") {
        "none"
    } else if parsed.has("--cache-lru") {
        "lru"
    } else if parsed.has("--cache-classic") || parsed.has("--high-ram") {
        "classic"
    } else if parsed.has("--cache-ram") || !ctx.is_legacy() {
        "ram_pressure"
    } else {
        "classic"
    }
}

fn no_ops(parsed: &Parsed, ctx: &Context, dynamic: &DynamicVram) -> Vec<NoOp> {
    let mut out: Vec<NoOp> = Vec::new();
    let mut add = |flag: &str, reason: &str| {
        if parsed.has(flag) && !out.iter().any(|n| n.flag == flag) {
            out.push(NoOp {
                flag: flag.into(),
                reason: reason.into(),
            });
        }
    };
    if parsed.has("--cpu") {
        for flag in GPU_ONLY_FLAGS {
            add(flag, "no GPU is used with --cpu");
        }
    }
    if dynamic.enabled {
        add(
            "--lowvram",
            "does nothing while Dynamic VRAM is on (its own help says so); it only acts with --disable-dynamic-vram",
        );
    } else if ctx.has_dynamic_vram() {
        let why = match &dynamic.decided_by {
            Some(flag) => format!("only used by Dynamic VRAM, which {flag} turns off"),
            None => "only used by Dynamic VRAM, which is off".into(),
        };
        add("--vram-headroom", &why);
        add("--disable-nvml-pressure", &why);
    }
    if parsed.has("--enable-dynamic-vram") {
        add(
            "--disable-dynamic-vram",
            "--enable-dynamic-vram wins over it",
        );
    }
    if parsed.has("--disable-fast-disk") {
        add("--fast-disk", "--disable-fast-disk overrides it");
    }
    let bare_async = parsed
        .last("--async-offload")
        .is_some_and(|g| g.values.is_empty());
    if !ctx.is_legacy()
        && bare_async
        && !parsed.has("--disable-async-offload")
        && !parsed.has("--cpu")
    {
        add(
            "--async-offload",
            "async offload with 2 streams is already the default on NVIDIA and AMD",
        );
    }
    if !parsed.has("--fast") {
        add(
            "--cuda-malloc",
            "cudaMallocAsync is already the default for CUDA builds of PyTorch 2 and later",
        );
    }
    add(
        "--enable-assets",
        "deprecated: the assets system is on by default",
    );
    // `unet_dtype()` tests fp32, fp64, bf16, fp16 and only then the fp8 flags, and
    // `--force-fp16` sets `fp16_unet`.
    if parsed.has("--force-fp16") {
        for flag in FP8_UNET_FLAGS {
            add(
                flag,
                "--force-fp16 also sets --fp16-unet, which ComfyUI tests first: the diffusion model is stored in fp16, twice the memory of fp8",
            );
        }
    }
    out
}

/// The fp8 diffusion-model flags that `--force-fp16` overrides.
const FP8_UNET_FLAGS: &[&str] = &["--fp8_e4m3fn-unet", "--fp8_e5m2-unet", "--fp8_e8m0fnu-unet"];

/// Weight and compute precision as the flags set it: `(what, dtype, flag)`, in `unet_dtype()`'s
/// order; empty when everything is left to ComfyUI and the model files.
pub fn precision(parsed: &Parsed) -> Vec<Precision> {
    let mut out = Vec::new();
    let mut push = |part: &'static str, dtype: &'static str, flag: &str| {
        out.push(Precision {
            part,
            dtype,
            flag: flag.to_string(),
        });
    };
    let unet: &[(&str, &str)] = &[
        ("--fp32-unet", "fp32"),
        ("--fp64-unet", "fp64"),
        ("--bf16-unet", "bf16"),
        ("--fp16-unet", "fp16"),
        ("--force-fp16", "fp16"),
        ("--fp8_e4m3fn-unet", "fp8_e4m3fn"),
        ("--fp8_e5m2-unet", "fp8_e5m2"),
        ("--fp8_e8m0fnu-unet", "fp8_e8m0fnu"),
    ];
    if let Some((flag, dtype)) = unet.iter().find(|(f, _)| parsed.has(f)) {
        push("diffusion model", dtype, flag);
    }
    let text_encoder: &[(&str, &str)] = &[
        ("--fp8_e4m3fn-text-enc", "fp8_e4m3fn"),
        ("--fp8_e5m2-text-enc", "fp8_e5m2"),
        ("--fp16-text-enc", "fp16"),
        ("--fp32-text-enc", "fp32"),
        ("--bf16-text-enc", "bf16"),
    ];
    if let Some((flag, dtype)) = text_encoder.iter().find(|(f, _)| parsed.has(f)) {
        push("text encoders", dtype, flag);
    }
    let vae: &[(&str, &str)] = &[
        ("--fp16-vae", "fp16"),
        ("--fp32-vae", "fp32"),
        ("--bf16-vae", "bf16"),
    ];
    if let Some((flag, dtype)) = vae.iter().find(|(f, _)| parsed.has(f)) {
        push("VAE", dtype, flag);
    }
    if parsed.has("--fp16-intermediates") {
        push("intermediates", "fp16", "--fp16-intermediates");
    }
    for (flag, dtype) in [("--force-fp32", "fp32"), ("--force-fp16", "fp16")] {
        if parsed.has(flag) {
            push("compute", dtype, flag);
        }
    }
    out
}

/// One precision the flags set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Precision {
    /// `diffusion model`, `text encoders`, `VAE`, `intermediates` or `compute`.
    pub part: &'static str,
    pub dtype: &'static str,
    /// The flag that set it.
    pub flag: String,
}

/// The attention implementation the flags ask for, if any.
pub fn attention(parsed: &Parsed) -> Option<String> {
    super::defs::ALL
        .iter()
        .filter(|d| d.group == Some(super::defs::Group::Attention))
        .find(|d| parsed.has(d.name))
        .map(|d| d.name.to_string())
}

fn advice(
    parsed: &Parsed,
    ctx: &Context,
    dynamic: &DynamicVram,
    reserved_mb: u64,
    allocator: &str,
    single_gpu_forced: bool,
) -> Vec<Advice> {
    let mut out = Vec::new();
    let mut say = |flag: Option<&str>, text: String| {
        out.push(Advice {
            flag: flag.map(str::to_string),
            text,
        });
    };
    for g in parsed.given.iter().filter(|g| g.abbreviated()) {
        say(
            Some(&g.flag),
            format!(
                "'{}' is an abbreviation that ComfyUI expands to {}; spell it out, since a new flag can make it ambiguous",
                g.typed, g.flag
            ),
        );
    }
    if ctx.has_dynamic_vram() && !parsed.has("--enable-dynamic-vram") {
        for flag in ["--highvram", "--gpu-only", "--novram", "--cpu"] {
            if parsed.has(flag) {
                say(
                    Some(flag),
                    format!(
                        "{flag} also turns Dynamic VRAM off, and ComfyUI logs nothing about it; \
                         add --enable-dynamic-vram to keep Dynamic VRAM with it"
                    ),
                );
            }
        }
    }
    if parsed.has("--disable-dynamic-vram") && !parsed.has("--enable-dynamic-vram") {
        say(
            Some("--disable-dynamic-vram"),
            "ComfyUI warns that this flag will be removed soon: if it fixes a failure, report it upstream (vrambisect report builds the bundle)".into(),
        );
    }
    // Only an amount ComfyUI accepts reserves anything (argparse refuses the rest: bad_values).
    if reserve_gb(parsed).is_some_and(f64::is_finite) {
        let default = match ctx.platform {
            Platform::Linux => "400 MiB",
            Platform::Windows => "600 MiB (700 MiB over 15 GiB)",
        };
        let mut text = format!(
            "--reserve-vram replaces the {} default of {default}, it does not add to it: {reserved_mb} MiB are reserved in total",
            ctx.platform.name()
        );
        if dynamic.enabled {
            text.push_str(
                "; under Dynamic VRAM it only sets comfy-aimdo's simple headroom, and --vram-headroom is what keeps VRAM free for other apps (#15666)",
            );
        }
        say(Some("--reserve-vram"), text);
    }
    if parsed.has("--disable-smart-memory") {
        say(
            Some("--disable-smart-memory"),
            "--disable-smart-memory also unloads every model after each prompt, so every prompt reloads its models".into(),
        );
    }
    if parsed.has("--disable-comfy-compiler") {
        say(
            Some("--disable-comfy-compiler"),
            "--disable-comfy-compiler also disables CUDA graphs (--disable-cuda-graphs)".into(),
        );
    }
    if parsed.has("--force-fp16") {
        let unet = if ["--fp32-unet", "--fp64-unet", "--bf16-unet"]
            .iter()
            .any(|f| parsed.has(f))
        {
            String::new()
        } else {
            "; it also sets --fp16-unet, so a diffusion model shipped in fp8 is stored in fp16 (twice the memory)".into()
        };
        say(
            Some("--force-fp16"),
            format!("--force-fp16 forces fp16 compute{unet}"),
        );
    }
    if parsed.has("--fp16-intermediates") {
        say(
            Some("--fp16-intermediates"),
            "--fp16-intermediates (experimental) keeps the tensors passed between nodes in fp16: about half their memory, at some risk to quality".into(),
        );
    }
    if let Some(flag) = attention(parsed)
        && let Some(def) = super::defs::lookup(&flag)
    {
        say(Some(&flag), format!("{flag}: {}", def.effect));
    }
    if parsed.has("--high-ram") {
        say(
            Some("--high-ram"),
            "--high-ram also switches to classic caching (every node output kept)".into(),
        );
    }
    if allocator == "native" && parsed.has("--fast") && !parsed.has("--disable-cuda-malloc") {
        say(
            Some("--fast"),
            "--fast with autotune (bare --fast enables it) turns cudaMallocAsync off: the native allocator's OOM messages and fragmentation apply".into(),
        );
    }
    if parsed.has("--windows-standalone-build") && !parsed.has("--disable-auto-launch") {
        say(
            Some("--windows-standalone-build"),
            "--windows-standalone-build also opens a browser at start (add --disable-auto-launch to stop it)".into(),
        );
    }
    if let Some(g) = parsed.last("--cuda-device") {
        let which = g.values.first().map(String::as_str).unwrap_or("");
        if which != "all" {
            say(
                Some("--cuda-device"),
                format!(
                    "--cuda-device {which} hides every other GPU from ComfyUI (it sets CUDA_VISIBLE_DEVICES)"
                ),
            );
        }
    }
    if single_gpu_forced {
        say(
            None,
            "on Windows ComfyUI forces single-GPU mode (CUDA_VISIBLE_DEVICES=0) unless --cuda-device, --default-device or CUDA_VISIBLE_DEVICES is set".into(),
        );
    }
    if allocator == "cudaMallocAsync"
        && let Some(conf) = ctx.env("PYTORCH_CUDA_ALLOC_CONF")
        && conf.contains("expandable_segments")
    {
        say(
            None,
            format!(
                "PYTORCH_CUDA_ALLOC_CONF={conf}: ComfyUI strips expandable_segments:True and adds backend:cudaMallocAsync; add --disable-cuda-malloc to keep your setting"
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{argparse, profile};

    fn run(args: &[&str], ctx: &Context) -> Predicted {
        let set = profile::builtin(ctx.version.as_ref()).flags;
        let parsed = argparse::parse(&set, args, ctx.version.as_ref());
        decide(&parsed, ctx)
    }

    fn linux() -> Context {
        Context::new(Platform::Linux)
    }

    fn windows(total_vram_mb: Option<u64>) -> Context {
        Context {
            total_vram_mb,
            ..Context::new(Platform::Windows)
        }
    }

    #[test]
    fn dynamic_vram_table() {
        // (args, enabled, decided_by, vram state)
        let cases: &[(&[&str], bool, Option<&str>, &str)] = &[
            (&[], true, None, "NORMAL_VRAM"),
            (
                &["--enable-dynamic-vram", "--disable-dynamic-vram"],
                true,
                Some("--enable-dynamic-vram"),
                "NORMAL_VRAM",
            ),
            (
                &["--disable-dynamic-vram", "--enable-dynamic-vram"],
                true,
                Some("--enable-dynamic-vram"),
                "NORMAL_VRAM",
            ),
            (&["--highvram"], false, Some("--highvram"), "HIGH_VRAM"),
            (&["--gpu-only"], false, Some("--gpu-only"), "HIGH_VRAM"),
            (&["--novram"], false, Some("--novram"), "NO_VRAM"),
            (&["--cpu"], false, Some("--cpu"), "DISABLED"),
            (&["--lowvram"], true, None, "LOW_VRAM"),
            (
                &["--highvram", "--disable-dynamic-vram"],
                false,
                Some("--disable-dynamic-vram"),
                "HIGH_VRAM",
            ),
            (&["--disable-smart-memory"], true, None, "NORMAL_VRAM"),
            (&["--reserve-vram", "4"], true, None, "NORMAL_VRAM"),
            (
                &["--disable-dyn"],
                false,
                Some("--disable-dynamic-vram"),
                "NORMAL_VRAM",
            ),
        ];
        for (args, enabled, by, state) in cases {
            let e = run(args, &linux());
            assert_eq!(e.dynamic_vram.enabled, *enabled, "{args:?}");
            assert_eq!(e.dynamic_vram.decided_by.as_deref(), *by, "{args:?}");
            assert_eq!(e.vram_state, *state, "{args:?}");
        }
    }

    #[test]
    fn old_versions_have_no_dynamic_vram() {
        let ctx = Context {
            version: Some(Version::lit("0.3.64")),
            ..linux()
        };
        let e = run(&["--lowvram"], &ctx);
        assert!(!e.dynamic_vram.enabled);
        assert!(e.dynamic_vram.reason.contains("predates"));
        assert!(e.no_op.is_empty(), "--lowvram works on 0.3.64");
        assert!(!e.pinned_memory);
        assert_eq!(e.async_offload_streams, None);
        // Asked for under --cpu, it is on (0.3.64 logs 2 streams there).
        assert_eq!(
            run(&["--cpu", "--async-offload"], &ctx).async_offload_streams,
            Some(2)
        );
        assert_eq!(
            run(&["--async-offload"], &ctx).async_offload_streams,
            Some(2)
        );
        assert_eq!(e.cache, "classic");
    }

    #[test]
    fn reserve_table() {
        // (platform context, args, MiB)
        let cases: &[(Context, &[&str], u64)] = &[
            (linux(), &[], 400),
            (linux(), &["--reserve-vram", "1"], 1024),
            (linux(), &["--reserve-vram", "0.5"], 512),
            (windows(None), &[], 600),
            (windows(Some(8 * 1024)), &[], 600),
            (windows(Some(15 * 1024)), &[], 600),
            (windows(Some(24 * 1024)), &[], 700),
            (windows(Some(24 * 1024)), &["--reserve-vram", "1"], 1024),
            (windows(Some(8 * 1024)), &["--reserve-vram=2"], 2048),
            (linux(), &["--reserve-vram", "-1"], 0),
            (linux(), &["--reserve-vram=-inf"], 0),
            (linux(), &["--reserve-vram", "inf"], 0),
        ];
        for (ctx, args, mb) in cases {
            assert_eq!(
                run(args, ctx).reserved_vram_mb,
                *mb,
                "{:?} {args:?}",
                ctx.platform
            );
        }
        // Below zero is not nothing: ComfyUI's working margin shrinks, and the source says so.
        let below = run(&["--reserve-vram", "-0.5"], &linux());
        assert!(
            below
                .reserved_vram_source
                .ends_with("takes 512 MiB off ComfyUI's 0.8 GiB working margin"),
            "{}",
            below.reserved_vram_source
        );
    }

    #[test]
    fn no_op_table() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["--lowvram"], &["--lowvram"]),
            (&["--lowvram", "--disable-dynamic-vram"], &[]),
            (&["--vram-headroom", "1"], &[]),
            (
                &["--vram-headroom", "1", "--highvram"],
                &["--vram-headroom"],
            ),
            (
                &["--disable-nvml-pressure", "--disable-dynamic-vram"],
                &["--disable-nvml-pressure"],
            ),
            (
                &["--enable-dynamic-vram", "--disable-dynamic-vram"],
                &["--disable-dynamic-vram"],
            ),
            // A real ComfyUI acts on --reserve-vram, --async-offload and
            // --disable-cuda-malloc under --cpu: no claim is made about them.
            (
                &["--cpu", "--disable-pinned-memory", "--reserve-vram", "1"],
                &["--disable-pinned-memory"],
            ),
            (&["--cpu", "--async-offload", "--disable-cuda-malloc"], &[]),
            (&["--async-offload"], &["--async-offload"]),
            (&["--async-offload", "4"], &[]),
            (&["--cuda-malloc"], &["--cuda-malloc"]),
        ];
        for (args, expected) in cases {
            let flags: Vec<String> = run(args, &linux())
                .no_op
                .into_iter()
                .map(|n| n.flag)
                .collect();
            assert_eq!(flags, *expected, "{args:?}");
        }
    }

    #[test]
    fn advice_for_flags_that_do_more_than_they_say() {
        let e = run(&["--highvram"], &linux());
        assert!(e.advice.iter().any(
            |a| a.flag.as_deref() == Some("--highvram") && a.text.contains("Dynamic VRAM off")
        ));
        let e = run(&["--highvram", "--enable-dynamic-vram"], &linux());
        assert!(
            !e.advice
                .iter()
                .any(|a| a.flag.as_deref() == Some("--highvram"))
        );
        let e = run(&["--reserve-vram", "2"], &windows(None));
        let text = &e
            .advice
            .iter()
            .find(|a| a.flag.as_deref() == Some("--reserve-vram"))
            .unwrap()
            .text;
        assert!(text.contains("replaces the Windows default"), "{text}");
        assert!(text.contains("2048 MiB"), "{text}");
        // A value that is no amount reserves nothing: no advice about what it reserves.
        for bad in [
            &["--reserve-vram", "abc"][..],
            &["--reserve-vram"][..],
            &["--reserve-vram", "inf"][..],
        ] {
            let e = run(bad, &linux());
            assert!(
                !e.advice
                    .iter()
                    .any(|a| a.flag.as_deref() == Some("--reserve-vram")),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn windows_single_gpu_rule() {
        assert!(run(&[], &windows(None)).single_gpu_forced);
        assert!(!run(&["--default-device", "1"], &windows(None)).single_gpu_forced);
        let ctx = Context {
            env: vec![("CUDA_VISIBLE_DEVICES".into(), "0,1".into())],
            ..windows(None)
        };
        assert!(!run(&[], &ctx).single_gpu_forced);
        assert!(!run(&[], &linux()).single_gpu_forced);
    }

    #[test]
    fn alloc_conf_is_rewritten_by_comfyui() {
        let ctx = Context {
            env: vec![(
                "PYTORCH_CUDA_ALLOC_CONF".into(),
                "expandable_segments:True".into(),
            )],
            ..linux()
        };
        assert!(
            run(&[], &ctx)
                .advice
                .iter()
                .any(|a| a.text.contains("strips expandable_segments"))
        );
        assert!(
            !run(&["--disable-cuda-malloc"], &ctx)
                .advice
                .iter()
                .any(|a| a.text.contains("strips"))
        );
    }

    #[test]
    fn the_log_contradicting_the_prediction_is_said() {
        let logged = StartupFacts {
            async_offload_streams: Some(2),
            pinned_memory: Some(true),
            ..StartupFacts::default()
        };
        // --cpu predicts neither (async offload is on only when asked for there).
        let said = run(&["--cpu"], &linux()).disagreements(&logged);
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("async offload runs with 2 streams"),
            "{said:?}"
        );
        assert!(said[1].contains("pinned memory is on"), "{said:?}");
        // What the flags predict, the log confirming it: nothing to say.
        assert!(
            run(&["--cpu", "--async-offload"], &linux())
                .disagreements(&StartupFacts {
                    async_offload_streams: Some(2),
                    ..StartupFacts::default()
                })
                .is_empty()
        );
        // A log that says nothing contradicts nothing.
        assert!(
            run(&[], &linux())
                .disagreements(&StartupFacts::default())
                .is_empty()
        );
        // A finished startup without the offloading line is async offload off (0 streams):
        // what --cpu predicts, and against a prediction of streams, said as the missing line.
        let without_the_line = StartupFacts {
            async_offload_streams: Some(0),
            ..StartupFacts::default()
        };
        assert!(
            run(&["--cpu"], &linux())
                .disagreements(&without_the_line)
                .is_empty()
        );
        let said = run(&["--cpu", "--async-offload"], &linux()).disagreements(&without_the_line);
        assert_eq!(
            said,
            [
                "the log has no 'Using async weight offloading' line (off), the flags predict 2 streams"
            ]
        );
    }
}
