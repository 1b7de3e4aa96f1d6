//! `vrambisect extension install|remove`: puts the ComfyUI extension (the node pack in
//! `extension/`, carried inside this program) into an install's `custom_nodes`, or takes it out.
//! `vrambisect extension facts` ([`facts`]) answers what the pack asks of this program.
//!
//! The pack is the one ComfyUI-Manager installs from the registry; this is the path for a
//! ComfyUI that Manager does not serve. Only a folder that holds this pack is ever replaced or
//! removed, and a second copy (one Manager put under another name) is refused: ComfyUI would
//! load both and the second would fail on routes already registered.

pub(crate) mod facts;

use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The pack's name in the registry, and its folder under `custom_nodes`.
pub(crate) const PACK: &str = "comfyui-vrambisect";

/// The pack's files, relative to its folder, as this program carries them.
pub(crate) const FILES: &[(&str, &str)] = &[
    ("__init__.py", include_str!("../../extension/__init__.py")),
    ("core.py", include_str!("../../extension/core.py")),
    ("routes.py", include_str!("../../extension/routes.py")),
    (
        "web/vrambisect.js",
        include_str!("../../extension/web/vrambisect.js"),
    ),
    (
        "pyproject.toml",
        include_str!("../../extension/pyproject.toml"),
    ),
    (
        "requirements.txt",
        include_str!("../../extension/requirements.txt"),
    ),
    ("README.md", include_str!("../../extension/README.md")),
];

/// What `install` or `remove` did (`--json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Done {
    /// `installed`, `updated`, `removed` or `not_installed`.
    pub action: &'static str,
    /// The pack's folder.
    pub path: PathBuf,
    /// The version now there (install) or that was there (remove).
    pub version: Option<String>,
    /// The version it replaced, for an update.
    pub previous: Option<String>,
    /// Where the extension keeps its diagnoses and reports (left in place by `remove`).
    pub results: PathBuf,
}

/// The version in a pack folder's `pyproject.toml`, when the folder holds this pack.
fn pack_version(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("pyproject.toml")).ok()?;
    let mut ours = false;
    let mut version = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(v) = toml_string(line, "name") {
            ours |= v == PACK;
        }
        if let Some(v) = toml_string(line, "version") {
            version.get_or_insert(v);
        }
    }
    ours.then(|| version.unwrap_or_default())
}

/// `key = "value"` on one line of TOML.
fn toml_string(line: &str, key: &str) -> Option<String> {
    let rest = line
        .strip_prefix(key)?
        .trim_start()
        .strip_prefix('=')?
        .trim();
    let inner = rest.strip_prefix('"')?.split('"').next()?;
    Some(inner.to_string())
}

/// This program's copy of the pack's version (its `pyproject.toml`).
pub(crate) fn version() -> String {
    FILES
        .iter()
        .find(|(name, _)| *name == "pyproject.toml")
        .and_then(|(_, text)| text.lines().find_map(|l| toml_string(l.trim(), "version")))
        .unwrap_or_default()
}

/// Other folders under `custom_nodes` that hold this pack (a copy Manager installed).
fn other_copies(custom_nodes: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(custom_nodes) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        // Dot folders are this command's own staging and set-aside copies.
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n != PACK && !n.to_string_lossy().starts_with('.'))
                && p.is_dir()
        })
        .filter(|p| pack_version(p).is_some())
        .collect();
    out.sort();
    out
}

fn custom_nodes(comfyui: &Path) -> Result<PathBuf> {
    if !comfyui.join("main.py").is_file() {
        return Err(Error::usage(format!(
            "{} holds no main.py: not a ComfyUI folder",
            comfyui.display()
        ))
        .hint("pass --comfyui with the folder that holds ComfyUI's main.py"));
    }
    Ok(comfyui.join("custom_nodes"))
}

/// Writes the pack into `COMFYUI/custom_nodes/comfyui-vrambisect` (replacing an older copy of
/// it), through a temporary folder so that a failed write leaves the old copy whole.
pub(crate) fn install(comfyui: &Path) -> Result<Done> {
    let nodes = custom_nodes(comfyui)?;
    let target = nodes.join(PACK);
    if let Some(other) = other_copies(&nodes).first() {
        return Err(Error::usage(format!(
            "the extension is already installed in {}",
            other.display()
        ))
        .hint("update or remove it where it was installed (ComfyUI-Manager), or delete that folder first"));
    }
    let previous = if target.exists() {
        match pack_version(&target) {
            Some(v) => Some(v),
            None => {
                return Err(Error::usage(format!(
                    "{} exists and is not this extension",
                    target.display()
                ))
                .hint("move that folder away, then install again"));
            }
        }
    } else {
        None
    };
    let staging = nodes.join(format!(".{PACK}.installing"));
    let write = |staging: &Path| -> std::io::Result<()> {
        if staging.exists() {
            std::fs::remove_dir_all(staging)?;
        }
        for (name, text) in FILES {
            let path = staging.join(name);
            std::fs::create_dir_all(path.parent().unwrap_or(staging))?;
            std::fs::write(&path, text)?;
        }
        Ok(())
    };
    write(&staging).map_err(|e| crate::error::io_error("write", &staging, &e))?;
    // The old copy is moved aside, not deleted, until the new one is in place.
    let old = nodes.join(format!(".{PACK}.replaced"));
    if target.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old)
                .map_err(|e| crate::error::io_error("remove", &old, &e))?;
        }
        std::fs::rename(&target, &old)
            .map_err(|e| crate::error::io_error("replace", &target, &e))?;
    }
    if let Err(e) = std::fs::rename(&staging, &target) {
        if old.exists() {
            let _ = std::fs::rename(&old, &target);
        }
        return Err(crate::error::io_error("write", &target, &e));
    }
    if old.exists() {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(Done {
        action: if previous.is_some() {
            "updated"
        } else {
            "installed"
        },
        path: target,
        version: Some(version()),
        previous,
        results: comfyui.join("user").join("vrambisect"),
    })
}

/// Removes the pack's folder; the extension's results under `user/vrambisect` stay.
pub(crate) fn remove(comfyui: &Path) -> Result<Done> {
    let nodes = custom_nodes(comfyui)?;
    let target = nodes.join(PACK);
    let results = comfyui.join("user").join("vrambisect");
    if !target.exists() {
        if let Some(other) = other_copies(&nodes).first() {
            return Err(Error::usage(format!(
                "the extension was installed in {}, not by this command",
                other.display()
            ))
            .hint("remove it where it was installed (ComfyUI-Manager), or delete that folder"));
        }
        return Ok(Done {
            action: "not_installed",
            path: target,
            version: None,
            previous: None,
            results,
        });
    }
    let Some(version) = pack_version(&target) else {
        return Err(Error::usage(format!(
            "{} is not this extension: left as it is",
            target.display()
        )));
    };
    std::fs::remove_dir_all(&target).map_err(|e| crate::error::io_error("remove", &target, &e))?;
    Ok(Done {
        action: "removed",
        path: target,
        version: Some(version),
        previous: None,
        results,
    })
}

impl crate::output::Answer for Done {
    /// The lines a person reads after `install` or `remove`.
    fn render(
        &self,
        _style: &crate::output::Style,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let version = self.version.as_deref().unwrap_or("?");
        match self.action {
            "installed" => writeln!(
                out,
                "installed {PACK} {version} into {}",
                self.path.display()
            )?,
            "updated" => writeln!(
                out,
                "updated {PACK} {} -> {version} in {}",
                self.previous.as_deref().unwrap_or("?"),
                self.path.display()
            )?,
            "removed" => writeln!(out, "removed {PACK} {version} from {}", self.path.display())?,
            _ => {
                writeln!(out, "{PACK} is not installed in {}", self.path.display())?;
                return Ok(());
            }
        }
        writeln!(out, "restart ComfyUI for this to take effect")?;
        if self.action == "removed" && self.results.is_dir() {
            writeln!(
                out,
                "its diagnoses and reports stay in {} (delete that folder to remove them)",
                self.results.display()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comfyui() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.py"), "").unwrap();
        std::fs::create_dir(dir.path().join("custom_nodes")).unwrap();
        dir
    }

    #[test]
    fn the_versions_agree_with_the_program() {
        let ours = env!("CARGO_PKG_VERSION");
        assert_eq!(version(), ours);
        let core = FILES.iter().find(|(n, _)| *n == "core.py").unwrap().1;
        assert!(
            core.contains(&format!("VERSION = \"{ours}\"")),
            "core.py's VERSION"
        );
        let reqs = FILES
            .iter()
            .find(|(n, _)| *n == "requirements.txt")
            .unwrap()
            .1;
        assert!(
            reqs.lines()
                .any(|l| l.trim() == format!("vrambisect=={ours}")),
            "requirements.txt pins vrambisect=={ours}"
        );
    }

    #[test]
    fn install_update_and_remove() {
        let dir = comfyui();
        let done = install(dir.path()).unwrap();
        assert_eq!(done.action, "installed");
        let pack = dir.path().join("custom_nodes").join(PACK);
        for (name, text) in FILES {
            assert_eq!(std::fs::read_to_string(pack.join(name)).unwrap(), *text);
        }
        std::fs::write(pack.join("stale.py"), "").unwrap();
        // A set-aside copy left by an update that was cut off is no second install.
        let aside = dir
            .path()
            .join("custom_nodes")
            .join(format!(".{PACK}.replaced"));
        std::fs::create_dir(&aside).unwrap();
        std::fs::write(aside.join("pyproject.toml"), FILES[4].1).unwrap();
        let again = install(dir.path()).unwrap();
        assert_eq!(again.action, "updated");
        assert_eq!(again.previous.as_deref(), Some(version().as_str()));
        assert!(
            !pack.join("stale.py").exists(),
            "an update leaves no old file"
        );
        let gone = remove(dir.path()).unwrap();
        assert_eq!(gone.action, "removed");
        assert!(!pack.exists());
        assert_eq!(remove(dir.path()).unwrap().action, "not_installed");
    }

    #[test]
    fn a_folder_that_is_not_the_pack_is_left_alone() {
        let dir = comfyui();
        let pack = dir.path().join("custom_nodes").join(PACK);
        std::fs::create_dir(&pack).unwrap();
        std::fs::write(pack.join("mine.py"), "x").unwrap();
        let e = install(dir.path()).unwrap_err();
        assert!(e.message.contains("is not this extension"), "{e}");
        let e = remove(dir.path()).unwrap_err();
        assert!(e.message.contains("is not this extension"), "{e}");
        assert!(pack.join("mine.py").is_file());
    }

    #[test]
    fn a_copy_under_another_name_is_not_doubled() {
        let dir = comfyui();
        let other = dir
            .path()
            .join("custom_nodes")
            .join("comfyui-vrambisect-main");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(
            other.join("pyproject.toml"),
            "[project]\nname = \"comfyui-vrambisect\"\nversion = \"0.0.9\"\n",
        )
        .unwrap();
        let e = install(dir.path()).unwrap_err();
        assert!(e.message.contains("already installed"), "{e}");
        let e = remove(dir.path()).unwrap_err();
        assert!(e.message.contains("not by this command"), "{e}");
        assert!(other.is_dir());
    }

    #[test]
    fn not_a_comfyui_folder() {
        let dir = tempfile::tempdir().unwrap();
        let e = install(dir.path()).unwrap_err();
        assert!(e.message.contains("no main.py"), "{e}");
    }
}
