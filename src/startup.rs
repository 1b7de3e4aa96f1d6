//! What ComfyUI's startup log says was really in force (not what the flags predict).
//!
//! Fed one normalised line at a time, so `run` reads it live and `logscan` streams a log of
//! any size. Lines and their order as in `fixtures/captures/logs/startup-cpu.log` and `fixtures/logs/`.

use crate::version::{self, Version};
use serde::{Deserialize, Serialize};

/// The effective configuration read from a startup log (a run record's `effective`; records
/// made before a fact was read lack it, hence the defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StartupFacts {
    pub comfyui_version: Option<String>,
    pub comfy_aimdo_version: Option<String>,
    pub comfy_kitchen_version: Option<String>,
    /// The frontend package ComfyUI has installed (`ComfyUI frontend version: 1.27.10`): the
    /// frontend it serves unless started with `--front-end-root` or `--front-end-version`.
    #[serde(default)]
    pub frontend_version: Option<String>,
    pub pytorch_version: Option<String>,
    pub python_version: Option<String>,
    /// `true` once `DynamicVRAM support detected and enabled` is seen; `false` when a
    /// fallback warning is seen, or when startup finished without the line.
    pub dynamic_vram: Option<bool>,
    /// Why Dynamic VRAM is off, when the log says.
    pub dynamic_vram_note: Option<String>,
    pub vram_state: Option<String>,
    /// `Device: cuda:0 NAME : allocator` → NAME.
    pub device: Option<String>,
    /// `cudaMallocAsync`, `native`, or `none` on the CPU.
    pub allocator: Option<String>,
    pub total_vram_mb: Option<u64>,
    pub total_ram_mb: Option<u64>,
    /// MiB that may be pinned, from `Enabled pinned memory N`.
    pub pinned_memory_mb: Option<f64>,
    pub pinned_memory: Option<bool>,
    pub async_offload_streams: Option<u32>,
    pub smart_memory: Option<bool>,
    /// `ram_pressure`, `none`, `lru` or `classic`.
    pub cache: Option<String>,
    pub reserved_vram_mb: Option<u64>,
    /// The address from `To see the GUI go to:`.
    pub url: Option<String>,
    /// The server finished starting (the `To see the GUI` line was seen).
    pub ready: bool,
    /// ComfyUI warned that a flag it was given will be removed (`Dynamic vram disabled with
    /// argument. … this argument will be removed soon`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub flag_removal_warned: bool,
}

impl StartupFacts {
    /// Reads one normalised line.
    pub fn observe(&mut self, line: &str) {
        let line = line.trim_end();
        if line.contains("argument will be removed") {
            self.flag_removal_warned = true;
        }
        if let Some(rest) = line.strip_prefix("Total VRAM ") {
            // "Total VRAM 24106 MB, total RAM 24106 MB"
            let mut nums = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse::<u64>().ok());
            self.total_vram_mb = nums.next().flatten();
            self.total_ram_mb = nums.next().flatten();
        } else if let Some(v) = line.strip_prefix("pytorch version: ") {
            self.pytorch_version = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("Set vram state to: ") {
            self.vram_state = Some(v.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("Device: ") {
            self.device_line(rest);
        } else if let Some(rest) = line.strip_prefix("Using async weight offloading with ") {
            self.async_offload_streams =
                rest.split_whitespace().next().and_then(|n| n.parse().ok());
        } else if let Some(rest) = line.strip_prefix("Enabled pinned memory ") {
            self.pinned_memory_mb = rest.trim().parse().ok();
            self.pinned_memory = Some(true);
        } else if let Some((_, rest)) = line.split_once("comfy-aimdo inited for GPU: ") {
            // comfy-aimdo names the GPU before ComfyUI's `Device:` line does.
            if self.device.is_none() {
                let name = rest.split_once(" (VRAM: ").map_or(rest, |(n, _)| n);
                self.device = Some(name.trim().to_string());
            }
        } else if line == "DynamicVRAM support detected and enabled" {
            self.dynamic_vram = Some(true);
        } else if line.starts_with("No working comfy-aimdo install detected") {
            self.dynamic_vram_off("no working comfy-aimdo install");
        } else if line.starts_with("Unsupported Pytorch detected. DynamicVRAM") {
            self.dynamic_vram_off("PyTorch older than 2.8");
        } else if line.starts_with("Dynamic vram disabled with argument") {
            self.dynamic_vram_off("--disable-dynamic-vram");
        } else if let Some(v) = line.strip_prefix("Python version: ") {
            self.python_version = Some(v.to_string());
        } else if let Some(v) = line.strip_prefix("ComfyUI version: ") {
            self.comfyui_version = Some(v.trim().to_string());
            // A version from before Dynamic VRAM has none, whatever else the log shows.
            if Version::parse(v.trim()).is_some_and(|v| v < version::dynamic_vram_release()) {
                self.dynamic_vram_off("this ComfyUI predates Dynamic VRAM");
            }
        } else if let Some(v) = line.strip_prefix("comfy-aimdo version: ") {
            self.comfy_aimdo_version = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("ComfyUI frontend version: ") {
            self.frontend_version = Some(v.trim().to_string());
        } else if let Some(v) = line.strip_prefix("comfy-kitchen version: ") {
            self.comfy_kitchen_version = Some(v.trim().to_string());
        } else if line == "Disabling smart memory management" {
            self.smart_memory = Some(false);
        } else if line == "Using RAM pressure cache." {
            self.cache = Some("ram_pressure".into());
        } else if line == "Disabling intermediate node cache." {
            self.cache = Some("none".into());
        } else if line.starts_with("Using LRU cache") {
            self.cache = Some("lru".into());
        } else if let Some(rest) = line.strip_prefix("Reserving ") {
            self.reserved_vram_mb = rest
                .split(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse().ok());
        } else if let Some(url) = line.strip_prefix("To see the GUI go to: ") {
            self.url = Some(url.trim().to_string());
            self.finish();
        }
    }

    fn device_line(&mut self, rest: &str) {
        if rest.trim() == "cpu" {
            self.device = Some("cpu".into());
            self.allocator = Some("none".into());
            return;
        }
        // "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync"; only the first device decides
        // (comfy-aimdo's name for it, from before, gives way).
        if self.device.is_some() && self.allocator.is_some() {
            return;
        }
        let (name, allocator) = match rest.rsplit_once(" : ") {
            Some((n, a)) => (n, Some(a.trim().to_string())),
            None => (rest, None),
        };
        let name = name.split_once(' ').map(|(_, n)| n).unwrap_or(name);
        self.device = Some(name.trim().to_string());
        self.allocator = allocator;
    }

    fn dynamic_vram_off(&mut self, why: &str) {
        if self.dynamic_vram != Some(true) {
            self.dynamic_vram = Some(false);
            self.dynamic_vram_note = Some(why.to_string());
        }
    }

    /// Startup is over: what was not announced was not on.
    pub fn finish(&mut self) {
        self.ready = true;
        let version = self.comfyui_version.as_deref().and_then(Version::parse);
        let has_dynamic = match &version {
            Some(v) => *v >= version::dynamic_vram_release(),
            None => self.comfy_aimdo_version.is_some(),
        };
        if self.dynamic_vram.is_none() && (has_dynamic || version.is_some()) {
            self.dynamic_vram = Some(false);
            if self.dynamic_vram_note.is_none() {
                self.dynamic_vram_note = Some(if has_dynamic {
                    "no 'DynamicVRAM support detected and enabled' line: a flag or the hardware turned it off".into()
                } else {
                    "this ComfyUI predates Dynamic VRAM".into()
                });
            }
        }
        if self.pinned_memory.is_none() {
            self.pinned_memory = Some(false);
        }
        if self.async_offload_streams.is_none() {
            self.async_offload_streams = Some(0);
        }
        if self.smart_memory.is_none() {
            self.smart_memory = Some(true);
        }
        if self.cache.is_none() {
            // Classic caching prints nothing (observed 0.3.64).
            self.cache = Some("classic".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::normalize::normalize;

    fn read(text: &str) -> StartupFacts {
        let mut f = StartupFacts::default();
        for line in text.lines() {
            f.observe(&normalize(line).text);
        }
        f
    }

    #[test]
    fn the_frontend_version_is_read() {
        let f = read("[2026-12-01 10:00:00.000] ComfyUI frontend version: 1.27.10\n");
        assert_eq!(f.frontend_version.as_deref(), Some("1.27.10"));
        let f = read(
            &std::fs::read_to_string(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("fixtures/logs/format-crlf-windows.log"),
            )
            .unwrap(),
        );
        assert!(f.frontend_version.is_some(), "{f:?}");
    }

    #[test]
    fn real_0_3_64_cpu_startup() {
        let f = read(include_str!("../fixtures/captures/logs/startup-cpu.log"));
        assert!(f.ready);
        assert_eq!(f.comfyui_version.as_deref(), Some("0.3.64"));
        assert_eq!(f.pytorch_version.as_deref(), Some("2.8.0+cu128"));
        assert_eq!(f.vram_state.as_deref(), Some("DISABLED"));
        assert_eq!(f.device.as_deref(), Some("cpu"));
        assert_eq!(f.allocator.as_deref(), Some("none"));
        assert_eq!(f.total_vram_mb, Some(24106));
        assert_eq!(f.dynamic_vram, Some(false));
        assert_eq!(f.pinned_memory, Some(false));
        assert_eq!(f.async_offload_streams, Some(0));
        assert_eq!(f.cache.as_deref(), Some("classic"));
        assert_eq!(f.url.as_deref(), Some("http://127.0.0.1:8199"));
    }

    #[test]
    fn v0_38_gpu_startup_with_level_tags() {
        let log = "\x1b[32m[INFO]\x1b[0m Total VRAM 24564 MB, total RAM 64221 MB\n\
                   \x1b[32m[INFO]\x1b[0m pytorch version: 2.10.0+cu130\n\
                   \x1b[32m[INFO]\x1b[0m Set vram state to: NORMAL_VRAM\n\
                   \x1b[32m[INFO]\x1b[0m Device: cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync\n\
                   \x1b[32m[INFO]\x1b[0m Using async weight offloading with 2 streams\n\
                   \x1b[32m[INFO]\x1b[0m Enabled pinned memory 26032.0\n\
                   aimdo: src/control.c:64:INFO:comfy-aimdo inited for GPU: NVIDIA GeForce RTX 4090 (VRAM: 24564 MB)\n\
                   \x1b[32m[INFO]\x1b[0m DynamicVRAM support detected and enabled\n\
                   \x1b[32m[INFO]\x1b[0m Python version: 3.12.3\n\
                   \x1b[32m[INFO]\x1b[0m ComfyUI version: 0.38.1\n\
                   \x1b[32m[INFO]\x1b[0m comfy-aimdo version: 0.5.5\n\
                   \x1b[32m[INFO]\x1b[0m Using RAM pressure cache.\n\
                   \x1b[32m[INFO]\x1b[0m To see the GUI go to: http://127.0.0.1:8188\n";
        let f = read(log);
        assert_eq!(f.dynamic_vram, Some(true));
        assert_eq!(f.device.as_deref(), Some("NVIDIA GeForce RTX 4090"));
        assert_eq!(f.allocator.as_deref(), Some("cudaMallocAsync"));
        assert_eq!(f.pinned_memory_mb, Some(26032.0));
        assert_eq!(f.async_offload_streams, Some(2));
        assert_eq!(f.comfy_aimdo_version.as_deref(), Some("0.5.5"));
        assert_eq!(f.cache.as_deref(), Some("ram_pressure"));
        // comfy-aimdo's line first: it names the GPU until the `Device:` line does.
        let aimdo_first = log.replace(
            "aimdo: src/control.c:64:INFO:comfy-aimdo inited for GPU: NVIDIA GeForce RTX 4090 (VRAM: 24564 MB)\n",
            "",
        );
        let aimdo_first = format!(
            "aimdo: src/control.c:64:INFO:comfy-aimdo inited for GPU: NVIDIA GeForce RTX 4090 (VRAM: 24564 MB)\n{aimdo_first}"
        );
        let f = read(&aimdo_first);
        assert_eq!(f.device.as_deref(), Some("NVIDIA GeForce RTX 4090"));
        assert_eq!(f.allocator.as_deref(), Some("cudaMallocAsync"));
        let only = read(
            "aimdo: src/control.c:69:INFO:comfy-aimdo inited for GPU: NVIDIA GeForce RTX 3090 (VRAM: 24575 MB)\n",
        );
        assert_eq!(only.device.as_deref(), Some("NVIDIA GeForce RTX 3090"));
    }

    #[test]
    fn dynamic_vram_off_by_flag_is_silent_except_for_the_disable_switch() {
        let f = read(
            "ComfyUI version: 0.38.1\nSet vram state to: HIGH_VRAM\nTo see the GUI go to: http://127.0.0.1:1\n",
        );
        assert_eq!(f.dynamic_vram, Some(false));
        let f = read(
            "[WARNING] Dynamic vram disabled with argument. If you have any issues...\nComfyUI version: 0.38.1\n",
        );
        assert_eq!(f.dynamic_vram, Some(false));
        assert_eq!(
            f.dynamic_vram_note.as_deref(),
            Some("--disable-dynamic-vram")
        );
        let unfinished = read("ComfyUI version: 0.38.1\n");
        assert_eq!(unfinished.dynamic_vram, None, "not ready yet: unknown");
    }
}
