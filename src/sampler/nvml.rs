//! The NVML probe: per device used/free/total/reserved, GPU memory per process (for the
//! followed tree, the tool itself and everyone else), PCIe throughput, and once the GPU
//! names, UUIDs and driver versions.

use super::DeviceInfo;
use super::poller::Poller;
use super::probe::{Context, Probe, SeriesDef, Unavailable, Unit, to_i64};
use crate::nvidia::NvmlOpenError;
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::PcieUtilCounter;
use nvml_wrapper::error::NvmlError;
use std::ffi::c_void;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Columns per device, in this order; `self.used` only when the tool holds a CUDA context.
const USED: usize = 0;
const FREE: usize = 1;
const RESERVED: usize = 2;
const TREE_USED: usize = 3;
const OTHERS_USED: usize = 4;

/// NVML's PCIe counters are polled at most this often: each call samples the link for 20 ms
/// and blocks meanwhile, so they run on their own thread.
pub const PCIE_MIN_PERIOD: Duration = Duration::from_millis(100);

/// Which memory call a device answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemApi {
    /// `nvmlDeviceGetMemoryInfo_v2`: `used` without the reserve, plus `reserved`.
    V2,
    /// `nvmlDeviceGetMemoryInfo`: `used` includes the reserve (WSL and old drivers lack v2).
    V1,
    None,
}

/// One PCIe reading per device: `(rx, tx)` in KB/s, or why the counters failed.
type PcieReadings = Vec<Result<(u32, u32), String>>;

struct Dev {
    index: u32,
    /// The NVML handle, valid while `Nvml` lives (kept raw: `Device` borrows `Nvml`).
    handle: *mut c_void,
    mem: MemApi,
    procs: bool,
    mem_failed: bool,
}

/// What opening NVML found.
pub struct Opened {
    pub probe: NvmlProbe,
    pub devices: Vec<DeviceInfo>,
    pub driver_version: Option<String>,
    pub cuda_driver_version: Option<String>,
    /// Parts that do not work (v1 only, no process list, …), one line each.
    pub notes: Vec<Unavailable>,
}

/// Reads NVML on the sampler thread; PCIe counters come from a [`Poller`].
pub struct NvmlProbe {
    nvml: Arc<Nvml>,
    devices: Vec<Dev>,
    series: Vec<SeriesDef>,
    per_device: usize,
    track_self: bool,
    pcie: Option<Poller<PcieReadings>>,
    pcie_failed: Vec<bool>,
    pending: Vec<Unavailable>,
    /// Per-process figures seen as "not available" (WDDM): said once.
    wddm_noted: bool,
    /// Reused every sample: the driver's answer, and `(pid, bytes)` per process.
    proc_buf: Vec<ProcInfo>,
    scratch: Vec<(u32, u64)>,
}

/// The name the system library is loaded by.
#[cfg(windows)]
const SYSTEM_LIB: &str = "nvml.dll";
#[cfg(not(windows))]
const SYSTEM_LIB: &str = "libnvidia-ml.so.1";

/// One line for NVML that could not be opened, with what to try where the sampler knows it.
fn init_reason(e: &NvmlOpenError) -> String {
    match e {
        NvmlOpenError::NotInstalled => format!(
            "{SYSTEM_LIB} not found: no NVIDIA driver here (pass --nvml-lib PATH if it lives elsewhere)"
        ),
        NvmlOpenError::DriverNotLoaded => {
            format!("{e}; is the GPU visible to this machine or container?")
        }
        _ => e.to_string(),
    }
}

impl NvmlProbe {
    /// Loads NVML (`lib`, else the system library) and inspects every device.
    pub fn open(
        lib: Option<&Path>,
        interval: Duration,
        track_self: bool,
    ) -> Result<Opened, Unavailable> {
        let nvml =
            crate::nvidia::open_nvml(lib).map_err(|e| Unavailable::new("nvml", init_reason(&e)))?;
        let count = nvml
            .device_count()
            .map_err(|e| Unavailable::new("nvml", format!("cannot count GPUs: {e}")))?;
        if count == 0 {
            return Err(Unavailable::new("nvml", "NVML sees no GPU"));
        }
        let driver_version = nvml.sys_driver_version().ok();
        let cuda_driver_version = nvml
            .sys_cuda_driver_version()
            .ok()
            .map(crate::nvidia::cuda_version_string);
        let mut notes = Vec::new();
        let mut devices = Vec::new();
        let mut infos = Vec::new();
        for index in 0..count {
            let dev = match nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    notes.push(Unavailable::new("nvml", format!("gpu{index}: {e}")));
                    continue;
                }
            };
            let mut info = DeviceInfo {
                index,
                name: dev.name().ok(),
                uuid: dev.uuid().ok(),
                ..DeviceInfo::default()
            };
            // SAFETY: the handle stays valid while `nvml` is alive; the probe owns `nvml`.
            let handle: *mut c_void = unsafe { dev.handle() }.cast();
            let mem = match dev.memory_info() {
                Ok(m) => {
                    info.total_bytes = Some(m.total);
                    info.reserved_bytes = Some(m.reserved);
                    info.memory_info = Some("v2".into());
                    MemApi::V2
                }
                Err(e2) => match memory_v1(&nvml, handle) {
                    Ok(m) => {
                        info.total_bytes = Some(m.total);
                        info.memory_info = Some("v1".into());
                        notes.push(Unavailable::new(
                            "nvml.reserved",
                            format!(
                                "gpu{index}: no memory info v2 ({e2}); using v1, whose `used` \
                                 includes the driver's reserve and which has no reserved figure"
                            ),
                        ));
                        MemApi::V1
                    }
                    Err(e1) => {
                        notes.push(Unavailable::new(
                            "nvml.memory",
                            format!("gpu{index}: cannot read memory: {e2}; v1: {e1}"),
                        ));
                        MemApi::None
                    }
                },
            };
            let mut probe_buf = vec![ProcInfo::default(); 16];
            let procs = match processes(
                &nvml,
                handle,
                ProcList::Compute,
                &mut probe_buf,
                &mut Vec::new(),
            ) {
                Ok(()) => true,
                Err(e) => {
                    notes.push(Unavailable::new(
                        "nvml.processes",
                        format!("gpu{index}: no per-process GPU memory: {e}"),
                    ));
                    false
                }
            };
            devices.push(Dev {
                index,
                handle,
                mem,
                procs,
                mem_failed: false,
            });
            infos.push(info);
        }
        if devices.is_empty() {
            return Err(Unavailable::new("nvml", "no GPU could be opened"));
        }
        let mut series = Vec::new();
        for d in &devices {
            let g = format!("gpu{}", d.index);
            let name = |what| super::series::gpu(d.index, what);
            series.push(SeriesDef::bytes(name(super::series::NVML_USED)));
            series.push(SeriesDef::bytes(name(super::series::NVML_FREE)));
            series.push(SeriesDef::bytes(name(super::series::NVML_RESERVED)));
            series.push(SeriesDef::bytes(name(super::series::TREE_USED)));
            series.push(SeriesDef::bytes(name(super::series::OTHERS_USED)));
            if track_self {
                series.push(SeriesDef::bytes(name(super::series::SELF_USED)));
            }
            series.push(SeriesDef::new(
                format!("{g}.pcie.rx_kbps"),
                Unit::KilobytesPerSecond,
            ));
            series.push(SeriesDef::new(
                format!("{g}.pcie.tx_kbps"),
                Unit::KilobytesPerSecond,
            ));
        }
        let per_device = series.len() / devices.len();
        let nvml = Arc::new(nvml);
        let pcie = spawn_pcie(&nvml, &devices, interval.max(PCIE_MIN_PERIOD))
            .map_err(|e| notes.push(Unavailable::new("nvml.pcie", format!("no poller: {e}"))))
            .ok();
        let pcie_failed = vec![false; devices.len()];
        Ok(Opened {
            probe: NvmlProbe {
                nvml,
                devices,
                series,
                per_device,
                track_self,
                pcie,
                pcie_failed,
                pending: Vec::new(),
                wddm_noted: false,
                proc_buf: vec![ProcInfo::default(); 64],
                scratch: Vec::new(),
            },
            devices: infos,
            driver_version,
            cuda_driver_version,
            notes,
        })
    }

    /// NVML indices and names of the devices, in column order (for mapping other views).
    pub fn device_names(&self) -> Vec<(u32, Option<String>)> {
        self.devices
            .iter()
            .map(|d| {
                // SAFETY: see `open`.
                let dev = unsafe { nvml_wrapper::Device::new(d.handle.cast(), &self.nvml) };
                (d.index, dev.name().ok())
            })
            .collect()
    }
}

/// `nvmlDeviceGetMemoryInfo` (v1), which nvml-wrapper does not wrap: total, free, used.
fn memory_v1(nvml: &Nvml, handle: *mut c_void) -> Result<MemV1, NvmlError> {
    let sym = nvml
        .lib()
        .nvmlDeviceGetMemoryInfo
        .as_ref()
        .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    let mut m = MemV1::default();
    // SAFETY: `MemV1` has the layout of `nvmlMemory_t` (three unsigned long long) and the
    // handle comes from this `nvml`.
    let rc = unsafe { sym(handle.cast(), (&mut m as *mut MemV1).cast()) };
    nvml_wrapper::error::nvml_try(rc)?;
    Ok(m)
}

#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct MemV1 {
    total: u64,
    free: u64,
    used: u64,
}

/// `nvmlProcessInfo_t` (the v2/v3 layout): 24 bytes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct ProcInfo {
    pid: u32,
    used: u64,
    gpu_instance: u32,
    compute_instance: u32,
}

/// NVML's "not available" marker for per-process memory (WDDM).
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
const NVML_SUCCESS: u32 = 0;
const NVML_ERROR_INSUFFICIENT_SIZE: u32 = 7;

/// Which process list.
#[derive(Debug, Clone, Copy)]
enum ProcList {
    Compute,
    Graphics,
}

/// The processes on a device, `(pid, bytes or VALUE_NOT_AVAILABLE)`, appended to `out`.
///
/// One call with room for `buf.len()` entries, where nvml-wrapper makes two (count, then
/// fill) and allocates: at 100 Hz that halves what the driver is asked. The buffer grows when
/// the driver says it is too small.
fn processes(
    nvml: &Nvml,
    handle: *mut c_void,
    list: ProcList,
    buf: &mut Vec<ProcInfo>,
    out: &mut Vec<(u32, u64)>,
) -> Result<(), NvmlError> {
    let lib = nvml.lib();
    let sym = match list {
        ProcList::Compute => lib.nvmlDeviceGetComputeRunningProcesses_v3.as_ref(),
        ProcList::Graphics => lib.nvmlDeviceGetGraphicsRunningProcesses_v3.as_ref(),
    }
    .map_err(|e| NvmlError::FailedToLoadSymbol(e.to_string()))?;
    for _ in 0..4 {
        let mut count = buf.len() as u32;
        // SAFETY: `buf` holds `count` entries of `nvmlProcessInfo_t`'s layout; the handle
        // comes from this `nvml`.
        let rc = unsafe { sym(handle.cast(), &mut count, buf.as_mut_ptr().cast()) };
        if rc == NVML_ERROR_INSUFFICIENT_SIZE {
            // Processes may start between two calls: leave room for a few more.
            buf.resize(count as usize + 16, ProcInfo::default());
            continue;
        }
        if rc != NVML_SUCCESS {
            nvml_wrapper::error::nvml_try(rc)?;
        }
        out.extend(
            buf[..(count as usize).min(buf.len())]
                .iter()
                .map(|p| (p.pid, p.used)),
        );
        return Ok(());
    }
    Err(NvmlError::InsufficientSize(Some(buf.len())))
}

/// Starts the PCIe poller.
fn spawn_pcie(
    nvml: &Arc<Nvml>,
    devices: &[Dev],
    period: Duration,
) -> std::io::Result<Poller<PcieReadings>> {
    let nvml = Arc::clone(nvml);
    // Raw pointers are not `Send`; the handles stay valid as long as the `Nvml` this thread
    // holds an `Arc` of.
    let handles: Vec<usize> = devices.iter().map(|d| d.handle as usize).collect();
    // A device whose counters failed keeps reporting the same error (the sampler may miss
    // one poll's result, never the reason) and is not asked again.
    let mut dead: Vec<Option<String>> = vec![None; handles.len()];
    Poller::spawn("vrambisect-pcie", period, true, move || {
        let mut out = Vec::with_capacity(handles.len());
        for (i, &h) in handles.iter().enumerate() {
            if let Some(e) = &dead[i] {
                out.push(Err(e.clone()));
                continue;
            }
            // SAFETY: see above.
            let dev = unsafe { nvml_wrapper::Device::new((h as *mut c_void).cast(), &nvml) };
            let r = dev
                .pcie_throughput(PcieUtilCounter::Receive)
                .and_then(|rx| Ok((rx, dev.pcie_throughput(PcieUtilCounter::Send)?)));
            match r {
                Ok(v) => out.push(Ok(v)),
                Err(e) => {
                    dead[i] = Some(e.to_string());
                    out.push(Err(e.to_string()));
                }
            }
        }
        Some(out)
    })
}

impl Probe for NvmlProbe {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn series(&self) -> &[SeriesDef] {
        &self.series
    }

    fn sample(&mut self, ctx: &Context<'_>, out: &mut [Option<i64>]) {
        let pcie = self.pcie.as_ref().and_then(|p| p.take());
        for (k, d) in self.devices.iter_mut().enumerate() {
            let cols = &mut out[k * self.per_device..(k + 1) * self.per_device];
            // SAFETY: see `open`.
            let dev = unsafe { nvml_wrapper::Device::new(d.handle.cast(), &self.nvml) };
            let mem = match d.mem {
                MemApi::V2 => dev
                    .memory_info()
                    .map(|m| (m.used, m.free, Some(m.reserved))),
                MemApi::V1 => memory_v1(&self.nvml, d.handle).map(|m| (m.used, m.free, None)),
                MemApi::None => Err(NvmlError::NotSupported),
            };
            match mem {
                Ok((used, free, reserved)) => {
                    cols[USED] = Some(to_i64(used));
                    cols[FREE] = Some(to_i64(free));
                    cols[RESERVED] = reserved.map(to_i64);
                }
                Err(e) if d.mem != MemApi::None && !d.mem_failed => {
                    // A lost GPU or a driver reset; said once, retried every sample.
                    d.mem_failed = true;
                    self.pending.push(Unavailable::new(
                        "nvml.memory",
                        format!("gpu{}: reading memory failed: {e}", d.index),
                    ));
                }
                Err(_) => {}
            }
            if d.procs {
                self.scratch.clear();
                for list in [ProcList::Compute, ProcList::Graphics] {
                    // A failing graphics list (not supported on compute-only boards) leaves
                    // the compute figures standing.
                    let _ = processes(
                        &self.nvml,
                        d.handle,
                        list,
                        &mut self.proc_buf,
                        &mut self.scratch,
                    );
                }
                let listed = self.scratch.len();
                let not_available = self
                    .scratch
                    .iter()
                    .filter(|(_, b)| *b == VALUE_NOT_AVAILABLE)
                    .count();
                if listed > 0 && not_available == listed {
                    if !self.wddm_noted {
                        self.wddm_noted = true;
                        self.pending.push(Unavailable::new(
                            "nvml.processes",
                            "the driver does not report GPU memory per process \
                             (Windows WDDM driver model)",
                        ));
                    }
                } else {
                    // A process with compute and graphics work is in both lists: counted
                    // once, with the larger figure.
                    self.scratch.sort_unstable();
                    let mut tree = 0u64;
                    let mut others = 0u64;
                    let mut own = 0u64;
                    for (i, &(pid, b)) in self.scratch.iter().enumerate() {
                        let repeated = self.scratch.get(i + 1).is_some_and(|n| n.0 == pid);
                        if repeated || b == VALUE_NOT_AVAILABLE {
                            continue;
                        }
                        if pid == ctx.self_pid {
                            own += b;
                        } else if ctx.in_tree(pid) {
                            tree += b;
                        } else {
                            others += b;
                        }
                    }
                    if !ctx.tree.is_empty() {
                        cols[TREE_USED] = Some(to_i64(tree));
                    }
                    if ctx.root_pid.is_some() {
                        cols[OTHERS_USED] = Some(to_i64(others));
                    }
                    if self.track_self {
                        cols[OTHERS_USED + 1] = Some(to_i64(own));
                    }
                }
            }
            if let Some(Some(reading)) = pcie.as_ref().map(|p| p.get(k)) {
                match reading {
                    Ok((rx, tx)) => {
                        cols[self.per_device - 2] = Some(i64::from(*rx));
                        cols[self.per_device - 1] = Some(i64::from(*tx));
                    }
                    Err(e) if !self.pcie_failed[k] => {
                        self.pcie_failed[k] = true;
                        self.pending.push(Unavailable::new(
                            "nvml.pcie",
                            format!("gpu{}: no PCIe throughput: {e}", d.index),
                        ));
                    }
                    Err(_) => {}
                }
            }
        }
    }

    fn take_unavailable(&mut self) -> Vec<Unavailable> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_read_like_nvidia_smi() {
        for (v, want) in [
            (13000, "13.0"),
            (12080, "12.8"),
            (12040, "12.4"),
            (11020, "11.2"),
        ] {
            assert_eq!(crate::nvidia::cuda_version_string(v), want);
        }
    }

    #[test]
    fn missing_library_is_one_line() {
        let e = NvmlProbe::open(
            Some(Path::new("/no/such/libnvidia-ml.so.1")),
            Duration::from_millis(100),
            false,
        )
        .err()
        .unwrap();
        assert_eq!(e.probe, "nvml");
        assert!(
            e.reason
                .starts_with("cannot load /no/such/libnvidia-ml.so.1")
        );
        assert!(!e.reason.contains('\n'));
    }
}
