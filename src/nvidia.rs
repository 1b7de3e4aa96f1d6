//! NVIDIA's management library (NVML): where it is, opening it, and why that failed, as data.
//! Everything that reads the GPUs through NVML (the machine's facts, `doctor`, the GPU lock,
//! the sampler) opens it here.

use nvml_wrapper::Nvml;
use std::fmt;
use std::path::{Path, PathBuf};

/// Environment variable naming the NVML library when none is given (`--nvml-lib`).
pub const NVML_LIB_ENV: &str = "VRAMBISECT_NVML_LIB";

/// Where NVIDIA's libraries cannot exist (macOS: ComfyUI runs on Apple's MPS there), why, in
/// one line; every GPU probe says this instead of "not found".
pub(crate) const NOT_ON_THIS_OS: Option<&str> = if cfg!(target_os = "macos") {
    Some(
        "NVIDIA GPUs do not apply on macOS (ComfyUI runs on Apple's MPS there): GPU memory is not recorded, RAM is",
    )
} else {
    None
};

/// What NVML's `nvmlErrorString` says for `NVML_ERROR_LIB_RM_VERSION_MISMATCH` (18): the
/// driver's kernel module and its libraries are different versions, the usual state on
/// Linux after a driver update until the next reboot.
const NVML_VERSION_MISMATCH: &str = "Driver/library version mismatch";

/// The library to load: the one given, else `$VRAMBISECT_NVML_LIB`, else the system's
/// (`None`: the loader's search; on Windows the NVSMI folder where older drivers put it).
pub(crate) fn nvml_lib(explicit: Option<&Path>) -> Option<PathBuf> {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os(NVML_LIB_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .or_else(|| {
            if !cfg!(windows) {
                return None;
            }
            windows_nvml(
                std::env::var_os("SystemRoot").as_deref(),
                std::env::var_os("ProgramFiles").as_deref(),
                &|p| p.is_file(),
            )
        })
}

/// Where Windows keeps `nvml.dll`: System32 since driver 418 (found by the loader: `None`),
/// `NVIDIA Corporation\NVSMI` under Program Files before.
pub(crate) fn windows_nvml(
    system_root: Option<&std::ffi::OsStr>,
    program_files: Option<&std::ffi::OsStr>,
    exists: &dyn Fn(&Path) -> bool,
) -> Option<PathBuf> {
    let in_system32 = system_root
        .map(|r| Path::new(r).join("System32").join("nvml.dll"))
        .is_some_and(|p| exists(&p));
    if in_system32 {
        return None;
    }
    let nvsmi = Path::new(program_files?)
        .join("NVIDIA Corporation")
        .join("NVSMI")
        .join("nvml.dll");
    exists(&nvsmi).then_some(nvsmi)
}

/// Why NVML could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NvmlOpenError {
    /// This operating system has no NVIDIA GPUs (macOS).
    NotOnThisOs(&'static str),
    /// No library where the system keeps it: no NVIDIA driver here.
    NotInstalled,
    /// The library named could not be loaded.
    CannotLoad {
        path: PathBuf,
        error: String,
    },
    /// The library is there, its kernel driver is not loaded.
    DriverNotLoaded,
    /// The kernel module and its libraries are different versions.
    VersionMismatch,
    NoPermission,
    /// Anything else NVML said (at `nvmlInit`, or counting the GPUs).
    Other(String),
}

impl NvmlOpenError {
    /// Nothing NVIDIA on this machine (as opposed to a driver that is there and fails).
    pub(crate) fn no_nvidia_here(&self) -> bool {
        matches!(
            self,
            NvmlOpenError::NotOnThisOs(_) | NvmlOpenError::NotInstalled
        )
    }

    fn of(lib: Option<&Path>, e: nvml_wrapper::error::NvmlError) -> NvmlOpenError {
        use nvml_wrapper::error::NvmlError;
        match (e, lib) {
            (NvmlError::LibloadingError(err), Some(p)) => NvmlOpenError::CannotLoad {
                path: p.to_path_buf(),
                error: err.to_string(),
            },
            (NvmlError::LibloadingError(_), None) => NvmlOpenError::NotInstalled,
            (NvmlError::DriverNotLoaded, _) => NvmlOpenError::DriverNotLoaded,
            (NvmlError::LibRmVersionMismatch, _) => NvmlOpenError::VersionMismatch,
            (NvmlError::NoPermission, _) => NvmlOpenError::NoPermission,
            (e, _) => NvmlOpenError::Other(format!("NVML failed to start: {e}")),
        }
    }
}

/// One line for people, with NVML's own words in brackets where they say more than
/// nvml-wrapper's (which never asks NVML for its text).
impl fmt::Display for NvmlOpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NvmlOpenError::NotOnThisOs(why) => f.write_str(why),
            NvmlOpenError::NotInstalled => f.write_str(
                "the NVIDIA management library (libnvidia-ml.so.1 / nvml.dll) is not installed: no NVIDIA driver here",
            ),
            NvmlOpenError::CannotLoad { path, error } => {
                write!(f, "cannot load {}: {error}", path.display())
            }
            NvmlOpenError::DriverNotLoaded => {
                f.write_str("the NVIDIA driver is not loaded (NVML: Driver Not Loaded)")
            }
            NvmlOpenError::VersionMismatch => write!(
                f,
                "the NVIDIA kernel module and its libraries are different versions (NVML: {NVML_VERSION_MISMATCH})"
            ),
            NvmlOpenError::NoPermission => f.write_str(
                "no permission to talk to the NVIDIA driver (NVML: Insufficient Permissions)",
            ),
            NvmlOpenError::Other(e) => f.write_str(e),
        }
    }
}

/// Opens NVML: `lib`, else the system's (see [`nvml_lib`] for which `lib` to give).
pub(crate) fn open_nvml(lib: Option<&Path>) -> Result<Nvml, NvmlOpenError> {
    if let (None, Some(why)) = (lib, NOT_ON_THIS_OS) {
        return Err(NvmlOpenError::NotOnThisOs(why));
    }
    let mut builder = Nvml::builder();
    if let Some(p) = lib {
        builder.lib_path(p.as_os_str());
    }
    builder.init().map_err(|e| NvmlOpenError::of(lib, e))
}

/// Each GPU NVML sees: its index and UUID (where NVML gives one).
pub(crate) fn gpu_ids(lib: Option<&Path>) -> Result<Vec<(u32, Option<String>)>, NvmlOpenError> {
    let nvml = open_nvml(lib)?;
    let count = nvml
        .device_count()
        .map_err(|e| NvmlOpenError::Other(format!("cannot count GPUs: {e}")))?;
    Ok((0..count)
        .filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i, d.uuid().ok())))
        .collect())
}

/// `13000` → `13.0`, as `nvidia-smi` prints it.
pub(crate) fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvml_wrapper::error::NvmlError;

    #[test]
    fn nvml_on_windows_is_found_where_old_drivers_put_it() {
        use std::ffi::OsStr;
        use std::path::Path;
        let root = Some(OsStr::new("C:/Windows"));
        let pf = Some(OsStr::new("C:/Program Files"));
        let nvsmi = Path::new("C:/Program Files")
            .join("NVIDIA Corporation")
            .join("NVSMI")
            .join("nvml.dll");
        // Newer drivers: System32, which the loader searches by itself.
        assert_eq!(windows_nvml(root, pf, &|_| true), None);
        // Older drivers: only the NVSMI folder.
        let n2 = nvsmi.clone();
        assert_eq!(windows_nvml(root, pf, &move |p| p == n2), Some(nvsmi));
        // No driver at all: the loader's search, which then says it is missing.
        assert_eq!(windows_nvml(root, pf, &|_| false), None);
    }

    #[test]
    fn why_nvml_failed_is_data_and_says_it_in_one_line() {
        let e = NvmlOpenError::of(None, NvmlError::LibRmVersionMismatch);
        assert_eq!(e, NvmlOpenError::VersionMismatch);
        assert_eq!(
            e.to_string(),
            "the NVIDIA kernel module and its libraries are different versions (NVML: Driver/library version mismatch)"
        );
        assert!(!e.no_nvidia_here());
        let missing = open_nvml(Some(Path::new("/nonexistent/libnvidia-ml.so.1"))).unwrap_err();
        assert!(
            matches!(missing, NvmlOpenError::CannotLoad { .. }),
            "{missing:?}"
        );
        assert!(
            !missing.no_nvidia_here(),
            "a library named and broken is not 'no NVIDIA'"
        );
        assert!(NvmlOpenError::NotInstalled.no_nvidia_here());
        assert!(NvmlOpenError::NotOnThisOs("macOS").no_nvidia_here());
        assert_eq!(cuda_version_string(12080), "12.8");
    }
}
