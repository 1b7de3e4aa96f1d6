//! Environment capture for the bundle and `doctor`: OS, kernel, CPU, RAM, swap; GPUs, driver,
//! CUDA driver version, PCIe link and other processes holding VRAM (NVML); ComfyUI's version,
//! git commit and branch; Python, torch and torch's CUDA build, comfy-aimdo, comfy-kitchen
//! (asked of the install's own Python without importing torch); custom nodes; the launcher
//! line; environment variables on an allowlist.
//!
//! Every item says where it came from (`{value, source}`) or why it is missing
//! (`{missing}`). What a run recorded (its startup log, `/system_stats`, the sampler's NVML
//! readings) is preferred to what the machine says now, so a bundle describes the machine the
//! runs happened on. Nothing outside the allowlist is read: no host name, no user name, no
//! other environment variable.

use super::redact::{ENV_ALLOWLIST, env_allowed};
use crate::install::{Install, Python};
use crate::run::RunRecord;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `format` field of `environment.json`.
pub const FORMAT: &str = "vrambisect environment v1";

/// One fact: its value and where it came from, or why it is missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Item {
    Found { value: Value, source: String },
    Missing { missing: String },
}

impl Item {
    pub fn found(value: impl Into<Value>, source: impl Into<String>) -> Item {
        Item::Found {
            value: value.into(),
            source: source.into(),
        }
    }

    pub fn missing(reason: impl Into<String>) -> Item {
        Item::Missing {
            missing: reason.into(),
        }
    }

    pub fn value(&self) -> Option<&Value> {
        match self {
            Item::Found { value, .. } => Some(value),
            Item::Missing { .. } => None,
        }
    }

    /// The value as text (strings as they are, other JSON compactly).
    pub fn text(&self) -> Option<String> {
        self.value().map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }

    /// The first item found among candidates, else one missing item naming every reason.
    pub fn first(candidates: impl IntoIterator<Item = Item>) -> Item {
        let mut reasons: Vec<String> = Vec::new();
        for c in candidates {
            match c {
                Item::Found { .. } => return c,
                Item::Missing { missing } => {
                    if !missing.is_empty() && !reasons.contains(&missing) {
                        reasons.push(missing)
                    }
                }
            }
        }
        Item::missing(if reasons.is_empty() {
            "not known".to_string()
        } else {
            reasons.join("; ")
        })
    }
}

/// Turns an `Option` into an item with this source, or missing with this reason.
fn opt(v: Option<impl Into<Value>>, source: &str, reason: &str) -> Item {
    match v {
        Some(v) => Item::found(v, source),
        None => Item::missing(reason),
    }
}

/// Everything `environment.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub format: String,
    pub vrambisect_version: String,
    pub captured_at: String,
    pub os: Item,
    pub kernel: Item,
    pub cpu: Item,
    pub ram_bytes: Item,
    pub swap_bytes: Item,
    /// `[{index, name, vram_total_bytes, vram_reserved_bytes, vram_free_bytes, pcie_link}]`
    pub gpus: Item,
    pub nvidia_driver: Item,
    /// The newest CUDA version the driver supports (`nvidia-smi`'s "CUDA Version").
    pub cuda_driver: Item,
    /// The most VRAM other processes held while the workflow ran (NVML, per process).
    pub other_processes_vram_bytes: Item,
    /// `[{gpu, pid, name, used_bytes}]` when the report was made.
    pub gpu_processes_now: Item,
    pub comfyui_folder: Item,
    pub comfyui_version: Item,
    /// `{commit, branch}`
    pub comfyui_git: Item,
    pub python: Item,
    pub python_executable: Item,
    pub torch: Item,
    /// The CUDA (or ROCm) version torch was built for.
    pub torch_cuda: Item,
    pub comfy_aimdo: Item,
    pub comfy_kitchen: Item,
    pub comfyui_frontend: Item,
    /// `[{name, commit}]`
    pub custom_nodes: Item,
    pub launcher: Item,
    /// How ComfyUI was started (from the run's record).
    pub command: Item,
    /// `{NAME: value}` for the allowlisted variables that are set.
    pub env: Item,
}

/// What a run recorded about the machine it ran on.
#[derive(Debug, Clone)]
pub struct RunFacts {
    /// `run 001`
    pub label: String,
    pub record: RunRecord,
    /// The run's `samples-summary.json`.
    pub summary: Option<Value>,
    /// The run's log, normalised (no ANSI, no level tags).
    pub log: Option<String>,
}

/// What a capture starts from.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The ComfyUI folder and how it was found.
    pub comfyui: Option<(PathBuf, String)>,
    /// Why the ComfyUI folder is not known, when it is not.
    pub comfyui_unknown: Option<String>,
    /// `--python`, or the one a session was started with.
    pub python: Option<PathBuf>,
    pub run: Option<RunFacts>,
    /// The launcher line and where it came from.
    pub launcher: Option<(String, String)>,
    /// Variables a launcher set.
    pub launcher_env: Vec<(String, String)>,
    /// The NVML library (default: `$VRAMBISECT_NVML_LIB`, else the system's).
    pub nvml_lib: Option<PathBuf>,
    /// Ask the install's Python (skipped in tests of the pure parts).
    pub ask_python: bool,
}

// ---------------------------------------------------------------------------------------
// The machine

/// `PRETTY_NAME` (else `NAME VERSION`) from `/etc/os-release`.
pub fn parse_os_release(text: &str) -> Option<String> {
    let mut fields: BTreeMap<&str, String> = BTreeMap::new();
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().trim_matches('"').trim_matches('\'').to_string();
            fields.insert(k.trim(), v);
        }
    }
    fields
        .get("PRETTY_NAME")
        .filter(|v| !v.is_empty())
        .cloned()
        .or_else(|| {
            let name = fields.get("NAME")?;
            Some(match fields.get("VERSION") {
                Some(v) => format!("{name} {v}"),
                None => name.clone(),
            })
        })
}

/// `model name` and the number of `processor` entries in `/proc/cpuinfo`.
pub fn parse_cpuinfo(text: &str) -> Option<String> {
    let mut model = None;
    let mut count = 0;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "processor" => count += 1,
            // x86 says "model name"; some ARM kernels only say "Hardware" or "CPU part".
            "model name" | "Hardware" if model.is_none() => model = Some(v.trim().to_string()),
            _ => {}
        }
    }
    let model = model.filter(|m| !m.is_empty())?;
    Some(if count > 0 {
        format!("{model} ({count} logical cores)")
    } else {
        model
    })
}

#[cfg(unix)]
fn uname() -> Option<String> {
    // SAFETY: utsname is plain data; uname fills it and NUL-terminates each field.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    Some(format!(
        "{} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.machine)
    ))
}

#[cfg(not(unix))]
fn uname() -> Option<String> {
    None
}

/// OS, kernel, CPU, RAM and swap of this machine.
fn machine() -> [Item; 5] {
    let os = Item::first([
        opt(
            std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|t| parse_os_release(&t)),
            "/etc/os-release",
            "no /etc/os-release",
        ),
        opt(
            sysinfo::System::long_os_version().ok(),
            "sysinfo",
            "the OS does not say its name",
        ),
    ]);
    let kernel = Item::first([
        opt(uname(), "uname", "uname failed"),
        opt(
            sysinfo::System::kernel_version().ok(),
            "sysinfo",
            "the kernel version is not known",
        ),
    ]);
    let cpu = Item::first([
        opt(
            std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|t| parse_cpuinfo(&t)),
            "/proc/cpuinfo",
            "no model name in /proc/cpuinfo",
        ),
        sysinfo_cpu(),
    ]);
    let (ram, swap) = match std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| crate::sampler::system::parse_meminfo(&t))
    {
        Some(m) => (
            Item::found(m.total, "/proc/meminfo"),
            Item::found(m.swap_total, "/proc/meminfo"),
        ),
        None => match sysinfo::System::new() {
            Ok(mut s) => {
                s.refresh_memory();
                (
                    Item::found(s.total_memory(), "sysinfo"),
                    Item::found(s.total_swap(), "sysinfo"),
                )
            }
            Err(e) => (
                Item::missing(format!("cannot read memory: {e}")),
                Item::missing(format!("cannot read swap: {e}")),
            ),
        },
    };
    [os, kernel, cpu, ram, swap]
}

fn sysinfo_cpu() -> Item {
    match sysinfo::System::new() {
        Ok(mut s) => {
            s.refresh_cpu_all();
            let n = s.cpus().len();
            match s.cpus().first().map(|c| c.brand().trim().to_string()) {
                Some(b) if !b.is_empty() => {
                    Item::found(format!("{b} ({n} logical cores)"), "sysinfo")
                }
                _ => Item::missing("the CPU does not say its model"),
            }
        }
        Err(e) => Item::missing(format!("cannot read the CPU: {e}")),
    }
}

// ---------------------------------------------------------------------------------------
// GPUs through NVML

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

/// The library to load: the one given, else `$VRAMBISECT_NVML_LIB`, else the system's.
pub fn nvml_lib(explicit: Option<&Path>) -> Option<PathBuf> {
    explicit.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(crate::sampler::NVML_LIB_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// Loads NVML and reads every GPU once. The error is one line for people.
pub fn nvml_now(lib: Option<&Path>) -> Result<NvmlNow, String> {
    use nvml_wrapper::Nvml;
    use nvml_wrapper::enums::device::UsedGpuMemory;
    use nvml_wrapper::error::NvmlError;
    let mut builder = Nvml::builder();
    if let Some(p) = lib {
        builder.lib_path(p.as_os_str());
    }
    let nvml = builder.init().map_err(|e| match (&e, lib) {
        (NvmlError::LibloadingError(err), Some(p)) => format!("cannot load {}: {err}", p.display()),
        (NvmlError::LibloadingError(_), None) => {
            "the NVIDIA management library (libnvidia-ml.so.1 / nvml.dll) is not installed: no NVIDIA driver here".to_string()
        }
        (NvmlError::DriverNotLoaded, _) => "the NVIDIA driver is not loaded".to_string(),
        (NvmlError::NoPermission, _) => "no permission to talk to the NVIDIA driver".to_string(),
        (e, _) => format!("NVML failed to start: {e}"),
    })?;
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

// ---------------------------------------------------------------------------------------
// ComfyUI's folder: git, custom nodes

/// A checkout's commit and branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GitInfo {
    pub commit: String,
    /// `None` for a detached HEAD.
    pub branch: Option<String>,
}

/// Reads `.git/HEAD` and the ref it names (loose or in `packed-refs`), without a git binary.
/// Handles `.git` files (`gitdir: …`, worktrees and submodules) and their `commondir`.
pub fn git_info(dir: &Path) -> Result<GitInfo, String> {
    let dot = dir.join(".git");
    let gitdir = if dot.is_file() {
        let text = std::fs::read_to_string(&dot).map_err(|e| format!("cannot read .git: {e}"))?;
        let target = text
            .trim()
            .strip_prefix("gitdir:")
            .ok_or("the .git file does not name a git folder")?
            .trim();
        let p = PathBuf::from(target);
        if p.is_absolute() { p } else { dir.join(p) }
    } else if dot.is_dir() {
        dot
    } else {
        return Err("not a git checkout (no .git)".into());
    };
    let head = std::fs::read_to_string(gitdir.join("HEAD"))
        .map_err(|e| format!("cannot read .git/HEAD: {e}"))?;
    let head = head.trim();
    let Some(refname) = head.strip_prefix("ref:").map(str::trim) else {
        if is_sha(head) {
            return Ok(GitInfo {
                commit: head.to_string(),
                branch: None,
            });
        }
        return Err(format!("unexpected .git/HEAD: {head:.40}"));
    };
    let common = std::fs::read_to_string(gitdir.join("commondir"))
        .ok()
        .map(|c| {
            let p = PathBuf::from(c.trim());
            if p.is_absolute() { p } else { gitdir.join(p) }
        });
    let branch = refname
        .strip_prefix("refs/heads/")
        .unwrap_or(refname)
        .to_string();
    for base in std::iter::once(&gitdir).chain(common.as_ref()) {
        if let Ok(sha) = std::fs::read_to_string(base.join(refname))
            && is_sha(sha.trim())
        {
            return Ok(GitInfo {
                commit: sha.trim().to_string(),
                branch: Some(branch),
            });
        }
        if let Ok(packed) = std::fs::read_to_string(base.join("packed-refs"))
            && let Some(sha) = packed_ref(&packed, refname)
        {
            return Ok(GitInfo {
                commit: sha,
                branch: Some(branch),
            });
        }
    }
    Err(format!("branch {branch} has no commit yet"))
}

fn is_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// The commit of `refname` in a `packed-refs` file.
pub fn packed_ref(text: &str, refname: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| l.split_once(' '))
        .find(|(_, name)| name.trim() == refname)
        .map(|(sha, _)| sha.to_string())
        .filter(|sha| is_sha(sha))
}

/// The entries of `custom_nodes/`: folder (or file) names, and each folder's git commit.
pub fn custom_nodes(dir: &Path) -> Result<Vec<Value>, String> {
    let nodes = dir.join("custom_nodes");
    let entries = std::fs::read_dir(&nodes).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "the install has no custom_nodes folder".to_string(),
        _ => format!("cannot list custom_nodes: {e}"),
    })?;
    let mut out: Vec<(String, Value)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if name.starts_with('.') || name == "__pycache__" || name.ends_with(".example") {
            continue;
        }
        let v = if path.is_dir() {
            match git_info(&path) {
                Ok(g) => json!({"name": name, "commit": &g.commit[..12.min(g.commit.len())]}),
                Err(_) => json!({"name": name, "commit": null}),
            }
        } else if name.ends_with(".py") {
            json!({"name": name, "commit": null})
        } else {
            continue;
        };
        out.push((name, v));
    }
    out.sort_by_key(|a| a.0.to_lowercase());
    Ok(out.into_iter().map(|(_, v)| v).collect())
}

// ---------------------------------------------------------------------------------------
// The install's Python

/// Asks the interpreter for its version and package versions through `importlib.metadata`,
/// torch's CUDA build from `torch/version.py` (found with `find_spec`, which does not run
/// torch's `__init__`), and comfy-aimdo's modules with `pkgutil` (also without importing).
/// Importing torch would take seconds and, on a CUDA build, touch the driver.
pub const PYTHON_PROBE: &str = r#"
import sys, os, json, platform, re
out = {"python": platform.python_version(), "implementation": platform.python_implementation(),
       "executable": sys.executable, "packages": {}}
try:
    from importlib import metadata
except ImportError:
    metadata = None
for name in ("torch", "comfy-aimdo", "comfy-kitchen", "comfyui-frontend-package", "xformers", "triton"):
    try:
        out["packages"][name] = metadata.version(name) if metadata else None
    except Exception:
        out["packages"][name] = None
try:
    import importlib.util as util
    spec = util.find_spec("torch")
    if spec is not None and spec.origin:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as f:
            text = f.read()
        for key in ("cuda", "hip"):
            m = re.search(r"^%s\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]" % key, text, re.M)
            out["torch_" + key] = m.group(1) if m else None
    spec = util.find_spec("comfy_aimdo")
    if spec is not None and spec.submodule_search_locations:
        import pkgutil
        out["aimdo_modules"] = sorted(m.name for m in pkgutil.iter_modules(list(spec.submodule_search_locations)))
    else:
        out["aimdo_modules"] = None
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"#;

/// What the install's Python said.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PyFacts {
    pub python: String,
    #[serde(default)]
    pub implementation: Option<String>,
    #[serde(default)]
    pub executable: Option<String>,
    #[serde(default)]
    pub packages: BTreeMap<String, Option<String>>,
    #[serde(default)]
    pub torch_cuda: Option<String>,
    #[serde(default)]
    pub torch_hip: Option<String>,
    /// `None`: comfy_aimdo is not importable.
    #[serde(default)]
    pub aimdo_modules: Option<Vec<String>>,
    #[serde(default)]
    pub error: Option<String>,
}

impl PyFacts {
    pub fn package(&self, name: &str) -> Option<&str> {
        self.packages.get(name).and_then(|v| v.as_deref())
    }
}

/// Parses the probe's output (its last line that is a JSON object).
pub fn parse_probe(stdout: &str) -> Result<PyFacts, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("it printed no answer")?;
    serde_json::from_str(line).map_err(|e| format!("its answer did not parse: {e}"))
}

/// Runs [`PYTHON_PROBE`] with the install's Python in its folder (20 s at most).
pub fn ask_python(python: &Python, dir: &Path) -> Result<PyFacts, String> {
    const TIMEOUT: Duration = Duration::from_secs(20);
    let expr = duct::cmd(python.path.as_os_str().to_owned(), ["-c", PYTHON_PROBE])
        .dir(dir)
        .env("PYTHONIOENCODING", "utf-8");
    let output = crate::process::output_with_timeout(expr, TIMEOUT)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!("{} ({}) was not found", python.path.display(), python.how)
            } else {
                format!("cannot run {}: {e}", python.path.display())
            }
        })?
        .ok_or_else(|| {
            format!(
                "{} did not answer in {} s",
                python.path.display(),
                TIMEOUT.as_secs()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            python.path.display(),
            crate::process::last_line(&output.stderr)
        ));
    }
    parse_probe(&String::from_utf8_lossy(&output.stdout))
}

/// The CUDA (or ROCm) build in a torch version string: `2.10.0+cu130` → `13.0`.
pub fn torch_build_from_version(v: &str) -> Option<String> {
    let (_, local) = v.split_once('+')?;
    if let Some(digits) = local.strip_prefix("cu")
        && digits.len() >= 3
        && digits.chars().all(|c| c.is_ascii_digit())
    {
        let (major, minor) = digits.split_at(digits.len() - 1);
        return Some(format!("{major}.{minor}"));
    }
    if let Some(r) = local.strip_prefix("rocm") {
        return Some(format!("ROCm {r}"));
    }
    if local == "cpu" {
        return Some("none (CPU-only build)".into());
    }
    None
}

// ---------------------------------------------------------------------------------------
// The whole capture

/// A string field of `/system_stats`' `system` object.
fn stats_field<'a>(record: &'a RunRecord, key: &str) -> Option<&'a str> {
    record
        .system_stats
        .as_ref()?
        .get("system")?
        .get(key)?
        .as_str()
        .filter(|s| !s.is_empty())
}

fn stats_package<'a>(record: &'a RunRecord, name: &str) -> Option<&'a str> {
    record
        .system_stats
        .as_ref()?
        .get("system")?
        .get("comfy_package_versions")?
        .get(name)?
        .as_str()
}

/// The value after `prefix` on the first log line that has it.
fn log_value(log: &str, prefix: &str) -> Option<String> {
    log.lines().find_map(|l| {
        let i = l.find(prefix)?;
        let v = l[i + prefix.len()..].trim();
        (!v.is_empty()).then(|| v.to_string())
    })
}

/// Captures the environment.
pub fn capture(inp: &Inputs) -> Environment {
    let [os, kernel, cpu, ram_now, swap_bytes] = machine();
    let run = inp.run.as_ref();
    let label = run.map(|r| r.label.as_str()).unwrap_or("the run");
    let src_stats = format!("/system_stats of {label}");
    let src_log = format!("startup log of {label}");
    let src_sampled = format!("NVML during {label}");
    let record = run.map(|r| &r.record);
    let log = run.and_then(|r| r.log.as_deref());
    let summary = run.and_then(|r| r.summary.as_ref());

    let ram_bytes = Item::first([
        opt(
            record
                .and_then(|r| r.system_stats.as_ref())
                .and_then(|s| s.pointer("/system/ram_total"))
                .and_then(Value::as_u64),
            &src_stats,
            "",
        ),
        ram_now,
    ]);

    // GPUs: what the sampler saw during the run, completed with NVML now.
    let nvml_lib = nvml_lib(inp.nvml_lib.as_deref());
    let now = nvml_now(nvml_lib.as_deref());
    let now_reason = now.as_ref().err().cloned().unwrap_or_default();
    let sampled: Vec<Value> = summary
        .and_then(|s| s.get("devices"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let link_of = |index: u64| -> Value {
        match &now {
            Ok(n) => match n.gpus.iter().find(|g| u64::from(g.index) == index) {
                Some(g) => match &g.pcie_link {
                    Ok(l) => json!({"value": l, "source": "NVML now"}),
                    Err(e) => json!({"missing": e}),
                },
                None => json!({"missing": "NVML does not see this GPU now"}),
            },
            Err(e) => json!({"missing": e}),
        }
    };
    let gpus = if !sampled.is_empty() {
        let list: Vec<Value> = sampled
            .iter()
            .map(|d| {
                let index = d.get("index").and_then(Value::as_u64).unwrap_or(0);
                json!({
                    "index": index,
                    "name": d.get("name"),
                    "vram_total_bytes": d.get("total_bytes"),
                    "vram_reserved_bytes": d.get("reserved_bytes"),
                    "pcie_link": link_of(index),
                })
            })
            .collect();
        Item::found(list, &src_sampled)
    } else if let Ok(n) = &now
        && !n.gpus.is_empty()
    {
        let list: Vec<Value> = n
            .gpus
            .iter()
            .map(|g| {
                json!({
                    "index": g.index,
                    "name": g.name,
                    "vram_total_bytes": g.total_bytes,
                    "vram_reserved_bytes": g.reserved_bytes,
                    "vram_free_bytes": g.free_bytes,
                    "pcie_link": link_of(u64::from(g.index)),
                })
            })
            .collect();
        Item::found(list, "NVML now")
    } else {
        // ComfyUI's own device list (CUDA's view; no GPU in CPU mode).
        let devices: Vec<Value> = record
            .and_then(|r| r.system_stats.as_ref())
            .and_then(|s| s.get("devices"))
            .and_then(Value::as_array)
            .map(|d| {
                d.iter()
                    .filter(|d| d.get("type").and_then(Value::as_str) != Some("cpu"))
                    .map(|d| {
                        json!({"index": d.get("index"), "name": d.get("name"),
                               "vram_total_bytes": d.get("vram_total")})
                    })
                    .collect()
            })
            .unwrap_or_default();
        if devices.is_empty() {
            Item::missing(if now_reason.is_empty() {
                "NVML sees no GPU".to_string()
            } else {
                now_reason.clone()
            })
        } else {
            Item::found(devices, format!("{src_stats} (CUDA's view)"))
        }
    };
    let from_summary = |k: &str| {
        summary
            .and_then(|s| s.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let nvidia_driver = Item::first([
        opt(from_summary("driver_version"), &src_sampled, ""),
        match &now {
            Ok(n) => opt(n.driver.clone(), "NVML now", "NVML does not say"),
            Err(e) => Item::missing(e.clone()),
        },
    ]);
    let cuda_driver = Item::first([
        opt(from_summary("cuda_driver_version"), &src_sampled, ""),
        match &now {
            Ok(n) => opt(n.cuda_driver.clone(), "NVML now", "NVML does not say"),
            Err(e) => Item::missing(e.clone()),
        },
    ]);
    let other_processes_vram_bytes = opt(
        record.and_then(|r| r.peaks.vram_other_processes_bytes),
        &format!("NVML during {label} (peak)"),
        &record
            .and_then(|r| r.sampling.iter().find(|s| s.starts_with("nvml")).cloned())
            .unwrap_or_else(|| "not recorded (no per-process NVML figures during the run)".into()),
    );
    let gpu_processes_now = match &now {
        Ok(n) => match &n.processes {
            Some(p) => Item::found(
                serde_json::to_value(p).unwrap_or_default(),
                "NVML now (when the report was made)",
            ),
            None => Item::missing("the driver does not list GPU processes (WDDM?)"),
        },
        Err(e) => Item::missing(e.clone()),
    };

    // ComfyUI.
    let install = inp
        .comfyui
        .as_ref()
        .and_then(|(dir, how)| Install::open(dir).ok().map(|i| (i, how.clone())));
    let unknown = inp
        .comfyui_unknown
        .clone()
        .unwrap_or_else(|| "the ComfyUI folder is not known (pass --comfyui DIR)".into());
    let comfyui_folder = match (&install, &inp.comfyui) {
        (Some((i, how)), _) => Item::found(i.dir.display().to_string(), how.clone()),
        (None, Some((dir, _))) => Item::missing(format!(
            "{} is not a ComfyUI folder any more",
            dir.display()
        )),
        (None, None) => Item::missing(unknown.clone()),
    };
    let comfyui_version = Item::first([
        opt(
            record.and_then(|r| r.effective.comfyui_version.clone()),
            &src_log,
            "",
        ),
        opt(stats_field_opt(record, "comfyui_version"), &src_stats, ""),
        match &install {
            Some((i, _)) => opt(
                i.version.as_ref().map(|v| v.to_string()),
                &format!("{}", i.dir.join("comfyui_version.py").display()),
                "comfyui_version.py has no version",
            ),
            None => Item::missing(unknown.clone()),
        },
    ]);
    let comfyui_git = match &install {
        Some((i, _)) => match git_info(&i.dir) {
            Ok(g) => Item::found(
                json!({"commit": g.commit, "branch": g.branch}),
                format!("{}", i.dir.join(".git").display()),
            ),
            Err(e) => Item::missing(e),
        },
        None => Item::missing(unknown.clone()),
    };
    let custom_nodes = match &install {
        Some((i, _)) => match custom_nodes(&i.dir) {
            Ok(list) => Item::found(list, format!("{}", i.dir.join("custom_nodes").display())),
            Err(e) => Item::missing(e),
        },
        None => Item::missing(unknown.clone()),
    };

    // The install's Python.
    let py: Result<(PyFacts, String), String> = match (&install, inp.ask_python) {
        (Some((i, _)), true) => {
            let python = i.python(inp.python.as_deref());
            ask_python(&python, &i.dir).map(|f| {
                let src = format!("{} ({})", python.path.display(), python.how);
                (f, src)
            })
        }
        (Some(_), false) => Err("the install's Python was not asked".into()),
        (None, _) => Err(unknown.clone()),
    };
    let py_item = |f: &dyn Fn(&PyFacts) -> Option<String>, what: &str| match &py {
        Ok((facts, src)) => opt(
            f(facts),
            &format!("{src}, importlib.metadata"),
            &format!("{what} is not installed in the install's Python"),
        ),
        Err(e) => Item::missing(format!("the install's Python could not be asked: {e}")),
    };
    let python = Item::first([
        opt(stats_field_opt(record, "python_version"), &src_stats, ""),
        opt(
            record.and_then(|r| r.effective.python_version.clone()),
            &src_log,
            "",
        ),
        match &py {
            Ok((f, src)) => Item::found(f.python.clone(), src.clone()),
            Err(e) => Item::missing(format!("the install's Python could not be asked: {e}")),
        },
    ]);
    let python_executable = match &py {
        Ok((f, src)) => opt(f.executable.clone(), src, "the Python did not say"),
        Err(e) => Item::missing(format!("the install's Python could not be asked: {e}")),
    };
    let torch = Item::first([
        opt(stats_field_opt(record, "pytorch_version"), &src_stats, ""),
        opt(
            record.and_then(|r| r.effective.pytorch_version.clone()),
            &src_log,
            "",
        ),
        py_item(&|f| f.package("torch").map(str::to_string), "torch"),
    ]);
    let torch_cuda = Item::first([
        match &py {
            Ok((f, src)) => match (&f.torch_cuda, &f.torch_hip) {
                (Some(c), _) => Item::found(c.clone(), format!("{src}, torch/version.py")),
                (None, Some(h)) => {
                    Item::found(format!("ROCm {h}"), format!("{src}, torch/version.py"))
                }
                _ => Item::missing("torch/version.py names no CUDA build"),
            },
            Err(_) => Item::missing(""),
        },
        opt(
            torch.text().as_deref().and_then(torch_build_from_version),
            "the torch version's local suffix (+cuXYZ)",
            "the torch version names no CUDA build",
        ),
    ]);
    // A Python package's version: /system_stats, then the startup log, then the install's
    // own Python.
    let package = |name: &str, logged: Option<String>| {
        Item::first([
            opt(record.and_then(|r| stats_package(r, name)), &src_stats, ""),
            opt(logged, &src_log, ""),
            py_item(&|f| f.package(name).map(str::to_string), name),
        ])
    };
    let comfy_aimdo = package(
        "comfy-aimdo",
        record.and_then(|r| r.effective.comfy_aimdo_version.clone()),
    );
    let comfy_kitchen = package(
        "comfy-kitchen",
        log.and_then(|l| log_value(l, "comfy-kitchen version:")),
    );
    let comfyui_frontend = package(
        "comfyui-frontend-package",
        log.and_then(|l| log_value(l, "ComfyUI frontend version:")),
    );

    let launcher = match &inp.launcher {
        Some((line, src)) => Item::found(line.clone(), src.clone()),
        None => {
            Item::missing("no launcher was given (the runs used the flags on the command line)")
        }
    };
    let command = match record {
        Some(r) => Item::found(
            format!("python {}", shell_words(&r.argv)),
            format!("record.json of {label}"),
        ),
        None => Item::missing("no run was recorded"),
    };

    // Allowlisted variables only: the launcher's, then this process's.
    let mut env = serde_json::Map::new();
    let mut sources = Vec::new();
    for (k, v) in &inp.launcher_env {
        if env_allowed(k) && !env.contains_key(k) {
            env.insert(k.clone(), Value::String(v.clone()));
            if !sources.contains(&"set by the launcher") {
                sources.push("set by the launcher");
            }
        }
    }
    for k in ENV_ALLOWLIST {
        if let Ok(v) = std::env::var(k)
            && !env.contains_key(*k)
        {
            env.insert(k.to_string(), Value::String(v));
            if !sources.contains(&"environment when the report was made") {
                sources.push("environment when the report was made");
            }
        }
    }
    let env = Item::found(
        Value::Object(env),
        if sources.is_empty() {
            "none of the allowlisted variables is set".to_string()
        } else {
            sources.join("; ")
        },
    );

    Environment {
        format: FORMAT.into(),
        vrambisect_version: env!("CARGO_PKG_VERSION").into(),
        captured_at: crate::run::folder::rfc3339(std::time::SystemTime::now()),
        os,
        kernel,
        cpu,
        ram_bytes,
        swap_bytes,
        gpus,
        nvidia_driver,
        cuda_driver,
        other_processes_vram_bytes,
        gpu_processes_now,
        comfyui_folder,
        comfyui_version,
        comfyui_git,
        python,
        python_executable,
        torch,
        torch_cuda,
        comfy_aimdo,
        comfy_kitchen,
        comfyui_frontend,
        custom_nodes,
        launcher,
        command,
        env,
    }
}

fn stats_field_opt(record: Option<&RunRecord>, key: &str) -> Option<String> {
    record.and_then(|r| stats_field(r, key)).map(str::to_string)
}

pub use crate::text::shell_words;

// ---------------------------------------------------------------------------------------
// As a table

/// One row of the environment table: what, its value, where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub item: String,
    pub value: String,
    pub source: String,
}

use crate::text::{gib, mib};

/// One row: the item's value as `show` writes it, or a dash and why it is missing.
fn item_row(item: &str, it: &Item, show: &dyn Fn(&Value) -> String) -> Row {
    let (value, source) = match it {
        Item::Found { value, source } => (show(value), source.clone()),
        Item::Missing { missing } => ("—".to_string(), format!("missing: {missing}")),
    };
    Row {
        item: item.into(),
        value,
        source,
    }
}

/// The environment as rows for people (ISSUE.md, `doctor`).
pub fn rows(env: &Environment) -> Vec<Row> {
    let mut out = Vec::new();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let bytes = |v: &Value| v.as_u64().map(gib).unwrap_or_else(|| v.to_string());
    out.push(item_row("OS", &env.os, &text));
    out.push(item_row("Kernel", &env.kernel, &text));
    out.push(item_row("CPU", &env.cpu, &text));
    out.push(item_row("RAM", &env.ram_bytes, &bytes));
    out.push(item_row("Swap", &env.swap_bytes, &|v| match v.as_u64() {
        Some(0) => "none".into(),
        Some(b) => gib(b),
        None => v.to_string(),
    }));
    match &env.gpus {
        Item::Found { value, source } => {
            for g in value.as_array().into_iter().flatten() {
                let mut parts = vec![
                    g.get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("unnamed GPU")
                        .to_string(),
                ];
                if let Some(t) = g.get("vram_total_bytes").and_then(Value::as_u64) {
                    let mut vram = format!("{} VRAM", gib(t));
                    if let Some(r) = g.get("vram_reserved_bytes").and_then(Value::as_u64) {
                        vram.push_str(&format!(" ({} reserved by the driver)", mib(r)));
                    }
                    parts.push(vram);
                }
                if let Some(f) = g.get("vram_free_bytes").and_then(Value::as_u64) {
                    parts.push(format!("{} free now", gib(f)));
                }
                match g.get("pcie_link") {
                    Some(l) if l.get("value").is_some() => {
                        parts.push(format!("PCIe {}", text(&l["value"])))
                    }
                    Some(l) if l.get("missing").is_some() => {
                        parts.push(format!("PCIe link unknown: {}", text(&l["missing"])))
                    }
                    _ => {}
                }
                let index = g.get("index").map(text).unwrap_or_else(|| "?".into());
                out.push(Row {
                    item: format!("GPU {index}"),
                    value: parts.join(", "),
                    source: source.clone(),
                });
            }
        }
        Item::Missing { missing } => out.push(Row {
            item: "GPU".into(),
            value: "—".into(),
            source: format!("missing: {missing}"),
        }),
    }
    out.push(item_row("NVIDIA driver", &env.nvidia_driver, &text));
    out.push(item_row("CUDA (driver supports)", &env.cuda_driver, &text));
    out.push(item_row(
        "VRAM held by other processes (peak)",
        &env.other_processes_vram_bytes,
        &|v| v.as_u64().map(mib).unwrap_or_else(|| v.to_string()),
    ));
    out.push(item_row(
        "GPU processes now",
        &env.gpu_processes_now,
        &|v| {
            let list: Vec<String> = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    format!(
                        "{}pid {} on GPU {}: {}",
                        p.get("name")
                            .and_then(Value::as_str)
                            .map(|n| format!("{n}, "))
                            .unwrap_or_default(),
                        p.get("pid").map(text).unwrap_or_default(),
                        p.get("gpu").map(text).unwrap_or_default(),
                        p.get("used_bytes")
                            .and_then(Value::as_u64)
                            .map(mib)
                            .unwrap_or_else(|| "n/a".into())
                    )
                })
                .collect();
            if list.is_empty() {
                "none".into()
            } else {
                list.join("; ")
            }
        },
    ));
    out.push(item_row("ComfyUI version", &env.comfyui_version, &text));
    out.push(item_row("ComfyUI git", &env.comfyui_git, &|v| {
        let commit = v.get("commit").and_then(Value::as_str).unwrap_or("?");
        match v.get("branch").and_then(Value::as_str) {
            Some(b) => format!("{commit} ({b})"),
            None => format!("{commit} (detached)"),
        }
    }));
    out.push(item_row("ComfyUI folder", &env.comfyui_folder, &text));
    out.push(item_row("Python", &env.python, &text));
    out.push(item_row("Python executable", &env.python_executable, &text));
    out.push(item_row("PyTorch", &env.torch, &text));
    out.push(item_row("PyTorch CUDA build", &env.torch_cuda, &text));
    out.push(item_row("comfy-aimdo", &env.comfy_aimdo, &text));
    out.push(item_row("comfy-kitchen", &env.comfy_kitchen, &text));
    out.push(item_row("ComfyUI frontend", &env.comfyui_frontend, &text));
    out.push(item_row("Custom nodes", &env.custom_nodes, &|v| {
        let list: Vec<String> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let name = n.get("name").and_then(Value::as_str).unwrap_or("?");
                match n.get("commit").and_then(Value::as_str) {
                    Some(c) => format!("{name}@{c}"),
                    None => name.to_string(),
                }
            })
            .collect();
        if list.is_empty() {
            "none".into()
        } else {
            format!("{}: {}", list.len(), list.join(", "))
        }
    }));
    out.push(item_row("Launcher", &env.launcher, &text));
    out.push(item_row("Command", &env.command, &text));
    out.push(item_row("Environment variables", &env.env, &|v| {
        let list: Vec<String> = v
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect();
        if list.is_empty() {
            "none set".into()
        } else {
            list.join(" ")
        }
    }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_and_cpuinfo() {
        assert_eq!(
            parse_os_release(
                "NAME=\"Debian GNU/Linux\"\nVERSION=\"12 (bookworm)\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"
            )
            .unwrap(),
            "Debian GNU/Linux 12 (bookworm)"
        );
        assert_eq!(
            parse_os_release("NAME=Arch\nVERSION='rolling'\n").unwrap(),
            "Arch rolling"
        );
        assert_eq!(parse_os_release("ID=x\n"), None);
        let cpu = "processor\t: 0\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n\nprocessor\t: 1\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\n";
        assert_eq!(
            parse_cpuinfo(cpu).unwrap(),
            "AMD Ryzen 9 7950X 16-Core Processor (2 logical cores)"
        );
        assert_eq!(parse_cpuinfo("processor : 0\n"), None);
    }

    #[test]
    fn torch_builds() {
        for (v, want) in [
            ("2.10.0+cu130", Some("13.0")),
            ("2.8.0+cu128", Some("12.8")),
            ("2.4.1+cu118", Some("11.8")),
            ("2.5.0+rocm6.2", Some("ROCm 6.2")),
            ("2.5.0+cpu", Some("none (CPU-only build)")),
            ("2.5.0", None),
        ] {
            assert_eq!(torch_build_from_version(v).as_deref(), want, "{v}");
        }
    }

    #[test]
    fn git_heads_loose_packed_detached_and_worktrees() {
        let tmp = tempfile::tempdir().unwrap();
        let sha = "a125cd84c2f0e5c3b9d1e0f3a4b5c6d7e8f90123";
        let other = "0123456789abcdef0123456789abcdef01234567";
        let repo = tmp.path().join("loose");
        std::fs::create_dir_all(repo.join(".git/refs/heads")).unwrap();
        std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/master\n").unwrap();
        std::fs::write(repo.join(".git/refs/heads/master"), format!("{sha}\n")).unwrap();
        assert_eq!(
            git_info(&repo).unwrap(),
            GitInfo {
                commit: sha.into(),
                branch: Some("master".into())
            }
        );
        let repo = tmp.path().join("packed");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(repo.join(".git/HEAD"), "ref: refs/heads/v0.38\n").unwrap();
        std::fs::write(
            repo.join(".git/packed-refs"),
            format!("# pack-refs with: peeled fully-peeled sorted\n{other} refs/heads/master\n{sha} refs/heads/v0.38\n^{other}\n"),
        )
        .unwrap();
        assert_eq!(git_info(&repo).unwrap().commit, sha);
        let repo = tmp.path().join("detached");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        std::fs::write(repo.join(".git/HEAD"), format!("{sha}\n")).unwrap();
        assert_eq!(git_info(&repo).unwrap().branch, None);
        // A worktree: `.git` is a file, refs live in the common folder.
        let wt = tmp.path().join("wt");
        let gd = tmp.path().join("loose/.git/worktrees/wt");
        std::fs::create_dir_all(&gd).unwrap();
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", gd.display())).unwrap();
        std::fs::write(gd.join("HEAD"), "ref: refs/heads/master\n").unwrap();
        std::fs::write(gd.join("commondir"), "../..\n").unwrap();
        assert_eq!(git_info(&wt).unwrap().commit, sha);
        assert!(
            git_info(tmp.path())
                .unwrap_err()
                .contains("not a git checkout")
        );
    }

    #[test]
    fn custom_nodes_with_commits() {
        let tmp = tempfile::tempdir().unwrap();
        let nodes = tmp.path().join("custom_nodes");
        std::fs::create_dir_all(nodes.join("ComfyUI-Manager/.git")).unwrap();
        std::fs::write(
            nodes.join("ComfyUI-Manager/.git/HEAD"),
            "0123456789abcdef0123456789abcdef01234567\n",
        )
        .unwrap();
        std::fs::create_dir_all(nodes.join("__pycache__")).unwrap();
        std::fs::create_dir_all(nodes.join("plain")).unwrap();
        std::fs::write(nodes.join("websocket_image_save.py"), "").unwrap();
        std::fs::write(nodes.join("example_node.py.example"), "").unwrap();
        let list = custom_nodes(tmp.path()).unwrap();
        assert_eq!(
            Value::Array(list),
            json!([
                {"name": "ComfyUI-Manager", "commit": "0123456789ab"},
                {"name": "plain", "commit": null},
                {"name": "websocket_image_save.py", "commit": null}
            ])
        );
    }

    #[test]
    fn probe_answers() {
        let f = parse_probe(
            "noise\n{\"python\": \"3.11.7\", \"executable\": \"/x/python\", \"packages\": {\"torch\": \"2.8.0+cu128\", \"comfy-aimdo\": null}, \"torch_cuda\": \"12.8\", \"aimdo_modules\": null}\n",
        )
        .unwrap();
        assert_eq!(f.python, "3.11.7");
        assert_eq!(f.package("torch"), Some("2.8.0+cu128"));
        assert_eq!(f.package("comfy-aimdo"), None);
        assert_eq!(f.torch_cuda.as_deref(), Some("12.8"));
        assert!(parse_probe("Traceback\n").is_err());
    }

    #[test]
    fn the_probe_runs_on_this_python_without_torch() {
        let tmp = tempfile::tempdir().unwrap();
        let py = Python {
            path: "python3".into(),
            how: "test".into(),
        };
        let f = ask_python(&py, tmp.path()).unwrap();
        assert!(f.python.starts_with('3'), "{f:?}");
        assert!(f.error.is_none(), "{f:?}");
        let missing = Python {
            path: "/no/such/python".into(),
            how: "test".into(),
        };
        assert!(
            ask_python(&missing, tmp.path())
                .unwrap_err()
                .contains("not found")
        );
    }

    #[test]
    fn items_say_where_or_why() {
        let it = Item::first([Item::missing("a"), Item::found("x", "here")]);
        assert_eq!(
            serde_json::to_value(&it).unwrap(),
            json!({"value": "x", "source": "here"})
        );
        let it = Item::first([Item::missing("a"), Item::missing("b"), Item::missing("a")]);
        assert_eq!(
            serde_json::to_value(&it).unwrap(),
            json!({"missing": "a; b"})
        );
    }

    #[test]
    fn capture_without_a_run_or_nvml() {
        let env = capture(&Inputs {
            nvml_lib: Some("/no/such/libnvidia-ml.so.1".into()),
            ..Inputs::default()
        });
        assert!(matches!(env.gpus, Item::Missing { .. }));
        assert!(matches!(env.nvidia_driver, Item::Missing { .. }));
        assert!(matches!(env.ram_bytes, Item::Found { .. }));
        let text = serde_json::to_string(&env).unwrap();
        let back: Environment = serde_json::from_str(&text).unwrap();
        assert_eq!(back, env);
        let rows = rows(&env);
        assert!(
            rows.iter()
                .any(|r| r.item == "GPU" && r.source.starts_with("missing: cannot load"))
        );
    }
}
