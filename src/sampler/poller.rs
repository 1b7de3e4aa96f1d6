//! A helper thread for readings that are slow to take (NVML's PCIe counters wait 20 ms per
//! call; ComfyUI's HTTP server may be busy for seconds). The sampler thread only picks up the
//! latest result, so a slow source never delays the others.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

struct Shared<T> {
    latest: Mutex<Option<T>>,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// Runs a closure every `period` on its own thread and keeps its latest result.
pub(crate) struct Poller<T> {
    shared: Arc<Shared<T>>,
    handle: Option<JoinHandle<()>>,
    join_on_drop: bool,
}

impl<T: Send + 'static> Poller<T> {
    /// Starts polling at once. `poll` returns `None` when it has nothing to report (e.g. no
    /// URL yet). With `join_on_drop` false, dropping the poller does not wait for a poll in
    /// flight (an HTTP request with a timeout): the thread ends on its own once it returns.
    pub(crate) fn spawn(
        name: &str,
        period: Duration,
        join_on_drop: bool,
        mut poll: impl FnMut() -> Option<T> + Send + 'static,
    ) -> std::io::Result<Poller<T>> {
        let shared = Arc::new(Shared {
            latest: Mutex::new(None),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let theirs = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let mut next = Instant::now();
                loop {
                    if *theirs.stop.lock().unwrap_or_else(|e| e.into_inner()) {
                        return;
                    }
                    if let Some(v) = poll() {
                        *theirs.latest.lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
                    }
                    next += period;
                    let now = Instant::now();
                    if next < now {
                        next = now;
                    }
                    let stop = theirs.stop.lock().unwrap_or_else(|e| e.into_inner());
                    let (stop, _) = theirs
                        .wake
                        .wait_timeout_while(stop, next - now, |s| !*s)
                        .unwrap_or_else(|e| e.into_inner());
                    if *stop {
                        return;
                    }
                }
            })?;
        Ok(Poller {
            shared,
            handle: Some(handle),
            join_on_drop,
        })
    }

    /// The result of the latest poll not taken yet.
    pub(crate) fn take(&self) -> Option<T> {
        self.shared
            .latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl<T> Drop for Poller<T> {
    fn drop(&mut self) {
        *self.shared.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.handle.take()
            && self.join_on_drop
        {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_and_stops_promptly() {
        let mut n = 0;
        let p = Poller::spawn("test-poller", Duration::from_millis(1), true, move || {
            n += 1;
            Some(n)
        })
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen = 0;
        while seen < 3 && Instant::now() < deadline {
            if let Some(v) = p.take() {
                assert!(v > seen, "values only grow");
                seen = v;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(seen >= 3);
        let t = Instant::now();
        drop(p);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_long_period_does_not_delay_drop() {
        let p = Poller::spawn("test-poller", Duration::from_secs(3600), true, || Some(1)).unwrap();
        let t = Instant::now();
        drop(p);
        assert!(t.elapsed() < Duration::from_secs(1));
    }
}
