//! One run at a time per machine: two vrambisect sessions take turns, so neither measures
//! (or runs out of) memory the other is using. One lock for all GPUs: `--cuda-device 0`,
//! `CUDA_VISIBLE_DEVICES=0` and no selection at all can all mean the same card, and telling
//! them apart reliably would need CUDA's device order, which NVML does not share.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Where the locks live: `$VRAMBISECT_LOCK_DIR`, else the runtime dir, else the temp dir.
pub fn lock_dir() -> PathBuf {
    std::env::var_os("VRAMBISECT_LOCK_DIR")
        .or_else(|| std::env::var_os("XDG_RUNTIME_DIR"))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

/// A held GPU lock; released when dropped.
pub struct GpuLock {
    file: File,
    /// How long it took to get it.
    pub waited: Duration,
}

/// Takes the machine's GPU lock. When another session holds it, `waiting` is called once with
/// who holds it, then this waits; `stop` is polled so Ctrl-C still works while waiting.
pub fn acquire(
    waiting: &mut dyn FnMut(&str),
    stop: &dyn Fn() -> bool,
) -> std::io::Result<Option<GpuLock>> {
    let dir = lock_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("vrambisect-gpu.lock");
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
