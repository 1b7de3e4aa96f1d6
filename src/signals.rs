//! Ctrl-C and SIGTERM (on Windows: Ctrl-C, Ctrl-Break and closing the console): counted,
//! never fatal by themselves, so a run can end cleanly.
//!
//! The first SIGINT or SIGTERM asks the current run to stop and keep what it recorded; a
//! second SIGINT asks for the ComfyUI group to be killed at once (nextest does the same).

use std::sync::atomic::{AtomicUsize, Ordering};

static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);
static TERMINATE: AtomicUsize = AtomicUsize::new(0);

#[cfg(unix)]
extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGTERM {
        TERMINATE.fetch_add(1, Ordering::SeqCst);
    } else {
        INTERRUPTS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Installs the handlers (idempotent).
#[cfg(unix)]
pub(crate) fn install() {
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as *const () as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGINT, &action, std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut());
    }
}

/// Windows: Ctrl-C and Ctrl-Break count as Ctrl-C; closing the console window, logging off
/// and shutting down as SIGTERM. Windows ends the process a few seconds after a close event
/// whatever the handler does, so the handler holds it up to 4 s for the run to end cleanly
/// (ComfyUI's job is ended with this process in any case).
#[cfg(windows)]
unsafe extern "system" fn on_console(kind: u32) -> windows_sys::core::BOOL {
    use windows_sys::Win32::System::Console::{CTRL_BREAK_EVENT, CTRL_C_EVENT};
    match kind {
        CTRL_C_EVENT | CTRL_BREAK_EVENT => {
            INTERRUPTS.fetch_add(1, Ordering::SeqCst);
        }
        _ => {
            TERMINATE.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_secs(4));
        }
    }
    1
}

/// Installs the handler (idempotent).
#[cfg(windows)]
pub(crate) fn install() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| unsafe {
        windows_sys::Win32::System::Console::SetConsoleCtrlHandler(Some(on_console), 1);
    });
}

/// How urgently the user wants to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Stop {
    /// Keep going.
    No,
    /// End cleanly, keeping everything recorded (first Ctrl-C, or SIGTERM).
    Graceful,
    /// Kill ComfyUI now (second Ctrl-C).
    Now,
}

/// What the signals received so far ask for.
pub(crate) fn requested() -> Stop {
    let ints = INTERRUPTS.load(Ordering::SeqCst);
    if ints >= 2 {
        Stop::Now
    } else if ints == 1 || TERMINATE.load(Ordering::SeqCst) > 0 {
        Stop::Graceful
    } else {
        Stop::No
    }
}

/// What asked to stop, in words: `Ctrl-C`, or the polite request of another program or of
/// Windows (SIGTERM; closing the console, logging off).
pub(crate) fn cause() -> &'static str {
    if INTERRUPTS.load(Ordering::SeqCst) > 0 {
        "Ctrl-C"
    } else if cfg!(windows) {
        "the console closing"
    } else {
        "SIGTERM"
    }
}

/// Whether every grace period must end now (a second Ctrl-C).
pub(crate) fn kill_now() -> bool {
    requested() == Stop::Now
}
