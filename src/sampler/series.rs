//! The names of the sampler's series, defined once: the probes that write them and the run
//! engine, `sample` and the report that read them all use these. Machine-wide series have a
//! fixed name; a GPU's series are `gpu{index}.{what}` (see [`gpu`]).

pub(crate) const RAM_TOTAL: &str = "ram.total";
pub(crate) const RAM_AVAILABLE: &str = "ram.available";
pub(crate) const SWAP_USED: &str = "swap.used";
/// Windows: the commit charge and its limit (RAM plus page files).
pub(crate) const COMMIT_USED: &str = "commit.used";
pub(crate) const COMMIT_LIMIT: &str = "commit.limit";
/// Windows under WDDM: the followed tree's dedicated (VRAM) and shared GPU memory, from the
/// `GPU Process Memory` performance counters (NVML has no per-process figure there).
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) const WDDM_TREE_DEDICATED: &str = "wddm.tree_dedicated";
#[cfg_attr(not(windows), allow(dead_code))]
pub(crate) const WDDM_TREE_SHARED: &str = "wddm.tree_shared";
/// Processes in the followed tree.
pub(crate) const TREE_PROCS: &str = "tree.procs";
/// The followed tree's resident memory, and its parts.
pub(crate) const TREE_RSS: &str = "tree.rss";
pub(crate) const TREE_RSS_ANON: &str = "tree.rss_anon";
pub(crate) const TREE_RSS_FILE: &str = "tree.rss_file";
pub(crate) const TREE_RSS_SHMEM: &str = "tree.rss_shmem";
pub(crate) const TREE_SWAP: &str = "tree.swap";

/// NVML's used, free and reserved memory of a GPU.
pub(crate) const NVML_USED: &str = "nvml.used";
pub(crate) const NVML_FREE: &str = "nvml.free";
pub(crate) const NVML_RESERVED: &str = "nvml.reserved";
/// VRAM held by the followed tree, by other processes, and by this tool (NVML per process).
pub(crate) const TREE_USED: &str = "tree.used";
pub(crate) const OTHERS_USED: &str = "others.used";
pub(crate) const SELF_USED: &str = "self.used";
/// CUDA's view from the tool's own context (only with `--cuda`).
pub(crate) const CUDA_USED: &str = "cuda.used";
pub(crate) const CUDA_FREE: &str = "cuda.free";
/// NVML's used minus CUDA's (derived).
pub(crate) const NVML_MINUS_CUDA: &str = "nvml_minus_cuda";
/// ComfyUI's own view, from its `/system_stats`.
pub(crate) const COMFY_VRAM_TOTAL: &str = "comfy.vram_total";
pub(crate) const COMFY_VRAM_FREE: &str = "comfy.vram_free";
pub(crate) const COMFY_TORCH_VRAM_TOTAL: &str = "comfy.torch_vram_total";
pub(crate) const COMFY_TORCH_VRAM_FREE: &str = "comfy.torch_vram_free";

/// The name of a GPU's series: `gpu(0, NVML_USED)` is `gpu0.nvml.used`.
pub(crate) fn gpu(index: u32, what: &str) -> String {
    format!("gpu{index}.{what}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn gpu_series_are_named_by_index() {
        assert_eq!(super::gpu(0, super::NVML_USED), "gpu0.nvml.used");
        assert_eq!(
            super::gpu(3, super::COMFY_VRAM_FREE),
            "gpu3.comfy.vram_free"
        );
    }
}
