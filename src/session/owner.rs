//! A session folder is written by one process at a time. The process that makes or resumes a
//! bisect or regress session holds a lock on `DIR/session.lock` until it ends (the operating
//! system lets go of it however the process ends, so a killed one leaves no stale lock) and
//! writes its pid into `DIR/session.owner`. A second process on the same folder (`--resume`
//! while the session still runs) is refused with the owner's pid, before it reads or writes
//! anything: two writers would interleave one journal.

use super::{LOCK, OWNER};
use crate::error::{Error, io_reason};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

/// Why a session could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// Another process holds it (its pid, where it wrote one).
    #[error("the session {} is in use by {}", dir.display(), match pid {
        Some(pid) => format!("process {pid}"),
        None => "another process".to_string(),
    })]
    InUse { dir: PathBuf, pid: Option<u32> },
    /// The lock file could not be made or opened.
    #[error("cannot take the session: {0}")]
    LockFile(#[source] std::io::Error),
    /// The file system does not lock files.
    #[error("cannot lock {}: {}", path.display(), io_reason(source))]
    Lock {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The owner's pid could not be written.
    #[error("cannot write {}: {}", path.display(), io_reason(source))]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<OwnerError> for Error {
    fn from(e: OwnerError) -> Error {
        let message = e.to_string();
        match e {
            OwnerError::InUse { .. } => Error::usage(message).hint(
                "one process writes a session at a time: wait for it to end, or stop it (Ctrl-C), then --resume goes on where it stopped",
            ),
            OwnerError::LockFile(source) => Error {
                io: Some(source.kind()),
                ..Error::usage(message)
            },
            OwnerError::Lock { source, .. } => Error::from_io(message, &source).hint(
                "this file system cannot lock files (some network ones): give a session folder on a local disk",
            ),
            OwnerError::Write { source, .. } => Error::from_io(message, &source),
        }
    }
}

/// The held session; given back when dropped.
#[derive(Debug)]
pub(crate) struct Owner {
    _file: File,
    owner: PathBuf,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // Before the lock goes (with the file): no new owner can have written it yet.
        let _ = std::fs::remove_file(&self.owner);
    }
}

/// Takes the session in `dir` for this process, or says who has it.
pub(crate) fn take(dir: &Path) -> Result<Owner, OwnerError> {
    let path = dir.join(LOCK);
    let file = crate::gpulock::open_lock_file(&path).map_err(OwnerError::LockFile)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Err(in_use(dir)),
        Err(TryLockError::Error(source)) => return Err(OwnerError::Lock { path, source }),
    }
    let owner = dir.join(OWNER);
    // Made new (a link or anything planted under the name is removed, not followed).
    let _ = std::fs::remove_file(&owner);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&owner)
        .and_then(|mut f| {
            use std::io::Write;
            writeln!(f, "{}", std::process::id())
        })
        .map_err(|source| OwnerError::Write {
            path: owner.clone(),
            source,
        })?;
    Ok(Owner { _file: file, owner })
}

/// The refusal for a folder another process holds, naming it.
fn in_use(dir: &Path) -> OwnerError {
    let pid = crate::input_file::read(&dir.join(OWNER), "session owner", 64)
        .ok()
        .and_then(|t| String::from_utf8_lossy(&t).trim().parse::<u32>().ok());
    OwnerError::InUse {
        dir: dir.to_path_buf(),
        pid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_with_the_pid_of_the_first() {
        let tmp = tempfile::tempdir().unwrap();
        let first = take(tmp.path()).unwrap();
        let owner = std::fs::read_to_string(tmp.path().join(OWNER)).unwrap();
        assert_eq!(owner.trim(), std::process::id().to_string());
        // A second open file description conflicts with the first, even in one process.
        let err = take(tmp.path()).unwrap_err();
        assert!(
            matches!(&err, OwnerError::InUse { pid: Some(pid), .. } if *pid == std::process::id()),
            "{err}"
        );
        let shown = Error::from(err);
        assert_eq!(shown.exit_code(), crate::error::exit::USAGE);
        assert!(
            shown
                .message
                .ends_with(&format!("is in use by process {}", std::process::id())),
            "{shown}"
        );
        drop(first);
        assert!(!tmp.path().join(OWNER).exists());
        let again = take(tmp.path()).unwrap();
        drop(again);
    }
}
