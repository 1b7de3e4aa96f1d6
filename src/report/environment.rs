//! The environment as a table for ISSUE.md: one row per fact, with where it came from.

use crate::machine::{Environment, Item};
use serde_json::Value;

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
    out.extend(env_rows(env));
    out
}

/// The environment variables: the user's, and what ComfyUI's process set itself.
fn env_rows(env: &Environment) -> Vec<Row> {
    let mut out = Vec::new();
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
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
    if let Some(set) = &env.env_set_by_comfyui {
        out.push(item_row("Set by ComfyUI itself", set, &|v| {
            let list: Vec<String> = v
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| match v {
                    Value::Null => format!("{k} removed"),
                    v => format!("{k}={}", text(v)),
                })
                .collect();
            if list.is_empty() {
                "nothing".into()
            } else {
                list.join(" ")
            }
        }));
    }
    out
}
