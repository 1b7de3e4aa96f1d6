//! The ComfyUI probe: polls `/system_stats` of a running ComfyUI. Its figures are CUDA's
//! view from inside ComfyUI's own context (plus torch's cache), at no VRAM cost to us.

use super::poller::Poller;
use super::probe::{Context, Probe, SeriesDef, Unavailable, to_i64};
use super::series;
use serde_json::Value;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// ComfyUI is polled at most this often: each request takes its GIL for a moment, and the
/// figures only move when models load or unload.
pub const MIN_PERIOD: Duration = Duration::from_millis(250);

/// How long one request may take before the poll counts as failed.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Columns per device, in this order.
const VRAM_TOTAL: usize = 0;
const VRAM_FREE: usize = 1;
const TORCH_TOTAL: usize = 2;
const TORCH_FREE: usize = 3;
const PER_DEVICE: usize = 4;

/// One entry of `/system_stats` `devices`. All figures are bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComfyDevice {
    /// torch's index (`cuda:N`); `None` for the CPU device.
    pub index: Option<u32>,
    /// `cuda`, `cpu`, `mps`, `xpu`, …
    pub kind: String,
    /// e.g. `cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync`.
    pub name: String,
    /// CUDA's total (`mem_get_info`).
    pub vram_total: Option<u64>,
    /// CUDA's free plus torch's reserved-but-inactive memory.
    pub vram_free: Option<u64>,
    /// What torch's caching allocator has reserved.
    pub torch_vram_total: Option<u64>,
    /// Reserved by torch but not in use (reusable without asking CUDA).
    pub torch_vram_free: Option<u64>,
}

/// Reads the devices out of a `/system_stats` body (v0.3.64 and v0.38 shapes; `fixtures/captures/http/system_stats.json`).
pub fn parse_system_stats(body: &str) -> Result<Vec<ComfyDevice>, String> {
    let v: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let devices = v
        .get("devices")
        .and_then(Value::as_array)
        .ok_or("no `devices` list")?;
    let num = |d: &Value, k: &str| d.get(k).and_then(Value::as_u64);
    Ok(devices
        .iter()
        .map(|d| ComfyDevice {
            index: d
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| u32::try_from(i).ok()),
            kind: d
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            name: d
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            vram_total: num(d, "vram_total"),
            vram_free: num(d, "vram_free"),
            torch_vram_total: num(d, "torch_vram_total"),
            torch_vram_free: num(d, "torch_vram_free"),
        })
        .collect())
}

/// The GPU model inside ComfyUI's device name: `cuda:0 NVIDIA X : cudaMallocAsync` → `NVIDIA X`.
pub fn model_name(comfy_name: &str) -> &str {
    let s = comfy_name.trim();
    let s = match s.split_once(' ') {
        Some((first, rest)) if first.contains(':') => rest,
        _ => s,
    };
    s.rsplit_once(" : ").map_or(s, |(model, _)| model).trim()
}

/// Which NVML index a ComfyUI device is. torch numbers devices as CUDA does (fastest first,
/// after `CUDA_VISIBLE_DEVICES`), NVML by PCI bus, so names decide; among identical cards the
/// same index is assumed. `None` for the CPU device (its "VRAM" is system RAM)
/// and for a GPU NVML does not list.
pub fn map_device(dev: &ComfyDevice, nvml: &[(u32, Option<String>)]) -> Option<u32> {
    let index = dev.index?;
    if dev.kind == "cpu" {
        return None;
    }
    if nvml.is_empty() {
        return Some(index);
    }
    let model = model_name(&dev.name);
    let same: Vec<u32> = nvml
        .iter()
        .filter(|(_, n)| n.as_deref() == Some(model))
        .map(|(i, _)| *i)
        .collect();
    match same.as_slice() {
        [] => None,
        [one] => Some(*one),
        many => Some(if many.contains(&index) {
            index
        } else {
            many[0]
        }),
    }
}

/// `http://host:port/system_stats` from what a user or the launcher gives.
pub fn system_stats_url(base: &str) -> Result<String, String> {
    let b = base.trim().trim_end_matches('/');
    if b.is_empty() {
        return Err("empty ComfyUI URL".into());
    }
    if b.starts_with("https://") {
        return Err(format!(
            "{b}: https is not supported; ComfyUI is polled on its local http address"
        ));
    }
    let b = if b.starts_with("http://") {
        b.to_string()
    } else if b.contains("://") {
        return Err(format!("{b}: not an http:// URL"));
    } else {
        format!("http://{b}")
    };
    Ok(format!("{b}/system_stats"))
}

type Reading = Result<Vec<ComfyDevice>, String>;

/// The HTTP client for polling: a short timeout, and no proxy (ComfyUI is on this machine;
/// a proxy from the environment must not be asked).
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(TIMEOUT))
        .proxy(None)
        .build()
        .into()
}

/// One poll: GET `url` (a `/system_stats` URL) and read its devices.
pub fn fetch(agent: &ureq::Agent, url: &str) -> Reading {
    let mut response = agent.get(url).call().map_err(|e| e.to_string())?;
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())?;
    parse_system_stats(&body)
}

/// Polls ComfyUI on its own thread once a URL is known.
pub struct ComfyProbe {
    url: Arc<Mutex<Option<String>>>,
    poller: Option<Poller<(String, Reading)>>,
    period: Duration,
    /// NVML index per column group.
    slots: Vec<u32>,
    nvml: Vec<(u32, Option<String>)>,
    series: Vec<SeriesDef>,
    answered: bool,
    /// Set by the poller on any answer, even one a later error replaced before a sample
    /// took it (a short run: ComfyUI answered, then was stopped before the next sample).
    polled_answer: Arc<std::sync::atomic::AtomicBool>,
    last_error: Option<(String, String)>,
    pending: Vec<Unavailable>,
    cpu_noted: bool,
    unmapped_noted: Vec<String>,
}

impl ComfyProbe {
    /// Columns for every NVML device (or `gpu0` without NVML); polling starts with a URL.
    pub fn new(nvml: Vec<(u32, Option<String>)>, interval: Duration) -> ComfyProbe {
        let slots: Vec<u32> = if nvml.is_empty() {
            vec![0]
        } else {
            nvml.iter().map(|(i, _)| *i).collect()
        };
        let series = slots
            .iter()
            .flat_map(|i| {
                [
                    SeriesDef::bytes(series::gpu(*i, series::COMFY_VRAM_TOTAL)),
                    SeriesDef::bytes(series::gpu(*i, series::COMFY_VRAM_FREE)),
                    SeriesDef::bytes(series::gpu(*i, series::COMFY_TORCH_VRAM_TOTAL)),
                    SeriesDef::bytes(series::gpu(*i, series::COMFY_TORCH_VRAM_FREE)),
                ]
            })
            .collect();
        ComfyProbe {
            url: Arc::new(Mutex::new(None)),
            poller: None,
            period: interval.max(MIN_PERIOD),
            slots,
            nvml,
            series,
            answered: false,
            polled_answer: Arc::default(),
            last_error: None,
            pending: Vec::new(),
            cpu_noted: false,
            unmapped_noted: Vec::new(),
        }
    }

    fn start_poller(&mut self) {
        if self.poller.is_some() {
            return;
        }
        let url = Arc::clone(&self.url);
        let answered = Arc::clone(&self.polled_answer);
        let agent = agent();
        let poll = move || {
            let target = url.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
            let reading = fetch(&agent, &target);
            if reading.is_ok() {
                answered.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Some((target, reading))
        };
        match Poller::spawn("vrambisect-comfy", self.period, false, poll) {
            Ok(p) => self.poller = Some(p),
            Err(e) => self
                .pending
                .push(Unavailable::new("comfy", format!("no poller thread: {e}"))),
        }
    }
}

impl Probe for ComfyProbe {
    fn name(&self) -> &'static str {
        "comfy"
    }

    fn series(&self) -> &[SeriesDef] {
        &self.series
    }

    fn sample(&mut self, _ctx: &Context<'_>, out: &mut [Option<i64>]) {
        let Some((url, reading)) = self.poller.as_ref().and_then(Poller::take) else {
            return;
        };
        let devices = match reading {
            Ok(d) => d,
            Err(e) => {
                self.last_error = Some((url, e));
                return;
            }
        };
        self.answered = true;
        for d in &devices {
            let Some(index) = map_device(d, &self.nvml) else {
                if d.kind == "cpu" || d.index.is_none() {
                    if !self.cpu_noted {
                        self.cpu_noted = true;
                        self.pending.push(Unavailable::new(
                            "comfy",
                            "ComfyUI runs on the CPU: its VRAM figures are system RAM and \
                             are not recorded",
                        ));
                    }
                } else if !self.unmapped_noted.contains(&d.name) {
                    self.unmapped_noted.push(d.name.clone());
                    self.pending.push(Unavailable::new(
                        "comfy",
                        format!("ComfyUI's device '{}' matches no GPU NVML lists", d.name),
                    ));
                }
                continue;
            };
            let Some(slot) = self.slots.iter().position(|&s| s == index) else {
                continue;
            };
            let cols = &mut out[slot * PER_DEVICE..(slot + 1) * PER_DEVICE];
            cols[VRAM_TOTAL] = d.vram_total.map(to_i64);
            cols[VRAM_FREE] = d.vram_free.map(to_i64);
            cols[TORCH_TOTAL] = d.torch_vram_total.map(to_i64);
            cols[TORCH_FREE] = d.torch_vram_free.map(to_i64);
        }
    }

    fn take_unavailable(&mut self) -> Vec<Unavailable> {
        std::mem::take(&mut self.pending)
    }

    fn final_unavailable(&mut self) -> Vec<Unavailable> {
        // A last look: the final poll may have landed after the last sample.
        let answered = self.answered
            || self
                .polled_answer
                .load(std::sync::atomic::Ordering::Relaxed);
        match (&self.last_error, answered) {
            (Some((url, e)), false) => vec![Unavailable::new(
                "comfy",
                format!("ComfyUI never answered at {url}: {e}"),
            )],
            _ => Vec::new(),
        }
    }

    fn set_comfy_url(&mut self, url: &str) {
        match system_stats_url(url) {
            Ok(u) => {
                *self.url.lock().unwrap_or_else(|e| e.into_inner()) = Some(u);
                self.start_poller();
            }
            Err(e) => self.pending.push(Unavailable::new("comfy", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_a_later_error_replaced_is_still_an_answer() {
        let mut probe = ComfyProbe::new(vec![], Duration::from_millis(100));
        probe.last_error = Some((
            "http://127.0.0.1:1/system_stats".into(),
            "io: Connection reset by peer".into(),
        ));
        let said = probe.final_unavailable();
        assert!(
            said[0].reason.starts_with("ComfyUI never answered at"),
            "{said:?}"
        );
        // The poller saw an answer before ComfyUI was stopped; no sample took it.
        probe
            .polled_answer
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(probe.final_unavailable().is_empty());
    }

    fn gpu(index: u32, name: &str) -> ComfyDevice {
        ComfyDevice {
            index: Some(index),
            kind: "cuda".into(),
            name: name.into(),
            vram_total: None,
            vram_free: None,
            torch_vram_total: None,
            torch_vram_free: None,
        }
    }

    #[test]
    fn the_captured_cpu_body_parses() {
        let body = include_str!("../../fixtures/captures/http/system_stats.json");
        let devices = parse_system_stats(body).unwrap();
        assert_eq!(devices.len(), 1);
        let d = &devices[0];
        assert_eq!(d.kind, "cpu");
        assert_eq!(d.index, None);
        assert_eq!(d.vram_total, Some(25276510208));
        assert_eq!(d.torch_vram_free, Some(24126025728));
        // CPU mode: never recorded as GPU memory.
        assert_eq!(
            map_device(d, &[(0, Some("NVIDIA GeForce RTX 4090".into()))]),
            None
        );
    }

    #[test]
    fn bad_bodies() {
        assert!(
            parse_system_stats("<html>")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(parse_system_stats("{}").unwrap_err().contains("devices"));
    }

    #[test]
    fn model_names() {
        let cases = [
            (
                "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync",
                "NVIDIA GeForce RTX 4090",
            ),
            ("cuda:1 NVIDIA RTX A6000 : native", "NVIDIA RTX A6000"),
            ("NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 3060"),
            ("cpu", "cpu"),
        ];
        for (name, want) in cases {
            assert_eq!(model_name(name), want, "{name}");
        }
    }

    #[test]
    fn devices_map_by_name_then_index() {
        let two = vec![
            (0, Some("NVIDIA GeForce RTX 3060".to_string())),
            (1, Some("NVIDIA GeForce RTX 4090".to_string())),
        ];
        let twins = vec![
            (0, Some("NVIDIA GeForce RTX 4090".to_string())),
            (1, Some("NVIDIA GeForce RTX 4090".to_string())),
        ];
        type Case<'a> = (ComfyDevice, &'a [(u32, Option<String>)], Option<u32>);
        let cases: &[Case] = &[
            // CUDA's fastest-first order puts the 4090 first; NVML's bus order second.
            (
                gpu(0, "cuda:0 NVIDIA GeForce RTX 4090 : cudaMallocAsync"),
                &two,
                Some(1),
            ),
            (
                gpu(1, "cuda:1 NVIDIA GeForce RTX 3060 : native"),
                &two,
                Some(0),
            ),
            (
                gpu(1, "cuda:1 NVIDIA GeForce RTX 4090 : native"),
                &twins,
                Some(1),
            ),
            (gpu(0, "cuda:0 AMD Radeon RX 7900 XTX : native"), &two, None),
            (gpu(2, "cuda:2 whatever : native"), &[], Some(2)),
        ];
        for (dev, nvml, want) in cases {
            assert_eq!(map_device(dev, nvml), *want, "{}", dev.name);
        }
    }

    #[test]
    fn urls() {
        let ok = [
            (
                "http://127.0.0.1:8188",
                "http://127.0.0.1:8188/system_stats",
            ),
            (
                "http://127.0.0.1:8188/",
                "http://127.0.0.1:8188/system_stats",
            ),
            ("127.0.0.1:8188", "http://127.0.0.1:8188/system_stats"),
            (
                "localhost:8188/api",
                "http://localhost:8188/api/system_stats",
            ),
        ];
        for (base, want) in ok {
            assert_eq!(system_stats_url(base).unwrap(), want);
        }
        for bad in ["", "https://x:1", "ftp://x"] {
            assert!(system_stats_url(bad).is_err(), "{bad}");
        }
    }
}
