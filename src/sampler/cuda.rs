//! The CUDA probe: `cuMemGetInfo` per device from the tool's own context. Off unless asked
//! for, because a context costs 300–500 MB of the very VRAM being measured.

use super::DeviceInfo;
use super::probe::{Context, Probe, SeriesDef, Unavailable, to_i64};
use cudarc::driver::{CudaContext, DriverError};
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Once};

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, turning a panic into an error line. cudarc panics instead of returning an error
/// when libcuda or one of its symbols is missing; the default panic message would be a
/// second, noisier line, so it is held back while `f` runs on this thread.
pub fn guarded<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was = QUIET.replace(true);
    let r = catch_unwind(AssertUnwindSafe(f));
    QUIET.set(was);
    r.map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the CUDA library panicked".into())
    })
}

/// A CUDA error in one line for people: CUDA's own text and the constant's name, e.g.
/// `no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE)`. (cudarc's `Display` of a
/// `DriverError` is its debug form.)
pub fn driver_error_text(e: &DriverError) -> String {
    let text = e.error_string().ok().and_then(|s| s.to_str().ok());
    let name = e.error_name().ok().and_then(|s| s.to_str().ok());
    let code = e.0 as i32;
    match (text, name) {
        (Some(t), Some(n)) => format!("{t} ({n})"),
        (None, Some(n)) => n.to_string(),
        (Some(t), None) => format!("{t} (CUDA error {code})"),
        (None, None) => format!("CUDA error {code}"),
    }
}

/// What starting CUDA (`cuInit` and a device count; no context) finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CudaStart {
    /// No libcuda on this machine.
    Missing,
    /// CUDA started and sees this many devices.
    Devices(usize),
    /// libcuda is there but CUDA does not start: why, in one line.
    Failed(String),
}

/// Starts CUDA without creating a context (no VRAM is taken). `Err` when the library is
/// broken (a missing symbol: cudarc panics).
pub fn start() -> Result<CudaStart, String> {
    if crate::nvidia::NOT_ON_THIS_OS.is_some() {
        return Ok(CudaStart::Missing);
    }
    // SAFETY: only dlopen/dlclose of the candidate names.
    let present = guarded(|| unsafe { cudarc::driver::sys::is_culib_present() })
        .map_err(|e| format!("cannot look for libcuda: {e}"))?;
    if !present {
        return Ok(CudaStart::Missing);
    }
    let count = guarded(|| {
        cudarc::driver::result::init()?;
        cudarc::driver::result::device::get_count()
    })
    .map_err(|e| format!("the CUDA library is broken: {e}"))?;
    Ok(match count {
        Ok(n) => CudaStart::Devices(n.max(0) as usize),
        Err(e) => CudaStart::Failed(driver_error_text(&e)),
    })
}

/// A CUDA UUID as NVML writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(bytes: &[u8; 16]) -> String {
    let h: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

/// One device as CUDA numbers it, matched to NVML's numbering by UUID (CUDA orders devices
/// fastest first and honours `CUDA_VISIBLE_DEVICES`; NVML orders by PCI bus).
struct Dev {
    ctx: Arc<CudaContext>,
    index: u32,
    failed: bool,
}

/// What opening CUDA found.
pub struct Opened {
    pub probe: CudaProbe,
    /// `(NVML index, CUDA total bytes)` per device, to complete [`DeviceInfo`].
    pub totals: Vec<(u32, u64, Option<String>)>,
    pub notes: Vec<Unavailable>,
}

/// Holds one primary context per device for the whole run.
pub struct CudaProbe {
    devices: Vec<Dev>,
    series: Vec<SeriesDef>,
    pending: Vec<Unavailable>,
}

impl CudaProbe {
    /// Creates a context on every visible device. `nvml` maps CUDA ordinals to NVML indices.
    pub fn open(nvml: &[DeviceInfo]) -> Result<Opened, Unavailable> {
        let unavailable = |reason: String| Unavailable::new("cuda", reason);
        if let Some(why) = crate::nvidia::NOT_ON_THIS_OS {
            return Err(unavailable(why.to_string()));
        }
        // SAFETY: only dlopen/dlclose of the candidate names.
        let present = guarded(|| unsafe { cudarc::driver::sys::is_culib_present() })
            .map_err(|e| unavailable(format!("cannot look for libcuda: {e}")))?;
        if !present {
            return Err(unavailable(
                "libcuda not found: no NVIDIA driver here".to_string(),
            ));
        }
        let count = guarded(CudaContext::device_count)
            .map_err(|e| unavailable(format!("the CUDA library is broken: {e}")))?
            .map_err(|e| unavailable(format!("CUDA failed to start: {}", driver_error_text(&e))))?;
        if count <= 0 {
            return Err(unavailable("CUDA sees no GPU".to_string()));
        }
        let mut devices = Vec::new();
        let mut totals = Vec::new();
        let mut notes = Vec::new();
        for ordinal in 0..count as usize {
            let opened = guarded(|| {
                let ctx = CudaContext::new(ordinal)?;
                let uuid = ctx.uuid()?;
                let total = ctx.total_mem()?;
                Ok::<_, DriverError>((ctx, uuid, total))
            });
            let (ctx, uuid, total) = match opened {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => {
                    notes.push(unavailable(format!(
                        "cuda:{ordinal}: no context: {}",
                        driver_error_text(&e)
                    )));
                    continue;
                }
                Err(e) => {
                    notes.push(unavailable(format!("cuda:{ordinal}: broken library: {e}")));
                    continue;
                }
            };
            let bytes: [u8; 16] = uuid.bytes.map(|b| b as u8);
            let uuid = uuid_string(&bytes);
            let index = if nvml.is_empty() {
                ordinal as u32
            } else if let Some(d) = nvml.iter().find(|d| d.uuid.as_deref() == Some(&uuid)) {
                d.index
            } else {
                notes.push(unavailable(format!(
                    "cuda:{ordinal}: {uuid} is not among NVML's GPUs; not recorded"
                )));
                continue;
            };
            devices.push(Dev {
                ctx,
                index,
                failed: false,
            });
            totals.push((index, total as u64, Some(uuid)));
        }
        if devices.is_empty() {
            return Err(notes
                .pop()
                .unwrap_or_else(|| unavailable("no context".into())));
        }
        let series = devices
            .iter()
            .flat_map(|d| {
                [
                    SeriesDef::bytes(super::series::gpu(d.index, super::series::CUDA_USED)),
                    SeriesDef::bytes(super::series::gpu(d.index, super::series::CUDA_FREE)),
                ]
            })
            .collect();
        Ok(Opened {
            probe: CudaProbe {
                devices,
                series,
                pending: Vec::new(),
            },
            totals,
            notes,
        })
    }
}

impl Probe for CudaProbe {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn series(&self) -> &[SeriesDef] {
        &self.series
    }

    fn sample(&mut self, _ctx: &Context<'_>, out: &mut [Option<i64>]) {
        for (k, d) in self.devices.iter_mut().enumerate() {
            match guarded(|| d.ctx.mem_get_info()) {
                Ok(Ok((free, total))) => {
                    out[2 * k] = Some(to_i64(total.saturating_sub(free) as u64));
                    out[2 * k + 1] = Some(to_i64(free as u64));
                }
                Ok(Err(e)) if !d.failed => {
                    d.failed = true;
                    self.pending.push(Unavailable::new(
                        "cuda",
                        format!(
                            "gpu{}: cuMemGetInfo failed: {}",
                            d.index,
                            driver_error_text(&e)
                        ),
                    ));
                }
                Err(e) if !d.failed => {
                    d.failed = true;
                    self.pending.push(Unavailable::new(
                        "cuda",
                        format!("gpu{}: broken library: {e}", d.index),
                    ));
                }
                _ => {}
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
    fn uuids_read_like_nvml() {
        let mut b = [0u8; 16];
        b[0] = 0x3f;
        b[1] = 0x2c;
        b[2] = 0x9a;
        b[3] = 0x4e;
        b[8] = 0x80;
        b[15] = 0x01;
        assert_eq!(uuid_string(&b), "GPU-3f2c9a4e-0000-0000-8000-000000000001");
    }

    #[test]
    fn panics_become_errors() {
        let r: Result<(), String> = guarded(|| panic!("Missing symbol cuInit"));
        assert_eq!(r.unwrap_err(), "Missing symbol cuInit");
        assert_eq!(guarded(|| 7).unwrap(), 7);
    }
}
