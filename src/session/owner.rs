//! A session folder is written by one process at a time. The process that makes or resumes a
//! bisect or regress session holds a lock on `DIR/session.lock` until it ends (the operating
//! system lets go of it however the process ends, so a killed one leaves no stale lock) and
//! writes its pid into `DIR/session.owner`. A second process on the same folder (`--resume`
//! while the session still runs) is refused with the owner's pid, before it reads or writes
//! anything: two writers would interleave one journal.

use super::{LOCK, OWNER};
use crate::error::{Error, Result, io_error};
use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};

/// The held session; given back when dropped.
#[derive(Debug)]
pub struct Owner {
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
pub fn take(dir: &Path) -> Result<Owner> {
    let path = dir.join(LOCK);
    let file = crate::gpulock::open_lock_file(&path).map_err(|e| Error {
        io: Some(e.kind()),
        ..Error::usage(format!("cannot take the session: {e}"))
    })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Err(in_use(dir)),
        Err(TryLockError::Error(e)) => {
            return Err(io_error("lock", &path, &e).hint(
                "this file system cannot lock files (some network ones): give a session folder on a local disk",
            ));
        }
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
        .map_err(|e| io_error("write", &owner, &e))?;
    Ok(Owner { _file: file, owner })
}

/// The refusal for a folder another process holds, naming it.
fn in_use(dir: &Path) -> Error {
    let pid = crate::input_file::read(&dir.join(OWNER), "session owner", 64)
        .ok()
        .and_then(|t| String::from_utf8_lossy(&t).trim().parse::<u32>().ok());
    let who = match pid {
        Some(pid) => format!("process {pid}"),
        None => "another process".to_string(),
    };
    Error::usage(format!(
        "the session {} is in use by {who}",
        dir.display()
    ))
    .hint("one process writes a session at a time: wait for it to end, or stop it (Ctrl-C), then --resume goes on where it stopped")
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
        assert_eq!(err.exit_code(), crate::error::exit::USAGE);
        assert!(
            err.message
                .ends_with(&format!("is in use by process {}", std::process::id())),
            "{err}"
        );
        drop(first);
        assert!(!tmp.path().join(OWNER).exists());
        let again = take(tmp.path()).unwrap();
        drop(again);
    }
}
