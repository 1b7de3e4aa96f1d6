//! Environments for commits that pin other package versions than the user's Python has.
//!
//! A commit whose `requirements.txt` pins another `comfy-aimdo` or `comfy-kitchen` than the
//! one installed runs with those pins installed into a folder of their own (pip's `--target`,
//! wheels only, no dependencies) that is put in front of the user's packages when ComfyUI
//! starts ([`crate::run::Overlay`]). The user's Python is never written to. The folders are a
//! cache keyed by the Python and the pins, shared by every session: see [`root`]; removed by
//! `regress --clean-cache`.

use crate::run::Overlay;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A pin this Python does not satisfy: `name==want` where it has `have`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Differing {
    pub name: String,
    pub want: String,
    pub have: String,
}

impl std::fmt::Display for Differing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}=={} (this Python has {})",
            self.name, self.want, self.have
        )
    }
}

/// Where the environments live: `$VRAMBISECT_CACHE_DIR/envs`, else the platform's cache
/// folder (`%LOCALAPPDATA%\vrambisect\cache`, `~/Library/Caches/vrambisect`,
/// `$XDG_CACHE_HOME/vrambisect` or `~/.cache/vrambisect`) with `envs` in it.
pub(crate) fn root() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let base = var("VRAMBISECT_CACHE_DIR").unwrap_or_else(|| {
        if cfg!(windows) {
            var("LOCALAPPDATA")
                .map(|d| d.join("vrambisect").join("cache"))
                .unwrap_or_else(|| std::env::temp_dir().join("vrambisect-cache"))
        } else if cfg!(target_os = "macos") {
            var("HOME")
                .map(|h| h.join("Library/Caches/vrambisect"))
                .unwrap_or_else(|| std::env::temp_dir().join("vrambisect-cache"))
        } else {
            var("XDG_CACHE_HOME")
                .or_else(|| var("HOME").map(|h| h.join(".cache")))
                .map(|d| d.join("vrambisect"))
                .unwrap_or_else(|| std::env::temp_dir().join("vrambisect-cache"))
        }
    });
    base.join("envs")
}

/// The file an environment is described by; written last, so a folder without it is an
/// install that did not finish.
const DESCRIPTION: &str = "environment.json";

/// What an environment folder holds (`environment.json`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Description {
    python: PathBuf,
    python_version: String,
    packages: Vec<(String, String)>,
}

/// How an environment was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Made {
    /// Found in the cache.
    Reused,
    /// Installed now.
    Installed,
}

/// The environment with `pins` for `python`: from the cache, or installed into it with the
/// Python's own pip (its settings: index, proxy, certificates). `Err`: why it cannot be had,
/// as a sentence that follows "could not be installed: ".
pub(crate) fn prepare(
    python: &Path,
    pins: &[(String, String)],
    installing: &mut dyn FnMut(),
) -> std::result::Result<(Overlay, Made), String> {
    let version = python_version(python)?;
    let dir = root().join(name(python, &version, pins));
    let site = dir.join("site-packages");
    let overlay = Overlay {
        site: site.clone(),
        packages: pins.to_vec(),
    };
    if dir.join(DESCRIPTION).is_file() {
        check(python, &overlay)?;
        return Ok((overlay, Made::Reused));
    }
    let parent = root();
    crate::private::create_dir_all(&parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    // Installed beside its place and renamed into it: an install stopped half way leaves
    // nothing that looks finished, and two sessions installing at once both end with one.
    let partial = tempfile::Builder::new()
        .prefix(".installing-")
        .tempdir_in(&parent)
        .map_err(|e| format!("cannot create a folder in {}: {e}", parent.display()))?;
    let target = partial.path().join("site-packages");
    installing();
    pip_install(python, pins, &target)?;
    let staged = Overlay {
        site: target,
        packages: pins.to_vec(),
    };
    check(python, &staged)?;
    let description = Description {
        python: python.to_path_buf(),
        python_version: version,
        packages: pins.to_vec(),
    };
    crate::run::folder::write_json(&partial.path().join(DESCRIPTION), &description)
        .map_err(|e| e.message)?;
    let staged_dir = partial.keep();
    if let Err(e) = std::fs::rename(&staged_dir, &dir) {
        let _ = std::fs::remove_dir_all(&staged_dir);
        if !dir.join(DESCRIPTION).is_file() {
            return Err(format!("cannot move it into {}: {e}", dir.display()));
        }
        // Another session finished the same environment first.
        return Ok((overlay, Made::Reused));
    }
    Ok((overlay, Made::Installed))
}

/// The folder name: the pins, readable, and a hash of the Python and the pins.
fn name(python: &Path, version: &str, pins: &[(String, String)]) -> String {
    let mut sorted = pins.to_vec();
    sorted.sort();
    let mut hasher = Fnv::default();
    // The path as given, not resolved: two venvs of one interpreter have their own packages
    // (and perhaps their own index, e.g. for another CUDA build).
    let path = std::path::absolute(python).unwrap_or_else(|_| python.to_path_buf());
    hasher.write(path.to_string_lossy().as_bytes());
    hasher.write(version.as_bytes());
    let readable: Vec<String> = sorted
        .iter()
        .map(|(n, v)| {
            hasher.write(n.as_bytes());
            hasher.write(v.as_bytes());
            format!("{n}-{}", crate::text::file_safe(v, '.'))
        })
        .collect();
    format!("{}-{:016x}", readable.join("+"), hasher.0)
}

/// FNV-1a, for a folder name that stays the same across builds and platforms.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes.iter().chain([&0u8]) {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// `sys.version` and where the interpreter is, which name the environment with the path.
fn python_version(python: &Path) -> std::result::Result<String, String> {
    let out = crate::process::output_with_timeout(
        duct::cmd(
            python.as_os_str(),
            [
                "-c",
                "import sys; print(sys.version.split()[0], sys.platform)",
            ],
        ),
        Duration::from_secs(60),
    )
    .map_err(|e| format!("cannot run {}: {e}", python.display()))?
    .ok_or_else(|| format!("{} did not answer in 60 s", python.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} does not run: {}",
            python.display(),
            crate::process::last_line(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// How long pip gets for one environment.
const PIP_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// `python -m pip install --target`: wheels only (nothing is compiled), without dependencies
/// (the user's Python has them, torch included); pip's own output kept beside the folder.
fn pip_install(
    python: &Path,
    pins: &[(String, String)],
    target: &Path,
) -> std::result::Result<(), String> {
    let mut args: Vec<String> = [
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "--no-deps",
        "--only-binary=:all:",
        "--no-warn-script-location",
        "--target",
    ]
    .map(String::from)
    .to_vec();
    args.push(target.display().to_string());
    args.extend(pins.iter().map(|(n, v)| format!("{n}=={v}")));
    let out =
        crate::process::output_with_timeout(duct::cmd(python.as_os_str(), &args), PIP_TIMEOUT)
            .map_err(|e| format!("cannot run pip: {e}"))?
            .ok_or_else(|| {
                format!(
                    "pip did not finish in {} minutes",
                    PIP_TIMEOUT.as_secs() / 60
                )
            })?;
    if let Some(parent) = target.parent() {
        let mut log = out.stdout.clone();
        log.extend_from_slice(&out.stderr);
        let _ = std::fs::write(parent.join("pip.log"), log);
    }
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    if text.contains("No module named pip") {
        return Err(format!(
            "{} has no pip (install it there, or test this commit by hand)",
            python.display()
        ));
    }
    // pip's own reason: its last `ERROR:` line (no matching wheel, no network, ...).
    let reason = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("ERROR: "))
        .map(str::to_string)
        .unwrap_or_else(|| crate::process::last_line(&out.stderr));
    Err(format!("pip: {reason}"))
}

/// Asks the Python, with the overlay in front, for the pinned packages' versions: the
/// environment is used only when it gives exactly them.
fn check(python: &Path, overlay: &Overlay) -> std::result::Result<(), String> {
    let names: Vec<String> = overlay.packages.iter().map(|(n, _)| n.clone()).collect();
    let have = super::tree::installed_with(python, Some(&overlay.site), &names);
    let wrong: Vec<String> = overlay
        .packages
        .iter()
        .filter(|(n, v)| have.get(n) != Some(v))
        .map(|(n, v)| {
            format!(
                "{n}=={v} (found {})",
                have.get(n).map(String::as_str).unwrap_or("nothing")
            )
        })
        .collect();
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "installed, the environment does not give {}",
            wrong.join(", ")
        ))
    }
}

/// Removes every environment; returns how many there were and their size in bytes.
pub(crate) fn clean() -> std::io::Result<(usize, u64)> {
    let root = root();
    let entries = match std::fs::read_dir(&root) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, 0)),
        Err(e) => return Err(e),
    };
    let mut count = 0;
    let mut bytes = 0;
    for e in entries.flatten() {
        let path = e.path();
        if path.join(DESCRIPTION).is_file() {
            count += 1;
        }
        bytes += size(&path);
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok((count, bytes))
}

fn size(path: &Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::read_dir(path)
            .map(|d| d.flatten().map(|e| size(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_readable_and_differ_by_python_and_pins() {
        let pins = |v: &str| vec![("comfy-aimdo".to_string(), v.to_string())];
        let a = name(
            Path::new("/venv/bin/python"),
            "3.12.3 linux",
            &pins("0.5.4"),
        );
        assert!(a.starts_with("comfy-aimdo-0.5.4-"), "{a}");
        assert_eq!(
            a,
            name(
                Path::new("/venv/bin/python"),
                "3.12.3 linux",
                &pins("0.5.4")
            )
        );
        assert_ne!(
            a,
            name(
                Path::new("/other/bin/python"),
                "3.12.3 linux",
                &pins("0.5.4")
            )
        );
        assert_ne!(
            a,
            name(
                Path::new("/venv/bin/python"),
                "3.12.4 linux",
                &pins("0.5.4")
            )
        );
        let two = vec![
            ("comfy-kitchen".to_string(), "0.2.7".to_string()),
            ("comfy-aimdo".to_string(), "0.5.4+local/x".to_string()),
        ];
        let b = name(Path::new("/p"), "3.12", &two);
        assert!(
            b.starts_with("comfy-aimdo-0.5.4_local_x+comfy-kitchen-0.2.7-"),
            "{b}"
        );
    }
}
