//! How ComfyUI's `main.py` is started by a Python: directly, or through a few lines that put
//! a folder of packages in front of the Python's own and the run's folder first on
//! `sys.path` (the portable build's embeddable Python needs them). A leaf: the runs and the
//! install's `--help` both start `main.py` this way.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A folder of packages put in front of the Python's own when ComfyUI starts, and the
/// `name==version` pins it was made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlay {
    pub site: PathBuf,
    pub packages: Vec<(String, String)>,
}

/// What goes between the interpreter and `main.py` to put `site` (a folder of packages) in
/// front of the Python's own and the folder of the `main.py` run first on `sys.path`: a few
/// lines that add the folder as a site folder (its `.pth` files count) and run `main.py` as
/// `python main.py` would. `PYTHONPATH` would do for a venv or conda, but the portable
/// build's embeddable Python ignores it (its `._pth` file), and its `._pth` keeps the
/// script's folder off `sys.path` and lists `../ComfyUI` instead: without these lines, a
/// `main.py` exported elsewhere would import the user's checkout. Other ComfyUI folders on
/// `sys.path` (holding `main.py` and `comfy/`) are taken off it.
pub fn boot_args(site: Option<&Path>) -> Vec<String> {
    vec![
        "-c".into(),
        BOOT.into(),
        site.map(|s| s.display().to_string()).unwrap_or_default(),
    ]
}

/// Whether `python` takes its `sys.path` from a `._pth` file beside it (the embeddable
/// Python of the portable build): then `main.py` is started through [`boot_args`], so that
/// the folder of the `main.py` run, not the one the file lists, is imported from.
pub fn fixed_path(python: &Path) -> bool {
    let dir = match python.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => return false,
    };
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with("._pth"))
    })
}

/// The arguments before `main.py` for a run of `python` with `overlay`: none for a Python
/// that puts the script's folder first itself and no overlay.
pub fn boot_for(python: &Path, overlay: Option<&Overlay>) -> Vec<String> {
    match overlay {
        Some(o) => boot_args(Some(&o.site)),
        None if fixed_path(python) => boot_args(None),
        None => Vec::new(),
    }
}

const BOOT: &str = "import os, runpy, site, sys\n\
d = sys.argv[1]\n\
m = os.path.abspath(sys.argv[2])\n\
o = lambda p: os.path.isfile(os.path.join(p, 'main.py')) and os.path.isdir(os.path.join(p, 'comfy'))\n\
b = [p for p in sys.path if p and os.path.abspath(p) != os.path.dirname(m) and not o(p)]\n\
if d:\n    site.addsitedir(d)\n\
n = [p for p in sys.path if p not in b]\n\
sys.path[:] = [os.path.dirname(m)] + [p for p in n if p != os.path.dirname(m)] + b\n\
sys.argv = sys.argv[2:]\n\
runpy.run_path(m, run_name='__main__')\n";
