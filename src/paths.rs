//! Absolute paths as people write them. On Windows `std::fs::canonicalize` gives the
//! verbatim form (`\\?\C:\Users\…`), which many programs (Python among them, in places) and
//! most people do not read; the plain form is kept wherever it means the same.

use std::path::{Path, PathBuf};

/// The canonical form of `p` (links resolved), in the plain form; `None` when it does not
/// exist.
pub(crate) fn canonical_opt(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok().map(|c| plain(&c))
}

/// [`canonical_opt`], or `p` itself when it cannot be resolved.
pub(crate) fn canonical(p: &Path) -> PathBuf {
    canonical_opt(p).unwrap_or_else(|| p.to_path_buf())
}

/// `\\?\C:\dir` → `C:\dir` and `\\?\UNC\server\share` → `\\server\share`, when the plain
/// form means the same path (no part longer than Windows' limit, no reserved name, no
/// trailing dot or space); anything else unchanged.
pub(crate) fn plain(p: &Path) -> PathBuf {
    let Some(s) = p.to_str() else {
        return p.to_path_buf();
    };
    let (rest, prefix) = if let Some(r) = s.strip_prefix(r"\\?\UNC\") {
        (r, r"\\")
    } else if let Some(r) = s.strip_prefix(r"\\?\") {
        let b = r.as_bytes();
        if !(b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':') {
            return p.to_path_buf();
        }
        (r, "")
    } else {
        return p.to_path_buf();
    };
    if s.len() >= 260 || rest.split('\\').any(|part| !plain_part(part)) {
        return p.to_path_buf();
    }
    PathBuf::from(format!("{prefix}{rest}"))
}

fn plain_part(part: &str) -> bool {
    const RESERVED: &[&str] = &["CON", "PRN", "AUX", "NUL"];
    let stem = part.split('.').next().unwrap_or("").to_ascii_uppercase();
    let numbered = (stem.starts_with("COM") || stem.starts_with("LPT"))
        && stem.len() == 4
        && stem.as_bytes()[3].is_ascii_digit();
    let dotted = part.ends_with('.') && part != "." && part != "..";
    let bad = dotted || part.ends_with(' ') || RESERVED.contains(&stem.as_str()) || numbered;
    !bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbatim_windows_paths_become_plain() {
        let p = |s: &str| plain(Path::new(s));
        assert_eq!(
            p(r"\\?\C:\Users\Ana\ComfyUI"),
            PathBuf::from(r"C:\Users\Ana\ComfyUI")
        );
        assert_eq!(
            p(r"\\?\UNC\nas\share\ComfyUI"),
            PathBuf::from(r"\\nas\share\ComfyUI")
        );
        // Where the plain form would mean something else, the verbatim one stays.
        assert_eq!(p(r"\\?\C:\dir\nul"), PathBuf::from(r"\\?\C:\dir\nul"));
        assert_eq!(
            p(r"\\?\C:\dir\com1.txt"),
            PathBuf::from(r"\\?\C:\dir\com1.txt")
        );
        assert_eq!(p(r"\\?\C:\trailing."), PathBuf::from(r"\\?\C:\trailing."));
        assert_eq!(
            p(r"\\?\Volume{1234}\x"),
            PathBuf::from(r"\\?\Volume{1234}\x")
        );
        let long = format!(r"\\?\C:\{}", "a".repeat(300));
        assert_eq!(p(&long), PathBuf::from(&long));
        // Unix paths and plain ones are left alone.
        assert_eq!(p("/home/ana/ComfyUI"), PathBuf::from("/home/ana/ComfyUI"));
        assert_eq!(p(r"C:\ComfyUI"), PathBuf::from(r"C:\ComfyUI"));
    }

    #[test]
    fn canonical_resolves_what_exists() {
        let dir = tempfile::tempdir().unwrap();
        let c = canonical(dir.path());
        assert!(c.is_absolute());
        assert!(!c.to_string_lossy().starts_with(r"\\?\"));
        let missing = dir.path().join("missing");
        assert_eq!(canonical(&missing), missing);
        assert_eq!(canonical_opt(&missing), None);
    }
}
