//! The GPUs as NVML sees them now: devices, driver, processes holding VRAM, PCIe links.

use super::*;

// ---------------------------------------------------------------------------------------
// GPUs through NVML

/// Where NVIDIA's libraries cannot exist (macOS: ComfyUI runs on Apple's MPS there), why, in
/// one line; every GPU probe says this instead of "not found".
pub const NVIDIA_NOT_ON_THIS_OS: Option<&str> = if cfg!(target_os = "macos") {
    Some(
        "NVIDIA GPUs do not apply on macOS (ComfyUI runs on Apple's MPS there): GPU memory is not recorded, RAM is",
    )
} else {
    None
};

/// A process holding GPU memory.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuProcess {
    pub gpu: u32,
    pub pid: u32,
    /// `/proc/PID/comm`, when readable.
    pub name: Option<String>,
    pub used_bytes: Option<u64>,
}

/// One GPU as NVML sees it now.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuNow {
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
pub struct NvmlNow {
    pub driver: Option<String>,
    pub cuda_driver: Option<String>,
    pub gpus: Vec<GpuNow>,
    /// `None` when the driver does not list processes.
    pub processes: Option<Vec<GpuProcess>>,
}

/// The library to load: the one given, else `$VRAMBISECT_NVML_LIB`, else the system's
/// (`None`: the loader's search; on Windows the NVSMI folder where older drivers put it).
pub fn nvml_lib(explicit: Option<&Path>) -> Option<PathBuf> {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os(crate::sampler::NVML_LIB_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| {
            if !cfg!(windows) {
                return None;
            }
            windows_nvml(
                std::env::var_os("SystemRoot").as_deref(),
                std::env::var_os("ProgramFiles").as_deref(),
                &|p| p.is_file(),
            )
        })
}

/// Where Windows keeps `nvml.dll`: System32 since driver 418 (found by the loader: `None`),
/// `NVIDIA Corporation\NVSMI` under Program Files before.
pub fn windows_nvml(
    system_root: Option<&std::ffi::OsStr>,
    program_files: Option<&std::ffi::OsStr>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let in_system32 = system_root
        .map(|r| Path::new(r).join("System32").join("nvml.dll"))
        .is_some_and(|p| exists(&p));
    if in_system32 {
        return None;
    }
    let nvsmi = Path::new(program_files?)
        .join("NVIDIA Corporation")
        .join("NVSMI")
        .join("nvml.dll");
    exists(&nvsmi).then_some(nvsmi)
}

/// What NVML's `nvmlErrorString` says for `NVML_ERROR_LIB_RM_VERSION_MISMATCH` (18): the
/// driver's kernel module and its libraries are different versions, the usual state on
/// Linux after a driver update until the next reboot.
pub const NVML_VERSION_MISMATCH: &str = "Driver/library version mismatch";

/// A failed `nvmlInit` in one line for people, with NVML's own words in brackets where
/// they say more than nvml-wrapper's (which never asks NVML for its text).
pub fn nvml_init_error(lib: Option<&Path>, e: &nvml_wrapper::error::NvmlError) -> String {
    use nvml_wrapper::error::NvmlError;
    match (e, lib) {
        (NvmlError::LibloadingError(err), Some(p)) => format!("cannot load {}: {err}", p.display()),
        (NvmlError::LibloadingError(_), None) => {
            "the NVIDIA management library (libnvidia-ml.so.1 / nvml.dll) is not installed: no NVIDIA driver here".to_string()
        }
        (NvmlError::DriverNotLoaded, _) => {
            "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)".to_string()
        }
        (NvmlError::LibRmVersionMismatch, _) => format!(
            "the NVIDIA kernel module and its libraries are different versions (NVML: {NVML_VERSION_MISMATCH})"
        ),
        (NvmlError::NoPermission, _) => {
            "no permission to talk to the NVIDIA driver (NVML: Insufficient Permissions)".to_string()
        }
        (e, _) => format!("NVML failed to start: {e}"),
    }
}

/// Loads NVML and reads every GPU once. The error is one line for people.
pub fn nvml_now(lib: Option<&Path>) -> Result<NvmlNow, String> {
    use nvml_wrapper::Nvml;
    use nvml_wrapper::enums::device::UsedGpuMemory;
    use nvml_wrapper::error::NvmlError;
    if let (None, Some(why)) = (lib, NVIDIA_NOT_ON_THIS_OS) {
        return Err(why.to_string());
    }
    let mut builder = Nvml::builder();
    if let Some(p) = lib {
        builder.lib_path(p.as_os_str());
    }
    let nvml = builder.init().map_err(|e| nvml_init_error(lib, &e))?;
    let count = nvml
        .device_count()
        .map_err(|e| format!("cannot count GPUs: {e}"))?;
    let mut out = NvmlNow {
        driver: nvml.sys_driver_version().ok(),
        cuda_driver: nvml
            .sys_cuda_driver_version()
            .ok()
            .map(crate::sampler::nvml::cuda_version_string),
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
