//! A commit's ComfyUI, made runnable beside the user's checkout: its tree exported into the
//! session folder, with the user's models, custom nodes and inputs linked in, and its
//! requirements held against the Python that will run it.

use super::git::Repo;
use crate::error::Result;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Folders of the user's checkout that every tested commit sees as its own. `user/` (settings,
/// the assets database, `comfyui.log`) and `output/` are not shared: an old version must not
/// migrate or overwrite them.
pub(crate) const SHARED: &[&str] = &["models", "custom_nodes", "input"];

/// Exports `commit` into `dest` and links the shared folders of `checkout` into it.
pub(crate) fn prepare(repo: &Repo, commit: &str, checkout: &Path, dest: &Path) -> Result<()> {
    if dest.exists() {
        let _ = std::fs::remove_dir_all(dest);
    }
    crate::private::create_dir_all(dest).map_err(|e| crate::error::io_error("create", dest, &e))?;
    repo.export(commit, dest)?;
    for name in SHARED {
        let theirs = checkout.join(name);
        if !theirs.is_dir() {
            continue;
        }
        let ours = dest.join(name);
        if ours.exists() {
            std::fs::remove_dir_all(&ours)
                .map_err(|e| crate::error::io_error("replace", &ours, &e))?;
        }
        link(&theirs, &ours)?;
    }
    let extra = checkout.join("extra_model_paths.yaml");
    if extra.is_file() {
        let _ = std::fs::copy(&extra, dest.join("extra_model_paths.yaml"));
    }
    Ok(())
}

#[cfg(unix)]
fn link(target: &Path, at: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, at).map_err(|e| crate::error::io_error("link", at, &e))
}

#[cfg(windows)]
fn link(target: &Path, at: &Path) -> Result<()> {
    // A directory symbolic link needs developer mode or admin rights on Windows.
    std::os::windows::fs::symlink_dir(target, at).map_err(|e| {
        crate::error::Error::environment(format!(
            "cannot link {} to {}: {e}",
            at.display(),
            target.display()
        ))
        .hint("turn on Developer Mode (Settings > For developers) so folders can be linked")
    })
}

/// `name==version` pins of a requirements file (names normalised: lower case, `-`).
pub(crate) fn pins(requirements: &str) -> Vec<(String, String)> {
    requirements
        .lines()
        .filter_map(|l| {
            let l = l.split('#').next()?.split(';').next()?.trim();
            let (name, version) = l.split_once("==")?;
            let name = normalise(name.split('[').next()?);
            let version = version.trim();
            (!name.is_empty() && !version.is_empty()).then(|| (name, version.to_string()))
        })
        .collect()
}

fn normalise(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace(['_', '.'], "-")
}

/// The installed versions of `names` in `python` (absent: not installed).
pub(crate) fn installed(python: &Path, names: &[String]) -> BTreeMap<String, String> {
    installed_with(python, None, names)
}

/// The versions of `names` that `python` imports with `site` (an environment's folder) in
/// front of its own packages.
pub(crate) fn installed_with(
    python: &Path,
    site: Option<&Path>,
    names: &[String],
) -> BTreeMap<String, String> {
    let script = "import sys\nimport importlib.metadata as m\nif sys.argv[1]:\n    sys.path.insert(0, sys.argv[1])\nfor n in sys.argv[2:]:\n    try:\n        print(n, m.version(n))\n    except Exception:\n        pass\n";
    let mut args: Vec<String> = vec!["-c".into(), script.into()];
    args.push(site.map(|s| s.display().to_string()).unwrap_or_default());
    args.extend(names.iter().cloned());
    // As an OsStr: duct would run a bare `python3` given as a Path as `./python3`.
    let out = crate::process::output_with_timeout(
        duct::cmd(python.as_os_str(), args),
        Duration::from_secs(60),
    );
    let mut found = BTreeMap::new();
    if let Ok(Some(out)) = out {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((n, v)) = line.split_once(' ') {
                found.insert(normalise(n), v.trim().to_string());
            }
        }
    }
    found
}

/// The held pins of a commit's requirements (see [`HELD`]) and the versions `python` has of
/// them: those it has at another version differ. A pinned package that is not installed at
/// all says nothing about this Python and is left alone.
pub(crate) fn held(
    requirements: Option<&str>,
    python: &Path,
) -> (BTreeMap<String, String>, Vec<super::env::Differing>) {
    // The frontend, template and docs packages are pinned exactly too and move every few
    // days, but an older one does not change what a workflow does to memory.
    let pins: Vec<(String, String)> = requirements
        .map(pins)
        .unwrap_or_default()
        .into_iter()
        .filter(|(n, _)| HELD.contains(&n.as_str()))
        .collect();
    let names: Vec<String> = HELD.iter().map(|n| n.to_string()).collect();
    let have = installed(python, &names);
    let differing = pins
        .iter()
        .filter_map(|(n, want)| {
            let got = have.get(n)?;
            (got != want).then(|| super::env::Differing {
                name: n.clone(),
                want: want.clone(),
                have: got.clone(),
            })
        })
        .collect();
    (have, differing)
}

/// The pinned packages whose version decides how ComfyUI uses memory.
pub(crate) const HELD: &[&str] = &["comfy-aimdo", "comfy-kitchen"];

/// Where a commit's tree goes in a session folder.
pub(crate) fn dir_of(session: &Path, commit: &str) -> PathBuf {
    crate::session::SessionDir::regress(session)
        .trees()
        .join(super::git::abbrev(commit, 12))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_of_a_requirements_file() {
        let req = "torch\ncomfy-aimdo==0.5.5\ncomfy_kitchen == 0.2.36  # kitchen\ncomfyui-frontend-package==1.33.4; python_version>='3.10'\nspandrel>=0.4\n";
        assert_eq!(
            pins(req),
            [
                ("comfy-aimdo".to_string(), "0.5.5".to_string()),
                ("comfy-kitchen".to_string(), "0.2.36".to_string()),
                ("comfyui-frontend-package".to_string(), "1.33.4".to_string()),
            ]
        );
    }
}
