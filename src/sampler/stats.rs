//! Per-series peaks and minima, derived series, and what event marks tell about memory
//! (RAM not returned after a prompt). Pure: fed rows, no I/O.

use super::probe::SeriesDef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Running minimum, maximum and last value of one series, in constant memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Acc {
    pub count: u64,
    pub min: i64,
    pub max: i64,
    pub last: i64,
    /// When the minimum and maximum were first reached, µs since the sampler started.
    pub at_min_us: u64,
    pub at_max_us: u64,
}

impl Acc {
    pub(crate) fn push(&mut self, v: i64, t_us: u64) {
        if self.count == 0 || v < self.min {
            self.min = v;
            self.at_min_us = t_us;
        }
        if self.count == 0 || v > self.max {
            self.max = v;
            self.at_max_us = t_us;
        }
        self.last = v;
        self.count += 1;
    }

    pub(crate) fn last(&self) -> Option<i64> {
        (self.count > 0).then_some(self.last)
    }
}

/// Folds one row into the accumulators (same order as the columns).
pub(crate) fn accumulate(accs: &mut [Acc], row: &[Option<i64>], t_us: u64) {
    for (acc, v) in accs.iter_mut().zip(row) {
        if let Some(v) = v {
            acc.push(*v, t_us);
        }
    }
}

/// NVML's "used" minus CUDA's "used" on one device: the disagreement behind ComfyUI's
/// `--disable-nvml-pressure` (Dynamic VRAM measures pressure with NVML unless told to use
/// CUDA). Computed from the free figures, `cuda_free - nvml_free`, because free means the
/// same in NVML v1 and v2 while `used` does not (v1 counts the driver's reserve, and the v2
/// documentation has said both). CUDA's free comes from inside ComfyUI when it answered
/// (`vram_free - torch_vram_free`: ComfyUI adds torch's cache to CUDA's free), else from the
/// tool's own context.
pub(crate) fn nvml_minus_cuda(
    nvml_free: Option<i64>,
    own_cuda_free: Option<i64>,
    comfy_vram_free: Option<i64>,
    comfy_torch_free: Option<i64>,
) -> Option<i64> {
    let nvml_free = nvml_free?;
    let comfy = comfy_vram_free
        .zip(comfy_torch_free)
        .map(|(v, t)| v.saturating_sub(t));
    let cuda_free = comfy.or(own_cuda_free)?;
    Some(cuda_free.saturating_sub(nvml_free))
}

/// Where each derived column reads from; planned once from the series names.
#[derive(Debug, Clone, Default)]
pub(crate) struct Derived {
    minus: Vec<MinusPlan>,
}

#[derive(Debug, Clone)]
struct MinusPlan {
    out: usize,
    nvml_free: usize,
    own_cuda_free: Option<usize>,
    comfy_vram_free: Option<usize>,
    comfy_torch_free: Option<usize>,
}

impl Derived {
    /// Plans the derived columns for `series`; they are numbered after it. Returns the plan
    /// and the new columns' definitions.
    pub(crate) fn plan(series: &[SeriesDef]) -> (Derived, Vec<SeriesDef>) {
        let find = |name: &str| series.iter().position(|s| s.name == name);
        let mut defs = Vec::new();
        let mut minus = Vec::new();
        for s in series {
            use super::series::{
                COMFY_TORCH_VRAM_FREE, COMFY_VRAM_FREE, CUDA_FREE, NVML_FREE, NVML_MINUS_CUDA,
            };
            let Some(gpu) = s
                .name
                .strip_suffix(NVML_FREE)
                .and_then(|g| g.strip_suffix('.'))
            else {
                continue;
            };
            let own_cuda_free = find(&format!("{gpu}.{CUDA_FREE}"));
            let comfy_vram_free = find(&format!("{gpu}.{COMFY_VRAM_FREE}"));
            let comfy_torch_free = find(&format!("{gpu}.{COMFY_TORCH_VRAM_FREE}"));
            if own_cuda_free.is_none() && comfy_vram_free.is_none() {
                continue;
            }
            minus.push(MinusPlan {
                out: series.len() + defs.len(),
                nvml_free: find(&s.name).expect("listed"),
                own_cuda_free,
                comfy_vram_free,
                comfy_torch_free,
            });
            defs.push(SeriesDef::bytes(format!("{gpu}.{NVML_MINUS_CUDA}")));
        }
        (Derived { minus }, defs)
    }

    /// Fills the derived columns of `row` (which holds every column).
    pub(crate) fn compute(&self, row: &mut [Option<i64>]) {
        for p in &self.minus {
            let get = |i: Option<usize>| i.and_then(|i| row[i]);
            row[p.out] = nvml_minus_cuda(
                row[p.nvml_free],
                get(p.own_cuda_free),
                get(p.comfy_vram_free),
                get(p.comfy_torch_free),
            );
        }
    }
}

/// Whether a mark records this series' value around it: the memory figures that questions
/// about a prompt need (RAM kept, VRAM kept), not every column. A mark costs memory for
/// each (about 1 KB with one GPU), and a run may hold thousands.
pub(crate) fn is_mark_series(name: &str) -> bool {
    matches!(
        name,
        "tree.rss"
            | "tree.rss_anon"
            | "tree.rss_file"
            | "tree.swap"
            | "ram.available"
            | "swap.used"
    ) || name.ends_with(".tree.used")
        || name.ends_with(".nvml.used")
}

/// An event mark (node started, prompt finished, …) on the sampler's clock, with the memory
/// figures of the last sample before it and of the first sample after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mark {
    pub t_ms: f64,
    pub label: String,
    /// The latest value of each mark series at the moment of the mark. Names are shared
    /// between marks (`Arc<str>`): a run may hold thousands of marks.
    #[serde(
        serialize_with = "named_values",
        deserialize_with = "read_named_values"
    )]
    pub before: BTreeMap<Arc<str>, i64>,
    /// The first value after the mark (empty until the next sample).
    #[serde(
        serialize_with = "named_values",
        deserialize_with = "read_named_values"
    )]
    pub after: BTreeMap<Arc<str>, i64>,
}

/// Reads what [`named_values`] wrote.
fn read_named_values<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<Arc<str>, i64>, D::Error> {
    let plain = BTreeMap::<String, i64>::deserialize(d)?;
    Ok(plain.into_iter().map(|(k, v)| (Arc::from(k), v)).collect())
}

/// Writes a mark's figures as a JSON object (serde has no `Arc<str>` without its `rc`
/// feature).
fn named_values<S: serde::Serializer>(
    values: &BTreeMap<Arc<str>, i64>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(values.iter().map(|(k, v)| (&**k, v)))
}

/// ComfyUI's resident memory (`tree.rss`) in the last sample before the last mark called
/// `label`: the level at that moment. `None` when not sampled, or when the process tree was
/// already gone (a reading of 0).
pub fn rss_at(marks: &[Mark], label: &str) -> Option<i64> {
    let m = marks.iter().rev().find(|m| m.label == label)?;
    m.before.get("tree.rss").copied().filter(|v| *v > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::probe::Unit;

    #[test]
    fn peaks_and_minima_with_times() {
        let mut a = Acc::default();
        assert_eq!(a.last(), None);
        for (t, v) in [(0, 5), (10, 9), (20, 1), (30, 9), (40, 1), (50, 4)] {
            a.push(v, t);
        }
        assert_eq!(
            (a.min, a.at_min_us),
            (1, 20),
            "first time the minimum was reached"
        );
        assert_eq!((a.max, a.at_max_us), (9, 10));
        assert_eq!(a.last(), Some(4));
        assert_eq!(a.count, 6);
    }

    #[test]
    fn missing_values_are_skipped() {
        let mut accs = vec![Acc::default(); 2];
        accumulate(&mut accs, &[Some(3), None], 1);
        accumulate(&mut accs, &[None, Some(-2)], 2);
        assert_eq!(accs[0].count, 1);
        assert_eq!((accs[1].count, accs[1].min), (1, -2));
    }

    #[test]
    fn nvml_minus_cuda_from_tables() {
        const G: i64 = 1 << 30;
        // (nvml free, own cuda free, comfy vram_free, comfy torch_free) -> want
        type Case = (
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
            Option<i64>,
        );
        let cases: &[Case] = &[
            // Both agree.
            (Some(10 * G), Some(10 * G), None, None, Some(0)),
            // NVML sees 1 GiB more in use than CUDA (e.g. memory another container holds).
            (Some(9 * G), Some(10 * G), None, None, Some(G)),
            // ComfyUI's view wins when present; torch's cache is taken out of vram_free.
            (Some(9 * G), Some(3 * G), Some(12 * G), Some(2 * G), Some(G)),
            // Only ComfyUI.
            (Some(9 * G), None, Some(9 * G), Some(0), Some(0)),
            // ComfyUI without torch_vram_free: fall back to the own context.
            (Some(9 * G), Some(9 * G), Some(12 * G), None, Some(0)),
            // No CUDA view, or no NVML: nothing.
            (Some(9 * G), None, None, None, None),
            (None, Some(G), Some(G), Some(0), None),
            // CUDA may see less free than NVML: negative.
            (Some(10 * G), Some(9 * G), None, None, Some(-G)),
        ];
        for (i, (nf, own, cv, ct, want)) in cases.iter().enumerate() {
            assert_eq!(nvml_minus_cuda(*nf, *own, *cv, *ct), *want, "case {i}");
        }
    }

    #[test]
    fn derived_columns_are_planned_per_device() {
        let names = [
            "gpu0.nvml.used",
            "gpu0.nvml.free",
            "gpu1.nvml.free",
            "gpu0.cuda.free",
            "gpu0.comfy.vram_free",
            "gpu0.comfy.torch_vram_free",
            "ram.available",
        ];
        let series: Vec<SeriesDef> = names.iter().map(|n| SeriesDef::bytes(*n)).collect();
        let (d, defs) = Derived::plan(&series);
        // gpu1 has no CUDA view at all: no derived column for it.
        assert_eq!(
            defs,
            vec![SeriesDef::new("gpu0.nvml_minus_cuda", Unit::Bytes)]
        );
        let mut row = vec![None; series.len() + defs.len()];
        row[1] = Some(100);
        row[3] = Some(130);
        d.compute(&mut row);
        assert_eq!(row[7], Some(30));
        row[4] = Some(150);
        row[5] = Some(10);
        d.compute(&mut row);
        assert_eq!(row[7], Some(40));
    }

    fn mark(t_ms: f64, label: &str, before: &[(&str, i64)], after: &[(&str, i64)]) -> Mark {
        let map = |kv: &[(&str, i64)]| kv.iter().map(|(k, v)| (Arc::from(*k), *v)).collect();
        Mark {
            t_ms,
            label: label.into(),
            before: map(before),
            after: map(after),
        }
    }

    #[test]
    fn rss_at_marks() {
        const M: i64 = 1 << 20;
        let marks = vec![
            mark(10.0, "prompt 1 start", &[("tree.rss", 500 * M)], &[]),
            mark(
                90.0,
                "prompt 1 end",
                &[("tree.rss", 2000 * M)],
                &[("tree.rss", 1800 * M)],
            ),
            mark(150.0, "prompt 2 end", &[("tree.rss", 1700 * M)], &[]),
            // The tree was gone by then: no reading, not zero.
            mark(160.0, "prompt 3 end", &[("tree.rss", 0)], &[]),
            mark(170.0, "prompt 1 end", &[("tree.rss", 2100 * M)], &[]),
        ];
        // The last sample before the mark, and the last mark of that name.
        assert_eq!(rss_at(&marks, "prompt 1 start"), Some(500 * M));
        assert_eq!(rss_at(&marks, "prompt 1 end"), Some(2100 * M));
        assert_eq!(rss_at(&marks, "prompt 2 end"), Some(1700 * M));
        assert_eq!(rss_at(&marks, "prompt 3 end"), None);
        assert_eq!(rss_at(&marks, "prompt 9 end"), None);
        let no_tree = vec![mark(1.0, "a", &[("ram.available", 1)], &[])];
        assert_eq!(rss_at(&no_tree, "a"), None);
    }

    #[test]
    fn mark_series() {
        for yes in [
            "tree.rss",
            "ram.available",
            "swap.used",
            "gpu0.tree.used",
            "gpu1.nvml.used",
        ] {
            assert!(is_mark_series(yes), "{yes}");
        }
        for no in [
            "gpu0.pcie.rx_kbps",
            "gpu0.comfy.vram_free",
            "gpu0.others.used",
            "gpu0.nvml.free",
            "ram.total",
            "tree.procs",
        ] {
            assert!(!is_mark_series(no), "{no}");
        }
    }
}
