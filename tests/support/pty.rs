//! Running the vrambisect binary in a pseudo-terminal, as a person at a terminal would: its
//! stdin, stdout and stderr are the terminal, it leads its own session with the terminal as
//! the controlling one, so a Ctrl-C typed there reaches it as SIGINT.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process on the slave side of a pseudo-terminal, and the master side.
pub struct Pty {
    master: std::fs::File,
    pub child: Child,
    pub screen: Vec<u8>,
}

impl Pty {
    /// Starts `cmd` on a new terminal of `cols` × `rows` (0 × 0: a terminal nobody sized).
    pub fn spawn(mut cmd: Command, cols: u16, rows: u16) -> Pty {
        let (mut master, mut slave) = (-1, -1);
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        let master = unsafe { OwnedFd::from_raw_fd(master) };
        let slave = unsafe { OwnedFd::from_raw_fd(slave) };
        let stdio = |fd: &OwnedFd| Stdio::from(fd.try_clone().unwrap());
        cmd.stdin(stdio(&slave))
            .stdout(stdio(&slave))
            .stderr(stdio(&slave));
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start vrambisect in a terminal");
        drop(slave);
        let flags = unsafe { libc::fcntl(master.as_raw_fd(), libc::F_GETFL) };
        unsafe { libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
        Pty {
            master: std::fs::File::from(master),
            child,
            screen: Vec::new(),
        }
    }

    /// Reads what the program has written so far (without blocking).
    pub fn pump(&mut self) {
        let mut buf = [0u8; 65536];
        loop {
            match self.master.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => self.screen.extend_from_slice(&buf[..n]),
                // WouldBlock: nothing more now; EIO: the last writer closed the terminal.
                Err(_) => return,
            }
        }
    }

    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen).into_owned()
    }

    /// Waits until the screen shows `needle`; panics with the screen after `within`.
    pub fn wait_for(&mut self, needle: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            self.pump();
            if self.text().contains(needle) {
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "the terminal never showed {needle:?}; it shows:\n{}",
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `bytes` at the terminal (`b"\x03"` is Ctrl-C).
    pub fn type_keys(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.master.write_all(bytes).unwrap();
    }

    /// Waits for the program to exit (killing it after `within`) and returns its exit code.
    pub fn exit_code(&mut self, within: Duration) -> i32 {
        let deadline = Instant::now() + within;
        loop {
            self.pump();
            if let Some(status) = self.child.try_wait().unwrap() {
                self.pump();
                return status.code().unwrap_or(-1);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "still running after {within:?} in a terminal; it shows:\n{}",
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
