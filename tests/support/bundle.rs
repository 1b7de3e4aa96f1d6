//! Helpers for the `report` and `doctor` tests: the fake ComfyUI installed at a chosen path
//! (inside a fake home folder, so path redaction can be checked), an idle fake GPU state, a
//! fake site-packages with torch and comfy-aimdo metadata, and reading a zip back.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The fake ComfyUI copied to a folder of the test's choosing; its processes are killed
/// when the value is dropped.
pub struct Installed {
    pub dir: PathBuf,
}

impl Installed {
    /// Installs the stand-in at `dir` as ComfyUI `version` with `scenario` (`null`: none).
    pub fn new(dir: &Path, version: &str, scenario: serde_json::Value) -> Installed {
        crate::support::comfy::install_fake(dir, version, &scenario);
        Installed {
            dir: dir.to_path_buf(),
        }
    }

    pub fn gpu_state(&self) -> PathBuf {
        self.dir.join("gpu-state.txt")
    }

    /// An idle RTX 4090 with `others` holding VRAM (see `write_idle_gpu_state`).
    pub fn write_idle_gpu_state(&self, others: &[(u32, u64)]) {
        crate::support::comfy::write_idle_gpu_state(&self.gpu_state(), others);
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        for pid in crate::support::comfy::processes_in(&self.dir) {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// Every file of a zip, by name.
pub fn unzip(path: &Path) -> BTreeMap<String, Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut zip = zip::ZipArchive::new(file).unwrap();
    let mut out = BTreeMap::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).unwrap();
        let name = f.name().unwrap().to_string();
        out.insert(name, bytes);
    }
    out
}

/// A site-packages folder with the metadata of torch (a CUDA 12.8 build), comfy-aimdo and
/// comfy-kitchen. Their `__init__.py` raise: whatever reads them must not import them.
pub fn fake_site_packages(dir: &Path) {
    let write = |rel: &str, text: &str| {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    let boom = "raise ImportError('imported by a check that must not import it')\n";
    write("torch/__init__.py", boom);
    write(
        "torch/version.py",
        "from typing import Optional\n__version__ = '2.8.0+cu128'\ncuda: Optional[str] = '12.8'\nhip: Optional[str] = None\n",
    );
    write(
        "torch-2.8.0+cu128.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: torch\nVersion: 2.8.0+cu128\n",
    );
    write("comfy_aimdo/__init__.py", boom);
    for m in ["control", "host_buffer", "model_vbar", "vram_buffer"] {
        write(&format!("comfy_aimdo/{m}.py"), "");
    }
    write(
        "comfy_aimdo-0.5.5.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: comfy-aimdo\nVersion: 0.5.5\n",
    );
    write(
        "comfy_kitchen-0.2.36.dist-info/METADATA",
        "Metadata-Version: 2.1\nName: comfy-kitchen\nVersion: 0.2.36\n",
    );
}

/// `vrambisect report DIR --output ZIP`, which must succeed: its output and the zip's files.
pub fn report_to(dir: &Path, zip: &Path) -> (std::process::Output, BTreeMap<String, Vec<u8>>) {
    let out = crate::support::vrambisect()
        .arg("report")
        .arg(dir)
        .arg("--output")
        .arg(zip)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files = unzip(zip);
    (out, files)
}
