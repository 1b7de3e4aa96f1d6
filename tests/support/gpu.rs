//! Builds the fake `libnvidia-ml.so.1` and `libcuda.so[.1]` into a folder, for one test.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A folder holding freshly built fake GPU libraries; its `fake-gpu-state` file feeds them.
pub struct FakeGpu {
    pub dir: tempfile::TempDir,
}

impl FakeGpu {
    /// Compiles both fakes with the machine's C compiler.
    pub fn build() -> FakeGpu {
        let dir = tempfile::tempdir().expect("temp dir");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fake-gpu");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        for (source, name, soname) in [
            ("fake_nvml.c", "libnvidia-ml.so.1", "libnvidia-ml.so.1"),
            ("fake_cuda.c", "libcuda.so", "libcuda.so"),
        ] {
            let status = Command::new(&cc)
                .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"])
                .arg(format!("-Wl,-soname,{soname}"))
                .arg("-o")
                .arg(dir.path().join(name))
                .arg(src.join(source))
                .status()
                .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e}"));
            assert!(status.success(), "building {source} failed");
        }
        std::fs::copy(
            dir.path().join("libcuda.so"),
            dir.path().join("libcuda.so.1"),
        )
        .unwrap();
        FakeGpu { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn nvml_path(&self) -> PathBuf {
        self.dir.path().join("libnvidia-ml.so.1")
    }

    pub fn cuda_path(&self) -> PathBuf {
        self.dir.path().join("libcuda.so")
    }

    /// The state file the libraries read when no environment variable names another.
    pub fn state_path(&self) -> PathBuf {
        self.dir.path().join("fake-gpu-state")
    }

    /// Replaces the state atomically, as the fake ComfyUI does.
    pub fn write_state(&self, text: &str) {
        let tmp = self.dir.path().join(".fake-gpu-state.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.state_path()).unwrap();
    }
}
