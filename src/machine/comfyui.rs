//! A ComfyUI checkout on disk: its git commit and branch, its custom nodes.

use super::*;

// ---------------------------------------------------------------------------------------
// ComfyUI's folder: git, custom nodes

/// A checkout's commit and branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct GitInfo {
    /// `None` for a detached HEAD.
    pub branch: Option<String>,
    pub commit: String,
}

/// Reads `.git/HEAD` and the ref it names (loose or in `packed-refs`), without a git binary.
/// Handles `.git` files (`gitdir: …`, worktrees and submodules) and their `commondir`.
pub(crate) fn git_info(dir: &Path) -> Result<GitInfo, String> {
    let dot = dir.join(".git");
    let gitdir = if dot.is_file() {
        let text = std::fs::read_to_string(&dot).map_err(|e| format!("cannot read .git: {e}"))?;
        let target = text
            .trim()
            .strip_prefix("gitdir:")
            .ok_or("the .git file does not name a git folder")?
            .trim();
        let p = PathBuf::from(target);
        if p.is_absolute() { p } else { dir.join(p) }
    } else if dot.is_dir() {
        dot
    } else {
        return Err("not a git checkout (no .git)".into());
    };
    let head = std::fs::read_to_string(gitdir.join("HEAD"))
        .map_err(|e| format!("cannot read .git/HEAD: {e}"))?;
    let head = head.trim();
    let Some(refname) = head.strip_prefix("ref:").map(str::trim) else {
        if is_sha(head) {
            return Ok(GitInfo {
                commit: head.to_string(),
                branch: None,
            });
        }
        return Err(format!("unexpected .git/HEAD: {head:.40}"));
    };
    let common = std::fs::read_to_string(gitdir.join("commondir"))
        .ok()
        .map(|c| {
            let p = PathBuf::from(c.trim());
            if p.is_absolute() { p } else { gitdir.join(p) }
        });
    let branch = refname
        .strip_prefix("refs/heads/")
        .unwrap_or(refname)
        .to_string();
    for base in std::iter::once(&gitdir).chain(common.as_ref()) {
        if let Ok(sha) = std::fs::read_to_string(base.join(refname))
            && is_sha(sha.trim())
        {
            return Ok(GitInfo {
                commit: sha.trim().to_string(),
                branch: Some(branch),
            });
        }
        if let Ok(packed) = std::fs::read_to_string(base.join("packed-refs"))
            && let Some(sha) = packed_ref(&packed, refname)
        {
            return Ok(GitInfo {
                commit: sha,
                branch: Some(branch),
            });
        }
    }
    Err(format!("branch {branch} has no commit yet"))
}

fn is_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.chars().all(|c| c.is_ascii_hexdigit())
}

/// The commit of `refname` in a `packed-refs` file.
pub(crate) fn packed_ref(text: &str, refname: &str) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
        .filter_map(|l| l.split_once(' '))
        .find(|(_, name)| name.trim() == refname)
        .map(|(sha, _)| sha.to_string())
        .filter(|sha| is_sha(sha))
}

/// The entries of `custom_nodes/`: folder (or file) names, and each folder's git commit.
pub(crate) fn custom_nodes(dir: &Path) -> Result<Vec<CustomNode>, String> {
    let nodes = dir.join("custom_nodes");
    let entries = std::fs::read_dir(&nodes).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "the install has no custom_nodes folder".to_string(),
        _ => format!("cannot list custom_nodes: {e}"),
    })?;
    let mut out: Vec<(String, CustomNode)> = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = e.path();
        if name.starts_with('.') || name == "__pycache__" || name.ends_with(".example") {
            continue;
        }
        let commit = if path.is_dir() {
            git_info(&path)
                .ok()
                .map(|g| crate::text::abbrev(&g.commit, 12).to_string())
        } else if name.ends_with(".py") {
            None
        } else {
            continue;
        };
        out.push((
            name.clone(),
            CustomNode {
                commit,
                name: name.clone(),
            },
        ));
    }
    out.sort_by_key(|a| a.0.to_lowercase());
    Ok(out.into_iter().map(|(_, v)| v).collect())
}
