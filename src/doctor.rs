//! `vrambisect doctor`: checks the machine and a ComfyUI install before a run or a bisect —
//! NVML and the driver, the CUDA driver library, GPUs and free VRAM, other processes holding
//! VRAM, the ComfyUI folder and version, its Python, torch and comfy-aimdo, the flags it
//! supports, free disk, RAM and swap — each shown as ✓ / ! / ✗ with a hint.
//!
//! Nothing here is fatal: a machine without NVIDIA libraries gets a report saying so, not an
//! error. Doctor never creates a CUDA context (it would take 300–500 MB of the VRAM being
//! diagnosed): "the CUDA driver library is loadable" is a presence check.

use crate::install::Install;
use crate::locate::{Chosen, Defaults};
use crate::machine::{self as environment, NvmlNow, PyFacts, TorchBuild};
use crate::nvidia::NvmlOpenError;
use crate::output::{Answer, Style};
use crate::sampler::cuda::CudaStart;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A check's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            Status::Ok => "✓",
            Status::Warn => "!",
            Status::Fail => "✗",
        }
    }
}

/// One check.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Check {
    /// Stable name (`nvml`, `cuda`, `gpus`, …).
    pub id: &'static str,
    /// What is checked, for people.
    pub title: &'static str,
    pub status: Status,
    /// One line.
    pub summary: String,
    /// More lines (one per GPU, per process, …).
    pub details: Vec<String>,
    /// What to do about it.
    pub hint: Option<String>,
}

impl Check {
    fn new(
        id: &'static str,
        title: &'static str,
        status: Status,
        summary: impl Into<String>,
    ) -> Check {
        Check {
            id,
            title,
            status,
            summary: summary.into(),
            details: Vec::new(),
            hint: None,
        }
    }

    fn hint(mut self, h: impl Into<String>) -> Check {
        self.hint = Some(h.into());
        self
    }

    fn details(mut self, d: Vec<String>) -> Check {
        self.details = d;
        self
    }
}

/// Everything doctor found (`doctor --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Checkup {
    /// The ComfyUI folder and the Python checked, and where each came from.
    pub defaults: Defaults,
    pub checks: Vec<Check>,
    pub ok: usize,
    pub warnings: usize,
    pub failures: usize,
}

impl Checkup {
    /// 0 when nothing failed, 1 when a check failed (warnings do not count).
    pub(crate) fn exit_code(&self) -> i32 {
        if self.failures > 0 {
            crate::error::exit::FAILED
        } else {
            crate::error::exit::OK
        }
    }
}

/// What doctor looks at.
#[derive(Debug, Clone, Default)]
pub(crate) struct Request {
    pub comfyui: Option<PathBuf>,
    pub python: Option<PathBuf>,
    pub nvml_lib: Option<PathBuf>,
    /// How vrambisect was started; its current folder is where runs will be written (free
    /// disk is checked there).
    pub origin: crate::locate::Origin,
}

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

use crate::text::gib;

/// Free bytes for an unprivileged user on the file system holding `path`.
#[cfg(unix)]
pub(crate) fn free_disk(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid NUL-terminated path and a zeroed struct statvfs fills in.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

#[cfg(windows)]
pub(crate) fn free_disk(path: &Path) -> Option<u64> {
    use std::os::windows::ffi::OsStrExt;
    let wide: Vec<u16> = path
        .as_os_str()
        .encode_wide()
        .chain(std::iter::once(0))
        .collect();
    let mut free = 0u64;
    // SAFETY: a NUL-terminated wide path; the other outputs may be null.
    let ok = unsafe {
        windows_sys::Win32::Storage::FileSystem::GetDiskFreeSpaceExW(
            wide.as_ptr(),
            &mut free,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    (ok != 0).then_some(free)
}

#[cfg(not(any(unix, windows)))]
pub fn free_disk(_: &Path) -> Option<u64> {
    None
}

/// Whether CUDA starts: libcuda loads (cudarc's `is_culib_present`, which does not panic),
/// `cuInit` succeeds and devices are counted; guarded, since cudarc panics when the library
/// is broken. No context is created, so no VRAM is taken.
pub(crate) fn cuda_start() -> Result<crate::sampler::cuda::CudaStart, String> {
    crate::sampler::cuda::start()
}

fn nvml_check(now: &Result<NvmlNow, NvmlOpenError>) -> Check {
    match now {
        Ok(n) => Check::new(
            "nvml",
            "NVIDIA driver (NVML)",
            Status::Ok,
            format!(
                "driver {}, supports CUDA {}, {} GPU{}",
                n.driver.as_deref().unwrap_or("?"),
                n.cuda_driver.as_deref().unwrap_or("?"),
                n.gpus.len(),
                if n.gpus.len() == 1 { "" } else { "s" }
            ),
        ),
        Err(e @ NvmlOpenError::VersionMismatch) => {
            Check::new("nvml", "NVIDIA driver (NVML)", Status::Fail, e.to_string()).hint(
                "the usual state after a driver update: reboot, or reload the nvidia kernel module, after a driver update \
                 (stop what uses the GPU, then: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia); \
                 until then neither ComfyUI nor vrambisect can use the GPU",
            )
        }
        // A library named (by --nvml-lib, VRAMBISECT_NVML_LIB, or found where Windows and WSL
        // keep it) that does not load: its path is what to look at.
        Err(e @ NvmlOpenError::CannotLoad { .. }) => {
            Check::new("nvml", "NVIDIA driver (NVML)", Status::Warn, e.to_string()).hint(
                "without NVML vrambisect cannot record GPU memory (it still records RAM and ComfyUI's own CUDA view); \
                 check that path (--nvml-lib or VRAMBISECT_NVML_LIB, when given, must name libnvidia-ml itself), or install the NVIDIA driver",
            )
        }
        Err(e) => Check::new("nvml", "NVIDIA driver (NVML)", Status::Warn, e.to_string()).hint(
            "without NVML vrambisect cannot record GPU memory (it still records RAM and ComfyUI's own CUDA view); \
             install the NVIDIA driver, or pass --nvml-lib PATH where libnvidia-ml lives elsewhere (WSL: /usr/lib/wsl/lib)",
        ),
    }
}

/// Windows only: what the driver does when VRAM runs out. Since 536.40 the *CUDA Sysmem
/// Fallback Policy* lets CUDA spill into shared system memory instead of failing (the
/// default, "Driver Default", prefers the fallback), so an out-of-memory error turns into a
/// run many times slower: `hang` or `timeout` in a bisect, shared GPU memory in Task
/// Manager. The setting itself is in the NVIDIA Control Panel and not readable here.
fn sysmem_fallback_check(driver: Option<&str>) -> Check {
    const TITLE: &str = "CUDA Sysmem Fallback";
    let version = driver.and_then(|d| {
        let mut parts = d.split('.');
        let major: u32 = parts.next()?.trim().parse().ok()?;
        let minor: u32 = parts.next().unwrap_or("0").trim().parse().ok()?;
        Some((major, minor))
    });
    match version {
        Some(v) if v >= (536, 40) => Check::new(
            "sysmem_fallback",
            TITLE,
            Status::Warn,
            format!(
                "driver {} has the CUDA Sysmem Fallback Policy: unless it is set to \"Prefer No Sysmem Fallback\", running out of VRAM spills into shared system memory instead of failing",
                driver.unwrap_or("?")
            ),
        )
        .hint("an OOM can then look like a hang or a very slow run; to see it as an OOM, set \"CUDA - Sysmem Fallback Policy\" to \"Prefer No Sysmem Fallback\" for ComfyUI's python.exe in the NVIDIA Control Panel (Manage 3D settings)"),
        Some(_) => Check::new(
            "sysmem_fallback",
            TITLE,
            Status::Ok,
            format!(
                "driver {} predates the fallback (536.40): running out of VRAM fails at once",
                driver.unwrap_or("?")
            ),
        ),
        None => Check::new("sysmem_fallback", TITLE, Status::Warn, "driver version unknown"),
    }
}

/// Windows only: the commit charge against its limit (RAM plus page files). When the charge
/// reaches the limit, allocations fail (`os error 1455`, "the paging file is too small")
/// even with RAM free.
fn commit_check(commit: Option<(u64, u64)>) -> Check {
    const TITLE: &str = "Commit limit (RAM + page file)";
    let Some((used, limit)) = commit else {
        return Check::new(
            "commit",
            TITLE,
            Status::Warn,
            "cannot read the commit charge",
        );
    };
    let room = limit.saturating_sub(used);
    let status = if room < 8 * GIB {
        Status::Warn
    } else {
        Status::Ok
    };
    let c = Check::new(
        "commit",
        TITLE,
        status,
        format!(
            "{} committed of {} ({} to spare)",
            gib(used),
            gib(limit),
            gib(room)
        ),
    );
    if status == Status::Warn {
        c.hint("loading large models commits memory up front: let Windows manage the page file size, or make it larger (os error 1455 is this limit)")
    } else {
        c
    }
}

fn cuda_check(start: Result<CudaStart, String>, nvml_ok: bool) -> Check {
    const TITLE: &str = "CUDA driver library";
    match start {
        Ok(CudaStart::Devices(n)) if n > 0 => Check::new(
            "cuda",
            TITLE,
            Status::Ok,
            format!(
                "libcuda starts and sees {n} GPU{} (cuInit and a count only: doctor creates no CUDA context, which would take 300-500 MB of VRAM)",
                if n == 1 { "" } else { "s" }
            ),
        ),
        Ok(CudaStart::Devices(_)) => Check::new(
            "cuda",
            TITLE,
            if nvml_ok { Status::Fail } else { Status::Warn },
            "CUDA: no GPU is visible",
        )
        .hint("check CUDA_VISIBLE_DEVICES, and that the GPU is visible to this machine or container"),
        Ok(CudaStart::Failed(why)) => Check::new(
            "cuda",
            TITLE,
            if nvml_ok { Status::Fail } else { Status::Warn },
            format!("CUDA: {why}"),
        )
        .hint(if nvml_ok {
            "NVML works but CUDA does not start: torch will not see the GPU either; check CUDA_VISIBLE_DEVICES, and reinstall the NVIDIA driver if it persists"
        } else {
            "ComfyUI cannot use the GPU until the NVIDIA driver is loaded (see the NVML check); it can only run with --cpu meanwhile"
        }),
        Ok(CudaStart::Missing) if nvml_ok => Check::new("cuda", TITLE, Status::Fail, "libcuda not found, although NVML works")
            .hint("the driver install is incomplete: torch cannot use the GPU without libcuda.so.1 (nvcuda.dll on Windows); reinstall the NVIDIA driver"),
        Ok(CudaStart::Missing) => Check::new("cuda", TITLE, Status::Warn, "libcuda not found: no NVIDIA driver here")
            .hint("ComfyUI can only run with --cpu (or on another vendor's GPU) on this machine"),
        Err(e) => Check::new("cuda", TITLE, Status::Fail, e)
            .hint("the CUDA driver library is broken: reinstall the NVIDIA driver"),
    }
}

fn gpus_check(now: &Result<NvmlNow, NvmlOpenError>) -> Check {
    const TITLE: &str = "GPUs and free VRAM";
    let n = match now {
        Ok(n) => n,
        Err(_) => {
            return Check::new("gpus", TITLE, Status::Warn, "not known without NVML");
        }
    };
    if n.gpus.is_empty() {
        return Check::new("gpus", TITLE, Status::Warn, "NVML sees no GPU")
            .hint("check that the GPU is visible to this machine or container");
    }
    let mut status = Status::Ok;
    let mut details = Vec::new();
    for g in &n.gpus {
        let mut line = format!("GPU {}: {}", g.index, g.name.as_deref().unwrap_or("?"));
        if let (Some(t), Some(f)) = (g.total_bytes, g.free_bytes) {
            line.push_str(&format!(", {} free of {}", gib(f), gib(t)));
            if f < t / 4 {
                status = Status::Warn;
            }
        }
        match &g.pcie_link {
            Ok(l) => line.push_str(&format!(", PCIe {l}")),
            Err(_) => line.push_str(", PCIe link unknown"),
        }
        details.push(line);
    }
    let summary = if n.gpus.len() == 1 {
        details.remove(0)
    } else {
        format!("{} GPUs", n.gpus.len())
    };
    let c = Check::new("gpus", TITLE, status, summary).details(details);
    if status == Status::Warn {
        c.hint("less than a quarter of a GPU's VRAM is free before ComfyUI starts: see the processes holding it")
    } else {
        c
    }
}

fn processes_check(now: &Result<NvmlNow, NvmlOpenError>) -> Check {
    const TITLE: &str = "Other processes holding VRAM";
    let n = match now {
        Ok(n) => n,
        Err(_) => {
            return Check::new(
                "gpu_processes",
                TITLE,
                Status::Warn,
                "not known without NVML",
            );
        }
    };
    let Some(procs) = &n.processes else {
        return Check::new(
            "gpu_processes",
            TITLE,
            Status::Warn,
            "the driver does not list GPU processes (Windows WDDM reports no per-process memory)",
        )
        .hint("look at Task Manager's \"Dedicated GPU memory\" column");
    };
    if procs.is_empty() {
        return Check::new("gpu_processes", TITLE, Status::Ok, "none");
    }
    let total: u64 = procs.iter().filter_map(|p| p.used_bytes).sum();
    let details: Vec<String> = procs
        .iter()
        .map(|p| {
            format!(
                "pid {} {} on GPU {}: {}",
                p.pid,
                p.name.as_deref().unwrap_or("(name unknown)"),
                p.gpu,
                p.used_bytes
                    .map(|b| format!("{} MiB", b / MIB))
                    .unwrap_or_else(|| "n/a".into())
            )
        })
        .collect();
    let summary = format!(
        "{} process{} holding {} MiB",
        procs.len(),
        if procs.len() == 1 { "" } else { "es" },
        total / MIB
    );
    let c = Check::new(
        "gpu_processes",
        TITLE,
        if total >= GIB {
            Status::Warn
        } else {
            Status::Ok
        },
        summary,
    )
    .details(details);
    if total >= GIB {
        c.hint("close them before measuring, or leave them room with --reserve-vram / --vram-headroom (a browser alone can hold ~2 GB, #3278)")
    } else {
        c
    }
}

/// The ComfyUI folder: `--comfyui`, else the one found from how vrambisect was started
/// ([`crate::locate::comfyui_dir`]).
fn comfyui_check(req: &Request) -> (Check, Option<(Install, Chosen)>) {
    const TITLE: &str = "ComfyUI folder";
    let chosen =
        crate::locate::comfyui_dir(req.comfyui.as_deref(), req.python.as_deref(), &req.origin);
    let chosen = match chosen {
        Ok(Some(c)) => c,
        Ok(None) => {
            return (
                Check::new(
                    "comfyui",
                    TITLE,
                    Status::Warn,
                    "not checked: no --comfyui given, and none found from how vrambisect was started or in the current folder",
                )
                .hint("run doctor in the ComfyUI folder, or pass --comfyui DIR (the folder holding main.py) to check the install, its Python and torch"),
                None,
            );
        }
        Err(e) => {
            let e = crate::error::Error::from(e);
            return (
                Check {
                    hint: e.hint.clone(),
                    ..Check::new("comfyui", TITLE, Status::Fail, e.message)
                },
                None,
            );
        }
    };
    let (dir, how) = (chosen.path.clone(), chosen.source.as_str());
    match Install::open(&dir) {
        Ok(install) => {
            let mut details = vec![format!("{} ({how})", install.dir.display())];
            match environment::git_info(&install.dir) {
                Ok(g) => details.push(format!(
                    "git {} ({})",
                    crate::text::abbrev(&g.commit, 12),
                    g.branch.as_deref().unwrap_or("detached")
                )),
                Err(e) => details.push(format!("git: {e}")),
            }
            if install.is_bundled_stand_in() {
                details.push(
                    "this is vrambisect's stand-in for ComfyUI (fixtures/fake-comfyui): it needs no torch, comfy-aimdo or GPU"
                        .into(),
                );
            } else if install.is_stand_in() {
                // Copies stand for real installs in tests: checked as one, and said so.
                details.push(
                    "a copy of vrambisect's stand-in for ComfyUI: checked as a real install is, so a Python without torch or comfy-aimdo fails here (the bundled fixtures/fake-comfyui itself counts them as expected)"
                        .into(),
                );
            }
            if let Ok(nodes) = environment::custom_nodes(&install.dir) {
                details.push(match nodes.len() {
                    1 => "1 custom node entry".to_string(),
                    n => format!("{n} custom node entries"),
                });
            }
            let c = match &install.version {
                Some(v) => Check::new("comfyui", TITLE, Status::Ok, format!("ComfyUI {v}")),
                None => Check::new("comfyui", TITLE, Status::Warn, "version unknown")
                    .hint("comfyui_version.py is missing or unreadable: update ComfyUI, or the flag model falls back to guesses"),
            };
            (c.details(details), Some((install, chosen)))
        }
        Err(e) => {
            let e = crate::error::Error::from(e);
            (
                Check {
                    hint: e.hint.clone(),
                    ..Check::new("comfyui", TITLE, Status::Fail, e.message)
                },
                None,
            )
        }
    }
}

/// Compares torch's CUDA build with what the driver supports (`13.0` vs `12.8`).
fn newer_than(a: &str, b: &str) -> bool {
    let parse = |s: &str| -> Option<(u32, u32)> {
        let mut it = s.split('.');
        Some((
            it.next()?.parse().ok()?,
            it.next().unwrap_or("0").parse().ok()?,
        ))
    };
    matches!((parse(a), parse(b)), (Some(x), Some(y)) if x > y)
}

/// The Python doctor checks: the install's (as a run would choose it); without an install,
/// `--python` or the one vrambisect was started from (from the current folder).
fn python_of(install: Option<&Install>, req: &Request) -> Option<(Chosen, PathBuf)> {
    match (install, &req.python, &req.origin.interpreter) {
        (Some(i), _, _) => Some((
            crate::locate::python_for(&i.dir, req.python.as_deref(), &req.origin),
            i.dir.clone(),
        )),
        (None, Some(p), _) => Some((
            Chosen {
                path: p.clone(),
                source: "--python".into(),
            },
            req.origin.cwd.clone(),
        )),
        (None, None, Some(p)) => Some((
            Chosen {
                path: p.path.clone(),
                source: p.how.into(),
            },
            req.origin.cwd.clone(),
        )),
        (None, None, None) => None,
    }
}

fn python_checks(
    install: Option<&Install>,
    python: Option<&(Chosen, PathBuf)>,
    now: &Result<NvmlNow, NvmlOpenError>,
) -> Vec<Check> {
    let Some((python, dir)) = python else {
        return Vec::new();
    };
    let facts: Result<PyFacts, String> = environment::ask_python(python, dir);
    let mut out = Vec::new();
    let f = match facts {
        Ok(f) => {
            out.push(
                Check::new(
                    "python",
                    "ComfyUI's Python",
                    Status::Ok,
                    format!("Python {} ({})", f.python, python.source),
                )
                .details(f.executable.clone().into_iter().collect()),
            );
            f
        }
        Err(e) => {
            out.push(
                Check::new("python", "ComfyUI's Python", Status::Fail, e)
                    .hint("pass --python with the interpreter that runs ComfyUI (its venv, or python_embeded\\python.exe)"),
            );
            return out;
        }
    };
    let torch = torch_check(&f, now);
    let aimdo = aimdo_check(&f, install);
    // The bundled stand-in runs on the standard library alone: what it lacks is no problem
    // there. (Copies of it in tests stand for real installs and are checked as such.)
    let stand_in = install.is_some_and(Install::is_bundled_stand_in);
    for check in [torch, aimdo] {
        out.push(if stand_in && check.status == Status::Fail {
            Check {
                status: Status::Warn,
                summary: format!(
                    "{} (expected: the stand-in needs neither torch nor comfy-aimdo)",
                    check.summary
                ),
                hint: None,
                ..check
            }
        } else {
            check
        });
    }
    let Some(install) = install else {
        return out;
    };
    out.push(flags_check(install, python));
    out
}

/// torch installed, its CUDA build against what the driver supports, CPU-only builds.
fn torch_check(f: &PyFacts, now: &Result<NvmlNow, NvmlOpenError>) -> Check {
    match f.package("torch") {
        None => Check::new("torch", "PyTorch", Status::Fail, "torch is not installed in this Python")
            .hint("install ComfyUI's requirements with this Python (pip install -r requirements.txt and the torch build for your GPU), or pass --python"),
        Some(v) => {
            let build = match (&f.torch_cuda, &f.torch_hip) {
                (Some(c), _) => Some(TorchBuild::Cuda(c.clone())),
                (None, Some(h)) => Some(TorchBuild::Rocm(h.clone())),
                _ => environment::torch_build_from_version(v),
            };
            let driver = now.as_ref().ok().and_then(|n| n.cuda_driver.clone());
            match build {
                Some(TorchBuild::CpuOnly) => {
                    Check::new("torch", "PyTorch", Status::Warn, format!("{v}: a CPU-only build"))
                        .hint("ComfyUI will not use the GPU: install torch built for CUDA (see pytorch.org)")
                }
                Some(TorchBuild::Cuda(b)) if driver.as_deref().is_some_and(|d| newer_than(&b, d)) => Check::new(
                    "torch",
                    "PyTorch",
                    Status::Fail,
                    format!(
                        "{v} is built for CUDA {b}, but the driver supports CUDA {} at most",
                        driver.as_deref().unwrap_or("?")
                    ),
                )
                .hint("update the NVIDIA driver, or install a torch built for an older CUDA"),
                Some(TorchBuild::Cuda(b)) => Check::new("torch", "PyTorch", Status::Ok, format!("{v} (built for CUDA {b})")),
                Some(rocm @ TorchBuild::Rocm(_)) => Check::new("torch", "PyTorch", Status::Ok, format!("{v} (built for {rocm})")),
                None => Check::new("torch", "PyTorch", Status::Ok, v.to_string()),
            }
        }
    }
}

/// comfy-aimdo: a hard import since Dynamic VRAM (0.15); a missing one crashes startup
/// (#12213), a partial one fails on a submodule (#14790).
fn aimdo_check(f: &PyFacts, install: Option<&Install>) -> Check {
    let needs = install
        .and_then(|i| i.version.as_ref())
        .map(|v| *v >= crate::version::dynamic_vram_release());
    match (&f.aimdo_modules, needs) {
        (None, Some(false)) => Check::new(
            "comfy_aimdo",
            "comfy-aimdo",
            Status::Ok,
            "not installed; this ComfyUI predates Dynamic VRAM and does not use it",
        ),
        (None, _) => Check::new("comfy_aimdo", "comfy-aimdo", Status::Fail, "comfy_aimdo is not importable")
            .hint("ComfyUI crashes at startup with \"No module named 'comfy_aimdo'\" (#12213): run pip install -r requirements.txt with ComfyUI's Python"),
        (Some(mods), _) => {
            let want = ["control", "host_buffer", "model_vbar", "vram_buffer"];
            let missing: Vec<&str> = want.iter().copied().filter(|m| !mods.iter().any(|x| x == m)).collect();
            let version = f.package("comfy-aimdo").unwrap_or("version unknown");
            if missing.is_empty() || mods.is_empty() {
                Check::new("comfy_aimdo", "comfy-aimdo", Status::Ok, format!("{version}, importable (found, not imported)"))
            } else {
                Check::new(
                    "comfy_aimdo",
                    "comfy-aimdo",
                    Status::Warn,
                    format!("{version}, but without comfy_aimdo.{}", missing.join(", comfy_aimdo.")),
                )
                .hint("an old or partial comfy-aimdo (#14790): run pip install -r requirements.txt with ComfyUI's Python")
            }
        }
    }
}

/// The memory flags this install supports, from its own `python main.py --help`.
fn flags_check(install: &Install, python: &Chosen) -> Check {
    match install.flags(python) {
        Ok(set) => {
            const MEMORY: &[&str] = &[
                "--disable-dynamic-vram",
                "--enable-dynamic-vram",
                "--disable-pinned-memory",
                "--disable-async-offload",
                "--async-offload",
                "--disable-nvml-pressure",
                "--vram-headroom",
                "--reserve-vram",
                "--cache-none",
                "--cache-classic",
                "--cache-ram",
                "--highvram",
                "--lowvram",
                "--novram",
                "--disable-smart-memory",
                "--disable-cuda-malloc",
            ];
            let has: Vec<&str> = MEMORY.iter().copied().filter(|f| set.has(f)).collect();
            let lacks: Vec<&str> = MEMORY.iter().copied().filter(|f| !set.has(f)).collect();
            let mut details = vec![format!("memory flags: {}", has.join(" "))];
            if !lacks.is_empty() {
                details.push(format!("not in this version: {}", lacks.join(" ")));
            }
            Check::new(
                "flags",
                "Flags this install supports",
                Status::Ok,
                format!("{} options (from python main.py --help)", set.options.len()),
            )
            .details(details)
        }
        Err(e) => {
            let e = crate::error::Error::from(e);
            Check {
                hint: e.hint.clone(),
                ..Check::new(
                    "flags",
                    "Flags this install supports",
                    Status::Fail,
                    e.message,
                )
            }
        }
    }
}

fn disk_check(req: &Request, install: Option<&Install>) -> Check {
    let mut places: Vec<(String, PathBuf)> =
        vec![("in the current folder".into(), req.origin.cwd.clone())];
    if let Some(i) = install {
        places.push(("in the ComfyUI folder".into(), i.dir.clone()));
    }
    let mut status = Status::Ok;
    let mut parts = Vec::new();
    for (what, p) in &places {
        match free_disk(p) {
            Some(b) => {
                if b < 100 * MIB {
                    status = Status::Fail;
                } else if b < GIB && status == Status::Ok {
                    status = Status::Warn;
                }
                parts.push(format!("{} free {what}", gib(b)))
            }
            None => parts.push(format!("{what}: unknown")),
        }
    }
    let c = Check::new("disk", "Free disk", status, parts.join(", "));
    match status {
        Status::Ok => c,
        _ => {
            c.hint("runs write logs and samples, ComfyUI writes images and caches: free some space")
        }
    }
}

fn memory_checks() -> Vec<Check> {
    let mem = cfg!(unix)
        .then(|| std::fs::read_to_string("/proc/meminfo").ok())
        .flatten()
        .and_then(|t| crate::sampler::system::parse_meminfo(&t))
        .or_else(|| {
            #[cfg(windows)]
            if let Some(m) = crate::sampler::system::windows_memory() {
                return Some(m);
            }
            let mut s = sysinfo::System::new().ok()?;
            s.refresh_memory();
            Some(crate::sampler::system::MemInfo {
                total: s.total_memory(),
                available: s.available_memory(),
                swap_total: s.total_swap(),
                swap_free: s.free_swap(),
                commit: None,
            })
        });
    let Some(m) = mem else {
        return vec![Check::new(
            "ram",
            "RAM",
            Status::Warn,
            "cannot read the machine's memory",
        )];
    };
    let ram = Check::new(
        "ram",
        "RAM",
        if m.available < 4 * GIB {
            Status::Warn
        } else {
            Status::Ok
        },
        format!("{} available of {}", gib(m.available), gib(m.total)),
    );
    let ram = if m.available < 4 * GIB {
        ram.hint("little RAM is free: models offloaded from VRAM land in RAM; close other programs")
    } else {
        ram
    };
    let swap = if m.swap_total == 0 {
        Check::new("swap", "Swap", Status::Warn, "no swap")
            .hint("without swap a RAM spike gets ComfyUI killed rather than slowed down (#12332); vrambisect reports that as host_oom")
    } else {
        Check::new(
            "swap",
            "Swap",
            Status::Ok,
            format!(
                "{} used of {}",
                gib(m.swap_total - m.swap_free),
                gib(m.swap_total)
            ),
        )
    };
    vec![ram, swap]
}

/// Runs every check.
pub(crate) fn run(req: &Request) -> Checkup {
    let lib = crate::nvidia::nvml_lib(req.nvml_lib.as_deref());
    let now = environment::nvml_now(lib.as_deref());
    let mut checks = match crate::nvidia::NOT_ON_THIS_OS {
        Some(why) if req.nvml_lib.is_none() => {
            vec![Check::new("nvml", "NVIDIA GPUs", Status::Ok, why)]
        }
        _ => vec![
            nvml_check(&now),
            cuda_check(cuda_start(), now.is_ok()),
            gpus_check(&now),
            processes_check(&now),
        ],
    };
    let (c, found) = comfyui_check(req);
    checks.push(c);
    let (install, comfyui) = found.unzip();
    let python = python_of(install.as_ref(), req);
    checks.extend(python_checks(install.as_ref(), python.as_ref(), &now));
    checks.push(disk_check(req, install.as_ref()));
    checks.extend(memory_checks());
    if cfg!(windows) {
        let driver = now.as_ref().ok().and_then(|n| n.driver.as_deref());
        checks.push(sysmem_fallback_check(driver));
        checks.push(commit_check(crate::sampler::system::commit_charge()));
    }
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    Checkup {
        defaults: Defaults {
            comfyui,
            python: python.map(|(p, _)| p),
        },
        ok: count(Status::Ok),
        warnings: count(Status::Warn),
        failures: count(Status::Fail),
        checks,
    }
}

impl Answer for Checkup {
    /// Prints the checks, one line each, details and hints indented.
    fn render(&self, style: &Style, out: &mut dyn Write) -> std::io::Result<()> {
        let width = self
            .checks
            .iter()
            .map(|c| c.title.chars().count())
            .max()
            .unwrap_or(0);
        for c in &self.checks {
            let mark = match c.status {
                Status::Ok => style.good(c.status.symbol()),
                Status::Warn => style.warn(c.status.symbol()),
                Status::Fail => style.bad(c.status.symbol()),
            };
            writeln!(out, "{mark} {:<width$}  {}", c.title, c.summary)?;
            for d in &c.details {
                writeln!(out, "  {:<width$}  {}", "", style.dim(d))?;
            }
            if let Some(h) = &c.hint {
                writeln!(out, "  {:<width$}  hint: {h}", "")?;
            }
        }
        writeln!(out)?;
        let verdict = match (self.failures, self.warnings) {
            (0, 0) => style.good("everything checked out"),
            (0, w) => format!("no problems, {w} warning{}", if w == 1 { "" } else { "s" }),
            (f, w) => style.bad(&format!(
                "{f} problem{}, {w} warning{}",
                if f == 1 { "" } else { "s" },
                if w == 1 { "" } else { "s" }
            )),
        };
        writeln!(out, "{verdict}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_is_checked_by_the_build_it_names() {
        let facts = |version: &str, cuda: Option<&str>, hip: Option<&str>| PyFacts {
            packages: [("torch".to_string(), Some(version.to_string()))].into(),
            torch_cuda: cuda.map(str::to_string),
            torch_hip: hip.map(str::to_string),
            ..PyFacts::default()
        };
        let driver = |cuda: &str| {
            Ok(NvmlNow {
                driver: Some("550.54".into()),
                cuda_driver: Some(cuda.into()),
                gpus: Vec::new(),
                processes: None,
            })
        };
        let none = Err(NvmlOpenError::NotInstalled);
        // A CPU-only build, known from the version's suffix alone.
        let c = torch_check(&facts("2.5.0+cpu", None, None), &none);
        assert_eq!(
            (c.status, c.summary.as_str()),
            (Status::Warn, "2.5.0+cpu: a CPU-only build")
        );
        // A CUDA build newer than the driver supports fails; one it supports passes.
        let c = torch_check(&facts("2.8.0+cu128", Some("12.8"), None), &driver("12.4"));
        assert_eq!(c.status, Status::Fail, "{}", c.summary);
        let c = torch_check(&facts("2.8.0+cu128", Some("12.8"), None), &driver("13.0"));
        assert_eq!(
            (c.status, c.summary.as_str()),
            (Status::Ok, "2.8.0+cu128 (built for CUDA 12.8)")
        );
        // ROCm is never held against the CUDA driver.
        let c = torch_check(&facts("2.5.0+rocm6.2", None, Some("6.2")), &driver("12.4"));
        assert_eq!(
            (c.status, c.summary.as_str()),
            (Status::Ok, "2.5.0+rocm6.2 (built for ROCm 6.2)")
        );
    }

    #[test]
    fn a_driver_library_version_mismatch_says_to_reboot() {
        let c = nvml_check(&Err(NvmlOpenError::VersionMismatch));
        assert_eq!(c.status, Status::Fail);
        assert!(
            c.hint
                .unwrap()
                .contains("reboot, or reload the nvidia kernel module")
        );
        let c = nvml_check(&Err(NvmlOpenError::DriverNotLoaded));
        assert_eq!(c.status, Status::Warn);
        assert_eq!(
            c.summary,
            "the NVIDIA driver is not loaded (NVML: Driver Not Loaded)"
        );
    }

    #[test]
    fn cuda_versions_compare() {
        assert!(newer_than("13.0", "12.8"));
        assert!(newer_than("12.8", "12.4"));
        assert!(!newer_than("12.8", "12.8"));
        assert!(!newer_than("11.8", "12.8"));
        assert!(!newer_than("ROCm 6.2", "12.8"));
    }

    #[test]
    fn no_nvidia_is_a_warning_not_a_failure() {
        let now = Err(NvmlOpenError::NotInstalled);
        assert_eq!(nvml_check(&now).status, Status::Warn);
        assert!(
            nvml_check(&now)
                .hint
                .unwrap()
                .contains("pass --nvml-lib PATH")
        );
        // A library named that does not load: not told to pass the option just given.
        let named = nvml_check(&Err(NvmlOpenError::CannotLoad {
            path: "/no/such/libnvidia-ml.so.1".into(),
            error: "No such file or directory".into(),
        }));
        assert_eq!(named.status, Status::Warn);
        let hint = named.hint.unwrap();
        assert!(!hint.contains("pass --nvml-lib"), "{hint}");
        assert!(hint.contains("check that path"), "{hint}");
        assert_eq!(
            cuda_check(Ok(CudaStart::Missing), false).status,
            Status::Warn
        );
        assert_eq!(
            cuda_check(Ok(CudaStart::Missing), true).status,
            Status::Fail
        );
        let no_device = || {
            Ok(CudaStart::Failed(
                "no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE)".into(),
            ))
        };
        let c = cuda_check(no_device(), false);
        assert_eq!(c.status, Status::Warn);
        assert_eq!(
            c.summary,
            "CUDA: no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE)"
        );
        assert_eq!(cuda_check(no_device(), true).status, Status::Fail);
        assert_eq!(
            cuda_check(Ok(CudaStart::Devices(0)), true).status,
            Status::Fail
        );
        assert_eq!(
            cuda_check(Ok(CudaStart::Devices(2)), true).status,
            Status::Ok
        );
        assert_eq!(gpus_check(&now).status, Status::Warn);
        assert_eq!(processes_check(&now).status, Status::Warn);
    }

    #[test]
    fn free_disk_here() {
        assert!(free_disk(Path::new(".")).unwrap() > 0);
        assert!(free_disk(Path::new("/no/such/folder")).is_none());
    }

    #[test]
    fn rendering_and_exit_codes() {
        let r = Checkup {
            defaults: Defaults::default(),
            checks: vec![
                Check::new("a", "Alpha", Status::Ok, "fine"),
                Check::new("b", "Beta", Status::Fail, "broken").hint("fix it"),
            ],
            ok: 1,
            warnings: 0,
            failures: 1,
        };
        assert_eq!(r.exit_code(), 1);
        let mut out = Vec::new();
        r.render(&Style::plain(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "✓ Alpha  fine\n✗ Beta   broken\n         hint: fix it\n\n1 problem, 0 warnings\n"
        );
    }

    #[test]
    fn the_sysmem_fallback_comes_with_driver_536_40() {
        let c = super::sysmem_fallback_check(Some("576.88"));
        assert_eq!(c.status, super::Status::Warn);
        assert!(
            c.summary.contains("Prefer No Sysmem Fallback"),
            "{}",
            c.summary
        );
        assert_eq!(
            super::sysmem_fallback_check(Some("536.40")).status,
            super::Status::Warn
        );
        assert_eq!(
            super::sysmem_fallback_check(Some("531.79")).status,
            super::Status::Ok
        );
        assert_eq!(
            super::sysmem_fallback_check(None).status,
            super::Status::Warn
        );
        assert_eq!(
            super::sysmem_fallback_check(Some("garbage")).status,
            super::Status::Warn
        );
    }

    #[test]
    fn little_room_under_the_commit_limit_is_a_warning() {
        const G: u64 = 1 << 30;
        assert_eq!(
            super::commit_check(Some((20 * G, 64 * G))).status,
            super::Status::Ok
        );
        let c = super::commit_check(Some((60 * G, 64 * G)));
        assert_eq!(c.status, super::Status::Warn);
        assert!(c.summary.contains("to spare"), "{}", c.summary);
        assert_eq!(super::commit_check(None).status, super::Status::Warn);
    }
}
