//! Machine facts, for the bundle and `doctor`: OS, kernel, CPU, RAM, swap; GPUs, driver,
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

use crate::install::{Install, Python};
use crate::nvidia::NvmlOpenError;
use crate::run::RunRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Environment variables whose values are kept: they decide how ComfyUI and torch use memory
/// and devices, and say nothing about the person.
pub const ENV_ALLOWLIST: &[&str] = &[
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_MODULE_LOADING",
    "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING",
    "OMP_NUM_THREADS",
    "MALLOC_ARENA_MAX",
];

/// Whether an environment variable's value may be shown.
pub fn env_allowed(name: &str) -> bool {
    ENV_ALLOWLIST.iter().any(|a| a.eq_ignore_ascii_case(name))
}

/// The `format` field of `environment.json`.
pub(crate) const FORMAT: &str = "vrambisect environment v1";

/// One fact: its value and where it came from, or why it is missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Item<T> {
    Found { value: T, source: String },
    Missing { missing: String },
}

impl<T> Item<T> {
    pub(crate) fn found(value: impl Into<T>, source: impl Into<String>) -> Item<T> {
        Item::Found {
            value: value.into(),
            source: source.into(),
        }
    }

    pub(crate) fn missing(reason: impl Into<String>) -> Item<T> {
        Item::Missing {
            missing: reason.into(),
        }
    }

    pub(crate) fn value(&self) -> Option<&T> {
        match self {
            Item::Found { value, .. } => Some(value),
            Item::Missing { .. } => None,
        }
    }

    /// The first item found among candidates, else one missing item naming every reason.
    pub(crate) fn first(candidates: impl IntoIterator<Item = Item<T>>) -> Item<T> {
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

impl<T: std::fmt::Display> Item<T> {
    /// The value as text.
    pub(crate) fn text(&self) -> Option<String> {
        self.value().map(T::to_string)
    }
}

/// Turns an `Option` into an item with this source, or missing with this reason.
fn opt<T>(v: Option<impl Into<T>>, source: &str, reason: &str) -> Item<T> {
    match v {
        Some(v) => Item::found(v, source),
        None => Item::missing(reason),
    }
}

/// One GPU as the sampler saw it during the run, as NVML sees it now, or as ComfyUI's own
/// device list names it (CUDA's view: no PCIe link, no reserved or free memory).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Gpu {
    pub index: Option<u32>,
    pub name: Option<String>,
    /// NVML's reading of the link now (absent in ComfyUI's device list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_link: Option<Item<String>>,
    /// NVML now only (absent otherwise; null where NVML did not say).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub vram_free_bytes: Option<Option<u64>>,
    /// What the driver keeps for itself, as NVML says (absent in ComfyUI's device list; null
    /// where NVML did not say).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub vram_reserved_bytes: Option<Option<u64>>,
    pub vram_total_bytes: Option<u64>,
}

/// A field written where its source has such a reading, `null` included: present (`Some`),
/// whatever its value.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

/// A custom node pack in the install's `custom_nodes`, with its checkout's commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CustomNode {
    /// Abbreviated to 12 digits; null for a single file or a folder that is no checkout.
    pub commit: Option<String>,
    pub name: String,
}

/// Environment variables by name (only allowlisted values are shown).
pub(crate) type Variables = BTreeMap<String, String>;

/// Everything `environment.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Environment {
    pub format: String,
    pub vrambisect_version: String,
    pub captured_at: String,
    pub os: Item<String>,
    pub kernel: Item<String>,
    pub cpu: Item<String>,
    pub ram_bytes: Item<u64>,
    pub swap_bytes: Item<u64>,
    pub gpus: Item<Vec<Gpu>>,
    pub nvidia_driver: Item<String>,
    /// The newest CUDA version the driver supports (`nvidia-smi`'s "CUDA Version").
    pub cuda_driver: Item<String>,
    /// The most VRAM other processes held while the workflow ran (NVML, per process).
    pub other_processes_vram_bytes: Item<u64>,
    /// The processes holding VRAM when the report was made.
    pub gpu_processes_now: Item<Vec<GpuProcess>>,
    pub comfyui_folder: Item<String>,
    pub comfyui_version: Item<String>,
    pub comfyui_git: Item<GitInfo>,
    pub python: Item<String>,
    pub python_executable: Item<String>,
    pub torch: Item<String>,
    /// The CUDA (or ROCm) version torch was built for.
    pub torch_cuda: Item<String>,
    pub comfy_aimdo: Item<String>,
    pub comfy_kitchen: Item<String>,
    pub comfyui_frontend: Item<String>,
    pub custom_nodes: Item<Vec<CustomNode>>,
    pub launcher: Item<String>,
    /// How ComfyUI was started (from the run's record).
    pub command: Item<String>,
    /// The allowlisted variables that are set.
    pub env: Item<Variables>,
    /// What ComfyUI's own process changed in its environment after it started (its
    /// cuda_malloc step sets `PYTORCH_CUDA_ALLOC_CONF`; a node pack may set others), as the
    /// extension saw it: the value, or null where it removed one; absent where nobody said
    /// (the command line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_set_by_comfyui: Option<Item<BTreeMap<String, Option<String>>>>,
}

/// What a run recorded about the machine it ran on.
#[derive(Debug, Clone)]
pub(crate) struct RunFacts {
    /// `run 001`
    pub label: String,
    pub record: RunRecord,
    /// The run's `samples-summary.json`.
    pub summary: Option<crate::sampler::Summary>,
    /// The run's log, normalised (no ANSI, no level tags).
    pub log: Option<String>,
}

/// What a capture starts from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Inputs {
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

pub(crate) mod comfyui;
mod gpu;
pub(crate) mod host;
mod python;

pub(crate) use comfyui::GitInfo;
pub(crate) use comfyui::*;
pub(crate) use gpu::GpuProcess;
pub(crate) use gpu::*;
pub(crate) use python::*;

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
pub(crate) fn capture(inp: &Inputs) -> Environment {
    merge(inp, probe(inp))
}

/// What the probes find on this machine now: the I/O half of a capture.
pub(crate) struct Probes {
    /// OS, kernel, CPU, RAM and swap.
    pub host: host::Host,
    pub nvml: Result<NvmlNow, crate::nvidia::NvmlOpenError>,
    /// The install and how its folder was found.
    pub install: Option<(Install, String)>,
    /// Its git commit and branch (meaningful with an install).
    pub git: Result<GitInfo, String>,
    pub custom_nodes: Result<Vec<CustomNode>, String>,
    /// What its Python said, and which Python that was.
    pub python: Result<(PyFacts, String), String>,
    /// The allowlisted variables set in this process's environment.
    pub process_env: Vec<(String, String)>,
    /// What the extension says ComfyUI's process changed (`VRAMBISECT_COMFYUI_SET_ENV`).
    pub comfyui_set_env: Option<Vec<(String, Option<String>)>>,
}

/// Why the install is not known, when it is not.
fn unknown_install(inp: &Inputs) -> String {
    inp.comfyui_unknown
        .clone()
        .unwrap_or_else(|| "the ComfyUI folder is not known (pass --comfyui DIR)".into())
}

/// Runs every probe: the machine, NVML, the install's folder and its Python, the environment.
pub(crate) fn probe(inp: &Inputs) -> Probes {
    let install = inp
        .comfyui
        .as_ref()
        .and_then(|(dir, how)| Install::open(dir).ok().map(|i| (i, how.clone())));
    let unknown = unknown_install(inp);
    let (git, custom_nodes) = match &install {
        Some((i, _)) => (git_info(&i.dir), self::custom_nodes(&i.dir)),
        None => (Err(unknown.clone()), Err(unknown.clone())),
    };
    let python = match (&install, inp.ask_python) {
        (Some((i, _)), true) => {
            let python = i.python(inp.python.as_deref());
            ask_python(&python, &i.dir).map(|f| {
                let src = format!("{} ({})", python.path.display(), python.source);
                (f, src)
            })
        }
        (Some(_), false) => Err("the install's Python was not asked".into()),
        (None, _) => Err(unknown),
    };
    Probes {
        host: host::machine(),
        nvml: nvml_now(crate::nvidia::nvml_lib(inp.nvml_lib.as_deref()).as_deref()),
        install,
        git,
        custom_nodes,
        python,
        process_env: ENV_ALLOWLIST
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect(),
        comfyui_set_env: std::env::var(SET_ENV_VAR)
            .ok()
            .and_then(|v| parse_set_env(&v)),
    }
}

/// The variable in which the ComfyUI extension passes what ComfyUI's own process changed in
/// its environment (a JSON object, `{NAME: value or null}`) to the `report` it starts.
pub(crate) const SET_ENV_VAR: &str = "VRAMBISECT_COMFYUI_SET_ENV";

/// `{NAME: value or null}` as (name, value) pairs; anything else is None.
fn parse_set_env(text: &str) -> Option<Vec<(String, Option<String>)>> {
    let map = serde_json::from_str::<serde_json::Map<String, Value>>(text).ok()?;
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Some((k, Some(s))),
            Value::Null => Some((k, None)),
            _ => None,
        })
        .collect()
}

/// What ComfyUI's process set itself: allowlisted values shown, other names only.
fn set_env_item(
    set: Option<Vec<(String, Option<String>)>>,
) -> Option<Item<BTreeMap<String, Option<String>>>> {
    let set = set?;
    let map = set
        .into_iter()
        .map(|(k, v)| {
            let shown = match v {
                Some(v) if env_allowed(&k) => Some(v),
                Some(_) => Some("(set; not on the allowlist)".to_string()),
                None => None,
            };
            (k, shown)
        })
        .collect::<BTreeMap<_, _>>();
    Some(Item::found(
        map,
        "changed by ComfyUI's own process after it started (not the user's; null: removed); \
         each run's ComfyUI makes these changes itself",
    ))
}

/// Merges what the run recorded with what the probes found (no I/O): a run's own record
/// wins, so the bundle describes the machine the runs happened on. Each kind of fact has its
/// own part below.
pub(crate) fn merge(inp: &Inputs, probes: Probes) -> Environment {
    let Probes {
        host,
        nvml: now,
        install,
        git,
        custom_nodes,
        python,
        process_env,
        comfyui_set_env,
    } = probes;
    let rec = Recorded::of(inp);
    let host::Host {
        os,
        kernel,
        cpu,
        ram_bytes: ram_now,
        swap_bytes,
    } = host;
    let ram_bytes = Item::first([
        opt(
            rec.record
                .and_then(|r| r.system_stats.as_ref())
                .and_then(|s| s.pointer("/system/ram_total"))
                .and_then(Value::as_u64),
            &rec.src_stats,
            "",
        ),
        ram_now,
    ]);
    let gpu = gpu_facts(&rec, &now);
    let comfy = comfyui_facts(&rec, inp, install.as_ref(), git, custom_nodes);
    let py = python_facts(&rec, &python);
    let launch = launch_facts(&rec, inp, process_env);
    Environment {
        format: FORMAT.into(),
        vrambisect_version: env!("CARGO_PKG_VERSION").into(),
        captured_at: crate::run::folder::rfc3339(std::time::SystemTime::now()),
        os,
        kernel,
        cpu,
        ram_bytes,
        swap_bytes,
        gpus: gpu.gpus,
        nvidia_driver: gpu.nvidia_driver,
        cuda_driver: gpu.cuda_driver,
        other_processes_vram_bytes: gpu.other_processes_vram_bytes,
        gpu_processes_now: gpu.gpu_processes_now,
        comfyui_folder: comfy.folder,
        comfyui_version: comfy.version,
        comfyui_git: comfy.git,
        python: py.python,
        python_executable: py.executable,
        torch: py.torch,
        torch_cuda: py.torch_cuda,
        comfy_aimdo: py.comfy_aimdo,
        comfy_kitchen: py.comfy_kitchen,
        comfyui_frontend: py.comfyui_frontend,
        custom_nodes: comfy.custom_nodes,
        launcher: launch.launcher,
        command: launch.command,
        env: launch.env,
        env_set_by_comfyui: set_env_item(comfyui_set_env),
    }
}

/// What the recorded run says, and how each of its sources is named.
struct Recorded<'a> {
    /// `run 001`, or `the run`.
    label: &'a str,
    src_stats: String,
    src_log: String,
    src_sampled: String,
    record: Option<&'a RunRecord>,
    log: Option<&'a str>,
    summary: Option<&'a crate::sampler::Summary>,
}

impl<'a> Recorded<'a> {
    fn of(inp: &'a Inputs) -> Recorded<'a> {
        let run = inp.run.as_ref();
        let label = run.map(|r| r.label.as_str()).unwrap_or("the run");
        Recorded {
            label,
            src_stats: format!("/system_stats of {label}"),
            src_log: format!("startup log of {label}"),
            src_sampled: format!("NVML during {label}"),
            record: run.map(|r| &r.record),
            log: run.and_then(|r| r.log.as_deref()),
            summary: run.and_then(|r| r.summary.as_ref()),
        }
    }

    /// A `/system_stats` field of the run.
    fn stats(&self, key: &str) -> Option<String> {
        self.record
            .and_then(|r| stats_field(r, key))
            .map(str::to_string)
    }
}

/// The GPUs, the driver and who else held VRAM.
struct GpuFacts {
    gpus: Item<Vec<Gpu>>,
    nvidia_driver: Item<String>,
    cuda_driver: Item<String>,
    other_processes_vram_bytes: Item<u64>,
    gpu_processes_now: Item<Vec<GpuProcess>>,
}

/// What the sampler saw during the run, completed with NVML now; without either, ComfyUI's
/// own device list (CUDA's view).
fn gpu_facts(rec: &Recorded, now: &Result<NvmlNow, NvmlOpenError>) -> GpuFacts {
    let link_of = |index: u32| -> Option<Item<String>> {
        Some(match now {
            Ok(n) => match n.gpus.iter().find(|g| g.index == index) {
                Some(g) => match &g.pcie_link {
                    Ok(l) => Item::found(l.as_str(), "NVML now"),
                    Err(e) => Item::missing(e.as_str()),
                },
                None => Item::missing("NVML does not see this GPU now"),
            },
            Err(e) => Item::missing(e.to_string()),
        })
    };
    let sampled = rec
        .summary
        .map(|s| s.devices.as_slice())
        .unwrap_or_default();
    let gpus = if !sampled.is_empty() {
        let list: Vec<Gpu> = sampled
            .iter()
            .map(|d| Gpu {
                index: Some(d.index),
                name: d.name.clone(),
                vram_total_bytes: d.total_bytes,
                vram_reserved_bytes: Some(d.reserved_bytes),
                vram_free_bytes: None,
                pcie_link: link_of(d.index),
            })
            .collect();
        Item::found(list, &rec.src_sampled)
    } else if let Ok(n) = now
        && !n.gpus.is_empty()
    {
        let list: Vec<Gpu> = n
            .gpus
            .iter()
            .map(|g| Gpu {
                index: Some(g.index),
                name: g.name.clone(),
                vram_total_bytes: g.total_bytes,
                vram_reserved_bytes: Some(g.reserved_bytes),
                vram_free_bytes: Some(g.free_bytes),
                pcie_link: link_of(g.index),
            })
            .collect();
        Item::found(list, "NVML now")
    } else {
        comfyui_devices(rec, now)
    };
    let from_nvml_now = |f: &dyn Fn(&NvmlNow) -> Option<String>| match now {
        Ok(n) => opt(f(n), "NVML now", "NVML does not say"),
        Err(e) => Item::missing(e.to_string()),
    };
    let nvidia_driver = Item::first([
        opt(
            rec.summary.and_then(|s| s.driver_version.clone()),
            &rec.src_sampled,
            "",
        ),
        from_nvml_now(&|n| n.driver.clone()),
    ]);
    let cuda_driver = Item::first([
        opt(
            rec.summary.and_then(|s| s.cuda_driver_version.clone()),
            &rec.src_sampled,
            "",
        ),
        from_nvml_now(&|n| n.cuda_driver.clone()),
    ]);
    let other_processes_vram_bytes = opt(
        rec.record.and_then(|r| r.peaks.vram_other_processes_bytes),
        &format!("NVML during {} (peak)", rec.label),
        &rec.record
            .and_then(|r| {
                r.not_sampled()
                    .find(|(probe, _)| *probe == "nvml" || probe.starts_with("nvml."))
                    .map(|(probe, why)| format!("{probe}: {why}"))
            })
            .unwrap_or_else(|| "not recorded (no per-process NVML figures during the run)".into()),
    );
    let gpu_processes_now = match now {
        Ok(n) => match &n.processes {
            Some(p) => Item::found(p.clone(), "NVML now (when the report was made)"),
            None => Item::missing("the driver does not list GPU processes (WDDM?)"),
        },
        Err(e) => Item::missing(e.to_string()),
    };
    GpuFacts {
        gpus,
        nvidia_driver,
        cuda_driver,
        other_processes_vram_bytes,
        gpu_processes_now,
    }
}

/// ComfyUI's own device list from `/system_stats` (CUDA's view; no GPU in CPU mode).
fn comfyui_devices(rec: &Recorded, now: &Result<NvmlNow, NvmlOpenError>) -> Item<Vec<Gpu>> {
    let devices: Vec<Gpu> = rec
        .record
        .and_then(|r| r.system_stats.as_ref())
        .and_then(|s| s.get("devices"))
        .and_then(Value::as_array)
        .map(|d| {
            d.iter()
                .filter(|d| d.get("type").and_then(Value::as_str) != Some("cpu"))
                .map(|d| Gpu {
                    index: d
                        .get("index")
                        .and_then(Value::as_u64)
                        .and_then(|i| u32::try_from(i).ok()),
                    name: d.get("name").and_then(Value::as_str).map(str::to_string),
                    vram_total_bytes: d.get("vram_total").and_then(Value::as_u64),
                    vram_reserved_bytes: None,
                    vram_free_bytes: None,
                    pcie_link: None,
                })
                .collect()
        })
        .unwrap_or_default();
    if !devices.is_empty() {
        return Item::found(devices, format!("{} (CUDA's view)", rec.src_stats));
    }
    match now {
        Err(reason) => Item::missing(reason.to_string()),
        _ => Item::missing("NVML sees no GPU"),
    }
}

/// The ComfyUI install: its folder, version, git state and custom nodes.
struct ComfyFacts {
    folder: Item<String>,
    version: Item<String>,
    git: Item<GitInfo>,
    custom_nodes: Item<Vec<CustomNode>>,
}

fn comfyui_facts(
    rec: &Recorded,
    inp: &Inputs,
    install: Option<&(Install, String)>,
    git: Result<GitInfo, String>,
    custom_nodes: Result<Vec<CustomNode>, String>,
) -> ComfyFacts {
    let unknown = unknown_install(inp);
    let folder = match (install, &inp.comfyui) {
        (Some((i, how)), _) => Item::found(i.dir.display().to_string(), how.clone()),
        (None, Some((dir, _))) => Item::missing(format!(
            "{} is not a ComfyUI folder any more",
            dir.display()
        )),
        (None, None) => Item::missing(unknown.clone()),
    };
    let Some((i, _)) = install else {
        return ComfyFacts {
            folder,
            version: Item::first([
                opt(
                    rec.record.and_then(|r| r.effective.comfyui_version.clone()),
                    &rec.src_log,
                    "",
                ),
                opt(rec.stats("comfyui_version"), &rec.src_stats, ""),
                Item::missing(unknown.clone()),
            ]),
            git: Item::missing(unknown.clone()),
            custom_nodes: Item::missing(unknown),
        };
    };
    let version = Item::first([
        opt(
            rec.record.and_then(|r| r.effective.comfyui_version.clone()),
            &rec.src_log,
            "",
        ),
        opt(rec.stats("comfyui_version"), &rec.src_stats, ""),
        opt(
            i.version.as_ref().map(|v| v.to_string()),
            &format!("{}", i.dir.join("comfyui_version.py").display()),
            "comfyui_version.py has no version",
        ),
    ]);
    let git = match git {
        Ok(g) => Item::found(g, format!("{}", i.dir.join(".git").display())),
        Err(e) => Item::missing(e),
    };
    let custom_nodes = match custom_nodes {
        Ok(list) => Item::found(list, format!("{}", i.dir.join("custom_nodes").display())),
        Err(e) => Item::missing(e),
    };
    ComfyFacts {
        folder,
        version,
        git,
        custom_nodes,
    }
}

/// The install's Python and the packages that decide memory.
struct PythonFacts {
    python: Item<String>,
    executable: Item<String>,
    torch: Item<String>,
    torch_cuda: Item<String>,
    comfy_aimdo: Item<String>,
    comfy_kitchen: Item<String>,
    comfyui_frontend: Item<String>,
}

/// `/system_stats` first, then the startup log, then what the install's Python says now.
fn python_facts(rec: &Recorded, py: &Result<(PyFacts, String), String>) -> PythonFacts {
    let not_asked =
        |e: &String| Item::missing(format!("the install's Python could not be asked: {e}"));
    let py_item = |f: &dyn Fn(&PyFacts) -> Option<String>, what: &str| match py {
        Ok((facts, src)) => opt(
            f(facts),
            &format!("{src}, importlib.metadata"),
            &format!("{what} is not installed in the install's Python"),
        ),
        Err(e) => not_asked(e),
    };
    let effective = |f: &dyn Fn(&RunRecord) -> Option<String>| rec.record.and_then(f);
    let python = Item::first([
        opt(rec.stats("python_version"), &rec.src_stats, ""),
        opt(
            effective(&|r| r.effective.python_version.clone()),
            &rec.src_log,
            "",
        ),
        match py {
            Ok((f, src)) => Item::found(f.python.clone(), src.clone()),
            Err(e) => not_asked(e),
        },
    ]);
    let executable = match py {
        Ok((f, src)) => opt(f.executable.clone(), src, "the Python did not say"),
        Err(e) => not_asked(e),
    };
    let torch = Item::first([
        opt(rec.stats("pytorch_version"), &rec.src_stats, ""),
        opt(
            effective(&|r| r.effective.pytorch_version.clone()),
            &rec.src_log,
            "",
        ),
        py_item(&|f| f.package("torch").map(str::to_string), "torch"),
    ]);
    let torch_cuda = Item::first([
        match py {
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
            torch
                .text()
                .as_deref()
                .and_then(torch_build_from_version)
                .map(|b| b.to_string()),
            "the torch version's local suffix (+cuXYZ)",
            "the torch version names no CUDA build",
        ),
    ]);
    let package = |name: &str, logged: Option<String>| {
        Item::first([
            opt(
                rec.record.and_then(|r| stats_package(r, name)),
                &rec.src_stats,
                "",
            ),
            opt(logged, &rec.src_log, ""),
            py_item(&|f| f.package(name).map(str::to_string), name),
        ])
    };
    PythonFacts {
        python,
        executable,
        torch_cuda,
        torch,
        comfy_aimdo: package(
            "comfy-aimdo",
            effective(&|r| r.effective.comfy_aimdo_version.clone()),
        ),
        comfy_kitchen: package(
            "comfy-kitchen",
            effective(&|r| r.effective.comfy_kitchen_version.clone()),
        ),
        comfyui_frontend: package(
            "comfyui-frontend-package",
            rec.log
                .and_then(|l| log_value(l, "ComfyUI frontend version:")),
        ),
    }
}

/// How ComfyUI was started: the launcher, the command line, the allowlisted environment.
struct LaunchFacts {
    launcher: Item<String>,
    command: Item<String>,
    env: Item<Variables>,
}

fn launch_facts(rec: &Recorded, inp: &Inputs, process_env: Vec<(String, String)>) -> LaunchFacts {
    let launcher = match &inp.launcher {
        Some((line, src)) => Item::found(line.clone(), src.clone()),
        None => {
            Item::missing("no launcher was given (the runs used the flags on the command line)")
        }
    };
    let command = match rec.record {
        Some(r) => Item::found(
            format!("python {}", shell_words(&r.argv)),
            format!("record.json of {}", rec.label),
        ),
        None => Item::missing("no run was recorded"),
    };
    // Allowlisted variables only: the launcher's, then this process's.
    let mut env = Variables::new();
    let mut sources = Vec::new();
    let launcher_env = inp
        .launcher_env
        .iter()
        .filter(|(k, _)| env_allowed(k))
        .map(|(k, v)| (k.clone(), v.clone(), "set by the launcher"));
    let process = process_env
        .into_iter()
        .map(|(k, v)| (k, v, "environment when the report was made"));
    for (k, v, source) in launcher_env.chain(process) {
        if let std::collections::btree_map::Entry::Vacant(e) = env.entry(k) {
            e.insert(v);
            if !sources.contains(&source) {
                sources.push(source);
            }
        }
    }
    let env = Item::found(
        env,
        if sources.is_empty() {
            "none of the allowlisted variables is set".to_string()
        } else {
            sources.join("; ")
        },
    );
    LaunchFacts {
        launcher,
        command,
        env,
    }
}

pub(crate) use crate::text::shell_words;

#[cfg(test)]
mod tests;
