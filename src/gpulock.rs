//! One run at a time per GPU: two vrambisect sessions on one machine take turns, so neither
//! measures (or runs out of) memory the other is using.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the locks live: `$VRAMBISECT_LOCK_DIR`, else the runtime dir, else the temp dir.
pub fn lock_dir() -> PathBuf {
    std::env::var_os("VRAMBISECT_LOCK_DIR")
        .or_else(|| std::env::var_os("XDG_RUNTIME_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// Which GPUs a run uses, as a lock name: the `--cuda-device` value or `CUDA_VISIBLE_DEVICES`,
/// else `default`.
pub fn key(flags: &[String], env: &[(String, String)]) -> String {
    let from_flag = flags
        .iter()
        .position(|f| f == "--cuda-device")
        .and_then(|i| flags.get(i + 1).cloned())
        .or_else(|| {
            flags
                .iter()
                .find_map(|f| f.strip_prefix("--cuda-device=").map(str::to_string))
        });
    let from_env = || {
        env.iter()
            .find(|(k, _)| k == "CUDA_VISIBLE_DEVICES")
            .map(|(_, v)| v.clone())
            .or_else(|| std::env::var("CUDA_VISIBLE_DEVICES").ok())
    };
    let raw = from_flag
        .or_else(from_env)
        .unwrap_or_else(|| "default".into());
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A held GPU lock; released when dropped.
pub struct GpuLock {
    file: File,
    /// How long it took to get it.
    pub waited: Duration,
}

/// Who holds a lock, as written in the lock file.
pub fn holder(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Takes the lock for `key`. When another session holds it, `waiting` is called once with
/// who holds it, then this waits; `stop` is polled so Ctrl-C still works while waiting.
pub fn acquire(
    key: &str,
    waiting: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
) -> std::io::Result<Option<GpuLock>> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("vrambisect-gpu-{key}.lock"));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)?;
    let started = Instant::now();
    let mut told = false;
    loop {
        let got = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if got {
            file.set_len(0)?;
            file.rewind()?;
            write!(file, "vrambisect pid {}", std::process::id())?;
            file.flush()?;
            return Ok(Some(GpuLock {
                file,
                waited: started.elapsed(),
            }));
        }
        if !told {
            let mut who = String::new();
            let _ = file.rewind().and_then(|_| file.read_to_string(&mut who));
            let who = if who.trim().is_empty() {
                "another vrambisect".to_string()
            } else {
                who.trim().to_string()
            };
            waiting(&who);
            told = true;
        }
        if stop() {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Drop for GpuLock {
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(key(&s(&["--cuda-device", "1"]), &[]), "1");
        assert_eq!(key(&s(&["--cuda-device=0,1"]), &[]), "0_1");
        assert_eq!(
            key(&[], &[("CUDA_VISIBLE_DEVICES".into(), "2".into())]),
            "2"
        );
    }
}
