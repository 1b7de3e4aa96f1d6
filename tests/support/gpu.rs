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

/// The `cuda_alloc` example (`examples/cuda_alloc.rs`) beside the vrambisect binary under
/// test. `cargo test` builds examples with everything else; a run of only some tests does
/// not, so it is built here when missing (the outer build has finished by then).
pub fn cuda_alloc_example() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_vrambisect"));
    let path = bin.parent().unwrap().join("examples").join("cuda_alloc");
    static BUILD: std::sync::Once = std::sync::Once::new();
    BUILD.call_once(|| {
        let stale = |p: &Path| {
            let modified = |p: &Path| p.metadata().and_then(|m| m.modified()).ok();
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/cuda_alloc.rs");
            match (modified(p), modified(&src), modified(bin)) {
                (Some(t), Some(s), Some(b)) => t < s || t < b,
                _ => true,
            }
        };
        if stale(&path) {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--quiet", "--example", "cuda_alloc"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("cargo to build the cuda_alloc example");
            assert!(status.success(), "building the cuda_alloc example failed");
        }
    });
    assert!(path.is_file(), "no {}", path.display());
    path
}
