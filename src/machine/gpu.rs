//! The GPUs as NVML sees them now: devices, driver, processes holding VRAM, PCIe links.

use super::*;
use crate::nvidia::NvmlOpenError;

// ---------------------------------------------------------------------------------------
// GPUs through NVML

/// A process holding GPU memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct GpuProcess {
    pub gpu: u32,
    /// `/proc/PID/comm`, when readable.
    pub name: Option<String>,
    pub pid: u32,
    pub used_bytes: Option<u64>,
}

/// One GPU as NVML sees it now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct GpuNow {
    pub index: u32,
    pub name: Option<String>,
    /// NVML's UUID (`GPU-3f2c…`), stable across reboots and device orders.
    pub uuid: Option<String>,
    pub total_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub reserved_bytes: Option<u64>,
    /// `Gen4 x16 (max Gen4 x16)`, or why not.
    pub pcie_link: Result<String, String>,
}

/// What NVML says now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NvmlNow {
    pub driver: Option<String>,
    pub cuda_driver: Option<String>,
    pub gpus: Vec<GpuNow>,
    /// `None` when the driver does not list processes.
    pub processes: Option<Vec<GpuProcess>>,
}

/// Loads NVML and reads every GPU once.
pub(crate) fn nvml_now(lib: Option<&Path>) -> Result<NvmlNow, NvmlOpenError> {
    use nvml_wrapper::enums::device::UsedGpuMemory;
    use nvml_wrapper::error::NvmlError;
    let nvml = crate::nvidia::open_nvml(lib)?;
    let count = nvml
        .device_count()
        .map_err(|e| NvmlOpenError::Other(format!("cannot count GPUs: {e}")))?;
    let mut out = NvmlNow {
        driver: nvml.sys_driver_version().ok(),
        cuda_driver: nvml
            .sys_cuda_driver_version()
            .ok()
            .map(crate::nvidia::cuda_version_string),
        gpus: Vec::new(),
        processes: Some(Vec::new()),
    };
    for index in 0..count {
        let Ok(dev) = nvml.device_by_index(index) else {
            continue;
        };
        let mem = dev.memory_info().ok();
        let link = (|| -> Result<String, NvmlError> {
            let (g, w) = (dev.current_pcie_link_gen()?, dev.current_pcie_link_width()?);
            let max = match (dev.max_pcie_link_gen(), dev.max_pcie_link_width()) {
                (Ok(mg), Ok(mw)) if (mg, mw) != (g, w) => format!(" (max Gen{mg} x{mw})"),
                _ => String::new(),
            };
            Ok(format!("Gen{g} x{w}{max}"))
        })()
        .map_err(|e| format!("the driver does not report it ({e})"));
        out.gpus.push(GpuNow {
            index,
            name: dev.name().ok(),
            uuid: dev.uuid().ok(),
            total_bytes: mem.as_ref().map(|m| m.total),
            free_bytes: mem.as_ref().map(|m| m.free),
            reserved_bytes: mem.as_ref().map(|m| m.reserved),
            pcie_link: link,
        });
        let lists = [
            dev.running_compute_processes(),
            dev.running_graphics_processes(),
        ];
        if lists.iter().all(Result::is_err) {
            out.processes = None;
            continue;
        }
        for p in lists.into_iter().flatten().flatten() {
            let procs = out.processes.get_or_insert_with(Vec::new);
            if procs.iter().any(|q| q.pid == p.pid && q.gpu == index) {
                continue;
            }
            procs.push(GpuProcess {
                gpu: index,
                pid: p.pid,
                name: std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                    .ok()
                    .map(|s| s.trim().to_string()),
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            });
        }
    }
    Ok(out)
}
