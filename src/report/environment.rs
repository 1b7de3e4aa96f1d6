//! The environment as a table for ISSUE.md: one row per fact, with where it came from.

use crate::machine::{Environment, Gpu, Item};

// ---------------------------------------------------------------------------------------
// As a table

/// One row of the environment table: what, its value, where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub item: String,
    pub value: String,
    pub source: String,
}

use crate::text::{gib, mib};

/// One row: the item's value as `show` writes it, or a dash and why it is missing.
fn item_row<T>(item: &str, it: &Item<T>, show: &dyn Fn(&T) -> String) -> Row {
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

/// A list in a cell: "none" (or `empty`) when it is empty.
fn list_or(list: Vec<String>, empty: &str, sep: &str) -> String {
    if list.is_empty() {
        empty.into()
    } else {
        list.join(sep)
    }
}

/// The environment as rows for people (ISSUE.md, `doctor`).
pub(crate) fn rows(env: &Environment) -> Vec<Row> {
    let mut out = Vec::new();
    let text = |v: &String| v.clone();
    out.push(item_row("OS", &env.os, &text));
    out.push(item_row("Kernel", &env.kernel, &text));
    out.push(item_row("CPU", &env.cpu, &text));
    out.push(item_row("RAM", &env.ram_bytes, &|b| gib(*b)));
    out.push(item_row("Swap", &env.swap_bytes, &|b| match *b {
        0 => "none".into(),
        b => gib(b),
    }));
    out.extend(gpu_rows(&env.gpus));
    out.push(item_row("NVIDIA driver", &env.nvidia_driver, &text));
    out.push(item_row("CUDA (driver supports)", &env.cuda_driver, &text));
    out.push(item_row(
        "VRAM held by other processes (peak)",
        &env.other_processes_vram_bytes,
        &|b| mib(*b),
    ));
    out.push(item_row(
        "GPU processes now",
        &env.gpu_processes_now,
        &|list| {
            let list = list.iter().map(|p| {
                format!(
                    "{}pid {} on GPU {}: {}",
                    p.name
                        .as_ref()
                        .map(|n| format!("{n}, "))
                        .unwrap_or_default(),
                    p.pid,
                    p.gpu,
                    p.used_bytes.map(mib).unwrap_or_else(|| "n/a".into())
                )
            });
            list_or(list.collect(), "none", "; ")
        },
    ));
    out.push(item_row("ComfyUI version", &env.comfyui_version, &text));
    out.push(item_row(
        "ComfyUI git",
        &env.comfyui_git,
        &|g| match &g.branch {
            Some(b) => format!("{} ({b})", g.commit),
            None => format!("{} (detached)", g.commit),
        },
    ));
    out.push(item_row("ComfyUI folder", &env.comfyui_folder, &text));
    out.push(item_row("Python", &env.python, &text));
    out.push(item_row("Python executable", &env.python_executable, &text));
    out.push(item_row("PyTorch", &env.torch, &text));
    out.push(item_row("PyTorch CUDA build", &env.torch_cuda, &text));
    out.push(item_row("comfy-aimdo", &env.comfy_aimdo, &text));
    out.push(item_row("comfy-kitchen", &env.comfy_kitchen, &text));
    out.push(item_row("ComfyUI frontend", &env.comfyui_frontend, &text));
    out.push(item_row("Custom nodes", &env.custom_nodes, &|nodes| {
        let list: Vec<String> = nodes
            .iter()
            .map(|n| match &n.commit {
                Some(c) => format!("{}@{c}", n.name),
                None => n.name.clone(),
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
    out.extend(env_rows(env));
    out
}

/// A row per GPU (its name, VRAM, what is free now, its PCIe link), or one row saying why
/// none is known.
fn gpu_rows(gpus: &Item<Vec<Gpu>>) -> Vec<Row> {
    let (list, source) = match gpus {
        Item::Found { value, source } => (value, source),
        Item::Missing { missing } => {
            return vec![Row {
                item: "GPU".into(),
                value: "—".into(),
                source: format!("missing: {missing}"),
            }];
        }
    };
    list.iter()
        .map(|g| {
            let mut parts = vec![g.name.clone().unwrap_or_else(|| "unnamed GPU".into())];
            if let Some(t) = g.vram_total_bytes {
                let mut vram = format!("{} VRAM", gib(t));
                if let Some(Some(r)) = g.vram_reserved_bytes {
                    vram.push_str(&format!(" ({} reserved by the driver)", mib(r)));
                }
                parts.push(vram);
            }
            if let Some(Some(f)) = g.vram_free_bytes {
                parts.push(format!("{} free now", gib(f)));
            }
            match &g.pcie_link {
                Some(Item::Found { value, .. }) => parts.push(format!("PCIe {value}")),
                Some(Item::Missing { missing }) => {
                    parts.push(format!("PCIe link unknown: {missing}"))
                }
                None => {}
            }
            let index = g.index.map_or_else(|| "?".into(), |i| i.to_string());
            Row {
                item: format!("GPU {index}"),
                value: parts.join(", "),
                source: source.clone(),
            }
        })
        .collect()
}

/// The environment variables: the user's, and what ComfyUI's process set itself.
fn env_rows(env: &Environment) -> Vec<Row> {
    let mut out = Vec::new();
    out.push(item_row("Environment variables", &env.env, &|vars| {
        let list = vars.iter().map(|(k, v)| format!("{k}={v}"));
        list_or(list.collect(), "none set", " ")
    }));
    if let Some(set) = &env.env_set_by_comfyui {
        out.push(item_row("Set by ComfyUI itself", set, &|vars| {
            let list = vars.iter().map(|(k, v)| match v {
                None => format!("{k} removed"),
                Some(v) => format!("{k}={v}"),
            });
            list_or(list.collect(), "nothing", " ")
        }));
    }
    out
}
