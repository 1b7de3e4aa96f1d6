//! Ctrl-C and SIGTERM: counted, never fatal by themselves, so a run can end cleanly.
//!
//! The first SIGINT or SIGTERM asks the current run to stop and keep what it recorded; a
//! second SIGINT asks for the ComfyUI group to be killed at once (nextest does the same).

use std::sync::atomic::{AtomicUsize, Ordering};

static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);
static TERMINATE: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGTERM {
        TERMINATE.fetch_add(1, Ordering::SeqCst);
    } else {
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Installs the handlers (idempotent).
pub fn install() {
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// How urgently the user wants to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    /// Keep going.
    No,
    /// End cleanly, keeping everything recorded (first Ctrl-C, or SIGTERM).
    Graceful,
    /// Kill ComfyUI now (second Ctrl-C).
    Now,
}

/// What the signals received so far ask for.
pub fn requested() -> Stop {
    let ints = INTERRUPTS.load(Ordering::SeqCst);
    if ints >= 2 {
        Stop::Now
    } else if ints == 1 || TERMINATE.load(Ordering::SeqCst) > 0 {
        Stop::Graceful
    } else {
        Stop::No
    }
}

/// Whether every grace period must end now (a second Ctrl-C).
pub fn kill_now() -> bool {
    requested() == Stop::Now
}
