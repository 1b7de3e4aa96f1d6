//! Time during which vrambisect itself did not run: stopped (SIGSTOP, Ctrl-Z) or a machine
//! that slept. A thread of its own wakes every tenth of a second; a much longer gap between
//! two of its wakes means the whole process was held, wherever the watch loop was then
//! (waiting for a line, or in a request to ComfyUI, which a hung ComfyUI may itself make slow:
//! that time must still count as ComfyUI's silence, and here it does not look like a pause).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the thread wakes.
const BEAT: Duration = Duration::from_millis(100);

/// Counts the time the process was held, while it lives.
pub(crate) struct PauseWatch {
    /// Milliseconds held, in all.
    held_ms: Arc<AtomicU64>,
    /// When the thread last woke, in milliseconds since `started`: right after a stop the
    /// reader may run before the thread has woken to count it.
    beat_ms: Arc<AtomicU64>,
    started: Instant,
    longer_than: Duration,
    done: Arc<AtomicBool>,
    /// What [`PauseWatch::take`] has reported so far.
    taken_ms: u64,
    thread: Option<JoinHandle<()>>,
}

impl PauseWatch {
    /// Starts counting; a gap between two wakes longer than `longer_than` is a pause.
    pub(crate) fn start(longer_than: Duration) -> PauseWatch {
        let held_ms = Arc::new(AtomicU64::new(0));
        let beat_ms = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let thread = {
            let (held_ms, beat_ms, done) = (held_ms.clone(), beat_ms.clone(), done.clone());
            std::thread::Builder::new()
                .name("pause-watch".into())
                .spawn(move || {
                    let mut last = Instant::now();
                    while !done.load(Ordering::Relaxed) {
                        std::thread::park_timeout(BEAT);
                        let gap = last.elapsed();
                        if gap > longer_than {
                            let held = gap.saturating_sub(BEAT).as_millis() as u64;
                            held_ms.fetch_add(held, Ordering::Relaxed);
                        }
                        last = Instant::now();
                        beat_ms.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    }
                })
                .ok()
        };
        PauseWatch {
            held_ms,
            beat_ms,
            started,
            longer_than,
            done,
            taken_ms: 0,
            thread,
        }
    }

    /// The time the process was held since the last call: what the thread counted, or, when
    /// it has not woken for longer than a pause, the time since it last did.
    pub(crate) fn take(&mut self) -> Duration {
        // Without its thread (it could not start) it sees nothing, and says nothing.
        if self.thread.is_none() {
            return Duration::ZERO;
        }
        let now = self.held_ms.load(Ordering::Relaxed);
        let new = Duration::from_millis(now.saturating_sub(self.taken_ms));
        self.taken_ms = now;
        let since_beat = self
            .started
            .elapsed()
            .saturating_sub(Duration::from_millis(self.beat_ms.load(Ordering::Relaxed)));
        match since_beat > self.longer_than + BEAT {
            true => new.max(since_beat),
            false => new,
        }
    }
}

impl Drop for PauseWatch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_process_is_counted_and_a_running_one_is_not() {
        let mut watch = PauseWatch::start(Duration::from_millis(500));
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(watch.take(), Duration::ZERO);
        // Stop this process for a second from outside, as a user's Ctrl-Z would.
        let me = std::process::id().to_string();
        let status = std::process::Command::new("sh")
            .args(["-c", "kill -STOP $0; sleep 1; kill -CONT $0", &me])
            .status()
            .unwrap();
        assert!(status.success());
        std::thread::sleep(Duration::from_millis(300));
        let held = watch.take();
        assert!(held >= Duration::from_millis(700), "{held:?}");
        assert_eq!(watch.take(), Duration::ZERO, "reported once");
    }
}
