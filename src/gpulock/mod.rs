//! Taking turns on the GPU: two vrambisect sessions on one machine, of one user or of two,
//! run one at a time on a GPU, so neither measures (or runs out of) memory the other holds.
//!
//! * **One lock per GPU**, named by NVML's UUID. A run takes the locks of every GPU NVML
//!   sees (sorted, so two sessions never wait for each other crosswise): which card a ComfyUI
//!   run lands on depends on CUDA's device order, `CUDA_VISIBLE_DEVICES` and its flags, which
//!   NVML does not tell. With no GPU (no NVIDIA driver, or none listed) there is nothing to
//!   share and no lock is taken.
//! * **Shared between users.** The locks live in `/tmp/vrambisect-locks`, a folder made
//!   like `/tmp` itself (world-writable with the sticky bit, so nobody can remove or replace
//!   another user's file), whichever user made it first. Lock files are opened read-only and without following links, and
//!   nothing is ever written to them: `flock` needs no write access, so a link planted there
//!   cannot be turned into a write anywhere. Who holds a lock is read from `/proc/locks`.
//! * When that folder cannot be trusted (a link, not a folder, not sticky), or something
//!   unusable was planted under a lock's name there, the locks go to a folder of this user's own (`$XDG_RUNTIME_DIR/vrambisect`, else
//!   `<temp>/vrambisect-<uid>`, made `0700` and checked for its owner and mode), and the user is told
//!   that other users' sessions are not seen. `$VRAMBISECT_LOCK_DIR` names the folder instead.
//! * When NVML is there but fails (a driver mismatch, no permission), the GPUs are unknown:
//!   one lock for the whole machine, and the user is told why.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as sys;
#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as sys;

pub(crate) use sys::lock_dir;
use sys::{holder, open_error, open_lock, private_dir};

/// Opens (or makes) a lock file as the GPU locks are: never through a link, never a FIFO or
/// a device planted under its name.
pub(crate) fn open_lock_file(path: &Path) -> std::io::Result<File> {
    open_lock(path).map_err(|e| open_error(path, e))
}

/// The held GPU locks; released when dropped.
pub(crate) struct GpuLock {
    _files: Vec<File>,
    /// How long it took to get them.
    pub waited: Duration,
}

/// Where the locks are, and what to tell the user about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockDir {
    pub path: PathBuf,
    /// Why the shared folder was not used, when it was not.
    pub note: Option<String>,
}

/// The lock file of a GPU (its UUID, or its index when NVML gives no UUID).
fn lock_name(key: &str) -> String {
    format!("gpu-{}.lock", crate::text::file_safe(key, '-'))
}

/// The GPUs NVML sees, as lock keys (UUIDs, or indexes where a UUID is missing). No NVIDIA
/// library: no GPU to share, no key. A library that is there but fails (a driver mismatch,
/// no permission): the GPUs are unknown, so one key for the whole machine, and why.
pub(crate) fn gpu_keys(nvml_lib: Option<&Path>) -> (Vec<String>, Option<String>) {
    let lib = crate::nvidia::nvml_lib(nvml_lib);
    let gpus = match crate::nvidia::gpu_ids(lib.as_deref()) {
        Ok(gpus) => gpus,
        Err(e) if e.no_nvidia_here() => return (Vec::new(), None),
        Err(e) => {
            return (
                vec!["all".into()],
                Some(format!(
                    "{e}: the GPUs are unknown, so one lock is taken for the whole machine"
                )),
            );
        }
    };
    let mut keys: Vec<String> = gpus
        .into_iter()
        .map(|(index, uuid)| uuid.unwrap_or_else(|| format!("index{index}")))
        .collect();
    keys.sort();
    keys.dedup();
    (keys, None)
}

/// Takes the locks of the GPUs `keys` in `dir` (an empty list takes none). When another
/// session holds one, `waiting` is told who, once, then this waits; `stop` is polled so
/// Ctrl-C still works while waiting (then `None`).
pub(crate) fn acquire_in(
    dir: &Path,
    keys: &[String],
    waiting: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
) -> std::io::Result<Option<GpuLock>> {
    let started = Instant::now();
    let mut files = Vec::new();
    // Time spent opening the files is not waiting for another session.
    let mut waited = false;
    for key in keys {
        let path = dir.join(lock_name(key));
        let file = open_lock(&path).map_err(|e| open_error(&path, e))?;
        let mut told = false;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                // Only "another holds it" is a reason to wait (a file system without locks,
                // as some network ones, says something else).
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("cannot lock {}: {e}", path.display()),
                    ));
                }
            }
            if !told {
                waiting(&holder(&file));
                told = true;
                waited = true;
            }
            if stop() {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        files.push(file);
    }
    Ok(Some(GpuLock {
        _files: files,
        waited: if waited {
            started.elapsed()
        } else {
            Duration::ZERO
        },
    }))
}

/// Takes the locks of every GPU NVML sees, in the lock folder (see [`acquire_in`]); `note`
/// is told when the locks are private to this user.
pub(crate) fn acquire(
    nvml_lib: Option<&Path>,
    note: &mut dyn FnMut(&str),
    waiting: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
) -> std::io::Result<Option<GpuLock>> {
    let (keys, why) = gpu_keys(nvml_lib);
    if let Some(why) = &why {
        note(why);
    }
    if keys.is_empty() {
        return Ok(Some(GpuLock {
            _files: Vec::new(),
            waited: Duration::ZERO,
        }));
    }
    let dir = lock_dir()?;
    if let Some(why) = &dir.note {
        note(why);
    }
    match acquire_in(&dir.path, &keys, waiting, stop) {
        // Something planted in the shared folder (a link, a FIFO, a file nobody may read)
        // is not ours to remove there: use this user's own folder instead, and say so.
        Err(e)
            if sys::SHARED
                && dir.note.is_none()
                && std::env::var_os("VRAMBISECT_LOCK_DIR").is_none() =>
        {
            note(&format!(
                "{e}; sessions of other users on this machine are not seen"
            ));
            acquire_in(&private_dir()?, &keys, waiting, stop)
        }
        other => other,
    }
}

// Released by closing the files (the locks belong to the open file).

#[cfg(all(test, unix))]
mod tests {
    use super::sys::{shared_dir, trusted, uid};
    use super::*;

    #[test]
    fn a_broken_nvidia_library_locks_the_whole_machine_and_says_why() {
        // A library named and not loadable: the driver is there and fails, the GPUs unknown.
        let (keys, why) = gpu_keys(Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
        assert_eq!(keys, ["all"]);
        assert!(why.is_some_and(|w| w.starts_with("cannot load /nonexistent/libnvidia-ml.so.1")),);
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn one_session_after_another_on_a_gpu() {
        let dir = tempfile::tempdir().unwrap();
        let k = keys(&["GPU-aaaa"]);
        let first = acquire_in(dir.path(), &k, &mut |_| {}, &|| false)
            .unwrap()
            .unwrap();
        // A second one waits, and hears who holds it.
        let mut heard = String::new();
        let second = acquire_in(dir.path(), &k, &mut |w| heard = w.into(), &|| true).unwrap();
        assert!(second.is_none(), "it waited (and was stopped)");
        assert_eq!(heard, format!("vrambisect pid {}", std::process::id()));
        // Another GPU is free.
        assert!(
            acquire_in(dir.path(), &keys(&["GPU-bbbb"]), &mut |_| {}, &|| true)
                .unwrap()
                .is_some()
        );
        drop(first);
        // Free again. (Briefly, a process another test forks at that moment may still hold a
        // copy of the descriptor until its exec closes it: allow a second.)
        let until = std::time::Instant::now() + Duration::from_secs(1);
        assert!(
            acquire_in(dir.path(), &k, &mut |_| {}, &|| std::time::Instant::now()
                > until)
            .unwrap()
            .is_some()
        );
        // Nothing was written into the lock file, and every user can read it.
        let meta = std::fs::metadata(dir.path().join(lock_name("GPU-aaaa"))).unwrap();
        assert_eq!(meta.len(), 0);
        assert_eq!(meta.mode() & 0o777, 0o444);
    }

    #[test]
    fn no_gpu_no_lock() {
        let dir = tempfile::tempdir().unwrap();
        let a = acquire_in(dir.path(), &[], &mut |_| {}, &|| false).unwrap();
        let b = acquire_in(dir.path(), &[], &mut |_| panic!("no wait"), &|| false).unwrap();
        assert!(a.is_some() && b.is_some());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_planted_symlink_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious.txt");
        std::fs::write(&target, "keep me").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(lock_name("GPU-aaaa"))).unwrap();
        let err = match acquire_in(dir.path(), &keys(&["GPU-aaaa"]), &mut |_| {}, &|| true) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a link was followed"),
        };
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep me");
    }

    #[test]
    fn a_fifo_under_the_lock_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(lock_name("GPU-aaaa"));
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = acquire_in(dir.path(), &keys(&["GPU-aaaa"]), &mut |_| {}, &|| true)
            .err()
            .expect("refused");
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn the_shared_folder_is_made_sticky_and_a_sticky_one_of_anyone_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("locks");
        shared_dir(&shared).unwrap();
        let mode = std::fs::metadata(&shared).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o1777);
        // Ours but not sticky (another session of ours between mkdir and chmod): mended.
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        shared_dir(&shared).unwrap();
        assert_eq!(std::fs::metadata(&shared).unwrap().mode() & 0o7777, 0o1777);
        if uid() == 0 {
            // Another user made it, as the first user on a machine does: still shared.
            let c = std::ffi::CString::new(shared.to_str().unwrap()).unwrap();
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
            std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
            assert!(shared_dir(&shared).is_ok());
            // Not sticky and not ours: not used.
            std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
            assert!(shared_dir(&shared).is_err());
        }
        // A link where the folder should be: not used.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&shared, &link).unwrap();
        assert!(shared_dir(&link).unwrap_err().contains("not a folder"));
    }

    #[test]
    fn a_private_folder_others_may_write_to_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            trusted(dir.path())
                .unwrap_err()
                .contains("writable by other users")
        );
    }

    #[test]
    fn lock_names_are_plain() {
        assert_eq!(lock_name("GPU-3f2c9a4e-0000"), "gpu-GPU-3f2c9a4e-0000.lock");
        assert_eq!(lock_name("../../etc/x"), "gpu-______etc_x.lock");
    }

    #[test]
    fn a_folder_of_another_user_or_a_link_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        assert!(trusted(dir.path()).is_ok());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(trusted(&link).unwrap_err().contains("not a folder"));
        if uid() == 0 {
            let theirs = dir.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            let c = std::ffi::CString::new(theirs.to_str().unwrap()).unwrap();
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
            assert!(trusted(&theirs).unwrap_err().contains("another user"));
        }
    }
}
