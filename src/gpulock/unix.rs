//! The lock folder and lock files on Unix: a shared sticky folder under `/tmp`, files opened
//! read-only without following links, the holder read from `/proc/locks`.

use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::LockDir;

/// The lock folder is shared between users (with this user's own as the fallback).
pub(super) const SHARED: bool = true;

/// The folder for the locks (see the module's documentation).
pub(crate) fn lock_dir() -> std::io::Result<LockDir> {
    if let Some(dir) = std::env::var_os("VRAMBISECT_LOCK_DIR") {
        let path = PathBuf::from(dir);
        std::fs::create_dir_all(&path)?;
        trusted(&path).map_err(std::io::Error::other)?;
        return Ok(LockDir { path, note: None });
    }
    match shared_dir(&shared_path()) {
        Ok(()) => Ok(LockDir {
            path: shared_path(),
            note: None,
        }),
        Err(why) => Ok(LockDir {
            path: private_dir()?,
            note: Some(format!(
                "{why}: sessions of other users on this machine are not seen"
            )),
        }),
    }
}

/// The shared folder: under `/tmp` itself, not a per-user `$TMPDIR` (which would share with
/// nobody).
fn shared_path() -> PathBuf {
    let tmp = Path::new("/tmp");
    if tmp.is_dir() {
        tmp.join("vrambisect-locks")
    } else {
        std::env::temp_dir().join("vrambisect-locks")
    }
}

/// Makes (or checks) the shared folder: a real folder, sticky and world-writable, whoever
/// made it (its owner can only break the turn-taking, which using the GPU anyway does too:
/// lock files are never written and never followed).
pub(super) fn shared_dir(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o777).create(dir) {
        Ok(()) => {
            // The umask took bits away; the folder is ours to set.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
                .map_err(|e| format!("cannot set up {}: {e}", dir.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(format!("{} is not a folder", dir.display()));
    }
    if meta.mode() & 0o1777 != 0o1777 && meta.uid() == uid() {
        // Ours, made by another session of ours between its mkdir and its chmod.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
            .map_err(|e| format!("cannot set up {}: {e}", dir.display()))?;
        return Ok(());
    }
    if meta.mode() & 0o1777 != 0o1777 {
        return Err(format!(
            "{} is not a shared folder vrambisect can trust (owner uid {}, mode {:o})",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// This user's own lock folder, made `0700`; refused when it belongs to someone else.
pub(super) fn private_dir() -> std::io::Result<PathBuf> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(run) => PathBuf::from(run).join("vrambisect"),
        None => std::env::temp_dir().join(format!("vrambisect-{}", uid())),
    };
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    trusted(&dir).map_err(std::io::Error::other)?;
    Ok(dir)
}

/// A folder this user may keep locks in: a real folder (not a link), owned by this user and
/// writable by nobody else (or a shared sticky one owned by root).
pub(super) fn trusted(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.file_type().is_dir() {
        return Err(format!(
            "the lock folder {} is not a folder (a link?): remove it",
            dir.display()
        ));
    }
    let sticky_root = meta.uid() == 0 && meta.mode() & 0o1000 != 0;
    if meta.uid() != uid() && !sticky_root {
        return Err(format!(
            "the lock folder {} belongs to another user (uid {}): remove it or set VRAMBISECT_LOCK_DIR",
            dir.display(),
            meta.uid()
        ));
    }
    if !sticky_root && meta.mode() & 0o022 != 0 {
        return Err(format!(
            "the lock folder {} is writable by other users (mode {:o}): chmod go-w it or set VRAMBISECT_LOCK_DIR",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

pub(super) fn uid() -> u32 {
    unsafe { libc::getuid() }
}

/// Never follow a link; never wait on a FIFO planted under the name (it is refused after).
const NO_SURPRISES: i32 = libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;

/// Opens a lock file read-only without following links, creating it (readable by every
/// user) when it is missing. Never writes to it.
pub(super) fn open_lock(path: &Path) -> std::io::Result<File> {
    let read_only = |create: bool| {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).custom_flags(NO_SURPRISES);
        if create {
            // O_CREAT with read-only access; O_EXCL so an existing file (another user's, in
            // a sticky folder) is opened plainly instead.
            o.custom_flags(NO_SURPRISES | libc::O_CREAT | libc::O_EXCL)
                .mode(0o444);
        }
        o.open(path)
    };
    let file = match read_only(false) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match read_only(true) {
            Ok(f) => {
                // Readable by every user, whatever the umask left.
                let _ = f.set_permissions(std::fs::Permissions::from_mode(0o444));
                f
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_only(false)?,
            Err(e) => return Err(e),
        },
        other => other?,
    }
    .into_checked(path)?;
    Ok(file)
}

trait Checked: Sized {
    fn into_checked(self, path: &Path) -> std::io::Result<Self>;
}

impl Checked for File {
    /// Refuses anything but a regular file (a FIFO or a device planted under the name).
    fn into_checked(self, path: &Path) -> std::io::Result<File> {
        if self.metadata()?.file_type().is_file() {
            Ok(self)
        } else {
            Err(std::io::Error::other(format!(
                "{} is not a regular file: remove it",
                path.display()
            )))
        }
    }
}

/// A clear error for a lock file that could not be opened.
pub(super) fn open_error(path: &Path, e: std::io::Error) -> std::io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return std::io::Error::other(format!(
            "the lock file {} is a symbolic link, which vrambisect never follows: remove it",
            path.display()
        ));
    }
    std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Who holds the `flock` on `file`, from `/proc/locks`: `vrambisect pid 123 (user 1000)`.
/// Other Unixes have no `/proc/locks`: there it is "another vrambisect".
#[cfg(not(target_os = "linux"))]
pub(super) fn holder(_file: &File) -> String {
    "another vrambisect".into()
}

/// Who holds the `flock` on `file`, from `/proc/locks`: `vrambisect pid 123 (user 1000)`.
#[cfg(target_os = "linux")]
pub(super) fn holder(file: &File) -> String {
    let Ok(meta) = file.metadata() else {
        return "another vrambisect".into();
    };
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let pid = std::fs::read_to_string("/proc/locks").ok().and_then(|t| {
        t.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // `1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF`
            (f.len() >= 6 && f[1] == "FLOCK" && f[5] == id).then(|| f[4].to_string())
        })
    });
    match pid {
        Some(pid) => {
            let owner = std::fs::metadata(format!("/proc/{pid}"))
                .map(|m| m.uid())
                .ok();
            match owner {
                Some(u) if u != uid() => format!("vrambisect pid {pid} (another user, uid {u})"),
                _ => format!("vrambisect pid {pid}"),
            }
        }
        None => "another vrambisect".into(),
    }
}
