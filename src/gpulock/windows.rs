//! The lock folder and lock files on Windows: a folder of this user's own
//! (`%LOCALAPPDATA%\vrambisect\locks`), files locked with `LockFileEx` (what
//! `File::try_lock` does there). Sessions of other Windows users on the same machine are not
//! seen: a shared folder with the Unix side's guarantees would need its own access lists.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::LockDir;

/// The lock folder is this user's own already: there is nothing to fall back to.
pub(super) const SHARED: bool = false;

/// The folder for the locks: `$VRAMBISECT_LOCK_DIR`, else this user's own.
pub(crate) fn lock_dir() -> std::io::Result<LockDir> {
    let path = match std::env::var_os("VRAMBISECT_LOCK_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => private_dir()?,
    };
    std::fs::create_dir_all(&path)?;
    Ok(LockDir { path, note: None })
}

/// `%LOCALAPPDATA%\vrambisect\locks` (or the temporary folder's `vrambisect-locks`).
pub(super) fn private_dir() -> std::io::Result<PathBuf> {
    let base = std::env::var_os("LOCALAPPDATA")
        .map(|d| PathBuf::from(d).join("vrambisect"))
        .unwrap_or_else(|| std::env::temp_dir().join("vrambisect"));
    let dir = base.join("locks");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Opens (or creates) a lock file; nothing is ever written to it. Windows cannot create a
/// file opened for reading only, hence the write access.
pub(super) fn open_lock(path: &Path) -> std::io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file: remove it",
            path.display()
        )));
    }
    Ok(file)
}

pub(super) fn open_error(path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Windows does not tell who holds a `LockFileEx` lock.
pub(super) fn holder(_file: &File) -> String {
    "another vrambisect".into()
}
