//! The install's Python, asked once (without importing torch): its version and its
//! packages (torch and its CUDA build, comfy-aimdo, comfy-kitchen, the frontend).

use super::*;

// ---------------------------------------------------------------------------------------
// The install's Python

/// Asks the interpreter for its version and package versions through `importlib.metadata`,
/// torch's CUDA build from `torch/version.py` (found with `find_spec`, which does not run
/// torch's `__init__`), and comfy-aimdo's modules with `pkgutil` (also without importing).
/// Importing torch would take seconds and, on a CUDA build, touch the driver.
pub(crate) const PYTHON_PROBE: &str = r#"
import sys, os, json, platform, re
out = {"python": platform.python_version(), "implementation": platform.python_implementation(),
       "executable": sys.executable, "packages": {}}
try:
    from importlib import metadata
except ImportError:
    metadata = None
for name in ("torch", "comfy-aimdo", "comfy-kitchen", "comfyui-frontend-package", "xformers", "triton"):
    try:
        out["packages"][name] = metadata.version(name) if metadata else None
    except Exception:
        out["packages"][name] = None
try:
    import importlib.util as util
    spec = util.find_spec("torch")
    if spec is not None and spec.origin:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py"), encoding="utf-8") as f:
            text = f.read()
        for key in ("cuda", "hip"):
            m = re.search(r"^%s\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]" % key, text, re.M)
            out["torch_" + key] = m.group(1) if m else None
    spec = util.find_spec("comfy_aimdo")
    if spec is not None and spec.submodule_search_locations:
        import pkgutil
        out["aimdo_modules"] = sorted(m.name for m in pkgutil.iter_modules(list(spec.submodule_search_locations)))
    else:
        out["aimdo_modules"] = None
except Exception as e:
    out["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
"#;

/// What the install's Python said.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct PyFacts {
    pub python: String,
    #[serde(default)]
    pub implementation: Option<String>,
    #[serde(default)]
    pub executable: Option<String>,
    #[serde(default)]
    pub packages: BTreeMap<String, Option<String>>,
    #[serde(default)]
    pub torch_cuda: Option<String>,
    #[serde(default)]
    pub torch_hip: Option<String>,
    /// `None`: comfy_aimdo is not importable.
    #[serde(default)]
    pub aimdo_modules: Option<Vec<String>>,
    #[serde(default)]
    pub error: Option<String>,
}

impl PyFacts {
    pub(crate) fn package(&self, name: &str) -> Option<&str> {
        self.packages.get(name).and_then(|v| v.as_deref())
    }
}

/// Parses the probe's output (its last line that is a JSON object).
pub(crate) fn parse_probe(stdout: &str) -> Result<PyFacts, String> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("it printed no answer")?;
    serde_json::from_str(line).map_err(|e| format!("its answer did not parse: {e}"))
}

/// Runs [`PYTHON_PROBE`] with the install's Python in its folder (20 s at most).
pub(crate) fn ask_python(python: &Python, dir: &Path) -> Result<PyFacts, String> {
    const TIMEOUT: Duration = Duration::from_secs(20);
    let expr = duct::cmd(python.path.as_os_str().to_owned(), ["-c", PYTHON_PROBE])
        .dir(dir)
        .env("PYTHONIOENCODING", "utf-8");
    let output = crate::process::output_with_timeout(expr, TIMEOUT)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{} ({}) was not found",
                    python.path.display(),
                    python.source
                )
            } else {
                format!("cannot run {}: {e}", python.path.display())
            }
        })?
        .ok_or_else(|| {
            format!(
                "{} did not answer in {} s",
                python.path.display(),
                TIMEOUT.as_secs()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "{} failed: {}",
            python.path.display(),
            crate::process::last_line(&output.stderr)
        ));
    }
    parse_probe(&String::from_utf8_lossy(&output.stdout))
}

/// What a torch build runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TorchBuild {
    /// CUDA, at this version (`12.8`).
    Cuda(String),
    /// ROCm, at this version.
    Rocm(String),
    /// No GPU backend (`+cpu`).
    CpuOnly,
}

impl std::fmt::Display for TorchBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TorchBuild::Cuda(v) => write!(f, "{v}"),
            TorchBuild::Rocm(v) => write!(f, "ROCm {v}"),
            TorchBuild::CpuOnly => write!(f, "none (CPU-only build)"),
        }
    }
}

/// The build in a torch version string: `2.10.0+cu130` → CUDA 13.0.
pub(crate) fn torch_build_from_version(v: &str) -> Option<TorchBuild> {
    let (_, local) = v.split_once('+')?;
    if let Some(digits) = local.strip_prefix("cu")
        && digits.len() >= 3
        && digits.chars().all(|c| c.is_ascii_digit())
    {
        let (major, minor) = digits.split_at(digits.len() - 1);
        return Some(TorchBuild::Cuda(format!("{major}.{minor}")));
    }
    if let Some(r) = local.strip_prefix("rocm") {
        return Some(TorchBuild::Rocm(r.to_string()));
    }
    (local == "cpu").then_some(TorchBuild::CpuOnly)
}
